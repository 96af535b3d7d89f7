"""The C++ client (clients/cpp) against the Python reference, with real processes and sockets:
the shared vectors, mutated corpus messages under ASan/UBSan, the content hash, the C++
encoder's messages in the Python decoder, and the example controller following the real
inference node while the Python monitor counts its cycles (plaintext over ipc, CURVE over tcp).
The builds and processes: tests/cpp_client.py (without the toolchain these tests skip, except
in CI)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import cpp_client as cpp
import numpy as np
import pytest
from cpp_client import ROOT, build, conveyor_obs, start, stop

from rtinfer.model.action_spec import ActionSpec, canonical_bytes
from rtinfer.model.action_tokens import TokenizerConfig
from rtinfer.transport import wire
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.curve import CurveConfig, generate

VECTORS = ROOT / "tests" / "vectors"
MANIFEST = json.loads((VECTORS / "manifest.json").read_text())
ASAN_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}


@pytest.fixture(scope="module")
def asan():
    return build("asan")


@pytest.fixture(scope="module")
def release():
    return build("release")


def tool(build_dir: Path, *args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(build_dir / "rtinfer_wire_tool"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **ASAN_ENV},
    )


# --- the shared vectors ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cpp_results(asan):
    r = tool(asan, "vectors", VECTORS)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_cpp_decoder_gives_every_stated_verdict(cpp_results):
    got = {v["name"]: v for v in cpp_results["decode"]}
    assert len(got) == len(MANIFEST["decode"])
    wrong = [
        (e["name"], e["verdict"], got[e["name"]]["verdict"], got[e["name"]]["why"])
        for e in MANIFEST["decode"]
        if got[e["name"]]["verdict"] != e["verdict"]
    ]
    assert not wrong
    for e in MANIFEST["decode"]:
        if "decoded" in e:
            assert got[e["name"]]["decoded"] == e["decoded"], e["name"]
        if e["verdict"] != "ok":
            assert got[e["name"]]["why"], e["name"]  # every rejection says why


def test_cpp_controller_moves_the_stated_counters(cpp_results):
    c = MANIFEST["controller"]
    for case, result in zip(c["cases"], cpp_results["controller"], strict=True):
        before = dict.fromkeys(c["counters"], 0)
        for k, (step, got) in enumerate(zip(case["steps"], result["steps"], strict=True)):
            delta = {n: got["counters"][n] - before[n] for n in c["counters"]}
            assert (delta, got["state"], got["trace"]) == (
                step["expect"],
                step["state"],
                step["trace"],
            ), f"{case['name']} step {k}"
            before = {n: got["counters"][n] for n in c["counters"]}


def test_cpp_decoder_rejects_mutated_corpus_messages_without_crashing(asan):
    """Every mutation is accepted or rejected with a WireError; ASan/UBSan abort on anything
    else (an overflow, a use after free, undefined behaviour)."""
    seeds = sorted((ROOT / "tests/fuzz/corpus/wire").glob("*.bin")) + [
        VECTORS / v["frames"][0]
        for v in MANIFEST["decode"]
        if len(v["frames"]) == 1 and (VECTORS / v["frames"][0]).stat().st_size < 4096
    ]
    r = tool(asan, "fuzz", 150, 20260601, *seeds, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout)
    assert out["mutations"] == 2 * 150 * len(seeds)
    assert out["verdicts"].get("ok", 0) > 0 and out["verdicts"]["MalformedError"] > 0
    print(f"{out['mutations']} mutations of {len(seeds)} seeds: {out['verdicts']}")


def test_cpp_and_python_decoders_agree_on_mutated_messages(asan):
    """A differential test: the same mutated frames through both decoders, the same verdict
    (accept or the same error class) every time."""
    seeds = sorted((ROOT / "tests/fuzz/corpus/wire").glob("*.bin")) + [
        VECTORS / v["frames"][0]
        for v in MANIFEST["decode"]
        if v["verdict"] == "ok"
        and len(v["frames"]) == 1
        and (VECTORS / v["frames"][0]).stat().st_size < 4096
    ]
    r = tool(asan, "fuzz-dump", 40, 7, *seeds, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    lines = r.stdout.strip().splitlines()[:-1]
    differ = []
    for line in lines:
        m = json.loads(line)
        frames = [bytes.fromhex(f) for f in m["frames"]]
        try:
            wire.decode_frames(frames)
            verdict = "ok"
        except wire.WireError as e:
            verdict = type(e).__name__
        if verdict != m["verdict"]:
            differ.append((m["frames"], m["verdict"], verdict))
    assert len(lines) == 2 * 40 * len(seeds)
    assert not differ, differ[:3]


# --- content hash ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "doc",
    [
        TokenizerConfig.load(ROOT / "models/zoo/conveyor-v1/tokenizer.json"),
        ActionSpec.load(ROOT / "models/zoo/conveyor-act/action_spec.json"),
        TokenizerConfig(
            low=(-1e-300, 0, -0.0),
            high=(1e300, 1, 2**53 + 1.5),
            bins=70000,
            horizon=300,
            names=("ä", "", "z" * 40),
            period_ns=2**40,
        ),
        ActionSpec(("b", "a"), ("rad", "°"), (0.1, -5), (0.30000000000000004, 5), 1, 1, 0),
        ActionSpec(("x", "y"), ("m", "m"), (-1, -1), (1, 1), 50, 20_000_000, 0, max_committed=40),
    ],
    ids=[
        "zoo_tokenizer",
        "zoo_action_spec",
        "odd_tokenizer",
        "odd_action_spec",
        "action_spec_max_committed",
    ],
)
def test_cpp_content_hash_equals_python(release, tmp_path, doc):
    path = tmp_path / "spec.json"
    doc.save(path)
    r = tool(release, "hash", path)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["canonical_hex"] == canonical_bytes(doc.to_dict()).hex()
    assert got["hash"] == doc.hash


def test_cpp_refuses_an_edited_spec_file(release, tmp_path):
    d = json.loads((ROOT / "models/zoo/conveyor-v1/tokenizer.json").read_text())
    d["low"][0] = -0.71
    (tmp_path / "t.json").write_text(json.dumps(d))
    r = tool(release, "hash", tmp_path / "t.json")
    assert r.returncode == 1 and "does not match its content" in r.stderr


# --- the C++ encoder -------------------------------------------------------------------------------
def test_cpp_encoder_messages_decode_in_python(asan, tmp_path):
    r = tool(asan, "encode", tmp_path)
    assert r.returncode == 0, r.stderr
    got = {}
    for m in json.loads(r.stdout):
        got[m["name"]] = wire.decode_frames([Path(f).read_bytes() for f in m["frames"]])
    assert len(got) == 10 and {e.topic.partition("/")[0] for e in got.values()} == set(
        wire.schema.BODIES
    )
    ch, oob = got["action_chunk"], got["action_chunk_oob"]
    assert list(ch.stamps.items()) == [("capture", 1000), ("obs_recv", 1100)]
    assert ch.seq == 42 and ch.src == "cppinf" and ch.body["values"].dtype == np.float32
    assert ch.body["values"].tolist() == oob.body["values"].tolist() == [0.5, -1.0, 0.25, 1.0]
    assert ch.body["tokens"].tolist() == [128, 3, 0, 255]
    assert len([Path(f) for f in json.loads(r.stdout)[1]["frames"]]) == 3  # both arrays out of band
    obs = got["obs"]
    assert obs.topic == "obs/cell2" and obs.body["values"]["grid"].tolist() == [
        [0, 1, 2],
        [3, 4, 5],
    ]
    assert obs.body["values"]["flags"].tolist() == [True, False, True]
    assert obs.body["ints"] == {"n": -5}
    frame = got["obs_frames"].body["frames"]["overhead"]  # a camera frame, out of band
    assert frame["capture_ns"] == 990 and frame["image"].dtype == np.uint8
    assert frame["image"].tolist() == (np.arange(18, dtype=np.uint8) * 14).reshape(2, 3, 3).tolist()
    assert len(json.loads(r.stdout)[4]["frames"]) == 2  # the envelope, then the pixels
    assert got["heartbeat"].seq == 2**64 - 1 and got["heartbeat"].body["echo"]["seq"] == 2**64 - 1
    assert got["health"].body["gauges"] == {"e2e_ms": 1.25, "n": -3}
    assert got["budget"].body["reason"] == "slack ü"
    # the same bytes as Python's encoder writes for the same message
    assert Path(json.loads(r.stdout)[8]["frames"][0]).read_bytes() == wire.encode(
        "budget", {"level": 2, "reason": "slack ü"}, seq=5, src="cppmon"
    )


# --- the example controller against the real nodes -------------------------------------------------
def controller_cmd(build_dir, eps, robot="cpparm", extra=()):
    return cpp.controller_cmd(build_dir, eps["act"], eps["robot"], robot, eps["ctl"], extra)


def test_cpp_controller_follows_the_inference_node_and_the_monitor_counts_it(release, tmp_path):
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act", "ctl", "robot")}
    obs_pub = Publisher(eps["obs"], "cpparm")  # the robot's obs: src = the C++ robot name
    node = start(
        [
            sys.executable,
            "-m",
            "rtinfer.inference.node",
            "--model",
            str(ROOT / "models/zoo/conveyor-v1"),
            "--obs",
            eps["obs"],
            "--actions",
            eps["act"],
            "--control",
            eps["ctl"],
            "--drafter",
            "none",
            "--no-budget",
            "--threads",
            "1",
        ]
    )
    mon = start(
        [
            sys.executable,
            "-m",
            "rtinfer.monitor.node",
            "--listen",
            eps["robot"],
            "--control",
            eps["ctl"],
            "--report",
            str(tmp_path / "monitor.json"),
            "--deadline-ms",
            "100",
        ]
    )
    ctl = start(controller_cmd(release, eps))
    traces = Subscriber(eps["robot"], ["trace"])
    try:
        for proc, what in ((node, "ready"), (mon, "ready"), (ctl, "ready")):
            line = proc.stdout.readline()
            assert what in line, proc.stderr.read() if proc.poll() is not None else line
        rng, got, end = np.random.default_rng(0), [], time.monotonic() + 40
        while time.monotonic() < end and len([t for t in got if "apply" in t.body["stamps"]]) < 8:
            obs_pub.publish("obs", conveyor_obs(rng), {"capture": wire.now_ns()})
            t_next = time.monotonic() + 0.1
            while time.monotonic() < t_next:
                env = traces.recv(20)
                if env is not None:
                    got.append(env)
        applied = [t for t in got if "apply" in t.body["stamps"]]
        assert len(applied) >= 8, (len(got), [t.body for t in got[:3]])
        for t in applied:
            st = t.body["stamps"]
            assert list(st) == ["capture", "obs_recv", "first_token", "publish", "recv", "apply"]
            assert list(st.values()) == sorted(st.values())  # one host: one clock
            assert t.body["node"] == "cppctl" and t.src == "cpparm"
        cycles = [t.body["cycle"] for t in applied]
        assert cycles == sorted(cycles) and len(set(cycles)) == len(cycles)
        time.sleep(1.0)  # the monitor's next pings and echoes
    finally:
        ctl_out, ctl_err = stop(ctl)
        stop(mon)
        stop(node)
        obs_pub.close()
        traces.close()
    assert ctl.returncode == 0, ctl_err
    report = json.loads(ctl_out.strip().splitlines()[-1])
    c = report["counters"]
    # every chunk taken had a waypoint taken; on a busy host some later ones come due before
    # they arrive and are skipped (never applied late), so not all 4 of each need be taken
    assert c["waypoints_accepted"] >= c["chunks_accepted"] >= 8
    assert c["rejected_hash"] == c["rejected_dest"] == c["rejected_bad"] == 0
    assert c["heartbeat.echoes"] >= 1 and c["sub.rejected"] == 0
    monitor = json.loads((tmp_path / "monitor.json").read_text())
    assert monitor["cycles"] >= len(applied) - 1, monitor["cycles"]
    assert monitor["nodes"]["cppctl"]["messages"] > 0
    assert "cppctl" in monitor["clocks"] and monitor["counters"]["echoes"] >= 1
    assert report["pos"] != [0.0, 0.0, 0.0, 0.0]  # the simulated axes moved


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cpp_controller_over_curve_with_allow_lists(release, tmp_path):
    """Chunks in over tcp + CURVE (the C++ side a client of a Python server), traces out over
    tcp + CURVE (the C++ side the server, checking its allow-list); a stranger gets nothing
    until its key is copied into that allow-list, no restart (read at each handshake)."""
    keys = tmp_path / "keys"
    for name in ("policy", "cpp", "viewer", "stranger"):
        generate(keys / name, name)
    allow_cpp, allow_viewer = tmp_path / "allow_cpp", tmp_path / "allow_viewer"
    for d, who in ((allow_cpp, "cpp"), (allow_viewer, "viewer")):
        d.mkdir()
        shutil.copy(keys / who / f"{who}.key", d)
    eps = {
        "act": f"tcp://127.0.0.1:{free_port()}",
        "robot": f"tcp://127.0.0.1:{free_port()}",
        "ctl": f"ipc://{tmp_path}/ctl",
    }
    curve_map = tmp_path / "curve.json"
    curve_map.write_text(
        json.dumps(
            {
                eps["act"]: {
                    "server_key": str(keys / "policy/policy.key"),
                    "allow": str(allow_cpp),
                },
                eps["robot"]: {"server_key": str(keys / "cpp/cpp.key"), "allow": str(allow_viewer)},
            }
        )
    )
    policy = Publisher(
        eps["act"],
        "inf",
        curve=CurveConfig(keys / "policy/policy.key_secret", allowed_clients_dir=allow_cpp),
    )
    ctl = start(
        controller_cmd(
            release,
            eps,
            extra=[
                "--curve-secret",
                str(keys / "cpp/cpp.key_secret"),
                "--curve-map",
                str(curve_map),
            ],
        )
    )
    viewer = Subscriber(
        eps["robot"],
        ["trace"],
        curve=CurveConfig(
            keys / "viewer/viewer.key_secret", server_public_key_file=keys / "cpp/cpp.key"
        ),
    )
    stranger = Subscriber(
        eps["robot"],
        ["trace"],
        curve=CurveConfig(
            keys / "stranger/stranger.key_secret", server_public_key_file=keys / "cpp/cpp.key"
        ),
    )
    tok = TokenizerConfig.load(ROOT / "models/zoo/conveyor-v1/tokenizer.json")
    from rtinfer.model.action_tokens import ActionTokenizer
    from rtinfer.transport.action_chunk import waypoint_body

    decode = ActionTokenizer(tok).decode
    cycle = 0

    def traces(sub: Subscriber, want: int) -> list:
        """Feed chunks until `sub` got `want` applied traces (20 s at most)."""
        nonlocal cycle
        got, end = [], time.monotonic() + 20
        while time.monotonic() < end and len(got) < want:
            cycle += 1
            capture = wire.now_ns()
            for i in range(tok.horizon):
                ids = np.array([100 + i, 50, 20, 255], np.int32)
                policy.publish(
                    "action_chunk",
                    waypoint_body(
                        cycle,
                        i,
                        tok.horizon,
                        decode(ids),
                        spec=tok.hash,
                        period_ns=tok.period_ns,
                        start_ns=tok.period_ns,
                        dest="cpparm",
                        tokens=ids,
                    ),
                    {"capture": capture, "obs_recv": capture, "first_token": capture},
                )
            env = sub.recv(200)
            if env is not None and "apply" in env.body["stamps"]:
                got.append(env)
        return got

    try:
        assert "ready" in ctl.stdout.readline(), ctl.stderr.read() if ctl.poll() is not None else ""
        assert len(traces(viewer, 3)) >= 3, "no traces over CURVE"
        assert stranger.recv(300) is None  # not on the allow-list: the handshake is refused
        assert stranger.refusals >= 1
        shutil.copy(keys / "stranger/stranger.key", allow_viewer)  # listed: its retry gets in
        assert traces(stranger, 1), (stranger.refusals, stranger.reconnects)
    finally:
        out, err = stop(ctl)
        for s in (policy, viewer, stranger):
            s.close()
    assert ctl.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["counters"]["chunks_accepted"] >= 3


def tgkill(pid: int, tid: int, sig: int) -> None:
    """A signal to one thread of another process (Linux's tgkill; Python has no call for it)."""
    import ctypes
    import platform

    number = {"x86_64": 234, "aarch64": 131}[platform.machine()]
    if ctypes.CDLL(None, use_errno=True).syscall(number, pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), "tgkill")


