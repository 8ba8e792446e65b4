"""Tests of impala_vtrace.py: V-trace against the paper's sum, the losses, the Atari pipeline, the actor processes
(sync mode, policy lag, spawned actors, shutdown after the end, a crash, a SIGKILLed actor and Ctrl-C), truncation
bootstrap, video, hack safety, checkpoints, run directories and bad input.
"""

import copy
import math
import os
import re
import signal
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import processes
import pytest
import torch
import torch.nn as nn
from conftest import ROOT, next_second, resume_elsewhere
from hacks import Scale, edited_agent
from networks import assert_channels_last_is_the_same_math, assert_samples_the_softmax_and_scores_it
from promises import (
    PPO_LOGGED,
    assert_logged,
    assert_rejected_before_training,
    assert_resume_runs_longer_and_nothing_else,
    assert_resumed_log_reads_once,
    keep_checkpoint,
    read_scalars,
    resume_later,
)
from tiny import tiny

import impala_vtrace as iv

SCRIPT = os.path.join(ROOT, "impala_vtrace.py")


# ---- detail 4: V-trace ----------------------------------------------------------------------------


def double_loop_vtrace(mu_logp, pi_logp, rewards, values, bootstrap, discounts, rho_bar, c_bar):
    """The paper's eq. (1) written out: v_s = V(x_s) + sum_t (prod_{i<t} discount_i c_i) delta_t."""
    T, B = rewards.shape
    ratio = np.exp(pi_logp - mu_logp)
    rho, c = np.minimum(rho_bar, ratio), np.minimum(c_bar, ratio)
    v_ext = np.concatenate([values, bootstrap[None]])
    vs = np.zeros((T + 1, B))
    vs[T] = bootstrap
    for b in range(B):
        for s in range(T):
            total, trace = 0.0, 1.0
            for t in range(s, T):
                delta = rho[t, b] * (rewards[t, b] + discounts[t, b] * v_ext[t + 1, b] - v_ext[t, b])
                total += trace * delta
                trace *= discounts[t, b] * c[t, b]
            vs[s, b] = values[s, b] + total
    pg_adv = rho * (rewards + discounts * vs[1:] - values)
    return vs[:T], pg_adv


def random_inputs(shape, seed, spread=1.0):
    g = np.random.default_rng(seed)
    mu_logp = np.log(g.uniform(0.05, 1.0, shape))
    pi_logp = mu_logp + g.normal(0, spread, shape)  # ratios from ~0.05 to ~20
    rewards, values = g.normal(size=shape), g.normal(size=shape)
    discounts = 0.97 * (g.random(shape) > 0.2)  # episode ends inside the unroll
    return mu_logp, pi_logp, rewards, values, g.normal(size=shape[1]), discounts


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (20, 4)])
@pytest.mark.parametrize("rho_bar, c_bar", [(1.0, 1.0), (2.0, 1.5), (5.0, 5.0)])
def test_vtrace_matches_double_loop(shape, rho_bar, c_bar):
    inputs = random_inputs(shape, seed=shape[0] * 10 + int(rho_bar))
    if shape == (20, 4):  # the clipping and the episode cuts are both exercised
        assert (inputs[5] == 0).any() and (np.exp(inputs[1] - inputs[0]) > c_bar).any()
    tensors = [torch.tensor(x, dtype=torch.float64) for x in inputs]
    tensors[1].requires_grad_(True)  # target log-probs and values come from the learner's graph
    tensors[3].requires_grad_(True)
    vs, pg_adv = iv.vtrace(*tensors, rho_bar=rho_bar, c_bar=c_bar)
    exp_vs, exp_adv = double_loop_vtrace(*inputs, rho_bar, c_bar)
    assert vs.dtype == torch.float64 and vs.shape == shape and pg_adv.shape == shape
    assert not vs.requires_grad and not pg_adv.requires_grad  # no gradient through either output
    np.testing.assert_allclose(vs.numpy(), exp_vs, atol=1e-6)
    np.testing.assert_allclose(pg_adv.numpy(), exp_adv, atol=1e-6)


def nstep_returns(rewards, bootstrap, discounts):
    """The on-policy n-step bootstrapped return, summed forward until the episode or the unroll ends."""
    T, B = rewards.shape
    out = np.zeros((T, B))
    for b in range(B):
        for s in range(T):
            total, discount = 0.0, 1.0
            for t in range(s, T):
                total += discount * rewards[t, b]
                discount *= discounts[t, b]
            out[s, b] = total + discount * bootstrap[b]
    return out


