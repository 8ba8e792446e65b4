"""Tests of ppo_atari_lstm.py: the 5 LSTM details, in the network, the rollout and the update. The Atari
wrappers it shares with ppo_atari.py are tested in test_ppo_atari.py; here only that it uses one frame.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch
from networks import assert_channels_last_is_the_same_math
from promises import (
    ATARI_BAD_INPUT,
    assert_cli_error_is_one_line,
    assert_rejected_before_training,
    assert_resume_matches_uninterrupted_run,
    assert_resumes_with_fresh_episodes,
)
from tiny import tiny

import ppo_atari_lstm as lstm_mod

ASTERIX = "AsterixNoFrameskip-v4"  # short random games with several lives: episode starts inside a rollout


def test_lstm_init_orthogonal_std_one_zero_bias_and_zero_initial_state():
    torch.manual_seed(0)
    agent = lstm_mod.Agent(1, 4)
    params = dict(agent.lstm.named_parameters())
    assert set(params) == {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}
    assert (agent.lstm.input_size, agent.lstm.hidden_size) == (512, 128)
    for name in ("weight_ih_l0", "weight_hh_l0"):  # detail L1
        np.testing.assert_allclose(torch.linalg.svdvals(params[name].detach()).numpy(), 1.0, rtol=1e-4)
    assert torch.all(params["bias_ih_l0"] == 0) and torch.all(params["bias_hh_l0"] == 0)
    for head, std in ((agent.actor, 0.01), (agent.critic, 1.0)):  # the heads read the LSTM's 128 outputs
        assert head.in_features == 128 and torch.all(head.bias == 0)
        np.testing.assert_allclose(torch.linalg.svdvals(head.weight.detach()).numpy(), std, rtol=1e-4)
    assert agent.network[0].in_channels == 1  # frame stack 1
    h, c = agent.initial_state(3)  # detail L2
    assert h.shape == c.shape == (1, 3, 128) and not h.any() and not c.any()


def test_heads_read_the_lstm_after_the_cnn():
    """CNN (pixels scaled, detail A9) -> LSTM -> both heads; get_action_and_value returns CleanRL's 5-tuple."""
    torch.manual_seed(0)
    agent = lstm_mod.Agent(1, 6)
    T, N = 3, 2
    x, actions = torch.randint(0, 256, (T * N, 1, 84, 84), dtype=torch.uint8), torch.tensor([0, 5, 1, 2, 3, 4])
    state, done = (torch.randn(1, N, 128), torch.randn(1, N, 128)), torch.tensor([0.0, 0, 0, 1, 0, 0])
    _, logprob, entropy, value, (h, c) = agent.get_action_and_value(x, state, done, actions)
    features = agent.network(x.float() / 255.0).view(T, N, 512)
    ref_state, ref_out = state, []
    for t in range(T):
        keep = (1 - done.view(T, N)[t]).view(1, N, 1)
        out, ref_state = agent.lstm(features[t : t + 1], (keep * ref_state[0], keep * ref_state[1]))
        ref_out.append(out[0])
    out = torch.cat(ref_out)
    dist = torch.distributions.Categorical(logits=agent.actor(out))
    torch.testing.assert_close(logprob, dist.log_prob(actions))
    torch.testing.assert_close(entropy, dist.entropy())
    torch.testing.assert_close(value, agent.critic(out).squeeze(-1))
    torch.testing.assert_close((h, c), ref_state)
    torch.testing.assert_close(agent.get_value(x, state, done), value)
    sampled, *_, state_after = agent.get_action_and_value(x[:N], state, torch.zeros(N))  # one rollout step
    assert sampled.shape == (N,) and state_after[0].shape == (1, N, 128)


