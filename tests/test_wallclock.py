"""Tests of benchmark/studies/wallclock.py: several experiments' scores per step and per training hour (the PAAC paper's
Figures 3 and 4), on fake runs timed by construction: game i at step 1,000 (i + 1), logged at T0 + step x seconds_per_step
(test_solved.py's runs)."""

import glob

import numpy as np
import pytest
from fakes import PONG, RISE_AT_150, RISE_AT_200, STEPS, T0, last_100_mean, retime

from benchmark.studies import wallclock

SCRIPT = "a2c_paac.py"
ARGS = ["--script", SCRIPT, "--env-id", PONG]  # a command line, not a table of scripts
FAST, SLOW = 0.02, 0.04  # seconds a step: 50 and 25 steps/s


def timed_run(write_tb, root, exp_name, seed, returns, seconds_per_step):
    """A run of a2c_paac.py under `root` still going (300 games of a 10M budget), logging a step every seconds_per_step."""
    run_dir = f"{root}/{PONG}__{exp_name}__{seed}__1"
    hparams = {"exp_name": exp_name, "seed": seed, "env_id": PONG, "total_timesteps": 10_000_000}
    write_tb(run_dir, hparams, returns, STEPS)
    retime(run_dir, T0, seconds_per_step=seconds_per_step)


def two_groups(write_tb):
    """'many envs': seeds 1, 2 under grid/ rising at game 150, at 50 steps/s, beside another experiment there; 'n_e 32':
    seeds 1, 2 under pong/ rising at game 200, at 25 steps/s."""
    for seed in (1, 2):
        timed_run(write_tb, "grid", "a2c_paac-aaaaaaaa", seed, RISE_AT_150, FAST)
        timed_run(write_tb, "grid", "a2c_paac-cccccccc", seed, [-21.0] * 300, FAST)
        timed_run(write_tb, "pong", "a2c_paac-bbbbbbbb", seed, RISE_AT_200, SLOW)
    return ["--group", "many envs=grid:a2c_paac-aaaaaaaa", "--group", "n_e 32=pong"]


def test_a_row_per_group_with_its_steps_per_second_the_steps_and_hours_to_each_goal_and_its_scores(write_tb, capsys):
    groups = two_groups(write_tb)
    assert wallclock.main([*ARGS, *groups, "--goals", "18", "--budget", "250000"]) == 0
    (out,) = glob.glob("wallclock-*")
    md = open(f"{out}/wallclock.md").read()
    assert md in capsys.readouterr().out
    assert "- groups: many envs: grid (a2c_paac-aaaaaaaa); n_e 32: pong (the experiments' flags:" in md
    assert "- budget: the runs read up to step 250,000\n" in md
    # the fast group reaches 18 at game 242 (step 243,000) after 243,000 x 0.02 s = 1.35 hours; its last 100 games up to
    # step 250,000 all won; the slow group's last 100 there half lost (0.00), 18 not reached by the budget
    assert (
        "| group | experiment | seeds | steps/s | step at 18 (median) | hours at 18 (median) | final score (median) | "
        "final score per seed | fall below its best, per seed | fewest steps |\n|---|---|---|---|---|---|---|---|---|---|\n"
        "| many envs | a2c_paac-aaaaaaaa | 1, 2 | 50 | 243,000 | 1.35 | 21.00 | 21.00, 21.00 | 0.00, 0.00 | 250,000 |\n"
        "| n_e 32 | a2c_paac-bbbbbbbb | 1, 2 | 25 | not reached | not reached | 0.00 | 0.00, 0.00 | 0.00, 0.00 | 250,000 |\n"
    ) in md
    # without the budget each run's last step: the slow group reaches 18 at game 292, after 293,000 x 0.04 s
    assert wallclock.main([*ARGS, *groups, "--goals", "18", "0", "--out", "whole"]) == 0
    md = open("whole/wallclock.md").read()
    assert (
        "| n_e 32 | a2c_paac-bbbbbbbb | 1, 2 | 25 | 293,000 | 3.26 | 250,000 | 2.78 | 21.00 | 21.00, 21.00 | 0.00, 0.00 | "
        "300,000 |" in md
    )


