"""Every rlid env id is also a Gymnasium id: ``gymnasium.make("rlid/KeyDoor-v0", **options)``.

    >>> import gymnasium
    >>> from rlid import envs
    >>> env = gymnasium.make("rlid/KeyDoor-v0", size=3, split="heldout")
    >>> env.spec.id
    'rlid/KeyDoor-v0'
    >>> vec = gymnasium.make_vec("rlid/KeyDoor-v0", num_envs=2, vectorization_mode="sync")

``gymnasium.make("rlid.envs:rlid/KeyDoor-v0")`` imports this package first. Options are
those of ``rlid envs ENV_ID`` and are validated the same way; ``rlid.envs.make(env_id,
**options)`` stays the short form. Gymnasium itself takes ``max_episode_steps`` (it
then adds its ``TimeLimit`` wrapper on top of the env's own limit of the same name,
default 50) and ``render_mode`` (``None`` or ``"ansi"``).

The version is bumped whenever an env's dynamics or observations change in a way
that makes old results incomparable.
"""

from __future__ import annotations

import gymnasium

NAMESPACE = "rlid"

# rlid env id -> Gymnasium name (and version); ids not listed get a derived name.
GYM_NAMES: dict[str, tuple[str, int]] = {
    "keydoor": ("KeyDoor", 0),
    "crafting": ("Crafting", 0),
    "tw-simple": ("TextWorld-Simple", 0),
    "tw-coin_collector": ("TextWorld-CoinCollector", 0),
    "tw-treasure_hunter": ("TextWorld-TreasureHunter", 0),
    "tw-cooking": ("TextWorld-Cooking", 0),
    "tw-custom": ("TextWorld-Custom", 0),
    "tw-file": ("TextWorld-File", 0),
    "babyai-text": ("BabyAIText", 0),
    "scienceworld": ("ScienceWorld", 0),
    "twx-cookingworld": ("TextWorldExpress-CookingWorld", 0),
    "twx-twc": ("TextWorldExpress-TWC", 0),
    "twx-coin": ("TextWorldExpress-Coin", 0),
    "twx-mapreader": ("TextWorldExpress-MapReader", 0),
    "twx-arithmetic": ("TextWorldExpress-Arithmetic", 0),
    "twx-sorting": ("TextWorldExpress-Sorting", 0),
    "twx-simonsays": ("TextWorldExpress-SimonSays", 0),
    "twx-peckingorder": ("TextWorldExpress-PeckingOrder", 0),
}


def gym_id(env_id: str) -> str:
    """``"keydoor"`` -> ``"rlid/KeyDoor-v0"``; ``"tw-foo_bar"`` -> ``"rlid/TextWorld-FooBar-v0"``."""
    if env_id in GYM_NAMES:
        name, version = GYM_NAMES[env_id]
    else:
        prefix = "TextWorld-" if env_id.startswith("tw-") else ""
        words = env_id.removeprefix("tw-").replace("-", "_").split("_")
        name, version = prefix + "".join(w[:1].upper() + w[1:] for w in words), 0
    return f"{NAMESPACE}/{name}-v{version}"


def register_gym(env_id: str, doc: str = "") -> str:
    """Register ``env_id`` with Gymnasium (idempotent); return its Gymnasium id."""
    gid = gym_id(env_id)
    if gid not in gymnasium.registry:
        gymnasium.register(
            id=gid,
            entry_point="rlid.envs.registry:make_gym",
            kwargs={"env_id": env_id},
            disable_env_checker=False,
        )
    return gid