@pytest.mark.parametrize("correction", ["one-step", "epsilon", "none"])
@pytest.mark.parametrize("rho_bar", [1.0, 2.0])
def test_the_papers_other_corrections_against_their_definitions(correction, rho_bar):
    """Issue 74, the IMPALA paper's Sec. 5.2.1: with no correction, epsilon-correction and 1-step importance sampling the
    value targets are the uncorrected n-step returns (as if the behaviour policy were the target's); 1-step importance
    sampling multiplies each step's advantage r_t + discount_t v_{t+1} - V(x_t) by its clipped weight min(rho_bar, pi/mu),
    the other two do not. Independent of vtrace(): the forward-summed n-step return above."""
    mu_logp, pi_logp, rewards, values, bootstrap, discounts = inputs = random_inputs((20, 4), seed=7)
    assert (np.exp(pi_logp - mu_logp) > rho_bar).any() and (discounts == 0).any()
    vs, pg_adv = iv.vtrace(*(torch.tensor(x) for x in inputs), rho_bar=rho_bar, c_bar=1.0, correction=correction)
    targets = nstep_returns(rewards, bootstrap, discounts)
    advantages = rewards + discounts * np.concatenate([targets[1:], bootstrap[None]]) - values
    weights = np.minimum(rho_bar, np.exp(pi_logp - mu_logp)) if correction == "one-step" else 1.0
    np.testing.assert_allclose(vs.numpy(), targets, atol=1e-6)
    np.testing.assert_allclose(pg_adv.numpy(), weights * advantages, atol=1e-6)
    # and V-trace's differ from them off-policy (what the comparison compares)
    vtrace_vs, _ = iv.vtrace(*(torch.tensor(x) for x in inputs), rho_bar=rho_bar, c_bar=1.0)
    assert np.abs(vtrace_vs.numpy() - targets).max() > 0.1


def test_epsilon_correction_puts_log_pi_plus_epsilon_in_the_policy_gradient(monkeypatch):
    """--correction epsilon: the policy-gradient term takes log(pi(a) + 1e-6) (GA3C's), the rest of the loss as is."""
    seen = []
    real = iv.impala_losses
    monkeypatch.setattr(iv, "impala_losses", lambda logprobs, *a: seen.append(logprobs.detach().clone()) or real(logprobs, *a))
    torch.manual_seed(0)
    agent = iv.Agent(4, False, False, False)
    T, B = 5, 3
    b = {
        "obs": torch.randint(0, 255, (T + 1, B, 4, 84, 84), dtype=torch.uint8),
        "actions": torch.randint(0, 4, (T, B)),
        "rewards": torch.randn(T, B),
        "dones": torch.zeros(T, B),
        "logprobs": torch.full((T, B), math.log(0.25)),
    }
    for correction in ("vtrace", "epsilon"):
        args = iv.Args(correction=correction)
        learner = copy.deepcopy(agent)
        iv.update(learner, torch.optim.SGD(learner.parameters(), lr=0.0), b, args)
    with torch.no_grad():
        _, logprobs, _, _ = agent.get_action_and_value(b["obs"][:-1].flatten(0, 1), b["actions"].flatten())
    torch.testing.assert_close(seen[0], logprobs.view(T, B))
    torch.testing.assert_close(seen[1], torch.log(logprobs.exp() + 1e-6).view(T, B))


def test_replay_batches_hold_their_share_of_past_unrolls(monkeypatch):
    """Issue 74, Table 2's replay: with --replay-fraction 0.5 and 4 unrolls a batch, each batch holds 2 new unrolls and,
    once the replay has them, 2 drawn from earlier batches' new ones (never this batch's); the lag counts their age."""
    batches = []
    real = iv.update

    def recording(agent, optimizer, b, args):
        batches.append({key: b[key].clone() for key in ("obs", "actions", "logprobs")})
        return real(agent, optimizer, b, args)

    monkeypatch.setattr(iv, "update", recording)
    out = iv.train(tiny(iv, replay_fraction=0.5, replay_size=3, sync=True, total_timesteps=10 * 2 * 6))
    assert len(batches) == 6 and [b["actions"].shape[1] for b in batches] == [2, 4, 4, 4, 4, 4]
    assert out["global_step"] == 10 * 2 * 6  # the budget counts the envs' new steps alone

    def unroll(b, i):  # one column of a batch: its frames, actions and the behaviour policy's log-probs
        return [b[key][:, i] for key in ("obs", "actions", "logprobs")]

    def same(x, y):
        return all(torch.equal(p, q) for p, q in zip(x, y))

    for u, b in enumerate(batches[1:], start=1):
        # the replay: the last 3 of the earlier batches' new unrolls, each with the update that made it
        past = [(v, unroll(batches[v], i)) for v in range(max(0, u - 2), u) for i in range(2)][-3:]
        ages = []
        for i in (2, 3):
            made = [v for v, p in past if same(unroll(b, i), p)]
            assert len(made) == 1, (u, i)  # a past unroll, within the last 3
            ages.append(u - made[0])
        assert not any(same(unroll(b, i), unroll(b, j)) for i in (2, 3) for j in (0, 1))
        # --sync: a new unroll's lag is 0, a replayed one's its age in updates; the log has the mean over the steps
        assert out["policy_lag"][u] == pytest.approx(sum(ages) / 4), u
    assert out["policy_lag"][0] == 0


