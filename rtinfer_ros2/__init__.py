"""The ROS 2 bridge: a ROS 2 robot driven by rtinfer (docs/ros2.md, "Connecting a ROS 2 robot").

To rtinfer a robot driver (bridge.ROS2Robot, a controllers HardwareInterface run by
controllers.run); to ROS 2 a node: observations from sensor_msgs/JointState, setpoints out to
the robot's controller. `python -m rtinfer_ros2 --help`. Needs rclpy (a ROS 2 install, or
`pip install rtinfer[ros2]`); nothing here is imported by the core install.
"""
