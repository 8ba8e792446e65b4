"""When a game was solved: per seed, the first step and the training hours at which the mean of the last 100 games
reached each goal, and the final score (the PAAC and IMPALA papers' "Pong solved" checks).

Run:   python -m benchmark.studies.solved runs/ --script a2c_paac.py --env-id PongNoFrameskip-v4 [--exp-names NAME ...]
       [--goals 18 20] [--budget STEPS] [--window STEPS] [--published VALUE [--published-label TEXT]] [--out DIR]

The runs are found as benchmark/tools/report.py finds them (one a seed: the runner's, else the latest), and a run still
going, or stopped short of its budget, counts too, as far as it got. A score is the published definition of a seed's
result (report.py's final return): the mean of the last 100 logged values of charts/episodic_return (training games of
the stochastic policy). Per seed:
- for each goal: the step of the first game, from the 100th on, at which that mean is at or above the goal, and the
  training hours to that game; or "not reached";
- the final score: the mean of the last 100 games logged at or before --budget (default: the run's last step); the steps
  the run reached (at most the budget), the hours to them, and the games counted;
- the policy lag (the IMPALA paper's check of how off-policy the learner was), only where at least one of the runs logs
  charts/policy_lag (impala_vtrace.py, once per learner update: the learner updates between the weights that sampled a
  step and the update that consumes it, averaged over the batch; a2c_paac.py logs none, and then there is no column):
  the mean of the run's logged values at steps at or before --budget, each step once as TensorBoard keeps a resumed
  run; "n/a" for a run that logs none there.
Across the seeds: the median and the mean of each column (of a goal, the median counts a seed that did not reach it as
never; the mean is over the seeds that did; of the policy lag both are over the seeds with one, "(k of n)" when not
all), and the median seed by the final score (of an even count the lower of the two middle ones, equal scores in seed
order, as report.py's median_seed): the one whose agent to ship.

Hours are the time the run's processes trained up to a game, as TensorBoard keeps the run. A resumed run has an event
file per part (its start, then each resume), and a resume logs from its checkpoint's step on with a SessionLog START at
that step, at which TensorBoard's EventAccumulator drops every earlier event of that step or later: the steps the resume
redid are kept once, from the resume. So each part counts from its first event to its last event that TensorBoard
kept: the gap before a resume and the time of the redone steps are left out (report.py's hours, each part's whole span,
keep the latter; solved.md gives them too). A pause (the process stopped and went on: SIGSTOP, Ctrl-Z, a suspended
machine; two consecutive events more than runs.PAUSE = 120 s apart) ends a part and the next event starts one, so its
time is left out too.

Writes into --out (default: solved-<date>/ in the current directory):
- solved.md: the command, the date, the machine, the table, a line per goal with the seeds that reached it, and a link to
  the figure; with --window STEPS, a second table: per window of that many steps (0-STEPS, STEPS-2 STEPS, ... up to the
  budget), each seed's mean return over the games it logged in the window and their number (how fast each seed rose);
  prints it too;
- <env id>.png, the figure: per seed (a thin line, "seed N") the score from its 100th game on, over its whole run, against
  the environment steps in millions; a dashed horizontal line at each goal, a dotted vertical one at --budget (where the
  table stopped reading), and with --published a horizontal line at that published score, labelled with
  --published-label (e.g. --published 20.6 --published-label "the PAAC paper (115M steps, best of 3 agents)").
A runs dir with no run of the script and env (or runs of more than one experiment: pick one with --exp-names), a goal or
a --published that is not a finite number, a budget below 1, or a --published-label without --published stops it with
one line (exit status 2).
"""

import argparse
import math
import os
import sys
import time

import numpy as np

from benchmark.cli import ConfigError, make_out_dir, one_line_errors
from benchmark.runs import FINAL_WINDOW, PAUSE, RETURN_TAG, collect, final_return, read_run, report_head

TOOL = "solved.py"
NOT_REACHED = "not reached"
LAG_TAG = "charts/policy_lag"  # impala_vtrace.py's, once per learner update


