"""Label trees: a menu of any size as a short path of labelled sub-menus (docs/large-menus.md).

When a state has more legal actions than a menu may show (the *fan-out*, by default
the size of the label alphabet), the decision becomes a path: the first menu shows
groups of actions ("move ... to ... (37 actions)") and single actions, the chosen
group opens its own menu, and so on until a row is an action. Every legal action is
the leaf of exactly one path, so a policy that reads each level's labels and
multiplies the chosen rows' probabilities puts positive probability on every legal
action and sums to one.

The tree is a deterministic function of the legal actions, their templates and the
stored shuffle:

* **Grouping** (``grouping="template"``): actions sharing a template
  (``info["action_templates"]``, aligned with the legal actions; else the action's
  first word) form a group; a group of one action is that action's own row. More
  groups than the fan-out are cut into contiguous blocks of groups; a group with more
  actions than the fan-out is split by what fills its template's first slot when the
  template has two or more ("move apple to ... (8 actions)"), else into contiguous
  blocks of actions ("take apple - take cup (9 actions)"); every menu uses up to the
  fan-out's rows, the blocks as equal as can be. ``grouping="blocks"`` skips the templates: the
  legal list is cut into contiguous blocks.
* **Order**: groups and blocks are formed in the legal order (contiguous ranges of
  it); each menu's rows are then displayed in the order of the stored shuffle
  ``permutation`` (the rank of each row's first action), so every action keeps no
  favourite label position. With at most ``fanout`` actions the tree has one level
  whose rows are exactly those of :func:`rlid.menus.menu.compile_menu` with the same
  permutation.

Example::

    >>> legal = ["open door", "open box", "take key", "look"]
    >>> tree = build_label_tree(legal, labels="A-Z", fanout=3)
    >>> print(tree.render_level(()))
    A) open ... (2 actions)
    B) take key
    C) look
    >>> print(tree.render_level((0,)))
    A) open door
    B) open box
    >>> tree.action((0, 1)), tree.path_to(legal.index("look"))
    ('open box', (2,))
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from rlid.menus.labels import LabelSet
from rlid.menus.menu import Menu, MenuRow, check_actions, label_strings_of

Grouping = Literal["template", "blocks"]
GROUPINGS: tuple[str, ...] = ("template", "blocks")
PLACEHOLDER = "..."
PATH_SEPARATOR = "."
"""Joins the labels of a path in the flat menu of a tree (``"B.C"``)."""
# a template's slots: ScienceWorld's OBJ (also OBJ1, ...), TextWorld's {o}, {c}, ...
_SLOT = re.compile(r"\bOBJ\d*\b|\{[^{}]*\}")
_MAX_HEADS = 4  # group heads a block of groups lists before "..."


@dataclass(frozen=True)
class TreeNode:
    """One row of a label tree: an action (a leaf) or a group of rows.

    Attributes:
        text: what the row shows: the action, or ``"open ... (12 actions)"``.
        action: the leaf's index into the legal actions; ``None`` for a group.
        children: a group's rows, in display order (empty for a leaf).
        size: legal actions under this row (1 for a leaf).
        first: the smallest legal index under this row (its place in the legal order).
    """

    text: str
    action: int | None = None
    children: tuple[TreeNode, ...] = ()
    size: int = 1
    first: int = 0

    @property
    def is_leaf(self) -> bool:
        return self.action is not None


@dataclass(frozen=True)
class LabelTree:
    """The label tree of one state: menus along paths of row indices.

    A *path* is a tuple of row indices, one per level: ``()`` is the first menu,
    ``(2,)`` the menu behind its third row, and a path that ends on a leaf names an
    action. Levels use the label set's first labels, like a flat menu.
    """

    legal_actions: tuple[str, ...]
    """The state's legal actions, in the env's order."""
    root: TreeNode
    """The first menu (a group whose children are its rows)."""
    labels: tuple[str, ...]
    """Label strings; a menu of ``n`` rows shows ``labels[:n]``."""
    permutation: tuple[int, ...]
    """The stored shuffle: ``permutation[r]`` is the legal index ranked ``r``."""
    afterstates: tuple[str | None, ...] | None = None
    """One predicted outcome per legal action (leaves show it), or ``None``."""
    memory: str | None = None
    """The rendered memory line shown with the first menu, or ``None``."""
    grouping: Grouping = "template"
    """How the upper levels were grouped (see the module docstring)."""
    fanout: int = 0
    """Most rows of one menu."""
    templates: tuple[str, ...] | None = None
    """Each legal action's template (the grouping's input), or ``None``."""
    row_words: int = 0
    """Most words a row shows (0: all): a longer row keeps its first words and its last
    three, with ``...`` between (:func:`elide`). Only :meth:`refits` sets it, for paths
    that do not fit a model's context otherwise; the actions themselves are unchanged."""
    _leaves: dict[int, tuple[int, ...]] = field(
        init=False, default_factory=dict, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        if self.root.is_leaf or not self.root.children:
            raise ValueError("the root of a label tree is a menu with at least one row")
        paths: dict[int, tuple[int, ...]] = {}
        stack: list[tuple[TreeNode, tuple[int, ...]]] = [(self.root, ())]
        while stack:
            node, path = stack.pop()
            if len(node.children) > len(self.labels):
                raise ValueError(
                    f"a menu of the tree has {len(node.children)} rows but there are only "
                    f"{len(self.labels)} labels"
                )
            for r, child in enumerate(node.children):
                if child.is_leaf:
                    paths[int(child.action)] = (*path, r)  # type: ignore[arg-type]
                else:
                    stack.append((child, (*path, r)))
        if sorted(paths) != list(range(len(self.legal_actions))):
            raise ValueError("every legal action must be the leaf of exactly one path")
        self._leaves.update(paths)

    @property
    def depth(self) -> int:
        """Levels of the longest path (1: a plain menu)."""
        return max(len(path) for path in self._leaves.values())

    @property
    def num_legal(self) -> int:
        return len(self.legal_actions)

    def node(self, path: Sequence[int]) -> TreeNode:
        """The row reached by ``path`` (``()``: the root)."""
        node = self.root
        for r in path:
            if node.is_leaf or not 0 <= r < len(node.children):
                raise KeyError(f"path {tuple(path)} leaves the tree")
            node = node.children[r]
        return node

    def rows(self, path: Sequence[int]) -> tuple[MenuRow, ...]:
        """The menu behind ``path``: labelled rows (afterstates on leaves only)."""
        node = self.node(path)
        if node.is_leaf:
            raise KeyError(f"path {tuple(path)} ends on an action, not a menu")
        return tuple(
            MenuRow(label, elide(child.text, self.row_words), self._afterstate(child))
            for label, child in zip(self.labels, node.children)
        )

    def render_level(self, path: Sequence[int], afterstates: bool | None = None) -> str:
        """One ``"A) row"`` line per row of the menu behind ``path``; leaves show their
        afterstate when ``afterstates`` is not False and the tree has them."""
        show = self.afterstates is not None if afterstates is None else afterstates
        if afterstates and self.afterstates is None:
            raise ValueError(
                "afterstates requested but this tree was built without them; "
                "pass afterstates= to build_label_tree (env built with afterstates=True)"
            )
        return "\n".join(row.render(afterstate=show) for row in self.rows(path))

    def render(self, afterstates: bool | None = None) -> str:
        """The first menu (``render_level(())``), as :meth:`Menu.render` renders a menu."""
        return self.render_level((), afterstates)

    def action(self, path: Sequence[int]) -> str:
        """The legal action at the end of ``path``."""
        node = self.node(path)
        if not node.is_leaf:
            raise KeyError(f"path {tuple(path)} ends on a group ({node.text!r}), not an action")
        return self.legal_actions[int(node.action)]  # type: ignore[arg-type]

    def path_to(self, action_index: int) -> tuple[int, ...]:
        """The rows that lead to legal action ``action_index``."""
        return self._leaves[action_index]

    def menu_paths(self) -> list[tuple[int, ...]]:
        """Every menu's path (the root and each group), depth first in display order."""
        out: list[tuple[int, ...]] = []

        def visit(node: TreeNode, path: tuple[int, ...]) -> None:
            out.append(path)
            for r, child in enumerate(node.children):
                if not child.is_leaf:
                    visit(child, (*path, r))

        visit(self.root, ())
        return out

    @property
    def menu(self) -> Menu:
        """All legal actions as one flat :class:`Menu`, in display order (depth first),
        each labelled by its path's labels joined with ``"."`` (``"B.C"``). A one-level
        tree gives exactly its menu."""
        order = sorted(self._leaves, key=lambda i: self._leaves[i])
        return Menu(
            rows=tuple(
                MenuRow(
                    PATH_SEPARATOR.join(self.labels[r] for r in self._leaves[i]),
                    self.legal_actions[i],
                    None if self.afterstates is None else self.afterstates[i],
                )
                for i in order
            ),
            permutation=tuple(order),
            num_legal=len(self.legal_actions),
            memory=self.memory,
        )

    def narrower(self, fanout: int, grouping: Grouping | None = None) -> LabelTree:
        """The same actions and shuffle with at most ``fanout`` rows per menu, grouped as
        this tree (or by ``grouping``): more levels, shorter menus, or contiguous blocks
        instead of templates (what a long path needs to fit a model's context)."""
        return build_label_tree(
            self.legal_actions, self.afterstates, self.memory, labels=self.labels,  # type: ignore[arg-type]
            templates=self.templates, permutation=self.permutation, fanout=fanout,
            grouping=grouping or self.grouping,
        )  # fmt: skip

    def refits(self) -> list[LabelTree]:
        """The trees to try, in order, when this one's longest path does not fit the
        context: the same grouping at half the fan-out, and half again (down to 2), then
        contiguous blocks at this fan-out and narrower. Template groups name long rows
        ("connect ... to ... (1892 actions)") and can nest deeply; blocks keep every
        level's menu to plain actions, which on ScienceWorld's largest states gives paths
        half as long (2,723 actions: 748 tokens against 1,462)."""
        return list(self.iter_refits())

    def iter_refits(self) -> Iterator[LabelTree]:
        """:meth:`refits` one at a time, each built when asked for (a caller that stops
        at the first that fits builds no more)."""
        fanouts = []
        f = self.fanout
        while f > 2:
            f = max(2, f // 2)
            fanouts.append(f)
        blocks: list[LabelTree] = []
        if self.grouping == "blocks":  # these are the block trees already
            blocks.append(replace(self, row_words=0))
        for f in fanouts:
            tree = self.narrower(f)
            if self.grouping == "blocks":
                blocks.append(tree)
            yield tree
        if self.grouping != "blocks":
            for f in [self.fanout, *fanouts]:
                tree = self.narrower(f, "blocks")
                blocks.append(tree)
                yield tree
        # last: the same block trees with rows cut to a few words (ScienceWorld names
        # objects by their contents: "flower pot containing apple tree and ... soil")
        for words in ELIDED_ROW_WORDS:
            for tree in blocks:
                yield replace(tree, row_words=words)

    def _afterstate(self, node: TreeNode) -> str | None:
        if not node.is_leaf or self.afterstates is None:
            return None
        return self.afterstates[int(node.action)]  # type: ignore[arg-type]


def group_key(action: str, template: str | None) -> str:
    """What groups an action: its template when the env gives one, else its first word."""
    return template if template else action.split()[0]


def group_head(key: str, from_template: bool) -> str:
    """A group's row text before its count: ``"move OBJ to OBJ"`` -> ``"move ... to ..."``,
    ``"take"`` (a first word) -> ``"take ..."``."""
    if from_template and _SLOT.search(key):
        return _SLOT.sub(PLACEHOLDER, key)
    return f"{key} {PLACEHOLDER}"


ELIDED_ROW_WORDS = (8, 5)
"""The row lengths (words) :meth:`LabelTree.refits` tries last, longest first."""


def elide(text: str, words: int) -> str:
    """``text`` cut to ``words`` words (0: unchanged): its first ``words - 3``, ``...``,
    and its last three (a range's end and its count stay readable)."""
    parts = text.split()
    if words <= 0 or len(parts) <= words:
        return text
    head = max(1, words - 3)
    return " ".join([*parts[:head], PLACEHOLDER, *parts[-3:]])


def _count(size: int) -> str:
    return f"({size} actions)"


def _node(text: str, children: list[TreeNode], rank: Sequence[int]) -> TreeNode:
    """A group row over ``children`` (given in legal order), displayed in shuffle order."""
    shown = tuple(sorted(children, key=lambda child: rank[child.first]))
    return TreeNode(
        text, None, shown, sum(c.size for c in children), min(c.first for c in children)
    )


def _block_text(items: list[TreeNode], heads: list[str]) -> str:
    size = sum(item.size for item in items)
    if all(item.is_leaf for item in items):  # a range of the legal order
        first, last = items[0].text.split(), items[-1].text.split()
        shared = 0  # the last action without the words it shares with the first
        while shared < min(len(first), len(last)) - 1 and first[shared] == last[shared]:
            shared += 1
        return f"{items[0].text} - {' '.join(last[shared:])} {_count(size)}"
    shown = heads[:_MAX_HEADS] + ([PLACEHOLDER] if len(heads) > _MAX_HEADS else [])
    return f"{', '.join(shown)} {_count(size)}"


def _blocks(
    items: list[TreeNode], heads: list[str], fanout: int, rank: Sequence[int]
) -> list[TreeNode]:
    """``items`` (legal order; ``heads``: each one's text without its count) as at most
    ``fanout`` rows: ``fanout`` contiguous blocks as equal as can be, each blocked again
    until it fits (a block of one item is that item's own row)."""
    if len(items) <= fanout:
        return items
    # every row of the menu used: blocks of at most ceil(n / fanout) items, so the
    # levels below are as few as the fan-out allows and short blocks end sooner
    base, extra = divmod(len(items), fanout)
    count = fanout
    out: list[TreeNode] = []
    start = 0
    for b in range(count):
        stop = start + base + (1 if b < extra else 0)
        part, part_heads = items[start:stop], heads[start:stop]
        if len(part) == 1:
            out.append(part[0])
        else:
            children = _blocks(part, part_heads, fanout, rank)
            out.append(_node(_block_text(part, part_heads), children, rank))
        start = stop
    return out


def build_tree_root(
    legal_actions: Sequence[str],
    templates: Sequence[str] | None,
    rank: Sequence[int],
    fanout: int,
    grouping: Grouping = "template",
) -> TreeNode:
    """The root of the label tree (see the module docstring); ``rank[i]`` is legal
    action ``i``'s place in the shuffle."""
    leaves = [TreeNode(action, i, (), 1, i) for i, action in enumerate(legal_actions)]
    if len(leaves) <= fanout:
        return _node("", leaves, rank)
    groups: dict[str, list[TreeNode]] = {}
    if grouping == "template":
        for leaf in leaves:
            key = group_key(leaf.text, None if templates is None else templates[leaf.first])
            groups.setdefault(key, []).append(leaf)
    if len(groups) <= 1:  # no grouping, or every action shares one template
        template = next(iter(groups)) if groups and templates is not None else None
        return _node("", _group_rows(leaves, template, fanout, rank), rank)
    items: list[TreeNode] = []
    heads: list[str] = []
    for key, members in groups.items():
        head = group_head(key, templates is not None)
        if len(members) == 1:
            items.append(members[0])
            heads.append(members[0].text)
        else:
            template = key if templates is not None else None
            children = _group_rows(members, template, fanout, rank)
            items.append(_node(f"{head} {_count(len(members))}", children, rank))
            heads.append(head)
    return _node("", _blocks(items, heads, fanout, rank), rank)


def _group_rows(
    members: list[TreeNode], template: str | None, fanout: int, rank: Sequence[int]
) -> list[TreeNode]:
    """The rows of a group: its actions when they fit; else, for a template of two or
    more slots, sub-groups by what fills the first slot ("move apple to ... (8
    actions)"); else contiguous blocks."""
    slots = _SLOT.findall(template) if template and len(members) > fanout else []
    if len(slots) >= 2:
        fillers = _first_fillers(tuple(m.text for m in members), template)
        subs: dict[str, list[TreeNode]] = {}
        for member, filler in zip(members, fillers):
            subs.setdefault(filler, []).append(member)
        if fillers and 1 < len(subs) < len(members):
            items: list[TreeNode] = []
            heads: list[str] = []
            for filler, group in subs.items():
                named = _SLOT.sub(lambda _, f=filler: f, template, count=1)  # type: ignore[arg-type,misc]
                head = _SLOT.sub(PLACEHOLDER, named)
                if len(group) == 1:
                    items.append(group[0])
                    heads.append(group[0].text)
                else:
                    children = _blocks(group, [m.text for m in group], fanout, rank)
                    items.append(_node(f"{head} {_count(len(group))}", children, rank))
                    heads.append(head)
            return _blocks(items, heads, fanout, rank)
    return _blocks(members, [m.text for m in members], fanout, rank)


@functools.lru_cache(maxsize=256)
def _first_fillers(actions: tuple[str, ...], template: str) -> tuple[str, ...]:
    """What fills ``template``'s first slot in each action (() if some action does not
    match it). Object names may hold the template's own words ("connect door to kitchen
    to wire" under "connect OBJ to OBJ"), so of an action's readings the longest that
    names an object is kept: a text some action of the group has in its last slot
    (when the template ends with one); else the shortest reading. Kept for the same
    group (the trees a state is refit to group it again at other fan-outs)."""
    parts = _SLOT.split(template)
    rest = re.compile("(.+?)".join(re.escape(part) for part in parts[1:]))
    readings: list[list[str]] = []
    objects: set[str] = set()
    for action in actions:
        if not action.startswith(parts[0]) or not action.endswith(parts[-1]):
            return ()
        body = action[len(parts[0]) :]
        found = [
            body[:cut]
            for cut in range(1, len(body))
            if body.startswith(parts[1], cut) and rest.fullmatch(body[cut:])
        ]
        if not found:
            return ()
        readings.append(found)
        if parts[-1] == "":  # every text after the last separator may be an object
            sep = parts[-2]
            objects.update(
                action[i + len(sep) :] for i in range(len(action)) if action.startswith(sep, i)
            )
    return tuple(
        max((f for f in found if f in objects), key=len, default=found[0]) for found in readings
    )


def build_label_tree(
    legal_actions: Sequence[str],
    afterstates: Sequence[str] | None = None,
    memory: str | None = None,
    *,
    labels: LabelSet | str | Sequence[str],
    templates: Sequence[str] | None = None,
    permutation: Sequence[int] | None = None,
    fanout: int | None = None,
    grouping: Grouping = "template",
) -> LabelTree:
    """The label tree of one state.

    Args:
        legal_actions: distinct, non-empty, single-line action strings.
        afterstates: one predicted outcome per legal action (leaves show it), or None.
        memory: the rendered memory line of the first menu, or None.
        labels: a :class:`LabelSet`, an alphabet spec or label strings.
        templates: each legal action's template (``info["action_templates"]``), or
            None (group by first word).
        permutation: the stored shuffle (``rng.permutation(K)``); None: legal order.
        fanout: most rows of a menu (default and most: the number of labels; >= 2).
        grouping: ``"template"`` or ``"blocks"`` (module docstring).
    """
    legal = list(legal_actions)
    check_actions(legal)
    label_strings = label_strings_of(labels)
    fanout = len(label_strings) if fanout is None else fanout
    if not 2 <= fanout <= len(label_strings):
        raise ValueError(
            f"a label tree's fan-out must be between 2 and the {len(label_strings)} labels, "
            f"got {fanout}"
        )
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {GROUPINGS}, got {grouping!r}")
    order = list(range(len(legal))) if permutation is None else [int(i) for i in permutation]
    if sorted(order) != list(range(len(legal))):
        raise ValueError(f"permutation must be a permutation of range({len(legal)})")
    for name, aligned in (("afterstates", afterstates), ("templates", templates)):
        if aligned is not None and len(aligned) != len(legal):
            raise ValueError(
                f"{name} must align with legal_actions: {len(aligned)} {name} for "
                f"{len(legal)} legal actions"
            )
    rank = [0] * len(legal)
    for r, i in enumerate(order):
        rank[i] = r
    root = build_tree_root(
        legal, None if templates is None else list(templates), rank, fanout, grouping
    )
    return LabelTree(
        legal_actions=tuple(legal),
        root=root,
        labels=tuple(label_strings),
        permutation=tuple(order),
        afterstates=None if afterstates is None else tuple(afterstates),
        memory=memory,
        grouping=grouping,
        fanout=fanout,
        templates=None if templates is None else tuple(templates),
    )


def tree_of_menu(menu: Menu) -> LabelTree:
    """A flat :class:`Menu` (no dropped rows) as a one-level tree, rows in its order."""
    if menu.dropped:
        raise ValueError("a truncated menu is not a tree of every legal action")
    legal: list[str] = [""] * menu.num_legal
    after: list[str | None] = [None] * menu.num_legal
    for row, i in zip(menu.rows, menu.permutation):
        legal[i], after[i] = row.action, row.afterstate
    leaves = tuple(TreeNode(row.action, i, (), 1, i) for row, i in zip(menu.rows, menu.permutation))
    return LabelTree(
        legal_actions=tuple(legal),
        root=TreeNode("", None, leaves, len(leaves), 0),
        labels=menu.labels,
        permutation=menu.permutation,
        afterstates=tuple(after) if menu.has_afterstates else None,
        memory=menu.memory,
        fanout=len(menu.rows),
    )
