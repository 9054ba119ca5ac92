"""Warm start: language-model pretraining of the tiny model on random-play transcripts.

DESIGN.md §9: both planes should start from a model that can *read a menu and
write a command* but knows no task. So the transcripts come from a uniformly
random policy on training games: each step gives two sequences,

* the decision prompt (observation, memory, menu with afterstates) followed by
  the chosen label and the chosen command text (``" B\\nCommand: go east\\n"``);
* the token-plane prompt followed by the chosen command (``" go east\\n"``);

and the model is trained as a plain causal LM on them. Because the choices are
uniformly random, the only thing to learn about *which* row to pick is "any
legal label": the warm model has no preference that solves a game.

``walkthrough_episodes`` (default 0, off) adds, per env, episodes that follow the
training game's own solution (``info["walkthrough"]``), rendered the same way: the
model then also sees, on *training* games only (the held-out seed range is never
played), which row the objective asks for. That is a behaviour-cloning warm start
(the usual SFT-before-RL recipe), not the default: a model warm-started so knows
something of the tasks before RL, and results say which warm start they used.

``num_games`` (default 0: each env's own pool, 16 training games) sets how many
training games the corpus draws from. What the walkthrough corpus needs most is
*episodes* (each one a fresh shuffle of the menu's labels), not games: on crafting,
1,000 walkthrough episodes over the 16 games gave 0.66 held-out success before RL,
over 1,000 games 0.31, and 96 episodes over the 16 games 0.06 (README "Suite").

A long build is resumable: every ``checkpoint_every`` steps the model, optimizer,
schedule and sampling state go to ``.<out>.pretraining/`` beside the output
(safetensors + JSON, one writer at a time), and the corpus once, at the start; the
same call with the same settings resumes there, on that corpus without playing it
again, and ends with the same weights as an uninterrupted build.

``rlid pretrain`` caches the result in ``rlid.models.tiny_cache_dir()``;
``load_policy_model("tiny")`` then returns it (``model.rlid_origin == "warm"``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import envs as envs_pkg
from envs.outcome import best_rows
from envs.registry import COMMON_OPTIONS
from menus import Interface, compile_menu, make_memory
from menus.labels import parse_alphabet
from menus.memory import MEMORY_PROVIDERS
from menus.prompt import (
    command_completion,
    label_set_for,
    render_decision_prompt,
    render_decision_target,
    render_token_prompt,
)
from menus.tokens import encode
from rlid.runs.files import remove_leftovers, staged_dir
from rlid.runs.lock import RunLock
from rlid.runs.pin import weights_hash
from rlid.runs.software import software_record
from rlid.runs.stop import RunStopped, StopSignals

DEFAULT_ENVS = ("keydoor", "crafting", "tw-coin_collector")
DEFAULT_LABELS = "A-Z"
DEFAULT_MEMORY = "last_k"
DEFAULT_SIZE = "tiny"
PLAY_CHOICES = ("random", "afterstate")


def _f(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help, **kw})


@dataclass(frozen=True)
class PretrainConfig:
    """Settings of the warm start (defaults: a few minutes on 2 CPU cores); ``rlid pretrain``
    derives its flags from these fields."""

    envs: tuple[str, ...] = _f(
        DEFAULT_ENVS,
        "env ids whose training games are played (space or comma separated); ENV[k=v,...] "
        "plays them with those options, e.g. 'keydoor[size=5,keys=2]'",
    )
    episodes_per_env: int = _f(48, "random-play episodes per env", aliases=("--episodes",))
    max_episode_steps: int = _f(12, "cap per random episode (short: prompts, not solutions)")
    walkthrough_episodes: int = _f(
        0,
        "episodes per env that follow the training game's walkthrough (0: random play only; "
        "> 0 is a behaviour-cloning warm start)",
    )
    walkthrough_max_steps: int = _f(64, "cap per walkthrough episode")
    num_games: int = _f(
        0,
        "training games per env the corpus plays (0: the env's own pool, its num_games "
        "option, 16 by default; a new TextWorld game compiles once, seconds)",
    )
    random_answers: bool = _f(
        True,
        "also train on the random-play choices (false: on their prompts only, so every "
        "answer the model is trained on is a walkthrough's, or with --play afterstate one "
        "the menu's marks chose)",
    )
    answer_weight: float = _f(
        1.0,
        "loss weight of an answer token (the chosen label and command) against a prompt "
        "token's 1; an answer is a few tokens of a few hundred, so > 1 stresses the choice",
    )
    steps: int = _f(400, "optimizer steps")
    batch_size: int = _f(16, "sequences per step")
    lr: float = _f(2e-3, "AdamW learning rate (cosine decay to 10%)")
    max_tokens: int = _f(
        384,
        "longer sequences are dropped (how many, per env, is printed and kept in pretrain.json)",
    )
    seed: int = _f(0, "seed (play and training)")
    threads: int = _f(2, "torch CPU threads")
    max_batch_tokens: int = _f(
        0,
        "split each step's batch, sorted by length, into pieces of at most N padded tokens "
        "whose gradients add up to the whole batch's (the same loss with less padding: "
        "several times faster when lengths vary; 0: one padded batch)",
    )
    labels: str = _f(
        DEFAULT_LABELS,
        "label alphabet of the corpus's menus, as a run's interface labels; a menu with more "
        "legal actions than labels keeps the first ones, and a walkthrough episode whose next "
        "command is not on it stops there ('auto': A-Z, a-z, 0-9, so up to 62 rows: match "
        "the comparison the warm start is for, e.g. examples/suite.toml)",
    )
    spread_labels: float = _f(
        0.0,
        "fraction of the corpus's menus whose labels are a random subset of the alphabet, "
        "in its order, rather than its first labels (as a run's menus have them): with 0, a "
        "label beyond the corpus's largest menu is never an answer, and the model rarely "
        "picks rows so labelled in a larger menu (the default corpus answers with A-K only; "
        "pretrain.json records the labels answered with)",
    )
    play: str = _f(
        "random",
        "how the play episodes pick their rows: 'random' (uniformly) or 'afterstate' (a row "
        "whose afterstate the menu marks best: a win, else the most points, else any row not "
        "marked as losing, uniformly among ties; envs.outcome.best_rows, the afterstate "
        "reference of rlid compare), so their answers teach reading the menu's outcome marks",
    )
    size: str = _f(
        DEFAULT_SIZE,
        "architecture preset of the fresh model (rlid.models.MODEL_SIZES): 'tiny' (0.95M "
        "parameters) or 'large' (28.5M)",
    )
    memory: str = _f(
        DEFAULT_MEMORY,
        "memory line of the corpus's prompts, as a run's interface memory: 'last_k' (the "
        "last transitions), 'structured' (visited places, failed actions) or 'none'; match "
        "the runs the warm start is for",
    )

    def __post_init__(self) -> None:
        envs = tuple(part for item in self.envs for part in split_env_entries(str(item)))
        object.__setattr__(self, "envs", envs)
        for name in ("episodes_per_env", "max_episode_steps", "steps", "batch_size", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_batch_tokens < 0:
            raise ValueError(f"max_batch_tokens must be >= 0, got {self.max_batch_tokens}")
        if self.walkthrough_episodes < 0:
            raise ValueError(f"walkthrough_episodes must be >= 0, got {self.walkthrough_episodes}")
        most = int(COMMON_OPTIONS["num_games"].max or 0)  # the envs' own bound
        if not 0 <= self.num_games <= most:
            raise ValueError(
                f"num_games must be in [0, {most}] (0: the env's own), got {self.num_games}"
            )
        if self.walkthrough_max_steps < 1:
            raise ValueError(
                f"walkthrough_max_steps must be >= 1, got {self.walkthrough_max_steps}"
            )
        if not 0.0 <= self.spread_labels <= 1.0:
            raise ValueError(f"spread_labels must be in [0, 1], got {self.spread_labels}")
        if self.play not in PLAY_CHOICES:
            raise ValueError(f"play must be one of {list(PLAY_CHOICES)}, got {self.play!r}")
        if not self.answer_weight > 0:
            raise ValueError(f"answer_weight must be > 0, got {self.answer_weight}")
        if not self.envs:
            raise ValueError("give at least one env id to play")
        for entry in self.envs:
            parse_env_entry(entry)  # unknown ids and options fail listing the valid ones
        parse_alphabet(self.labels)  # a bad spec fails naming the valid forms
        from rlid.models import MODEL_SIZES

        if self.size not in MODEL_SIZES:
            raise ValueError(f"size must be one of {sorted(MODEL_SIZES)}, got {self.size!r}")
        if self.memory not in MEMORY_PROVIDERS:
            raise ValueError(
                f"memory must be one of {sorted(MEMORY_PROVIDERS)}, got {self.memory!r}"
            )


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


_RESERVED = ("split", "num_games", "max_episode_steps", "game_seed")
_ENTRY = re.compile(r"([A-Za-z0-9_.-]+)(?:\[([^\[\]]*)\])?")


def split_env_entries(text: str) -> list[str]:
    """``"keydoor[size=5,keys=2], crafting"`` -> ``["keydoor[size=5,keys=2]", "crafting"]``:
    split on commas and spaces outside brackets (spaces inside are dropped)."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise ValueError(f"env entry {text!r}: unbalanced brackets")
        if depth == 0 and char in ", \t\n":
            parts.append(current)
            current = ""
        elif not (depth and char.isspace()):
            current += char
    if depth:
        raise ValueError(f"env entry {text!r}: unbalanced brackets")
    return [part for part in [*parts, current] if part]


