"""One way to derive CLI flags from a config dataclass, for train, audit and pretrain."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from rlid.audit.run import AuditConfig
from rlid.cli.main import build_parser
from rlid.config import TrainConfig
from rlid.config.flags import given_values
from rlid.lm.pretrain import PretrainConfig
from rlid.menus import Interface


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.mark.parametrize(
    ("command", "cls", "skip"),
    [
        ("train", TrainConfig, {"interface", "env_options"}),
        ("train", Interface, set()),
        ("audit", AuditConfig, set()),
        ("pretrain", PretrainConfig, set()),
    ],
)
def test_every_field_is_a_flag_with_its_default_in_the_help(command, cls, skip):
    parser = _subparser(command)
    flags = {s: a for a in parser._actions for s in a.option_strings}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        action = flags["--" + f.name.replace("_", "-")]
        assert action.default is None and "(default: " in action.help, f.name
        # a sentence, not the bare field name (Interface: from its attribute docstrings)
        assert not action.help.startswith(f"{f.name} (default"), f.name


def test_interface_help_is_the_first_sentence_of_each_attribute_docstring():
    from rlid.config.flags import attribute_docs

    docs = attribute_docs(Interface)
    assert set(docs) == {f.name for f in dataclasses.fields(Interface)}
    assert docs["shuffle"] == (
        "Shuffle menu rows every step (against label-position bias); the permutation is kept"
    )
    assert docs["steps_left"].endswith(
        '(Pardo et al. 2018, "Time Limits in Reinforcement Learning")'
    )


def test_given_values_types_and_defaults_from_the_dataclass():
    parser = _subparser("pretrain")
    args = parser.parse_args(["--envs", "keydoor,crafting", "--episodes", "3", "--lr", "0.01"])
    values = given_values(args, PretrainConfig)
    assert values == {"envs": ("keydoor,crafting",), "episodes_per_env": 3, "lr": 0.01}
    config = PretrainConfig(**values)
    assert config.envs == ("keydoor", "crafting") and config.steps == PretrainConfig().steps
    args = _subparser("audit").parse_args(["--mc-sizes", "4", "8", "--seed", "3"])
    assert AuditConfig(**given_values(args, AuditConfig)).mc_sizes == (4, 8)
    args = _subparser("train").parse_args(
        ["--report-to", "tensorboard,mlflow", "--shuffle", "no", "--memory", "none"]
    )
    assert given_values(args, TrainConfig)["report_to"] == ("tensorboard,mlflow",)
    assert TrainConfig(report_to=("tensorboard,mlflow",)).report_to == ("tensorboard", "mlflow")
    assert given_values(args, Interface, dest_prefix="interface__") == {
        "shuffle": False, "memory": "none",
    }  # fmt: skip
    with pytest.raises(SystemExit):
        _subparser("train").parse_args(["--plane", "tokn"])
