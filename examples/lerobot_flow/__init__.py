"""LeRobot's SmolVLA and Diffusion Policy, packaged as rtinfer flow policies
(docs/policies.md, "SmolVLA" and "Diffusion Policy").

Runs in the LeRobot venv (`make lerobot-env`, scripts/lerobot_env.sh); torch and lerobot are
imported inside functions only.

    python -m examples.lerobot_flow package --checkpoint CKPT --out MODEL [--vlm DIR]
    python -m examples.lerobot_flow tiny smolvla|diffusion --out CKPT   # a small checkpoint
    python -m examples.lerobot_flow parity MODEL --checkpoint CKPT      # against LeRobot
    python -m examples.lerobot_flow bench MODEL                         # latency per level

checkpoint.py loads a checkpoint with LeRobot's classes; smolvla.py and diffusion.py export
each policy's prefix and step graphs; package.py writes the model directory through
models.flow_package and checks it against LeRobot's own chunk; tiny.py builds small
checkpoints from local configurations (no hub).
"""
