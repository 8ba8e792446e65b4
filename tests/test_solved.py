"""Tests of benchmark/studies/solved.py: the step and the training hours at which the mean of the last 100 games reached
each goal, the final score up to a budget, the median seed, the figure (read through the lines it drew), and what it
refuses; on fake runs whose answers are known by construction (games every 1,000 steps: game i at step 1,000 (i + 1))."""

import glob
import logging
import math

import numpy as np
import pytest
from fakes import HOUR, PONG, RISE_AT_150, RISE_AT_200, STEPS, T0, last_100_mean, retime, write_run
from PIL import Image

from benchmark import runs
from benchmark.studies import solved

SCRIPT = "a2c_paac.py"
ARGS = ["--script", SCRIPT, "--env-id", PONG]  # a command line, not a table of scripts


def pong_run(write_tb, seed, returns, exp_name="a2c_paac-1a2b3c4d", steps=STEPS, purge_step=None):
    """A run of a2c_paac.py (or a part of one: with purge_step, a resume's) still going: 300 games of a 10M budget."""
    hparams = {"exp_name": exp_name, "seed": seed, "env_id": PONG, "total_timesteps": 10_000_000}
    write_tb(f"runs/{PONG}__{exp_name}__{seed}__1", hparams, returns, steps, purge_step=purge_step)


def resumed_run(write_tb):
    """Seed 1 trained 2 hours (games 0-199, to step 200,000), was killed, and 50 hours later resumed from its checkpoint
    at step 150,000 for 1.5 hours (games 150-299). The first part's games 150-199 won (21) where the resume lost them
    (-21): kept, as TensorBoard keeps the run, the games are RISE_AT_200's."""
    pong_run(write_tb, 1, [-21.0] * 150 + [21.0] * 50, steps=STEPS[:200])
    retime(f"runs/{PONG}__a2c_paac-1a2b3c4d__1__1", T0)
    pong_run(write_tb, 1, [-21.0] * 50 + [21.0] * 100, steps=STEPS[150:], purge_step=150_001)
    retime(f"runs/{PONG}__a2c_paac-1a2b3c4d__1__1", T0 + 52 * HOUR, base_step=150_000)


def test_the_first_step_at_which_the_last_100_games_reach_each_goal_and_the_median_seed(write_tb, capsys):
    # seed 1's first 5 games score 21, a mean of 21 over fewer than 100 games: not yet a score that reaches a goal
    pong_run(write_tb, 1, [21.0] * 5 + RISE_AT_150[5:])
    pong_run(write_tb, 2, [10.0] * 300)  # never reaches 18
    pong_run(write_tb, 3, RISE_AT_200)
    write_run(write_tb, "BreakoutNoFrameskip-v4", "a2c_paac-1a2b3c4d", 4, [400.0] * 300, 10_000_000)  # another game
    assert solved.main(["runs", *ARGS]) == 0  # runs still going (300k of 10M steps) count, as far as they got
    (out,) = glob.glob("solved-*")  # as report.py's report-<date>, in the current directory
    md = open(f"{out}/solved.md").read()
    assert md in capsys.readouterr().out
    assert "\n- command: `python -m benchmark.studies.solved runs --script a2c_paac.py --env-id PongNoFrameskip-v4`\n" in md
    assert "\n- experiment: a2c_paac-1a2b3c4d, seeds 1, 2, 3; their budget (--total-timesteps): 10,000,000\n" in md
    assert "- machine of the runs: unknown (of this report: " in md
    head = "| seed | step at 18 | hours at 18 | step at 20 | hours at 20 | final score | steps | hours | games |"
    assert (
        f"\n{head}\n|---|---|---|---|---|---|---|---|---|\n"
        "| 1 | 243,000 | 0.00 | 248,000 | 0.00 | 21.00 | 300,000 | 0.00 | 300 |\n"
        "| 2 | not reached | not reached | not reached | not reached | 10.00 | 300,000 | 0.00 | 300 |\n"
        "| 3 | 293,000 | 0.00 | 298,000 | 0.00 | 21.00 | 300,000 | 0.00 | 300 |\n"
        "| median | 293,000 | 0.00 | 298,000 | 0.00 | 21.00 | 300,000 | 0.00 | 300 |\n"
        "| mean | 268,000 (2 of 3) | 0.00 (2 of 3) | 273,000 (2 of 3) | 0.00 (2 of 3) | 17.33 | 300,000 | 0.00 | 300 |\n"
        "\n- 18: reached by 2 of 3 seeds\n- 20: reached by 2 of 3 seeds\n"
        f"- the median seed by the final score, the one to ship: seed 1 (21.00), runs/{PONG}__a2c_paac-1a2b3c4d__1__1\n"
    ) in md  # seeds 1 and 3 tie at 21: the lower seed, as report.py's median_seed

    # a score at a goal reaches it: 0 is 50 games won of 100, 16.8 is 90 won; seed 2's 10s reach 0 at its 100th game
    assert solved.main(["runs", *ARGS, "--goals", "0", "16.8", "--out", "other"]) == 0
    md = open("other/solved.md").read()
    assert "| seed | step at 0 | hours at 0 | step at 16.8 | hours at 16.8 | final score |" in md
    assert "\n| 1 | 200,000 | 0.00 | 240,000 | 0.00 | 21.00 |" in md and "\n| 2 | 100,000 | 0.00 | not reached |" in md
    assert "\n| 3 | 250,000 | 0.00 | 290,000 | 0.00 | 21.00 |" in md
    assert "\n- 0: reached by 3 of 3 seeds\n- 16.8: reached by 2 of 3 seeds\n" in md


