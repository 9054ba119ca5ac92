"""On-disk cache of TextWorld games compiled by TextWorld's own generator.

A game is identified by its *key*: the TextWorld challenge (``"tw-simple"``,
``"tw-coin_collector"``, ``"tw-treasure_hunter"``, ``"tw-cooking"`` or ``"custom"``),
its generator settings and its seed. Each key owns one directory under
``rlid.envs.paths.cache_root() / "games"`` (``$RLID_CACHE_DIR`` overrides the root)::

    games/tw-simple-7-3f2a9c01d4/
        game.z8      the compiled Z-machine story (played through Jericho)
        game.json    TextWorld's game logic (facts, rules, quests)
        key.json     the key and a manifest (size + sha256 of both files), written last

Concurrency: an entry is generated in a private temporary directory and moved into
place with an atomic ``os.rename``; a ``filelock`` lock per entry keeps two
processes from generating the same game at once. An entry that is incomplete or
corrupt (missing ``key.json``, size/hash mismatch, truncated story, unparsable
logic) is detected and regenerated.

Generation runs in-process through ``textworld.challenges`` / ``textworld.generator``
(about 1-3 s per game, no subprocess start-up); ``textworld`` is imported lazily.

    >>> from rlid.envs.textworld import cache as tw_cache
    >>> path = tw_cache.ensure_game("tw-treasure_hunter", {"level": 1}, seed=0)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any

import textworld
import textworld.challenges
from filelock import FileLock
from textworld.generator import QuestGenerationError, compile_game, make_game

from rlid.envs.paths import cache_root

# Bump when the generation procedure or the entry layout changes: old entries are
# then simply not found (a new key hash) and regenerated.
CACHE_FORMAT = 1
CHALLENGES = ("tw-simple", "tw-coin_collector", "tw-treasure_hunter", "tw-cooking", "custom")
GAME_FILES = ("game.z8", "game.json")
LOCK_TIMEOUT_S = 900.0


def games_dir() -> Path:
    """The directory holding all cached games (created on demand)."""
    path = cache_root() / "games"
    path.mkdir(parents=True, exist_ok=True)
    return path


def game_key(challenge: str, settings: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The canonical key of a generated game (json-serialisable, order-independent)."""
    if challenge not in CHALLENGES:
        raise ValueError(
            f"unknown TextWorld challenge {challenge!r}; valid: {', '.join(CHALLENGES)}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"game seed must be an int >= 0, got {seed!r}")
    return {
        "format": CACHE_FORMAT,
        "textworld": _textworld_version(),
        "challenge": challenge,
        "settings": {k: settings[k] for k in sorted(settings)},
        "seed": seed,
    }


def entry_dir(key: Mapping[str, Any]) -> Path:
    """Directory of the cache entry for ``key`` (it may not exist yet)."""
    canonical = json.dumps(key, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:10]
    return games_dir() / f"{key['challenge']}-{key['seed']}-{digest}"


def ensure_game(challenge: str, settings: Mapping[str, Any], seed: int) -> Path:
    """Path of the compiled ``game.z8`` for this key, generating it if needed."""
    key = game_key(challenge, settings, seed)
    final = entry_dir(key)
    if validate_entry(final, key) is None:
        return final / "game.z8"
    with FileLock(str(final) + ".lock", timeout=LOCK_TIMEOUT_S):
        problem = validate_entry(final, key)  # another process may have made it meanwhile
        if problem is None:
            return final / "game.z8"
        if final.exists():
            discard_entry(final)
        _generate_entry(key, final)
    problem = validate_entry(final, key)
    if problem is not None:  # pragma: no cover - generator produced something unusable
        raise RuntimeError(f"generated game {final} is not valid: {problem}")
    return final / "game.z8"


def discard_entry(entry: Path) -> None:
    """Remove a cache entry (first renamed away, so readers never see half of it)."""
    trash = entry.with_name(f".trash-{entry.name}-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        os.rename(entry, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def validate_entry(entry: Path, key: Mapping[str, Any] | None = None) -> str | None:
    """``None`` if ``entry`` is a complete, intact cache entry, else what is wrong."""
    key_file = entry / "key.json"
    if not key_file.is_file():
        return "missing key.json (incomplete entry)"
    try:
        meta = json.loads(key_file.read_text())
        manifest = meta["manifest"]
    except (OSError, ValueError, KeyError, TypeError):
        return "unreadable key.json"
    if key is not None and meta.get("key") != json.loads(json.dumps(key)):
        return "key.json does not match the requested key"
    for name in GAME_FILES:
        path = entry / name
        if not path.is_file():
            return f"missing {name}"
        size, digest = manifest.get(name, (None, None))
        if path.stat().st_size != size or _sha256(path) != digest:
            return f"{name} does not match its manifest (truncated or modified)"
    return check_story_file(entry / "game.z8") or check_logic_file(entry / "game.json")


def check_story_file(path: Path) -> str | None:
    """``None`` if ``path`` looks like a whole Z-machine story, else what is wrong."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"cannot read {path}: {exc}"
    if len(data) < 64 or not 1 <= data[0] <= 8:
        return "not a Z-machine story file (bad header)"
    scale = 2 if data[0] <= 3 else 4 if data[0] <= 5 else 8
    declared = int.from_bytes(data[0x1A:0x1C], "big") * scale
    if declared > len(data):
        return f"truncated story file ({len(data)} bytes, header declares {declared})"
    return None


def check_logic_file(path: Path) -> str | None:
    """``None`` if ``path`` is a TextWorld game logic json, else what is wrong."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"unparsable game logic json ({exc.__class__.__name__})"
    if not isinstance(data, dict) or not {"world", "quests", "infos"} <= set(data):
        return "json is not a TextWorld game (expected keys world, quests, infos)"
    return None


def _generate_entry(key: Mapping[str, Any], final: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        generate_game(key["challenge"], key["settings"], key["seed"], tmp / "game.z8")
        (tmp / "game.ni").unlink(missing_ok=True)  # Inform 7 source, not needed to play
        manifest = {name: [(tmp / name).stat().st_size, _sha256(tmp / name)] for name in GAME_FILES}
        # key.json is written last: its presence marks a complete entry.
        (tmp / "key.json").write_text(json.dumps({"key": key, "manifest": manifest}, indent=1))
        tmp.chmod(0o755)  # mkdtemp makes it private; a shared cache must stay readable
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def generate_game(challenge: str, settings: Mapping[str, Any], seed: int, path: Path) -> None:
    """Generate and compile one game to ``path`` (``.z8``, with ``.json`` beside it)."""

    options = textworld.GameOptions()
    options.seeds = seed
    options.path = str(path)
    options.file_ext = ".z8"
    options.force_recompile = True
    # The challenges' set_walkthrough() plays the game once through Jericho.
    with quiet_jericho():
        try:
            if challenge == "custom":
                _apply_custom_settings(options, settings)
                game = make_game(options)
            else:
                _, make, _ = textworld.challenges.CHALLENGES[challenge]
                game = make(settings=dict(settings), options=options)
        except QuestGenerationError as exc:
            raise ValueError(
                f"TextWorld cannot generate a {challenge} quest with settings {dict(settings)} "
                f"and seed {seed}; relax quest_length / world_size / nb_objects"
            ) from exc
        compile_game(game, options)


def _apply_custom_settings(options: Any, settings: Mapping[str, Any]) -> None:
    """Map ``tw-custom`` settings onto ``GameOptions`` the way ``tw-make custom`` does."""
    options.nb_rooms = settings["world_size"]
    options.nb_objects = settings["nb_objects"]
    options.nb_parallel_quests = settings["nb_parallel_quests"]
    options.quest_length = settings["quest_length"]
    options.quest_breadth = settings["quest_breadth"]
    options.grammar.include_adj = settings["include_adj"]
    options.grammar.blend_descriptions = settings["blend_descriptions"]
    options.grammar.allowed_variables_numbering = True  # distinct names for many objects


@contextlib.contextmanager
def quiet_jericho() -> Iterator[None]:
    """Silence Jericho's "game not fully supported" warning: TextWorld games never are
    in its list, and its own score/move detection is not used."""
    # optional dependency: jericho reads Z-machine files (tw-file games)
    import jericho

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", jericho.UnsupportedGameWarning)
        yield


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _textworld_version() -> str:

    return version("textworld")
