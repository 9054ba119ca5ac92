"""TextWorld challenges as rlid envs: compiled offline, cached, with logic afterstates.

* :mod:`envs.textworld.specs`      — the ``tw-*`` env ids and their options (registered on import).
* :mod:`envs.textworld.cache`      — compile games once, cache them by (challenge, options, seed).
* :mod:`envs.textworld.env`        — :class:`TextWorldEnv`, the gymnasium env.
* :mod:`envs.textworld.afterstate` — afterstates from the game's logic, not from stepping it.
* :mod:`envs.textworld.tracking`   — quest tracking fixes over TextWorld 1.7.
* :mod:`envs.textworld.verify`     — ``python -m envs.textworld.verify``: afterstates vs the game.

Importing this package does not import ``textworld``; the env modules do, lazily.
"""
