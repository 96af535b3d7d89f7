"""models/flow_train.py: flow matching with training-time RTC, one-step distillation, export."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from models.flow_train import (  # noqa: E402
    FlowConfig,
    FlowNet,
    distill_one_step,
    euler_onnx,
    export_step,
    flow_loss,
    integrate,
    ort_session,
    train_flow,
)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny(max_committed=3) -> FlowNet:
    torch.manual_seed(0)
    return FlowNet(
        FlowConfig(
            cond_dim=6,
            horizon=8,
            action_dim=3,
            prefix_tokens=2,
            width=32,
            layers=1,
            heads=2,
            ff=64,
            enc_hidden=32,
            max_committed=max_committed,
        )
    )


def tiny_data(n=256):
    g = torch.Generator().manual_seed(1)
    cond = torch.randn(n, 6, generator=g)
    ramp = torch.linspace(0.2, 1.0, 8)[None, :, None]
    y = torch.tanh(cond[:, None, :3]) * ramp  # a smooth chunk per observation
    return cond, y


def eval_loss(net, cond, y) -> float:
    with torch.no_grad():
        return float(
            np.mean(
                [flow_loss(net, cond, y, torch.Generator().manual_seed(s)).item() for s in range(4)]
            )
        )


def test_training_steps_reduce_the_flow_loss():
    net, (cond, y) = tiny(), tiny_data()
    before = eval_loss(net, cond, y)
    hist = train_flow(net, cond, y, steps=40, batch=64, lr=3e-3, log_every=20, log=lambda s: None)
    after = eval_loss(net, cond, y)
    assert len(hist) == 2 and after < 0.5 * before


def test_committed_prefix_comes_back_exactly():
    net, (cond, _) = tiny(), tiny_data(4)
    committed = torch.randn(4, 8, 3)
    n = torch.tensor([0, 1, 2, 3])
    with torch.no_grad():
        pre = net.encode(cond)
        anchor = torch.randn(4, 8, 3)
        x = integrate(net, pre, anchor, torch.randn(4, 8, 3), 4, committed=committed, n_committed=n)
    for b in range(4):
        assert torch.equal(x[b, : n[b]], committed[b, : n[b]])
        assert not torch.equal(x[b, n[b] :], committed[b, n[b] :])


def test_step_graph_onnx_matches_torch(tmp_path):
    net, (cond, _) = tiny(), tiny_data(1)
    path = tmp_path / "step.onnx"
    export_step(net, path)
    sess = ort_session(path)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        pre = net.encode(cond)
        anchor = torch.randn(1, 8, 3, generator=g)
        noise = torch.randn(1, 8, 3, generator=g)
        ref = integrate(net, pre, anchor, noise, 10)
        committed = torch.randn(1, 8, 3, generator=g)
        ref_c = integrate(
            net, pre, anchor, noise, 10, committed=committed, n_committed=torch.tensor([3])
        )
    feeds = {"obs_emb": pre.numpy(), "anchor": anchor.numpy()}
    got = euler_onnx(sess, feeds, noise.numpy(), 10)
    got_c = euler_onnx(sess, feeds, noise.numpy(), 10, committed=committed.numpy(), n_committed=3)
    assert np.abs(got - ref.numpy()).max() <= 1e-4
    assert np.abs(got_c - ref_c.numpy()).max() <= 1e-4
    assert np.array_equal(got_c[:, :3], committed.numpy()[:, :3])


def test_one_step_distillation_moves_toward_the_teacher():
    teacher, (cond, y) = tiny(), tiny_data()
    train_flow(teacher, cond, y, steps=60, batch=64, lr=3e-3, log_every=100, log=lambda s: None)
    noise = torch.randn(64, 8, 3, generator=torch.Generator().manual_seed(3))
    zero = torch.zeros_like(noise)
    with torch.no_grad():
        target = integrate(teacher, teacher.encode(cond[:64]), zero, noise, 4)
        gap0 = (
            (integrate(teacher, teacher.encode(cond[:64]), zero, noise, 1) - target).pow(2).mean()
        )
    student, hist = distill_one_step(
        teacher,
        cond,
        steps=30,
        batch=32,
        lr=2e-3,
        log_every=30,
        teacher_steps=4,
        student_prefix="teacher",
        log=lambda s: None,
    )
    with torch.no_grad():
        gap1 = (
            (integrate(student, teacher.encode(cond[:64]), zero, noise, 1) - target).pow(2).mean()
        )
    assert len(hist) == 1 and gap1 < gap0


def cell_rows(n=32, seed=0) -> dict:
    """Observation rows shaped like the conveyor cell's (random values) with 16-waypoint chunks."""
    rng = np.random.default_rng(seed)
    objects = np.zeros((n, 6, 4), np.float32)
    objects[..., 0] = rng.integers(0, 3, (n, 6))
    objects[..., 1:3] = rng.uniform(-0.5, 0.5, (n, 6, 2))
    objects[..., 3] = rng.random((n, 6)) < 0.7
    gantry = rng.uniform(-0.3, 0.5, (n, 8)).astype(np.float32)
    actions = gantry[:, None, :4] + rng.normal(0, 0.05, (n, 16, 4)).astype(np.float32)
    actions[..., 3] = rng.random((n, 16)) < 0.5
    return {
        "objects": objects,
        "gantry": gantry,
        "held": rng.integers(-1, 3, (n, 1)).astype(np.float32),
        "instruction_tokens": np.int32([rng.permutation(3) for _ in range(n)]),
        "action_values": actions.astype(np.float32),
    }


