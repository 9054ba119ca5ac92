"""Tests of ``rlid compare``: config checks, budget matching, resume, bootstrap, curves."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import rlid
from rlid.cli import main as cli_main
from rlid.compare import run as compare_mod
from rlid.compare.config import CompareConfigError
from rlid.compare.curves import curves_for
from rlid.compare.parse import parse_compare_config
from rlid.compare.stats import bootstrap_mean
from rlid.runs.dir import read_metrics
from rlid.runs.log import RunLog

TINY_ENV = {"size": 2, "keys": 0, "distractors": 1, "max_episode_steps": 5}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    # A private cache: "tiny" is then warm-built there from the tests' tiny recipe (conftest).
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def tiny_comparison(**changes) -> dict:
    """Two arms (decision PPO, token GRPO), one seed, a few env steps."""
    data = {
        "name": "tiny",
        "seeds": [0],
        "heldout_episodes": 2,
        "budget": {"currency": "env_steps", "amount": 30},
        "interface": {"memory": "none"},
        "defaults": {
            "groups_per_iter": 2, "group_size": 2, "epochs": 1, "minibatch_size": 8,
            "threads": 1, "max_new_tokens": 4,
        },
        "envs": [{"id": "keydoor", "options": dict(TINY_ENV)}],
        "arms": {
            "decision": {"plane": "decision"},
            "grpo": {"plane": "token", "algorithm": "grpo"},
        },
    }  # fmt: skip
    data.update(changes)
    return data


def to_toml(data: dict) -> str:
    """Just enough TOML for these configs (tables of scalars, lists, inline tables)."""

    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + "}"
        return repr(v)

    lines = [f"{k} = {value(v)}" for k, v in data.items() if k not in ("envs", "arms")]
    lines += [f"envs = {value(data['envs'])}"] if "envs" in data else []
    for name, arm in data.get("arms", {}).items():
        lines += [f"[arms.{name}]"] + [f"{k} = {value(v)}" for k, v in arm.items()]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------- config checks
def test_interface_mismatch_is_refused_unless_declared():
    arms = {
        "decision": {"plane": "decision"},
        "grpo": {
            "plane": "token", "algorithm": "grpo",
            "interface": {"show_legal_to_token_plane": False},
        },
    }  # fmt: skip
    with pytest.raises(CompareConfigError, match=r"arms\.grpo\.interface.*show_legal_to_token"):
        parse_compare_config(tiny_comparison(arms=arms))
    declared = parse_compare_config(
        tiny_comparison(arms=arms, interface_differences=["show_legal_to_token_plane"])
    )
    assert declared.interface_diffs() == {"grpo": {"show_legal_to_token_plane": (True, False)}}
    runs = {r.name: r.config for r in declared.runs()}
    assert runs["grpo-seed0"].interface.show_legal_to_token_plane is False
    assert runs["decision-seed0"].interface.show_legal_to_token_plane is True


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"budgt": {}}, r"^budgt: unknown key"),
        ({"budget": {"currency": "coins", "amount": 5}}, r"budget\.currency: 'coins'"),
        ({"budget": {"currency": "env_steps", "amount": 0}}, r"budget\.amount"),
        (
            {"budget": {"currency": "generated_tokens", "amount": 9}},
            r"never grows on arms\.decision",
        ),
        ({"defaults": {"steps": 10}}, r"defaults\.steps: set by the comparison.*\[budget\] amount"),
        ({"defaults": {"lrr": 0.1}}, r"defaults\.lrr: unknown TrainConfig key"),
        ({"seeds": []}, r"^seeds:"),
        ({"interface": {"memry": "none"}}, r"interface\.memry: unknown key"),
        ({"interface_differences": ["colour"]}, r"interface_differences: 'colour'"),
        ({"envs": [{"id": "nope"}]}, r"envs\[0\].*unknown env id 'nope'"),
        ({"envs": [{"id": "keydoor", "options": {"size": 99}}]}, r"envs\[0\] \(train options\)"),
        ({"envs": [{"id": "keydoor", "train": {"split": "heldout"}}]}, r"envs\[0\]\.train\.split"),
        ({"arms": {"a": {"plane": "token", "algorithm": "ppo"}}}, r"arms\.a\.algorithm: 'ppo'"),
        ({"arms": {"a": {"plane": "decision", "options": {"lr": -1.0}}}}, r"arms\.a .*lr must be"),
        ({"arms": {"a b": {"plane": "decision"}}}, r"arms\.a b: 'a b' must be"),
    ],
)
def test_bad_config_names_the_key(changes, key):
    with pytest.raises(CompareConfigError, match=key):
        parse_compare_config(tiny_comparison(**changes))


def test_cli_refuses_a_bad_config_before_any_run(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(to_toml(tiny_comparison(defaults={"lrr": 0.1})))
    out = tmp_path / "out"
    assert cli_main(["compare", "--config", str(path), "--out", str(out), "--quiet"]) == 2
    assert "defaults.lrr" in capsys.readouterr().err
    assert not out.exists()


def test_a_missing_model_directory_is_refused_before_any_run(tmp_path, capsys):
    data = tiny_comparison(references=["walkthrough"])
    data["arms"]["decision"]["options"] = {"model": str(tmp_path / "no-such-model")}
    path = tmp_path / "c.toml"
    path.write_text(to_toml(data))
    out = tmp_path / "out"
    assert cli_main(["compare", "--config", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "decision-seed0" in err and "no-such-model" in err and "--arms" in err
    assert not (out / "runs").exists() and not (out / "reference").exists()


def test_references_only_evaluates_them_and_prints_their_table(tmp_path, capsys):
    data = tiny_comparison(references=["random", "walkthrough", "afterstate"], seeds=[0, 1])
    path = tmp_path / "c.toml"
    path.write_text(to_toml(data))
    out = tmp_path / "out"
    argv = ["compare", "--config", str(path), "--out", str(out), "--quiet", "--references"]
    assert cli_main(argv) == 0
    table = capsys.readouterr().out
    assert "| env | random: success | walkthrough: success | afterstate: success |" in table
    assert "| keydoor | " in table
    # the ones that draw once per seed, the walkthrough once; no run trained
    refs = sorted(p.name for p in (out / "reference" / "keydoor").iterdir())
    assert refs == ["afterstate-seed0.json", "afterstate-seed1.json", "random-seed0.json",
                    "random-seed1.json", "walkthrough-seed0.json"]  # fmt: skip
    assert not (out / "runs").exists() and (out / "comparison.json").exists()
    saved = json.loads((out / "reference" / "keydoor" / "walkthrough-seed0.json").read_text())
    # the deterministic walkthrough's one value, no interval
    assert "| keydoor | " in table and saved["after"]["success"] == 1.0
    row = next(line for line in table.splitlines() if line.startswith("| keydoor | "))
    assert row.split(" | ")[2] == "1.00"
    # a rerun reuses them (nothing re-evaluated, the same table)
    assert cli_main(argv) == 0 and capsys.readouterr().out == table


def test_the_afterstate_reference_needs_the_menus_to_show_afterstates():
    data = tiny_comparison(
        references=["afterstate"], interface={"memory": "none", "afterstates": False}
    )
    with pytest.raises(CompareConfigError, match="hides them"):
        parse_compare_config(data)


def test_the_suite_table_gains_an_afterstate_column_only_when_measured():
    from rlid.compare.text import _suite_section

    def iv(mean):
        return {"mean": mean, "low": mean, "high": mean}

    arm = {"heldout": {"before": {"success": iv(0.1)}, "after": {"success": iv(0.4)}}}
    refs = {name: {"heldout": {"success": iv(v)}}
            for name, v in (("random", 0.2), ("walkthrough", 1.0), ("afterstate", 0.7))}  # fmt: skip
    results = {"envs": {"kd": {"arms": {"ppo": arm}, "references": refs}}}
    lines = _suite_section(results)
    assert "| env | arm | floor (random) | before | after | afterstate marks | ceiling " in (
        "\n".join(lines)
    )
    assert (
        "| kd | ppo | 0.20 [0.20, 0.20] | 0.10 [0.10, 0.10] | 0.40 [0.40, 0.40] | "
        "0.70 [0.70, 0.70] | 1.00 [1.00, 1.00] |" in lines
    )
    del refs["afterstate"]
    assert not any("afterstate" in line for line in _suite_section(results))


def test_shipped_example_config_is_valid():
    from rlid.compare.parse import load_compare_config

    example = Path(__file__).resolve().parents[1] / "examples" / "compare_small.toml"
    compare = load_compare_config(example)
    assert len(compare.seeds) >= 3 and compare.currency == "env_steps"
    algos = {(a.plane, a.algorithm) for a in compare.arms}
    assert {("decision", "ppo"), ("scoring", "ppo"), ("token", "grpo"), ("token", "dapo")} <= algos


def test_references_default_to_the_random_floor_and_are_checked():
    assert parse_compare_config(tiny_comparison()).references == ("random",)
    both = parse_compare_config(tiny_comparison(references=["random", "walkthrough"]))
    assert both.references == ("random", "walkthrough")
    with pytest.raises(CompareConfigError, match=r"references: unknown \['oracle'\]"):
        parse_compare_config(tiny_comparison(references=["oracle"]))


@pytest.mark.parametrize("keys", [1, 2])
def test_reference_arms_on_keydoor_random_below_walkthrough_at_the_optimum(keys):
    from rlid.compare.reference import evaluate_reference
    from rlid.menus import Interface

    options = {"size": 3, "keys": keys, "distractors": 1, "max_episode_steps": 30}
    run = dict(episodes=24, seed=0, interface=Interface(memory="none"))
    ceiling = evaluate_reference("walkthrough", "keydoor", options, **run)
    floor = evaluate_reference("random", "keydoor", options, **run)
    assert ceiling["success"] == 1.0 and ceiling["invalid_rate"] == 0.0
    assert ceiling["return"] == 2 * keys + 1  # keydoor's documented optimal return
    assert floor["return"] < ceiling["return"] and floor["success"] < 1.0
    assert floor["episode_length"] > ceiling["episode_length"]
    # a walkthrough longer than the step limit is cut by truncation, not an error
    short = evaluate_reference("walkthrough", "keydoor", {**options, "max_episode_steps": 2}, **run)
    assert short["episode_length"] <= 2 and short["success"] < 1.0


def test_shipped_suite_covers_every_challenge_with_one_recipe():
    from rlid.compare.parse import load_compare_config

    example = Path(__file__).resolve().parents[1] / "examples" / "suite.toml"
    compare = load_compare_config(example)
    ids = [e.env_id for e in compare.envs]
    for env_id in ("keydoor", "crafting", "tw-simple", "tw-coin_collector",
                   "tw-treasure_hunter", "tw-cooking"):  # fmt: skip
        assert ids.count(env_id) == 2, env_id  # two sizes / levels each
    assert len(compare.seeds) >= 3
    assert compare.references == ("random", "walkthrough", "afterstate")
    assert {(a.plane, a.algorithm) for a in compare.arms} == {
        ("decision", "ppo"),
        ("scoring", "ppo"),
        ("token", "grpo"),
    }
    # one recipe: arms differ in plane, the scoring norm and the starting model only,
    # and in a memory control that keeps the step (tests/test_microbatch.py)
    assert all(set(a.options) <= {"norm", "model", "micro_batch_tokens"} for a in compare.arms)
    decision = [a for a in compare.arms if a.plane == "decision"]
    # the shipped start, and the random-play start it is measured against
    assert sorted(a.options.get("model", "tiny") for a in decision) == ["tiny", "tiny-play"]


# ------------------------------------------------------------------------- end to end
def test_every_arm_stops_at_the_same_budget_and_differences_come_first(tmp_path):
    # forward passes as the currency: the arms spend them at very different rates
    arms = {
        "decision": {"plane": "decision"},
        "grpo": {
            "plane": "token", "algorithm": "grpo",
            "interface": {"show_legal_to_token_plane": False},
        },
    }  # fmt: skip
    data = tiny_comparison(
        arms=arms,
        interface_differences=["show_legal_to_token_plane"],
        references=["random", "walkthrough"],
        budget={"currency": "forward_passes", "amount": 20},
        envs=[{"id": "keydoor", "options": dict(TINY_ENV), "heldout": {"max_episode_steps": 6}}],
    )
    compare = parse_compare_config(data)
    results = compare_mod.run_comparison(compare, tmp_path, progress=False, say=lambda m: None)

    for run in compare.runs():
        rows = read_metrics(tmp_path / "runs" / run.name)
        spent = [row["budget"]["forward_passes"] for row in rows]
        # stops at the first iteration that reaches the budget: within one iteration of it
        assert spent[-1] >= 20 and all(s < 20 for s in spent[:-1]), (run.name, spent)
    for run in compare.runs():  # held-out options differ: the final checkpoint is evaluated
        stats = json.loads((tmp_path / "heldout" / f"{run.name}.json").read_text())["after"]
        assert stats["split"] == "heldout" and stats["episodes"] == 2
    arms_summary = results["envs"]["keydoor"]["arms"]
    assert set(arms_summary) == {"decision", "grpo"}
    assert (
        arms_summary["grpo"]["samples"] is not None and arms_summary["decision"]["samples"] is None
    )
    report = (tmp_path / "report.md").read_text()
    assert report.index("## Interface differences") < report.index("## Held-out results")
    # every run was trained by this process's code: one line, no warning
    assert [g["runs"] for g in results["software"]] == [[r.name for r in compare.runs()]]
    assert f"Trained by: rlid {rlid.__version__}" in report and "different versions" not in report
    # ... and started from the same weights: one group, no warning
    assert [g["runs"] for g in results["start_weights"]] == [[r.name for r in compare.runs()]]
    assert "was not the same in every run" not in report
    assert "show_legal_to_token_plane" in report.split("## Arms")[0]
    assert "## Aggregates across seeds and envs (rliable-style)" in report
    poi = results["aggregates"]["success"]["probability_of_improvement"]
    assert poi["decision"]["grpo"]["mean"] == pytest.approx(1 - poi["grpo"]["decision"]["mean"])
    assert (tmp_path / "plots" / "curves-keydoor-forward_passes.png").exists()
    assert (tmp_path / "plots" / "heldout-keydoor.png").exists()
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["comparison"]["budget"] == {"currency": "forward_passes", "amount": 20}
    # floor and ceiling: untrained reference arms, on the same held-out games
    refs = results["envs"]["keydoor"]["references"]
    assert refs["walkthrough"]["heldout"]["success"]["mean"] == 1.0
    assert refs["walkthrough"]["heldout"]["return"]["mean"] == 1.0  # 2 * keys + 1, keys = 0
    suite = report.split("## Held-out success: floor / before / after / ceiling")[1]
    row = next(line for line in suite.splitlines() if line.startswith("| keydoor | decision | "))
    assert row.endswith("| 1.00 |")  # the walkthrough, once: no interval
    assert "[n/a (1 seed)]" in row and "[1.00, 1.00]" not in report  # one seed: none


def test_the_report_warns_when_its_runs_were_trained_by_different_code():
    from rlid.compare.report import software_groups
    from rlid.compare.text import _software_section

    runs = [
        {"name": "a-seed0", "software": ["rlid 0.2.0 (commit 1111111)"]},
        {"name": "a-seed1", "software": ["rlid 0.2.0 (commit 2222222)"]},
        {"name": "b-seed0", "software": ["rlid 0.2.0 (commit 1111111)"]},
        {"name": "b-seed1", "software": ["rlid 0.2.0 (commit 1111111)",
                                         "rlid 0.2.0 (commit 2222222) (resumed after iteration 3)"]},
    ]  # fmt: skip
    groups = software_groups(runs)
    assert [g["runs"] for g in groups] == [["a-seed0", "b-seed0"], ["b-seed1"], ["a-seed1"]]
    text = "\n".join(_software_section(groups))
    assert "trained by 3 different versions of the code" in text
    assert "- rlid 0.2.0 (commit 2222222): 1 run(s): a-seed1" in text
    one = "\n".join(_software_section(software_groups(runs[:1])))
    assert one.startswith("Trained by: rlid 0.2.0 (commit 1111111) (every run).")


def test_the_report_warns_when_one_model_name_started_runs_from_different_weights():
    from rlid.compare.report import start_weight_groups
    from rlid.compare.text import _start_weights_section

    tiny = {"model": "tiny", "origin": "warm", "path": "/cache/tiny-warm"}
    runs = [
        {"name": "a-seed0", "start_model": {**tiny, "sha256": "12b798" + "0" * 58}},
        {"name": "a-seed1", "start_model": {**tiny, "sha256": "322339" + "0" * 58}},
        {"name": "a-seed2", "start_model": {**tiny, "sha256": "12b798" + "0" * 58}},
        {"name": "b-seed0", "start_model": {"model": "runs/bc", "origin": "local",
                                            "path": "/x/runs/bc", "sha256": "ab" * 32}},
        {"name": "c-seed0", "start_model": {"model": "tiny-random", "origin": "fresh",
                                            "path": None, "sha256": None}},
        {"name": "old-seed0", "start_model": None},  # recorded before start_model existed
    ]  # fmt: skip
    groups = start_weight_groups(runs)
    assert [(g["model"], g["runs"]) for g in groups] == [
        ("runs/bc", ["b-seed0"]),
        ("tiny", ["a-seed0", "a-seed2"]),
        ("tiny", ["a-seed1"]),
        ("tiny-random", ["c-seed0"]),
    ]
    text = "\n".join(_start_weights_section(groups))
    # only `tiny` is warned about: two weights under one name; another model is not a warning
    assert text.count("was not the same in every run") == 1 and "`tiny`" in text
    assert "- weights sha256 12b798000000: 2 run(s): a-seed0, a-seed2" in text
    assert "- weights sha256 322339000000: 1 run(s): a-seed1" in text
    assert _start_weights_section(start_weight_groups([runs[0], runs[2], runs[3]])) == []


def test_a_killed_comparison_continues_without_retraining(tmp_path, monkeypatch):
    data = tiny_comparison()
    data["defaults"]["checkpoint_every"] = 1  # the first checkpoint after iteration 1
    compare = parse_compare_config(data)
    first, second = [r.name for r in compare.runs()]
    real_run_training = compare_mod.run_training
    real_checkpoint = RunLog.checkpoint
    calls: list[tuple[str, bool]] = []

    def killed_in_second_run(config, out, *, resume, progress=True):
        calls.append((Path(out).name, resume))
        if len(calls) == 2:  # die right after the 2nd run's first checkpoint

            def checkpoint_then_die(self, **kw):
                real_checkpoint(self, **kw)
                raise RuntimeError("killed")

            monkeypatch.setattr(RunLog, "checkpoint", checkpoint_then_die)
        return real_run_training(config, out, resume=resume, progress=progress)

    monkeypatch.setattr(compare_mod, "run_training", killed_in_second_run)
    with pytest.raises(RuntimeError, match="killed"):
        compare_mod.run_comparison(compare, tmp_path, progress=False, say=lambda m: None)
    monkeypatch.setattr(RunLog, "checkpoint", real_checkpoint)
    assert calls == [(first, False), (second, False)]
    finished = tmp_path / "runs" / first / "eval.json"
    stamp = finished.stat().st_mtime_ns
    assert len(read_metrics(tmp_path / "runs" / second)) == 1  # one iteration, then killed

    calls.clear()

    def counting(config, out, *, resume, progress=True):
        calls.append((Path(out).name, resume))
        return real_run_training(config, out, resume=resume, progress=progress)

    monkeypatch.setattr(compare_mod, "run_training", counting)
    compare_mod.run_comparison(compare, tmp_path, progress=False, say=lambda m: None)
    assert calls == [(second, True)]  # the finished run is reused, the killed one resumed
    assert finished.stat().st_mtime_ns == stamp
    rows = read_metrics(tmp_path / "runs" / second)
    assert [row["iteration"] for row in rows] == list(range(1, len(rows) + 1))
    assert len(rows) >= 2 and rows[-1]["budget"]["env_steps"] >= 30
    assert (tmp_path / "report.md").exists()

    # a changed config does not silently reuse runs trained with the old one
    changed = parse_compare_config(tiny_comparison(budget={"currency": "env_steps", "amount": 40}))
    with pytest.raises(ValueError, match="different config .*steps"):
        compare_mod.run_comparison(changed, tmp_path, progress=False, say=lambda m: None)


def test_a_comparison_stopped_by_sigterm_says_to_rerun_it_and_keeps_the_runs_time(
    tmp_path, monkeypatch, capsys
):
    import signal

    from rlid.core import train as trainer

    data = tiny_comparison(arms={"decision": {"plane": "decision"}})
    config = tmp_path / "c.toml"
    config.write_text(to_toml(data))
    out = tmp_path / "out"
    real = trainer.ppo_update

    def signalled(*args, **kwargs):
        signal.raise_signal(signal.SIGTERM)  # in iteration 1: a preemption notice
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer, "ppo_update", signalled)
    argv = ["compare", "--config", str(config), "--out", str(out), "--quiet"]
    assert cli_main(argv) == 143
    err = capsys.readouterr().err
    assert "stopped by SIGTERM after iteration 1, which is checkpointed" in err
    assert "the same `rlid compare` command continues it" in err
    (name,) = json.loads((out / "runs.json").read_text())
    assert json.loads((out / "runs.json").read_text())[name]["seconds"] > 0
    assert [r["iteration"] for r in read_metrics(out / "runs" / name)] == [1]

    monkeypatch.setattr(trainer, "ppo_update", real)
    assert cli_main(argv) == 0
    ledger = json.loads((out / "runs.json").read_text())[name]
    assert ledger["history"] == ["trained", "resumed"]
    assert (out / "report.md").exists()


def test_a_run_finished_under_overflow_error_is_reused_under_truncate(tmp_path):
    from rlid.compare.run import check_existing_run, run_state
    from rlid.runs import dir as rundir

    compare = parse_compare_config(tiny_comparison())
    tree = compare.runs()[0]  # the default interface: label trees
    run = replace(tree, config=replace(
        tree.config, interface=replace(tree.config.interface, overflow="error")
    ))  # fmt: skip
    run_dir = tmp_path / run.name
    run_dir.mkdir()
    rundir.write_json(run_dir / "config.json", {"config": run.config.to_dict()})
    truncating = replace(run, config=replace(
        run.config, interface=replace(run.config.interface, overflow="truncate")
    ))  # fmt: skip
    # started, not finished: it may still meet a large menu, so the difference matters
    with pytest.raises(ValueError, match="different config .*interface"):
        check_existing_run(truncating, run_dir, run_state(run_dir))
    rundir.write_json(run_dir / "eval.json", {"after": {"success": 0.5}})
    check_existing_run(
        truncating, run_dir, run_state(run_dir)
    )  # finished under "error": no menu overflowed
    check_existing_run(run, run_dir, run_state(run_dir))
    check_existing_run(tree, run_dir, run_state(run_dir))  # a one-level tree is that menu
    narrow = replace(tree, config=replace(
        tree.config, interface=replace(tree.config.interface, tree_fanout=2)
    ))  # fmt: skip
    with pytest.raises(ValueError, match="different config .*interface"):
        check_existing_run(narrow, run_dir, run_state(run_dir))  # fewer rows per menu: not
    other = replace(truncating, config=replace(
        truncating.config, interface=replace(truncating.config.interface, max_obs_chars=123)
    ))  # fmt: skip
    with pytest.raises(ValueError, match="different config .*interface"):
        check_existing_run(
            other, run_dir, run_state(run_dir)
        )  # any other interface change still refuses
    rundir.write_json(run_dir / "config.json", {"config": truncating.config.to_dict()})
    with pytest.raises(ValueError, match="different config .*interface"):
        check_existing_run(
            run, run_dir, run_state(run_dir)
        )  # truncate -> error is not the same run


def test_a_run_refused_for_its_model_path_alone_says_which_paths_differ(tmp_path):
    from rlid.compare.run import check_existing_run, run_state
    from rlid.runs import dir as rundir

    run = parse_compare_config(tiny_comparison()).runs()[0]
    run_dir = tmp_path / run.name
    run_dir.mkdir()
    trained = replace(run.config, model="/old/place/warm")
    rundir.write_json(run_dir / "config.json", {"config": trained.to_dict()})
    rundir.write_json(run_dir / "eval.json", {"after": {"success": 0.5}})
    with pytest.raises(ValueError, match=r"differs in: model\) \(it was trained from model "
                       r"'/old/place/warm', the config names '.*': if that is the same model "
                       r"moved, name its former path"):  # fmt: skip
        check_existing_run(run, run_dir, run_state(run_dir))
    other = replace(trained, lr=trained.lr * 2)  # more than the path differs: no hint
    rundir.write_json(run_dir / "config.json", {"config": other.to_dict()})
    with pytest.raises(ValueError, match="differs in: lr, model\\); use another") as caught:
        check_existing_run(run, run_dir, run_state(run_dir))
    assert "former path" not in str(caught.value)


# ---------------------------------------------------------------------- statistics
def test_bootstrap_interval_of_the_mean_on_normal_samples():
    mu, sigma, n, reps = 0.3, 2.0, 25, 300
    rng = np.random.default_rng(123)
    covered, widths = 0, []
    for rep in range(reps):
        sample = rng.normal(mu, sigma, size=n)
        iv = bootstrap_mean(sample.tolist(), resamples=2000, seed=rep)
        assert iv.low <= iv.mean <= iv.high and iv.mean == pytest.approx(sample.mean())
        covered += iv.covers(mu)
        widths.append(iv.high - iv.low)
    # The percentile bootstrap slightly under-covers at small n (it ignores the t-tail).
    assert 0.88 <= covered / reps <= 0.98
    assert np.mean(widths) == pytest.approx(2 * 1.96 * sigma / np.sqrt(n), rel=0.1)


def test_bootstrap_is_seeded_and_checks_its_input():
    values = [0.1, 0.4, 0.35, 0.8]
    assert bootstrap_mean(values, seed=5) == bootstrap_mean(values, seed=5)
    single = bootstrap_mean([0.7])
    assert (single.low, single.mean, single.high) == (0.7, 0.7, 0.7)
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_mean([])
    with pytest.raises(ValueError, match="level"):
        bootstrap_mean(values, level=1.5)


def test_the_leader_can_change_with_the_currency():
    def row(env_steps, forward_passes, success):
        budget = {"env_steps": env_steps, "forward_passes": forward_passes}
        budget = {**dict.fromkeys(("episodes", "decisions", "tokens_processed",
                                   "generated_samples", "generated_tokens", "optimizer_steps",
                                   "wall_time"), 0), **budget}  # fmt: skip
        return {"budget": budget, "success": success, "return": success}

    # A needs 2 forward passes per env step; B needs 1.
    arm_a = [row(10, 20, 0.2), row(20, 40, 1.0)]
    arm_b = [row(5, 5, 0.5), row(10, 10, 0.6), row(15, 15, 0.7), row(20, 20, 0.8)]
    curves = curves_for({"A": [arm_a], "B": [arm_b]})

    steps = curves["env_steps"]["leaders"]
    assert steps["window"] == [10.0, 20.0]
    assert steps["leader_at_end"] == ["A"]  # 1.0 vs 0.8 at 20 env steps
    assert steps["arms"]["A"]["success"]["auc"] == pytest.approx(0.2)  # 0.2 on [10, 20)
    assert steps["arms"]["B"]["success"]["auc"] == pytest.approx(0.65)  # 0.6, then 0.7
    assert steps["leader_auc"] == ["B"]
    passes = curves["forward_passes"]["leaders"]
    assert passes["window"] == [20.0, 20.0]
    assert passes["leader_at_end"] == ["B"]  # with 20 forward passes A is still at 0.2
    assert curves["episodes"]["leaders"]["window"] is None  # nobody spends it


# ------------------------------------------------------------- selection, processes
def test_selection_keeps_run_names_and_names_unknown_ones():
    data = tiny_comparison(
        envs=[
            {"name": "a", "id": "keydoor", "options": dict(TINY_ENV)},
            {"name": "b", "id": "keydoor", "options": dict(TINY_ENV)},
        ]
    )
    compare = parse_compare_config(data)
    part = compare.select(arms=["decision"], envs=["b"])
    # the whole comparison's names (env-qualified), so a later full call reuses these runs
    assert [r.name for r in part.runs()] == ["decision-b-seed0"]
    assert {r.name for r in compare.runs()} >= {r.name for r in part.runs()}
    assert part.to_dict()["selected_from_envs"] == ["a", "b"]
    with pytest.raises(CompareConfigError, match=r"unknown env name\(s\) c; this config has: a, b"):
        compare.select(envs=["c"])
    with pytest.raises(CompareConfigError, match="unknown arm"):
        compare.select(arms=["ppo"])
    seeded = parse_compare_config({**data, "seeds": [0, 1, 2]})
    part = seeded.select(arms=["decision"], envs=["a"], seeds=[2, 0])
    assert [r.name for r in part.runs()] == ["decision-a-seed0", "decision-a-seed2"]
    assert part.seeds == (0, 2)  # in the config's order
    with pytest.raises(CompareConfigError, match=r"unknown seed\(s\) 5; this config has: 0, 1, 2"):
        seeded.select(seeds=[5])


def test_compare_cli_selects_seeds_and_refuses_a_bad_list(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text(to_toml({**tiny_comparison(), "seeds": [0, 1]}))
    assert cli_main(["compare", "--config", str(path), "--seeds", "1", "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["seeds"] == [1]
    with pytest.raises(SystemExit):
        cli_main(["compare", "--config", str(path), "--seeds", "one", "--check"])
    assert "seeds are integers" in capsys.readouterr().err


def test_nproc_is_checked_against_the_global_groups():
    bad = tiny_comparison(arms={"two": {"plane": "decision", "nproc": 0}})
    with pytest.raises(CompareConfigError, match=r"arms.two.nproc: 0 is not a number"):
        parse_compare_config(bad)
    odd = tiny_comparison(arms={"three": {"plane": "decision", "nproc": 3}})  # 2 groups
    with pytest.raises(CompareConfigError, match="3 processes cannot share groups_per_iter=2"):
        parse_compare_config(odd)
    fine = parse_compare_config(tiny_comparison(arms={"two": {"plane": "decision", "nproc": 2}}))
    assert fine.runs()[0].nproc == 2 and fine.to_dict()["arms"][0]["nproc"] == 2
    one = parse_compare_config(tiny_comparison(arms={"one": {"plane": "decision"}}))
    assert "nproc" not in one.to_dict()["arms"][0]  # older comparison.json files stay equal


def test_a_missing_start_is_refused_before_training_with_its_arms_build_command(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)  # the model path is relative: read from the current directory
    build = "rlid pretrain --envs keydoor\n   --steps 3 --out runs/mine"
    arms = {"mine": {"plane": "decision", "options": {"model": "runs/mine"}, "build": build}}
    path = tmp_path / "c.toml"
    path.write_text(to_toml(tiny_comparison(arms=arms)))
    assert cli_main(["compare", "--config", str(path), "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err
    # the command, its whitespace made one line, and no training started
    assert "its model directory 'runs/mine' does not exist" in err
    assert (
        "Build it first, from the current directory: rlid pretrain --envs keydoor --steps 3 "
        "--out runs/mine; or leave the arm out with --arms" in err
    )
    assert not list(tmp_path.glob("out/runs/*/metrics.jsonl"))
    # without a build command the generic advice stays
    del arms["mine"]["build"]
    path.write_text(to_toml(tiny_comparison(arms=arms)))
    assert cli_main(["compare", "--config", str(path), "--out", str(tmp_path / "out2")]) != 0
    assert "Build or copy it first" in capsys.readouterr().err
    # a build that is not a string is a config error naming its key
    arms["mine"]["build"] = 3
    with pytest.raises(CompareConfigError, match=r"arms.mine.build: 3 is not a command"):
        parse_compare_config(tiny_comparison(arms=arms))
    # it is not part of what a run trains: the planned config is the same with or without
    arms["mine"]["build"] = build
    with_build = parse_compare_config(tiny_comparison(arms=arms))
    del arms["mine"]["build"]
    without = parse_compare_config(tiny_comparison(arms=arms))
    assert with_build.runs()[0].config == without.runs()[0].config
    assert with_build.to_dict() == without.to_dict()


def test_a_run_another_process_trains_is_left_to_it_and_the_last_one_reports(tmp_path, hold_lock):
    compare = parse_compare_config(tiny_comparison())
    first, second = [r.name for r in compare.runs()]
    said: list[str] = []
    claim = tmp_path / compare_mod.CLAIMS / second
    with hold_lock(claim, f"rlid compare: {second}") as pid:
        assert (
            compare_mod.run_comparison(compare, tmp_path, progress=False, say=said.append) is None
        )
    assert (tmp_path / "runs" / first / "eval.json").exists()
    assert not (tmp_path / "runs" / second).exists()  # not touched: its holder trains it
    assert any(f"{second}: being trained by pid {pid}" in m for m in said), said
    assert any(m.startswith("no report yet: 1 of 2") and second in m for m in said), said
    assert not (tmp_path / "report.md").exists()

    said.clear()  # its holder stopped without training it: the next call does
    results = compare_mod.run_comparison(compare, tmp_path, progress=False, say=said.append)
    assert results is not None and (tmp_path / "report.md").exists()
    ledger = json.loads((tmp_path / compare_mod.LEDGER).read_text())
    assert ledger[first]["history"] == ["trained", "reused"]
    assert ledger[second]["history"] == ["trained"]


def test_a_reference_another_process_evaluates_is_left_to_it(tmp_path, hold_lock):
    # the floor of seed 0 is being evaluated elsewhere: this process neither waits for
    # it nor evaluates it; it trains the runs, and the report waits for the reference
    compare = parse_compare_config(tiny_comparison(references=["random", "walkthrough"]))
    env = compare.envs[0].name
    said: list[str] = []
    claim = tmp_path / compare_mod.CLAIMS / "reference" / f"{env}-random-seed0"
    floor = compare_mod.reference_path(tmp_path, env, "random", 0)
    ceiling = compare_mod.reference_path(tmp_path, env, "walkthrough", 0)
    with hold_lock(claim, "rlid compare: x") as pid:
        assert (
            compare_mod.run_comparison(compare, tmp_path, progress=False, say=said.append) is None
        )
    assert not floor.exists() and ceiling.exists()
    assert all((tmp_path / "runs" / r.name / "eval.json").exists() for r in compare.runs())
    assert any(
        m.startswith("no report yet: 0 of 2 runs and 1 reference evaluation(s)")
        and f"{env}-random-seed0 (being evaluated by pid {pid} " in m
        for m in said
    ), said
    assert not (tmp_path / "report.md").exists()

    said.clear()  # its holder stopped without writing it: the next call evaluates it
    results = compare_mod.run_comparison(compare, tmp_path, progress=False, say=said.append)
    assert floor.exists() and results is not None and (tmp_path / "report.md").exists()
    assert f"reference random on {env}: evaluated" in said
    assert f"reference walkthrough on {env}: evaluated" not in said  # reused


def test_status_shows_where_every_run_stands_without_writing(tmp_path, hold_lock, capsys):
    from rlid.compare.status import comparison_status, format_status
    from rlid.runs import dir as rundir

    path = tmp_path / "c.toml"
    path.write_text(to_toml(tiny_comparison()))
    out = tmp_path / "out"
    status = ["compare", "--config", str(path), "--out", str(out), "--status"]
    assert cli_main(status) == 2  # nothing there yet: a clear error, nothing made
    assert "not the output of `rlid compare`" in capsys.readouterr().err and not out.exists()
    compare = parse_compare_config(tiny_comparison())
    compare_mod.run_comparison(
        compare.select(arms=["decision"], envs=None, seeds=None), out, progress=False,
        say=lambda m: None,
    )  # fmt: skip
    first, second = [r.name for r in compare.runs()]

    def files():  # but the claim this test's holder makes
        return {
            p: p.stat().st_mtime_ns for p in out.rglob("*")
            if p.is_file() and p.parent != out / compare_mod.CLAIMS / second
        }  # fmt: skip

    before = files()
    with hold_lock(out / compare_mod.CLAIMS / second, "rlid compare: x") as pid:
        rows = {r["run"]: r for r in comparison_status(compare, out)}
        assert cli_main(status) == 0
        text = capsys.readouterr().out
    done = rundir.read_json(out / "runs" / first / "eval.json")["after"]
    assert rows[first]["state"] == "finished" and rows[first]["success"] == done["success"]
    assert rows[first]["spent"] >= 30 and rows[first]["iterations"] >= 1
    assert rows[first]["seconds"] > 0
    assert rows[second]["state"] == "training" and f"pid {pid}" in rows[second]["holder"]
    assert f"pid {pid}" in text and "1 of 2 runs finished, 1 training" in text
    # the holder was killed: its record stays, but a dead process trains nothing
    assert comparison_status(compare, out)[1]["state"] == "new"
    run_dir = out / "runs" / second
    run_dir.mkdir()
    rundir.write_json(run_dir / "config.json", {"config": {}})  # started, then stopped
    assert comparison_status(compare, out)[1]["state"] == "stopped"
    assert comparison_status(compare, out)[1]["last_eval"] is None  # no evaluation yet
    # evaluated along training (eval_every): the latest held-out success is shown
    cur = compare.currency
    rows_along = [{"budget": {cur: 10}, "eval": {"success": 0.5}}, {"budget": {cur: 20}},
                  {"budget": {cur: 30}, "eval": {"success": 0.25}}, {"budget": {cur: 40}}]  # fmt: skip
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows_along))
    stopped = comparison_status(compare, out)
    assert stopped[1]["last_eval"] == {"success": 0.25, "at": 30} and stopped[1]["spent"] == 40
    assert stopped[0]["last_eval"] is None  # a finished run shows its final evaluation
    assert "(0.25 at 30)" in format_status(stopped, cur)
    (run_dir / "metrics.jsonl").unlink()
    (run_dir / "config.json").unlink()
    run_dir.rmdir()
    assert files() == before  # read only
    # held-out games with options of their own: their evaluation is the one shown
    rundir.write_json(
        compare_mod.heldout_path(out, compare.runs()[0]), {"after": {"success": 0.125}}
    )
    assert comparison_status(compare, out)[0]["success"] == 0.125


def test_status_estimates_the_training_time_a_started_run_still_needs(tmp_path):
    from rlid.compare.status import _duration, comparison_status, format_status
    from rlid.runs import dir as rundir

    compare = parse_compare_config(tiny_comparison())  # budget: 30 env steps
    out = tmp_path / "out"
    first = compare.runs()[0].name
    run_dir = out / "runs" / first
    run_dir.mkdir(parents=True)
    rundir.write_json(run_dir / "config.json", {"config": {}})  # started, then stopped
    rows = [{"budget": {"env_steps": 6, "wall_time": 4.0}},
            {"budget": {"env_steps": 12, "wall_time": 9.0}}]  # fmt: skip
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    status = comparison_status(compare, out)
    # 18 env steps left at 9 s per 12 steps: 13.5 s
    assert status[0]["state"] == "stopped" and status[0]["left_s"] == pytest.approx(13.5)
    assert status[1]["left_s"] is None  # not started: no pace to go by
    assert "~14 s" in format_status(status, compare.currency)
    assert [_duration(s) for s in (40, 600, 9000)] == ["~40 s", "~10 min", "~2.5 h"]


def test_status_names_a_missing_model_that_keeps_runs_from_starting(tmp_path):
    from rlid.compare.status import comparison_status, format_status

    warm = tmp_path / "warm"  # not built yet
    data = tiny_comparison()
    data["arms"]["decision"]["options"] = {"model": str(warm)}
    compare = parse_compare_config(data)
    out = tmp_path / "out"
    out.mkdir()
    rows = comparison_status(compare, out)
    assert [r["missing_model"] for r in rows] == [str(warm), ""]  # grpo starts from tiny
    text = format_status(rows, compare.currency)
    assert "new (no model)" in text and "1 of them cannot start yet" in text
    assert str(warm) in text.splitlines()[-1]
    # with the arm's build command, a last line says how to build it
    data["arms"]["decision"]["build"] = f"rlid pretrain --out {warm}"
    built_by = parse_compare_config(data)
    text = format_status(comparison_status(built_by, out), compare.currency)
    assert text.splitlines()[-1] == f"build {warm} with: rlid pretrain --out {warm}"
    assert "cannot start yet" in text.splitlines()[-2]
    warm.mkdir()  # built: nothing missing, no extra line
    rows = comparison_status(built_by, out)
    assert [r["missing_model"] for r in rows] == ["", ""]
    text = format_status(rows, compare.currency)
    assert "cannot start" not in text and "build" not in text


def test_two_compare_processes_on_one_out_share_its_runs_and_match_one(tmp_path, untimed):
    # Two `rlid compare` processes started together on one --out: every run trained
    # once, by one of them, to the same metrics as one process training them all.
    import os
    import subprocess
    import sys

    data = tiny_comparison(
        seeds=[0, 1],
        arms={"a": {"plane": "decision"}, "b": {"plane": "decision", "options": {"lr": 1e-3}}},
    )
    data["defaults"]["model"] = "tiny-random"  # the processes do not see the tests' recipe
    config = tmp_path / "c.toml"
    config.write_text(to_toml(data))
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}

    def start(out: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "rlid", "compare", "--config", str(config),
             "--out", str(out), "--quiet"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    workers = [start(tmp_path / "shared"), start(tmp_path / "shared")]
    alone = start(tmp_path / "alone")
    for proc in [*workers, alone]:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    names = [r.name for r in parse_compare_config(data).runs()]
    assert len(names) == 4
    ledger = json.loads((tmp_path / "shared" / compare_mod.LEDGER).read_text())
    for name in names:  # trained by exactly one of the two (the other may have reused it)
        assert ledger[name]["history"].count("trained") == 1, ledger

    for name in names:
        shared, one = tmp_path / "shared" / "runs" / name, tmp_path / "alone" / "runs" / name
        assert untimed(read_metrics(shared)) == untimed(read_metrics(one)), name
        after = [json.loads((d / "eval.json").read_text())["after"] for d in (shared, one)]
        assert after[0]["success"] == after[1]["success"]
        assert after[0]["return"] == after[1]["return"]
    shared = json.loads((tmp_path / "shared" / "results.json").read_text())
    one = json.loads((tmp_path / "alone" / "results.json").read_text())

    def untimed(tree):  # the report's numbers less the clocks
        if isinstance(tree, dict):
            clocks = ("wall_time", "time_split", "run_seconds")
            return {k: untimed(v) for k, v in tree.items() if k not in clocks}
        return tree

    assert untimed(shared["envs"]) == untimed(one["envs"])


def test_an_arm_trained_by_two_processes_matches_one_process(tmp_path):
    # the same recipe as one process and as two torchrun processes (gloo): the same
    # global budget, the same episodes, the same losses to float tolerance
    data = tiny_comparison(
        arms={"one": {"plane": "decision"}, "two": {"plane": "decision", "nproc": 2}},
        references=[],
    )
    data["defaults"]["model"] = "tiny-random"  # the processes do not see the tests' recipe
    data["defaults"]["dist_timeout"] = 60.0
    compare = parse_compare_config(data)
    compare_mod.run_comparison(compare, tmp_path, progress=False, say=lambda m: None)
    one = read_metrics(tmp_path / "runs" / "one-seed0")
    two = read_metrics(tmp_path / "runs" / "two-seed0")
    assert len(one) == len(two) >= 2
    for a, b in zip(one, two):
        for counter in ("env_steps", "episodes", "decisions", "optimizer_steps"):
            assert a["budget"][counter] == b["budget"][counter], counter
        assert (a["return"], a["success"]) == (b["return"], b["success"])  # the same episodes
        for name in ("policy_loss", "approx_kl", "entropy", "grad_norm"):
            assert b[name] == pytest.approx(a[name], rel=1e-4, abs=1e-6), name
    assert (tmp_path / "launch" / "two-seed0.json").exists()
    assert "nproc=2" in (tmp_path / "report.md").read_text()


def _two_process_comparison(tmp_path, defaults=(), **changes):
    """`rlid compare` of one two-process run in a session of its own, once its first
    iteration is logged: (process, argv, env, run directory)."""
    import os
    import subprocess
    import sys
    import time

    data = tiny_comparison(arms={"two": {"plane": "decision", "nproc": 2}}, references=[])
    data.update(changes)
    data["defaults"].update(model="tiny-random", dist_timeout=60.0, checkpoint_every=1000)
    data["defaults"].update(defaults)
    config = tmp_path / "c.toml"
    config.write_text(to_toml(data))
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "rlid", "compare", "--config", str(config), "--out", str(out),
            "--quiet"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(rlid.__file__).parents[1]), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    run_dir = out / "runs" / "two-seed0"
    deadline = time.monotonic() + 300
    while not read_metrics(run_dir):
        if time.monotonic() > deadline or proc.poll() is not None:
            _kill_session(proc)
            raise AssertionError("the comparison never got going")
        time.sleep(0.05)
    return proc, argv, env, run_dir


def _kill_session(proc) -> None:
    import os
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _processes_of(run_dir: Path) -> list[str]:
    """Pids of live processes whose command line names ``run_dir`` (Linux /proc)."""
    left = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(run_dir).encode() in cmdline.read_bytes():
                left.append(cmdline.parent.name)
        except OSError:
            continue
    return left


def test_a_comparison_run_by_two_processes_passes_sigterm_on_and_resumes(tmp_path):
    # SIGTERM to the `rlid compare` process alone (a container's first process, a
    # `kill PID`): it passes the stop on to both training processes, which checkpoint the
    # same iteration and exit; the comparison exits 143 and its rerun resumes the run
    import signal
    import subprocess

    budget = {"currency": "env_steps", "amount": 400}  # 20 iterations or more
    proc, argv, env, run_dir = _two_process_comparison(tmp_path, budget=budget)
    out = run_dir.parents[1]
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        _kill_session(proc)
    assert proc.returncode == 143, err
    assert "passed on to the 2 training processes" in err, err
    assert "stopped by SIGTERM after iteration" in err and "Traceback" not in err, err
    assert "the same `rlid compare` command continues it" in err
    rows = read_metrics(run_dir)
    state = json.loads((run_dir / "checkpoint" / "state.json").read_text())
    assert state["iteration"] == rows[-1]["iteration"] and rows[-1]["budget"]["env_steps"] < 400
    assert not (out / "launch" / "two-seed0.pids").exists()
    assert json.loads((out / "runs.json").read_text())["two-seed0"]["seconds"] > 0
    if Path("/proc").is_dir():  # no training process outlives the comparison
        assert _processes_of(run_dir) == []

    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "runs.json").read_text())["two-seed0"]["history"] == [
        "trained",
        "resumed",
    ]
    rows = read_metrics(run_dir)
    assert [r["iteration"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows[-1]["budget"]["env_steps"] >= 400 and (out / "report.md").exists()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads live processes from /proc")
def test_a_second_sigterm_to_a_two_process_comparison_kills_every_process_at_once(tmp_path):
    # the first SIGTERM asks for a checkpointed stop; a second one, later than the
    # repeat window, kills both training processes and torchrun and ends the comparison
    # at once (one line, exit 143), without waiting for the long iteration to finish
    import signal
    import time

    from rlid.runs.stop import REPEAT_AFTER

    # iterations of about 8 s with two processes here (28 s on a busy machine): more than
    # the settling second and the repeat window
    slow = {"groups_per_iter": 8, "group_size": 8, "epochs": 4, "minibatch_size": 4}
    proc, _, _, run_dir = _two_process_comparison(
        tmp_path, defaults=slow, budget={"currency": "env_steps", "amount": 100_000}
    )
    # iteration 1's row is written just before the ranks agree whether to stop: a signal
    # in that gap stops after iteration 1 (as it should), leaving nothing for this test
    # to interrupt; on a busy machine the gap was wide enough to hit, so wait past it
    time.sleep(1.0)
    try:
        proc.send_signal(signal.SIGTERM)
        time.sleep(REPEAT_AFTER + 0.2)
        assert proc.poll() is None, "the iteration ended before the second signal"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        _kill_session(proc)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM again: stopping at once" in err, err
    deadline = time.monotonic() + 10
    while _processes_of(run_dir) and time.monotonic() < deadline:
        time.sleep(0.1)  # SIGKILLed processes vanish once reaped
    assert _processes_of(run_dir) == []
    assert [r["iteration"] for r in read_metrics(run_dir)] == [1]  # what was logged stays


def test_a_run_stopped_before_its_first_checkpoint_says_so():
    import signal

    from rlid.runs.stop import RunStopped

    text = str(RunStopped(Path("r"), 0, signal.SIGTERM, resume_with="the same command"))
    assert text == (
        "r: stopped by SIGTERM before its first iteration was checkpointed (nothing to "
        "keep): the same command starts it again"
    )


def test_a_broken_or_missing_toml_file_is_a_clear_error(tmp_path):
    from rlid.compare.parse import load_compare_config
    from rlid.config.run import read_toml

    broken = tmp_path / "broken.toml"
    broken.write_text("name = \n")
    with pytest.raises(
        CompareConfigError, match="comparison config .*broken.toml is not valid TOML"
    ):
        load_compare_config(broken)
    with pytest.raises(ValueError, match="config file .*broken.toml is not valid TOML"):
        read_toml(broken, "config file")
    with pytest.raises(FileNotFoundError, match="comparison config .*nope.toml does not exist"):
        load_compare_config(tmp_path / "nope.toml")


def test_the_report_counts_training_prompts_shortened_and_menus_truncated():
    from rlid.compare.report import summarise_arm
    from rlid.config.budget import Budget

    def run(seed, shortened, truncated=0):
        budget = Budget(env_steps=200, decisions=200, shortened_prompts=shortened,
                        truncated_menus=truncated).to_dict()  # fmt: skip
        stats = {"success": 0.5, "return": 1.0, "normalized_score": 0.5,
                 "episode_length": 4.0, "invalid_rate": 0.0}  # fmt: skip
        return {"seed": seed, "heldout": {"before": stats, "after": stats},
                "final_budget": budget, "rows": [], "iterations": 1}  # fmt: skip

    summary = summarise_arm([run(0, 10), run(1, 30)])
    assert summary["invalid"]["train_shortened_rate"] == pytest.approx(40 / 400)
    assert summarise_arm([run(0, 0)])["invalid"]["train_shortened_rate"] == 0.0
    truncated = summarise_arm([run(0, 0, truncated=5), run(1, 0, truncated=3)])["invalid"]
    assert truncated["train_truncated_rate"] == pytest.approx(8 / 400)
    older = run(0, 0)  # a run written before the counter existed reads as 0
    del older["final_budget"]["truncated_menus"]
    assert summarise_arm([older])["invalid"]["train_truncated_rate"] == 0.0


def test_eval_of_a_model_on_a_setting_is_that_comparisons_before_row(tmp_path, capsys):
    """``rlid eval --model M --config CMP.toml --setting S`` plays S exactly as the
    comparison evaluates it: with M = the arms' start model, its numbers are the
    comparison's "before" row (and a candidate warm start is measured the same way)."""
    data = tiny_comparison(
        arms={"decision": {"plane": "decision"}},
        heldout_episodes=3,
        envs=[{"id": "keydoor", "options": dict(TINY_ENV)}, {"id": "crafting", "name": "craft"}],
    )
    path = tmp_path / "c.toml"
    path.write_text(to_toml(data))
    compare = parse_compare_config(data).select(envs=["keydoor"])
    compare_mod.run_comparison(compare, tmp_path / "out", progress=False, say=lambda m: None)
    run = compare.runs()[0]
    before = json.loads((tmp_path / "out" / "runs" / run.name / "eval.json").read_text())["before"]
    argv = ["eval", "--model", "tiny", "--config", str(path), "--setting", "keydoor", "--json"]
    assert cli_main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["episodes"] == 3  # the comparison's held-out count
    assert {k: printed[k] for k in before} == before
    assert cli_main([*argv, "--arm", "decision", "--episodes", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 1
    # without --model: the arm's own start (here tiny), so the same "before" row
    assert cli_main(["eval", "--config", str(path), "--setting", "keydoor", "--json"]) == 0
    own = json.loads(capsys.readouterr().out)
    assert {k: own[k] for k in before} == before
    # an arm whose start is not built yet: its build command, or --model
    built = tmp_path / "b.toml"
    arms = {"mine": {"plane": "decision", "options": {"model": str(tmp_path / "nope")},
                     "build": "rlid pretrain --out nope"}}  # fmt: skip
    built.write_text(to_toml({**data, "arms": arms}))
    assert cli_main(["eval", "--config", str(built), "--setting", "keydoor"]) == 2
    err = capsys.readouterr().err
    assert "Build it first, from the current directory: rlid pretrain --out nope" in err
    assert "or evaluate another with --model M" in err and "--arms" not in err
    assert cli_main(["eval"]) == 2
    assert "give --run DIR" in capsys.readouterr().err

    # mistakes are one line each, naming what there is
    def error(*args: str) -> str:
        assert cli_main(["eval", "--model", "tiny", *args]) == 2
        return capsys.readouterr().err

    assert "is a comparison config" in error("--config", str(path))
    assert "this config has: keydoor, craft" in error("--config", str(path), "--setting", "nope")
    assert "this config has: decision" in error(
        "--config", str(path), "--setting", "craft", "--arm", "nope"
    )
    assert "give --config" in error("--setting", "keydoor")
    assert "drop --env" in error("--config", str(path), "--setting", "craft", "--env", "keydoor")
    assert "no arm of the token plane" in error(
        "--config", str(path), "--setting", "craft", "--plane", "token"
    )


def test_heldout_plot_has_a_row_per_arm_the_before_marks_and_the_reference_lines(tmp_path):
    from PIL import Image

    from rlid.compare.curves import plot_heldout

    def iv(mean):
        return {"mean": mean, "low": mean - 0.05, "high": mean + 0.05, "level": 0.95, "n": 3}

    def arm(after, before):
        b = None if before is None else {"success": iv(before), "return": iv(before)}
        return {"heldout": {"after": {"success": iv(after), "return": iv(after)}, "before": b}}

    refs = {"random": {"heldout": {"success": iv(0.1), "return": iv(0.1)}}}
    few = {"a": arm(0.5, 0.2), "b": arm(0.3, None)}
    many = {f"an-arm-with-a-long-name-{i}": arm(0.1 * i, 0.1) for i in range(10)}
    plot_heldout(few, "few", tmp_path / "few.png", refs)
    plot_heldout(many, "many", tmp_path / "many.png", None)  # no references: no lines
    with Image.open(tmp_path / "few.png") as f, Image.open(tmp_path / "many.png") as m:
        assert m.size[0] == f.size[0] and m.size[1] > f.size[1]  # taller with more arms


def test_a_run_from_other_starting_weights_is_not_reused(tmp_path):
    """`tiny` became the shipped start: a run recorded from the former `tiny` (another
    sha256) has the same config but not the same start, and is refused, not reused."""
    from rlid.compare.run import check_existing_run
    from rlid.lm.starts import model_pin

    compare = parse_compare_config(tiny_comparison())
    run = next(r for r in compare.runs() if r.arm == "decision")
    run = replace(run, config=run.config.replace(model="tiny"))
    run_dir = tmp_path / "run"
    log = RunLog.open(run_dir, run.config, resume=False, pins=model_pin)
    log.start()
    log.close()
    check_existing_run(run, run_dir, "finished")  # the same start: fine
    raw = json.loads((run_dir / "config.json").read_text())
    raw["start_model"] = {**raw["start_model"], "origin": "warm", "sha256": "0" * 64}
    raw.pop("sha256", None)  # the file's own digest: rewritten as an older run wrote it
    (run_dir / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="trained from other starting weights"):
        check_existing_run(run, run_dir, "finished")
