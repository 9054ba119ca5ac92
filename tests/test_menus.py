"""Menus (compile, labels <-> actions, permutation, overflow) and the Interface spec."""

from __future__ import annotations

import dataclasses
import json
import string

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlid.menus import Interface, LastKMemory, Menu, MenuRow, compile_menu

ALPHABET = tuple(string.ascii_uppercase)

action_text = st.text(
    alphabet=string.ascii_letters + string.digits + " -'", min_size=1, max_size=20
).filter(lambda text: text.strip() != "")
legal_lists = st.lists(action_text, min_size=1, max_size=len(ALPHABET), unique=True)
seeds = st.integers(min_value=0, max_value=2**32 - 1)
fast = settings(max_examples=60, deadline=None)


@fast
@given(legal=legal_lists, seed=seeds, with_afterstates=st.booleans())
def test_every_label_maps_back_to_its_action(legal, seed, with_afterstates):
    afterstates = [f"outcome {i}" for i in range(len(legal))] if with_afterstates else None
    menu = compile_menu(legal, afterstates, labels=ALPHABET, rng=np.random.default_rng(seed))
    assert len(menu) == len(legal) == menu.num_legal
    assert sorted(menu.permutation) == list(range(len(legal)))  # a true permutation
    assert menu.labels == ALPHABET[: len(legal)]
    assert menu.dropped == ()
    for i, label in enumerate(menu.labels):
        assert menu.index(label) == i
        assert menu.action(label) == legal[menu.permutation[i]]
        assert menu.label_for(legal[menu.permutation[i]]) == label
        if with_afterstates:
            assert menu.rows[i].afterstate == afterstates[menu.permutation[i]]
    assert Menu.from_dict(json.loads(json.dumps(menu.to_dict()))) == menu


@fast
@given(legal=legal_lists, seed=seeds)
def test_rendering_is_deterministic_given_the_seed(legal, seed):
    first = compile_menu(legal, labels=ALPHABET, rng=np.random.default_rng(seed))
    again = compile_menu(legal, labels=ALPHABET, rng=np.random.default_rng(seed))
    assert first == again
    assert first.render() == again.render()
    lines = first.render().split("\n")
    assert lines == [f"{label}) {first.action(label)}" for label in first.labels]


@fast
@given(legal=legal_lists)
def test_without_rng_the_order_is_the_legal_order(legal):
    menu = compile_menu(legal, labels=ALPHABET)
    assert menu.permutation == tuple(range(len(legal)))
    assert menu.actions == tuple(legal)


@fast
@given(legal=st.lists(action_text, min_size=len(ALPHABET) + 1, max_size=40, unique=True))
def test_overflow_error_names_both_sizes_and_the_fix(legal):
    with pytest.raises(ValueError) as error:
        compile_menu(legal, labels=ALPHABET, rng=np.random.default_rng(0))
    message = str(error.value)
    assert f"{len(legal)} legal actions" in message and f"only {len(ALPHABET)} labels" in message
    assert "overflow='truncate'" in message


@fast
@given(legal=st.lists(action_text, min_size=1, max_size=40, unique=True), seed=seeds)
def test_truncate_keeps_the_first_k_and_records_the_dropped(legal, seed):
    labels = ALPHABET[:10]
    menu = compile_menu(legal, labels=labels, rng=np.random.default_rng(seed), overflow="truncate")
    order = [int(i) for i in np.random.default_rng(seed).permutation(len(legal))]
    assert len(menu) == min(len(legal), 10)
    assert menu.permutation == tuple(order[:10])
    assert menu.dropped == tuple(legal[i] for i in order[10:])
    assert sorted(menu.actions + menu.dropped) == sorted(legal)
    assert Menu.from_dict(menu.to_dict()) == menu
    if menu.dropped:
        with pytest.raises(KeyError, match="dropped by truncation"):
            menu.label_for(menu.dropped[0])


def test_shuffling_changes_positions_across_steps():
    legal = ["go east", "go west", "take key", "open door", "look"]
    rng = np.random.default_rng(0)
    perms = {compile_menu(legal, labels=ALPHABET, rng=rng).permutation for _ in range(20)}
    assert len(perms) > 5


def test_render_format_and_memory():
    memory = LastKMemory(2)
    memory.update("You enter the studio. It is dark.", "go east", {})
    menu = compile_menu(
        ["go east", "take key"],
        ["you will be in\nthe studio", "you will carry the key"],
        memory,
        labels="A-Z",
    )
    assert menu.render() == (
        "A) go east -> you will be in the studio\nB) take key -> you will carry the key"
    )
    assert menu.render(afterstates=False) == "A) go east\nB) take key"
    assert menu.memory == "go east -> You enter the studio."
    assert compile_menu(["look"], memory="seen: x", labels="A-Z").memory == "seen: x"
    plain = compile_menu(["look"], labels="A-Z")
    assert plain.render() == "A) look" and plain.memory is None
    with pytest.raises(ValueError, match="compiled without them"):
        plain.render(afterstates=True)


