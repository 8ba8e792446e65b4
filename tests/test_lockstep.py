"""benchmark/peers/lockstep.py: the patched copy shuffles and anneals as CleanRL does, and the side-by-side finds the
first iteration that differs."""

import importlib.metadata
import os

import numpy as np
import pytest
import torch
from conftest import ROOT, import_copy

from benchmark.peers import lockstep

SCRIPT = os.path.join(ROOT, "ppo_continuous_action.py")
TINY = dict(seed=3, num_envs=1, num_steps=128, num_minibatches=4, update_epochs=3)
PENDULUM = dict(env_id="Pendulum-v1", total_timesteps=1024)


def flags(**run):
    """The command line of the tiny run with `run`'s settings."""
    return [x for name, v in {**run, **TINY}.items() for x in (f"--{name.replace('_', '-')}", str(v))]


def tiny_run(module, **run):
    """The tiny run of `module` (the patched copy: the stand-in for CleanRL's script) with `run`'s settings."""
    return module.train(module.Args(**run, **TINY, cuda=False))


class Recorder(torch.nn.Module):
    """A stand-in agent for a script's update(): one weight gives every minibatch a loss; it records each minibatch's
    sample indices (the batch's observations are their own indices)."""

    def __init__(self, outputs):
        super().__init__()
        self.w, self.outputs, self.seen = torch.nn.Parameter(torch.zeros(())), outputs, []

    def get_action_and_value(self, obs, *rest):
        self.seen.append(obs[:, 0].long().tolist())
        z = self.w * obs[:, 0]
        return (None, z, z, z, None)[: self.outputs]


def minibatch_order(module, seed, lstm):
    """The indices of every minibatch a script's update visits over a 16-sample batch, in order, after
    np.random.seed(seed): 2 envs x 8 steps in 4 minibatches, or (ppo_atari_lstm.py) 4 envs x 4 steps in 2 of 2 envs."""
    args = module.Args(
        num_envs=4 if lstm else 2, num_steps=4 if lstm else 8, num_minibatches=2 if lstm else 4, update_epochs=3
    )
    args.batch_size, args.minibatch_size = 16, 8 if lstm else 4
    agent = Recorder(5 if lstm else 4)
    b = {
        "obs": torch.arange(16.0)[:, None],
        "actions": torch.zeros(16, 1),
        "logprobs": torch.zeros(16),
        "values": torch.zeros(16),
        "advantages": torch.randn(16),
        "returns": torch.zeros(16),
        **({"lstm_state": (torch.zeros(1, 4, 1),) * 2, "starts": torch.zeros(16)} if lstm else {}),
    }
    np.random.seed(seed)
    module.update(agent, torch.optim.Adam(agent.parameters(), lr=1e-3), b, args)
    return agent.seen


def cleanrl_order(seed, lstm):
    """CleanRL's loops: one np.arange before the epochs, shuffled in place each epoch and cut into minibatches (of
    samples; in its ppo_atari_lstm.py of envs, a minibatch being their whole sequences, time-major)."""
    np.random.seed(seed)
    inds, order = np.arange(4 if lstm else 16), []
    for _ in range(3):
        np.random.shuffle(inds)
        if lstm:
            order += [[t * 4 + e for t in range(4) for e in inds[i : i + 2]] for i in (0, 2)]
        else:
            order += [inds[i : i + 4].tolist() for i in range(0, 16, 4)]
    return order


@pytest.mark.parametrize("script", ["ppo_continuous_action.py", "ppo_atari_envpool.py", "ppo_atari_lstm.py"])
def test_patched_update_visits_cleanrls_minibatches_and_anneals_to_lr_over_n(tmp_path, script):
    text, lstm = open(os.path.join(ROOT, script)).read(), script == "ppo_atari_lstm.py"
    module = import_copy(lockstep.patched(text, 2), tmp_path / "lockstep_patched.py")
    assert minibatch_order(module, 5, lstm) == cleanrl_order(5, lstm)
    ours = import_copy(text, tmp_path / "lockstep_ours.py")
    assert minibatch_order(ours, 5, lstm) != cleanrl_order(5, lstm)  # ours shuffles with torch
    assert module.LOCKSTEP_ITERATIONS == 2
    assert "frac = 1 - (iteration - 1) / args.num_iterations\n" in lockstep.patched(text, 2)


