"""Tests of ppo_continuous_action.py: the 9 continuous-action details, checkpoints with normalisation
statistics, evaluation, resume and bad input. The core PPO details shared with ppo.py are tested there."""

import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import ROOT
from test_ppo import (PPO_BAD_INPUT, assert_clip_grad_norm_matches_torch,
                      assert_flat_parameters_update_like_per_layer_tensors,
                      assert_numpy_policy_follows_the_actor, assert_rejected_before_training,
                      assert_resumed_log_reads_once, keep_checkpoint, resume_later)

import ppo_continuous_action as pca


def tiny(**kw):
    """A few iterations of a small rollout on a real MuJoCo env: fast, but every code path runs."""
    base = dict(env_id="Hopper-v4", cuda=False, num_envs=2, num_steps=32, num_minibatches=2, update_epochs=2,
                total_timesteps=2 * 32 * 3)
    base.update(kw)
    return pca.Args(**base)


class BoxSpyEnv(gym.Env):
    """A 3-dim observation env with asymmetric action bounds that records what it is sent and returns.

    Rewards vary with the step and the episode; episodes end by termination (odd episodes, after 7 steps)
    or truncation (even episodes, after 9 steps). The 400th observation given to the agent is an outlier.
    `BoxSpyEnv.log` holds (kind, value) records: ("obs", o) for every observation the agent is given
    (reset or non-final step), ("action", a), ("reward", r), ("done", d), ("return", episode sum).
    """

    log = []

    def __init__(self):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float64)
        self.action_space = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 0.5], np.float32))
        self.episode, self.given = -1, 0

    def _obs(self, final=False):
        self.given += not final
        big = 1e4 if self.given == 400 and not final else 0.0
        return np.array([self.t * 0.3 + big, np.sin(self.t + self.episode), self.episode % 5 - 2.0])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t, self.total = 0, 0.0
        obs = self._obs()
        BoxSpyEnv.log.append(("obs", obs))
        return obs, {}

    def step(self, action):
        BoxSpyEnv.log.append(("action", np.array(action, dtype=np.float32)))
        self.t += 1
        reward = float(np.cos(self.t) * 3 + self.episode % 4 + 0.5 * action[0])
        self.total += reward
        terminated = self.episode % 2 == 1 and self.t >= 7
        truncated = self.episode % 2 == 0 and self.t >= 9
        obs = self._obs(final=terminated or truncated)
        BoxSpyEnv.log.append(("reward", reward))
        BoxSpyEnv.log.append(("done", terminated or truncated))
        if terminated or truncated:
            BoxSpyEnv.log.append(("return", self.total))
        else:
            BoxSpyEnv.log.append(("obs", obs))
        return obs, reward, terminated, truncated, {}


gym.register("BoxSpy-v0", entry_point=BoxSpyEnv)


def spy_log(kind):
    return [v for k, v in BoxSpyEnv.log if k == kind]


def prior_merged_moments(x, count=1e-4):
    """Mean and variance of the samples `x` (rows) merged with a prior of mean 0, variance 1, weight `count`:
    what a RunningMeanStd that starts from that prior must hold, whatever the order of its updates."""
    n = x.shape[0]
    m, v = x.mean(0), x.var(0)
    total = n + count
    return n * m / total, (count + n * v + m**2 * count * n / total) / total


# ---- details C1-C4: the Gaussian policy and its networks -----------------------------------------


def test_gaussian_logprob_and_entropy_are_sums_of_per_dimension_normals():
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(50, 4, generator=g, dtype=torch.float64)
    logstd = torch.randn(1, 4, generator=g, dtype=torch.float64)
    actions = mean + 3 * torch.randn(50, 4, generator=g, dtype=torch.float64)
    logp, ent = pca.gaussian_logprob_entropy(mean, logstd, actions)
    normal = torch.distributions.Normal(mean, logstd.exp().expand_as(mean))
    assert logp.shape == ent.shape == (50,)
    np.testing.assert_allclose(logp.numpy(), normal.log_prob(actions).sum(1).numpy(), rtol=1e-12)
    np.testing.assert_allclose(ent.numpy(), normal.entropy().sum(1).numpy(), rtol=1e-12)
    # and the closed form for one sample: sum_i -(a_i-mu_i)^2/(2 s_i^2) - log s_i - log sqrt(2 pi)
    s = logstd[0].exp()
    by_hand = (-((actions[0] - mean[0]) ** 2) / (2 * s**2) - s.log() - 0.5 * np.log(2 * np.pi)).sum()
    assert logp[0].item() == pytest.approx(by_hand.item(), rel=1e-12)


