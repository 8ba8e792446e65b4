"""The README's figure: one panel per script, its return beside its reference's, from the data stored beside its report.

Run:   python -m benchmark.tools.summary [--results benchmark/results] [--out benchmark/results/summary.png] [--all]
       python -m benchmark.tools.summary --from-report DIR [DIR ...]   (then draws)

The panels are the curves.csv files that FRONT names, one per script: our runs beside a reference run here on the same
steps and seeds (CleanRL's or Stable-Baselines3's script; benchmark/tools/compare.py writes the file), or our runs alone
beside the published number (benchmark/tools/report.py --curves: Breakout at 10M). A comparison of two settings of ours, or
one whose point is a difference it found, stays on its script's page; --all draws every curves.csv under --results,
one panel each. --from-report rebuilds a curves.csv from a compare.py report.md whose runs are gone: its tables hold
each group's mean, min and max over seeds per window, to four digits, and no per-seed values.

A panel: the return (charts/episodic_return) per window of the steps, each group's mean over seeds and its min-max
band; the published final number (mean ± std, benchmark/reference_results.csv) as a line where one exists for that
script, env and budget, else in words with its budget; random play where a report measured it. Its title names the
script, the env, the steps against the published budget, the seeds and the verdict: compare.py's rule (a stored
verdict of its earlier rule is read by today's), or report.py's for our runs alone. A file that does not read as
curves.csv stops it with one line.
"""

import argparse
import csv
import glob
import math
import os
import re
import sys
import tempfile

import numpy as np

from benchmark.cli import ConfigError
from benchmark.curves import CURVE_COLUMNS, curve_row, short_verdict, write_curves
from benchmark.reference import COMPARABLE_METRIC, game, load_reference, number, pick_reference
from benchmark.runs import RESULTS, RETURN_TAG

FIX = "write it with benchmark/tools/compare.py, or rebuild it from its report with --from-report"
COLUMNS_PER_ROW = 3
# The front figure: per script, the folder under --results whose curves.csv is its panel. Left to their pages: the
# settings of ours (fp32 vs bf16, the learning rate's annealing, --gymnasium-normalization), SB3's TRPO with either
# KL direction (the difference the TRPO comparison found), and ppo_atari.py at 1M beside CleanRL's (its panel is 10M).
FRONT = {
    "ppo_atari.py": "ppo_atari_breakout_10m_2026-11-30",
    "ppo_atari_lstm.py": "vs_cleanrl_ppo_atari_lstm_breakout_1m_2026-11-25",
    "ppo_atari_envpool.py": "vs_cleanrl_ppo_atari_envpool_breakout_1m_2026-11-25",
    "ppo_continuous_action.py": "vs_cleanrl_ppo_continuous_action_walker2d_1m_2026-11-24",
    "trpo_continuous_action.py": "trpo_vs_sb3_hopper_1000000/ours_vs_sb3",
    "a2c_paac.py": "paac_vs_sb3_breakout_2000000/ours_vs_sb3",
}
# compare.py's group labels, and the scripts their runs are of, in plain words
REFERENCE_NAMES = {
    "sb3_a2c.py": "Stable-Baselines3's A2C, run here",
    "sb3_trpo.py": "Stable-Baselines3 Contrib's TRPO, run here",
}
# random play's return per game, and the report that measured it
RANDOM_PLAY = {"Breakout": (1.3, "paac_vs_sb3_breakout_2m_2026-11-25.md")}
# a published metric other than the final return of training (the mean of the last 100 games), in words
METRIC_WORDS = {"episodic_return_eval_best_of_3": "the best of 3 agents, evaluated"}


# ---- curves.csv from a report whose runs are gone -------------------------------------------------------------


def side(cell):
    """compare.py's table cell "mean [min, max] (seeds)" -> (seeds, (mean, min, max)); "—" -> (0, None)."""
    if cell == "—":
        return 0, None
    m = re.fullmatch(r"(\S+) \[(\S+), (\S+)\] \((\d+)\)", cell)
    if not m:
        raise ConfigError(f"table cell {cell!r} is not compare.py's 'mean [min, max] (seeds)'")
    return int(m[4]), tuple(float(m[i]) for i in (1, 2, 3))


