"""--compile (issue 53) in ppo.py, ppo_continuous_action.py, ppo_atari.py, ppo_atari_envpool.py, ppo_procgen.py and
ppo_shared.py:
torch.compile of the rollout's policy step and the update's minibatch losses, checked on the CPU.

Inductor builds C++ kernels, slow on 2 cores (38-110 s a script cold on a busy 2-core host, ~5 s from its cache in
/tmp/torchinductor_<user>), so it runs here once, on ppo.py: its first update against eager's, its checkpoints across
the flag, evaluation. The hack checks run in all five with the graphs dynamo traces (what decides whether an edit is
compiled) executed as traced (hacks.traced_by_dynamo). With the flag off a script compiles nothing and runs what it ran
before the flag.
"""

import dataclasses
import importlib
import math
import os
import re

import numpy as np
import pytest
import torch
from conftest import ROOT, import_copy
from hacks import assert_added_layer_trains, assert_cleanrl_update_trains, assert_temperature_changes_rollout, traced_by_dynamo
from tiny import SCRIPTS as ALL

# the scripts with --compile, found by their Args (tests/test_repo.py holds the flag's code to one text in each)
SCRIPTS = [s.removesuffix(".py") for s in ALL if "\n    compile: bool = False  # " in open(os.path.join(ROOT, s)).read()]
HEADS = {
    "ppo": "actor",
    "ppo_shared": "actor",
    "ppo_continuous_action": "actor_mean",
    "ppo_atari": "actor",
    "ppo_atari_envpool": "actor",
    "ppo_procgen": "actor",
}
SIZES = dict(cuda=False, num_envs=2, num_steps=16, num_minibatches=2, update_epochs=2, total_timesteps=2 * 16 * 2)
ENVS = {
    "ppo": "CartPole-v1",
    "ppo_shared": "CartPole-v1",
    "ppo_continuous_action": "Hopper-v4",
    "ppo_atari": "AsterixNoFrameskip-v4",
    "ppo_atari_envpool": "Asterix-v5",
    "ppo_procgen": "starpilot",
}


def test_every_script_with_compile_has_its_run_here():
    assert set(HEADS) == set(ENVS) == set(SCRIPTS) and len(SCRIPTS) >= 5


def compiled_run(script, **kw):
    """The module and a small run of it (one size for all five, each on an env of its own)."""
    mod = importlib.import_module(script)
    return mod, mod.Args(**{**SIZES, "env_id": ENVS[script], **kw})


@pytest.mark.parametrize("script", SCRIPTS)
def test_flag_off_compiles_nothing_and_runs_the_code_without_the_flag(script, tmp_path, monkeypatch):
    """Without --compile: torch.compile is never called, and a fixed-seed run equals, bit for bit, one of a copy with
    the flag's lines taken out (the rollout calls Agent.get_action_and_value, update() its own minibatch_losses). When
    written, such runs also equalled those of the scripts before the flag (aa84c44), bit for bit."""
    mod, args = compiled_run(script, seed=5)
    text = open(f"{ROOT}/{script}.py").read()
    plain = re.sub(r"\n    policy_step, losses_step = compiled\(.*\)", "", text)
    plain = plain.replace("policy_step(", "agent.get_action_and_value(")
    plain = plain.replace("update(agent, optimizer, b, args, losses_step) if args.compile else ", "")
    assert not re.search(r"policy_step|losses_step|compiled\(", re.search(r"^def train\(.*?(?=^\S)", plain, re.S | re.M)[0])
    plain = import_copy(plain, tmp_path / f"plain_{script}.py")

    def no_compile(*a, **k):
        raise AssertionError("torch.compile called without --compile")

    monkeypatch.setattr(torch, "compile", no_compile)
    ours, theirs = mod.train(args), plain.train(args)
    assert ours["losses"] == theirs["losses"] and ours["first_minibatch"] == theirs["first_minibatch"]
    assert ours["episodic_return"] == theirs["episodic_return"]
    for (name, p), q in zip(ours["agent"].named_parameters(), theirs["agent"].parameters()):
        assert torch.equal(p, q), name


