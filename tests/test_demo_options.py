"""`rtinfer demo` from any directory, its options and outputs checked before it starts, a
failed run that says why, stdout that is JSON, and package metadata without warnings.
Real processes: the installed `rtinfer` entry (python -m rtinfer.cli) run from a tmp dir."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def demo(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtinfer.cli", "demo", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow  # 5-11 s on 2 cores (a whole launch): `make test-slow` runs it
def test_demo_runs_from_another_directory_with_the_task_options_and_json_stdout(tmp_path):
    r = demo(
        tmp_path,
        "--seconds",
        "3",
        "--seed",
        "3",
        "--instruction",
        "2,0,1",
        "--belt-speed",
        "0.25",
        "--json",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout)  # nothing but the report on stdout
    assert report["exit_code"] == 0 and report["cycles"] > 0
    assert report["task"] == {"seed": 3, "instruction": [2, 0, 1], "belt_speed": 0.25}
    assert "Traceback" not in r.stderr


def test_shipped_launch_files_and_model_are_found_from_the_installed_package():
    from rtinfer.cli.shipped import launch_file
    from rtinfer.model.zoo import zoo_model

    assert launch_file("conveyor_sorting.yaml").is_file()
    assert launch_file("conveyor_expert.yaml").is_file()
    assert (zoo_model() / "graphs.json").is_file() and zoo_model().is_absolute()


def test_bad_options_and_outputs_are_refused_before_the_run_naming_the_path_given(tmp_path):
    cases = [
        (["--policy", str(tmp_path / "no/such/dir")], str(tmp_path / "no/such/dir")),
        (["--policy", str(tmp_path)], "not a model directory"),
        (
            ["--policy", "expert", "--report", str(tmp_path / "missing/r.json")],
            str(tmp_path / "missing"),
        ),
        (
            ["--policy", "expert", "--png", str(tmp_path / "missing/p.png")],
            str(tmp_path / "missing"),
        ),
        (["--policy", "expert", "--deadline-ms", "-5"], "--deadline-ms -5"),
        (["--instruction", "1,1,2"], "permutation of 0,1,2"),
        (["--instruction", "a,b"], "comma-separated"),
        (["--belt-speed", "-1"], "belt speed '-1'"),
        (["--seed", "-3"], "--seed"),
    ]
    for args, says in cases:
        r = demo(tmp_path, *args, "--run-dir", str(tmp_path / "run"), timeout=60)
        assert r.returncode == 2, (args, r.stderr)
        assert says in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr, (args, r.stderr)
    assert not (tmp_path / "run" / "nominal").exists()  # nothing was started


def test_a_corrupt_model_fails_the_demo_with_the_nodes_error_on_the_console(tmp_path):
    bad = tmp_path / "bad-model"
    shutil.copytree(ROOT / "models/zoo/conveyor-v1", bad)
    with open(bad / "policy.safetensors", "r+b") as f:  # the fp32 graphs' weights
        f.truncate(1000)
    r = demo(
        tmp_path,
        "--policy",
        str(bad),
        "--seconds",
        "3",
        "--json",
        "--run-dir",
        str(tmp_path / "run"),
    )
    assert r.returncode == 1, r.stderr[-3000:]
    report = json.loads(r.stdout)
    error = "\n".join(report["error"])
    assert "policy" in error and "policy.safetensors" in error, error
    assert "policy.safetensors" in r.stderr and "policy.log" in r.stderr, r.stderr[-3000:]


def test_package_metadata_builds_without_deprecation_warnings_and_ships_models_and_launch_files(
    tmp_path,
):
    """What `pip install` runs (egg_info + build_py into a tmp dir): any setuptools warning
    about the metadata fails; the wheel's tree holds the models' weights and streams and
    the demo's launch files."""
    lib = tmp_path / "lib"
    r = subprocess.run(
        [
            sys.executable,
            "-W",
            "always",
            "-c",
            "from setuptools import setup; setup()",
            "-q",
            "egg_info",
            "--egg-base",
            str(tmp_path),
            "build_py",
            "-d",
            str(lib),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "eprecat" not in out and "SetuptoolsWarning" not in out, out
    for rel in (
        "models/zoo/conveyor-v1/policy.safetensors",
        "models/zoo/conveyor-v1/stream.npz",
        "models/zoo/conveyor-v1/graphs.json",
        "rtinfer/cli/launch/conveyor_sorting.yaml",
        "rtinfer/cli/launch/conveyor_expert.yaml",
    ):
        assert (lib / rel).is_file() and not (lib / rel).is_symlink(), rel
    assert not (lib / "examples").exists() and not (lib / "peers").exists()  # checkout only


def test_help_texts_list_the_options_in_whole_sentences():
    soak = subprocess.run(
        [sys.executable, "-m", "rtinfer.cli", "soak", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert soak.returncode == 0
    for opt in ("--minutes", "--policy", "--run-dir", "--stress", "--json"):
        assert opt in soak.stdout, soak.stdout
    rt = subprocess.run(
        [sys.executable, "-m", "examples.conveyor_sorting.realtime_run", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rt.returncode == 0
    text = " ".join(rt.stdout.split("options:")[0].split())
    assert text.rstrip().endswith("."), text
    assert "--seconds" in rt.stdout and "--seed" in rt.stdout


def test_unknown_stress_modes_and_near_deadline_for_the_expert_are_refused(tmp_path, capsys):
    from rtinfer.cli.demo import run

    assert run(1, stress="disk", run_dir=str(tmp_path / "run")) == 2
    assert "--stress disk: give one of cpu, near-deadline" in capsys.readouterr().err
    assert run(1, stress="near-deadline", policy="expert", run_dir=str(tmp_path / "run")) == 2
    assert "no chunk time to set a deadline from" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before anything started


@pytest.mark.skipif(
    os.environ.get("RTINFER_LONG") != "1",
    reason="about a minute of launched runs: opt-in with RTINFER_LONG=1",
)
def test_near_deadline_runs_unpressured_then_both_loads_each_at_its_own_calibrated_deadline(
    tmp_path,
):
    """`--stress near-deadline` briefly (through demo.run in a child process, as
    rtinfer.cli calls it): one JSON report with the unpressured run, per load its
    calibration and both runs at its deadline, each audited, and the targets' verdict."""
    code = (
        "import sys; from rtinfer.cli.demo import run; sys.exit(run(2, "
        f"stress='near-deadline', json_out=True, run_dir={str(tmp_path / 'run')!r}))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout)
    assert list(report) == ["unpressured", "nominal", "stress", "targets"]
    assert report["unpressured"]["deadline_ms"] == 100
    for cond, load in (("nominal", "no added load"), ("stress", "SCHED_IDLE")):
        pair = report[cond]
        assert load in pair["calibration"]["load"] and pair["calibration"]["samples"] >= 20
        for role in ("fixed", "budget"):
            assert pair[role]["exit_code"] == 0
            assert pair[role]["deadline_ms"] == pair["calibration"]["deadline_ms"]
            assert set(pair[role]["audit"]) >= {"undetected", "stale_applied", "held"}
            assert len(pair[role]["runs"]) == 2  # fixed, budget, budget, fixed
        for k, role in enumerate(("fixed", "budget", "budget", "fixed")):
            assert (tmp_path / "run" / f"{cond}-{k + 1}-{role}" / "policy.trace").exists()
    assert {c["check"].split(":")[0] for c in report["targets"]["checks"]} >= {"nominal", "stress"}
    assert "targets" in r.stderr and "Traceback" not in r.stderr
