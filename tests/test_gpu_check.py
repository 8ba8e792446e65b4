"""Tests of benchmark/gpu/gpu_check.py (issue 36): its CPU dry run goes through the same runs the device takes (the
correctness child, torchrun, the speed runs, CleanRL's side, the wheel install, the report), small; the judgement and
the sync attribution on made-up numbers, since a CPU never fails them; bad input; and gpu_wheels.sh's first check."""

import glob
import json
import math
import os
import shutil
import subprocess
import sys
import types
import warnings
import zipfile

import pytest
import torch
from conftest import ROOT
from fakes import FAKE_SCRIPT
from processes import install_sh
from tiny import SCRIPTS

from benchmark.gpu import gpu_check
from benchmark.processes import root_on_path, tool

DRY_RUN = ["ppo_continuous_action.py", "ppo_atari_multigpu.py", "ppo_atari_envpool.py"]


def wheel(folder, name, files):
    """A wheel of `files` ({path: text}), as pip installs it: name-1.0, pure Python."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-1.0.dist-info"
    meta = {
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as z:
        for path, text in {**files, **meta}.items():
            z.writestr(path, text)
        z.writestr(f"{dist}/RECORD", "".join(f"{p},,\n" for p in [*files, *meta, f"{dist}/RECORD"]))


def left_behind(marker):
    """Processes whose command line holds `marker`."""
    found = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as f:
                if marker in f.read().decode(errors="replace"):
                    found.append(path)
        except OSError:
            pass
    return found


FAKE_LEANRL = '''"""LeanRL's ppo_continuous_action_torchcompile.py as the check sees it:
wandb.init, then wandb.log of its speed."""
import os, sys
import wandb

shims = os.path.dirname(os.path.abspath(wandb.__file__))
assert os.path.basename(shims) == "shims", wandb.__file__  # the stand-in, not a real wandb
fast = "--compile" in sys.argv and "--cudagraphs" in sys.argv
steps = int(sys.argv[sys.argv.index("--total-timesteps") + 1])
wandb.init(project="ppo_continuous_action", config={"batch_size": 2048, "compile": fast})
wandb.log({"speed": 321.0 if fast else 111.0, "gn": 0.5}, step=steps)
'''


def test_dry_run_checks_trains_resumes_evaluates_times_and_reports(tmp_path):
    """One run through every part of the check on the CPU (one process: each part's processes import torch again):
    ppo_continuous_action.py launched by python (the twin, ours --compile, CleanRL's and LeanRL's speed runs),
    ppo_atari_multigpu.py under torchrun (with --bf16 where the host has bf16 kernels), and ppo_atari_envpool.py left out
    for a package that does not import.
    The wheels: ours' folder holds a stand-in envpool that fails to import; CleanRL's folder a module that the fake
    CleanRL script imports, so it runs only if CleanRL's processes see their own site; LeanRL's a stand-in tensordict
    (what the check probes for) and a module only its processes may see."""
    wheel(tmp_path / "wheels" / "ours", "envpool", {"envpool/__init__.py": "raise ImportError('a stand-in')\n"})
    (tmp_path / "wheels" / "ours" / "lib").mkdir()
    (tmp_path / "wheels" / "ours" / "lib" / "libprobe.so.1").write_text("")
    # CleanRL's processes too load libraries from every site's lib first (the device has no libGL for procgen)
    probe = "import os\nassert os.path.isfile(os.path.join(os.environ['LD_LIBRARY_PATH'].split(':')[0], 'libprobe.so.1'))\n"
    wheel(tmp_path / "wheels" / "cleanrl", "cleanrl_probe", {"cleanrl_probe.py": probe})
    fake = FAKE_SCRIPT.replace("import argparse,", "import cleanrl_probe, argparse,", 1)
    assert fake != FAKE_SCRIPT
    (tmp_path / "cleanrl" / "cleanrl").mkdir(parents=True)
    (tmp_path / "cleanrl" / "cleanrl" / "ppo_continuous_action.py").write_text(fake)
    wheel(tmp_path / "wheels" / "leanrl", "tensordict", {"tensordict/__init__.py": "", "tensordict_probe.py": ""})
    (tmp_path / "leanrl" / "leanrl").mkdir(parents=True)
    (tmp_path / "leanrl" / "leanrl" / "ppo_continuous_action_torchcompile.py").write_text(
        FAKE_LEANRL.replace("import wandb", "import tensordict_probe, wandb", 1)
    )
    out = tmp_path / "out"
    # paths relative to the working directory, as the device's command gives them (.gpu/...)
    cmd = [
        *tool("benchmark.gpu.gpu_check"),
        "--no-cuda",
        "--tiny",
        "--scripts",
        *DRY_RUN,
        "--install",
        "wheels/ours",
        "wheels/cleanrl",
        "wheels/leanrl",
        "--site",
        "site",
        "--cleanrl-dir",
        "cleanrl",
        "--leanrl-dir",
        "leanrl",
        "--out",
        "out",
        "--workers",
        "2",
    ]
    # TORCH_COMPILE_DISABLE: ours' --compile run goes through the check's every step but runs eagerly, as inductor's
    # kernels for it take 40 s of CPU from a cold cache (tests/test_compile.py compiles; this tests the check)
    run = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=300,
        env=root_on_path(dict(os.environ, TMPDIR=str(tmp_path), TORCH_COMPILE_DISABLE="1")),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((out / "gpu_check.json").read_text())
    checks, speed = report["checks"], report["speed"]
    cont, multi = "ppo_continuous_action.py", "ppo_atari_multigpu.py"

    assert report["not_run"]["ppo_atari_envpool.py"].startswith(
        "needs envpool, which does not import here (ImportError: a stand-in)"
    )
    assert set(checks) == {cont, multi}
    assert [checks[s]["launch"] for s in (cont, multi)] == ["python", "torchrun x1"]
    bf16 = report["meta"]["bf16"]
    for script, c in checks.items():
        raw = c["raw"]
        assert c["failed"] == [], (script, c["cells"])
        assert raw["train"]["global_step"] == 128 and raw["resume"]["global_step"] == 192
        assert raw["train"]["ratio"] < 1e-5 and len(raw["eval"]["cpu"]) == len(raw["eval"]["device"]) == 1
        assert ("bf16" in raw) == (bf16 and script == multi)  # ppo_continuous_action.py has no --bf16
    # both sides of the twin ran on the CPU here: the same update, the same losses; the multi-GPU script has none
    assert checks[cont]["raw"]["twin"]["cpu"] == checks[cont]["raw"]["twin"]["device"]
    assert "twin" not in checks[multi]["raw"]
    # 2 iterations of 32 steps, and after each update check_finite's look at the updated network on a few states
    # (ppo_continuous_action.py: and its policy on the batch without grad, the Implementation Matters paper's Figure 2);
    # 2 epochs x 2 minibatches each, the Atari script 1 x 2; no sync on a CPU
    syncs = [checks[s]["raw"]["train"]["syncs"] for s in (cont, multi)]
    calls = [(s["rollout"]["calls"], s["update"]["calls"], s["counted"]) for s in syncs]
    assert calls == [(64 + 2 + 2, 8, False), (64 + 2, 4, False)]

    assert list(speed) == [cont, multi]  # the CleanRL pair first
    assert all(row["ours"]["sps"] > 0 and row["ours"]["global_step"] == 128 for row in speed.values())
    assert list(speed[cont]) == ["ours", "compile", "cleanrl", "leanrl", "leanrl_eager"]  # no --bf16 in this script
    ours = speed[cont]["ours"]
    assert set(ours["losses"]) == set(gpu_check.LOSSES) and set(speed[cont]["compile"]["losses"]) == set(gpu_check.LOSSES)
    assert speed[cont]["compile"]["sps"] > 0  # the flag's run, its first losses
    assert speed[cont]["cleanrl"]["sps"] == 123.0 and speed[cont]["cleanrl"]["window"] is None  # the fake's one SPS
    assert (speed[cont]["leanrl"]["sps"], speed[cont]["leanrl_eager"]["sps"]) == (321.0, 111.0)
    assert speed[cont]["leanrl"]["losses"] is None and speed[cont]["leanrl"]["global_step"] == 128
    assert "cleanrl" not in speed[multi] and ("bf16" in speed[multi]) == bf16
    assert set(speed[multi]["ours"]["seconds"]) >= {"env", "inference", "update"}

    md = (out / "gpu_check.md").read_text()
    assert f"| {cont} | HalfCheetah-v4 | 128 | {ours['sps']:.0f} | — | 123 | {ours['sps'] / 123:.2f} |" in md
    assert f"| {multi} | torchrun x1 | 128 steps | 192 steps |" in md and "FAIL" not in md
    assert "— (its update all-reduces over the ranks" in md
    assert "envpool-1.0" in md and "cleanrl_probe-1.0" in md and "tensordict-1.0" in md  # the installed wheels, named
    assert "## Against CleanRL and LeanRL\n" in md
    assert f"| {cont} | LeanRL --compile --cudagraphs | 321 | 321 | — | 1.00 | not logged |" in md
    assert f"| {cont} | ours --compile | not run" not in md
    # the log: the correctness launches (ppo_continuous_action.py 1, torchrun 2 and --bf16's), the speed runs (ours 2
    # and --bf16's, CleanRL's 1, LeanRL's 2); a host without bf16 kernels (an AVX2-only CPU) runs no --bf16 and says so
    log = (out / "gpu_check.log").read_text()
    assert log.count("$ ") == 9 + 2 * bf16
    assert (
        "ppo_continuous_action_torchcompile.py --env-id HalfCheetah-v4 --seed 1 --total-timesteps 128 --compile "
        "--cudagraphs  # leanrl's" in log
    )
    assert ("--bf16: a third run, its ratio and its first losses against fp32's." in md) == bf16
    assert ("not run: this device has no bfloat16 kernels" in md) != bf16
    assert not left_behind(str(tmp_path)) and not glob.glob(str(tmp_path / "gpu_check-*"))


def test_a_script_without_compile_gets_a_row_that_says_so():
    assert gpu_check.Check.has_flag(None, "ppo_continuous_action.py", "compile")
    assert not gpu_check.Check.has_flag(None, "a2c_paac.py", "compile")
    assert gpu_check.peer_lines("a2c_paac.py", {"compile": {"not_run": "a2c_paac.py has no --compile"}}) == [
        "| a2c_paac.py | ours --compile | not run: a2c_paac.py has no --compile | — | — | — | — | 0 |"
    ]


@pytest.mark.parametrize("flag, parts", [("--no-correctness", ["speeds", "extras"]), ("--no-speed", ["check"])])
def test_no_correctness_and_no_speed_leave_out_their_part(tmp_path, monkeypatch, flag, parts):
    """The dry run above runs both parts; each flag leaves its part out (the runs recorded, not made)."""
    ran = []
    monkeypatch.setattr(gpu_check.Check, "missing", lambda self, needs, env, prefix="": list(needs))  # all import
    monkeypatch.setattr(gpu_check.Check, "check", lambda self, script: ran.append("check"))
    monkeypatch.setattr(
        gpu_check.Check, "speeds", lambda self, script, extras=False: ran.append("extras" if extras else "speeds")
    )
    args = gpu_check.parse(["--no-cuda", "--scripts", "ppo.py", "--out", str(tmp_path / "out"), flag])
    check = gpu_check.Check(args, [])
    check.run()
    shutil.rmtree(check.work)
    assert ran == parts


def good_run(**kw):
    """What a correctness run of a PPO script returns when every check passes (batch 64)."""
    losses = {"policy_loss": 0.0, "value_loss": 2.0, "entropy": 1.0}
    r = {
        "train": {"global_step": 128, "ratio": 0.0, "losses": losses},
        "resume": {"global_step": 192, "ratio": 0.0},
        "eval": {"cpu": [3.0], "device": [4.0]},
        "twin": {"cpu": losses, "device": dict(losses)},
        "bf16": {"ratio": 0.0, "losses": dict(losses)},
    }
    for step, values in kw.items():
        r[step] = {**r[step], **values}
    return r


@pytest.mark.parametrize(
    "change, failed",
    [
        ({}, []),
        ({"train": {"ratio": 2e-5}}, ["ratio"]),
        ({"resume": {"global_step": 128}}, ["resume"]),
        ({"eval": {"device": [math.nan]}}, ["eval"]),
        ({"twin": {"device": {"policy_loss": 0.0, "value_loss": 2.0 * (1 + 2e-4), "entropy": 1.0}}}, ["twin"]),
        ({"twin": {"device": {"policy_loss": 2e-5, "value_loss": 2.0, "entropy": 1.0}}}, ["twin"]),
        ({"bf16": {"losses": {"policy_loss": 0.0, "value_loss": 2.1, "entropy": 1.0}}}, ["bf16"]),
        ({"bf16": {"ratio": 1e-3}}, ["bf16"]),
        ({"resume": {"error": "ConfigError: boom"}}, ["resume"]),
    ],
)
def test_judgement_fails_each_check_past_its_tolerance(change, failed):
    cells, got = gpu_check.judge(good_run(**change), 64)
    assert got == failed and all(("**FAIL**" in cells[k]) == (k in failed) for k in cells)


def syncs(n):
    for _ in range(n):
        warnings.warn("called a synchronizing CUDA operation")


class SyncingAgent:
    """Warns as torch.cuda.set_sync_debug_mode("warn") does, `n` times per call, and once about something else."""

    def get_action_and_value(self, n):
        warnings.warn("not a sync")
        syncs(n)


def test_twin_runs_both_sides_in_fp32_convolutions_and_restores_tf32():
    """cuDNN's TF32 (on by default) is off for both sides of the twin, and as it was afterwards."""
    import dataclasses

    @dataclasses.dataclass
    class Args:
        num_minibatches: int = 4
        batch_size: int = 8
        minibatch_size: int = 2

    seen = []

    def update(agent, optimizer, b, args, *rest):
        seen.append((torch.backends.cudnn.allow_tf32, args.num_minibatches, args.minibatch_size))
        return {k: torch.tensor(1.0) for k in gpu_check.LOSSES}

    agent = torch.nn.Conv2d(1, 1, 1)
    state = {"first": (agent, torch.optim.Adam, {"lr": 1e-3}, {"obs": torch.zeros(8, 1, 2, 2)}, Args(), ()), "update": update}
    before = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = True
        out = gpu_check.step_twin(None, {"device": "cpu"}, state)
        assert torch.backends.cudnn.allow_tf32 is True
    finally:
        torch.backends.cudnn.allow_tf32 = before
    assert seen == [(False, 1, 8)] * 2 and out["cpu"] == out["device"] == dict.fromkeys(gpu_check.LOSSES, 1.0)


def test_syncs_go_to_the_phase_of_the_call_before_them():
    """Three rollout steps (gradients off) of 2 syncs, the last followed by 5 more (GAE), then three minibatches of 3
    and 4 more after the last (statistics, logging): medians 2 and 3, maxima 7 and 7, 24 in all."""
    mod = types.SimpleNamespace(Agent=SyncingAgent, update=None)
    with gpu_check.Probe(mod, syncs=False, keep=False) as probe:
        agent = SyncingAgent()
        with torch.no_grad():
            for _ in range(3):
                agent.get_action_and_value(2)
            syncs(5)
        for _ in range(3):
            agent.get_action_and_value(3)
        syncs(4)
    assert mod.Agent.get_action_and_value is SyncingAgent.get_action_and_value  # put back
    s = probe.per_call(iterations=2)
    assert s["rollout"] == {"calls": 3, "median": 2, "max": 7} and s["update"] == {"calls": 3, "median": 3, "max": 7}
    assert s["per_iteration"] == 12


def test_the_sync_median_skips_the_gaps_that_close_a_phase():
    """ppo_atari.py's check on the H100: 2 iterations of 2 rollout steps and 2 minibatches, no sync inside a minibatch
    and 59 at the end of each update (statistics, logging, checkpoint). Per minibatch: median 0, max 59, where all
    gaps' median is 29.5. One learner batch an update() (PAAC with its rollout; IMPALA, whose actors are other
    processes, without): every gap holds update()'s return, so the median is over them all."""
    agent = SyncingAgent()

    def update(agent, optimizer, b, args, minibatches, n):
        for _ in range(minibatches):
            agent.get_action_and_value(n)
        syncs(1)  # the statistics at update()'s end

    def train(mod, rollout, minibatches, n, after):
        with gpu_check.Probe(mod, syncs=False, keep=False) as probe:
            for syncs_after in after:  # an iteration each: logging, the checkpoint
                with torch.no_grad():
                    for _ in range(rollout):
                        agent.get_action_and_value(2)
                mod.update(agent, None, {}, None, minibatches, n)
                syncs(syncs_after)
        return probe.per_call(iterations=len(after))

    mod = types.SimpleNamespace(Agent=SyncingAgent, update=update)
    s = train(mod, 2, 2, 0, [58, 58])
    assert s["update"] == {"calls": 4, "median": 0, "max": 59} and s["rollout"] == {"calls": 4, "median": 2, "max": 2}
    assert mod.update is update
    assert train(mod, 1, 1, 20, [6, 6])["update"] == {"calls": 2, "median": 27, "max": 27}  # PAAC
    # IMPALA: gaps of 44 (a batch, its statistics, 3 more) and 41 (the last); a batch follows only the first
    s = train(mod, 0, 1, 40, [3, 0])
    assert s["update"] == {"calls": 2, "median": 42.5, "max": 44} and s["rollout"]["calls"] == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--scripts", "nope.py"], "--scripts nope.py is not one of ppo.py,"),
        (["--scripts", "ppo.py", "ppo.py"], "a script is given twice in --scripts"),
        ([], "--out is required"),
        (["--install-only", "--out", "o"], "--install-only without --install"),
        (["--workers", "0", "--out", "o"], "--workers must be 1 or more, got 0"),
        (["--speed-scale", "0", "--out", "o"], "--speed-scale must be > 0"),
        (["--install", "empty", "--out", "o"], "--install empty: no *.whl there"),
        (["--cleanrl-dir", "empty", "--out", "o"], "--cleanrl-dir empty holds none of cleanrl/"),
        (["--scripts", "ppo.py", "--out", "o"], "no CUDA device is visible to"),
    ],
)
def test_bad_input_is_one_line_and_nothing_runs(tmp_path, monkeypatch, capsys, args, message):
    (tmp_path / "empty").mkdir()
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)  # as on a machine without a GPU
    assert gpu_check.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpu_check.py: error: {message}") and err.count("\n") == 1
    assert not os.path.exists("o")


