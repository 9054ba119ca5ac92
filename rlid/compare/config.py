"""The comparison config: arms x environments x seeds under one shared budget.

Read from TOML and validated completely before any run starts; every error names
the offending key (``arms.token-grpo.options.lrr: ...``). Parsed by ``rlid.compare.parse``.
Example (the shipped ``examples/compare_small.toml`` is a complete one)::

    name = "small"
    seeds = [0, 1, 2]                 # or a count: seeds = 3 -> 0, 1, 2
    heldout_episodes = 16             # greedy held-out episodes per run, before and after
    interface_differences = []        # Interface fields arms may change (declared, reported first)
    references = ["random", "walkthrough"]  # floor / ceiling arms, no model (default: random);
                                      # "afterstate": reads the menus' outcome marks only

    [budget]                          # ONE currency, the same amount for every arm
    currency = "env_steps"            # any rlid.config.budget counter; wall_time is in seconds
    amount = 1200

    [interface]                       # what every policy sees (menus.Interface fields)
    memory = "none"

    [defaults]                        # TrainConfig values every arm starts from
    groups_per_iter = 2

    [[envs]]
    name = "kd"                       # optional, default: the id
    id = "keydoor"
    options = { size = 2 }            # shared by both splits
    train = {}                        # extra options of the training games
    heldout = {}                      # extra options of the held-out games (split="heldout")

    [arms.decision-ppo]
    plane = "decision"                # decision | scoring | token
    algorithm = "ppo"                 # ppo (decision, scoring) or a token loss (grpo, dapo, ...)
    options = { lr = 3e-4 }           # TrainConfig overrides of this arm
    # interface = { ... }             # arm-level Interface changes: must be declared above
    # build = "rlid pretrain ..."     # the command that builds options.model (shown when
                                      # that directory is missing)

What the comparison fixes for every run (and so may not appear in ``defaults`` or
``options``): plane, algo, env, env_options, steps, budget_currency, seed,
eval_episodes and interface.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Literal, get_args

from rlid.config.names import TokenAlgo
from rlid.config.run import TrainConfig, config_class
from rlid.menus import Interface

PLANE_ALGORITHMS: dict[str, tuple[str, ...]] = {
    "decision": ("ppo",),
    "scoring": ("ppo",),
    "token": get_args(TokenAlgo),
}
"""The algorithms each plane trains with (decision and scoring: decision-level PPO)."""

FIXED_KEYS = {
    "plane": "the arm's `plane`",
    "algo": "the arm's `algorithm`",
    "env": "[[envs]] id",
    "env_options": "[[envs]] options / train / heldout",
    "steps": "[budget] amount",
    "budget_currency": "[budget] currency",
    "seed": "the top-level `seeds`",
    "eval_episodes": "the top-level `heldout_episodes`",
    "interface": "[interface] (shared) or the arm's `interface` (declared differences)",
}
"""TrainConfig fields the comparison sets itself, and where each is configured instead."""


class CompareConfigError(ValueError):
    """A mistake in a comparison config; the message names the key."""


@dataclass(frozen=True)
class CompareEnv:
    """One environment: training options and held-out options (``split`` is added)."""

    name: str
    env_id: str
    train_options: dict[str, Any]
    heldout_options: dict[str, Any]

    @property
    def heldout_matches_train(self) -> bool:
        """The trainer's own held-out evaluation then plays exactly these games."""
        return self.train_options == self.heldout_options


@dataclass(frozen=True)
class Arm:
    """One way of training: a plane, its algorithm, TrainConfig overrides, its interface."""

    name: str
    plane: str
    algorithm: str
    options: dict[str, Any]
    interface: Interface
    nproc: int = 1  # processes per run (torchrun; the budget and groups are global)
    build: str = ""  # the command that builds its starting model (shown while it is missing)


@dataclass(frozen=True)
class RunSpec:
    """One training run of the comparison: arm x env x seed, with its full config."""

    arm: str
    env: str
    seed: int
    name: str
    config: TrainConfig
    nproc: int = 1
    build: str = ""  # its arm's command that builds the starting model


