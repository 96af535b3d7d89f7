"""models.flow_recover reads conveyor-flow's weights back from its graphs: the torch FlowNet
integrates to the chunk the node's FlowRunner serves, from the same noise."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from examples.conveyor_sorting.flow_policy import prefix_module  # noqa: E402
from models.flow_recover import recover  # noqa: E402
from models.flow_train import integrate  # noqa: E402
from rtinfer.inference.flow_runner import FlowRunner  # noqa: E402
from rtinfer.model.flow_model import FlowModelDir  # noqa: E402

MODEL = "models/zoo/conveyor-flow"


def test_the_recovered_net_integrates_to_the_served_chunk():
    net, stats = recover(MODEL)
    runner = FlowRunner(FlowModelDir.load(MODEL))
    rng = np.random.default_rng(0)
    feeds = {
        "objects": rng.uniform(-0.3, 0.3, (1, 6, 4)).astype(np.float32),
        "gantry": rng.uniform(-0.2, 0.4, (1, 8)).astype(np.float32),
        "held": np.full((1, 1), -1.0, np.float32),
        "instruction": np.array([[2, 0, 1]], np.int32),
    }
    noise = rng.standard_normal((1, 16, 4)).astype(np.float32)
    served = runner.run(feeds, 0, noise=noise).copy()
    with torch.no_grad():
        emb, anchor = prefix_module(net, stats)(*(torch.from_numpy(feeds[k]) for k in feeds))
        y = integrate(net, emb, anchor, torch.from_numpy(noise), 10).numpy()[0]
    out = runner.out
    assert np.abs(np.clip(y * out.scale + out.offset, out.low, out.high) - served).max() < 1e-4
