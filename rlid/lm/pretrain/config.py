"""What a warm start is built from: the recipe (:class:`PretrainConfig`) and its env entries."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rlid import envs as envs_pkg
from rlid.config.names import MODEL_SIZE_NAMES
from rlid.envs.registry import COMMON_OPTIONS, parse_option_strings
from rlid.menus.labels import parse_alphabet
from rlid.menus.memory import MEMORY_PROVIDERS

CHECKPOINT_EVERY = 200
"""Steps between the saved states of a resumable build (``rlid pretrain --checkpoint-every``)."""

DEFAULT_ENVS = ("keydoor", "crafting", "tw-coin_collector")


DEFAULT_LABELS = "A-Z"


DEFAULT_MEMORY = "last_k"


DEFAULT_SIZE = "tiny"


PLAY_CHOICES = ("random", "afterstate")


def _f(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help, **kw})


@dataclass(frozen=True)
class PretrainConfig:
    """Settings of the warm start (defaults: a few minutes on 2 CPU cores); ``rlid pretrain``
    derives its flags from these fields."""

    envs: tuple[str, ...] = _f(
        DEFAULT_ENVS,
        "env ids whose training games are played (space or comma separated); ENV[k=v,...] "
        "plays them with those options, e.g. 'keydoor[size=5,keys=2]'",
    )
    episodes_per_env: int = _f(48, "random-play episodes per env", aliases=("--episodes",))
    max_episode_steps: int = _f(12, "cap per random episode (short: prompts, not solutions)")
    walkthrough_episodes: int = _f(
        0,
        "episodes per env that follow the training game's walkthrough (0: random play only; "
        "> 0 is a behaviour-cloning warm start)",
    )
    walkthrough_max_steps: int = _f(64, "cap per walkthrough episode")
    num_games: int = _f(
        0,
        "training games per env the corpus plays (0: the env's own pool, its num_games "
        "option, 16 by default; a new TextWorld game compiles once, seconds)",
    )
    random_answers: bool = _f(
        True,
        "also train on the random-play choices (false: on their prompts only, so every "
        "answer the model is trained on is a walkthrough's, or with --play afterstate one "
        "the menu's marks chose)",
    )
    answer_weight: float = _f(
        1.0,
        "loss weight of an answer token (the chosen label and command) against a prompt "
        "token's 1; an answer is a few tokens of a few hundred, so > 1 stresses the choice",
    )
    steps: int = _f(400, "optimizer steps")
    batch_size: int = _f(16, "sequences per step")
    lr: float = _f(2e-3, "AdamW learning rate (cosine decay to 10%)")
    max_tokens: int = _f(
        384,
        "longer sequences are dropped (how many, per env, is printed and kept in pretrain.json)",
    )
    seed: int = _f(0, "seed (play and training)")
    threads: int = _f(2, "torch CPU threads")
    max_batch_tokens: int = _f(
        0,
        "split each step's batch, sorted by length, into pieces of at most N padded tokens "
        "whose gradients add up to the whole batch's (the same loss with less padding: "
        "several times faster when lengths vary; 0: one padded batch)",
    )
    labels: str = _f(
        DEFAULT_LABELS,
        "label alphabet of the corpus's menus, as a run's interface labels; a menu with more "
        "legal actions than labels keeps the first ones, and a walkthrough episode whose next "
        "command is not on it stops there ('auto': A-Z, a-z, 0-9, so up to 62 rows: match "
        "the comparison the warm start is for, e.g. examples/suite.toml)",
    )
    spread_labels: float = _f(
        0.0,
        "fraction of the corpus's menus whose labels are a random subset of the alphabet, "
        "in its order, rather than its first labels (as a run's menus have them): with 0, a "
        "label beyond the corpus's largest menu is never an answer, and the model rarely "
        "picks rows so labelled in a larger menu (the default corpus answers with A-K only; "
        "pretrain.json records the labels answered with)",
    )
    play: str = _f(
        "random",
        "how the play episodes pick their rows: 'random' (uniformly) or 'afterstate' (a row "
        "whose afterstate the menu marks best: a win, else the most points, else any row not "
        "marked as losing, uniformly among ties; envs.outcome.best_rows, the afterstate "
        "reference of rlid compare), so their answers teach reading the menu's outcome marks",
    )
    size: str = _f(
        DEFAULT_SIZE,
        "architecture preset of the fresh model (rlid.lm.models.MODEL_SIZES): 'tiny' (0.95M "
        "parameters) or 'large' (28.5M)",
    )
    memory: str = _f(
        DEFAULT_MEMORY,
        "memory line of the corpus's prompts, as a run's interface memory: 'last_k' (the "
        "last transitions), 'structured' (visited places, failed actions) or 'none'; match "
        "the runs the warm start is for",
    )

    def __post_init__(self) -> None:
        envs = tuple(part for item in self.envs for part in split_env_entries(str(item)))
        object.__setattr__(self, "envs", envs)
        for name in ("episodes_per_env", "max_episode_steps", "steps", "batch_size", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_batch_tokens < 0:
            raise ValueError(f"max_batch_tokens must be >= 0, got {self.max_batch_tokens}")
        if self.walkthrough_episodes < 0:
            raise ValueError(f"walkthrough_episodes must be >= 0, got {self.walkthrough_episodes}")
        most = int(COMMON_OPTIONS["num_games"].max or 0)  # the envs' own bound
        if not 0 <= self.num_games <= most:
            raise ValueError(
                f"num_games must be in [0, {most}] (0: the env's own), got {self.num_games}"
            )
        if self.walkthrough_max_steps < 1:
            raise ValueError(
                f"walkthrough_max_steps must be >= 1, got {self.walkthrough_max_steps}"
            )
        if not 0.0 <= self.spread_labels <= 1.0:
            raise ValueError(f"spread_labels must be in [0, 1], got {self.spread_labels}")
        if self.play not in PLAY_CHOICES:
            raise ValueError(f"play must be one of {list(PLAY_CHOICES)}, got {self.play!r}")
        if not self.answer_weight > 0:
            raise ValueError(f"answer_weight must be > 0, got {self.answer_weight}")
        if not self.envs:
            raise ValueError("give at least one env id to play")
        for entry in self.envs:
            parse_env_entry(entry)  # unknown ids and options fail listing the valid ones
        parse_alphabet(self.labels)  # a bad spec fails naming the valid forms

        if self.size not in MODEL_SIZE_NAMES:
            raise ValueError(f"size must be one of {sorted(MODEL_SIZE_NAMES)}, got {self.size!r}")
        if self.memory not in MEMORY_PROVIDERS:
            raise ValueError(
                f"memory must be one of {sorted(MEMORY_PROVIDERS)}, got {self.memory!r}"
            )


_RESERVED = ("split", "num_games", "max_episode_steps", "game_seed")


_ENTRY = re.compile(r"([A-Za-z0-9_.-]+)(?:\[([^\[\]]*)\])?")


def split_env_entries(text: str) -> list[str]:
    """``"keydoor[size=5,keys=2], crafting"`` -> ``["keydoor[size=5,keys=2]", "crafting"]``:
    split on commas and spaces outside brackets (spaces inside are dropped)."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise ValueError(f"env entry {text!r}: unbalanced brackets")
        if depth == 0 and char in ", \t\n":
            parts.append(current)
            current = ""
        elif not (depth and char.isspace()):
            current += char
    if depth:
        raise ValueError(f"env entry {text!r}: unbalanced brackets")
    return [part for part in [*parts, current] if part]


def parse_env_entry(entry: str) -> tuple[str, dict[str, Any]]:
    """``"keydoor[size=5,keys=2]"`` -> ``("keydoor", {"size": 5, "keys": 2})``, checked
    against the env's option table. The corpus sets the split, the pool and the step
    caps itself, so those options are refused here."""

    match = _ENTRY.fullmatch(entry)
    if match is None:
        raise ValueError(f"env entry {entry!r}: write ENV or ENV[key=value,...]")
    env_id, inside = match.group(1), match.group(2)
    given = parse_option_strings([p for p in (inside or "").split(",") if p])
    reserved = [k for k in _RESERVED if k in given]
    if reserved:
        raise ValueError(
            f"env entry {entry!r}: {', '.join(reserved)} is set by the corpus itself "
            "(--num-games, --max-episode-steps, --walkthrough-max-steps; training games only)"
        )
    resolved = envs_pkg.get_spec(env_id).resolve(given)  # unknown ids / bad values: clear errors
    return env_id, {k: resolved[k] for k in given}
