"""examples/check_start.py: a candidate start's before-RL success against the shipped
start's Wilson interval, setting by setting."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rlid.agents.card import wilson_interval

ROOT = Path(__file__).resolve().parent.parent


def load_script():
    spec = importlib.util.spec_from_file_location(
        "check_start", ROOT / "examples" / "check_start.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wilson_interval_hand_computed():
    # p = 1/2, n = 32, z = 1.96: centre (0.5 + z²/64) / (1 + z²/32) = 0.5,
    # half 1.96 * sqrt(0.25/32 + z²/4096) / (1 + z²/32) = 0.163694
    low, high = wilson_interval(16, 32)
    assert low == pytest.approx(0.5 - 0.163694, abs=1e-6)
    assert high == pytest.approx(0.5 + 0.163694, abs=1e-6)
    # p = 0: [0, z² / (n + z²)]
    low, high = wilson_interval(0, 32)
    assert low == 0.0 and high == pytest.approx(3.8416 / 35.8416, abs=1e-9)


def test_suite_settings_leave_out_scienceworld():
    names = load_script().settings_of(ROOT / "examples" / "suite.toml")
    assert "keydoor-small" in names and "babyai-mixed" in names and "twx-twc-small" in names
    assert not [name for name in names if name.startswith("sw-")]
    assert len(names) == 17


def test_table_and_count(tmp_path, monkeypatch, capsys):
    script = load_script()
    success = {("a", "tiny"): 0.5, ("a", "cand"): 0.6, ("b", "tiny"): 0.0, ("b", "cand"): 0.25}

    def fake_evaluate(model, config, setting, path):
        return {
            "episodes": 32,
            "success": success[(setting, "tiny" if model == "tiny" else "cand")],
        }

    monkeypatch.setattr(script, "evaluate", fake_evaluate)
    (tmp_path / "start").mkdir()
    script.main([str(tmp_path / "start"), "--settings", "a,b", "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert "| a | 0.50 [0.34, 0.66] | 0.60 | yes |" in out
    assert "| b | 0.00 [0.00, 0.11] | 0.25 | no |" in out
    assert "1 of 2 settings inside" in out


def test_bad_start_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        load_script().main([str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert stop.value.code == 2
    assert "is not a directory" in capsys.readouterr().err


def test_a_config_with_nothing_to_play_is_one_line(tmp_path, capsys):
    config = tmp_path / "sw.toml"
    config.write_text('[[envs]]\nname = "sw-find-plant"\nid = "scienceworld"\n')
    (tmp_path / "start").mkdir()
    with pytest.raises(SystemExit) as stop:
        load_script().main(
            [str(tmp_path / "start"), "--config", str(config), "--out", str(tmp_path / "o")]
        )
    assert stop.value.code == 2
    assert "has no setting to play outside ScienceWorld" in capsys.readouterr().err