def test_sample_gaussian_has_the_policy_mean_and_std():
    torch.manual_seed(0)
    mean = torch.tensor([[0.5, -2.0, 0.0]]).repeat(200000, 1)
    logstd = torch.tensor([[0.0, np.log(0.1), np.log(3.0)]])
    x = pca.sample_gaussian(mean, logstd)
    np.testing.assert_allclose(x.mean(0).numpy(), [0.5, -2.0, 0.0], atol=0.02)
    np.testing.assert_allclose(x.std(0).numpy(), [1.0, 0.1, 3.0], rtol=0.01)


def test_networks_init_and_state_independent_logstd():
    torch.manual_seed(0)
    agent = pca.Agent(11, 3)
    linears = {n: m for n, m in agent.named_modules() if isinstance(m, torch.nn.Linear)}
    expected = {"actor_mean.0": 2**0.5, "actor_mean.2": 2**0.5, "actor_mean.4": 0.01,
                "critic.0": 2**0.5, "critic.2": 2**0.5, "critic.4": 1.0}
    assert set(linears) == set(expected)
    for name, std in expected.items():
        np.testing.assert_allclose(torch.linalg.svdvals(linears[name].weight.detach()).numpy(), std, rtol=1e-4)
        assert torch.all(linears[name].bias == 0)
    assert linears["actor_mean.4"].weight.shape == (3, 64) and linears["critic.4"].weight.shape == (1, 64)
    # detail C2: a trained parameter initialised to 0, the same for every state
    params = dict(agent.named_parameters())
    assert params["actor_logstd"] is agent.actor_logstd and agent.actor_logstd.requires_grad
    assert torch.equal(agent.actor_logstd.data, torch.zeros(1, 3))
    # the actor and critic share no parameter (detail C4: separate networks)
    actor = {id(p) for p in agent.actor_mean.parameters()}
    assert not actor & {id(p) for p in agent.critic.parameters()}


def test_logstd_is_learned_in_training():
    out = pca.train(tiny())
    logstd = out["agent"].actor_logstd.detach()
    assert logstd.shape == (1, 3)
    assert not torch.equal(logstd, torch.zeros(1, 3))  # it has a gradient through the log-prob


# ---- details C5-C9 in a training run on the spy env ----------------------------------------------


def spy_train(tmp_path_factory, **kw):
    """One training run on BoxSpy-v0 (1 env, 4 rollouts of 128 steps), with what update() and GAE saw."""
    BoxSpyEnv.log.clear()
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("spy_run"))  # runs/ goes there (the per-test scratch dir comes later)
    batches, gae_rewards = [], []
    real_update, real_gae = pca.update, pca.compute_gae

    def spy_update(agent, optimizer, b, args):
        batches.append({k: v.clone() for k, v in b.items()})
        return real_update(agent, optimizer, b, args)

    def spy_gae(rewards, *a):
        gae_rewards.append(rewards.clone())
        return real_gae(rewards, *a)

    pca.update, pca.compute_gae = spy_update, spy_gae
    try:
        out = pca.train(pca.Args(env_id="BoxSpy-v0", cuda=False, num_envs=1, num_steps=128, num_minibatches=4,
                                 update_epochs=2, total_timesteps=128 * 4, gamma=0.9, **kw))
    finally:
        pca.update, pca.compute_gae = real_update, real_gae
        os.chdir(cwd)
    return out, batches, gae_rewards, list(BoxSpyEnv.log)


