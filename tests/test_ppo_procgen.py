"""Tests of ppo_procgen.py: the IMPALA CNN, the reward scaling and episode statistics of the Procgen env, a real
Procgen run, checkpoints (the same games after a resume), bad input and the hack-safety checks.

The tests marked `needs_procgen` run the real games; they are skipped only when the procgen package is
not installed at all (an installed but broken Procgen fails them).
"""

import os
import sys

import numpy as np
import pytest
import torch
from networks import assert_channels_last_is_the_same_math, assert_heads_read_one_trunk_of_scaled_pixels
from processes import run_cli
from promises import (
    PPO_BAD_INPUT,
    PPO_LOGGED,
    assert_checkpoint_evaluates,
    assert_logged,
    assert_rejected_before_training,
    assert_resume_matches_uninterrupted_run,
    keep_checkpoint,
    read_scalars,
    resume_later,
)
from tiny import needs_procgen, tiny

import ppo_procgen as mod

# ---- detail P1: the IMPALA CNN -------------------------------------------------------------------


def test_impala_cnn_shapes_init_and_pixel_scaling():
    torch.manual_seed(0)
    agent = mod.Agent(3, 15)
    stages = list(agent.network)[:3]
    h = torch.rand(5, 3, 64, 64)
    for stage, shape in zip(stages, [(16, 32, 32), (32, 16, 16), (32, 8, 8)]):  # each stage halves height and width
        h = stage(h)
        assert h.shape[1:] == shape
        assert [type(m) for m in stage] == [torch.nn.Conv2d, torch.nn.MaxPool2d, mod.Residual, mod.Residual]
    dense = [m for m in agent.network if isinstance(m, torch.nn.Linear)]
    assert [(d.in_features, d.out_features) for d in dense] == [(32 * 8 * 8, 256)]
    for head, std in [(agent.actor, 0.01), (agent.critic, 1.0)]:  # detail 2: only the heads are orthogonal
        np.testing.assert_allclose(torch.linalg.svdvals(head.weight.detach()).numpy(), std, rtol=1e-4)
        assert torch.all(head.bias == 0)
    trunk = [m for m in agent.network.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert len(trunk) == 3 * 5 + 1 and all((m.bias != 0).all() for m in trunk)  # PyTorch's default init, not layer_init
    # a residual block adds to its input: zeroing its last conv makes it the identity
    block = stages[0][2]
    torch.nn.init.zeros_(block[3].weight), torch.nn.init.zeros_(block[3].bias)
    z = torch.randn(2, 16, 6, 6)
    assert torch.equal(block(z), z)
    # detail A9: uint8 frames give the outputs of the float frames already scaled to [0, 1]; one trunk for both heads
    assert_heads_read_one_trunk_of_scaled_pixels(
        agent, torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8), torch.tensor([0, 14])
    )


def test_channels_last_is_the_same_math():
    x = torch.randint(0, 256, (3, 3, 64, 64), dtype=torch.uint8)
    assert_channels_last_is_the_same_math(lambda cl: mod.Agent(3, 15, cl), x, on_by_default=mod)


def test_reference_defaults():
    a = mod.Args()  # CleanRL's ppo_procgen.py (openai/train-procgen's settings, easy distribution, all levels)
    assert (a.env_id, a.distribution_mode, a.num_levels, a.start_level) == ("starpilot", "easy", 0, 0)
    assert (a.num_envs, a.num_steps, a.num_minibatches, a.update_epochs, a.total_timesteps) == (64, 256, 8, 3, 25_000_000)
    assert (a.learning_rate, a.anneal_lr, a.gamma, a.gae_lambda, a.clip_coef, a.ent_coef) == (
        5e-4,
        False,
        0.999,
        0.95,
        0.2,
        0.01,
    )
    assert (a.norm_reward, a.reward_norm_gamma, a.clip_reward) == (True, None, 10.0)


# ---- the env: episode statistics and reward scaling ------------------------------------------------


