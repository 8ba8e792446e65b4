"""Two groups of runs (two implementations, or two settings of one script) side by side, with a statistical verdict.

Run:   python -m benchmark.tools.compare --a ours=DIR [DIR ...] --b cleanrl=DIR [DIR ...] --out OUTDIR \
           [--windows 10] [--tags charts/episodic_return losses/value_loss ...] [--alpha 0.05] [--steps N]
       python -m benchmark.tools.compare --a fp32=runs/ --exp-a ppo_atari-1a2b3c4d --b bf16=runs/ --exp-b ppo_atari-5e6f7a8b \
           --env-id BreakoutNoFrameskip-v4 --out OUTDIR    # a runs folder's runs of two experiments, as report.py picks

Each DIR is one seed's TensorBoard run directory, or a folder of them (every directory under it that holds event
files is one seed). Ours and CleanRL's scripts log the same tags; so do two settings of one script (fp32 vs bf16).
The step axis, 0 to the last step any run logged (or, with --steps N, to N: each run read up to that step, the same
budget for runs that went on past it), is cut into --windows equal windows. Per tag and window, each
seed's values in the window are averaged; the table gives each group's mean over its seeds, their min-max spread,
and Welch's t-test p over the per-seed window means (scipy.stats.ttest_ind(equal_var=False)), then Holm-Bonferroni
adjusted across the windows. The verdict per tag is "same" when no window's adjusted p is below --alpha; otherwise
it lists the windows that differ and gives the final (last-window) means. With one seed in a group there is no test
("n=1: no test") and no "same". The rule is the test alone, so that it holds its false alarms to --alpha at any number
of seeds: an earlier rule also asked each final mean to lie within the other group's min-max over seeds, which two
groups of one distribution fail in 3 draws of 4 at 2 seeds a side. With 2-4 seeds a side the test finds only large
differences: "same" says that none was found.

Writes into OUTDIR: report.md (the Args the runs logged that differ between the groups, the MuJoCo each group ran on
where its runs logged one, a verdict per tag, then a table per tag), <tag>.png per tag (each group's mean over seeds and
its min-max band on one step axis, each seed's values averaged in 100 bins; the windows that differ shaded), and
curves.csv, the tables' numbers for benchmark/tools/summary.py: per tag, window and group the mean, min and max over seeds,
the per-seed values, the verdict.
"""

import argparse
import os
import sys
import warnings

import numpy as np

from benchmark.cli import ConfigError, make_out_dir
from benchmark.curves import TAGS, curve_row, holm, welch_p, window_means, write_curves
from benchmark.runs import collect, find_run_dirs, mujoco_line, read_run, report_head

PLOT_BINS = 100  # points of the plotted curves: each seed's values averaged in this many equal bins of the step axis


# ---- the statistics ---------------------------------------------------------------------------------------------


# ---- reading the runs -------------------------------------------------------------------------------------------


def parse_group(items, flag, exp_names=None, env_id=None):
    """["LABEL=DIR", "DIR", ...] -> (label, [run dirs]): each DIR a run dir or a folder of them. With `exp_names` (and
    `env_id`), each DIR is a runs folder and the group is its runs of those experiments (and env), one per env and seed
    as report.py picks them: the runner's finished run, else the latest complete one."""
    label, sep, first = items[0].partition("=")
    if not sep or not label or not first:
        raise ConfigError(f"{flag} {items[0]!r}: give LABEL=DIR first, e.g. {flag} ours=runs/CartPole-v1__ppo__1__0")
    runs = []
    for d in [first, *items[1:]]:
        if not os.path.isdir(d):
            raise ConfigError(f"{flag} {label}: {d!r} is not a directory; give TensorBoard run directories")
        found = find_run_dirs(d)
        if exp_names:
            found = [
                r["run_dir"] for r in collect(d) if r["exp_name"] in exp_names and (env_id is None or r["env_id"] == env_id)
            ]
            if not found:
                raise ConfigError(
                    f"{flag} {label}: no run of {' '.join(exp_names)}{' on ' + env_id if env_id else ''} under {d!r}; "
                    "run.py names a sweep's runs <script stem>-<args hash> (see runs/summaries/)"
                )
        if not found:
            raise ConfigError(
                f"{flag} {label}: no TensorBoard event files under {d!r}; give a run directory "
                "(one that holds events.out.tfevents.*) or a folder of them"
            )
        runs += found
    return label, runs


