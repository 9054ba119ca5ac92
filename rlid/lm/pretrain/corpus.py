"""The pretraining corpus: transcripts of play on training games, as weighted token sequences."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from rlid import envs as envs_pkg
from rlid.envs.outcome import best_rows
from rlid.lm.pretrain.config import PretrainConfig, parse_env_entry
from rlid.menus import Interface, compile_menu, make_memory
from rlid.menus.prompt import (
    command_completion,
    label_set_for,
    render_decision_prompt,
    render_decision_target,
    render_token_prompt,
)
from rlid.menus.tokens import encode


@dataclass(frozen=True)
class Transcript:
    """One training sequence: ``prompt + answer``; ``guided``: the answer is the
    walkthrough's choice, or (``play="afterstate"``) one of the rows a menu with marks
    marks best (else a uniformly random one)."""

    prompt: str
    answer: str
    guided: bool
    env: str = ""
    """The ``--envs`` entry whose game it comes from."""
    label: str = ""
    """The chosen row's label (a decision transcript; "" for a token-plane one)."""


def random_play_transcripts(
    config: PretrainConfig, tokenizer: Any, interface: Interface | None = None
) -> list[str]:
    """Texts (decision and token-plane transcripts) from uniformly random play, followed
    by walkthrough play when ``config.walkthrough_episodes`` > 0."""
    return [t.prompt + t.answer for t in transcripts(config, tokenizer, interface)]


def transcripts(
    config: PretrainConfig,
    tokenizer: Any,
    interface: Interface | None = None,
    *,
    progress: bool = False,
) -> list[Transcript]:
    """The corpus of :func:`random_play_transcripts`, each sequence split at its answer
    (``progress``: a bar per env and kind of play)."""

    interface = interface or Interface(labels=config.labels, memory=config.memory)  # type: ignore[arg-type]
    writer = _Writer(
        interface, label_set_for(interface, tokenizer), tokenizer, config.spread_labels
    )
    rng = np.random.default_rng(config.seed)
    pool = {"num_games": config.num_games} if config.num_games else {}
    texts: list[Transcript] = []
    for entry in config.envs:
        env_id, options = parse_env_entry(entry)
        env = envs_pkg.make(
            env_id, split="train", max_episode_steps=config.max_episode_steps, **pool, **options
        )
        episodes = range(config.episodes_per_env)
        bar = tqdm(episodes, desc=f"corpus: {config.play} play, {entry}", disable=not progress)
        for episode in bar:
            seed = int(rng.integers(2**31 - 1)) + episode
            texts += writer.play(env, entry, seed, rng, marks=config.play == "afterstate")
        env.close()
    if config.walkthrough_episodes:
        # Its own stream: the random-play part stays what it was without walkthroughs.
        rng = np.random.default_rng([config.seed, 1])
        for entry in config.envs:
            env_id, options = parse_env_entry(entry)
            env = envs_pkg.make(
                env_id,
                split="train",
                max_episode_steps=config.walkthrough_max_steps,
                **pool,
                **options,
            )
            seeds = rng.integers(2**31 - 1, size=config.walkthrough_episodes).tolist()
            bar = tqdm(seeds, desc=f"corpus: walkthroughs, {entry}", disable=not progress)
            for seed in bar:
                texts += writer.play(env, entry, seed, rng, guided=True)
            env.close()
    return texts


