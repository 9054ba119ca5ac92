"""Parse and validate a comparison TOML file into a :class:`CompareConfig`.

Everything is checked before any run starts, and every error names its key:
unknown keys, keys the comparison sets itself, env ids and options, planes and
algorithms, undeclared interface differences, a budget currency some arm never
spends. Each run's ``TrainConfig`` is also built once so its own checks run here.
"""

from __future__ import annotations

import re
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any

from rlid import envs as envs_pkg
from rlid.compare.config import (
    FIXED_KEYS,
    PLANE_ALGORITHMS,
    REFERENCES,
    Arm,
    CompareConfig,
    CompareConfigError,
    CompareEnv,
    build_train_config,
)
from rlid.config.budget import CURRENCIES
from rlid.config.registry import get_plane
from rlid.config.run import TrainConfig, plane_config_classes, read_toml
from rlid.menus import Interface

TOP_KEYS = (
    "name",
    "seeds",
    "heldout_episodes",
    "interface_differences",
    "references",
    "budget",
    "interface",
    "defaults",
    "envs",
    "arms",
)
ARM_KEYS = ("plane", "algorithm", "options", "interface", "nproc", "build")
ENV_KEYS = ("name", "id", "options", "train", "heldout")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def load_compare_config(path: Path) -> CompareConfig:
    """Read and validate a comparison TOML file (nothing is trained or written)."""
    path = Path(path)
    data = read_toml(path, "comparison config", CompareConfigError)
    try:
        return parse_compare_config(data)
    except CompareConfigError as err:
        raise CompareConfigError(f"{path}: {err}") from None


def parse_compare_config(data: dict[str, Any]) -> CompareConfig:
    """Validate a parsed TOML document; raises :class:`CompareConfigError`."""
    _check_keys(data, TOP_KEYS, "top level")
    for key in ("budget", "envs", "arms"):
        if key not in data:
            raise CompareConfigError(f"{key}: missing (required)")
    name = _name(data.get("name", "comparison"), "name")
    seeds = _seeds(data.get("seeds", [0, 1, 2]))
    episodes = data.get("heldout_episodes", 16)
    if not _is_int(episodes) or episodes < 1:
        raise CompareConfigError(f"heldout_episodes: must be an int >= 1, got {episodes!r}")
    currency, amount = _budget(data["budget"])
    interface = _interface({}, data.get("interface", {}), "interface")
    declared = _declared(data.get("interface_differences", []))
    defaults = _train_overrides(data.get("defaults", {}), "defaults")
    envs = _envs(data["envs"])
    arms = _arms(data["arms"], interface)
    references = _references(data.get("references", ["random"]))
    if "afterstate" in references and not interface.afterstates:
        raise CompareConfigError(
            "references: 'afterstate' reads the afterstates the menus show, but the "
            "interface hides them (afterstates = false); drop it or show them"
        )
    compare = CompareConfig(
        name=name, seeds=seeds, heldout_episodes=episodes, currency=currency, amount=amount,
        interface=interface, interface_differences=declared, defaults=defaults,
        envs=envs, arms=arms, references=references,
    )  # fmt: skip
    _check_interfaces(compare)
    _check_currency(compare)
    for arm in arms:  # every TrainConfig is built once, so its own checks run now
        for env in envs:
            try:
                built = build_train_config(compare, arm, env, seeds[0])
            except (ValueError, TypeError) as err:
                raise CompareConfigError(f"arms.{arm.name} (env {env.name}): {err}") from None
            if built.groups_per_iter % arm.nproc:
                raise CompareConfigError(
                    f"arms.{arm.name}.nproc: {arm.nproc} processes cannot share "
                    f"groups_per_iter={built.groups_per_iter} game groups (the global number "
                    "per iteration); make groups_per_iter a multiple of nproc"
                )
    return compare


def _references(value: Any) -> tuple[str, ...]:

    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CompareConfigError(f"references: must be a list of names, got {value!r}")
    unknown = [v for v in value if v not in REFERENCES]
    if unknown:
        raise CompareConfigError(f"references: unknown {unknown}; valid: {list(REFERENCES)}")
    if len(set(value)) != len(value):
        raise CompareConfigError(f"references: listed twice in {value}")
    return tuple(value)


