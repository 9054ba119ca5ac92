"""docs/ is a results shelf, not a warehouse: small, with small files, each study's
report, summary and at most three figures, and no raw run outputs; every report says
how to regenerate what left the shelf."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
MB = 1024 * 1024


def files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def studies(root: Path) -> list[Path]:
    """The shallowest folders under ``root`` holding a page (README.md or report*.md):
    a folder of pages below a study is part of it."""
    found: list[Path] = []
    pages = {p.parent for p in root.rglob("*.md")}
    for folder in sorted(pages, key=lambda p: (len(p.parts), p)):
        if not any(s in folder.parents for s in found):
            found.append(folder)
    return found


def test_docs_stay_under_15_mb():
    total = sum(p.stat().st_size for p in files(DOCS))
    assert total < 15 * MB, f"docs/ holds {total / MB:.1f} MB"


def test_no_file_in_docs_is_over_2_mb():
    big = [f"{p.relative_to(ROOT)} ({p.stat().st_size / MB:.1f} MB)" for p in files(DOCS)
           if p.stat().st_size > 2 * MB]  # fmt: skip
    assert big == []


def test_no_raw_run_outputs_on_the_shelf():
    raw = [
        p.relative_to(ROOT).as_posix()
        for p in files(RESULTS)
        if p.suffix == ".jsonl"
        or (p.name.startswith("results") and p.suffix == ".json")  # kept as summary*.json
        or {"runs", "checkpoint"} & set(p.relative_to(RESULTS).parts)
        or p.name in ("config.json", "eval.json", "model.safetensors")
    ]
    assert raw == []


@pytest.mark.parametrize("study", studies(RESULTS), ids=lambda p: p.relative_to(RESULTS).as_posix())
def test_a_study_keeps_at_most_three_figures(study):
    figures = sorted(p.relative_to(study).as_posix() for p in study.rglob("*.png"))
    assert len(figures) <= 3, figures


@pytest.mark.parametrize(
    "report", sorted(RESULTS.rglob("report*.md")), ids=lambda p: p.relative_to(RESULTS).as_posix()
)
def test_a_report_names_the_command_and_commit_that_regenerate_it(report):
    head = report.read_text(encoding="utf-8")[:2000]
    assert re.search(r"`rlid compare --config \S+[^`]* --out \S+`", head), report
    assert re.search(r"`[0-9a-f]{7,40}`", head), report


def test_the_study_finder_counts_nested_pages_with_their_study(tmp_path):
    for page in ("a/README.md", "a/sub/report.md", "b/x/report.md", "b/y/README.md"):
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text("# t\n")
    found = [p.relative_to(tmp_path).as_posix() for p in studies(tmp_path)]
    assert found == ["a", "b/x", "b/y"]