# ---- one seed -------------------------------------------------------------------------------------------------


def training_hours(parts, wall_times, at=None):
    """The hours the run's processes trained up to each wall time `at` (default: each of its kept games, `wall_times`):
    each part (runs.part_spans: an event file's stretch between stops) counts from its start to its last event that
    TensorBoard keeps (the steps a resume redid after its checkpoint count once, in the resume's part)."""
    starts = np.array([first for first, _, _ in parts], dtype=np.float64)
    ends = np.array([kept for _, _, kept in parts], dtype=np.float64)
    at = np.asarray(wall_times if at is None else at, dtype=np.float64)
    return np.clip(at[:, None] - starts[None, :], 0.0, (ends - starts)[None, :]).sum(axis=1) / 3600


def running_scores(returns):
    """The score at each game from the 100th on: the mean of the last 100 games (runs.final_return of those up to it)."""
    return [final_return(returns[: i + 1]) for i in range(FINAL_WINDOW - 1, len(returns))]


def policy_lag(run_dir, budget=None):
    """(whether the run logs charts/policy_lag at all, the mean of its values at steps at or before the budget or None
    where there is none), read as runs.read_run reads a tag: of a resumed run each step once, as TensorBoard keeps it."""
    data = read_run(run_dir, LAG_TAG)
    values = [v for step, v in zip(data["steps"], data["returns"]) if budget is None or step <= budget]
    return bool(data["steps"]), float(np.mean(np.asarray(values, dtype=np.float64))) if values else None


def seed_result(rec, goals, budget=None):
    """One seed's row: for each goal (step, hours) of the game that reached it, or None; the final score, the steps, the
    hours and the games up to the budget (None: the run's last step); the most its score fell below the best it had
    reached before (up to the budget: a collapse); whether the run logs charts/policy_lag and the
    mean of its values up to the budget (None: none there)."""
    steps, returns = np.asarray(rec["steps"]), np.asarray(rec["returns"], dtype=np.float64)
    n = int(np.sum(steps <= budget)) if budget is not None else len(steps)
    hours = training_hours(rec["parts"], rec["wall_times"])
    scores = np.asarray(running_scores(returns[:n]))  # of game i, from the 100th on
    reached = {}
    for goal in goals:
        i = next((i + FINAL_WINDOW - 1 for i, score in enumerate(scores) if score >= goal), None)
        reached[goal] = None if i is None else (int(steps[i]), float(hours[i]))
    whole = budget is None or budget >= rec["last_step"]
    if whole:  # to the run's end
        reached_hours = float(training_hours(rec["parts"], rec["wall_times"], [rec["parts"][-1][1]])[0])
    else:  # to its last game at or before the budget
        reached_hours = float(hours[n - 1]) if n else math.nan
    logs_lag, lag = policy_lag(rec["run_dir"], budget)
    return {
        "seed": rec["seed"],
        "run_dir": rec["run_dir"],
        "reached": reached,
        "final": final_return(returns[:n]),
        "fall": float(np.max(np.maximum.accumulate(scores) - scores)) if len(scores) else math.nan,  # below its best
        "steps": rec["last_step"] if whole else int(budget),
        "hours": reached_hours,
        "games": n,
        "process_hours": rec["hours"],
        "logs_lag": logs_lag,
        "policy_lag": lag,
    }


# ---- across seeds ---------------------------------------------------------------------------------------------


