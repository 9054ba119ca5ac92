"""Warm start: language-model pretraining of the tiny model on random-play transcripts.

docs/design.md §9: both planes should start from a model that can *read a menu and
write a command* but knows no task. So the transcripts come from a uniformly
random policy on training games: each step gives two sequences,

* the decision prompt (observation, memory, menu with afterstates) followed by
  the chosen label and the chosen command text (``" B\nCommand: go east\n"``);
* the token-plane prompt followed by the chosen command (``" go east\n"``);

and the model is trained as a plain causal LM on them. Because the choices are
uniformly random, the only thing to learn about *which* row to pick is "any
legal label": the warm model has no preference that solves a game.

``walkthrough_episodes`` (default 0, off) adds, per env, episodes that follow the
training game's own solution (``info["walkthrough"]``), rendered the same way: the
model then also sees, on *training* games only (the held-out seed range is never
played), which row the objective asks for. That is a behaviour-cloning warm start
(the usual SFT-before-RL recipe), not the default: a model warm-started so knows
something of the tasks before RL, and results say which warm start they used.

``num_games`` (default 0: each env's own pool, 16 training games) sets how many
training games the corpus draws from. What the walkthrough corpus needs most is
*episodes* (each one a fresh shuffle of the menu's labels), not games: on crafting,
1,000 walkthrough episodes over the 16 games gave 0.66 held-out success before RL,
over 1,000 games 0.31, and 96 episodes over the 16 games 0.06 (README "Suite").

A long build is resumable: every ``checkpoint_every`` steps the model, optimizer,
schedule and sampling state go to ``.<out>.pretraining/`` beside the output
(safetensors + JSON, one writer at a time), and the corpus once, at the start; the
same call with the same settings resumes there, on that corpus without playing it
again, and ends with the same weights as an uninterrupted build.

``rlid pretrain`` builds the random-play start of ``--model tiny-play`` into its cache
(:func:`rlid.lm.starts.play_cache_dir`) unless ``--out`` names another directory.
"""

from __future__ import annotations

from rlid.lm.pretrain.config import (
    CHECKPOINT_EVERY,
    PretrainConfig,
    parse_env_entry,
    split_env_entries,
)
from rlid.lm.pretrain.corpus import (
    Transcript,
    random_play_transcripts,
    training_sequences,
    transcripts,
)

# The build (rlid.lm.pretrain.build: pretrain, save_unfinished, ...) and the LM step
# (rlid.lm.pretrain.lm) import torch; this package's own names do not, so the CLI's
# `rlid pretrain --help` stays quick.
__all__ = [
    "CHECKPOINT_EVERY",
    "PretrainConfig",
    "Transcript",
    "parse_env_entry",
    "random_play_transcripts",
    "split_env_entries",
    "training_sequences",
    "transcripts",
]
