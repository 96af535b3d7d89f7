"""The `rtinfer` command line: the composition root.

Each subcommand imports its module lazily, so `rtinfer --version` and the robot-side
commands never pull in heavy packages. Code above rtinfer in the layer order (the conveyor
task, the model packager, the peer benchmarks) is reached by ``module:function`` text, as
launch files reach their nodes, never by an import statement."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rtinfer import __version__
from rtinfer.launch.entry import resolve

EVAL_TASK = "examples.conveyor_sorting.evaluate:evaluate"
PACKAGER = "models.package:package"
CHUNK_PACKAGER = "models.chunk_package:main"
PEERS = "peers.run"


# `rtinfer bench NAME ...`: each benchmark's own main(argv), reached by module:function
BENCHES = {
    name: f"rtinfer.bench.{name}:main"
    for name in (
        "transport",
        "jitter",
        "decode",
        "ttft",
        "backend",
        "fleet",
        "scale",
        "dynamic",
        "camera",
        "flow",
    )
}
BENCHES["peers"] = f"{PEERS}:main"
BENCHES["tick"] = "controllers.tick_bench:main"  # the robot side's own: it ranks above rtinfer
BENCHES["fleet-failover"] = "rtinfer.fleet.failover:main"  # the fleet extra (Ray)
BENCHES["overload"] = "rtinfer.bench.overload:main"  # replayed: robots past full quality
BENCHES["rtc"] = "rtinfer.bench.rtc:main"  # real-time chunking across a delayed network
FLEET = "rtinfer.fleet.cli:main"  # `rtinfer fleet ...`: the fleet extra (Ray), own parser


def _export(args: argparse.Namespace) -> int:
    from pathlib import Path

    ck = Path(args.checkpoint)
    if not ck.with_suffix(".json").is_file() or not ck.with_suffix(".safetensors").is_file():
        print(
            f"rtinfer export: --checkpoint {args.checkpoint}: no rtinfer checkpoint there "
            f"(wants {ck.with_suffix('.json').name} and {ck.with_suffix('.safetensors').name}, "
            f"as models.train writes, given without the extension); for your own torch "
            f"module or ONNX file use `rtinfer package` (docs/policies.md)",
            file=sys.stderr,
        )
        return 2
    card = resolve(PACKAGER)(
        args.checkpoint,
        args.out,
        fp16=not args.no_fp16,
        exit_prefill=tuple(args.exit_prefill),
        quantise=tuple(args.quantise),
        stream=args.stream,
        shared_k=not args.no_shared_k,
    )
    print(json.dumps({k: card[k] for k in ("name", "params", "val_token_accuracy")}))
    return 0


def _report(args: argparse.Namespace) -> int:
    from rtinfer.monitor.report import main as report_main

    if args.trace.endswith(".mcap"):  # a recording (rtinfer.record): its robots' traces
        from rtinfer.record.read import read_traces

        return report_main(args.trace, png=args.png, deadline_ms=args.deadline_ms, read=read_traces)
    return report_main(args.trace, png=args.png, deadline_ms=args.deadline_ms)


def _keys(args: argparse.Namespace) -> int:
    from rtinfer.transport.curve import generate

    public, _secret = generate(args.dir, args.name)
    print(
        f"wrote key pair '{args.name}' in {args.dir}; public key: {public} "
        "(secret key not shown, mode 0600)"
    )
    return 0


def _eval(args: argparse.Namespace) -> int:
    from rtinfer.model.directory import ModelError

    opts = {} if args.exit is None else {"exit_depth": args.exit}
    if args.level is not None:
        opts["level"] = args.level
    if args.precision:
        opts["precision"] = args.precision
    if args.instructions:
        opts["instructions"] = args.instructions
    try:
        r = resolve(args.task)(
            args.policy,
            episodes=args.episodes,
            per_episode=args.objects_per_episode,
            seed=args.seed,
            belt_speed=args.belt_speed,
            **opts,
        )
    except (ValueError, ModelError) as e:
        print(f"rtinfer eval: {e}", file=sys.stderr)
        return 2
    keys = ("spawned", "correct", "wrong", "missed", "dropped", "success_rate") + (
        ("per_instruction", "min_success_rate") if args.instructions else ()
    )
    print(json.dumps(r if args.full else {k: r[k] for k in keys}, indent=None if args.json else 1))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from rtinfer.cli.demo import run

    return run(
        args.seconds,
        policy=args.policy,
        report=args.report,
        png=args.png,
        stress=args.stress,
        run_dir=args.run_dir,
        deadline_ms=args.deadline_ms,
        seed=args.seed,
        instruction=args.instruction,
        belt_speed=args.belt_speed,
        json_out=args.json,
        robots=args.robots,
        realtime=args.realtime,
        record=args.record,
        camera_hz=args.camera_hz,
    )


def _task_option(checker: str):
    """An argparse type from the conveyor task's own parser (reached by module:function)."""

    def parse(text: str):
        try:
            value = resolve(f"examples.conveyor_sorting.config:{checker}")(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return ",".join(map(str, value)) if isinstance(value, tuple) else value

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rtinfer", description=__doc__)
    p.add_argument("--version", action="version", version=f"rtinfer {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser(
        "bench",
        add_help=False,
        help=f"benchmarks against a same-run baseline: {', '.join(BENCHES)} "
        "(see rtinfer bench NAME --help)",
    )

    sub.add_parser(
        "fleet",
        add_help=False,
        help="fleets across inference hosts on Ray: up, "
        "status, down, demo (see rtinfer fleet --help; the fleet extra)",
    )

    r = sub.add_parser(
        "report",
        help="latency table (and PNG) from a trace file or a recording (RUN.mcap, from --record)",
    )
    r.add_argument("trace", help="a .trace file, or an .mcap recording (its robots' traces)")
    r.add_argument(
        "--png", default=None, help="write a latency timeline + histogram PNG (needs matplotlib)"
    )
    r.add_argument(
        "--deadline-ms",
        type=float,
        default=None,
        help="count applied cycles whose e2e is above it as misses too (late "
        "waypoints always are), as the monitor does",
    )
    r.set_defaults(func=_report)

    k = sub.add_parser("keys", help="CURVE key management")
    ksub = k.add_subparsers(dest="keys_command", required=True)
    kg = ksub.add_parser("generate", help="generate a CURVE key pair")
    kg.add_argument("dir")
    kg.add_argument("--name", default="node")
    kg.set_defaults(func=_keys)

    from rtinfer.launch.supervisor import add_arguments as launch_arguments
    from rtinfer.launch.supervisor import run_args as launch_run

    lp = sub.add_parser("launch", help="run a YAML launch file (nodes as supervised processes)")
    launch_arguments(lp)
    lp.set_defaults(func=launch_run)

    x = sub.add_parser(
        "export", help="checkpoint -> model directory (ONNX graphs, tokenizer, card)"
    )
    x.add_argument("--checkpoint", required=True, help="checkpoint path without extension")
    x.add_argument("--out", required=True)
    x.add_argument("--no-fp16", action="store_true")
    x.add_argument(
        "--exit-prefill",
        type=int,
        nargs="*",
        default=[],
        metavar="DEPTH",
        help="exit depths whose budget levels also prefill there (cheaper; the "
        "first action token then comes from the exit head: check its success)",
    )
    x.add_argument(
        "--no-shared-k",
        action="store_true",
        help="write only the static step graphs (by default also one graph per depth "
        "with the token count free, which the ONNX backend runs every k of the depth through)",
    )
    x.add_argument(
        "--quantise",
        nargs="*",
        default=[],
        choices=["int8", "int4", "w8a8"],
        metavar="PRECISION",
        help="also write quantised step graphs (int8, int4: weights only; w8a8: weights "
        "and activations) in their own folders, with their greedy agreement with fp32 in the card",
    )
    x.add_argument(
        "--stream",
        default=None,
        help="recorded observation stream .npz the "
        "agreement is measured on (default: OUT/stream.npz, if there)",
    )
    x.set_defaults(func=_export)

    e = sub.add_parser("eval", help="success rate of a policy in the lockstep conveyor env")
    e.add_argument("--policy", default="expert", help='"expert" or a model directory')
    e.add_argument(
        "--task",
        default=EVAL_TASK,
        help="module:function that evaluates a policy (default: the conveyor cell)",
    )
    e.add_argument("--episodes", type=int, default=10)
    e.add_argument("--objects-per-episode", type=int, default=20)
    e.add_argument("--seed", type=int, default=1000, help="episode seeds (training used 1..)")
    e.add_argument("--belt-speed", type=float, default=None)
    e.add_argument("--exit", type=int, default=None, help="model: exit depth (default full)")
    e.add_argument(
        "--level",
        type=int,
        default=None,
        help="model: run at this budget level, numbered as the node's --level "
        "numbers them (depth, window and chunk as the node runs it; "
        "budget.default_levels; -1: the cheapest)",
    )
    e.add_argument(
        "--precision",
        default=None,
        choices=["fp32", "fp16", "int8", "int4", "w8a8"],
        help="model: which graph set runs (default fp32; graphs.json lists them)",
    )
    e.add_argument(
        "--instructions",
        action="append",
        default=None,
        help='"all": each of the six class -> bin permutations, --episodes each, '
        "success per instruction and overall; or one such as 2,0,1 (repeatable)",
    )
    e.add_argument("--json", action="store_true", help="one-line JSON")
    e.add_argument("--full", action="store_true", help="all metrics, not only the counts")
    e.set_defaults(func=_eval)

    sub.add_parser(
        "package",
        add_help=False,
        help="a continuous-chunk policy (torch module or ONNX files) -> model "
        "directory (see rtinfer package --help)",
    )
    sub.add_parser(
        "check-model",
        add_help=False,
        help="check a model directory against docs/policies.md, one line per "
        "problem (see rtinfer check-model --help)",
    )
    sub.add_parser(
        "build-engine", help="build TensorRT engines for a model (see --help there)", add_help=False
    )

    from rtinfer.cli.soak import add_arguments as soak_arguments
    from rtinfer.cli.soak import run_args as soak_run

    s = sub.add_parser("soak", help="the demo under mild stress for M minutes: RSS growth, misses")
    soak_arguments(s)
    s.set_defaults(func=soak_run)

    d = sub.add_parser(
        "demo",
        help="run the demo for a bounded time",
        description="The conveyor demo as supervised processes: a live "
        "dashboard on stderr, the final report as JSON on stdout. Ctrl-C or "
        "SIGTERM stops it in order (the partial report is printed; exit "
        "128 + signal).",
    )
    d.add_argument("--seconds", type=float, default=60.0, help="sim seconds per run")
    d.add_argument(
        "--policy",
        default=None,
        help='"expert" or a model directory (default: the shipped models/zoo/conveyor-v1)',
    )
    d.add_argument(
        "--seed",
        type=_task_option("parse_seed"),
        default=None,
        help="cell seed: spawns and, unless --instruction, the instruction "
        "(default: the launch file's, 1 for the model, 0 for the expert)",
    )
    d.add_argument(
        "--instruction",
        type=_task_option("parse_instruction"),
        default=None,
        metavar="B,B,B",
        help="the bin of each object class (box, cylinder, "
        "sphere), e.g. 2,0,1 (default: drawn from the seed)",
    )
    d.add_argument(
        "--belt-speed",
        type=_task_option("parse_belt_speed"),
        default=None,
        metavar="M_S",
        help="belt speed in m/s (default 0.3)",
    )
    d.add_argument(
        "--json",
        action="store_true",
        help="the report on stdout as one JSON line (it is JSON either way)",
    )
    d.add_argument("--report", default=None, help="write the final report JSON here")
    d.add_argument("--png", default=None, help="latency timeline + histogram PNG (matplotlib)")
    d.add_argument(
        "--stress",
        choices=["cpu", "near-deadline"],
        default=None,
        help="cpu: run under CPU load twice, fixed full depth vs the budget "
        "controller: the policy node alone on one CPU with a busy process "
        "under SCHED_IDLE; the "
        "deadline calibrated in place, from two short launched runs under "
        "that load (fixed full depth, and the cheapest budget level): the "
        "fixed run's chunk-time p70 (capture -> last waypoint at the "
        "controller), raised to the cheapest level's p99 x 1.1; then the "
        "budget controller with a busy process on every CPU, under normal "
        "scheduling and under the launch file's SCHED_FIFO priorities. "
        "near-deadline: the policy near its own deadline: one unpressured run "
        "(the launch file's deadline), then with the policy node alone on its "
        "CPU and under the cpu load, each with a deadline calibrated that way "
        "under it, fixed full depth vs the budget controller; every run "
        "audited from its traces, the targets' verdict in the JSON",
    )
    d.add_argument(
        "--robots",
        type=int,
        default=1,
        metavar="N",
        help="N conveyor cells (seeds 0..N-1, so each its own instruction) served "
        "by one inference node (launch/conveyor_fleet.yaml); the report has "
        "one entry per robot",
    )
    d.add_argument("--run-dir", default=None, help="where the nodes' logs and reports go")
    d.add_argument(
        "--camera-hz",
        type=float,
        default=None,
        metavar="HZ",
        help="a camera policy's frame rate (default 30; launch/conveyor_vision.yaml)",
    )
    d.add_argument(
        "--record",
        default=None,
        metavar="RUN.mcap",
        help="record the run as MCAP with ROS 2 schemas (observations, waypoints, "
        "traces, health, the monitor's decisions), for Foxglove, Rerun and "
        "`rtinfer report RUN.mcap`; needs rtinfer[record]",
    )
    d.add_argument(
        "--no-realtime",
        dest="realtime",
        action="store_false",
        help="run every node under the OS's default scheduling: none of the launch "
        "file's SCHED_FIFO priorities or CPU pinning (to measure what they "
        'buy; docs/launch.md, "Scheduling the loop")',
    )
    d.add_argument(
        "--deadline-ms",
        type=float,
        default=None,
        help="end-to-end deadline (default: the launch file's, 100 ms; with "
        "--stress the calibrated one, 20 ms for --policy expert); the "
        "monitor's budget margins scale with it (20%% / 50%%)",
    )
    d.set_defaults(func=_demo)
    return p


def package_hints(argv: list[str]) -> None:
    """After `rtinfer package` without --obs-spec: a hint line for each input of the spec it
    read off the graph that looks like a camera image (ObsSpec.image_hints)."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--out")
    ap.add_argument("--obs-spec")
    known, _ = ap.parse_known_args(argv)
    spec = Path(known.out or "") / "obs_spec.json"
    if known.obs_spec or not known.out or not spec.is_file():
        return
    from rtinfer.model.obs_spec import ObsSpec

    for line in ObsSpec.load(spec).image_hints():
        print(f"rtinfer package: hint: {line}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # each benchmark parses its own options
        if argv[1:2] and argv[1] in BENCHES:
            return int(resolve(BENCHES[argv[1]])(argv[2:]) or 0)
        print(
            f"usage: rtinfer bench {{{','.join(BENCHES)}}} [options]; "
            "rtinfer bench NAME --help lists that benchmark's options",
            file=sys.stderr,
        )
        return 2
    if argv[:1] == ["fleet"]:  # its own parser (rtinfer.fleet.cli)
        return int(resolve(FLEET)(argv[1:]) or 0)
    if argv[:1] == ["package"]:  # a continuous-chunk policy -> model directory (own parser)
        code = int(resolve(CHUNK_PACKAGER)(argv[1:]) or 0)
        if code == 0:
            package_hints(argv[1:])
        return code
    if argv[:1] == ["check-model"]:
        from rtinfer.cli.check_model import main as check_model

        return check_model(argv[1:])
    if argv[:1] == ["build-engine"]:  # its own parser: options forwarded as they are
        from rtinfer.inference.backends.tensorrt_build import main as build_engine
        from rtinfer.model.zoo import zoo_model

        return build_engine(argv[1:], default_model=str(zoo_model()))
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