def _check_keys(table: Any, valid: tuple[str, ...], where: str) -> None:
    if not isinstance(table, dict):
        raise CompareConfigError(f"{where}: must be a table, got {table!r}")
    unknown = sorted(set(table) - set(valid))
    if unknown:
        prefix = "" if where == "top level" else f"{where}."
        raise CompareConfigError(
            f"{prefix}{unknown[0]}: unknown key; valid keys here: {', '.join(valid)}"
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _name(value: Any, key: str) -> str:
    if not isinstance(value, str) or not NAME_PATTERN.match(value):
        raise CompareConfigError(
            f"{key}: {value!r} must be a non-empty name of letters, digits, '_', '.', '-' "
            "(it becomes part of run directory names)"
        )
    return value


def _seeds(value: Any) -> tuple[int, ...]:
    if _is_int(value):
        if value < 1:
            raise CompareConfigError(f"seeds: a count must be >= 1, got {value}")
        return tuple(range(value))
    if not isinstance(value, list) or not value or not all(_is_int(s) for s in value):
        raise CompareConfigError(
            f"seeds: must be a count or a non-empty list of ints, got {value!r}"
        )
    if len(set(value)) != len(value) or min(value) < 0:
        raise CompareConfigError(f"seeds: must be distinct ints >= 0, got {value!r}")
    return tuple(value)


def _budget(table: Any) -> tuple[str, int]:
    _check_keys(table, ("currency", "amount"), "budget")
    currency = table.get("currency", "env_steps")
    if currency not in CURRENCIES:
        raise CompareConfigError(
            f"budget.currency: {currency!r} is not a budget currency; valid: {', '.join(CURRENCIES)}"
        )
    if "amount" not in table:
        raise CompareConfigError("budget.amount: missing (required)")
    amount = table["amount"]
    if not _is_int(amount) or amount < 1:
        unit = "seconds" if currency == "wall_time" else currency
        raise CompareConfigError(f"budget.amount: must be an int >= 1 ({unit}), got {amount!r}")
    return currency, amount


def _interface(base: dict[str, Any], table: Any, key: str) -> Interface:
    known = tuple(f.name for f in fields(Interface))
    _check_keys(table, known, key)
    try:
        return Interface.from_dict({**base, **table})
    except (ValueError, TypeError) as err:
        raise CompareConfigError(f"{key}: {err}") from None


def _declared(value: Any) -> tuple[str, ...]:
    known = [f.name for f in fields(Interface)]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CompareConfigError(
            f"interface_differences: must be a list of Interface field names, got {value!r}"
        )
    for name in value:
        if name not in known:
            raise CompareConfigError(
                f"interface_differences: {name!r} is not an Interface field; valid: {', '.join(known)}"
            )
    return tuple(value)


def _train_overrides(table: Any, key: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise CompareConfigError(f"{key}: must be a table of TrainConfig values, got {table!r}")
    # any plane's field: [defaults] serve every arm, each run takes its own plane's
    known = {f.name for cls in plane_config_classes().values() for f in fields(cls)}
    for name in table:
        if name in FIXED_KEYS:
            raise CompareConfigError(
                f"{key}.{name}: set by the comparison for every run; use {FIXED_KEYS[name]}"
            )
        if name not in known:
            valid = ", ".join(sorted(known - set(FIXED_KEYS)))
            raise CompareConfigError(f"{key}.{name}: unknown TrainConfig key; valid keys: {valid}")
    return dict(table)


def _options(table: Any, key: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise CompareConfigError(f"{key}: must be a table of env options, got {table!r}")
    if "split" in table:
        raise CompareConfigError(
            f"{key}.split: set by the comparison (train games train, held-out games evaluate)"
        )
    return dict(table)


def _envs(value: Any) -> tuple[CompareEnv, ...]:

    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not value:
        raise CompareConfigError("envs: need at least one [[envs]] table with an id")
    out: list[CompareEnv] = []
    for i, table in enumerate(value):
        where = f"envs[{i}]"
        _check_keys(table, ENV_KEYS, where)
        if "id" not in table:
            raise CompareConfigError(f"{where}.id: missing (required; see `rlid envs`)")
        env_id = table["id"]
        name = _name(table.get("name", env_id), f"{where}.name")
        shared = _options(table.get("options", {}), f"{where}.options")
        train = {**shared, **_options(table.get("train", {}), f"{where}.train")}
        heldout = {**shared, **_options(table.get("heldout", {}), f"{where}.heldout")}
        for split, options in (("train", train), ("heldout", heldout)):
            try:
                envs_pkg.get_spec(env_id).resolve({**options, "split": split})
            except (ValueError, TypeError) as err:
                raise CompareConfigError(f"{where} ({split} options): {err}") from None
        if any(e.name == name for e in out):
            raise CompareConfigError(f"{where}.name: {name!r} is used twice; give each env a name")
        out.append(
            CompareEnv(name=name, env_id=env_id, train_options=train, heldout_options=heldout)
        )
    return tuple(out)


def _arms(value: Any, shared: Interface) -> tuple[Arm, ...]:
    if not isinstance(value, dict) or not value:
        raise CompareConfigError("arms: need at least one [arms.NAME] table")
    planes = typing.get_args(typing.get_type_hints(TrainConfig)["plane"])
    out = []
    for name, table in value.items():
        where = f"arms.{name}"
        _name(name, where)
        _check_keys(table, ARM_KEYS, where)
        plane = table.get("plane")
        if plane not in planes:
            raise CompareConfigError(
                f"{where}.plane: {plane!r} is not a plane; choose one of {', '.join(planes)}"
            )
        valid = PLANE_ALGORITHMS[plane]
        algorithm = table.get("algorithm", valid[0] if len(valid) == 1 else None)
        if algorithm not in valid:
            raise CompareConfigError(
                f"{where}.algorithm: {algorithm!r} is not an algorithm of the {plane} plane; "
                f"choose one of {', '.join(valid)}"
            )
        options = _train_overrides(table.get("options", {}), f"{where}.options")
        interface = _interface(shared.to_dict(), table.get("interface", {}), f"{where}.interface")
        nproc = table.get("nproc", 1)
        if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
            raise CompareConfigError(
                f"{where}.nproc: {nproc!r} is not a number of processes (an integer >= 1)"
            )
        build = table.get("build", "")
        if not isinstance(build, str):
            raise CompareConfigError(
                f"{where}.build: {build!r} is not a command; give the command that builds "
                'the arm\'s model as a string, e.g. build = "rlid pretrain ... --out runs/mine"'
            )
        out.append(Arm(name, plane, algorithm, options, interface, nproc, " ".join(build.split())))
    return tuple(out)


def _check_interfaces(compare: CompareConfig) -> None:
    """Arms must see the same interface unless the difference is declared."""
    for arm, diff in compare.interface_diffs().items():
        undeclared = [f for f in diff if f not in compare.interface_differences]
        if undeclared:
            shown = ", ".join(f"{f}: shared {diff[f][0]!r} vs {diff[f][1]!r}" for f in undeclared)
            raise CompareConfigError(
                f"arms.{arm}.interface: differs from the shared interface ({shown}); arms are "
                "compared on the same interface unless the difference is declared, e.g. "
                f"interface_differences = {undeclared!r}"
            )


def _check_currency(compare: CompareConfig) -> None:
    for arm in compare.arms:
        if compare.currency.startswith("generated_") and not get_plane(arm.plane).generates_text:
            raise CompareConfigError(
                f"budget.currency: {compare.currency!r} never grows on arms.{arm.name} "
                f"(the {arm.plane} plane generates no text); choose a currency every arm "
                "spends, e.g. env_steps, episodes, forward_passes or wall_time"
            )
        if compare.currency == "optimizer_steps" and arm.algorithm == "dapo":
            raise CompareConfigError(
                f"budget.currency: 'optimizer_steps' can stall arms.{arm.name} (a DAPO "
                "iteration whose groups are all filtered makes no optimizer step); choose "
                "another currency"
            )
