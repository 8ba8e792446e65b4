"""Whole training runs of ours against CleanRL's script for the same task, taking turns, in one session.

Run:   python benchmark/vs_cleanrl.py --cleanrl-dir PATH [--cleanrl-python PYTHON] [--scripts ppo.py ...]
                                      [--seeds 1 2 3] [--steps N] [--reference-threads N]

The speed goals of issues 2 and 4 are relative to the reference implementation, CleanRL: 500k CartPole-v1
steps 2.5x faster than its ppo.py, and twice the steps/s of its ppo_continuous_action.py on HalfCheetah-v4.
On a shared machine absolute times drift from day to day (CleanRL's ppo.py took about 85 s here when the
issue was written, 112-147 s on 2026-11-22), so the two run in turn, seed by seed, and the ratio is the result.

PATH is a CleanRL checkout (git clone https://github.com/vwxyzjn/cleanrl) or a folder of its scripts. Its
cleanrl/<script> (or <script> at the top of PATH) runs as it is, with --env-id, --seed and --total-timesteps, under
PYTHON: CleanRL's own environment (gymnasium 0.29.1, numpy<2), which `bash benchmark/cleanrl_env.sh` creates and
names (default: this Python). Ours runs in this Python with its defaults and the same three flags. Each run gets its own scratch directory; the order alternates by seed (CleanRL first for the first
seed, ours first for the second, ...), so a drift of the host's speed does not fall on one side.
- wall: the whole process, start-up included (what /usr/bin/time reports);
- steps/s: the last charts/SPS the run logged (its training loop);
- final return: the mean of its last 100 episodes (as benchmark/report.py).
CleanRL runs with torch's default thread count unless --reference-threads N sets its OMP_NUM_THREADS (the issue
measured its ppo_continuous_action.py with one); ours with its own --torch-threads default.

Writes benchmark/results/vs_cleanrl_<date>.md (vs_cleanrl_<date>_b.md, ... if it exists), rewritten after every
pair of runs, so an interrupted session keeps what it measured.
"""

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import final_return, git_commit, machine_info, read_run  # noqa: E402
from throughput import last_line, unused_path  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# our script -> (the env of the comparison, its budget: the reference's default total_timesteps)
TASKS = {"ppo.py": ("CartPole-v1", 500_000), "ppo_continuous_action.py": ("HalfCheetah-v4", 1_000_000)}


def reference_path(cleanrl_dir, script):
    """CleanRL's file for `script` in a checkout (cleanrl/<script>) or a flat folder (<script>), else None."""
    for path in (os.path.join(cleanrl_dir, "cleanrl", script), os.path.join(cleanrl_dir, script)):
        if os.path.isfile(path):
            return path
    return None


def timed_run(path, env_id, seed, steps, threads=0, python=sys.executable):
    """Runs `path` under `python` to the end in a scratch directory: {"wall" (s), "sps", "final" (last-100 mean)}."""
    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [python, path, "--env-id", env_id, "--seed", str(seed), "--total-timesteps", str(steps)]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise RuntimeError(f"{path}: {last_line(out)}")
        dirs = glob.glob(os.path.join(tmp, "runs", "*"))
        if len(dirs) != 1:
            raise RuntimeError(f"{path}: expected one run directory under runs/, found {len(dirs)}")
        data = read_run(dirs[0])
    if data["sps"] is None:
        raise RuntimeError(f"{path}: no charts/SPS logged")
    return {"wall": wall, "sps": data["sps"], "final": final_return(data["returns"])}


def summary_rows(pairs):
    """Per script: mean walls, the ratio of the mean walls (reference / ours) and of the median steps/s."""
    rows = []
    for script in dict.fromkeys(p["script"] for p in pairs):
        mine = [p for p in pairs if p["script"] == script]
        ours_wall = statistics.mean(p["ours"]["wall"] for p in mine)
        ref_wall = statistics.mean(p["ref"]["wall"] for p in mine)
        ours_sps = statistics.median(p["ours"]["sps"] for p in mine)
        ref_sps = statistics.median(p["ref"]["sps"] for p in mine)
        rows.append({"script": script, "runs": len(mine), "ours_wall": ours_wall, "ref_wall": ref_wall,
                     "wall_ratio": ref_wall / ours_wall, "ours_sps": ours_sps, "ref_sps": ref_sps,
                     "sps_ratio": ours_sps / ref_sps})
    return rows


