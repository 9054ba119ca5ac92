"""TextWorld challenges as rlid envs: compiled offline, cached, with logic afterstates.

* :mod:`rlid.envs.textworld.specs`      — the ``tw-*`` env ids and their options (registered on import).
* :mod:`rlid.envs.textworld.cache`      — compile games once, cache them by (challenge, options, seed).
* :mod:`rlid.envs.textworld.env`        — :class:`TextWorldEnv`, the gymnasium env.
* :mod:`rlid.envs.textworld.afterstate` — afterstates from the game's logic, not from stepping it.
* :mod:`rlid.envs.textworld.tracking`   — quest tracking fixes over TextWorld 1.7.
* :mod:`rlid.envs.textworld.verify`     — ``python -m envs.textworld.verify``: afterstates vs the game.

Importing this package does not import ``textworld``; the env modules do, lazily.
"""
