"""Tests of ppo_continuous_action.py: the 9 continuous-action details, checkpoints with normalisation
statistics, evaluation, resume, hack safety and bad input. The core PPO details shared with ppo.py are tested there."""

import importlib.metadata
import math
import os

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn
from conftest import resume_elsewhere
from hacks import (
    CRITIC_LR,
    Scale,
    assert_every_group_annealed,
    edited_agent,
    recorded_rates,
)
from processes import run_cli
from promises import (
    PPO_BAD_INPUT,
    assert_cli_error_is_one_line,
    assert_rejected_before_training,
    assert_resume_matches_uninterrupted_run,
    assert_resumes_with_fresh_episodes,
)
from tiny import tiny

import ppo_continuous_action as pca


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


def prior_merged_moments(x, count=1e-4):
    """Mean and variance of the samples `x` (rows) merged with a prior of mean 0, variance 1, weight `count`:
    what a running mean/variance that starts from that prior must hold, whatever the order of its updates."""
    n = x.shape[0]
    m, v = x.mean(0), x.var(0)
    total = n + count
    return n * m / total, (count + n * v + m**2 * count * n / total) / total


# ---- details C1-C4: the Gaussian policy and its networks -----------------------------------------


def test_get_action_and_value_is_a_gaussian_summed_over_components():
    torch.manual_seed(0)
    agent = pca.Agent(11, 4)
    with torch.no_grad():
        agent.actor_logstd.copy_(torch.tensor([[0.0, math.log(0.1), math.log(3.0), 0.5]]))
    x = torch.randn(50, 11)
    actions = torch.randn(50, 4) * 3
    _, logprob, entropy, value = agent.get_action_and_value(x, actions)
    normal = torch.distributions.Normal(agent.actor_mean(x), agent.actor_logstd.exp().expand(50, 4))
    assert logprob.shape == entropy.shape == value.shape == (50,)
    torch.testing.assert_close(logprob, normal.log_prob(actions).sum(1), rtol=1e-5, atol=1e-5)  # detail C3
    torch.testing.assert_close(entropy, normal.entropy().sum(1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(value, agent.critic(x).squeeze(-1))
    # sampling: mean from the actor, std exp(logstd), the same for every state (detail C2)
    with torch.no_grad():
        sampled, logprob, _, _ = agent.get_action_and_value(x[:1].repeat(200000, 1))
        mean = agent.actor_mean(x[:1])
    np.testing.assert_allclose(sampled.mean(0).numpy(), mean[0].numpy(), atol=0.03)
    np.testing.assert_allclose(sampled.std(0).numpy(), [1.0, 0.1, 3.0, math.exp(0.5)], rtol=0.01)
    expected = torch.distributions.Normal(mean, agent.actor_logstd.exp()).log_prob(sampled).sum(1)
    torch.testing.assert_close(logprob, expected.detach(), rtol=1e-5, atol=1e-5)  # the samples are scored as given


def test_networks_init_and_state_independent_logstd():
    torch.manual_seed(0)
    agent = pca.Agent(11, 3)
    linears = {n: m for n, m in agent.named_modules() if isinstance(m, torch.nn.Linear)}
    expected = {
        "actor_mean.0": 2**0.5,
        "actor_mean.2": 2**0.5,
        "actor_mean.4": 0.01,
        "critic.0": 2**0.5,
        "critic.2": 2**0.5,
        "critic.4": 1.0,
    }
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


def test_logstd_is_learned_and_training_is_on_policy():
    out = pca.train(tiny(pca))
    logstd = out["agent"].actor_logstd.detach()
    assert logstd.shape == (1, 3)
    assert not torch.equal(logstd, torch.zeros(1, 3))  # it has a gradient through the log-prob
    assert len(out["first_minibatch"]) == len(out["losses"]) > 0  # one an iteration, all checked below
    for first in out["first_minibatch"]:  # the rollout's log-probs equal the update's recomputation
        assert first["ratio_max_dev"] < 1e-5 and first["clipfrac"] == 0.0
    # the wall-time split that benchmark/tools/throughput.py reports
    assert set(out["seconds"]) == {"env", "inference", "update"} and all(v > 0 for v in out["seconds"].values())


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
        out = pca.train(
            pca.Args(
                **{
                    **dict(
                        env_id="BoxSpy-v0",
                        cuda=False,
                        num_envs=1,
                        num_steps=128,
                        num_minibatches=4,
                        update_epochs=2,
                        total_timesteps=128 * 4,
                        gamma=0.9,
                    ),
                    **kw,
                }
            )
        )
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
        _, expected, _, _ = agent.get_action_and_value(b["obs"], b["actions"])
    np.testing.assert_allclose(b["logprobs"].numpy(), expected.numpy(), rtol=1e-5)


def test_observation_normalisation_statistics_and_clip(spy_run):
    out, batches, _, log = spy_run
    seen = np.stack([v for k, v in log if k == "obs"])  # every observation handed to the agent
    assert len(seen) == 512 + 1  # the first reset, then one per step (after a done: the new episode's first)
    mean, var = prior_merged_moments(seen)
    np.testing.assert_allclose(out["obs_rms"][0], mean, rtol=1e-10)
    np.testing.assert_allclose(out["obs_rms"][1], var, rtol=1e-10)
    assert out["obs_rms"][1][0] > 1e4  # the outlier is in the statistics
    # the agent's inputs: each observation normalised by the statistics including it, then clipped
    obs = torch.cat([b["obs"] for b in batches]).numpy()
    for i in (0, 1, 200, 398, 399, 400, 511):
        m, v = prior_merged_moments(seen[: i + 1])
        np.testing.assert_allclose(obs[i], np.clip((seen[i] - m) / np.sqrt(v + 1e-8), -10, 10), rtol=1e-5, atol=1e-6)
    assert obs[399, 0] == 10.0  # the outlier (the 400th observation) is clipped
    assert np.abs(obs).max() == 10.0


def test_normalize_obs_uses_but_never_updates_the_statistics():
    rms = pca.update_rms((np.zeros(2), np.ones(2), 1e-4), np.array([[1.0, 2.0], [3.0, 6.0]]))
    mean, var = prior_merged_moments(np.array([[1.0, 2.0], [3.0, 6.0]]))
    np.testing.assert_allclose(rms[0], mean, rtol=1e-12)
    np.testing.assert_allclose(rms[1], var, rtol=1e-12)
    before = tuple(np.copy(r) for r in rms)
    x = np.array([[2.0, 4.0], [1e3, -1e3]])
    y = pca.normalize_obs(x, rms, pca.Args())
    assert y.dtype == np.float32
    np.testing.assert_allclose(y[0], (x[0] - rms[0]) / np.sqrt(rms[1] + 1e-8), rtol=1e-6)
    assert y[1].tolist() == [10.0, -10.0]
    assert all(np.array_equal(a, b) for a, b in zip(rms, before))


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


class ReplayVecEnv(gym.vector.VectorEnv):
    """Replays given rewards and episode ends [T, N] with zero observations, and records the actions it gets."""

    def __init__(self, rewards, terminated, truncated):
        self.num_envs, self.data, self.t, self.actions = rewards.shape[1], (rewards, terminated, truncated), 0, []
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (2,))
        self.single_action_space = gym.spaces.Box(np.array([-1.0], np.float32), np.array([0.5], np.float32))
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)

    def reset(self, **kwargs):
        return np.zeros((self.num_envs, 2)), {}

    def step(self, actions):
        self.actions.append(actions)
        r, te, tr = (x[self.t] for x in self.data)
        self.t += 1
        final = np.empty(self.num_envs, dtype=object)  # gymnasium's: the last observation of each ended episode
        for i in np.flatnonzero(te | tr):
            final[i] = np.zeros(2)
        return np.zeros((self.num_envs, 2)), r, te, tr, {"final_obs": final}


