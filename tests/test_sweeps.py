"""Tests of the sweeps (benchmark/sweeps/*.sh and common.sh): settings checked before any run, the budget and seeds from
the environment, the results beside the runs (never in the repository), and a paired sweep's comparison."""

import glob
import json
import os
import shutil
import subprocess

import pytest
from conftest import ROOT
from fakes import calls, sweep_copy, tree

from benchmark import runs


@pytest.mark.parametrize(
    "script, name, value, want",
    [
        ("trpo_vs_sb3.sh", "WORKERS", "0", "a whole number from 1 (e.g. WORKERS=2)"),  # ran nothing, then reported older runs
        ("trpo_vs_sb3.sh", "SEEDS", "1 x", 'whole numbers from 0, each once (e.g. SEEDS="1 2")'),
        ("trpo_vs_sb3.sh", "SEEDS", "2 2", 'whole numbers from 0, each once (e.g. SEEDS="1 2")'),
        ("trpo_vs_sb3.sh", "STEPS", "1e6", "a whole number from 1 (e.g. STEPS=2)"),
        ("implementation_matters.sh", "STEPS", "-5", "a whole number from 1 (e.g. STEPS=2)"),
        ("breakout_10m.sh", "EVAL_EPISODES", "0", "a whole number from 1 (e.g. EVAL_EPISODES=2)"),
    ],
)
def test_a_sweep_checks_its_settings_before_any_run(tmp_path, script, name, value, want):
    bench, env = sweep_copy(tmp_path)
    before, sweep = tree(bench), bench / ("studies" if script == "implementation_matters.sh" else "sweeps") / script
    res = subprocess.run(["bash", str(sweep)], capture_output=True, text=True, env={**env, name: value})
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == f"{script}: error: {name}='{value}' must be {want}\n"
    assert sorted(os.listdir(tmp_path)) == ["benchmark"] and tree(bench) == before