@pytest.fixture(scope="module")
def spy_run(tmp_path_factory):
    return spy_train(tmp_path_factory)


@pytest.fixture(scope="module")
def spy_run_gymnasium(tmp_path_factory):
    return spy_train(tmp_path_factory, gymnasium_normalization=True)


def test_env_gets_clipped_action_but_unclipped_one_is_stored(spy_run):
    out, batches, _, log = spy_run
    sent = np.stack([v for k, v in log if k == "action"])
    stored = torch.cat([b["actions"] for b in batches]).numpy()
    assert stored.shape == sent.shape == (512, 2)
    low, high = np.array([-1.0, 0.0]), np.array([1.0, 0.5])
    np.testing.assert_array_equal(sent, np.clip(stored, low, high).astype(np.float32))
    assert ((stored < low) | (stored > high)).any(axis=1).mean() > 0.3  # std 1: many samples were out of bounds
    # the old log-probs belong to the unclipped actions
    b = batches[0]
    torch.manual_seed(1)  # train() seeds torch with args.seed = 1 before building its agent
    agent = pca.Agent(3, 2)
    with torch.no_grad():
        mean = agent.get_action_mean(b["obs"])
        expected, _ = pca.gaussian_logprob_entropy(mean, agent.actor_logstd, b["actions"])
    np.testing.assert_allclose(b["logprobs"].numpy(), expected.numpy(), rtol=1e-5)


def test_observation_normalisation_statistics_and_clip(spy_run):
    out, batches, _, log = spy_run
    seen = np.stack([v for k, v in log if k == "obs"])  # every observation handed to the agent
    assert len(seen) == 512 + 1  # the first reset, then one per step (after a done: the new episode's first)
    mean, var = prior_merged_moments(seen)
    np.testing.assert_allclose(out["obs_rms"].mean, mean, rtol=1e-10)
    np.testing.assert_allclose(out["obs_rms"].var, var, rtol=1e-10)
    assert out["obs_rms"].var[0] > 1e4  # the outlier is in the statistics
    # the agent's inputs: each observation normalised by the statistics including it, then clipped
    obs = torch.cat([b["obs"] for b in batches]).numpy()
    for i in (0, 1, 200, 398, 399, 400, 511):
        m, v = prior_merged_moments(seen[: i + 1])
        np.testing.assert_allclose(obs[i], np.clip((seen[i] - m) / np.sqrt(v + 1e-8), -10, 10), rtol=1e-5, atol=1e-6)
    assert obs[399, 0] == 10.0  # the outlier (the 400th observation) is clipped
    assert np.abs(obs).max() == 10.0


def test_normalize_obs_uses_but_never_updates_the_statistics():
    rms = pca.RunningMeanStd((2,))
    rms.update(np.array([[1.0, 2.0], [3.0, 6.0]]))
    before = rms.state_dict()
    x = np.array([[2.0, 4.0], [1e3, -1e3]])
    y = pca.normalize_obs(x, rms, 10.0)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y[0], (x[0] - rms.mean) / np.sqrt(rms.var + 1e-8), rtol=1e-6)
    assert y[1].tolist() == [10.0, -10.0]
    after = rms.state_dict()
    assert after["count"] == before["count"] and np.array_equal(after["mean"], before["mean"])


def independent_reward_scaling(rewards, terminated, truncated, gamma, clip=10.0, gymnasium_rule=False):
    """rewards and flags [T, N]: r_t / sqrt(var(all discounted returns so far) + 1e-8), clipped. VecNormalize's
    rule: the return of an env restarts after a step that ended its episode; gymnasium's: only at a termination,
    before that step's reward is added."""
    T, N = rewards.shape
    returns, out, g = np.zeros((T, N)), np.zeros((T, N)), np.zeros(N)
    for t in range(T):
        if gymnasium_rule:
            g = np.where(terminated[t], 0.0, g)
        g = gamma * g + rewards[t]
        returns[t] = g
        _, var = prior_merged_moments(returns[: t + 1].reshape(-1))
        out[t] = np.clip(rewards[t] / np.sqrt(var + 1e-8), -clip, clip)
        if not gymnasium_rule:
            g = np.where(terminated[t] | truncated[t], 0.0, g)
    return out


