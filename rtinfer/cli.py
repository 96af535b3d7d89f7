"""The `rtinfer` command line. Each subcommand imports its module lazily, so `rtinfer --version`
and the robot-side commands never pull in heavy packages."""
from __future__ import annotations

import argparse
import json
import sys

from rtinfer import __version__


def _bench(args: argparse.Namespace) -> int:
    if args.what == "transport":
        from rtinfer.bench.transport import run
        result = run(messages=args.messages)
    else:
        from rtinfer.bench.jitter import run
        result = run(seconds=args.seconds, hz=args.hz)
    from rtinfer.bench.table import print_result
    print(json.dumps(result, indent=2) if args.json else "", end="\n" if args.json else "")
    if not args.json:
        print_result(args.what, result)
    return 0


def _report(args: argparse.Namespace) -> int:
    from rtinfer.report import main as report_main
    return report_main(args.trace, png=args.png)


def _keys(args: argparse.Namespace) -> int:
    from rtinfer.keys import generate
    public, _secret = generate(args.dir, args.name)
    print(f"wrote key pair '{args.name}' in {args.dir}; public key: {public} (secret key not shown, mode 0600)")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from rtinfer.bench.demo import run
    return run(seconds=args.seconds)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rtinfer", description=__doc__)
    p.add_argument("--version", action="version", version=f"rtinfer {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("bench", help="benchmarks, each against a baseline measured in the same run")
    b.add_argument("what", choices=["transport", "jitter"])
    b.add_argument("--json", action="store_true", help="print the result as JSON")
    b.add_argument("--messages", type=int, default=5000, help="transport: messages per case")
    b.add_argument("--seconds", type=float, default=5.0, help="jitter: seconds per loop")
    b.add_argument("--hz", type=float, default=1000.0, help="jitter: loop rate")
    b.set_defaults(func=_bench)

    r = sub.add_parser("report", help="latency table (and PNG) from a trace file")
    r.add_argument("trace")
    r.add_argument("--png", default=None, help="write a latency timeline + histogram PNG (needs matplotlib)")
    r.set_defaults(func=_report)

    k = sub.add_parser("keys", help="CURVE key management")
    ksub = k.add_subparsers(dest="keys_command", required=True)
    kg = ksub.add_parser("generate", help="generate a CURVE key pair")
    kg.add_argument("dir")
    kg.add_argument("--name", default="node")
    kg.set_defaults(func=_keys)

    d = sub.add_parser("demo", help="run the demo for a bounded time")
    d.add_argument("--seconds", type=float, default=20.0)
    d.set_defaults(func=_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
