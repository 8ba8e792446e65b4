"""benchmark/studies/implementation_matters.py: the Implementation Matters study's cells are the paper's released
settings, the study goes on from the runs it stored, and the report reads them."""

import glob
import json
import math
import os
import re
import shutil
import subprocess
import threading

import numpy as np
import pytest
import tyro
from conftest import ROOT
from fakes import FAKE_SCRIPT, calls, sweep_copy

import ppo_continuous_action as pca
import trpo_continuous_action as trpo
from benchmark.processes import root_on_path, tool
from benchmark.studies import implementation_matters as im

STUDY = tool("benchmark.studies.implementation_matters")  # run with root_on_path(): from the test's folder

# the released configs (MadryLab/implementation-matters configs/*.py over src/MuJoCo.json), written out by hand: what
# each algorithm sets in both games, then each game's own; TRPO+'s max_kl_final is not: the released Trainer adds its
# increments to an attribute its trpo_step does not read
PPO_M = dict(
    clip_vloss=False, max_grad_norm=math.inf, anneal_lr=False, reward_scaling="none", ortho_init=False, clip_obs=math.inf
)
NO_CLIP = dict(clip_coef=1e32, reward_scaling="rewards", grad_clip_scope="actor", clip_vloss=False)
TRPO = dict(max_kl_final=None, clip_vloss=False, anneal_lr=False, max_grad_norm=math.inf)
TRPO_M = dict(TRPO, reward_scaling="none", ortho_init=False, clip_obs=math.inf)
TRPO_PLUS = dict(TRPO, reward_scaling="returns", ortho_init=True, clip_obs=10.0, clip_reward=10.0)
CONFIGS = {
    ("PPO", "Walker2d-v4"): dict(learning_rate=4e-4, value_lr=3e-4, clip_vloss=True, max_grad_norm=math.inf),
    ("PPO", "Hopper-v4"): dict(learning_rate=3e-4, value_lr=2.5e-4, clip_vloss=False, max_grad_norm=math.inf),
    ("PPO-M", "Walker2d-v4"): dict(PPO_M, learning_rate=1e-4, value_lr=2e-4),
    ("PPO-M", "Hopper-v4"): dict(PPO_M, learning_rate=1.7e-4, value_lr=4e-4),
    ("PPO-NoClip", "Walker2d-v4"): dict(
        NO_CLIP,
        learning_rate=7.25e-5,
        value_lr=6e-4,
        ent_coef=-0.01,
        gae_lambda=0.85,
        clip_reward=30.0,
        clip_obs=math.inf,
        max_grad_norm=0.1,
    ),
    ("PPO-NoClip", "Hopper-v4"): dict(
        NO_CLIP, learning_rate=6e-5, value_lr=4e-4, ent_coef=-0.005, gae_lambda=0.925, clip_reward=2.5, max_grad_norm=4.0
    ),
    ("TRPO", "Walker2d-v4"): dict(TRPO_M, max_kl=0.04, value_lr=3e-4),
    ("TRPO", "Hopper-v4"): dict(TRPO_M, max_kl=0.13, value_lr=2e-4),
    ("TRPO+", "Walker2d-v4"): dict(TRPO_PLUS, max_kl=0.07, value_lr=1e-4),
    ("TRPO+", "Hopper-v4"): dict(TRPO_PLUS, max_kl=0.04, value_lr=2e-4),
}
TRPO_COMMON = dict(fisher_frac=0.1, cg_steps=10, cg_damping=0.1, backtrack_steps=10)
COMMON = dict(
    num_envs=1,
    num_steps=2048,
    num_minibatches=32,
    update_epochs=10,
    total_timesteps=1000000,
    gamma=0.99,
    norm_obs=True,
    ent_coef=0.0,
    clip_coef=0.2,
    gae_lambda=0.95,
    anneal_lr=True,
    ortho_init=True,
    reward_scaling="returns",
    clip_obs=10.0,
    clip_reward=10.0,
)


def parsed(env, flags, script="ppo_continuous_action.py"):
    """The Args the script parses from a planned line's flags, as the sweep runs it."""
    mod = trpo if script == "trpo_continuous_action.py" else pca
    return mod, tyro.cli(mod.Args, args=["--env-id", env] + im.extra_args(flags))


def plan_lines(store, mode="full", *extra):
    res = subprocess.run(
        [*STUDY, "plan", "--mode", mode, "--store", str(store), *extra], capture_output=True, text=True, env=root_on_path()
    )
    assert res.returncode == 0, res.stderr
    return [line.split("\t") for line in res.stdout.splitlines()]


def test_each_cell_runs_the_papers_released_settings(tmp_path):
    lines = plan_lines(tmp_path)
    table = {(cell, env): (script, flags) for cell, env, seeds, script, flags in lines if not cell.startswith("fig1")}
    assert set(table) == set(CONFIGS)
    for (algo, env), expected in CONFIGS.items():
        script, flags = table[algo, env]
        assert script == ("trpo_continuous_action.py" if algo.startswith("TRPO") else "ppo_continuous_action.py")
        mod, args = parsed(env, flags.replace(im.PROTOCOL, ""), script)
        mod.check_args(args)
        expected = {**COMMON, **(TRPO_COMMON if mod is trpo else {}), **expected}
        assert {k: getattr(args, k) for k in expected} == expected, (algo, env)
    # the table first, seeds 1-2 of every cell, then 3-4; Figure 1 the same way; the table's seeds 5-10
    assert [line[2] for line in lines] == (["1 2"] * 10 + ["3 4"] * 10 + ["1 2"] * 15 + ["3 4"] * 15 + ["5 6 7 8 9 10"] * 10)
    assert plan_lines(tmp_path, "short") == lines[:20]
    # --cells keeps the named cells' lines, in the same order; fig1 names Figure 1's combinations
    kept = [line for line in lines if line[0].split()[0] in ("TRPO+", "fig1")]
    assert plan_lines(tmp_path, "full", "--cells", "TRPO+", "fig1") == kept and len(kept) == 4 + 2 + 30


def test_plan_refuses_an_unknown_cell(tmp_path):
    res = subprocess.run(
        [*STUDY, "plan", "--store", str(tmp_path), "--cells", "PPO", "TRPO-"],
        capture_output=True,
        text=True,
        env=root_on_path(),
    )
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "implementation_matters.py: error: --cells: unknown cell 'TRPO-'; "
        "choose from PPO, PPO-M, TRPO, TRPO+, PPO-NoClip, fig1"
    ]


def test_figure1_is_every_combination_of_four_switches_around_ppo():
    seen = set()
    for off in [set()] + [set(c.split(": ")[1].split()) for c, *_ in im.cells("full") if c.startswith("fig1")]:
        _, args = parsed("Walker2d-v4", im.figure1_flags(off))
        state = (args.clip_vloss, args.reward_scaling == "returns", args.ortho_init, args.anneal_lr)
        assert state == tuple(s not in off for s in im.SWITCHES)
        assert (args.learning_rate, args.value_lr, args.max_grad_norm) == (4e-4, 3e-4, math.inf)
        seen.add(state)
    assert len(seen) == 16
    # all four on is the PPO cell itself: its runs count for both
    assert im.figure1_flags(set()) == im.SETTINGS["PPO", "Walker2d-v4"]


