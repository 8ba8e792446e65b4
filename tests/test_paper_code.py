"""benchmark/peers/paper_code.py: seed 004's released code on gymnasium's v4 envs, checked here on a stand-in of that code."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmark.peers import paper_code
from benchmark.processes import root_on_path, tool

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
    (path / "src" / "MuJoCo.json").write_text(
        json.dumps({"game": "Walker2d-v2", "t": 200, "val_lr": 1.5e-4, "train_steps": 488, "advanced_logging": True})
    )
    (path / "src" / "policy_gradients" / "__init__.py").write_text("")
    (path / "src" / "policy_gradients" / "agent.py").write_text(FAKE_AGENT)
    (path / "configs" / "hopper_x.py").write_text(f"import os\nPARAMS = {params}\nos.makedirs('agents/')\n")


def test_a_config_is_the_base_json_overridden_by_the_first_value_of_each_entry(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake_release(tmp_path)
    params = paper_code.config_params(str(tmp_path), "hopper_x")
    assert params == {
        "game": "Hopper-v2",
        "t": 200,
        "val_lr": 4e-4,
        "train_steps": 488,
        "advanced_logging": True,
        "clip_eps": 1e32,
    }
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
    return subprocess.run(
        [*tool("benchmark.peers.paper_code"), "--src", str(tmp_path), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=root_on_path(),
    )


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
    assert (
        again.returncode == 0
        and json.loads((tmp_path / "p" / "hopper_x__2.json").read_text())["episode_returns"] == out["episode_returns"]
    )  # seeded: the same episodes


WHOLE = "is --src a whole checkout of https://github.com/MadryLab/implementation-matters?"
LISTS = "give a config whose every entry is a list of values, as the released ones"


def without(path):
    return lambda tmp_path: os.remove(tmp_path / path)


def config(text):
    return lambda tmp_path: (tmp_path / "configs" / "hopper_x.py").write_text(text)


@pytest.mark.parametrize(
    "args, damage, message",
    [
        (
            [],
            None,
            "no src/policy_gradients/agent.py under --src {src}; clone https://github.com/MadryLab/implementation-"
            "matters there",
        ),
        (["--config", "nothing"], "release", "no configs/nothing.py under --src {src}"),
        ([], config("BASE = {}\n"), "configs/hopper_x.py has no PARAMS = {{...}}; is --src the released repo?"),
        (
            [],
            without("src/MuJoCo.json"),
            f"src/MuJoCo.json under --src {{src}} cannot be read (No such file or directory); {WHOLE}",
        ),  # a partial checkout
        (
            [],
            config("GAME = 'Hopper-v2'\nPARAMS = {'game': [GAME]}\n"),
            f"configs/hopper_x.py's PARAMS is not written in literals; {LISTS}",
        ),
        (
            [],
            config("PARAMS = {'game': 'Hopper-v2'}\n"),
            "configs/hopper_x.py's PARAMS['game'] is not a list of values; "
            "give a config whose every entry is one, as the released ones",
        ),
        (["--seed", "-1"], "release", "--seed -1 is out of range; seeds go from 0 to 2**32 - 1"),
        (["--train-steps", "-1"], "release", "--train-steps must be 0 (the config's) or more, got -1"),
    ],
)
def test_bad_input_is_one_line_before_anything_runs(tmp_path, capsys, args, damage, message):
    if damage:
        fake_release(tmp_path)
    if callable(damage):
        damage(tmp_path)
    argv = ["--src", str(tmp_path), "--config", "hopper_x", "--train-steps", "1", "--out", "o", *args]
    assert paper_code.main(argv) == 2
    assert capsys.readouterr() == ("", f"paper_code.py: error: {message.format(src=tmp_path)}\n")
    assert str(tmp_path / "src") not in sys.path  # nor the stand-ins put in place: the checks come first
    assert not os.path.exists("o") and not os.path.exists("agents")


def test_a_checkout_whose_trainer_cannot_be_imported_is_one_line(tmp_path):
    fake_release(tmp_path)
    (tmp_path / "src" / "policy_gradients" / "agent.py").write_text("from .torch_utils import *\n" + FAKE_AGENT)
    res = run(tmp_path, "--config", "hopper_x")
    assert res.returncode == 2 and res.stderr == (
        "paper_code.py: error: the released Trainer cannot be imported (No "
        f"module named 'policy_gradients.torch_utils'); {WHOLE}\n"
    )
