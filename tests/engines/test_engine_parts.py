"""The parts of the inference engine that need no vLLM: the weights an engine is sent, the
probe check, the worker's tied-weight rebuild, options, and the error without vllm."""

from __future__ import annotations

import copy
import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from rlid.decision.policy import DecisionPolicy
from rlid.engines import (
    EngineUnavailable,
    Probe,
    StaleEngineError,
    VLLMEngine,
    VLLMOptions,
    compare_probe,
    decision_probe,
    engine_state_dict,
)
from rlid.engines.probe import trainer_probe_logp
from rlid.engines.vllm_worker import reprocess_tied
from rlid.engines.weights import write_safetensors
from rlid.lm.models import build_tiny_model
from rlid.lm.tokenizer import build_tiny_tokenizer
from rlid.menus import Interface


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    tokenizer = build_tiny_tokenizer()
    return build_tiny_model(tokenizer, seed=1), tokenizer


def test_a_plain_model_is_sent_under_its_checkpoint_names_tied_head_once(tiny, tmp_path):
    model, _ = tiny
    state = engine_state_dict(model, torch.bfloat16)
    expected = set(model.state_dict()) - {"lm_head.weight"}  # tied to the embedding
    assert set(state) == expected
    for name, tensor in state.items():
        assert tensor.dtype == torch.bfloat16 and tensor.device.type == "cpu"
        assert torch.equal(tensor, model.state_dict()[name].to(torch.bfloat16))
    path = write_safetensors(state, tmp_path / "w.safetensors")
    assert not list(tmp_path.glob(".*tmp"))  # written through a temporary sibling
    loaded = load_file(str(path))
    assert all(torch.equal(loaded[k], state[k]) for k in state)


def test_lora_is_sent_merged_out_of_place(tiny):
    peft = pytest.importorskip("peft")
    model, _ = tiny
    rank, alpha = 4, 8
    lora = peft.get_peft_model(
        copy.deepcopy(model),
        peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules=["q_proj"], lora_dropout=0.0),
    )
    with torch.no_grad():
        for name, param in lora.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(0))
    layer = lora.get_base_model().model.layers[1].self_attn.q_proj
    w = layer.base_layer.weight.detach().clone()
    a, b = layer.lora_A["default"].weight.detach(), layer.lora_B["default"].weight.detach()
    state = engine_state_dict(lora, torch.float32)
    # W + (alpha / r) · B A, by hand
    expected = w + (alpha / rank) * b @ a
    assert torch.allclose(state["model.layers.1.self_attn.q_proj.weight"], expected, atol=1e-7)
    assert not torch.allclose(expected, w, atol=1e-3)  # the adapters do change it
    assert set(state) == set(engine_state_dict(model, torch.float32))  # names: the base's
    assert torch.equal(layer.base_layer.weight, w)  # the trainer's weight is not written
    # an adapter-free layer is sent as it is
    assert torch.equal(
        state["model.layers.1.self_attn.k_proj.weight"],
        model.model.layers[1].self_attn.k_proj.weight,
    )


def test_compare_probe_by_hand():
    assert compare_probe([-0.5, -1.0], [-0.5, -1.0], 1e-3) == 0.0
    assert compare_probe([-0.5, -1.0], [-0.5004, -1.0002], 1e-3) == pytest.approx(4e-4)
    with pytest.raises(StaleEngineError, match=r"differ from the trainer's by 0.002"):
        compare_probe([-0.5, -1.0], [-0.502, -1.0], 1e-3)
    with pytest.raises(StaleEngineError):
        compare_probe([float("nan"), -1.0], [-0.5, -1.0], 1e-3)
    with pytest.raises(ValueError, match="shapes differ"):
        compare_probe([-0.5], [-0.5, -1.0], 1e-3)


