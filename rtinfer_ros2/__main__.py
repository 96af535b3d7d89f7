"""The ROS 2 bridge as a process: controllers.run with the bridge as its hardware.

    python -m rtinfer_ros2 --config ROBOT.yaml --model POLICY --obs ENDPOINT --actions ENDPOINT
        [--policy-hz HZ] [--seconds S] [--report PATH] ...   (controllers.run's options)

ROBOT.yaml is a robot file (docs/robots.md) whose `hardware:` configures the bridge
(rtinfer_ros2.config.ROS2RobotConfig: topics, joint names, QoS, the controller type, the
observation); rtinfer_ros2:arm.yaml is the worked example (docs/ros2.md). Without ROS 2
installed it says how to install it, in one line, and exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from rtinfer.realtime.complaints import say

HARDWARE = "rtinfer_ros2.bridge:ROS2Robot"


def main(argv: list[str] | None = None) -> int:
    from controllers import run
    from rtinfer_ros2.bridge import import_rclpy

    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(__doc__)
    else:
        try:
            import_rclpy()
        except ValueError as e:
            say("rtinfer_ros2", str(e))
            return 2
    if "--hardware" not in argv:
        argv = ["--hardware", HARDWARE] + argv
    return run.main(listen_to_the_run(argv))


def listen_to_the_run(argv: list[str]) -> list[str]:
    """argv with `--set listen=[...]` first: the run's endpoints, for the bridge's
    /diagnostics (a `--set listen=...` of the caller's comes later, and wins)."""
    ap = argparse.ArgumentParser(add_help=False)
    for option in ("--obs", "--actions", "--control"):
        ap.add_argument(option)
    known, _ = ap.parse_known_args(argv)
    listen = [e for e in (known.obs, known.actions, known.control) if e]
    return ["--set", f"listen={json.dumps(listen)}"] + argv if listen else argv


if __name__ == "__main__":
    sys.exit(main())
