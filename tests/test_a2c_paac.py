"""Tests of a2c_paac.py: n-step returns, losses, TF RMSProp, the networks, the parallel workers,
the preprocessing, checkpoints and bad input (numbers refer to the details in its docstring)."""

import os
import subprocess
import sys

import gymnasium as gym
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

import a2c_paac as paac


def tiny(**kw):
    """Four updates of 2 Breakout envs on 2 workers: fast, but every code path runs."""
    base = dict(cuda=False, num_envs=2, num_workers=2, num_steps=5, total_timesteps=2 * 5 * 4)
    base.update(kw)
    return paac.Args(**base)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One short training run shared by the tests that only read its history."""
    here = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("tiny_run"))
    try:
        yield paac.train(tiny()), os.getcwd()
    finally:
        os.chdir(here)


# ---- detail 3: n-step returns ---------------------------------------------------------------------


def forward_sum(rewards, dones, bootstrap, gamma):
    """R_t = sum_k gamma^(k-t) r_k up to the end of t's episode, plus gamma^(T-t) V if the rollout ends first."""
    T, N = rewards.shape
    out = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            for k in range(t, T):
                out[t, n] += gamma ** (k - t) * rewards[k, n]
                if dones[k, n]:
                    break
            else:
                out[t, n] += gamma ** (T - t) * bootstrap[n]
    return out


@pytest.mark.parametrize("shape", [(1, 1), (5, 32), (20, 3)])
def test_nstep_returns_match_forward_sum(shape):
    g = np.random.default_rng(shape[0])
    rewards, bootstrap = g.normal(size=shape), g.normal(size=shape[1]) * 10
    dones = (g.random(shape) < 0.25).astype(np.float64)
    dones[1::3, 0] = 1.0  # several episodes end inside one rollout
    ret = paac.nstep_returns(*map(torch.tensor, (rewards, dones, bootstrap)), 0.95)
    assert ret.dtype == torch.float64 and ret.shape == shape
    np.testing.assert_allclose(ret.numpy(), forward_sum(rewards, dones, bootstrap, 0.95), atol=1e-10)


def test_terminal_at_last_step_ignores_bootstrap():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]])
    dones = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    ret = paac.nstep_returns(rewards, dones, torch.tensor([1000.0, 1000.0]), 0.5)
    assert ret[:, 0].tolist() == [1.5, 1.0, 2.0]  # R = 0 after the terminal: 1 + 0.5 * 0 + 0.25 * 2
    assert ret[:, 1].tolist() == [1.5 + 125.0, 1.0 + 250.0, 2.0 + 500.0]  # the other env bootstraps


# ---- detail 4: losses -----------------------------------------------------------------------------


def test_a2c_losses_by_hand():
    logprob = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    values = torch.tensor([1.0, 0.0, 2.0], requires_grad=True)
    returns, entropy = torch.tensor([2.0, -1.0, 2.0]), torch.tensor([0.3, 0.6, 0.9])
    loss, pg, v, ent = paac.a2c_losses(logprob, entropy, values, returns, ent_coef=0.01, vf_coef=1.0)
    assert pg.item() == pytest.approx(-(1 * -1.0 + -1 * -2.0 + 0) / 3)
    assert v.item() == pytest.approx((1 + 1 + 0) / 3)  # (R - V)^2, no 0.5 factor
    assert ent.item() == pytest.approx(0.6)
    assert loss.item() == pytest.approx(pg.item() - 0.006 + v.item())
    loss.backward()
    # the advantage is a constant for the policy term: values get only the value loss gradient -2(R - V)/n
    np.testing.assert_allclose(values.grad.numpy(), [-2 / 3, 2 / 3, 0.0], atol=1e-7)
    np.testing.assert_allclose(logprob.grad.numpy(), [-1 / 3, 1 / 3, 0.0], atol=1e-7)


# ---- detail 6: TF RMSProp -------------------------------------------------------------------------