# Tolerance of compiled against eager: inductor fuses the forward pass and its backward into loops of its own that sum
# in another order than ATen's kernels (the losses' means and std, the gradients' sums over the minibatch), so each value
# may differ by a few float32 ulps (~1e-7 relative). Adam divides each gradient by its running RMS, so the weights move
# by ~1e-7 of a step more or less, and the later minibatches' losses by as little: over the 2 epochs of 2 minibatches
# here, 1e-7 relative (measured: value loss 22.297932 against 22.297930). The policy loss, a mean of terms near 1 (the
# normalised advantages) that cancel to ~1e-5, keeps their rounding in absolute terms: 2e-7 (measured). Hence 1e-5
# relative plus 1e-6 absolute.
RTOL, ATOL = 1e-5, 1e-6


def test_ppo_compiled_first_update_equals_eagers_and_checkpoints_cross_the_flag(tmp_path, monkeypatch):
    """The real thing on ppo.py (inductor): the first update's losses equal those of the same update run eagerly from
    the same weights, batch and shuffle; rollout and update agree (ratio 1); a compiled run's checkpoint has the plain
    state_dict keys, resumes without --compile and with it again, and evaluates."""
    mod, args = compiled_run("ppo", seed=3, save_model=True)
    real_update, kept = mod.update, {}

    def update_keeping_the_first(agent, optimizer, b, args, *compiled):
        if not kept:  # the inputs, copied before the compiled update changes them
            kept.update(
                weights={k: v.clone() for k, v in agent.state_dict().items()},
                optimizer=optimizer.state_dict(),
                b={k: v.clone() for k, v in b.items()},
                args=dataclasses.replace(args),
                rng=torch.get_rng_state(),
                compiled=compiled,
            )
        out = real_update(agent, optimizer, b, args, *compiled)
        kept.setdefault("after", {k: v.clone() for k, v in agent.state_dict().items()})
        return out

    monkeypatch.setattr(mod, "update", update_keeping_the_first)
    torch._dynamo.reset()
    frames = torch._dynamo.utils.counters["frames"]["ok"]
    out = mod.train(dataclasses.replace(args, compile=True))
    assert torch._dynamo.utils.counters["frames"]["ok"] > frames  # compiled, not run eagerly
    assert len(kept["compiled"]) == 1 and kept["compiled"][0] is not mod.minibatch_losses
    assert len(out["first_minibatch"]) == len(out["losses"]) > 0  # one an iteration
    assert all(f["ratio_max_dev"] < 1e-5 for f in out["first_minibatch"])

    agent = mod.Agent(4, 2)
    agent.load_state_dict(kept["weights"])
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)
    optimizer.load_state_dict(kept["optimizer"])
    torch.set_rng_state(kept["rng"])  # the same shuffles
    eager, _ = real_update(agent, optimizer, kept["b"], kept["args"])
    for k, v in eager.items():
        assert out["losses"][0][k] == pytest.approx(v, rel=RTOL, abs=ATOL), k
    torch.testing.assert_close(agent.state_dict(), kept["after"], rtol=RTOL, atol=ATOL)

    # the whole run is eager's from the same seed (to rounding): compiled sampling draws from torch's generator, as
    # eager's does (inductor's own random numbers gave another rollout: a value loss of 16.7 against eager's 21.6)
    plain = mod.train(args)
    for compiled_losses, eager_losses in zip(out["losses"], plain["losses"], strict=True):
        assert compiled_losses == pytest.approx(eager_losses, rel=RTOL, abs=ATOL, nan_ok=True)
    assert out["episodic_return"] == plain["episodic_return"]

    ckpt, resume_args = mod.load_checkpoint(out["checkpoint"])
    assert resume_args.compile and set(ckpt["model"]) == set(mod.Agent(4, 2).state_dict())  # no "_orig_mod." prefix
    more = 2 * args.total_timesteps
    eager_run = mod.train(mod.Args(resume=out["checkpoint"], total_timesteps=more, compile=False))
    again = mod.train(mod.Args(resume=eager_run["checkpoint"], total_timesteps=more + args.total_timesteps, compile=True))
    assert again["global_step"] == more + args.total_timesteps
    # every loss finite (explained_variance is NaN where the returns do not vary: ppo.py says so, not a failure)
    assert all(math.isfinite(v) for losses in again["losses"] for k, v in losses.items() if k != "explained_variance")
    returns = mod.evaluate(again["checkpoint"], eval_episodes=2)
    assert len(returns) == 2 and all(r >= 1 for r in returns)


