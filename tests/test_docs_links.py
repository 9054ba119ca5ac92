"""Every relative link in the README and the docs points at a file that exists,
and every `#anchor` at a heading of its target (GitHub's heading slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def markdown_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
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
        if not dest.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target} (no heading #{anchor})")
    return bad


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
