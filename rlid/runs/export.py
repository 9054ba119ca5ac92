"""Export a trained run as a self-contained agent directory, and load it back.

``rlid export RUN OUT [--merge-lora]`` writes::

    OUT/config.json, model.safetensors, tokenizer files   (save_pretrained; a LoRA run
                                                           without --merge-lora: the adapters)
    OUT/interface.json    everything to rebuild the exact prompt and label set
    OUT/README.md         a model card: env, plane, algorithm, budget, held-out results

``load_agent(OUT)`` (or ``DecisionPolicy.from_pretrained(OUT)`` for the batched
policy) rebuilds the policy from those files alone: the same prompt, labels and
weights, so greedy play reproduces the run's held-out evaluation exactly.

A LoRA run exported without ``--merge-lora`` keeps its adapters; ``interface.json``
and ``adapter_config.json`` record the base model (``base_model_name_or_path``), which
must then exist where it was. ``--merge-lora`` folds the adapters into the weights
(a plain model directory; logits then match the unmerged model to float rounding).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from envs import gym_id
from rlid.config import TrainConfig
from rlid.runs import dir as rundir
from rlid.runs.files import resolve_link, staged_dir
from rlid.runs.history import checkpointed_rows

FORMAT = "rlid-agent"
FORMAT_VERSION = 1


def export_run(run: Path, out: Path, *, merge_lora: bool = False) -> Path:
    """Write the agent of ``run``'s last checkpoint to the new directory ``out``."""
    from rlid.lora import base_model_path, load_run_model
    from rlid.planes import get_plane
    from rlid.runs.log import RunLog, check_checkpoint, read_run_config

    run, out = Path(run), resolve_link(out)  # a link: export where it points
    # Read-only, as `rlid eval`: no lock, so a running training can be exported alongside.
    config, _ = read_run_config(run)
    ckpt = run / rundir.CHECKPOINT
    if not (ckpt / "state.json").exists():
        raise FileNotFoundError(f"{run} has no checkpoint yet; nothing to export")
    check_checkpoint(ckpt, config, action="export")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} already holds files; choose a new export directory")
    log = RunLog(run, config, resuming=True)
    lora = config.lora_rank > 0
    if merge_lora and not lora:
        raise ValueError(f"--merge-lora: {run} was trained without LoRA (lora_rank = 0)")
    model, tokenizer = load_run_model(config, log)
    base = base_model_path(config) if lora else None
    if lora and merge_lora:
        model = model.merge_and_unload()
    elif lora:
        model.peft_config["default"].base_model_name_or_path = base
    policy = get_plane(config.plane).make_policy(config, model, tokenizer)
    labels = getattr(policy, "labels", None)

    with staged_dir(out) as tmp:  # an empty `out` is replaced
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        interface = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "plane": config.plane,
            "env": config.env,
            "env_options": dict(config.env_options),
            "interface": config.interface.to_dict(),
            "labels": list(labels.labels) if labels is not None else None,
            "label_token_ids": list(labels.token_ids) if labels is not None else None,
            "padding_side": tokenizer.padding_side,
            "lora": None
            if not lora
            else {"merged": merge_lora, "base_model_name_or_path": None if merge_lora else base},
            "train_config": config.to_dict(),
        }
        rundir.write_json(tmp / "interface.json", interface)
        evals = (
            rundir.read_json(run / "eval.json", sealed=True) if (run / "eval.json").exists() else {}
        )
        rundir.atomic_write_text(
            tmp / "README.md", model_card(config, evals, checkpointed_rows(run, ckpt), interface)
        )
    return out


# ------------------------------------------------------------------------- loading
def read_interface(path: Path) -> dict[str, Any]:
    path = Path(path)
    file = path / "interface.json"
    if not file.is_file():
        raise FileNotFoundError(
            f"{path} is not an exported rlid agent (no interface.json); write one with "
            "`rlid export RUN OUT`"
        )
    data = rundir.read_json(file)
    if data.get("format") != FORMAT or data.get("format_version", 0) > FORMAT_VERSION:
        raise ValueError(f"{file} is not an rlid agent of format version <= {FORMAT_VERSION}")
    return data


def load_exported_model(path: Path, *, dtype: torch.dtype = torch.float32) -> tuple[Any, Any, Any]:
    """``(model, tokenizer, config)`` of an exported agent directory."""
    from rlid.models import load_policy_model

    path = Path(path)
    data = read_interface(path)
    config = TrainConfig.from_record(data["train_config"])
    lora = data.get("lora")
    model: Any
    if lora and not lora["merged"]:
        from rlid.lora import attach_adapters

        model, _ = load_policy_model(lora["base_model_name_or_path"], dtype=dtype)
        model = attach_adapters(model, path)
        tokenizer = _tokenizer(path)
    else:
        model, tokenizer = load_policy_model(str(path), dtype=dtype)
    model.eval()
    return model, tokenizer, config


def _tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_policy(path: Path, **kw: Any) -> Any:
    """The run's batched menu policy (``DecisionPolicy`` for the decision plane)."""
    from rlid.planes import get_plane

    model, tokenizer, config = load_exported_model(path)
    policy = get_plane(config.plane).make_policy(config, model, tokenizer, **kw)
    data = read_interface(path)
    labels = getattr(policy, "labels", None)
    if labels is not None and data["labels"] is not None and list(labels.labels) != data["labels"]:
        raise ValueError(
            f"{path}: the tokenizer now yields labels {list(labels.labels)} but the agent was "
            f"trained with {data['labels']}"
        )
    return policy


