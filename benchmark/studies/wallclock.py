"""Several experiments' scores against the steps and against the training hours, side by side: the PAAC paper's Figures 3
and 4 (Clemente et al. 2017: with n_e from 16 to 256 environments the score per step is alike, and a larger n_e gets
there sooner in wall-clock time), for the runs of any one script on one game.

Run:   python -m benchmark.studies.wallclock --script a2c_paac.py --env-id PongNoFrameskip-v4 \\
           --group "n_e 16=runs/:a2c_paac-1a2b3c4d" --group "n_e 32=../pong/runs/" ... [--goals -15 0] [--budget 6000000]
           [--out DIR]

Each --group is LABEL=RUNS_DIR[:EXP_NAME]: the runs of that experiment (run.py's <stem>-<args hash>) under that runs/
directory, found as solved.py finds them (one a seed; a run still going, or stopped short, counts as far as it got); the
experiment may be left out where the directory holds one of the script on the game. Each seed is read as solved.py
reads it, up to --budget (default: each run's last step): the first step and the training hours at which the mean of its
last 100 games reached each goal, its final score (the mean of its last 100 games), its steps and hours.

Writes into --out (default: wallclock-<date>/ in the current directory):
- wallclock.md: the command, the date, the machines, and a row per group: its experiment and seeds, the steps per
  second (each seed's steps over its training hours, the mean over the seeds), the median over the seeds of each goal's
  step and hours (a seed that did not reach it counts as never) and of the final score, each seed's final score and the
  most its score fell below the best it had reached before (a collapse: the PAAC paper's runs that diverged, the IMPALA
  paper's stability under policy lag), and the fewest steps a seed reached (below the budget: a run stopped short, or
  still going); where runs log charts/policy_lag (impala_vtrace.py: e.g. the IMPALA paper's Table 2, a group per
  correction and replay setting), the median over the seeds of each one's mean lag up to the budget. Hours are
  solved.py's: the time the run's processes trained (a stop of the process, SIGSTOP or Ctrl-Z, left out), so groups
  compare fairly only when their runs shared the machine alike;
- <env id>.png: two panels, the score (the mean of the last 100 games, from the 100th game on, up to the budget) of
  each seed (a thin line, the group's colour) against the steps in millions and against the training hours, with a
  dashed line at each goal.
Bad input (a --group not LABEL=DIR, two groups of one label, a directory without the runs, a goal or budget that is not a
finite number) stops it with one line (exit status 2).
"""

import argparse
import os
import sys
import time

import numpy as np

from benchmark.cli import ConfigError, make_out_dir, one_line_errors
from benchmark.runs import FINAL_WINDOW, report_head
from benchmark.studies import solved

TOOL = "wallclock.py"


def parse_group(text):
    """(label, runs dir, exp name or None) of LABEL=RUNS_DIR[:EXP_NAME]."""
    label, eq, where = text.partition("=")
    if not eq or not label.strip() or not where:
        raise ConfigError(f"--group {text!r} is not LABEL=RUNS_DIR[:EXP_NAME]; give e.g. --group 'n_e 16=runs/'")
    runs_dir, colon, exp_name = where.rpartition(":")
    if not colon or "/" in exp_name or not runs_dir:  # no experiment named: a path (that may hold a ':')
        return label.strip(), where, None
    return label.strip(), runs_dir, exp_name


def group_row(label, records, goals, budget):
    """A group's row: the label, its experiment, its seeds' rows (solved.seed_result), their mean steps per second."""
    rows = [solved.seed_result(r, goals, budget) for r in records]
    sps = [row["steps"] / (row["hours"] * 3600) for row in rows if row["hours"] > 0]
    return {"label": label, "exp_name": records[0]["exp_name"], "rows": rows, "sps": np.mean(sps) if sps else np.nan}


