"""Recording a run as MCAP with ROS 2 message schemas, for Foxglove, Rerun and any ROS 2
tool: the recorder node (rtinfer.record.node), what it writes (rtinfer.record.messages) and
reading it back for `rtinfer report run.mcap` (rtinfer.record.read). Needs the `record`
extra (mcap, mcap-ros2-support); nothing of it is on the robot's or the node's path.
"""
