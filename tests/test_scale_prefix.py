"""rtinfer.bench.scale_prefix: which observation tokens change, and what a prefix cache could
skip with the layout as it is and with the rarely-changing tokens first."""

import numpy as np

from rtinfer.bench.scale_prefix import changes, main


def _stream(tmp_path, obs, episode=None):
    path = tmp_path / "s.npz"
    n = len(obs)
    np.savez(
        path,
        obs_tokens=np.asarray(obs),
        instruction_tokens=np.zeros((n, 3), np.int32),
        episode=np.zeros(n, np.int32) if episode is None else np.asarray(episode),
    )
    return path


def test_tokens_that_change_last_leave_a_short_prefill_when_moved_behind_static_ones(tmp_path):
    obs = np.zeros((11, 6), np.int32)
    obs[:, 0] = np.arange(11)  # changes every cycle, and sits first
    obs[:, 3] = np.arange(11) // 2  # changes every other cycle
    r = changes(_stream(tmp_path, obs), static_below=0.02)
    assert r["cycles"] == 10 and r["change_rate"][0] == 1.0 and r["change_rate"][3] == 0.5
    assert r["changed_per_cycle"] == 1.5 and r["leading_unchanged"] == 0.0
    # static first: tokens 1, 2, 4, 5 then 0, 3; every cycle prefills token 0 on, plus SEP
    assert r["static_tokens"] == 4 and r["static_first_prefill"] == 3.0
    assert r["static_first_fraction"] == 3.0 / 7


def test_a_new_episode_is_not_a_change(tmp_path):
    obs = np.zeros((4, 3), np.int32)
    obs[2:] = 9  # the jump is between episodes 0 and 1
    r = changes(_stream(tmp_path, obs, episode=[0, 0, 1, 1]))
    assert r["cycles"] == 2 and r["changed_per_cycle"] == 0.0
    assert r["static_first_prefill"] == 1.0  # only SEP


def test_the_shipped_stream_runs_from_the_command_line(capsys):
    assert main(["--json"]) == 0
    assert '"changed_per_cycle"' in capsys.readouterr().out