def test_the_decision_probe_is_a_real_decision_of_the_run(tiny):
    """Its ids are those the decision policy reads on keydoor's first state, and the
    trainer's probe log-probs are that policy's readout."""
    from rlid import envs

    model, tokenizer = tiny
    interface = Interface(shuffle=False, memory="none")
    probe = decision_probe(tokenizer, Interface())
    assert probe == decision_probe(tokenizer, Interface(shuffle=True))  # never shuffled
    obs, info = envs.make("keydoor", size=3).reset(seed=0)
    policy = DecisionPolicy(model, tokenizer, interface)
    (decision,) = policy.act(
        [obs], [info], [None], rng=np.random.default_rng(0), generator=torch.Generator()
    )
    assert probe.prompt_ids == tuple(decision.prompt_ids)
    assert probe.label_ids == tuple(decision.label_ids) and len(probe.label_ids) >= 2
    logp = trainer_probe_logp(model, probe)
    with torch.no_grad():
        expected = policy.score_ids([decision.prompt_ids], [decision.label_ids])[0][0]
    assert torch.allclose(logp, expected, atol=1e-6)
    with pytest.raises(ValueError, match="at least two labels"):
        Probe(prompt_ids=(1, 2), label_ids=(3,))


def test_tied_modules_are_rebuilt_after_a_reload():
    calls: list[str] = []

    class Method:
        def process_weights_after_loading(self, module):
            calls.append(module.tag)

    def layer(tag, weight):
        module = torch.nn.Module()
        module.weight = weight
        module.quant_method = Method()
        module.tag = tag
        return module

    shared = torch.nn.Parameter(torch.zeros(3, 2))
    model = torch.nn.ModuleList(
        [
            layer("embed", shared),
            layer("head", shared),
            layer("mlp", torch.nn.Parameter(torch.zeros(2))),
        ]
    )
    assert reprocess_tied(model) == 2
    assert sorted(calls) == ["embed", "head"]


def test_options_are_checked():
    assert VLLMOptions().probe_tolerance_or_default == 1e-3
    assert VLLMOptions(probe_tolerance=0.5).probe_tolerance_or_default == 0.5
    kwargs = VLLMOptions(kv_cache_gib=1).llm_kwargs()
    assert kwargs["kv_cache_memory_bytes"] == 2**30
    assert kwargs["logprobs_mode"] == "processed_logprobs"
    assert "kv_cache_memory_bytes" not in VLLMOptions().llm_kwargs()
    assert "enable_chunked_prefill" not in VLLMOptions().llm_kwargs()
    cpu = VLLMOptions(max_model_len=8192).llm_kwargs(cpu=True)
    assert cpu["enable_chunked_prefill"] is False and cpu["max_num_batched_tokens"] == 8192
    for bad, match in [
        ({"dtype": "float64"}, "engine dtype"),
        ({"max_model_len": 1}, "max_model_len"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"kv_cache_gib": 0}, "kv_cache_gib"),
        ({"probe_tolerance": 0.0}, "probe_tolerance"),
    ]:
        with pytest.raises(ValueError, match=match):
            VLLMOptions(**bad)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_without_vllm_the_engine_fails_at_once_naming_the_extra(tmp_path):
    with pytest.raises(EngineUnavailable, match=r"pip install -e '\.\[vllm\]'") as info:
        VLLMEngine(tmp_path)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ImportError)


def test_a_directory_without_a_model_is_refused(tmp_path, monkeypatch):
    from rlid.engines import vllm as engine_module

    monkeypatch.setattr(engine_module, "import_vllm", lambda: SimpleNamespace())
    with pytest.raises(ValueError, match="no config.json"):
        VLLMEngine(tmp_path)


def test_an_engine_that_does_not_start_leaves_no_files_and_names_the_guard(
    tiny, tmp_path, monkeypatch
):
    import tempfile

    from rlid.engines import vllm as engine_module

    def refuse(**kwargs):
        raise RuntimeError("Engine core initialization failed")

    fake = SimpleNamespace(SamplingParams=object, LLM=refuse)
    monkeypatch.setattr(engine_module, "import_vllm", lambda: fake)
    monkeypatch.setattr(engine_module, "_on_cpu_build", lambda: True)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model, tokenizer = tiny
    with pytest.raises(RuntimeError, match=r'did not start: .*`if __name__ == "__main__":`'):
        VLLMEngine.from_model(model, tokenizer)
    assert list(tmp_path.iterdir()) == []