def test_cpp_controller_stops_cleanly_when_its_curve_thread_takes_the_signal(release, tmp_path):
    """SIGTERM delivered to the CURVE authenticator's thread, which sits in zmq_poll: poll(2)
    returns EINTR whatever the handler's flags, and cppzmq throws it. The controller must stop
    as on the main thread (exit 0, its report), not abort on an uncaught exception."""
    keys = tmp_path / "keys"
    for name in ("cpp", "viewer"):
        generate(keys / name, name)
    allow_viewer = tmp_path / "allow_viewer"
    allow_viewer.mkdir()
    shutil.copy(keys / "viewer/viewer.key", allow_viewer)
    eps = {
        "act": f"ipc://{tmp_path}/act",
        "robot": f"tcp://127.0.0.1:{free_port()}",
        "ctl": f"ipc://{tmp_path}/ctl",
    }
    curve_map = tmp_path / "curve.json"
    curve_map.write_text(
        json.dumps(
            {eps["robot"]: {"server_key": str(keys / "cpp/cpp.key"), "allow": str(allow_viewer)}}
        )
    )
    ctl = start(
        controller_cmd(
            release,
            eps,
            extra=[
                "--curve-secret",
                str(keys / "cpp/cpp.key_secret"),
                "--curve-map",
                str(curve_map),
            ],
        )
    )
    try:
        assert "ready" in ctl.stdout.readline(), ctl.stderr.read() if ctl.poll() is not None else ""
        tasks = Path(f"/proc/{ctl.pid}/task")
        name = (tasks / str(ctl.pid) / "comm").read_text()
        # zmq's own threads are named ZMQbg/... (each renames itself once running: until then
        # it bears the process's name); the authenticator is a std::thread of ours
        end = time.monotonic() + 10
        while True:
            ours = [
                int(t.name)
                for t in tasks.iterdir()
                if int(t.name) != ctl.pid and (t / "comm").read_text() == name
            ]
            if len(ours) == 1 or time.monotonic() > end:
                break
            time.sleep(0.05)
        assert len(ours) == 1, [(t.name, (t / "comm").read_text()) for t in tasks.iterdir()]
        time.sleep(0.2)  # into its 50 ms poll
        tgkill(ctl.pid, ours[0], signal.SIGTERM)
        out, err = ctl.communicate(timeout=20)
    finally:
        stop(ctl)
    assert ctl.returncode == 0, err
    assert "counters" in json.loads(out.strip().splitlines()[-1])