def test_tf_rmsprop_two_steps_by_hand():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = paac.TFRMSprop([p], lr=0.1, decay=0.9, eps=0.1)
    expected, ms = np.array([1.0, -2.0]), np.ones(2)  # TF starts the mean square at 1
    for g in ([0.5, -3.0], [2.0, 1.0]):
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        ms = 0.9 * ms + 0.1 * np.square(g)
        expected = expected - 0.1 * np.array(g) / np.sqrt(ms + 0.1)  # eps inside the root
        np.testing.assert_allclose(p.detach().numpy(), expected, rtol=1e-12)
    # step 1 of the first coordinate by hand: 1 - 0.1 * 0.5 / sqrt(0.9 + 0.025 + 0.1)
    q = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    q.grad = torch.tensor([0.5], dtype=torch.float64)
    paac.TFRMSprop([q], lr=0.1, decay=0.9, eps=0.1).step()
    assert q.item() == pytest.approx(1 - 0.05 / 1.025**0.5, abs=1e-12)
    # PyTorch's variant (zero start, eps outside the root) takes a very different first step
    r = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    r.grad = torch.tensor([0.5], dtype=torch.float64)
    torch.optim.RMSprop([r], lr=0.1, alpha=0.9, eps=0.1).step()
    assert r.item() == pytest.approx(1 - 0.05 / (0.025**0.5 + 0.1), abs=1e-12)
    assert abs(r.item() - q.item()) > 0.1


def test_optimizer_defaults_in_training(tiny_run):
    out, _ = tiny_run
    assert isinstance(out["optimizer"], paac.TFRMSprop)
    assert out["optimizer"].defaults["decay"] == 0.99 and out["optimizer"].defaults["eps"] == 0.1
    args = paac.Args()
    defaults = (args.num_envs, args.num_workers, args.num_steps, args.max_grad_norm, args.ent_coef, args.gamma)
    assert defaults == (32, 8, 5, 40.0, 0.01, 0.99)


# ---- detail 5: networks ---------------------------------------------------------------------------


