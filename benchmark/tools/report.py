"""Our seed sweeps beside the published results: a markdown table, per-seed CSV and learning curves.

Run:   python -m benchmark.tools.report runs/ [--out <dir>] [--compare-as ppo_shared.py=ppo.py] [--curves]

The final return is defined as the published CleanRL numbers define it (reference_results.csv notes:
openrlbenchmark's rlops.py, metric_last_n_average_window=100): per seed, the mean of the last 100
logged values of charts/episodic_return (training episodes of the stochastic policy); then the mean
and np.std (ddof=0) across seeds. The published row for (script, env) is the one with the same steps
budget, preferring CleanRL's own implementation; the verdict says whether our mean lies within the
published mean +- std, above, below, or is not comparable (budget differs, or nothing published). The other published
final returns of the same script, env and budget (Breakout at 10M: openai/baselines' too) follow the table, with ours
judged against each. --exp-names keeps one experiment's runs (run.py names them <script stem>-<args hash>).

Writes into the out dir (default: report-<date>/ in the current directory, so that a sweep run elsewhere
leaves the clone as it was): report.md (command, date, machine, the MuJoCo the runs logged, each seed's hours and
threads, the table), per_seed.csv (the raw per-seed values) and one <env>.png per env (each seed thin, the mean thick,
the published band).
An event file cut short (a run killed while writing it) is used up to the cut, and named, with the step it reached, in
a warning line and in report.md.
With --curves, also curves.csv (the report's one script and env: its return per tenth of the steps, each seed's mean
in it, their mean, min and max; the verdict) for benchmark/tools/summary.py's figure, which draws it as a panel beside the
published number. A corrupt summary, a missing --reference, a runs dir without runs, or --curves over more than one
script and env stops it with one line (exit status 2).
"""

import argparse
import csv
import math
import os
import sys
import time
from collections import defaultdict

import numpy as np

from benchmark.cli import ConfigError, make_out_dir, one_line_errors
from benchmark.curves import curve_row, window_means, write_curves
from benchmark.reference import COMPARABLE_METRIC, REFERENCE_CSV, load_reference, number, pick_reference, verdict
from benchmark.runs import FINAL_WINDOW, PAUSE, RETURN_TAG, collect, mujoco_line, report_head, steps_str

# ---- the numbers ----------------------------------------------------------------------------------------


def aggregate(finals):
    """Mean and std across seeds; np.std with ddof=0, as the published numbers."""
    return float(np.mean(finals)), float(np.std(finals))


# ---- reading the runs -----------------------------------------------------------------------------------


def hours_str(record):
    """ "5.2" or, for a run of benchmark/tools/run.py, "5.2 (2 threads)": a run's hours depend on the cores it was given."""
    threads = record["threads"]
    return f"{record['hours']:.1f}" + (f" ({threads} thread{'s' * (threads != 1)})" if threads else "")


NOT_RUNNER = "not run through benchmark/tools/run.py"


def median_seed(per_seed_csv):
    """The row of a report's per_seed.csv whose final return is the median of its seeds (of an even count, the lower of
    the two middle ones; equal returns in seed order): the seed whose agent stands for the runs."""
    with open(per_seed_csv, newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda row: (float(row["final_return"]), int(row["seed"])))
    if not rows:
        raise ConfigError(f"{per_seed_csv} holds no seed")
    return rows[(len(rows) - 1) // 2]


def group(records):
    """(script, env, exp name) -> its seeds' records."""
    groups = defaultdict(list)
    for r in records:
        groups[(r["script"], r["env_id"], r["exp_name"])].append(r)
    return groups


# ---- output ---------------------------------------------------------------------------------------------


def fmt(x, std=None):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.2f}" if std is None else f"{x:.2f} ± {std:.2f}"


def source_number(row, sources):
    """ "[n]": the row's source among the report's numbered sources (added when new)."""
    text = f"{row['source']}; {row['notes']}"
    if text not in sources:
        sources.append(text)
    return f"[{sources.index(text) + 1}]"


