"""What a failover cost each robot, from the robots' own records (controllers.bench_robot's:
per observation, its capture, the waypoints received and accepted for it, the last one's
receive stamp) and the moment the host was killed. No clock is read here.

Per robot, all in ms from the kill (CLOCK_MONOTONIC, one host):
- first_fresh_ms: the first chunk accepted for an observation captured after the kill (so
  computed by a node that was alive then), at its last waypoint's arrival: an upper bound on
  its first waypoint's;
- gap_ms: from the last chunk accepted before the kill to that one;
- hold_ms: how long the robot's watchdog held: the gap less the chunk interval and the
  deadline it waits before holding (controllers.node), at least 0;
- lost: observations captured after the kill and before that first fresh one, answered by
  no accepted chunk;
- stale_applied: chunks accepted whose last waypoint arrived past the deadline of their
  capture (the controller rejects those: must be 0).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from rtinfer.fleet.lan import why_not
from rtinfer.fleet.local import LocalFleet
from rtinfer.fleet.relief import MOVE_CAUSES
from rtinfer.fleet.spec import FleetError
from rtinfer.model.zoo import zoo_model
from rtinfer.realtime.complaints import say
from rtinfer.realtime.deadline import deadline_ns


def robot_figures(rec: dict, kill_ns: int, deadline_ms: float, period_ms: float) -> dict:
    capture, last = rec["capture_ns"], rec["last_recv_ns"]
    accepted = rec["accepted"] > 0
    whole = accepted & (rec["accepted"] == rec["received"])
    stale = int(np.sum(whole & (last - capture > deadline_ns(deadline_ms))))
    after = accepted & (capture > kill_ns)
    if not after.any():
        return {
            "first_fresh_ms": None,
            "gap_ms": None,
            "hold_ms": None,
            "lost": int(np.sum(capture > kill_ns)),
            "stale_applied": stale,
        }
    first = int(np.argmin(np.where(after, last, np.iinfo(np.int64).max)))
    before = accepted & (capture <= kill_ns)
    prev_ns = int(last[before].max()) if before.any() else kill_ns
    gap_ms = (int(last[first]) - prev_ns) / 1e6
    waiting = (capture > kill_ns) & (capture < capture[first]) & ~accepted
    return {
        "first_fresh_ms": round((int(last[first]) - kill_ns) / 1e6, 1),
        "gap_ms": round(gap_ms, 1),
        "hold_ms": round(max(0.0, gap_ms - period_ms - deadline_ms), 1),
        "lost": int(np.sum(waiting)),
        "stale_applied": stale,
    }


def unmoved_figures(rec: dict, kill_ns: int, window_ns: int = 5_000_000_000) -> dict:
    """What a robot that did not move felt while others moved onto its node (whose obs socket
    is made anew at each change of its robots file): observations captured in the window
    after the kill answered by no accepted chunk, and the longest gap between accepted
    chunks' arrivals from a second before the kill to the window's end (ms)."""
    capture, last = rec["capture_ns"], rec["last_recv_ns"]
    accepted = rec["accepted"] > 0
    window = (capture > kill_ns) & (capture < kill_ns + window_ns)
    arrivals = np.sort(
        last[accepted & (capture > kill_ns - 1_000_000_000) & (capture < kill_ns + window_ns)]
    )
    gap = float(np.diff(arrivals).max()) / 1e6 if len(arrivals) > 1 else None
    return {
        "lost": int(np.sum(window & ~accepted)),
        "max_gap_ms": None if gap is None else round(gap, 1),
    }


def summary(per_robot: list[dict]) -> dict:
    """Medians and maxima of each figure over robots (and runs); None where none had one."""
    out = {}
    for key in ("first_fresh_ms", "gap_ms", "hold_ms", "lost", "stale_applied"):
        vals = [r[key] for r in per_robot if r[key] is not None]
        out[key] = {
            "median": float(np.median(vals)) if vals else None,
            "max": float(max(vals)) if vals else None,
        }
    out["robots_without_fresh_chunk"] = sum(r["first_fresh_ms"] is None for r in per_robot)
    return out


def _settled(st: dict) -> bool:
    return all(h["state"] != "starting" for h in st["hosts"].values()) and all(
        r["state"] != "waiting" for r in st["robots"].values()
    )


def first_moves(st: dict, robots: list[str], kill_ns: int) -> dict[str, str | None]:
    """robot -> the host it was first placed on since kill_ns (None: refused first), for
    those of `robots` the controller's events say so of (its stamps are CLOCK_MONOTONIC)."""
    out = {}
    for age_s, text in st["events"]:
        words = text.replace("'", " ").replace(":", " ").split()
        if (
            (st["monotonic_s"] - age_s) * 1e9 < kill_ns
            or words[0] != "robot"
            or words[1] not in robots
            or words[1] in out
        ):
            continue
        if "->" in words:
            out[words[1]] = words[words.index("->") + 1]
        elif "refused" in words:
            out[words[1]] = None
    return out