@dataclass(frozen=True)
class CompareConfig:
    """A validated comparison (see the module docstring for the TOML layout)."""

    name: str  # names the report
    seeds: tuple[int, ...]  # every arm trains once per seed
    heldout_episodes: int  # greedy held-out episodes per run (TrainConfig.eval_episodes)
    currency: str  # the budget currency, a rlid.config.budget counter (wall_time: seconds)
    amount: int  # the budget every run gets, in that currency
    interface: Interface  # what every policy sees unless a declared difference says otherwise
    interface_differences: tuple[str, ...]  # Interface fields arms may change
    defaults: dict[str, Any]  # TrainConfig values every arm starts from
    envs: tuple[CompareEnv, ...]  # environments; each is trained and evaluated separately
    arms: tuple[Arm, ...]  # in the order of the TOML file
    references: tuple[str, ...] = ("random",)  # untrained reference arms (rlid.compare.reference)
    # every env name of the file when ``select`` kept only some: run names stay those of
    # the whole comparison, so a selection reuses and feeds the same run directories
    all_envs: tuple[str, ...] = ()

    def select(
        self,
        arms: list[str] | None = None,
        envs: list[str] | None = None,
        seeds: list[int] | None = None,
    ) -> CompareConfig:
        """The same comparison restricted to some arms, envs and/or seeds (``rlid compare
        --arms/--envs/--seeds``): run names, configs and reuse are unchanged, so a
        selection trains part of a large comparison and a later call with more names
        continues (or, with another ``--out``, trains another part at the same time)."""
        unknown_seeds = [seed for seed in seeds or [] if seed not in self.seeds]
        if unknown_seeds:
            raise CompareConfigError(
                f"unknown seed(s) {', '.join(map(str, unknown_seeds))}; this config has: "
                f"{', '.join(map(str, self.seeds))}"
            )
        for kind, wanted, known in (
            ("arm", arms, [a.name for a in self.arms]),
            ("env", envs, [e.name for e in self.envs]),
        ):
            unknown = [name for name in wanted or [] if name not in known]
            if unknown:
                raise CompareConfigError(
                    f"unknown {kind} name(s) {', '.join(unknown)}; this config has: "
                    f"{', '.join(known)}"
                )
        return replace(
            self,
            arms=tuple(a for a in self.arms if arms is None or a.name in arms),
            envs=tuple(e for e in self.envs if envs is None or e.name in envs),
            seeds=tuple(seed for seed in self.seeds if seeds is None or seed in seeds),
            all_envs=self.all_envs or tuple(e.name for e in self.envs),
        )

    def interface_diffs(self) -> dict[str, dict[str, tuple[Any, Any]]]:
        """``{arm: {field: (shared value, arm value)}}`` for arms whose interface differs."""
        out = {}
        for arm in self.arms:
            diff = self.interface.diff(arm.interface)
            if diff:
                out[arm.name] = diff
        return out

    def run_name(self, arm: str, env: str, seed: int) -> str:
        if len(self.all_envs or self.envs) == 1:
            return f"{arm}-seed{seed}"
        return f"{arm}-{env}-seed{seed}"

    def runs(self) -> list[RunSpec]:
        """Every run, in the order they are trained: env, then seed, then arm.

        Seeds are the outer loop so that a comparison stopped half-way has every
        arm at the same number of seeds.
        """
        out = []
        for env in self.envs:
            for seed in self.seeds:
                for arm in self.arms:
                    config = build_train_config(self, arm, env, seed)
                    name = self.run_name(arm.name, env.name, seed)
                    out.append(
                        RunSpec(arm.name, env.name, seed, name, config, arm.nproc, arm.build)
                    )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seeds": list(self.seeds),
            "heldout_episodes": self.heldout_episodes,
            "references": list(self.references),
            "budget": {"currency": self.currency, "amount": self.amount},
            "interface": self.interface.to_dict(),
            "interface_differences": list(self.interface_differences),
            "defaults": dict(self.defaults),
            "envs": [
                {
                    "name": e.name,
                    "id": e.env_id,
                    "train_options": dict(e.train_options),
                    "heldout_options": dict(e.heldout_options),
                }
                for e in self.envs
            ],
            "arms": [
                {
                    "name": a.name,
                    "plane": a.plane,
                    "algorithm": a.algorithm,
                    "options": dict(a.options),
                    "interface": a.interface.to_dict(),
                    **({"nproc": a.nproc} if a.nproc != 1 else {}),
                }
                for a in self.arms
            ],
            **({"selected_from_envs": list(self.all_envs)} if self.all_envs else {}),
        }


def build_train_config(compare: CompareConfig, arm: Arm, env: CompareEnv, seed: int) -> TrainConfig:
    """defaults < arm options < what the comparison fixes (budget, seed, env, interface).

    ``[defaults]`` serve every arm: a default that only another plane has (the token
    plane's ``max_new_tokens`` for a decision arm) is left out of this arm's config."""
    own = {f.name for f in fields(config_class(arm.plane))}
    data = {k: v for k, v in compare.defaults.items() if k in own}
    data.update(arm.options)
    data.update(
        plane=arm.plane,
        env=env.env_id,
        env_options=dict(env.train_options),
        steps=compare.amount,
        budget_currency=compare.currency,
        seed=seed,
        eval_episodes=compare.heldout_episodes,
        interface=arm.interface,
    )
    if "algo" in {f.name for f in fields(config_class(arm.plane))}:  # the plane's algorithms
        data["algo"] = arm.algorithm
    return TrainConfig.from_dict(data)


Reference = Literal["random", "walkthrough", "afterstate"]


REFERENCES: tuple[str, ...] = get_args(Reference)


# references that draw with the rollout's rng: evaluated once per comparison seed
STOCHASTIC_REFERENCES = frozenset({"random", "afterstate"})
