"""Implementation Matters' released code (MadryLab/implementation-matters) on gymnasium's MuJoCo v4 envs, beside ours.

Run:   git clone https://github.com/MadryLab/implementation-matters /tmp/im
       python -m benchmark.peers.paper_code --src /tmp/im --config walker_ppom --seed 1 --out runs/paper_code

What runs is the released Trainer (src/policy_gradients) on src/MuJoCo.json overridden by the first value of each entry
of configs/<config>.py's PARAMS, as the released configs make their agents, for the config's train_steps iterations.
What it needs that this project does not install is stood in for:
- gym: a `gym` module over gymnasium, with the old API (reset gives the observation, step a 4-tuple whose done is
  terminated or truncated) and the config's game at v4 in place of v2;
- cox (logging): a store that keeps nothing, so advanced logging is off (the released runs collected a held-out batch
  every 10 iterations, which also moved the state and reward filters' statistics);
- sklearn and dill, which only advanced logging and checkpoints use.
The released run.py seeds nothing; here torch, numpy and the env's first reset take --seed.

It writes <out>/<config>__<seed>.json: each iteration's mean episode reward (what the released train_step returns),
the return of every episode that ended (the released Env's undiscounted sum of the env's rewards), final_return (the
mean of the last 100 episodes: our final return), final_5 (the released run.py's final result: the mean of the
last 5 iterations' mean rewards), the MuJoCo version and the released checkout's commit (empty if not a git checkout).
"""

import argparse
import ast
import importlib.machinery
import json
import os
import subprocess
import sys
import time
import types
from importlib.metadata import version

import gymnasium
import numpy as np
import torch

from benchmark.cli import ConfigError


class OldApiEnv:
    """A gymnasium env behind gym's pre-0.26 API, keeping the return of every episode that ends."""

    def __init__(self, env_id, seed, episodes):
        self.env, self.seed, self.episodes, self.ret = gymnasium.make(env_id.replace("-v2", "-v4")), seed, episodes, 0.0
        self.action_space, self.observation_space = self.env.action_space, self.env.observation_space

    def reset(self):
        obs, _ = self.env.reset(seed=self.seed)
        self.seed, self.ret = None, 0.0  # seeded once, as our scripts' envs; a reset drops an unfinished episode
        return obs

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.ret += reward
        if terminated or truncated:
            self.episodes.append(self.ret)
        return obs, reward, terminated or truncated, info


class NullStore:
    """cox's Store as the Trainer calls it, keeping nothing."""

    def add_table(self, *args, **kwargs):
        pass

    def log_table_and_tb(self, *args, **kwargs):
        pass

    def __getitem__(self, table):
        return types.SimpleNamespace(flush_row=lambda: None, update_row=lambda row: None)


WHOLE = "is --src a whole checkout of https://github.com/MadryLab/implementation-matters?"


def config_params(src, config):
    """src/MuJoCo.json overridden by the first value of each entry of configs/<config>.py's PARAMS (read, not run: the
    released config scripts write agent files when run)."""
    try:
        with open(os.path.join(src, "src", "MuJoCo.json")) as f:
            params = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"src/MuJoCo.json under --src {src} cannot be read ({getattr(e, 'strerror', None) or e}); {WHOLE}"
        ) from None
    if not os.path.isfile(os.path.join(src, "configs", f"{config}.py")):
        raise ConfigError(f"no configs/{config}.py under --src {src}")
    with open(os.path.join(src, "configs", f"{config}.py")) as f:
        tree = ast.parse(f.read())
    found = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PARAMS" for t in node.targets)
    ]
    if not found or not isinstance(found[0], ast.Dict):
        raise ConfigError(f"configs/{config}.py has no PARAMS = {{...}}; is --src the released repo?")
    values = [v.left if isinstance(v, ast.BinOp) else v for v in found[0].values]  # [6e-5] * 40: 40 agents alike
    try:
        entries = {ast.literal_eval(k): ast.literal_eval(v) for k, v in zip(found[0].keys, values)}
    except ValueError:  # a name or a call: what only running the config would give
        raise ConfigError(
            f"configs/{config}.py's PARAMS is not written in literals; give a config whose every entry "
            "is a list of values, as the released ones"
        ) from None
    odd = next((k for k, v in entries.items() if not isinstance(v, list) or not v), None)
    if odd is not None:
        raise ConfigError(
            f"configs/{config}.py's PARAMS[{odd!r}] is not a list of values; give a config whose every "
            "entry is one, as the released ones"
        )
    return {**params, **{k: v[0] for k, v in entries.items()}}