@pytest.mark.parametrize("gymnasium_rule", [False, True])
def test_reward_scaler_matches_independent_computation(gymnasium_rule):
    g = np.random.default_rng(0)
    T, N = 300, 2
    rewards = g.normal(1.0, 2.0, size=(T, N))
    rewards[150, 1] = 500.0  # scaled far beyond 10: clipped
    terminated, truncated = g.random((T, N)) < 0.05, g.random((T, N)) < 0.05
    scaler = pca.RewardScaler(N, 0.95, 10.0, gymnasium_rule)
    got = np.stack([scaler(rewards[t], terminated[t], terminated[t] | truncated[t]) for t in range(T)])
    expected = independent_reward_scaling(rewards, terminated, truncated, 0.95, gymnasium_rule=gymnasium_rule)
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    assert got[150, 1] == 10.0 and np.abs(got[:150]).max() < 10.0
    # the two rules, or no restart at all, give other numbers: the flags matter
    other = independent_reward_scaling(rewards, terminated, truncated, 0.95, gymnasium_rule=not gymnasium_rule)
    no_reset = independent_reward_scaling(rewards, np.zeros_like(terminated), np.zeros_like(truncated), 0.95)
    assert np.abs(other - expected).max() > 1e-3 and np.abs(no_reset - expected).max() > 1e-3


def test_training_stores_scaled_rewards_and_logs_raw_returns(spy_run):
    out, _, gae_rewards, log = spy_run
    raw = np.array([v for k, v in log if k == "reward"])
    dones = np.array([v for k, v in log if k == "done"])
    expected = independent_reward_scaling(raw[:, None], dones[:, None], np.zeros((len(dones), 1), bool), 0.9)
    got = torch.cat(gae_rewards).numpy()
    np.testing.assert_allclose(got, expected.reshape(got.shape), rtol=1e-5)
    assert not np.allclose(got.ravel(), raw)  # they are scaled
    # the logged returns are the env's own reward sums, before scaling
    np.testing.assert_allclose(out["episodic_return"], [v for k, v in log if k == "return"])
    assert len(out["episodic_return"]) > 40


