"""docs/benchmarks.md is a reference: a short index with the headline figures, one page per
benchmark in docs/benchmarks/ (what it measures, the command, the current figures with machine,
date, runs and load, how to read them), and the dated measurements in results/*.json. A page's
current figures are its results file's, and each is a value some recorded run gave."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "docs" / "benchmarks.md"
PAGES = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
ROW = re.compile(r"^\| (.+?) \| \*\*(.+?)\*\*.* \|$")


def _results(page: Path) -> dict:
    return json.loads((page.parent / "results" / f"{page.stem}.json").read_text())


def _current(text: str) -> list[tuple[str, str]]:
    part = text.split("## Current figures", 1)[1].split("**How to read them.**", 1)[0]
    return [m.groups() for line in part.splitlines() if (m := ROW.match(line))]


def test_there_are_pages_and_the_index_is_short():
    assert len(PAGES) >= 10
    assert len(INDEX.read_text().splitlines()) <= 120


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_a_page_has_its_parts_and_stays_under_400_lines(page):
    text = page.read_text()
    assert len(text.splitlines()) <= 400
    for part in (
        "**What it measures.**",
        "**Command.**",
        "## Current figures",
        "**How to read them.**",
        f"results/{page.stem}.json",
    ):
        assert part in text, f"{page.name} lacks {part}"
    res = _results(page)
    assert res["format"] == "rtinfer-benchmark-results" and res["page"].endswith(page.name)
    assert all(res[k] for k in ("command", "machine", "recorded", "runs", "load", "history"))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_a_pages_current_figures_are_recorded_results(page):
    res, shown = _results(page), _current(page.read_text())
    assert shown == [(c["figure"], c["value"]) for c in res["current"]]
    record = json.dumps(res["history"], ensure_ascii=False)
    for _, value in shown:
        assert value in record, f"{page.name}: {value} is in no recorded run of {page.stem}.json"


def test_the_index_links_every_page_with_a_headline_its_page_shows():
    text = INDEX.read_text()
    for page in PAGES:
        line = next(
            (
                ln
                for ln in text.splitlines()
                if ln.startswith("| [") and f"(benchmarks/{page.name})" in ln
            ),
            None,
        )
        assert line, f"the index has no headline row for {page.name}"
        value = re.search(r"\*\*(.+?)\*\*", line).group(1)
        assert value in [c["value"] for c in _results(page)["current"]], (page.name, value)