def test_the_replay_draws_uniformly_with_replacement_from_its_last_size_unrolls():
    replay = iv.Replay(3)
    assert replay.sample(2) is None  # nothing yet: the first batch holds new unrolls alone
    replay.add({"actions": torch.arange(2)})
    assert len(replay.sample(5)["actions"]) == 2  # no more than it holds
    replay.add({"actions": torch.arange(2, 5)})  # 5 unrolls in a ring of 3: 0 and 1 dropped, the oldest first
    torch.manual_seed(0)
    drawn = torch.cat([replay.sample(2)["actions"] for _ in range(3000)])
    counts = torch.bincount(drawn, minlength=5).tolist()
    # 6000 draws of 3 kept unrolls: 2000 each, a standard deviation of 37
    assert counts[:2] == [0, 0] and all(abs(c - 2000) < 200 for c in counts[2:]), counts
    assert any(len(set(replay.sample(2)["actions"].tolist())) == 1 for _ in range(100))  # with replacement


def test_a_replay_runs_budget_counts_new_steps_when_it_starts_and_when_it_resumes():
    """With --replay-fraction 0.5 an update takes 20 new steps here (2 new unrolls of 10): a budget of one such update
    runs, and a finished run resumes to 1.5 times its budget (both were refused, checked against a whole batch's 40)."""
    iv.check_args(tiny(iv, replay_fraction=0.5, total_timesteps=10 * 2))
    first = iv.train(tiny(iv, save_model=True, replay_fraction=0.5, total_timesteps=10 * 2 * 2))
    assert first["global_step"] == 40 and len(first["losses"]) == 2
    next_second()
    more = tiny(iv, resume=first["checkpoint"], replay_fraction=0.5, total_timesteps=10 * 2 * 3)
    longer = iv.train(more, given={"resume", "total_timesteps"})
    assert longer["global_step"] == 60 and len(longer["losses"]) == 1


def test_resume_refuses_another_correction_or_replay_and_bad_settings_are_one_line():
    """A run's correction and replay are its experiment: --resume refuses a change of either (the replay is not saved,
    so a resumed run's starts empty); a fraction that leaves no new unroll, or an unknown correction, is refused."""
    checkpoint = iv.train(tiny(iv, save_model=True, replay_fraction=0.5))["checkpoint"]
    for flag, value in (("correction", "none"), ("replay_fraction", 0.0)):
        more = tiny(iv, **{"resume": checkpoint, "total_timesteps": 10 * 4 * 8, "replay_fraction": 0.5, flag: value})
        with pytest.raises(iv.ConfigError, match=rf"^--{flag.replace('_', '-')} cannot change when resuming"):
            iv.train(more, given={flag, "resume", "total_timesteps"})
    with pytest.raises(iv.ConfigError, match=r"^--replay-fraction 0.9 leaves no new unroll in a batch of 4"):
        iv.train(tiny(iv, replay_fraction=0.9))
    with pytest.raises(iv.ConfigError, match=r"^--correction must be vtrace, one-step, epsilon or none, got 'retrace'"):
        iv.train(tiny(iv, correction="retrace"))


@pytest.mark.parametrize("rho_bar", [1.0, 3.0])
def test_vtrace_on_policy_is_nstep_return(rho_bar):
    mu_logp, _, rewards, values, bootstrap, discounts = random_inputs((12, 3), seed=4)
    vs, pg_adv = iv.vtrace(
        *(torch.tensor(x) for x in (mu_logp, mu_logp, rewards, values, bootstrap, discounts)), rho_bar=rho_bar, c_bar=1.0
    )
    expected = nstep_returns(rewards, bootstrap, discounts)
    np.testing.assert_allclose(vs.numpy(), expected, atol=1e-6)
    next_vs = np.concatenate([expected[1:], bootstrap[None]])
    np.testing.assert_allclose(pg_adv.numpy(), rewards + discounts * next_vs - values, atol=1e-6)


def test_vtrace_huge_ratios_with_clip_one_equal_on_policy():
    mu_logp, _, rewards, values, bootstrap, discounts = random_inputs((15, 4), seed=5)
    g = np.random.default_rng(0)
    huge = mu_logp + g.uniform(5.0, 80.0, mu_logp.shape)  # pi/mu from e^5 to e^80
    rest = [torch.tensor(x) for x in (rewards, values, bootstrap, discounts)]
    off = iv.vtrace(torch.tensor(mu_logp), torch.tensor(huge), *rest)
    on = iv.vtrace(torch.tensor(mu_logp), torch.tensor(mu_logp), *rest)
    for a, b in zip(off, on):
        assert torch.isfinite(a).all()
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-12)


# ---- details 5, 8 and the Agent ------------------------------------------------------------------


