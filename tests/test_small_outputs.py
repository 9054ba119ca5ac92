"""Small outputs a new user reads first: env options echoed with their types, one-seed
intervals, the comparison's ceiling column, and where the README's examples write."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from rlid.config.run import config_from_values
from rlid.envs.registry import make, parse_option_strings, typed_options

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------ env options
def _keydoor_config():
    options = parse_option_strings(["size=3", "max_episode_steps=30", "afterstates=no"])
    return config_from_values({"env": "keydoor", "env_options": options})


def test_env_options_given_as_text_are_recorded_with_their_types():
    config = _keydoor_config()
    assert config.env_options == {"size": 3, "max_episode_steps": 30, "afterstates": False}
    assert [type(v) for v in config.env_options.values()] == [int, int, bool]
    assert config.to_dict()["env_options"]["max_episode_steps"] == 30


def test_what_does_not_convert_is_left_for_validation_to_name():
    assert typed_options("keydoor", {"size": "big", "bogus": "1"}) == {"size": "big", "bogus": "1"}
    assert typed_options("no-such-env", {"size": "3"}) == {"size": "3"}
    with pytest.raises(ValueError, match="size='big' is not valid"):
        make("keydoor", size="big")  # the one-line message, as before


def test_model_card_and_summary_echo_typed_options(tmp_path):
    from rlid.agents.card import model_card
    from rlid.runs.summary import write_summary

    config = _keydoor_config()
    interface = {"labels": ["A", "B"], "lora": None}
    card = model_card(config, {"model_origin": "shipped"}, [], interface)
    assert "max_episode_steps=30" in card and "'30'" not in card
    summary = write_summary(tmp_path, config, []).read_text()
    assert "max_episode_steps=30" in summary and "'30'" not in summary


# ---------------------------------------------------------------- one-seed intervals
def test_one_seed_intervals_read_n_a():
    from rlid.compare.aggregates import arm_aggregates
    from rlid.compare.stats import bootstrap_mean
    from rlid.compare.text import _aggregates_section, _iv

    assert _iv(bootstrap_mean([1.0]).to_dict()) == "1.00 [n/a (1 seed)]"
    assert _iv(bootstrap_mean([1.0]).to_dict(), single=None) == "1.00"
    assert _iv(bootstrap_mean([0.5, 1.0]).to_dict()).startswith("0.75 [0.50, ")
    one_seed = {"success": arm_aggregates({"a": [[1.0]], "b": [[0.0]]})}
    text = "\n".join(_aggregates_section(one_seed, {"seeds": [0], "envs": [{}]}))
    assert "[1.00, 1.00]" not in text and "[0.00, 0.00]" not in text
    assert "1.00 [n/a (1 seed)]" in text  # P(a > b), mean and IQM
    two_seeds = {"success": arm_aggregates({"a": [[1.0], [0.5]], "b": [[0.0], [0.5]]})}
    assert "n/a" not in "\n".join(_aggregates_section(two_seeds, {"seeds": [0, 1], "envs": [{}]}))


# ---------------------------------------------------------- the comparison's ceiling
def _suite_results(references):
    def iv(mean, n=3):
        return {"mean": mean, "low": mean, "high": mean, "n": n}

    arm = {"heldout": {"before": {"success": iv(0.1)}, "after": {"success": iv(0.4)}}}
    refs = {name: {"heldout": {"success": iv(v, 1 if name == "walkthrough" else 3)}}
            for name, v in (("random", 0.2), ("walkthrough", 1.0)) if name in references}  # fmt: skip
    return {"envs": {"kd": {"arms": {"ppo": arm}, "references": refs}}}


def test_the_ceiling_column_is_shown_only_where_measured():
    from rlid.compare.text import _suite_section

    floor_only = "\n".join(_suite_section(_suite_results(["random"])))
    assert "ceiling" not in floor_only.splitlines()[0] and "| n/a |" not in floor_only
    assert "no ceiling was asked" in floor_only
    both = "\n".join(_suite_section(_suite_results(["random", "walkthrough"])))
    assert "## Held-out success: floor / before / after / ceiling" in both
    assert "| kd | ppo | 0.20 [0.20, 0.20] | 0.10 [0.10, 0.10] | 0.40 [0.40, 0.40] | 1.00 |" in both


def test_compare_small_measures_the_ceiling_the_readme_promises():
    from rlid.compare.parse import load_compare_config

    compare = load_compare_config(ROOT / "examples" / "compare_small.toml")
    assert "walkthrough" in compare.references and "random" in compare.references


# ------------------------------------------------------- where the examples write
def _doc_commands(text: str, command: str) -> list[list[str]]:
    """The argument lists of every ``rlid COMMAND ...`` in a page's code blocks."""
    blocks = re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, flags=re.S)
    found = []
    for line in "\n".join(blocks).splitlines():
        match = re.search(rf"(?:^|/|\s)rlid {command} (.*)", line)
        if match:
            found.append(match.group(1).split("#")[0].rstrip("\\ ").split())
    return found