def test_cpp_controller_refuses_bad_setup_with_a_clear_error(release, tmp_path):
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("act", "ctl", "robot")}
    r = subprocess.run(
        controller_cmd(release, eps)[:-6], capture_output=True, text=True, timeout=10
    )
    assert r.returncode == 2 and "--tokenizer" in r.stderr
    secret = tmp_path / "k"
    generate(secret, "k")
    os.chmod(secret / "k.key_secret", 0o644)
    tcp = f"tcp://127.0.0.1:{free_port()}"
    (tmp_path / "c.json").write_text(json.dumps({tcp: {"server_key": str(secret / "k.key")}}))
    r = subprocess.run(
        controller_cmd(
            release,
            {**eps, "act": tcp},
            extra=[
                "--curve-secret",
                str(secret / "k.key_secret"),
                "--curve-map",
                str(tmp_path / "c.json"),
            ],
        ),
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert r.returncode == 2 and "chmod 600" in r.stderr


@pytest.mark.parametrize("addressed", [True, False], ids=["addressed", "plain"])
def test_cpp_controller_takes_addressed_chunks_and_with_addressed_only_its_own(
    release, tmp_path, addressed
):
    """Each round: this robot's chunk addressed to it, another robot's addressed to that one,
    this robot's unaddressed with values off its tokens (rejected_bad if it arrives), and a
    frame addressed to this robot whose body is for another (the bus rejects it). With
    --addressed libzmq delivers only the first and the last; without, all four arrive."""
    import zmq

    from rtinfer.model.action_tokens import ActionTokenizer
    from rtinfer.transport.action_chunk import waypoint_body
    from rtinfer.transport.bus import addressed_topic

    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("act", "ctl", "robot")}
    policy = Publisher(eps["act"], "inf")
    ctx = zmq.Context()
    raw = ctx.socket(
        zmq.PUB
    )  # on the control endpoint, which the controller also takes chunks from
    raw.bind(eps["ctl"])
    ctl = start(controller_cmd(release, eps, extra=["--addressed"] if addressed else []))
    traces = Subscriber(eps["robot"], ["trace"])
    tok = TokenizerConfig.load(ROOT / "models/zoo/conveyor-v1/tokenizer.json")
    decode, H, rounds = ActionTokenizer(tok).decode, tok.horizon, 5

    def chunk(cycle, dest, to, off=0.0):
        capture = wire.now_ns()
        for i in range(H):
            ids = np.array([100 + i, 50, 20, 255], np.int32)
            body = waypoint_body(
                cycle,
                i,
                H,
                decode(ids) + np.float32(off),
                spec=tok.hash,
                period_ns=tok.period_ns,
                start_ns=tok.period_ns,
                dest=dest,
                tokens=ids,
            )
            policy.publish("action_chunk", body, {"capture": capture}, to=to)
        return body

    try:
        assert "ready" in ctl.stdout.readline(), ctl.stderr.read() if ctl.poll() is not None else ""
        cycle, end = 0, time.monotonic() + 20
        while time.monotonic() < end:  # until the controller hears the policy
            cycle += 1
            chunk(cycle, "cpparm", "cpparm")
            env = traces.recv(100)
            if env is not None and "apply" in env.body["stamps"]:
                break
        else:
            raise AssertionError("the controller never applied an addressed chunk")
        for _ in range(rounds):
            cycle += 1
            chunk(cycle, "cpparm", "cpparm")
            chunk(cycle, "other", "other")
            chunk(cycle + 1000, "cpparm", None, off=1.0)  # a whole bin and more off its tokens
            mismatched = chunk(cycle, "other", "other")
            raw.send_multipart(
                [
                    addressed_topic("action_chunk", "cpparm"),
                    *wire.encode_frames(
                        "action_chunk",
                        mismatched,
                        seq=0,
                        src="inf",
                        stamps={"capture": wire.now_ns()},
                    ),
                ]
            )
            time.sleep(0.15)
        time.sleep(0.5)
    finally:
        out, err = stop(ctl)
        policy.close()
        traces.close()
        raw.close(0)
        ctx.term()
    assert ctl.returncode == 0, err
    c = json.loads(out.strip().splitlines()[-1])["counters"]
    assert c["chunks_accepted"] >= rounds + 1 and c["sub.rejected"] >= 1
    if addressed:  # the others never reached this robot
        assert (c["rejected_dest"], c["rejected_bad"]) == (0, 0)
    else:
        assert (c["rejected_dest"], c["rejected_bad"]) == (2 * H * rounds, H * rounds)


