"""Tests of ppo_atari_envpool.py: envpool's processing settings, the masking of its reset steps, the
logged full-game score and bad input. The network and the PPO math are the ones of ppo_atari.py.
"""

import numpy as np
import pytest
import torch

import ppo_atari_envpool as pool
from test_ppo import assert_rejected_before_training, assert_resumes_with_fresh_episodes
from test_ppo_atari import assert_channels_last_is_the_same_math, skip_updates

# Asterix: short random games (~190 agent steps), several lives, and raw rewards of 50
ASTERIX = "Asterix-v5"


def tiny(**kw):
    base = dict(cuda=False, env_id=ASTERIX, num_envs=4, num_steps=64, num_minibatches=2, update_epochs=1,
                total_timesteps=4 * 64 * 2)
    base.update(kw)
    return pool.Args(**base)


def test_reference_defaults_and_v4_equivalent_processing():
    a = pool.Args()
    assert (a.env_id, a.num_envs, a.num_steps, a.num_minibatches, a.update_epochs) == ("Breakout-v5", 8, 128, 4, 4)
    assert (a.clip_coef, a.ent_coef, a.learning_rate, a.total_timesteps) == (0.1, 0.01, 2.5e-4, 10_000_000)
    envs = pool.make_envs("Breakout-v5", 2, 1)
    c = envs.spec.config
    assert (c.episodic_life, c.reward_clip, c.repeat_action_probability) == (True, True, 0.0)
    assert (c.frame_skip, c.noop_max, c.stack_num, c.img_height, c.img_width, c.gray_scale) == (4, 30, 4, 84, 84, True)
    assert c.use_fire_reset and c.max_episode_steps == 27000
    obs, _ = envs.reset()
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8


def test_channels_last_is_the_same_math():
    x = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    assert_channels_last_is_the_same_math(lambda cl: pool.Agent(4, 6, cl), lambda a, x: a.get_logits_and_value(x), x)
    assert pool.Args().channels_last


def test_envpool_reset_step_ignores_the_action():
    """The behaviour the masking exists for: after a done, the next step's action changes nothing."""
    a, b = pool.make_envs(ASTERIX, 1, 5), pool.make_envs(ASTERIX, 1, 5)
    a.reset(), b.reset()
    rng = np.random.default_rng(0)
    resets = 0
    for _ in range(400):
        act = rng.integers(0, 9, size=1)
        oa, ra, ta, ua, _ = a.step(act)
        ob, rb, tb, ub, _ = b.step(act)
        if ta[0] or ua[0]:
            oa, ra, *_ = a.step(np.array([1]))
            ob, rb, *_ = b.step(np.array([7]))  # a different action on the reset step
            np.testing.assert_array_equal(oa, ob)
            assert ra[0] == rb[0] == 0.0
            resets += 1
    assert resets >= 2


def test_reset_steps_are_masked_out_of_the_update(monkeypatch):
    seen = {}
    real_gae, real_update = pool.compute_gae, pool.update

    def spy_gae(rewards, values, dones, next_value, gamma, lam):
        adv, ret = real_gae(rewards, values, dones, next_value, gamma, lam)
        seen.setdefault("gae", []).append((rewards.clone(), dones.clone(), ret.clone()))
        return adv, ret

    def spy_update(agent, optimizer, b, args):
        seen.setdefault("batch", []).append({k: v.clone() for k, v in b.items()})
        return real_update(agent, optimizer, b, args)

    monkeypatch.setattr(pool, "compute_gae", spy_gae)
    monkeypatch.setattr(pool, "update", spy_update)
    out = pool.train(tiny(num_steps=64, total_timesteps=4 * 64 * 2))
    previous_done = torch.zeros(4)
    for (rewards, dones, returns), b, masked in zip(seen["gae"], seen["batch"], out["masked_steps"]):
        # a step is a reset step exactly when the step before it (in the same env) ended an episode
        reset_step = torch.cat([previous_done.unsqueeze(0), dones[:-1]]).bool()
        previous_done = dones[-1]
        assert masked == int(reset_step.sum()) and len(b["obs"]) == 4 * 64 - masked
        assert torch.all(rewards[reset_step] == 0)  # envpool's reset steps pay nothing
        # the batch holds exactly the other steps' targets, in order
        torch.testing.assert_close(b["returns"], returns.reshape(-1)[~reset_step.reshape(-1)])
        # value targets at an episode end are just its reward: nothing flows back from the reset step
        torch.testing.assert_close(returns[dones.bool()], rewards[dones.bool()])
    assert sum(out["masked_steps"]) >= 2  # lives were lost, so the mask really removed steps
    for first in out["first_minibatch"]:
        assert first["ratio_max_dev"] < 1e-5


def test_logged_return_is_raw_full_game_score(monkeypatch):
    steps = []
    real_make = pool.make_envs

    class Recorder:  # records what envpool returns, for an independent per-game tally
        def __init__(self, envs):
            self.envs = envs

        def __getattr__(self, name):
            return getattr(self.envs, name)

        def step(self, action):
            out = self.envs.step(action)
            steps.append((out[1].copy(), out[3].copy(), {k: out[4][k].copy() for k in ("reward", "terminated")}))
            return out

    monkeypatch.setattr(pool, "make_envs", lambda *a: Recorder(real_make(*a)))
    skip_updates(monkeypatch, pool)
    out = pool.train(tiny(num_envs=2, num_steps=128, total_timesteps=2 * 128 * 3))
    games, score, clipped, clipped_games = [], np.zeros(2), np.zeros(2), []
    for reward, truncated, info in steps:
        assert set(np.unique(reward)) <= {-1.0, 0.0, 1.0}
        np.testing.assert_array_equal(reward, np.sign(info["reward"]))  # info["reward"] is the raw reward
        score += info["reward"]
        clipped += reward
        for i in np.flatnonzero(info["terminated"].astype(bool) | truncated):
            games.append(score[i])
            clipped_games.append(clipped[i])
            score[i] = clipped[i] = 0.0
    assert len(games) >= 2
    assert out["episodic_return"] == games
    assert all(g % 50 == 0 for g in games) and sum(games) > 10 * sum(clipped_games)  # raw, not clipped
    assert all(length > 50 for length in out["episodic_length"])  # whole games, not lives


def test_resume_and_evaluate(capsys, monkeypatch):
    args = tiny(num_steps=16, total_timesteps=4 * 16 * 2, save_model=True, save_every=1)
    out, resumed = assert_resumes_with_fresh_episodes(pool, args, capsys, monkeypatch)
    assert resumed["learning_rate"] == [0.0]  # the schedule continued to its end, not restarted
    scores = pool.evaluate(out["checkpoint"], eval_episodes=1, seed=0)
    assert scores == pool.evaluate_agent(out["agent"], ASTERIX, eval_episodes=1, seed=0)
    assert len(scores) == 1 and scores[0] % 50 == 0


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(env_id="NoSuchGame-v5"), "unknown env id"),
        (dict(env_id="CartPole-v1"), "not an Atari game"),
        (dict(num_minibatches=3), "not divisible"),
        (dict(capture_video=True), "not supported with envpool"),
    ],
)
def test_bad_input_rejected_before_training(kw, message):
    assert_rejected_before_training(pool, tiny(**kw), message)


def test_foreign_checkpoint_rejected():
    torch.save({"script": "ppo_atari.py"}, "other.pt")
    with pytest.raises(pool.ConfigError, match="written by ppo_atari.py, not ppo_atari_envpool.py"):
        pool.train(pool.Args(resume="other.pt"))