def gymnasium_wrappers_replay(log, gamma=0.9, clip=10.0):
    """The actions a spy run sent, replayed through gymnasium's own per-env wrappers in CleanRL's order
    (NormalizeObservation, clip, NormalizeReward, clip) in a one-env SAME_STEP vector env: the observation
    the agent would be given before each step, and the scaled reward of each step."""

    def thunk():
        env = gym.wrappers.NormalizeObservation(BoxSpyEnv())
        env = gym.wrappers.TransformObservation(env, lambda o: np.clip(o, -clip, clip), env.observation_space)
        env = gym.wrappers.NormalizeReward(env, gamma=gamma)
        return gym.wrappers.TransformReward(env, lambda r: np.clip(r, -clip, clip))

    envs = gym.vector.SyncVectorEnv([thunk], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs, _ = envs.reset(seed=1)
    given, rewards = [], []
    for action in [v for k, v in log if k == "action"]:
        given.append(obs[0])
        obs, reward, *_ = envs.step(action[None])
        rewards.append(reward[0])
    return np.array(given), np.array(rewards)


def test_gymnasium_normalization_gives_the_numbers_of_gymnasiums_wrappers(spy_run_gymnasium, spy_run):
    out, batches, gae_rewards, log = spy_run_gymnasium
    given, rewards = gymnasium_wrappers_replay(log)
    obs = torch.cat([b["obs"] for b in batches]).numpy()
    assert obs.shape == given.shape == (512, 3)
    np.testing.assert_allclose(obs, given, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(torch.cat(gae_rewards).numpy().ravel(), rewards, rtol=1e-5, atol=1e-6)
    # the default (VecNormalize's rules) is another computation: its inputs and rewards differ from the wrappers'
    _, batches, gae_rewards, log = spy_run
    given, rewards = gymnasium_wrappers_replay(log)
    obs = torch.cat([b["obs"] for b in batches]).numpy()
    assert np.abs(obs - given).max() > 1e-3 and np.abs(torch.cat(gae_rewards).numpy().ravel() - rewards).max() > 1e-3


def test_first_minibatch_ratio_is_one(spy_run):
    out, *_ = spy_run
    for first in out["first_minibatch"]:  # the batched old log-probs equal the minibatch's recomputation
        assert first["ratio_max_dev"] < 1e-6 and first["clipfrac"] == 0.0 and abs(first["approx_kl"]) < 1e-7


# ---- the speed-ups: NumpyPolicy and flat_parameters must not change the algorithm -------------


def test_numpy_policy_follows_the_live_actor():
    torch.manual_seed(0)
    assert_numpy_policy_follows_the_actor(pca, pca.Agent(11, 3), pca.Agent(11, 3), lambda policy: policy.mean,
                                          lambda agent, x: agent.get_action_mean(x), torch.randn(5, 11))
    with pytest.raises(pca.ConfigError, match="no-numpy-rollout"):
        pca.NumpyPolicy([torch.nn.Linear(4, 8), torch.nn.ELU()])


def test_clip_grad_norm_matches_torch():
    torch.manual_seed(0)
    assert_clip_grad_norm_matches_torch(pca.clip_grad_norm)


def test_flat_parameters_give_the_same_update_as_per_layer_tensors():
    torch.manual_seed(0)
    n = 256
    args = pca.Args(num_envs=1, num_steps=n, num_minibatches=4, update_epochs=3)
    args.batch_size, args.minibatch_size = n, n // 4
    agent, twin = pca.Agent(11, 3), pca.Agent(11, 3)
    twin.load_state_dict(agent.state_dict())
    obs, actions = torch.randn(n, 11), torch.randn(n, 3)
    with torch.no_grad():
        mean, values = agent.get_action_mean_and_value(obs)
        logprobs, _ = pca.gaussian_logprob_entropy(mean, agent.actor_logstd, actions)
    batch = {"obs": obs, "actions": actions, "logprobs": logprobs, "values": values,
             "advantages": torch.randn(n) * 4 + 3, "returns": torch.randn(n) * 10}
    assert_flat_parameters_update_like_per_layer_tensors(pca, agent, twin, batch, args)


@pytest.mark.parametrize("numpy_rollout", [True, False])
def test_both_rollout_paths_train_on_policy(numpy_rollout):
    out = pca.train(tiny(numpy_rollout=numpy_rollout))
    for first in out["first_minibatch"]:
        assert first["ratio_max_dev"] < 1e-6 and first["clipfrac"] == 0.0
    # the wall-time split that benchmark/throughput.py reports
    assert set(out["seconds"]) == {"env", "inference", "update"} and all(v > 0 for v in out["seconds"].values())


# ---- checkpoints, evaluation, resume -------------------------------------------------------------


def test_checkpoint_round_trip_evaluates_like_the_live_agent():
    out = pca.train(tiny(save_model=True))
    ckpt = torch.load(out["checkpoint"], weights_only=False)
    np.testing.assert_array_equal(ckpt["obs_rms"]["mean"], out["obs_rms"].mean)
    np.testing.assert_array_equal(ckpt["obs_rms"]["var"], out["obs_rms"].var)
    assert ckpt["obs_rms"]["count"] == out["obs_rms"].count == pytest.approx(1e-4 + 2 + 2 * 32 * 3)
    frozen = out["obs_rms"].state_dict()
    from_ckpt = pca.evaluate(out["checkpoint"], eval_episodes=3, seed=7)
    live = pca.evaluate_agent(out["agent"], "Hopper-v4", out["obs_rms"], eval_episodes=3, seed=7)
    assert len(from_ckpt) == 3 and from_ckpt == live
    assert out["obs_rms"].count == frozen["count"] and np.array_equal(out["obs_rms"].mean, frozen["mean"])
    # the statistics matter: the same agent on unnormalised-by-these-statistics inputs scores otherwise
    fresh = pca.evaluate_agent(out["agent"], "Hopper-v4", pca.RunningMeanStd((11,)), eval_episodes=3, seed=7)
    assert fresh != live


def test_resume_matches_uninterrupted_run(monkeypatch):
    keep_checkpoint(pca, monkeypatch, kept := "iteration2.pt")
    # Hopper's episodes end early and at random: the checkpoint falls mid-episode, after resets
    full = pca.train(tiny(total_timesteps=2 * 32 * 5, save_model=True, save_every=2))
    resumed = resume_later(pca, kept)
    assert len(resumed["losses"]) == 3
    assert resumed["losses"] == full["losses"][2:]
    assert resumed["global_step"] == full["global_step"]
    n_before = len(full["episodic_return"]) - len(resumed["episodic_return"])
    assert n_before > 0 and resumed["episodic_return"] == full["episodic_return"][n_before:]
    np.testing.assert_array_equal(resumed["obs_rms"].mean, full["obs_rms"].mean)
    np.testing.assert_array_equal(resumed["reward_scaler"].ret, full["reward_scaler"].ret)
    assert_resumed_log_reads_once(full)


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Walker2d-v4"])
def test_mujoco_v4_and_v5_ids_train(env_id):
    out = pca.train(tiny(env_id=env_id, num_envs=1, total_timesteps=64, num_steps=64))
    assert out["global_step"] == 64 and np.isfinite(out["losses"][0]["value_loss"])
    assert out["obs_rms"].mean.shape == (17,) and out["agent"].actor_logstd.shape == (1, 6)


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"env_id": "NoSuchEnv-v9"}, "unknown env id"),
        ({"env_id": "CartPole-v1"}, "Box only"),
        ({"total_timesteps": -5}, "must be positive"),
    ] + PPO_BAD_INPUT,
)
def test_bad_input_rejected_before_training(kw, message):
    assert_rejected_before_training(pca, tiny(**kw), message)