def curves_from_report(report_dir):
    """The rows of curves.csv from the tables of a compare.py report.md (per_seed left empty)."""
    path = os.path.join(report_dir, "report.md")
    try:
        text = open(path).read()
    except OSError as e:
        raise ConfigError(f"--from-report {report_dir}: cannot read {path} ({e.strerror}); give compare.py's --out folder")
    groups = re.finditer(r"^- (\S+): \d+ runs?, last steps [^:]*: (.*)$", text, re.M)  # "- ours: 3 runs, ...: `dir`, ..."
    runs = {m[1]: re.findall(r"`([^`]+)`", m[2]) for m in groups}
    rows = []
    for section in text.split("\n## ")[1:]:
        tag, body = section.split("\n", 1)
        verdict = re.search(r"^Verdict: \*\*(.*)\*\*$", body, re.M)
        header = re.search(r"^\| window \| steps \| (.+?) \| (.+?) \| Welch p \|", body, re.M)
        if not (verdict and header):
            continue
        for line in re.findall(r"^\| \d+ \|.*$", body, re.M):
            window, steps, *cells = [c.strip() for c in line.strip("|").split("|")][:4]
            start, end = steps.split("-")
            for label, cell in zip(header.groups(), cells):
                try:
                    seeds, stats = side(cell)
                except ConfigError as e:
                    raise ConfigError(f"--from-report {report_dir}: {e}; give compare.py's --out folder") from None
                rows.append(
                    curve_row(
                        tag, int(window), float(start), float(end), label, runs.get(label, []), seeds, stats, [], verdict[1]
                    )
                )
    if not rows:
        raise ConfigError(f"--from-report {report_dir}: {path} holds no compare.py table; give compare.py's --out folder")
    return rows


# ---- reading curves.csv ---------------------------------------------------------------------------------------


def read_curves(path):
    """The return's windows of one curves.csv: {"groups": [(label, script, env_id)] x 1 or 2, "windows": [(start, end)],
    "seeds", "mean", "min", "max": arrays [group, window] (nan where a group has no data), "verdict"}."""
    name = os.path.relpath(path)
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            rows, columns = list(reader), reader.fieldnames or []
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ConfigError(f"{name}: cannot be read ({getattr(e, 'strerror', None) or e}); {FIX}") from None
    missing = [c for c in CURVE_COLUMNS if c not in columns]
    if missing:
        raise ConfigError(f"{name} has no {missing[0]!r} column; {FIX}")
    rows = [r for r in rows if r["tag"] == RETURN_TAG]
    labels = list(dict.fromkeys(r["group"] for r in rows))
    if len(labels) not in (1, 2):
        raise ConfigError(
            f"{name} holds {len(labels)} groups of {RETURN_TAG} rows ({', '.join(labels) or 'none'}), not 1 or 2; {FIX}"
        )
    try:
        windows = sorted({(int(r["window"]), float(r["start"]), float(r["end"])) for r in rows})
        table = {
            (r["group"], int(r["window"])): (int(r["seeds"]), *(float(r[k] or "nan") for k in ("mean", "min", "max")))
            for r in rows
        }
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{name}: a {RETURN_TAG} row holds a value that is not a number ({e}); {FIX}") from None
    if (
        [w for w, _, _ in windows] != list(range(1, len(windows) + 1))
        or len(windows) < 2
        or len(table) != len(rows)
        or len(rows) != len(labels) * len(windows)
        or any(start >= end for _, start, end in windows)
    ):
        raise ConfigError(
            f"{name}: the {RETURN_TAG} windows are not 1..n (n >= 2) with one row per group and a start below each end; {FIX}"
        )
    stats = np.array([[table[label, w] for w, _, _ in windows] for label in labels])  # [group, window, 4]
    with np.errstate(invalid="ignore"):
        if (
            np.any(stats[..., 2] > stats[..., 1])
            or np.any(stats[..., 1] > stats[..., 3])
            or np.any(np.isnan(stats[..., 1]) != (stats[..., 0] == 0))
        ):
            raise ConfigError(f"{name}: a {RETURN_TAG} row is not min <= mean <= max over its seeds; {FIX}")
    first = {label: next(r for r in rows if r["group"] == label) for label in labels}
    return {
        "path": path,
        "groups": [(label, first[label]["script"], first[label]["env_id"]) for label in labels],
        "windows": [(start, end) for _, start, end in windows],
        "seeds": stats[..., 0].max(1).astype(int),
        "mean": stats[..., 1],
        "min": stats[..., 2],
        "max": stats[..., 3],
        "verdict": first[labels[0]]["verdict"],
    }


def published_row(curves, reference):
    """The published row for the first group's script and env at the runs' budget, of the final return with a std: a
    row whose steps fall within the last window's width after the curve's end (a run's last step is its budget less
    < one batch); None if there is none."""
    (_, script, env_id), (start, end) = curves["groups"][0], curves["windows"][-1]
    rows = [
        r
        for r in reference
        if r["metric"] == COMPARABLE_METRIC
        and number(r["std"]) is not None
        and number(r["total_timesteps"]) is not None
        and end <= number(r["total_timesteps"]) < 2 * end - start
    ]
    return pick_reference(rows, script, env_id, None)


