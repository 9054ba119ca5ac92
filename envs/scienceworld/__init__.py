"""ScienceWorld (Wang et al. 2022) as rlid envs: 30 science tasks in a Java simulator.

* :mod:`rlid.envs.scienceworld.specs`  — the ``scienceworld`` env id and its options (registered on
  import; needs neither Java nor the ``scienceworld`` package until an env resets).
* :mod:`rlid.envs.scienceworld.env`    — :class:`ScienceWorldEnv`, the gymnasium env.
* :mod:`rlid.envs.scienceworld.parser` — what the simulator's own parser reads in a command.
* :mod:`rlid.envs.scienceworld.gold`   — the benchmark's gold path, written in legal actions, cached.
* :mod:`rlid.envs.scienceworld.jvm_state` — each simulator's own id counter and random generator
  in a JVM shared by several.

The simulator runs in a JVM owned by the process (:mod:`rlid.envs.jvm`).
"""
