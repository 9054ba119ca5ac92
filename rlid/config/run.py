"""Training configuration: one frozen dataclass, documented once per field.

The ``rlid train`` flags are derived from these fields (``--lr``, ``--group-size``,
...), a TOML file given with ``--config`` supplies values too (flags win), and
everything is validated in ``__post_init__`` before any work starts. The resolved
config, including the :class:`menus.Interface`, is written into every run directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from rlid.config.benchmark_protocols import PROTOCOLS, get_protocol
from rlid.config.budget import BudgetCurrency
from rlid.config.flags import add_dataclass_arguments, add_env_option_argument, flag_name
from rlid.config.flags import given_values as flags_given
from rlid.config.limits import INT64, check_bounds
from rlid.config.names import (
    AdvantageKind,
    AdvantageScale,
    EngineName,
    EpisodeWeight,
    Mismatch,
    MixedPrecision,
    ParallelName,
    PlaneName,
    WeightDtype,
    parse_report_to,
    parse_stop_on,
)
from rlid.config.registry import get_plane, plane_names
from rlid.config.rollout_engines import TOKEN_PLANE_ENGINE_FIELDS, VLLM_FIELDS, check_rollout_engine
from rlid.envs.registry import parse_option_strings, typed_options
from rlid.menus import Interface


def option(default: Any, help: str, **kw: Any) -> Any:
    """A dataclass field with its help text (one CLI flag per field, rlid.config.flags)."""
    return field(default=default, metadata={"help": help, **kw})


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs; see each field's help (``rlid train --help``)."""

    # --- what to train, where -------------------------------------------------------
    plane: PlaneName = option("decision", "decision (menu readout), token (free text) or scoring")
    env: str = option("keydoor", "env id (see `rlid envs`)")
    env_options: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "env options, e.g. {size = 3}; CLI: --env-option k=v (repeatable)"},
    )
    protocol: str | None = option(
        None,
        "a published evaluation protocol whose env options and interface the run takes "
        "(rlid.config.benchmark_protocols; docs/benchmark-envs.md); unset: rlid's own settings",
        choices=tuple(PROTOCOLS),
    )
    model: str = option(
        "tiny",
        "'tiny' (the shipped warm start, loaded from the package), 'tiny-play' (the "
        "random-play start, built and cached on first use), 'tiny-random' (their random "
        "initialisation) or a local Hugging Face model directory",
    )
    steps: int = option(
        2000,
        "budget in budget_currency units (env steps by default): training stops at the "
        "first iteration that reaches it",
    )
    budget_currency: BudgetCurrency = option(
        "env_steps",
        "currency of the steps budget (a rlid.config.budget counter; wall_time in seconds of "
        "training iterations)",
    )
    seed: int = option(0, "seed for model init, rollouts, shuffling and games")
    threads: int | None = option(
        None,
        "torch CPU threads (torch.set_num_threads); unset: torch's own default, which "
        "respects OMP_NUM_THREADS",
    )

    # --- hardware (rlid.lm.hardware) -------------------------------------------------------
    device: str = option(
        "auto", "auto (CUDA when available, else CPU), cpu, cuda or cuda:N: where the model runs"
    )
    dtype: WeightDtype = option(
        "float32",
        "storage dtype of the model weights; with mixed_precision the trained parameters stay "
        "float32 (master weights) and dtype applies to frozen ones (LoRA base, KL reference)",
    )
    mixed_precision: MixedPrecision = option(
        "none",
        "autocast of the model forwards (bf16 or fp16, the latter with a GradScaler); master "
        "weights, optimizer state, losses, menu log-softmax, ratios and advantages stay float32",
    )
    micro_batch_size: int | None = option(
        None,
        "decisions (or completions) per forward/backward, gradients accumulated up to "
        "minibatch_size with the minibatch's loss normaliser; also chunks rollout forwards "
        "(unset: minibatch_size; the decision and scoring planes act the same either way, "
        "chunked token-plane generation draws its tokens in another order)",
    )
    micro_batch_tokens: int | None = option(
        None,
        "most token positions one update micro-batch runs (a decision's prompt, once per "
        "label-tree level; on the scoring plane also its prompt cache's copies and every "
        "action's tokens; on the token plane prompt and completion): micro-batches are cut "
        "by micro_batch_size and by this, the step unchanged; a sample above it runs alone "
        "(unset: no bound; set it where large menus run out of memory)",
    )
    gradient_checkpointing: bool = option(
        False,
        "recompute activations in the backward pass (less memory, more compute); the "
        "model runs in train mode during the update with every dropout at zero",
    )
    ref_offload: bool = option(
        False, "keep the KL reference model on the CPU and move it to the device per batch"
    )
    env_workers: int = option(
        0,
        "worker processes that step and reset the envs (0: in this process); a lockstep step "
        "then costs about the slowest env instead of the sum",
    )

    # --- rollouts ---------------------------------------------------------------------
    groups_per_iter: int = option(4, "games per iteration; each is played group_size times")
    group_size: int = option(
        4, "episodes per game per iteration (same game, same seed: a group, as in GRPO)"
    )
    temperature: float = option(1.0, "sampling temperature of the behaviour policy")

    # --- rollout engine (rlid.config.rollout_engines, docs/inference-engine.md) -----------------
    rollout_engine: EngineName = option(
        "trainer",
        "who plays the rollouts: trainer (the trained model itself), vllm (a vLLM engine "
        "beside it, every plane: weights synced after each update, then a probe check; "
        "needs the vllm extra), perturbed or bf16 (simulated engines, token plane only)",
    )
    mismatch: Mismatch = option(
        "none",
        "train-inference correction on rho = pi_old / mu of each sampled action or token "
        "(mu: the rollout engine's probability): none, tis (weight min(rho, 2)) or icepop "
        "(weight rho inside [0.5, 5], 0 outside)",
    )
    vllm_dtype: WeightDtype = option(
        "float32", "vllm engine: dtype of its weights and activations (the trainer keeps dtype)"
    )
    vllm_max_model_len: int | None = option(
        None,
        "vllm engine: longest prompt + completion it takes (unset: the model's context length)",
    )
    vllm_gpu_memory_utilization: float = option(
        0.5,
        "vllm engine on CUDA: fraction of the GPU's memory it may take (weights + KV cache); "
        "the trainer shares the GPU",
    )
    vllm_kv_cache_gib: float | None = option(
        None,
        "vllm engine: KV cache size in GiB (unset: vLLM decides; on a CPU "
        "$VLLM_CPU_KVCACHE_SPACE or vLLM's default)",
    )
    vllm_eager: bool = option(
        True,
        "vllm engine: no CUDA graphs or torch.compile (a fast start; false: faster "
        "decoding on a GPU)",
    )
    vllm_probe_tolerance: float | None = option(
        None,
        "vllm engine: largest max |log pi_engine - log pi_trainer| on the probe prompt "
        "accepted after a weight sync before the run stops (unset: 1e-3 for float32, 0.1 "
        "for bfloat16, 0.05 for float16)",
    )

    # --- optimisation (PPO, Schulman et al. 2017; CleanRL ppo.py defaults where sensible) --
    lr: float = option(1e-4, "AdamW learning rate (3e-4 and up made the label mass collapse here)")
    weight_decay: float = option(0.0, "AdamW weight decay")
    epochs: int = option(2, "passes over each iteration's decisions")
    minibatch_size: int = option(32, "decisions per optimizer step")
    clip_eps: float = option(0.2, "PPO ratio clip epsilon")
    ent_coef: float = option(0.01, "entropy bonus coefficient (exact entropy over the menu)")
    kl_coef: float = option(0.0, "KL-to-reference coefficient (exact KL over the menu)")
    label_mass_coef: float = option(
        0.0,
        "decision plane: penalty -coef * mean log(label mass), keeping the LM's probability "
        "on the legal labels (0: off)",
    )
    position_coef: float = option(
        0.0,
        "decision plane: penalty coef * position_bias (unbiased estimate of the KL between "
        "the policy's probability per menu position and that of uniform rows), against a "
        "preference for label positions that shuffled menus never reward; one more no-grad "
        "forward per optimizer step (0: off)",
    )
    step_group_coef: float = option(
        0.0,
        "group advantages on the decision and scoring planes: add coef x a step-level "
        "group advantage (GiGPO): decisions of one group taken in the same state (same "
        "observation, score and menu) compare their discounted returns-to-go, so a step's "
        "own rewards are credited to it (0: off, the episode advantage alone)",
    )
    vf_coef: float = option(0.5, "value-loss coefficient (advantage='gae' only)")
    advantage: AdvantageKind = option(
        "group", "group: critic-free group-relative (return - group mean); gae: value head + GAE"
    )
    adv_scale: AdvantageScale = option(
        "std", "group advantages divided by the group std (std) or not"
    )
    gamma: float = option(
        0.99, "discount: GAE, and the return sum_t gamma^t r_t of group advantages (both planes)"
    )
    episode_weight: EpisodeWeight = option(
        "auto",
        "group advantages on the decision and scoring planes: 'equal' scales each "
        "decision's advantage by its group's mean length over its episode's length, so "
        "every episode of a group weighs the same and a group's advantages sum to zero over "
        "its decisions; 'length' weighs every decision alike, so an episode counts as often "
        "as it has steps (failures that run to the step limit outweigh short wins; the "
        "default before 0.3); 'auto': equal with --advantage group on those planes, length "
        "elsewhere (GAE, and the token plane, which normalises by its --algo). Run records "
        "hold the resolved value",
    )
    lam: float = option(0.95, "GAE lambda")
    max_grad_norm: float = option(1.0, "gradient-norm clip")
    lora_rank: int = option(0, "LoRA rank via peft (0: train all parameters; needs '.[lora]')")
    lora_alpha: float = option(16.0, "LoRA alpha (adapter scale alpha / rank)")
    lora_targets: str = option("q_proj,k_proj,v_proj,o_proj", "modules that get LoRA adapters")
    target_kl: float | None = option(
        None, "stop the epoch loop early when approx KL to the rollout policy exceeds this"
    )

    # --- evaluation and bookkeeping -------------------------------------------------------
    eval_episodes: int = option(16, "held-out episodes evaluated before and after training")
    eval_every: int = option(0, "also evaluate every N iterations (0: only before and after)")
    checkpoint_every: int = option(
        10,
        "write a checkpoint every N iterations (and after the last); a checkpoint is the full "
        "model + optimizer, so large models want a large N",
    )
    checkpoint_minutes: float = option(
        30.0,
        "also write a checkpoint after an iteration that ends at least this many minutes "
        "(of the run's wall time) after the last one, so a kill loses at most about that "
        "much when iterations are long (0: only every checkpoint_every iterations)",
    )
    keep_checkpoints: int = option(
        1, "checkpoints kept in the run directory (the newest; older ones are deleted)"
    )
    report_to: tuple[str, ...] = option(
        (),
        "experiment trackers fed with every metrics row, comma-separated: tensorboard, "
        "wandb (offline unless WANDB_MODE is set), mlflow (RUN/mlruns), all or none; "
        "see rlid.runs.trackers",
    )
    stop_on: tuple[str, ...] = option(
        (),
        "stop the run after an iteration that warns of one of these (comma-separated): "
        "label_mass, shortened_prompts, zero_advantages, non_finite, clipped, any or none. "
        "The run is checkpointed, summary.md says why and `rlid train` exits with status 4; "
        "the warnings themselves are always printed (rlid.runs.health)",
    )
    dist_timeout: float = option(
        300.0,
        "multi-process runs (torchrun): seconds a collective waits for the other processes "
        "before the run fails with a clear error",
    )
    parallel: ParallelName = option(
        "ddp",
        "multi-process runs (torchrun): how the update's model is wrapped; ddp: a full copy "
        "per process, gradients summed by DistributedDataParallel; fsdp: FSDP2 (fully_shard "
        "per decoder layer and at the root), parameters, gradients and optimizer state "
        "sharded during the update and gathered for rollouts. LoRA: only the adapters are "
        "reduced. One process: nothing is wrapped",
    )

    interface: Interface = field(
        default_factory=Interface, metadata={"help": "what the policy sees (menus.Interface)"}
    )

    def __post_init__(self) -> None:
        hints = _type_hints(type(self))
        for name, f in self.__dataclass_fields__.items():
            check_field_value(name, hints[name], getattr(self, name), f.default)
        if self.protocol is not None:  # its env options and interface, over those given
            options, interface = get_protocol(self.protocol).configure(
                self.env, self.env_options, self.interface
            )
            object.__setattr__(self, "env_options", options)
            object.__setattr__(self, "interface", interface)
        own = config_class(self.plane)
        if type(self) is not own:
            raise ValueError(
                f"plane={self.plane!r} takes its own config class, {own.__module__}."
                f"{own.__qualname__} (with that plane's fields), not {type(self).__qualname__}; "
                "TrainConfig.from_dict(values) builds the right one"
            )
        positive = ("steps", "groups_per_iter", "group_size", "epochs", "minibatch_size")
        for name in positive + ("keep_checkpoints",):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("threads", "micro_batch_size", "micro_batch_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 (or unset), got {value}")
        if self.env_workers < 0:
            raise ValueError(f"env_workers must be >= 0 (0: in-process), got {self.env_workers}")
        if not _DEVICE.fullmatch(self.device):
            raise ValueError(
                f"device={self.device!r} is not valid; choose auto, cpu, cuda or cuda:N"
            )
        if self.dtype == "float16" and self.mixed_precision == "none" and self.lora_rank == 0:
            raise ValueError(
                "dtype='float16' trains float16 weights without loss scaling (gradients "
                "underflow); add --mixed-precision fp16 (float32 master weights, GradScaler) "
                "or use --dtype bfloat16"
            )
        for name in ("lr", "clip_eps", "max_grad_norm", "temperature", "dist_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("ent_coef", "kl_coef", "vf_coef", "weight_decay", "label_mass_coef",
                     "position_coef", "step_group_coef", "checkpoint_minutes"):  # fmt: skip
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not (0 < self.gamma <= 1 and 0 <= self.lam <= 1):
            raise ValueError(f"need 0 < gamma <= 1 and 0 <= lam <= 1, got {self.gamma}, {self.lam}")
        if self.advantage == "group" and self.group_size < 2:
            raise ValueError(
                "advantage='group' needs group_size >= 2 (a group of one has no baseline); "
                "raise --group-size or use --advantage gae"
            )
        plane = get_plane(self.plane)
        if not plane.generates_text and self.budget_currency.startswith("generated_"):
            raise ValueError(
                f"budget_currency={self.budget_currency!r} never grows on the {self.plane} "
                "plane (it generates no text); choose e.g. env_steps or forward_passes"
            )
        if self.position_coef > 0 and not plane.labels:
            raise ValueError(
                f"position_coef is for the decision plane (label readout over menu positions); "
                f"the {self.plane} plane has no label positions to prefer"
            )
        if self.episode_weight == "equal" and not self.weighs_episodes:
            raise ValueError(
                f"episode_weight={self.episode_weight!r} weighs group advantages on the decision "
                "and scoring planes; it needs --advantage group there (the token plane "
                "normalises by its --algo)"
            )
        if self.step_group_coef > 0 and not self.weighs_episodes:
            raise ValueError(
                "step_group_coef adds step-level group advantages on the decision and scoring "
                "planes; it needs --advantage group there (the token plane has its own --algo)"
            )
        if plane.generates_text and self.advantage == "gae":
            raise ValueError(f"the {self.plane} plane is critic-free: use --advantage group")
        if self.eval_episodes < 0 or self.eval_every < 0 or self.checkpoint_every < 1:
            raise ValueError("eval_episodes, eval_every must be >= 0 and checkpoint_every >= 1")
        if self.parallel == "fsdp" and self.mixed_precision == "fp16":
            raise ValueError(
                "parallel='fsdp' with mixed_precision='fp16' is not supported: the "
                "GradScaler's inf/NaN check would see only this process's gradient shard, so "
                "ranks could disagree on skipping a step; use --mixed-precision bf16 or "
                "--parallel ddp"
            )
        if self.lora_rank < 0 or self.lora_alpha <= 0:
            raise ValueError(
                f"need lora_rank >= 0 and lora_alpha > 0, got {self.lora_rank}, {self.lora_alpha}"
            )
        if not isinstance(self.env_options, dict):
            raise ValueError("env_options must be a table of option = value")
        # "-o max_episode_steps=30" is recorded (config.json, summary, model card) as 30
        object.__setattr__(self, "env_options", typed_options(self.env, self.env_options))
        check_rollout_engine(self)
        check_bounds(self)  # counts, sizes and scales within what torch can take
        object.__setattr__(self, "report_to", parse_report_to(self.report_to))
        object.__setattr__(self, "stop_on", parse_stop_on(self.stop_on))

    @property
    def episodes_per_iter(self) -> int:
        return self.groups_per_iter * self.group_size

    @property
    def weighs_episodes(self) -> bool:
        """Where ``episode_weight`` applies: group advantages on the decision and scoring
        planes (the token plane normalises by its ``algo``; GAE has no groups)."""
        return not get_plane(self.plane).generates_text and self.advantage == "group"

    @property
    def resolved_episode_weight(self) -> str:
        """``episode_weight`` with ``auto`` resolved: ``equal`` where it applies,
        ``length`` elsewhere."""
        if self.episode_weight != "auto":
            return self.episode_weight
        return "equal" if self.weighs_episodes else "length"

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["env_options"] = dict(self.env_options)
        out["interface"] = self.interface.to_dict()
        out["episode_weight"] = self.resolved_episode_weight  # a record says what ran
        # Fields added after 0.1 are left out at their default, so configs (and checkpoint
        # fingerprints) written before they existed stay identical and resumable; the
        # hardware fields that change how, not what, is computed likewise (device, dtype
        # and mixed_precision are always recorded).
        for name in _RECORDED_WHEN_CHANGED:
            left_out = _LEFT_OUT_OF_RECORDS.get(name, self.__dataclass_fields__[name].default)
            if out[name] == left_out:
                del out[name]
        if "report_to" in out:
            out["report_to"] = list(self.report_to)
        if "stop_on" in out:
            out["stop_on"] = list(self.stop_on)
        if not get_plane(self.plane).generates_text:  # token-plane records always held them
            for name in TOKEN_PLANE_ENGINE_FIELDS:
                if out[name] == self.__dataclass_fields__[name].default:
                    del out[name]
        if self.lora_rank == 0:  # likewise for the LoRA fields
            for name in ("lora_rank", "lora_alpha", "lora_targets"):
                del out[name]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """The config of the plane ``data["plane"]`` names (its own class: the token
        plane's adds the GRPO family's fields, ...) from plain values; unknown keys fail
        naming the plane they belong to, if any."""
        data = dict(data)
        own = config_class(str(data.get("plane", cls.__dataclass_fields__["plane"].default)))
        known = {f.name for f in dataclasses.fields(own)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(_unknown_keys(unknown, known, str(data.get("plane", "decision"))))
        if "interface" in data and isinstance(data["interface"], dict):
            data["interface"] = Interface.from_dict(data["interface"])
        return own(**data)

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> TrainConfig:
        """The config of a record written by :meth:`to_dict` (a run's config.json, an
        export): a field left out there holds the value it was left out at, which is not
        always today's default (``from_dict`` is for configs a user writes)."""
        return cls.from_dict({**_LEFT_OUT_OF_RECORDS, **dict(data)})

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)


