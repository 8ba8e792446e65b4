"""The tiny run of each script its tests train: a few iterations (updates) of a small rollout, fast, but every code
path runs. tiny(mod, **changes) is that run as mod's Args. And the scripts (benchmark/'s one list of them), and the
marks that skip a script's runs where the extra it needs apart is not installed at all."""

import importlib.util
import sys

import pytest

from benchmark.runs import SCRIPTS  # noqa: F401  every .py file at the top level, the one list of them

ASTERIX = "AsterixNoFrameskip-v4"  # short random games (~190 agent steps), several lives, no FIRE, rewards of 50

CLASSIC = dict(num_envs=2, num_steps=16, num_minibatches=2, update_epochs=2, total_timesteps=2 * 16 * 4)
ATARI = dict(env_id=ASTERIX, num_envs=2, num_steps=32, num_minibatches=2, update_epochs=1, total_timesteps=2 * 32 * 2)
MUJOCO = dict(env_id="Hopper-v4", num_envs=2, num_steps=32, num_minibatches=2, update_epochs=2, total_timesteps=2 * 32 * 3)
MICRORTS = dict(num_envs=2, num_steps=16, num_minibatches=2, update_epochs=2, total_timesteps=2 * 16 * 2, max_steps=20)
IMPALA = dict(batch_size=4, unroll_length=10, total_timesteps=10 * 4 * 4)

# by module name: the scripts', and the two Stable-Baselines3 runs set up as ours (benchmark/peers/sb3_a2c.py, sb3_trpo.py)
TINY = {
    "ppo": CLASSIC,
    "ppo_shared": CLASSIC,
    "ppo_atari": ATARI,
    "ppo_atari_multigpu": ATARI,  # in a world of one (no torchrun): ppo_atari.py's run
    "ppo_atari_lstm": {**ATARI, "num_steps": 16, "total_timesteps": 2 * 16 * 3},
    "ppo_atari_envpool": {**ATARI, "env_id": "Asterix-v5", "num_envs": 4, "num_steps": 64, "total_timesteps": 4 * 64 * 2},
    "ppo_continuous_action": MUJOCO,
    "trpo_continuous_action": MUJOCO,
    "ppo_procgen": {**CLASSIC, "update_epochs": 1, "total_timesteps": 2 * 16 * 2},
    "ppo_multidiscrete": MICRORTS,
    "ppo_multidiscrete_mask": MICRORTS,
    "a2c_paac": dict(num_envs=2, num_workers=2, num_steps=5, total_timesteps=2 * 5 * 4),  # Breakout on 2 workers
    "impala_vtrace": {**IMPALA, "num_actors": 2},  # Breakout
    "impala_vtrace_distributed": IMPALA,  # for 2 actor ranks
    "sb3_a2c": dict(num_envs=2, num_steps=5, total_timesteps=2 * 5 * 4),
    "sb3_trpo": dict(env_id="Hopper-v4", num_steps=64, num_minibatches=2, update_epochs=2, total_timesteps=64 * 3),
}


def tiny(mod, **changes):
    """mod's tiny run, on the CPU, with `changes`."""
    return mod.Args(**{"cuda": False, **TINY[mod.__name__.rsplit(".", 1)[-1]], **changes})


def steps_per_iteration(args):
    """The steps one iteration (IMPALA: one update) of the run `args` takes."""
    return args.unroll_length * args.batch_size if hasattr(args, "unroll_length") else args.num_envs * args.num_steps


needs_procgen = pytest.mark.skipif(
    importlib.util.find_spec("procgen") is None,
    reason="procgen not installed (bash scripts/install_extras.sh procgen)"
    if sys.version_info < (3, 13)
    else "procgen-mirror has no wheel for Python 3.13: Procgen runs on Python 3.11 and 3.12",
)
microrts_missing = pytest.mark.skipif(
    importlib.util.find_spec("gym_microrts020") is None or importlib.util.find_spec("jpype") is None,
    reason="gym-microrts 0.2.0 not installed (bash scripts/install_extras.sh microrts)",
)
# script: the marks that skip its runs where its extra is missing (an installed but broken one fails them)
SKIP = {
    "ppo_procgen.py": [needs_procgen],
    "ppo_multidiscrete.py": [microrts_missing],
    "ppo_multidiscrete_mask.py": [microrts_missing],
}


def skip_updates(monkeypatch, module):
    """For tests of the rollout and logging only: the learning phase becomes a no-op (it is the slow part)."""
    losses = dict(value_loss=0.0, policy_loss=0.0, entropy=0.0, old_approx_kl=0.0, approx_kl=0.0, clipfrac=0.0)
    monkeypatch.setattr(module, "update", lambda *a: (losses, {"ratio_max_dev": 0.0}))