@pytest.mark.parametrize("script", SCRIPTS)
def test_hack_edits_act_when_compiled(script, tmp_path, monkeypatch):
    """tests/hacks.py's (a) and (c) with --compile: CleanRL's update step trains every parameter through the compiled
    losses' backward, and a LayerNorm added in front of the policy head is in the traced graphs, trains, and keeps
    the rollout and the update agreeing (ratio 1)."""
    mod, args = compiled_run(script, compile=True, update_epochs=1, total_timesteps=2 * 16)  # one iteration
    with traced_by_dynamo() as graphs:
        assert_cleanrl_update_trains(mod, args, tmp_path, monkeypatch)
    assert len(graphs) >= 2  # the policy step's and the minibatch losses'
    with traced_by_dynamo() as graphs:
        assert_added_layer_trains(mod, args, monkeypatch, head=HEADS[script])
    assert sum("layer_norm" in g for g in graphs) >= 2


def test_hack_temperature_changes_what_the_compiled_rollout_samples(monkeypatch):
    """hacks.py's (b) with --compile: a temperature in the policy head changes what the compiled rollout samples."""
    mod, args = compiled_run("ppo", num_envs=8, num_steps=256, total_timesteps=2048, compile=True, update_epochs=1)
    with traced_by_dynamo() as graphs:
        assert_temperature_changes_rollout(mod, args, monkeypatch)
    assert graphs


@pytest.mark.parametrize("script", SCRIPTS)
def test_compile_without_a_compiler_or_pythons_headers_is_refused(script, monkeypatch, tmp_path):
    mod, args = compiled_run(script, compile=True)
    mod.check_args(args)  # g++ and Python.h are here
    message = (
        r"^--compile needs a working C\+\+ compiler \(\$CXX, or g\+\+\) and Python's headers \(Python.h\), which inductor "
        r"builds its kernels with: install them \(e.g. apt install g\+\+ python3-dev\) or run without --compile$"
    )
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(mod.ConfigError, match=message):
        mod.check_args(args)
    mod.check_args(dataclasses.replace(args, compile=False))
    monkeypatch.setenv("CXX", "/bin/false")  # issue 75: one that exists but fails (its compile was a traceback)
    with pytest.raises(mod.ConfigError, match=message):
        mod.check_args(args)
    monkeypatch.delenv("CXX")
    monkeypatch.setattr(mod.sysconfig, "get_path", lambda name: str(tmp_path))  # no Python.h there
    with pytest.raises(mod.ConfigError, match=message):
        mod.check_args(args)


@pytest.mark.skipif(
    os.environ.get("PPO_LEARNING_CHECKS") != "1",
    reason="a 100k-step run, ~60 s of CPU (4 min on 2 busy cores): PPO_LEARNING_CHECKS=1 runs it",
)
def test_ppo_compiled_learns_cartpole():
    """ppo.py --compile, CartPole 100k steps, seed 1: the last 20 episodes' mean return 259.4 (eager: 283.8; random
    play ~22), measured on 2 busy AMD EPYC cores; here it must pass 150."""
    mod = importlib.import_module("ppo")
    out = mod.train(mod.Args(cuda=False, compile=True, total_timesteps=100_000))
    assert np.mean(out["episodic_return"][-20:]) > 150