def test_a_seed_that_did_not_reach_a_goal_counts_as_never_in_the_median_and_the_fewest_steps_show_a_run_stopped_short(
    write_tb,
):
    for seed, returns in ((1, RISE_AT_150), (2, [-21.0] * 300), (3, RISE_AT_150)):
        timed_run(write_tb, "runs", "a2c_paac-aaaaaaaa", seed, returns, FAST)
    hparams = {"exp_name": "a2c_paac-aaaaaaaa", "seed": 4, "env_id": PONG, "total_timesteps": 10_000_000}
    write_tb(f"runs/{PONG}__a2c_paac-aaaaaaaa__4__1", hparams, [-21.0] * 120, STEPS[:120])  # stopped at step 120,000
    retime(f"runs/{PONG}__a2c_paac-aaaaaaaa__4__1", T0, seconds_per_step=FAST)
    assert wallclock.main([*ARGS, "--group", "a=runs", "--goals", "18", "--out", "o"]) == 0
    # seeds 1, 3 at 243,000, seeds 2, 4 never: the median of four is the mean of 243,000 and never
    row = "| a | a2c_paac-aaaaaaaa | 1, 2, 3, 4 | 50 | not reached | not reached | 0.00 | 21.00, -21.00, 21.00, -21.00 |"
    assert row + " 0.00, 0.00, 0.00, 0.00 | 120,000 |" in open("o/wallclock.md").read()
    # up to step 200,000 seeds 1 and 3 are at 0 (50 of their last 100 games won), seed 4 whole; -21 at every 100th game
    assert wallclock.main([*ARGS, "--group", "a=runs", "--goals", "-21", "--budget", "200000", "--out", "p"]) == 0
    row = "| a | a2c_paac-aaaaaaaa | 1, 2, 3, 4 | 50 | 100,000 | 0.56 | -10.50 | 0.00, -21.00, 0.00, -21.00 |"
    assert row + " 0.00, 0.00, 0.00, 0.00 | 120,000 |" in open("p/wallclock.md").read()


def test_the_figure_draws_each_seeds_score_against_the_steps_and_the_hours_up_to_the_budget(write_tb, monkeypatch):
    figures, draw = [], wallclock.draw
    monkeypatch.setattr(wallclock, "draw", lambda *a, **k: figures.append(draw(*a, **k)) or figures[-1])
    groups = two_groups(write_tb)
    assert wallclock.main([*ARGS, *groups, "--goals", "0", "18", "--budget", "250000", "--out", "o"]) == 0
    assert (
        f"\n![each seed's score against the steps and against the training hours]({PONG}.png)\n"
        in open("o/wallclock.md").read()
    )
    assert glob.glob(f"o/{PONG}.png")
    (fig,) = figures
    by_steps, by_hours = fig.axes
    assert (by_steps.get_xlabel(), by_hours.get_xlabel()) == ("steps (millions)", "training hours")
    for ax in fig.axes:
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert list(lines) == [
            "many envs, seed 1",
            "many envs, seed 2",
            "n_e 32, seed 1",
            "n_e 32, seed 2",
            "goal 0",
            "goal 18",
        ]
        for label, returns, seconds in (("many envs", RISE_AT_150, FAST), ("n_e 32", RISE_AT_200, SLOW)):
            for seed in (1, 2):
                line = lines[f"{label}, seed {seed}"]
                x = STEPS[99:250] / 1e6 if ax is by_steps else STEPS[99:250] * seconds / 3600
                np.testing.assert_allclose(line.get_xdata(), x, rtol=1e-9)  # from the 100th game to the budget
                np.testing.assert_allclose(line.get_ydata(), last_100_mean(returns[:250]), atol=1e-12)
            assert lines[f"{label}, seed 1"].get_color() == lines[f"{label}, seed 2"].get_color()
        assert lines["many envs, seed 1"].get_color() != lines["n_e 32, seed 1"].get_color()
        assert list(lines["goal 18"].get_ydata()) == [18, 18] and lines["goal 18"].get_linestyle() == "--"


def test_where_runs_log_the_policy_lag_each_group_has_the_median_of_its_seeds_mean_lags(write_tb):
    """impala_vtrace.py's runs, a group per correction (the IMPALA paper's Table 2): each seed's mean lag up to the
    budget (solved.py's), the median over the seeds; a run that logs none is left out of its group's median."""
    lags = {("vtrace", 1): [0.5, 1.0], ("vtrace", 2): [1.0, 1.5], ("vtrace", 3): [2.0, 4.0], ("none", 1): None}
    for (correction, seed), values in lags.items():
        exp = f"impala_vtrace-{correction:0>8}"
        extra = None if values is None else {"charts/policy_lag": [(100_000, values[0]), (250_000, values[1])]}
        hparams = {"exp_name": exp, "seed": seed, "env_id": PONG, "total_timesteps": 10_000_000}
        write_tb(f"{correction}/{PONG}__{exp}__{seed}__1", hparams, RISE_AT_150, STEPS, extra=extra)
    argv = ["--script", "impala_vtrace.py", "--env-id", PONG, "--group", "V-trace=vtrace", "--group", "none=none"]
    assert wallclock.main([*argv, "--goals", "18", "--out", "o"]) == 0
    md = open("o/wallclock.md").read()
    assert "| final score (median) | policy lag (median) | final score per seed | fall below its best, per seed |" in md
    # the seeds' means 0.75, 1.25, 3.00: their median 1.25; up to step 200,000, their first values: 1.00
    assert (
        "| V-trace | impala_vtrace-00vtrace | 1, 2, 3 |" in md
        and "| 21.00 | 1.25 | 21.00, 21.00, 21.00 | 0.00, 0.00, 0.00 |" in md
    )
    assert "| none | impala_vtrace-0000none | 1 |" in md and "| 21.00 | n/a | 21.00 | 0.00 | 300,000 |" in md
    assert wallclock.main([*argv, "--goals", "18", "--budget", "200000", "--out", "p"]) == 0
    assert "| 0.00 | 1.00 | 0.00, 0.00, 0.00 | 0.00, 0.00, 0.00 | 200,000 |" in open("p/wallclock.md").read()
    assert wallclock.main([*ARGS, "--group", "a=vtrace", "--out", "q"]) == 2  # the runs are impala_vtrace.py's