@pytest.mark.parametrize("gymnasium_rule", [False, True])
def test_vec_normalize_scales_rewards_and_clips_actions(gymnasium_rule):
    g = np.random.default_rng(0)
    T, N = 300, 2
    rewards = g.normal(1.0, 2.0, size=(T, N))
    rewards[150, 1] = 500.0  # scaled far beyond 10: clipped
    terminated, truncated = g.random((T, N)) < 0.05, g.random((T, N)) < 0.05
    envs = pca.VecNormalize(
        ReplayVecEnv(rewards, terminated, truncated), pca.Args(gamma=0.95, gymnasium_normalization=gymnasium_rule)
    )
    envs.reset(seed=0)
    steps = [envs.step(np.array([[-3.0], [2.0]])) for _ in range(T)]
    got = np.stack([s[1] for s in steps])
    expected = independent_reward_scaling(rewards, terminated, truncated, 0.95, gymnasium_rule=gymnasium_rule)
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    assert got[150, 1] == 10.0 and np.abs(got[:150]).max() < 10.0
    np.testing.assert_array_equal(np.stack([s[4]["reward"] for s in steps]), rewards)  # the env's own rewards kept
    assert np.array_equal(envs.env.actions[0], [[-1.0], [0.5]])  # detail C5: the env gets them clipped to its bounds
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
    assert len(out["first_minibatch"]) == len(out["losses"]) > 0  # one an iteration, all checked below
    for first in out["first_minibatch"]:  # the rollout's log-probs equal the minibatch's recomputation
        assert first["ratio_max_dev"] < 1e-5 and first["clipfrac"] == 0.0 and abs(first["approx_kl"]) < 1e-7