class ScriptedGames:
    """Stands in for the gym3 games: each act() is followed by the next scripted (rewards, dones)."""

    def __init__(self, script):
        self.script, self.t = script, -1

    def act(self, actions):
        self.t += 1

    def observe(self):
        rewards, dones = self.script[self.t] if self.t >= 0 else (np.zeros(3), np.zeros(3, bool))
        return rewards.astype(np.float32), {"rgb": np.zeros((3, 64, 64, 3), np.uint8)}, dones


@needs_procgen
@pytest.mark.parametrize("norm_reward", [True, False])
def test_reward_scaling_and_raw_scores(norm_reward):
    g = np.random.default_rng(0)
    script = [(g.normal(size=3) * 2, g.random(3) < 0.2) for _ in range(40)]
    env = mod.ProcgenVecEnv(mod.Args(gamma=0.9, norm_reward=norm_reward), 3, 0)
    env.env = ScriptedGames(script)
    ret, seen, score, finished, logged = np.zeros(3), [], np.zeros(3), [], []
    for r, d in script:
        obs, out, done, truncated, info = env.step(np.zeros(3))
        assert obs.shape == (3, 3, 64, 64) and out.dtype == np.float32 and np.array_equal(done, d) and not truncated.any()
        r = r.astype(np.float32)
        ret, score = ret * 0.9 + r, score + r
        seen.extend(ret)
        # VecNormalize: the running statistics start from mean 0, var 1 with weight 1e-4, merged with all returns
        x, c0 = np.array(seen), 1e-4
        mean = x.sum() / (c0 + x.size)
        var = (c0 * 1.0 + c0 * mean**2 + ((x - mean) ** 2).sum()) / (c0 + x.size)
        np.testing.assert_allclose(out, np.clip(r / np.sqrt(var + 1e-8), -10, 10) if norm_reward else r, rtol=1e-5)
        finished.extend(score[d])
        if "final_info" in info:
            fi = info["final_info"]
            logged.extend(fi["episode"]["r"][fi["_episode"]])
        ret[d], score[d] = 0.0, 0.0
    assert len(finished) > 5 and logged == pytest.approx(finished)  # raw scores, before the scaling
    env = mod.ProcgenVecEnv(mod.Args(clip_reward=1.0), 3, 0)
    env.env = ScriptedGames([(np.array([1e3, -1e3, 0.0]), np.zeros(3, bool))])
    assert env.step(np.zeros(3))[1].tolist() == [1.0, -1.0, 0.0]  # clipped to +-clip_reward


# ---- a real Procgen run --------------------------------------------------------------------------


@needs_procgen
def test_procgen_env_steps_and_resets_in_place():
    envs = mod.make_envs(tiny(mod, env_id="starpilot"), "x")
    obs, _ = envs.reset()
    assert obs.shape == (2, 3, 64, 64) and obs.dtype == np.uint8 and envs.single_action_space.n == 15
    assert envs.single_observation_space.shape == obs.shape[1:]
    obs2, reward, done, trunc, _ = envs.step(np.array([0, 1]))
    assert obs2.shape == obs.shape and reward.shape == (2,) and done.dtype == bool and not trunc.any()
    a, b = mod.make_envs(tiny(mod, seed=5), "x"), mod.make_envs(tiny(mod, seed=5), "x")
    assert np.array_equal(a.reset()[0], b.reset()[0])  # the seed fixes the levels
    assert not np.array_equal(a.reset()[0], mod.make_envs(tiny(mod, seed=6), "x").reset()[0])


@needs_procgen
def test_training_end_to_end_logs_and_keeps_lr_constant():
    out = mod.train(tiny(mod, total_timesteps=2 * 16 * 3))
    assert out["global_step"] == 96 and len(out["losses"]) == 3
    assert out["learning_rate"] == [5e-4] * 3  # detail 4: not annealed for procgen
    assert out["optimizer"].defaults["eps"] == 1e-5
    assert len(out["first_minibatch"]) == len(out["losses"]) > 0  # one an iteration, all checked below
    for first in out["first_minibatch"]:  # the rollout's log-probs equal the update's recomputation
        assert first["ratio_max_dev"] < 1e-5 and first["clipfrac"] == 0.0
    assert_logged(out["run_dir"], PPO_LOGGED, count=3)