def test_a_script_without_the_patched_lines_is_one_line(tmp_path, capsys):
    with pytest.raises(lockstep.ConfigError, match="has 0 copies of the line"):
        lockstep.patched("SCRIPT = 'other.py'\n", 2)
    assert lockstep.main(["--cleanrl-run", str(tmp_path), "--iterations", "0"]) == 2
    assert capsys.readouterr().err == "lockstep.py: --iterations must be 1 or more, got 0\n"


def test_same_flags_run_in_lockstep_and_another_learning_rate_differs_from_iteration_1(tmp_path, capsys, monkeypatch):
    """The patched copy against a run of itself (the stand-in for CleanRL's): identical for the 2 iterations run, the
    8 of the budget not; a run with another learning rate differs from the first update on."""
    reference = tmp_path / "ref"
    assert lockstep.main(["--cleanrl-run", str(tmp_path / "none"), "--work-dir", str(reference)]) == 2  # no run yet
    assert "holds no losses/value_loss" in capsys.readouterr().err
    module = import_copy(lockstep.patched(open(SCRIPT).read(), 8), tmp_path / "lockstep_full.py")
    monkeypatch.chdir(tmp_path)
    ref = tiny_run(module, **PENDULUM)
    assert ref["learning_rate"] == [3e-4 * (1 - i / 8) for i in range(8)]  # CleanRL's schedule: lr / 8 at the last
    ref_dir = ref["run_dir"]
    base = ["--cleanrl-run", os.path.join(tmp_path, ref_dir), "--iterations", "2", "--work-dir", str(tmp_path / "w")]
    capsys.readouterr()
    assert lockstep.main(base + ["--script", "ppo_nosuch.py"]) == 2
    err = capsys.readouterr().err
    assert err == f"lockstep.py: --script ppo_nosuch.py: no such file here or at the top of {ROOT}\n"
    base += ["--script", "ppo_continuous_action.py"]  # a name, from another folder: the script at the repository's top
    assert lockstep.main(base + ["--"] + flags(**PENDULUM)) == 0
    out = capsys.readouterr().out
    assert "identical (relative difference <= 0.0001) through iteration 2 of 2" in out
    other = tiny_run(module, **PENDULUM, learning_rate=1e-3)
    lines, same = lockstep.side_by_side(other["run_dir"], ref_dir, 2, 1e-4)
    assert same == 0 and lines[-1] == "identical (relative difference <= 0.0001) through iteration 0 of 2"
    # issue 37.9: runs of other flags or another env were compared as if they were a pair; now refused, named, by our
    # script's own parser before anything runs (nothing is printed of a run, no run directory is made)
    runs, _ = sorted(os.listdir(tmp_path / "w" / "runs")), capsys.readouterr()
    assert lockstep.main(base + ["--"] + flags(**PENDULUM) + ["--learning-rate", "1e-3"]) == 2
    refused = capsys.readouterr()
    assert (
        refused.err
        == (
            "lockstep.py: the flags after -- give learning_rate 0.001 (CleanRL's run 0.0003): not the "
            "CleanRL run's flags; give its flags after --\n"
        )
        and refused.out == ""
    )
    assert lockstep.main(base + ["--"] + flags(**{**PENDULUM, "env_id": "MountainCarContinuous-v0"})) == 2
    assert capsys.readouterr().err.startswith(
        "lockstep.py: the flags after -- give env_id MountainCarContinuous-v0 (CleanRL's run Pendulum-v1)"
    )
    bad = flags(**PENDULUM) + ["--learning-rate", "fast"]  # one it cannot read: its own line
    assert lockstep.main(base + ["--"] + bad) == 2
    assert capsys.readouterr().err == (
        "lockstep.py: the flags after --: Error parsing --learning-rate: could not convert string to float: 'fast'\n"
    )
    assert sorted(os.listdir(tmp_path / "w" / "runs")) == runs