def train_short():
    return pca.train(
        pca.Args(env_id="Hopper-v4", cuda=False, num_steps=64, num_minibatches=2, update_epochs=2, total_timesteps=64 * 10)
    )


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """A short real training run on this python's MuJoCo, made once for the tests that store one (a run: ~1 s of CPU):
    train()'s output, its run directory absolute."""
    folder = tmp_path_factory.mktemp("short_run")
    with pytest.MonkeyPatch.context() as m:
        m.chdir(folder)
        out = train_short()
    return dict(out, run_dir=str(folder / out["run_dir"]))


def fake_run(tmp_path, monkeypatch, run=None, cell="PPO", env="Walker2d-v4", seed=2):
    """A short real training run logged where the sweep's run of (cell, env, seed) would be, with run.py's summary:
    `run` (short_run) copied there, or, without it, one trained there."""
    monkeypatch.chdir(tmp_path)
    if run is None:
        out = train_short()
    else:
        out = dict(run, run_dir=os.path.join("runs", os.path.basename(run["run_dir"])))
        shutil.copytree(run["run_dir"], out["run_dir"])
    extra = im.extra_args(im.SETTINGS[cell, env])
    os.makedirs("runs/summaries", exist_ok=True)
    with open(f"runs/summaries/ppo_continuous_action__{env}__{seed}__{im.args_hash(extra)}.json", "w") as f:
        json.dump(
            {
                "ok": True,
                "script": "ppo_continuous_action.py",
                "args": extra,
                "env_id": env,
                "seed": seed,
                "tb_dir": os.path.relpath(out["run_dir"], "runs"),
                "final_return": float(np.mean(out["episodic_return"][-100:])),
                "episodes": len(out["episodic_return"]),
                "global_step": out["global_step"],
                "git_commit": "0123456789",
                "wall_time_s": 1.5,
            },
            f,
        )
    return out


def test_store_keeps_finished_runs_once_and_plan_skips_them(tmp_path, monkeypatch, short_run):
    out = fake_run(tmp_path, monkeypatch, short_run)
    store = tmp_path / "store"
    assert im.store_runs("runs", str(store)) == 1 and im.store_runs("runs", str(store)) == 0  # once
    (row,) = im.read_csv(store / "runs.csv")
    assert (row["cell"], row["env_id"], row["seed"]) == ("PPO", "Walker2d-v4", "2")
    assert float(row["final_return"]) == pytest.approx(np.mean(out["episodic_return"][-100:]), abs=0.01)
    curves = im.read_csv(store / "iterations.csv")
    assert [int(r["iteration"]) for r in curves] == [4, 8]
    for r in curves:  # the logged Figure 2 numbers of those iterations
        logged = out["losses"][int(r["iteration"]) - 1]
        for key in ("max_ratio", "mean_kl", "max_kl", "explained_variance"):
            assert float(r[key]) == pytest.approx(logged[key], rel=1e-4)
    lines = plan_lines(store)
    assert lines[0][:3] == ["PPO", "Walker2d-v4", "1"] and lines[1][:3] == ["PPO-M", "Walker2d-v4", "1 2"]  # seed 2 stored
    # the released run.py's reading: one env, so episode k ends at the sum of the first k lengths; iteration i (64
    # steps) holds the episodes that end in (64 (i - 1), 64 i]; the mean of the last 5 iterations' means
    ends = np.cumsum(out["episodic_length"])
    means = [np.mean([r for r, e in zip(out["episodic_return"], ends) if 64 * (i - 1) < e <= 64 * i]) for i in range(6, 11)]
    assert float(row["final_5"]) == pytest.approx(np.mean(means), abs=0.01)
    # a run stored before the reading was: the next store reads it off the run, the rest of the file as it was
    im.write_rows(str(store / "runs.csv"), [{k: v for k, v in row.items() if k != "final_5"}])
    assert im.store_runs("runs", str(store)) == 0
    assert im.read_csv(store / "runs.csv") == [row]
    # curves stored before the explained variance was: read off the run into the rows it lacks, the others as they were
    kept = [dict(curves[0], explained_variance="0.5"), dict(curves[0], seed="7", explained_variance="0.5")]
    im.write_rows(
        str(store / "iterations.csv"),
        kept[:1] + [{k: v for k, v in r.items() if k != "explained_variance"} for r in curves[1:]] + kept[1:],
    )  # another run's row last
    assert im.store_runs("runs", str(store)) == 0
    assert im.read_csv(store / "iterations.csv") == kept[:1] + curves[1:] + kept[1:]  # a value stored is kept


def test_two_stores_at_once_store_a_run_once_and_a_stopped_store_leaves_no_curve_twice(tmp_path, monkeypatch, short_run):
    fake_run(tmp_path, monkeypatch, short_run)
    store, read_run, both = str(tmp_path / "store"), im.read_run, threading.Barrier(2, timeout=3)

    def read_run_once_both_are_in(*args):  # each store reads its runs once the other got as far (locked: it cannot)
        try:
            both.wait()
        except threading.BrokenBarrierError:
            pass
        return read_run(*args)

    monkeypatch.setattr(im, "read_run", read_run_once_both_are_in)
    added = []
    stores = [threading.Thread(target=lambda: added.append(im.store_runs("runs", store))) for _ in range(2)]
    for t in stores:
        t.start()
    for t in stores:
        t.join()
    assert sorted(added) == [0, 1] and len(im.read_csv(os.path.join(store, "runs.csv"))) == 1
    # stopped after writing iterations.csv, before runs.csv: the run is stored again, its curve once
    curves = im.read_csv(os.path.join(store, "iterations.csv"))
    im.write_rows(os.path.join(store, "runs.csv"), [])
    assert im.store_runs("runs", store) == 1 and im.read_csv(os.path.join(store, "iterations.csv")) == curves


def test_store_says_which_event_file_is_cut_short_and_refuses_a_run_whose_folder_is_gone(
    tmp_path, monkeypatch, capsys, short_run
):
    """Issue 75.5-6: a run's event file cut short (a run killed while writing) was stored without a word, and a summary
    whose run folder is gone stopped `store` with a traceback."""
    out = fake_run(tmp_path, monkeypatch, short_run)
    (path,) = glob.glob(os.path.join(out["run_dir"], "events.out.tfevents*"))
    os.truncate(path, os.path.getsize(path) - 20)  # inside its last record
    assert im.store_runs("runs", "store") == 1
    assert re.fullmatch(
        f"implementation_matters.py: warning: {re.escape(path)} is cut short \\(a process killed while writing it, or a "
        "copy cut short\\): its records up to step \\d+ are stored, the rest is lost\n",
        capsys.readouterr().err,
    )
    shutil.rmtree(out["run_dir"])
    (summary,) = glob.glob("runs/summaries/*.json")
    assert im.main(["store", "runs", "--store", "other"]) == 2
    assert capsys.readouterr().err == (
        f"implementation_matters.py: error: {summary}: its run folder {out['run_dir']} is gone; put it back, or delete "
        "the summary and run that run again\n"
    )
    assert os.listdir("other") == []


def test_append_rows_keeps_the_files_columns_and_adds_new_ones(tmp_path):
    path = str(tmp_path / "rows.csv")
    im.append_rows(path, [{"a": 1, "b": 2}])
    im.append_rows(path, [{"b": 4, "a": 3}])  # the file's column order, whatever the row's
    im.append_rows(path, [{"a": 5, "c": 6}])  # a new column: the older rows' cells empty
    im.append_rows(path, [{"a": 7}])
    assert (tmp_path / "rows.csv").read_text().splitlines() == ["a,b,c", "1,2,", "3,4,", "5,,6", "7,,"]
    assert not os.path.exists(path + ".tmp")


