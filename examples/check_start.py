"""Does a warm start play the suite like the shipped one, before any RL?

Plays every setting of a comparison config (the suite by default) greedily on its
held-out games, as `rlid compare` evaluates them before training, with the shipped
start (`--model tiny`) and with a candidate start directory (e.g. a rebuild by the
manifest's `rlid pretrain` command), and prints both success rates side by side with
the shipped start's 95% Wilson interval over its episodes. Each evaluation is one
`rlid eval --model ... --setting ... --json`, kept in --out, so a stopped check
continues where it stopped::

    rlid pretrain <the manifest's arguments> --out runs/start
    python examples/check_start.py runs/start --out runs/start-check

ScienceWorld settings are left out unless named with --settings (minutes per game).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tomllib
from pathlib import Path

from rlid.agents.card import wilson_interval

ROOT = Path(__file__).resolve().parent.parent
SLOW_ENVS = ("scienceworld",)


def settings_of(config: Path) -> list[str]:
    """The config's setting names, ScienceWorld's left out."""
    with config.open("rb") as fh:
        envs = tomllib.load(fh).get("envs", [])
    return [env["name"] for env in envs if env.get("id") not in SLOW_ENVS]


def evaluate(model: str, config: Path, setting: str, path: Path) -> dict:
    """``rlid eval`` of ``model`` on ``setting`` (kept in ``path``; read back if there)."""
    if path.is_file():
        return json.loads(path.read_text())
    command = [sys.executable, "-m", "rlid", "eval", "--model", model, "--config", str(config),
               "--setting", setting, "--json"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"check_start: {' '.join(command)} failed:\n{done.stderr.strip()}")
    result = json.loads(done.stdout)
    path.write_text(json.dumps(result, indent=1))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("start", help="the candidate start: a model directory")
    parser.add_argument(
        "--config",
        type=Path,
        default=ROOT / "examples" / "suite.toml",
        help="comparison config whose settings are played (default: the suite)",
    )
    parser.add_argument(
        "--settings", help="comma-separated setting names (default: all but ScienceWorld's)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="directory for the evaluations (reused when run again)",
    )
    args = parser.parse_args(argv)  # fmt: skip
    if not Path(args.start).is_dir():
        parser.error(f"{args.start} is not a directory (a model directory from rlid pretrain)")
    if not args.config.is_file():
        parser.error(f"--config {args.config} is not a file")
    names = args.settings.split(",") if args.settings else settings_of(args.config)
    if not names:
        parser.error(
            f"{args.config} has no setting to play outside ScienceWorld; name some with --settings"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    print("| setting | shipped start [95% Wilson] | candidate | inside |")
    print("|---|---|---|---|")
    inside = 0
    for name in names:
        shipped = evaluate("tiny", args.config, name, args.out / f"{name}.shipped.json")
        other = evaluate(str(args.start), args.config, name, args.out / f"{name}.candidate.json")
        n = int(shipped["episodes"])
        low, high = wilson_interval(shipped["success"] * n, n)
        ok = low - 1e-9 <= other["success"] <= high + 1e-9
        inside += ok
        print(f"| {name} | {shipped['success']:.2f} [{low:.2f}, {high:.2f}] | "
              f"{other['success']:.2f} | {'yes' if ok else 'no'} |", flush=True)  # fmt: skip
    print(
        f"\n{inside} of {len(names)} settings inside the shipped start's interval "
        f"({n} held-out episodes each)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
