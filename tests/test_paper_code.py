"""benchmark/paper_code.py: seed 004's released code on gymnasium's v4 envs, checked here on a stand-in of that code."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmark"))
import paper_code  # noqa: E402

SCRIPT = paper_code.__file__

# A stand-in for the released src/policy_gradients/agent.py, using what the real one uses: gym.make on the params'
# game, reset() giving the observation, step() a 4-tuple, one train_step per iteration returning its mean reward.
FAKE_AGENT = """
import gym
import numpy as np


class Trainer:
    @staticmethod
    def agent_from_params(params, store=None):
        store.add_table("optimization", {})
        return Trainer(params, store)

    def __init__(self, params, store):
        self.params, self.store, self.env = params, store, gym.make(params["game"])
        assert isinstance(self.env.action_space, gym.spaces.box.Box)

    def train_step(self):
        self.env.reset()  # the released Trainer resets its env every iteration
        ended = []
        for _ in range(self.params["t"]):
            _, reward, done, _ = self.env.step(np.random.uniform(-1, 1, self.env.action_space.shape))
            if done:
                ended.append(self.env.episodes[-1])
                self.env.reset()
        self.store["optimization"].flush_row()
        return np.mean(ended) if ended else -1
"""


def fake_release(path, params="{'game': ['Hopper-v2'], 'val_lr': [4e-4] * 40, 'clip_eps': [1e32]}"):
    os.makedirs(path / "src" / "policy_gradients")
    os.makedirs(path / "configs")
    (path / "src" / "MuJoCo.json").write_text(json.dumps({"game": "Walker2d-v2", "t": 200, "val_lr": 1.5e-4,
                                                           "train_steps": 488, "advanced_logging": True}))
    (path / "src" / "policy_gradients" / "__init__.py").write_text("")
    (path / "src" / "policy_gradients" / "agent.py").write_text(FAKE_AGENT)
    (path / "configs" / "hopper_x.py").write_text(f"import os\nPARAMS = {params}\nos.makedirs('agents/')\n")


def test_a_config_is_the_base_json_overridden_by_the_first_value_of_each_entry(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake_release(tmp_path)
    params = paper_code.config_params(str(tmp_path), "hopper_x")
    assert params == {"game": "Hopper-v2", "t": 200, "val_lr": 4e-4, "train_steps": 488, "advanced_logging": True,
                      "clip_eps": 1e32}
    assert not os.path.exists("agents")  # the config is read, not run


def test_the_old_api_env_keeps_each_finished_episode_and_drops_an_unfinished_one():
    episodes = []
    env = paper_code.OldApiEnv("Hopper-v2", 3, episodes)
    assert env.env.spec.id == "Hopper-v4"
    first = env.reset()
    assert np.array_equal(first, paper_code.OldApiEnv("Hopper-v2", 3, []).reset())  # seeded
    rewards, done = [], False
    while not done:
        obs, reward, done, info = env.step(np.ones(3))  # pushes hard: the hopper falls within some 100 steps
        rewards.append(reward)
    assert episodes == [pytest.approx(sum(rewards))]
    env.reset()
    env.step(np.zeros(3))
    env.reset()  # an unfinished episode is dropped, as the released Trainer's reset every iteration drops it
    assert len(episodes) == 1


def run(tmp_path, *args):
    return subprocess.run([sys.executable, SCRIPT, "--src", str(tmp_path), *args], capture_output=True, text=True,
                          cwd=tmp_path)


def test_main_trains_the_release_on_the_v4_env_and_writes_its_results(tmp_path):
    fake_release(tmp_path)
    res = run(tmp_path, "--config", "hopper_x", "--seed", "2", "--train-steps", "6", "--out", "o")
    assert res.returncode == 0, res.stderr
    out = json.loads((tmp_path / "o" / "hopper_x__2.json").read_text())
    assert out["game"] == "Hopper-v4" and out["params"]["advanced_logging"] is False and out["params"]["t"] == 200
    assert len(out["iteration_rewards"]) == 6 and len(out["episode_returns"]) > 6
    assert out["final_return"] == pytest.approx(np.mean(out["episode_returns"][-100:]))
    assert out["final_5"] == pytest.approx(np.mean(out["iteration_rewards"][-5:]))
    assert out["mujoco"] == paper_code.version("mujoco") and out["src_commit"] == ""  # the fake release is no git checkout
    again = run(tmp_path, "--config", "hopper_x", "--seed", "2", "--train-steps", "6", "--out", "p")
    assert again.returncode == 0 and json.loads((tmp_path / "p" / "hopper_x__2.json").read_text())[
        "episode_returns"] == out["episode_returns"]  # seeded: the same episodes


def test_bad_input_is_one_line(tmp_path):
    res = run(tmp_path, "--config", "hopper_x")
    assert res.returncode == 1 and res.stderr.strip().splitlines() == [
        f"paper_code.py: error: no src/policy_gradients/agent.py under --src {tmp_path}; clone "
        "https://github.com/MadryLab/implementation-matters there"]
    fake_release(tmp_path, params="{}")
    (tmp_path / "configs" / "hopper_x.py").write_text("BASE = {}\n")
    res = run(tmp_path, "--config", "hopper_x")
    assert res.returncode == 1 and res.stderr.strip().splitlines() == [
        "paper_code.py: error: configs/hopper_x.py has no PARAMS = {...}; is --src the released repo?"]
    res = run(tmp_path, "--config", "nothing")
    assert res.returncode == 1 and res.stderr.strip().splitlines() == [
        f"paper_code.py: error: no configs/nothing.py under --src {tmp_path}"]