def published(curves, reference):
    """published_row's (steps, mean, std); None if there is none."""
    ref = published_row(curves, reference)
    return None if ref is None else (number(ref["total_timesteps"]), number(ref["mean"]), number(ref["std"]))


def published_elsewhere(curves, reference):
    """The published row for the first group's script and env at another budget (report.py's choice among them):
    (its steps, whose budget it is in words, "who at steps: mean ± std (metric)"); None where none has a budget."""
    (_, script, env_id) = curves["groups"][0]
    ref = pick_reference([r for r in reference if number(r["total_timesteps"]) is not None], script, env_id, None)
    if ref is None:
        return None
    steps, cleanrl = number(ref["total_timesteps"]), ref["notes"].startswith("impl=CleanRL")
    std = f" ± {ref['std']}" if number(ref["std"]) is not None else ""
    words = f" ({METRIC_WORDS.get(ref['metric'], ref['metric'])})" if ref["metric"] != COMPARABLE_METRIC else ""
    who = "CleanRL published" if cleanrl else "the paper"
    return steps, "the published" if cleanrl else "the paper's", f"{who} at {steps_str(steps)}: {ref['mean']}{std}{words}"


# ---- the figure -----------------------------------------------------------------------------------------------


def steps_str(n):
    return f"{n / 1e6:.3g}M" if n >= 1e5 else f"{n / 1e3:.3g}k"


def budget(curves):
    """The runs' budget: their last step (the budget less < one batch) to 2 digits, 999424 -> 1e6."""
    return float(f"{curves['windows'][-1][1]:.2g}")


def plain(label, script):
    """A group's name on the figure: ours, or the implementation its runs are of; another label (a setting of ours, in
    --all) as compare.py was given it."""
    if label == "ours":
        return "ours"
    if label == "cleanrl":
        return "CleanRL's script, run here"
    return REFERENCE_NAMES.get(script, label)


def panel_title(curves, mark, elsewhere):
    """Three lines: the script and env; the steps against the published budget, and the seeds; the verdict."""
    (_, script, env_id), seeds, steps = curves["groups"][0], curves["seeds"], budget(curves)
    if mark:
        steps_words = f"{steps_str(mark[0])} steps, the published budget"
    elif elsewhere:
        steps_words = f"{steps_str(steps)} steps of {elsewhere[1]} {steps_str(elsewhere[0])}"
    else:
        steps_words = f"{steps_str(steps)} steps"
    count = f"{seeds[0]} vs {seeds[1]} seeds" if len(seeds) == 2 else f"{seeds[0]} seed{'s' * int(seeds[0] > 1)}"
    if len(seeds) == 2:
        verdict = short_verdict(curves["verdict"])
        verdict = "same: no window differs" if verdict == "same" else verdict
    else:
        verdict = curves["verdict"]  # report.py's, our runs alone beside the published number
    return f"{script} · {env_id}\n{steps_words} · {count}\n{verdict}", verdict