def test_an_env_whose_physics_mujoco_4_changed_is_refused_on_either_side_of_it_before_ours_runs(tmp_path, capsys):
    """Issue 38: MuJoCo 4 changed the physics of the envs with a free joint (and Hopper's), so that a Humanoid run on
    MuJoCo 2.3.3 and ours on 4.0.0 (or the other way round) part at the first reset; lockstep does not call that a
    lockstep failure."""
    from torch.utils.tensorboard import SummaryWriter

    cleanrl_run = tmp_path / "Humanoid-v4__ppo_continuous_action__3__1"  # what lockstep reads of a CleanRL run
    with SummaryWriter(cleanrl_run) as writer:
        writer.add_text("hyperparameters", "|param|value|\n|-|-|\n|env_id|Humanoid-v4|\n|seed|3|")
        writer.add_scalar("losses/value_loss", 1.0, 2048)
    ours = importlib.metadata.version("mujoco")
    other = "2.3.3" if int(ours.split(".")[0]) >= 4 else "4.0.0"
    args = ["--cleanrl-run", str(cleanrl_run), "--work-dir", str(tmp_path / "w"), "--", "--env-id", "Humanoid-v4"]
    assert lockstep.main(["--cleanrl-mujoco", other, *args]) == 2
    assert capsys.readouterr().err == (
        f"lockstep.py: ours runs MuJoCo {ours}, CleanRL's run ran on {other}: MuJoCo 4 changed the physics of Humanoid-v4, "
        "so the two would part by the physics, not the algorithm; run ours on the run's MuJoCo (2.3.3: bash "
        "scripts/install.sh mujoco-ref, then .venv-mujoco-ref/bin/python -m benchmark.peers.lockstep ...)\n"
    )
    assert lockstep.main(args) == 2  # CleanRL does not log its MuJoCo: without --cleanrl-mujoco it is not known
    assert capsys.readouterr().err.startswith(
        "lockstep.py: MuJoCo 4 changed the physics of Humanoid-v4: give --cleanrl-mujoco, the MuJoCo CleanRL's run ran on"
    )
    assert lockstep.main(["--cleanrl-mujoco", "2.3.3 (uv.lock)", *args]) == 2
    assert capsys.readouterr().err == (
        "lockstep.py: --cleanrl-mujoco '2.3.3 (uv.lock)' is not a version; give one such as 2.3.3\n"
    )
    assert not (tmp_path / "w").exists()  # refused before our copy was written
    # 2.3.3 and 3.1.6 agree to 4e-10 over 1,000 Humanoid steps; Walker2d and HalfCheetah are the same under all three
    assert [
        lockstep.mujoco_check(*c)
        for c in [("Ant-v4", "3.1.6", "2.3.3"), ("Walker2d-v4", "4.0.0", "2.3.3"), ("HalfCheetah-v4", "4.0.0", None)]
    ] == [None] * 3


def test_walker2d_on_another_mujoco_is_not_refused_and_the_output_names_each_sides(tmp_path, capsys, monkeypatch):
    """Walker2d's physics are the same under MuJoCo 2.3.3 and 4.0.0 (tests/test_mujoco_physics.py)."""
    module = import_copy(lockstep.patched(open(SCRIPT).read(), 2), tmp_path / "lockstep_walker.py")
    monkeypatch.chdir(tmp_path)
    walker = dict(env_id="Walker2d-v4", total_timesteps=256)
    ref = tiny_run(module, **walker)
    capsys.readouterr()
    assert (
        lockstep.main(
            [
                "--cleanrl-run",
                ref["run_dir"],
                "--iterations",
                "2",
                "--cleanrl-mujoco",
                "2.3.3",
                "--work-dir",
                str(tmp_path / "w"),
                "--",
                *flags(**walker),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"MuJoCo: ours {importlib.metadata.version('mujoco')}, CleanRL's run 2.3.3"
    assert out[-1] == "identical (relative difference <= 0.0001) through iteration 2 of 2"


def test_patched_discrete_script_samples_as_cleanrls_categorical(tmp_path):
    text = open(os.path.join(ROOT, "ppo.py")).read()
    patched = import_copy(lockstep.patched(text, 2), tmp_path / "lockstep_patched.py")
    ours = import_copy(text, tmp_path / "lockstep_ours.py")
    agent, x = patched.Agent(4, 3), torch.randn(64, 4)
    torch.manual_seed(0)
    expected = torch.distributions.Categorical(logits=agent.actor(x)).sample()  # CleanRL's get_action_and_value
    for module, same in ((patched, True), (ours, False)):  # ours draws by inverse CDF: other actions, same seed
        torch.manual_seed(0)
        action, *_ = module.Agent.get_action_and_value(agent, x)
        assert torch.equal(action, expected) == same
