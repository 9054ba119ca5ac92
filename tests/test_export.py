"""``rlid export``: the exported agent directory alone reproduces the run's held-out evaluation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from rlid.agents import agent as export_mod
from rlid.agents.agent import load_policy
from rlid.cli.main import main as cli_main
from rlid.config import TrainConfig
from rlid.core import seeds
from rlid.core import train as trainer
from rlid.core.evaluate import evaluate
from rlid.core.loop import make_envs
from rlid.decision.policy import DecisionPolicy
from rlid.menus import Interface
from rlid.runs.dir import read_json

GAME = {"size": 2, "keys": 0, "distractors": 1, "max_episode_steps": 5}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def _train(path: Path, **changes) -> TrainConfig:
    values = dict(
        model="tiny-random",  # mixed outcomes, so the trained weights differ from the start
        env="keydoor", env_options=dict(GAME), steps=16, groups_per_iter=2, group_size=2,
        epochs=1, minibatch_size=8, eval_episodes=6, threads=1, lr=1e-3,
        interface=Interface(memory="last_k", memory_size=2),
    )  # fmt: skip
    config = TrainConfig(**{**values, **changes})
    trainer.train(config, path, progress=False)
    return config


def _heldout_eval(policy, config: TrainConfig) -> dict[str, float]:
    env_list = make_envs(config, "heldout", min(config.eval_episodes, 16))
    return evaluate(policy, env_list, config.eval_episodes, interface=config.interface)


def test_export_round_trip_reproduces_heldout_eval_exactly(tmp_path, capsys):
    config = _train(tmp_path / "run")
    out = tmp_path / "agent"
    assert cli_main(["export", str(tmp_path / "run"), str(out)]) == 0
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "interface.json",
        "README.md",
    ):
        assert (out / name).is_file(), name
    data = json.loads((out / "interface.json").read_text())
    assert data["plane"] == "decision" and data["env"] == "keydoor" and data["env_options"] == GAME
    assert data["interface"] == config.interface.to_dict() and data["lora"] is None
    assert len(data["labels"]) == len(data["label_token_ids"]) >= 2

    policy = load_policy(out)  # from the export alone
    assert isinstance(policy, DecisionPolicy) and list(policy.labels.labels) == data["labels"]
    after = read_json(tmp_path / "run" / "eval.json")["after"]
    assert _heldout_eval(policy, config) == after
    # ... and it is the trained model, not the starting one
    from rlid.lm.starts import load_policy_model

    trained = load_policy_model(str(tmp_path / "run" / "checkpoint" / "model"))[0].state_dict()
    start = load_policy_model("tiny")[0].state_dict()
    exported = policy.model.state_dict()
    assert all(torch.equal(v, trained[k]) for k, v in exported.items())
    assert any(not torch.equal(v, start[k]) for k, v in exported.items())

    card = (out / "README.md").read_text()
    for text in ("keydoor", "decision-level PPO", "env_steps", "Wilson", "| after training |"):
        assert text in card, text
    # the card's five usage lines run as written
    code = card.split("```python\n")[1].split("```")[0].replace("PATH/TO/THIS/DIR", str(out))
    scope: dict = {}
    exec(code, scope)
    assert scope["action"] in scope["info"]["legal_actions"]

    # refuses to overwrite, and --merge-lora needs a LoRA run
    assert cli_main(["export", str(tmp_path / "run"), str(out)]) == 2
    assert "already holds files" in capsys.readouterr().err
    with pytest.raises(ValueError, match="without LoRA"):
        export_mod.export_run(tmp_path / "run", tmp_path / "merged", merge_lora=True)


def test_agent_plays_like_the_batched_policy(tmp_path):
    config = _train(tmp_path / "run")
    export_mod.export_run(tmp_path / "run", tmp_path / "agent")
    agent = export_mod.load_agent(tmp_path / "agent")
    env = make_envs(config, "heldout", 1)[0]
    policy_stats = _heldout_eval(agent.policy, config.replace(eval_episodes=1))
    obs, info = env.reset(seed=seeds.EVAL_SEED_BASE)
    agent.reset()
    # the menu shuffles of the evaluation's first block (same rows in the same order)
    agent.rng, agent.generator = seeds.iteration_rngs(config.seed, 0, stream=1)
    ret, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs, info))
        ret += reward
        done = terminated or truncated
    assert ret == policy_stats["return"]  # memory kept as in rollouts


def test_export_writes_through_a_symbolic_link(tmp_path):
    # a link to a directory not made yet: before, the final rename failed ("Not a directory")
    _train(tmp_path / "run")
    link = tmp_path / "agent"
    link.symlink_to(tmp_path / "elsewhere" / "agent")
    assert export_mod.export_run(tmp_path / "run", link) == tmp_path / "elsewhere" / "agent"
    assert link.is_symlink() and (link / "interface.json").is_file()
    assert export_mod.load_agent(link).policy is not None
    mask = os.umask(0)
    os.umask(mask)
    for path in link.iterdir():  # shareable: safetensors alone writes its file 0600
        assert path.stat().st_mode & 0o777 == 0o666 & ~mask, path.name


def test_lora_export_records_base_and_merges(tmp_path):
    pytest.importorskip("peft")
    # the shipped start: its base weights live in a directory the adapters can name
    config = _train(tmp_path / "run", model="tiny", lora_rank=2, lora_targets="q_proj,v_proj")
    ckpt_adapter = read_json(tmp_path / "run" / "checkpoint" / "model" / "adapter_config.json")
    from rlid.lm.starts import base_model_path

    base = base_model_path(config)
    assert ckpt_adapter["base_model_name_or_path"] == base and Path(base).is_dir()

    export_mod.export_run(tmp_path / "run", tmp_path / "adapters")
    assert (
        read_json(tmp_path / "adapters" / "adapter_config.json")["base_model_name_or_path"] == base
    )
    after = read_json(tmp_path / "run" / "eval.json")["after"]
    assert _heldout_eval(load_policy(tmp_path / "adapters"), config) == after

    assert (
        cli_main(["export", "--merge-lora", str(tmp_path / "run"), str(tmp_path / "merged")]) == 0
    )
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    assert json.loads((tmp_path / "merged" / "interface.json").read_text())["lora"]["merged"]
    merged = load_policy(tmp_path / "merged")
    unmerged = load_policy(tmp_path / "adapters")
    ids = torch.tensor(
        [unmerged.tokenizer.encode("Goal: open the door\nActions:\nA) go east\nAnswer:")]
    )
    with torch.no_grad():
        a, b = merged.model(ids).logits, unmerged.model(ids).logits
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
