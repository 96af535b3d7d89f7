"""rtinfer bench camera: a quick run carries every frame of every path between two processes,
byte for byte (JPEG: the right shape, close to the original), with counts, not speed."""

import json
import subprocess
import sys

import numpy as np
import pytest

from rtinfer.bench import camera
from rtinfer.bench.camera_paths import LOSSLESS, PATHS, POOL, frame_pool


def test_frame_pool_is_deterministic_and_its_frames_differ():
    a, b = frame_pool((224, 224, 3)), frame_pool((224, 224, 3))
    assert len(a) == POOL and all(f.shape == (224, 224, 3) and f.dtype == np.uint8 for f in a)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert len({f.tobytes() for f in a}) == POOL  # a frame sent as another would be caught


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_quick_run_delivers_every_frame_of_every_path_intact():
    out = subprocess.run(
        [sys.executable, "-m", "rtinfer.bench.camera", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=230,
        check=True,
    )
    r = json.loads(out.stdout)
    assert r["skipped"] == {} and r["paths"] == list(PATHS)  # the bench extra is installed
    assert set(r["shapes"]) == {"96x96x3", "224x224x3", "640x480x3"}
    for name, row in r["shapes"].items():
        h, w = (int(v) for v in name.split("x")[1::-1])
        assert row["bytes"] == h * w * 3
        assert row["memcpy"]["count"] == 20 and row["memcpy"]["p50_us"] > 0
        assert row["load_1min_before"] >= 0 and row["load_1min_after"] >= 0
        for path in PATHS:
            p = row[path]
            assert (p["sent"], p["received"], p["count"]) == (20, 20, 20), (name, path)
            assert p["bad_shape"] == 0 and p["out_of_order"] == 0, (name, path)
            assert p["p50_us"] > 0 and p["p99_us"] >= p["p50_us"]
            if path in LOSSLESS:
                assert p["inexact"] == 0, (name, path)
        jpeg = row["jpeg_tcp"]
        assert "inexact" not in jpeg and 0 < jpeg["mean_abs_err"] < 8  # lossy, but the scene
        assert jpeg["encode_p50_us"] > 0 and jpeg["decode_p50_us"] > 0
    t = r["target"]
    assert t["shape"] == "224x224x3" and t["best"] in camera.SAME_HOST
    assert t["met"] == (t["best_p50_us"] <= t["same_host_p50_us"])


def test_an_unknown_path_is_refused_with_the_choices():
    out = subprocess.run(
        [sys.executable, "-m", "rtinfer.bench.camera", "--paths", "shm"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "bus_ipc" in out.stderr