def table(groups, goals):
    """The markdown table: a row per group, the medians over its seeds of solved.py's goal and final-score columns, and
    of the policy lag where any run logs one (of the seeds that do)."""
    lag = any(row["logs_lag"] for g in groups for row in g["rows"])
    kept = ("step at", "hours at", "final score", "policy lag")
    cols = [c for c in solved.columns(goals, lag) if c[0].startswith(kept)]
    head = ["group", "experiment", "seeds", "steps/s"] + [f"{h} (median)" for h, *_ in cols]
    tail = ["final score per seed", "fall below its best, per seed", "fewest steps"]
    lines = ["| " + " | ".join(head + tail) + " |", "|---" * (len(head) + len(tail)) + "|"]
    for g in groups:
        rows = sorted(g["rows"], key=lambda row: row["seed"])
        medians = [solved.summary_cells(rows, value, cell, leave_out)[0] for _, value, cell, leave_out in cols]
        cells = [g["label"], g["exp_name"], ", ".join(str(row["seed"]) for row in rows), f"{g['sps']:.0f}", *medians]
        cells += [
            ", ".join(solved.number_cell(row["final"]) for row in rows),
            ", ".join(solved.number_cell(row["fall"]) for row in rows),
            solved.steps_cell(min(row["steps"] for row in rows)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def draw(path, script, env_id, groups, records, goals, budget=None):
    """<env id>.png: each seed's score against the steps (millions) and the training hours, a colour per group. Returns
    the Figure (closed, its lines kept) for the tests to read what was drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_steps, by_hours) = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for i, (g, recs) in enumerate(zip(groups, records)):
        for rec in sorted(recs, key=lambda r: r["seed"]):
            steps = np.asarray(rec["steps"], dtype=np.float64)
            n = int(np.sum(steps <= budget)) if budget is not None else len(steps)
            scores = solved.running_scores(np.asarray(rec["returns"], dtype=np.float64)[:n])
            hours = solved.training_hours(rec["parts"], rec["wall_times"])[FINAL_WINDOW - 1 : n]
            label = f"{g['label']}, seed {rec['seed']}"
            by_steps.plot(steps[FINAL_WINDOW - 1 : n] / 1e6, scores, color=f"C{i}", lw=0.8, label=label)
            by_hours.plot(hours, scores, color=f"C{i}", lw=0.8, label=label)
    for ax in (by_steps, by_hours):
        for goal in goals:
            ax.axhline(goal, color="gray", ls="--", lw=1, label=f"goal {goal:g}")
        ax.grid(alpha=0.3)
    by_steps.set_xlabel("steps (millions)")
    by_hours.set_xlabel("training hours")
    by_steps.set_ylabel(f"mean of the last {FINAL_WINDOW} games")
    by_hours.legend(fontsize=7, loc="best")
    fig.suptitle(f"{script} on {env_id}: the mean of the last {FINAL_WINDOW} games, per group and seed", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


def main(argv=None):
    return one_line_errors(TOOL, wallclock, argv)


def wallclock(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--script", required=True, help="the training script, e.g. a2c_paac.py")
    p.add_argument("--env-id", required=True, help="e.g. PongNoFrameskip-v4")
    p.add_argument("--group", action="append", required=True, help="LABEL=RUNS_DIR[:EXP_NAME], once per group")
    p.add_argument("--goals", nargs="+", default=["18", "20"], help="scores to reach (default: 18 20)")
    p.add_argument("--budget", default=None, help="read the runs up to this step (default: each run's last step)")
    p.add_argument("--out", default=None, help="output dir (default: wallclock-<date> in the current directory)")
    args = p.parse_args(argv)
    goals = [solved.finite(g, "--goals") for g in args.goals]
    budget = None if args.budget is None else solved.finite(args.budget, "--budget", "6000000")
    if budget is not None and budget < 1:
        raise ConfigError(f"--budget {args.budget} is below 1; give the step to read the runs up to, e.g. --budget 6000000")
    parsed = [parse_group(text) for text in args.group]
    labels = [label for label, _, _ in parsed]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise ConfigError(f"--group label {twice[0]!r} is given twice; give each group its own label")
    script = os.path.basename(args.script)
    pick = "name one as --group 'LABEL=RUNS_DIR:EXP_NAME'"
    records = [solved.runs_of(d, script, args.env_id, [e] if e else [], TOOL, pick) for _, d, e in parsed]
    out = args.out or "wallclock-" + time.strftime("%Y%m%d-%H%M", time.gmtime())
    make_out_dir(out)

    groups = [group_row(label, recs, goals, budget) for label, recs in zip(labels, records)]
    md = [
        *report_head(
            f"{script} on {args.env_id}: the score per step and per training hour",
            "benchmark.studies.wallclock",
            argv,
            [r for recs in records for r in recs],
        ),
        "- groups: "
        + "; ".join(f"{label}: {d}" + (f" ({e})" if e else "") for label, d, e in parsed)
        + " (the experiments' flags: each run's args in its runs/ directory)",
        f"- score: the mean of the last {FINAL_WINDOW} training games (solved.py's); a goal is reached at the first game, "
        f"from the {FINAL_WINDOW}th on, whose score is at or above it; a median counts a seed that did not reach it as never",
        "- budget: " + (f"the runs read up to step {round(budget):,}" if budget is not None else "each run's last step"),
        "- hours: the time the run's processes trained (solved.py's); steps/s: each seed's steps over its hours, the mean "
        "over the seeds; groups compare fairly only when their runs shared the machine alike",
        "- fall: the most a seed's score fell below the best it had reached before, up to the budget: far in a run that "
        "collapsed, little in one that rose steadily",
        "",
        *table(groups, goals),
        "",
        f"![each seed's score against the steps and against the training hours]({args.env_id}.png)",
    ]
    draw(os.path.join(out, f"{args.env_id}.png"), script, args.env_id, groups, records, goals, budget)
    solved.write_report(out, "wallclock.md", md, f"{args.env_id}.png", TOOL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
