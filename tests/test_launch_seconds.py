"""`seconds:` and `--record` in a user's own launch file, as README's `--set seconds=20` suggests: when no node
takes ${seconds}, the launcher itself stops the run after that long (exit 0, said in the
log); when a node takes it, that node ends the run as before and is never cut short."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def launch(tmp_path: Path, nodes: str, *extra: str) -> tuple[int, str]:
    f = tmp_path / "mine.yaml"
    f.write_text(
        "name: mine\nseconds: 60\nendpoints:\n  obs: ipc\nnodes:\n" + textwrap.dedent(nodes)
    )
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.launch.supervisor",
            str(f),
            "--run-dir",
            str(tmp_path / "run"),
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return p.returncode, p.stdout + p.stderr


def test_seconds_stops_a_launch_whose_nodes_do_not_take_it(tmp_path):
    code, out = launch(
        tmp_path,
        """\
      - name: robot
        entry: tests.launch_fixtures:forever
        args: ["${run_dir}/robot.pid"]
    """,
        "--set",
        "seconds=2",
    )
    assert code == 0, out
    assert "no node takes ${seconds}" in out and "seconds 2 elapsed" in out, out


def test_a_node_that_takes_seconds_ends_the_run_itself_uncut(tmp_path):
    code, out = launch(
        tmp_path,
        """\
      - name: robot
        entry: tests.launch_fixtures:crash_after
        args: ["${run_dir}/starts", "${seconds}", "0"]
        required: true
      - name: other
        entry: tests.launch_fixtures:forever
        args: ["${run_dir}/other.pid"]
    """,
        "--set",
        "seconds=2",
    )
    assert code == 0 and "crash_after: exiting with 0" in out, out
    assert "elapsed" not in out and "no node takes" not in out, out


def test_record_into_the_run_directory_the_launcher_creates(tmp_path):
    run = tmp_path / "run"  # not there yet: the launcher makes it
    code, out = launch(
        tmp_path,
        """\
      - name: robot
        entry: tests.launch_fixtures:forever
        args: ["${run_dir}/robot.pid", "${endpoints.obs}"]
    """,
        "--set",
        "seconds=3",
        "--record",
        str(run / "rec" / "run.mcap"),
    )
    assert code == 0, out
    assert (run / "rec" / "run.mcap").is_file(), out


def test_record_where_no_folder_can_be_made_is_refused_before_anything_starts(tmp_path):
    (tmp_path / "file").write_text("")
    code, out = launch(
        tmp_path,
        """\
      - name: robot
        entry: tests.launch_fixtures:forever
        args: ["${run_dir}/robot.pid", "${endpoints.obs}"]
    """,
        "--record",
        str(tmp_path / "file" / "run.mcap"),
    )
    assert code == 2 and "cannot write there" in out and not (tmp_path / "run").exists(), out
