"""Tests of ppo_multidiscrete.py, and of what it shares with ppo_multidiscrete_mask.py (the `mod` fixture
runs a test against both): detail M1, the network, a real Gym-μRTS run, checkpoints, bad input and hack safety.

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
import torch.nn as nn
from conftest import ROOT
from hacks import Scale, assert_added_layer_trains, assert_cleanrl_update_trains, edited_agent
from test_ppo import (PPO_BAD_INPUT, assert_foreign_and_corrupt_checkpoints_rejected, assert_rejected_before_training,
                      assert_resumes_with_fresh_episodes, read_scalars)

_microrts_missing = pytest.mark.skipif(
    importlib.util.find_spec("gym_microrts") is None or importlib.util.find_spec("jpype") is None,
    reason="gym-microrts not installed (bash scripts/install_extras.sh microrts)",
)


def needs_microrts(test):
    """Runs the test in a forked child (pytest-forked): the JVM it starts cannot be stopped and restarted
    in one process, and a test worker hosting one crashes when a later test creates procgen envs."""
    return _microrts_missing(pytest.mark.forked(test))


NVEC = [6, 4, 4, 4, 4, 7, 49]  # one map cell's action components in Gym-μRTS's grid mode
OBS = (10, 10, 27)  # the 10x10 map's 27 feature planes


@pytest.fixture(params=["ppo_multidiscrete", "ppo_multidiscrete_mask"])
def mod(request):
    return importlib.import_module(request.param)


def tiny(mod, **kw):
    base = dict(cuda=False, num_envs=2, num_steps=16, num_minibatches=2, update_epochs=2, total_timesteps=2 * 16 * 2,
                max_steps=20)
    base.update(kw)
    return mod.Args(**base)


def act(mod, agent, x, action=None):
    """agent.get_action_and_value(x, action); the mask script gets a mask with every choice valid."""
    if mod.__name__.endswith("_mask"):
        return agent.get_action_and_value(x, torch.ones(len(x), 100, sum(NVEC), dtype=torch.bool), action)
    return agent.get_action_and_value(x, action)


class FixedLogits(nn.Module):
    """A policy head that ignores its input and returns `logits` (a parameter, to read its gradient)."""

    def __init__(self, logits):
        super().__init__()
        self.logits = nn.Parameter(logits)

    def forward(self, hidden):
        return self.logits


# ---- detail M1: independent action components, one Categorical each ------------------------------


def test_logprob_entropy_and_value_are_sums_over_components(mod):
    torch.manual_seed(0)
    agent = mod.Agent(OBS, NVEC)
    B = 4
    agent.actor = FixedLogits(torch.randn(B, 100 * sum(NVEC)) * 2)
    x = torch.randint(0, 2, (B,) + OBS, dtype=torch.uint8)
    actions = torch.stack([torch.randint(0, n, (B, 100)) for n in NVEC], -1)
    _, logprob, entropy, value = act(mod, agent, x, actions)
    assert logprob.shape == entropy.shape == value.shape == (B,)
    expected_lp, expected_ent = torch.zeros(B, dtype=torch.float64), torch.zeros(B, dtype=torch.float64)
    per_cell = agent.actor.logits.detach().double().reshape(B, 100, sum(NVEC))
    for i, part in enumerate(per_cell.split(NVEC, -1)):  # torch's Categorical per component of each cell
        dist = torch.distributions.Categorical(logits=part)
        expected_lp += dist.log_prob(actions[..., i]).sum(-1)
        expected_ent += dist.entropy().sum(-1)
    torch.testing.assert_close(logprob.double(), expected_lp, rtol=1e-6, atol=1e-4)
    torch.testing.assert_close(entropy.double(), expected_ent, rtol=1e-6, atol=1e-3)
    h = agent.network(x.permute(0, 3, 1, 2).float())  # both heads read one CNN pass over the NCHW planes
    torch.testing.assert_close(value, agent.critic(h).squeeze(-1))
    torch.testing.assert_close(agent.get_value(x), value)


def test_sampled_components_follow_their_softmax(mod):
    torch.manual_seed(0)
    agent = mod.Agent(OBS, NVEC)
    cell = torch.randn(sum(NVEC))
    agent.actor = FixedLogits(cell.repeat(500, 100))  # every cell of every row: the same logits
    with torch.no_grad():
        actions, logprob, _, _ = act(mod, agent, torch.zeros((500,) + OBS, dtype=torch.uint8))
    assert actions.shape == (500, 100, len(NVEC))
    start = 0
    for i, n in enumerate(NVEC):
        freq = torch.bincount(actions[..., i].reshape(-1), minlength=n).double() / actions[..., i].numel()
        np.testing.assert_allclose(freq.numpy(), cell[start:start + n].softmax(-1).numpy(), atol=0.01)
        start += n
    assert logprob.dtype == torch.float64  # 700 log-probs summed without float32 rounding (ratio 1 on-policy)


def test_network_shapes_and_init(mod):
    torch.manual_seed(0)
    agent = mod.Agent(OBS, NVEC)
    layers = {n: m for n, m in agent.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))}
    shapes = {n: tuple(m.weight.shape) for n, m in layers.items()}
    assert shapes == {"network.0": (16, 27, 3, 3), "network.2": (32, 16, 2, 2), "network.5": (128, 32 * 3 * 3),
                      "actor": (100 * 78, 128), "critic": (1, 128)}
    assert agent.network[0].stride == (2, 2)
    for name, std in {"network.0": 2**0.5, "network.2": 2**0.5, "network.5": 2**0.5, "actor": 0.01, "critic": 1.0}.items():
        w = layers[name].weight.detach().reshape(layers[name].weight.shape[0], -1)
        np.testing.assert_allclose(torch.linalg.svdvals(w).numpy(), std, rtol=1e-4)
        assert torch.all(layers[name].bias == 0)


def test_reference_defaults(mod):
    a = mod.Args()
    assert (a.env_id, a.max_steps, a.num_envs, a.num_steps, a.num_minibatches, a.update_epochs) == ("MicrortsMining-v1", 2000, 8, 128, 4, 4)
    assert (a.clip_coef, a.ent_coef, a.learning_rate, a.anneal_lr, a.total_timesteps, a.torch_threads) == (0.1, 0.01, 2.5e-4, True, 2_000_000, 1)
    assert mod.MICRORTS_TASKS["MicrortsMining-v1"] == ("maps/10x10/basesWorkers10x10.xml", "passiveAI", (0.0, 1.0, 0.0, 0.0, 0.0, 0.0))


# ---- the real game -------------------------------------------------------------------------------


@needs_microrts
def test_training_end_to_end(mod):
    out = mod.train(tiny(mod, total_timesteps=2 * 16 * 3))
    # the 20-tick time limit ends every episode; returns are harvest counts, never negative
    assert out["episodic_length"] == [20] * (2 * 48 // 20)
    assert all(r >= 0 for r in out["episodic_return"])
    assert out["learning_rate"][0] == 2.5e-4 and out["learning_rate"][-1] == 0.0  # detail 4
    for first in out["first_minibatch"]:
        # the update scores the actions the rollout sampled under the same policy (and, masked, the same masks)
        assert first["ratio_max_dev"] < 1e-5 and first["clipfrac"] == 0.0
    run_dir = out["run_dir"]
    for tag in ["charts/episodic_return", "charts/episodic_length", "charts/learning_rate", "charts/SPS",
                "losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/approx_kl",
                "losses/clipfrac", "losses/explained_variance"]:
        values = read_scalars(run_dir, tag)
        assert values and all(np.isfinite(values)), tag


@needs_microrts
def test_env_spaces_and_evaluation_of_a_checkpoint(mod):
    envs = mod.make_envs(tiny(mod), "x")
    obs, _ = envs.reset()
    assert obs.shape == (2,) + OBS and obs.dtype == np.uint8 and set(np.unique(obs)) == {0, 1}
    assert envs.single_observation_space.shape == OBS and envs.nvec == NVEC
    envs.close()
    out = mod.train(tiny(mod, save_model=True))
    ckpt, _ = mod.load_checkpoint(out["checkpoint"])
    assert all(torch.equal(ckpt["model"][k], v) for k, v in out["agent"].state_dict().items())
    scores = mod.evaluate(out["checkpoint"], eval_episodes=2, seed=3)
    assert len(scores) == 2 and scores == mod.evaluate(out["checkpoint"], eval_episodes=2, seed=3)  # seeded
    with pytest.raises(mod.ConfigError, match="eval-episodes must be"):
        mod.evaluate(out["checkpoint"], eval_episodes=0)


@needs_microrts
def test_resume_continues_with_fresh_episodes(mod, capfd, monkeypatch):
    args = tiny(mod, save_model=True, save_every=1)
    full, resumed = assert_resumes_with_fresh_episodes(mod, args, capfd, monkeypatch)  # the JVM's games do not pickle
    assert resumed["learning_rate"] == [0.0]  # the schedule continued to its end, not restarted


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"env_id": "MicrortsAttack-v9"}, "unknown Gym-μRTS task 'MicrortsAttack-v9'"),
        ({"max_steps": 0}, "--max-steps must be a finite number >= 1"),
        ({"total_timesteps": 10}, "leaves no iteration to run"),
    ] + PPO_BAD_INPUT,
)
def test_bad_input_rejected_before_training(mod, kw, message):
    assert_rejected_before_training(mod, tiny(mod, **kw), message)


def test_missing_microrts_is_a_config_error(mod, monkeypatch):
    monkeypatch.setitem(sys.modules, "gym_microrts", None)  # as if it were not installed
    with pytest.raises(mod.ConfigError, match="Gym-μRTS is not installed"):
        mod.check_args(tiny(mod))


@_microrts_missing
def test_missing_java_is_a_config_error(mod, monkeypatch):
    import jpype

    def no_jvm():
        raise jpype.JVMNotFoundException("No JVM shared library file (libjvm.so) found", "", "")

    monkeypatch.setattr(jpype, "getDefaultJVMPath", no_jvm)
    with pytest.raises(mod.ConfigError, match="needs a Java runtime and none was found"):
        mod.check_args(tiny(mod))


def test_foreign_checkpoint_rejected(mod):
    assert_foreign_and_corrupt_checkpoints_rejected(mod, "ppo_procgen.py")


def test_cli_error_is_one_line_and_import_is_silent(mod):
    name = mod.__name__
    res = subprocess.run([sys.executable, os.path.join(ROOT, f"{name}.py"), "--max-steps", "0", "--no-cuda"],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [f"{name}.py: error: --max-steps must be a finite number >= 1, got 0"]
    assert res.stdout == "" and os.listdir(".") == []  # loading the module printed and wrote nothing


# ---- hack safety: the edits a researcher makes to a copy must work (issue 19) -----------------------


@needs_microrts
def test_hack_cleanrl_update_trains(mod, tmp_path, monkeypatch):
    assert_cleanrl_update_trains(mod, tiny(mod), tmp_path, monkeypatch)


@needs_microrts
def test_hack_temperature_changes_what_the_rollout_samples(mod, monkeypatch):
    """tests/hacks.py's check (b) for a MultiDiscrete head: the head fixed so that component 0 (the action type) of
    every cell has logits (0, 1, 0, 0, 0, 0), a temperature dividing them in the policy head; the rollout's component-0
    choices follow softmax(logits / temperature), not softmax(logits), and the update scores the same policy.
    The mask script gets component 0 all valid (its other components stay masked)."""
    logits, temperature = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64), 0.25
    bias = torch.zeros(100, sum(NVEC))
    bias[:, :6] = logits
    sampled = edited_agent(mod, monkeypatch, "actor", lambda agent: setattr(
        agent, "actor", nn.Sequential(agent.actor, Scale(1 / temperature))), bias=bias.reshape(-1))
    if hasattr(mod.MicrortsVecEnv, "action_mask"):
        real_mask = mod.MicrortsVecEnv.action_mask

        def action_type_all_valid(self):
            mask = real_mask(self)
            mask[..., :6] = True
            return mask

        monkeypatch.setattr(mod.MicrortsVecEnv, "action_mask", action_type_all_valid)
    out = mod.train(tiny(mod))
    actions = torch.cat([a[..., 0].reshape(-1) for a in sampled]).long()
    assert len(actions) == 2 * 16 * 2 * 100  # every rollout step sampled through Agent.get_action_and_value
    freq = torch.bincount(actions, minlength=6).double() / len(actions)
    edited, unedited = ((logits / t).softmax(-1) for t in (temperature, 1.0))
    tol = 4 / np.sqrt(len(actions))
    assert (freq - edited).abs().max() < tol and (freq - unedited).abs().max() > 2 * tol, (freq, edited, unedited)
    assert all(f["ratio_max_dev"] < 1e-5 for f in out["first_minibatch"])


@needs_microrts
def test_hack_added_layer_trains(mod, monkeypatch):
    assert_added_layer_trains(mod, tiny(mod), monkeypatch)