def most_moves_in_a_minute(st: dict, losses: bool = True) -> int:
    """The most moves of one robot within any 60 s, by the controller's events (a robot
    placed for the first time is no move). losses=False: leaving out the moves off a host
    lost (the robot had no node; the others are the fleet's: a refusal, relief, balance)."""
    times: dict[str, list[float]] = {}
    for age_s, text in st["events"]:
        words = text.replace("'", " ").replace(":", " ").split()
        if (
            words[0] == "robot"
            and "->" in words
            and words[words.index("->") - 1] != "new"
            and (losses or not text.endswith(f"({MOVE_CAUSES[0]})"))
        ):
            times.setdefault(words[1], []).append(st["monotonic_s"] - age_s)
    return max((sum(t <= u < t + 60.0 for u in ts) for ts in times.values() for t in ts), default=0)


def _moved_off(robots: list[str], kill_ns: int, victim: str):
    """Status predicate: each of `robots` was placed again (or refused) since kill_ns, by
    the controller's events (a host that comes back at once, a node killed and started
    again, may have taken them back by the time status is asked: it balances), or is on
    another host than the victim (a relief moved it just before the kill)."""

    def moved(st: dict) -> bool:
        seen = first_moves(st, robots, kill_ns)
        return all(r in seen or st["robots"][r]["host"] not in (None, victim) for r in robots)

    return moved


def one_run(a, phases=("node", "host")) -> dict:
    """One fleet: per phase, the host killed, its robots, where they went, their figures."""
    out = {}
    with LocalFleet(
        a.model,
        hosts=a.hosts,
        robots=a.robots,
        rate_hz=a.rate_hz,
        deadline_ms=a.deadline_ms,
        node_args=tuple(a.node_args),
        stream=a.stream,
        robot_file=a.robot_file,
        curve=a.curve,
        netns=a.netns,
    ) as fleet:
        fleet.wait(_settled)
        # the robots run until the last phase's tail: on a busy machine a killed node's
        # start again (waited for below, up to 60 s) can outlast the planned run
        fleet.start_robots(a.seconds + 60 * len(phases))
        part = a.seconds / (len(phases) + 2)
        for phase in phases:
            time.sleep(part)
            # a node killed before is started again by the controller: wait for it, so a
            # host lost finds every other host up
            lost = [o["host"] for p, o in out.items() if p == "host"]
            st = fleet.wait(
                lambda s, lost=lost: all(
                    x["state"] == "up" for h, x in s["hosts"].items() if h not in lost
                ),
                timeout_s=60,
            )
            up = [
                h
                for h, x in st["hosts"].items()
                if x["state"] == "up" and h not in [o["host"] for o in out.values()]
            ]  # each phase its own host
            victim = max(up, key=lambda h: len(st["hosts"][h]["robots"]))
            kill = fleet.kill_node if phase == "node" else fleet.kill_host
            kill_ns = kill(victim)
            moved = st["hosts"][victim]["robots"]
            after = fleet.wait(_moved_off(moved, kill_ns, victim), timeout_s=60, every_s=0.05)
            to = first_moves(after, moved, kill_ns)
            moved = [r for r in moved if r in to]  # the others had left it before the kill
            out[phase] = {
                "host": victim,
                "kill_ns": kill_ns,
                "moved": moved,
                "to": to,
                "refused": sorted(r for r in moved if to[r] is None),
                "placed_s": (time.monotonic_ns() - kill_ns) / 1e9,
            }
        time.sleep(part)
        fleet.end_robots()
        records = fleet.records()
        st = fleet.status()
        if a.logs:  # the hosts' node logs and the robots' records, before the run dir goes
            shutil.copytree(
                fleet.run_dir,
                Path(a.logs) / f"run-{time.monotonic_ns()}",
                ignore=shutil.ignore_patterns("keys", "allow", "*.key*"),
            )
        out["refusals"] = [t for _, t in st["events"] if "refused" in t]
        out["reliefs"] = [t for _, t in st["events"] if "overloaded for" in t]
        out["most_moves_in_a_minute"] = most_moves_in_a_minute(st)
        out["most_moves_in_a_minute_besides_losses"] = most_moves_in_a_minute(st, losses=False)
        out["counters"] = {h: x["counters"] for h, x in st["hosts"].items() if x["counters"]}
    period_ms = 1e3 / a.rate_hz
    for phase in (out[p] for p in phases):
        kill_ns = phase.pop("kill_ns")
        phase["events"] = events_after(st, kill_ns, phase["host"], phase["moved"])
        phase["robots"] = {
            r: robot_figures(records[r], kill_ns, a.deadline_ms, period_ms) for r in phase["moved"]
        }
        phase["unmoved"] = {
            r: unmoved_figures(rec, kill_ns)
            for r, rec in records.items()
            if r not in phase["moved"]
        }
    return out


