"""TextWorld env ids (registered on import; textworld itself is imported lazily).

Challenge ids map their options one-to-one onto ``tw-make <challenge>`` settings
(TextWorld 1.7); ``tw-custom`` onto ``tw-make custom``; ``tw-file`` plays a game the
user compiled. Generated games are cached on disk (:mod:`rlid.envs.textworld.cache`).

    >>> from rlid import envs
    >>> env = envs.make("tw-cooking", recipe=2, take=1, go=6, cook=True, game_seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from rlid.envs.registry import EnvSpec, Option, register

_COMMON_ARGS = ("split", "game_seed", "num_games", "max_episode_steps", "afterstates")


def _env_module() -> Any:
    """:mod:`rlid.envs.textworld.env`, which imports textworld (slow): on first use of a tw-* id,
    not with ``import envs``."""
    # lazy: `import envs` (every rlid command, `rlid --help`) must not import textworld
    from rlid.envs.textworld import env

    return env


def _generated(challenge: str, settings: dict[str, Any], options: dict[str, Any]):
    env = _env_module()
    return env.TextWorldEnv(
        env.GeneratedGames(challenge, settings), **{k: options[k] for k in _COMMON_ARGS}
    )


def _split_options(options: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k not in _COMMON_ARGS}


def make_simple(**options: Any):
    settings = _split_options(options)
    return _generated("tw-simple", settings, options)


def make_coin_collector(**options: Any):
    level = options["level"]
    # TextWorld 1.7 compiles to .z8 only, which caps a game at 100 rooms.
    rooms = ((level - 1) // 100 + 1) * ((level - 1) % 100 + 1)
    if rooms > 100:
        raise ValueError(
            f"tw-coin_collector: option level={level} is out of range: it needs {rooms} rooms "
            "and TextWorld 1.7 (.z8) supports at most 100; use level in [1, 150] or [201, 233]"
        )
    return _generated("tw-coin_collector", {"level": level}, options)


def make_treasure_hunter(**options: Any):
    return _generated("tw-treasure_hunter", {"level": options["level"]}, options)


def make_cooking(**options: Any):
    settings = _split_options(options)
    if settings["take"] > settings["recipe"]:
        raise ValueError(
            f"tw-cooking: option take={settings['take']} is out of range: it must be <= "
            f"recipe={settings['recipe']} (ingredients to find among those of the recipe)"
        )
    if settings["recipe_seed"] > 0 and settings["take"] == 0:
        raise ValueError(
            f"tw-cooking: option recipe_seed={settings['recipe_seed']} needs take >= 1 "
            "(TextWorld shuffles the recipe among ingredients to find)"
        )
    food_split = settings.pop("food_split")
    settings["split"] = None if food_split == "any" else food_split
    return _generated("tw-cooking", settings, options)


def make_custom(**options: Any):
    return _generated("custom", _split_options(options), options)


def make_file(**options: Any):
    path = options["path"]
    if path is None:
        raise ValueError("tw-file: option path is required: path=/path/to/game.z8")
    env = _env_module()
    return env.TextWorldEnv(env.GameFile(path), **{k: options[k] for k in _COMMON_ARGS})


register(
    EnvSpec(
        "tw-simple",
        make_simple,
        "TextWorld 'simple' challenge: find a food item in a house and put it on the stove",
        {
            "rewards": Option(
                str, "dense", "reward frequency", choices=("dense", "balanced", "sparse")
            ),
            "goal": Option(
                str,
                "detailed",
                "objective shown: step-by-step, one sentence, or none",
                choices=("detailed", "brief", "none"),
            ),
            "test": Option(bool, False, "draw the food item from TextWorld's test distribution"),
        },
    )
)
register(
    EnvSpec(
        "tw-coin_collector",
        make_coin_collector,
        "TextWorld 'coin collector': navigate a chain of rooms to find a coin",
        {
            "level": Option(
                int,
                1,
                "difficulty: 1-100 a chain of `level` rooms; 101-150 / 201-233 add 1 / 2 "
                "dead-end rooms per step (TextWorld 1.7 caps games at 100 rooms)",
                min=1,
                max=233,
            )
        },
    )
)
register(
    EnvSpec(
        "tw-treasure_hunter",
        make_treasure_hunter,
        "TextWorld 'treasure hunter': find a given object among distractors",
        {
            "level": Option(
                int,
                1,
                "difficulty: 1-10 easy (5 rooms), 11-20 medium (doors, containers), "
                "21-30 hard (locked, 20 rooms)",
                min=1,
                max=30,
            )
        },
    )
)
register(
    EnvSpec(
        "tw-cooking",
        make_cooking,
        "TextWorld cooking games (First TextWorld Problems): gather, prepare and eat a meal",
        {
            "recipe": Option(int, 1, "number of ingredients in the recipe", min=1, max=5),
            "take": Option(int, 0, "number of ingredients to find (<= recipe)", min=0, max=5),
            "go": Option(int, 1, "number of locations", choices=(1, 6, 9, 12)),
            "open": Option(bool, False, "containers and doors need to be opened"),
            "cook": Option(bool, False, "some ingredients need to be cooked"),
            "cut": Option(bool, False, "some ingredients need to be cut"),
            "drop": Option(bool, False, "the inventory has limited capacity"),
            "recipe_seed": Option(
                int, 0, "seed of a shuffled recipe (0 = the default recipe; needs take >= 1)", min=0
            ),
            "food_split": Option(
                str,
                "any",
                "TextWorld's food distribution (independent of split, which picks game seeds)",
                choices=("any", "train", "valid", "test"),
            ),
        },
    )
)
register(
    EnvSpec(
        "tw-custom",
        make_custom,
        "TextWorld custom game (tw-make custom): random map, objects and quest",
        {
            "world_size": Option(int, 5, "number of rooms", min=1, max=100),
            "nb_objects": Option(int, 10, "minimum number of objects", min=0, max=200),
            "quest_length": Option(int, 5, "number of actions the quest needs", min=1, max=50),
            "quest_breadth": Option(int, 1, "number of subquests (1 = linear)", min=1, max=10),
            "nb_parallel_quests": Option(int, 1, "number of independent quests", min=1, max=10),
            "include_adj": Option(bool, False, "adjectives in object names"),
            "blend_descriptions": Option(bool, False, "blend consecutive room descriptions"),
        },
    )
)
register(
    EnvSpec(
        "tw-file",
        make_file,
        "a game compiled by TextWorld (tw-make): its .z8 with the .json beside it "
        "(split, game_seed, num_games are unused)",
        {"path": Option(str, None, "path to the .z8 game file (required)")},
    )
)