def test_bootstrap_truncated_adds_the_final_value_at_truncations_only(tmp_path_factory, spy_run):
    _, _, (off, *_), log = spy_run
    _, _, (on, *_), _ = spy_train(tmp_path_factory, bootstrap_truncated=True, total_timesteps=128)
    ends = np.flatnonzero([v for k, v in log if k == "done"])  # the steps that ended episodes 0, 1, 2, ...
    truncated = [s for n, s in enumerate(ends) if n % 2 == 0 and s < 128]  # even episodes are truncated
    changed = torch.nonzero(on[:, 0] != off[:, 0]).ravel().tolist()
    assert changed == truncated and len(truncated) >= 6  # r + gamma * V(final observation) at those steps only


# ---- seed 004's switches: each turns off what it names and nothing else -----------------------------


@pytest.fixture(scope="module")
def spy_run_raw(tmp_path_factory):
    """The spy run with observation normalisation and reward scaling off (PPO-M's raw inputs, no clip)."""
    return spy_train(tmp_path_factory, norm_obs=False, reward_scaling="none")


def test_no_norm_obs_and_no_reward_scaling_give_the_raw_numbers(spy_run_raw, spy_run):
    out, batches, gae_rewards, log = spy_run_raw
    seen = np.stack([v for k, v in log if k == "obs"])[:512]  # every observation handed to the agent, in order
    obs = torch.cat([b["obs"] for b in batches]).numpy()
    np.testing.assert_array_equal(obs, seen.astype(np.float32))  # raw, the outlier 1e4 unclipped
    assert obs[399, 0] > 1e4
    raw = np.array([v for k, v in log if k == "reward"], np.float32)
    np.testing.assert_array_equal(torch.cat(gae_rewards).numpy().ravel(), raw)  # GAE gets the env's rewards
    # nothing else changed: the same actions are sampled for the same inputs, so only the inputs decide
    assert np.abs(obs - torch.cat([b["obs"] for b in spy_run[1]]).numpy()).max() > 1
    assert out["first_minibatch"][0]["ratio_max_dev"] < 1e-5


def test_clip_obs_inf_normalises_without_clipping(tmp_path_factory):
    out, batches, _, log = spy_train(tmp_path_factory, clip_obs=math.inf, total_timesteps=512)
    seen = np.stack([v for k, v in log if k == "obs"])
    obs = torch.cat([b["obs"] for b in batches]).numpy()
    m, v = prior_merged_moments(seen[:400])
    np.testing.assert_allclose(obs[399], (seen[399] - m) / np.sqrt(v + 1e-8), rtol=1e-5)
    assert obs[399, 0] > 10  # the outlier, normalised, is past the default clip and kept


