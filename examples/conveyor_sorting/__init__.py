"""MuJoCo conveyor-sorting cell: scene, HardwareInterface, gymnasium env, scripted expert.

Import the submodules you need (`cell`, `env`, `expert`, ...); this package imports
nothing heavy on its own so `examples.conveyor_sorting.config` stays cheap.
"""

import os

# MuJoCo picks its GL backend once, when it loads: a headless host renders the cell's camera
# through EGL (a GPU's, or Mesa's on a CPU host) unless MUJOCO_GL says otherwise.
os.environ.setdefault("MUJOCO_GL", "egl")
