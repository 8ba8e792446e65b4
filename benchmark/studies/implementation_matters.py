"""Implementation Matters in Deep Policy Gradients (Engstrom et al. 2020): what benchmark/studies/implementation_matters.sh
runs, the stored runs, and the report.

Run:   bash benchmark/studies/implementation_matters.sh [short]          (calls the three commands below; STORE, STEPS)
       python -m benchmark.studies.implementation_matters plan --mode full|short --store DIR [--cells CELL ...] [--steps N]
       python -m benchmark.studies.implementation_matters store runs/ --store DIR [--steps N]
       python -m benchmark.studies.implementation_matters report --store DIR [--out DIR] [--steps N]
       python -m benchmark.studies.implementation_matters mujoco-dir      (where a study on another MuJoCo goes: mujoco_dir)

The settings are the paper's released configs (MadryLab/implementation-matters: src/MuJoCo.json, overridden by
configs/{walker,hopper}_{ppo,ppom,ppo_noclip,trpo,trpo_plus}.py), as the flags of ppo_continuous_action.py (PPO, PPO-M,
PPO-NoClip) and trpo_continuous_action.py (TRPO, TRPO+). PPO-M turns every code-level detail off but keeps observation
normalisation (without its clip); PPO-NoClip keeps them, sets the clip to 1e32 and clips the policy's gradient alone;
TRPO+ turns them on in TRPO, at the constant delta its released code ran (its configs' KL schedule never reached the
step: DIFFERENCES), and with no gradient clip (its config's 1.0 is read by the paper's PPO step only).
Where the configs and the paper's Tables 4 and 6 differ, the configs are followed (Hopper PPO-NoClip's state clip: 10
in the config, 2.5 in Table 6; Walker2d's: none in the config, 30 in Table 4). What the paper's code does otherwise,
and we do not, is listed in the report (DIFFERENCES below).

`store` keeps each finished run (run.py's summary says ok) of a planned cell as a row of runs.csv (its final return:
the mean of its last 100 episodic returns, as every result here) and its Figure 2 numbers every 4 iterations in
iterations.csv; `plan` skips the seeds stored there, so the study goes on across machines, and `report` reads nothing else.
One `store` at a time writes a store (a lock on its folder), each file whole (a temporary file, then renamed); every
reader checks each row (a nan return, a run's row twice and a cell the study does not have are refused too), and names
the file and line it cannot read. `store` names, in a warning line, a run's event file cut short (a run killed while
writing it), whose records before the cut it stores, and refuses a summary whose run folder is gone. --steps (default
1M) plans, stores and reports runs of another length (a smoke sweep), apart from the study's.
"""

import argparse
import contextlib
import csv
import fcntl
import glob
import io
import json
import os
import subprocess
import sys
import zlib

import numpy as np

from benchmark.cli import ConfigError, writable
from benchmark.runs import RETURN_TAG, ROOT, args_hash, cut_short, read_run

STEPS = 1000000
PROTOCOL = "--num-envs 1 --num-steps 2048 --num-minibatches 32 --update-epochs 10 --save-model --save-every 50"
MINIMAL = "--max-grad-norm inf --no-clip-vloss --no-anneal-lr --reward-scaling none --no-ortho-init --clip-obs inf"
DETAILS = "--reward-scaling returns --clip-reward 10 --clip-obs 10 --ortho-init --max-grad-norm inf"  # TRPO+'s
SETTINGS = {  # (algorithm, env): flags; policy and value learning rates, lambda, clips and entropy per config
    ("PPO", "Walker2d-v4"): "--learning-rate 4e-4 --value-lr 3e-4 --max-grad-norm inf",
    ("PPO", "Hopper-v4"): "--learning-rate 3e-4 --value-lr 2.5e-4 --max-grad-norm inf --no-clip-vloss",
    ("PPO-M", "Walker2d-v4"): f"--learning-rate 1e-4 --value-lr 2e-4 {MINIMAL}",
    ("PPO-M", "Hopper-v4"): f"--learning-rate 1.7e-4 --value-lr 4e-4 {MINIMAL}",
    ("PPO-NoClip", "Walker2d-v4"): "--learning-rate 7.25e-5 --value-lr 6e-4 --clip-coef 1e32 --ent-coef=-0.01 "
    "--gae-lambda 0.85 --reward-scaling rewards --clip-reward 30 --clip-obs inf "
    "--max-grad-norm 0.1 --grad-clip-scope actor --no-clip-vloss",
    ("PPO-NoClip", "Hopper-v4"): "--learning-rate 6e-5 --value-lr 4e-4 --clip-coef 1e32 --ent-coef=-0.005 "
    "--gae-lambda 0.925 --reward-scaling rewards --clip-reward 2.5 --max-grad-norm 4 "
    "--grad-clip-scope actor --no-clip-vloss",
    ("TRPO", "Walker2d-v4"): "--max-kl 0.04 --value-lr 3e-4",  # trpo_continuous_action.py's defaults: no details
    ("TRPO", "Hopper-v4"): "--max-kl 0.13 --value-lr 2e-4",
    # TRPO+'s delta: the configs' max_kl, constant; their max_kl_final never reached the released step (DIFFERENCES)
    ("TRPO+", "Walker2d-v4"): f"--max-kl 0.07 --value-lr 1e-4 {DETAILS}",
    ("TRPO+", "Hopper-v4"): f"--max-kl 0.04 --value-lr 2e-4 {DETAILS}",
}
SCRIPTS = {"TRPO": "trpo_continuous_action.py", "TRPO+": "trpo_continuous_action.py"}  # the others: PPO's
# the released configs/<name>.py of each cell, which benchmark/peers/paper_code.py runs on the same envs
RELEASED = {
    f"{game}_{name}": (cell, env)
    for game, env in (("walker", "Walker2d-v4"), ("hopper", "Hopper-v4"))
    for name, cell in (
        ("ppo", "PPO"),
        ("ppom", "PPO-M"),
        ("ppo_noclip", "PPO-NoClip"),
        ("trpo", "TRPO"),
        ("trpo_plus", "TRPO+"),
    )
}
ALGOS = ["PPO", "PPO-M", "TRPO", "TRPO+", "PPO-NoClip"]
# Figure 1: PPO's Walker2d settings with each of four details on or off (all on: the PPO cell's own runs)
SWITCHES = {
    "value_clipping": "--no-clip-vloss",
    "reward_scaling": "--reward-scaling none",
    "ortho_init": "--no-ortho-init",
    "anneal_lr": "--no-anneal-lr",
}
TABLE_SEEDS, FIGURE1_SEEDS, ENVS = range(1, 11), range(1, 5), ["Walker2d-v4", "Hopper-v4"]
CURVE_EVERY = 4  # iterations between stored Figure 2 points (the paper: 25)
RUN_PY_ITERATIONS = 5  # the released run.py's final result: the mean of the last 5 iterations' mean episode returns
LATE_WINDOWS = 3  # the report's second final return: the episodes of the last 3 stored windows (12 iterations)
CURVE_TAGS = (
    "losses/max_ratio",
    "losses/mean_kl",
    "losses/max_kl",
    "losses/explained_variance",
)  # the last: the critic's fit, read under Figure 1 (value clipping)
EARLY_ITERATIONS = 100  # the critic's fit over a run's first 100 iterations (205k steps)


def figure1_flags(off):
    """The flags of the Figure 1 combination with the switches in `off` turned off."""
    return " ".join([SETTINGS["PPO", "Walker2d-v4"]] + [SWITCHES[s] for s in SWITCHES if s in off])


def script_of(cell):
    return SCRIPTS.get(cell, "ppo_continuous_action.py")


def cells(mode):
    """The planned runs in the order they should run: [(cell, env, seeds, flags)]. The table's first four seeds come
    first, two at a time (a pair runs side by side; every cell gets a result early), then Figure 1's combinations, also
    in two passes of two seeds (a stopped sweep leaves every combination with as many seeds), then the table's other
    seeds."""
    table = [(algo, env, SETTINGS[algo, env]) for env in ENVS for algo in ALGOS]
    plan = [(algo, env, seeds, flags) for seeds in ([1, 2], [3, 4]) for algo, env, flags in table]
    if mode == "full":
        combos = [[s for i, s in enumerate(SWITCHES) if mask >> i & 1] for mask in range(1, 2 ** len(SWITCHES))]
        plan += [
            ("fig1 off: " + " ".join(off), "Walker2d-v4", seeds, figure1_flags(off))
            for seeds in ([1, 2], [3, 4])
            for off in combos
        ]
        plan += [(algo, env, list(TABLE_SEEDS)[4:], flags) for algo, env, flags in table]
    return plan


def extra_args(flags, steps=STEPS):
    """The script's args as run.py gets them from the sweep (common.sh: --total-timesteps first)."""
    return ["--total-timesteps", str(steps)] + f"{PROTOCOL} {flags}".split()


# ---- the store: each file read with every row checked, written whole, one `store` at a time ----------------------

