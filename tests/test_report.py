"""Tests of benchmark/tools/report.py: the final return as the published numbers define it, the table beside the
published row and its verdict, the per-seed CSV, the plots and curves.csv, each seed's hours, and what it refuses."""

import csv
import glob
import json
import os
import shutil

import numpy as np
import pytest
from fakes import runner_summary, write_run

from benchmark import reference, runs
from benchmark.tools import report, run


def test_final_return_is_mean_of_last_100_episodes_then_mean_and_population_std_across_seeds(write_tb):
    g = np.random.default_rng(0)
    per_seed = {}
    for seed, n in [(1, 250), (2, 130), (3, 80)]:  # seed 3 has fewer than 100 episodes: all of them count
        returns = np.round(g.uniform(470, 510, n), 1).astype(np.float32)
        returns[:-100] = 0.0  # early episodes that must not count
        write_run(write_tb, "CartPole-v1", "ppo", seed, returns, 500000)
        per_seed[seed] = float(np.mean(returns[-100:].astype(np.float64)))
    # an interrupted run (no runner summary, stopped at 40% of its budget) is left out
    write_run(write_tb, "CartPole-v1", "ppo", 4, [0.0] * 120, 500000, last_step=200000)

    records = runs.collect("runs")
    assert sorted(r["seed"] for r in records) == [1, 2, 3]
    assert {r["seed"]: r["final_return"] for r in records} == pytest.approx(per_seed, abs=1e-4)
    assert {r["script"] for r in records} == {"ppo.py"} and {r["budget"] for r in records} == {500000}

    lines, sources, results = report.build_table(report.group(records), reference.load_reference(), {})
    (res,) = results
    finals = list(per_seed.values())
    assert res["mean"] == pytest.approx(np.mean(finals), abs=1e-4)
    assert res["std"] == pytest.approx(np.std(finals, ddof=0), abs=1e-4)
    assert res["std"] != pytest.approx(np.std(finals, ddof=1), abs=1e-4)
    assert res["ref"]["mean"] == "490.04" and res["verdict"] == "within"
    assert f"| ppo.py | CartPole-v1 | 500k | 3 | {res['mean']:.2f} ± {res['std']:.2f} |" in lines[2]
    assert "490.04 ± 6.12" in lines[2] and sources[0].startswith("CleanRL docs rl-algorithms/ppo.md + docs/benchmark/ppo.md")


def test_report_writes_markdown_csv_and_one_plot_per_env(write_tb, tmp_path):
    write_run(write_tb, "CartPole-v1", "ppo", 1, [400.0] * 150, 500000)
    write_run(write_tb, "CartPole-v1", "ppo_shared", 1, [495.0] * 150, 500000)
    write_run(write_tb, "Acrobot-v1", "ppo", 1, [-80.0] * 150, 500000)
    write_run(write_tb, "Acrobot-v1", "ppo", 1, [-95.0] * 150, 500000, stamp=0)  # an older run of the same seed
    out = tmp_path / "out"
    assert report.main(["runs", "--out", str(out), "--compare-as", "ppo_shared.py=ppo.py"]) == 0
    assert sorted(os.listdir(out)) == ["Acrobot-v1.png", "CartPole-v1.png", "per_seed.csv", "report.md"]
    md = (out / "report.md").read_text()
    assert "| ppo.py | CartPole-v1 | 500k | 1 | 400.00 ± 0.00 | 400.0 | 490.04 ± 6.12 | 500k | below |" in md
    assert "| ppo_shared.py | CartPole-v1 | 500k | 1 | 495.00 ± 0.00 | 495.0 | 490.04 ± 6.12 (ppo.py) | 500k | within |" in md
    assert "| ppo.py | Acrobot-v1 | 500k | 1 | -80.00 ± 0.00 | -80.0 | -86.36 ± 1.32 | 500k | above |" in md
    with open(out / "per_seed.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["script"], r["env_id"], float(r["final_return"])) for r in rows) == [
        ("ppo.py", "Acrobot-v1", -80.0),
        ("ppo.py", "CartPole-v1", 400.0),
        ("ppo_shared.py", "CartPole-v1", 495.0),
    ]