def test_a_resumed_runs_hours_leave_out_the_gap_and_its_redone_steps_are_counted_once(write_tb, tmp_path, caplog):
    resumed_run(write_tb)
    with caplog.at_level(logging.WARNING):
        (rec,) = runs.collect("runs", unfinished=True)
    assert caplog.records == []  # TensorBoard's warning of the drop ("likely caused by a TensorFlow restart") not shown
    assert rec["episodes"] == 300 and rec["steps"] == list(STEPS)  # the first part's games 150-199 dropped
    row = solved.seed_result(rec, [18.0, 20.0])
    # 1.5 hours of the first part (to its last kept game, at step 150,000), then the resume's, from its start
    assert row["reached"][18.0] == (293_000, pytest.approx(1.5 + 143_000 * 0.036 / HOUR))
    assert row["reached"][20.0] == (298_000, pytest.approx(1.5 + 148_000 * 0.036 / HOUR))
    assert (row["final"], row["steps"], row["games"]) == (21.0, 300_000, 300)
    assert row["hours"] == pytest.approx(3.0)
    assert rec["hours"] == pytest.approx(3.5)  # report.py's: each part whole (the redone steps' half hour in)
    assert solved.main(["runs", *ARGS, "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "solved.md").read_text()
    assert "\n| 1 | 293,000 | 2.93 | 298,000 | 2.98 | 21.00 | 300,000 | 3.00 | 300 |\n" in md
    assert "(report.py's hours, each part whole: seed 1 3.50)\n" in md


def test_a_pause_of_the_process_is_left_out_of_its_hours(write_tb, tmp_path):
    """Seed 1 stopped 2 hours after step 100,000 (SIGSTOP: no event logged), seed 2 idle 60 s there (no pause: 36 + 60 s
    between its two events, at most runs.PAUSE = 120 s), both at 100k steps an hour (a game every 36 s), RISE_AT_150:
    18 at step 243,000."""
    for seed, seconds in ((1, 2 * HOUR), (2, 60.0)):
        pong_run(write_tb, seed, RISE_AT_150)
        retime(f"runs/{PONG}__a2c_paac-1a2b3c4d__{seed}__1", T0, stop=(100_000, seconds))
    assert solved.main(["runs", *ARGS, "--goals", "18", "--out", str(tmp_path / "o")]) == 0
    md = (tmp_path / "o" / "solved.md").read_text()
    # 2.43 h, not 4.43 (less the 36 s between the events around the stop, left out with it: the scripts log every second)
    assert "| 1 | 243,000 | 2.42 | 21.00 | 300,000 | 2.99 | 300 |" in md
    assert "| 2 | 243,000 | 2.45 | 21.00 | 300,000 | 3.02 | 300 |" in md  # the 60 s counted: 2.43 + 0.017
    assert "seed 1 2.99, seed 2 3.02)" in md  # report.py's hours leave the pause out too


def test_each_part_counts_to_its_last_event_that_tensorboard_keeps(write_tb):
    """Hours per part (a review found a part cut at its last game, leaving out what it logged after it): seed 1 paused 2
    hours after step 100,000, stopped at 200,000 and resumed 56 hours later from its checkpoint at 150,000; seed 2 the
    same, resumed from 100,000, so that none of its stretch after the pause is kept. At 100k steps an hour."""
    # per seed: (the resume's step, the last kept event of the stretch after the pause, the hours of the whole run)
    for seed, resumed_at, kept, hours in ((1, 150_000, 3.5, 1.0 + 0.49 + 1.5), (2, 100_000, 3.01, 1.0 + 0.0 + 2.0)):
        run = f"runs/{PONG}__a2c_paac-1a2b3c4d__{seed}__1"
        pong_run(write_tb, seed, [-21.0] * 200, steps=STEPS[:200])
        retime(run, T0, stop=(100_000, 2 * HOUR))
        games = (300_000 - resumed_at) // 1000
        pong_run(write_tb, seed, [21.0] * games, steps=STEPS[300 - games :], purge_step=resumed_at + 1)
        retime(run, T0 + 60 * HOUR, base_step=resumed_at)
        spans = runs.part_spans(run)
        # (first, last, last kept), in hours: to the pause, after it to the stop, then the resume to step 300,000
        end = 60.0 + (300_000 - resumed_at) / 100_000
        assert [tuple(round((t - T0) / HOUR, 2) for t in span) for span in spans] == [
            (0.0, 1.0, 1.0),
            (3.01, 4.0, kept),
            (60.0, end, end),
        ]
        assert solved.training_hours(spans, [], [T0 + 100 * HOUR])[0] == pytest.approx(hours, abs=1e-3)


def test_the_median_of_an_even_count_is_the_mean_of_its_middle_two_and_a_seed_that_never_reached_counts_as_never():
    """summary_cells (a review: no test told the middle two's mean from the upper or lower one): the steps to a goal."""
    rows = [{"at": v} for v in (100.0, 300.0, 200.0, 900.0)]
    assert solved.summary_cells(rows, lambda row: row["at"], solved.steps_cell) == ("250", "375")
    rows[3]["at"] = None  # never: above every finite one, so the median is still 250; the mean is of the three, "3 of 4"
    assert solved.summary_cells(rows, lambda row: row["at"], solved.steps_cell) == ("250", "200 (3 of 4)")
    rows[1]["at"] = None  # two never: the middle two are 200 and never
    assert solved.summary_cells(rows, lambda row: row["at"], solved.steps_cell)[0] == solved.NOT_REACHED
    # leave_out (the policy lag): the seeds with a value alone, the median's count named too
    assert solved.summary_cells(rows, lambda row: row["at"], solved.lag_cell, True) == ("150.00 (2 of 4)", "150.00 (2 of 4)")


def test_a_budget_reads_the_runs_up_to_that_step(write_tb, tmp_path):
    resumed_run(write_tb)
    assert solved.main(["runs", *ARGS, "--budget", "250000", "--out", str(tmp_path / "cut")]) == 0
    md = (tmp_path / "cut" / "solved.md").read_text()
    # games 0-249: 18 comes at game 292, after the budget; the last 100 games are 50 lost and 50 won
    assert "\n| 1 | not reached | not reached | not reached | not reached | 0.00 | 250,000 | 2.50 | 250 |\n" in md
    assert "\n- budget: the runs read up to step 250,000\n" in md
    assert solved.main(["runs", *ARGS, "--budget", "2e7", "--out", str(tmp_path / "whole")]) == 0  # beyond its end
    assert (
        "\n| 1 | 293,000 | 2.93 | 298,000 | 2.98 | 21.00 | 300,000 | 3.00 | 300 |\n"
        in (tmp_path / "whole" / "solved.md").read_text()
    )


def test_window_gives_each_seeds_mean_return_per_window_up_to_the_budget(write_tb, tmp_path):
    pong_run(write_tb, 1, RISE_AT_150)
    pong_run(write_tb, 2, RISE_AT_200)
    assert solved.main(["runs", *ARGS, "--window", "100000", "--out", str(tmp_path / "w")]) == 0
    md = (tmp_path / "w" / "solved.md").read_text()
    expected = []  # by hand: game i at step 1,000 (i + 1), so window k holds games 100 k .. 100 k + 99
    for k in range(3):
        cells = [f"{np.mean(returns[100 * k : 100 * (k + 1)]):.2f} (100)" for returns in (RISE_AT_150, RISE_AT_200)]
        expected.append(f"| {k / 10:g}M-{(k + 1) / 10:g}M | " + " | ".join(cells) + " |")
    assert "\n| steps | seed 1 | seed 2 |\n|---|---|---|\n" + "\n".join(expected) + "\n" in md
    assert expected[1] == "| 0.1M-0.2M | 0.00 (100) | -21.00 (100) |"  # seed 1 won half of them, seed 2 none
    # up to a budget: games 0-249, the last window holds 50
    assert solved.main(["runs", *ARGS, "--window", "100000", "--budget", "250000", "--out", str(tmp_path / "b")]) == 0
    assert "\n| 0.2M-0.3M | 21.00 (50) | 21.00 (50) |\n" in (tmp_path / "b" / "solved.md").read_text()
    assert solved.main(["runs", *ARGS, "--out", str(tmp_path / "n")]) == 0
    assert "| steps | seed 1 |" not in (tmp_path / "n" / "solved.md").read_text()


def drawn_figures(monkeypatch):
    """The Figures solved.main draws, as it draws them (solved.draw wrapped, not replaced)."""
    figures, draw = [], solved.draw
    monkeypatch.setattr(solved, "draw", lambda *a, **k: figures.append(draw(*a, **k)) or figures[-1])
    return figures


def lines_of(fig):
    (ax,) = fig.axes
    return {line.get_label(): line for line in ax.get_lines()}


def test_the_figure_is_written_beside_solved_md_which_links_it(write_tb, tmp_path):
    pong_run(write_tb, 1, RISE_AT_150)
    assert solved.main(["runs", *ARGS, "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "solved.md").read_text()
    assert f"\n\n![each seed's mean of the last 100 games against the steps, with the goals]({PONG}.png)\n" in md
    with Image.open(tmp_path / "out" / f"{PONG}.png") as png:  # beside solved.md, as the relative link reads it
        assert png.format == "PNG" and png.size == (880, 528)  # 8 x 4.8 inches at 110 dpi


def test_the_figure_draws_each_seeds_running_score_the_goals_the_budget_and_the_published_score(
    write_tb, tmp_path, monkeypatch
):
    figures = drawn_figures(monkeypatch)
    games = {1: [21.0] * 5 + RISE_AT_150[5:], 2: list(np.linspace(-21, 21, 300)), 3: RISE_AT_200}
    for seed, returns in games.items():
        pong_run(write_tb, seed, returns)
    pong_run(write_tb, 4, [21.0] * 99, steps=STEPS[:99])  # 99 games: no score yet, a line without points
    published = ["--published", "20.6", "--published-label", "the PAAC paper (115M steps, best of 3 agents)"]
    argv = ["runs", *ARGS, "--goals", "0", "16.8", "--budget", "250000", *published, "--out", str(tmp_path / "a")]
    assert solved.main(argv) == 0
    # the command as a shell takes it back: the label's spaces quoted
    assert (
        "--published-label 'the PAAC paper (115M steps, best of 3 agents)' --out" in (tmp_path / "a" / "solved.md").read_text()
    )
    (fig,) = figures
    (ax,) = fig.axes
    assert ax.get_title() == "a2c_paac.py on PongNoFrameskip-v4: the mean of the last 100 games, per seed"
    assert ax.get_xlabel() == "steps (millions)"
    lines = lines_of(fig)
    assert list(lines) == [
        "seed 1",
        "seed 2",
        "seed 3",
        "seed 4",
        "goal 0",
        "goal 16.8",
        "the PAAC paper (115M steps, best of 3 agents): 20.6",
        "--budget 0.25M steps",
    ]
    for seed, returns in games.items():  # the whole run, past the budget: from the 100th game (step 100,000) on
        np.testing.assert_allclose(lines[f"seed {seed}"].get_xdata(), STEPS[99:] / 1e6)
        np.testing.assert_allclose(lines[f"seed {seed}"].get_ydata(), last_100_mean(returns), atol=1e-12)
        assert lines[f"seed {seed}"].get_linestyle() == "-"
    assert len(lines["seed 4"].get_xdata()) == len(lines["seed 4"].get_ydata()) == 0
    for goal in (0.0, 16.8):
        assert list(lines[f"goal {goal:g}"].get_ydata()) == [goal, goal]
        assert lines[f"goal {goal:g}"].get_linestyle() == "--"
    assert list(lines["the PAAC paper (115M steps, best of 3 agents): 20.6"].get_ydata()) == [20.6, 20.6]
    assert list(lines["--budget 0.25M steps"].get_xdata()) == [0.25, 0.25]  # vertical, in millions of steps
    assert lines["--budget 0.25M steps"].get_linestyle() == ":"
    md = (tmp_path / "a" / "solved.md").read_text()
    assert f"with the goals, the budget, the published score]({PONG}.png)\n" in md
    assert (tmp_path / "a" / f"{PONG}.png").exists()

    # without --budget no vertical line; --published without a label: "published"
    assert solved.main(["runs", *ARGS, "--published", "-3.5", "--out", str(tmp_path / "b")]) == 0
    assert list(lines_of(figures[-1])) == ["seed 1", "seed 2", "seed 3", "seed 4", "goal 18", "goal 20", "published: -3.5"]
    assert list(lines_of(figures[-1])["published: -3.5"].get_ydata()) == [-3.5, -3.5]
    assert solved.main(["runs", *ARGS, "--out", str(tmp_path / "c")]) == 0  # nor without --published
    assert list(lines_of(figures[-1])) == ["seed 1", "seed 2", "seed 3", "seed 4", "goal 18", "goal 20"]


# ---- the policy lag (impala_vtrace.py's charts/policy_lag) ------------------------------------------------------

IMPALA_SCRIPT = "impala_vtrace.py"
IMPALA = ["--script", IMPALA_SCRIPT, "--env-id", PONG]  # a command line, not a table of scripts
LAG_TAG = "charts/policy_lag"
UPDATES = 2500 * np.arange(1, 121)  # a learner update every 2,500 steps, to step 300,000: one lag each


def impala_run(write_tb, seed, lags, steps=STEPS, returns=RISE_AT_200, purge_step=None):
    """A run of impala_vtrace.py (lags: [(step, value)], its charts/policy_lag; None: a run that logs none)."""
    hparams = {"exp_name": "impala_vtrace-1a2b3c4d", "seed": seed, "env_id": PONG, "total_timesteps": 10_000_000}
    extra = None if lags is None else {LAG_TAG: lags}
    write_tb(f"runs/{PONG}__impala_vtrace-1a2b3c4d__{seed}__1", hparams, returns, steps, purge_step=purge_step, extra=extra)


def some_lags(seed, updates=UPDATES):
    """[(step, lag)] of known values, eighths (exact in the float32 that TensorBoard keeps)."""
    return [(int(s), v / 8) for s, v in zip(updates, np.random.default_rng(seed).integers(0, 33, len(updates)))]


def mean_up_to(lags, budget=math.inf):
    """The mean of the lags logged at steps at or before the budget, by a sum over a count, not solved.py's way."""
    kept = [v for s, v in lags if s <= budget]
    return sum(kept) / len(kept)


def table_lines(md):
    """solved.md's table lines by their first cell ("seed", a seed, "median", "mean")."""
    return {line.split(" | ")[0][2:]: line for line in md.splitlines() if line.startswith("| ") and " | " in line}


def test_the_policy_lag_is_the_mean_of_the_runs_logged_values_up_to_the_budget(write_tb, tmp_path):
    lags = {seed: some_lags(seed) for seed in (1, 2, 3)}
    for seed, points in lags.items():
        impala_run(write_tb, seed, points)
    records = runs.collect("runs", unfinished=True)
    for budget in (None, 250_000, 251_000, 2_500):  # at a logged step, between two, at the first
        for rec in records:
            row = solved.seed_result(rec, [18.0], budget)
            assert row["logs_lag"] is True
            assert row["policy_lag"] == pytest.approx(mean_up_to(lags[rec["seed"]], budget or math.inf), abs=1e-12)
    assert mean_up_to(lags[1], 250_000) != mean_up_to(lags[1], 247_500) != mean_up_to(lags[1])  # the budget matters

    for budget in (None, 250_000):
        out = tmp_path / f"at-{budget}"
        assert solved.main(["runs", *IMPALA, *(["--budget", str(budget)] if budget else []), "--out", str(out)]) == 0
        md = (out / "solved.md").read_text()
        assert "| final score | steps | hours | games | policy lag |\n|---|---|---|---|---|---|---|---|---|---|\n" in md
        expected = {seed: mean_up_to(points, budget or math.inf) for seed, points in lags.items()}
        lines = table_lines(md)
        for seed, lag in expected.items():
            assert lines[str(seed)].endswith(f" | {lag:.2f} |")
        assert lines["median"].endswith(f" | {sorted(expected.values())[1]:.2f} |")
        assert lines["mean"].endswith(f" | {sum(expected.values()) / 3:.2f} |")
        assert (
            "\n- policy lag: the mean of the run's logged `charts/policy_lag` values up to the budget (impala_vtrace.py "
            "logs one per learner update: the learner updates between the weights that sampled a step and the update "
            "that consumes it, averaged over the batch); n/a: a run that logs none there\n"
        ) in md

    # a budget before the first update: the runs log the tag, so the column stays, each "n/a"
    assert solved.main(["runs", *IMPALA, "--budget", "2000", "--out", str(tmp_path / "early")]) == 0
    lines = table_lines((tmp_path / "early" / "solved.md").read_text())
    assert lines["seed"].endswith(" | games | policy lag |")
    assert all(lines[key].endswith(" | n/a |") for key in ("1", "2", "3", "median", "mean"))


def test_a_resumed_runs_policy_lag_counts_each_step_once_as_tensorboard_keeps_it(write_tb):
    # the first part logged lag 4 to step 200,000; the resume from step 150,000 redid steps 152,500-200,000 with lag 1
    impala_run(write_tb, 1, [(int(s), 4.0) for s in UPDATES[:80]], steps=STEPS[:200], returns=RISE_AT_200[:200])
    retime(f"runs/{PONG}__impala_vtrace-1a2b3c4d__1__1", T0)
    impala_run(
        write_tb, 1, [(int(s), 1.0) for s in UPDATES[60:]], steps=STEPS[150:], returns=RISE_AT_200[150:], purge_step=150_001
    )
    retime(f"runs/{PONG}__impala_vtrace-1a2b3c4d__1__1", T0 + 52 * HOUR, base_step=150_000)
    (rec,) = runs.collect("runs", unfinished=True)
    assert solved.seed_result(rec, [18.0])["policy_lag"] == pytest.approx((60 * 4.0 + 60 * 1.0) / 120)  # not 2.71
    assert solved.seed_result(rec, [18.0], 175_000)["policy_lag"] == pytest.approx((60 * 4.0 + 10 * 1.0) / 70)


def test_runs_that_log_no_policy_lag_have_no_column(write_tb, tmp_path):
    for seed in (1, 2):
        pong_run(write_tb, seed, RISE_AT_200)  # a2c_paac.py's: no charts/policy_lag
    (rec, _) = runs.collect("runs", unfinished=True)
    assert solved.seed_result(rec, [18.0])["logs_lag"] is False
    assert solved.main(["runs", *ARGS, "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "solved.md").read_text()
    assert "policy lag" not in md and "policy_lag" not in md and "n/a" not in md
    assert "| hours | games |\n|---|---|---|---|---|---|---|---|---|\n" in md


def test_a_run_without_the_policy_lag_beside_runs_with_it_shows_n_a(write_tb, tmp_path):
    impala_run(write_tb, 1, some_lags(1))
    impala_run(write_tb, 2, None)  # logs no charts/policy_lag
    impala_run(write_tb, 3, some_lags(3, UPDATES[UPDATES > 250_000]))  # logs it, but only after the budget
    impala_run(write_tb, 4, some_lags(4))
    assert solved.main(["runs", *IMPALA, "--budget", "250000", "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "solved.md").read_text()
    lines = table_lines(md)
    assert lines["seed"].endswith(" | games | policy lag |")
    lag1, lag4 = mean_up_to(some_lags(1), 250_000), mean_up_to(some_lags(4), 250_000)
    assert lines["1"].endswith(f" | 250 | {lag1:.2f} |")
    assert lines["2"].endswith(" | 250 | n/a |") and lines["3"].endswith(" | 250 | n/a |")
    assert lines["4"].endswith(f" | 250 | {lag4:.2f} |")
    # the median and the mean of the seeds with one, as the mean of a goal's column is of the seeds that reached it
    assert lines["median"].endswith(f" | {(lag1 + lag4) / 2:.2f} (2 of 4) |")
    assert lines["mean"].endswith(f" | {(lag1 + lag4) / 2:.2f} (2 of 4) |")

    # without the budget seed 3's lags count
    assert solved.main(["runs", *IMPALA, "--out", str(tmp_path / "whole")]) == 0
    md = (tmp_path / "whole" / "solved.md").read_text()
    assert f" | {mean_up_to(some_lags(3, UPDATES[UPDATES > 250_000])):.2f} |\n| 4 | " in md


@pytest.mark.parametrize(
    "args, message",
    [
        (["runs", "--script", "ppo_atari.py", "--env-id", PONG], f"no run of ppo_atari.py on {PONG} with charts/episodic"),
        (["runs", "--script", "a2c_paac.py", "--env-id", "Breakout-v5"], "no run of a2c_paac.py on Breakout-v5 with "),
        (["runs", *ARGS, "--exp-names", "a2c_paac-00000000"], f"no run of a2c_paac.py on {PONG} with charts/episodic_retur"),
        (["runs", *ARGS], "the runs of a2c_paac.py on PongNoFrameskip-v4 are of 2 experiments (a2c_paac-1a2b3c4d, a2c_p"),
        (["nowhere", *ARGS], "'nowhere' is not a directory; give the runs/ directory"),
        (["runs", *ARGS, "--goals", "18", "nan"], "--goals 'nan' is not a finite number; give numbers such as --goals 18 20"),
        (["runs", *ARGS, "--goals", "inf"], "--goals 'inf' is not a finite number"),
        (["runs", *ARGS, "--goals", "solved"], "--goals 'solved' is not a finite number"),
        (["runs", *ARGS, "--budget", "0.5"], "--budget 0.5 is below 1; give the step to read the runs up to"),
        (["runs", *ARGS, "--budget", "-3"], "--budget -3 is below 1"),
        (["runs", *ARGS, "--budget", "12M"], "--budget '12M' is not a finite number; give numbers such as --budget 1200"),
        (["runs", *ARGS, "--window", "0"], "--window 0 is below 1; give the steps of a window, e.g. --window 500000"),
        (["runs", *ARGS, "--window", "half"], "--window 'half' is not a finite number; give numbers such as --window 500000"),
        (
            ["runs", *ARGS, "--published", "nan"],
            "--published 'nan' is not a finite number; give numbers such as --published 20.6",
        ),
        (["runs", *ARGS, "--published=-inf"], "--published '-inf' is not a finite number"),
        (["runs", *ARGS, "--published", "20.6/21"], "--published '20.6/21' is not a finite number"),
        (["runs", *ARGS, "--published-label", "PAAC"], "--published-label 'PAAC' needs --published, the score it names"),
    ],
)
def test_solved_stops_with_one_line(write_tb, capsys, args, message):
    pong_run(write_tb, 1, RISE_AT_200)
    pong_run(write_tb, 1, RISE_AT_200, exp_name="a2c_paac-99999999")  # the same seed with other flags
    if "--exp-names" not in args and "2 experiments" not in message:
        args = [*args, "--exp-names", "a2c_paac-1a2b3c4d"]
    assert solved.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"solved.py: error: {message}") and err.count("\n") == 1, err
    assert not glob.glob("solved-*") and not glob.glob("**/*.png", recursive=True)
