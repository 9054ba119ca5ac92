"""LoRA adapters (optional, via ``peft``).

With ``lora_rank > 0`` only low-rank adapters on the attention projections are
trained; the base weights stay frozen. The KL reference is then the *same* model
with its adapters disabled (:class:`AdapterDisabled`), so no second copy of the
weights is kept. A checkpoint holds the adapters only; resuming or evaluating
loads the base model named in the run's config and attaches them
(:func:`rlid.lm.starts.load_run_model`).

``peft`` is an optional dependency: ``pip install -e ".[lora]"``.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from rlid.lm.model_folder import check_model_folder


def _peft() -> Any:
    try:
        # optional dependency: peft (the lora extra)
        import peft
    except ImportError:  # pragma: no cover - depends on the environment
        raise ValueError(
            "lora_rank > 0 needs the optional dependency peft: pip install -e '.[lora]'"
        ) from None
    return peft


def apply_lora(model: torch.nn.Module, config: Any, base: str) -> torch.nn.Module:
    """Wrap ``model`` with fresh LoRA adapters (rank, alpha and targets from ``config``);
    ``base`` is recorded as the adapters' ``base_model_name_or_path``."""
    peft = _peft()
    targets = [t.strip() for t in config.lora_targets.split(",") if t.strip()]
    lora = peft.LoraConfig(
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_dropout=0.0,  # rollouts and updates must see the same function
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)  # adapter init is part of the run's seeding
        try:
            wrapped = peft.get_peft_model(model, lora)
        except ValueError as err:
            raise ValueError(
                f"cannot put LoRA adapters on {targets}: {err}; set --lora-targets to "
                "module names of this model (e.g. q_proj,v_proj)"
            ) from None
    wrapped.peft_config["default"].base_model_name_or_path = base
    return wrapped.eval()


def attach_adapters(model: torch.nn.Module, adapter_dir: Path) -> torch.nn.Module:
    """Load saved adapters onto ``model`` (trainable), with a clear error if they don't fit."""
    peft = _peft()
    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / "adapter_config.json").is_file():
        raise ValueError(
            f"{adapter_dir} holds no LoRA adapters (no adapter_config.json): the checkpoint "
            "was not written by a run with lora_rank > 0"
        )

    check_model_folder(adapter_dir, adapters=True)  # safetensors only, no custom code
    try:
        wrapped = peft.PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
    except (ValueError, RuntimeError, KeyError) as err:
        raise ValueError(
            f"LoRA adapters in {adapter_dir} do not fit the base model: {err}"
        ) from None
    return wrapped.eval()


class AdapterDisabled(torch.nn.Module):
    """The base model under a LoRA-wrapped one: forward with the adapters switched off."""

    def __init__(self, peft_model: Any) -> None:
        super().__init__()
        self.peft_model = peft_model
        self.config = peft_model.config

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.peft_model.get_output_embeddings()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        context = getattr(self.peft_model, "disable_adapter", nullcontext)
        with context(), torch.no_grad():
            return self.peft_model(*args, **kwargs)