def test_each_seeds_fall_below_its_best_shows_a_run_that_collapsed(write_tb):
    """Seed 1 rises to 21 (games 100-199 won) then loses every game: its score falls from 21 to -21 by game 299; seed 2
    rises, loses games 220-239 (its last 100 games' mean from 21 down to 21 - 20 x 0.42 = 12.6 at game 239) and wins the
    rest (12.6 at game 299); seed 3 never falls. Up to step 230,000 (game 229) seed 1 has fallen 30 x 0.42 = 12.6, seed 2
    10 x 0.42 = 4.2."""
    collapse = [-21.0] * 100 + [21.0] * 100 + [-21.0] * 100
    dip = [-21.0] * 100 + [21.0] * 120 + [-21.0] * 20 + [21.0] * 60
    for seed, returns in ((1, collapse), (2, dip), (3, RISE_AT_150)):
        timed_run(write_tb, "runs", "a2c_paac-aaaaaaaa", seed, returns, FAST)
    assert wallclock.main([*ARGS, "--group", "a=runs", "--goals", "18", "--out", "o"]) == 0
    assert "| 12.60 | -21.00, 12.60, 21.00 | 42.00, 8.40, 0.00 | 300,000 |" in open("o/wallclock.md").read()
    assert wallclock.main([*ARGS, "--group", "a=runs", "--goals", "18", "--budget", "230000", "--out", "p"]) == 0
    assert "| 8.40, 16.80, 12.60 | 12.60, 4.20, 0.00 | 230,000 |" in open("p/wallclock.md").read()


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("n_e 16=runs/", ("n_e 16", "runs/", None)),
        ("a=runs:a2c_paac-1a2b3c4d", ("a", "runs", "a2c_paac-1a2b3c4d")),
        ("a=/data/x:y/runs", ("a", "/data/x:y/runs", None)),  # a path holding a ':' and no experiment
        (" b = d:e", ("b", " d", "e")),
    ],
)
def test_a_group_is_a_label_a_runs_dir_and_maybe_an_experiment(text, parsed):
    assert wallclock.parse_group(text) == parsed


@pytest.mark.parametrize(
    "args, message",
    [
        (["--group", "grid"], "--group 'grid' is not LABEL=RUNS_DIR[:EXP_NAME]; give e.g. --group 'n_e 16=runs/'"),
        (["--group", "=grid"], "--group '=grid' is not LABEL=RUNS_DIR[:EXP_NAME]"),
        (["--group", "a="], "--group 'a=' is not LABEL=RUNS_DIR[:EXP_NAME]"),
        (["--group", "a=pong", "--group", "a=grid"], "--group label 'a' is given twice; give each group its own label"),
        (["--group", "a=nowhere"], "'nowhere' is not a directory; give the runs/ directory"),
        (["--group", "a=grid"], "the runs of a2c_paac.py on PongNoFrameskip-v4 are of 2 experiments (a2c_paac-aaaaaaaa, "),
        (["--group", "a=grid:a2c_paac-00000000"], "no run of a2c_paac.py on PongNoFrameskip-v4 with charts/episodic_return"),
        (["--group", "a=pong", "--goals", "nan"], "--goals 'nan' is not a finite number"),
        (["--group", "a=pong", "--budget", "0"], "--budget 0 is below 1; give the step to read the runs up to"),
        (["--group", "a=pong", "--budget", "6M"], "--budget '6M' is not a finite number; give numbers such as --budget 600"),
    ],
)
def test_wallclock_stops_with_one_line(write_tb, capsys, args, message):
    two_groups(write_tb)
    assert wallclock.main([*ARGS, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"wallclock.py: error: {message}") and err.count("\n") == 1, err
    if "2 experiments" in message:
        assert err.rstrip().endswith("name one as --group 'LABEL=RUNS_DIR:EXP_NAME'")
    assert not glob.glob("wallclock-*") and not glob.glob("**/*.png", recursive=True)
