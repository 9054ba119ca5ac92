"""TextWorldExpress (Jansen & Côté 2022) as rlid envs: eight fast text games in a JVM.

* :mod:`rlid.envs.twx.specs` — the ``twx-*`` env ids, one per game, with the game's own
  parameters as options (registered on import; no Java needed until an env resets).
* :mod:`rlid.envs.twx.env`   — :class:`TextWorldExpressEnv`, the gymnasium env.

The games run in a JVM owned by the process (:mod:`rlid.envs.jvm`).
"""
