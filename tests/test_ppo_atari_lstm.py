"""Tests of ppo_atari_lstm.py: the 5 LSTM details. The Atari wrappers it shares with ppo_atari.py are
tested in test_ppo_atari.py; here only that it uses one frame.
"""

import numpy as np
import pytest
import torch

import ppo_atari_lstm as lstm_mod
from test_ppo import assert_resumes_with_fresh_episodes
from test_ppo_atari import assert_channels_last_is_the_same_math


def tiny(**kw):
    base = dict(cuda=False, env_id="AsterixNoFrameskip-v4", num_envs=2, num_steps=16, num_minibatches=2,
                update_epochs=1, total_timesteps=2 * 16 * 3)
    base.update(kw)
    return lstm_mod.Args(**base)


def test_lstm_init_orthogonal_std_one_zero_bias_and_zero_initial_state():
    torch.manual_seed(0)
    agent = lstm_mod.Agent(1, 4)
    params = dict(agent.lstm.named_parameters())
    assert set(params) == {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}
    for name in ("weight_ih_l0", "weight_hh_l0"):
        np.testing.assert_allclose(torch.linalg.svdvals(params[name].detach()).numpy(), 1.0, rtol=1e-4)
    assert torch.all(params["bias_ih_l0"] == 0) and torch.all(params["bias_hh_l0"] == 0)
    assert agent.actor.in_features == 128 and agent.network[0].in_channels == 1  # frame stack 1
    h, c = agent.initial_state(3)
    assert h.shape == c.shape == (1, 3, 128) and not h.any() and not c.any()


def test_channels_last_is_the_same_math():
    T, N = 3, 2
    x = torch.randint(0, 256, (T * N, 1, 84, 84), dtype=torch.uint8)
    starts = torch.tensor([0, 0, 1, 0, 0, 1], dtype=torch.float32)

    def forward(agent, x):
        logits, value, (h, c) = agent.get_logits_and_value(x, agent.initial_state(N), starts)
        return logits, value, h, c

    assert_channels_last_is_the_same_math(lambda cl: lstm_mod.Agent(1, 4, cl), forward, x)
    assert lstm_mod.Args().channels_last


def test_state_reset_at_episode_start():
    torch.manual_seed(0)
    agent = lstm_mod.Agent(1, 4)
    T, N = 4, 2
    x = torch.randint(0, 256, (T * N, 1, 84, 84), dtype=torch.uint8)
    state = (torch.randn(1, N, 128), torch.randn(1, N, 128))
    starts = torch.zeros(T, N)
    starts[2, 0] = 1.0  # env 0 begins a new episode at step 2
    out, _ = agent.hidden(x, state, starts.reshape(-1))
    out = out.reshape(T, N, -1)
    # from step 2 on, env 0 behaves as if started fresh from zero state at step 2
    fresh, _ = agent.hidden(x.reshape(T, N, 1, 84, 84)[2:, :1].reshape(-1, 1, 84, 84), agent.initial_state(1),
                            torch.zeros(2))
    torch.testing.assert_close(out[2:, 0], fresh.reshape(2, -1))
    # env 1 is never reset: its outputs depend on the state it was given
    other, _ = agent.hidden(x, agent.initial_state(N), starts.reshape(-1))
    assert not torch.allclose(other.reshape(T, N, -1)[:, 1], out[:, 1])
    assert torch.allclose(other.reshape(T, N, -1)[2:, 0], out[2:, 0])