# the columns the readers of each file need, and how their cells read (str: any text); where a file has them, the other
# columns' cells must read too (OPTIONAL); EMPTY: the cells that may be empty (a run.py reading not stored yet, a window
# in which no episode ended, a curve stored before the critic's fit was)
COLUMNS = {
    "runs.csv": {
        "cell": str,
        "script": str,
        "env_id": str,
        "seed": int,
        "args_hash": str,
        "flags": str,
        "final_return": float,
        "git_commit": str,
        "mujoco": str,
    },
    "iterations.csv": {
        "args_hash": str,
        "env_id": str,
        "seed": int,
        "iteration": int,
        "step": int,
        "mean_return": float,
        "max_ratio": float,
        "mean_kl": float,
        "max_kl": float,
    },
    "paper_code.csv": {"cell": str, "env_id": str, "seed": int, "config": str, "final_return": float, "final_5": float},
}
OPTIONAL = {"final_5": float, "explained_variance": float, "episodes": int, "global_step": int, "wall_time_s": float}
EMPTY = {("runs.csv", "final_5"), ("iterations.csv", "mean_return"), ("iterations.csv", "explained_variance")}
FIX = {
    "runs.csv": "delete that line; the next store of its runs/ stores that run again",
    "iterations.csv": "delete that line and its run's row in runs.csv; the next store of its runs/ stores both again",
    "paper_code.csv": "delete that line; the next store of its runs/ stores that run again",
}
RESTORE = "restore the file from a copy (git, or the machine that stored the runs)"
RETURNS = {"final_return", "final_5", "mean_return"}  # a nan or inf: a run gone wrong, never a result
KEYS = {"runs.csv": ("script", "args_hash", "env_id", "seed"), "paper_code.csv": ("config", "seed")}  # a run's row: once


def known_cell(cell):
    """A cell the study plans, or one of its runs of older settings ('<cell>, <what differed>')."""
    name = cell.split(",")[0]
    off = name.removeprefix("fig1 off: ").split()
    return name in ALGOS or name.startswith("fig1 off: ") and bool(off) and set(off) <= set(SWITCHES)


