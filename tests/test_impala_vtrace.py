"""Tests of impala_vtrace.py: V-trace against the paper's sum, the losses, the Atari pipeline, the actor
processes (sync mode, policy lag, shutdown after the end, a crash and Ctrl-C), checkpoints and bad input.
"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from conftest import ROOT
from test_ppo import (
    assert_foreign_and_corrupt_checkpoints_rejected,
    assert_rejected_before_training,
    assert_resumed_log_reads_once,
    keep_checkpoint,
    read_scalars,
    resume_later,
)
from test_ppo_atari import assert_channels_last_is_the_same_math

import impala_vtrace as iv

SCRIPT = os.path.join(ROOT, "impala_vtrace.py")


def tiny(**kw):
    """A few updates on Breakout with 2 actors and small unrolls: fast, but every code path runs."""
    base = dict(cuda=False, num_actors=2, batch_size=4, unroll_length=10, total_timesteps=10 * 4 * 4)
    base.update(kw)
    return iv.Args(**base)


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


@pytest.mark.parametrize("rho_bar", [1.0, 3.0])
def test_vtrace_on_policy_is_nstep_return(rho_bar):
    mu_logp, _, rewards, values, bootstrap, discounts = random_inputs((12, 3), seed=4)
    vs, pg_adv = iv.vtrace(*(torch.tensor(x) for x in (mu_logp, mu_logp, rewards, values, bootstrap, discounts)),
                           rho_bar=rho_bar, c_bar=1.0)
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


# ---- detail 5: losses ------------------------------------------------------------------------------


def test_losses_summed_and_no_gradient_through_targets():
    g = torch.Generator().manual_seed(0)
    T, B = 6, 3
    values = torch.randn(T, B, generator=g, dtype=torch.float64, requires_grad=True)
    logits = torch.randn(T, B, 4, generator=g, dtype=torch.float64, requires_grad=True)
    actions = torch.randint(0, 4, (T, B), generator=g)
    target_logp, entropy = iv.categorical_logprob_entropy(logits, actions)
    behaviour = target_logp.detach() + 0.3 * torch.randn(T, B, generator=g, dtype=torch.float64)
    vs, pg_adv = iv.vtrace(behaviour, target_logp, torch.randn(T, B, generator=g, dtype=torch.float64), values,
                           torch.randn(B, generator=g, dtype=torch.float64), torch.full((T, B), 0.99, dtype=torch.float64))
    args = iv.Args()
    loss, pg, baseline, ent = iv.impala_losses(target_logp, entropy, values, vs, pg_adv, args)
    assert pg.item() == pytest.approx(-(pg_adv * target_logp).sum().item())
    assert baseline.item() == pytest.approx(0.5 * ((vs - values) ** 2).sum().item())
    assert loss.item() == pytest.approx(pg.item() + 0.5 * baseline.item() - 0.01 * entropy.sum().item())
    loss.backward()
    # vs is a constant target: d loss / d V = 0.5 * (V - vs) (baseline cost 0.5 on the paper's (V - vs) grad V)
    np.testing.assert_allclose(values.grad.numpy(), 0.5 * (values - vs).detach().numpy(), atol=1e-12)


# ---- details 9 and 11: the Atari pipeline and the networks ---------------------------------------


def test_atari_pipeline_lives_end_training_episodes_and_score_is_the_full_game():
    env = iv.make_env("BreakoutNoFrameskip-v4", 1, False, "")()
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
        logits, value = iv.Agent(6, deep=deep).get_logits_and_value(x)
        assert logits.shape == (3, 6) and value.shape == (3,)
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
    assert_channels_last_is_the_same_math(lambda cl: iv.Agent(6, deep, cl), lambda a, x: a.get_logits_and_value(x), x)
    assert iv.Args().channels_last


@pytest.mark.parametrize("deep", [False, True])
def test_update_clips_the_global_gradient_norm_at_40(deep):
    torch.manual_seed(0)
    T, B = 3, 2
    agent = iv.Agent(4, deep=deep)
    optimizer = torch.optim.RMSprop(agent.parameters(), lr=6e-4, alpha=0.99, eps=0.01)
    batch = {"obs": torch.randint(0, 256, (T + 1, B, 4, 84, 84), dtype=torch.uint8),
             "actions": torch.randint(0, 4, (T, B)), "rewards": torch.full((T, B), 1000.0),
             "dones": torch.zeros(T, B), "logprobs": torch.full((T, B), -1.4)}
    norms, step = [], optimizer.step

    def checked_step(*a, **k):  # the global norm the optimizer actually sees
        norms.append(torch.norm(torch.stack([p.grad.norm() for p in agent.parameters()])).item())
        return step(*a, **k)

    optimizer.step = checked_step
    before = [p.detach().clone() for p in agent.parameters()]
    losses = iv.update(agent, optimizer, batch, iv.Args())
    assert losses["grad_norm"] > 40 and norms[0] == pytest.approx(40.0, rel=1e-4)
    assert all(not torch.equal(a, p) for a, p in zip(before, agent.parameters()))


# ---- details 1-3, 6-8: actors and learner --------------------------------------------------------


def test_sync_mode_is_on_policy_and_logs_everything():
    out = iv.train(tiny(sync=True, unroll_length=20, total_timesteps=20 * 4 * 8))
    assert len(out["losses"]) == 8 and out["global_step"] == 640
    assert all(lag == [0, 0, 0, 0] for lag in out["policy_lag"])
    for losses in out["losses"]:  # the learner's log-probs are the actors' own: every ratio is 1
        assert losses["max_abs_logratio"] < 1e-4
    opt = out["optimizer"]
    assert isinstance(opt, torch.optim.RMSprop)
    assert (opt.defaults["eps"], opt.defaults["momentum"], opt.defaults["alpha"]) == (0.01, 0.0, 0.99)
    lrs = out["learning_rate"]
    assert lrs[0] == 6e-4 and lrs[-1] == 0.0
    np.testing.assert_allclose(np.diff(lrs), -6e-4 / 7)
    assert live_processes("ppid", os.getpid()) == []  # the end of training stopped every actor
    assert all(not os.path.exists(f"/proc/{pid}") for pid in out["actor_pids"])  # joined and reaped
    run_dir = f"runs/{out['run_name']}"
    for tag in ["charts/learning_rate", "charts/SPS", "charts/policy_lag", "losses/value_loss", "losses/policy_loss",
                "losses/entropy", "losses/old_approx_kl", "losses/approx_kl", "losses/clipfrac",
                "losses/explained_variance"]:
        values = read_scalars(run_dir, tag)
        assert values and len(values) == 8 and all(np.isfinite(values)), tag
    assert read_scalars(run_dir, "charts/policy_lag") == [0.0] * 8
    assert out["episodic_return"] and read_scalars(run_dir, "charts/episodic_return") == out["episodic_return"]


def test_async_actors_run_ahead_and_checkpoint_resume_eval(monkeypatch):
    keep_checkpoint(iv, monkeypatch, kept := "update2.pt", key="update")
    full = iv.train(tiny(total_timesteps=10 * 4 * 5, save_model=True, save_every=2))
    lags = np.array(full["policy_lag"])
    assert lags.min() >= 0 and lags.max() >= 1  # actors kept acting with older weights during updates
    live = iv.evaluate_agent(full["agent"], "BreakoutNoFrameskip-v4", eval_episodes=1, seed=7)
    assert iv.evaluate(full["checkpoint"], eval_episodes=1, seed=7) == live

    resumed = resume_later(iv, kept)
    assert len(resumed["losses"]) == 3 and resumed["global_step"] == full["global_step"]
    assert resumed["learning_rate"] == full["learning_rate"][2:]
    assert_resumed_log_reads_once(full, returns=False)  # the actors' episodes differ: they run asynchronously


def live_processes(field, value):
    """Pids of the live processes whose /proc stat `field` (ppid or session) equals `value`."""
    column = {"ppid": 1, "session": 3}[field]
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
            except OSError:
                continue
            if int(fields[column]) == value and fields[0] != "Z":
                pids.append(int(entry))
    return pids


def test_actor_crash_stops_the_run_with_its_error():
    with pytest.raises(iv.ActorError, match=r"(?s)actor 0 crashed:.*RuntimeError: injected failure after 2 unrolls"):
        iv.train(tiny(total_timesteps=10**6, actor_fail_after=2))
    assert live_processes("ppid", os.getpid()) == []  # actor 1 was stopped too


def test_ctrl_c_stops_every_actor():
    cmd = [sys.executable, SCRIPT, "--no-cuda", "--num-actors", "2", "--batch-size", "2", "--unroll-length", "5",
           "--total-timesteps", "1000000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    try:
        assert proc.stdout.readline().startswith("update 10/")  # training is under way
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to the learner and every actor
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    deadline = time.time() + 10  # the kernel may need a moment to remove the last exits
    while live_processes("session", proc.pid) and time.time() < deadline:
        time.sleep(0.2)
    assert live_processes("session", proc.pid) == []
    assert proc.returncode == 1 and stderr.rstrip().endswith("interrupted; every actor has been stopped")
    assert "Traceback" not in stderr


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"env_id": "NoSuchEnv-v9"}, "unknown env id"),
        ({"env_id": "CartPole-v1"}, "not an Atari"),
        ({"env_id": "ALE/Breakout-v5"}, "NoFrameskip-v4"),
        ({"batch_size": 6, "num_envs_per_actor": 4}, "not divisible"),
        ({"num_actors": 0}, "--num-actors must be positive"),
        ({"total_timesteps": 0}, "must be positive"),
        ({"total_timesteps": 30}, "less than one batch"),
        ({"c_bar": 2.0}, "exceeds --rho-bar"),
        ({"resume": "missing.pt"}, "does not exist"),
    ],
)
def test_bad_input_rejected_before_training(kw, message):
    assert_rejected_before_training(iv, tiny(**kw), message)


def test_foreign_checkpoint_rejected():
    assert_foreign_and_corrupt_checkpoints_rejected(iv, "ppo.py")


def test_cli_error_is_one_line_and_import_has_no_side_effects():
    # one fresh interpreter runs the whole module top level: nothing printed, no files, one error line
    res = subprocess.run([sys.executable, SCRIPT, "--env-id", "CartPole-v1", "--no-cuda"], capture_output=True, text=True)
    assert res.returncode != 0 and res.stdout == "" and os.listdir(".") == []
    assert res.stderr.strip().splitlines() == [
        "impala_vtrace.py: error: CartPole-v1 is not an Atari (ALE) environment; impala_vtrace.py handles Atari only"]


def test_cuda_falls_back_with_notice(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present; the fallback path is not taken")
    assert iv.pick_device(iv.Args(cuda=True)).type == "cpu"
    assert "no CUDA device" in capsys.readouterr().err
