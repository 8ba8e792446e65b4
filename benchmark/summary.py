"""One figure of every side-by-side comparison in benchmark/results/: the README's evidence at a glance.

Run:   python benchmark/summary.py [--results benchmark/results] [--out benchmark/results/summary.png]
       python benchmark/summary.py --from-report DIR [DIR ...]   (then draws)

Each comparison is a curves.csv beside its report (benchmark/compare.py writes it; --from-report rebuilds it from a
compare.py report.md whose runs are gone: its tables hold each group's mean, min and max over seeds per window, to four
digits, and no per-seed values); benchmark/report.py --curves writes one of our runs alone, beside the published number
(a run no peer's runs here match: Breakout at 10M). One panel per file: the return (charts/episodic_return) of each group
per window,
each group's mean over seeds and its min-max band on one step axis; the published final number (mean ± std from
benchmark/reference_results.csv) as a marker where one exists for that script, env and budget; titled with the script,
env, budget, seeds and compare.py's verdict, and labelled with the report's folder. A file that does not read as
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import CURVE_COLUMNS, curve_row, write_curves  # noqa: E402
from report import COMPARABLE_METRIC, _num, load_reference, pick_reference  # noqa: E402
from run import RETURN_TAG, ConfigError  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
FIX = "write it with benchmark/compare.py, or rebuild it from its report with --from-report"
COLUMNS_PER_ROW = 3


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


def published(curves, reference):
    """The published (steps, mean, std) for the first group's script and env at the runs' budget: a row whose steps
    fall within the last window's width after the curve's end (a run's last step is its budget less < one batch)."""
    (_, script, env_id), (start, end) = curves["groups"][0], curves["windows"][-1]
    rows = [
        r
        for r in reference
        if r["metric"] == COMPARABLE_METRIC
        and _num(r["std"]) is not None
        and _num(r["total_timesteps"]) is not None
        and end <= _num(r["total_timesteps"]) < 2 * end - start
    ]
    ref = pick_reference(rows, script, env_id, None)
    return None if ref is None else (_num(ref["total_timesteps"]), _num(ref["mean"]), _num(ref["std"]))


# ---- the figure -----------------------------------------------------------------------------------------------


def steps_str(n):
    return f"{n / 1e6:.2g}M" if n >= 1e5 else f"{n / 1e3:.2g}k"


def short_verdict(verdict):
    """compare.py's verdict without its details: "same", "differ: windows 1, 2 differ", "differ: final means outside
    the seed spread", "no test: n=1 in cleanrl"."""
    return verdict.split(" (")[0].split(";")[0].replace("each other's seed spread", "the seed spread")


def draw(panels, reference, results, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ncols = min(COLUMNS_PER_ROW, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.1 * ncols, 3.4 * nrows + 0.6), squeeze=False)
    drawn = []
    for ax, curves in zip(axes.flat, panels):
        centers = np.array([(s + e) / 2 for s, e in curves["windows"]])
        for i, (label, script, _) in enumerate(curves["groups"]):
            ok = ~np.isnan(curves["mean"][i])
            ax.fill_between(centers[ok], curves["min"][i][ok], curves["max"][i][ok], color=f"C{i}", alpha=0.22, lw=0)
            ax.plot(centers[ok], curves["mean"][i][ok], color=f"C{i}", lw=1.8, marker="o", ms=3, label=label)
        mark = published(curves, reference)
        if mark:
            ax.errorbar(
                [mark[0]],
                [mark[1]],
                yerr=[mark[2]],
                fmt="D",
                color="black",
                ms=5,
                capsize=3,
                label=f"published {mark[1]:.0f} ± {mark[2]:.0f}",
            )
        (la, script, env_id), seeds = curves["groups"][0], curves["seeds"]
        sides = f"{la} vs {curves['groups'][1][0]}, {seeds[0]} vs {seeds[1]}" if len(seeds) == 2 else f"{la}, {seeds[0]}"
        verdict = short_verdict(curves["verdict"])
        sides += " seeds" if max(seeds) > 1 else " seed"
        ax.set_title(
            f"{script} · {env_id} · {steps_str(curves['windows'][-1][1])}\n{sides}:\n{verdict}",
            fontsize=10,
            color="black" if verdict == "same" or verdict.startswith("within") else "darkred",
        )
        ax.xaxis.set_major_locator(MaxNLocator(5, steps=[1, 2, 2.5, 5, 10]))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1e6:g}M" if x else "0"))
        ax.set_xlabel(os.path.relpath(os.path.dirname(curves["path"]), results), fontsize=7.5, color="dimgray")  # its report
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
        drawn.append({"path": curves["path"], "title": ax.get_title(), "published": mark})
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("episodic return (raw score)", fontsize=9)
    fig.suptitle(
        "The return per window of the steps, each group's mean over seeds (line) and min-max (band); "
        "benchmark/compare.py's verdict:\n\"same\" when no window differs (Welch's t-test, Holm-adjusted "
        "p < 0.05) and each last-window mean lies within the other group's seed range;\nalone (one group): "
        "benchmark/report.py's, its final return beside the published mean ± std",
        fontsize=10.5,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.96))
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


def summarize(results=RESULTS, out=None, from_report=()):
    """Write the curves.csv of each `from_report` folder, then draw every curves.csv under `results` into `out`;
    returns the panels drawn ({"path", "title", "published"}), by the first group's script, then path."""
    if out:  # before anything is written (the default, in --results, once curves.csv files are found there)
        check_out(out)
    for d in from_report:
        write_curves(os.path.join(d, "curves.csv"), curves_from_report(d))
    paths = sorted(glob.glob(os.path.join(results, "**", "curves.csv"), recursive=True))
    if not paths:
        raise ConfigError(f"no curves.csv under {results}; run benchmark/compare.py, or give --from-report DIR")
    panels = sorted((read_curves(path) for path in paths), key=lambda c: (c["groups"][0][1], c["path"]))  # by script
    if not out:
        out = os.path.join(results, "summary.png")
        check_out(out)
    return draw(panels, load_reference(), results, out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", default=RESULTS, help="the folder searched for curves.csv files (recursively)")
    p.add_argument("--out", default=None, help="the figure (default: summary.png in --results)")
    p.add_argument(
        "--from-report",
        nargs="+",
        default=[],
        metavar="DIR",
        help="first write DIR/curves.csv from DIR/report.md (compare.py's --out folders whose runs are gone)",
    )
    args = p.parse_args(argv)
    try:
        drawn = summarize(args.results, args.out, args.from_report)
    except ConfigError as e:
        print(f"summary.py: error: {e}", file=sys.stderr)
        return 2
    print(f"summary.py: drew {len(drawn)} panels into {args.out or os.path.join(args.results, 'summary.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