@pytest.mark.parametrize("scaling", ["rewards", "none"])
def test_reward_scaling_by_the_rewards_or_none(scaling):
    g = np.random.default_rng(1)
    T, N = 200, 2
    rewards = g.normal(1.0, 2.0, size=(T, N))
    rewards[120, 0] = 400.0
    done = g.random((T, N)) < 0.05
    envs = pca.VecNormalize(
        ReplayVecEnv(rewards, done, np.zeros_like(done)), pca.Args(gamma=0.95, reward_scaling=scaling, clip_reward=12.0)
    )
    envs.reset(seed=0)
    got = np.stack([envs.step(np.zeros((N, 1)))[1] for _ in range(T)])
    if scaling == "none":
        np.testing.assert_array_equal(got, rewards)  # raw, 400 included: no C9 clip either
    else:  # PPO-NoClip's "rewards" (seed 004's ZFilter, center=False): the deviation from the running mean of all the
        # rewards so far divided by their running std, the mean added back; not the returns' std
        moments = [prior_merged_moments(rewards[: t + 1].ravel()) for t in range(T)]
        expected = np.stack([(rewards[t] - m) / np.sqrt(v + 1e-8) + m for t, (m, v) in enumerate(moments)])
        np.testing.assert_allclose(got, np.clip(expected, -12, 12), rtol=1e-9)
        assert got[120, 0] == 12.0 and np.abs(got[:120]).max() < 12
        by_returns = independent_reward_scaling(rewards, done, np.zeros_like(done), 0.95, clip=12.0)
        assert np.abs(by_returns - got).max() > 1e-2


def test_reward_scaling_by_the_rewards_keeps_their_mean():
    """Rewards around 5 with std 0.5 come out around 5 with std 1 (seed 004's code), not around 10 (r / std)."""
    rewards = np.random.default_rng(2).normal(5.0, 0.5, size=(2000, 1))
    done = np.zeros_like(rewards, dtype=bool)
    envs = pca.VecNormalize(ReplayVecEnv(rewards, done, done), pca.Args(reward_scaling="rewards", clip_reward=30.0))
    envs.reset(seed=0)
    got = np.stack([envs.step(np.zeros((1, 1)))[1] for _ in range(2000)])[1000:]
    assert abs(got.mean() - 5.0) < 0.1 and abs(got.std() - 1.0) < 0.05


def initial_weights(monkeypatch, **kw):
    """The agent's parameters as the first update finds them, from a short Hopper run."""
    kept, real_update = [], pca.update

    def spy(agent, optimizer, b, args):
        if not kept:
            kept.append({n: p.detach().clone() for n, p in agent.named_parameters()})
        return real_update(agent, optimizer, b, args)

    monkeypatch.setattr(pca, "update", spy)
    pca.train(tiny(pca, total_timesteps=64, **kw))
    return kept[0]


def test_no_ortho_init_is_xavier_uniform_with_zero_biases(monkeypatch):
    xavier, ortho = initial_weights(monkeypatch, ortho_init=False), initial_weights(monkeypatch)
    for name, w in xavier.items():
        if name.endswith("bias"):
            assert torch.all(w == 0)
        elif name.endswith("weight"):
            fan_out, fan_in = w.shape
            bound = math.sqrt(6 / (fan_in + fan_out))  # U(-bound, bound): variance bound^2 / 3 = 2 / (fan_in + fan_out)
            assert w.abs().max() <= bound and w.abs().max() > 0.8 * bound
            assert w.var().item() == pytest.approx(bound**2 / 3, rel=4 * math.sqrt(0.8 / w.numel()))  # 4 standard errors
            assert not torch.equal(w, ortho[name])
    # the heads' scales (0.01, 1.0) are orthogonal init's: under Xavier the mean head is as large as the others
    assert xavier["actor_mean.4.weight"].abs().max() > 0.1 > ortho["actor_mean.4.weight"].abs().max()
    assert torch.equal(xavier["actor_logstd"], ortho["actor_logstd"])


def test_max_grad_norm_inf_is_no_clipping(monkeypatch):
    unclipped = pca.train(tiny(pca, max_grad_norm=math.inf))
    clipped = pca.train(tiny(pca, max_grad_norm=1e-3))
    monkeypatch.setattr(pca.nn.utils, "clip_grad_norm_", lambda params, max_norm: None)
    without = pca.train(tiny(pca))
    assert unclipped["losses"] == without["losses"]
    assert all(torch.equal(p, q) for p, q in zip(unclipped["agent"].parameters(), without["agent"].parameters()))
    assert clipped["losses"][1:] != without["losses"][1:]