def test_empty_afterstates_say_nothing_and_are_not_shown():
    # envs without outcome predictions (ScienceWorld, TextWorldExpress) give "" per row
    menu = compile_menu(["go east", "take key"], ["", "you will carry the key"], labels="A-Z")
    assert menu.has_afterstates
    assert menu.render() == "A) go east\nB) take key -> you will carry the key"
    assert menu.render(afterstates=True) == menu.render()
    silent = compile_menu(["go east", "take key"], ["", ""], labels="A-Z")
    assert silent.render(afterstates=True) == silent.render(afterstates=False)


def test_unknown_label_is_a_clear_key_error():
    menu = compile_menu(["go east", "look"], labels="A-Z")
    with pytest.raises(
        KeyError, match=r"label 'C' is not in this menu; its labels are \['A', 'B'\]"
    ):
        menu.action("C")
    with pytest.raises(KeyError, match="not a row"):
        menu.label_for("jump")


@pytest.mark.parametrize(
    ("legal", "afterstates", "match"),
    [
        ([], None, "no legal actions"),
        (["look", "look"], None, "repeated: \\['look'\\]"),
        (["look", ""], None, "non-empty single-line"),
        (["look", "  "], None, "non-empty single-line"),
        (["look", "go\neast"], None, "non-empty single-line"),
        (["look", 3], None, "non-empty single-line"),
        (["look", "go east"], ["nothing changes"], "1 afterstates for 2 legal actions"),
    ],
)
def test_invalid_inputs_are_rejected(legal, afterstates, match):
    with pytest.raises(ValueError, match=match):
        compile_menu(legal, afterstates, labels=ALPHABET)


def test_bad_rng_and_overflow_policy():
    with pytest.raises(TypeError, match="default_rng"):
        compile_menu(["look"], labels=ALPHABET, rng=0)
    with pytest.raises(ValueError, match="overflow must be one of"):
        compile_menu(["look"], labels=ALPHABET, overflow="page")


def test_menus_are_immutable_and_checked_on_load():
    menu = compile_menu(["look", "go east"], labels=ALPHABET)
    with pytest.raises(dataclasses.FrozenInstanceError):
        menu.memory = "x"
    with pytest.raises(dataclasses.FrozenInstanceError):
        menu.rows[0].action = "jump"
    data = menu.to_dict()
    data["permutation"] = [0, 0]
    with pytest.raises(ValueError, match="distinct indices"):
        Menu.from_dict(data)
    with pytest.raises(ValueError, match="labels must be distinct"):
        Menu((MenuRow("A", "look"), MenuRow("A", "jump")), (0, 1), 2)


# --------------------------------------------------------------------- Interface
def test_interface_round_trips_through_json():
    interface = Interface(memory="structured", labels="auto", template="plain", max_obs_chars=200)
    data = json.loads(json.dumps(interface.to_dict()))
    assert Interface.from_dict(data) == interface
    assert Interface.from_dict({}) == Interface()
    # every field is recorded, except those added later, which appear only when changed
    # (so interfaces recorded before them keep their fingerprint)
    later = {"long_prompts", "legal_list", "layout", "afterstate_text"}
    assert set(data) == {f.name for f in dataclasses.fields(Interface)} - later
    strict = Interface(
        long_prompts="error", legal_list="groups", layout="glam", memory="glam",
        afterstate_text="change",
    )  # fmt: skip
    assert set(strict.to_dict()) == {f.name for f in dataclasses.fields(Interface)}
    assert Interface.from_dict(json.loads(json.dumps(strict.to_dict()))) == strict


def test_interface_diff():
    a = Interface()
    b = Interface(shuffle=False, labels="a-z")
    assert a.diff(b) == {"labels": ("A-Z", "a-z"), "shuffle": (True, False)}
    assert a.diff(Interface()) == {}
    with pytest.raises(TypeError):
        a.diff({"shuffle": False})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"memory": "episodic"}, r"valid kinds: \['glam', 'last_k', 'none', 'structured'\]"),
        ({"memory_size": -1}, "memory_size must be an int >= 0"),
        ({"memory_size": 0}, "set memory_size >= 1, or memory='none'"),
        ({"labels": "A-z"}, "Interface.labels: cannot parse"),
        ({"template": "json"}, "template must be one of"),
        ({"overflow": "page"}, "overflow must be one of"),
        ({"max_obs_chars": 5}, "max_obs_chars must be an int >= 20"),
        ({"show_legal_to_token_plane": False, "show_afterstates_to_token_plane": True}, "needs"),
    ],
)
def test_interface_validation_says_how_to_fix(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Interface(**kwargs)


def test_interface_type_errors_and_unknown_fields():
    with pytest.raises(TypeError, match="Interface.shuffle must be True or False"):
        Interface(shuffle=1)
    with pytest.raises(TypeError, match="alphabet spec string"):
        Interface(labels=["A", "B"])
    with pytest.raises(ValueError, match=r"unknown Interface fields \['colour'\]"):
        Interface.from_dict({"colour": "red"})
    assert Interface(memory="none", memory_size=0).memory_size == 0
