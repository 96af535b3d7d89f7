"""ONNX export: graph set and manifest, I/O contract, ORT-vs-torch parity, fp16, checkpoints."""

import json

import numpy as np
import onnx
import pytest
import torch

from models import checkpoint, sparsity
from models.config import PolicyConfig, Vocab
from models.export import export_all, export_graph
from models.parity import ort_session, step_parity
from models.policy import Policy
from rtinfer.model.manifest import MANIFEST, read_manifest

torch.set_num_threads(2)
VOCAB = Vocab(n_instr=4, n_obs_bins=8, n_action_bins=32)
CFG = PolicyConfig(vocab_size=VOCAB.size, n_layer=3, n_head=2, n_embd=32, max_ctx=24, exits=(1, 2))
PREFIX, K_VERIFY = 6, 4


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    model = Policy(CFG)
    sparsity.prepare(model)
    sparsity.fold(model)
    out = tmp_path_factory.mktemp("zoo")
    parity = export_all(model, CFG, out, k_verify=K_VERIFY, prefix_len=PREFIX, vocab=VOCAB)
    return model, out, parity


def test_every_selectable_graph_is_written_and_listed(exported):
    _, out, _ = exported
    man = read_manifest(out)
    got = {(g["dtype"], g["depth"], g["k"]): g["roles"] for g in man["graphs"]}
    for dtype in ("float32", "float16"):
        assert got[(dtype, 3, 1)] == ["decode"]
        assert got[(dtype, 3, K_VERIFY)] == ["verify"]
        assert got[(dtype, 3, PREFIX)] == ["prefill"]
        assert got[(dtype, 1, 1)] == got[(dtype, 2, 1)] == ["draft"]
    assert len(got) == 10
    assert all((out / g["file"]).exists() for g in man["graphs"])
    assert man["opset"] >= 17 and man["vocab"]["action_start"] == VOCAB.action_start
    assert man["config"] == CFG.to_dict()


def test_graphs_have_the_documented_io_names_dtypes_and_static_shapes(exported):
    _, out, _ = exported
    np_type = {"int64": "tensor(int64)", "float32": "tensor(float)", "float16": "tensor(float16)"}
    for g in read_manifest(out)["graphs"]:
        proto = onnx.load(str(out / g["file"]))
        onnx.checker.check_model(proto, full_check=True)
        assert max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) >= 17
        sess = ort_session(out / g["file"])
        for decl, actual in ((g["inputs"], sess.get_inputs()), (g["outputs"], sess.get_outputs())):
            assert [d["name"] for d in decl] == [a.name for a in actual]
            for d, a in zip(decl, actual):
                assert list(a.shape) == d["shape"] and a.type == np_type[d["dtype"]]
    first = read_manifest(out)["graphs"][0]
    assert first["inputs"][2]["shape"] == list(CFG.kv_shape(1))
    assert first["outputs"][0]["shape"] == [1, first["k"], CFG.vocab_size]


def test_ort_matches_torch_on_every_fp32_graph(exported):
    _, _, parity = exported
    fp32 = {n: p for n, p in parity["graphs"].items() if not n.startswith("fp16/")}
    assert len(fp32) == 5
    for p in fp32.values():
        assert p["max_abs_logits"] < 1e-4 and p["max_abs_kv"] < 1e-4 and p["argmax_equal"]


def test_ort_greedy_decode_is_token_identical_to_torch(exported):
    greedy = exported[2]["greedy_float32"]
    assert greedy["match"] and len(greedy["tokens_ort"]) > 1


def test_fp16_graphs_load_and_give_close_logits(exported):
    for name, p in exported[2]["graphs"].items():
        if name.startswith("fp16/") and "error" not in p:  # ORT CPU may lack fp16 kernels
            assert p["max_abs_logits"] < 1e-2


def test_block_weights_are_24_in_every_exported_graph(exported):
    assert all(p["weights_24"] for p in exported[2]["graphs"].values())


def test_shallow_exit_graph_passes_deeper_kv_through(exported):
    _, out, _ = exported
    sess = ort_session(out / "step_d1_k1.onnx")
    kv = np.random.default_rng(0).standard_normal(CFG.kv_shape(1)).astype(np.float32)
    _, kv_out = sess.run(None, {"tokens": np.array([[5]]), "start_pos": np.array([3]), "kv": kv})
    assert np.array_equal(kv_out[1:], kv[1:])
    assert not np.array_equal(kv_out[0, :, :, :, 3], kv[0, :, :, :, 3])
    assert np.array_equal(np.delete(kv_out[0], 3, axis=3), np.delete(kv[0], 3, axis=3))


def test_export_from_a_loaded_checkpoint(exported, tmp_path):
    model, _, _ = exported
    checkpoint.save(tmp_path / "policy", model, VOCAB)
    ck = checkpoint.load(tmp_path / "policy")
    path = export_graph(ck.model, CFG.n_layer, 2, tmp_path / "g.onnx")
    p = step_parity(model, path, CFG.n_layer, 2, seed=3)
    assert p["max_abs_logits"] < 1e-4 and p["argmax_equal"]


def test_manifest_is_plain_json(exported):
    _, out, _ = exported
    assert json.loads((out / MANIFEST).read_text())["format"] == "rtinfer-graphs"


def test_ort_iobinding_kv_out_onto_kv_itself_is_exact(exported):
    """Pins the in-place binding the ORT backend may use (ping-pong is the safe fallback)."""
    import onnxruntime as ort

    _, out, _ = exported
    inplace, plain = ort_session(out / "step_d3_k1.onnx"), ort_session(out / "step_d3_k1.onnx")
    kv_buf = ort.OrtValue.ortvalue_from_numpy(np.zeros(CFG.kv_shape(1), np.float32))
    kv, rng = np.zeros(CFG.kv_shape(1), np.float32), np.random.default_rng(1)
    for pos in range(CFG.max_ctx):
        feed = {"tokens": rng.integers(0, CFG.vocab_size, (1, 1)), "start_pos": np.array([pos])}
        bind = inplace.io_binding()
        bind.bind_cpu_input("tokens", feed["tokens"])
        bind.bind_cpu_input("start_pos", feed["start_pos"])
        bind.bind_ortvalue_input("kv", kv_buf)
        bind.bind_output("logits")
        bind.bind_ortvalue_output("kv_out", kv_buf)
        inplace.run_with_iobinding(bind)
        logits, kv = plain.run(["logits", "kv_out"], {**feed, "kv": kv})
        assert np.array_equal(bind.copy_outputs_to_cpu()[0], logits)
    assert np.array_equal(kv_buf.numpy(), kv)
