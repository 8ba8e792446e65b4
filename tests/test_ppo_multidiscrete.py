"""Tests of ppo_multidiscrete.py, and of what it shares with ppo_multidiscrete_mask.py (the `mod` fixture
runs a test against both): detail M1, GAE, the network, a real Gym-μRTS run, checkpoints and bad input.

The tests marked `needs_microrts` run the Java simulator; they are skipped only when gym-microrts or
JPype is not installed at all (an installed but broken Gym-μRTS, or a missing Java, fails them).
"""

import importlib
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT
from test_ppo import (PPO_BAD_INPUT, assert_rejected_before_training, assert_resumes_with_fresh_episodes,
                      read_scalars)

import ppo_multidiscrete

_microrts_missing = pytest.mark.skipif(
    importlib.util.find_spec("gym_microrts") is None or importlib.util.find_spec("jpype") is None,
    reason="gym-microrts not installed (bash scripts/install_extras.sh microrts)",
)


def needs_microrts(test):
    """Runs the test in a forked child (pytest-forked): the JVM it starts cannot be stopped and restarted
    in one process, and a test worker hosting one crashes when a later test creates procgen envs."""
    return _microrts_missing(pytest.mark.forked(test))
NVEC = [6, 4, 4, 4, 4, 7, 49]  # one map cell's action components in Gym-μRTS's grid mode


@pytest.fixture(params=["ppo_multidiscrete", "ppo_multidiscrete_mask"])
def mod(request):
    return importlib.import_module(request.param)


def tiny(mod, **kw):
    base = dict(cuda=False, num_envs=2, num_steps=16, num_minibatches=2, update_epochs=2, total_timesteps=2 * 16 * 2,
                max_steps=20)
    base.update(kw)
    return mod.Args(**base)


# ---- detail M1: independent action components ----------------------------------------------------


def test_logprob_and_entropy_are_sums_over_components():
    g = torch.Generator().manual_seed(0)
    nvec, cells, B = [3, 2, 5], 4, 6
    logits = torch.randn(B, cells * sum(nvec), generator=g, dtype=torch.float64) * 2
    actions = torch.stack([torch.randint(0, n, (B, cells), generator=g) for n in nvec], -1)
    logprob, entropy = ppo_multidiscrete.multidiscrete_logprob_entropy(logits, actions, nvec)
    assert logprob.shape == (B,) and entropy.shape == (B,)
    expected_lp, expected_ent = torch.zeros(B, dtype=torch.float64), torch.zeros(B, dtype=torch.float64)
    per_cell = logits.reshape(B, cells, sum(nvec))
    for c in range(cells):
        start = 0
        for i, n in enumerate(nvec):  # one torch Categorical per component of each cell
            dist = torch.distributions.Categorical(logits=per_cell[:, c, start:start + n])
            expected_lp += dist.log_prob(actions[:, c, i])
            expected_ent += dist.entropy()
            start += n
    torch.testing.assert_close(logprob, expected_lp)
    torch.testing.assert_close(entropy, expected_ent)
    # the product of the components' probabilities, as a joint probability
    p = torch.softmax(per_cell[0, 0, :3], -1)[actions[0, 0, 0]] * torch.softmax(per_cell[0, 0, 3:5], -1)[actions[0, 0, 1]]
    p = p * torch.softmax(per_cell[0, 0, 5:], -1)[actions[0, 0, 2]]
    one_cell, _ = ppo_multidiscrete.multidiscrete_logprob_entropy(per_cell[:1, 0], actions[:1, :1], nvec)
    assert one_cell.exp().item() == pytest.approx(p.item())


def test_sampled_components_follow_their_softmax():
    torch.manual_seed(0)
    nvec, n = [3, 2], 100000
    row = torch.tensor([0.0, 1.0, -1.0, 2.0, 0.5])
    actions = ppo_multidiscrete.sample_multidiscrete(row.repeat(n, 1), nvec)
    assert actions.shape == (n, 1, 2)
    for i, (lo, hi) in enumerate([(0, 3), (3, 5)]):
        freq = torch.bincount(actions[:, 0, i], minlength=hi - lo).double() / n
        np.testing.assert_allclose(freq.numpy(), row[lo:hi].softmax(-1).numpy(), atol=5e-3)


# ---- shared by both scripts ----------------------------------------------------------------------


