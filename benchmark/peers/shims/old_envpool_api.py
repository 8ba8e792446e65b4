"""Runs a script written for envpool 0.8's gym API (CleanRL's and LeanRL's ppo_atari_envpool*.py) on envpool 1.2,
the only envpool with a wheel for the device machine's Python 3.12 that fits its carry.

Run:   python benchmark/peers/shims/old_envpool_api.py SCRIPT [ARGS...]   (SCRIPT runs as __main__ with ARGS)

envpool 1.2 serves env_type="gym" with gymnasium's API: reset() -> (obs, info), step() -> (obs, reward, terminated,
truncated, info), gymnasium spaces. envpool 0.8 (CleanRL's pin, gym<0.26) gave reset() -> obs,
step() -> (obs, reward, done, info) with done = terminated or truncated, and gym spaces; those scripts assert
isinstance(envs.action_space, gym.spaces.Discrete). So envpool.make(..., env_type="gym") returns the 1.2 pool behind
OldGymApi, which returns what 0.8 did: the same arrays (no copy), done = terminated | truncated, info as 1.2 gives it
(its "terminated", "lives" and "reward" are what the scripts read, as 0.8 named them), the spaces rebuilt as gym's.
Every other env_type, and every other call, goes to envpool 1.2 unchanged. The cost: one Python call and one
np.logical_or over num_envs booleans per step."""

import os
import runpy
import sys


def to_gym_space(space):
    import gym
    import numpy as np

    name = type(space).__name__
    if name == "Discrete":
        return gym.spaces.Discrete(int(space.n))
    if name == "Box":
        return gym.spaces.Box(low=np.asarray(space.low), high=np.asarray(space.high), shape=space.shape, dtype=space.dtype)
    raise TypeError(f"old_envpool_api.py: no gym counterpart for envpool's {space!r}")


class OldGymApi:
    """envpool 1.2's gymnasium pool with envpool 0.8's gym API."""

    def __init__(self, pool):
        self.pool = pool
        self.action_space = to_gym_space(pool.action_space)
        self.observation_space = to_gym_space(pool.observation_space)

    def reset(self, *args, **kwargs):
        return self.pool.reset(*args, **kwargs)[0]

    def step(self, *args, **kwargs):
        import numpy as np

        obs, reward, terminated, truncated, info = self.pool.step(*args, **kwargs)
        return obs, reward, np.logical_or(terminated, truncated), info

    def __getattr__(self, name):  # spec, config, close, ...: the pool's own
        return getattr(self.pool, name)


def patch():
    """envpool.make(..., env_type="gym") (positional or keyword) gives an OldGymApi; the rest is unchanged."""
    import envpool

    make = envpool.make

    def old_make(task_id, env_type=None, **kwargs):
        if env_type == "gym":
            return OldGymApi(make(task_id, env_type="gymnasium", **kwargs))
        return make(task_id, env_type=env_type, **kwargs)

    envpool.make = old_make
    envpool.make_gym = lambda task_id, **kwargs: old_make(task_id, env_type="gym", **kwargs)
    return envpool


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python old_envpool_api.py SCRIPT [ARGS...]")
    patch()
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))  # as `python SCRIPT` would
    runpy.run_path(sys.argv[0], run_name="__main__")
