"""Tests of ppo_atari.py: each Atari wrapper against the real emulator (ALE), the network, the logged
game score, checkpoints and bad input. The core PPO math is tested in test_ppo.py; here only its contract.
"""

import os

import ale_py
import gymnasium as gym
import numpy as np
import pytest
import torch
from networks import assert_channels_last_is_the_same_math, assert_heads_read_one_trunk_of_scaled_pixels
from promises import (
    ATARI_BAD_INPUT,
    PPO_LOGGED,
    assert_cli_error_is_one_line,
    assert_envs_of_another_version_refused,
    assert_logged,
    assert_rejected_before_training,
    assert_resume_matches_uninterrupted_run,
    assert_resumes_with_fresh_episodes,
    read_scalars,
)
from tiny import ASTERIX, skip_updates, tiny

import ppo_atari


class RawFrames(gym.Wrapper):
    """Records every raw frame and reward the emulator returns (sits right above the ALE env)."""

    def __init__(self, env):
        super().__init__(env)
        self.frames, self.rewards = [], []

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.frames.append(obs.copy())
        self.rewards.append(reward)
        return obs, reward, terminated, truncated, info


def test_nature_cnn_init_and_pixel_scaling():
    torch.manual_seed(0)
    agent = ppo_atari.Agent(4, 6)
    layers = {n: m for n, m in agent.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))}
    expected = {
        "network.0": 2**0.5,
        "network.2": 2**0.5,
        "network.4": 2**0.5,
        "network.7": 2**0.5,
        "actor": 0.01,
        "critic": 1.0,
    }
    assert set(layers) == set(expected)
    for name, std in expected.items():
        w = layers[name].weight.detach().reshape(layers[name].weight.shape[0], -1)
        np.testing.assert_allclose(torch.linalg.svdvals(w).numpy(), std, rtol=1e-4)
        assert torch.all(layers[name].bias == 0)
    assert layers["network.7"].in_features == 64 * 7 * 7
    # detail A9: uint8 pixels give the same outputs as the float input already scaled to [0, 1]; both heads
    # read one trunk (detail A8)
    assert_heads_read_one_trunk_of_scaled_pixels(
        agent, torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8), torch.tensor([0, 5])
    )


def test_channels_last_is_the_same_math():
    x = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    assert_channels_last_is_the_same_math(lambda cl: ppo_atari.Agent(4, 6, cl), x, on_by_default=ppo_atari)


def test_observation_shape_dtype_and_frame_stack():
    env = ppo_atari.make_env("BreakoutNoFrameskip-v4")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert all(np.array_equal(obs[0], obs[k]) for k in range(4))  # reset fills the stack with its frame
    prev = obs
    for _ in range(5):
        obs, *_ = env.step(3)
        assert np.array_equal(obs[:3], prev[1:])  # oldest frame dropped, newest appended
        prev = obs
    assert not np.array_equal(obs[3], obs[2])  # frames do change (the ball moves after FIRE)


def test_max_pool_is_elementwise_max_of_last_two_raw_frames():
    raw = RawFrames(gym.make("BreakoutNoFrameskip-v4"))
    env = ppo_atari.MaxAndSkip(raw)
    env.reset(seed=1)
    differing = 0
    for action in [1, 2, 2, 3, 3, 1, 0, 2]:
        obs, reward, terminated, truncated, _ = env.step(action)
        assert len(raw.frames) % 4 == 0 and not (terminated or truncated)
        np.testing.assert_array_equal(obs, np.maximum(raw.frames[-2], raw.frames[-1]))
        assert reward == sum(raw.rewards[-4:])
        differing += not np.array_equal(raw.frames[-2], raw.frames[-1])
    assert differing > 0  # the check compared frames that really differ