def test_a_family_sweep_takes_its_budget_from_the_environment_and_reports_beside_its_runs(tmp_path, fake):
    """Issue 71: STEPS, SEEDS and ENVS in the environment are the sweep's (a mode's own no longer overwrites them), and
    the report goes to results/ of the current directory, never into the repository's benchmark/results/."""
    bench, env = sweep_copy(tmp_path)
    for script in ("ppo.py", "ppo_shared.py"):
        shutil.copy(fake, tmp_path / script)
    settings = {"STEPS": "100", "SEEDS": "3", "ENVS": "A-v0"}
    res = subprocess.run(
        ["bash", str(bench / "sweeps" / "classic_control.sh")], capture_output=True, text=True, env={**env, **settings}
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert sorted(c.split(" ")[0] + " " + c.split(" ")[1] for c in calls()) == ["A-v0 3", "A-v0 3"]  # each script once
    assert {json.load(open(p))["args"][1] for p in glob.glob("runs/summaries/*.json")} == {"100"}
    assert (tmp_path / "results" / "classic_control_full" / "report.md").exists()
    assert sorted(os.listdir(tmp_path)) == ["benchmark", "calls.txt", "fake.py", "ppo.py", "ppo_shared.py", "results", "runs"]
    # ppo.py edited since: run.py refuses its finished run, naming the sweep's way to say what to do; RUN_FLAGS says it
    with open(tmp_path / "ppo.py", "a") as f:
        f.write("# edited\n")
    again = subprocess.run(
        ["bash", str(bench / "sweeps" / "classic_control.sh")], capture_output=True, text=True, env={**env, **settings}
    )
    assert again.returncode == 1 and "run.py: error: ppo.py changed since 1 of these runs finished" in again.stderr
    assert "(a sweep script takes them as RUN_FLAGS=--rerun-changed)" in again.stderr and len(calls()) == 2
    reused = subprocess.run(
        ["bash", str(bench / "sweeps" / "classic_control.sh")],
        capture_output=True,
        text=True,
        env={**env, **settings, "RUN_FLAGS": "--reuse-changed"},
    )
    assert reused.returncode == 0, reused.stderr[-2000:]
    assert len(calls()) == 2  # kept, not run again


def test_the_impala_corrections_sweep_runs_every_cell_then_compares_and_reports(tmp_path, fake):
    """Issue 74's study end to end on a tiny budget, with the fake script as impala_vtrace.py: the eight cells (four
    corrections, without and with replay) each run once per seed with its flags, V-trace is compared with each other
    correction at each replay setting, and the report has every cell."""
    bench, env = sweep_copy(tmp_path)
    shutil.copy(fake, tmp_path / "impala_vtrace.py")
    settings = {"STEPS": "100", "SEEDS": "1", "SAVE_EVERY": "1", "TAGS": "charts/episodic_return"}
    res = subprocess.run(
        ["bash", str(bench / "sweeps" / "impala_corrections.sh")], capture_output=True, text=True, env={**env, **settings}
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert len(calls()) == 8
    summaries = [json.load(open(p)) for p in glob.glob("runs/summaries/*.json")]
    cells = [tuple(s["args"][s["args"].index(flag) + 1] for flag in ("--correction", "--replay-fraction")) for s in summaries]
    assert sorted(cells) == sorted((c, r) for c in ("vtrace", "one-step", "epsilon", "none") for r in ("0", "0.5"))
    out = tmp_path / "results" / "impala_corrections_pong_100"
    compared = sorted(d for d in os.listdir(out) if d not in ("report", "wallclock"))
    assert compared == sorted(f"vtrace_vs_{c}_replay_{r}" for c in ("one-step", "epsilon", "none") for r in ("0", "0.5"))
    assert all((out / d / "report.md").exists() for d in compared) and (out / "report" / "report.md").exists()
    # wallclock.py's table as Table 2 sets it: a row per cell, found by the experiment name run.py gave its runs
    names = {(c, r): runs.exp_name_for("impala_vtrace.py", s["args"]) for (c, r), s in zip(cells, summaries)}
    md = (out / "wallclock" / "wallclock.md").read_text()
    rows = [line.split(" | ")[:3] for line in md.splitlines() if ", replay " in line and line.startswith("| ")]
    assert rows == [
        [f"| {c}, replay {r}", names[c, r], "1"] for r in ("0", "0.5") for c in ("vtrace", "one-step", "epsilon", "none")
    ]
    assert not os.path.exists(os.path.join(ROOT, "benchmark", "results", "impala_corrections_pong_100"))


def test_the_paac_actors_sweep_runs_every_n_e_then_compares_each_with_32_and_reports(tmp_path, fake):
    """The PAAC paper's n_e grid end to end on a tiny budget, with the fake script as a2c_paac.py: each n_e runs once
    per seed at the released settings with the paper's rate rule left to the script (no --learning-rate), each other n_e
    is compared with n_e = 32, and the report has every n_e; a bad NES stops it before any run."""
    bench, env = sweep_copy(tmp_path)
    shutil.copy(fake, tmp_path / "a2c_paac.py")
    sweep = ["bash", str(bench / "sweeps" / "paac_actors.sh")]
    settings = {"STEPS": "100", "SEEDS": "1", "SAVE_EVERY": "1", "TAGS": "charts/episodic_return", "NES": "16 32 64"}
    res = subprocess.run(sweep, capture_output=True, text=True, env={**env, **settings, "NES": "16 x"})
    assert (res.returncode, res.stderr) == (
        2,
        "paac_actors.sh: error: NES='16 x' must be whole numbers from 1 (e.g. NES=\"16 32\")\n",
    )
    assert not os.path.exists("runs")
    res = subprocess.run(sweep, capture_output=True, text=True, env={**env, **settings})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    args = [json.load(open(p))["args"] for p in glob.glob("runs/summaries/*.json")]
    assert sorted(a[a.index("--num-envs") + 1] for a in args) == ["16", "32", "64"]
    assert all("--loss-scale" in a and "--init" in a and "--learning-rate" not in a for a in args)
    # a checkpoint every SAVE_EVERY updates of n_e = 32's steps: twice the updates at 16, at least 1 at 64
    every = {a[a.index("--num-envs") + 1]: a[a.index("--save-every") + 1] for a in args}
    assert every == {"16": "2", "32": "1", "64": "1"}
    out = tmp_path / "results" / "paac_actors_pong_100"
    assert sorted(os.listdir(out)) == ["ne32_vs_ne16", "ne32_vs_ne64", "report", "wallclock"]
    assert all((out / d / "report.md").exists() for d in os.listdir(out) if d != "wallclock")
    # wallclock.py found each n_e's runs by the experiment name run.py gave them: a row each, its one seed
    md = (out / "wallclock" / "wallclock.md").read_text()
    names = {a[a.index("--num-envs") + 1]: runs.exp_name_for("a2c_paac.py", a) for a in args}
    assert [line.split(" | ")[:3] for line in md.splitlines() if line.startswith("| n_e ")] == [
        [f"| n_e {ne}", names[ne], "1"] for ne in ("16", "32", "64")
    ]
    assert "| step at -10 (median) | hours at -10 (median) | step at 0 (median) |" in md


def test_a_paired_sweep_compares_only_finished_runs_and_names_the_others(tmp_path):
    extra = ["--total-timesteps", "64", "--max-kl", "0.1"]
    for seed, ok in ((1, True), (2, False)):  # seed 3: refused, so never run (no summary)
        os.makedirs("runs/summaries", exist_ok=True)
        with open(runs.summary_path("runs", "ours.py", "Hopper-v4", seed, extra), "w") as f:
            json.dump({"ok": ok, "tb_dir": f"Hopper-v4__ours__{seed}__1" if ok else None}, f)
    _, env = sweep_copy(tmp_path)
    res = [
        subprocess.run(
            [
                "bash",
                "-c",
                "source benchmark/sweeps/common.sh; ENV_ID=Hopper-v4 STEPS=64 "
                f'SEEDS="{seeds}"; run_dirs ours.py "--max-kl 0.1"',
                "trpo_vs_sb3.sh",
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        for seeds in ("1 2 3", "1")
    ]
    assert (res[0].returncode, res[0].stdout) == (1, "") and res[0].stderr == (
        "trpo_vs_sb3.sh: error: no comparison of ours.py's runs: seed 2 3 on Hopper-v4 did not finish (run.py said why, "
        "above); mend that and run the sweep again\n"
    )
    assert (res[1].returncode, res[1].stdout, res[1].stderr) == (0, "runs/Hopper-v4__ours__1__1\n", "")
