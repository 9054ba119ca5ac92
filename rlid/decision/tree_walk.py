"""Acting on label trees: walk each tree level by level, and score whole trees exactly.

A decision over a :class:`rlid.menus.tree.LabelTree` samples a row at level 1 (one forward
over the prompts), and while the row is a group, reads the group's menu on the KV cache
(:class:`rlid.lm.tree_readout.LevelReader`) and samples again. The walk stores, per level,
the tokens it appended, the label ids it read, the row it chose and that row's
log-probability, so the update re-scores exactly that event (:func:`path_segments`).

The policy of a leaf is the product of its path's rows:
``log pi(a|s) = sum_l log pi_l(row_l | s, path_<l)``. :func:`tree_logprobs` scores every
menu of a tree (one sequence per group) and gives that joint over every legal action,
exactly: it sums to one and no action is left out (tests check both on > 200 actions).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from rlid.core.records import PathStep
from rlid.lm.models import CausalLM
from rlid.lm.optim import chunks
from rlid.lm.tree_readout import LevelReader, path_logprobs
from rlid.menus import Interface, LabelSet, label_context
from rlid.menus.tokens import continuation_ids, encode_prompt
from rlid.menus.tree import LabelTree
from rlid.menus.tree_prompt import level_continuation

Ids = list[int]


@dataclass(frozen=True)
class TreeWalk:
    """One decision's walk: its levels, the rows they chose and the action reached."""

    steps: tuple[PathStep, ...]
    path: tuple[int, ...]
    action_index: int

    @property
    def logp(self) -> float:
        """log pi(a|s): the sum of the levels' log-probs."""
        return float(sum(s.logp for s in self.steps))

    @property
    def entropy(self) -> float:
        """The levels' exact entropies summed along the path: an unbiased estimate of the
        joint entropy (chain rule: H(a) = H(row_1) + E[H(row_2 | row_1)] + ...)."""
        return float(sum(s.entropy for s in self.steps))

    @property
    def label_mass(self) -> float:
        """The product of the levels' label masses."""
        return float(math.prod(s.label_mass for s in self.steps))


def _segment_text(
    tree: LabelTree,
    path: Sequence[int],
    reading: tuple[str, str],
    interface: Interface,
    tokenizer: Any,
) -> tuple[str, str]:
    """``(prompt, text)`` of the segment after the menu that chose ``path[-1]``: the
    reading context (``reading = label_context(interface, tokenizer)``) and that row's
    label, then the menu behind ``path`` up to where its label is read."""
    label = tree.labels[path[-1]]
    return reading[0] + reading[1] + label, level_continuation(
        tree, path, label, interface, tokenizer
    )


def segment_ids(
    tree: LabelTree,
    path: Sequence[int],
    labels: LabelSet,
    interface: Interface,
    tokenizer: Any,
) -> Ids:
    """The tokens after the menu that chose ``path[-1]``: that row's label, then the
    menu behind ``path`` up to where its label is read, tokenised as in the text
    (after the reading context and the label: ``rlid.menus.tokens.continuation_ids``)."""
    prompt, text = _segment_text(
        tree, path, label_context(interface, tokenizer), interface, tokenizer
    )
    _, (ids,) = continuation_ids(tokenizer, prompt, [text])
    return [labels.token_ids[path[-1]], *ids]


def _segment_length(
    segment: tuple[str, str],
    tokenizer: Any,
    lengths: dict[tuple[str, str], int],
    prompts: dict[str, list[int]],
) -> int:
    """``len(segment_ids(...))`` of the segment ``(prompt, text)`` (:func:`_segment_text`),
    through the memo ``lengths``: the label's one token, then the menu's ids. ``prompts``
    keeps each reading prompt's ids (one per label) for the caller's other segments."""
    n = lengths.get(segment)
    if n is None:
        prompt = segment[0]
        ids = prompts.get(prompt)
        if ids is None:
            ids = prompts[prompt] = encode_prompt(tokenizer, prompt)
        _, (added,) = continuation_ids(tokenizer, prompt, [segment[1]], prompt_ids=ids)
        n = lengths[segment] = 1 + len(added)
    return n


