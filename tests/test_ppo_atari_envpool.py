"""Tests of ppo_atari_envpool.py: envpool's processing settings, the masking of its reset steps, the
logged full-game score, video through envpool's renderer, bad input and the hack-safety checks. The network
and the PPO math are the ones of ppo_atari.py (tested there and in test_ppo.py).
"""

import os

import imageio
import numpy as np
import pytest
import torch
from networks import assert_channels_last_is_the_same_math
from promises import (
    PPO_BAD_INPUT,
    assert_cli_error_is_one_line,
    assert_rejected_before_training,
    assert_resumes_with_fresh_episodes,
    read_scalars,
)
from tiny import skip_updates, tiny

import ppo_atari_envpool as pool

# Asterix: short random games (~190 agent steps), several lives, and raw rewards of 50
ASTERIX = "Asterix-v5"


def test_reference_defaults_and_v4_equivalent_processing():
    a = pool.Args()
    assert (a.env_id, a.num_envs, a.num_steps, a.num_minibatches, a.update_epochs) == ("Breakout-v5", 8, 128, 4, 4)
    assert (a.clip_coef, a.ent_coef, a.learning_rate, a.total_timesteps) == (0.1, 0.01, 2.5e-4, 10_000_000)
    envs = pool.make_env("Breakout-v5", 2, 1)
    c = envs.env.spec.config
    assert (c.episodic_life, c.reward_clip, c.repeat_action_probability) == (True, True, 0.0)
    assert (c.frame_skip, c.noop_max, c.stack_num, c.img_height, c.img_width, c.gray_scale) == (4, 30, 4, 84, 84, True)
    assert c.use_fire_reset and c.use_inter_area_resize and c.max_episode_steps == 27000 and c.seed == 1
    obs, _ = envs.reset()
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    assert envs.single_observation_space.shape == (4, 84, 84) and envs.single_action_space.n == 4


def test_channels_last_is_the_same_math():
    x = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    assert_channels_last_is_the_same_math(lambda cl: pool.Agent(4, 6, cl), x, on_by_default=pool)


def test_envpool_reset_step_ignores_the_action():
    """The behaviour the masking exists for: after a done, the next step's action changes nothing."""
    a, b = pool.make_env(ASTERIX, 1, 5), pool.make_env(ASTERIX, 1, 5)
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


def test_reset_steps_are_trained_on_by_default_as_the_reference_does(monkeypatch):
    sizes, real_update = [], pool.update
    monkeypatch.setattr(
        pool, "update", lambda agent, optimizer, b, args: sizes.append(len(b["obs"])) or real_update(agent, optimizer, b, args)
    )
    out = pool.train(tiny(pool, num_steps=2, num_minibatches=1, total_timesteps=4 * 2 * 120))
    assert len(out["episodic_return"]) >= 1 and sizes == [4 * 2] * 120  # games ended, and no step left the batch


def test_reset_steps_are_masked_out_of_the_update_with_the_flag(monkeypatch):
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
    # short rollouts: reset steps also fall on the first step of a rollout (the done was the last one's)
    out = pool.train(tiny(pool, num_steps=2, num_minibatches=1, total_timesteps=4 * 2 * 120, mask_reset_steps=True))
    previous_done, masked, across = torch.zeros(4), 0, 0
    for (rewards, dones, returns), b in zip(seen["gae"], seen["batch"]):
        # a step is a reset step exactly when the step before it (in the same env) ended an episode
        reset_step = torch.cat([previous_done.unsqueeze(0), dones[:-1]]).bool()
        previous_done, masked, across = dones[-1], masked + int(reset_step.sum()), across + int(reset_step[0].sum())
        assert len(b["obs"]) == 4 * 2 - int(reset_step.sum())
        assert torch.all(rewards[reset_step] == 0)  # envpool's reset steps pay nothing
        # the batch holds exactly the other steps' targets, in order
        torch.testing.assert_close(b["returns"], returns.reshape(-1)[~reset_step.reshape(-1)])
        # value targets at an episode end are just its reward: nothing flows back from the reset step
        torch.testing.assert_close(returns[dones.bool()], rewards[dones.bool()])
    assert masked >= 5 and across >= 1  # lives were lost, and a reset step opened a rollout
    assert len(out["first_minibatch"]) == len(out["losses"]) > 0  # one an iteration, all checked below
    for first in out["first_minibatch"]:  # rollout and update score the same (unmasked) steps
        assert first["ratio_max_dev"] < 1e-5 and first["clipfrac"] == 0.0


