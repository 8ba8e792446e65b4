"""Tests of ppo_procgen.py: the IMPALA CNN, reward scaling, GAE, a real Procgen run, checkpoints and bad input.

The tests marked `needs_procgen` run the real games; they are skipped only when the procgen package is
not installed at all (an installed but broken Procgen fails them).
"""

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT
from test_ppo import (
    PPO_BAD_INPUT,
    assert_foreign_and_corrupt_checkpoints_rejected,
    assert_rejected_before_training,
    assert_resumed_log_reads_once,
    keep_checkpoint,
    read_scalars,
    resume_later,
)
from test_ppo_atari import assert_channels_last_is_the_same_math

import ppo_procgen as mod

needs_procgen = pytest.mark.skipif(
    importlib.util.find_spec("procgen") is None, reason="procgen not installed (bash scripts/install_extras.sh procgen)"
)


def tiny(**kw):
    base = dict(cuda=False, num_envs=2, num_steps=16, num_minibatches=2, update_epochs=1, total_timesteps=2 * 16 * 2)
    base.update(kw)
    return mod.Args(**base)


# ---- detail P1: the IMPALA CNN -------------------------------------------------------------------


def test_impala_cnn_shapes_and_init():
    torch.manual_seed(0)
    agent = mod.Agent((64, 64, 3), 15)
    stages = [m for m in agent.network if isinstance(m, mod.ConvSequence)]
    assert [s.get_output_shape() for s in stages] == [(16, 32, 32), (32, 16, 16), (32, 8, 8)]
    x = torch.randint(0, 256, (5, 64, 64, 3), dtype=torch.uint8)
    h = x.permute(0, 3, 1, 2).float() / 255
    for stage in stages:  # each stage's real output has the shape it reports
        h = stage(h)
        assert h.shape[1:] == stage.get_output_shape()
    assert len([m for m in agent.modules() if isinstance(m, mod.ResidualBlock)]) == 6  # two per stage
    dense = [m for m in agent.network if isinstance(m, torch.nn.Linear)]
    assert [(d.in_features, d.out_features) for d in dense] == [(32 * 8 * 8, 256)]
    logits, value = agent.get_logits_and_value(x)
    assert logits.shape == (5, 15) and value.shape == (5,)
    assert torch.allclose(agent.get_value(x), value) and torch.allclose(agent.get_logits(x), logits)
    for head, std in [(agent.actor, 0.01), (agent.critic, 1.0)]:  # detail 2: only the heads are orthogonal
        np.testing.assert_allclose(torch.linalg.svdvals(head.weight.detach()).numpy(), std, rtol=1e-4)
    # a residual block adds to its input: zeroing its last conv makes it the identity
    block = mod.ResidualBlock(4)
    torch.nn.init.zeros_(block.conv1.weight), torch.nn.init.zeros_(block.conv1.bias)
    z = torch.randn(2, 4, 6, 6)
    assert torch.equal(block(z), z)


# ---- reward scaling and clipping -----------------------------------------------------------------


def test_channels_last_is_the_same_math():
    x = torch.randint(0, 256, (3, 64, 64, 3), dtype=torch.uint8)
    assert_channels_last_is_the_same_math(lambda cl: mod.Agent((64, 64, 3), 15, cl), lambda a, x: a.get_logits_and_value(x), x)
    assert mod.Args().channels_last


def test_reward_scaler_matches_running_std_of_discounted_returns():
    g = np.random.default_rng(0)
    scaler = mod.RewardScaler(3, gamma=0.9, clip=10.0)
    ret, seen = np.zeros(3), []
    for t in range(40):
        r = g.normal(size=3) * 2
        d = g.random(3) < 0.2
        out = scaler(r, d)
        ret = ret * 0.9 + r
        seen.extend(ret)
        # the running statistics start from mean 0, var 1 with weight 1e-4; merged exactly with all returns
        x, c0 = np.array(seen), 1e-4
        mean = x.sum() / (c0 + x.size)
        var = (c0 * 1.0 + c0 * mean**2 + ((x - mean) ** 2).sum()) / (c0 + x.size)
        np.testing.assert_allclose(out, np.clip(r / np.sqrt(var + 1e-8), -10, 10), rtol=1e-5)
        ret[d] = 0.0
    assert out.dtype == np.float32
    np.testing.assert_allclose(scaler.returns, ret)
    clipped = mod.RewardScaler(1, gamma=0.99, clip=1.0)(np.array([1e3]), np.array([False]))
    assert clipped.tolist() == [1.0]