def longest_continuation(
    tree: LabelTree,
    interface: Interface,
    tokenizer: Any,
    *,
    memo: dict[tuple[str, str], int] | None = None,
    beyond: int | None = None,
) -> int:
    """The most tokens the later levels of ``tree`` append to its prompt, over every
    path: exactly the longest sum of :func:`segment_ids` along a path (what a walk
    appends), so a tree whose first prompt plus this fits the context never meets a
    longer path.

    ``beyond``: the first path found to append more than ``beyond`` tokens ends the
    search and its length is returned (more than ``beyond``, at most the longest): all a
    caller asking whether the tree fits ``beyond`` needs, without tokenising the rest.

    ``memo`` (kept by the caller for one tokenizer and interface) maps a segment's
    ``(reading prompt, menu text)`` to its token count: the same menus recur from state
    to state of a game, and their tokenisation was most of this function's cost."""
    reading = label_context(interface, tokenizer)
    lengths = {} if memo is None else memo
    added: dict[tuple[int, ...], int] = {(): 0}
    prompts: dict[str, list[int]] = {}
    for path in tree.menu_paths():  # parents before their groups
        if path:
            segment = _segment_text(tree, path, reading, interface, tokenizer)
            size = _segment_length(segment, tokenizer, lengths, prompts)
            added[path] = added[path[:-1]] + size
            if beyond is not None and added[path] > beyond:
                return added[path]
    return max(added.values())


def one_long_path(
    tree: LabelTree,
    interface: Interface,
    tokenizer: Any,
    *,
    memo: dict[tuple[str, str], int] | None = None,
) -> int:
    """The tokens one path appends: at each level the group whose menu text is longest
    (the first of equals). A lower bound of :func:`longest_continuation` that tokenises
    one menu per level instead of every menu: a prompt plus this over the context rules
    the tree out exactly. ``memo``: as there."""
    reading = label_context(interface, tokenizer)
    lengths = {} if memo is None else memo
    total, node = 0, tree.root
    path: tuple[int, ...] = ()
    prompts: dict[str, list[int]] = {}
    while True:
        segments = {
            (*path, r): _segment_text(tree, (*path, r), reading, interface, tokenizer)
            for r, child in enumerate(node.children)
            if not child.is_leaf
        }
        if not segments:
            return total
        path = max(segments, key=lambda g: len(segments[g][1]))  # the first of equals
        total += _segment_length(segments[path], tokenizer, lengths, prompts)
        node = node.children[path[-1]]


def row_entropy(logp: torch.Tensor) -> torch.Tensor:
    """Exact entropy of each row's distribution (n, W), -inf padded -> (n,)."""
    probs = logp.exp()
    return -(probs * torch.where(probs > 0, logp, 0.0)).sum(-1)


def walk_trees(
    reader: LevelReader,
    trees: Sequence[LabelTree],
    prompt_ids: Sequence[Ids],
    *,
    labels: LabelSet,
    interface: Interface,
    tokenizer: Any,
    sample: Callable[[torch.Tensor], torch.Tensor],
    temperature: float = 1.0,
) -> tuple[list[TreeWalk], torch.Tensor | None, list[int]]:
    """Walk every tree from its first menu to an action, one forward per level.

    ``sample(logp (n, W)) -> rows (n,)`` draws each level's rows (``rlid.decision.policy``'s
    sampler: greedy or from the generator). Returns the walks, the hidden state where
    level 1 was read (B, d), and the non-pad tokens each forward processed.
    """
    label_rows = [list(labels.token_ids[: len(tree.root.children)]) for tree in trees]
    level = reader.first(prompt_ids, label_rows, temperature=temperature, return_hidden=True)
    hidden = level.hidden
    tokens = [level.num_tokens]
    steps: list[list[PathStep]] = [[] for _ in trees]
    paths: list[tuple[int, ...]] = [() for _ in trees]
    segments: list[tuple[int, ...]] = [() for _ in trees]
    active = list(range(len(trees)))
    while True:
        chosen = sample(level.logp)
        picked = level.logp.gather(1, chosen[:, None]).squeeze(1)
        rows, logps = chosen.tolist(), picked.tolist()
        entropies, masses = row_entropy(level.logp).tolist(), level.label_mass.tolist()
        going, next_segments, next_labels = [], [], []
        for j, b in enumerate(active):
            steps[b].append(
                PathStep(segments[b], tuple(label_rows[b]), rows[j], logps[j], entropies[j],
                         masses[j])
            )  # fmt: skip
            paths[b] = (*paths[b], rows[j])
            node = trees[b].node(paths[b])
            if node.is_leaf:
                continue
            segments[b] = tuple(segment_ids(trees[b], paths[b], labels, interface, tokenizer))
            label_rows[b] = list(labels.token_ids[: len(node.children)])
            going.append(j)
            next_segments.append(list(segments[b]))
            next_labels.append(label_rows[b])
        if not going:
            break
        level = reader.next(going, next_segments, next_labels, temperature=temperature)
        tokens.append(level.num_tokens)
        active = [active[j] for j in going]
    walks = [
        TreeWalk(tuple(s), p, int(tree.node(p).action))  # type: ignore[arg-type]
        for s, p, tree in zip(steps, paths, trees)
    ]
    return walks, hidden, tokens


