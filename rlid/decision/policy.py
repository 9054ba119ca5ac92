"""The decision-plane policy: menus in, one batched label readout, actions out.

``DecisionPolicy.act`` compiles each env's legal actions into a labelled menu
(shuffled per step when the interface says so), renders the prompt, runs ONE
forward over the batch, reads the label-token logits at the last position,
normalises them over the legal rows and samples. It returns :class:`Decision`
records that hold everything the update needs to re-score the decision exactly
(prompt token ids, label token ids, chosen row, log-prob, value).

Invalid actions are impossible by construction: the sampled row is a legal action.

Label trees (``Interface.overflow="tree"``, docs/large-menus.md): a state with more
legal actions than a menu may show is a path of menus (``rlid.menus.tree``); ``act`` reads
level 1 in the same batched forward, then each later level on the KV cache
(``rlid.decision.tree_walk``), and the decision stores every level (``Decision.path``). Its
``logp`` is the joint sum of the levels' log-probs, its ``entropy`` the sum of the
levels' exact entropies along the sampled path (an unbiased estimate of the joint
entropy), its ``label_mass`` the product of the levels' masses. A batch whose menus
all fit runs exactly as before.

Temperature: a decision sampled at temperature T stores log π_T(a|s) =
log_softmax(label_logits / T) — the behaviour distribution — and keeps T, so the
update re-scores the same distribution (ratios, clip, approx KL, entropy and KL to
the reference all measure π_T; at T = 1 nothing changes).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from rlid.config.budget import Budget, Timers
from rlid.core.acting import draw_rows, drawn_numbers, fit_to_context, join_chunks, sample_rows
from rlid.core.records import Decision, ValueHead, decision_temperatures
from rlid.decision.tree_walk import (
    longest_continuation,
    one_long_path,
    path_segments,
    tree_logprobs,
    walk_trees,
)
from rlid.lm.models import CausalLM
from rlid.lm.optim import chunks
from rlid.lm.readout import (
    context_limit,
    model_vocab_size,
    pad_label_ids,
    readout_from_lists,
)
from rlid.lm.tree_readout import LevelReader, PathReadout, path_logprobs
from rlid.menus import Interface, LabelSet, Menu
from rlid.menus.prompt import label_context, render_decision_prompt
from rlid.menus.tokens import encode_prompt
from rlid.menus.tree import LabelTree, tree_of_menu
from rlid.menus.tree_prompt import tree_for_step

# the most label-tree menus whose token counts a policy keeps (their texts: tens of MB at most)
SEGMENT_MEMO_SIZE = 10_000


class DecisionPolicy:
    """Menu + single-forward label readout policy over a batch of envs.

    Args:
        model, tokenizer: a causal LM and its tokenizer (left padding).
        interface: what the policy sees; its label alphabet is validated against the
            tokenizer in the exact context where labels are read.
        value_head: optional V(s) head on the last hidden state.
        autocast: context-manager factory around model forwards (mixed precision).
        micro_batch_size: most prompts per rollout forward (None: all at once).
        engine: a rollout engine with ``readout`` (:class:`rlid.engines.VLLMEngine`) that
            plays :meth:`act`'s readout instead of the model: rows are drawn from its μ,
            kept in ``extra["logp_rollout"]`` (chosen row) and
            ``extra["logp_rollout_rows"]``; ``logp`` is μ too until the trainer
            re-scores π_old (:func:`rlid.engines.session.rescore_decisions`). The value
            head then waits for that re-score. :meth:`score` always uses the model.
    """

    def __init__(
        self,
        model: CausalLM,
        tokenizer: Any,
        interface: Interface,
        *,
        value_head: ValueHead | None = None,
        budget: Budget | None = None,
        timers: Timers | None = None,
        autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
        micro_batch_size: int | None = None,
        engine: Any = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.interface = interface
        self.value_head = value_head
        self.engine = engine
        self.autocast = autocast
        self.micro_batch_size = micro_batch_size
        self.budget = budget if budget is not None else Budget()
        self.timers = timers if timers is not None else Timers()
        context, prefix = label_context(interface, tokenizer)
        self.labels = LabelSet.for_tokenizer(
            tokenizer, candidates=interface.labels, context=context, prefix=prefix
        )
        self.pad_id = tokenizer.pad_token_id
        # label-tree menus' token counts, for longest_continuation (bounded: cleared when full)
        self._segment_lengths: dict[tuple[str, str], int] = {}

    @property
    def max_menu_size(self) -> int:
        return len(self.labels.labels)

    # ------------------------------------------------------------------ acting
    def act(
        self,
        observations: list[str],
        infos: list[dict[str, Any]],
        memory_texts: list[str | None],
        *,
        rng: np.random.Generator,
        generator: torch.Generator,
        greedy: bool = False,
        temperature: float = 1.0,
    ) -> list[Decision]:
        """One decision per env, from one batched forward (label trees: one per level)."""
        with self.timers.time("menu"):
            steps = [
                tree_for_step(i, self.interface, self.labels, m, rng)
                for i, m in zip(infos, memory_texts)
            ]
        if any(isinstance(step, LabelTree) for step in steps):
            return self.act_on_trees(
                observations, infos, steps, memory_texts, generator=generator, greedy=greedy,
                temperature=temperature,
            )  # fmt: skip
        menus = [step for step in steps if isinstance(step, Menu)]
        with self.timers.time("menu"):
            self.budget.truncated_menus += sum(1 for menu in menus if menu.dropped)

            def encode_step(b: int, memory: str | None, interface: Interface) -> list[int]:
                menu = menus[b] if memory is not None else replace(menus[b], memory=None)
                prompt = render_decision_prompt(
                    observations[b], infos[b], menu, interface, self.tokenizer,
                    memory_text=memory,
                )  # fmt: skip
                return encode_prompt(self.tokenizer, prompt)

            prompt_ids, used = fit_to_context(
                encode_step, memory_texts, context_limit(self.model), self.interface, self.budget
            )
            menus = [
                menu if m is not None or menu.memory is None else replace(menu, memory=None)
                for menu, m in zip(menus, used)
            ]
            label_ids = [list(self.labels.token_ids[: len(menu.rows)]) for menu in menus]
        with self.timers.time("forward"), torch.no_grad():
            if self.engine is None:
                logp, label_mass, hidden = join_chunks(
                    [
                        self.score_ids(prompt_ids[part], label_ids[part], temperature=temperature)
                        for part in chunks(len(prompt_ids), self.micro_batch_size)
                    ]
                )
            else:
                logp, label_mass, hidden = self.engine_scores(prompt_ids, label_ids, temperature)
            value_head = self.value_head if self.engine is None else None  # after the re-score
            chosen, values, entropy = draw_rows(
                logp, hidden, value_head, generator=generator, greedy=greedy
            )
        rows, picked, entropies, vs = drawn_numbers(logp, chosen, entropy, values)
        masses = label_mass.tolist()
        kept = logp.cpu() if greedy else None  # greedy play: every row's log-prob kept
        decisions = []
        for b, menu in enumerate(menus):
            c = rows[b]
            extra: dict[str, Any] = {} if kept is None else {"logp_rows": kept[b, : len(menu.rows)]}
            if self.engine is not None:
                extra["logp_rollout"] = picked[b]
                extra["logp_rollout_rows"] = logp[b, : len(menu.rows)].tolist()
            decisions.append(
                Decision(
                    action=menu.rows[c].action,
                    chosen=c,
                    logp=picked[b],
                    entropy=entropies[b],
                    label_mass=masses[b],
                    value=vs[b],
                    prompt_ids=prompt_ids[b],
                    label_ids=label_ids[b],
                    menu=menu,
                    extra=extra,
                    temperature=temperature,
                )
            )
        self.budget.decisions += len(decisions)
        return decisions

    def act_on_trees(
        self,
        observations: list[str],
        infos: list[dict[str, Any]],
        steps: list[Menu | LabelTree],
        memory_texts: list[str | None],
        *,
        generator: torch.Generator,
        greedy: bool,
        temperature: float,
    ) -> list[Decision]:
        """``act`` for a batch with label trees: level 1 of every state in one forward,
        then one forward per further level over the states still walking (KV cache).
        Trees are read by the trainer's model also when a rollout engine plays the flat
        menus (the engine has no KV-reusing level walk): their log-probs are π_old."""
        with self.timers.time("menu"):
            trees = [s if isinstance(s, LabelTree) else tree_of_menu(s) for s in steps]
            # each tree's longest path, by the tree and whether it shows afterstates (a
            # shortened prompt drops the memory line, which no later level shows), and
            # whether it is exact (else: a path longer than the room its prompt left)
            longest: list[list[tuple[LabelTree, bool, int, bool]]] = [[] for _ in trees]
            # each prompt's tree as shown and ids by (step, tree, memory, interface): a
            # refit is measured with one path, then with every path, on the same prompt
            prompts: dict[
                tuple[int, int, str | None, Interface], tuple[LabelTree, LabelTree, Any]
            ] = {}

            def encode_step(
                b: int,
                memory: str | None,
                interface: Interface,
                exact: bool = True,
                measure_all: bool = False,
            ) -> Any:
                """(prompt ids, tree as shown, its longest path, interface); ``exact=False``:
                one path's length instead of the longest (a lower bound: one_long_path).
                Where the context leaves less room than a path takes, the first such path
                is enough to rule the tree out and is what is returned (whether a step
                fits is all that is asked), unless ``measure_all``."""
                base = trees[b]
                key = (b, id(base), memory, interface)
                if key in prompts and prompts[key][0] is base:
                    _, tree, ids = prompts[key]
                else:
                    tree = base if memory is not None else replace(base, memory=None)
                    if not interface.afterstates:
                        tree = replace(tree, afterstates=None)
                    prompt = render_decision_prompt(
                        observations[b], infos[b], tree, interface, self.tokenizer,
                        memory_text=memory,
                    )  # fmt: skip
                    ids = encode_prompt(self.tokenizer, prompt)
                    prompts[key] = (base, tree, ids)
                bare = tree.afterstates is None
                room = None if limit is None or measure_all else limit - len(ids)
                known = [
                    n for t, a, n, whole in longest[b]
                    if t is base and a == bare and (whole or (room is not None and n > room))
                ]  # fmt: skip
                if len(self._segment_lengths) > SEGMENT_MEMO_SIZE:
                    self._segment_lengths.clear()
                if known:
                    later = known[0]
                elif not exact:
                    later = one_long_path(
                        tree, self.interface, self.tokenizer, memo=self._segment_lengths
                    )
                else:
                    later = longest_continuation(
                        tree, self.interface, self.tokenizer, memo=self._segment_lengths,
                        beyond=room,
                    )  # fmt: skip
                    longest[b].append((base, bare, later, room is None or later <= room))
                return ids, tree, later, interface

            def total(step: Any) -> int:  # the prompt and the longest path after it
                return len(step[0]) + step[2]

            limit = context_limit(self.model)
            encoded, used = fit_to_context(
                encode_step, memory_texts, limit, self.interface, self.budget, length=total
            )  # a prompt must leave room for the tree's longest path
            for b in range(len(encoded)):  # still too long: another tree (LabelTree.refits)
                ids, tree, later, shown = encoded[b]
                if limit is None or len(ids) + later <= limit or tree.depth <= 1:
                    continue
                if self.interface.long_prompts != "shorten":
                    continue  # the model call refuses the path with its length
                # the first refit whose longest path fits; one path of a tree over the
                # context rules it out without measuring every path (the same choice)
                tried: list[tuple[LabelTree, Any]] = []
                best, original = None, trees[b]
                for candidate in tree.iter_refits():
                    trees[b] = candidate
                    if total(encode_step(b, used[b], shown, exact=False)) > limit:
                        tried.append((candidate, None))
                        continue
                    step = encode_step(b, used[b], shown)
                    tried.append((candidate, step))
                    if total(step) <= limit:
                        best = step
                        break
                if best is None:  # none fits: the shortest (the model call then refuses it)
                    trees[b] = original
                    best = encode_step(b, used[b], shown, measure_all=True)
                    for candidate, _ in tried:
                        trees[b] = candidate
                        step = encode_step(b, used[b], shown, measure_all=True)
                        if total(step) < total(best):
                            best = step
                encoded[b] = best  # the first that fits, else the shortest
            prompt_ids = [e[0] for e in encoded]
            trees = [e[1] for e in encoded]  # as shown (shortened steps lose fields)
        with self.timers.time("forward"), torch.no_grad():
            reader = LevelReader(self.model, self.pad_id, self.autocast)
            walks, hidden, tokens = walk_trees(
                reader, trees, prompt_ids, labels=self.labels, interface=self.interface,
                tokenizer=self.tokenizer, temperature=temperature,
                sample=lambda logp: sample_rows(logp, generator=generator, greedy=greedy),
            )  # fmt: skip
            assert hidden is not None
            values = self.value_head(hidden) if self.value_head is not None else None
        self.budget.forward_passes += len(tokens)
        self.budget.tokens_processed += sum(tokens)
        vs = values.tolist() if values is not None else [0.0] * len(trees)
        decisions = []
        for b, (tree, walk) in enumerate(zip(trees, walks)):
            menu = tree.menu
            decisions.append(
                Decision(
                    action=tree.legal_actions[walk.action_index],
                    chosen=menu.permutation.index(walk.action_index),
                    logp=walk.logp,
                    entropy=walk.entropy,
                    label_mass=walk.label_mass,
                    value=vs[b],
                    prompt_ids=prompt_ids[b],
                    label_ids=list(walk.steps[0].label_ids),
                    menu=menu,
                    temperature=temperature,
                    path=walk.steps,
                    tree=tree,
                )
            )
        self.budget.decisions += len(decisions)
        return decisions

    def engine_scores(
        self, prompt_ids: list[list[int]], label_ids: list[list[int]], temperature: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The engine's readout: logp μ (B, K_max) at ``temperature``, label_mass (B,),
        and an empty hidden state (B, 0): the engine has no value head."""
        result = self.engine.readout(prompt_ids, label_ids, temperature=temperature)
        self.budget.forward_passes += 1
        self.budget.tokens_processed += result.num_tokens
        return result.logp, result.label_mass, torch.zeros(len(prompt_ids), 0)

    # --------------------------------------------------------------- re-scoring
    def score_ids(
        self,
        prompt_ids: list[list[int]],
        label_ids: list[list[int]],
        *,
        temperature: float | torch.Tensor = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Readout over stored ids: logp (B, K_max) at ``temperature`` (float or (B,)),
        label_mass (B,), hidden (B, d); on the model's device."""
        label_pad, label_valid = pad_label_ids(label_ids, model_vocab_size(self.model))
        result = readout_from_lists(
            self.model, prompt_ids, label_pad, label_valid, self.pad_id, return_hidden=True,
            temperature=temperature, autocast=self.autocast,
        )  # fmt: skip  # packed into one row where the model allows (rlid.lm.packed)
        self.budget.forward_passes += 1
        self.budget.tokens_processed += result.num_tokens
        assert result.hidden is not None  # return_hidden=True
        return result.logp, result.label_mass, result.hidden

    def score(self, decisions: list[Decision]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Re-score stored decisions with gradients: logp_all (B, K), label_mass (B,), hidden.

        Each decision is re-scored at the temperature it was sampled at. With label
        trees ``logp_all`` is the exact joint over every legal action in the flat menu's
        order (every menu of the tree read: ``rlid.decision.tree_walk.tree_logprobs``) and
        ``label_mass`` the first menu's; the update reads paths instead
        (:meth:`score_paths`).
        """
        if any(d.path for d in decisions):
            trees = [d.tree if d.tree is not None else tree_of_menu(d.menu) for d in decisions]
            logp, mass, hidden, forwards, tokens = tree_logprobs(
                self.model, self.tokenizer, trees, [d.prompt_ids for d in decisions],
                labels=self.labels, interface=self.interface, pad_id=self.pad_id,
                temperature=torch.tensor([d.temperature for d in decisions]),
                autocast=self.autocast, chunk=self.micro_batch_size or 16,
            )  # fmt: skip
            self.budget.forward_passes += forwards
            self.budget.tokens_processed += tokens
            return logp, mass, hidden
        return self.score_ids(
            [d.prompt_ids for d in decisions],
            [d.label_ids for d in decisions],
            temperature=decision_temperatures(decisions),
        )

    def score_paths(self, decisions: list[Decision]) -> PathReadout:
        """Re-score each decision's path (every level, ONE forward), with gradients: the
        update's view of label-tree decisions (a flat decision is a one-level path)."""
        prompts, segments, label_ids = [], [], []
        for d in decisions:
            later, levels = path_segments(d.path) if d.path else ([], [d.label_ids])
            prompts.append(d.prompt_ids)
            segments.append(later)
            label_ids.append(levels)
        result = path_logprobs(
            self.model, prompts, segments, label_ids, self.pad_id,
            temperature=decision_temperatures(decisions), return_hidden=True,
            autocast=self.autocast,
        )  # fmt: skip
        self.budget.forward_passes += 1
        self.budget.tokens_processed += result.num_tokens
        return result


def decision_policy(
    config: Any,
    model: CausalLM,
    tokenizer: Any,
    *,
    value_head: ValueHead | None = None,
    budget: Budget | None = None,
    timers: Timers | None = None,
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
    engine: Any = None,
) -> DecisionPolicy:
    """The decision plane's acting policy for ``config`` (its interface and micro-batch
    size) around ``model`` (``rlid.config.registry``); ``engine``: a rollout engine that plays
    its readout (:class:`DecisionPolicy`)."""
    return DecisionPolicy(
        model, tokenizer, config.interface, value_head=value_head, budget=budget, timers=timers,
        autocast=autocast, micro_batch_size=config.micro_batch_size, engine=engine,
    )  # fmt: skip