@needs_procgen
def test_logged_returns_are_raw_game_scores():
    out = mod.train(tiny(mod, env_id="bossfight", num_steps=64, total_timesteps=2 * 64 * 2))
    assert len(out["episodic_return"]) >= 2 and all(length > 0 for length in out["episodic_length"])
    np.testing.assert_allclose(read_scalars(out["run_dir"], "charts/episodic_return"), out["episodic_return"])


@needs_procgen
def test_resume_matches_uninterrupted_run(monkeypatch):
    # the games' states were restored, not restarted; no starpilot game ends in 64 steps
    full, resumed = assert_resume_matches_uninterrupted_run(
        mod, tiny(mod, num_steps=8, total_timesteps=2 * 8 * 4, save_model=True, save_every=2), monkeypatch, returns=False
    )
    assert resumed["run_dir"] == full["run_dir"]


@needs_procgen
def test_resume_continues_the_scores_and_reward_statistics(monkeypatch):
    keep_checkpoint(mod, monkeypatch, kept := "iteration1.pt", at=1)
    args = tiny(mod, env_id="dodgeball", num_steps=48, total_timesteps=2 * 48 * 2, save_model=True, save_every=1)
    full = mod.train(args)
    assert mod.load_checkpoint(kept)[0]["envs"]["count"] == pytest.approx(1e-4 + 2 * 48)  # the running moments are saved
    resumed = resume_later(mod, kept)
    assert resumed["losses"] == full["losses"][1:]
    n_before = len(full["episodic_return"]) - len(resumed["episodic_return"])
    assert resumed["episodic_return"] == full["episodic_return"][n_before:]  # games that spanned the resume included
    # a game that began before the checkpoint and ended after it: its length counts from its real start
    assert resumed["episodic_length"] == full["episodic_length"][n_before:] and max(resumed["episodic_length"]) > 48


@needs_procgen
def test_evaluate_checkpoint():
    assert_checkpoint_evaluates(mod, mod.train(tiny(mod, env_id="bossfight", save_model=True)))


@needs_procgen
def test_capture_video_records_env_0_games():
    out = mod.train(tiny(mod, env_id="bossfight", num_steps=32, capture_video=True))
    assert os.path.getsize(f"videos/{out['run_name']}/00000.mp4") > 1000


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"env_id": "pong"}, "unknown Procgen game 'pong'"),
        ({"distribution_mode": "easiest"}, "--distribution-mode must be one of easy, hard"),
        ({"num_levels": -1}, "--num-levels must be a finite number >= 0"),
        ({"start_level": 2**31}, "--start-level must be"),
        ({"seed": 2**31}, "--seed must be a finite number >= 0 and <= 2147483647"),
        ({"clip_reward": 0.0}, "--clip-reward must be a finite number > 0"),
        ({"reward_norm_gamma": 1.5}, "--reward-norm-gamma must be"),
        ({"total_timesteps": 10}, "leaves no iteration to run"),
    ]
    + PPO_BAD_INPUT,
)
def test_bad_input_rejected_before_training(kw, message):
    assert_rejected_before_training(mod, tiny(mod, **kw), message)


@pytest.mark.parametrize(
    "package, message", [("procgen", "Procgen is not installed"), ("imageio_ffmpeg", "needs imageio_ffmpeg")]
)
def test_missing_packages_are_config_errors(monkeypatch, package, message):
    monkeypatch.setitem(sys.modules, package, None)  # makes `import <package>` fail
    with pytest.raises(mod.ConfigError, match=message):
        mod.check_args(tiny(mod, capture_video=True))


def test_cli_error_is_one_line_and_writes_nothing():
    code, stdout, stderr = run_cli("ppo_procgen.py", ["--env-id", "pong", "--no-cuda"])
    assert code != 0 and "Traceback" not in stderr
    assert stderr.strip().splitlines() == [
        "ppo_procgen.py: error: unknown Procgen game 'pong'; choose one of " + ", ".join(mod.PROCGEN_GAMES)
    ]
    assert stdout == "" and os.listdir(".") == []


# ---- hack safety: the edits a researcher makes to a copy must work (issue 19) -----------------------