def test_noop_count_in_range_and_played():
    counts = []
    env = ppo_atari.NoopReset(gym.make("BreakoutNoFrameskip-v4"))
    env.reset(seed=0)  # seeding once: a seeded reset reloads the ROM (slow)
    for _ in range(40):
        env.reset()
        counts.append(env.last_noops)
        # independent: the emulator's own frame counter says how many frames were played since reset
        assert env.unwrapped.ale.getEpisodeFrameNumber() == env.last_noops
    assert min(counts) >= 1 and max(counts) <= 30
    assert len(set(counts)) > 10  # really random


def test_pipeline_rewards_are_signs_of_raw_rewards():
    env = ppo_atari.make_env(ASTERIX)
    raw = env
    while not isinstance(raw, gym.wrappers.RecordEpisodeStatistics):
        raw = raw.env
    recorder = RawFrames(raw.env)
    raw.env = recorder  # record the emulator's rewards below every wrapper
    env.reset(seed=0)
    env.action_space.seed(0)
    clipped, summed = [], []
    for _ in range(150):
        n = len(recorder.rewards)
        _, r, terminated, truncated, _ = env.step(env.action_space.sample())
        clipped.append(r)
        summed.append(sum(recorder.rewards[n:]))
        if terminated or truncated:
            env.reset()
    assert set(clipped) <= {-1.0, 0.0, 1.0}
    np.testing.assert_array_equal(clipped, np.sign(summed))
    assert max(summed) > 1  # the raw rewards were bigger than the clipped ones


def test_fire_reset_launches_each_ball_in_games_that_wait_for_fire():
    env = ppo_atari.make_env("BreakoutNoFrameskip-v4")
    ale = env.unwrapped.ale
    env.reset(seed=0)
    for lives_left in (4, 3):  # the first ball, then the one after a life loss (the reset EpisodicLife asks for)
        for _ in range(100):  # the agent only does NOOP: the wrapper's FIRE put the ball in play, and it is missed
            *_, terminated, _, _ = env.step(0)
            if terminated:
                break
        assert terminated and ale.lives() == lives_left
        env.reset()
    raw = gym.make("BreakoutNoFrameskip-v4")  # the same game without the wrapper waits for FIRE forever
    raw.reset(seed=0)
    for _ in range(2000):
        raw.step(0)
    assert raw.unwrapped.ale.lives() == 5
    # games with no FIRE action get no FIRE presses
    asterix = ppo_atari.make_env(ASTERIX)
    wrappers = []
    while hasattr(asterix, "env"):
        wrappers.append(type(asterix))
        asterix = asterix.env
    assert ppo_atari.NoopReset in wrappers and ppo_atari.FireReset not in wrappers


def test_life_loss_ends_training_episode_but_not_the_game():
    envs = ppo_atari.make_envs(tiny(ppo_atari, env_id="BreakoutNoFrameskip-v4", num_envs=1), "x")
    ale = envs.envs[0].unwrapped.ale
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    life_losses = 0
    while True:
        lives_before, frame_before = ale.lives(), ale.getEpisodeFrameNumber()
        _, _, term, trunc, infos = envs.step(rng.integers(0, 4, size=1))
        if not term[0]:
            continue
        final_info = infos["final_info"]
        if ale.lives() > 0 and ale.getEpisodeFrameNumber() > frame_before:
            # a life loss: terminated for learning, the game continued (same episode, one life less)
            life_losses += 1
            assert ale.lives() == lives_before - 1
            assert "episode" not in final_info
        else:
            # the game is over: it was really reset and its score reported once
            assert lives_before == 1 and final_info["_episode"][0]
            assert ale.lives() == 5 and ale.getEpisodeFrameNumber() <= 30 + 2 * 4  # no-ops, FIRE, RIGHT
            break
    assert life_losses == 4


