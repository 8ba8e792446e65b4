"""Issue 38: MuJoCo's version decides the physics of some envs (MuJoCo 4 changed Humanoid-v4's from its first reset, a
free joint's, and Hopper-v4's from its first contacts, where Walker2d-v4 stayed the same), so a version change must fail
here, not be found by chance. A seeded rollout of each under the installed MuJoCo is held against the values stored for
that version in mujoco_physics.json, which holds every MuJoCo the lock pins (requirements/mujoco.txt, mujoco-ref.txt).

To store the installed MuJoCo's values (a new version: then see which env changed against the versions stored, and
write it down in README.md beside the published MuJoCo numbers and in benchmark/peers/lockstep.py's mujoco_check):
    python tests/test_mujoco_physics.py                      # the default lock's MuJoCo, in .venv
    .venv-mujoco-ref/bin/python tests/test_mujoco_physics.py  # bash scripts/install.sh mujoco-ref: MuJoCo 2.3.3
"""

import itertools
import json
import os
import platform
import sys
import time

import gymnasium as gym
import mujoco
import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
STORED = os.path.join(HERE, "mujoco_physics.json")
ENVS = ["Humanoid-v4", "Walker2d-v4", "Hopper-v4"]
STEPS, KEPT = 100, 2  # 100 steps' rewards (random play ends Humanoid's and Hopper's games in them), 2 observations
# float rounding that another CPU's libm may add; MuJoCo 4's changes are 1.7e-3 in Humanoid's first observation, 3.5e-3 in
# Hopper's reward at step 10
RTOL, ATOL = 1e-7, 1e-9


def rollout(env_id):
    """reset(seed=3), then STEPS uniform random actions from numpy's generator of seed 0, reset() after each game's end:
    the first KEPT observations, every reward, and the steps that ended a game."""
    env = gym.make(env_id)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=3)
    observations, rewards, ends = [obs.tolist()], [], []
    for t in range(STEPS):
        obs, reward, terminated, truncated, _ = env.step(rng.uniform(env.action_space.low, env.action_space.high))
        rewards.append(float(reward))
        if terminated or truncated:
            ends.append(t)
            obs, _ = env.reset()
        observations.append(obs.tolist())
    env.close()
    return {"observations": observations[:KEPT], "rewards": rewards, "ends": ends}


def stored():
    with open(STORED) as f:
        return json.load(f)["versions"]


def same(a, b):
    return a["ends"] == b["ends"] and all(np.allclose(a[k], b[k], rtol=RTOL, atol=ATOL) for k in ("observations", "rewards"))


@pytest.mark.parametrize("env_id", ENVS)
def test_a_seeded_rollout_is_the_one_stored_for_the_installed_mujoco(env_id):
    versions = stored()
    if mujoco.__version__ not in versions:
        pytest.fail(
            f"MuJoCo {mujoco.__version__} has no stored rollout in tests/mujoco_physics.json (it holds "
            f"{', '.join(versions)}): run `python tests/test_mujoco_physics.py` to store it, then see which env "
            "changed against the versions stored and write it down (this file's docstring says where)",
            pytrace=False,
        )
    want, got = versions[mujoco.__version__][env_id], rollout(env_id)
    assert got["ends"] == want["ends"]
    np.testing.assert_allclose(got["observations"], want["observations"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["rewards"], want["rewards"], rtol=RTOL, atol=ATOL)


def test_every_mujoco_the_lock_pins_has_a_stored_rollout():
    from lock import lock_pins

    locked = {
        v
        for lock in ("mujoco.txt", "mujoco-ref.txt")
        for v, _ in lock_pins(os.path.join(HERE, "..", "requirements", lock))["mujoco"]
    }
    assert sorted(locked - set(stored())) == []


def test_lockstep_calls_two_mujocos_other_physics_exactly_where_their_stored_rollouts_differ():
    """benchmark/peers/lockstep.py refuses an env MuJoCo 4 changed whose two sides ran on either side of 4: the stored rollouts
    must bear that rule out for every pair of versions (and any version stored next must fit it)."""
    from benchmark.peers.lockstep import mujoco_check

    versions = stored()
    assert len(versions) >= 2
    for a, b in itertools.combinations(sorted(versions), 2):
        for env_id in ENVS:
            assert same(versions[a][env_id], versions[b][env_id]) == (mujoco_check(env_id, a, b) is None), (env_id, a, b)


if __name__ == "__main__":
    data = (
        json.load(open(STORED))
        if os.path.exists(STORED)
        else {
            "about": "tests/test_mujoco_physics.py's rollouts (its docstring); each version's made by the command stored "
            "with it",
            "versions": {},
        }
    )
    data["versions"][mujoco.__version__] = {
        "command": f"{os.path.relpath(sys.executable)} tests/test_mujoco_physics.py",
        "made": f"{time.strftime('%Y-%m-%d', time.gmtime())}, Python {platform.python_version()}, gymnasium "
        f"{gym.__version__}, numpy {np.__version__}, {platform.machine()}",
        **{env_id: rollout(env_id) for env_id in ENVS},
    }
    data["versions"] = dict(sorted(data["versions"].items()))
    with open(STORED, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    print(f"stored MuJoCo {mujoco.__version__}'s rollouts of {', '.join(ENVS)} in {STORED}")