def test_cpp_controller_observes_its_axes_at_obs_hz_and_the_python_side_reads_them(
    release, tmp_path
):
    """The example's observe step: with --obs-hz its axes' positions go out as `obs`, on its
    publish endpoint under its robot name, stamped capture, read by the Python bus."""
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("act", "ctl", "robot")}
    ctl = start(controller_cmd(release, eps, extra=["--obs-hz", "20", "--seconds", "3"]))
    obs = Subscriber(eps["robot"], ["obs"])
    try:
        assert "ready" in ctl.stdout.readline()
        got = [e for e in iter(lambda: obs.recv(1000), None)]
    finally:
        out, err = stop(ctl)
        obs.close()
    assert ctl.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert 10 <= report["counters"]["obs_sent"] <= 61  # 20 Hz for 3 s, at most
    assert 0 < len(got) <= report["counters"]["obs_sent"]  # the first ones before we joined
    for e in got:
        assert e.src == "cpparm" and list(e.stamps) == ["capture", "publish", "recv"]
        assert e.body["values"]["pos"].dtype == np.float32
        assert e.body["values"]["pos"].shape == (4,) and e.body["ints"] == {}
    captures = [e.stamps["capture"] for e in got]
    assert captures == sorted(captures) and len(got) == len(set(e.seq for e in got))
