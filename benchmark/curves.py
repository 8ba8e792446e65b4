"""Two groups of runs side by side, window by window: each seed's mean in a window of the step axis, Welch's t-test over
the per-seed means, Holm's adjustment across the windows, the verdict; and curves.csv, the windows as summary.py's
figure reads them."""

import csv
import os
import re
import warnings

import numpy as np

from benchmark.runs import RETURN_TAG, run_name_parts, script_of

# the scalars two groups are compared on by default: the return and the losses
TAGS = [RETURN_TAG, "losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac"]

# curves.csv: one row per tag, window and group; per_seed is empty where the runs were gone when it was written
CURVE_COLUMNS = [
    "tag",
    "window",
    "start",
    "end",
    "group",
    "script",
    "env_id",
    "seeds",
    "mean",
    "min",
    "max",
    "per_seed",
    "verdict",
]


# ---- the statistics ----------------------------------------------------------------------------------------------


def welch_p(a, b):
    """Welch's t-test p of two samples; None when a side has fewer than 2 values (no test), nan when both are
    constant and equal (no spread to test against)."""
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy import stats

    with warnings.catch_warnings():  # scipy warns on (nearly) constant samples; its p is still the right one
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def holm(pvalues):
    """Holm-Bonferroni adjusted p values, in the input order: the k-th smallest of m is multiplied by m - k + 1,
    then made non-decreasing in that order and capped at 1. A nan stays nan and is not one of the m tests."""
    p = np.asarray(pvalues, dtype=np.float64)
    adjusted = np.full(p.shape, np.nan)
    tested = np.flatnonzero(~np.isnan(p))
    order = tested[np.argsort(p[tested], kind="stable")]
    m = len(order)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    return adjusted


def window_means(steps, values, edges):
    """The mean of the values logged in each window (edges[i], edges[i + 1]] (step 0 in the first); nan if none."""
    steps, values = np.asarray(steps, dtype=np.float64), np.asarray(values, dtype=np.float64)
    idx = np.clip(np.searchsorted(edges, steps, side="left") - 1, 0, len(edges) - 2)
    sums = np.bincount(idx, weights=values, minlength=len(edges) - 1)
    counts = np.bincount(idx, minlength=len(edges) - 1)
    with np.errstate(invalid="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def short_verdict(verdict):
    """A stored verdict read by the rule above: "same", "differ: windows 9, 10 differ" or "no test: n=1 in ...". A
    report written under the earlier rule reads the same way: the windows it names are the test's, and a "differ"
    that named none rested on the final means' min-max alone, which the rule no longer asks."""
    if verdict.startswith("no test"):
        return verdict.split(" (")[0]
    flagged = re.match(r"differ: (windows [\d, ]+ differ)", verdict)
    return f"differ: {flagged[1]}" if flagged else "same"


# ---- curves.csv --------------------------------------------------------------------------------------------------


def run_identity(run_dir):
    """(script, env id) from a run directory's name (run.py's run_name_parts and script_of); ("", "") for another name."""
    named = run_name_parts(os.path.basename(os.path.normpath(run_dir)))
    return (script_of(named["exp_name"]), named["env_id"]) if named else ("", "")


def curve_row(tag, window, start, end, label, run_dirs, seeds, stats, per_seed, verdict):
    """One row of curves.csv: a group's window over `seeds` seeds, `stats` the (mean, min, max) of their window means
    (None when no seed logged in it), `per_seed` those means where known, with the script and env id of its runs."""
    script, env_id = (" ".join(sorted(set(x))) for x in zip(*map(run_identity, run_dirs))) if run_dirs else ("", "")
    return dict(
        zip(
            CURVE_COLUMNS,
            [
                tag,
                window,
                f"{start:.0f}",
                f"{end:.0f}",
                label,
                script,
                env_id,
                seeds,
                *([f"{x:.10g}" for x in stats] if stats else ["", "", ""]),
                " ".join(f"{v:.10g}" for v in per_seed),
                verdict,
            ],
        )
    )


def write_curves(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, CURVE_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
