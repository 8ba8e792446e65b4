"""The published numbers (reference_results.csv, copied from ../shared/reference/): reading them, choosing the row to set
beside a (script, env, budget), and the verdict of a mean against it."""

import csv
import os

from benchmark.cli import ConfigError

REFERENCE_CSV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_results.csv")
COMPARABLE_METRIC = "episodic_return_final"
REFERENCE_COLUMNS = ("script", "env_id", "metric", "total_timesteps", "mean", "std", "notes", "source")


def number(x):
    """x as a float, or None: blank, or an approximate value such as "~2250"."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def load_reference(path=REFERENCE_CSV):
    fix = "give a CSV with the columns of benchmark/reference_results.csv"
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            rows, columns = list(reader), reader.fieldnames or []
    except (OSError, ValueError) as e:
        raise ConfigError(f"--reference {path}: {getattr(e, 'strerror', None) or e}; {fix}") from None
    missing = [c for c in REFERENCE_COLUMNS if c not in columns]
    if missing:
        raise ConfigError(f"--reference {path} has no {missing[0]!r} column; {fix}")
    return rows


def game(env_id):
    """The game behind an env id ("BreakoutNoFrameskip-v4", "Breakout-v5" -> "Breakout"), for papers that name games."""
    name = env_id.split("/")[-1]
    for suffix in ("NoFrameskip-v4", "NoFrameskip-v0", "-v5", "-v4", "-v0"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def pick_reference(rows, script, env_id, budget):
    """The published row for (script, env). In order of preference: the same env id (over the same game
    named by a paper), the metric we compute, the same steps budget, CleanRL's own implementation (the
    notes say impl=CleanRL), a published std, the earliest in the file. None when nothing is published."""
    cands = [
        (i, r)
        for i, r in enumerate(rows)
        if r["script"] == script and number(r["mean"]) is not None and (r["env_id"] == env_id or r["env_id"] == game(env_id))
    ]
    if not cands:
        return None

    def rank(i_row):
        i, r = i_row
        return (
            r["env_id"] != env_id,
            r["metric"] != COMPARABLE_METRIC,
            number(r["total_timesteps"]) != budget,
            not r["notes"].startswith("impl=CleanRL"),
            number(r["std"]) is None,
            i,
        )

    return min(cands, key=rank)[1]


def verdict(ours_mean, budget, ref):
    """within / above / below the published mean +- std, or why the two cannot be compared."""
    if ref is None:
        return "not comparable: nothing published"
    if ref["metric"] != COMPARABLE_METRIC:
        return f"not comparable: published metric is {ref['metric']}"
    ref_budget = number(ref["total_timesteps"])
    if ref_budget is None or budget is None or int(ref_budget) != int(budget):
        return "not comparable: budget differs"
    mean, std = number(ref["mean"]), number(ref["std"])
    if std is None:
        return "not comparable: no published std"
    # published values carry two decimals; a tiny tolerance keeps e.g. -200 vs -200.00 +- 0.00 "within"
    tol = 1e-9 * max(1.0, abs(mean))
    if ours_mean > mean + std + tol:
        return "above"
    if ours_mean < mean - std - tol:
        return "below"
    return "within"