def test_the_run_py_reading_is_the_mean_of_the_last_iterations_means():
    # iterations end at 10, 20, 30, 40; episodes end at 5, 10 (iteration 1), 25 (3), 31, 39 (4); none in iteration 2
    returns, ends = [1.0, 3.0, 10.0, 20.0, 40.0], [5, 10, 25, 31, 39]
    assert im.run_py_reading(returns, ends, [40, 10, 30, 20, 40], last=2) == 20.0  # (10 + 30) / 2
    assert im.run_py_reading(returns, ends, [10, 20, 30, 40], last=3) == 20.0  # iteration 2 passed over
    assert im.run_py_reading(returns, ends, [10, 20, 30, 40], last=4) == (2 + 10 + 30) / 3
    assert im.run_py_reading([], [], [10, 20]) == ""


def synthetic_kl(cell, i, rising=True):
    """Made-up mean KL at iteration i (4 to 24): PPO's peaks at 12, PPO-M's rises (or falls), the others' is flat."""
    return {"PPO": 0.02 - 0.0005 * abs(i - 12), "PPO-M": 0.01 + (1 if rising else -1) * 0.0002 * i}.get(cell, 0.01)


def synthetic_store(path, ppo=3300.0, ppo_m=2700.0, seeds=10, kl_rising=True, only=None, steps=im.STEPS):
    """A store of made-up runs of `steps` steps: every cell's seeds (or `only` these cells'), final returns around the
    given means, Figure 2 curves."""
    noise, runs, curves = np.random.default_rng(0).normal(0, 50, size=11), [], []  # a seed's noise in every cell
    for cell, env, seeds_of_cell, flags in im.cells("full"):
        if only and cell not in only:
            continue
        h = im.args_hash(im.extra_args(flags, steps))
        for seed in [s for s in seeds_of_cell if s <= seeds]:
            mean = {"PPO": ppo, "PPO-M": ppo_m, "PPO-NoClip": ppo, "TRPO": ppo_m - 100, "TRPO+": ppo - 100}.get(
                cell, ppo - 200 * ("anneal" in cell)
            )
            runs.append(
                dict(
                    cell=cell,
                    script=im.script_of(cell),
                    env_id=env,
                    seed=seed,
                    args_hash=h,
                    flags=flags,
                    final_return=mean + noise[seed],
                    episodes=900,
                    global_step=999424,
                    git_commit="abc1234",
                    mujoco="3.3.7",
                    wall_time_s=400,
                )
            )
            # windows out of order, the last without an episode: the late return reads 16 and 20 (mean + 180)
            curves += [
                dict(
                    args_hash=h,
                    env_id=env,
                    seed=seed,
                    iteration=i,
                    step=2048 * i,
                    mean_return=mean + 10 * i if i != 24 else "",
                    max_ratio=1.5 if cell == "PPO" else 1.1,
                    mean_kl=synthetic_kl(cell, i, kl_rising),
                    max_kl=0.05,
                )
                for i in (16, 4, 24, 8, 20, 12)
            ]
    os.makedirs(path, exist_ok=True)
    im.append_rows(os.path.join(path, "runs.csv"), runs)
    im.append_rows(os.path.join(path, "iterations.csv"), curves)