def draw(panels, reference, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ncols = min(COLUMNS_PER_ROW, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 4.3 * nrows + 0.9), squeeze=False)
    drawn = []
    for ax, curves in zip(axes.flat, panels):
        centers = np.array([(s + e) / 2 for s, e in curves["windows"]])
        for i, (label, script, _) in enumerate(curves["groups"]):
            ok = ~np.isnan(curves["mean"][i])
            ax.fill_between(centers[ok], curves["min"][i][ok], curves["max"][i][ok], color=f"C{i}", alpha=0.22, lw=0)
            ax.plot(centers[ok], curves["mean"][i][ok], color=f"C{i}", lw=1.8, marker="o", ms=3, label=plain(label, script))
        (_, script, env_id) = curves["groups"][0]
        mark = published(curves, reference)
        elsewhere = None if mark else published_elsewhere(curves, reference)
        if mark:
            who = "CleanRL published" if published_row(curves, reference)["notes"].startswith("impl=CleanRL") else "published"
            ax.axhspan(mark[1] - mark[2], mark[1] + mark[2], color="black", alpha=0.07, lw=0)
            ax.axhline(mark[1], color="black", ls="--", lw=1.2, label=f"{who}: {mark[1]:g} ± {mark[2]:g}")
        elif elsewhere:  # off the panel's scale: in words, a legend entry without a line
            ax.plot([], [], " ", label=elsewhere[2])
        if game(env_id) in RANDOM_PLAY:
            random_play = RANDOM_PLAY[game(env_id)][0]
            ax.axhline(random_play, color="gray", ls=":", lw=1.2, label=f"random play ~{random_play:g}")
        title, verdict = panel_title(curves, mark, elsewhere)
        plain_verdict = verdict.startswith(("same", "within"))
        ax.set_title(title, fontsize=9.5, color="black" if plain_verdict else "darkred")
        ax.xaxis.set_major_locator(MaxNLocator(5, steps=[1, 2, 2.5, 5, 10]))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1e6:g}M" if x else "0"))
        ax.set_xlabel("environment steps", fontsize=8.5)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        legend = ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.17), frameon=False, borderaxespad=0)
        texts = [ax.get_title(), ax.get_xlabel(), *(t.get_text() for t in legend.get_texts())]
        drawn.append({"path": curves["path"], "script": script, "title": ax.get_title(), "published": mark, "texts": texts})
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("episodic return (raw score)", fontsize=9)
    fig.suptitle(
        "Each script's return per tenth of its steps beside its reference's: the mean over seeds (line) and their "
        'min-max (band).\nVerdict (benchmark/tools/compare.py): "same" when no window\'s Welch t-test, Holm-adjusted over '
        "the 10 windows, has p < 0.05; with 2-4 seeds a side it finds large differences only.\nOur runs alone "
        "(benchmark/tools/report.py): their final return, the last 100 games, within or outside the published mean ± std.",
        fontsize=10.5,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return drawn


def check_out(out):
    """--out: a file, in a format matplotlib writes, in a folder that exists and takes a file; else one line."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats, ext = FigureCanvasBase.get_supported_filetypes(), os.path.splitext(out)[1][1:].lower()
    folder = os.path.dirname(os.path.abspath(out))
    if os.path.isdir(out):
        raise ConfigError(f"--out {out} is a folder; give the figure's file, e.g. {os.path.join(out, 'summary.png')}")
    if ext not in formats:
        raise ConfigError(
            f"--out {out}: {f'matplotlib cannot write .{ext}' if ext else 'no extension'}; end it in one "
            f"of {', '.join('.' + f for f in sorted(formats))}"
        )
    if not os.path.isdir(folder):
        raise ConfigError(f"--out {out}: its folder does not exist; give a path in an existing folder")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise ConfigError(
            f"--out {out}: its folder cannot be written to ({e.strerror}); give a path in one that can"
        ) from None


def front_panels(results, front):
    """The curves.csv of each script in `front`, in its order; one line if one is missing or is of another script."""
    panels = []
    for script, folder in front.items():
        path = os.path.join(results, folder, "curves.csv")
        if not os.path.isfile(path):
            raise ConfigError(
                f"{results} has no {folder}/curves.csv, {script}'s panel; give the repository's benchmark/results, "
                "or --all to draw every curves.csv there"
            )
        panels.append(read_curves(path))
        if panels[-1]["groups"][0][1] != script:
            raise ConfigError(f"{os.path.relpath(path)} is of {panels[-1]['groups'][0][1]!r}, not {script}'s panel")
    return panels


def summarize(results=RESULTS, out=None, from_report=(), front=FRONT):
    """Write the curves.csv of each `from_report` folder, then draw the panels of `front` ({script: folder under
    `results`}; None: every curves.csv under `results`, by the first group's script, then path) into `out`; returns the
    panels drawn ({"path", "script", "title", "published", "texts": every text on the panel})."""
    if out:  # before anything is written (the default, in --results, once curves.csv files are found there)
        check_out(out)
    for d in from_report:
        write_curves(os.path.join(d, "curves.csv"), curves_from_report(d))
    if front is None:
        paths = sorted(glob.glob(os.path.join(results, "**", "curves.csv"), recursive=True))
        if not paths:
            raise ConfigError(f"no curves.csv under {results}; run benchmark/tools/compare.py, or give --from-report DIR")
        panels = sorted((read_curves(path) for path in paths), key=lambda c: (c["groups"][0][1], c["path"]))
    else:
        panels = front_panels(results, front)
    if not out:
        out = os.path.join(results, "summary.png")
        check_out(out)
    return draw(panels, load_reference(), out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", default=RESULTS, help="the folder the panels' curves.csv files are in")
    p.add_argument("--out", default=None, help="the figure (default: summary.png in --results)")
    p.add_argument(
        "--all", action="store_true", help="one panel per curves.csv under --results (recursively), not one per script"
    )
    p.add_argument(
        "--from-report",
        nargs="+",
        default=[],
        metavar="DIR",
        help="first write DIR/curves.csv from DIR/report.md (compare.py's --out folders whose runs are gone)",
    )
    args = p.parse_args(argv)
    try:
        drawn = summarize(args.results, args.out, args.from_report, None if args.all else FRONT)
    except ConfigError as e:
        print(f"summary.py: error: {e}", file=sys.stderr)
        return 2
    print(f"summary.py: drew {len(drawn)} panels into {args.out or os.path.join(args.results, 'summary.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
