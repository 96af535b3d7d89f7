"""The content hash of docs/policies.md ("The content hash"), computed from the page's
rules alone with struct and hashlib (no msgpack): it must equal the reference
implementation's, and the bytes and hash the page quotes for the conveyor tokenizer."""

import hashlib
import json
import re
import struct
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rtinfer.model.action_spec import ActionSpec, canonical_bytes, content_hash
from rtinfer.model.action_tokens import TokenizerConfig

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "policies.md").read_text()


def by_the_page(v) -> bytes:
    """The page's canonical msgpack, written out by hand."""
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: k.encode())
        n = len(keys)
        head = bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n)
        return head + b"".join(by_the_page(k) + by_the_page(v[k]) for k in keys)
    if isinstance(v, list):
        n = len(v)
        head = bytes([0x90 | n]) if n < 16 else b"\xdc" + struct.pack(">H", n)
        return head + b"".join(by_the_page(x) for x in v)
    if isinstance(v, str):
        b = v.encode()
        assert len(b) < 256
        return (bytes([0xA0 | len(b)]) if len(b) < 32 else b"\xd9" + bytes([len(b)])) + b
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    assert isinstance(v, int) and v >= 0
    for limit, code, fmt in (
        (1 << 7, None, None),
        (1 << 8, 0xCC, ">B"),
        (1 << 16, 0xCD, ">H"),
        (1 << 32, 0xCE, ">I"),
        (1 << 64, 0xCF, ">Q"),
    ):
        if v < limit:
            return bytes([v]) if code is None else bytes([code]) + struct.pack(fmt, v)
    raise AssertionError(v)


def test_the_pages_bytes_and_hash_for_the_conveyor_tokenizer():
    doc = json.loads((ROOT / "models/zoo/conveyor-v1/tokenizer.json").read_text())
    quoted = doc.pop("hash")
    block = re.search(r"the bytes begin\n\n((?:    [0-9a-f ]+\n)+)", DOC).group(1)
    head = bytes.fromhex(block.replace("\n", " "))
    page_hash = re.search(r"and the hash\s+is `([0-9a-f]{16})`", DOC).group(1)
    mine = by_the_page(doc)
    assert mine.startswith(head) and mine == canonical_bytes(doc)
    assert hashlib.sha256(mine).hexdigest()[:16] == page_hash == quoted
    assert TokenizerConfig.from_dict(doc).hash == page_hash


names = st.lists(
    st.text("abcdefghij_", min_size=1, max_size=40), min_size=1, max_size=20, unique=True
)


@given(names, st.integers(1, 1 << 40), st.integers(1, 1 << 62), st.integers(0, 255))
def test_any_action_spec_hashes_as_the_page_says(ns, horizon, period, start):
    lows = [float(-i) - 0.1 for i in range(len(ns))]
    spec = ActionSpec(ns, ["m"] * len(ns), lows, [1.0] * len(ns), horizon, period, start)
    assert spec.hash == hashlib.sha256(by_the_page(spec.to_dict())).hexdigest()[:16]
    assert spec.hash == content_hash(spec.to_dict())
