"""Action tokenizer: round trip within half a bin, clipping counted, bad ids are WireErrors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig
from rtinfer.transport.wire import WireError

CFG = TokenizerConfig(low=(-0.5, -0.4, 0.0, 0.0), high=(0.5, 0.4, 0.3, 1.0))


def _in_range_actions():
    lo, hi = np.array(CFG.low), np.array(CFG.high)
    unit = arrays(
        np.float64, st.tuples(st.integers(1, 8), st.just(CFG.dim)), elements=st.floats(0.0, 1.0)
    )
    return unit.map(lambda u: lo + u * (hi - lo))


@settings(max_examples=200, deadline=None)
@given(_in_range_actions())
def test_decode_of_encode_is_within_half_a_bin(a):
    tok = ActionTokenizer(CFG)
    back = tok.decode(tok.encode(a))
    # float32 output: allow its rounding on top of the half bin
    assert np.all(np.abs(back - a) <= tok.bin_width / 2 + 1e-6)
    assert tok.clipped == 0


@settings(max_examples=100, deadline=None)
@given(
    arrays(
        np.int64,
        st.tuples(st.integers(1, 6), st.just(CFG.dim)),
        elements=st.integers(0, CFG.bins - 1),
    )
)
def test_encode_of_decode_is_identity_for_valid_tokens(t):
    tok = ActionTokenizer(CFG)
    assert np.array_equal(tok.encode(tok.decode(t)), t)


def test_out_of_range_values_clip_to_end_bins_and_are_counted():
    tok = ActionTokenizer(CFG)
    t = tok.encode(np.array([[-9.0, 0.0, 0.3, 1.5], [0.5, 9.0, -1.0, 0.5]]))
    assert t[0, 0] == 0 and t[0, 3] == CFG.bins - 1 and t[1, 1] == CFG.bins - 1 and t[1, 2] == 0
    assert t[0, 2] == CFG.bins - 1 and t[1, 0] == CFG.bins - 1  # exactly `high` is in range
    assert tok.clipped == 4
    assert t.dtype == np.int32


def test_token_ids_outside_the_range_raise_wire_error():
    tok = ActionTokenizer(CFG)
    for bad in ([0, 0, 0, 256], [-1, 0, 0, 0]):
        with pytest.raises(WireError):
            tok.decode(np.array(bad))


def test_wrong_shape_or_float_tokens_raise_wire_error():
    tok = ActionTokenizer(CFG)
    with pytest.raises(WireError):
        tok.decode(np.zeros(3, np.int32))
    with pytest.raises(WireError):
        tok.decode(np.zeros(4, np.float32))


def test_non_finite_values_cannot_be_tokenized():
    with pytest.raises(ValueError):
        ActionTokenizer(CFG).encode(np.array([np.nan, 0, 0, 0]))


def test_suction_above_one_half_decodes_above_one_half():
    tok = ActionTokenizer(CFG)
    on = tok.decode(tok.encode(np.array([0.0, 0.0, 0.1, 0.51])))
    off = tok.decode(tok.encode(np.array([0.0, 0.0, 0.1, 0.49])))
    assert on[3] > 0.5 > off[3]


def test_hash_is_stable_and_changes_with_content():
    same = TokenizerConfig(low=(-0.5, -0.4, 0, 0), high=(0.5, 0.4, 0.3, 1))
    assert same.hash == CFG.hash and len(CFG.hash) == 16
    assert TokenizerConfig(low=CFG.low, high=CFG.high, bins=128).hash != CFG.hash
    assert TokenizerConfig(low=CFG.low, high=CFG.high, period_ns=40_000_000).hash != CFG.hash
    # pinned: the hash is a wire contract between model and robot; changing it is a break
    assert (
        TokenizerConfig(low=(0, 0, 0, 0), high=(1, 1, 1, 1)).hash
        == TokenizerConfig.from_dict({"low": [0, 0, 0, 0], "high": [1, 1, 1, 1]}).hash
    )


def test_config_round_trips_through_a_file_and_detects_edits(tmp_path):
    path = tmp_path / "tokenizer.json"
    CFG.save(path)
    assert TokenizerConfig.load(path) == CFG
    text = path.read_text().replace("256", "255")
    path.write_text(text)
    with pytest.raises(ValueError, match="hash"):
        TokenizerConfig.load(path)


def test_invalid_configs_are_refused():
    with pytest.raises(ValueError):
        TokenizerConfig(low=(0, 0, 0, 0), high=(1, 1, 0, 1))
    with pytest.raises(ValueError):
        TokenizerConfig(low=(0, 0, 0), high=(1, 1, 1))
    with pytest.raises(ValueError):
        TokenizerConfig.from_dict({"low": [0] * 4, "high": [1] * 4, "bins_": 3})