@pytest.mark.parametrize("arch, n_features, hidden", [("nips", 2592, 256), ("nature", 3136, 512)])
def test_network_feature_sizes(arch, n_features, hidden):
    trunk, size = paac.conv_trunk(arch)
    assert size == n_features
    assert trunk(torch.zeros(2, 4, 84, 84)).shape == (2, n_features)
    agent = paac.Agent(6, arch)
    assert agent.network[1].in_features == n_features and agent.network[1].out_features == hidden
    logits, value = agent.get_logits_and_value(torch.zeros(3, 4, 84, 84))
    assert logits.shape == (3, 6) and value.shape == (3,)
    convs = [m for m in agent.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == (
        [(16, (8, 8), (4, 4)), (32, (4, 4), (2, 2))] if arch == "nips"
        else [(32, (8, 8), (4, 4)), (64, (4, 4), (2, 2)), (64, (3, 3), (1, 1))])


@pytest.mark.parametrize("arch", ["nips", "nature"])
def test_channels_last_is_the_same_math(arch):
    x = torch.randint(0, 256, (5, 4, 84, 84)).float()
    assert_channels_last_is_the_same_math(lambda cl: paac.Agent(6, arch, cl), lambda a, x: a.get_logits_and_value(x), x)
    assert paac.Args().channels_last


# ---- details 2, 7, 9: the training loop -----------------------------------------------------------


def test_global_step_grows_by_ne_tmax(tiny_run):
    out, _ = tiny_run
    assert out["global_steps"] == [10, 20, 30, 40] and out["global_step"] == 40


def test_learning_rate_schedule(tiny_run):
    out, _ = tiny_run
    lrs = out["learning_rate"]
    assert lrs[0] == pytest.approx(0.0007 * 2)  # the paper's 0.0007 * n_e
    assert lrs[-1] == 0.0
    np.testing.assert_allclose(np.diff(lrs), -0.0014 / 3)  # linear
    assert paac.linear_lr(1, 1, 0.0224) == 0.0224


def test_rollout_logprobs_equal_recomputed(tiny_run):
    out, _ = tiny_run
    devs = [loss["logprob_max_dev"] for loss in out["losses"]]
    assert len(devs) == 4 and max(devs) < 1e-5


def make_batch(n_envs=8, T=5, scale=100.0):
    torch.manual_seed(0)
    agent = paac.Agent(4, "nips")
    obs = torch.randint(0, 256, (T * n_envs, 4, 84, 84)).float()
    actions = torch.randint(0, 4, (T * n_envs,))
    with torch.no_grad():
        logprobs, _ = paac.categorical_logprob_entropy(agent.get_logits(obs), actions)
    b = {"obs": obs, "next_obs": torch.randint(0, 256, (n_envs, 4, 84, 84)).float(), "actions": actions,
         "logprobs": logprobs, "rewards": torch.randn(T, n_envs) * scale,
         "dones": (torch.rand(T, n_envs) < 0.2).float()}
    return agent, b


def test_update_gradient_norm_clipped_at_40():
    agent, b = make_batch()
    args = paac.Args()
    optimizer = paac.TFRMSprop(agent.parameters(), lr=0.0224)
    norms, step = [], optimizer.step

    def checked_step(*a, **k):  # the global norm the optimizer actually sees
        norms.append(torch.norm(torch.stack([p.grad.norm() for p in agent.parameters()])).item())
        return step(*a, **k)

    optimizer.step = checked_step
    losses, values, returns = paac.update(agent, optimizer, b, args)
    assert losses["grad_norm"] > 40  # rewards of scale 100 need clipping
    assert len(norms) == 1 and norms[0] <= 40 + 1e-3 and norms[0] > 39.9
    assert losses["logprob_max_dev"] < 1e-5
    assert values.shape == returns.shape == (40,)


def test_loss_scale_multiplies_the_gradient_not_the_logged_losses():
    grads, logged = [], []
    for scale in (1.0, 5.0):
        agent, b = make_batch(scale=1.0)
        args = paac.Args(loss_scale=scale, max_grad_norm=1e9)  # no clipping: compare raw gradients
        optimizer = torch.optim.SGD(agent.parameters(), lr=0.0)  # a step that leaves the weights as they are
        losses, _, _ = paac.update(agent, optimizer, b, args)
        grads.append(torch.cat([p.grad.reshape(-1) for p in agent.parameters()]))
        logged.append(losses)
    torch.testing.assert_close(grads[1], 5.0 * grads[0], rtol=1e-4, atol=1e-6)
    assert grads[0].abs().max() > 1e-4
    for k in ("value_loss", "policy_loss", "entropy"):
        assert logged[1][k] == pytest.approx(logged[0][k], rel=1e-5)
    assert logged[1]["grad_norm"] == pytest.approx(5.0 * logged[0]["grad_norm"], rel=1e-4)


def test_logging_keys_and_time_shares(tiny_run):
    out, where = tiny_run
    run_dir = os.path.join(where, "runs", out["run_name"])
    for tag in ["charts/episodic_return", "charts/episodic_length", "charts/learning_rate", "charts/SPS",
                "losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/explained_variance",
                "losses/grad_norm", "charts/time_share_env", "charts/time_share_act", "charts/time_share_learn"]:
        if tag.startswith("charts/episodic_") and not out["episodic_return"]:
            continue  # 40 steps may end no Breakout game; test_episodic_return_is_raw_score checks these keys
        values = read_scalars(run_dir, tag)
        assert values, tag
        assert all(np.isfinite(values)), tag
    shares = out["time_shares"]
    assert 0 < sum(shares.values()) <= 1.0 and all(v > 0 for v in shares.values())


def test_episodic_return_is_raw_score_and_rewards_clipped(monkeypatch):
    seen, real_update = [], paac.update
    real_step = paac.ParallelEnvs.step

    def step_times_ten(self, actions):  # every reward 10x: the score must see 10, training only 1
        obs, rew, term, trunc, final = real_step(self, actions)
        term = term | (rew != 0)  # end an episode at each scoring step, to have some to log
        return obs, rew * 10, term, trunc, final

    monkeypatch.setattr(paac.ParallelEnvs, "step", step_times_ten)
    monkeypatch.setattr(paac, "update", lambda agent, opt, b, args: seen.append(b["rewards"].clone())
                        or real_update(agent, opt, b, args))
    out = paac.train(tiny(total_timesteps=2 * 5 * 30, seed=2))
    rewards = torch.cat(seen)
    assert rewards.abs().max().item() == 1.0  # detail 8: clipped to [-1, 1] for training
    assert out["episodic_return"] and set(out["episodic_return"]) <= {0.0, 10.0, 40.0, 70.0}
    assert 10.0 in out["episodic_return"]
    logged = read_scalars(f"runs/{out['run_name']}", "charts/episodic_return")
    assert sorted(logged) == sorted(out["episodic_return"])
    lengths = read_scalars(f"runs/{out['run_name']}", "charts/episodic_length")
    assert sorted(lengths) == sorted(out["episodic_length"]) and min(lengths) >= 1


@pytest.mark.parametrize("bootstrap", [False, True])
def test_bootstrap_truncated(monkeypatch, bootstrap):
    seen, calls = [], []
    real_step, real_update = paac.ParallelEnvs.step, paac.update

    def step_truncating_env0_at_step_3(self, actions):  # the ALE's frame limit, brought forward
        obs, rew, term, trunc, final = real_step(self, actions)
        calls.append(rew.copy())
        if len(calls) == 3:
            trunc, term, final = np.array([True, False]), np.array([False, False]), np.full_like(obs, 90)
        return obs, rew, term, trunc, final

    def spy_update(agent, opt, b, args):
        with torch.no_grad():  # before the update the agent is still the one that collected the rollout
            seen.append((b["rewards"].clone(), agent.get_value(torch.full((1, 4, 84, 84), 90.0)).item()))
        return real_update(agent, opt, b, args)

    monkeypatch.setattr(paac.ParallelEnvs, "step", step_truncating_env0_at_step_3)
    monkeypatch.setattr(paac, "update", spy_update)
    paac.train(tiny(total_timesteps=10, bootstrap_truncated=bootstrap))
    rewards, final_value = seen[0]
    expected = np.clip(calls[2][0], -1, 1) + (0.99 * final_value if bootstrap else 0.0)
    assert rewards[2, 0].item() == pytest.approx(expected, abs=1e-5)
    assert rewards[2, 1].item() == np.clip(calls[2][1], -1, 1)  # the other env is untouched
    assert abs(final_value) > 1e-3  # the bootstrap term is not vanishingly small


# ---- detail 1: the workers ------------------------------------------------------------------------


def test_workers_are_processes_and_the_split_does_not_change_the_envs():
    results = []
    for workers in (1, 2):
        envs = paac.ParallelEnvs(tiny(num_workers=workers), "split")
        try:
            assert len(envs.procs) == workers and len({p.pid for p in envs.procs} | {os.getpid()}) == workers + 1
            obs = [envs.reset(seed=5).copy()]
            for k in range(20):
                o, *_ = envs.step(np.arange(2) + 1)
                obs.append(o.copy())
            results.append(np.stack(obs))
        finally:
            envs.close()
    assert results[0].shape == (21, 2, 4, 84, 84) and results[0].dtype == np.uint8
    np.testing.assert_array_equal(results[0], results[1])
    assert not np.array_equal(results[0][:, 0], results[0][:, 1])  # each env has its own seed


# ---- detail 8: preprocessing ----------------------------------------------------------------------


class FrameEnv(gym.Env):
    """Frame k has every pixel equal to k (mod 256); reward k; counts the steps since the last reset."""

    observation_space = gym.spaces.Box(0, 255, (210, 160, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def get_action_meanings(self):
        return ["NOOP", "FIRE"]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k = self.since_reset = 0
        return np.zeros((210, 160, 3), np.uint8), {}

    def step(self, action):
        self.k += 1
        self.since_reset += 1
        frame = np.full((210, 160, 3), self.k % 256, np.uint8)
        frame[0, 0] = 255 if self.k % 4 == 3 else 0  # a sprite drawn only on some frames (flicker)
        return frame, float(self.k), False, False, {}


def test_max_and_skip_and_noop_reset():
    env = paac.MaxAndSkip(FrameEnv(), skip=4)
    env.reset(seed=0)
    obs, reward, *_ = env.step(1)
    assert reward == 1 + 2 + 3 + 4  # summed over the repeated frames
    assert obs[1, 1, 0] == 4 and obs[0, 0, 0] == 255  # max of frames 3 and 4 keeps the flickering sprite

    noop = paac.NoopReset(FrameEnv(), noop_max=30)
    counts = []
    for i in range(300):
        noop.reset(seed=i if i == 0 else None)
        counts.append(noop.unwrapped.since_reset)
    assert min(counts) == 1 and max(counts) == 30  # 1 to 30 no-ops, both ends reached


def test_preprocessed_observation_and_frame_stack():
    env = paac.make_env("PongNoFrameskip-v4", 1, False, "x")()
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    for _ in range(10):
        previous = obs
        obs, *_ = env.step(0)
    assert obs.std() > 0
    np.testing.assert_array_equal(obs[:3], previous[1:])  # the oldest frame drops out, the newest is last
    env.close()


# ---- checkpoints, resume, evaluation --------------------------------------------------------------


def test_resume_matches_uninterrupted_run_and_evaluate(monkeypatch):
    keep_checkpoint(paac, monkeypatch, kept := "iteration2.pt")
    full = paac.train(tiny(total_timesteps=2 * 5 * 6, save_model=True, save_every=2,
                           anneal_lr=False, learning_rate=0.01))
    assert full["learning_rate"] == [0.01] * 6  # --no-anneal-lr keeps the rate constant
    resumed = resume_later(paac, kept)
    assert resumed["global_steps"] == [30, 40, 50, 60]
    assert resumed["losses"] == full["losses"][2:]  # the same episodes, parameters and RMSProp state
    n_before = len(full["episodic_return"]) - len(resumed["episodic_return"])
    assert resumed["episodic_return"] == full["episodic_return"][n_before:]
    assert_resumed_log_reads_once(full, returns=False)  # no Breakout game ends in 60 steps

    # the final checkpoint evaluates like the live agent
    from_ckpt = paac.evaluate(full["checkpoint"], eval_episodes=1, seed=7)
    live = paac.evaluate_agent(full["agent"], "BreakoutNoFrameskip-v4", eval_episodes=1, seed=7)
    assert len(from_ckpt) == 1 and from_ckpt == live


# ---- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"env_id": "NoSuchEnv-v9"}, "unknown env id"),
        ({"env_id": "CartPole-v1"}, "not an Atari"),
        ({"env_id": "ALE/Breakout-v5"}, "NoFrameskip-v4"),
        ({"num_workers": 3}, "not divisible by --num-workers 3"),
        ({"num_workers": 0}, "must be positive"),
        ({"total_timesteps": 9}, "less than one rollout"),
        ({"arch": "resnet"}, "nips or nature"),
        ({"learning_rate": -1.0}, "must be positive"),
        ({"loss_scale": 0.0}, "--loss-scale must be positive"),
        ({"resume": "missing.pt"}, "does not exist"),
    ],
)
def test_bad_input_rejected_before_training(kw, message):
    assert_rejected_before_training(paac, tiny(**kw), message)


def test_foreign_checkpoint_rejected():
    assert_foreign_and_corrupt_checkpoints_rejected(paac, "ppo_atari.py")


def test_cli_error_is_one_line_and_import_has_no_side_effects():
    # one interpreter for both checks (each start imports torch and the ALE): import, then run as the CLI
    code = ("import sys, runpy, a2c_paac; sys.argv = ['a2c_paac.py', '--num-workers', '5', '--no-cuda']; "
            "runpy.run_module('a2c_paac', run_name='__main__')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.strip().splitlines() == ["a2c_paac.py: error: --num-envs 32 is not divisible by "
                                               "--num-workers 5; each worker steps the same number of environments"]
    assert os.listdir(".") == []  # no runs/, no videos/


def test_cuda_falls_back_with_notice(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present; the fallback path is not taken")
    assert paac.pick_device(paac.Args(cuda=True)).type == "cpu"
    assert "no CUDA device" in capsys.readouterr().err