def parse_env_entry(entry: str) -> tuple[str, dict[str, Any]]:
    """``"keydoor[size=5,keys=2]"`` -> ``("keydoor", {"size": 5, "keys": 2})``, checked
    against the env's option table. The corpus sets the split, the pool and the step
    caps itself, so those options are refused here."""
    from envs.registry import parse_option_strings

    match = _ENTRY.fullmatch(entry)
    if match is None:
        raise ValueError(f"env entry {entry!r}: write ENV or ENV[key=value,...]")
    env_id, inside = match.group(1), match.group(2)
    given = parse_option_strings([p for p in (inside or "").split(",") if p])
    reserved = [k for k in _RESERVED if k in given]
    if reserved:
        raise ValueError(
            f"env entry {entry!r}: {', '.join(reserved)} is set by the corpus itself "
            "(--num-games, --max-episode-steps, --walkthrough-max-steps; training games only)"
        )
    resolved = envs_pkg.get_spec(env_id).resolve(given)  # unknown ids / bad values: clear errors
    return env_id, {k: resolved[k] for k in given}


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
    from tqdm import tqdm

    interface = interface or Interface(labels=config.labels, memory=config.memory)  # type: ignore[arg-type]
    labels = label_set_for(interface, tokenizer)
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
            texts += _play(
                env, entry, seed, None, interface, labels, tokenizer, rng, config.spread_labels,
                marks=config.play == "afterstate",
            )  # fmt: skip
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
                texts += _play(
                    env, entry, seed, "walkthrough", interface, labels, tokenizer, rng,
                    config.spread_labels,
                )  # fmt: skip
            env.close()
    return texts


