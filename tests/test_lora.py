"""LoRA training (peft): only adapters move, the reference is the adapter-free base, resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rlid.cli import main as cli_main
from rlid.config import TrainConfig
from rlid.core import train as trainer_mod
from rlid.decision.policy import DecisionPolicy
from rlid.lm.lora import AdapterDisabled, apply_lora
from rlid.lm.models import build_tiny_model
from rlid.lm.starts import load_policy_model
from rlid.lm.tokenizer import build_tiny_tokenizer
from rlid.menus import Interface
from rlid.runs.dir import read_metrics


def small_config(**changes) -> TrainConfig:
    base = dict(
        # the random start: the shipped one wins these small games from the first
        # iteration, and equal returns leave nothing to learn
        model="tiny-random",
        env="keydoor", env_options={"size": 2, "keys": 0, "distractors": 1,
                                    "max_episode_steps": 6},
        steps=30, groups_per_iter=2, group_size=2, epochs=1, minibatch_size=8,
        eval_episodes=2, threads=1, interface=Interface(memory="none"),
    )  # fmt: skip
    base.update(changes)
    return TrainConfig.from_dict(base)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def test_adapter_disabled_reference_is_the_base_model():
    from rlid import envs

    tokenizer = build_tiny_tokenizer()
    base = build_tiny_model(tokenizer, seed=3)
    reference_logits = None
    config = small_config(lora_rank=4)
    wrapped = apply_lora(build_tiny_model(tokenizer, seed=3), config, base="tiny-random")
    with torch.no_grad():  # make the adapters non-trivial
        for name, p in wrapped.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)
    env = envs.make("keydoor", size=2, game_seed=0)
    obs, info = env.reset(seed=0)
    outs = []
    for model in (base, AdapterDisabled(wrapped), wrapped):
        policy = DecisionPolicy(model, tokenizer, config.interface)
        (d,) = policy.act(
            [obs], [info], [None], rng=np.random.default_rng(0),
            generator=torch.Generator().manual_seed(0), greedy=True,
        )  # fmt: skip
        logp, _, _ = policy.score([d])
        outs.append(logp.detach())
    reference_logits = outs[0]
    assert torch.allclose(outs[1], reference_logits, atol=1e-6)
    assert not torch.allclose(outs[2], reference_logits, atol=1e-4)


def test_lora_run_trains_adapters_only_and_resumes_exactly(tmp_path, interrupt_update, untimed):
    config = small_config(steps=24, lora_rank=4, kl_coef=0.1, checkpoint_every=1)
    full = trainer_mod.train(config, tmp_path / "full", progress=False)
    ckpt = Path(full.path) / "checkpoint" / "model"
    assert (ckpt / "adapter_config.json").exists()
    rows = [r for r in read_metrics(Path(full.path)) if "skipped_update" not in r]
    assert rows and all(np.isfinite(r["loss"]) for r in rows) and "kl_ref" in rows[-1]

    interrupt_update(2)
    with pytest.raises(KeyboardInterrupt):
        trainer_mod.train(config, tmp_path / "killed", progress=False)
    interrupt_update(0)
    state = json.loads((tmp_path / "killed" / "checkpoint" / "state.json").read_text())
    assert state["iteration"] == 1  # resumed from the checkpoint, not from the start
    trainer_mod.train(None, tmp_path / "killed", resume=True, progress=False)
    assert untimed(read_metrics(Path(full.path))) == untimed(read_metrics(tmp_path / "killed"))
    from safetensors.torch import load_file

    a = load_file(str(ckpt / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "killed" / "checkpoint" / "model" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(k.endswith("lora_B.weight") and a[k].abs().sum() > 0 for k in a)

    # the base weights did not move: the base model equals a fresh load of config.model
    from rlid.lm.lora import attach_adapters

    fresh, _ = load_policy_model("tiny")
    base_now = attach_adapters(load_policy_model("tiny")[0], ckpt).get_base_model()
    base_weights = {
        k.replace(".base_layer", ""): v
        for k, v in base_now.state_dict().items()
        if "lora_" not in k
    }
    assert base_weights.keys() == fresh.state_dict().keys()
    for name, p in fresh.state_dict().items():
        assert torch.equal(p, base_weights[name]), name

    assert cli_main(["eval", "--run", str(full.path), "--episodes", "2"]) == 0


def test_bad_lora_settings_are_clear_errors(tmp_path, capsys):
    code = cli_main(["train", "--lora-rank", "4", "--lora-targets", "nope_proj",
                     "--out", str(tmp_path / "r"), "--steps", "5"])  # fmt: skip
    assert code == 2 and "lora-targets" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    code = cli_main(["train", "--lora-rank", "-1", "--out", str(tmp_path / "r")])
    assert code == 2 and "lora-rank" in capsys.readouterr().err.replace("_", "-")


def test_token_plane_runs_with_lora_adapters_and_saves_them(tmp_path):
    from rlid.baselines.token.train import train_token

    config = small_config(plane="token", steps=12, lora_rank=4, beta=0.05, max_new_tokens=4)
    log = train_token(config, tmp_path / "tok", progress=False)
    assert (Path(log.path) / "checkpoint" / "model" / "adapter_config.json").exists()
    rows = read_metrics(Path(log.path))
    assert rows and all(np.isfinite(r.get("loss", 0.0)) for r in rows)
