"""The named starts: the shipped warm start (manifest, hash, package data, its recipe's
command), the random-play start built on request, and the pins runs record."""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import shlex
import shutil
import tomllib
from pathlib import Path

import pytest

from rlid.config.flags import add_dataclass_arguments, given_values
from rlid.lm.pretrain import PretrainConfig
from rlid.lm.start_files import (
    TINY_NAME,
    TINY_RANDOM_NAME,
    check_shipped,
    file_sha256,
    read_manifest,
    shipped_dir,
)
from rlid.lm.starts import load_policy_model, model_pin

ROOT = Path(__file__).resolve().parents[1]


def test_the_manifest_hash_matches_the_shipped_weights():
    manifest = read_manifest()
    weights = shipped_dir() / manifest["weights"]["file"]
    assert file_sha256(weights) == manifest["weights"]["sha256"]
    assert check_shipped() == shipped_dir()


def test_a_damaged_shipped_start_is_refused_naming_the_file(tmp_path):
    copy = tmp_path / "start"
    shutil.copytree(shipped_dir(), copy)
    weights = copy / read_manifest(copy)["weights"]["file"]
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0xFF  # a flipped byte in the tensor data
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="do not match the sha256 in its manifest"):
        check_shipped(copy)
    weights.unlink()
    with pytest.raises(FileNotFoundError, match="are missing"):
        check_shipped(copy)


def test_tiny_is_the_shipped_start_and_loads_without_building(tmp_path, monkeypatch):
    monkeypatch.setenv("RLID_CACHE_DIR", str(tmp_path / "cache"))  # an empty cache
    model, tokenizer = load_policy_model(TINY_NAME)
    assert model.rlid_origin == "shipped"
    assert not (tmp_path / "cache").exists()  # nothing was built or cached
    assert tokenizer.padding_side == "left"
    pin = model_pin(TINY_NAME)
    assert pin["origin"] == "shipped" and pin["path"] == str(shipped_dir().resolve())
    assert model_pin(TINY_RANDOM_NAME)["sha256"] is None


def test_the_manifest_says_what_the_corpus_saw_and_never_a_heldout_game():
    manifest = read_manifest()
    recipe = PretrainConfig(**{k: tuple(v) if isinstance(v, list) else v
                               for k, v in manifest["recipe"].items()})  # fmt: skip
    assert manifest["sequences"] > 0
    assert "training games" in manifest["corpus"] and "held-out" in manifest["corpus"]
    for env in recipe.envs:
        assert env.split("[")[0] in manifest["corpus"]
    # the corpus code plays split="train" only (rlid/lm/pretrain/corpus.py)
    corpus = (ROOT / "rlid" / "lm" / "pretrain" / "corpus.py").read_text()
    assert 'split="train"' in corpus and "heldout" not in corpus


def test_the_manifest_command_rebuilds_the_same_recipe():
    manifest = read_manifest()
    words = shlex.split(manifest["command"])
    assert words[:2] == ["rlid", "pretrain"]
    parser = argparse.ArgumentParser()
    add_dataclass_arguments(parser, PretrainConfig)
    parser.add_argument("--out")
    args = parser.parse_args(words[2:])
    rebuilt = dataclasses.asdict(PretrainConfig(**given_values(args, PretrainConfig)))
    recorded = {k: tuple(v) if isinstance(v, list) else v for k, v in manifest["recipe"].items()}
    rebuilt = {k: tuple(v) if isinstance(v, list) else v for k, v in rebuilt.items()}
    assert rebuilt == recorded


def test_the_package_build_includes_every_shipped_file():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = data["package-data"]["rlid"]
    for path in shipped_dir().iterdir():
        relative = str(path.relative_to(ROOT / "rlid"))
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), relative
    assert (shipped_dir() / "pretrain.json").is_file()  # the answered labels ride along
    assert json.loads((shipped_dir() / "pretrain.json").read_text())["answered_labels"]