def load(runs, tags, label, steps=None):
    """[{"dir", "last_step", "hparams" (the Args the run logged), tag: (steps, values) for each tag}] of a group; with
    `steps`, each run's values logged up to that step alone."""
    loaded = []
    for d in runs:
        rec = {"dir": d, "last_step": 0, "hparams": {}}
        for tag in tags:
            data = read_run(d, tag)
            if not data["steps"] and data["last_step"] == 0 and not data["hparams"]:  # not one event could be read
                files = ", ".join(repr(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.startswith("events.out"))
                raise ConfigError(
                    f"{label}: no events could be read from {files}: it is damaged or not a TensorBoard "
                    "event file; replace it, or leave that run out"
                )
            kept = [i for i, step in enumerate(data["steps"]) if steps is None or step <= steps]
            if not kept:
                raise ConfigError(
                    f"{label} run {d!r} logged no {tag}"
                    + (f" up to step {steps}; give a larger --steps" if data["steps"] else "")
                    + f"; leave it out of --tags (default: {' '.join(TAGS)})"
                )
            rec[tag] = ([data["steps"][i] for i in kept], [data["returns"][i] for i in kept])
            rec["hparams"] = data["hparams"]
            rec["last_step"] = max(rec["last_step"], data["last_step"] if steps is None else min(data["last_step"], steps))
        loaded.append(rec)
    return loaded


def cautions(groups, tags):
    """What the verdict would hide: a run whose tag ends short of the others' (stopped early, or its event file
    truncated: its last windows then have fewer seeds), and groups of different envs."""
    ends, said = {tag: max(r[tag][0][-1] for _, runs in groups for r in runs) for tag in tags}, []
    for label, r in ((label, r) for label, runs in groups for r in runs):
        short = [tag for tag in tags if r[tag][0][-1] < 0.95 * ends[tag]]  # one line a run: its first short tag
        said += (
            [
                f"{label} run {r['dir']!r} logs {short[0]} up to step {r[short[0]][0][-1]}, short of the others' "
                f"{ends[short[0]]}: it stopped early, or its event file is truncated"
            ]
            if short
            else []
        )
    envs = {label: sorted({r["hparams"].get("env_id", "?") for r in runs}) for label, runs in groups}
    if len(set(sum(envs.values(), [])) - {"?"}) > 1:
        said.append(
            "the groups' runs are of different envs ("
            + "; ".join(f"{label}: {', '.join(e)}" for label, e in envs.items())
            + "): the verdicts compare different tasks"
        )
    return said


# ---- one tag ----------------------------------------------------------------------------------------------------


def compare_tag(groups, tag, edges, alpha):
    """Windows and verdict of one tag. groups: [(label, loaded runs)] x 2."""
    per_seed = [np.array([window_means(*r[tag], edges) for r in runs]) for _, runs in groups]  # seeds x windows
    rows = []
    for w in range(len(edges) - 1):
        sides = [m[:, w][~np.isnan(m[:, w])] for m in per_seed]
        if min(len(s) for s in sides) == 0:
            rows.append({"window": w, "sides": sides, "p": np.nan, "note": "no data"})
            continue
        if not all(np.isfinite(s).all() for s in sides):  # a diverged run's inf: neither a test nor "equal constants"
            rows.append({"window": w, "sides": sides, "p": np.nan, "note": "holds inf: no test"})
            continue
        p = welch_p(*sides)
        note = "n=1: no test" if p is None else "no spread: equal constants" if np.isnan(p) else ""
        rows.append({"window": w, "sides": sides, "p": np.nan if p is None else p, "note": note})
    shared = [r for r in rows if r["note"] != "no data"]
    if len(shared) < 2:
        raise ConfigError(
            f"{tag}: both groups have data in only {len(shared)} of {len(rows)} windows; give fewer --windows or longer runs"
        )
    for r, adj in zip(rows, holm([r["p"] for r in rows])):
        r["holm"] = adj
        r["differs"] = bool(adj < alpha)
    final = shared[-1]
    flagged = [r["window"] + 1 for r in rows if r["differs"]]
    (la, _), (lb, _) = groups
    single = [label for (label, _), s in zip(groups, final["sides"]) if len(s) < 2]
    infinite = [r["window"] + 1 for r in rows if r["note"] == "holds inf: no test"]
    finals = f"{la} {side_str(final['sides'][0])}, {lb} {side_str(final['sides'][1])}"
    if infinite:
        short = f"no test: windows {', '.join(map(str, infinite))} hold inf"
        verdict = f"{short} (a run diverged); final means {finals}"
    elif single:
        short = verdict = f"no test: n=1 in {', '.join(single)}"
        verdict += f" (Welch's test needs 2 seeds a side); final means {finals}"
    elif flagged:
        short = f"differ: windows {', '.join(map(str, flagged))} differ"
        verdict = f"{short} (Holm-adjusted p < {alpha}); final means {finals}"
    else:
        short = verdict = "same"
    return {"tag": tag, "rows": rows, "verdict": verdict, "short": short, "flagged": flagged}


# ---- output -----------------------------------------------------------------------------------------------------


def fname(tag):
    return tag.replace("/", "_") + ".png"


def plot_tag(groups, res, edges, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bins = np.linspace(0, edges[-1], PLOT_BINS + 1)
    centers = (bins[:-1] + bins[1:]) / 2
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for w in res["flagged"]:
        ax.axvspan(edges[w - 1], edges[w], color="red", alpha=0.08, lw=0)
    for i, (label, runs) in enumerate(groups):
        curves = np.array([window_means(*r[res["tag"]], bins) for r in runs])
        with warnings.catch_warnings():  # a bin no seed logged in is nan, and left out
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, lo, hi = np.nanmean(curves, 0), np.nanmin(curves, 0), np.nanmax(curves, 0)
        ok = ~np.isnan(mean)
        ax.plot(centers[ok], mean[ok], color=f"C{i}", lw=1.8, label=f"{label} (mean of {len(runs)} seeds)")
        ax.fill_between(centers[ok], lo[ok], hi[ok], color=f"C{i}", alpha=0.2, lw=0)
    ax.set_title(f"{res['tag']}: {res['short']}", fontsize=10)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(res["tag"])
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def side_str(s):
    return "—" if len(s) == 0 else f"{np.mean(s):.4g} [{min(s):.4g}, {max(s):.4g}] ({len(s)})"


def p_str(p, note):
    return note if note else f"{p:.3g}"


def settings_diff(groups):
    """The Args the runs logged (hyperparameters/text_summary) that differ between the groups, seed aside."""
    values = []
    for _, runs in groups:
        values.append({})
        for r in runs:
            for k, v in r["hparams"].items():
                values[-1].setdefault(k, set()).add(v)
    (la, _), (lb, _) = groups
    both = sorted(k for k in set(values[0]) & set(values[1]) if k != "seed" and values[0][k] != values[1][k])
    lines = [f"`{k}` {la}={'/'.join(sorted(values[0][k]))}, {lb}={'/'.join(sorted(values[1][k]))}" for k in both]
    for label, mine, other in ((la, values[0], values[1]), (lb, values[1], values[0])):
        if set(mine) - set(other):
            lines.append(f"only {label} logs {', '.join(f'`{k}`' for k in sorted(set(mine) - set(other)))}")
    return lines or ["none"]


def write_report(groups, results, edges, args, argv, out):
    (la, ra), (lb, rb) = groups
    md = [
        *report_head(f"{la} vs {lb}", "benchmark.tools.compare", argv),
        *(
            f"- {label}: {len(runs)} run{'s' * (len(runs) > 1)}, last steps {', '.join(str(r['last_step']) for r in runs)}: "
            + ", ".join(f"`{r['dir']}`" for r in runs)
            for label, runs in groups
        ),
        f"- settings that differ (the Args each run logged): {'; '.join(settings_diff(groups))}",
        *mujoco_line([(label, [r["hparams"].get("mujoco") for r in runs]) for label, runs in groups]),
        *([f"- each run read up to step {args.steps} (--steps)"] if args.steps else []),
        f"- {args.windows} windows of {edges[1]:.0f} steps over 0-{edges[-1]:.0f}; per window each seed's values "
        "averaged; columns: mean over seeds [min, max] (seeds); Welch's t-test p over the per-seed means "
        "(scipy.stats.ttest_ind, equal_var=False), Holm-Bonferroni adjusted across the windows",
        f'- verdict: "same" when no window\'s adjusted p < {args.alpha} (the test alone, at any number of seeds); '
        "n=1: no test",
        "",
        "| tag | verdict |",
        "|---|---|",
        *(f"| {r['tag']} | {r['verdict']} |" for r in results),
    ]
    for r in results:
        md += [
            "",
            f"## {r['tag']}",
            "",
            f"Verdict: **{r['verdict']}**",
            "",
            f"![{r['tag']}]({fname(r['tag'])})",
            "",
            f"| window | steps | {la} | {lb} | Welch p | Holm p | differs |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in r["rows"]:
            w, adjusted = row["window"], "" if np.isnan(row["holm"]) else f"{row['holm']:.3g}"
            md.append(
                f"| {w + 1} | {edges[w]:.0f}-{edges[w + 1]:.0f} | {side_str(row['sides'][0])} "
                f"| {side_str(row['sides'][1])} | {p_str(row['p'], row['note'])} "
                f"| {adjusted} | {'yes' if row['differs'] else ''} |"
            )
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    return md


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--a", nargs="+", required=True, metavar="LABEL=DIR", help="the first group: LABEL=DIR [DIR ...]")
    p.add_argument("--b", nargs="+", required=True, metavar="LABEL=DIR", help="the second group: LABEL=DIR [DIR ...]")
    p.add_argument("--out", required=True, help="the folder report.md and the plots go to")
    p.add_argument("--windows", type=int, default=10, help="equal windows of the step axis (10: every 10%%)")
    p.add_argument("--tags", nargs="+", default=TAGS, help="the scalars to compare")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the Holm-adjusted p")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--steps", type=int, help="read each run up to this step (default: every step any run logged)")
    for g in "ab":
        p.add_argument(
            f"--exp-{g}",
            nargs="+",
            metavar="EXP_NAME",
            help=f"with --{g} LABEL=RUNS_DIR: that folder's runs of these experiments (as report.py --exp-names)",
        )
    p.add_argument("--env-id", help="with --exp-a/--exp-b: only the runs on this env")
    args = p.parse_args(argv)
    try:
        if args.windows < 2:
            raise ConfigError(f"--windows must be at least 2, got {args.windows}")
        if not 0 < args.alpha < 1:
            raise ConfigError(f"--alpha must lie in (0, 1), got {args.alpha}")
        if args.steps is not None and args.steps < 1:
            raise ConfigError(f"--steps must be at least 1, got {args.steps}")
        (la, ra), (lb, rb) = (
            parse_group(args.a, "--a", args.exp_a, args.env_id),
            parse_group(args.b, "--b", args.exp_b, args.env_id),
        )
        if la == lb:
            raise ConfigError(f"both groups are labelled {la!r}; give them different labels")
        both = set(map(os.path.realpath, ra)) & set(map(os.path.realpath, rb))
        if both:
            raise ConfigError(f"{sorted(both)[0]!r} is in both groups; give each run to one group")
        groups = [(la, load(ra, args.tags, la, args.steps)), (lb, load(rb, args.tags, lb, args.steps))]
        end = max(r["last_step"] for _, runs in groups for r in runs)
        if end <= 0:
            raise ConfigError("every run logged at step 0 only; there is no step axis to cut into windows")
        edges = np.linspace(0, end, args.windows + 1)
        for caution in cautions(groups, args.tags):
            print(f"compare.py: warning: {caution}", file=sys.stderr)
        results = [compare_tag(groups, tag, edges, args.alpha) for tag in args.tags]
        make_out_dir(args.out)
    except ConfigError as e:
        print(f"compare.py: error: {e}", file=sys.stderr)
        return 2
    md = write_report(groups, results, edges, args, argv, args.out)
    write_curves(
        os.path.join(args.out, "curves.csv"),
        [
            curve_row(
                r["tag"],
                row["window"] + 1,
                edges[row["window"]],
                edges[row["window"] + 1],
                label,
                [run["dir"] for run in runs],
                len(s),
                (np.mean(s), np.min(s), np.max(s)) if len(s) else None,
                s,
                r["verdict"],
            )
            for r in results
            for row in r["rows"]
            for (label, runs), s in zip(groups, row["sides"])
        ],
    )
    if not args.no_plots:
        for r in results:
            plot_tag(groups, r, edges, os.path.join(args.out, fname(r["tag"])))
    print("\n".join(md[: md.index("| tag | verdict |") + 2 + len(results)]))
    print(f"\ncompare.py: wrote {os.path.join(args.out, 'report.md')}" + ("" if args.no_plots else " and the plots"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