def events_after(st: dict, kill_ns: int, host: str, moved: list[str]) -> list:
    """The controller's events about `host` or the `moved` robots in the 10 s after kill_ns,
    as [ms from the kill, text] (its stamps are CLOCK_MONOTONIC, as kill_ns: one machine)."""
    out = []
    for age_s, text in st["events"]:
        ms = ((st["monotonic_s"] - age_s) * 1e9 - kill_ns) / 1e6
        words = text.replace("'", " ").replace(":", " ").split()
        if 0 <= ms <= 10_000 and (host in words or any(r in words for r in moved)):
            out.append([round(ms, 1), text])
    return out


def main(argv: list[str] | None = None) -> int:
    """`rtinfer bench fleet-failover`: hosts lost under a running fleet, per robot."""
    p = argparse.ArgumentParser(prog="rtinfer bench fleet-failover", description=main.__doc__)
    p.add_argument("--hosts", type=int, default=3)
    p.add_argument("--robots", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seconds", type=float, default=20.0, help="the robots' run per repeat")
    p.add_argument("--rate-hz", type=float, default=20.0)
    p.add_argument("--deadline-ms", type=float, default=100.0)
    p.add_argument("--model", default=str(zoo_model()))
    p.add_argument(
        "--stream",
        default=None,
        help="the robots' recorded obs bodies (default: the model's obs_stream.npz)",
    )
    p.add_argument(
        "--robot-file",
        default="examples.conveyor_sorting:robot.yaml",
        help="the robots' axes (docs/robots.md)",
    )
    p.add_argument(
        "--node-args",
        nargs="*",
        default=["--threads", "1"],
        help="more arguments for every inference node",
    )
    p.add_argument(
        "--curve",
        action="store_true",
        help="tcp on loopback with CURVE, a key per host and robot (default: ipc, no keys)",
    )
    p.add_argument(
        "--netns",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each host and the robots in a network namespace of their own, all "
        "traffic tcp between them (root; --no-netns: Ray nodes on this machine's "
        "network, ipc or loopback)",
    )
    p.add_argument(
        "--logs",
        default=None,
        help="keep each run's hosts' node logs and robots' records under this directory",
    )
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    a = p.parse_args(argv)
    if a.netns and why_not() is not None:
        p.error(f"--netns: {why_not()}")
    runs, failed = [], []
    with contextlib.redirect_stdout(sys.stderr):  # Ray's notices: stdout stays one JSON
        for k in range(a.repeats):
            try:
                runs.append(one_run(a))
            except (FleetError, TimeoutError, RuntimeError) as e:  # a fleet that did not
                failed.append(str(e)[:500])  # start, or a move not seen: the others count
                say("fleet-failover", f"run {k + 1}/{a.repeats} failed: {failed[-1]}", error=False)
                continue
            say("fleet-failover", f"run {k + 1}/{a.repeats} done", error=False)
    if not runs:
        say("fleet-failover", f"no run finished: {failed[-1]}", error=False)
        return 1
    result = {
        "hosts": a.hosts,
        "robots": a.robots,
        "repeats": a.repeats,
        "failed": failed,
        "curve": a.curve,
        "netns": a.netns,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "rate_hz": a.rate_hz,
        "deadline_ms": a.deadline_ms,
        "model": a.model,
        "runs": runs,
        "reliefs": sum(len(run["reliefs"]) for run in runs),
        "most_moves_in_a_minute": max(run["most_moves_in_a_minute"] for run in runs),
        **{
            phase: {
                **summary([f for run in runs for f in run[phase]["robots"].values()]),
                "moved": sum(len(run[phase]["moved"]) for run in runs),
                "refused": sum(len(run[phase]["refused"]) for run in runs),
                "placed_s_max": max(run[phase]["placed_s"] for run in runs),
                "unmoved_lost_max": max(
                    (u["lost"] for run in runs for u in run[phase]["unmoved"].values()),
                    default=None,
                ),
                "unmoved_gap_ms_max": max(
                    (
                        u["max_gap_ms"]
                        for run in runs
                        for u in run[phase]["unmoved"].values()
                        if u["max_gap_ms"] is not None
                    ),
                    default=None,
                ),
            }
            for phase in ("node", "host")
        },
    }
    if a.json:
        print(json.dumps(result))
    else:
        for phase in ("node", "host"):
            r = result[phase]
            print(
                f"{phase} lost: {r['moved']} robots moved, {r['refused']} refused; first "
                f"fresh chunk median {r['first_fresh_ms']['median']} ms, max "
                f"{r['first_fresh_ms']['max']} ms; hold max {r['hold_ms']['max']} ms; "
                f"lost max {r['lost']['max']}; stale applied max "
                f"{r['stale_applied']['max']}"
            )
    return 0