def test_losses_summed_and_no_gradient_through_targets():
    g = torch.Generator().manual_seed(0)
    T, B = 6, 3
    values = torch.randn(T, B, generator=g, dtype=torch.float64, requires_grad=True)
    dist = torch.distributions.Categorical(logits=torch.randn(T, B, 4, generator=g, dtype=torch.float64, requires_grad=True))
    target_logp = dist.log_prob(torch.randint(0, 4, (T, B), generator=g))
    behaviour = target_logp.detach() + 0.3 * torch.randn(T, B, generator=g, dtype=torch.float64)
    vs, pg_adv = iv.vtrace(
        behaviour,
        target_logp,
        torch.randn(T, B, generator=g, dtype=torch.float64),
        values,
        torch.randn(B, generator=g, dtype=torch.float64),
        torch.full((T, B), 0.99, dtype=torch.float64),
    )
    loss, pg, baseline, ent = iv.impala_losses(target_logp, dist.entropy(), values, vs, pg_adv, iv.Args())
    assert pg.item() == pytest.approx(-(pg_adv * target_logp).sum().item())
    assert baseline.item() == pytest.approx(0.5 * ((vs - values) ** 2).sum().item())
    assert loss.item() == pytest.approx(pg.item() + 0.5 * baseline.item() - 0.01 * dist.entropy().sum().item())
    loss.backward()
    # vs is a constant target: d loss / d V = 0.5 * (V - vs) (baseline cost 0.5 on the paper's (V - vs) grad V)
    np.testing.assert_allclose(values.grad.numpy(), 0.5 * (values - vs).detach().numpy(), atol=1e-12)


def unroll_batch(T=3, B=2, reward=1000.0):
    return {
        "obs": torch.randint(0, 256, (T + 1, B, 4, 84, 84), dtype=torch.uint8),
        "actions": torch.randint(0, 4, (T, B)),
        "rewards": torch.full((T, B), reward),
        "dones": torch.zeros(T, B),
        "logprobs": torch.full((T, B), -1.4),
    }


@pytest.mark.parametrize("deep", [False, True])
def test_update_clips_the_global_gradient_norm_at_40(deep):
    norms, batch = {}, unroll_batch()
    for max_grad_norm in (float("inf"), 40.0):
        torch.manual_seed(0)
        agent = iv.Agent(4, deep=deep)
        optimizer = torch.optim.RMSprop(agent.parameters(), lr=6e-4, alpha=0.99, eps=0.01)
        step = optimizer.step

        def checked_step(*a, _step=step, _agent=agent, _key=max_grad_norm, **k):  # the norm the optimizer sees
            norms[_key] = torch.norm(torch.stack([p.grad.norm() for p in _agent.parameters()])).item()
            return _step(*a, **k)

        optimizer.step = checked_step
        before = [p.detach().clone() for p in agent.parameters()]
        iv.update(agent, optimizer, batch, iv.Args(max_grad_norm=max_grad_norm))
        assert all(not torch.equal(a, p) for a, p in zip(before, agent.parameters()))
    assert norms[float("inf")] > 40 and norms[40.0] == pytest.approx(40.0, rel=1e-4)


def test_get_action_and_value_samples_the_softmax_and_scores_it():
    assert_samples_the_softmax_and_scores_it(iv.Agent(4), 1500, atol=0.05)


# ---- details 9 and 11: the Atari pipeline and the networks ---------------------------------------


def test_atari_pipeline_lives_end_training_episodes_and_score_is_the_full_game():
    env = iv.make_env("BreakoutNoFrameskip-v4")
    obs, _ = env.reset(seed=3)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert env.action_space.n == 4  # the minimal action set
    rng, ends, total, score = np.random.default_rng(0), 0, 0.0, None
    for _ in range(5000):
        obs, reward, terminated, truncated, info = env.step(int(rng.integers(4)))
        total += reward
        if terminated or truncated:
            ends += 1
            if "episode" in info:  # only the game over carries the full-game statistics
                score = float(info["episode"]["r"])
                break
            env.reset()
    env.close()
    assert ends == 5  # Breakout's five lives, each one a training episode
    assert score == total and total > 0  # raw points over all lives, not clipped per step


