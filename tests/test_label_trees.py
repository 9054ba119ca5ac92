"""Label trees in menus/ (no torch): every legal action is reachable exactly once, menus
fit the fan-out, a tree is a deterministic function of (actions, templates, shuffle),
and a state whose actions fit is exactly today's flat menu."""

from __future__ import annotations

import string
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlid.lm.tokenizer import build_tiny_tokenizer
from rlid.menus import Interface, compile_menu, menu_for_step, render_token_prompt
from rlid.menus.tree import LabelTree, build_label_tree, elide, group_head, tree_of_menu
from rlid.menus.tree_prompt import level_continuation, tree_for_step

ALPHABET = tuple(string.ascii_uppercase)
VERBS = ("open", "close", "take", "move", "focus on", "look at", "pour")
OBJECTS = ("apple", "cup", "jar", "box", "key", "coin", "lamp", "map", "vase", "rope")
fast = settings(max_examples=40, deadline=None)


def science_menu(size: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``size`` distinct ScienceWorld-like actions with their templates."""
    rng = np.random.default_rng(seed)
    actions: dict[str, str] = {"look around": "look around", "inventory": "inventory"}
    while len(actions) < size:
        verb = VERBS[int(rng.integers(len(VERBS)))]
        a, b = (OBJECTS[int(i)] for i in rng.integers(len(OBJECTS), size=2))
        if verb in ("move", "pour"):
            joint = "to" if verb == "move" else "into"
            actions[f"{verb} {a}{int(rng.integers(30))} {joint} {b}"] = f"{verb} OBJ {joint} OBJ"
        else:
            actions[f"{verb} {a}{int(rng.integers(30))}"] = f"{verb} OBJ"
    return list(actions), list(actions.values())


def walk_all(tree: LabelTree) -> list[tuple[tuple[int, ...], int]]:
    """(path, action index) of every leaf, by walking the rows."""
    out, stack = [], [()]
    while stack:
        path = stack.pop()
        for r, row in enumerate(tree.node(path).children):
            if row.is_leaf:
                out.append(((*path, r), row.action))
            else:
                stack.append((*path, r))
    return out


@fast
@given(
    size=st.integers(1, 450),
    fanout=st.integers(2, 26),
    seed=st.integers(0, 2**16),
    grouping=st.sampled_from(["template", "blocks"]),
    with_templates=st.booleans(),
)
def test_every_action_is_the_leaf_of_exactly_one_path(size, fanout, seed, grouping, with_templates):
    legal, templates = science_menu(size, seed)
    order = np.random.default_rng(seed).permutation(len(legal))
    tree = build_label_tree(
        legal, labels=ALPHABET, templates=templates if with_templates else None,
        permutation=order, fanout=fanout, grouping=grouping,
    )  # fmt: skip
    leaves = walk_all(tree)
    assert sorted(i for _, i in leaves) == list(range(len(legal)))
    for path, i in leaves:
        assert tree.action(path) == legal[i] and tree.path_to(i) == path
    for path in tree.menu_paths():  # every menu fits the fan-out and sizes add up
        node = tree.node(path)
        assert 1 <= len(node.children) <= fanout
        assert node.size == sum(child.size for child in node.children)
        assert path == () or len(node.children) >= 2  # no menu of one row
    assert tree.node(()).size == len(legal)
    # the flat menu lists every action once, labelled by its path
    menu = tree.menu
    assert sorted(menu.actions) == sorted(legal) and menu.dropped == ()
    for row, i in zip(menu.rows, menu.permutation):
        assert row.label == ".".join(ALPHABET[r] for r in tree.path_to(i))
    # balanced blocks: a tree never needs more levels than two plus ceil(log_F K)
    assert tree.depth <= 2 + int(np.ceil(np.log(max(len(legal), 2)) / np.log(fanout)))


@fast
@given(size=st.integers(1, 26), seed=st.integers(0, 2**16))
def test_a_state_that_fits_is_exactly_the_flat_menu(size, seed):
    legal, templates = science_menu(size, seed)
    after = [f"outcome {i}" for i in range(len(legal))]
    info = {"legal_actions": legal, "afterstates": after, "action_templates": templates}
    flat_rng, tree_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    flat = menu_for_step(info, Interface(overflow="error"), ALPHABET, "mem", flat_rng)
    step = tree_for_step(info, Interface(), ALPHABET, "mem", tree_rng)
    assert step == flat
    assert flat_rng.random() == tree_rng.random()  # the same draws from the shuffle rng
    tree = build_label_tree(
        legal, after, "mem", labels=ALPHABET, templates=templates, permutation=flat.permutation
    )
    assert tree.depth == 1 and tree.menu == flat and tree.render() == flat.render()
    assert tree_of_menu(flat).menu == flat


def test_larger_states_consume_the_shuffle_rng_like_a_flat_menu():
    legal, templates = science_menu(120)
    info = {"legal_actions": legal, "afterstates": None, "action_templates": templates}
    interface = Interface(afterstates=False)
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    tree = tree_for_step(info, interface, ALPHABET, None, a)
    assert isinstance(tree, LabelTree) and tree.depth >= 2
    assert list(tree.permutation) == list(b.permutation(len(legal)))
    assert a.random() == b.random()
    again = tree_for_step(info, interface, ALPHABET, None, np.random.default_rng(5))
    assert again == tree and again.render() == tree.render()  # deterministic


def test_rows_are_grouped_by_template_and_shown_in_shuffle_order():
    legal = ["open cup", "open jar", "move apple to cup", "move apple to jar", "look around"]
    templates = ["open OBJ", "open OBJ", "move OBJ to OBJ", "move OBJ to OBJ", "look around"]
    tree = build_label_tree(legal, labels="A-D", templates=templates, fanout=3)
    assert tree.render().split("\n") == [
        "A) open ... (2 actions)",
        "B) move ... to ... (2 actions)",
        "C) look around",
    ]
    # the shuffle decides the display order (rank of each row's first action)
    shuffled = build_label_tree(
        legal, labels="A-D", templates=templates, fanout=3, permutation=[4, 2, 3, 1, 0]
    )
    assert shuffled.render().split("\n") == [
        "A) look around",
        "B) move ... to ... (2 actions)",
        "C) open ... (2 actions)",
    ]
    assert shuffled.render_level((2,)).split("\n") == ["A) open jar", "B) open cup"]
    # without templates: the first word; "blocks": contiguous ranges of the legal order
    assert build_label_tree(legal, labels="A-D", fanout=3).node((1,)).text == "move ... (2 actions)"
    blocks = build_label_tree(legal, labels="A-D", fanout=3, grouping="blocks")
    assert [row.text for row in blocks.node(()).children] == [
        "open cup - jar (2 actions)",  # the range's last action less the shared words
        "move apple to cup - jar (2 actions)",
        "look around",
    ]  # fan-out 3: three blocks of 2, 2 and 1 rows
    assert group_head("pour OBJ into OBJ", True) == "pour ... into ..."
    assert group_head("take {o} from {c}", True) == "take ... from ..."


def test_a_large_group_of_a_two_slot_template_splits_by_its_first_object():
    objects = ["apple", "ball", "coin"]
    boxes = ["cup", "jar", "bowl", "tray"]
    legal = [f"move {o} to {b}" for o in objects for b in boxes] + ["look"]
    templates = ["move OBJ to OBJ"] * 12 + ["look"]
    tree = build_label_tree(legal, labels=ALPHABET, templates=templates, fanout=5)
    assert tree.render().split("\n") == ["A) move ... to ... (12 actions)", "B) look"]
    assert tree.render_level((0,)).split("\n") == [
        "A) move apple to ... (4 actions)",
        "B) move ball to ... (4 actions)",
        "C) move coin to ... (4 actions)",
    ]
    assert tree.action((0, 1, 2)) == "move ball to bowl"


def test_a_tree_too_long_for_the_context_is_refit_narrower_then_as_blocks():
    objects = ["apple", "ball", "coin", "disk"]
    boxes = ["cup", "jar", "bowl", "tray", "box", "bin"]
    legal = [f"move {o} to {b}" for o in objects for b in boxes] + ["look", "wait"]
    templates = ["move OBJ to OBJ"] * 24 + ["look", "wait"]
    tree = build_label_tree(legal, labels=ALPHABET, templates=templates, fanout=8)
    refits = tree.refits()
    # the same grouping at half the fan-out and half again, then blocks from the full one,
    # then those block trees with rows cut to 8 words, then to 5
    assert [(t.grouping, t.fanout, t.row_words) for t in refits] == [
        ("template", 4, 0), ("template", 2, 0), ("blocks", 8, 0), ("blocks", 4, 0),
        ("blocks", 2, 0), ("blocks", 8, 8), ("blocks", 4, 8), ("blocks", 2, 8),
        ("blocks", 8, 5), ("blocks", 4, 5), ("blocks", 2, 5),
    ]  # fmt: skip
    for t in refits:  # every one is a tree over the same actions, in the same shuffle
        assert sorted(t.legal_actions) == sorted(legal) and t.permutation == tree.permutation
        assert sorted(i for _, i in walk_all(t)) == list(range(len(legal)))
        assert max(len(t.node(p).children) for p in t.menu_paths()) <= t.fanout
    assert (
        build_label_tree(legal, labels=ALPHABET, fanout=4, grouping="blocks").refits()[-1].fanout
        == 2
    )
    blocks = build_label_tree(legal, labels=ALPHABET, fanout=8, grouping="blocks")
    assert [(t.grouping, t.fanout, t.row_words) for t in blocks.refits()] == [
        ("blocks", 4, 0), ("blocks", 2, 0), ("blocks", 8, 8), ("blocks", 4, 8),
        ("blocks", 2, 8), ("blocks", 8, 5), ("blocks", 4, 5), ("blocks", 2, 5),
    ]  # fmt: skip


def test_refits_are_built_one_at_a_time(monkeypatch):
    import rlid.menus.tree as tree_mod

    legal = [f"take {o} from {b}" for o in "abcdefgh" for b in ("cup", "jar", "box")]
    tree = build_label_tree(legal, labels=ALPHABET, fanout=8)
    built = []
    real = tree_mod.build_label_tree
    monkeypatch.setattr(
        tree_mod, "build_label_tree", lambda *a, **k: built.append(1) or real(*a, **k)
    )
    refits = tree.iter_refits()
    first = next(refits)  # the policy stops at the first that fits: nothing else built
    assert len(built) == 1 and (first.grouping, first.fanout) == ("template", 4)
    rest = list(refits)
    assert [first, *rest] == tree.refits()


def test_elided_rows_keep_their_first_words_and_last_three():
    text = "move orange to flower pot containing apple tree and pollen and soil (12 actions)"
    assert elide(text, 8) == "move orange to flower pot ... soil (12 actions)"
    assert elide(text, 5) == "move orange ... soil (12 actions)"
    assert elide(text, 0) == text and elide("look around", 5) == "look around"
    legal = [f"move {o} to flower pot containing {o} and soil" for o in ("apple", "pea", "rose")]
    tree = build_label_tree(legal, labels=ALPHABET, fanout=2, grouping="blocks")
    short = replace(tree, row_words=5)
    assert [row.action for row in short.rows(())] == [
        "move apple ... soil (2 actions)", "move rose ... rose and soil",
    ]  # fmt: skip  # the rows are cut; the actions are not
    assert [short.action(p) for p, _ in walk_all(short)] == [
        tree.action(p) for p, _ in walk_all(tree)
    ]
    assert short.path_to(2) == tree.path_to(2)


def test_object_names_holding_the_templates_words_are_read_as_objects():
    objects = ["door to kitchen", "door to hall", "lamp", "wire"]
    legal = [f"connect {a} to {b}" for a in objects for b in objects if a != b]
    templates = ["connect OBJ to OBJ"] * len(legal)
    tree = build_label_tree(legal, labels=ALPHABET, templates=templates, fanout=5)
    assert sorted(row.text for row in tree.node(()).children) == [
        f"connect {name} to ... (3 actions)" for name in sorted(objects)
    ]


def test_afterstates_show_on_actions_only():
    legal = ["open cup", "open jar", "look"]
    tree = build_label_tree(legal, ["cup open", "jar open", "nothing"], labels="A-B")
    assert tree.render().split("\n") == ["A) open ... (2 actions)", "B) look -> nothing"]
    assert tree.render_level((0,)).split("\n") == [
        "A) open cup -> cup open",
        "B) open jar -> jar open",
    ]
    assert "->" not in tree.render(afterstates=False)


def test_bad_trees_are_refused_with_clear_errors():
    with pytest.raises(ValueError, match="fan-out must be between 2 and the 3 labels"):
        build_label_tree(["a", "b"], labels="A-C", fanout=4)
    with pytest.raises(ValueError, match="permutation"):
        build_label_tree(["a", "b"], labels="A-C", permutation=[0, 0])
    with pytest.raises(ValueError, match="templates must align"):
        build_label_tree(["a", "b"], labels="A-C", templates=["x"])
    with pytest.raises(ValueError, match="distinct"):
        build_label_tree(["a", "a"], labels="A-C")
    with pytest.raises(ValueError, match="build a label tree"):
        compile_menu(["a", "b", "c"], labels="A-B", overflow="tree")
    with pytest.raises(ValueError, match="tree_fanout must be 0"):
        Interface(tree_fanout=1)
    with pytest.raises(ValueError, match="exceeds the 26 valid labels"):
        Interface(tree_fanout=30).fanout(26)
    with pytest.raises(ValueError, match="tree_grouping must be one of"):
        Interface(tree_grouping="verbs")  # type: ignore[arg-type]


def test_the_interface_records_the_tree_policy():
    record = Interface().to_dict()
    assert (record["overflow"], record["tree_grouping"], record["tree_fanout"]) == (
        "tree",
        "template",
        0,
    )
    # interfaces recorded before label trees existed keep their exact record
    old = Interface(overflow="error").to_dict()
    assert "tree_grouping" not in old and "tree_fanout" not in old and "legal_list" not in old
    assert Interface.from_dict(old) == Interface(overflow="error")
    assert Interface().diff(Interface(tree_fanout=8, tree_grouping="blocks")) == {
        "tree_grouping": ("template", "blocks"),
        "tree_fanout": (0, 8),
    }


def test_a_later_level_reads_its_label_in_the_same_context():
    tok = build_tiny_tokenizer()
    legal, templates = science_menu(60)
    tree = build_label_tree(legal, labels=ALPHABET, templates=templates, fanout=8)
    group = next(r for r, row in enumerate(tree.node(()).children) if not row.is_leaf)
    text = level_continuation(tree, (group,), ALPHABET[group], Interface(), tok)
    assert text.startswith("\nChosen: ") and text.endswith("\nAnswer:")
    assert tree.render_level((group,)) in text


def test_the_token_plane_can_list_the_first_menu():
    tok = build_tiny_tokenizer()
    legal = ["open cup", "open jar", "look around"]
    info = {"legal_actions": legal, "objective": "win", "action_templates": None}
    interface = Interface(memory="none", tree_fanout=2, legal_list="groups")
    prompt = render_token_prompt("here", info, interface, tok)
    assert "- open ... (2 actions)\n- look around\nCommand:" in prompt
    # a list that fits the fan-out is the full list either way
    fits = Interface(memory="none", legal_list="groups")
    assert render_token_prompt("here", info, fits, tok) == render_token_prompt(
        "here", info, Interface(memory="none"), tok
    )
