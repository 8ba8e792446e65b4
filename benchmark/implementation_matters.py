"""Seed 004, the PPO part: what benchmark/implementation_matters.sh runs, the stored runs, and the report.

Run:   bash benchmark/implementation_matters.sh [short]          (calls the three commands below)
       python benchmark/implementation_matters.py plan --mode full|short --store DIR
       python benchmark/implementation_matters.py store runs/ --store DIR
       python benchmark/implementation_matters.py report --store DIR [--out DIR]

The settings are the paper's released configs (MadryLab/implementation-matters: src/MuJoCo.json, overridden by
configs/{walker,hopper}_{ppo,ppom,ppo_noclip}.py), as ppo_continuous_action.py's flags. PPO-M turns every code-level
detail off but keeps observation normalisation (without its clip); PPO-NoClip keeps them and sets the clip to 1e32.
Where the configs and the paper's Tables 4 and 6 differ, the configs are followed (Hopper PPO-NoClip's state clip: 10
in the config, 2.5 in Table 6; Walker2d's: none in the config, 30 in Table 4). What the paper's code does otherwise,
and we do not, is listed in the report (DIFFERENCES below).

`store` keeps each finished run (run.py's summary says ok) of a planned cell as a row of runs.csv (its final return:
the mean of its last 100 episodic returns, as every result here) and its Figure 2 numbers every 4 iterations in
curves.csv; `plan` skips the seeds stored there, so the study goes on across machines, and `report` reads nothing else.
"""

import argparse
import csv
import glob
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import RETURN_TAG, ConfigError, args_hash, read_run  # noqa: E402

STEPS = 1000000
PROTOCOL = "--num-envs 1 --num-steps 2048 --num-minibatches 32 --update-epochs 10 --save-model --save-every 50"
MINIMAL = "--max-grad-norm inf --no-clip-vloss --no-anneal-lr --reward-scaling none --no-ortho-init --clip-obs inf"
SETTINGS = {  # (algorithm, env): flags; policy and value learning rates, lambda, clips and entropy per config
    ("PPO", "Walker2d-v4"): "--learning-rate 4e-4 --value-lr 3e-4 --max-grad-norm inf",
    ("PPO", "Hopper-v4"): "--learning-rate 3e-4 --value-lr 2.5e-4 --max-grad-norm inf --no-clip-vloss",
    ("PPO-M", "Walker2d-v4"): f"--learning-rate 1e-4 --value-lr 2e-4 {MINIMAL}",
    ("PPO-M", "Hopper-v4"): f"--learning-rate 1.7e-4 --value-lr 4e-4 {MINIMAL}",
    ("PPO-NoClip", "Walker2d-v4"): "--learning-rate 7.25e-5 --value-lr 6e-4 --clip-coef 1e32 --ent-coef=-0.01 "
                                   "--gae-lambda 0.85 --reward-scaling rewards --clip-reward 30 --clip-obs inf "
                                   "--max-grad-norm 0.1 --no-clip-vloss",
    ("PPO-NoClip", "Hopper-v4"): "--learning-rate 6e-5 --value-lr 4e-4 --clip-coef 1e32 --ent-coef=-0.005 "
                                 "--gae-lambda 0.925 --reward-scaling rewards --clip-reward 2.5 --max-grad-norm 4 "
                                 "--no-clip-vloss",
}
# Figure 1: PPO's Walker2d settings with each of four details on or off (all on: the PPO cell's own runs)
SWITCHES = {"value_clipping": "--no-clip-vloss", "reward_scaling": "--reward-scaling none",
            "ortho_init": "--no-ortho-init", "anneal_lr": "--no-anneal-lr"}
TABLE_SEEDS, FIGURE1_SEEDS = range(1, 11), range(1, 5)
CURVE_EVERY = 4  # iterations between stored Figure 2 points (the paper: 25)
CURVE_TAGS = ("losses/max_ratio", "losses/mean_kl", "losses/max_kl")


def figure1_flags(off):
    """The flags of the Figure 1 combination with the switches in `off` turned off."""
    return " ".join([SETTINGS["PPO", "Walker2d-v4"]] + [SWITCHES[s] for s in SWITCHES if s in off])