def checkout_commit(cleanrl_dir, path):
    """The commit of the CleanRL checkout holding `path`, or None when `cleanrl_dir` is not the top of a git
    repository (a folder of copies inside some other repository must not report that repository's commit)."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cleanrl_dir, capture_output=True, text=True)
    except OSError:  # no git
        return None
    if top.returncode != 0 or os.path.realpath(top.stdout.strip()) != os.path.realpath(cleanrl_dir):
        return None
    return git_commit(path)


def write_markdown(pairs, refs, args, argv, out, commits):
    m = machine_info()
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    threads = f"OMP_NUM_THREADS={args.reference_threads}" if args.reference_threads else "torch's default threads"
    md = [f"# Ours against CleanRL, whole runs in turn ({date})", "",
          f"- command: `{' '.join(['python benchmark/vs_cleanrl.py', *(sys.argv[1:] if argv is None else argv)])}`",
          f"- ours: commit {commits['ours'] or 'unknown'}; CleanRL: "
          + ", ".join(os.path.relpath(path, args.cleanrl_dir) for path in refs.values())
          + f" in {args.cleanrl_dir} (commit {commits['ref'] or 'unknown: not a git checkout'}), {threads}, "
          f"python {args.cleanrl_python}",
          f"- machine: {m['cores']} cores, {m['cpu']}" + (f", GPU {m['gpu']}" if m["gpu"] else ", no GPU")
          + f"; python {m['python']}",
          "- wall: the whole process, start-up included; steps/s: the last charts/SPS logged; final: mean return of "
          "the last 100 episodes; the order in each pair alternates by seed, CleanRL first for the first",
          "", "| script | env | steps | seed | wall ours (s) | wall CleanRL (s) | CleanRL / ours | steps/s ours "
          "| steps/s CleanRL | final ours | final CleanRL |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in pairs:
        o, r = p["ours"], p["ref"]
        md.append(f"| {p['script']} | {p['env']} | {p['steps']} | {p['seed']} | {o['wall']:.2f} | {r['wall']:.2f} "
                  f"| {r['wall'] / o['wall']:.2f} | {o['sps']:.0f} | {r['sps']:.0f} | {o['final']:.2f} "
                  f"| {r['final']:.2f} |")
    md += ["", "| script | runs | mean wall ours (s) | mean wall CleanRL (s) | CleanRL / ours (wall) "
           "| median steps/s ours | median steps/s CleanRL | ours / CleanRL (steps/s) |", "|---|---|---|---|---|---|---|---|"]
    for s in summary_rows(pairs):
        md.append(f"| {s['script']} | {s['runs']} | {s['ours_wall']:.1f} | {s['ref_wall']:.1f} | {s['wall_ratio']:.2f} "
                  f"| {s['ours_sps']:.0f} | {s['ref_sps']:.0f} | {s['sps_ratio']:.2f} |")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write("\n".join(md) + "\n")


def main(argv=None, ours_dir=ROOT):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cleanrl-dir", required=True, help="a CleanRL checkout (git clone https://github.com/vwxyzjn/cleanrl)")
    p.add_argument("--cleanrl-python", default=sys.executable,
                   help="the python of CleanRL's own environment (bash benchmark/cleanrl_env.sh makes it)")
    p.add_argument("--scripts", nargs="+", default=list(TASKS), choices=list(TASKS), help="our scripts to compare")
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3], help="one pair of runs per seed")
    p.add_argument("--steps", type=int, default=0, help="total timesteps of every run (default: the reference's)")
    p.add_argument("--reference-threads", type=int, default=0, help="OMP_NUM_THREADS for CleanRL (default: unset)")
    p.add_argument("--out", default=None, help="markdown output (default: benchmark/results/vs_cleanrl_<date>.md)")
    args = p.parse_args(argv)
    if not os.access(args.cleanrl_python, os.X_OK):
        print(f"vs_cleanrl.py: --cleanrl-python {args.cleanrl_python} is not an executable; "
              "bash benchmark/cleanrl_env.sh makes one", file=sys.stderr)
        return 2
    refs = {s: reference_path(args.cleanrl_dir, s) for s in args.scripts}
    missing = [s for s, path in refs.items() if path is None]
    if missing:
        print(f"vs_cleanrl.py: no cleanrl/{missing[0]} under {args.cleanrl_dir}; pass a CleanRL checkout "
              "(git clone https://github.com/vwxyzjn/cleanrl) as --cleanrl-dir", file=sys.stderr)
        return 2
    ours_missing = [s for s in args.scripts if not os.path.isfile(os.path.join(ours_dir, s))]
    if ours_missing:
        print(f"vs_cleanrl.py: {ours_missing[0]} is not in {ours_dir}", file=sys.stderr)
        return 2
    # taken once, before the runs: an edit made while they run must not relabel them
    commits = {"ours": git_commit(os.path.join(ours_dir, args.scripts[0])),
               "ref": checkout_commit(args.cleanrl_dir, refs[args.scripts[0]])}
    out = args.out or unused_path(os.path.join(HERE, "results", f"vs_cleanrl_{time.strftime('%Y-%m-%d', time.gmtime())}"))
    pairs = []
    for script in args.scripts:
        env_id, default_steps = TASKS[script]
        steps = args.steps or default_steps
        for i, seed in enumerate(args.seeds):
            try:
                if i % 2 == 0:
                    ref = timed_run(refs[script], env_id, seed, steps, args.reference_threads, args.cleanrl_python)
                    ours = timed_run(os.path.join(ours_dir, script), env_id, seed, steps)
                else:
                    ours = timed_run(os.path.join(ours_dir, script), env_id, seed, steps)
                    ref = timed_run(refs[script], env_id, seed, steps, args.reference_threads, args.cleanrl_python)
            except RuntimeError as e:
                print(f"vs_cleanrl.py: {e}", file=sys.stderr)
                return 1
            pairs.append({"script": script, "env": env_id, "steps": steps, "seed": seed, "ours": ours, "ref": ref})
            print(f"{script} seed {seed}: wall ours {ours['wall']:.1f} s, CleanRL {ref['wall']:.1f} s "
                  f"({ref['wall'] / ours['wall']:.2f}x)", flush=True)
            write_markdown(pairs, refs, args, argv, out, commits)
    print(f"\nvs_cleanrl.py: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
