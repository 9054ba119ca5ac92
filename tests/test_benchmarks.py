"""The benchmark scripts run: a random model of a (tiny) real shape, the readout and
update benchmarks on it, and the GPU check script's syntax (it needs CUDA to run)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def random_qwen(tmp_path_factory):
    """A random model of a tiny Qwen2 shape with Qwen's real BPE, written by the script."""
    pytest.importorskip("dashscope")
    pytest.importorskip("tiktoken")
    random_model = _script("random_model")
    root = tmp_path_factory.mktemp("random-model")
    random_model.main(["--tokenizer", "qwen-bpe", "--tokenizer-only", "--out", str(root / "tok")])
    random_model.main(
        ["--shape", "qwen2-tiny", "--tokenizer", str(root / "tok"), "--out", str(root / "model"),
         "--dtype", "float32"]
    )  # fmt: skip
    return random_model, root


def test_random_model_writes_a_loadable_directory_and_refuses_to_overwrite(random_qwen):
    from rlid.lm.starts import load_policy_model

    random_model, root = random_qwen
    model, tokenizer = load_policy_model(root / "model")
    assert len(tokenizer) == 151646 and tokenizer.chat_template is not None
    assert model.config.hidden_size == 64 and model.config.eos_token_id == tokenizer.eos_token_id
    assert not (root / "model.partial").exists()
    with pytest.raises(SystemExit):
        random_model.main(["--tokenizer", str(root / "tok"), "--out", str(root / "model")])


def test_readout_and_update_benchmarks_run_on_a_local_model(random_qwen, capsys):
    _, root = random_qwen
    _script("readout").main(
        ["--model", str(root / "model"), "--device", "cpu", "--batch", "2", "--reps", "1",
         "--menu-sizes", "4", "--max-new-tokens", "2"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "decisions/s" in out and "device=cpu" in out and "met at" in out
    _script("hardware").main(
        ["--only", "update", "--model", str(root / "model"), "--device", "cpu", "--batch", "2",
         "--reps", "1", "--settings", "fp32", "fp32-ckpt", "--threads", "1"]
    )  # fmt: skip
    rows = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| float32")]
    assert len(rows) == 2
    losses = [float(x.strip(" |").split("|")[-1]) for x in rows]
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)  # checkpointing: same loss


def test_gpu_check_script_parses():
    subprocess.run(["bash", "-n", str(BENCHMARKS / "gpu_check.sh")], check=True)


def test_menu_cost_splits_each_decision_into_menu_and_forward(capsys):
    _script("menu_cost").main(["--env", "keydoor", "-o", "size=2", "--decisions", "5"])
    out = capsys.readouterr().out
    rows = [line.strip("|").split("|") for line in out.splitlines() if line.startswith("| ")]
    table = {cells[0].strip(): cells[1:] for cells in rows[1:]}
    assert "1-62" in table and int(table["all"][0]) >= 5  # every decision in "all"
    assert int(table["1-62"][0]) == int(table["all"][0])  # keydoor's menus fit the labels
    menu_ms, forward_ms = float(table["all"][2]), float(table["all"][3])
    assert menu_ms >= 0 and forward_ms > 0


def test_scoring_plane_times_packed_rows_against_the_even_split(capsys):
    """``--against even-rows`` swaps the row layout for its calls only, and both layouts
    give one distribution on real ScienceWorld menus (packed: 199 and 404 actions)."""
    import rlid.baselines.engine

    bench = _script("scoring_plane")
    states = Path(__file__).parent / "data" / "scienceworld_states.json"
    default = rlid.baselines.engine.pack_rows
    with bench.even_rows_layout():
        assert rlid.baselines.engine.pack_rows is bench.even_rows
    assert rlid.baselines.engine.pack_rows is default
    # the even split: each menu over min(K, copies) rows of ceil(K / copies) completions
    assert bench.even_rows([5, 2], [3, 3, 3, 3, 3, 2, 2], 2)[0] == [0, 0, 1, 1]
    assert default([5, 2], [3, 3, 3, 3, 3, 2, 2], 2)[0] == [0, 0, 1]
    bench.main(["--model", "tiny", "--against", "even-rows", "--states-file", str(states),
                "--min-actions", "150", "--reps", "1"])  # fmt: skip
    out = capsys.readouterr().out
    gap = float(out.split("log pi even-rows| = ")[1].split()[0])
    assert gap < 1e-4
    times = {line.split()[0]: line.split()[1:] for line in out.splitlines()
             if line.strip().startswith(("act ", "update "))}  # fmt: skip
    assert set(times) == {"act", "update"} and all(float(t) > 0 for t in times["update"])


def test_logprob_memory_compares_the_written_out_form_with_blocks(capsys):
    """Same values and gradients; the blocks keep fewer bytes alive (allocation events,
    not timings), for bfloat16 and float32 logits."""
    bench = _script("logprob_memory")
    bench.main(["--positions", "64", "--vocab", "4096", "--reps", "1"])
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines()
            if line.startswith(("| bfloat16", "| float32"))]  # fmt: skip
    assert [r[0].strip() for r in rows] == ["bfloat16", "float32"]
    for row in rows:
        assert float(row[4].strip().rstrip("x")) > 1.5
        values, grads = (float(x) for x in row[5].split(","))
        assert values < 1e-5 and grads < 1e-4
    with pytest.raises(SystemExit):
        bench.main(["--dtype", "float13"])


def test_train_throughput_prints_each_plane_and_the_cells_left_out(tmp_path, capsys):
    """--planes rows from kept runs (--from), without running a model: a plane's row is
    named setting/plane, a skipped update is said, a cell left out gets a row."""
    bench = _script("train_throughput")
    time_ = {"env": 1.0, "menu": 0.5, "generate": 2.0, "backward": 0.0}
    budget = {"env_steps": 20, "decisions": 20, "wall_time": 4.0}
    counted = {"forwards": 30.0, "tokens": 2000.0, "positions": 2100.0, "flops": 4e9,
               "nograd_tokens": 2000.0, "train_cpu_s": 4.0, "cpu_s": 5.0,
               "gemm_flops_per_s": 1e11}  # fmt: skip
    for plane in ("decision", "token"):
        run = tmp_path / bench.cell("babyai", plane, "now")
        run.mkdir()
        row = {"budget": budget, "time": time_, "skipped_update": float(plane == "token")}
        (run / "metrics.jsonl").write_text(json.dumps(row) + "\n")
        (tmp_path / f"{run.name}.json").write_text(json.dumps(counted))
    bench.main(["--from", str(tmp_path), "--arms", "now", "--settings", "babyai",
                "--planes", "decision,token"])  # fmt: skip
    out = capsys.readouterr().out
    rows = [line.split("|")[1:3] for line in out.splitlines() if line.startswith("| babyai")]
    assert [[c.strip() for c in r] for r in rows] == [["babyai", "now"], ["babyai/token", "now"]]
    assert "| 1.50 | 25% / 12% / 50% / 0% / 12% |" in out  # generate counts as forward
    assert out.rstrip().endswith("rollout only): babyai/token/now")
    left = bench.table({"babyai/scoring": {"old": {"left_out": "over 300 s"}}}, "old")
    assert "| babyai/scoring | old | left out: over 300 s |" in left
    with pytest.raises(SystemExit):
        bench.main(["--from", str(tmp_path), "--planes", "pixels"])
