"""Coverage-guided fuzzing with atheris (libFuzzer) for a bounded time: ~8 s in CI,
5 minutes with RTINFER_LONG=1. Skips cleanly when atheris is not installed.

The target (tests/fuzz/atheris_wire.py) runs in a subprocess because libFuzzer ends the
process when it is done. It starts from a scratch copy of tests/fuzz/corpus/wire (the
repository corpus is curated by hand: add real crashers and edge cases there).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.faults.common import LONG, PY, ROOT

pytest.importorskip("atheris", reason="atheris is not installed (pip install atheris)")
SECONDS = 300 if LONG else 8


@pytest.mark.slow
def test_atheris_finds_no_crash_in_the_wire_decoders(tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(Path(__file__).parent / "corpus" / "wire", corpus)
    counts = tmp_path / "counts.json"
    r = subprocess.run(
        [
            PY,
            str(Path(__file__).parent / "atheris_wire.py"),
            f"-max_total_time={SECONDS}",
            "-print_final_stats=1",
            "-timeout=10",
            "-rss_limit_mb=1024",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SECONDS + 120,
        env={**os.environ, "RTINFER_FUZZ_COUNTS": str(counts)},
    )
    stats = dict(re.findall(r"stat::(\w+):\s+(\d+)", r.stderr))
    c = json.loads(counts.read_text()) if counts.exists() else {}
    crashes = sorted(p.name for p in tmp_path.glob("crash-*"))
    print("atheris:", json.dumps({"seconds": SECONDS, **stats, **c, "crashes": crashes}))
    assert r.returncode == 0 and not crashes, r.stderr[-3000:]
    assert int(stats["number_of_executed_units"]) > 1000