def test_network_shapes_and_init(mod):
    torch.manual_seed(0)
    agent = mod.Agent((10, 10, 27), NVEC)
    linears = [m for m in agent.network if isinstance(m, torch.nn.Linear)]
    assert [(l.in_features, l.out_features) for l in linears] == [(32 * 3 * 3, 128)]
    logits, value = agent.get_logits_and_value(torch.rand(3, 10, 10, 27))
    assert logits.shape == (3, 100 * 78) and value.shape == (3,)
    for head, std in [(agent.actor, 0.01), (agent.critic, 1.0)]:
        np.testing.assert_allclose(torch.linalg.svdvals(head.weight.detach()).numpy(), std, rtol=1e-4)


@needs_microrts
def test_training_end_to_end(mod):
    out = mod.train(tiny(mod, total_timesteps=2 * 16 * 3))
    # the 20-tick time limit ends every episode; returns are harvest counts, never negative
    assert out["episodic_length"] == [20] * (2 * 48 // 20)
    assert all(r >= 0 for r in out["episodic_return"])
    assert out["learning_rate"][0] == 2.5e-4 and out["learning_rate"][-1] == 0.0  # detail 4
    for first in out["first_minibatch"]:
        # log-probs sum 700 components (about -1400 unmasked): float32 rounding alone is ~1e-4 there
        assert first["ratio_max_dev"] < 1e-3 and first["clipfrac"] == 0.0
    run_dir = f"runs/{out['run_name']}"
    for tag in ["charts/episodic_return", "charts/episodic_length", "charts/learning_rate", "charts/SPS",
                "losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/approx_kl",
                "losses/clipfrac", "losses/explained_variance"]:
        values = read_scalars(run_dir, tag)
        assert values and all(np.isfinite(values)), tag


@needs_microrts
def test_env_spaces_and_evaluation_of_a_checkpoint(mod):
    envs = mod.make_envs(tiny(mod), "x")
    obs, _ = envs.reset()
    assert obs.shape == (2, 10, 10, 27) and set(np.unique(obs)) <= {0.0, 1.0}
    assert envs.single_action_space.shape == (100, 7) and list(envs.nvec) == NVEC
    envs.close()
    out = mod.train(tiny(mod, save_model=True))
    from_ckpt = mod.evaluate(out["checkpoint"], eval_episodes=2, seed=3)
    live = mod.evaluate_agent(out["agent"], tiny(mod), eval_episodes=2, seed=3)
    assert len(from_ckpt) == 2 and from_ckpt == live


@needs_microrts
def test_resume_continues_with_fresh_episodes(mod, capfd, monkeypatch):
    assert_resumes_with_fresh_episodes(mod, tiny(mod, save_model=True, save_every=1), capfd, monkeypatch)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"env_id": "MicrortsAttack-v9"}, "unknown Gym-μRTS task 'MicrortsAttack-v9'"),
        ({"max_steps": 0}, "--max-steps must be positive"),
    ] + PPO_BAD_INPUT,
)
def test_bad_input_rejected_before_training(mod, kw, message):
    assert_rejected_before_training(mod, tiny(mod, **kw), message)


def test_missing_microrts_is_a_config_error(mod, monkeypatch):
    monkeypatch.setitem(sys.modules, "gym_microrts", None)  # makes `import gym_microrts` fail
    with pytest.raises(mod.ConfigError, match="Gym-μRTS is not installed"):
        mod.check_args(tiny(mod))


@needs_microrts
def test_missing_java_is_a_config_error(mod, monkeypatch):
    import jpype

    def no_jvm():
        raise jpype.JVMNotFoundException("No JVM shared library file (libjvm.so) found", "", "")

    monkeypatch.setattr(jpype, "getDefaultJVMPath", no_jvm)
    with pytest.raises(mod.ConfigError, match="needs a Java runtime and none was found"):
        mod.check_args(tiny(mod))


def test_foreign_checkpoint_rejected(mod):
    torch.save({"script": "ppo_procgen.py", "model": {}}, "other.pt")
    with pytest.raises(mod.ConfigError, match="written by ppo_procgen.py"):
        mod.train(mod.Args(resume="other.pt"))


def test_cli_error_is_one_line_and_import_is_silent(mod):
    name = mod.__name__
    res = subprocess.run([sys.executable, os.path.join(ROOT, f"{name}.py"), "--max-steps", "0", "--no-cuda"],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [f"{name}.py: error: --max-steps must be positive, got 0"]
    assert res.stdout == "" and os.listdir(".") == []  # loading the module printed and wrote nothing
