"""The ``twx-*`` env ids: TextWorldExpress 1.1.0's eight games.

Options are the game's own parameters, named as the package names them
(``numLocations``, ``includeDoors``, ...), with its ranges and defaults.

    >>> from rlid import envs
    >>> env = envs.make("twx-coin", numLocations=4, includeDoors=False)  # doctest: +SKIP

The games come in folds of 1,000 seeds each (train 0-999, dev 10000-10999, test
20000-20999); rlid's ``train`` split plays the train fold, ``heldout`` the test fold (or
the dev fold with ``heldout_fold="dev"``). ``game_seed`` is an index into the fold's seeds,
``num_games`` the size of the pool resets draw from.
"""

from __future__ import annotations

from typing import Any

from rlid.envs.registry import EnvSpec, Option, register

# No state copy, so no outcome can be predicted: the rows say nothing and menus show none.
NO_AFTERSTATES = Option(
    bool, True, "afterstate rows that say nothing ('': no state copy; menus show none); false: None"
)


def _locations(high: int, default: int) -> Option:
    return Option(int, default, "number of locations", min=1, max=high)


def _doors(default: bool) -> Option:
    return Option(bool, default, "rooms have doors that must be opened")


def _inventory(default: bool) -> Option:
    return Option(bool, default, "the inventory has a limited size")


# game name -> (gym name, description, parameters as the package names them)
GAMES: dict[str, tuple[str, str, dict[str, Option]]] = {
    "cookingworld": (
        "CookingWorld",
        "find the recipe's ingredients, prepare them and eat the meal",
        {
            "numLocations": _locations(11, 11),
            "numIngredients": Option(int, 3, "ingredients in the recipe", min=1, max=5),
            "numDistractorItems": Option(int, 10, "ingredients not in the recipe", min=0, max=10),
            "includeDoors": _doors(True),
            "limitInventorySize": _inventory(True),
        },
    ),
    "twc": (
        "TWC",
        "TextWorld Commonsense: put objects away where they belong",
        {
            "numLocations": _locations(3, 3),
            "numItemsToPutAway": Option(int, 4, "objects to put away", min=1, max=10),
            "includeDoors": _doors(False),
            "limitInventorySize": _inventory(False),
        },
    ),
    "coin": (
        "Coin",
        "Coin Collector: find the coin and take it",
        {
            "numLocations": _locations(11, 11),
            "numDistractorItems": Option(int, 0, "objects that are not the coin", min=0, max=10),
            "includeDoors": _doors(True),
            "limitInventorySize": _inventory(True),
        },
    ),
    "mapreader": (
        "MapReader",
        "Map Reader: fetch the coin with the help of a map and put it in the box",
        {
            "numLocations": _locations(50, 15),
            "maxDistanceApart": Option(
                int, 4, "rooms between the start and the coin (at most)", min=1, max=8
            ),
            "maxDistractorItemsPerLocation": Option(
                int, 3, "distractor objects per room (at most)", min=0, max=3
            ),
            "includeDoors": _doors(False),
            "limitInventorySize": _inventory(False),
        },
    ),
    "arithmetic": (
        "Arithmetic",
        "solve a math problem, then put the object with that quantity in the box",
        {},
    ),
    "sorting": (
        "Sorting",
        "put objects in the box in increasing order of quantity",
        {},
    ),
    "simonsays": (
        "SimonSays",
        "do exactly what Simon says",
        {
            "gameLength": Option(int, 5, "actions to repeat in order", min=1, max=1000),
            "numDistractors": Option(int, 3, "irrelevant actions offered", min=0, max=5),
            "memorization": Option(
                bool, False, "the whole sequence is shown at the first step, and only then"
            ),
            "verbose": Option(
                bool, False, "feedback after each right action (with memorization only)"
            ),
        },
    ),
    "peckingorder": (
        "PeckingOrder",
        "read the instructions book and follow it, repeatedly",
        {},
    ),
}

_COMMON_ARGS = (
    "split",
    "game_seed",
    "num_games",
    "max_episode_steps",
    "afterstates",
    "heldout_fold",
    "raw_scores",
)


def env_id_of(game: str) -> str:
    return f"twx-{game}"


def _factory(game: str):
    def make(**options: Any):
        try:  # lazy: `import envs` must not need the jvm extra, nor load py4j
            from rlid.envs.twx.env import TextWorldExpressEnv
        except ImportError as err:
            raise ImportError(
                f"{env_id_of(game)} needs the jvm extra: pip install 'rlid[jvm]' ({err})"
            ) from None

        params = {k: v for k, v in options.items() if k not in _COMMON_ARGS}
        return TextWorldExpressEnv(
            game, params, env_id=env_id_of(game), **{k: options[k] for k in _COMMON_ARGS}
        )

    make.__name__ = f"make_{game}"
    return make


for _game, (_gym_name, _doc, _params) in GAMES.items():
    register(
        EnvSpec(
            env_id_of(_game),
            _factory(_game),
            f"TextWorldExpress {_game}: {_doc} (needs Java)",
            {
                **_params,
                "heldout_fold": Option(
                    str,
                    "test",
                    "the fold the heldout split plays: 'test' or 'dev'",
                    ("test", "dev"),
                ),
                "max_episode_steps": Option(
                    int, 100, "steps before the episode is truncated (the package's default)", min=1
                ),
                "afterstates": NO_AFTERSTATES,
                "raw_scores": Option(
                    bool,
                    False,
                    "score as the package reports it, -100 (its -1) on a failed game; false: "
                    "clipped at 0, the failure in info['lost']",
                ),
            },
        )
    )