def test_networks_shapes():
    x = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    for deep in (False, True):
        action, logprob, entropy, value = iv.Agent(6, deep=deep).get_action_and_value(x)
        assert action.shape == logprob.shape == entropy.shape == value.shape == (3,)
    deep = iv.Agent(6, deep=True)
    sections = [m for m in deep.network if isinstance(m, torch.nn.Sequential)]
    assert [s[0].out_channels for s in sections] == [16, 32, 32]
    assert all(sum(isinstance(m, iv.ResidualBlock) for m in s) == 2 for s in sections)
    shallow = iv.Agent(6)
    convs = [m for m in shallow.network if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [(16, (8, 8), (4, 4)), (32, (4, 4), (2, 2))]


@pytest.mark.parametrize("deep", [False, True])
def test_channels_last_is_the_same_math(deep):
    x = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    assert_channels_last_is_the_same_math(lambda cl: iv.Agent(6, deep, cl), x, on_by_default=iv)


# ---- details 1-3, 6-8: actors and learner --------------------------------------------------------


def live_processes(field, value):
    """Pids of the live processes whose /proc stat `field` (ppid or session) equals `value`; multiprocessing's
    resource tracker (started by a spawn test, it lives as long as this process) does not count."""
    column = {"ppid": 1, "session": 3}[field]
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    tracker = b"resource_tracker" in f.read()
            except OSError:
                continue
            if int(fields[column]) == value and fields[0] != "Z" and not tracker:
                pids.append(int(entry))
    return pids


def test_sync_mode_is_on_policy_and_logs_everything():
    out = iv.train(tiny(iv, sync=True, unroll_length=20, total_timesteps=20 * 4 * 8))
    assert len(out["losses"]) == 8 and out["global_step"] == 640
    assert out["policy_lag"] == [0.0] * 8
    for losses in out["losses"]:  # the learner's log-probs are the actors' own: every ratio is 1
        assert losses["max_abs_logratio"] < 1e-4
    opt = out["optimizer"]
    assert isinstance(opt, torch.optim.RMSprop) and opt.param_groups[0]["params"] == list(out["agent"].parameters())
    assert (opt.defaults["eps"], opt.defaults["momentum"], opt.defaults["alpha"]) == (0.01, 0.0, 0.99)
    lrs = out["learning_rate"]
    assert lrs[0] == 6e-4 and lrs[-1] == 0.0
    np.testing.assert_allclose(np.diff(lrs), -6e-4 / 7)
    assert set(out["seconds"]) == {"env", "inference", "update"} and all(v > 0 for v in out["seconds"].values())
    assert live_processes("ppid", os.getpid()) == []  # the end of training stopped every actor
    assert all(not os.path.exists(f"/proc/{pid}") for pid in out["actor_pids"])  # joined and reaped
    run_dir = out["run_dir"]
    assert_logged(run_dir, PPO_LOGGED + ["charts/policy_lag", "losses/max_abs_logratio"], count=8)
    assert read_scalars(run_dir, "charts/policy_lag") == [0.0] * 8
    assert out["episodic_return"] and read_scalars(run_dir, "charts/episodic_return") == out["episodic_return"]


def test_async_actors_run_ahead_and_checkpoint_resume_eval(monkeypatch):
    keep_checkpoint(iv, monkeypatch, kept := "update2.pt", key="update")
    full = iv.train(tiny(iv, total_timesteps=10 * 4 * 5, save_model=True, save_every=2))
    lags = np.array(full["policy_lag"])
    assert lags.min() >= 0 and lags.max() > 0  # actors kept acting with older weights during updates
    ckpt, _ = iv.load_checkpoint(full["checkpoint"])
    assert ckpt["update"] == 5 and all(torch.equal(ckpt["model"][k], v) for k, v in full["agent"].state_dict().items())
    scores = iv.evaluate(full["checkpoint"], eval_episodes=2, seed=7)
    assert len(scores) == 2 and scores == iv.evaluate(full["checkpoint"], eval_episodes=2, seed=7)

    resumed = resume_later(iv, kept)
    assert len(resumed["losses"]) == 3 and resumed["global_step"] == full["global_step"]
    assert resumed["learning_rate"] == full["learning_rate"][2:]
    assert resumed["run_dir"] == full["run_dir"]
    assert_resumed_log_reads_once(full, returns=False)  # the actors' episodes differ: they run asynchronously


def test_spawned_actors_sample_the_published_weights(monkeypatch):
    # with --cuda the actors are spawned (a forked child cannot use CUDA): the same code path, run here on CPU;
    # in sync mode every update's ratios are 1 only if the spawned actors see each update's weights
    real = iv.mp.get_context
    monkeypatch.setattr(iv.mp, "get_context", lambda method=None: real("spawn"))
    out = iv.train(tiny(iv, sync=True, total_timesteps=10 * 4 * 3))
    assert out["policy_lag"] == [0.0] * 3 and all(losses["max_abs_logratio"] < 1e-4 for losses in out["losses"])
    assert live_processes("ppid", os.getpid()) == []


def test_actor_crash_stops_the_run_with_its_error(monkeypatch, capfd):
    real = iv.actor_loop

    def actor_0_fails(actor_id, *a):
        if actor_id == 0:
            raise RuntimeError("injected failure")
        real(actor_id, *a)

    monkeypatch.setattr(iv, "actor_loop", actor_0_fails)
    with pytest.raises(iv.ActorError, match=r"^actor 0 \(pid \d+\) died \(exit code 1\); the run stops$"):
        iv.train(tiny(iv, total_timesteps=10 * 4 * 50))  # actor 1 alone would finish these 50 updates
    assert live_processes("ppid", os.getpid()) == []  # actor 1 was stopped too
    assert "RuntimeError: injected failure" in capfd.readouterr().err


class PollingQueue:
    """A queue of unrolls on a fake clock: each get() first moves the clock by its entry of `waits` (how long that poll
    took), then gives its entry of `items` (None: the poll found nothing, queue.Empty)."""

    def __init__(self, clock, waits, items):
        self.clock, self.waits, self.items, self.polls = clock, list(waits), list(items), 0

    def get(self, timeout):
        self.polls += 1
        self.clock[0] += self.waits.pop(0)
        item = self.items.pop(0)
        if item is None:
            raise iv.queue.Empty
        return item


def test_a_silent_actor_stops_the_run_after_the_timeout_of_waiting_and_a_suspension_does_not(monkeypatch):
    """--actor-timeout counts the learner's waiting: ten polls of 1 s that find nothing stop a 10 s timeout, and a run
    suspended for 500 s (Ctrl-Z, SIGSTOP: the learner and its actors with it) goes on when resumed (it stopped with
    "no unroll arrived for 120 s" after a 7-minute SIGSTOP of the whole run)."""
    clock, alive = [0.0], [type("Actor", (), {"exitcode": None, "pid": 1})()] * 2
    monkeypatch.setattr(iv.time, "monotonic", lambda: clock[0])
    silent = PollingQueue(clock, [1.0] * 20, [None] * 20)
    with pytest.raises(iv.ActorError, match=r"^no unroll arrived for 10 s although every actor is alive$"):
        iv.next_batch(silent, 2, alive, timeout=10.0)
    assert silent.polls == 11  # waited 11 s > 10 s: then it stops
    suspended = PollingQueue(clock, [0.5, 500.0, 0.5, 0.2], [(3, [(1.0, 10)]), None, None, (4, [])])
    assert iv.next_batch(suspended, 2, alive, timeout=10.0) == ([3, 4], [(1.0, 10)])  # the 500 s poll counts as 2 s
    assert suspended.polls == 4


def run_cli(*flags, prelude=None):
    """The script as `python impala_vtrace.py` runs it; with `prelude`, that code runs first in the same process. SIGINT
    at its default, as a terminal's: a shell that ran pytest in the background leaves it ignored, which the process
    would inherit (then its Ctrl-C tests wait 180 s for nothing)."""
    head = (
        [sys.executable, SCRIPT]
        if prelude is None
        else [
            sys.executable,
            "-c",
            prelude + ("\nimport runpy\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')"),
            SCRIPT,
        ]
    )
    return subprocess.Popen(
        [*head, "--no-cuda", "--num-actors", "2", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
    )


def assert_session_ends(proc):
    deadline = time.time() + 10  # the kernel may need a moment to remove the last exits
    while live_processes("session", proc.pid) and time.time() < deadline:
        time.sleep(0.2)
    assert live_processes("session", proc.pid) == []


def test_sigkilled_actor_stops_the_run_with_one_line():
    # issue 24: the OOM killer's SIGKILL leaves no traceback; the other actor keeps the queue busy (alone it would
    # finish the run's 400 updates), and the run must still stop at once, naming the dead actor
    proc = run_cli("--batch-size", "2", "--unroll-length", "5", "--total-timesteps", "4000")
    try:
        assert proc.stdout.readline().startswith("step 100/")  # training is under way
        actors = sorted(live_processes("ppid", proc.pid))
        assert len(actors) == 2
        os.kill(actors[1], signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert_session_ends(proc)
    assert proc.returncode == 1 and "Traceback" not in stderr and "step 4000/4000" not in stdout
    assert (
        stderr.rstrip().splitlines()[-1]
        == f"impala_vtrace.py: error: actor 1 (pid {actors[1]}) died (killed by SIGKILL); the run stops"
    )


STOPPED = "impala_vtrace.py: interrupted; every actor has been stopped; no checkpoint was saved"  # (issue 51.4: and 130)


def test_ctrl_c_stops_every_actor():
    proc = run_cli("--batch-size", "2", "--unroll-length", "5", "--total-timesteps", "1000000")
    try:
        assert proc.stdout.readline().startswith("step 100/")  # training is under way
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to the learner and every actor
        _, stderr = proc.communicate(timeout=180)  # generous: CI runs two test workers on 2 cores
    finally:
        proc.kill()
    assert_session_ends(proc)
    assert proc.returncode == 130 and stderr.rstrip().endswith(STOPPED)
    assert "Traceback" not in stderr


# Ctrl-C just after the learner's free_queue.put takes the queue's lock, before its `with` block starts: CPython then
# never releases the lock, and the queue's exit finalizer, which takes it again, hung the learner after its last line
CTRL_C_INSIDE_PUT = """
import signal, sys, threading
ENTER = threading.Condition.__enter__.__code__

def in_training_loop(frame):
    while frame is not None and not (frame.f_code.co_name == "train" and "update_idx" in frame.f_locals):
        frame = frame.f_back
    return frame is not None

def on_return(frame, event, arg):
    if event == "return":  # the lock is taken and __enter__ returns: the signal's handler runs here
        signal.raise_signal(signal.SIGINT)
    return on_return

sys.settrace(lambda frame, event, arg: on_return if frame.f_code is ENTER and frame.f_back.f_code.co_name == "put"
             and in_training_loop(frame) else None)
"""


def test_ctrl_c_inside_a_queue_put_still_exits():
    proc = run_cli("--batch-size", "2", "--unroll-length", "5", "--total-timesteps", "4000", prelude=CTRL_C_INSIDE_PUT)
    try:
        _, stderr = proc.communicate(timeout=120)  # it hung here for good before put_holding_signals
    finally:
        proc.kill()
    assert_session_ends(proc)
    assert proc.returncode == 130 and stderr.rstrip().endswith(STOPPED)
    assert "Traceback" not in stderr and "Exception ignored" not in stderr


# Ctrl-C inside the learner's TensorBoard write, as Condition.notify has just woken the writer thread: CPython 3.11
# leaves that thread's waiter first in line, so close()'s stop signal wakes nobody and the thread sleeps until its next
# flush (SummaryWriter's default: 120 s; seen in CI as a SIGTERM to torchrun that took 30.3 s, then a SIGKILL)
CTRL_C_INSIDE_A_LOG_WRITE = """
import inspect, signal, sys, threading
NOTIFY, fired = threading.Condition.notify, []
WOKEN = NOTIFY.__code__.co_firstlineno + [line.strip() for line in inspect.getsource(NOTIFY).splitlines()].index("n -= 1")

def logging(frame):
    names = set()
    while frame is not None:
        names, frame = names | {frame.f_code.co_name}, frame.f_back
    return {"add_scalar", "train"} <= names

def on_line(frame, event, arg):
    if event == "line" and frame.f_lineno == WOKEN and not fired:  # released, not yet removed from the waiters
        fired.append(signal.raise_signal(signal.SIGINT))
    return on_line

sys.settrace(lambda frame, event, arg: on_line if frame.f_code is NOTIFY.__code__ and not fired and logging(frame) else None)
"""


def test_ctrl_c_inside_the_learners_log_write_exits_within_the_flush_interval():
    proc = run_cli(
        "--batch-size", "2", "--unroll-length", "5", "--total-timesteps", "1000000", prelude=CTRL_C_INSIDE_A_LOG_WRITE
    )
    try:
        start = time.time()
        _, stderr = proc.communicate(timeout=100)
        took = time.time() - start
    finally:
        proc.kill()
    assert_session_ends(proc)
    assert proc.returncode == 130 and stderr.rstrip().endswith(STOPPED), stderr[-2000:]
    assert took < 10 + 15  # flush_secs, and the run's start


def record_batches(monkeypatch):
    """Make iv.update record each batch it receives (the actions and behaviour log-probs the actors sampled)."""
    batches, real = [], iv.update
    monkeypatch.setattr(
        iv,
        "update",
        lambda agent, optimizer, b, args: (
            batches.append({k: v.clone() for k, v in b.items()}) or real(agent, optimizer, b, args)
        ),
    )
    return batches


@pytest.mark.parametrize("bootstrap", [False, True])
def test_bootstrap_truncated_adds_the_discounted_final_value(monkeypatch, bootstrap):
    real = iv.make_env
    monkeypatch.setattr(iv, "make_env", lambda *a, **k: gym.wrappers.TimeLimit(real(*a, **k), 7))
    batches = record_batches(monkeypatch)
    iv.train(tiny(iv, sync=True, bootstrap_truncated=bootstrap, total_timesteps=10 * 4 * 2))
    rewards, dones = torch.cat([b["rewards"] for b in batches]), torch.cat([b["dones"] for b in batches])
    assert dones.sum() >= 8  # every 7th step a time-limit end
    off_grid = ~torch.isin(rewards, torch.tensor([-1.0, 0.0, 1.0]))  # a clipped reward plus gamma * V(final obs)
    assert off_grid.sum() >= (8 if bootstrap else 0) and not (off_grid & ~dones.bool()).any()
    assert bootstrap or not off_grid.any()


def test_capture_video_records_actor_0():
    out = iv.train(tiny(iv, capture_video=True, total_timesteps=10 * 4 * 2))
    videos = os.listdir(f"videos/{out['run_name']}")
    assert "rl-video-episode-0.mp4" in videos and os.path.getsize(f"videos/{out['run_name']}/rl-video-episode-0.mp4") > 1000


# ---- hack safety: the edits a researcher makes to a copy must work (issue 19) -----------------------


def test_hack_temperature_changes_what_the_actors_sample(monkeypatch):
    # hacks.assert_temperature_changes_rollout's check, local: the actors are other processes, so what they sampled
    # is read from the unrolls the learner receives
    logits, temperature = torch.tensor([0.0, 1.0, 0.0, 0.0]), 0.25
    edited_agent(
        iv,
        monkeypatch,
        "actor",
        lambda agent: setattr(agent, "actor", nn.Sequential(agent.actor, Scale(1 / temperature))),
        bias=logits,
    )
    batches = record_batches(monkeypatch)
    out = iv.train(tiny(iv, sync=True, batch_size=8, num_envs_per_actor=4, unroll_length=64, total_timesteps=64 * 8))
    actions, logprobs = batches[0]["actions"].reshape(-1), batches[0]["logprobs"].reshape(-1)  # before any update
    edited, unedited = (logits / temperature).log_softmax(-1), logits.log_softmax(-1)
    torch.testing.assert_close(logprobs, edited[actions])  # the behaviour log-probs are the edited policy's
    freq, tol = torch.bincount(actions, minlength=4) / len(actions), 4 / np.sqrt(len(actions))
    assert (freq - edited.exp()).abs().max() < tol and (freq - unedited.exp()).abs().max() > 2 * tol
    assert out["losses"][0]["max_abs_logratio"] < 1e-5  # the learner scores the same edited policy


def test_hack_added_layer_trains(monkeypatch):
    edited_agent(
        iv, monkeypatch, "actor", lambda agent: setattr(agent, "actor", nn.Sequential(nn.LayerNorm(256), agent.actor))
    )
    out = iv.train(tiny(iv, sync=True))
    norm = out["agent"].actor[0]
    assert isinstance(norm, nn.LayerNorm) and (norm.weight - 1).abs().max().item() > 0
    assert all(losses["max_abs_logratio"] < 1e-4 for losses in out["losses"])  # the actors sample the same policy


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"env_id": "NoSuchEnv-v9"}, "'NoSuchEnv-v9' is not an Atari NoFrameskip id"),
        ({"env_id": "CartPole-v1"}, "not an Atari NoFrameskip id"),
        ({"env_id": "ALE/Breakout-v5"}, "not an Atari NoFrameskip id such as BreakoutNoFrameskip-v4"),
        ({"env_id": "BreakoutNoFrameskip-v0"}, "not an Atari NoFrameskip id"),  # sticky actions (issue 24)
        ({"batch_size": 6, "num_envs_per_actor": 4}, "not divisible"),
        ({"num_actors": 0}, "--num-actors must be a finite number >= 1, got 0"),
        ({"unroll_length": 0}, "--unroll-length must be a finite number >= 1"),
        ({"total_timesteps": 0}, "--total-timesteps must be a finite number >= 1"),
        ({"total_timesteps": 30}, "leaves no update to run"),
        ({"learning_rate": float("nan")}, "--learning-rate must be a finite number > 0"),
        ({"learning_rate": 0.0}, "--learning-rate must be a finite number > 0"),
        ({"max_grad_norm": -1.0}, "--max-grad-norm must be"),
        ({"rmsprop_eps": 0.0}, "--rmsprop-eps must be"),
        ({"rmsprop_alpha": 1.5}, "--rmsprop-alpha must be a finite number >= 0 and <= 1"),
        ({"gamma": float("inf")}, "--gamma must be"),
        ({"rho_bar": 0.0}, "--rho-bar must be"),
        ({"c_bar": 2.0}, "exceeds --rho-bar"),
        ({"ent_coef": -0.01}, "--ent-coef must be"),
        ({"actor_timeout": 0.0}, "--actor-timeout must be"),
        ({"save_every": 0}, "--save-every must be"),
        ({"seed": -1}, "--seed must be"),
        ({"torch_threads": -1}, "--torch-threads must be a finite number >= 0"),
        ({"resume": "missing.pt"}, "could not be read.*No such file"),
    ],
)
def test_bad_input_rejected_before_training(kw, message):
    assert_rejected_before_training(iv, tiny(iv, **kw), message)