def test_every_script_has_settings_for_both_parts():
    scripts = set(SCRIPTS)
    assert scripts <= set(gpu_check.TINY) == set(gpu_check.SPEED_STEPS)


def test_gpu_wheels_needs_a_cleanrl_checkout(tmp_path):
    run = subprocess.run(
        ["bash", os.path.join(ROOT, "benchmark", "gpu", "gpu_wheels.sh"), str(tmp_path)], capture_output=True, text=True
    )
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert run.stderr.startswith(f"gpu_wheels.sh: error: give a CleanRL checkout (no cleanrl/ppo.py under '{tmp_path}'")


def test_gpu_wheels_reads_a_relative_checkout_and_python_from_where_it_is_run(tmp_path):
    """It changed to the repository's folder first, and then looked for both there."""
    repo, work = tmp_path / "repo", tmp_path / "work"
    (repo / "benchmark" / "gpu").mkdir(parents=True)
    (work / "cl" / "cleanrl").mkdir(parents=True)
    (repo / "benchmark" / "gpu" / "gpu_wheels.sh").write_text(
        open(os.path.join(ROOT, "benchmark", "gpu", "gpu_wheels.sh")).read()
    )
    os.symlink(os.path.join(ROOT, "requirements"), repo / "requirements")  # the pins it reads
    (work / "cl" / "cleanrl" / "ppo.py").write_text("")
    (work / "python").write_text(f'#!/bin/bash\necho "$PWD $*" > {tmp_path / "called"}\nexit 1\n')  # pip fails at once
    (work / "python").chmod(0o755)
    run = subprocess.run(
        ["bash", str(repo / "benchmark" / "gpu" / "gpu_wheels.sh"), "cl"],
        cwd=work,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": "./python"},
    )
    assert run.returncode == 1 and "give a CleanRL checkout" not in run.stderr
    assert (tmp_path / "called").read_text().startswith(f"{repo} -m pip download ")