# ---- a real Procgen run --------------------------------------------------------------------------


@needs_procgen
def test_procgen_env_steps_and_resets_in_place():
    envs = mod.make_envs(tiny(env_id="starpilot"), "x")
    obs, _ = envs.reset()
    assert obs.shape == (2, 64, 64, 3) and obs.dtype == np.uint8 and envs.single_action_space.n == 15
    obs2, reward, done, trunc, _ = envs.step(np.array([0, 1]))
    assert obs2.shape == obs.shape and reward.shape == (2,) and done.dtype == bool and not trunc.any()
    a, b = mod.make_envs(tiny(seed=5), "x"), mod.make_envs(tiny(seed=5), "x")
    assert np.array_equal(a.reset()[0], b.reset()[0])  # the seed fixes the levels


@needs_procgen
def test_training_end_to_end_logs_and_keeps_lr_constant():
    out = mod.train(tiny(total_timesteps=2 * 16 * 3))
    assert out["global_step"] == 96 and len(out["losses"]) == 3
    assert out["learning_rate"] == [5e-4] * 3  # detail 4: not annealed for procgen
    assert out["optimizer"].defaults["eps"] == 1e-5
    for first in out["first_minibatch"]:  # stored rollout log-probs equal the update's recomputation
        assert first["ratio_max_dev"] < 1e-5 and first["clipfrac"] == 0.0
    run_dir = f"runs/{out['run_name']}"
    for tag in ["charts/learning_rate", "charts/SPS", "losses/value_loss", "losses/policy_loss", "losses/entropy",
                "losses/old_approx_kl", "losses/approx_kl", "losses/clipfrac", "losses/explained_variance"]:
        values = read_scalars(run_dir, tag)
        assert values and all(np.isfinite(values)), tag


@needs_procgen
def test_resume_matches_uninterrupted_run(monkeypatch):
    keep_checkpoint(mod, monkeypatch, kept := "iteration2.pt")
    full = mod.train(tiny(num_steps=8, total_timesteps=2 * 8 * 4, save_model=True, save_every=2))
    resumed = resume_later(mod, kept)
    assert resumed["losses"] == full["losses"][2:]  # the games' states were restored, not restarted
    assert resumed["global_step"] == full["global_step"]
    assert_resumed_log_reads_once(full, returns=False)  # no starpilot game ends in 64 steps


@needs_procgen
def test_evaluate_checkpoint_matches_live_agent():
    out = mod.train(tiny(env_id="bossfight", save_model=True))
    from_ckpt = mod.evaluate(out["checkpoint"], eval_episodes=1, seed=3)
    live = mod.evaluate_agent(out["agent"], tiny(env_id="bossfight"), eval_episodes=1, seed=3)
    assert len(from_ckpt) == 1 and from_ckpt == live


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"env_id": "pong"}, "unknown Procgen game 'pong'"),
        ({"distribution_mode": "easiest"}, "--distribution-mode must be one of"),
    ] + PPO_BAD_INPUT,
)
def test_bad_input_rejected_before_training(kw, message):
    assert_rejected_before_training(mod, tiny(**kw), message)


def test_missing_procgen_is_a_config_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "procgen", None)  # makes `import procgen` fail
    with pytest.raises(mod.ConfigError, match="Procgen is not installed"):
        mod.check_args(tiny())


def test_foreign_checkpoint_rejected():
    assert_foreign_and_corrupt_checkpoints_rejected(mod, "ppo_atari.py")


def test_cli_error_is_one_line_and_import_is_silent():
    script = os.path.join(ROOT, "ppo_procgen.py")
    res = subprocess.run([sys.executable, script, "--env-id", "pong", "--no-cuda"], capture_output=True, text=True)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        "ppo_procgen.py: error: unknown Procgen game 'pong'; choose one of " + ", ".join(mod.PROCGEN_GAMES)
    ]
    assert res.stdout == "" and os.listdir(".") == []  # loading the module printed and wrote nothing
