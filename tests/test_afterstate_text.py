"""Interface.afterstate_text: "change" shows "no change" for an afterstate that is the
observation itself; the default ("full") prompt is the one rlid always rendered."""

from __future__ import annotations

import numpy as np
import pytest

from rlid.lm.tokenizer import build_tiny_tokenizer
from rlid.menus import Interface, LabelSet
from rlid.menus.prompt import NO_CHANGE, menu_for_step, render_decision_prompt

OBS = "You see a wall 3 steps right, You see a purple ball 2 steps forward"
INFO = {
    "objective": "go to the purple ball",
    "legal_actions": ["drop", "go forward", "turn left"],
    "afterstates": [OBS, "You see a purple ball 1 step forward", "You see a wall 1 step left"],
}


def prompt(interface: Interface) -> str:
    tok = build_tiny_tokenizer()
    labels = LabelSet.for_tokenizer(tok, candidates=interface.labels)
    menu = menu_for_step(INFO, interface, labels, rng=np.random.default_rng(0))
    return render_decision_prompt(OBS, INFO, menu, interface, tok)


def test_change_shows_no_change_where_the_action_changes_nothing():
    full, change = (
        prompt(Interface(memory="none")),
        prompt(Interface(memory="none", afterstate_text="change")),
    )
    assert full.count(OBS) == 2 and change.count(OBS) == 1
    assert f"drop -> {NO_CHANGE}" in change
    assert "go forward -> You see a purple ball 1 step forward" in change
    assert full.replace(f"drop -> {OBS}", f"drop -> {NO_CHANGE}") == change


def test_the_default_is_recorded_as_before_and_a_bad_value_is_refused():
    assert "afterstate_text" not in Interface().to_dict()
    assert Interface(afterstate_text="change").to_dict()["afterstate_text"] == "change"
    with pytest.raises(ValueError, match="afterstate_text"):
        Interface(afterstate_text="diff")  # type: ignore[arg-type]