@dataclass(frozen=True)
class _Writer:
    """Renders play as transcripts: the interface's prompts, its label set, the
    tokenizer, and how often a menu takes a random subset of the labels (``spread``)."""

    interface: Interface
    labels: Any
    tokenizer: Any
    spread: float = 0.0

    def play(
        self,
        env: Any,
        entry: str,
        seed: int,
        rng: np.random.Generator,
        *,
        guided: bool = False,
        marks: bool = False,
    ) -> list[Transcript]:
        """One episode's transcripts: uniformly random rows (with ``marks``, uniformly
        among the rows whose afterstates the menu marks best) or, ``guided``, the rows of
        the game's walkthrough, until the game or plan ends."""
        interface, labels, tokenizer, spread = (
            self.interface, self.labels, self.tokenizer, self.spread
        )  # fmt: skip
        guide = "walkthrough" if guided else None
        texts: list[Transcript] = []
        memory = make_memory(interface.memory, interface.memory_size)
        obs, info = env.reset(seed=seed)
        memory.reset(obs, info)  # as a rollout: the start place counts as visited
        plan = list(info.get("walkthrough") or []) if guide else []
        if guide and not plan:
            raise ValueError(f"game seed {seed} reports no walkthrough to follow")
        done = False
        while not done and info["legal_actions"]:
            chosen = False
            memory_text = memory.render() or None
            legal = info["legal_actions"]
            if len(legal) > len(labels):
                legal = legal[: len(labels)]
            names = labels
            if spread and rng.random() < spread:  # a random subset of the alphabet, in its order
                picked = np.sort(rng.choice(len(labels.labels), size=len(legal), replace=False))
                names = [labels.labels[i] for i in picked]
            afterstates = info.get("afterstates")
            menu = compile_menu(
                legal,
                afterstates[: len(legal)] if (afterstates and interface.afterstates) else None,
                memory_text,
                labels=names,
                rng=rng,
            )
            if guide:
                if not plan:
                    break
                wanted = plan.pop(0)
                rows = [i for i, r in enumerate(menu.rows) if r.action == wanted]
                if not rows:  # the solution's command is not on this menu: stop the episode
                    break
                row = rows[0]
            elif marks:
                if menu.rows[0].afterstate is None:
                    raise ValueError(
                        "play='afterstate' reads the menus' afterstates; the env gives none"
                    )
                best = best_rows([r.afterstate or "" for r in menu.rows])
                row = best[int(rng.integers(len(best)))]
                chosen = len(best) < len(menu.rows)  # the marks chose (else: uniform over all)
            else:
                row = int(rng.integers(len(menu.rows)))
            label, action = menu.rows[row].label, menu.rows[row].action
            prompt = render_decision_prompt(obs, info, menu, interface, tokenizer, memory_text)
            target = render_decision_target(label, action)
            texts.append(Transcript(prompt, target, bool(guide) or chosen, entry, label))
            token_prompt = render_token_prompt(
                obs, info, interface, tokenizer, memory_text,
                legal_actions=legal if interface.show_legal_to_token_plane else None,
            )  # fmt: skip
            texts.append(
                Transcript(token_prompt, command_completion(action), bool(guide) or chosen, entry)
            )
            obs, _, terminated, truncated, info = env.step(action)
            memory.update(obs, action, info)
            done = terminated or truncated
        return texts


def training_sequences(
    config: PretrainConfig,
    tokenizer: Any,
    *,
    progress: bool = False,
    dropped: dict[str, list[int]] | None = None,
    answered: dict[str, int] | None = None,
) -> list[tuple[list[int], list[float]]]:
    """The corpus as ``(token ids + EOS, loss weights)`` pairs, a weight per token (of
    predicting it from the tokens before it): 1 for a prompt token, ``answer_weight``
    from where the answer starts to the EOS, and 0 for a random-play answer when
    ``random_answers`` is off. Sequences over ``max_tokens`` are dropped; ``dropped``,
    if given, receives ``{env entry: [dropped, of all]}`` for every env; ``answered``,
    if given, ``{label: count}`` of the decision answers trained on (kept, weight > 0)."""
    eos = tokenizer.eos_token_id
    seqs: list[tuple[list[int], list[float]]] = []
    counts = dropped if dropped is not None else {}
    for entry in config.envs:
        counts[entry] = [0, 0]
    for t in transcripts(config, tokenizer, progress=progress):
        ids = encode(tokenizer, t.prompt + t.answer) + [eos]  # over max_tokens: dropped below
        counts[t.env][1] += 1
        if len(ids) > config.max_tokens:
            counts[t.env][0] += 1
            continue
        answer = config.answer_weight if (t.guided or config.random_answers) else 0.0
        if answered is not None and t.label and answer > 0:
            answered[t.label] = answered.get(t.label, 0) + 1
        if answer == 1.0:  # the answer weighs as the prompt: no need to find where it starts
            seqs.append((ids, [1.0] * len(ids)))
            continue
        prompt_ids = encode(tokenizer, t.prompt)
        start = next(  # the first token that differs from the prompt's own encoding
            (i for i, (a, b) in enumerate(zip(prompt_ids, ids)) if a != b), len(prompt_ids)
        )
        seqs.append((ids, [1.0] * start + [answer] * (len(ids) - start)))
    return seqs