class Agent:
    """One env, one action at a time: memory kept, greedy by default.

    >>> agent = load_agent("OUT")                       # doctest: +SKIP
    >>> obs, info = env.reset(seed=0); agent.reset()    # doctest: +SKIP
    >>> action = agent.act(obs, info)                   # doctest: +SKIP
    """

    def __init__(self, policy: Any, interface: Any, *, seed: int = 0) -> None:
        from menus import make_memory

        self.policy = policy
        self.interface = interface
        self.memory = make_memory(interface.memory, interface.memory_size)
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator().manual_seed(seed)
        self._last: str | None = None

    def reset(self) -> None:
        self.memory.reset()
        self._last = None

    def act(self, obs: str, info: dict[str, Any], *, greedy: bool = True) -> str:
        """The command to send for this observation (call on every step after ``reset``).

        The memory is updated with what the previous action led to (``obs``, ``info``)
        before the prompt is rendered, as in training rollouts.
        """
        if self._last is None:  # an episode's first observation, as in a rollout
            self.memory.reset(obs, info)
        else:
            self.memory.update(obs, self._last, info)
        (decision,) = self.policy.act(
            [obs], [info], [self.memory.render() or None],
            rng=self.rng, generator=self.generator, greedy=greedy,
        )  # fmt: skip
        self._last = decision.action
        return decision.action


def load_agent(path: str | Path, *, seed: int = 0) -> Agent:
    """A single-env :class:`Agent` from an exported directory."""
    policy = load_policy(Path(path))
    return Agent(policy, policy.interface, seed=seed)


# ---------------------------------------------------------------------- model card
def _wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _algorithm(config: TrainConfig) -> str:
    if config.plane == "token":
        return f"{config.algo} (token plane), mismatch correction {config.mismatch}"
    adv = "critic-free group-relative" if config.advantage == "group" else "GAE with a value head"
    scoring = f", action scoring ({config.norm}-normalised)" if config.plane == "scoring" else ""
    return f"decision-level PPO, {adv} advantages{scoring}"


def model_card(
    config: TrainConfig,
    evals: dict[str, Any],
    metrics: list[dict[str, Any]],
    interface: dict[str, Any],
) -> str:
    """The exported directory's README.md."""
    env_opts = ", ".join(f"{k}={v!r}" for k, v in config.env_options.items())
    make_args = ", ".join(
        [repr(config.env)] + [f"{k}={v!r}" for k, v in config.env_options.items()]
    )
    lines = [
        "---",
        "library_name: rlid",
        "tags: [reinforcement-learning, text-games, rlid]",
        "---",
        "",
        f"# rlid agent: {config.env} ({config.plane} plane)",
        "",
        f"- **env:** `{config.env}`" + (f" ({env_opts})" if env_opts else ""),
        f"- **plane:** {config.plane}",
        f"- **algorithm:** {_algorithm(config)}",
        f"- **starting model:** `{config.model}` ({evals.get('model_origin', 'unknown origin')})",
        f"- **labels:** {' '.join(interface['labels'] or []) or 'none (free text)'}",
        f"- **seed:** {config.seed}",
    ]
    if interface["lora"]:
        lora = interface["lora"]
        where = "merged into the weights" if lora["merged"] else (
            f"adapters on base `{lora['base_model_name_or_path']}`"
        )  # fmt: skip
        lines.append(f"- **LoRA:** rank {config.lora_rank}, {where}")
    if metrics:
        budget = metrics[-1]["budget"]
        lines += ["", "## Budget spent", ""]
        lines += [
            f"- {k}: {v:.1f}" if isinstance(v, float) else f"- {k}: {v}" for k, v in budget.items()
        ]
    lines += ["", "## Held-out evaluation (greedy)", ""]
    lines += [
        "| | success [95% Wilson] | return | episode length | episodes |",
        "|---|---|---|---|---|",
    ]
    for when in ("before", "after"):
        stats = evals.get(when)
        if not stats:
            continue
        n = int(stats.get("episodes", 0))
        lo, hi = _wilson(stats["success"] * n, n)
        lines.append(
            f"| {when} training | {stats['success']:.3f} [{lo:.3f}, {hi:.3f}] | "
            f"{stats['return']:.3f} | {stats['episode_length']:.2f} | {n} |"
        )
    lines += [
        "",
        "## Use",
        "",
        "```python",
        "import envs",
        "from rlid.runs.export import load_agent",
        'agent = load_agent("PATH/TO/THIS/DIR")',
        f'env = envs.make({make_args}, split="heldout")  # or gymnasium.make({gym_id(config.env)!r}, ...)',
        "obs, info = env.reset(seed=0); action = agent.act(obs, info)",
        "```",
        "",
        "Step on with `obs, reward, terminated, truncated, info = env.step(action)` and "
        "`agent.act(obs, info)` again (the agent keeps its memory); `agent.reset()` before "
        "each new episode. `DecisionPolicy.from_pretrained(DIR)` gives the batched "
        "policy. `interface.json` holds the prompt interface and label set the agent was "
        "trained with. The weights alone load with "
        "`transformers.AutoModelForCausalLM.from_pretrained(DIR)`"
        + (
            " (LoRA adapters: with peft, on the base above)."
            if interface["lora"] and not interface["lora"]["merged"]
            else "."
        ),
        "",
    ]
    return "\n".join(lines)
