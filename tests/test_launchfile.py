"""Launch-file validation: every mistake is reported with its file, line and a fix; and
the shipped launch files are valid."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from rtinfer.launch.file import RestartPolicy, load
from rtinfer.launch.yaml_lines import LaunchError

ROOT = Path(__file__).resolve().parents[1]
GOOD = """\
name: t
deadline_ms: 80
seconds: 5
rates: {policy_hz: 20}
vars: {model: models/zoo/x}
endpoints:
  obs: ipc
  actions: tcp://127.0.0.1:5599
  control: {url: tcp://127.0.0.1:5598, curve: "off"}
nodes:
  - name: a
    entry: tests.launch_fixtures:forever
    args: ["${run_dir}/a.pid", "${endpoints.obs}", "${deadline_ms}", "${vars.model}",
           "${rates.policy_hz}", "${endpoints.actions.server_key}", "${node.name}", 3]
    cpus: [0]
    priority: 10
    restart: {policy: on-failure, max_restarts: 2, backoff_s: 0.1}
"""
TCP_KEYS = """    curve: required
    server_key: keys/srv.key
    allow: keys/clients
"""


def write(tmp_path, text: str) -> Path:
    p = tmp_path / "l.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def good(tmp_path, replace: tuple[str, str] | None = None) -> Path:
    text = GOOD.replace(
        "  actions: tcp://127.0.0.1:5599\n",
        "  actions:\n    url: tcp://127.0.0.1:5599\n" + TCP_KEYS,
    )
    if replace:
        assert replace[0] in text
        text = text.replace(*replace)
    return write(tmp_path, text)


def error_of(path: Path, **kw) -> str:
    with pytest.raises(LaunchError) as e:
        load(path, **kw)
    return str(e.value)


def line_of(path: Path, needle: str) -> int:
    return next(i for i, l in enumerate(path.read_text().splitlines(), 1) if needle in l)


def test_realtime_false_launches_every_node_without_its_cpus_and_priority(tmp_path):
    from rtinfer.launch.process import Console
    from rtinfer.launch.supervisor import Supervisor

    path = good(tmp_path)
    for overrides, realtime in (({}, True), ({"realtime": "false"}, False)):
        spec = load(path, overrides)
        assert spec.realtime is realtime and spec.nodes[0].priority == 10
        run_dir = tmp_path / f"run-{realtime}"
        run_dir.mkdir()
        sup = Supervisor(spec, spec.nodes, run_dir, console=Console(run_dir / "launch.log"))
        cmd = sup.procs[0].command()
        assert ("--priority" in cmd and "--cpus" in cmd) is realtime
        assert ("--priority" in cmd or "--cpus" in cmd) is realtime
        said = (run_dir / "launch.log").read_text()
        assert ("realtime: false" in said) is not realtime
    assert "realtime" in error_of(path, overrides={"realtime": "maybe"})


def test_valid_file_loads_with_defaults_and_policy(tmp_path):
    spec = load(good(tmp_path))
    a = spec.nodes[0]
    assert (spec.name, spec.deadline_ms, a.cpus, a.priority, a.required) == (
        "t",
        80,
        (0,),
        10,
        True,
    )
    assert a.restart == RestartPolicy("on-failure", max_restarts=2, backoff_s=0.1)
    assert spec.endpoints["actions"].curve and not spec.endpoints["control"].curve


def test_substitution_fills_endpoints_values_and_node_fields(tmp_path):
    spec = load(good(tmp_path))
    argv = spec.argv(spec.nodes[0], spec.values(tmp_path / "run"))
    run = str((tmp_path / "run").resolve())
    assert argv == [
        f"{run}/a.pid",
        f"ipc://{run}/obs",
        "80",
        "models/zoo/x",
        "20",
        "keys/srv.key",
        "a",
        "3",
    ]


def test_overrides_replace_values_before_validation(tmp_path):
    spec = load(good(tmp_path), {"deadline_ms": "50", "vars.model": "m2"})
    argv = spec.argv(spec.nodes[0], spec.values(tmp_path))
    assert argv[2:4] == ["50", "m2"]
    with pytest.raises(LaunchError, match="can be overridden"):
        load(good(tmp_path), {"nodes": "x"})


def test_monitor_overrides_reach_the_monitor_config(tmp_path):
    spec = load(
        "launch/conveyor_sorting.yaml",
        {"monitor.shed_margin_ms": "4", "monitor.restore_margin_ms": "10"},
    )
    assert spec.monitor["shed_margin_ms"] == 4 and spec.monitor["restore_margin_ms"] == 10


def test_unknown_key_reports_line_and_suggestion(tmp_path):
    p = good(tmp_path, ("    priority: 10\n", "    priority: 10\n    restrat: never\n"))
    msg = error_of(p)
    assert f"{p}:{line_of(p, 'restrat')}:" in msg and "did you mean 'restart'" in msg


def test_missing_module_reports_line(tmp_path):
    p = good(tmp_path, ("tests.launch_fixtures:forever", "tests.no_such_module:main"))
    msg = error_of(p)
    assert f"{p}:{line_of(p, 'no_such_module')}:" in msg and "not found" in msg


def test_missing_function_reports_line(tmp_path):
    p = good(tmp_path, ("launch_fixtures:forever", "launch_fixtures:nowhere"))
    msg = error_of(p)
    assert f"{p}:{line_of(p, 'nowhere')}:" in msg and "no top-level 'nowhere'" in msg


def test_an_entry_of_the_old_flat_layout_says_where_it_moved(tmp_path):
    p = good(tmp_path, ("tests.launch_fixtures:forever", "rtinfer.node:main"))
    msg = error_of(p)
    assert f"{p}:{line_of(p, 'rtinfer.node')}:" in msg
    assert (
        "'rtinfer.node' moved to 'rtinfer.inference.node': write rtinfer.inference.node:main" in msg
    )


def test_the_launched_child_also_says_where_an_old_entry_moved():
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "rtinfer.launch.child", "--name", "x", "rtinfer.monitor:main"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 127 and "moved to 'rtinfer.monitor.node'" in r.stderr


def test_entry_check_can_be_skipped(tmp_path):
    load(
        good(tmp_path, ("launch_fixtures:forever", "launch_fixtures:nowhere")), check_entries=False
    )


def test_duplicate_endpoint_key_reports_both_lines(tmp_path):
    p = good(tmp_path, ("  obs: ipc\n", "  obs: ipc\n  obs: ipc:///tmp/x\n"))
    msg = error_of(p)
    first = line_of(p, "obs: ipc")
    assert f"{p}:{first + 1}:" in msg and f"first at line {first}" in msg


def test_two_endpoints_with_one_address_are_rejected(tmp_path):
    p = good(tmp_path, ("  obs: ipc\n", "  obs: ipc:///tmp/x\n  obs2: ipc:///tmp/x\n"))
    msg = error_of(p)
    assert f"{p}:{line_of(p, 'obs2')}:" in msg and "same address as 'obs'" in msg


def test_bad_types_report_line_and_expected_type(tmp_path):
    p = good(tmp_path, ("deadline_ms: 80", "deadline_ms: fast"))
    msg = error_of(p)
    assert f"{p}:2:" in msg and "deadline_ms must be a number" in msg
    p = good(tmp_path, ("cpus: [0]", "cpus: [zero]"))
    assert f"{p}:{line_of(p, 'cpus')}:" in error_of(p)
    p = good(tmp_path, ("priority: 10", "priority: 200"))
    assert "1..99" in error_of(p)


def test_unknown_reference_reports_line_and_suggestion(tmp_path):
    p = good(tmp_path, ("${endpoints.obs}", "${endpoints.ob}"))
    msg = error_of(p)
    assert (
        f"{p}:{line_of(p, 'endpoints.ob}')}:" in msg and "unknown reference ${endpoints.ob}" in msg
    )
    assert "did you mean ${endpoints.obs}" in msg


def test_tcp_endpoint_without_curve_keys_is_rejected(tmp_path):
    p = good(tmp_path, (TCP_KEYS, "    curve: required\n"))
    msg = error_of(p)
    assert f"{p}:{line_of(p, 'url: tcp://127.0.0.1:5599') - 1}:" in msg
    assert "requires CURVE" in msg and "server_key" in msg and "allow" in msg
    p = write(tmp_path, GOOD)  # shorthand tcp URL: CURVE is required by default
    assert "requires CURVE" in error_of(p)


def test_all_problems_are_reported_together_in_line_order(tmp_path):
    p = good(tmp_path, ("name: t\n", "name: t\nbogus: 1\n"))
    p.write_text(p.read_text().replace("${node.name}", "${nope}"))
    msg = error_of(p)
    assert "2 problems" in msg and msg.index("bogus") < msg.index("nope")


def test_yaml_syntax_error_has_line(tmp_path):
    p = write(tmp_path, "nodes:\n  - name: [a\n")
    assert f"{p}:" in error_of(p) and "YAML syntax" in error_of(p)


def test_after_orders_start_and_rejects_cycles(tmp_path):
    text = GOOD + (
        "  - name: b\n    entry: tests.launch_fixtures:forever\n    after: [c]\n"
        "  - name: c\n    entry: tests.launch_fixtures:forever\n"
    )
    p = write(
        tmp_path,
        text.replace("5599\n", "5599\n    # no tcp\n").replace(
            "actions: tcp://127.0.0.1:5599", "actions: ipc"
        ),
    )
    assert [n.name for n in load(p).nodes] == ["a", "c", "b"]
    p.write_text(p.read_text() + "    after: [b]\n")
    assert "cycle" in error_of(p)


def test_hosts_select_nodes_and_ipc_cannot_cross_hosts(tmp_path):
    spec = load(ROOT / "launch" / "two_hosts.yaml", check_entries=False)
    with pytest.raises(LaunchError, match="--host"):
        spec.nodes_for(None)
    robot = {n.name for n in spec.nodes_for("robot")}
    gpu = {n.name for n in spec.nodes_for("gpu")}
    assert robot and gpu and not robot & gpu
    with pytest.raises(LaunchError, match="no host"):
        spec.nodes_for("moon")
    text = GOOD.replace("actions: tcp://127.0.0.1:5599", "actions: ipc") + (
        "    host: h1\n  - name: b\n    entry: tests.launch_fixtures:forever\n"
        "    host: h2\n    args: ['${endpoints.obs}']\n"
    )
    assert "ipc works within one host" in error_of(write(tmp_path, text))


@pytest.mark.parametrize("name", ["conveyor_sorting", "jetson_orin", "two_hosts"])
def test_shipped_launch_files_are_valid(name):
    spec = load(ROOT / "launch" / f"{name}.yaml")
    assert {"sim", "policy", "monitor"} <= {n.name for n in spec.nodes}


@pytest.mark.parametrize("name", ["conveyor_sorting", "jetson_orin", "two_hosts"])
def test_shipped_monitor_sections_are_monitor_configs(name):
    from rtinfer.monitor.policy import MonitorConfig

    spec = load(ROOT / "launch" / f"{name}.yaml", check_entries=False)
    MonitorConfig.from_dict(spec.monitor)  # unknown keys raise


def test_bare_curve_off_is_read_as_off_not_as_a_yaml_boolean(tmp_path):
    spec = load(good(tmp_path, ('curve: "off"', "curve: off")))
    assert not spec.endpoints["control"].curve


def test_every_shipped_launch_file_checks_from_the_command_line():
    import subprocess
    import sys

    for f in sorted((ROOT / "launch").glob("*.yaml")):
        out = subprocess.run(
            [sys.executable, "-m", "rtinfer.launch.supervisor", str(f), "--check"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert ": ok (" in out.stdout


# Issue 15, item 6: each of these passed --check (or was accepted) before.


def test_a_typo_in_the_monitor_section_is_refused_with_its_line(tmp_path):
    p = write(
        tmp_path,
        GOOD.replace("actions: tcp://127.0.0.1:5599", "actions: ipc")
        + "monitor:\n  policy_node: a\n  windw: 50\n  window: fifty\n",
    )
    msg = error_of(p)
    assert (
        f"{p}:{line_of(p, 'windw')}: monitor.windw: unknown monitor key 'windw'; "
        "did you mean 'window'?" in msg
    )
    assert f"{p}:{line_of(p, 'fifty')}: monitor.window: monitor.window must be an integer" in msg
    msg = error_of(ROOT / "launch" / "conveyor_expert.yaml", overrides={"monitor.windw": "3"})
    assert "monitor.windw (--set monitor.windw=3): unknown monitor key 'windw'" in msg


def test_set_of_an_unknown_variable_is_refused_with_a_suggestion(tmp_path):
    p = good(tmp_path)
    msg = error_of(p, overrides={"vars.modle": "m2", "rates.policy_hzz": "5"})
    assert (
        f"{p}:{line_of(p, 'vars:')}: vars.modle (--set vars.modle=m2): unknown variable "
        "'modle'; did you mean vars.model?" in msg
    )
    assert "unknown rate 'policy_hzz'; did you mean rates.policy_hz?" in msg


def test_non_positive_deadline_seconds_and_rates_are_refused(tmp_path):
    p = good(tmp_path)
    msg = error_of(p, overrides={"deadline_ms": "-5", "seconds": "0", "rates.policy_hz": "0"})
    assert (
        f"{p}:{line_of(p, 'deadline_ms')}: deadline_ms (--set deadline_ms=-5): "
        "deadline_ms must be > 0 (the end-to-end deadline in ms), got -5" in msg
    )
    assert "seconds must be > 0" in msg and "rates.policy_hz must be > 0" in msg
    p = good(tmp_path, ("    priority: 10\n", "    priority: 10\n    stop_grace_s: -1\n"))
    assert "stop_grace_s must be >= 0" in error_of(p)
    p = good(tmp_path, ("    priority: 10\n", "    priority: 10\n    ready_s: -2\n"))
    assert "ready_s must be >= 0" in error_of(p)
    p = good(tmp_path, ("    priority: 10\n", "    priority: 10\n    ready_s: 20\n"))
    assert load(p).nodes[0].ready_s == 20


def test_a_bad_port_is_one_problem_without_follow_on_reference_errors(tmp_path):
    p = good(tmp_path, ("  obs: ipc\n", "  obs: tcp://127.0.0.1:99999\n"))
    msg = error_of(p)
    assert "(1 problem)" in msg and "unknown reference" not in msg, msg
    assert (
        f"{p}:{line_of(p, '99999')}: endpoints.obs: bad endpoint 'tcp://127.0.0.1:99999': "
        "port 99999 is outside 1..65535" in msg
    )


def test_an_explicit_ipc_path_over_the_sun_path_limit_is_refused(tmp_path):
    long = "ipc:///tmp/" + "x" * 120
    p = good(tmp_path, ("  obs: ipc\n", f"  obs: {long}\n"))
    assert (
        f"{p}:{line_of(p, long)}: endpoints.obs: ipc endpoint 'obs' is over the 107-byte"
        in error_of(p)
    )


def test_check_finds_a_node_module_in_the_working_directory_as_the_run_does(tmp_path):
    import subprocess
    import sys

    (tmp_path / "mynode.py").write_text("def main(argv):\n    print('mynode ran')\n")
    (tmp_path / "l.yaml").write_text(
        "endpoints: {obs: ipc}\nnodes:\n  - name: a\n    entry: mynode:main\n"
    )
    rtinfer = Path(sys.executable).parent / "rtinfer"  # the console script: bin/ is sys.path[0]
    check = subprocess.run(
        [str(rtinfer), "launch", "l.yaml", "--check"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0 and "l.yaml: ok (a)" in check.stdout, check.stderr
    run = subprocess.run(
        [str(rtinfer), "launch", "l.yaml", "--run-dir", "run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and "[a] mynode ran" in run.stdout, run.stdout + run.stderr
    (tmp_path / "mynode.py").unlink()
    check = subprocess.run(
        [str(rtinfer), "launch", "l.yaml", "--check"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        check.returncode == 2
        and "l.yaml:4: nodes[0].entry: module 'mynode' not found" in check.stderr
    )