def stand_ins(seed, episodes):
    """The modules the released code imports and this project does not install (see the docstring)."""
    gym = types.ModuleType("gym")
    gym.make = lambda env_id: OldApiEnv(env_id, seed, episodes)
    gym.spaces = types.ModuleType("gym.spaces")
    gym.spaces.discrete = types.SimpleNamespace(Discrete=gymnasium.spaces.Discrete)
    gym.spaces.box = types.SimpleNamespace(Box=gymnasium.spaces.Box)
    sklearn_metrics = types.ModuleType("sklearn.metrics")
    sklearn_metrics.pairwise = types.SimpleNamespace(cosine_similarity=None)
    sklearn_metrics.pairwise_distances = None
    modules = {
        "gym": gym,
        "gym.spaces": gym.spaces,
        "gym.spaces.discrete": gym.spaces.discrete,
        "gym.spaces.box": gym.spaces.box,
        "dill": types.ModuleType("dill"),
        "sklearn": types.ModuleType("sklearn"),
        "sklearn.metrics": sklearn_metrics,
        "sklearn.metrics.pairwise": sklearn_metrics.pairwise,
    }
    for name, module in modules.items():  # a spec each: torch's compiler looks up the specs of the modules it knows
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    sys.modules.update(modules)


def prepare(args, episodes):
    """The command line and the checkout checked, then (the config's params, the released Trainer, imported with the
    stand-ins in sys.modules); bad input is a ConfigError."""
    if not 0 <= args.seed < 2**32:
        raise ConfigError(f"--seed {args.seed} is out of range; seeds go from 0 to 2**32 - 1")
    if args.train_steps < 0:
        raise ConfigError(f"--train-steps must be 0 (the config's) or more, got {args.train_steps}")
    if not os.path.isfile(os.path.join(args.src, "src", "policy_gradients", "agent.py")):
        raise ConfigError(
            f"no src/policy_gradients/agent.py under --src {args.src}; clone "
            "https://github.com/MadryLab/implementation-matters there"
        )
    params = config_params(args.src, args.config)
    params.update(advanced_logging=False, cpu=True, train_steps=args.train_steps or params["train_steps"])
    stand_ins(args.seed, episodes)
    sys.path.insert(0, os.path.join(args.src, "src"))
    try:
        from policy_gradients.agent import Trainer
    except ImportError as e:  # a checkout without a file the Trainer imports
        raise ConfigError(f"the released Trainer cannot be imported ({e}); {WHOLE}") from None
    return params, Trainer


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--src", required=True, help="a checkout of MadryLab/implementation-matters")
    p.add_argument("--config", required=True, help="a file of its configs/, without .py (e.g. walker_ppom)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-steps", type=int, default=0, help="iterations (default: the config's, 488 = 1M steps)")
    p.add_argument("--out", default="runs/paper_code", help="the folder of the result JSON")
    args, episodes = p.parse_args(argv), []
    try:
        params, Trainer = prepare(args, episodes)
    except ConfigError as e:
        print(f"paper_code.py: error: {e}", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    trainer = Trainer.agent_from_params(params, store=NullStore())
    rewards, start = [], time.time()
    for i in range(params["train_steps"]):
        rewards.append(float(trainer.train_step()))
        print(
            f"paper_code.py: {args.config} seed {args.seed} iteration {i + 1}/{params['train_steps']} "
            f"mean reward {rewards[-1]:.1f}",
            file=sys.stderr,
        )
    os.makedirs(args.out, exist_ok=True)
    out = os.path.join(args.out, f"{args.config}__{args.seed}.json")
    with open(out, "w") as f:
        json.dump(
            {
                "config": args.config,
                "seed": args.seed,
                "game": params["game"].replace("-v2", "-v4"),
                "params": params,
                "iteration_rewards": rewards,
                "episode_returns": episodes,
                "final_return": float(np.mean(episodes[-100:])),
                "final_5": float(np.mean(rewards[-5:])),
                "wall_time_s": time.time() - start,
                "mujoco": version("mujoco"),
                "src_commit": subprocess.run(
                    ["git", "-C", args.src, "rev-parse", "HEAD"], capture_output=True, text=True
                ).stdout.strip(),
            },
            f,
        )
    print(
        f"paper_code.py: {out}: final return {np.mean(episodes[-100:]):.1f} (last 100 episodes), "
        f"{np.mean(rewards[-5:]):.1f} (last 5 iterations)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
