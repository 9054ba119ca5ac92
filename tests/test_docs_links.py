"""The README, the changelog and the docs stay true to the code: every relative link
points at a file that exists, every `#anchor` at a heading of its target (GitHub's
heading slugs), and every `rlid` command in a shell block parses with today's command
line."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# Pages the docs link to that are being written elsewhere; a link to one resolves
# while it is missing. An entry must go when its page lands (a test says so).
PENDING: set[str] = set()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '_' and '-' dropped,
    spaces to '-' (``menu_cost.py`` keeps its underscore)."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache  # the README links to docs/suite.md dozens of times: parse each target once
def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def markdown_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    # run directories keep the summary.md each run wrote; their links are the run's own
    return [f for f in files if "runs" not in f.relative_to(ROOT).parts]


def broken_links(path: Path) -> list[str]:
    bad = []
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists() and not _pending(dest):
            bad.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target} (no heading #{anchor})")
    return bad


def _pending(dest: Path) -> bool:
    return dest.is_relative_to(ROOT) and dest.relative_to(ROOT).as_posix() in PENDING


def test_pending_pages_are_still_missing():
    landed = sorted(page for page in PENDING if (ROOT / page).exists())
    assert landed == [], f"these pages exist now: remove them from PENDING: {landed}"


def test_slug_follows_github():
    assert slug("Reproducibility: the float path, and the recipe change of rlid 0.3") == (
        "reproducibility-the-float-path-and-the-recipe-change-of-rlid-03"
    )
    assert slug("Decision plane (`rlid/`)") == "decision-plane-rlid"
    assert slug("PPO from a warm start: step size, KL, memory") == (
        "ppo-from-a-warm-start-step-size-kl-memory"
    )


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n[x](b.md) [y](#title) [z](#nothing)\n")
    assert broken_links(tmp_path / "a.md") == [
        "b.md (no such file)",
        "#nothing (no heading #nothing)",
    ]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    assert broken_links(path) == []


def shell_blocks(text: str) -> Iterator[str]:
    """The contents of the fenced blocks marked bash / sh / console or unmarked."""
    lang, lines = "", None
    for line in text.splitlines():
        if line.startswith("```"):
            if lines is None:
                lang, lines = line[3:].strip(), []
            else:
                if lang in ("", "bash", "sh", "console"):
                    yield "\n".join(lines)
                lines = None
        elif lines is not None:
            lines.append(line)


def rlid_commands(text: str) -> Iterator[str]:
    """The arguments of every `rlid ...` (or `.venv/bin/rlid`, `-m rlid`) command in the
    shell blocks, continuation lines joined; templates with `$` variables are skipped."""
    for block in shell_blocks(text):
        for line in re.sub(r"\s*\\\n\s*", " ", block).splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("#") or "$" in line:
                continue
            found = re.search(r"(?:^|[\s;&])(?:\.venv/bin/)?rlid ([^;&|`)]*)", line)
            if found:
                yield found.group(1).strip()


def test_commands_are_found_in_shell_blocks_only():
    text = (
        "rlid train --nope\n```bash\n.venv/bin/rlid train --steps 5 \\\n    --out r  # x\n"
        "for i in 1 2; do rlid compare --config c --out o & done\n```\n"
        "```toml\nrlid = 1\n```\n```\ntree/  the harness (rlid compare): x\n```\n"
    )
    assert list(rlid_commands(text)) == ["train --steps 5 --out r", "compare --config c --out o"]


def test_every_documented_rlid_command_parses():
    from rlid.cli.main import build_parser

    failed, seen = [], 0
    for path in markdown_files():
        for command in rlid_commands(path.read_text(encoding="utf-8")):
            seen += 1
            try:
                build_parser().parse_args(shlex.split(command))
            except SystemExit as stop:
                if stop.code:
                    failed.append(f"{path.relative_to(ROOT)}: rlid {command}")
    assert seen >= 50  # the README and docs/usage.md alone have dozens
    assert failed == []


def comparison_files() -> list[Path]:
    found = [*sorted((ROOT / "examples").glob("*.toml")), *sorted((ROOT / "docs").rglob("*.toml"))]
    return [p for p in found if "runs" not in p.relative_to(ROOT).parts]


@pytest.mark.parametrize("path", comparison_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_comparison_config_still_reads(path):
    # examples/ and the results pages' configs: what a reader is told to run
    from rlid.compare.parse import load_compare_config

    assert load_compare_config(path).runs()