def cells(mode):
    """The planned runs in the order they should run: [(cell, env, seeds, flags)]. The table's first four seeds come
    first (every cell gets a result early), then Figure 1's combinations, then the table's other seeds."""
    table = [(algo, env, flags) for (algo, env), flags in SETTINGS.items()]
    plan = [(algo, env, list(TABLE_SEEDS)[:4], flags) for algo, env, flags in table]
    if mode == "full":
        combos = [[s for i, s in enumerate(SWITCHES) if mask >> i & 1] for mask in range(1, 2**len(SWITCHES))]
        plan += [("fig1 off: " + " ".join(off), "Walker2d-v4", list(FIGURE1_SEEDS), figure1_flags(off)) for off in combos]
        plan += [(algo, env, list(TABLE_SEEDS)[4:], flags) for algo, env, flags in table]
    return plan


def extra_args(flags):
    """The script's args as run.py gets them from the sweep (common.sh: --total-timesteps first)."""
    return ["--total-timesteps", str(STEPS)] + f"{PROTOCOL} {flags}".split()


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def stored(store):
    return {(r["args_hash"], r["env_id"], int(r["seed"])) for r in read_csv(os.path.join(store, "runs.csv"))}


def plan(mode, store):
    done = stored(store)
    for cell, env, seeds, flags in cells(mode):
        todo = [s for s in seeds if (args_hash(extra_args(flags)), env, s) not in done]
        if todo:
            print(f"{cell}\t{env}\t{' '.join(map(str, todo))}\t{PROTOCOL} {flags}")


def installed(package):
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(package)
    except PackageNotFoundError:
        return ""


def append_rows(path, rows):
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        if new:
            writer.writeheader()
        writer.writerows(rows)


def store_runs(runs_dir, store):
    """Add the finished runs of planned cells that are not stored yet; returns how many were added."""
    known = {args_hash(extra_args(flags)): (cell, flags) for cell, _, _, flags in cells("full")}
    done, added = stored(store), 0
    os.makedirs(store, exist_ok=True)
    for path in sorted(glob.glob(os.path.join(runs_dir, "summaries", "ppo_continuous_action__*.json"))):
        try:
            with open(path) as f:
                summary = json.load(f)
        except (OSError, ValueError) as e:
            raise ConfigError(f"summary {path} cannot be read ({e}); delete it and rerun its run") from None
        key = (args_hash(summary["args"]), summary["env_id"], int(summary["seed"]))
        if not summary.get("ok") or key[0] not in known or key in done:
            continue
        tb_dir = os.path.join(runs_dir, summary["tb_dir"])
        run = read_run(tb_dir, RETURN_TAG)
        cell, flags = known[key[0]]
        append_rows(os.path.join(store, "runs.csv"), [{
            "cell": cell, "env_id": key[1], "seed": key[2], "args_hash": key[0], "flags": flags,
            "final_return": round(summary["final_return"], 2), "episodes": summary["episodes"],
            "global_step": summary["global_step"], "git_commit": summary["git_commit"],
            "mujoco": run["hparams"].get("mujoco") or installed("mujoco"), "wall_time_s": summary["wall_time_s"]}])
        curves = {tag: read_run(tb_dir, tag) for tag in CURVE_TAGS}
        steps = curves[CURVE_TAGS[0]]["steps"]
        returns, ends = np.array(run["returns"]), np.array(run["steps"])
        rows = []
        for i in range(CURVE_EVERY - 1, len(steps), CURVE_EVERY):
            window = returns[(ends > (steps[i - CURVE_EVERY] if i >= CURVE_EVERY else 0)) & (ends <= steps[i])]
            rows.append({"args_hash": key[0], "env_id": key[1], "seed": key[2], "iteration": i + 1, "step": steps[i],
                         "mean_return": round(float(window.mean()), 2) if len(window) else "",
                         **{tag.split("/")[1]: f"{curves[tag]['returns'][i]:.5g}" for tag in CURVE_TAGS}})
        append_rows(os.path.join(store, "curves.csv"), rows)
        done.add(key)
        added += 1
    print(f"implementation_matters.py: stored {added} new run(s) in {store}")
    return added


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("plan", "store", "report"):
        s = sub.add_parser(name)
        s.add_argument("--store", required=True, help="the folder of the stored runs (runs.csv, curves.csv)")
        if name == "plan":
            s.add_argument("--mode", choices=["full", "short"], default="full")
        if name == "store":
            s.add_argument("runs_dir", help="the runs/ folder the sweep wrote")
        if name == "report":
            s.add_argument("--out", help="where the report goes (default: the store)")
    args = p.parse_args(argv)
    try:
        if args.command == "plan":
            plan(args.mode, args.store)
        elif args.command == "store":
            store_runs(args.runs_dir, args.store)
        else:
            report(args.store, args.out or args.store)
    except ConfigError as e:
        print(f"implementation_matters.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
