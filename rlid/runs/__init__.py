"""Run directories, storage only: atomic files, the run log, checkpoints, locks, summaries.

Nothing here imports the training core (the layering contract in ``pyproject.toml``
checks it); evaluating and exporting a run live in :mod:`rlid.agents.agent`.

* :mod:`rlid.runs.files`    — atomic writes (temp file, fsync, ``os.replace``), appends,
  directories published by renames (:func:`~rlid.runs.files.staged_dir`).
* :mod:`rlid.runs.dir`      — the directory layout, JSON, metrics and checkpoint files.
* :mod:`rlid.runs.state`    — trainer state as safetensors + JSON (never a pickle).
* :mod:`rlid.runs.lock`     — one writer per directory (``flock``, holder recorded).
* :mod:`rlid.runs.pin`      — the starting model's path and weights hash.
* :mod:`rlid.runs.log`      — :class:`RunLog`: what a trainer reads and writes.
* :mod:`rlid.runs.summary`  — ``summary.md`` and ``curves.png``.
* :mod:`rlid.runs.trackers` — TensorBoard / W&B / MLflow, fed with every metrics row.
* :mod:`rlid.runs.stop`     — SIGTERM / Ctrl-C: checkpoint the iteration, then stop.
"""