def _ignored(path: str) -> bool:
    done = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", path])
    return done.returncode == 0


@pytest.mark.parametrize("page", ["README.md", "docs/usage.md"])
def test_the_docs_examples_write_only_where_git_ignores(page):
    text = (ROOT / page).read_text()
    outputs = [args[-1] for args in _doc_commands(text, "export") if len(args) >= 2]
    outputs += [a[a.index("--out") + 1] for a in _doc_commands(text, "train") if "--out" in a]
    outputs += [a[a.index("--out") + 1] for a in _doc_commands(text, "compare") if "--out" in a]
    outputs = [o for o in outputs if not o.startswith(("OUT", "DIR", "PATH", "/", "<", "$"))]
    assert outputs, page
    for out in outputs:
        assert _ignored(out + "/x"), f"{page}: `{out}` is written into the working tree"
    for path in re.findall(r'load_(?:agent|policy)\("([^"]+)"\)', text):
        assert _ignored(path + "/x"), f"{page}: {path}"


# ---------------------------------------------------------------- pages that age
# dotted names the pages give that are not modules of this version, and why
NOT_MODULES = {"rlid.planes": "the entry-point group of third-party planes",
               "rlid.runs.convert": "rlid 0.3's converter, named as such"}  # fmt: skip
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


def test_concepts_lists_every_gymnasium_id():
    from rlid.envs import gym_ids

    text = (ROOT / "docs" / "concepts.md").read_text()
    missing = [gid for gid in gym_ids() if f"`{gid}`" not in text]
    assert missing == []


def test_the_suites_size_is_the_examples():
    import tomllib

    settings = tomllib.loads((ROOT / "examples" / "suite.toml").read_text())["envs"]
    for page in ("README.md", "docs/usage.md"):
        assert f"suite of {len(settings)} settings" in (ROOT / page).read_text(), page
    assert "twelve-setting" not in (ROOT / "README.md").read_text()


def _resolves(name: str) -> bool:
    import importlib

    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.parametrize("page", PAGES)
def test_pages_name_modules_and_files_that_exist(page):
    """After a move (rlid.trainer -> rlid.core.train, ...) no page names the old place."""
    text = (ROOT / page).read_text()
    wrong = [line for line in re.findall(r"^\s*(from rlid[\w.]* import [\w, ]+)", text, re.M)
             if not _resolves(line.split()[1] + "." + line.split("import")[1].split(",")[0].strip())]  # fmt: skip
    wrong += [n for n in set(re.findall(r"`(rlid(?:\.\w+)+)", text))
              if n not in NOT_MODULES and "__main__" not in n and not _resolves(n)]  # fmt: skip
    wrong += [p for p in set(re.findall(r"`((?:rlid|envs|menus|baselines)/[\w/]+\.py)`", text))
              if not (ROOT / p).exists()]  # fmt: skip
    wrong += [line for line in re.findall(r"^\s*(import (?:envs|menus|baselines)\b.*)", text, re.M)]
    assert wrong == [], page