def test_grad_clip_scope_actor_clips_the_actor_alone(monkeypatch):
    """One iteration, so the rollout is the same in every run: with the actor's gradient alone clipped, the critic
    ends where an unclipped run's does and the actor where a jointly clipped run's does not."""
    runs = {
        name: pca.train(tiny(pca, total_timesteps=2 * 32, max_grad_norm=norm, grad_clip_scope=scope))
        for name, norm, scope in (("free", math.inf, "both"), ("both", 1e-3, "both"), ("actor", 1e-3, "actor"))
    }
    critic = {name: list(out["agent"].critic.parameters()) for name, out in runs.items()}
    actor = {name: [p for n, p in out["agent"].named_parameters() if not n.startswith("critic")] for name, out in runs.items()}
    assert all(torch.equal(p, q) for p, q in zip(critic["actor"], critic["free"]))
    assert not all(torch.equal(p, q) for p, q in zip(critic["both"], critic["free"]))
    assert not all(torch.equal(p, q) for p, q in zip(actor["actor"], actor["free"]))
    clipped, clip = [], pca.nn.utils.clip_grad_norm_  # what each clip_grad_norm_ call is given, and the norm it finds
    monkeypatch.setattr(
        pca.nn.utils,
        "clip_grad_norm_",
        lambda params, max_norm: clipped.append((params := list(params), clip(params, max_norm), max_norm)),
    )
    out = pca.train(tiny(pca, total_timesteps=2 * 32, max_grad_norm=1e-3, grad_clip_scope="actor"))
    assert {id(p) for p in clipped[0][0]} == {id(p) for n, p in out["agent"].named_parameters() if not n.startswith("critic")}
    assert all(norm > 1e-3 for _, norm, _ in clipped)  # every call had something to clip
    with pytest.raises(pca.ConfigError, match="--grad-clip-scope must be both or actor"):
        pca.check_args(tiny(pca, grad_clip_scope="critic"))


def test_value_lr_is_the_critic_group_and_anneals_with_the_policy():
    out = pca.train(tiny(pca, learning_rate=3e-4, value_lr=1e-3, total_timesteps=2 * 32 * 5))
    actor, critic = out["optimizer"].param_groups
    assert {id(p) for p in critic["params"]} == {id(p) for p in out["agent"].critic.parameters()}
    assert {id(p) for p in actor["params"]} == {
        id(p) for n, p in out["agent"].named_parameters() if not n.startswith("critic")
    }
    assert (actor["initial_lr"], critic["initial_lr"]) == (3e-4, 1e-3)
    assert critic["lr"] == 0.0 and out["learning_rate"] == [3e-4 * (1 - k / 4) for k in range(5)]


def test_the_default_two_groups_train_as_one_optimizer_over_agent_parameters(monkeypatch):
    """The critic's own param group (at --learning-rate by default) changes nothing: bit for bit CleanRL's one
    Adam(agent.parameters())."""
    grouped = pca.train(tiny(pca))
    real_adam = torch.optim.Adam
    monkeypatch.setattr(
        pca.torch.optim, "Adam", lambda groups, **kw: real_adam([p for g in groups for p in g["params"]], **kw)
    )
    single = pca.train(tiny(pca))
    assert grouped["losses"] == single["losses"] and len(single["optimizer"].param_groups) == 1
    assert all(torch.equal(p, q) for p, q in zip(grouped["agent"].parameters(), single["agent"].parameters()))


def test_gaussian_kl_is_exact():
    g = torch.Generator().manual_seed(0)
    mean0, mean1 = torch.randn(20, 3, generator=g), torch.randn(20, 3, generator=g)
    logstd0, logstd1 = torch.randn(20, 3, generator=g) * 0.5, torch.randn(20, 3, generator=g) * 0.5
    normal = torch.distributions.Normal
    expected = torch.distributions.kl_divergence(normal(mean0, logstd0.exp()), normal(mean1, logstd1.exp())).sum(-1)
    torch.testing.assert_close(pca.gaussian_kl(mean0, logstd0, mean1, logstd1), expected)
    assert torch.equal(pca.gaussian_kl(mean0, logstd0, mean0, logstd0), torch.zeros(20))  # a policy with itself
    # a shift of the mean by d at std s: d^2 / (2 s^2) per component
    shifted = pca.gaussian_kl(mean0, torch.full((20, 3), math.log(0.5)), mean0 + 0.3, torch.full((20, 3), math.log(0.5)))
    torch.testing.assert_close(shifted, torch.full((20,), 3 * 0.3**2 / (2 * 0.25)))