def test_report_gives_each_seeds_hours_its_parts_summed_without_the_gap_between_nor_a_pause(write_tb, tmp_path):
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    write_run(write_tb, "CartPole-v1", "ppo", 1, [400.0] * 150, 500000)  # written within a second
    run_dir = "runs/CartPole-v1__ppo__1__1"
    # two more parts: an hour (an event a minute), then 50 hours down; after its resume half an hour (an event every
    # 120 s: no pause), stopped for 2 hours (SIGSTOP: no event), then half an hour more
    resumed = [*(54 * 3600 + np.arange(0, 1801, 120)), *(56.5 * 3600 + np.arange(0, 1801, 60))]
    for name, times in (("2", 1e9 + np.arange(0, 3601, 60)), ("3", 1e9 + np.array(resumed))):
        with open(f"{run_dir}/events.out.tfevents.{name}", "wb") as f:
            for t in times:
                RecordWriter(f).write(event_pb2.Event(wall_time=t, step=1).SerializeToString())
    write_run(write_tb, "CartPole-v1", "ppo", 2, [400.0] * 150, 500000)  # seed 2: the runner's, on 2 threads
    os.makedirs("runs/summaries")
    with open("runs/summaries/ppo__CartPole-v1__2__x.json", "w") as f:
        json.dump(
            {
                "script": "ppo.py",
                "args": [],
                "ok": True,
                "tb_dir": "CartPole-v1__ppo__2__1",
                "threads": 2,
                "machine": {"cores": 2, "cpu": "AMD EPYC"},
            },
            f,
        )
    records = runs.collect("runs")
    assert [(r["seed"], r["threads"]) for r in records] == [(1, None), (2, 2)]
    assert records[0]["hours"] == pytest.approx(2.0, abs=0.01)
    assert report.main(["runs", "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    assert (
        "- hours per seed (the runs' processes, each part from its start or resume to its last log, summed, a pause of "
        "more than 120 s without a log left out; the threads run.py gave its last part): ppo.py CartPole-v1: 2.0, 0.0 "
        "(2 threads)\n" in (tmp_path / "out" / "report.md").read_text()
    )
    with open(tmp_path / "out" / "per_seed.csv") as f:
        assert [(row["hours"], row["threads"]) for row in csv.DictReader(f)] == [("2.0", ""), ("0.0", "2")]


def test_report_curves_are_a_panel_of_the_figure_beside_the_published_number(write_tb, tmp_path, capsys):
    """Issue 50's panel: our 10M Breakout runs alone (no peer's runs of that budget here). report.py --curves writes the
    return per tenth of the steps over the seeds; summary.py draws it as one group beside the published 414.66 ± 28.09."""
    from benchmark.tools import summary

    for seed, level in [(1, 380.0), (2, 400.0), (3, 420.0)]:  # a rise to `level`, then `level` for the last 100 games
        returns = np.concatenate([np.linspace(0.0, level, 100), np.full(100, level)])
        write_run(write_tb, "BreakoutNoFrameskip-v4", "ppo_atari-1a2b3c4d", seed, returns, 10_000_000, last_step=9_999_360)
    out = tmp_path / "results" / "breakout_10m"
    assert report.main(["runs", "--out", str(out), "--curves", "--no-plots"]) == 0
    with open(out / "curves.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["window"] for r in rows] == [str(w) for w in range(1, 11)] and {r["group"] for r in rows} == {"ours"}
    assert {(r["script"], r["env_id"], r["seeds"], r["verdict"]) for r in rows} == {
        ("ppo_atari.py", "BreakoutNoFrameskip-v4", "3", "within the published mean ± std")
    }
    last = rows[-1]
    assert (last["start"], last["end"], last["per_seed"]) == ("8999424", "9999360", "380 400 420")
    assert [float(last[k]) for k in ("mean", "min", "max")] == [400.0, 380.0, 420.0]
    md = (out / "report.md").read_text()  # beside CleanRL's, then the other rows of 10M: openai/baselines', CleanRL's older
    assert "| 400.00 ± 16.33 | 380.0, 400.0, 420.0 | 414.66 ± 28.09 | 10M | within | [1] |" in md
    assert (
        "Also published for the same script, env and budget (ours against each):\n\n- ppo_atari.py "
        "BreakoutNoFrameskip-v4 10M: 406.57 ± 31.55 [2] (within), 416.31 ± 43.92 [3] (within)\n"
    ) in md
    assert "\n2. CleanRL docs rl-algorithms/ppo.md, column 'openai/baselines PPO (Huang et al., 2022)'" in md
    # another experiment beside it: its table row takes the next source, the rows below the table the ones after
    write_run(write_tb, "CartPole-v1", "ppo", 1, [495.0] * 150, 500000)
    assert report.main(["runs", "--out", str(tmp_path / "both"), "--no-plots"]) == 0
    both = (tmp_path / "both" / "report.md").read_text()
    assert "| 414.66 ± 28.09 | 10M | within | [1] |" in both and "| 490.04 ± 6.12 | 500k | within | [2] |" in both
    assert "10M: 406.57 ± 31.55 [3] (within), 416.31 ± 43.92 [4] (within)\n" in both
    assert report.main(["runs", "--out", str(tmp_path / "one"), "--no-plots", "--exp-names", "ppo_atari-1a2b3c4d"]) == 0
    assert "CartPole" not in (tmp_path / "one" / "report.md").read_text()
    assert report.main(["runs", "--out", str(tmp_path / "none"), "--exp-names", "ppo_atari-00000000"]) == 2
    assert "--exp-names ppo_atari-00000000; widen those filters" in capsys.readouterr().err
    shutil.rmtree("runs/CartPole-v1__ppo__1__1")
    steps = np.linspace(1, 9_999_360, 200).astype(int)  # write_run's; window 1 is (0, 999936]
    first = np.linspace(0.0, 380.0, 100)[steps[:100] <= 999_936].mean()
    assert float(rows[0]["min"]) == pytest.approx(first)

    (panel,) = summary.summarize(str(tmp_path / "results"), str(tmp_path / "summary.png"), front=None)
    assert panel["title"] == (
        "ppo_atari.py · BreakoutNoFrameskip-v4\n10M steps, the published budget · 3 seeds\nwithin the published mean ± std"
    )
    assert panel["published"] == (1e7, 414.66, 28.09)

    write_run(write_tb, "Pong-v5", "ppo_atari_envpool", 1, [20.0] * 150, 10_000_000)  # a second script and env
    assert report.main(["runs", "--out", str(tmp_path / "two"), "--curves"]) == 2
    assert capsys.readouterr().err.startswith("report.py: error: --curves draws one panel, and the runs are of 2 ")
    assert not (tmp_path / "two").exists()


@pytest.mark.parametrize(
    "finals, seed",
    [
        ([410.0, 380.0, 395.0], "3"),  # the middle one, wherever it stands
        ([400.0, 380.0, 420.0, 390.0], "4"),  # of an even count, the lower of the two middle ones
        ([400.0, 400.0, 380.0], "1"),  # equal returns: the lower seed
        ([7.0], "1"),
    ],
)
def test_the_median_seed_stands_for_the_runs(tmp_path, finals, seed):
    """benchmark/sweeps/breakout_10m.sh ships the agent of this seed (issue 50)."""
    with open(tmp_path / "per_seed.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["seed", "final_return", "run_dir"])
        w.writerows([i + 1, x, f"runs/r{i + 1}"] for i, x in enumerate(finals))
    row = report.median_seed(str(tmp_path / "per_seed.csv"))
    assert (row["seed"], row["run_dir"]) == (seed, f"runs/r{seed}")


def test_the_mujoco_a_run_logged_is_in_its_summary_and_the_reports_table_and_csv(fake, write_tb, tmp_path):
    """Issue 38: MuJoCo's version decides the physics of some envs (Humanoid's and Hopper's changed in MuJoCo 4)."""
    extra = ["--total-timesteps", "1000"]
    assert run.main(["--script", fake, "--env-ids", "Humanoid-v4", "CartPole-v1", "--seeds", "1", "--", *extra]) == 0
    assert [runner_summary(env_id, 1, extra)["mujoco"] for env_id in ("Humanoid-v4", "CartPole-v1")] == ["2.3.3", None]
    write_tb(
        "runs/Humanoid-v4__ppo_continuous_action__2__1",
        {"exp_name": "ppo_continuous_action", "seed": 2, "env_id": "Humanoid-v4", "total_timesteps": 1000, "mujoco": "4.0.0"},
        [600.0] * 100,
        range(10, 1001, 10),
    )
    out = tmp_path / "out"
    assert report.main(["runs", "--out", str(out), "--no-plots"]) == 0
    assert (
        "\n- MuJoCo of the runs: 2.3.3, 4.0.0 (MuJoCo 4 runs Humanoid, HumanoidStandup, Ant and Hopper on other "
        "physics than the published v4 numbers' 2.3.3; that physics: bash scripts/install.sh mujoco-ref)\n"
    ) in (out / "report.md").read_text()
    with open(out / "per_seed.csv") as f:
        assert sorted((r["env_id"], r["seed"], r["mujoco"]) for r in csv.DictReader(f)) == [
            ("CartPole-v1", "1", ""),
            ("Humanoid-v4", "1", "2.3.3"),
            ("Humanoid-v4", "2", "4.0.0"),
        ]


def test_report_writes_by_default_into_the_current_directory_not_the_clone(write_tb, monkeypatch, tmp_path):
    """A sweep run elsewhere leaves the clone as it was: the report is made in the current directory."""
    write_run(write_tb, "CartPole-v1", "ppo", 1, [400.0] * 150, 500000)
    assert report.main(["runs", "--no-plots"]) == 0
    (out,) = [d for d in os.listdir() if d.startswith("report-")]
    assert sorted(os.listdir(out)) == ["per_seed.csv", "report.md"] and not os.path.exists(os.path.join(runs.RESULTS, out))


@pytest.mark.parametrize(
    "case, args, message",
    [
        ("corrupt summary", ["runs"], "runs/summaries/fake__A-v0__1__x.json is not a readable runner summary; delete it"),
        ("summary of something else", ["runs"], "runs/summaries/fake__A-v0__1__x.json is not a readable runner summary"),
        ("", ["runs", "--reference", "nope.csv"], "--reference nope.csv: No such file or directory; give a CSV"),
        ("", ["runs", "--reference", "calls.txt"], "--reference calls.txt has no 'script' column; give a CSV"),
        ("", ["nowhere"], "'nowhere' is not a directory; give the runs/ directory"),
        ("", ["empty"], "no complete TensorBoard runs with charts/episodic_return under 'empty'; give the runs/"),
        (
            "",
            ["runs", "--steps", "7"],
            "none of the 1 runs under 'runs' is of --scripts (any) with --steps 7 and --exp-names (any); widen",
        ),
        # issue 37.6: a NotADirectoryError traceback
        (
            "",
            ["runs", "--out", "calls.txt/report"],
            "--out 'calls.txt/report' cannot be made (Not a directory); give a folder",
        ),
    ],
)
def test_report_stops_with_one_line_naming_the_path_and_the_fix(write_tb, capsys, case, args, message):
    write_run(write_tb, "CartPole-v1", "ppo", 1, [400.0] * 150, 500000)
    os.makedirs("runs/summaries")
    open("calls.txt", "w").close()
    if case:
        with open("runs/summaries/fake__A-v0__1__x.json", "w") as f:
            f.write('{"ok": tr' if case == "corrupt summary" else '{"ok": true}')
    os.makedirs("empty")
    assert report.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"report.py: error: {message}") and err.count("\n") == 1
    assert not [d for d in os.listdir() if d.startswith("report-")]


def test_report_uses_an_event_file_cut_short_up_to_the_cut_and_says_so(write_tb, tmp_path, capsys):
    """Issue 75.5: a run killed while writing leaves its last record cut short, and TensorBoard reads the records before
    the cut without a word. The report uses them and names the file and the step it reached: on stderr, in report.md."""
    write_run(write_tb, "CartPole-v1", "ppo", 1, [400.0] * 150, 500000)
    (path,) = glob.glob("runs/CartPole-v1__ppo__1__1/events.out.tfevents*")
    os.truncate(path, os.path.getsize(path) - 100)  # the last records (charts/SPS, a return or two), the last one in part
    assert report.main(["runs", "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    with open(tmp_path / "out" / "per_seed.csv") as f:
        (row,) = csv.DictReader(f)
    assert int(row["episodes"]) < 150 and int(row["last_step"]) < 500000
    warning = (
        f"report.py: warning: {path} is cut short (a process killed while writing it, or a copy cut short): its records "
        f"up to step {row['last_step']} are used, the rest is lost\n"
    )
    assert warning in capsys.readouterr().err
    assert (
        f"\n- event files cut short (their records before the cut used): {path} at step {row['last_step']}\n"
        in (tmp_path / "out" / "report.md").read_text()
    )


def test_verdicts_and_the_choice_of_published_row():
    rows = reference.load_reference()
    ref = reference.pick_reference(rows, "ppo.py", "CartPole-v1", 500000)
    assert (ref["mean"], ref["std"]) == ("490.04", "6.12")  # CleanRL's own run, not baselines' 497.54 or the old 492.40
    assert reference.verdict(490.04 + 6.12, 500000, ref) == "within"  # the band's edges are inside
    assert reference.verdict(490.04 - 6.12, 500000, ref) == "within"
    assert reference.verdict(496.2, 500000, ref) == "above"
    assert reference.verdict(483.9, 500000, ref) == "below"
    assert reference.verdict(500.0, 100000, ref) == "not comparable: budget differs"
    assert reference.verdict(500.0, 500000, None) == "not comparable: nothing published"
    mc = reference.pick_reference(rows, "ppo.py", "MountainCar-v0", 500000)
    assert reference.verdict(-200.0, 500000, mc) == "within"  # -200.00 +- 0.00
    assert reference.verdict(-199.5, 500000, mc) == "above"
    # PAAC's paper names games and publishes best-of-3 evaluation scores: shown, never judged
    paac = reference.pick_reference(rows, "a2c_paac.py", "BreakoutNoFrameskip-v4", 115000000)
    assert paac["env_id"] == "Breakout" and paac["mean"] == "470.1"
    assert reference.verdict(500.0, 115000000, paac) == "not comparable: published metric is episodic_return_eval_best_of_3"
    assert reference.pick_reference(rows, "ppo_shared.py", "CartPole-v1", 500000) is None
