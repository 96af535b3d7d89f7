"""The README's layout table names every top-level folder of the checkout and every package
of rtinfer, so a reader finds where a thing lives."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _table() -> set[str]:
    text = (ROOT / "README.md").read_text()
    return set(re.findall(r"^\| `([^`]+)` \|", text, re.M))


def _tracked_top_folders() -> set[str]:
    r = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    names = r.stdout.split() if r.returncode == 0 else [p.name + "/x" for p in ROOT.iterdir()]
    return {n.split("/")[0] for n in names if "/" in n}


def test_the_layout_table_lists_every_top_level_folder_and_rtinfer_package():
    rows = _table()
    folders = {f + "/" for f in _tracked_top_folders()}
    packages = {f"rtinfer/{p.parent.name}/" for p in (ROOT / "rtinfer").glob("*/__init__.py")}
    listed = {r.split("/")[0] + "/" for r in rows} | rows
    assert folders - listed == set()
    assert packages - rows == set()