def test_figure2_diagnostics_equal_a_brute_force_computation(monkeypatch):
    import copy

    before, real_update = [], pca.update

    def spy(agent, optimizer, b, args):
        before.append((copy.deepcopy(agent), {k: v.clone() for k, v in b.items()}))
        out = real_update(agent, optimizer, b, args)
        before[-1] += (copy.deepcopy(agent),)
        return out

    monkeypatch.setattr(pca, "update", spy)
    out = pca.train(tiny(pca, clip_coef=1e32, anneal_lr=False, num_steps=64, total_timesteps=2 * 64 * 2))
    for (old, b, new), losses in zip(before, out["losses"]):
        with torch.no_grad():  # in float64, where the KL's cancellations cost no digits
            obs, actions = b["obs"].double(), b["actions"].double()
            pi_old, pi_new = (torch.distributions.Normal(a.double().actor_mean(obs), a.actor_logstd.exp()) for a in (old, new))
            ratios = (pi_new.log_prob(actions).sum(-1) - b["logprobs"].double()).exp()
            kl = torch.distributions.kl_divergence(pi_old, pi_new).sum(-1)
        assert losses["max_ratio"] == pytest.approx(ratios.max().item(), rel=1e-5)
        assert losses["mean_kl"] == pytest.approx(kl.mean().item(), rel=1e-4)
        assert losses["max_kl"] == pytest.approx(kl.max().item(), rel=1e-4)
        assert losses["max_ratio"] > 1 and losses["max_kl"] > losses["mean_kl"] > 0


# ---- hack safety: the edits a researcher makes to a copy must work (issue 19) -----------------------


def test_hack_temperature_changes_what_the_rollout_samples(monkeypatch):
    """The Gaussian variant of tests/hacks.py's Categorical check: with the mean head fixed to a constant, scaling
    the mean by 1 / temperature moves the mean of the actions the rollout samples; the first ratio stays 1."""
    bias, temperature = torch.tensor([0.5, -0.25, 0.1]), 0.25
    sampled = edited_agent(
        pca,
        monkeypatch,
        "actor_mean",
        lambda agent: setattr(agent, "actor_mean", nn.Sequential(agent.actor_mean, Scale(1 / temperature))),
        bias=bias,
    )
    out = pca.train(tiny(pca, num_envs=8, num_steps=256, total_timesteps=2048))  # one rollout, all from the edited head
    actions = torch.cat(sampled)
    assert actions.shape == (2048, 3), "the rollout did not sample through Agent.get_action_and_value"
    tol = 4 / math.sqrt(len(actions))  # std 1 per component
    assert (actions.mean(0) - bias / temperature).abs().max() < tol and (actions.mean(0) - bias).abs().min() > 2 * tol
    assert all(f["ratio_max_dev"] < 1e-5 for f in out["first_minibatch"])


def test_hack_every_param_group_anneals():
    # tests/hacks.py's check (d) with no edit: the critic has a param group of its own here, at --value-lr
    with recorded_rates() as rates:
        out = pca.train(tiny(pca, value_lr=CRITIC_LR))
    assert_every_group_annealed(rates, out["learning_rate"])


# ---- checkpoints, evaluation, resume -------------------------------------------------------------


def test_checkpoint_round_trip_evaluates_with_the_frozen_statistics():
    out = pca.train(tiny(pca, save_model=True))
    ckpt, _ = pca.load_checkpoint(out["checkpoint"])
    assert all(np.array_equal(a, b) for a, b in zip(ckpt["obs_rms"], out["obs_rms"]))
    assert ckpt["obs_rms"][2] == pytest.approx(1e-4 + 2 + 2 * 32 * 3) and ckpt["ret_rms"][2] == pytest.approx(
        1e-4 + 2 * 32 * 3
    )
    assert all(torch.equal(ckpt["model"][k], v) for k, v in out["agent"].state_dict().items())
    from_ckpt = pca.evaluate(out["checkpoint"], eval_episodes=3, seed=7)
    assert len(from_ckpt) == 3 and from_ckpt == pca.evaluate(out["checkpoint"], eval_episodes=3, seed=7)
    # the statistics matter: the same agent with fresh ones (as the reference evaluates) scores otherwise
    ckpt["obs_rms"] = (np.zeros(11), np.ones(11), 1e-4)
    torch.save(ckpt, "fresh_statistics.pt")
    assert pca.evaluate("fresh_statistics.pt", eval_episodes=3, seed=7) != from_ckpt
    with pytest.raises(pca.ConfigError, match="eval-episodes must be"):
        pca.evaluate(out["checkpoint"], eval_episodes=0)


