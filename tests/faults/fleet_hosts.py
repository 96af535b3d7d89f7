"""The processes of tests/test_fleet_hosts.py, each run inside a network namespace:

    python -m tests.faults.fleet_hosts probe --obs EP... --allow DIR --seconds S --out F \
        --curve-secret K --curve-map M

(The robots are `python -m controllers.bench_robot`, which takes the CURVE options itself.)
probe: subscribes to the robots' obs endpoints as the inference node
does (its key, the curve map's server keys) and judges every observation with
rtinfer.transport.identity, re-reading the allow-list twice a second; at --seconds or
SIGTERM writes {"sockets": the Subscriber's socket count, "seen": [[recv_ns, src, peer,
verdict], ...]} as JSON, verdict "ok" or the counter it went to.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from rtinfer.transport.curve import add_curve_arguments, allow_list, curve_configs


def probe(argv: list[str]) -> int:
    from rtinfer.transport.bus import Subscriber
    from rtinfer.transport.identity import Identity
    from rtinfer.transport.wire import now_ns

    ap = argparse.ArgumentParser(prog="fleet_hosts probe")
    add_curve_arguments(ap)
    ap.add_argument("--obs", required=True, nargs="+")
    ap.add_argument("--allow", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    curve = curve_configs(connects=a.obs, secret=a.curve_secret, curve_map=a.curve_map)
    allow = allow_list(a.allow)
    ident = Identity(allow)
    seen, stopped = [], []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    with Subscriber(a.obs, ["obs"], curve=curve) as sub:
        sockets = len(sub.legs)  # a socket per robot's endpoint
        print("ready", flush=True)
        end = now_ns() + int(a.seconds * 1e9)
        next_refresh = 0
        while (now := now_ns()) < end and not stopped:
            if now >= next_refresh:
                allow.refresh()
                next_refresh = now + 500_000_000
            env = sub.recv(timeout_ms=50)
            if env is None:
                continue
            before = dict(ident.counters)
            ok = ident.accept(env.src, sub.peer)
            verdict = "ok" if ok else next(k for k in before if ident.counters[k] > before[k])
            seen.append([env.stamps["recv"], env.src, sub.peer, verdict])
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"sockets": sockets, "seen": seen}, f)
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    what, *args = sys.argv[1:]
    sys.exit({"probe": probe}[what](args))
