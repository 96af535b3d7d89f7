"""The C++ example controller's real-time chunking against the Python wire: with --rtc its
observations carry the committed prefix (valid for the Python decoder, the waypoints of the
chunk it follows), and it takes chunks conditioned on that prefix, refusing one whose hash
names other values. The answering side is a scripted policy here, built from the reference
(rtinfer.transport.committed), so the C++ client is what is under test."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from cpp_client import TOKENIZER, build, controller_cmd, start, stop

from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.committed import prefix_hash

MS = 1_000_000
P = 50 * MS
ANSWER_AFTER_NS = 60 * MS  # each answer lands 60 ms after capture: past waypoint 0's due time


@pytest.fixture(scope="module")
def release():
    return build("release")


def test_cpp_controller_commits_its_prefix_and_takes_only_chunks_that_join_it(release, tmp_path):
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("act", "robot")}
    cfg = TokenizerConfig.load(TOKENIZER)
    tok = ActionTokenizer(cfg)
    policy = Publisher(eps["act"], "policy")
    ctl = start(
        controller_cmd(
            release,
            eps["act"],
            eps["robot"],
            extra=[
                "--obs-hz",
                "20",
                "--rtc",
                "--seconds",
                "4",
                # a refused chunk must not let the watchdog hold
                "--chunk-interval-ms",
                "300",
            ],
        )
    )
    obs = Subscriber(eps["robot"], ["obs"])
    rng = np.random.default_rng(0)
    committed_seen, forged = [], 0
    try:
        assert "ready" in ctl.stdout.readline()
        end = time.monotonic() + 3.5
        while time.monotonic() < end:
            env = obs.recv(200)
            if env is None:
                continue
            capture = env.stamps["capture"]
            tokens = rng.integers(0, cfg.bins, (cfg.horizon, cfg.dim)).astype(np.int32)
            c = env.body.get("committed")
            named = None
            if c is not None:
                committed_seen.append(c)
                n = len(c["values"])
                tokens[:n] = tok.encode(c["values"])  # forced: the committed waypoints first
                named = {
                    "chunk": c["chunk"],
                    "from": c["from"],
                    "n": n,
                    "hash": prefix_hash(c["values"]),
                }
                if len(committed_seen) in (5, 10):  # a node that conditioned on something
                    named["hash"] = "0" * 16  # else: refused, the plan runs on
                    forged += 1
            time.sleep(max(0, capture + ANSWER_AFTER_NS - time.monotonic_ns()) / 1e9)
            values = tok.decode(tokens)
            for i in range(cfg.horizon):
                policy.publish(
                    "action_chunk",
                    waypoint_body(
                        env.seq,
                        i,
                        cfg.horizon,
                        values[i],
                        spec=cfg.hash,
                        period_ns=cfg.period_ns,
                        start_ns=cfg.period_ns,
                        dest="cpparm",
                        tokens=tokens[i],
                        conditioned=named,
                    ),
                    {"capture": capture},
                )
    finally:
        out, err = stop(ctl)
        obs.close()
        policy.close()
    assert ctl.returncode == 0, err
    counters = json.loads(out.strip().splitlines()[-1])["counters"]
    assert len(committed_seen) >= 12 and forged == 2
    assert counters["committed_sent"] >= len(committed_seen)
    for c in committed_seen:  # the plan's waypoints due from the new chunk's waypoint 0 on
        assert c["values"].dtype == np.float32 and c["values"].shape[1] == cfg.dim
        assert 1 <= len(c["values"]) <= cfg.horizon - 1
        assert (tok.decode(tok.encode(c["values"])) == c["values"]).all()  # bin centres
    assert counters["prefix_mismatch"] == forged * cfg.horizon  # each of their waypoints
    # every other answer joins (the last may still be on its way when the robot stops)
    assert (
        len(committed_seen) - forged - 1
        <= counters["chunks_conditioned"]
        <= len(committed_seen) - forged
    )
    assert counters["obs_held_rtc"] >= 1  # one in flight: the next waited for its answer
    assert counters["holds"] == counters["rejected_stale"] == counters["rejected_bad"] == 0
