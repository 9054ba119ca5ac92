"""One ``--out``, one comparison: a second ``rlid compare`` with other settings (another
budget) on the same ``--out`` is refused before it writes anything, so a report never
mixes runs trained under different budgets while saying they are the same."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from rlid.cli import main as cli_main

TINY_ENV = {"size": 2, "keys": 0, "distractors": 1, "max_episode_steps": 5}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("RLID_DEBUG", raising=False)


def _toml(amount: int, seeds: str = "[0, 1]") -> str:
    return "\n".join([
        'name = "tiny"', f"seeds = {seeds}", "heldout_episodes = 2",
        f'budget = {{currency = "env_steps", amount = {amount}}}',
        'interface = {memory = "none"}',
        'defaults = {groups_per_iter = 2, group_size = 2, epochs = 1, threads = 1}',
        "envs = [{id = \"keydoor\", options = " + json.dumps(TINY_ENV).replace(":", " =")
        .replace('"size"', "size").replace('"keys"', "keys").replace('"distractors"', "distractors")
        .replace('"max_episode_steps"', "max_episode_steps") + "}]",
        "[arms.decision]", 'plane = "decision"', "",
    ])  # fmt: skip


def _digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".rlid.lock" not in p.name and ".claims" not in p.parts
    }


def test_a_second_comparison_with_another_budget_on_one_out_is_refused(tmp_path, capsys):
    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    first.write_text(_toml(240))
    second.write_text(_toml(300))
    out = tmp_path / "out"
    argv = ["compare", "--out", str(out), "--quiet", "--references"]
    assert cli_main([*argv, "--config", str(first)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    before = _digests(out)
    assert cli_main([*argv, "--config", str(second)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other settings" in err[0] and "budget" in err[0], err
    assert _digests(out) == before
    # the same comparison, or a selection of its seeds, continues as before
    assert cli_main([*argv, "--config", str(first), "--seeds", "0"]) == 0