_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def config_class(plane: str) -> type[TrainConfig]:
    """The config class of ``plane`` (:mod:`rlid.config.registry`; the decision plane's is
    :class:`TrainConfig`); an unknown plane fails listing the registered ones."""
    try:
        found = get_plane(plane).config_class()
    except ValueError as err:
        raise ValueError(f"plane={plane!r}: {err}") from None
    if not (isinstance(found, type) and issubclass(found, TrainConfig)):
        raise ValueError(f"plane {plane!r} names {found!r} as its config, not a TrainConfig")
    return found


def plane_config_classes() -> dict[str, type[TrainConfig]]:
    """Every registered plane's config class, by plane name."""
    return {name: config_class(name) for name in plane_names()}


def _unknown_keys(unknown: list[str], known: set[str], plane: str) -> str:
    owners = {
        name: owner
        for owner, cls in plane_config_classes().items()
        for name in (f.name for f in dataclasses.fields(cls))
        if name not in known
    }
    elsewhere = [f"{k} (a {owners[k]}-plane option: plane = {owners[k]!r})" for k in unknown
                 if k in owners]  # fmt: skip
    if elsewhere:
        return f"config key(s) {', '.join(elsewhere)} do not apply to plane = {plane!r}"
    return f"unknown config key(s): {', '.join(unknown)}; valid keys: {', '.join(sorted(known))}"