def median_seed(rows):
    """The row whose final score is the median of the seeds' (report.py's median_seed rule)."""
    ranked = sorted(rows, key=lambda row: (-math.inf if math.isnan(row["final"]) else row["final"], row["seed"]))
    return ranked[(len(ranked) - 1) // 2]


def steps_cell(x):
    return NOT_REACHED if x is None or math.isinf(x) else f"{round(x):,}"


def number_cell(x, digits=2):
    return NOT_REACHED if x is None or math.isinf(x) else "n/a" if math.isnan(x) else f"{x:.{digits}f}"


def lag_cell(x):
    return "n/a" if x is None else f"{x:.2f}"


def columns(goals, lag=False):
    """(header, the row's value, its cell, whether the median and the mean leave out a seed without a value rather than
    count it as never reached) of each column after the seed's; with `lag`, the policy lag's last."""
    cols = []
    for goal in goals:
        step = (f"step at {goal:g}", lambda row, g=goal: row["reached"][g] and row["reached"][g][0], steps_cell, False)
        hours = (f"hours at {goal:g}", lambda row, g=goal: row["reached"][g] and row["reached"][g][1], number_cell, False)
        cols += [step, hours]
    return (
        cols
        + [
            ("final score", lambda row: row["final"], number_cell, False),
            ("steps", lambda row: row["steps"], steps_cell, False),
            ("hours", lambda row: row["hours"], number_cell, False),
            ("games", lambda row: row["games"], lambda x: f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}", False),
        ]
        + ([("policy lag", lambda row: row["policy_lag"], lag_cell, True)] if lag else [])
    )


def summary_cells(rows, value, cell, leave_out=False):
    """The median (a seed without a value: never; with `leave_out`, of the seeds with one) and the mean (of the seeds
    with one), each with "(k of n)" when not all have one (the median only with `leave_out`)."""
    values = [value(row) for row in rows]
    have = [float(v) for v in values if v is not None]
    of = f" ({len(have)} of {len(rows)})" if len(have) < len(rows) else ""
    if leave_out:
        return (cell(float(np.median(have))) + of, cell(float(np.mean(have))) + of) if have else (cell(None), cell(None))
    median = float(np.median([math.inf if v is None else v for v in values]))
    if not have:
        return cell(median), NOT_REACHED
    return cell(median), cell(float(np.mean(have))) + of


def window_table(records, size, budget=None):
    """Per window of `size` steps ((lo, lo + size], from 0 to the last step read), each seed's mean return over its
    games in the window, with their number; "-" where a seed logged none there."""
    seeds, read = sorted(records, key=lambda r: r["seed"]), []
    for r in seeds:
        steps, returns = np.asarray(r["steps"]), np.asarray(r["returns"], dtype=np.float64)
        kept = steps <= (math.inf if budget is None else budget)  # up to the budget
        read.append((steps[kept], returns[kept]))
    end = max(float(steps.max()) for steps, _ in read if steps.size)
    lines = ["| steps | " + " | ".join(f"seed {r['seed']}" for r in seeds) + " |", "|---" * (len(seeds) + 1) + "|"]
    for lo in np.arange(0, end, size):
        cells = []
        for steps, returns in read:
            games = returns[(steps > lo) & (steps <= lo + size)]
            cells.append(f"{games.mean():.2f} ({games.size})" if games.size else "-")
        lines.append(f"| {lo / 1e6:g}M-{(lo + size) / 1e6:g}M | " + " | ".join(cells) + " |")
    return lines


def table(rows, goals):
    cols = columns(goals, lag=any(row["logs_lag"] for row in rows))
    lines = ["| seed | " + " | ".join(h for h, *_ in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for row in sorted(rows, key=lambda row: row["seed"]):
        lines.append(f"| {row['seed']} | " + " | ".join(cell(value(row)) for _, value, cell, _ in cols) + " |")
    both = [summary_cells(rows, value, cell, leave_out) for _, value, cell, leave_out in cols]
    lines.append("| median | " + " | ".join(m for m, _ in both) + " |")
    lines.append("| mean | " + " | ".join(m for _, m in both) + " |")
    return lines


# ---- the figure -----------------------------------------------------------------------------------------------


def draw(path, script, env_id, records, goals, budget=None, published=None, published_label=None):
    """<env id>.png: each seed's score (running_scores, over its whole run) against the steps in millions, the goals, the
    budget and the published score (report.py's plot_env's look: thin seeds, Agg, 110 dpi). Returns the Figure (closed,
    its lines kept) for the tests to read what was drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    for i, rec in enumerate(sorted(records, key=lambda r: r["seed"])):
        steps = np.asarray(rec["steps"], dtype=np.float64)[FINAL_WINDOW - 1 :] / 1e6
        ax.plot(
            steps,
            running_scores(np.asarray(rec["returns"], dtype=np.float64)),
            color=f"C{i}",
            lw=0.8,
            label=f"seed {rec['seed']}",
        )
    for goal in goals:
        ax.axhline(goal, color="gray", ls="--", lw=1, label=f"goal {goal:g}")
    if published is not None:
        ax.axhline(published, color="black", ls="-.", lw=1.2, label=f"{published_label or 'published'}: {published:g}")
    if budget is not None:
        ax.axvline(budget / 1e6, color="black", ls=":", lw=1.2, label=f"--budget {budget / 1e6:g}M steps")
    ax.set_title(f"{script} on {env_id}: the mean of the last {FINAL_WINDOW} games, per seed", fontsize=11)
    ax.set_xlabel("steps (millions)")
    ax.set_ylabel(f"mean of the last {FINAL_WINDOW} games")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


# ---- the command ----------------------------------------------------------------------------------------------


def finite(text, flag, example="18 20"):
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not math.isfinite(x):
        raise ConfigError(f"{flag} {text!r} is not a finite number; give numbers such as {flag} {example}")
    return x


def runs_of(runs_dir, script, env_id, exp_names=(), tool=TOOL, pick="pick one with --exp-names"):
    """The records (runs.collect's, unfinished ones too) of one experiment of `script` on `env_id` under `runs_dir`, one
    a seed: of `exp_names` when given. None, or more than one experiment, is a ConfigError (`pick` says how to choose)."""
    fix = "give the runs/ directory that the scripts or benchmark/tools/run.py logged into"
    if not os.path.isdir(runs_dir):
        raise ConfigError(f"{runs_dir!r} is not a directory; {fix}")
    found = [r for r in collect(runs_dir, RETURN_TAG, unfinished=True, tool=tool) if r["env_id"] == env_id]
    records = [r for r in found if r["script"] == script and (not exp_names or r["exp_name"] in exp_names)]
    if not records:
        raise ConfigError(
            f"no run of {script} on {env_id} with {RETURN_TAG} under {runs_dir!r}"
            + (f" of --exp-names {' '.join(exp_names)}" if exp_names else "")
            + f" (runs on {env_id}: {', '.join(sorted({r['exp_name'] for r in found})) or 'none'}); {fix}"
        )
    names = sorted({r["exp_name"] for r in records})
    if len(names) > 1:
        raise ConfigError(f"the runs of {script} on {env_id} are of {len(names)} experiments ({', '.join(names)}); {pick}")
    return records


def write_report(out, name, md, figure, tool=TOOL):
    """out/name, the report's markdown lines, written and printed, then the line naming it and its figure."""
    with open(os.path.join(out, name), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"\n{tool}: wrote {out}/{name} and {out}/{figure}")


def main(argv=None):
    return one_line_errors(TOOL, solved, argv)


def solved(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs_dir", help="the runs/ directory the scripts (or benchmark/tools/run.py) logged into")
    p.add_argument("--script", required=True, help="the training script, e.g. a2c_paac.py")
    p.add_argument("--env-id", required=True, help="e.g. PongNoFrameskip-v4")
    p.add_argument("--exp-names", nargs="*", default=[], help="only runs of these experiments (run.py's <stem>-<args hash>)")
    p.add_argument("--goals", nargs="+", default=["18", "20"], help="scores to reach (default: 18 20)")
    p.add_argument("--budget", default=None, help="read the runs up to this step (default: each run's last step)")
    p.add_argument("--window", default=None, help="also each seed's mean return per window of this many steps, e.g. 500000")
    p.add_argument("--published", default=None, help="a published score to draw beside the seeds', e.g. 20.6")
    p.add_argument("--published-label", default=None, help="what --published is, e.g. 'the PAAC paper (115M steps)'")
    p.add_argument("--out", default=None, help="output dir (default: solved-<date> in the current directory)")
    args = p.parse_args(argv)
    goals = [finite(g, "--goals") for g in args.goals]
    budget = None if args.budget is None else finite(args.budget, "--budget", "12000000")
    published = None if args.published is None else finite(args.published, "--published", "20.6")
    window = None if args.window is None else finite(args.window, "--window", "500000")
    if window is not None and window < 1:
        raise ConfigError(f"--window {args.window} is below 1; give the steps of a window, e.g. --window 500000")
    if budget is not None and budget < 1:
        raise ConfigError(f"--budget {args.budget} is below 1; give the step to read the runs up to, e.g. --budget 12000000")
    if args.published_label is not None and published is None:
        raise ConfigError(
            f"--published-label {args.published_label!r} needs --published, the score it names, e.g. --published 20.6"
        )
    script = os.path.basename(args.script)
    records = runs_of(args.runs_dir, script, args.env_id, args.exp_names)
    out = args.out or "solved-" + time.strftime("%Y%m%d-%H%M", time.gmtime())
    make_out_dir(out)

    rows = [seed_result(r, goals, budget) for r in records]
    med = median_seed(rows)
    cut = [f"{path} at step {step}" for r in records for path, step in r["cut"]]
    md = [
        *report_head(f"When {args.env_id} was solved: {script}", "benchmark.studies.solved", argv, records),
        f"- experiment: {records[0]['exp_name']}"
        + (f" (`{records[0]['extra_args']}`)" if records[0]["extra_args"] else "")
        + f", seeds {', '.join(str(r['seed']) for r in records)}; their budget (--total-timesteps): "
        + ", ".join(sorted({steps_cell(r["budget"]) if r["budget"] else "unknown" for r in records})),
        f"- score: the mean of the last {FINAL_WINDOW} values of `{RETURN_TAG}` (training games), report.py's final "
        f"return; a goal is reached at the first game, from the {FINAL_WINDOW}th on, whose score is at or above it",
        "- budget: " + (f"the runs read up to step {round(budget):,}" if budget is not None else "each run's last step"),
        "- hours: the run's processes up to that game, each part (a start, a resume, or a return from a pause: no event "
        f"for more than {PAUSE:g} s) from its start to its last event that TensorBoard kept: the gap before a resume, "
        "the pauses and the steps a resume redid left out (report.py's hours, each "
        "part whole: " + ", ".join(f"seed {row['seed']} {row['process_hours']:.2f}" for row in rows) + ")",
        *(
            [
                f"- policy lag: the mean of the run's logged `{LAG_TAG}` values up to the budget (impala_vtrace.py logs "
                "one per learner update: the learner updates between the weights that sampled a step and the update "
                "that consumes it, averaged over the batch); n/a: a run that logs none there"
            ]
            if any(row["logs_lag"] for row in rows)
            else []
        ),
        *([f"- event files cut short (their records before the cut used): {', '.join(cut)}"] if cut else []),
        "",
        *table(rows, goals),
        "",
        *(
            f"- {goal:g}: reached by {sum(row['reached'][goal] is not None for row in rows)} of {len(rows)} "
            f"seed{'s' * (len(rows) != 1)}"
            for goal in goals
        ),
        f"- the median seed by the final score, the one to ship: seed {med['seed']} ({number_cell(med['final'])}), "
        f"{med['run_dir']}",
        *(
            [
                "",
                f"Each seed's mean return over the games it logged in each window of {round(window):,} steps (the number "
                "of games in parentheses):",
                "",
                *window_table(records, window, budget),
            ]
            if window is not None
            else []
        ),
        "",
        f"![each seed's mean of the last {FINAL_WINDOW} games against the steps, with the goals"
        + (", the budget" if budget is not None else "")
        + (", the published score" if published is not None else "")
        + f"]({args.env_id}.png)",
    ]
    draw(os.path.join(out, f"{args.env_id}.png"), script, args.env_id, records, goals, budget, published, args.published_label)
    write_report(out, "solved.md", md, f"{args.env_id}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