def test_lstm_stretches_equal_the_step_by_step_recursion():
    """hidden() calls the LSTM once per stretch without an episode start; a plain per-step loop with the
    detail-L3 reset before every step must give the same outputs and final state."""
    torch.manual_seed(0)
    agent = lstm_mod.Agent(1, 4)
    T, N = 12, 3
    x = torch.randint(0, 256, (T * N, 1, 84, 84), dtype=torch.uint8)
    starts = torch.zeros(T, N)
    starts[0, 1] = starts[4, 0] = starts[5, 2] = starts[5, 0] = starts[11, 1] = 1.0
    state = (torch.randn(1, N, 128), torch.randn(1, N, 128))
    out, (h, c) = agent.hidden(x, state, starts.reshape(-1))

    features = agent.network(x.float() / 255.0).reshape(T, N, -1)
    ref_h, ref_c, ref_out = state[0], state[1], []
    for t in range(T):
        keep = (1.0 - starts[t]).view(1, N, 1)
        o, (ref_h, ref_c) = agent.lstm(features[t : t + 1], (keep * ref_h, keep * ref_c))
        ref_out.append(o)
    torch.testing.assert_close(out, torch.cat(ref_out).flatten(0, 1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close((h, c), (ref_h, ref_c), rtol=1e-5, atol=1e-6)
    # the reset is really there: without the starts, env 0's outputs differ from its reset at step 4 on
    no_reset, _ = agent.hidden(x, state, torch.zeros(T * N))
    assert not torch.allclose(no_reset.reshape(T, N, -1)[4:, 0], out.reshape(T, N, -1)[4:, 0], atol=1e-4)


def test_minibatches_are_whole_environment_sequences():
    T, N = 5, 8
    torch.manual_seed(0)
    groups = lstm_mod.minibatch_envs(N, 2)
    assert [len(g) for g in groups] == [2] * 4
    assert sorted(torch.cat(groups).tolist()) == list(range(N))
    flat_env = torch.arange(T * N) % N  # the env of each time-major flat index
    flat_step = torch.arange(T * N) // N
    seen = []
    for g in groups:
        idx = lstm_mod.env_sequence_indices(g, T, N)
        assert len(idx) == T * 2
        assert set(flat_env[idx].tolist()) == set(g.tolist())  # only these envs, all their steps
        # time-major order, so the LSTM can run it step by step: rows of [t, envs of g]
        assert flat_step[idx].reshape(T, 2).tolist() == [[t, t] for t in range(T)]
        assert flat_env[idx].reshape(T, 2).tolist() == [g.tolist()] * T
        seen += idx.tolist()
    assert sorted(seen) == list(range(T * N))


def test_first_minibatch_ratio_exactly_one_thanks_to_state_reconstruction(monkeypatch):
    out = lstm_mod.train(tiny())
    assert len(out["first_minibatch"]) == 3
    for first in out["first_minibatch"]:
        assert first["ratio_max_dev"] < 1e-5 and first["clipfrac"] == 0.0 and abs(first["approx_kl"]) < 1e-7

    # control: training from zero states instead of the rollout's initial state breaks the ratio
    # from the second iteration on (the first rollout really started from zeros)
    real_update = lstm_mod.update

    def update_from_zero_state(agent, optimizer, b, args):
        b = {**b, "initial_state": tuple(torch.zeros_like(s) for s in b["initial_state"])}
        return real_update(agent, optimizer, b, args)

    monkeypatch.setattr(lstm_mod, "update", update_from_zero_state)
    broken = lstm_mod.train(tiny(total_timesteps=2 * 16 * 2))
    assert broken["first_minibatch"][0]["ratio_max_dev"] < 1e-5
    assert all(f["ratio_max_dev"] > 1e-4 for f in broken["first_minibatch"][1:])


def test_reference_defaults_and_env_split_check():
    a = lstm_mod.Args()
    assert (a.num_envs, a.num_steps, a.num_minibatches, a.update_epochs, a.clip_coef) == (8, 128, 4, 4, 0.1)
    env = lstm_mod.make_env("BreakoutNoFrameskip-v4", 0, False, "")()
    obs, _ = env.reset(seed=0)
    assert obs.shape == (1, 84, 84) and obs.dtype == np.uint8
    with pytest.raises(lstm_mod.ConfigError, match="whole environments"):
        lstm_mod.train(tiny(num_envs=6, num_minibatches=4, num_steps=32))  # 192 steps split, 6 envs do not


def test_checkpoint_evaluate_and_foreign_checkpoint():
    out = lstm_mod.train(tiny(total_timesteps=2 * 16, save_model=True))
    ckpt = torch.load(out["checkpoint"], weights_only=False)
    assert ckpt["next_lstm_state"][0].shape == (1, 2, 128) and ckpt["next_lstm_state"][0].abs().sum() > 0
    scores = lstm_mod.evaluate(out["checkpoint"], eval_episodes=1, seed=0)
    assert scores == lstm_mod.evaluate_agent(out["agent"], "AsterixNoFrameskip-v4", eval_episodes=1, seed=0)
    torch.save({"script": "ppo_atari.py"}, "other.pt")
    with pytest.raises(lstm_mod.ConfigError, match="written by ppo_atari.py, not ppo_atari_lstm.py"):
        lstm_mod.evaluate("other.pt")


def test_resume_continues_the_run_and_its_log(capsys, monkeypatch):
    args = tiny(total_timesteps=2 * 16 * 2, save_model=True, save_every=1)
    assert_resumes_with_fresh_episodes(lstm_mod, args, capsys, monkeypatch)
