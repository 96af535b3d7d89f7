"""MuJoCo conveyor-sorting cell: scene, HardwareInterface, gymnasium env, scripted expert.

Import the submodules you need (`cell`, `env`, `expert`, ...); this package imports
nothing heavy on its own so `examples.conveyor_sorting.config` stays cheap.
"""