def test_minibatches_partition_the_masked_batch(monkeypatch):
    """update() splits the batch left after masking into num_minibatches disjoint parts that cover it."""
    batches = []
    real_randperm = torch.randperm

    def spy_randperm(n, **kw):
        perm = real_randperm(n, **kw)
        batches.append(perm)
        return perm

    agent = pool.Agent(4, 9)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-4, eps=1e-5)
    n = 4 * 64 - 3  # three reset steps removed
    b = {
        "obs": torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8),
        "actions": torch.randint(0, 9, (n,)),
        "values": torch.randn(n),
        "advantages": torch.randn(n),
        "returns": torch.randn(n),
    }
    with torch.no_grad():
        _, b["logprobs"], _, _ = agent.get_action_and_value(b["obs"], b["actions"])
    seen = []
    real_forward = agent.get_action_and_value
    monkeypatch.setattr(agent, "get_action_and_value", lambda x, action=None: seen.append(len(x)) or real_forward(x, action))
    monkeypatch.setattr(pool.torch, "randperm", spy_randperm)
    losses, first = pool.update(agent, optimizer, b, tiny(pool, update_epochs=2, num_minibatches=4))
    assert [len(p) for p in batches] == [n, n] and seen == [64, 64, 64, 61] * 2
    assert first["ratio_max_dev"] < 1e-5 and np.isfinite(list(losses.values())).all()


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
    out = pool.train(tiny(pool, num_envs=2, num_steps=128, total_timesteps=2 * 128 * 3))
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
    assert read_scalars(out["run_dir"], "charts/episodic_return") == games
    assert all(g % 50 == 0 for g in games) and sum(games) > 10 * sum(clipped_games)  # raw, not clipped
    assert all(length > 50 for length in out["episodic_length"])  # whole games, not lives


def test_capture_video_records_env_0_through_envpools_renderer(monkeypatch):
    skip_updates(monkeypatch, pool)
    out = pool.train(tiny(pool, num_envs=2, num_steps=128, total_timesteps=2 * 128 * 2, capture_video=True))
    videos = sorted(os.listdir(f"videos/{out['run_name']}"))
    # game 0 of env 0 ended (~190 steps) and was written then; game 1 (on the schedule) was cut off and written
    # at close, as gymnasium's RecordVideo does
    assert videos == ["rl-video-episode-0.mp4", "rl-video-episode-1.mp4"]
    reader = imageio.get_reader(f"videos/{out['run_name']}/rl-video-episode-0.mp4")
    frames = [reader.get_data(i) for i in (0, reader.count_frames() - 1)]
    assert 100 < reader.count_frames() < 256 and frames[0].shape == (210, 160, 3)  # one RGB screen per step
    assert not np.array_equal(frames[0], frames[1])


def test_resume_and_evaluate(capsys, monkeypatch):
    args = tiny(pool, num_steps=16, total_timesteps=4 * 16 * 2, save_model=True, save_every=1)
    out, resumed = assert_resumes_with_fresh_episodes(pool, args, capsys, monkeypatch)
    assert resumed["learning_rate"] == [0.0]  # the schedule continued to its end, not restarted
    scores = pool.evaluate(out["checkpoint"], eval_episodes=2, seed=0)
    assert scores == pool.evaluate(out["checkpoint"], eval_episodes=2, seed=0)  # seeded: repeatable
    assert len(scores) == 2 and all(s % 50 == 0 and s > 0 for s in scores)  # whole-game Asterix scores


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(env_id="NoSuchGame-v5"), "unknown env id"),
        (dict(env_id="CartPole-v1"), "not an Atari game"),
        (dict(total_timesteps=10), "leaves no iteration to run"),
    ]
    + PPO_BAD_INPUT,
)
def test_bad_input_rejected_before_training(kw, message):
    assert_rejected_before_training(pool, tiny(pool, **kw), message)


# ---- hack safety: the edits a researcher makes to a copy must work (issue 19) -----------------------


def test_cli_error_is_one_line_without_traceback():
    assert_cli_error_is_one_line(
        "ppo_atari_envpool.py",
        ["--env-id", "CartPole-v1"],
        ("ppo_atari_envpool.py: error: CartPole-v1 is not an Atari game; ppo_atari_envpool.py needs one, e.g. Breakout-v5"),
    )