@pytest.mark.parametrize(
    "target, python, example", [("core", "no-such-python3", "python3.12"), ("mujoco-ref", "/bin/false", "python3.11")]
)
def test_install_with_a_python_that_does_not_run_says_so_and_makes_no_venv(tmp_path, target, python, example):
    """scripts/install.sh (tested here beside gpu_wheels.sh, the other script that sets a machine up) took a PYTHON that
    does not start for one of the wrong version ("... is bash: ...: No such file or directory; the lock is for ...")."""
    run = install_sh(tmp_path, target, python=python, empty=[target])
    found = "" if python.startswith("/") else " (not found)"
    assert run.returncode == 2 and run.stderr == (
        f"install.sh: error: PYTHON {python} does not run{found}; give one that "
        f"does: PYTHON={example} bash scripts/install.sh {target}\n"
    )
    assert sorted(os.listdir(tmp_path)) == ["requirements", "scripts"]


def test_window_steps_per_second_leaves_out_the_first_two_iterations():
    """charts/SPS is steps since the start / seconds since the start: 100 steps an iteration, the first two taking
    10 s each (compilation), then 1 s each: 200 steps in 2 s after them."""
    times = [10, 20, 21, 22]
    series = [(100 * (i + 1), 100 * (i + 1) / t) for i, t in enumerate(times)]
    assert gpu_check.window_sps(series) == pytest.approx(100.0)
    assert gpu_check.window_sps(series[:3]) == pytest.approx(100.0) and gpu_check.window_sps(series[:2]) is None