def read_csv(path):
    """The rows of a file of the store ([] where there is none), each checked: as many fields as the header, a line end
    (a write cut short leaves none), the columns in COLUMNS and their types, finite returns, a known cell, a run's row
    once; else one line naming the file, the line and the fix."""
    if not os.path.exists(path):
        return []
    name = os.path.basename(path)
    types, fix = {**OPTIONAL, **COLUMNS[name]} if name in COLUMNS else {}, FIX.get(name, "delete that line")
    try:
        with open(path, newline="") as f:
            text = f.read()
        reader = csv.reader(io.StringIO(text, newline=""))
        lines = [(reader.line_num, row) for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ConfigError(f"{path} cannot be read ({getattr(e, 'strerror', None) or e}); {RESTORE}") from None
    if not lines:
        raise ConfigError(f"{path} is empty, not even a header; {RESTORE}")
    header, rows = lines[0][1], [(n, row) for n, row in lines[1:] if row]  # blank lines passed over, as csv.DictReader
    missing = [c for c in COLUMNS.get(name, {}) if c not in header]
    if rows and missing:
        raise ConfigError(f"{path} has no {missing[0]!r} column; {RESTORE}")
    if not text.endswith("\n"):
        raise ConfigError(f"{path} line {lines[-1][0]} has no line end (a write cut short); {fix}")
    out, seen = [], {}
    for n, row in rows:
        if len(row) != len(header):
            raise ConfigError(f"{path} line {n} has {len(row)} fields, the header {len(header)}; {fix}")
        out.append(dict(zip(header, row)))
        for column, value in out[-1].items():
            if types.get(column, str) is not str and not (value == "" and (name, column) in EMPTY):
                try:
                    number = types[column](value)
                except ValueError:
                    kind = "a whole number" if types[column] is int else "a number"
                    raise ConfigError(f"{path} line {n}: {column} {value!r} is not {kind}; {fix}") from None
                if column in RETURNS and not np.isfinite(number):
                    raise ConfigError(f"{path} line {n}: {column} {value!r} is not a finite number; {fix}")
        if "cell" in out[-1] and not known_cell(out[-1]["cell"]):
            raise ConfigError(
                f"{path} line {n}: cell {out[-1]['cell']!r} is none of the study's ({', '.join(ALGOS)}, fig1 off: "
                f"<{' '.join(SWITCHES)}>); {fix}"
            )
        key = tuple(out[-1].get(c) for c in KEYS.get(name, ()))
        if key and key in seen:
            raise ConfigError(
                f"{path} lines {seen[key]} and {n} hold one run ({', '.join(KEYS[name])}); delete the one that is wrong"
            )
        seen[key] = n
    return out


def read_store(store):
    """The stored runs and their Figure 2 rows (read_csv); iterations.csv, written with every run stored, missing beside
    stored runs is one line."""
    runs, curves = read_csv(os.path.join(store, "runs.csv")), read_csv(os.path.join(store, "iterations.csv"))
    if runs and not os.path.exists(os.path.join(store, "iterations.csv")):
        raise ConfigError(f"{os.path.join(store, 'iterations.csv')} is missing beside {len(runs)} stored runs; {RESTORE}")
    return runs, curves


def key_of(row):
    return row["script"], row["args_hash"], row["env_id"], int(row["seed"])


def stored(store):
    return {key_of(r) for r in read_store(store)[0]}


@contextlib.contextmanager
def locked(store):
    """The store folder, made, held by this process alone (flock on the folder itself): a second `store` waits, then
    reads what the first stored, so that no run is stored twice."""
    writable(store, "--store")
    fd = os.open(store, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # and with it the lock


def lock_mujoco():
    """The MuJoCo of the study's tables: the one requirements/mujoco.txt locks."""
    with open(os.path.join(ROOT, "requirements", "mujoco.txt")) as f:
        return next(line.split("==")[1].split()[0] for line in f if line.startswith("mujoco=="))


def mujoco_dir():
    """'' on the lock's MuJoCo; on another (scripts/install.sh mujoco-ref) 'mujoco-<version>', the folder inside the
    store, and beside runs/, where the study on that MuJoCo goes: its plan, runs and stored runs apart from the
    tables', and the report sets them beside the same cells and seeds."""
    version = installed("mujoco")
    if not version:
        raise ConfigError("mujoco is not installed in this python: bash scripts/install.sh mujoco (or mujoco-ref)")
    return "" if version == lock_mujoco() else f"mujoco-{version}"


def plan(mode, store, only=None, steps=STEPS):
    """Print the runs still to make, one run.py call a line, of `steps` steps each (the sweep's STEPS); `only` keeps the
    named cells (fig1: Figure 1's)."""
    unknown = sorted(set(only or []) - set(ALGOS) - {"fig1"})
    if unknown:
        raise ConfigError(f"--cells: unknown cell {unknown[0]!r}; choose from {', '.join(ALGOS + ['fig1'])}")
    done = stored(os.path.join(store, mujoco_dir()))
    for cell, env, seeds, flags in cells(mode):
        if only and cell.split()[0] not in only:
            continue
        todo = [s for s in seeds if (script_of(cell), args_hash(extra_args(flags, steps)), env, s) not in done]
        if todo:
            print(f"{cell}\t{env}\t{' '.join(map(str, todo))}\t{script_of(cell)}\t{PROTOCOL} {flags}")


def installed(package):
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return ""


def append_rows(path, rows):
    """The file's rows, then `rows` under its header (a field a row lacks: empty; a field the header lacks: a column
    added, the older rows' cells empty), written whole (write_rows)."""
    write_rows(path, read_csv(path) + rows)


def write_rows(path, rows, columns=()):
    """Write the file afresh, its header `columns` and then the rows' other fields, through a temporary file put on
    disk and renamed over it: a crash leaves the old file or the new one, whole."""
    header = list(columns)
    for row in rows:
        header += [k for k in row if k not in header]
    with open(path + ".tmp", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, restval="")
        writer.writeheader()
        writer.writerows(rows)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def read_json(path, keys, fix):
    """A run's JSON (run.py's summary, paper_code.py's result) holding `keys`, else one line naming it and the fix."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path} cannot be read ({getattr(e, 'strerror', None) or e}); {fix}") from None
    missing = [k for k in keys if not isinstance(data, dict) or k not in data]
    if missing:
        raise ConfigError(f"{path} has no {missing[0]!r}; {fix}")
    return data


REWARDS_FIX = "7a973ae"  # --reward-scaling rewards became the released code's (r - mean) / std + mean here


def descends(commit, ancestor):
    """Whether `commit` (a run's git_commit, maybe ending in +dirty) has `ancestor` in its history (git decides; a run
    made outside a git checkout has none: no)."""
    if not commit:
        return False
    res = subprocess.run(
        ["git", "-C", ROOT, "merge-base", "--is-ancestor", ancestor, commit.split("+")[0]], capture_output=True
    )
    return res.returncode == 0


def run_py_reading(returns, ends, iteration_ends, last=RUN_PY_ITERATIONS):
    """The released run.py's final result read off one of our runs: over its last `last` iterations (ending at the
    steps iteration_ends), the mean of each iteration's mean return over the episodes that ended in it (an iteration
    where none ended is passed over; the released code, whose every iteration starts new episodes, has none)."""
    returns, ends, iteration_ends = np.asarray(returns), np.asarray(ends), sorted(set(iteration_ends))
    spans = list(zip([0] + iteration_ends[:-1], iteration_ends))[-last:]
    means = [returns[(ends > lo) & (ends <= hi)].mean() for lo, hi in spans if ((ends > lo) & (ends <= hi)).any()]
    return round(float(np.mean(means)), 2) if means else ""


SUMMARY_KEYS = (
    "ok",
    "script",
    "args",
    "env_id",
    "seed",
    "tb_dir",
    "final_return",
    "episodes",
    "global_step",
    "git_commit",
    "wall_time_s",
)  # what store reads of run.py's summary
RELEASED_KEYS = (
    "config",
    "seed",
    "params",
    "iteration_rewards",
    "episode_returns",
    "final_return",
    "final_5",
    "wall_time_s",
)  # and of paper_code.py's result
CURVE_KEYS = [tag.split("/")[1] for tag in CURVE_TAGS]
ITERATION_COLUMNS = ["args_hash", "env_id", "seed", "iteration", "step", "mean_return"] + CURVE_KEYS


def store_runs(runs_dir, store, steps=STEPS):
    """Add the finished runs of planned cells (of `steps` steps) that are not stored yet, and to stored runs whose runs
    are in runs_dir what was stored only later (the run.py reading; a curve of CURVE_TAGS); returns how many runs were
    added. On a MuJoCo other than the lock's, into the store's mujoco-<version>/ (mujoco_dir), and only runs that ran on
    it. One store at a time (locked); each file is read once, checked, and written once, whole, iterations.csv before
    runs.csv: a store stopped between the two leaves its runs unstored, and the next stores their curves anew."""
    if not os.path.isdir(runs_dir):
        raise ConfigError(f"{runs_dir} is not a folder; give the runs/ folder the sweep wrote")
    store, mujoco = os.path.normpath(os.path.join(store, mujoco_dir())), installed("mujoco")
    with locked(store):
        return add_runs(runs_dir, store, mujoco, steps)


def run_folder(runs_dir, summary, path):
    """The TensorBoard folder of the run of run.py's summary at `path`; an event file of it cut short is a warning line,
    the folder gone one line."""
    tb_dir = os.path.join(runs_dir, summary["tb_dir"])
    if not os.path.isdir(tb_dir):
        raise ConfigError(
            f"{path}: its run folder {tb_dir} is gone; put it back, or delete the summary and run that run again"
        )
    cut_short(tb_dir, "implementation_matters.py", "stored")
    return tb_dir


def add_runs(runs_dir, store, mujoco, steps):
    """store_runs' work, the store locked."""
    (runs, curves), released = read_store(store), read_csv(os.path.join(store, "paper_code.csv"))
    known = {(script_of(cell), args_hash(extra_args(flags, steps))): (cell, flags) for cell, _, _, flags in cells("full")}
    done, new_runs, new_curves, new_released = {key_of(r) for r in runs}, [], [], []
    lacking = {key_of(r) for r in runs if not r.get("final_5")}
    lacking_curves = {
        (r["args_hash"], r["env_id"], int(r["seed"])) for r in curves if any(r.get(k, "") == "" for k in CURVE_KEYS)
    }
    filled, filled_curves = {}, {}
    for path in sorted(glob.glob(os.path.join(runs_dir, "summaries", "*_continuous_action__*.json"))):
        summary = read_json(path, SUMMARY_KEYS, "delete it and rerun its run")
        key = (summary["script"], args_hash(summary["args"]), summary["env_id"], int(summary["seed"]))
        if key in done and summary["ok"] and key[1:] in lacking_curves:  # stored before a curve was
            tb_dir = run_folder(runs_dir, summary, path)
            for tag, k in zip(CURVE_TAGS, CURVE_KEYS):
                run = read_run(tb_dir, tag)
                if run["hparams"].get("mujoco", mujoco) == mujoco:  # the run stored here, not one on another MuJoCo
                    filled_curves.update(
                        {(*key[1:], step, k): f"{value:.5g}" for step, value in zip(run["steps"], run["returns"])}
                    )
        if key in lacking and summary["ok"]:  # stored before its run.py reading was
            tb_dir = run_folder(runs_dir, summary, path)
            run = read_run(tb_dir, RETURN_TAG)
            filled[key] = run_py_reading(run["returns"], run["steps"], read_run(tb_dir, CURVE_TAGS[0])["steps"])
            continue
        if not summary["ok"] or key[:2] not in known or key in done:
            continue
        if "--reward-scaling rewards" in known[key[:2]][1] and not descends(summary["git_commit"], REWARDS_FIX):
            print(
                f"implementation_matters.py: not stored: {path} ran --reward-scaling rewards as r / std (before "
                f"{REWARDS_FIX}); move its run out of {runs_dir} and rerun it"
            )
            continue
        tb_dir = run_folder(runs_dir, summary, path)
        run, logged = read_run(tb_dir, RETURN_TAG), {tag: read_run(tb_dir, tag) for tag in CURVE_TAGS}
        if run["hparams"].get("mujoco", mujoco) != mujoco:
            print(
                f"implementation_matters.py: not stored: {path} ran on MuJoCo {run['hparams']['mujoco']}, this python "
                f"has {mujoco}; store it with the python it ran with"
            )
            continue
        steps_of = logged[CURVE_TAGS[0]]["steps"]
        cell, flags = known[key[:2]]
        new_runs.append(
            {
                "cell": cell,
                "script": key[0],
                "env_id": key[2],
                "seed": key[3],
                "args_hash": key[1],
                "flags": flags,
                "final_return": round(summary["final_return"], 2),
                "episodes": summary["episodes"],
                "global_step": summary["global_step"],
                "git_commit": summary["git_commit"],
                "mujoco": mujoco,
                "wall_time_s": summary["wall_time_s"],
                "final_5": run_py_reading(run["returns"], run["steps"], steps_of),
            }
        )
        returns, ends = np.array(run["returns"]), np.array(run["steps"])
        for i in range(CURVE_EVERY - 1, len(steps_of), CURVE_EVERY):
            window = returns[(ends > (steps_of[i - CURVE_EVERY] if i >= CURVE_EVERY else 0)) & (ends <= steps_of[i])]
            new_curves.append(
                {
                    "args_hash": key[1],
                    "env_id": key[2],
                    "seed": key[3],
                    "iteration": i + 1,
                    "step": steps_of[i],
                    "mean_return": round(float(window.mean()), 2) if len(window) else "",
                    **{
                        k: f"{logged[tag]['returns'][i]:.5g}" if i < len(logged[tag]["returns"]) else ""
                        for tag, k in zip(CURVE_TAGS, CURVE_KEYS)
                    },
                }
            )
        done.add(key)
    if filled:
        for r in runs:
            r["final_5"] = filled.get(key_of(r), r.get("final_5", ""))
        print(f"implementation_matters.py: read {len(filled)} stored run(s) the released run.py's way")
    if filled_curves:
        for r in curves:
            for k in CURVE_KEYS:
                if r.get(k, "") == "":
                    r[k] = filled_curves.get((r["args_hash"], r["env_id"], int(r["seed"]), int(r["step"]), k), "")
        print(
            f"implementation_matters.py: filled in the curves of {len({k[:3] for k in filled_curves})} stored run(s) "
            "stored without them"
        )
    stored_released = {(r["config"], int(r["seed"])) for r in released}
    for path in sorted(glob.glob(os.path.join(runs_dir, "paper_code", "*.json"))):  # paper_code.py's runs
        run = read_json(path, RELEASED_KEYS, "delete it and rerun benchmark/peers/paper_code.py")
        if (
            run["config"] not in RELEASED
            or (run["config"], run["seed"]) in stored_released
            or len(run["iteration_rewards"]) * run["params"]["t"] < steps - run["params"]["t"]
        ):
            continue  # another config, stored already, or a shortened run
        cell, env = RELEASED[run["config"]]
        new_released.append(
            {
                "cell": cell,
                "env_id": env,
                "seed": run["seed"],
                "config": run["config"],
                "final_return": round(run["final_return"], 2),
                "final_5": round(run["final_5"], 2),
                "episodes": len(run["episode_returns"]),
                "mujoco": run.get("mujoco") or installed("mujoco"),
                "wall_time_s": round(run["wall_time_s"], 1),
            }
        )
        stored_released.add((run["config"], run["seed"]))
    renewed = {(r["args_hash"], r["env_id"], r["seed"]) for r in new_runs}  # a stopped store's rows of these: replaced
    if new_runs or filled_curves:
        write_rows(
            os.path.join(store, "iterations.csv"),
            [r for r in curves if (r["args_hash"], r["env_id"], int(r["seed"])) not in renewed] + new_curves,
            ITERATION_COLUMNS,
        )
    if new_released:
        write_rows(os.path.join(store, "paper_code.csv"), released + new_released)
    if new_runs or filled:
        write_rows(os.path.join(store, "runs.csv"), runs + new_runs)
    print(f"implementation_matters.py: stored {len(new_runs) + len(new_released)} new run(s) in {store}")
    return len(new_runs) + len(new_released)


