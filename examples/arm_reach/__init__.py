"""A second robot: a 4-joint torque-controlled arm in MuJoCo reaching for targets on a table.

scene.py builds its MJCF from the robot config (robot.yaml), sim.py is its
HardwareInterface (the simulator), task.py the target sequence and its scoring, observe.py
the `obs` body, expert.py / expert_node.py the scripted expert, lockstep.py the in-process
closed loop, collect.py / train.py behaviour cloning into models/zoo/arm-reach-bc.
"""
