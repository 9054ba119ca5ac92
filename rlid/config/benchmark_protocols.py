"""Published evaluation protocols: the settings under which an rlid number stands beside a
paper's.

rlid's own settings (the suite's short step limits, 16-game pools, clipped scores) are
made to train small models quickly; they are not any paper's. A :class:`Protocol` sets
everything that makes a number comparable with one published setting, each value read
from its source:

* ``glam-babyai`` — GLAM (Carta et al., ICML 2023), ``flowersteam/Grounding_LLMs_with_online_RL``;
* ``scienceworld-paper`` — ScienceWorld (Wang et al., EMNLP 2022) and its DRRN baseline,
  ``allenai/ScienceWorld`` 1.2.3 and ``cognitiveailab/drrn-scienceworld``;
* ``twx-paper`` — TextWorldExpress (Jansen & Côté 2022), ``cognitiveailab/TextWorldExpress``.

A protocol is chosen with ``--protocol NAME`` (``rlid train``, ``rlid eval``),
``protocol = "NAME"`` in a TOML config, or ``TrainConfig(protocol="NAME", ...)``. It sets
env options and interface fields; a value given that contradicts it is an error (a run
is under the protocol or it is not), the others are kept. The run's config records the
protocol, and ``rlid eval --protocol NAME`` plays its evaluation sets.

    >>> protocol = get_protocol("scienceworld-paper")
    >>> protocol.env_options_for("scienceworld", {"task": "boil"})["tick_limit"]
    100
    >>> protocol.env_options_for("scienceworld", {"tick_limit": 50})
    Traceback (most recent call last):
    ...
    ValueError: protocol scienceworld-paper sets tick_limit=100 (ScienceWorld's envStepLimit, counted in ticks: scienceworld.py step, DRRN --env_step_limit=100); drop tick_limit=50 or the protocol
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from rlid.envs.registry import SPLIT_SIZE, get_spec
from rlid.envs.twx.specs import GAMES, env_id_of
from rlid.menus import Interface

_DEFAULT_INTERFACE = Interface()


@dataclass(frozen=True)
class Setting:
    """One value a protocol fixes, with where it comes from."""

    value: Any
    source: str


@dataclass(frozen=True)
class EvalSet:
    """One set of evaluation episodes of a protocol.

    Attributes:
        name: what the set is ("MixedTestLocal", "test variations").
        env_options: options added to the run's (e.g. another ``level``).
        episodes: episodes the source plays (or, where it plays a few per evaluation,
            enough for a tight interval; ``source`` says which).
        source: where the set is defined.
        only_when: ``{option: values}`` the run's options must hold for the set to apply
            (GLAM evaluates its mixtures on both mixtures, GoToLocal on GoToLocal).
    """

    name: str
    env_options: Mapping[str, Any]
    episodes: int
    source: str
    only_when: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    def applies(self, options: Mapping[str, Any]) -> bool:
        return all(options.get(name) in values for name, values in self.only_when.items())


@dataclass(frozen=True)
class Protocol:
    """A published evaluation setting (see the module's docstring).

    Attributes:
        name: the protocol's name (``--protocol NAME``).
        title: one line: the paper and what it measures.
        env_ids: the env ids it covers.
        env_settings: env options it fixes, per env id (:meth:`env_options_for`).
        choices: options the user picks, restricted to these values (GLAM's two
            training levels).
        interface: ``menus.Interface`` fields it fixes.
        eval_sets: the evaluation it plays (``rlid eval --protocol``).
        greedy: whether evaluation plays the most likely action (False: samples, as
            GLAM's ``dist.sample()`` does at test time).
        scores: how its numbers are reported.
    """

    name: str
    title: str
    env_ids: tuple[str, ...]
    env_settings: Mapping[str, Mapping[str, Setting]]
    choices: Mapping[str, tuple[Any, ...]]
    interface: Mapping[str, Setting]
    eval_sets: tuple[EvalSet, ...]
    greedy: bool
    scores: str

    def check_env(self, env_id: str) -> None:
        if env_id not in self.env_ids:
            raise ValueError(
                f"protocol {self.name} is for {', '.join(self.env_ids)}, not env {env_id!r}"
            )

    def env_options_for(self, env_id: str, given: Mapping[str, Any]) -> dict[str, Any]:
        """``given`` with the protocol's options of ``env_id`` set; a given value that
        contradicts one (compared as the env reads it: ``"100"`` is 100) is a clear error."""
        self.check_env(env_id)
        table = get_spec(env_id).all_options()
        out = dict(given)
        for name, values in self.choices.items():
            if name in given and _typed(env_id, table, name, given[name]) not in values:
                allowed = ", ".join(map(str, values))
                raise ValueError(
                    f"protocol {self.name} trains on {name} in {allowed}, not {given[name]!r}"
                )
        for name, setting in self.env_settings[env_id].items():
            if name in given and _typed(env_id, table, name, given[name]) != setting.value:
                raise ValueError(
                    f"protocol {self.name} sets {name}={setting.value} ({setting.source}); "
                    f"drop {name}={given[name]} or the protocol"
                )
            out[name] = setting.value
        return out

    def interface_fields(self, given: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict:
        """``given`` (an ``Interface``'s fields) with the protocol's set; a field given
        another value than both its default and the protocol's is a clear error."""
        out = dict(given)
        for name, setting in self.interface.items():
            value = given.get(name, defaults.get(name))
            if value != setting.value and value != defaults.get(name):
                raise ValueError(
                    f"protocol {self.name} sets the interface's {name}={setting.value!r} "
                    f"({setting.source}); drop {name}={value!r} or the protocol"
                )
            out[name] = setting.value
        return out

    def configure(
        self, env_id: str, env_options: Mapping[str, Any], interface: Interface
    ) -> tuple[dict[str, Any], Interface]:
        """A run's env options and interface under the protocol (idempotent: a run's
        recorded config configures to itself)."""
        options = self.env_options_for(env_id, env_options)
        if not self.interface:
            return options, interface
        given = {f.name: getattr(interface, f.name) for f in fields(Interface)}
        defaults = {f.name: getattr(_DEFAULT_INTERFACE, f.name) for f in fields(Interface)}
        return options, Interface(**self.interface_fields(given, defaults))

    def eval_sets_for(self, env_options: Mapping[str, Any]) -> tuple[EvalSet, ...]:
        """The evaluation sets that apply to a run with ``env_options``."""
        return tuple(s for s in self.eval_sets if s.applies(env_options))


def _typed(env_id: str, table: Mapping[str, Any], name: str, value: Any) -> Any:
    option = table.get(name)
    if option is None:
        return value
    try:
        return option.check(env_id, name, value)
    except ValueError:
        return value  # the env's own check reports it


# ------------------------------------------------------------------------------ GLAM
_GLAM = "flowersteam/Grounding_LLMs_with_online_RL"
_GLAM_LEVELS = "babyai-text/babyai_text/levels/mixed_seq_levels.py"
GLAM_BABYAI = Protocol(
    name="glam-babyai",
    title="GLAM (Carta et al., ICML 2023): BabyAI-Text, success rate over 1,000 episodes",
    env_ids=("babyai-text",),
    env_settings={
        "babyai-text": {
            "max_episode_steps": Setting(
                None,
                "BabyAI's own limit, room size^2 x rooms x navigations: 64 GoTo/PickUp, 128 "
                "Open/PutNext/sequences (babyai levelgen.py RoomGridLevel.reset)",
            ),
            "num_games": Setting(
                SPLIT_SIZE,
                f"fresh procedural games: {_GLAM} train_language_agent.py seeds each env "
                "100*seed+i and never pools games",
            ),
            "task": Setting("any", f"the five tasks drawn uniformly ({_GLAM_LEVELS})"),
            "afterstates": Setting(False, "GLAM's prompt shows no predicted outcomes"),
        },
    },
    choices={"level": ("MixedTrainLocal", "GoToLocal")},
    interface={
        "layout": Setting(
            "glam", f"{_GLAM} experiments/agents/base_agent.py generate_prompt (separators)"
        ),
        "memory": Setting("glam", "the observations and actions GLAM's prompt shows"),
        "memory_size": Setting(
            3, f"nbr_obs=3: the last 3 observations, 2 actions ({_GLAM} llm_ppo_agent.py)"
        ),
        "afterstates": Setting(False, "GLAM's prompt shows no predicted outcomes"),
    },
    eval_sets=(
        EvalSet(
            "MixedTrainLocal, new seeds",
            {"level": "MixedTrainLocal", "split": "heldout"},
            1000,
            f"{_GLAM} campaign/Mixed_tests_no-change/GFlan-T5_large.slurm number_episodes=1000",
            {"level": ("MixedTrainLocal", None)},
        ),
        EvalSet(
            "MixedTestLocal",
            {"level": "MixedTestLocal", "split": "heldout"},
            1000,
            f"{_GLAM} campaign/Mixed_tests_no-change: number_episodes=1000 on MixedTestLocal",
            {"level": ("MixedTrainLocal", None)},
        ),
        EvalSet(
            "GoToLocal, new seeds",
            {"level": "GoToLocal", "split": "heldout"},
            1000,
            f"{_GLAM} post-training_tests.py (1,000 episodes, as for the mixtures)",
            {"level": ("GoToLocal",)},
        ),
    ),
    greedy=False,
    scores="success rate (won = BabyAI reward > 0, post-training_tests.py)",
)

# ---------------------------------------------------------------------- ScienceWorld
_DRRN = "cognitiveailab/drrn-scienceworld@91b9265"
SCIENCEWORLD_PAPER = Protocol(
    name="scienceworld-paper",
    title="ScienceWorld (Wang et al., EMNLP 2022) Table 2: score on the test variations, 0-1",
    env_ids=("scienceworld",),
    env_settings={
        "scienceworld": {
            "simplifications": Setting(
                "easy",
                f"{_DRRN} beaker/batchSubmission.py --simplification_str=easy (1.2.3's easy: "
                "AgentInterface.scala)",
            ),
            "tick_limit": Setting(
                100,
                "ScienceWorld's envStepLimit, counted in ticks: scienceworld.py step, DRRN "
                "--env_step_limit=100",
            ),
            "max_episode_steps": Setting(
                101,
                f"{_DRRN} train-scienceworld.py evaluate_episode: stops after "
                "env_step_limit + 1 commands",
            ),
            "num_games": Setting(
                SPLIT_SIZE,
                f"every variation of the split: {_DRRN} vec_env.py getRandomVariationTrain, "
                "getRandomVariationTest",
            ),
            "heldout_variations": Setting("test", "paper Table 2: test variations"),
            "raw_scores": Setting(
                True, "scienceworld.py step reports -100 on failure; DRRN trains on it"
            ),
            "ambiguity": Setting(
                "ask",
                "the API's valid actions in an ambiguous state are the numbers "
                "(InputParser.getValidActionsAmbiguousState); DRRN picks among them",
            ),
            "reset_task": Setting(
                True, "DRRN's valid actions are the API's list, 'reset task' in it"
            ),
        },
    },
    choices={},
    interface={},
    eval_sets=(
        EvalSet(
            "test variations",
            {"split": "heldout"},
            100,
            "paper App. C.1: episodes on test variations drawn at random "
            f"({_DRRN} getRandomVariationTest); 100 for a tight interval",
        ),
    ),
    greedy=True,
    scores=(
        "Table 2's number is the clipped mean / 100 (a failure's -100 counts 0: "
        f"{_DRRN} beaker/beakerScorer.py getAverageScore); the raw mean is reported beside it"
    ),
)

# ------------------------------------------------------------------- TextWorldExpress
_TWX = "cognitiveailab/TextWorldExpress"
_TWX_IDS = tuple(env_id_of(game) for game in GAMES)


def _twx_settings(game: str) -> dict[str, Setting]:
    params = {
        name: Setting(option.default, f"{_TWX} GameGenerator.scala mk* defaults (README tables)")
        for name, option in GAMES[game][2].items()
    }
    return {
        **params,
        "max_episode_steps": Setting(
            101,
            f"{_TWX} textworld_express.py step: done when numMoves > envStepLimit=100, "
            "i.e. at the 101st action",
        ),
        "num_games": Setting(
            SPLIT_SIZE,
            f"whole folds: train seeds 0-999, test 20000-20999 ({_TWX} PythonInterface.scala)",
        ),
        "heldout_fold": Setting("test", f"the test fold ({_TWX} PythonInterface.scala)"),
    }


TWX_PAPER = Protocol(
    name="twx-paper",
    title="TextWorldExpress (Jansen & Cote 2022): package defaults, whole folds, 101 steps",
    env_ids=_TWX_IDS,
    env_settings={env_id_of(game): _twx_settings(game) for game in GAMES},
    choices={},
    interface={},
    eval_sets=(
        EvalSet(
            "test fold",
            {"split": "heldout"},
            100,
            f"seeds drawn from the whole test fold ({_TWX} PythonInterface.scala); the paper "
            "publishes no agent protocol: 100 for a tight interval",
        ),
    ),
    greedy=True,
    scores=(
        "normalised score and success; raw_scores=true keeps a failure's -1 (as -100), "
        "which TextWorldExpress reports but no published average uses"
    ),
)

PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (GLAM_BABYAI, SCIENCEWORLD_PAPER, TWX_PAPER)}


def get_protocol(name: str) -> Protocol:
    """The protocol called ``name``; an unknown name fails listing the valid ones."""
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; valid: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]
