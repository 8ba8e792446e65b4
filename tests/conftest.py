"""Shared fixtures: the repo root on sys.path (the one place: the scripts and the package benchmark import by their
names from there), a scratch working directory, edited copies of a script imported, small test envs, and the fake
training script of benchmark/'s tests.

The layout of tests/. Test files: test_<script>.py, one a training script, what differs by script (the μRTS pair in
test_ppo_multidiscrete.py); test_every_script.py, each promise every script keeps, tested once over the scripts;
test_contracts.py, what the tools read of the scripts, held to the scripts' text; test_<tool>.py, one a tool of
benchmark/ (test_run.py, test_report.py, test_compare.py, ..., test_sweeps.py); test_docs.py and test_repo.py, the
documentation and the repository. Helpers, imported by the test files (no test file imports another's helpers):
tiny.py (each script's tiny run, the scripts, the marks of an extra), promises.py (the checks of those promises),
hacks.py (a copy edited the CleanRL way), precision.py (--bf16), networks.py (the CNN and head checks), microrts.py
(the μRTS pair's), processes.py (a command line run in this process, forked runs, torchrun ranks) and fakes.py (the
stand-ins the tools' tests run)."""

import importlib.util
import os
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# each test process trains with one thread, as the scripts do; keeps two xdist workers off each other
os.environ.setdefault("OMP_NUM_THREADS", "1")


def import_copy(text, path):
    """Write `text` (a script, edited) to `path` and import it as a module named after the file, registered in
    sys.modules as an import would (pickle finds its classes there)."""
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def next_second():
    """Sleep into the next wall-clock second. TensorBoard reads a run's event files in name order, and a
    name starts with the second the file was made: a resumed run, which logs on into the interrupted run's
    directory, comes seconds later in real use, but could share its second in a test."""
    time.sleep(1.01 - time.time() % 1)


def interrupt_at_update(mod, monkeypatch, n):
    """Make the n-th call of mod.update raise KeyboardInterrupt, as a Ctrl-C during that update would."""
    real_update, calls = mod.update, []

    def update_then_interrupt(*a):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return real_update(*a)

    monkeypatch.setattr(mod, "update", update_then_interrupt)


def resume_elsewhere(mod, full, tmp_path, monkeypatch, **args):
    """Resume the run `full` (what train() returned, run in tmp_path) from another directory with mod.Args(**args): it
    logs on in the run's own directory and makes no runs/ where it was started. Returns what the resumed train() did."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    next_second()
    resumed = mod.train(mod.Args(resume=str(tmp_path / full["checkpoint"]), **args))
    assert resumed["run_dir"] == str(tmp_path / full["run_dir"]) and not os.path.exists("runs")
    return resumed


@pytest.fixture(autouse=True)
def scratch_dir(tmp_path, monkeypatch):
    """Scripts write runs/ and videos/ into the working directory: keep them out of the repo."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


class CountingEnv(gym.Env):
    """A 4-dim observation env with known rewards, for checking what the scripts log and store.

    The observation is [t / 10, episode index, 0, 0]; the reward at step t is t + 1 + (episode index % 3);
    the episode terminates after `3 + episode index % 4` steps unless the TimeLimit (6 steps) truncates
    it first, so rollouts hold both kinds of episode end. Every finished episode's reward sum is
    appended to `CountingEnv.finished` (the envs run in-process, so a test can read it).
    """

    finished = []

    def __init__(self, terminate=True):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.terminate = terminate
        self.episode = -1

    def _obs(self):
        return np.array([self.t / 10, self.episode, 0, 0], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t, self.total = 0, 0.0
        return self._obs(), {}

    def step(self, action):
        reward = float(self.t + 1 + self.episode % 3)
        self.t += 1
        self.total += reward
        terminated = self.terminate and self.t >= 3 + self.episode % 4
        if terminated or self.t >= 6:  # the TimeLimit below truncates at 6
            CountingEnv.finished.append(self.total)
        return self._obs(), reward, terminated, False, {}


gym.register("Counting-v0", entry_point=CountingEnv, max_episode_steps=6)
gym.register("CountingNoTerm-v0", entry_point=CountingEnv, max_episode_steps=6, kwargs={"terminate": False})


# ---- the fake training script of benchmark/'s tests (tests/fakes.py) ---------------------------------------------


@pytest.fixture
def fake(tmp_path):
    path = tmp_path / "fake.py"
    from fakes import FAKE_SCRIPT  # (fakes imports this module's ROOT)

    path.write_text(FAKE_SCRIPT)
    return str(path)


@pytest.fixture
def write_tb(fake):
    """The fake script's event writer, for synthetic logs written by the test itself."""
    spec = importlib.util.spec_from_file_location("fake", fake)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_tb
