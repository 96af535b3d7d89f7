"""rtinfer bench transport: its raw baseline sends the bytes rtinfer sends, and a tiny run
measures all three paths."""

import pytest

from rtinfer.bench import transport
from rtinfer.transport import wire


def test_raw_baseline_is_the_envelope_rtinfer_sends_with_its_publish_stamp_in_place():
    body = transport.sample_body()
    buf, at = transport.raw_message(body)
    sent = 2**44 + 12345  # a monotonic-clock-sized stamp, written as the raw path does
    transport._STAMP.pack_into(buf, at, sent)
    env = wire.decode(bytes(buf), topics=(transport.TOPIC,))
    assert env.stamps == {"capture": transport._BIG_NS, "publish": sent}
    # what Publisher.publish sends for a seq of the same width, byte for byte
    assert bytes(buf) == wire.encode(
        transport.TOPIC,
        body,
        seq=transport.WARMUP,
        src="bench",
        stamps={"capture": transport._BIG_NS, "publish": sent},
    )


@pytest.mark.timeout(120)
def test_a_tiny_run_measures_every_path_on_ipc_and_tcp():
    r = transport.run(messages=20, blocks=1)
    for kind in ("ipc", "tcp"):
        row = r[kind]
        assert row["received"] == {"rtinfer": 20, "wire": 20, "raw": 20}
        assert row["raw_p50_us"] > 0 and row["wire_p50_us"] > 0 and row["rtinfer_p50_us"] > 0
        assert row["added_p50_us"] == pytest.approx(
            row["rtinfer_p50_us"] - row["raw_p50_us"], abs=0.1
        )
        assert row["added_p50_us"] == pytest.approx(
            row["codec_added_p50_us"] + row["bus_added_p50_us"], abs=0.2
        )
