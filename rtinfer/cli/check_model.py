"""`rtinfer check-model DIR`: a model directory against the contract of docs/policies.md.

Loads it as the inference node would (either kind: rtinfer.model.chunk_model.load_model),
then, for a continuous-chunk policy, opens each level's graph with ONNX Runtime, checks its
inputs and output against obs_spec.json and action_spec.json, and runs it once on an
all-zero observation; for a flow policy, opens the prefix and step graphs, checks the step
graphs' inputs against the prefix outputs and x_t/t/v against the action spec, and runs
every level once; for an action-token policy, opens the backend and decodes one chunk.
With --robot-spec, the policy's action spec is compared with the robot's. Prints one line
per problem with its fix (or "ok" and a summary; then a "hint:" line for an input that
looks like a camera image but is packaged as a plain array), as text or --json; exit 0 when the
directory passes, 1 when it does not, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.chunk_model import load_model
from rtinfer.model.directory import ModelError


def problems(path: str, robot_spec: str | None = None) -> tuple[list[str], dict]:
    """(problems, summary) of the model directory at `path`."""
    try:
        md = load_model(path)
    except ModelError as e:
        return [str(e)], {"path": str(path)}
    out: list[str] = []
    summary = {"path": str(md.path), "kind": md.kind}
    if md.kind == "chunk":
        spec = md.action
        summary.update(
            levels=len(md.levels), inputs=md.obs.keys, action=spec.to_dict(), spec_hash=spec.hash
        )
        hints = md.obs.image_hints()
        if hints:
            summary["hints"] = hints
        from rtinfer.inference.graph_runner import dry_run_problems

        out += dry_run_problems(md)
    elif md.kind == "flow":
        spec = md.action
        summary.update(
            levels=[lv["steps"] for lv in md.levels],
            integrator=md.integrator,
            inputs=md.obs.keys,
            action=spec.to_dict(),
            spec_hash=spec.hash,
        )
        from rtinfer.inference.flow_runner import dry_run_problems as flow_dry_run

        out += flow_dry_run(md)
    else:
        spec = ActionSpec.from_tokenizer(md.tokenizer, ("",) * md.tokenizer.dim)
        summary.update(
            depths=[md.n_layer, *md.config.get("exits", [])],
            tokenizer_hash=md.tokenizer.hash,
            horizon=md.tokenizer.horizon,
            names=list(md.tokenizer.names),
        )
        out += _token_graphs(md)
    if robot_spec:
        try:
            robot = ActionSpec.load(robot_spec)
        except (OSError, ValueError, TypeError) as e:
            return out + [f"--robot-spec {robot_spec}: {e}"], summary
        diffs = (
            robot.differences(spec)
            if md.kind in ("chunk", "flow")
            else [d for d in robot.differences(spec) if not d.startswith("units")]
        )
        out += [
            f"action spec differs from the robot's: {d}; a robot follows only chunks of "
            f"its own spec: re-package with the robot's action_spec.json"
            for d in diffs
        ]
    return out, summary


def _token_graphs(md) -> list[str]:
    from rtinfer.inference.backends.base import BackendError
    from rtinfer.inference.budget import BudgetLevel
    from rtinfer.inference.runner import TokenRunner

    try:
        runner = TokenRunner(md)
        instr = np.zeros(md.obs.instr_length, np.int64)
        obs = np.zeros(md.obs.length, np.int64)
        runner.run(instr, obs, None, BudgetLevel(md.n_layer, 0, md.tokenizer.horizon))
    except (BackendError, ValueError) as e:
        return [str(e)]
    return []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="rtinfer check-model", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", help="the model directory")
    p.add_argument("--robot-spec", help="the robot's action_spec.json, to compare with")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    a = p.parse_args(argv)
    found, summary = problems(a.dir, a.robot_spec)
    if a.json:
        print(json.dumps({**summary, "ok": not found, "problems": found}))
    else:
        for line in found:
            print(f"problem: {line}")
        if not found:
            print(
                f"ok: {summary['path']}: {summary['kind']} policy, "
                + ", ".join(
                    f"{k} {v}"
                    for k, v in summary.items()
                    if k not in ("path", "kind", "action", "hints")
                )
            )
        for line in summary.get("hints", []):
            print(f"hint: {line}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