def make_report(store, draw=()):
    """`implementation_matters.py report --store <store>` (im.main; its status), the figures named in `draw` drawn to
    their files, the others made but neither laid out nor rendered (matplotlib's Figure.tight_layout and savefig: ~80%
    of a report's CPU). Most checks read report.md alone; each figure is drawn, and its file checked, in one test:
    figure1.png and figure2.png in test_report_reads_the_verdicts_off_the_stored_runs, figure1_critic.png in
    test_figure1s_reward_scaling_is_split_by_value_clipping_with_the_critics_fit, mujoco-2.3.3.png in
    test_the_report_sets_another_mujocos_runs_beside_the_tables (and test_a_smoke_sweep_... draws them all, in its
    own process)."""
    from matplotlib.figure import Figure

    real_layout, real_save, layouts = Figure.tight_layout, Figure.savefig, {}

    def save(fig, path, *args, **kwargs):
        if os.path.basename(path) in draw:
            if fig in layouts:  # laid out as the report asked, before it is rendered
                real_layout(fig, **layouts[fig])
            real_save(fig, path, *args, **kwargs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(Figure, "tight_layout", lambda fig, **kwargs: layouts.__setitem__(fig, kwargs))
        m.setattr(Figure, "savefig", save)
        return im.main(["report", "--store", str(store)])


def test_report_reads_the_verdicts_off_the_stored_runs(tmp_path):
    synthetic_store(tmp_path / "a")
    assert make_report(tmp_path / "a", draw=("figure1.png", "figure2.png")) == 0
    text = (tmp_path / "a" / "report.md").read_text()
    assert "| PPO | 3" in text and "10 | 3292 [3157, 3426]" in text  # ours beside the paper's row, 10 seeds
    claims = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| (")}
    assert claims["| (a) PPO beats PPO-M"].count("yes: +6") == 2
    # beside ours, the paper's own rows read the same way: Walker2d's PPO [3157, 3426] and PPO-M [2602, 2866] apart,
    # its NoClip [2701, 3024] and PPO-M overlapping, and its NoClip's 2867 (Hopper's 2371) outside its PPO's interval
    assert "(the paper: +557, PPO 3292 and PPO-M 2735, intervals apart)" in claims["| (a) PPO beats PPO-M"]
    b = claims["| (b) PPO-NoClip beats PPO-M, within PPO's interval"].split(" | ")[1:]
    assert b[0].endswith(
        "(the paper: +132, PPO-NoClip 2867 and PPO-M 2735, intervals overlapping; its NoClip's "
        "mean outside its PPO's interval)"
    )
    assert b[1].endswith("intervals apart; its NoClip's mean outside its PPO's interval) |")
    assert "AAI 100, ACLI 600" in text.replace(".", "")  # |PPO - TRPO+| = |PPO-M - TRPO| = 100; the details: 600
    assert claims["| (e) the code-level details move results more than the step method (ACLI > AAI)"].count("yes") == 2
    # the late return: the last 3 windows by iteration, 16, 20 and 24, which has no episode (mean + 180)
    late = re.search(r"- Walker2d-v4: PPO (\d+) \((\d+)\), PPO-M (\d+) \((\d+)\)", text).groups()
    noise = np.mean(np.random.default_rng(0).normal(0, 50, size=11)[1:])
    assert [int(v) for v in late] == [round(m + noise + d) for m in (3300, 2700) for d in (180, 0)]
    assert "10 of 10 cells read higher, by +180 to +180" in text
    assert (
        "PPO: 100% of iterations above 1.2" in claims["| (c) the max ratio leaves [1 - eps, 1 + eps] for PPO and PPO-M alike"]
    )
    assert "PPO-M: 0% of iterations" in claims["| (c) the max ratio leaves [1 - eps, 1 + eps] for PPO and PPO-M alike"]
    assert (
        "TRPO's mean KL <= delta 0.13 in 100% of iterations (median 0.010)"
        in claims["| (c) the max ratio leaves [1 - eps, 1 + eps] for PPO and PPO-M alike"]
    )  # Hopper's delta
    d = claims["| (d) reward scaling, annealing and init each shift the reward distribution"]
    on, off, n_on, n_off = map(int, re.search(r"anneal_lr: on (\d+), off (\d+) \(n (\d+)/(\d+)", d).groups())
    assert abs(on - 3300) < 30 and abs(off - 3100) < 30 and n_on == n_off == 32  # 8 combinations of 4 seeds a side
    assert d.split("anneal_lr")[1].split(";")[0].endswith("shifted")  # only annealing moved the made-up returns
    # paired with the other switches as they are, at the same seed: annealing off 200 lower in each of the 32 pairs
    paired = re.findall(
        r"(\w+): on[^;]*; paired with the others' setting and the seed, off - on ([^,]+), n (\d+), "
        r"Wilcoxon p ([^,]+), ([\w ]+)\)",
        d,
    )
    assert [(s, x, n) for s, x, n, _, _ in paired] == [(s, "-200" if s == "anneal_lr" else "+0", "32") for s in im.SWITCHES]
    assert [v for *_, p, v in paired if float(p) < 0.05] == ["off lower"]
    assert [p for s, _, _, p, _ in paired if s != "anneal_lr"] == ["1", "1", "1"]  # pairs mixed up would differ
    assert d.count("no shift shown") == 3 + 3
    # the combinations' table: all 16, every seed, the highest mean first (the made-up annealing-off ones 200 lower)
    table = text.split("| switches off | final returns (seeds) | mean |\n|---|---|---|\n")[1].split("\n\n")[0].splitlines()
    assert (
        len(table) == 16 and all("anneal_lr" in row for row in table[8:]) and not any("anneal_lr" in row for row in table[:8])
    )
    seed_noise = np.random.default_rng(0).normal(0, 50, size=11)  # synthetic_store's
    assert f"| none (PPO) | {', '.join(f'{3300 + seed_noise[k]:.0f} ({k})' for k in (1, 2, 3, 4))} | " in text
    assert (tmp_path / "a" / "figure1.png").stat().st_size > 10000 and (tmp_path / "a" / "figure2.png").exists()
    # Figure 2's KL read the paper's way: six stored iterations a run, so six spans; PPO's peak in the third (i = 12)
    assert (
        claims[
            "| (f) PPO-M's mean KL trends up over training; PPO's peaks about halfway, then falls by a quarter or more "
            "(the paper's reading of Figure 2; a tenth: the median over runs and iterations)"
        ].count(
            "PPO-M: yes, 0.011 in the first tenth, 0.015 in the last; PPO: yes, its peak 0.020 in tenth 3 of 6, 0.014 in "
            "the last"
        )
        == 2
    )
    # the same means and a falling PPO-M KL: the verdicts turn
    synthetic_store(tmp_path / "b", ppo_m=3300.0, kl_rising=False)
    make_report(tmp_path / "b")
    text = (tmp_path / "b" / "report.md").read_text()
    assert "| (a) PPO beats PPO-M | not shown" in text and text.count("PPO-M: no, 0.009 in the first tenth, 0.005") == 2
    # two seeds a cell: a bootstrap of two values is no interval, so no verdict, only the difference
    synthetic_store(tmp_path / "c", seeds=2)
    make_report(tmp_path / "c")
    text = (tmp_path / "c" / "report.md").read_text()
    assert "| (a) PPO beats PPO-M | too few seeds for a verdict: +6" in text and "Interim: 10 of the 10 cells" in text
    assert "## Other stored runs" not in text
    # a run stored under settings the study no longer plans: listed apart, out of its cell's row
    rows = im.read_csv(tmp_path / "c" / "runs.csv")
    stale = dict(rows[0], seed="3", final_return="100.0", flags="--max-kl-final 9", args_hash="0bsolete")
    im.append_rows(str(tmp_path / "c" / "runs.csv"), [stale])
    make_report(tmp_path / "c")
    after = (tmp_path / "c" / "report.md").read_text()
    tables = text.split("## The paper's claims")[0].replace(f"{len(rows)} stored runs", f"{len(rows) + 1} stored runs")
    assert after.split("## The paper's claims")[0] == tables  # the tables as before, the count of stored runs apart
    assert f"| {stale['cell']} | {stale['env_id']} | `--max-kl-final 9` | 3 | 100 | 100 | — | — |" in after
    # runs of the cell's earlier code at seeds it has now: the cell's runs now at those seeds, and the paired difference
    then = [
        dict(
            rows[0],
            cell=rows[0]["cell"] + ", joint clip",
            seed=str(seed),
            final_return=str(100.0 * seed),
            flags="--grad-clip-scope both",
            args_hash="0ld",
        )
        for seed in (2, 1)
    ]
    im.append_rows(str(tmp_path / "c" / "runs.csv"), then)
    make_report(tmp_path / "c")
    now = {
        int(r["seed"]): float(r["final_return"])
        for r in rows
        if (r["cell"], r["env_id"]) == (rows[0]["cell"], rows[0]["env_id"])
    }
    assert sorted(now) == [1, 2]
    assert (
        f"| {rows[0]['cell']}, joint clip | {rows[0]['env_id']} | `--grad-clip-scope both` | 2 1 | 200, 100 | 150 | "
        f"{(now[1] + now[2]) / 2:.0f}, 2 | {(now[1] - 100 + now[2] - 200) / 2:+.0f} |"
    ) in (tmp_path / "c" / "report.md").read_text()
    # from 3 seeds on, the difference's interval: each earlier run 50 below the run now at its seed
    rows = im.read_csv(tmp_path / "a" / "runs.csv")
    im.append_rows(
        str(tmp_path / "a" / "runs.csv"),
        [
            dict(r, cell=r["cell"] + ", joint clip", final_return=str(float(r["final_return"]) - 50), args_hash="0ld")
            for r in rows
            if r["cell"] == "PPO-M" and int(r["seed"]) <= 3
        ],
    )
    make_report(tmp_path / "a")
    assert ", 3 | +50 [+50, +50] |" in (tmp_path / "a" / "report.md").read_text()


def test_figure1s_curve_is_one_minus_the_cdf_from_1_down_to_0():
    x, y = im.survival([3000, 1000, 2000, 2000])
    assert x.tolist() == [1000, 1000, 2000, 2000, 3000] and y.tolist() == [1, 0.75, 0.5, 0.25, 0]
    for v in (500, 1000, 1500, 2000, 2500, 3000, 3500):  # where="post": the value at v is y at the last x <= v
        drawn = y[np.searchsorted(x, v, side="right") - 1] if v >= x[0] else 1.0
        assert drawn == np.mean(np.array([3000, 1000, 2000, 2000]) > v)


def test_a_cells_interval_moves_only_with_its_own_runs(tmp_path):
    synthetic_store(tmp_path / "all")
    rows = im.read_csv(tmp_path / "all" / "runs.csv")
    os.makedirs(tmp_path / "fewer")  # PPO on Walker2d-v4 at 4 seeds, every other cell as before
    im.append_rows(
        str(tmp_path / "fewer" / "runs.csv"),
        [r for r in rows if not ((r["cell"], r["env_id"]) == ("PPO", "Walker2d-v4") and int(r["seed"]) > 4)],
    )
    shutil.copy(tmp_path / "all" / "iterations.csv", tmp_path / "fewer")
    tables = {}
    for name in ("all", "fewer"):
        make_report(tmp_path / name)
        text = (tmp_path / name / "report.md").read_text()
        tables[name] = {
            line.split(" | ")[0]: line
            for line in text.split("## Tables 2 and 3")[1].splitlines()[:14]
            if line.startswith("| ")
        }
    assert tables["all"]["| PPO"] != tables["fewer"]["| PPO"]
    for algo in ("PPO-M", "TRPO", "TRPO+", "PPO-NoClip"):  # drawn after PPO's: a shared generator would move them
        assert tables["all"][f"| {algo}"] == tables["fewer"][f"| {algo}"]


def test_figure1_reads_every_combination_at_the_seeds_all_have_and_gives_no_verdict_until_all_16_are_in(tmp_path):
    synthetic_store(tmp_path)
    runs = im.read_csv(tmp_path / "runs.csv")
    # a sweep in progress: one combination not run yet, another at seeds 1 and 2 only
    kept = [
        r
        for r in runs
        if r["cell"] != "fig1 off: anneal_lr" and not (r["cell"] == "fig1 off: ortho_init" and int(r["seed"]) > 2)
    ]
    os.remove(tmp_path / "runs.csv")
    im.append_rows(str(tmp_path / "runs.csv"), kept)
    groups, seeds = im.figure1_groups(kept)
    assert seeds == [1, 2] and len(groups) == 15 and all(len(returns) == 2 for _, returns in groups)
    assert groups[0][0] == set() and groups[0][1] == [
        float(r["final_return"]) for r in runs if r["cell"] == "PPO" and r["env_id"] == "Walker2d-v4" and int(r["seed"]) <= 2
    ]
    make_report(tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "Figure 1 (15 of 16 combinations stored, read at seeds 1, 2, the seeds all of them have" in text
    d = next(line for line in text.splitlines() if line.startswith("| (d)"))
    assert "interim, 15 of 16 combinations (no verdict until all are in)" in d
    assert "shift" not in d.replace("each shift the", "") and "anneal_lr: on 3" in d and "(n 16/14" in d
    assert "the highest mean" not in d and "paired" not in d  # these too wait for all 16
    assert "| on | interim, 15 of 16 combinations | | | |" in text and "Turning reward scaling off" not in text


def test_the_critics_early_fit_is_the_mean_of_its_stored_iterations_up_to_the_last():
    runs = [
        dict(cell="PPO", env_id="Walker2d-v4", seed="1", args_hash="a"),
        dict(cell="PPO-M", env_id="Walker2d-v4", seed="1", args_hash="b"),
    ]
    rows = [
        dict(args_hash="a", env_id="Walker2d-v4", seed="1", iteration=i, explained_variance=ev)
        for i, ev in ((8, "0.5"), (4, "0.25"), (12, ""), (16, "nan"), (20, "-3"))
    ]
    rows += [
        dict(args_hash="b", env_id="Walker2d-v4", seed="1", iteration=4, explained_variance="0.9"),
        dict(args_hash="a", env_id="Hopper-v4", seed="1", iteration=4, explained_variance="0.9"),
    ]
    assert im.early_fit(rows, runs, "PPO", last=16) == {1: 0.375}  # unstored and nan passed over; 20 is past the last
    assert im.early_fit(rows, runs, "PPO", last=20) == {1: pytest.approx((0.5 + 0.25 - 3) / 3)}
    assert im.early_fit(rows, runs, "PPO-M") == {1: 0.9} and im.early_fit(rows, runs, "TRPO") == {}


def test_figure1s_reward_scaling_is_split_by_value_clipping_with_the_critics_fit(tmp_path):
    synthetic_store(tmp_path)
    make_report(tmp_path)  # stored before the explained variance was: the split, no fit
    text = (tmp_path / "report.md").read_text()
    assert "- value clipping on, reward scaling off: not stored" in text and "the critic fits worse" not in text
    assert "; 64 Figure 1 runs were stored without it):" in text  # 15 combinations and PPO's, 4 seeds each
    # made up: value clipping on with reward scaling off, 2,000 lower and its critic's fit 0.4 + 0.02 a seed
    runs, curves = im.read_csv(tmp_path / "runs.csv"), im.read_csv(tmp_path / "iterations.csv")
    lagging = {
        r["args_hash"]
        for r in runs
        if r["cell"].startswith("fig1 off: ") and "reward_scaling" in r["cell"] and "value_clipping" not in r["cell"]
    }
    for r in runs:  # and, the highest, init off alone 500 above the rest
        r["final_return"] = (
            float(r["final_return"]) - 2000 * (r["args_hash"] in lagging) + 500 * (r["cell"] == "fig1 off: ortho_init")
        )
    for c in curves:  # and one fig1 run's (init off, seed 4) left out, as a run stored before it was
        c["explained_variance"] = 0.4 + 0.02 * int(c["seed"]) if c["args_hash"] in lagging else 0.9
        if c["args_hash"] == im.args_hash(im.extra_args(im.figure1_flags({"ortho_init"}))) and int(c["seed"]) == 4:
            c["explained_variance"] = ""
    im.write_rows(str(tmp_path / "runs.csv"), runs)
    im.write_rows(str(tmp_path / "iterations.csv"), curves)
    assert not (tmp_path / "figure1_critic.png").exists()  # the report above drew nothing
    make_report(tmp_path, draw=("figure1_critic.png",))
    text = (tmp_path / "report.md").read_text()
    assert (tmp_path / "figure1_critic.png").exists()
    table = {
        line.split(" | ")[0]: line.split(" | ")[1:]
        for line in text.split("### Reward scaling")[1].splitlines()
        if line.startswith("| o")
    }
    # each of the 2 x 2: 4 combinations (the all-on one PPO's Walker2d runs) of seeds 1-4
    side = {
        (vc, rs): [
            float(r["final_return"])
            for r in runs
            if int(r["seed"]) <= 4
            and (r["cell"] == "PPO" and r["env_id"] == "Walker2d-v4" or r["cell"].startswith("fig1"))
            and ("value_clipping" in r["cell"]) != vc
            and ("reward_scaling" in r["cell"]) != rs
        ]
        for vc in (True, False)
        for rs in (True, False)
    }
    means = {k: np.mean(v) for k, v in side.items()}
    for vc in (True, False):
        row = table["| on" if vc else "| off"]
        assert row[:2] == [
            f"{means[vc, True]:.0f}, n {len(side[vc, True])}",
            f"{means[vc, False]:.0f}, n {len(side[vc, False])}",
        ]
        assert row[2].startswith(f"{means[vc, False] - means[vc, True]:+.0f} [") and len(side[vc, True]) == 16
    assert table["| on"][2].startswith("-2125 [")  # 2,000 lower, and the 500 of init off among reward scaling on's 16
    assert (
        f"Turning reward scaling off moves the mean by {means[True, False] - means[True, True]:+.0f} with value "
        f"clipping on and by +0 with value clipping off (not shown: the interval reaches 0 or Mann-Whitney p >= "
        f"0.05); turning value clipping off moves it by {means[False, True] - means[True, True]:+.0f} with the "
        f"rewards scaled and by {means[False, False] - means[True, False]:+.0f} without"
    ) in text
    assert "- value clipping on, reward scaling off: 0.45 [0.42, 0.48], 16 runs" in text  # seeds 1-4
    assert "- value clipping on, reward scaling on: 0.90 [0.90, 0.90], 21 runs" in text  # and PPO's seeds 5-10
    assert "; 1 Figure 1 runs were stored without it):" in text
    worse = "the critic fits worse in every stored run with value clipping on, reward scaling off than in any other stored run"
    assert worse in text
    # one lagging run that fits better than one run of another group: no group fits worse than all the others
    curves[[i for i, c in enumerate(curves) if c["args_hash"] in lagging][0]]["explained_variance"] = 50.0
    im.write_rows(str(tmp_path / "iterations.csv"), curves)
    make_report(tmp_path)
    assert "the critic fits worse" not in (tmp_path / "report.md").read_text()
    best = np.mean([float(r["final_return"]) for r in runs if r["cell"] == "fig1 off: ortho_init"])
    assert (
        f"the highest mean of the 16 at those seeds: ortho_init off, {best:.0f}, with reward_scaling, anneal_lr on "
        "(the paper: all three on in its best)"
    ) in text


def test_an_empty_store_is_one_line(tmp_path):
    res = subprocess.run([*STUDY, "report", "--store", str(tmp_path)], capture_output=True, text=True, env=root_on_path())
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        f"implementation_matters.py: error: no stored runs in {tmp_path}; run "
        "benchmark/studies/implementation_matters.sh first"
    ]


def test_kl_parts_are_tenths_of_each_run_in_iteration_order():
    h = im.args_hash(im.extra_args(im.SETTINGS["PPO", "Hopper-v4"]))
    runs = [dict(cell="PPO", env_id="Hopper-v4", args_hash=h, seed=str(s)) for s in (1, 2)]
    # 20 iterations a run, stored out of order, seed 2's KL ten times seed 1's: tenth k holds iterations 2k+1 and
    # 2k+2 of both runs, whose median is the mean of 2k+2 and 10 (2k+1)
    curves = [
        dict(args_hash=h, env_id="Hopper-v4", seed=str(s), iteration=str(i), mean_kl=str(i * 10 ** (s - 1)))
        for s in (1, 2)
        for i in reversed(range(1, 21))
    ]
    assert im.kl_parts(curves, runs, "PPO", "Hopper-v4") == pytest.approx(
        [(2 * k + 2 + 10 * (2 * k + 1)) / 2 for k in range(10)]
    )
    assert im.kl_parts(curves, runs, "PPO-M", "Hopper-v4") is None


def released_run(runs_dir, config, seed, final, iterations=488):
    """A result file as benchmark/peers/paper_code.py writes it."""
    os.makedirs(runs_dir / "paper_code", exist_ok=True)
    with open(runs_dir / "paper_code" / f"{config}__{seed}.json", "w") as f:
        json.dump(
            {
                "config": config,
                "seed": seed,
                "params": {"t": 2048},
                "iteration_rewards": [final + 5] * iterations,
                "episode_returns": [final] * 150,
                "final_return": final,
                "final_5": final + 5,
                "wall_time_s": 900.0,
            },
            f,
        )


def test_the_released_codes_runs_are_stored_and_set_beside_ours(tmp_path):
    store = tmp_path / "store"
    synthetic_store(store)
    for seed, final in ((1, 3000.0), (2, 3100.0), (3, 3200.0)):
        released_run(tmp_path / "runs", "walker_ppom", seed, final)
    released_run(tmp_path / "runs", "walker_ppom", 4, 10.0, iterations=3)  # shortened: not stored
    released_run(tmp_path / "runs", "humanoid_ppom", 1, 10.0)  # not a cell of the study
    assert im.store_runs(str(tmp_path / "runs"), str(store)) == 3 and im.store_runs(str(tmp_path / "runs"), str(store)) == 0
    rows = im.read_csv(store / "paper_code.csv")
    assert [(r["cell"], r["env_id"], r["seed"], r["final_return"], r["final_5"]) for r in rows] == [
        ("PPO-M", "Walker2d-v4", str(s), f"{v:.1f}", f"{v + 5:.1f}") for s, v in ((1, 3000), (2, 3100), (3, 3200))
    ]
    make_report(store)
    (line,) = [x for x in (store / "report.md").read_text().splitlines() if x.startswith("| PPO-M | Walker2d-v4 | ")]
    ours = im.finals(im.read_csv(store / "runs.csv"), "PPO-M", "Walker2d-v4")
    diff = re.search(r"\| ([+-]\d+) \[([+-]\d+), ([+-]\d+)\] \|", line).groups()
    assert line.startswith(f"| PPO-M | Walker2d-v4 | 2735 | {ours.mean():.0f}, 10 | 3100, 3 | ")
    assert int(diff[0]) == round(ours.mean() - 3100) and int(diff[1]) < int(diff[0]) < int(diff[2]) < 0
    # the run.py reading: ours has none stored (the synthetic runs lack it), the released code's is its final_5
    assert line.endswith(" | not run yet | 3105, 3 | too few seeds for an interval |")
    # ours read the run.py way too: 100 above its last 100 episodes, in the table and the section on the late readings
    rows = im.read_csv(store / "runs.csv")
    im.write_rows(str(store / "runs.csv"), [dict(r, final_5=float(r["final_return"]) + 100) for r in rows])
    make_report(store)
    text = (store / "report.md").read_text()
    (line,) = [x for x in text.splitlines() if x.startswith("| PPO-M | Walker2d-v4 | ")]
    diff = re.search(r"\| ([+-]\d+) \[([+-]\d+), ([+-]\d+)\] \|$", line).groups()
    assert f" | {ours.mean() + 100:.0f}, 10 | 3105, 3 | " in line and int(diff[0]) == round(ours.mean() + 100 - 3105)
    assert f"- Walker2d-v4: PPO {im.finals(rows, 'PPO', 'Walker2d-v4').mean() + 100:.0f} (" in text


@pytest.mark.parametrize("last, verdict", [(0.7, "yes"), (0.9, "no")])
def test_ppos_kl_must_fall_by_a_quarter_from_its_peak(last, verdict):
    runs = [dict(cell=c, env_id="Hopper-v4", args_hash=c, seed="1") for c in ("PPO", "PPO-M")]
    ppo = [0.5, 0.8, 1.0, 0.9, 0.8, 0.8, 0.8, 0.8, 0.8, last]  # the peak in the third tenth
    curves = [
        dict(args_hash=c, env_id="Hopper-v4", seed="1", iteration=str(i + 1), mean_kl=str(k))
        for c, kls in (("PPO", ppo), ("PPO-M", [0.1 * (i + 1) for i in range(10)]))
        for i, k in enumerate(kls)
    ]
    assert f"PPO: {verdict}, its peak 1.000 in tenth 3 of 10, {last:.3f} in the last" in im.kl_trends(
        curves, runs, "Hopper-v4"
    )


@pytest.mark.parametrize("fixed", [True, False])
def test_a_noclip_run_from_before_the_rewards_fix_is_not_stored(tmp_path, monkeypatch, fixed, short_run):
    fake_run(tmp_path, monkeypatch, short_run, cell="PPO-NoClip", env="Hopper-v4", seed=1)
    asked = []
    monkeypatch.setattr(im, "descends", lambda commit, ancestor: asked.append((commit, ancestor)) or fixed)
    assert im.store_runs("runs", str(tmp_path / "store")) == int(fixed)
    assert asked == [("0123456789", im.REWARDS_FIX)]


def test_descends_asks_git():
    assert im.descends("HEAD", im.REWARDS_FIX) and not im.descends(im.REWARDS_FIX + "+dirty", "HEAD")
    assert not im.descends(None, im.REWARDS_FIX)  # a run made outside a git checkout


def test_a_study_on_another_mujoco_is_planned_stored_and_reported_apart(tmp_path, monkeypatch, capsys, short_run):
    import importlib.metadata

    store, lock = tmp_path / "store", im.lock_mujoco()

    def first_planned():  # PPO's first line of the plan on this (patched) MuJoCo: cell, env, seeds
        capsys.readouterr()
        im.plan("full", str(store), ["PPO"])
        return capsys.readouterr().out.splitlines()[0].split("\t")[:3]

    assert im.mujoco_dir() == ""  # the suite's MuJoCo is the lock's: the tables' runs go to the store itself
    fake_run(tmp_path, monkeypatch, short_run)  # PPO, Walker2d-v4, seed 2, on the lock's MuJoCo
    assert im.store_runs("runs", str(store)) == 1
    real, _ = importlib.metadata.version, capsys.readouterr()
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.3.3" if name == "mujoco" else real(name))
    assert im.main(["mujoco-dir"]) == 0 and capsys.readouterr().out == "mujoco-2.3.3\n"
    monkeypatch.setattr(im, "installed", lambda name: "")  # no MuJoCo at all: one line, not a folder "mujoco-"
    assert im.main(["mujoco-dir"]) == 2 and capsys.readouterr().err == (
        "implementation_matters.py: error: mujoco is not installed in this python: bash scripts/install.sh mujoco "
        "(or mujoco-ref)\n"
    )
    monkeypatch.undo()
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.3.3" if name == "mujoco" else real(name))
    monkeypatch.chdir(tmp_path)
    # on 2.3.3, the lock's run is neither stored again nor counted as done there
    assert im.store_runs("runs", str(store)) == 0
    assert f"ran on MuJoCo {lock}, this python has 2.3.3" in capsys.readouterr().out
    assert first_planned() == ["PPO", "Walker2d-v4", "1 2"]
    fake_run(tmp_path, monkeypatch)  # the same seed, trained on "2.3.3": stored apart, the tables' file as it was
    assert im.store_runs("runs", str(store)) == 1
    (row,) = im.read_csv(store / "mujoco-2.3.3" / "runs.csv")
    assert (row["cell"], row["seed"], row["mujoco"]) == ("PPO", "2", "2.3.3")
    assert [r["mujoco"] for r in im.read_csv(store / "runs.csv")] == [lock]
    assert first_planned() == ["PPO", "Walker2d-v4", "1"]
    assert plan_lines(store, "full", "--cells", "PPO")[0][:3] == ["PPO", "Walker2d-v4", "1"]  # the lock's: seed 2 done


def on_mujoco_233(store, cell, finals, **extra):
    """Rows of `cell`'s runs on Hopper-v4 under MuJoCo 2.3.3, seeds 1, 2, ... ending at `finals`, in the store's
    mujoco-2.3.3/runs.csv."""
    flags = im.SETTINGS[cell, "Hopper-v4"]
    row = dict(cell=cell, script="ppo_continuous_action.py", env_id="Hopper-v4", flags=flags, git_commit="abc1234")
    row |= dict(args_hash=im.args_hash(im.extra_args(flags)), mujoco="2.3.3", **extra)
    rows = [dict(row, seed=seed, final_return=final) for seed, final in enumerate(finals, start=1)]
    im.append_rows(str(store / "mujoco-2.3.3" / "runs.csv"), rows)


def test_the_report_sets_another_mujocos_runs_beside_the_tables(tmp_path):
    synthetic_store(tmp_path / "a")
    table = im.finals(im.read_csv(tmp_path / "a" / "runs.csv"), "PPO", "Hopper-v4")
    os.makedirs(tmp_path / "a" / "mujoco-2.3.3")
    on_mujoco_233(tmp_path / "a", "PPO", table[:4] + 300, final_5=3000)
    assert make_report(tmp_path / "a", draw=("mujoco-2.3.3.png",)) == 0
    text = (tmp_path / "a" / "report.md").read_text()
    (row,) = [line for line in text.splitlines() if line.startswith("| PPO | Hopper-v4 | 2513 |")]
    cells = row.split(" | ")
    x = table[:4] + 300
    assert cells[3].startswith(f"{x.mean():.0f} [") and cells[3].endswith(", 4")
    assert cells[4] == f"{table.mean():.0f}, 10"
    diff, low, high = (float(v) for v in re.match(r"([+-]\d+) \[([+-]\d+), ([+-]\d+)\]", cells[5]).groups())
    assert diff == round(x.mean() - table.mean()) and low < diff < high
    assert cells[6] == "3000"
    assert "## On MuJoCo 2.3.3" in text and text.count("| PPO | Hopper-v4 |") == 1  # the tables read the store's own
    assert (
        f"![each run on MuJoCo {im.lock_mujoco()} and 2.3.3](mujoco-2.3.3.png)" in text
        and (tmp_path / "a" / "mujoco-2.3.3.png").exists()
    )
    assert "The claims on MuJoCo 2.3.3" not in text  # no PPO-M there yet
    ppo_m = im.finals(im.read_csv(tmp_path / "a" / "runs.csv"), "PPO-M", "Hopper-v4")[:3]
    on_mujoco_233(tmp_path / "a", "PPO-M", ppo_m)
    assert make_report(tmp_path / "a") == 0
    (claims,) = [
        line
        for line in (tmp_path / "a" / "report.md").read_text().splitlines()
        if line.startswith("The claims on MuJoCo 2.3.3's runs alone: ")
    ]
    assert claims.split(": ", 1)[1].startswith(f"(a) PPO beats PPO-M on Hopper-v4: yes: {x.mean() - ppo_m.mean():+.0f} [")
    assert claims.endswith("n 4 and 3") and "(b)" not in claims  # (b) waits for PPO-NoClip's runs there


def summary_without_args(store):
    os.makedirs("runs/summaries")
    with open("runs/summaries/ppo_continuous_action__Hopper-v4__1__x.json", "w") as f:
        json.dump({"ok": True, "script": "ppo_continuous_action.py"}, f)


def without_mean_kl(store):
    path = os.path.join(store, "iterations.csv")
    im.write_rows(path, [{k: v for k, v in r.items() if k != "mean_kl"} for r in im.read_csv(path)])


def edit(name, change):
    """A damage: the store's file `name` changed, its text as a list of lines, by change(lines)."""

    def damage(store):
        with open(os.path.join(store, name), newline="") as f:
            lines = f.read().split("\r\n")
        with open(os.path.join(store, name), "w", newline="") as f:
            f.write("\r\n".join(change(lines)))

    return damage


CUT = edit("runs.csv", lambda lines: lines[:-2] + [lines[-2][:40]])  # the last row cut short, no line end
FIX = "delete that line; the next store of its runs/ stores that run again"
RESTORE = "restore the file from a copy (git, or the machine that stored the runs)"


@pytest.mark.parametrize(
    "argv, damage, message",
    [
        (
            "plan --store {s}",
            edit("runs.csv", lambda lines: lines[:1] + [lines[1].replace(",1,", ",one,", 1)] + lines[2:]),
            f"{{s}}/runs.csv line 2: seed 'one' is not a whole number; {FIX}",
        ),
        ("plan --store {s}", CUT, f"{{s}}/runs.csv line 5 has no line end (a write cut short); {FIX}"),  # not: seed stored
        ("store runs --store {s}", CUT, f"{{s}}/runs.csv line 5 has no line end (a write cut short); {FIX}"),  # not: glued
        ("report --store {s}", without_mean_kl, f"{{s}}/iterations.csv has no 'mean_kl' column; {RESTORE}"),
        (
            "report --store {s}",
            edit("iterations.csv", lambda lines: lines[:6] + [",".join(lines[6].split(",")[:3])] + lines[7:]),
            "{s}/iterations.csv line 7 has 3 fields, the header 9; delete that line and its run's row in runs.csv; the next "
            "store of its runs/ stores both again",
        ),
        # issue 75.5: a nan, a run stored twice and a cell the study does not have were read into the tables
        (
            "report --store {s}",
            edit(
                "runs.csv",
                lambda lines: lines[:2] + [",".join(lines[2].split(",")[:6] + ["nan"] + lines[2].split(",")[7:])] + lines[3:],
            ),
            f"{{s}}/runs.csv line 3: final_return 'nan' is not a finite number; {FIX}",
        ),
        (
            "report --store {s}",
            edit("runs.csv", lambda lines: lines[:3] + lines[1:]),
            "{s}/runs.csv lines 2 and 4 hold one run (script, args_hash, env_id, seed); delete the one that is wrong",
        ),
        (
            "report --store {s}",
            edit("runs.csv", lambda lines: lines[:1] + ["PPO-X" + lines[1][3:]] + lines[2:]),
            f"{{s}}/runs.csv line 2: cell 'PPO-X' is none of the study's ({', '.join(im.ALGOS)}, fig1 off: "
            f"<{' '.join(im.SWITCHES)}>); {FIX}",
        ),
        (
            "report --store {s}",
            lambda store: os.remove(os.path.join(store, "iterations.csv")),
            f"{{s}}/iterations.csv is missing beside 4 stored runs; {RESTORE}",
        ),
        (
            "store runs --store {s}",
            summary_without_args,
            "runs/summaries/ppo_continuous_action__Hopper-v4__1__x.json has no 'args'; delete it and rerun its run",
        ),
        (
            "plan --store {s}/runs.csv",
            None,
            "--store {s}/runs.csv is a file; give the folder of the stored runs (runs.csv, iterations.csv)",
        ),
        ("store nothing --store {s}", None, "nothing is not a folder; give the runs/ folder the sweep wrote"),
        (
            "report --store {s} --out {s}/runs.csv",
            None,
            "--out {s}/runs.csv cannot be written to (File exists); give a folder you can write to",
        ),
        (
            "store runs --store {s}/runs.csv/new",
            None,
            "--store {s}/runs.csv/new cannot be written to (Not a directory); give a folder you can write to",
        ),
    ],
)
def test_a_damaged_store_or_a_path_that_cannot_be_used_is_one_line_and_nothing_is_written(
    tmp_path, capsys, argv, damage, message
):
    store = str(tmp_path / "s")
    synthetic_store(store, seeds=2, only=("PPO",))
    os.makedirs("runs", exist_ok=True)
    if damage:
        damage(store)
    before = {name: open(os.path.join(store, name), "rb").read() for name in os.listdir(store)}
    assert im.main(argv.format(s=store).split()) == 2
    assert capsys.readouterr() == ("", f"implementation_matters.py: error: {message.format(s=store)}\n")
    assert {name: open(os.path.join(store, name), "rb").read() for name in os.listdir(store)} == before


def study_copy(tmp_path):
    """implementation_matters.sh short, copied with what it runs into tmp_path (sweep_copy), beside the lock's MuJoCo and
    the fake script as ppo_continuous_action.py (logs returns seed * 100 + i, i < STEPS // 10: no training); returns
    (the sweep's command, the copy's benchmark/, its environment)."""
    bench, env = sweep_copy(tmp_path)
    os.symlink(os.path.join(ROOT, "requirements"), tmp_path / "requirements")  # the lock's MuJoCo: the tables' store
    (tmp_path / "ppo_continuous_action.py").write_text(FAKE_SCRIPT)
    return ["bash", str(bench / "studies" / "implementation_matters.sh"), "short"], bench, env


def test_a_sweep_into_a_store_it_cannot_write_stops_before_any_run(tmp_path):
    """Issue 75.7: an unwritable STORE was found by the first `store`, after its cell had trained."""
    sweep, _, env = study_copy(tmp_path)
    env.update(STEPS="200", WORKERS="1", CELLS="PPO", STORE="ppo_continuous_action.py/store")  # a folder under a file
    res = subprocess.run(sweep, capture_output=True, text=True, env=env)
    assert (res.returncode, res.stdout) == (2, "") and res.stderr == (
        f"implementation_matters.sh: error: STORE={tmp_path}/ppo_continuous_action.py/store cannot be written to; give "
        "a folder you can write to\n"
    )
    assert sorted(os.listdir(tmp_path)) == ["benchmark", "ppo_continuous_action.py", "requirements"]  # no run


def test_a_smoke_sweep_runs_stores_and_reports_in_a_store_of_its_own(tmp_path):
    """implementation_matters.sh with STORE and STEPS: one run left to make of PPO's (a fake script's: no training),
    stored and reported there; run again with nothing left, it leaves the report as it is. Nothing outside tmp_path."""
    sweep, bench, env = study_copy(tmp_path)
    synthetic_store(tmp_path / "smoke", seeds=4, only=("PPO",), steps=200)
    runs = im.read_csv(tmp_path / "smoke" / "runs.csv")
    im.write_rows(str(tmp_path / "smoke" / "runs.csv"), runs[1:])  # PPO on Walker2d-v4, seed 1: left to run
    env.update(STEPS="200", WORKERS="1", CELLS="PPO")
    refused = subprocess.run(sweep, capture_output=True, text=True, env=env)  # into the study's store: no
    assert refused.returncode == 2 and refused.stderr == (
        "implementation_matters.sh: error: STEPS=200 wants a STORE of its own (e.g. STORE=/tmp/smoke): the study's, "
        "results/implementation_matters/ (or the repository's), holds runs of 1000000 steps\n"
    )
    env.update(STORE="smoke")
    res = subprocess.run(sweep, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "== PPO on Walker2d-v4, seeds 1\n" in res.stdout and len(calls()) == 1
    (row,) = [r for r in im.read_csv(tmp_path / "smoke" / "runs.csv") if (r["env_id"], r["seed"]) == ("Walker2d-v4", "1")]
    assert (row["final_return"], row["args_hash"]) == ("109.5", im.args_hash(im.extra_args(row["flags"], 200)))
    assert "at 200 steps" in (tmp_path / "smoke" / "report.md").read_text()
    os.remove(tmp_path / "smoke" / "report.md")
    again = subprocess.run(sweep, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0 and again.stdout.startswith("nothing left to run: every planned run is stored in")
    assert not (tmp_path / "smoke" / "report.md").exists() and len(calls()) == 1
    assert (
        sorted(os.listdir(tmp_path)) == ["benchmark", "calls.txt", "ppo_continuous_action.py", "requirements", "runs", "smoke"]
        and not (bench / "results").exists()
    )