def test_resume_matches_uninterrupted_run(monkeypatch):
    # Hopper's episodes end early and at random: the checkpoint falls mid-episode, after resets
    full, resumed = assert_resume_matches_uninterrupted_run(
        pca, tiny(pca, total_timesteps=2 * 32 * 5, save_model=True, save_every=2), monkeypatch
    )
    assert len(resumed["episodic_return"]) < len(full["episodic_return"])  # games ended before the checkpoint too
    for k in ("obs_rms", "ret_rms"):
        assert all(np.array_equal(a, b) for a, b in zip(resumed[k], full[k]))
    np.testing.assert_array_equal(resumed["ret"], full["ret"])


def test_resume_without_env_state_continues_with_fresh_episodes(monkeypatch, capsys):
    full, resumed = assert_resumes_with_fresh_episodes(
        pca, tiny(pca, save_model=True, save_every=1, total_timesteps=128), capsys, monkeypatch, unsaveable="get_physics"
    )
    # the statistics went on from the checkpoint's, plus the first observations of the 2 fresh episodes
    assert resumed["obs_rms"][2] == pytest.approx(full["obs_rms"][2] + 2)


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Walker2d-v4"])
def test_mujoco_v4_and_v5_ids_train(env_id):
    out = pca.train(tiny(pca, env_id=env_id, num_envs=1, total_timesteps=64, num_steps=64))
    assert out["global_step"] == 64 and np.isfinite(out["losses"][0]["value_loss"])
    assert out["obs_rms"][0].shape == (17,) and out["agent"].actor_logstd.shape == (1, 6)


def test_the_hyperparameters_text_ends_with_the_installed_mujoco():
    """Issue 38: MuJoCo's version decides some envs' physics. A row after the Args, where benchmark/runs.py's
    read_run finds it for the run summaries, report.py, compare.py and lockstep.py."""
    from benchmark.runs import read_run

    out = pca.train(tiny(pca, num_envs=1, num_steps=32, total_timesteps=32))
    hparams = read_run(out["run_dir"])["hparams"]
    assert list(hparams)[-1] == "mujoco" and hparams["mujoco"] == importlib.metadata.version("mujoco")
    assert (hparams["env_id"], hparams["num_steps"]) == ("Hopper-v4", "32")  # the Args' rows before it, as they were


# ---- run identity and resume (issue 24) ------------------------------------------------------------


def test_resume_applies_a_longer_budget_and_refuses_other_flags(tmp_path, monkeypatch):
    full = pca.train(tiny(pca, save_model=True, total_timesteps=64))
    with pytest.raises(pca.ConfigError, match="--gymnasium-normalization cannot change when resuming"):
        pca.train(pca.Args(resume=full["checkpoint"], gymnasium_normalization=True))
    with pytest.raises(pca.ConfigError, match="--clip-obs cannot change"):
        pca.train(pca.Args(resume=full["checkpoint"], clip_obs=5.0))
    with pytest.raises(pca.ConfigError, match="leaves no iteration to run"):  # the run is already finished
        pca.train(pca.Args(resume=full["checkpoint"]))
    longer = resume_elsewhere(pca, full, tmp_path, monkeypatch, total_timesteps=128)
    assert longer["global_step"] == 128 and len(longer["losses"]) == 1


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"env_id": "NoSuchEnv-v9"}, "unknown env id"),
        ({"env_id": "CartPole-v1"}, "Box only"),
        ({"clip_obs": 0.0}, "clip-obs must be a finite number > 0 or inf"),
        ({"reward_scaling": "return"}, "--reward-scaling must be returns, rewards or none, got 'return'"),
        ({"learning_rate": math.inf}, "--learning-rate must be a finite number > 0, got inf"),
        ({"ent_coef": math.nan}, "--ent-coef must be a finite number, got nan"),
    ]
    + PPO_BAD_INPUT,
)
def test_bad_input_rejected_before_training(kw, message):
    assert_rejected_before_training(pca, tiny(pca, **kw), message)