def build_table(groups, rows, compare_as):
    lines = [
        "| script | env | steps | seeds | ours (mean ± std) | per seed | published (mean ± std) "
        "| published steps | verdict | ref |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    sources, results = [], []
    for (script, env_id, exp_name), recs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        finals = [r["final_return"] for r in recs]
        mean, std = aggregate(finals)
        budgets = {r["budget"] for r in recs}
        budget = next(iter(budgets)) if len(budgets) == 1 else None
        ref_script = compare_as.get(script, script)
        ref = pick_reference(rows, ref_script, env_id, budget)
        v = verdict(mean, budget, ref) if len(budgets) == 1 else "not comparable: seeds differ in budget"
        ref_n = source_number(ref, sources) if ref is not None else ""
        # the other published final returns of this script, env and budget (Breakout 10M: openai/baselines' too)
        same = ref is not None and len(budgets) == 1 and number(ref["total_timesteps"]) == budget
        also = [
            (r, verdict(mean, budget, r))
            for r in rows
            if same
            and r is not ref
            and (r["script"], r["env_id"], r["metric"]) == (ref["script"], ref["env_id"], COMPARABLE_METRIC)
            and number(r["total_timesteps"]) == budget
            and number(r["mean"]) is not None
        ]
        other_args = recs[0]["extra_args"].replace(f"--total-timesteps {budget}", "").strip()  # in its own column
        label = script + (f" `{other_args}`" if other_args else "")
        pub = "—"
        if ref is not None:
            pub = fmt(number(ref["mean"]), number(ref["std"])) + (f" ({ref_script})" if ref_script != script else "")
        lines.append(
            f"| {label} | {env_id} | {steps_str(budget)} | {len(recs)} | {fmt(mean, std)} | "
            f"{', '.join(f'{x:.1f}' for x in finals)} | {pub} | "
            f"{steps_str(number(ref['total_timesteps'])) if ref else '—'} | {v} | {ref_n} |"
        )
        results.append(
            {
                "script": script,
                "env_id": env_id,
                "exp_name": exp_name,
                "budget": budget,
                "mean": mean,
                "std": std,
                "ref": ref,
                "ref_script": ref_script,
                "verdict": v,
                "records": recs,
                "also": also,
                "label": label,
            }
        )
    also = []  # numbered after the table's own sources
    for res in filter(lambda res: res["also"], results):
        borrowed = f" ({res['ref_script']})" if res["ref_script"] != res["script"] else ""
        also.append(
            f"- {res['label']} {res['env_id']} {steps_str(res['budget'])}: "
            + ", ".join(
                f"{fmt(number(r['mean']), number(r['std']))}{borrowed} {source_number(r, sources)} ({v})"
                for r, v in res["also"]
            )
        )
    if also:
        lines += ["", "Also published for the same script, env and budget (ours against each):", "", *also]
    return lines, sources, results


def curves(res, tag, windows=10):
    """curves.csv's rows of one result: the return per window of 0..the last step, over the seeds that logged in it."""
    recs = res["records"]
    edges = np.linspace(0, max(r["last_step"] for r in recs), windows + 1)
    means = np.array([window_means(r["steps"], r["returns"], edges) for r in recs])  # [seed, window]
    v = res["verdict"] + (" the published mean ± std" if res["verdict"] in ("within", "above", "below") else "")
    rows = []
    for w in range(windows):
        col = means[:, w][~np.isnan(means[:, w])]
        stats = (col.mean(), col.min(), col.max()) if len(col) else None
        rows.append(
            curve_row(tag, w + 1, edges[w], edges[w + 1], "ours", [r["run_dir"] for r in recs], len(col), stats, col, v)
        )
    return rows


def running_mean(values, window=FINAL_WINDOW):
    """At each episode, the mean of the last `window` returns: its last value is the seed's final return."""
    c = np.cumsum(np.insert(np.asarray(values, dtype=np.float64), 0, 0.0))
    n = np.arange(1, len(values) + 1)
    lo = np.maximum(n - window, 0)
    return (c[n] - c[lo]) / (n - lo)


def plot_env(env_id, results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, res in enumerate(results):
        color = f"C{i}"
        curves = [(np.asarray(r["steps"]), running_mean(r["returns"])) for r in res["records"] if r["returns"]]
        for steps, curve in curves:
            ax.plot(steps, curve, color=color, lw=0.7, alpha=0.5)
        if curves:
            end = min(s[-1] for s, _ in curves)
            grid = np.linspace(max(s[0] for s, _ in curves), end, 200)
            mean = np.mean([np.interp(grid, s, c) for s, c in curves], axis=0)
            seeds = f"{len(curves)} seed{'s' * (len(curves) != 1)}"
            ax.plot(grid, mean, color=color, lw=2.5, label=f"{res['script']} ({seeds}): {res['mean']:.1f} ± {res['std']:.1f}")
        ref = res["ref"]
        if ref is not None and ref["metric"].startswith("episodic_return"):  # not the aggregate % scores
            m, s = number(ref["mean"]), number(ref["std"]) or 0.0
            ax.axhspan(m - s, m + s, color=color, alpha=0.15)
            budget = steps_str(number(ref["total_timesteps"]))
            ax.axhline(
                m, color=color, ls="--", lw=1, label=f"published {res['ref_script']}: {m:.1f} ± {s:.1f} at {budget} steps"
            )
    ax.set_title(f"{env_id}: episodic return, mean of the last {FINAL_WINDOW} episodes")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episodic return")
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_csv(records, path):
    cols = [
        "script",
        "env_id",
        "exp_name",
        "extra_args",
        "seed",
        "budget",
        "last_step",
        "episodes",
        "final_return",
        "hours",
        "threads",
        "git_commit",
        "script_sha256",
        "script_git",
        "machine",
        "mujoco",
        "run_dir",
    ]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in records:
            w.writerow(r)


def main(argv=None):
    return one_line_errors("report.py", make_report, argv)


def make_report(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs_dir", help="the runs/ directory the scripts (or benchmark/tools/run.py) logged into")
    p.add_argument("--out", default=None, help="output dir (default: report-<date> in the current directory)")
    p.add_argument("--tag", default=RETURN_TAG, help="the scalar that holds the episodic returns")
    p.add_argument(
        "--compare-as",
        nargs="*",
        default=[],
        metavar="SCRIPT=REF_SCRIPT",
        help="compare SCRIPT with REF_SCRIPT's published rows (for variants with none of their own)",
    )
    p.add_argument(
        "--reference", default=REFERENCE_CSV, help="the published results (default: benchmark/reference_results.csv)"
    )
    p.add_argument("--scripts", nargs="*", default=[], help="only these scripts (default: all)")
    p.add_argument("--steps", nargs="*", type=int, default=[], help="only runs with these --total-timesteps (default: all)")
    p.add_argument(
        "--exp-names",
        nargs="*",
        default=[],
        help="only runs of these experiments (run.py's <script stem>-<args hash>; default: all)",
    )
    p.add_argument("--no-plots", action="store_true")
    p.add_argument(
        "--curves", action="store_true", help="also curves.csv, a panel of summary.py's figure (one script and env)"
    )
    args = p.parse_args(argv)
    fix = "give the runs/ directory that the scripts or benchmark/tools/run.py logged into"
    if not os.path.isdir(args.runs_dir):
        raise ConfigError(f"{args.runs_dir!r} is not a directory; {fix}")
    if not all("=" in item for item in args.compare_as):
        raise ConfigError("--compare-as takes SCRIPT=REF_SCRIPT pairs, e.g. ppo_shared.py=ppo.py")
    compare_as = dict(item.split("=", 1) for item in args.compare_as)
    reference = load_reference(args.reference)

    found = collect(args.runs_dir, args.tag)
    records = [
        r
        for r in found
        if (not args.scripts or r["script"] in args.scripts)
        and (not args.steps or r["budget"] in args.steps)
        and (not args.exp_names or r["exp_name"] in args.exp_names)
    ]
    if not found:
        raise ConfigError(f"no complete TensorBoard runs with {args.tag} under {args.runs_dir!r}; {fix}")
    if not records:
        steps = " ".join(map(str, args.steps)) or "(any)"
        raise ConfigError(
            f"none of the {len(found)} runs under {args.runs_dir!r} is of --scripts "
            f"{' '.join(args.scripts) or '(any)'} with --steps {steps} and --exp-names "
            f"{' '.join(args.exp_names) or '(any)'}; widen those filters"
        )
    kinds = sorted({(r["script"], r["env_id"], r["exp_name"]) for r in records})
    if args.curves and len(kinds) > 1:
        raise ConfigError(
            f"--curves draws one panel, and the runs are of {len(kinds)} scripts, envs or flags "
            f"({', '.join(f'{s} {e}' for s, e, _ in kinds[:3])}{', ...' if len(kinds) > 3 else ''}); "
            "leave one with --scripts and --steps"
        )
    out = args.out or "report-" + time.strftime("%Y%m%d-%H%M", time.gmtime())
    make_out_dir(out)

    table, sources, results = build_table(group(records), reference, compare_as)
    commits = sorted({r["git_commit"] for r in records if r["git_commit"]})
    code = sorted({(r["script"], r["script_sha256"], r["script_git"]) for r in records if r["script_sha256"]})
    cut = [f"{path} at step {step}" for r in records for path, step in r["cut"]]
    md = [
        *report_head("Benchmark report", "benchmark.tools.report", argv, records),
        f"- git commit of the runs: {', '.join(commits) or f'unknown ({NOT_RUNNER})'}",
        "- the scripts' code (sha256 of the file, and git's word on it: a copy or an edit shows here): "
        + (", ".join(f"{s} {h} ({g or 'not in git'})" for s, h, g in code) or f"unknown ({NOT_RUNNER})"),
        *mujoco_line([(None, [r["mujoco"] for r in records])]),
        f"- final return: per seed the mean of the last {FINAL_WINDOW} values of `{args.tag}` (training episodes); "
        "mean ± std across seeds with np.std (ddof=0), as the published numbers",
        "- verdict: our mean within the published mean ± std, above, below; not comparable when the steps budget differs",
        "- raw per-seed values: per_seed.csv; learning curves (mean of the last 100 episodes): <env>.png",
        f"- hours per seed (the runs' processes, each part from its start or resume to its last log, summed, a pause of "
        f"more than {PAUSE:g} s without a log left out; the "
        "threads run.py gave its last part): "
        + "; ".join(f"{res['script']} {res['env_id']}: " + ", ".join(hours_str(r) for r in res["records"]) for res in results),
        *([f"- event files cut short (their records before the cut used): {', '.join(cut)}"] if cut else []),
        "",
        *table,
        "",
    ]
    if compare_as:
        md.append(
            "Compared with another script's published rows: "
            + ", ".join(f"{k} with {v}" for k, v in compare_as.items())
            + " (they publish none of their own)."
        )
        md.append("")
    md += ["Published sources:", ""] + [f"{i + 1}. {s}" for i, s in enumerate(sources)]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    write_csv(records, os.path.join(out, "per_seed.csv"))
    if args.curves:
        write_curves(os.path.join(out, "curves.csv"), curves(results[0], args.tag))
    if not args.no_plots:
        by_env = defaultdict(list)
        for res in results:
            by_env[res["env_id"]].append(res)
        for env_id, res in by_env.items():
            plot_env(env_id, res, os.path.join(out, env_id.replace("/", "-") + ".png"))
    print("\n".join(md))
    print(
        f"\nreport.py: wrote {out}/report.md, per_seed.csv"
        + (", curves.csv" if args.curves else "")
        + ("" if args.no_plots else " and the plots")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