_RECORDED_WHEN_CHANGED = (
    "protocol",
    "budget_currency",
    "label_mass_coef",
    "position_coef",
    "step_group_coef",
    "report_to",
    "stop_on",
    "dist_timeout",
    "parallel",
    "threads",
    "micro_batch_size",
    "micro_batch_tokens",
    "gradient_checkpointing",
    "ref_offload",
    "env_workers",
    "keep_checkpoints",
    "checkpoint_minutes",
    "episode_weight",
    *VLLM_FIELDS,
)
# Fields whose records leave them out at a value other than today's default: the value
# an absent key means in every record (runs of 0.2 trained with episode_weight "length"
# and left it out, then the default).
_LEFT_OUT_OF_RECORDS: dict[str, Any] = {"episode_weight": "length"}


# -------------------------------------------------------------------------- validation
_HINTS: dict[type, dict[str, Any]] = {}


def _type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, once per class."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _flag_hint(name: str) -> str:
    return f"config key {name!r} (flag {flag_name(name)})"


def check_field_value(name: str, hint: Any, value: Any, default: Any = None) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` fits the type hint ``hint``.

    Generic over dataclass fields: ``int`` refuses 2.5 and True, ``float`` refuses
    "fast" and non-finite numbers (NaN / inf), ``Literal`` lists the valid values,
    ``X | None`` allows None. Other types are left to the field's own checks.
    """
    origin = typing.get_origin(hint)
    example = "" if default in (None, dataclasses.MISSING) else f", e.g. {name} = {default!r}"
    if origin is Literal:
        if value not in get_args(hint):
            valid = ", ".join(repr(v) for v in get_args(hint))
            raise ValueError(f"{name}={value!r} is not valid; choose one of {valid}")
        return
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in get_args(hint):
            return
        inner = [a for a in get_args(hint) if a is not type(None)]
        if len(inner) == 1:
            check_field_value(name, inner[0], value, default)
        return
    if hint is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{_flag_hint(name)} must be true or false, got {value!r}")
    elif hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{_flag_hint(name)} must be a whole number, got {value!r}{example}")
        if not -INT64 <= value < INT64:  # torch and numpy integers have 64 bits
            raise ValueError(f"{_flag_hint(name)} must fit in 64 bits, got {str(value)[:40]}")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{_flag_hint(name)} must be a number, got {value!r}{example}")
        if not math.isfinite(value):
            raise ValueError(f"{_flag_hint(name)} must be a finite number, got {value!r}{example}")
    elif hint is str:
        if not isinstance(value, str):
            raise ValueError(f"{_flag_hint(name)} must be a string, got {value!r}{example}")
    elif (origin is dict or hint is dict) and not isinstance(value, dict):
        raise ValueError(f"{_flag_hint(name)} must be a table, got {value!r}")


# ----------------------------------------------------------------------------- CLI glue
_SKIP_FLAGS = ("interface", "env_options")


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per TrainConfig and Interface field (defaults None: 'not given')."""
    parser.add_argument("--config", type=Path, help="TOML file with config values (flags win)")
    add_env_option_argument(parser)
    group = parser.add_argument_group("training")
    add_dataclass_arguments(group, TrainConfig, skip=_SKIP_FLAGS)
    base = tuple(f.name for f in dataclasses.fields(TrainConfig))
    for plane, cls in plane_config_classes().items():
        if cls is not TrainConfig:
            own = parser.add_argument_group(f"{plane} plane ({cls.__module__}.{cls.__name__})")
            add_dataclass_arguments(own, cls, skip=base)
    igroup = parser.add_argument_group("interface (what the policy sees)")
    add_dataclass_arguments(igroup, Interface, dest_prefix="interface__")


def read_toml(path: Path, what: str, error: type[ValueError] = ValueError) -> dict[str, Any]:
    """A TOML file as a dict; a missing file or a syntax error is a clear ``error``
    naming ``what`` (e.g. "config file") and the path."""
    if path.is_dir():
        raise error(f"{what} {path} is a directory; give a TOML file")
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} does not exist")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise error(f"{what} {path} is not a text file (not UTF-8); give a TOML file") from None
    except tomllib.TOMLDecodeError as err:
        raise error(f"{what} {path} is not valid TOML: {err}") from None
    except RecursionError:
        raise error(f"{what} {path} nests arrays or tables too deeply to be read") from None


def config_table(value: Any, key: str, example: str) -> dict[str, Any]:
    """A TOML table given for ``key`` as a dict (absent: empty); anything else is one line
    showing the form, e.g. ``env_options = {size = 2}``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:60] + "..."
        raise ValueError(f"config key {key!r} must be a table, e.g. {key} = {example}; got {shown}")
    return dict(value)


def given_values(args: argparse.Namespace) -> dict[str, Any]:
    """The config values given explicitly: TOML file (if any) < flags.

    ``interface`` (a dict of the Interface fields given) and ``env_options`` appear
    only when something was given for them; everything else keeps its default.
    """

    data: dict[str, Any] = {}
    if getattr(args, "config", None):
        data = read_toml(Path(args.config), "config file")
    interface = config_table(data.pop("interface", None), "interface", '{memory = "none"}')
    env_options = config_table(data.pop("env_options", None), "env_options", "{size = 2}")
    data.update(flags_given(args, TrainConfig, skip=_SKIP_FLAGS))
    base = tuple(f.name for f in dataclasses.fields(TrainConfig))
    for cls in plane_config_classes().values():
        data.update(flags_given(args, cls, skip=base))
    interface.update(flags_given(args, Interface, dest_prefix="interface__"))
    env_options.update(parse_option_strings(getattr(args, "env_option", []) or []))
    if interface:
        data["interface"] = interface
    if env_options:
        data["env_options"] = env_options
    return data


def config_from_args(args: argparse.Namespace, **fixed: Any) -> TrainConfig:
    """TOML file (if any) < flags < ``fixed``; validated."""
    return config_from_values(given_values(args), **fixed)


def config_from_values(data: dict[str, Any], **fixed: Any) -> TrainConfig:
    """A TrainConfig from given values (``interface``: a dict of the Interface fields
    given) < ``fixed``; everything not given keeps its default; validated."""
    data = dict(data)
    interface = data.pop("interface", None) or {}
    data.update(fixed)
    data["env_options"] = data.get("env_options", {})
    data["interface"] = Interface.from_dict({**Interface().to_dict(), **interface})
    return TrainConfig.from_dict(data)