def test_a_clip_of_inf_is_accepted_where_it_means_no_clip():
    for name in pca.OFF_AT_INF:  # and only there (learning_rate above)
        pca.check_args(tiny(pca, **{name: math.inf}))
    pca.check_args(tiny(pca, ent_coef=-0.01, clip_coef=1e32))  # PPO-NoClip's settings


def test_missing_mujoco_or_renderer_is_a_config_error(monkeypatch):
    real_make = gym.make

    def make(env_id, **kw):  # what gymnasium raises when mujoco (or its imageio dependency) is not installed
        raise gym.error.DependencyNotInstalled("No module named 'mujoco'")

    monkeypatch.setattr(pca.gym, "make", make)
    with pytest.raises(pca.ConfigError, match=r"Hopper-v4 could not be created .*pip install 'gymnasium\[mujoco\]'"):
        pca.train(tiny(pca))

    def make_without_opengl(env_id, **kw):
        env = real_make(env_id, **kw)
        env.render = no_opengl
        return env

    def no_opengl():  # what MuJoCo raises with no OpenGL context to render in
        raise RuntimeError("an OpenGL platform library has not been loaded into this process")

    monkeypatch.setattr(pca.gym, "make", make_without_opengl)
    with pytest.raises(pca.ConfigError, match="cannot create or render Hopper-v4 .*OpenGL.*MUJOCO_GL=egl"):
        pca.train(tiny(pca, capture_video=True))
    assert not os.path.exists("runs")


def test_cli_error_is_one_line_without_traceback():
    code, _, stderr = run_cli("ppo_continuous_action.py", ["--env-id", "CartPole-v1", "--no-cuda"])
    assert code != 0 and "Traceback" not in stderr
    assert stderr.strip().splitlines() == [
        "ppo_continuous_action.py: error: CartPole-v1 has a Discrete action "
        "space; ppo_continuous_action.py handles Box only (use ppo.py for Discrete actions)"
    ]


def test_cli_help_writes_nothing():
    code, printed, _ = run_cli("ppo_continuous_action.py", ["--help"])
    assert code == 0 and "scaled rewards are clipped" in printed and "HalfCheetah-v4" in printed
    assert os.listdir(".") == []


def test_an_env_that_cannot_be_made_is_not_blamed_on_a_display():
    """Issue 37.10: HalfCheetah-v3 (mujoco-py, moved out of gymnasium) was refused with "without a display:
    MUJOCO_GL=egl", a fix for rendering, which it did not do."""
    with pytest.raises(pca.ConfigError) as refused:
        pca.check_args(pca.Args(env_id="HalfCheetah-v3"))
    assert str(refused.value).startswith("cannot create or render HalfCheetah-v3 (")
    assert str(refused.value).endswith("); use another version of the id (MuJoCo: -v4, -v5)")


def test_a_choice_tyro_cannot_parse_is_one_line():
    """Issue 51.5: tyro refused these in a box of 6 lines, and this script's own one-line checks of them (still there for
    train(Args(...))) were unreachable from the command line."""
    for flag, choices in (("--reward-scaling", "('returns', 'rewards', 'none')"), ("--grad-clip-scope", "('both', 'actor')")):
        assert_cli_error_is_one_line(
            "ppo_continuous_action.py",
            [flag, "bogus"],
            f"ppo_continuous_action.py: error: invalid choice 'bogus' for argument '{flag}'. Expected one of {choices}.",
        )


def test_a_run_on_the_published_v4_envs_is_quiet_and_writes_no_mujoco_log():
    """Issue 72: gymnasium's "v4 is out of date" warning, MuJoCo 4's settotalmass deprecation (HalfCheetah's model), its
    MUJOCO_LOG.TXT in the working directory and the CUDA notice of an unnamed --cuda were printed or written by every
    CPU run on a v4 env; now nothing is, and the run still ends with its summary."""
    code, stdout, stderr = run_cli(
        "ppo_continuous_action.py",
        ["--env-id", "HalfCheetah-v4", "--num-steps", "64", "--num-minibatches", "2", "--total-timesteps", "128"],
    )
    assert code == 0 and stderr == "" and stdout.splitlines()[-1].startswith("seconds: ")
    assert sorted(os.listdir(".")) == ["runs"]