def test_conveyor_flow_package_serves_what_torch_integrates(tmp_path):
    """The packaged directory (prefix with the cell's features, anchored step graph, affine)
    through the node's FlowRunner equals torch's integration, committed prefix included."""
    pytest.importorskip("mujoco")
    from examples.conveyor_sorting import flow_policy as fp
    from models.flow_train import save
    from rtinfer.inference.flow_runner import FlowRunner
    from rtinfer.model.flow_model import FlowModelDir

    rows = cell_rows()
    np.savez(tmp_path / "rows.npz", **rows)
    data = fp.load_data([tmp_path / "rows.npz"])[0]
    stats = fp.stats_of(data)
    torch.manual_seed(0)
    net = FlowNet(
        FlowConfig(
            cond_dim=72,
            horizon=16,
            action_dim=4,
            prefix_tokens=2,
            width=32,
            layers=1,
            heads=2,
            ff=64,
            enc_hidden=32,
            max_committed=8,
        )
    )
    save(net, tmp_path / "net.pt", {"stats": stats})
    card = fp.package(
        tmp_path / "net.pt", tmp_path / "dir", tmp_path / "net.pt", [tmp_path / "rows.npz"]
    )
    assert card["max_committed"] == 8 and card["parity"]["max_abs_diff"]["chunk_10"] <= 1e-4
    assert card["parity"]["max_abs_diff"]["committed_change"] == 0.0
    runner = FlowRunner(FlowModelDir.load(tmp_path / "dir"), clip=False)
    feed = {k: np.ascontiguousarray(data[k][3:4]) for k in fp.OBS_KEYS}
    noise = np.random.default_rng(1).standard_normal((1, 16, 4)).astype(np.float32)
    scale, offset = (torch.tensor(stats[k]) for k in ("act_scale", "act_offset"))
    with torch.no_grad():
        emb, anchor = fp.prefix_module(net, stats)(*(torch.from_numpy(v) for v in feed.values()))
        want = integrate(net, emb, anchor, torch.from_numpy(noise), 10) * scale + offset
    got = runner.run(feed, 0, noise=noise)
    assert np.abs(got - want[0].numpy()).max() <= 1e-4
    committed = data["actions"][3, :5]
    got_c = runner.run(feed, 0, noise=noise, committed=committed)
    assert np.abs(got_c[:5] - committed).max() <= 1e-5