def test_logged_return_is_raw_full_game_score(monkeypatch):
    games, current = [], {}
    original_step = ale_py.env.AtariEnv.step

    def recording_step(self, action, *a, **kw):  # an independent tally of the emulator's rewards
        obs, reward, terminated, truncated, info = original_step(self, action, *a, **kw)
        current[id(self)] = current.get(id(self), 0.0) + reward
        if terminated or truncated:
            games.append(current.pop(id(self)))
        return obs, reward, terminated, truncated, info

    monkeypatch.setattr(ale_py.env.AtariEnv, "step", recording_step)
    skip_updates(monkeypatch, ppo_atari)
    out = ppo_atari.train(tiny(ppo_atari, num_envs=1, num_steps=256, num_minibatches=1, total_timesteps=256 * 3))
    assert len(out["episodic_return"]) >= 2  # several games, each over several lives
    assert sorted(out["episodic_return"]) == sorted(games)
    assert max(games) > 50  # far above any sum of clipped rewards per life
    logged = read_scalars(f"runs/{out['run_name']}", "charts/episodic_return")
    assert sorted(logged) == sorted(games)
    assert all(length > 100 for length in out["episodic_length"])  # raw frames of whole games


def test_training_logs_all_keys_and_first_minibatch_is_on_policy():
    out = ppo_atari.train(tiny(ppo_atari))
    assert len(out["first_minibatch"]) == len(out["losses"]) > 0  # one an iteration, all checked below
    for first in out["first_minibatch"]:
        assert first["ratio_max_dev"] < 1e-5 and first["clipfrac"] == 0.0
    assert out["learning_rate"] == [2.5e-4, 0.0]
    assert_logged(f"runs/{out['run_name']}", PPO_LOGGED, count=2)


def test_reference_defaults():
    a = ppo_atari.Args()
    assert (a.env_id, a.num_envs, a.num_steps, a.num_minibatches, a.update_epochs) == ("BreakoutNoFrameskip-v4", 8, 128, 4, 4)
    assert (a.clip_coef, a.ent_coef, a.learning_rate, a.anneal_lr, a.total_timesteps) == (0.1, 0.01, 2.5e-4, True, 10_000_000)


def test_resume_matches_uninterrupted_run_and_evaluate(monkeypatch):
    # Asterix's games (~190 steps) span the checkpoint at step 2 * 64 of each env and end after it
    args = tiny(ppo_atari, num_steps=64, total_timesteps=2 * 64 * 4, save_model=True, save_every=2)
    full, resumed = assert_resume_matches_uninterrupted_run(ppo_atari, args, monkeypatch)
    assert resumed["episodic_return"] and resumed["learning_rate"][-1] == 0.0  # the schedule continued to its end
    scores = ppo_atari.evaluate(full["checkpoint"], eval_episodes=1, seed=0)
    assert scores == ppo_atari.evaluate(full["checkpoint"], eval_episodes=1, seed=0)  # seeded: repeatable
    assert len(scores) == 1 and scores[0] % 50 == 0  # whole-game Asterix scores


def test_resume_without_env_state_continues_with_fresh_games_and_another_versions_envs_refused(monkeypatch, capsys):
    assert_resumes_with_fresh_episodes(
        ppo_atari, tiny(ppo_atari, save_model=True, save_every=1), capsys, monkeypatch, "get_game"
    )
    saved = ppo_atari.train(tiny(ppo_atari, save_model=True, total_timesteps=2 * 32))
    assert_envs_of_another_version_refused(ppo_atari, saved, lambda envs, wrapper: wrapper)


@pytest.mark.parametrize("kw,message", ATARI_BAD_INPUT)
def test_bad_input_rejected_before_training(kw, message):
    assert_rejected_before_training(ppo_atari, tiny(ppo_atari, **kw), message)


# ---- hack safety: the edits a researcher makes to a copy must work (issue 19) -----------------------


def test_cli_error_is_one_line_without_traceback():
    assert_cli_error_is_one_line(
        "ppo_atari.py",
        ["--env-id", "CartPole-v1"],
        ("ppo_atari.py: error: CartPole-v1 is not an Atari (ALE) game; ppo_atari.py needs one, e.g. BreakoutNoFrameskip-v4"),
    )


def test_capture_video_records_env_0_games():
    out = ppo_atari.train(tiny(ppo_atari, capture_video=True))
    video = f"videos/{out['run_name']}/rl-video-episode-0.mp4"
    assert os.path.getsize(video) > 1000
