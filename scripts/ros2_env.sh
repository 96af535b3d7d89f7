#!/usr/bin/env bash
# Build the ROS 2 venv used by the ROS 2 bridge's tests (rtinfer_ros2/, tests/test_ros2_*.py).
#
#   scripts/ros2_env.sh [VENV]        # or ROS2_VENV=path scripts/ros2_env.sh
#
# Default VENV: .venv-ros2 in the repo root. ROS 2 comes from PyPI as the ros-* wheels
# (Kilted, rclpy 9.1.2 with Fast DDS; ~420 MB with onnx and Pillow): no apt, no /opt/ros.
# `empy` (a message generator's build dependency) exists only as a source package, hence
# --prefer-binary.
# The wheels install a .pth (ros-wheels-bootstrapper) that restarts Python once at start-up
# to set LD_LIBRARY_PATH; there is no `ros2` command line in them.
# Then this repo, editable and --no-deps, with the robot side's dependencies and the
# inference node's runtime (the end-to-end test runs a real inference node from this venv).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-${ROS2_VENV:-$ROOT/.venv-ros2}}"
PY="${PY:-python3}"

ROS2_PINS=('ros-rclpy[fastrtps]==9.1.2' ros-sensor-msgs==5.5.1 ros-trajectory-msgs==5.5.1
           ros-std-msgs==5.5.1 ros-diagnostic-msgs==5.5.1)
# rtinfer's robot side and its inference node (the same versions as the main .venv); Pillow
# decodes jpeg camera topics; onnx builds the camera test's tiny policy.
RTINFER_DEPS=(
  numpy==2.4.6 pyzmq==27.3.0 msgpack==1.2.4 PyYAML==6.0.4 hdrhistogram==0.10.8
  onnxruntime==1.32.0 pytest==9.2.0 pytest-timeout==2.4.0 pillow==13.0.0 onnx==1.23.2
)

t0=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
"${PIP[@]}" --prefer-binary "${ROS2_PINS[@]}" "${RTINFER_DEPS[@]}"
"${PIP[@]}" --no-deps -e "$ROOT"
"$VENV/bin/python" "$ROOT/scripts/checkout_pth.py" >/dev/null  # examples, peers: checkout only
"$VENV/bin/python" - <<'PY'
import rclpy, sensor_msgs.msg, trajectory_msgs.msg, std_msgs.msg, diagnostic_msgs.msg  # noqa: F401
import PIL, onnx  # noqa: F401
import rtinfer_ros2, controllers.run, rtinfer.inference.node  # noqa: F401
from importlib.metadata import version
print("ros2-env ok: rclpy", version("ros-rclpy"))
PY
touch "$VENV/.installed-ros2"
echo "ros2-env: $VENV built in $(( $(date +%s) - t0 )) s"