def test_cli_error_is_one_line_and_writes_nothing():
    code, stdout, stderr = processes.run_cli("impala_vtrace.py", ["--env-id", "CartPole-v1", "--no-cuda"])
    assert code != 0 and stdout == "" and os.listdir(".") == []
    assert stderr.strip().splitlines() == [
        "impala_vtrace.py: error: 'CartPole-v1' is not an Atari NoFrameskip id such as BreakoutNoFrameskip-v4; "
        "impala_vtrace.py handles Atari only, without sticky actions, and repeats each action itself (detail 9)"
    ]


def test_cuda_falls_back_with_notice(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present; the fallback path is not taken")
    out = iv.train(tiny(iv, cuda=True, total_timesteps=10 * 4), given={"cuda"})  # named on the command line: said
    assert "no CUDA device" in capsys.readouterr().err and next(out["agent"].parameters()).device.type == "cpu"


# ---- run identity and resume (issue 24) ------------------------------------------------------------


def test_resume_applies_a_longer_budget_and_refuses_other_flags():
    full = iv.train(tiny(iv, save_model=True, total_timesteps=10 * 4 * 2))
    longer = assert_resume_runs_longer_and_nothing_else(iv, full, "num_envs_per_actor", 2, 10 * 4 * 3, num_actors=1)
    assert len(longer["losses"]) == 1 and len(longer["actor_pids"]) == 1
    assert longer["run_dir"] == full["run_dir"]  # logs on in the run's own directory


def test_resume_from_another_directory_logs_into_the_run(tmp_path, monkeypatch):
    full = iv.train(tiny(iv, save_model=True, total_timesteps=10 * 4))
    resume_elsewhere(iv, full, tmp_path, monkeypatch, total_timesteps=10 * 4 * 2)
    assert iv.load_checkpoint(str(tmp_path / full["checkpoint"]))[0]["update"] == 2


def test_the_closing_time_lines_add_up(capsys):
    """Issue 72: the learner's line adds up (its update time within its total); the actors' env and inference time,
    summed over actors that run beside the learner (so possibly more than its total), on a line of their own."""
    iv.train(tiny(iv))
    lines = capsys.readouterr().out.splitlines()
    learner = re.fullmatch(r"seconds: update ([\d.]+), total ([\d.]+)", lines[-2])
    assert learner and float(learner[1]) <= float(learner[2])
    assert re.fullmatch(r"actor seconds, summed over the 2 actors beside the learner: env [\d.]+, inference [\d.]+", lines[-1])