def _play(
    env: Any,
    entry: str,
    seed: int,
    guide: str | None,
    interface: Interface,
    labels: Any,
    tokenizer: Any,
    rng: np.random.Generator,
    spread: float = 0.0,
    *,
    marks: bool = False,
) -> list[Transcript]:
    """One episode's transcripts: uniformly random rows (``guide`` None; with ``marks``,
    uniformly among the rows whose afterstates the menu marks best) or the rows of the
    game's walkthrough (``guide == "walkthrough"``), until the game or plan ends."""
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


def weighted_lm_loss(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    weights: torch.Tensor,
    *,
    normaliser: float | None = None,
) -> torch.Tensor:
    """``sum_i w_i * CE(token_i | tokens < i) / sum_i w_i`` over a batch: ``logits`` (B, T, V),
    ``input_ids`` and ``weights`` (B, T), weight 0 on padding and on the first token.
    ``normaliser`` replaces ``sum_i w_i`` (a piece of a larger batch divides by the
    whole batch's sum, so that the pieces' losses add up to the batch's)."""
    ce = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), input_ids[:, 1:].flatten(), reduction="none"
    ).view(input_ids.shape[0], -1)  # (B, T-1)
    w = weights[:, 1:]
    if normaliser is not None:
        return (ce * w).sum() / max(normaliser, 1e-8)
    return (ce * w).sum() / w.sum().clamp_min(1e-8)


