"""The C++ example controller takes a node's asks under overload (docs/wire.md section 5,
"Overload"), as the Python robot does: with --open-loop-ms each obs says so (`open_loop_ns`) and
it sends no faster than the period its chunks ask (obs_slowed); without it, its obs are the
old bytes and an ask changes nothing. Real processes and sockets; a stand-in policy sends the
chunks. The executed horizon's rules are the shared controller vectors' (tests/vectors,
`executes_*`), which the C++ rules replay in tests/test_cpp_client.py."""

from __future__ import annotations

import json
import time

import numpy as np
from cpp_client import TOKENIZER, build, controller_cmd, start, stop

from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns

MS = 1_000_000
ASKED_MS = 250


def test_the_cpp_controller_sends_no_faster_than_asked_and_an_old_one_as_before(tmp_path):
    release = build("release")
    tok_cfg = TokenizerConfig.load(TOKENIZER)
    tok = ActionTokenizer(tok_cfg)
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("act", "new", "old")}
    policy = Publisher(eps["act"], "policy", bind=True)
    obs = Subscriber([eps["new"], eps["old"]], ["obs"])
    common = ["--obs-hz", "100", "--seconds", "4", "--deadline-ms", "100"]
    procs = {
        "new": start(
            controller_cmd(
                release,
                eps["act"],
                eps["new"],
                robot="new",
                extra=[*common, "--open-loop-ms", "500"],
            )
        ),
        "old": start(controller_cmd(release, eps["act"], eps["old"], robot="old", extra=common)),
    }
    got: dict[str, list] = {"new": [], "old": []}
    try:
        for p in procs.values():
            assert "ready" in p.stdout.readline()
        ids = np.array(
            [[100 + i, 50, 20, 255][: tok_cfg.dim] for i in range(tok_cfg.horizon)], np.int32
        )
        values = tok.decode(ids).astype(np.float32)
        t_ask = time.monotonic() + 1.0  # 1 s at its own rate, then asked for one each 250 ms
        end, cycle = t_ask + 2.0, 0
        while time.monotonic() < end:
            if time.monotonic() >= t_ask:
                cycle += 1
                capture = now_ns()
                for robot in ("new", "old"):
                    for i in range(tok_cfg.horizon):
                        policy.publish(
                            "action_chunk",
                            waypoint_body(
                                cycle,
                                i,
                                tok_cfg.horizon,
                                values[i],
                                spec=tok_cfg.hash,
                                period_ns=tok_cfg.period_ns,
                                start_ns=tok_cfg.period_ns,
                                dest=robot,
                                tokens=ids[i],
                                ask={"executes": tok_cfg.horizon, "obs_period_ns": ASKED_MS * MS},
                            ),
                            {"capture": capture},
                        )
            t = time.monotonic() + 0.05
            while time.monotonic() < t:
                e = obs.recv(10)
                if e is not None:
                    got[e.src].append((time.monotonic(), e))
    finally:
        reports = {n: stop(p) for n, p in procs.items()}
        obs.close()
        policy.close()
    counters = {}
    for name, (out, err) in reports.items():
        assert procs[name].returncode == 0, err
        counters[name] = json.loads(out.strip().splitlines()[-1])["counters"]
    asked = [e for t, e in got["new"] if t > t_ask + 0.5]  # once the ask is in force
    old = [e for t, e in got["old"] if t > t_ask + 0.5]
    # 1.5 s at one each 250 ms: 7 at most (and at least 1: it is slowed, not silenced)
    assert 1 <= len(asked) <= 1.5 * 1000 / ASKED_MS + 1, (len(asked), counters)
    assert counters["new"]["obs_slowed"] > 0 and counters["new"]["chunks_accepted"] > 0
    assert all(e.body["open_loop_ns"] == 500 * MS for _, e in got["new"])
    # the old robot: its own rate, the old bytes, the ask ignored
    assert len(old) > len(asked) and counters["old"]["obs_slowed"] == 0, (len(old), counters)
    assert all(set(e.body) == {"values", "ints"} for _, e in got["old"])