# ---- the report ---------------------------------------------------------------------------------------------

# the paper's Tables 2 and 3 (v2 envs, >= 80 agents a cell): mean [bootstrapped 95% interval]
PAPER = {
    ("PPO", "Walker2d-v4"): (3292, 3157, 3426),
    ("PPO", "Hopper-v4"): (2513, 2391, 2632),
    ("PPO-M", "Walker2d-v4"): (2735, 2602, 2866),
    ("PPO-M", "Hopper-v4"): (2142, 2008, 2279),
    ("PPO-NoClip", "Walker2d-v4"): (2867, 2701, 3024),
    ("PPO-NoClip", "Hopper-v4"): (2371, 2316, 2424),
    ("TRPO", "Walker2d-v4"): (2791, 2709, 2873),
    ("TRPO", "Hopper-v4"): (2043, 1948, 2136),
    ("TRPO+", "Walker2d-v4"): (3050, 2976, 3126),
    ("TRPO+", "Hopper-v4"): (2466, 2381, 2549),
}
PAPER_AAI, PAPER_ACLI = {"Walker2d-v4": 242, "Hopper-v4": 99}, {"Walker2d-v4": 557, "Hopper-v4": 421}
DIFFERENCES = [
    "Environments: MuJoCo v4 envs under gymnasium 1.x (the paper: v2 under mujoco-py); each run records its MuJoCo. "
    "Under MuJoCo 4 (the default lock) Hopper-v4 departs from the published v4 physics at its first contacts "
    "(tests/test_mujoco_physics.py); `bash scripts/install.sh mujoco-ref` gives MuJoCo 2.3.3, on which the study "
    "runs and is stored apart (mujoco-2.3.3/ in the store; the section On MuJoCo 2.3.3, where run).",
    "One Adam over both networks (the critic a param group at the value learning rate), one shuffle, one loss "
    "pg - ent_coef * entropy + 0.5 * 0.5 * (V - R)^2; the paper: a separate value optimizer and shuffle, the value "
    "network trained first, loss (V - R)^2 (Adam is nearly invariant to the scale).",
    "Gradient clipping: PPO-NoClip's 0.1 and 4 bound the policy's gradient alone (`--grad-clip-scope actor`), as the "
    "paper's; its PPO and PPO-M clip nothing, as here; its TRPO step clips nothing, so TRPO+'s 1.0 is not run here "
    "either. Runs that clipped both networks' gradients as one norm are listed apart (`PPO-NoClip, joint clip`): at "
    "Walker2d's 0.1 the critic's gradient (norm 17 to 45 by iterations 6-16 of seed 5, the actor's 2) made that clip "
    "scale the policy's gradient by 0.006 to 0.002, where its own clip scales it by 0.05.",
    "TRPO+'s delta is constant, the configs' max_kl, as in the released code: its Trainer adds the schedule's "
    "increments (footnote 5; max_kl_final) by `self.MAX_KL += self.MAX_KL_INCREMENT`, which, the Trainer having a "
    "`__getattr__` onto its params and no `__setattr__`, makes an attribute of the Trainer, and trpo_step reads "
    "`params.MAX_KL`. Runs with the schedule (`--max-kl-final`) are listed apart, under other stored runs.",
    "TRPO: our line search, Fisher subsample and conjugate gradient are the paper's (trpo_continuous_action.py's "
    "docstring); its advantages are normalised over the batch, as the paper's.",
    "Actions: the env gets the sampled action clipped to its bounds (C5, in every cell); the paper's env wrapper passes "
    "it unclipped: MuJoCo clamps the control to its range, so the motion is the same, but the env's control cost "
    "(v2's, and v4's too, under benchmark/peers/paper_code.py) reads the unclipped action, which would lower the return "
    "of a policy like our PPO-M's at 1M steps (its means outside [-1, 1] for over half the action components) by "
    "about 15 per 1,000-step episode.",
    "Episodes run on across iterations and the rollout bootstraps from V(next observation); the paper resets the "
    "env at every iteration, bootstraps the last step from V(last state), and drops the done steps from the value loss.",
    "The reward filter's running return restarts after every episode end (VecNormalize); the paper's also at every "
    "iteration (its env reset). Reward and observation statistics follow baselines' VecNormalize (var + 1e-8, "
    "the episode-ending observation left out); the paper's filter counts that one too and reads the std with n - 1.",
    "Final return: the mean of each run's last 100 training episodes; the paper does not say which episodes its "
    "final reward averages, and its released run.py records the mean of the last 5 iterations' mean episode "
    "rewards. The report also reads ours over the last 12 iterations, and the run.py way (below the tables).",
    "The released code, run on these v4 envs by benchmark/peers/paper_code.py, gives its own side of a cell that "
    "disagrees (below the tables, where run).",
    "No learning-rate grid: the configs' rates for each cell, and for Figure 1 PPO's Walker2d rates in every "
    "combination (the paper picks the best rate of a grid for each of its combinations).",
]


def rng_for(*labels):
    """Each interval's own generator, seeded by what it measures: storing runs of one cell moves no other's interval."""
    return np.random.default_rng(zlib.crc32("|".join(map(str, labels)).encode()))


def bootstrap(x, rng, n=1000):
    """The mean and its bootstrapped 95% interval (n resamples, percentiles), as the paper's tables."""
    means = rng.choice(x, size=(n, len(x)), replace=True).mean(1)
    return float(np.mean(x)), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def difference(x, y, rng, n=1000):
    """mean(x) - mean(y) and the bootstrapped 95% interval of the difference (each side resampled)."""
    diffs = rng.choice(x, (n, len(x))).mean(1) - rng.choice(y, (n, len(y))).mean(1)
    return float(x.mean() - y.mean()), *np.percentile(diffs, [2.5, 97.5])


def finals(runs, cell, env):
    return np.array([float(r["final_return"]) for r in runs if r["cell"] == cell and r["env_id"] == env])


def run_py_finals(runs, cell, env):
    """The released run.py's reading of a cell's runs (those stored with it)."""
    return np.array([float(r["final_5"]) for r in runs if r["cell"] == cell and r["env_id"] == env and r.get("final_5")])


def late_returns(runs, curves, cell, env, windows=LATE_WINDOWS):
    """Each run's mean return over its last `windows` stored windows (their episodes' means, equally weighted)."""
    by_run = {}
    for row in curves:
        by_run.setdefault((row["args_hash"], row["env_id"], row["seed"]), []).append(row)
    out = []
    for r in runs:
        if r["cell"] == cell and r["env_id"] == env:
            rows = sorted(by_run.get((r["args_hash"], env, r["seed"]), []), key=lambda row: int(row["iteration"]))
            values = [float(row["mean_return"]) for row in rows[-windows:] if row["mean_return"] != ""]
            out += [np.mean(values)] if values else []
    return np.array(out)


def survival(values):
    """Figure 1's curve, 1 - CDF of the values, as step(where="post") draws it: 1 up to the lowest value, then down
    by 1/n at each value (by k/n where k values tie), 0 from the highest on."""
    v = np.sort(np.asarray(values, dtype=float))
    return np.r_[v[0], v], np.r_[1.0, 1 - np.arange(1, len(v) + 1) / len(v)]


def figure1_runs(runs):
    """[(set of switches off, {seed: final return})] of the stored Figure 1 combinations, all on = the PPO Walker2d
    cell's runs of Figure 1's seeds."""
    by_seed = [
        (
            set(),
            {
                int(r["seed"]): float(r["final_return"])
                for r in runs
                if r["cell"] == "PPO" and r["env_id"] == "Walker2d-v4" and int(r["seed"]) in FIGURE1_SEEDS
            },
        )
    ]
    for cell in sorted({r["cell"] for r in runs if r["cell"].startswith("fig1 off: ")}):
        by_seed.append(
            (set(cell.split(": ")[1].split()), {int(r["seed"]): float(r["final_return"]) for r in runs if r["cell"] == cell})
        )
    return by_seed


def figure1_groups(runs):
    """Final returns of Figure 1's combinations: ([(set of switches off, returns)], seeds); every combination read at
    the seeds all the stored ones have (a sweep in progress leaves some ahead), so that no split of the runs by a
    switch weighs one side with more seeds."""
    by_seed = figure1_runs(runs)
    seeds = sorted(set.intersection(*(set(returns) for _, returns in by_seed)))
    return [(off, [returns[s] for s in seeds]) for off, returns in by_seed], seeds


def explained_variance(rows):
    """[(iteration, the critic's explained variance)] of a run's stored rows that have it, in iteration order."""
    return sorted(
        (int(r["iteration"]), float(r["explained_variance"]))
        for r in rows
        if r.get("explained_variance", "") not in ("", "nan")
    )


