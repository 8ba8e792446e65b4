"""Tests of a2c_paac.py: n-step returns, losses, TF RMSProp, the networks, the worker processes, the preprocessing,
the hack-safe idiom, checkpoints, resume and bad input (numbers refer to the details in its docstring)."""

import math
import multiprocessing
import os
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import ROOT, interrupt_at_update, next_second, resume_elsewhere
from networks import assert_channels_last_is_the_same_math, assert_samples_the_softmax_and_scores_it
from processes import run_cli
from promises import (
    ANNEAL_CASES,
    LOGGED,
    assert_anneals_to_0_at,
    assert_checkpoint_evaluates,
    assert_logged,
    assert_rejected_before_training,
    assert_resume_matches_uninterrupted_run,
    assert_resumes_with_fresh_episodes,
    read_scalars,
)
from tiny import tiny

import a2c_paac as paac


@pytest.fixture(autouse=True)
def no_worker_left():
    """However a test ends (an error, an interrupt), train() leaves no worker process running."""
    yield
    assert multiprocessing.active_children() == []


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One short training run shared by the tests that only read its history."""
    here = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("tiny_run"))
    try:
        yield paac.train(tiny(paac)), os.getcwd()
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


@pytest.mark.parametrize("loss_scale", [1.0, 5.0])
def test_a2c_losses_by_hand(loss_scale):
    logprob = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    values = torch.tensor([1.0, 0.0, 2.0], requires_grad=True)
    returns, entropy = torch.tensor([2.0, -1.0, 2.0]), torch.tensor([0.3, 0.6, 0.9])
    args = paac.Args(ent_coef=0.01, vf_coef=1.0, loss_scale=loss_scale)
    loss, pg, v, ent = paac.a2c_losses(logprob, entropy, values, returns, args)
    assert pg.item() == pytest.approx(-(1 * -1.0 + -1 * -2.0 + 0) / 3)
    assert v.item() == pytest.approx((1 + 1 + 0) / 3)  # (R - V)^2, no 0.5 factor
    assert ent.item() == pytest.approx(0.6)
    assert loss.item() == pytest.approx(loss_scale * (pg.item() - 0.006 + v.item()))  # only the loss is scaled
    loss.backward()
    # the advantage is a constant for the policy term: values get only the value loss gradient -2(R - V)/n
    np.testing.assert_allclose(values.grad.numpy(), loss_scale * np.array([-2 / 3, 2 / 3, 0.0]), atol=1e-6)
    np.testing.assert_allclose(logprob.grad.numpy(), loss_scale * np.array([-1 / 3, 1 / 3, 0.0]), atol=1e-6)


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
    # a parameter without a gradient is left alone, state and all
    s = torch.nn.Parameter(torch.ones(2))
    opt = paac.TFRMSprop([s, p], lr=0.1)
    p.grad = torch.ones_like(p)
    opt.step()
    assert torch.equal(s, torch.ones(2)) and s not in opt.state


def test_optimizer_holds_agent_parameters_and_defaults(tiny_run):
    out, _ = tiny_run
    assert isinstance(out["optimizer"], paac.TFRMSprop)
    assert out["optimizer"].defaults["decay"] == 0.99 and out["optimizer"].defaults["eps"] == 0.1
    held = [p for group in out["optimizer"].param_groups for p in group["params"]]
    assert len(held) == len(list(out["agent"].parameters()))
    assert all(p is q for p, q in zip(held, out["agent"].parameters()))
    args = paac.Args()
    defaults = (
        args.num_envs,
        args.num_workers,
        args.num_steps,
        args.max_grad_norm,
        args.ent_coef,
        args.gamma,
        args.vf_coef,
        args.loss_scale,
        args.learning_rate,
        args.arch,
        args.channels_last,
    )
    assert defaults == (32, 8, 5, 40.0, 0.01, 0.99, 1.0, 1.0, None, "nips", True)


# ---- detail 5: networks ---------------------------------------------------------------------------


@pytest.mark.parametrize("arch, n_features, hidden", [("nips", 2592, 256), ("nature", 3136, 512)])
def test_network_feature_sizes_and_init(arch, n_features, hidden):
    torch.manual_seed(0)
    agent = paac.Agent(6, arch)
    assert agent.network[0](torch.zeros(2, 4, 84, 84)).shape == (2, n_features)
    assert agent.network[1].in_features == n_features and agent.network[1].out_features == hidden
    action, logprob, entropy, value = agent.get_action_and_value(torch.zeros(3, 4, 84, 84, dtype=torch.uint8))
    assert action.shape == logprob.shape == entropy.shape == value.shape == (3,)
    convs = [m for m in agent.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == (
        [(16, (8, 8), (4, 4)), (32, (4, 4), (2, 2))]
        if arch == "nips"
        else [(32, (8, 8), (4, 4)), (64, (4, 4), (2, 2)), (64, (3, 3), (1, 1))]
    )
    for layer, std in [(agent.network[1], 2**0.5), (agent.actor, 0.01), (agent.critic, 1.0), (convs[0], 2**0.5)]:
        w = layer.weight.detach().reshape(layer.weight.shape[0], -1)
        np.testing.assert_allclose(torch.linalg.svdvals(w).numpy(), std, rtol=1e-4)  # orthogonal with gain std
        assert torch.all(layer.bias == 0)


def test_a_loss_scale_that_overflows_the_gradient_norm_stops_the_run():
    """Issue 75: --loss-scale 1e20 zeroed every step through the clip and exited 0; now the first update so zeroed stops it."""
    with pytest.raises(paac.ConfigError, match=r"^iteration \d: every gradient of the last step is 0 \(their norm overflowed"):
        paac.train(tiny(paac, loss_scale=1e20))


def test_init_torch_is_the_released_codes_uniform_fan_in_init():
    """--init torch (the authors' networks.py, init="torch"): every weight and bias uniform within +-1/sqrt(fan-in) of
    its layer, the heads' too (the policy's logits far from uniform at the start, unlike the 0.01 orthogonal head)."""
    torch.manual_seed(0)
    agent = paac.make_agent(paac.Args(init="torch"), None, gym.spaces.Discrete(6))
    layers = [m for m in agent.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert len(layers) == 5
    for layer in layers:
        bound = 1 / math.sqrt(layer.weight[0].numel())  # fan-in: in_channels * kernel area, or in_features
        w = layer.weight
        assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound  # uniform: its std bound / sqrt(3)
        assert abs(w.std().item() - bound / math.sqrt(3)) < 0.1 * bound / math.sqrt(3)
        assert layer.bias.abs().max() <= bound and (layer.bias != 0).all()
    orthogonal = paac.make_agent(paac.Args(), None, gym.spaces.Discrete(6))
    assert orthogonal.actor.weight.abs().max() < 0.02 < agent.actor.weight.abs().max()
    with pytest.raises(paac.ConfigError, match="^--init must be orthogonal or torch, got 'xavier'"):
        paac.train(tiny(paac, init="xavier"))


@pytest.mark.parametrize("arch", ["nips", "nature"])
def test_channels_last_is_the_same_math(arch):
    x = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    assert_channels_last_is_the_same_math(lambda cl: paac.Agent(6, arch, cl), x)


def test_get_action_and_value_samples_the_softmax_and_scores_it():
    # 4,000 draws: the frequencies' standard error is <= 0.008, so 0.035 is over 4 of them (20,000 took 20 CPU s)
    assert_samples_the_softmax_and_scores_it(paac.Agent(4), 4000, atol=0.035)


# ---- hack safety: the edits a researcher makes to a copy must work (issue 19) -----------------------


# ---- details 2, 7, 9: the training loop -----------------------------------------------------------


def test_global_step_learning_rate_and_first_batch_on_policy(tiny_run):
    out, _ = tiny_run
    assert out["global_step"] == 40 and len(out["losses"]) == 4  # detail 9: n_e * t_max = 10 steps an update
    lrs = out["learning_rate"]
    assert lrs[0] == pytest.approx(0.0007 * 2) and lrs[-1] == 0.0  # the paper's 0.0007 * n_e, annealed to 0
    np.testing.assert_allclose(np.diff(lrs), -0.0014 / 3)  # linear
    # the update's log-probs of the rollout's actions equal the rollout's own: the same policy scored twice
    assert len(out["first_minibatch"]) == 4 and max(f["ratio_max_dev"] for f in out["first_minibatch"]) < 1e-5
    assert set(out["seconds"]) == {"env", "inference", "update"} and all(v > 0 for v in out["seconds"].values())


@pytest.mark.parametrize("anneal_timesteps, anneal_updates", ANNEAL_CASES)
def test_anneal_timesteps_sets_the_step_where_the_rate_reaches_0(anneal_timesteps, anneal_updates):
    assert_anneals_to_0_at(paac.train(tiny(paac, anneal_timesteps=anneal_timesteps)), anneal_updates)


def test_resume_keeps_anneal_timesteps():
    # the full run's schedule over 10 updates: the first part runs 2, the resumed part the next 2 with a longer budget
    first = paac.train(tiny(paac, total_timesteps=2 * 5 * 2, anneal_timesteps=2 * 5 * 10, save_model=True))
    with pytest.raises(paac.ConfigError, match="--anneal-timesteps cannot change when resuming"):
        paac.train(paac.Args(resume=first["checkpoint"], total_timesteps=2 * 5 * 4, anneal_timesteps=2 * 5 * 20))
    next_second()
    resumed = paac.train(paac.Args(resume=first["checkpoint"], total_timesteps=2 * 5 * 4))
    np.testing.assert_allclose(first["learning_rate"] + resumed["learning_rate"], np.linspace(0.0014, 0.0, 10)[:4], rtol=1e-12)


def make_batch(n_envs=8, T=5, scale=100.0):
    torch.manual_seed(0)
    agent = paac.Agent(4, "nips")
    obs = torch.randint(0, 256, (T * n_envs, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        actions, logprobs, _, _ = agent.get_action_and_value(obs)
    return agent, {"obs": obs, "actions": actions, "logprobs": logprobs, "returns": torch.randn(T * n_envs) * scale}


def test_update_gradient_norm_clipped_at_40():
    agent, b = make_batch()
    optimizer = paac.TFRMSprop(agent.parameters(), lr=0.0224)
    norms, step = [], optimizer.step

    def checked_step(*a, **k):  # the global norm the optimizer actually sees
        norms.append(torch.norm(torch.stack([p.grad.norm() for p in agent.parameters()])).item())
        return step(*a, **k)

    optimizer.step = checked_step
    losses, first = paac.update(agent, optimizer, b, paac.Args())
    assert losses["grad_norm"] > 40  # returns of scale 100 need clipping
    assert len(norms) == 1 and 39.9 < norms[0] <= 40 + 1e-3
    assert first["ratio_max_dev"] < 1e-5


def test_loss_scale_multiplies_the_gradient_not_the_logged_losses():
    grads, logged = [], []
    for scale in (1.0, 5.0):
        agent, b = make_batch(scale=1.0)
        args = paac.Args(loss_scale=scale, max_grad_norm=1e9)  # no clipping: compare raw gradients
        optimizer = torch.optim.SGD(agent.parameters(), lr=0.0)  # a step that leaves the weights as they are
        losses, _ = paac.update(agent, optimizer, b, args)
        grads.append(torch.cat([p.grad.reshape(-1) for p in agent.parameters()]))
        logged.append(losses)
    torch.testing.assert_close(grads[1], 5.0 * grads[0], rtol=1e-4, atol=1e-6)
    assert grads[0].abs().max() > 1e-4
    for k in ("value_loss", "policy_loss", "entropy"):
        assert logged[1][k] == pytest.approx(logged[0][k], rel=1e-5)
    assert logged[1]["grad_norm"] == pytest.approx(5.0 * logged[0]["grad_norm"], rel=1e-4)


def test_logging_keys(tiny_run):
    out, where = tiny_run
    run_dir = os.path.join(where, out["run_dir"])
    share_tags = [f"charts/time_share_{k}" for k in ("env", "inference", "update")]
    assert_logged(run_dir, LOGGED + ["losses/grad_norm"] + share_tags, count=4)
    shares = [read_scalars(run_dir, f"charts/time_share_{k}")[-1] for k in ("env", "inference", "update")]
    assert 0 < sum(shares) <= 1.0 and min(shares) > 0


def spy_returns(monkeypatch):
    """Record the (clipped, bootstrapped) rewards each rollout hands to nstep_returns."""
    seen, real = [], paac.nstep_returns
    monkeypatch.setattr(paac, "nstep_returns", lambda rewards, *a: seen.append(rewards.clone()) or real(rewards, *a))
    return seen


def test_episodic_return_is_raw_score_and_rewards_clipped(monkeypatch):
    real_step = paac.ParallelEnvs.step

    def step_times_ten(self, actions):  # every reward 10x: the score must see 10, training only 1
        obs, rew, term, trunc, infos = real_step(self, actions)
        return obs, rew * 10, term | (rew != 0), trunc, infos  # an episode ends at each scoring step, to have some

    monkeypatch.setattr(paac.ParallelEnvs, "step", step_times_ten)
    seen = spy_returns(monkeypatch)
    out = paac.train(tiny(paac, total_timesteps=2 * 5 * 30, seed=2))
    assert torch.cat(seen).abs().max().item() == 1.0  # detail 8: clipped to [-1, 1] for training
    assert out["episodic_return"] and set(out["episodic_return"]) <= {0.0, 10.0, 40.0, 70.0}
    assert 10.0 in out["episodic_return"]
    assert sorted(read_scalars(out["run_dir"], "charts/episodic_return")) == sorted(out["episodic_return"])
    lengths = read_scalars(out["run_dir"], "charts/episodic_length")
    assert sorted(lengths) == sorted(out["episodic_length"]) and min(lengths) >= 1


@pytest.mark.parametrize("bootstrap", [False, True])
def test_bootstrap_truncated(monkeypatch, bootstrap):
    calls, real_step, agents = [], paac.ParallelEnvs.step, []

    def step_truncating_env0_at_step_3(self, actions):  # the ALE's frame limit, brought forward
        obs, rew, term, trunc, infos = real_step(self, actions)
        calls.append(rew.copy())
        if len(calls) == 3:
            term, trunc = np.array([False, False]), np.array([True, False])
            infos = {"final_obs": {0: np.full_like(obs[0], 90)}}
        return obs, rew, term, trunc, infos

    class Recorded(paac.Agent):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            agents.append(self)

    real_returns, seen = paac.nstep_returns, []

    def spy(rewards, *a):  # before the first update the agent is still the one that collected the rollout
        with torch.no_grad():
            final_value = agents[0].get_value(torch.full((1, 4, 84, 84), 90, dtype=torch.uint8)).item()
        seen.append((rewards.clone(), final_value))
        return real_returns(rewards, *a)

    monkeypatch.setattr(paac.ParallelEnvs, "step", step_truncating_env0_at_step_3)
    monkeypatch.setattr(paac, "Agent", Recorded)
    monkeypatch.setattr(paac, "nstep_returns", spy)
    paac.train(tiny(paac, total_timesteps=10, bootstrap_truncated=bootstrap))
    rewards, final_value = seen[0]
    expected = np.clip(calls[2][0], -1, 1) + (0.99 * final_value if bootstrap else 0.0)
    assert rewards[2, 0].item() == pytest.approx(expected, abs=1e-5)
    assert rewards[2, 1].item() == np.clip(calls[2][1], -1, 1)  # the other env is untouched
    assert abs(final_value) > 1e-3  # the bootstrap term is not vanishingly small


# ---- detail 1: the workers ------------------------------------------------------------------------


def test_workers_are_processes_and_the_split_does_not_change_the_envs():
    results = []
    for workers in (1, 2):
        envs = paac.ParallelEnvs(tiny(paac, num_workers=workers, seed=5), "split")
        try:
            assert len(envs.procs) == workers and len({p.pid for p in envs.procs} | {os.getpid()}) == workers + 1
            obs = [envs.obs.copy()]
            for _ in range(20):
                o, rew, term, trunc, infos = envs.step(np.arange(2) + 1)
                assert rew.shape == term.shape == trunc.shape == (2,) and infos == {"final_obs": {}}
                obs.append(o.copy())
            results.append(np.stack(obs))
        finally:
            envs.close()
        assert not any(p.is_alive() for p in envs.procs)
    assert results[0].shape == (21, 2, 4, 84, 84) and results[0].dtype == np.uint8
    np.testing.assert_array_equal(results[0], results[1])
    assert not np.array_equal(results[0][:, 0], results[0][:, 1])  # each env has its own seed


def test_a_dead_worker_is_an_error_not_a_hang():
    envs = paac.ParallelEnvs(tiny(paac), "dead")
    try:
        envs.procs[1].kill()
        envs.procs[1].join()
        # issue 75: which worker, and how, in one line (it was "see its error above", with nothing above)
        with pytest.raises(
            paac.ConfigError, match=rf"^environment worker 1 \(pid {envs.procs[1].pid}\) died \(killed by SIGKILL\); the run"
        ):
            envs.step(np.zeros(2, dtype=np.int64))
    finally:
        envs.close()


def test_workers_exit_when_the_learner_is_killed():
    code = (
        "import a2c_paac as p, time; e = p.ParallelEnvs(p.Args(num_envs=4, num_workers=4), 'x'); "
        "print(*[q.pid for q in e.procs], flush=True); time.sleep(60)"
    )
    learner = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    pids = [int(pid) for pid in learner.stdout.readline().split()]
    assert len(pids) == 4
    learner.kill()  # no chance to close anything: each worker must see its pipe's learner end go
    learner.wait()

    def running(pid):  # an orphan that exited may stay a zombie until init reaps it
        try:
            return open(f"/proc/{pid}/stat").read().split()[2] != "Z"
        except FileNotFoundError:
            return False

    for _ in range(100):
        if not any(map(running, pids)):
            break
        time.sleep(0.05)
    assert not any(map(running, pids))


# ---- detail 8: preprocessing ----------------------------------------------------------------------


class FrameEnv(gym.Env):
    """Frame k has every pixel equal to k (mod 256); reward k; counts the steps since the last reset."""

    observation_space = gym.spaces.Box(0, 255, (210, 160, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

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
    env = paac.MaxAndSkip(FrameEnv())
    env.reset(seed=0)
    obs, reward, *_ = env.step(1)
    assert reward == 1 + 2 + 3 + 4  # summed over the 4 repeated frames
    assert obs[1, 1, 0] == 4 and obs[0, 0, 0] == 255  # max of frames 3 and 4 keeps the flickering sprite

    noop = paac.NoopReset(FrameEnv())
    counts = []
    for i in range(300):
        noop.reset(seed=i if i == 0 else None)
        counts.append(noop.unwrapped.since_reset)
    assert min(counts) == 1 and max(counts) == 30  # 1 to 30 no-ops, both ends reached


def test_preprocessed_observation_and_frame_stack():
    env = paac.make_env("PongNoFrameskip-v4")
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
    # the same episodes, parameters and RMSProp state; no Breakout game ends in 60 steps
    args = tiny(paac, total_timesteps=60, save_model=True, save_every=2, anneal_lr=False, learning_rate=0.01)
    full, resumed = assert_resume_matches_uninterrupted_run(paac, args, monkeypatch, returns=False)
    assert full["learning_rate"] == [0.01] * 6 and resumed["global_step"] == 60  # --no-anneal-lr keeps the rate constant

    assert_checkpoint_evaluates(paac, full, episodes=1)  # one Breakout game: a long one


def test_resumes_with_fresh_episodes_when_the_envs_cannot_be_saved(monkeypatch, capsys):
    monkeypatch.setattr(paac.ParallelEnvs, "snapshot", lambda self: None)  # as with a video recorder
    assert_resumes_with_fresh_episodes(
        paac, tiny(paac, total_timesteps=2 * 5 * 2, save_model=True, save_every=1), capsys, monkeypatch
    )


def test_interrupted_run_keeps_its_last_checkpoint_and_no_worker(monkeypatch):
    interrupt_at_update(paac, monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        paac.train(tiny(paac, save_model=True, save_every=1))
    assert multiprocessing.active_children() == []  # the workers were closed on the way out
    (ckpt,) = [os.path.join(r, f) for r, _, fs in os.walk("runs") for f in fs if f == "checkpoint.pt"]
    assert torch.load(ckpt, weights_only=False)["iteration"] == 2  # a failed save: test_ppo.py (the same function)


def test_capture_video_records_env_0():
    out = paac.train(tiny(paac, capture_video=True))
    assert os.listdir(f"videos/{out['run_name']}") == ["rl-video-episode-0.mp4"]  # env 0 only
    assert os.path.getsize(f"videos/{out['run_name']}/rl-video-episode-0.mp4") > 1000


# ---- run identity and resume (issue 24) ------------------------------------------------------------


def test_resume_applies_a_longer_budget_and_resumable_flags_and_refuses_others(tmp_path, monkeypatch):
    full = paac.train(tiny(paac, save_model=True, total_timesteps=2 * 5 * 2))
    for kw, flag in [
        ({"num_envs": 4}, "num-envs"),
        ({"learning_rate": 1e-3}, "learning-rate"),
        ({"arch": "nature"}, "arch"),
        ({"loss_scale": 5.0}, "loss-scale"),
        ({"gamma": 0.9}, "gamma"),
    ]:
        with pytest.raises(paac.ConfigError, match=f"--{flag} cannot change when resuming"):
            paac.train(paac.Args(resume=full["checkpoint"], **kw))
    with pytest.raises(paac.ConfigError, match="leaves no iteration to run"):  # the run is already finished
        paac.train(paac.Args(resume=full["checkpoint"]))
    # the budget and how the run is placed may change: one worker instead of two, NCHW instead of NHWC
    next_second()
    longer = paac.train(paac.Args(resume=full["checkpoint"], total_timesteps=2 * 5 * 3, num_workers=1, channels_last=False))
    assert longer["global_step"] == 30 and len(longer["losses"]) == 1 and longer["run_dir"] == full["run_dir"]
    assert longer["first_minibatch"][0]["ratio_max_dev"] < 1e-5
    resume_elsewhere(paac, full, tmp_path, monkeypatch, total_timesteps=2 * 5 * 4)  # logs on in the run's own directory
    assert paac.load_checkpoint(str(tmp_path / full["checkpoint"]))[0]["iteration"] == 4


# ---- bad input ------------------------------------------------------------------------------------

# a bad value of every flag in RANGES, and the other checks
BAD_INPUT = [
    ({"total_timesteps": 0}, "total-timesteps must be a finite number >= 1"),
    ({"num_envs": 0}, "num-envs must be a finite number >= 1"),
    ({"num_workers": 0}, "num-workers must be a finite number >= 1"),
    ({"num_steps": 0}, "num-steps must be"),
    ({"save_every": 0}, "save-every must be"),
    ({"anneal_timesteps": 0}, "anneal-timesteps must be a finite number >= 1"),
    ({"eval_episodes": 0}, "eval-episodes must be"),
    ({"learning_rate": -1.0}, "learning-rate must be a finite number > 0"),
    ({"learning_rate": float("nan")}, "learning-rate must be"),
    ({"max_grad_norm": 0.0}, "max-grad-norm must be a finite number > 0"),
    ({"loss_scale": 0.0}, "loss-scale must be a finite number > 0"),
    ({"rmsprop_eps": 0.0}, "rmsprop-eps must be a finite number > 0"),
    ({"ent_coef": -0.01}, "ent-coef must be a finite number >= 0"),
    ({"vf_coef": float("inf")}, "vf-coef must be"),
    ({"gamma": 1.5}, "gamma must be a finite number >= 0 and <= 1"),
    ({"rmsprop_decay": -0.1}, "rmsprop-decay must be a finite number >= 0 and <= 1"),
    ({"seed": -1}, "seed must be"),
    ({"seed": 2**32}, "seed must be"),
    ({"torch_threads": -1}, "torch-threads must be a finite number >= 0"),
    ({"num_workers": 3, "num_envs": 4}, "--num-envs 4 is not divisible by --num-workers 3"),
    ({"total_timesteps": 9}, "leaves no iteration to run"),
    ({"arch": "resnet"}, "nips or nature"),
    ({"env_id": "NoSuchEnv-v9"}, "unknown env id"),
    ({"env_id": "CartPole-v1"}, "is not an Atari game"),
    ({"env_id": "ALE/Breakout-v5"}, "NoFrameskip-v4"),
    ({"env_id": "BreakoutNoFrameskip-v0"}, "sticky actions"),
    ({"resume": "missing.pt"}, "could not be read.*No such file"),
]


def test_every_ranges_flag_has_a_bad_value():
    flags = {name for names, *_ in paac.RANGES for name in names.split()}
    assert flags <= {k for kw, _ in BAD_INPUT for k in kw}


@pytest.mark.parametrize("kw, message", BAD_INPUT)
def test_bad_input_rejected_before_training(kw, message):
    assert_rejected_before_training(paac, tiny(paac, **kw), message)


@pytest.mark.parametrize("flag, package", [("track", "wandb"), ("capture_video", "moviepy")])
def test_optional_packages_missing_named_before_training(monkeypatch, flag, package):
    monkeypatch.setitem(sys.modules, package, None)  # makes `import <package>` fail
    assert_rejected_before_training(paac, tiny(paac, **{flag: True}), f"needs {package}.*pip install {package}")


def test_cli_error_and_help_write_nothing(monkeypatch):
    code, stdout, stderr = run_cli("a2c_paac.py", ["--num-workers", "5", "--no-cuda"])
    assert code == 1 and stdout == ""
    assert stderr.strip().splitlines() == [
        "a2c_paac.py: error: --num-envs 32 is not divisible by "
        "--num-workers 5; each worker steps the same number of environments"
    ]
    assert os.listdir(".") == []  # no runs/, no videos/
    monkeypatch.setenv("COLUMNS", "200")  # one line for the help's phrase
    code, out, _ = run_cli("a2c_paac.py", ["--help"])
    assert code == 0 and "n_w, the number of worker processes stepping the environments" in out


def test_cuda_falls_back_with_notice(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present; the fallback path is not taken")
    out = paac.train(tiny(paac, cuda=True, total_timesteps=10), given={"cuda"})  # named on the command line: said
    assert "no CUDA device" in capsys.readouterr().err and next(out["agent"].parameters()).device.type == "cpu"
