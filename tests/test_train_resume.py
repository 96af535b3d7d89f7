"""models.train: model size options, distillation, and resumable training (a run stopped by
SIGTERM and resumed ends with the same weights, bit for bit, as one never stopped)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from models import checkpoint, train
from models.data import load

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "models" / "zoo" / "conveyor-v1"
TINY = [
    "--n-layer",
    "2",
    "--n-embd",
    "16",
    "--n-head",
    "2",
    "--exits",
    "1",
    "--batch",
    "8",
    "--threads",
    "1",
    "--sparse-steps",
    "0",
    "--max-ctx",
    "64",
]


@pytest.fixture(scope="module")
def demos_npz(tmp_path_factory) -> Path:
    """A small dataset in the conveyor cell's token layout (random tokens: only the
    training mechanics are under test)."""
    rng = np.random.default_rng(0)
    tok = json.loads((ZOO / "tokenizer.json").read_text())
    tok.pop("hash", None)
    spec = (ZOO / "obs_tokens.json").read_text()
    n, h, d = 64, tok["horizon"], len(tok["low"])
    path = tmp_path_factory.mktemp("demos") / "demos.npz"
    np.savez(
        path,
        instruction_tokens=rng.integers(0, 3, (n, 3)),
        obs_tokens=rng.integers(0, 256, (n, 27)),
        action_tokens=rng.integers(0, 256, (n, h, d)),
        tokenizer_config=json.dumps(tok),
        obs_tokens_spec=spec,
    )
    return path


def _weights(path) -> dict[str, torch.Tensor]:
    return load_file(str(checkpoint.paths(path)[0]))


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _fit(demos, state, steps=8, on_step=None, teacher=None):
    torch.set_num_threads(1)  # as the CLI's --threads 1: two threads only spin on a busy host
    torch.manual_seed(0)
    model = train.Policy(
        train.PolicyConfig.demo(
            demos.vocab.size,
            max_ctx=64,
            n_layer=2,
            n_embd=16,
            n_head=2,
            exits=(1,),
            layer_dropout=0.1,
        )
    )
    train.fit(
        model,
        demos,
        steps=steps,
        batch=8,
        lr=1e-3,
        seed=3,
        desc="t",
        state=state,
        on_step=on_step,
        teacher=teacher,
    )
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_fit_stopped_by_sigterm_and_resumed_equals_an_uninterrupted_fit(demos_npz, tmp_path):
    demos = load(demos_npz)
    whole = _fit(demos, None)
    state = train.Resumable(tmp_path / "state.safetensors", {"run": 1}, every=0)
    calls = []

    def kill_at_3():
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(train.Interrupted) as stopped:
        _fit(demos, state, on_step=kill_at_3)
    assert stopped.value.step == 3 and stopped.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is put back
    resumed = _fit(demos, train.Resumable(state.path, {"run": 1}, resume=True))
    assert _same(resumed, whole)
    # without the resume the weights differ (the test can fail)
    assert not _same(_fit(demos, None, steps=5), whole)


def test_a_state_from_another_run_is_refused(demos_npz, tmp_path):
    demos = load(demos_npz)
    state = train.Resumable(tmp_path / "state.safetensors", {"lr": 1}, every=2)
    _fit(demos, state, steps=2)
    with pytest.raises(ValueError, match="different run"):
        _fit(demos, train.Resumable(state.path, {"lr": 2}, resume=True))


@pytest.mark.slow  # 7-25 s on 2 cores: `make test-slow` runs it
def test_cli_sigterm_saves_then_resume_gives_the_uninterrupted_weights(demos_npz, tmp_path):
    args = ["--data", str(demos_npz), "--steps", "60", "--checkpoint-every", "1", *TINY]
    assert train.main([*args, "--out", str(tmp_path / "whole")]) == 0
    assert not (tmp_path / "whole" / train.STATE).exists()  # a finished run leaves none
    out = tmp_path / "stopped"
    proc = subprocess.Popen(
        [sys.executable, "-m", "models.train", *args, "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (out / train.STATE).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, text
    assert "--resume" in text and not (out / "policy.safetensors").exists()
    with pytest.raises(SystemExit, match="--resume"):  # a second plain start is refused
        train.main([*args, "--out", str(out)])
    assert train.main([*args, "--out", str(out), "--resume"]) == 0
    assert _same(_weights(out / "policy"), _weights(tmp_path / "whole" / "policy"))


def test_size_options_and_label_distillation(demos_npz, tmp_path):
    args = ["--data", str(demos_npz), "--steps", "3", *TINY]
    assert train.main([*args, "--out", str(tmp_path / "teacher")]) == 0
    assert (
        train.main(
            [
                *args,
                "--out",
                str(tmp_path / "student"),
                "--n-embd",
                "24",
                "--teacher",
                str(tmp_path / "teacher" / "policy"),
            ]
        )
        == 0
    )
    ck = checkpoint.load(tmp_path / "student" / "policy")
    assert (ck.cfg.n_layer, ck.cfg.n_embd, ck.cfg.exits) == (2, 24, (1,))
    assert ck.meta["distill"] == "labels" and set(ck.meta["val_teacher_agreement"]) == {"1", "2"}
    # a teacher agrees with itself everywhere; a different model does not
    teacher = checkpoint.load(tmp_path / "teacher" / "policy").model
    demos = load(demos_npz)
    assert train.teacher_agreement(teacher, teacher, demos)[2] == 1.0
    assert train.teacher_agreement(ck.model, teacher, demos)[2] < 1.0