def path_segments(steps: Sequence[PathStep]) -> tuple[list[Ids], list[Ids]]:
    """A walk's later segments and every level's label ids (``path_logprobs``' inputs)."""
    return [list(s.segment) for s in steps[1:]], [list(s.label_ids) for s in steps]


def tree_logprobs(
    model: CausalLM,
    tokenizer: Any,
    trees: Sequence[LabelTree],
    prompt_ids: Sequence[Ids],
    *,
    labels: LabelSet,
    interface: Interface,
    pad_id: int,
    temperature: float | torch.Tensor = 1.0,
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
    chunk: int | None = 16,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
    """The exact joint policy over every legal action of each tree, with gradients.

    Every menu of every tree (the root and each group) is read by one path sequence
    (:func:`rlid.lm.tree_readout.path_logprobs`, ``chunk`` sequences per forward), and
    each action's log-probability is the sum of its path's rows.

    Returns ``logp`` (B, K_max) in each tree's flat-menu order (``LabelTree.menu``),
    -inf padded; the first menu's label mass (B,); the hidden state where level 1 is
    read (B, d); the forwards run and the tokens processed.
    """
    temps = (
        temperature.tolist()
        if isinstance(temperature, torch.Tensor)
        else [temperature] * len(trees)
    )
    jobs: list[tuple[int, tuple[int, ...]]] = []  # (tree, menu path)
    for b, tree in enumerate(trees):
        jobs += [(b, path) for path in tree.menu_paths()]
    level_logp: dict[tuple[int, tuple[int, ...]], torch.Tensor] = {}
    first_mass: list[torch.Tensor] = [torch.ones(())] * len(trees)
    hidden: list[torch.Tensor | None] = [None] * len(trees)
    forwards = tokens = 0
    for part in chunks(len(jobs), chunk):
        batch = jobs[part]
        segs: list[list[Ids]] = []
        label_lists: list[list[Ids]] = []
        for b, path in batch:
            tree = trees[b]
            segs.append(
                [segment_ids(tree, path[: j + 1], labels, interface, tokenizer)
                 for j in range(len(path))]
            )  # fmt: skip
            label_lists.append(
                [list(labels.token_ids[: len(tree.node(path[:j]).children)])
                 for j in range(len(path) + 1)]
            )  # fmt: skip
        read = path_logprobs(
            model, [prompt_ids[b] for b, _ in batch], segs, label_lists, pad_id,
            temperature=torch.tensor([temps[b] for b, _ in batch], dtype=torch.float32),
            return_hidden=True, autocast=autocast,
        )  # fmt: skip
        forwards += 1
        tokens += read.num_tokens
        assert read.hidden is not None
        for n, (b, path) in enumerate(batch):
            level_logp[(b, path)] = read.logp[n, len(path)]
            if not path:
                first_mass[b], hidden[b] = read.label_mass[n, 0], read.hidden[n]
    width = max(tree.num_legal for tree in trees)
    device = next(iter(level_logp.values())).device
    rows = []
    for b, tree in enumerate(trees):
        leaves = tree.menu.permutation
        joint = [
            sum(level_logp[(b, path[:j])][path[j]] for j in range(len(path)))
            for path in (tree.path_to(i) for i in leaves)
        ]
        row = torch.stack(joint)  # type: ignore[arg-type]
        rows.append(torch.nn.functional.pad(row, (0, width - len(row)), value=-torch.inf))
    logp = torch.stack(rows).to(device)
    return logp, torch.stack(first_mass), torch.stack(hidden), forwards, tokens  # type: ignore[arg-type]