def test_channels_last_is_the_same_math():
    T, N = 3, 2
    x = torch.randint(0, 256, (T * N, 1, 84, 84), dtype=torch.uint8)
    starts = torch.tensor([0, 0, 1, 0, 0, 1], dtype=torch.float32)

    def forward(agent, x):
        _, logprob, entropy, value, (h, c) = agent.get_action_and_value(
            x, agent.initial_state(N), starts, torch.arange(T * N) % 4
        )
        return logprob, entropy, value, h, c

    assert_channels_last_is_the_same_math(lambda cl: lstm_mod.Agent(1, 4, cl), x, forward, on_by_default=lstm_mod)


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
    fresh, _ = agent.hidden(x.reshape(T, N, 1, 84, 84)[2:, :1].reshape(-1, 1, 84, 84), agent.initial_state(1), torch.zeros(2))
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


def test_minibatches_are_whole_env_sequences_replayed_from_the_rollout_state():
    """Details L4 and L5: each minibatch the update scores is a group of envs' whole sequences in time order, with
    their episode starts and the rollout's first LSTM state of those envs; each epoch's groups cover the envs."""
    T, N, epochs, minibatches = 5, 8, 2, 4
    args = lstm_mod.Args(num_envs=N, num_steps=T, num_minibatches=minibatches, update_epochs=epochs)
    args.batch_size, args.minibatch_size = T * N, T * N // minibatches
    torch.manual_seed(0)
    agent, calls = lstm_mod.Agent(1, 4), []
    real = agent.get_action_and_value

    def spy(x, lstm_state, done, action=None):
        calls.append((x[:, 0, 0, 0].long(), lstm_state, done, action))
        return real(x, lstm_state, done, action)

    agent.get_action_and_value = spy
    flat = torch.arange(T * N)  # each observation holds its time-major flat index t * N + env
    b = {
        "obs": flat.to(torch.uint8).view(-1, 1, 1, 1).expand(-1, 1, 84, 84).contiguous(),
        "actions": flat % 4,
        "logprobs": torch.full((T * N,), -1.4),
        "values": torch.zeros(T * N),
        "advantages": torch.randn(T * N),
        "returns": torch.randn(T * N),
        "starts": (flat % 3 == 0).float(),
        "lstm_state": (torch.randn(1, N, 128), torch.randn(1, N, 128)),
    }
    lstm_mod.update(agent, torch.optim.Adam(agent.parameters()), b, args)
    assert len(calls) == epochs * minibatches
    groups = []
    for x, (h, c), done, action in calls:
        envs = x[: N // minibatches]
        assert torch.equal(x, (torch.arange(T)[:, None] * N + envs).view(-1))  # the same envs, t = 0, 1, ...
        torch.testing.assert_close((h, c), (b["lstm_state"][0][:, envs], b["lstm_state"][1][:, envs]))
        assert torch.equal(done, b["starts"][x]) and torch.equal(action, b["actions"][x])
        groups.append(envs.tolist())
    for e in range(epochs):
        assert sorted(sum(groups[e * minibatches : (e + 1) * minibatches], [])) == list(range(N))
    assert groups[:minibatches] != groups[minibatches:]  # reshuffled each epoch


def test_rollout_resets_at_episode_starts_and_carries_the_state_across_rollouts(monkeypatch):
    """Detail L3 in the rollout: the start flags it passes are the previous step's dones (across rollouts too);
    the state is carried from each step to the next, and the update gets the rollout's first state (L5)."""
    steps, gae_dones, update_states = [], [], []

    class Spy(lstm_mod.Agent):
        def get_action_and_value(self, x, lstm_state, done, action=None):
            out = super().get_action_and_value(x, lstm_state, done, action)
            if not torch.is_grad_enabled() and action is None:  # a rollout step (check_finite's look passes actions)
                steps.append((lstm_state, done.clone(), out[-1]))
            return out

    real_gae, real_update = lstm_mod.compute_gae, lstm_mod.update
    monkeypatch.setattr(lstm_mod, "Agent", Spy)
    monkeypatch.setattr(lstm_mod, "compute_gae", lambda r, v, d, *a: gae_dones.append(d.clone()) or real_gae(r, v, d, *a))
    monkeypatch.setattr(
        lstm_mod,
        "update",
        lambda agent, opt, b, args: (
            update_states.append(tuple(s.clone() for s in b["lstm_state"])) or real_update(agent, opt, b, args)
        ),
    )
    args = tiny(lstm_mod, num_steps=64, total_timesteps=2 * 64 * 3)
    lstm_mod.train(args)
    T, N = args.num_steps, args.num_envs
    assert len(steps) == 3 * T and len(gae_dones) == 3
    dones = torch.cat(gae_dones)  # [3T, N], step t's done flags
    assert dones.sum() >= 2  # lives were lost inside the rollouts
    starts = torch.stack([done for _, done, _ in steps])
    assert torch.equal(starts, torch.cat([torch.zeros(1, N), dones[:-1]]))
    assert not steps[0][0][0].any()  # detail L2: the first state is zero
    for (_, _, state_out), (state_in, _, _) in zip(steps[:-1], steps[1:]):
        assert all(torch.equal(a, b) for a, b in zip(state_in, state_out))
    for i, state in enumerate(update_states):
        assert all(torch.equal(a, b) for a, b in zip(state, steps[i * T][0]))
    assert update_states[1][0].abs().sum() > 0  # the second rollout did not start from zeros


def test_bootstrap_truncated_values_the_final_observation_from_the_state_after_the_step(monkeypatch):
    """--bootstrap-truncated: a time-limit end adds gamma * V(final obs), V read with that env's LSTM state after
    the step (the final observation continues the episode: no reset)."""
    real_make_env, real_gae = lstm_mod.make_env, lstm_mod.compute_gae
    monkeypatch.setattr(lstm_mod, "make_env", lambda *a: gym.wrappers.TimeLimit(real_make_env(*a), 24))
    steps, values, rewards = [], [], []

    class Spy(lstm_mod.Agent):
        def get_action_and_value(self, *a):
            out = super().get_action_and_value(*a)
            if not torch.is_grad_enabled():
                steps.append(out[-1])
            return out

        def get_value(self, x, lstm_state, done):
            values.append((lstm_state, done, super().get_value(x, lstm_state, done)))
            return values[-1][-1]

    monkeypatch.setattr(lstm_mod, "Agent", Spy)
    monkeypatch.setattr(lstm_mod, "compute_gae", lambda r, *a: rewards.append(r.clone()) or real_gae(r, *a))
    for bootstrap in (False, True):  # the same rollout (V samples nothing), without and with the bootstrap
        steps.clear(), values.clear()
        lstm_mod.train(tiny(lstm_mod, num_steps=64, total_timesteps=2 * 64, bootstrap_truncated=bootstrap, gamma=0.9))
    added = (rewards[1] - rewards[0]).nonzero().tolist()
    assert [t for t, _ in added] == [23, 23, 47, 47]  # each env's time limit, and only there
    assert len(values) == 3  # two bootstraps and the rollout's next_value
    for (t, i), (state, done, value) in zip(added, [values[0]] * 2 + [values[1]] * 2):
        assert not done.any() and all(torch.equal(s[:, i], after[:, i]) for s, after in zip(state, steps[t]))
        assert (rewards[1] - rewards[0])[t, i].item() == pytest.approx(0.9 * value[i].item(), abs=1e-6)


def test_first_minibatch_ratio_exactly_one_thanks_to_state_reconstruction(monkeypatch):
    out = lstm_mod.train(tiny(lstm_mod))
    assert len(out["first_minibatch"]) == 3
    for first in out["first_minibatch"]:
        assert first["ratio_max_dev"] < 1e-5 and first["clipfrac"] == 0.0 and abs(first["approx_kl"]) < 1e-7

    # control: training from zero states instead of the rollout's initial state breaks the ratio
    # from the second iteration on (the first rollout really started from zeros)
    real_update = lstm_mod.update

    def update_from_zero_state(agent, optimizer, b, args):
        b = {**b, "lstm_state": tuple(torch.zeros_like(s) for s in b["lstm_state"])}
        return real_update(agent, optimizer, b, args)

    monkeypatch.setattr(lstm_mod, "update", update_from_zero_state)
    broken = lstm_mod.train(tiny(lstm_mod, total_timesteps=2 * 16 * 2))
    assert broken["first_minibatch"][0]["ratio_max_dev"] < 1e-5
    assert all(f["ratio_max_dev"] > 1e-4 for f in broken["first_minibatch"][1:])


def test_reference_defaults_and_one_frame():
    a = lstm_mod.Args()
    assert (a.env_id, a.num_envs, a.num_steps, a.num_minibatches, a.update_epochs) == ("BreakoutNoFrameskip-v4", 8, 128, 4, 4)
    assert (a.clip_coef, a.ent_coef, a.learning_rate, a.anneal_lr, a.total_timesteps) == (0.1, 0.01, 2.5e-4, True, 10_000_000)
    env = lstm_mod.make_env("BreakoutNoFrameskip-v4")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (1, 84, 84) and obs.dtype == np.uint8  # detail A7: no frame stack


def test_resume_matches_uninterrupted_run_and_evaluate(monkeypatch):
    # Asterix's games (~190 steps) span the checkpoint at step 2 * 64 of each env; the LSTM states are carried over it
    args = tiny(lstm_mod, num_steps=64, total_timesteps=2 * 64 * 4, save_model=True, save_every=2)
    full, resumed = assert_resume_matches_uninterrupted_run(lstm_mod, args, monkeypatch)
    assert resumed["episodic_return"] and resumed["learning_rate"][-1] == 0.0  # the schedule continued to its end
    ckpt, _ = lstm_mod.load_checkpoint(full["checkpoint"])
    assert all(torch.equal(ckpt["model"][k], v) for k, v in full["agent"].state_dict().items())
    scores = lstm_mod.evaluate(full["checkpoint"], eval_episodes=1, seed=0)
    assert scores == lstm_mod.evaluate(full["checkpoint"], eval_episodes=1, seed=0)  # seeded: repeatable
    assert len(scores) == 1 and scores[0] % 50 == 0  # whole-game Asterix scores
    starts, given, returned = [], [], []  # evaluation resets the state after each lost life (detail L3), carries it else

    class Spy(lstm_mod.Agent):
        def get_action_and_value(self, x, lstm_state, done, action=None):
            starts.append(done.item())
            given.append(lstm_state)
            out = super().get_action_and_value(x, lstm_state, done, action)
            returned.append(out[-1])
            return out

    monkeypatch.setattr(lstm_mod, "Agent", Spy)
    assert lstm_mod.evaluate(full["checkpoint"], eval_episodes=1, seed=0) == scores
    assert starts.count(1.0) == 2 and len(starts) > 100  # Asterix: 3 lives, the game ends with the third
    # each step is given the state the step before returned (the reset is the agent's, on its done flag), not zeros
    assert all(all(torch.equal(a, b) for a, b in zip(g, r)) for g, r in zip(given[1:], returned[:-1]))
    assert not any(torch.equal(h, torch.zeros_like(h)) for h, _ in given[1:])


@pytest.mark.parametrize(
    "kw,message",
    ATARI_BAD_INPUT + [(dict(num_envs=6, num_minibatches=4, num_steps=32), "num-envs 6 is not divisible.*whole environments")],
)
def test_bad_input_rejected_before_training(kw, message):
    assert_rejected_before_training(lstm_mod, tiny(lstm_mod, **kw), message)


def test_resume_without_env_state_continues_with_fresh_games(monkeypatch, capsys):
    assert_resumes_with_fresh_episodes(
        lstm_mod, tiny(lstm_mod, total_timesteps=2 * 16 * 2, save_model=True, save_every=1), capsys, monkeypatch, "get_game"
    )


# ---- hack safety: the edits a researcher makes to a copy must work (issue 19) -----------------------


def test_cli_error_is_one_line_without_traceback():
    assert_cli_error_is_one_line(
        "ppo_atari_lstm.py",
        ["--num-envs", "6"],
        (
            "ppo_atari_lstm.py: error: --num-envs 6 is not divisible by --num-minibatches 4; each minibatch holds "
            "whole environments' sequences"
        ),
    )
