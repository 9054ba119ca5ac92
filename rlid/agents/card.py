"""The model card of an exported agent (its ``README.md``): what it is, how it was
trained, what it spent, how it did on held-out games, and how to use it."""

from __future__ import annotations

import math
from typing import Any

from rlid.config import TrainConfig
from rlid.config.registry import get_plane
from rlid.envs import gym_id


# ---------------------------------------------------------------------- model card
def wilson_interval(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a success rate (95% by default); NaNs for n = 0."""
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _algorithm(config: TrainConfig) -> str:
    plane = get_plane(config.plane)
    if plane.generates_text:
        algo, mismatch = getattr(config, "algo", "?"), getattr(config, "mismatch", "?")
        return f"{algo} ({config.plane} plane), mismatch correction {mismatch}"
    adv = "critic-free group-relative" if config.advantage == "group" else "GAE with a value head"
    norm = getattr(config, "norm", None)  # the scoring plane's action-score normalisation
    scoring = f", action scoring ({norm}-normalised)" if norm is not None else ""
    return f"{plane.description}, {adv} advantages{scoring}"


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
        lo, hi = wilson_interval(stats["success"] * n, n)
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
        "from rlid.agents.agent import load_agent",
        'agent = load_agent("PATH/TO/THIS/DIR")',
        f'env = envs.make({make_args}, split="heldout")  # or gymnasium.make({gym_id(config.env)!r}, ...)',
        "obs, info = env.reset(seed=0); action = agent.act(obs, info)",
        "```",
        "",
        "Step on with `obs, reward, terminated, truncated, info = env.step(action)` and "
        "`agent.act(obs, info)` again (the agent keeps its memory); `agent.reset()` before "
        "each new episode. `rlid.agents.load_policy(DIR)` gives the batched "
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