def test_missing_mujoco_dependency_is_a_config_error(monkeypatch):
    def make(env_id, **kw):  # what gymnasium raises when mujoco (or its imageio dependency) is not installed
        raise gym.error.DependencyNotInstalled("No module named 'mujoco'")

    monkeypatch.setattr(pca.gym, "make", make)
    with pytest.raises(pca.ConfigError, match=r"Hopper-v4 could not be created .*pip install 'gymnasium\[mujoco\]'"):
        pca.train(tiny())
    assert not os.path.exists("runs")


def test_foreign_or_missing_checkpoint_rejected():
    torch.save({"script": "ppo.py", "model": {}}, "other.pt")
    with pytest.raises(pca.ConfigError, match="written by ppo.py"):
        pca.train(pca.Args(resume="other.pt"))
    with pytest.raises(pca.ConfigError, match="written by ppo.py"):
        pca.evaluate("other.pt")
    with pytest.raises(pca.ConfigError, match="does not exist"):
        pca.evaluate("missing.pt")


def test_cli_error_is_one_line_without_traceback():
    script = os.path.join(ROOT, "ppo_continuous_action.py")
    res = subprocess.run([sys.executable, script, "--env-id", "CartPole-v1", "--no-cuda"], capture_output=True, text=True)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == ["ppo_continuous_action.py: error: CartPole-v1 has a Discrete action "
                                               "space; ppo_continuous_action.py handles Box only (use ppo.py for Discrete actions)"]


def test_cli_help_and_import_has_no_side_effects():
    script = os.path.join(ROOT, "ppo_continuous_action.py")
    res = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "scaled rewards are clipped" in res.stdout and "HalfCheetah-v4" in res.stdout
    res = subprocess.run([sys.executable, "-c", "import ppo_continuous_action"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert res.returncode == 0 and res.stdout == ""
    assert os.listdir(".") == []