def early_fit(curves, runs, cell, env="Walker2d-v4", last=EARLY_ITERATIONS):
    """{seed: the critic's explained variance, the mean over a run's stored iterations up to `last`} of a cell's runs
    stored with it."""
    fit = {}
    for seed, rows in curves_of(curves, runs, cell, env).items():
        ev = [v for i, v in explained_variance(rows) if i <= last]
        if ev:
            fit[seed] = float(np.mean(ev))
    return fit


def is_on(switch, cell):
    """Whether a Figure 1 run's cell (PPO: all on; "fig1 off: <switches>") has the switch on."""
    return switch not in cell.split(": ")[-1].split() if cell.startswith("fig1 off: ") else True


def value_clipping_split(runs, curves, out, plt, stats):
    """Figure 1's reward scaling split by value clipping: the final returns (the 2 x 2 of the two switches, at
    Figure 1's common seeds, once all 16 combinations are in) and the critic's early fit (every Figure 1 run stored
    with it, the all-on ones PPO's Walker2d runs at any seed), drawn to figure1_critic.png; returns the report's lines."""
    groups, _ = figure1_groups(runs)
    names = {
        (vc, rs): f"value clipping {'on' if vc else 'off'}, reward scaling {'on' if rs else 'off'}"
        for vc in (True, False)
        for rs in (True, False)
    }
    lines = [
        "| value clipping | reward scaling on | reward scaling off | off - on [95%] | Mann-Whitney p |",
        "|---|---|---|---|---|",
    ]
    moved, means = {}, {}  # value clipping on/off: (off - on, its interval, the p) of turning reward scaling off
    for vc in (True, False):
        if len(groups) < 2 ** len(SWITCHES):  # split by two switches, the other two must be balanced: all 16 in
            lines.append(f"| {'on' if vc else 'off'} | interim, {len(groups)} of 16 combinations | | | |")
            continue
        on, off = (
            [x for o, xs in groups for x in xs if ("value_clipping" not in o) == vc and ("reward_scaling" not in o) == rs]
            for rs in (True, False)
        )
        d, low, high = difference(np.array(off), np.array(on), rng_for("value clipping", vc))
        moved[vc], means[vc, True], means[vc, False] = (
            (d, low, high, stats.mannwhitneyu(on, off).pvalue),
            np.mean(on),
            np.mean(off),
        )
        lines.append(
            f"| {'on' if vc else 'off'} | {np.mean(on):.0f}, n {len(on)} | {np.mean(off):.0f}, n {len(off)} | "
            f"{d:+.0f} [{low:+.0f}, {high:+.0f}] | {moved[vc][3]:.2g} |"
        )
    fig1_cells = [c for c in sorted({r["cell"] for r in runs}) if c.startswith("fig1 off: ")]
    fits, unfit, colors = {g: [] for g in names}, 0, dict(zip(names, ("tab:blue", "tab:red", "tab:green", "tab:orange")))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for cell in ["PPO"] + fig1_cells:
        g = (is_on("value_clipping", cell), is_on("reward_scaling", cell))
        fit, final = (
            early_fit(curves, runs, cell),
            {int(r["seed"]): float(r["final_return"]) for r in runs if r["cell"] == cell and r["env_id"] == "Walker2d-v4"},
        )
        seeds = set(final) & set(FIGURE1_SEEDS) if cell == "PPO" else set(final)  # PPO's runs at Figure 1's seeds
        unfit += len(seeds - set(fit))
        for seed, rows in curves_of(curves, runs, cell, "Walker2d-v4").items():
            ev = explained_variance(rows)
            if ev:
                axes[0].plot(*zip(*ev), color=colors[g], lw=0.6, alpha=0.5, label=None if fits[g] else names[g])
            if seed in fit:
                fits[g].append((fit[seed], final[seed]))
    for g in names:
        if fits[g]:
            axes[1].scatter(*zip(*fits[g]), color=colors[g], s=14, label=f"{names[g]} ({len(fits[g])} runs)")
    axes[0].axvline(EARLY_ITERATIONS, color="k", ls=":")
    axes[0].set(xlabel="iteration", ylabel="explained variance", ylim=(-0.2, 1.02), title="Walker2d-v4: the critic's fit")
    axes[1].set(
        xlabel=f"explained variance, mean over iterations 1-{EARLY_ITERATIONS}",
        ylabel="final return",
        title="Walker2d-v4: final return against the critic's early fit",
    )
    for ax in axes:
        ax.title.set_fontsize(10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "figure1_critic.png"), dpi=80)
    plt.close(fig)
    lines += [
        "",
        f"The critic's fit (explained variance of the returns by the values before the update, the mean over a "
        f"run's stored iterations up to {EARLY_ITERATIONS}, every {CURVE_EVERY}th; the median and range over the "
        f"runs stored with it, at any seed{f'; {unfit} Figure 1 runs were stored without it' if unfit else ''}):",
        "",
    ]
    span = {g: (min(f for f, _ in fits[g]), max(f for f, _ in fits[g])) for g in names if fits[g]}
    lines += [
        f"- {names[g]}: "
        + (
            f"{np.median([f for f, _ in fits[g]]):.2f} [{span[g][0]:.2f}, {span[g][1]:.2f}], {len(fits[g])} runs"
            if g in span
            else "not stored"
        )
        for g in names
    ]
    # a group whose every run fits worse than every run of the others
    lagging = [g for g in span if len(span) > 1 and all(span[g][1] < span[h][0] for h in span if h != g)]
    if moved:
        lines += [
            "",
            "Turning reward scaling off moves the mean by "
            + " and by ".join(
                f"{d:+.0f} with value clipping {'on' if vc else 'off'}"
                + (
                    ""
                    if (high < 0 or low > 0) and p < 0.05
                    else " (not shown: the interval reaches 0 or Mann-Whitney p >= 0.05)"
                )
                for vc, (d, low, high, p) in moved.items()
            )
            + f"; turning value clipping off moves it by {means[False, True] - means[True, True]:+.0f} with the rewards "
            f"scaled and by {means[False, False] - means[True, False]:+.0f} without"
            + (
                f"; over its first {EARLY_ITERATIONS} iterations the critic fits worse in every stored run with "
                f"{names[lagging[0]]} than in any other stored run"
                if lagging
                else ""
            )
            + ".",
        ]
    return lines + ["", "![the critic's fit](figure1_critic.png)"]


def paired_reading(groups, switch, stats):
    """The switch turned off beside on with the other three switches as they are, at the same seed (8 settings of the
    others x the seeds), where the split by the switch alone mixes in what the others move: (the differences off - on,
    the Wilcoxon signed-rank p); stats: scipy.stats, as report() imports it."""
    by_off = {frozenset(off): xs for off, xs in groups}
    d = np.array([b - a for off, xs in by_off.items() if switch not in off for a, b in zip(xs, by_off[off | {switch}])])
    return d, stats.wilcoxon(d).pvalue if np.any(d != 0) else 1.0


def curves_of(curves, runs, cell, env):
    """{seed: rows} of a cell's stored Figure 2 numbers."""
    hashes = {r["args_hash"] for r in runs if r["cell"] == cell and r["env_id"] == env}
    out = {}
    for row in curves:
        if row["args_hash"] in hashes and row["env_id"] == env:
            out.setdefault(int(row["seed"]), []).append(row)
    return out


