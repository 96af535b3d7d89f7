"""Coverage-guided fuzz target (atheris/libFuzzer) for the subscriber-facing decoders.

    python tests/fuzz/atheris_wire.py -max_total_time=10 -print_final_stats=1 CORPUS_DIR

The input length mod 4 picks the path (so corpus messages stay valid as they are): wire.decode; wire.decode_frames (frames split at
b"\\xfe\\xff"); decode then ObsTokens.encode (obs) or ActionTokenizer.decode (tokens, when the waypoint has them).
Anything but WireError is a crash (libFuzzer saves the input). RTINFER_FUZZ_COUNTS=FILE:
{"runs", "rejected", "ok"} is rewritten there every 2000 runs and at the end of input.
"""

import json
import os
import sys

import atheris

with atheris.instrument_imports():
    from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig
    from rtinfer.model.obs_tokens import ObsTokens
    from rtinfer.transport import wire

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from tests.conftest import TINY_SPEC  # noqa: E402

OBS = ObsTokens(TINY_SPEC)
TOK = ActionTokenizer(TokenizerConfig(low=(-0.5, -0.5, 0.0, 0.0), high=(0.5, 0.5, 0.5, 1.0)))
COUNTS = {"runs": 0, "rejected": 0, "ok": 0}
OUT = os.environ.get("RTINFER_FUZZ_COUNTS")


def one(data: bytes) -> None:
    COUNTS["runs"] += 1
    if OUT and COUNTS["runs"] % 2000 == 0:
        with open(OUT, "w") as f:
            json.dump(COUNTS, f)
    mode, rest = len(data) % 4, data
    try:
        if mode == 1:
            env = wire.decode_frames(rest.split(b"\xfe\xff"))
        else:
            env = wire.decode(rest)
        if mode == 2 and env.topic == "obs":
            OBS.encode(env.body)
        if mode == 3 and env.topic == "action_chunk" and "tokens" in env.body:
            TOK.decode(env.body["tokens"])  # v2: a continuous-chunk waypoint has no tokens
    except wire.WireError:
        COUNTS["rejected"] += 1
        return
    COUNTS["ok"] += 1


if __name__ == "__main__":
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()