def length_pieces(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """A batch's indices in order of length, cut into pieces of at most ``max_tokens``
    padded tokens (pieces x longest; a longer sequence is a piece alone); 0: one piece
    in the batch's own order."""
    if not max_tokens:
        return [list(range(len(lengths)))]
    pieces: list[list[int]] = [[]]
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if pieces[-1] and (len(pieces[-1]) + 1) * lengths[i] > max_tokens:
            pieces.append([])
        pieces[-1].append(i)
    return pieces


def _padded(
    batch: list[tuple[list[int], list[float]]], pad: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``(input_ids, attention_mask, weights)``, each (B, T), weight 0 on padding."""
    t_max = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), t_max), pad, dtype=torch.long)
    attention = torch.zeros((len(batch), t_max), dtype=torch.long)
    weights = torch.zeros((len(batch), t_max))
    for b, (ids, w) in enumerate(batch):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        attention[b, : len(ids)] = 1
        weights[b, : len(ids)] = torch.tensor(w)
    return input_ids, attention, weights


def batch_backward(
    model: Any,
    batch: list[tuple[list[int], list[float]]],
    pad: int,
    answer_weight: float,
    max_batch_tokens: int = 0,
) -> torch.Tensor:
    """Back-propagate one step's loss over ``batch`` (``(ids, weights)`` pairs) and return
    it, detached: one padded batch, or pieces of at most ``max_batch_tokens`` padded
    tokens (:func:`length_pieces`) whose gradients add up to the one batch's."""
    pieces = length_pieces([len(ids) for ids, _ in batch], max_batch_tokens)
    if len(pieces) == 1:  # one padded batch (as before the option)
        input_ids, attention, weights = _padded(batch, pad)
        if answer_weight == 1.0:  # weights 0/1: the model's own loss
            labels = input_ids.masked_fill(weights == 0, -100)
            loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        else:
            logits = model(input_ids=input_ids, attention_mask=attention).logits
            loss = weighted_lm_loss(logits, input_ids, weights)
        loss.backward()
        return loss.detach()
    total = sum(sum(w[1:]) for _, w in batch)  # the whole batch's normaliser
    loss = torch.zeros(())
    for piece in pieces:  # the same loss, piece by piece: each adds its share of the sum
        input_ids, attention, weights = _padded([batch[b] for b in piece], pad)
        logits = model(input_ids=input_ids, attention_mask=attention).logits
        part = weighted_lm_loss(logits, input_ids, weights, normaliser=total)
        part.backward()
        loss = loss + part.detach()
    return loss


CHECKPOINT_EVERY = 200
"""Default steps between two saves of an unfinished build (``checkpoint_every``)."""

_PROGRESS_DIRS = ("progress", ".progress.old")  # the checkpoint, and the one it replaces
# where a save of each is staged; what a killed save left under them is removed on resume
_PROGRESS_STAGING, _CORPUS_STAGING = ".progress.", ".corpus."


def work_dir(out: Path) -> Path:
    """Where an unfinished build into ``out`` keeps its checkpoint: ``.<name>.pretraining``
    beside it (removed when the build finishes)."""
    out = Path(out)
    return out.parent / f".{out.name}.pretraining"


def _same_build(config: PretrainConfig) -> dict[str, Any]:
    """The settings a resumed build must share (threads only change the speed)."""
    settings = asdict(config)
    settings.pop("threads")
    settings.pop("max_batch_tokens")  # the same loss and gradient, up to rounding
    settings["envs"] = list(settings["envs"])
    if settings["labels"] == DEFAULT_LABELS:  # as saved before the option existed
        settings.pop("labels")
    if not settings["spread_labels"]:  # likewise
        settings.pop("spread_labels")
    if settings["play"] == "random":  # likewise
        settings.pop("play")
    for name, default in (("memory", DEFAULT_MEMORY), ("size", DEFAULT_SIZE)):
        if settings[name] == default:  # likewise
            settings.pop(name)
    return settings


def _in_alphabet_order(answered: dict[str, int] | None, spec: str) -> dict[str, int] | None:
    if answered is None:
        return None
    order = {label: i for i, label in enumerate(parse_alphabet(spec))}
    return dict(sorted(answered.items(), key=lambda kv: order.get(kv[0], len(order))))


def answered_labels(model_dir: str | os.PathLike[str]) -> dict[str, int] | None:
    """``{label: count}`` of the decision answers the warm start in ``model_dir`` (the
    cache of ``"tiny"``, or a directory ``rlid pretrain --out`` wrote) was trained on, from
    its ``pretrain.json``; None when there is no such record (another model, or a build
    from before it)."""
    try:
        record = json.loads((Path(model_dir) / "pretrain.json").read_text())
    except (OSError, ValueError):
        return None
    labels = record.get("answered_labels") if isinstance(record, dict) else None
    return labels if isinstance(labels, dict) else None


def _corpus_digest(seqs: list[tuple[list[int], list[float]]]) -> str:
    digest = hashlib.sha256()
    for ids, weights in seqs:
        digest.update(json.dumps([ids, weights]).encode())
    return digest.hexdigest()


def _publish_state(
    final: Path, prefix: str, stem: str, obj: Any, *, aside: Path | None = None
) -> None:
    """``obj`` saved (safetensors + JSON, the umask's permissions) as ``final/stem``, the
    directory renamed into place (see :func:`rlid.runs.files.staged_dir`)."""
    from rlid.runs.state import save_state

    with staged_dir(final, prefix=prefix, aside=aside) as tmp:
        save_state(tmp / stem, obj)


def _save_progress(work: Path, state: dict[str, Any]) -> None:
    """Write ``work/progress`` atomically (a temp dir renamed over the old one)."""
    final, old = (work / name for name in _PROGRESS_DIRS)
    _publish_state(final, _PROGRESS_STAGING, "state", state, aside=old)
    shutil.rmtree(old, ignore_errors=True)


def _save_corpus(
    work: Path, config: PretrainConfig, seqs: list[tuple[list[int], list[float]]], extra: Any
) -> None:
    """Keep the corpus beside the checkpoints (``work/corpus``), so that a resumed build
    trains on it without playing it again. A sequence's weights are 1 up to ``start``
    and ``answer`` from there (:func:`training_sequences`), so two numbers store them."""
    starts, answers = [], []
    for ids, weights in seqs:
        start = next((i for i, w in enumerate(weights) if w != 1.0), len(ids))
        starts.append(start)
        answers.append(weights[start] if start < len(ids) else 1.0)
    corpus = {
        "settings": _same_build(config),
        "ids": torch.tensor([i for ids, _ in seqs for i in ids], dtype=torch.int32),
        "lengths": torch.tensor([len(ids) for ids, _ in seqs], dtype=torch.int64),
        "starts": starts,
        "answers": answers,
        "extra": extra,
    }
    _publish_state(work / "corpus", _CORPUS_STAGING, "corpus", corpus)  # replaces a discarded one


def _load_corpus(
    work: Path, config: PretrainConfig
) -> tuple[list[tuple[list[int], list[float]]], Any] | None:
    """The corpus :func:`_save_corpus` kept for this build, or None if there is none."""
    from rlid.runs.state import load_state

    if not (work / "corpus" / "corpus.json").is_file():
        return None
    saved = load_state(work / "corpus" / "corpus")
    if not isinstance(saved, dict) or saved.get("settings") != _same_build(config):
        return None
    pieces = torch.split(saved["ids"], saved["lengths"].tolist())
    seqs = [
        (ids.tolist(), [1.0] * start + [float(answer)] * (len(ids) - start))
        for ids, start, answer in zip(pieces, saved["starts"], saved["answers"])
    ]
    return seqs, saved["extra"]


def _load_progress(work: Path) -> dict[str, Any] | None:
    """The saved state of an unfinished build, or None (also after a kill between the
    two renames of a save: the previous checkpoint is then the one left)."""
    from rlid.runs.state import load_state

    for name in _PROGRESS_DIRS:
        if (work / name / "state.json").is_file():
            state = load_state(work / name / "state")
            if not isinstance(state, dict) or "step" not in state:
                raise ValueError(f"{work / name} is not a pretraining checkpoint")
            return dict(state)
    return None


def _progress_ids(work: Path) -> tuple[int | None, ...]:
    """Which checkpoint directories ``work`` holds now (each save renames in a new one)."""
    ids: list[int | None] = []
    for name in _PROGRESS_DIRS:
        try:
            ids.append(os.stat(work / name).st_ino)
        except FileNotFoundError:
            ids.append(None)
    return tuple(ids)


def _load_progress_unchanged(work: Path) -> dict[str, Any] | None:
    """:func:`_load_progress` by a reader without the build's lock: a running build may
    replace its checkpoint between the reads of its JSON and its tensors, so a read
    counts only if no checkpoint directory was replaced meanwhile (else it is retried)."""
    for _ in range(3):
        before = _progress_ids(work)
        try:
            saved = _load_progress(work)
        except (OSError, ValueError):
            if _progress_ids(work) == before:
                raise  # not a save under way: really missing or corrupt
            continue
        if _progress_ids(work) == before:
            return saved
    raise ValueError(f"{work}: the checkpoint kept changing while read; try again")


def _fresh_model(tokenizer: Any, size: str, *, seed: int) -> Any:
    from rlid.models import build_model_from_config, model_config

    return build_model_from_config(model_config(tokenizer, size), seed=seed)  # type: ignore[arg-type]


def load_unfinished(out: Path) -> tuple[Any, Any, dict[str, Any]]:
    """The model of an unfinished build into ``out`` as of its last checkpoint, to
    evaluate it mid-build: ``(model, tokenizer, info)``, ``info`` with the ``step``
    reached, the build's ``steps`` and the mean ``loss`` of its last 200 steps.
    Raises ``ValueError`` when there is no unfinished build there."""
    from rlid.tokenizer import build_tiny_tokenizer

    work = work_dir(Path(out))
    saved = _load_progress_unchanged(work)
    if saved is None:
        raise ValueError(f"no unfinished pretraining of {out} (no {work})")
    tokenizer = build_tiny_tokenizer()
    model = _fresh_model(tokenizer, saved.get("settings", {}).get("size", DEFAULT_SIZE), seed=0)
    model.load_state_dict(saved["model"])
    model.eval()
    losses = list(saved["losses"])[-200:]
    info = {
        "step": int(saved["step"]),
        "steps": saved.get("settings", {}).get("steps"),
        "loss": float(np.mean(losses)) if losses else None,
    }
    return model, tokenizer, info


def save_unfinished(out: Path, dest: Path) -> dict[str, Any]:
    """Save the model of the unfinished build into ``out``, as of its last checkpoint,
    as the model directory ``dest`` (for ``--model``), with ``snapshot.json`` naming the
    build, step and loss; returns :func:`load_unfinished`'s ``info``. The build may be
    running meanwhile. ``dest`` must be new or empty, and not ``out`` (where the build
    writes its model when it finishes)."""
    from rlid.models import save_policy_model

    out, dest = Path(out), Path(dest)
    if dest.resolve() == out.resolve():
        raise ValueError(
            f"{dest} is where the build writes its finished model; save the snapshot elsewhere"
        )
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ValueError(f"{dest} exists and is not empty; a snapshot goes to a new directory")
    model, tokenizer, info = load_unfinished(out)
    save_policy_model(model, tokenizer, dest)
    record = {"unfinished_build": str(out), **info}
    (dest / "snapshot.json").write_text(json.dumps(record, indent=2) + "\n")
    return info


def _check_settings(saved: dict[str, Any], config: PretrainConfig, work: Path) -> None:
    theirs, ours = saved.get("settings", {}), _same_build(config)
    if theirs != ours:
        diff = ", ".join(
            f"{k}: {ours.get(k)!r} here, {theirs.get(k)!r} there"
            for k in sorted(set(ours) | set(theirs))
            if ours.get(k) != theirs.get(k)
        )
        raise ValueError(
            f"{work} holds an unfinished pretraining with other settings ({diff}); rerun "
            "with its settings to resume it, or pass --restart (restart=True) to discard it"
        )


def _check_corpus(saved: dict[str, Any], digest: str, work: Path) -> None:
    if saved.get("corpus") != digest:
        raise ValueError(
            f"{work} holds an unfinished pretraining over another corpus (same settings, "
            "different transcripts: the envs or the prompt changed since, or the corpus kept "
            "beside the checkpoint was altered); pass --restart "
            "(restart=True) to discard it"
        )


def pretrain(
    config: PretrainConfig,
    *,
    out: Path | None = None,
    progress: bool = True,
    checkpoint_every: int = CHECKPOINT_EVERY,
    restart: bool = False,
) -> dict[str, Any]:
    """Pretrain the fresh tiny model; save it atomically to ``out`` (default: the cache).

    Every ``checkpoint_every`` steps (0: never) the build's state is saved in
    :func:`work_dir`; a later call with the same settings resumes from it and ends
    bit-identical to an uninterrupted build (same threads). ``restart`` discards it.
    Settings that differ from the saved ones raise ``ValueError``; a second process
    building into the same ``out`` raises :class:`rlid.runs.lock.RunLockedError`.
    """
    from rlid.models import tiny_cache_dir

    if checkpoint_every < 0:
        raise ValueError(f"checkpoint_every must be >= 0, got {checkpoint_every}")
    target = Path(out) if out is not None else tiny_cache_dir()
    if target.exists() and not target.is_dir():  # refused now, not after the build
        raise ValueError(f"{target} is a file, not a model directory: choose another output")
    work = work_dir(target)
    lock = RunLock(work, "rlid pretrain").acquire(create=True)
    finished = False
    try:
        info = _pretrain_locked(
            config, target, work, progress=progress, every=checkpoint_every, restart=restart
        )
        finished = True
    finally:
        # finished: the checkpoint is spent; failed before one: nothing to resume.
        # Removed while the lock is held, so that a second builder cannot be between.
        if finished or not any((work / name).exists() for name in _PROGRESS_DIRS):
            lock.remove_directory()
        else:
            lock.release()
    return info


def _pretrain_locked(
    config: PretrainConfig, target: Path, work: Path, *, progress: bool, every: int, restart: bool
) -> dict[str, Any]:
    from tqdm import tqdm

    from rlid.models import save_policy_model
    from rlid.tokenizer import build_tiny_tokenizer

    torch.set_num_threads(config.threads)
    t0 = time.perf_counter()
    if restart:
        for name in (*_PROGRESS_DIRS, "corpus"):
            shutil.rmtree(work / name, ignore_errors=True)
    remove_leftovers(work, _PROGRESS_STAGING, keep=(_PROGRESS_DIRS[1],))  # a build killed mid-save
    remove_leftovers(work, _CORPUS_STAGING)
    saved = _load_progress(work)
    if saved is not None:
        _check_settings(saved, config, work)  # fail before building the corpus
    tokenizer = build_tiny_tokenizer()
    dropped: dict[str, list[int]] = {}
    answered: dict[str, int] | None = {}
    kept = _load_corpus(work, config) if saved is not None else None
    if kept is not None:  # the corpus this build started on, as it was then
        seqs, extra = kept
        if isinstance(extra, dict) and set(extra) == {"dropped", "answered"}:
            dropped, answered = extra["dropped"], extra["answered"]
        else:  # kept before the answers were counted
            dropped, answered = extra, None
    else:
        seqs = training_sequences(
            config, tokenizer, progress=progress, dropped=dropped, answered=answered
        )
    if not seqs:
        raise ValueError("no transcript fits max_tokens; raise --max-tokens")
    for entry, (n, total) in dropped.items():
        if n:
            print(
                f"rlid pretrain: {n} of {total} sequences of {entry} are longer than "
                f"max_tokens {config.max_tokens} and were dropped",
                file=sys.stderr,
                flush=True,
            )
    digest = _corpus_digest(seqs)
    if every and kept is None:
        _save_corpus(work, config, seqs, {"dropped": dropped, "answered": answered})
    model = _fresh_model(tokenizer, config.size, seed=config.seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(step / config.steps, 1.0))),
    )
    gen = torch.Generator().manual_seed(config.seed)
    pad = tokenizer.pad_token_id
    losses: list[float] = []
    start, spent = 0, 0.0
    if saved is not None:
        _check_corpus(saved, digest, work)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        gen.set_state(saved["generator"])
        torch.set_rng_state(saved["torch_rng"])
        start, losses, spent = int(saved["step"]), list(saved["losses"]), float(saved["seconds"])
        print(
            f"rlid pretrain: resuming at step {start} of {config.steps} from {work}",
            file=sys.stderr,
            flush=True,
        )
    bar = tqdm(
        range(start, config.steps),
        initial=start,
        total=config.steps,
        desc="pretrain",
        unit="step",
        disable=not progress,
    )
    # SIGTERM / Ctrl-C: save this step's state and stop (when there are checkpoints)
    with StopSignals(enabled=bool(every)) as stop:
        for step in bar:
            idx = torch.randint(len(seqs), (config.batch_size,), generator=gen).tolist()
            batch = [seqs[i] for i in idx]
            optimizer.zero_grad(set_to_none=True)
            loss = batch_backward(model, batch, pad, config.answer_weight, config.max_batch_tokens)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            losses.append(float(loss.detach()))
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
            done = step + 1
            if every and (done % every == 0 or stop.requested) and done < config.steps:
                _save_progress(
                    work,
                    {
                        "step": done,
                        "settings": _same_build(config),
                        "corpus": digest,
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "schedule": schedule.state_dict(),
                        "generator": gen.get_state(),
                        "torch_rng": torch.get_rng_state(),
                        "losses": losses,
                        "seconds": spent + time.perf_counter() - t0,
                    },
                )
            if stop.requested and done < config.steps:
                bar.close()
                raise RunStopped(
                    target, done, stop.signum or signal.SIGTERM, unit="step",
                    resume_with="the same command (the build resumes)",
                )  # fmt: skip
    model.eval()
    save_policy_model(model, tokenizer, target)
    info = {
        "config": asdict(config),
        "sequences": len(seqs),
        "dropped": {entry: {"dropped": n, "of": total} for entry, (n, total) in dropped.items()},
        # the labels the model was trained to answer with, in the alphabet's order: a run's
        # rows labelled otherwise are rarely picked (rlid.trainer warns)
        "answered_labels": _in_alphabet_order(answered, config.labels),
        "first_loss": float(np.mean(losses[:10])),
        "final_loss": float(np.mean(losses[-20:])),
        "seconds": spent + time.perf_counter() - t0,
        "resumed_at_step": start,
        "path": str(target),
        # what wrote these weights: the same recipe on another float path (CPU kernel
        # level, torch / transformers build) writes other weights
        "sha256": weights_hash(target),
        "software": software_record(),
    }
    (target / "pretrain.json").write_text(json.dumps(info, indent=2))
    return info
