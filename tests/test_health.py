"""Training-health warnings (rlid.runs.health): each kind read off a hand-built metrics
row, and a tiny run that prints one, lists it in summary.md and stops on --stop-on."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys

import pytest

from rlid.cli.main import main
from rlid.config import TrainConfig
from rlid.config.names import WARNING_KINDS, parse_stop_on
from rlid.runs import health
from rlid.runs.dir import read_metrics


def row(iteration: int = 3, shortened: int = 0, **metrics) -> dict:
    """A healthy decision-plane metrics row, changed by ``metrics``."""
    base = {
        "iteration": iteration, "return": 0.5, "success": 0.5, "rollout_label_mass": 0.8,
        "clip_frac": 0.1, "approx_kl": 0.01, "policy_loss": -0.02, "loss": -0.03,
        "time": {"env": 0.1}, "budget": {"env_steps": 100 * iteration, "shortened_prompts": shortened},
    }  # fmt: skip
    base.update(metrics)
    return base


def kinds(found: list[health.TrainingWarning]) -> list[str]:
    return [w.kind for w in found]


def test_a_healthy_row_warns_of_nothing():
    assert health.check_row(row(), {"shortened_prompts": 0}) == []
    assert health.check_row(row(), None) == []
    # the token plane's rows have no label mass; the scoring plane's is always 1
    token_row = row()
    del token_row["rollout_label_mass"]
    assert health.check_row(token_row) == []


def test_label_mass_below_the_floor_warns_and_says_what_to_do():
    (warning,) = health.check_row(row(rollout_label_mass=0.31))
    assert warning.kind == "label_mass" and warning.iteration == 3
    assert "0.31" in warning.message and "--lr" in warning.message
    assert "--label-mass-coef" in warning.message
    assert warning.line().startswith("rlid: warning: iteration 3: rollout label mass 0.31")
    assert health.check_row(row(rollout_label_mass=health.LABEL_MASS_FLOOR)) == []


def test_prompts_shortened_in_the_iteration_warn_against_the_budget_before():
    (warning,) = health.check_row(row(shortened=12), {"shortened_prompts": 5})
    assert warning.kind == "shortened_prompts"
    assert warning.message.startswith("7 prompt(s) shortened")
    assert "12 in the run" in warning.message
    # shortened before this iteration only: nothing new
    assert health.check_row(row(shortened=12), {"shortened_prompts": 12}) == []
    # the first iteration of a run: everything counted is new
    assert kinds(health.check_row(row(shortened=2), None)) == ["shortened_prompts"]


def test_an_update_without_advantage_signal_warns_of_zero_advantages():
    skipped = {"iteration": 2, "return": 0.0, "success": 0.0, "rollout_label_mass": 0.7,
               "skipped_update": 1.0, "budget": {"env_steps": 40}}  # fmt: skip
    (warning,) = health.check_row(skipped)
    assert warning.kind == "zero_advantages" and "--group-size" in warning.message


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_losses_and_metrics_warn_naming_them(value):
    (warning,) = health.check_row(row(approx_kl=value))
    assert warning.kind == "non_finite" and f"approx_kl={value}" in warning.message
    found = health.check_row(row(policy_loss=value, eval={"return": value}))
    assert kinds(found) == ["non_finite"]
    assert "policy_loss" in found[0].message and "eval.return" in found[0].message
    assert "--lr" in found[0].message


def test_a_clip_fraction_above_the_ceiling_warns():
    (warning,) = health.check_row(row(clip_frac=0.62))
    assert warning.kind == "clipped" and "0.62" in warning.message
    assert "--target-kl" in warning.message
    assert health.check_row(row(clip_frac=health.CLIP_FRAC_CEILING)) == []


def test_several_kinds_in_one_row_and_a_lasting_one_is_said_once():
    bad = row(iteration=2, shortened=3, rollout_label_mass=0.2, clip_frac=0.9)
    assert kinds(health.check_row(bad, {"shortened_prompts": 1})) == [
        "label_mass", "shortened_prompts", "clipped"
    ]  # fmt: skip
    first = row(iteration=1, rollout_label_mass=0.2)
    found, new = health.watch([], first)
    assert kinds(found) == kinds(new) == ["label_mass"]
    second = row(iteration=2, rollout_label_mass=0.1, clip_frac=0.9)
    found, new = health.watch([first], second)
    assert kinds(found) == ["label_mass", "clipped"] and kinds(new) == ["clipped"]
    third = row(iteration=3)
    assert health.watch([first, second], third) == ([], [])


def test_the_summary_folds_a_lasting_warning_and_says_why_a_run_stopped(tmp_path):
    rows = [
        row(iteration=1, rollout_label_mass=0.4), row(iteration=2, rollout_label_mass=0.3),
        row(iteration=3), row(iteration=4, rollout_label_mass=0.2, clip_frac=0.7),
    ]  # fmt: skip
    config = TrainConfig(steps=1000)
    lines = health.summary_lines(config, rows, tmp_path)
    assert lines[0] == "## Warnings"
    assert lines[2].startswith("- iterations 1-2: rollout label mass 0.40")
    assert lines[3].startswith("- iteration 4: rollout label mass 0.20")
    assert lines[4].startswith("- iteration 4: clip fraction 0.70")
    assert not any("Stopped" in line for line in lines)
    stopping = TrainConfig(steps=1000, stop_on=("clipped",))
    assert (
        "**Stopped after iteration 4** on `--stop-on clipped`"
        in health.summary_lines(stopping, rows, tmp_path)[-1]
    )
    # a listed warning at the iteration that spent the budget: an ordinary end
    assert not health.stopped_on(TrainConfig(steps=400, stop_on=("clipped",)), rows)
    assert health.summary_lines(config, [row()], tmp_path) == ["## Warnings", "", "None."]


def test_stop_on_takes_kinds_any_or_none_and_refuses_others():
    assert parse_stop_on("label_mass,clipped") == ("label_mass", "clipped")
    assert parse_stop_on(["clipped", "non-finite"]) == ("non_finite", "clipped")
    assert parse_stop_on("any") == WARNING_KINDS
    assert parse_stop_on("none") == parse_stop_on(None) == ()
    assert TrainConfig(stop_on="any").stop_on == WARNING_KINDS
    assert "stop_on" not in TrainConfig().to_dict()  # records before it keep their fingerprint
    assert TrainConfig.from_dict({"stop_on": ["zero_advantages"]}).to_dict()["stop_on"] == [
        "zero_advantages"
    ]
    with pytest.raises(ValueError, match="unknown warning 'label-mas'"):
        TrainConfig(stop_on=("label-mas",))


def test_the_lines_go_to_stderr_to_configured_logging_or_nowhere(monkeypatch, caplog):
    warning = health.check_row(row(clip_frac=0.9))
    written: list[str] = []
    monkeypatch.setattr(health.LOGGER, "propagate", False)  # no handler anywhere
    health.say(warning, written.append)
    assert written == [warning[0].line()]
    monkeypatch.setattr(health.LOGGER, "propagate", True)  # pytest's handler: configured
    with caplog.at_level(logging.WARNING, logger="rlid.runs.health"):
        health.say(warning, written.append)
    assert caplog.messages == [warning[0].line()] and len(written) == 1
    monkeypatch.setattr(health.LOGGER, "propagate", False)
    health.LOGGER.setLevel(logging.ERROR)  # silenced
    try:
        health.say(warning, written.append)
    finally:
        health.LOGGER.setLevel(logging.NOTSET)
    assert len(written) == 1


# ----------------------------------------------------------------- a tiny run, end to end
TINY = ["--model", "tiny-random", "--env", "keydoor", "-o", "size=2", "-o", "keys=0",
        "-o", "max_episode_steps=6", "--groups-per-iter", "2", "--group-size", "2",
        "--epochs", "1", "--minibatch-size", "8", "--eval-episodes", "2", "--threads", "1",
        "--memory", "none", "--quiet"]  # fmt: skip


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def test_a_tiny_run_warns_on_stderr_and_in_its_summary_and_stops_on_request(tmp_path, caplog):
    """The random initialisation puts almost no probability on the labels: its first
    iteration warns of the label mass on stderr, even with --quiet. With --stop-on it
    stops after that iteration (checkpointed, exit status 4, summary.md says why); a
    resume with --stop-on none trains to the budget, its summary listing the warning."""
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "rlid", "train", *TINY, "--steps", "20", "--stop-on",
         "label_mass", "--out", str(run)],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == health.STOP_EXIT_CODE, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert lines[0].startswith("rlid: warning: iteration 1: rollout label mass 0.0")
    assert lines[0].endswith("lower --lr or raise --label-mass-coef (e.g. 0.1) [label_mass]")
    assert lines[1].startswith(f"rlid train: {run}: stopped after iteration 1 on --stop-on")
    assert len(lines) == 2  # --quiet: the warning and the stop, nothing else
    assert len(read_metrics(run)) == 1
    assert (run / "checkpoint" / "state.json").is_file()
    summary = (run / "summary.md").read_text()
    assert "## Warnings\n\n- iteration 1: rollout label mass 0.0" in summary
    assert "**Stopped after iteration 1** on `--stop-on label_mass`" in summary

    with caplog.at_level(logging.WARNING, logger="rlid.runs.health"):
        assert main(["train", "--resume", str(run), "--stop-on", "none", "--quiet"]) == 0
    assert all(m.startswith("rlid: warning: iteration ") for m in caplog.messages)
    rows = read_metrics(run)
    assert len(rows) > 1 and rows[-1]["budget"]["env_steps"] >= 20
    summary = (run / "summary.md").read_text()
    assert "- iteration 1: rollout label mass" in summary or "- iterations 1-" in summary
    assert "Stopped" not in summary