def test_old_envpool_api_gives_envpool_1_2_the_gym_api_of_0_8():
    """What CleanRL's and LeanRL's ppo_atari_envpool*.py read: reset() -> obs, step() -> 4 values with done =
    terminated | truncated and info's "terminated", "lives", "reward"; gym spaces (they assert gym.spaces.Discrete)."""
    envpool = pytest.importorskip("envpool")
    gym = pytest.importorskip("gym")
    import numpy as np

    sys.path.insert(0, os.path.join(ROOT, "benchmark", "peers", "shims"))
    try:
        import old_envpool_api
    finally:
        sys.path.pop(0)
    make = envpool.make
    try:
        old_envpool_api.patch()
        envs = envpool.make("Breakout-v5", env_type="gym", num_envs=2, episodic_life=True, reward_clip=True, seed=1)
        assert isinstance(envs.action_space, gym.spaces.Discrete) and envs.action_space.n == 4
        assert isinstance(envs.observation_space, gym.spaces.Box) and envs.observation_space.shape == (4, 84, 84)
        obs = envs.reset()
        assert isinstance(obs, np.ndarray) and obs.shape == (2, 4, 84, 84)
        for _ in range(3):
            obs, reward, done, info = envs.step(np.zeros(2, dtype=np.int64))
        assert obs.shape == (2, 4, 84, 84) and reward.shape == done.shape == (2,) and done.dtype == bool
        assert {"terminated", "lives", "reward"} <= set(info)
        assert type(envpool.make("Breakout-v5", env_type="gymnasium", num_envs=1)).__name__ != "OldGymApi"
        envs.close()
    finally:
        envpool.make = make


def test_wandb_stand_in_prints_what_is_logged(capfd):
    sys.path.insert(0, os.path.join(ROOT, "benchmark", "peers", "shims"))
    try:
        import wandb
    finally:
        sys.path.pop(0)
    assert os.path.basename(os.path.dirname(wandb.__file__)) == "shims"
    wandb.init(project="p", name="n", config={"batch_size": 1024, "lr": torch.tensor(0.5)}, save_code=True)
    wandb.log({"speed": torch.tensor(12.5), "x": "text"}, step=10240)
    lines = [json.loads(line[len(gpu_check.WANDB) :]) for line in capfd.readouterr().out.splitlines()]
    assert lines == [{"config": {"batch_size": 1024, "lr": 0.5}}, {"step": 10240, "log": {"speed": 12.5, "x": "text"}}]
    sys.modules.pop("wandb")
