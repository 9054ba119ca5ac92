"""Behaviour fingerprint: fixed-seed short runs of every plane, hashed.

A refactor that moves code must not change what it computes. This script runs a fixed
set of short training runs (each plane; flat and label-tree menus; decision PPO with
GAE, a KL to the start, the label-mass term and micro-batches; scoring; token DAPO with
TIS) and prints, per run, the sha256 of the trained weights, the trainer state (the
optimizer's tensors and its JSON), the metrics with every timing field removed and the
held-out evaluation with its timing removed. Two checkouts that print the same lines
train the same models, byte for byte.

    python benchmarks/fingerprint.py --out /tmp/fp-new > new.txt
    PYTHONPATH=/path/to/old/checkout python benchmarks/fingerprint.py --out /tmp/fp-old > old.txt
    diff old.txt new.txt

The second line runs an older checkout's code with this environment's packages (its
``PYTHONPATH`` entry is searched before the installed, editable ``rlid``). Takes about
two minutes on one thread (``--only NAME`` runs one).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

COMMON = ["--threads", "1", "--quiet", "--seed", "3", "--eval-episodes", "4"]
SMALL = ["--groups-per-iter", "2", "--group-size", "4"]

RUNS: dict[str, list[str]] = {
    "decision-flat": ["--env", "keydoor", "-o", "size=3", "--steps", "100", *SMALL],
    "decision-gae-kl-mass-micro": [
        "--env", "keydoor", "-o", "size=3", "--steps", "100", *SMALL,
        "--advantage", "gae", "--kl-coef", "0.05", "--label-mass-coef", "0.1",
        "--micro-batch-size", "3", "--epochs", "2", "--minibatch-size", "8",
    ],
    "decision-tree-lab": [
        "--env", "lab", "--steps", "60", *SMALL, "--tree-fanout", "6",
        "--micro-batch-tokens", "4000",
    ],
    "decision-tree-scienceworld": [
        "--env", "scienceworld", "-o", "task=find-plant", "-o", "simplifications=easy",
        "-o", "max_episode_steps=6", "--steps", "24", "--groups-per-iter", "1",
        "--group-size", "2", "--eval-episodes", "2",
    ],
    "decision-position-target-kl": [
        "--env", "keydoor", "-o", "size=3", "--steps", "100", *SMALL,
        "--position-coef", "0.5", "--target-kl", "0.01", "--epochs", "3", "--minibatch-size", "8",
    ],
    "scoring": ["--plane", "scoring", "--env", "keydoor", "-o", "size=3", "--steps", "80", *SMALL],
    "token-dapo-tis": [
        "--plane", "token", "--algo", "dapo", "--env", "keydoor", "-o", "size=3",
        "--steps", "80", *SMALL, "--rollout-engine", "perturbed", "--mismatch", "tis",
    ],
    "token-grpo-kl-micro": [
        "--plane", "token", "--algo", "grpo", "--env", "keydoor", "-o", "size=3",
        "--steps", "80", *SMALL, "--beta", "0.05", "--micro-batch-size", "3",
    ],
}  # fmt: skip

TIMING = ("time", "seconds", "wall", "_s", "per_s", "phase")
# the interpreter's and numpy's global generators, which rlid never seeds nor draws from
# (a checkpoint keeps them for an exact resume of user code), and the software record
UNSEEDED = ("python", "numpy", "created", "date", "software")


def _untimed(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: _untimed(v)
            for k, v in sorted(value.items())
            if not any(t in k for t in TIMING) and k not in UNSEEDED
        }
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def fingerprint(run: Path) -> dict[str, str]:
    """Hashes of what a run computed (timings left out)."""
    ckpt = run / "checkpoint"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {
        "weights": _sha((ckpt / "model" / "model.safetensors").read_bytes()),
        "trainer_state": _sha((ckpt / "trainer_state.safetensors").read_bytes()),
        "trainer_json": _sha(json.dumps(_untimed(json.loads((ckpt / "trainer_state.json").read_text())), sort_keys=True).encode()),
        "metrics": _sha(json.dumps(_untimed(metrics), sort_keys=True).encode()),
        "eval": _sha(json.dumps(_untimed(json.loads((run / "eval.json").read_text())), sort_keys=True).encode()),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the runs (must not exist)")
    parser.add_argument("--only", action="append", choices=sorted(RUNS), help="run only these")
    parser.add_argument("--rehash", action="store_true", help="hash the runs already in --out")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.rehash:
        for name in args.only or RUNS:
            if (out / name).is_dir():
                print(
                    f"{name}: " + " ".join(f"{k}={v}" for k, v in fingerprint(out / name).items())
                )
        return 0
    out.mkdir(parents=True)
    for name in args.only or RUNS:
        cmd = [
            sys.executable,
            "-m",
            "rlid",
            "train",
            *RUNS[name],
            *COMMON,
            "--out",
            str(out / name),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
        if done.returncode != 0:
            print(
                f"{name}: failed (exit {done.returncode})\n{done.stderr[-2000:]}", file=sys.stderr
            )
            return 1
        hashes = " ".join(f"{k}={v}" for k, v in fingerprint(out / name).items())
        print(f"{name}: {hashes}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