def kl_parts(curves, runs, cell, env, parts=10):
    """A cell's mean KL over training: each run's stored iterations cut in order into `parts` equal spans, the median
    over the cell's runs and the span's iterations of each; None where nothing is stored."""
    spans = [[] for _ in range(parts)]
    for rows in curves_of(curves, runs, cell, env).values():
        kls = [float(r["mean_kl"]) for r in sorted(rows, key=lambda r: int(r["iteration"]))]
        for i, span in enumerate(np.array_split(np.array(kls), min(parts, len(kls)))):
            spans[i * parts // min(parts, len(kls))] += list(span)
    return [np.median(s) for s in spans if s] or None


def kl_trends(curves, runs, env):
    """The paper's reading of Figure 2: PPO-M's mean KL trends up over training; PPO's peaks about halfway, then falls."""
    ppo_m, ppo = kl_parts(curves, runs, "PPO-M", env), kl_parts(curves, runs, "PPO", env)
    if not ppo_m or not ppo:
        return "not run yet"
    peak = int(np.argmax(ppo))
    halfway = 0.2 <= (peak + 0.5) / len(ppo) <= 0.8 and ppo[-1] < 0.75 * ppo[peak]  # falls: by a quarter at least
    return (
        f"PPO-M: {'yes' if ppo_m[-1] > ppo_m[0] else 'no'}, {ppo_m[0]:.3f} in the first tenth, {ppo_m[-1]:.3f} "
        f"in the last; PPO: {'yes' if halfway else 'no'}, its peak {ppo[peak]:.3f} in tenth {peak + 1} of "
        f"{len(ppo)}, {ppo[-1]:.3f} in the last"
    )


def paper_reading(a, b, env):
    """The paper's own rows read for 'a beats b': its means and whether its two 95% intervals are apart."""
    (x, x_low, x_high), (y, y_low, y_high) = PAPER[a, env], PAPER[b, env]
    apart = "apart" if x_low > y_high or y_low > x_high else "overlapping"
    return f"the paper: {x - y:+d}, {a} {x} and {b} {y}, intervals {apart}"


def trpo_delta(env, algo="TRPO"):
    flags = SETTINGS[algo, env].split()
    return float(flags[flags.index("--max-kl") + 1])


def report(store, out, steps=STEPS):
    """report.md and its figures into `out`, from the stored runs of `steps` steps (others: listed apart)."""
    stored_runs, curves = read_store(store)
    if not stored_runs:
        raise ConfigError(f"no stored runs in {store}; run benchmark/studies/implementation_matters.sh first")
    planned = {(script_of(cell), args_hash(extra_args(flags, steps))) for cell, _, _, flags in cells("full")}
    runs = [r for r in stored_runs if (r["script"], r["args_hash"]) in planned]  # others: settings changed since
    others = [r for r in stored_runs if (r["script"], r["args_hash"]) not in planned]
    writable(out, "--out")
    import matplotlib  # after the checks: bad input is refused without their 2-3 s of imports
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy import stats

    envs, algos = ENVS, ALGOS
    lines = [
        "# Implementation Matters reproduced: PPO, PPO-M, TRPO, TRPO+, PPO-NoClip (Engstrom et al. 2020)",
        "",
        f"`bash benchmark/studies/implementation_matters.sh`, then `python -m benchmark.studies.implementation_matters report "
        f"--store {os.path.relpath(os.path.abspath(store), ROOT)}{'' if steps == STEPS else f' --steps {steps}'}`. "
        f"{len(stored_runs)} stored runs of ppo_continuous_action.py and trpo_continuous_action.py at "
        f"{'1M' if steps == STEPS else f'{steps:,}'} steps "
        f"(commits {', '.join(sorted({r['git_commit'][:7] for r in stored_runs}))}; MuJoCo "
        f"{', '.join(sorted({r['mujoco'] for r in stored_runs}))}). Final return: the mean of a run's last 100 episodes.",
        "",
        "## Tables 2 and 3",
        "",
    ]
    short = sum(len(finals(runs, a, e)) < len(TABLE_SEEDS) for a in algos for e in envs)
    if short:
        lines += [
            f"Interim: {short} of the {len(algos) * len(envs)} cells have fewer than the study's "
            f"{len(TABLE_SEEDS)} seeds; `bash benchmark/studies/implementation_matters.sh` goes on from the stored runs.",
            "",
        ]
    lines += [
        "| algorithm | " + " | ".join(f"{e}: ours, n | paper ({e.replace('-v4', '-v2')})" for e in envs) + " |",
        "|---|" + "---|---|" * len(envs),
    ]
    summary = {}
    for algo in algos:
        row_cells = []
        for env in envs:
            x = finals(runs, algo, env)
            summary[algo, env] = bootstrap(x, rng_for(algo, env)) if len(x) else None
            ours = (
                f"{summary[algo, env][0]:.0f} [{summary[algo, env][1]:.0f}, {summary[algo, env][2]:.0f}], {len(x)}"
                if len(x)
                else "not run yet"
            )
            row_cells.append(f"{ours} | {PAPER[algo, env][0]} [{PAPER[algo, env][1]}, {PAPER[algo, env][2]}]")
        lines.append(f"| {algo} | " + " | ".join(row_cells) + " |")
    lines += [
        "",
        "Mean [bootstrapped 95% interval of the mean, 1,000 resamples], and the number of seeds. AAI, what the "
        "step method moves: max(|PPO - TRPO+|, |PPO-M - TRPO|); ACLI, what the code-level details move: "
        "max(|PPO - PPO-M|, |TRPO+ - TRPO|):",
        "",
    ]
    aai_acli = {}
    for env in envs:
        m = {a: summary[a, env][0] for a in ("PPO", "PPO-M", "TRPO", "TRPO+") if summary[a, env]}
        if len(m) == 4:
            aai_acli[env] = (
                max(abs(m["PPO"] - m["TRPO+"]), abs(m["PPO-M"] - m["TRPO"])),
                max(abs(m["PPO"] - m["PPO-M"]), abs(m["TRPO+"] - m["TRPO"])),
            )
            lines.append(
                f"- {env}: AAI {aai_acli[env][0]:.0f}, ACLI {aai_acli[env][1]:.0f} (the paper: AAI "
                f"{PAPER_AAI[env]}, ACLI {PAPER_ACLI[env]})"
            )
        else:
            lines.append(f"- {env}: AAI and ACLI wait for {', '.join(sorted({'PPO', 'PPO-M', 'TRPO', 'TRPO+'} - set(m)))}")
    flags = PROTOCOL.split()
    late_steps = LATE_WINDOWS * CURVE_EVERY * int(flags[flags.index("--num-steps") + 1])
    late_lines, moves = [], []
    for env in envs:
        parts = []
        for a in algos:
            late, n = late_returns(runs, curves, a, env), len(finals(runs, a, env))
            if len(late) and summary[a, env]:
                moves.append(late.mean() - summary[a, env][0])
                parts.append(
                    f"{a} {late.mean():.0f} ({summary[a, env][0]:.0f}"
                    + (f"; {len(late)} of its {n} runs have curves" if len(late) < n else "")
                    + ")"
                )
        late_lines.append(f"- {env}: " + ", ".join(parts))
    if moves:
        lines += [
            "",
            f"The final return read nearer the end: each run's mean over its last {LATE_WINDOWS} stored "
            f"windows of iterations.csv ({LATE_WINDOWS * CURVE_EVERY} iterations, {late_steps:,} steps; each "
            "window's mean over the episodes that ended in it, the windows equally weighted), where the last 100 "
            "episodes of a 1,000-step task span up to 100,000 steps of a rising curve. The mean over seeds, the "
            f"table's in brackets; {sum(m > 0 for m in moves)} of {len(moves)} cells read higher, by "
            f"{min(moves):+.0f} to {max(moves):+.0f}:",
            "",
        ] + late_lines
    run_py_lines = []
    for env in envs:
        parts = [
            f"{a} {x.mean():.0f} ({summary[a, env][0]:.0f}" + (f"; {len(x)} of its {n} runs" if len(x) < n else "") + ")"
            for a in algos
            for x, n in [(run_py_finals(runs, a, env), len(finals(runs, a, env)))]
            if len(x)
        ]
        run_py_lines += [f"- {env}: " + ", ".join(parts)] if parts else []
    if run_py_lines:
        lines += [
            "",
            f"The released run.py's reading (its final result): the mean of the last {RUN_PY_ITERATIONS} "
            "iterations' mean episode returns, each iteration's mean weighted alike however many episodes ended in "
            "it, which gives a long, high-return episode more weight than the last 100 episodes do. The mean over "
            "seeds, the table's in brackets:",
            "",
        ] + run_py_lines

    def beats(a, b, env, pool=None, label=()):  # a's mean above b's, the bootstrapped interval of the difference above 0
        pool = runs if pool is None else pool
        x, y = finals(pool, a, env), finals(pool, b, env)
        if len(x) < 3 or len(y) < 3:  # a bootstrap of 2 seeds has 3 possible means: no interval to read
            return (
                "not run yet"
                if not len(x) or not len(y)
                else f"too few seeds for a verdict: {x.mean() - y.mean():+.0f}, n {len(x)} and {len(y)}"
            ), None
        diff, low, high = difference(x, y, rng_for(*label, a, b, env))
        word = "yes" if low > 0 else "no (the reverse)" if high < 0 else "not shown (the interval holds 0)"
        return f"{word}: {diff:+.0f} [{low:+.0f}, {high:+.0f}], n {len(x)} and {len(y)}", low > 0

    released = read_csv(os.path.join(store, "paper_code.csv"))
    if released:  # the released code on the same envs (benchmark/peers/paper_code.py): where ours and the paper part
        lines += [
            "",
            "## The released code on the same envs",
            "",
            "benchmark/peers/paper_code.py: the paper's released "
            "Trainer and configs on these v4 envs (advanced logging off), read as ours (the last 100 episodes) "
            f"and as its run.py reads it (the last {RUN_PY_ITERATIONS} iterations' mean episode rewards; "
            "ours read the same way, above). The paper's number is for v2.",
            "",
            "| cell | env | paper | last 100 episodes: ours, n | released, n | ours - released [95%] | "
            "run.py's reading: ours, n | released | ours - released [95%] |",
            "|---|---|---|" + "---|" * 6,
        ]
        for cell, env in sorted({(r["cell"], r["env_id"]) for r in released}):
            mine = [r for r in released if (r["cell"], r["env_id"]) == (cell, env)]
            row = f"| {cell} | {env} | {PAPER[cell, env][0]} |"
            for reading, x, y in (
                ("last 100", finals(runs, cell, env), [r["final_return"] for r in mine]),
                ("run.py", run_py_finals(runs, cell, env), [r["final_5"] for r in mine]),
            ):
                y = np.array(y, dtype=float)
                rng = rng_for("released", cell, env, reading)
                diff = (
                    ("%+.0f [%+.0f, %+.0f]" % difference(x, y, rng))
                    if len(x) >= 3 and len(y) >= 3
                    else "too few seeds for an interval"
                )
                row += f" {f'{x.mean():.0f}, {len(x)}' if len(x) else 'not run yet'} | {y.mean():.0f}, {len(y)} | {diff} |"
            lines.append(row)
    for path in sorted(glob.glob(os.path.join(store, "mujoco-*", "runs.csv"))):  # the study on another MuJoCo
        folder = os.path.basename(os.path.dirname(path))
        version, other = folder[len("mujoco-") :], [r for r in read_csv(path) if (r["script"], r["args_hash"]) in planned]
        lines += [
            "",
            f"## On MuJoCo {version}",
            "",
            f"The same cells on MuJoCo {version} (`bash scripts/install.sh "
            "mujoco-ref`, then the study with .venv-mujoco-ref/bin on the PATH; stored in "
            f"{folder}/), beside the tables' runs on MuJoCo {lock_mujoco()}; the difference's bootstrapped 95% "
            "interval from 3 seeds a side on. The paper's number is for v2.",
            "",
            f"| cell | env | paper | {version}: ours [95%], n | {lock_mujoco()}: ours, n | {version} - "
            f"{lock_mujoco()} [95%] | run.py's reading: {version} | {lock_mujoco()} |",
            "|---|---|---|" + "---|" * 5,
        ]
        for cell, env in sorted({(r["cell"], r["env_id"]) for r in other}):
            x = finals(other, cell, env)
            y, low, high = bootstrap(x, rng_for(folder, cell, env))
            z = finals(runs, cell, env)
            diff = (
                ("%+.0f [%+.0f, %+.0f]" % difference(x, z, rng_for(folder, "diff", cell, env)))
                if len(x) >= 3 and len(z) >= 3
                else "too few seeds for an interval"
            )
            paper = f"{PAPER[cell, env][0]}" if (cell, env) in PAPER else "—"
            x5, z5 = run_py_finals(other, cell, env), run_py_finals(runs, cell, env)
            lines.append(
                f"| {cell} | {env} | {paper} | {y:.0f} [{low:.0f}, {high:.0f}], {len(x)} | "
                + (f"{z.mean():.0f}, {len(z)}" if len(z) else "not run yet")
                + f" | {diff} | "
                + (f"{x5.mean():.0f}" if len(x5) else "—")
                + " | "
                + (f"{z5.mean():.0f}" if len(z5) else "—")
                + " |"
            )
        present = sorted({(r["cell"], r["env_id"]) for r in other})
        fig, axes = plt.subplots(1, len(present), figsize=(3.2 * len(present), 3.6), squeeze=False)
        for ax, (cell, env) in zip(axes[0], present):  # every run's final return on each MuJoCo, the paper's interval
            if (cell, env) in PAPER:
                ax.axhspan(PAPER[cell, env][1], PAPER[cell, env][2], color="0.85", label="the paper (v2), 95%")
            for i, (pool, name) in enumerate(((runs, lock_mujoco()), (other, version))):
                x = finals(pool, cell, env)
                ax.plot(np.full(len(x), i) + np.linspace(-0.12, 0.12, len(x)), x, "o", alpha=0.7, label=f"MuJoCo {name}")
                if len(x):
                    ax.plot([i - 0.25, i + 0.25], [x.mean()] * 2, "k-")
            ax.set_xticks(
                [0, 1],
                [f"{lock_mujoco()}\n(n {len(finals(runs, cell, env))})", f"{version}\n(n {len(finals(other, cell, env))})"],
            )
            ax.set_title(f"{cell} on {env}", fontsize=10)
            ax.set_ylabel("final return (each run; the bar: the mean)")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"{folder}.png"), dpi=80)
        plt.close(fig)
        lines += ["", f"![each run on MuJoCo {lock_mujoco()} and {version}]({folder}.png)"]
        claims = [
            f"{name} on {env}: {beats(a, b, env, other, (folder,))[0]}"
            for env in envs
            for name, a, b in (("(a) PPO beats PPO-M", "PPO", "PPO-M"), ("(b) PPO-NoClip beats PPO-M", "PPO-NoClip", "PPO-M"))
            if (a, env) in present and (b, env) in present
        ]
        lines += ["", f"The claims on MuJoCo {version}'s runs alone: " + "; ".join(claims)] if claims else []
    lines += ["", "## The paper's claims", "", "| claim | " + " | ".join(envs) + " |", "|---|" + "---|" * len(envs)]
    lines.append(
        "| (a) PPO beats PPO-M | "
        + " | ".join(f"{beats('PPO', 'PPO-M', e)[0]} ({paper_reading('PPO', 'PPO-M', e)})" for e in envs)
        + " |"
    )
    row = []
    for env in envs:
        text, _ = beats("PPO-NoClip", "PPO-M", env)
        noclip, ppo = summary["PPO-NoClip", env], summary["PPO", env]
        if noclip and ppo:
            text += f"; NoClip's mean {'inside' if ppo[1] <= noclip[0] <= ppo[2] else 'outside'} PPO's interval"
        inside = PAPER["PPO", env][1] <= PAPER["PPO-NoClip", env][0] <= PAPER["PPO", env][2]
        row.append(
            f"{text} ({paper_reading('PPO-NoClip', 'PPO-M', env)}; its NoClip's mean "
            f"{'inside' if inside else 'outside'} its PPO's interval)"
        )
    lines.append("| (b) PPO-NoClip beats PPO-M, within PPO's interval | " + " | ".join(row) + " |")

    # Figure 2: the max ratio and the mean KL over training
    fig, axes = plt.subplots(len(envs), 3, figsize=(15, 4 * len(envs)), squeeze=False)
    colors = {"PPO": "tab:blue", "PPO-M": "tab:orange", "TRPO": "tab:red", "TRPO+": "tab:purple", "PPO-NoClip": "tab:green"}
    row = []
    for i, env in enumerate(envs):
        outside, trpo_kl = [], []
        for algo in colors:
            for n, (seed, rows) in enumerate(sorted(curves_of(curves, runs, algo, env).items())):
                it = [int(r["iteration"]) for r in rows]
                for ax, key in zip(axes[i], ("mean_return", "max_ratio", "mean_kl")):
                    ax.plot(
                        it,
                        [float(r[key]) if r[key] != "" else np.nan for r in rows],
                        color=colors[algo],
                        lw=0.8,
                        alpha=0.7,
                        label=algo if n == 0 else None,
                    )
                if algo in ("PPO", "PPO-M"):
                    outside.append((algo, np.mean([float(r["max_ratio"]) > 1.2 for r in rows])))
                if algo == "TRPO":
                    trpo_kl += [float(r["mean_kl"]) for r in rows]
        axes[i][1].axhline(1.2, color="k", ls=":", label="1 + epsilon")
        for algo in ("TRPO", "TRPO+"):
            axes[i][2].axhline(trpo_delta(env, algo), color=colors[algo], ls=":", label=f"{algo}'s delta")
        for ax, title in zip(
            axes[i], ("mean episodic return", "max ratio new / old over the batch", "mean KL(old || new) over the batch")
        ):
            ax.set_title(f"{env}: {title}", fontsize=10)
            ax.set_xlabel("iteration")
        axes[i][1].set_yscale("log")  # PPO-NoClip's ratios reach far: a log axis, ticks at 1, 2, 5, 10, ... written plainly
        axes[i][1].yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1, 2, 5)))
        axes[i][1].yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        axes[i][1].yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        for ax in axes[i]:
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
        by_algo = {a: [f for b, f in outside if b == a] for a in ("PPO", "PPO-M")}
        row.append(
            "; ".join(f"{a}: {100 * np.mean(f):.0f}% of iterations above 1.2 ({len(f)} runs)" for a, f in by_algo.items() if f)
            or "not run yet"
        )
        if trpo_kl:  # TRPO's bound, for contrast: its line search holds the mean KL at or under delta
            row[-1] += (
                f"; TRPO's mean KL <= delta {trpo_delta(env)} in {100 * np.mean(np.array(trpo_kl) <= trpo_delta(env)):.0f}% "
                f"of iterations (median {np.median(trpo_kl):.3f})"
            )
    fig.tight_layout()
    fig.savefig(os.path.join(out, "figure2.png"), dpi=80)
    plt.close(fig)
    lines.append("| (c) the max ratio leaves [1 - eps, 1 + eps] for PPO and PPO-M alike | " + " | ".join(row) + " |")

    # Figure 1: 1 - CDF of the final return, split by each switch
    groups, fig1_seeds = figure1_groups(runs)
    complete = len(groups) == 2 ** len(SWITCHES)  # a split by one switch is confounded by the others until all are in
    fig, axes = plt.subplots(1, len(SWITCHES), figsize=(4.5 * len(SWITCHES), 3.8), squeeze=False)
    shifts = []
    for ax, switch in zip(axes[0], SWITCHES):
        on = np.array([x for off, xs in groups if switch not in off for x in xs])
        off = np.array([x for off_, xs in groups if switch in off_ for x in xs])
        for values, label in ((on, "on"), (off, "off")):
            if len(values):
                ax.step(*survival(values), where="post", label=f"{label} ({len(values)} runs)")
        ax.set_title(f"Walker2d-v4: {switch}", fontsize=10)
        ax.set_xlabel("final return")
        ax.set_ylabel("1 - CDF")
        ax.legend(fontsize=8)
        if len(on) >= 3 and len(off) >= 3:
            p = stats.mannwhitneyu(on, off).pvalue
            verdict = (", shifted" if p < 0.05 else ", no shift shown") if complete else ""
            shifts.append(
                f"{switch}: on {on.mean():.0f}, off {off.mean():.0f} (n {len(on)}/{len(off)}, Mann-Whitney p {p:.2g}{verdict}"
            )
            if complete:
                d, p = paired_reading(groups, switch, stats)
                shifts[-1] += (
                    f"; paired with the others' setting and the seed, off - on {d.mean():+.0f}, n {len(d)}, "
                    f"Wilcoxon p {p:.2g}, "
                    + ("no shift shown" if p >= 0.05 else "off lower" if d.mean() < 0 else "off higher")
                )
            shifts[-1] += ")"
        else:
            shifts.append(f"{switch}: not run yet")
    if not complete and len(groups) > 1:
        shifts.insert(0, f"interim, {len(groups)} of 16 combinations (no verdict until all are in)")
    elif complete and fig1_seeds:  # the paper's second reading: the three were on in its best combination
        best_off, best = max(groups, key=lambda g: np.mean(g[1]))
        kept = [s for s in ("reward_scaling", "anneal_lr", "ortho_init") if s not in best_off]
        shifts.append(
            f"the highest mean of the 16 at those seeds: {' '.join(s for s in SWITCHES if s in best_off) or 'none'} off, "
            f"{np.mean(best):.0f}, with {', '.join(kept) or 'none of the three'} on (the paper: all three "
            "on in its best)"
        )
    fig.tight_layout()
    fig.savefig(os.path.join(out, "figure1.png"), dpi=80)
    plt.close(fig)
    lines.append(
        "| (d) reward scaling, annealing and init each shift the reward distribution | "
        + "; ".join(shifts)
        + " | (Figure 1 is on Walker2d-v4 alone) |"
    )
    lines.append(
        "| (e) the code-level details move results more than the step method (ACLI > AAI) | "
        + " | ".join(
            ("yes" if aai_acli[e][1] > aai_acli[e][0] else "no") + f": ACLI {aai_acli[e][1]:.0f}, AAI {aai_acli[e][0]:.0f}"
            if e in aai_acli
            else "not run yet"
            for e in envs
        )
        + " |"
    )
    lines.append(
        "| (f) PPO-M's mean KL trends up over training; PPO's peaks about halfway, then falls by a quarter or more "
        "(the paper's reading of Figure 2; a tenth: the median over runs and iterations) | "
        + " | ".join(kl_trends(curves, runs, e) for e in envs)
        + " |"
    )
    lines += [
        "",
        f"Figure 1 ({len(groups)} of 16 combinations stored, read at seeds "
        f"{', '.join(map(str, fig1_seeds)) or 'none'}, the seeds all of them have; the study runs "
        f"{FIGURE1_SEEDS.stop - 1}), "
        "the paper's way: 1 - CDF of the final return, the runs split by each switch on or off.",
        "",
        "![Figure 1](figure1.png)",
        "",
        "Each combination's stored runs (all their seeds), the highest mean first:",
        "",
        "| switches off | final returns (seeds) | mean |",
        "|---|---|---|",
    ]
    lines += [
        f"| {' '.join(s for s in SWITCHES if s in off) or 'none (PPO)'} | "
        f"{', '.join(f'{returns[k]:.0f} ({k})' for k in sorted(returns))} | {np.mean(list(returns.values())):.0f} |"
        for off, returns in sorted(figure1_runs(runs), key=lambda g: -np.mean(list(g[1].values())))
        if returns
    ]
    lines += [
        "",
        "### Reward scaling and value clipping",
        "",
        "The clipped value loss, max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2), has no gradient "
        "once a state's value has moved eps = 0.2 from the last iteration's towards its target: in one "
        "iteration a state's own term pushes its value at most eps. With the rewards scaled (divided by the std of "
        "the running discounted return) the critic fits returns in units of their own spread; unscaled, "
        "Walker2d's reach 100 for staying upright alone (reward 1 a step, gamma 0.99). Figure 1's runs split by both switches "
        "(at the seeds all combinations have):",
        "",
    ]
    lines += value_clipping_split(runs, curves, out, plt, stats)
    lines += [
        "",
        "Figure 2: per iteration, one line per seed (stored every "
        f"{CURVE_EVERY} iterations); the dotted lines: 1 + epsilon on the ratios, TRPO's and TRPO+'s delta on the KL.",
        "",
        "![Figure 2](figure2.png)",
        "",
        "## What the paper's code does otherwise",
        "",
    ] + [f"- {d}" for d in DIFFERENCES]
    if others:  # stored under settings (or code: a suffix on their args_hash) no longer planned: shown apart
        lines += [
            "",
            "## Other stored runs",
            "",
            "Runs of settings, or of code, the study no longer plans (not in the "
            "tables above; a cell named `<cell>, rewards / std` ran `--reward-scaling rewards` as r / std, before "
            "it became the paper's (r - mean) / std + mean; `<cell>, joint clip` clipped both networks' gradients "
            "as one norm, before `--grad-clip-scope actor`), beside "
            "the cell's runs now at the same seeds (the cell: the name before the comma), and now - then, "
            "paired by seed (with its bootstrapped 95% interval from 3 seeds on):",
            "",
            "| cell | env | flags | seeds | final returns | mean | now, same seeds | now - then |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key in sorted({(r["cell"], r["env_id"], r["flags"]) for r in others}):
            x = [r for r in others if (r["cell"], r["env_id"], r["flags"]) == key]
            returns = [float(r["final_return"]) for r in x]
            now = {
                r["seed"]: float(r["final_return"])
                for r in runs
                if r["cell"] == key[0].split(",")[0] and r["env_id"] == key[1]
            }
            d = np.array([now[r["seed"]] - float(r["final_return"]) for r in x if r["seed"] in now])
            paired = (
                ("—", "—")
                if not len(d)
                else (
                    f"{np.mean([now[r['seed']] for r in x if r['seed'] in now]):.0f}, {len(d)}",
                    f"{d.mean():+.0f}"
                    + (" [{:+.0f}, {:+.0f}]".format(*bootstrap(d, rng_for(*key))[1:]) if len(d) >= 3 else ""),
                )
            )
            lines.append(
                f"| {key[0]} | {key[1]} | `{key[2]}` | {' '.join(r['seed'] for r in x)} | "
                f"{', '.join(f'{v:.0f}' for v in returns)} | {np.mean(returns):.0f} | {' | '.join(paired)} |"
            )
    lines += ["", "## Settings of each cell (ppo_continuous_action.py's flags)", "", f"Every run: `{PROTOCOL}`.", ""]
    lines += [f"- {algo} on {env} ({script_of(algo)}): `{flags}`" for (algo, env), flags in SETTINGS.items()]
    lines += [
        f"- Figure 1: PPO's Walker2d flags with {', '.join(f'`{f}`' for f in SWITCHES.values())} for a switch turned off."
    ]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"implementation_matters.py: report in {os.path.join(out, 'report.md')}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("plan", "store", "report"):
        s = sub.add_parser(name)
        s.add_argument("--store", required=True, help="the folder of the stored runs (runs.csv, iterations.csv)")
        s.add_argument("--steps", type=int, default=STEPS, help="the runs' --total-timesteps (the sweep's STEPS)")
        if name == "plan":
            s.add_argument("--mode", choices=["full", "short"], default="full")
            s.add_argument("--cells", nargs="+", help="plan only these cells (fig1: Figure 1's combinations)")
        if name == "store":
            s.add_argument("runs_dir", help="the runs/ folder the sweep wrote")
        if name == "report":
            s.add_argument("--out", help="where the report goes (default: the store)")
    sub.add_parser("mujoco-dir", help="print mujoco_dir(): '' on the lock's MuJoCo, else mujoco-<version>")
    args = p.parse_args(argv)
    try:
        if args.command != "mujoco-dir" and os.path.isfile(args.store):
            raise ConfigError(f"--store {args.store} is a file; give the folder of the stored runs (runs.csv, iterations.csv)")
        if args.command != "mujoco-dir" and args.steps < 1:
            raise ConfigError(f"--steps must be at least 1, got {args.steps}")
        if args.command == "mujoco-dir":
            print(mujoco_dir())
        elif args.command == "plan":
            plan(args.mode, args.store, args.cells, args.steps)
        elif args.command == "store":
            store_runs(args.runs_dir, args.store, args.steps)
        else:
            report(args.store, args.out or args.store, args.steps)
    except ConfigError as e:
        print(f"implementation_matters.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
