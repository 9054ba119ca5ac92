"""The crafting-only warm start with each menu row written label-last.

``take fish -> you will hold the fish (+1 point) = C`` instead of
``C) take fish -> you will hold the fish (+1 point)``: the label then follows the
afterstate it belongs to. A counter-example (README "Suite"): it changes nothing.

Usage (from the repository root):
    label_last.py pretrain OUT     # the crafting-only corpus, 600 steps, rows label-last
    label_last.py before OUT SPLIT # the trainer's "before" evaluation, rows label-last
"""

import runpy
import sys

import rlid.menus.menu as menu_mod


def _render(self, afterstate=True):
    line = self.action
    if afterstate and self.afterstate is not None:
        line += menu_mod.AFTERSTATE_ARROW + self.afterstate
    return f"{line} = {self.label}"


menu_mod.MenuRow.render = _render

if sys.argv[1] == "pretrain":
    from rlid.lm.pretrain import PretrainConfig, pretrain

    config = PretrainConfig(
        envs=("crafting",), walkthrough_episodes=96, random_answers=False,
        answer_weight=20.0, steps=600, max_tokens=640, threads=1,
    )  # fmt: skip
    print(pretrain(config, out=sys.argv[2], progress=False))
else:
    here = "docs/results/suite_0.2_guided/answer_weight/before.py"
    sys.argv = [here, sys.argv[2], "crafting-small", sys.argv[3]]
    runpy.run_path(here, run_name="__main__")
