"""Whole training runs of ours against CleanRL's script for the same task: speed pairs, or fidelity pairs (--fidelity).

Run:   python -m benchmark.peers.vs_cleanrl --cleanrl-dir PATH [--cleanrl-python PYTHON] [--scripts ppo.py ...]
                                      [--seeds 1 2 3] [--steps N] [--env-id ID] [--reference-threads N]
       python -m benchmark.peers.vs_cleanrl --fidelity --cleanrl-dir PATH --cleanrl-python PYTHON --scripts ppo_atari.py \
                                      [--seeds 1 2 3] [--steps N] [--env-id ID] [--work-dir runs/vs_cleanrl] \
                                      [--windows 10] [--out benchmark/results] [--ours-args=--gymnasium-normalization] \
                                      [--ours-threads N]

The project's speed goals are relative to the reference implementation, CleanRL: 500k CartPole-v1
steps 2.5x faster than its ppo.py, and twice the steps/s of its ppo_continuous_action.py on HalfCheetah-v4.
On a shared machine absolute times drift from day to day (CleanRL's ppo.py took about 85 s here when the
goals were set, 112-147 s on 2026-11-22), so the two run in turn, seed by seed, and the ratio is the result.

PATH is a CleanRL checkout (git clone https://github.com/vwxyzjn/cleanrl) or a folder of its scripts. Its
cleanrl/<script> (or <script> at the top of PATH) runs as it is, with --env-id, --seed and --total-timesteps, under
PYTHON: CleanRL's own environment (gymnasium 0.29.1, numpy<2), which `bash benchmark/peers/cleanrl_env.sh` creates and
names (default: this Python). Ours runs in this Python with its defaults and the same three flags. Each run gets
its own scratch directory; the order alternates by seed (CleanRL first for the first
seed, ours first for the second, ...), so a drift of the host's speed does not fall on one side.
- wall: the whole process, start-up included (what /usr/bin/time reports);
- steps/s: the last charts/SPS the run logged (its training loop);
- final return: the mean of its last 100 episodes (as benchmark/tools/report.py).
CleanRL runs with torch's default thread count unless --reference-threads N sets its OMP_NUM_THREADS (the issue
measured its ppo_continuous_action.py with one); ours with its own --torch-threads default.

Writes benchmark/results/vs_cleanrl_<date>.md (vs_cleanrl_<date>_b.md, ... if it exists), rewritten after every
pair of runs, so an interrupted session keeps what it measured.

--fidelity: do the two train alike? For each script and seed, CleanRL's script runs under PYTHON in
<work dir>/<stem>_<env>_<steps>/cleanrl/seed<S>/ and ours through benchmark/tools/run.py (with --save-model) into
.../ours/runs/, both keeping their TensorBoard logs; then benchmark/tools/compare.py sets the two groups' curves side by
side (--tags, default: return, losses, approx_kl, clipfrac, entropy) with a verdict per tag, into
<out>/vs_cleanrl_<stem>_<env>_<steps>/ (--out: a folder, default benchmark/results). The same command run again skips
what finished: ours continues an interrupted run from its checkpoint (run.py's resume), CleanRL's (which cannot
resume) starts that seed over. In both modes CleanRL's Atari scripts (ppo_atari.py, ppo_atari_lstm.py) run after
`import ale_py`, which ale-py 0.9 needs to register the ALE ids, and PATH goes on PYTHONPATH for cleanrl_utils.
--ours-args (one string) gives ours more flags, e.g. the one that makes a deliberate deviation follow CleanRL: its
runs are new ones beside the default's (run.py tells them apart by their args), CleanRL's are reused, and the report
goes to a folder named with the flags (.../vs_cleanrl_<stem>_<env>_<steps>_gymnasium-normalization/).
--ours-threads N caps ours' threads (run.py --threads; not one of the run's args, so finished runs still count): two
runs side by side on a 2-core machine need one each, e.g. --reference-threads 1 --ours-threads 1 (at two each, a
CNN run beside another ran 10x slower here).
"""

import argparse
import glob
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchmark.cleanrl import NEEDS_ALE_IMPORT, checkout_commit, command, reference_path
from benchmark.cli import unused_path
from benchmark.curves import TAGS
from benchmark.processes import KILL_AFTER_S, last_line, root_on_path, tool
from benchmark.runs import (
    RESULTS,
    ROOT,
    final_return,
    git_commit,
    load_summaries,
    machine_info,
    machine_str,
    read_run,
    steps_str,
)
from benchmark.tools import compare

# our script -> (the env of the comparison, its budget): CleanRL's defaults for its script of the same name
TASKS = {
    "ppo.py": ("CartPole-v1", 500_000),
    "ppo_continuous_action.py": ("HalfCheetah-v4", 1_000_000),
    "ppo_atari.py": ("BreakoutNoFrameskip-v4", 10_000_000),
    "ppo_atari_lstm.py": ("BreakoutNoFrameskip-v4", 10_000_000),
    "ppo_atari_envpool.py": ("Breakout-v5", 10_000_000),
    "ppo_procgen.py": ("starpilot", 25_000_000),
}
SPEED_GOALS = ["ppo.py", "ppo_continuous_action.py"]  # the speed goals' scripts: the default --scripts
SAVE_EVERY = 50  # --fidelity: iterations between our checkpoints (the scripts' default), what a rerun resumes from


def reference_env(cleanrl_dir, threads=0):
    """CleanRL's scripts import cleanrl_utils from the top of the checkout."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.abspath(cleanrl_dir), os.environ.get("PYTHONPATH")]))
    )
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def timed_run(cmd, env=None):
    """Runs `cmd` to the end in a scratch directory: {"wall" (s), "sps", "final" (last-100 mean)}."""
    path = next(a for a in cmd[1:] if a.endswith(".py"))
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
        rows.append(
            {
                "script": script,
                "runs": len(mine),
                "ours_wall": ours_wall,
                "ref_wall": ref_wall,
                "wall_ratio": ref_wall / ours_wall,
                "ours_sps": ours_sps,
                "ref_sps": ref_sps,
                "sps_ratio": ours_sps / ref_sps,
            }
        )
    return rows


def write_markdown(pairs, refs, args, argv, out, commits):
    m = machine_info()
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    threads = f"OMP_NUM_THREADS={args.reference_threads}" if args.reference_threads else "torch's default threads"
    md = [
        f"# Ours against CleanRL, whole runs in turn ({date})",
        "",
        f"- command: `python -m benchmark.peers.vs_cleanrl {shlex.join(argv)}`",
        f"- ours: commit {commits['ours'] or 'unknown'}; CleanRL: "
        + ", ".join(os.path.relpath(path, args.cleanrl_dir) for path in refs.values())
        + f" in {args.cleanrl_dir} (commit {commits['ref'] or 'unknown: not a git checkout'}), {threads}, "
        f"python {args.cleanrl_python}",
        f"- machine: {machine_str(m)}; python {m['python']}",
        "- wall: the whole process, start-up included; steps/s: the last charts/SPS logged; final: mean return of "
        "the last 100 episodes; the order in each pair alternates by seed, CleanRL first for the first",
        "",
        "| script | env | steps | seed | wall ours (s) | wall CleanRL (s) | CleanRL / ours | steps/s ours "
        "| steps/s CleanRL | final ours | final CleanRL |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in pairs:
        o, r = p["ours"], p["ref"]
        md.append(
            f"| {p['script']} | {p['env']} | {p['steps']} | {p['seed']} | {o['wall']:.2f} | {r['wall']:.2f} "
            f"| {r['wall'] / o['wall']:.2f} | {o['sps']:.0f} | {r['sps']:.0f} | {o['final']:.2f} "
            f"| {r['final']:.2f} |"
        )
    md += [
        "",
        "| script | runs | mean wall ours (s) | mean wall CleanRL (s) | CleanRL / ours (wall) "
        "| median steps/s ours | median steps/s CleanRL | ours / CleanRL (steps/s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in summary_rows(pairs):
        md.append(
            f"| {s['script']} | {s['runs']} | {s['ours_wall']:.1f} | {s['ref_wall']:.1f} | {s['wall_ratio']:.2f} "
            f"| {s['ours_sps']:.0f} | {s['ref_sps']:.0f} | {s['sps_ratio']:.2f} |"
        )
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write("\n".join(md) + "\n")


class Stopped(Exception):
    """A SIGTERM while --fidelity runs."""


def stopped(sig, frame):
    raise Stopped()


def run_child(cmd, **popen_kwargs):
    """cmd's exit status. Stopped while it runs, this stops it too: a SIGTERM here is passed on at once; a Ctrl-C
    reached it already (the terminal signals the whole foreground group), so it gets KILL_AFTER_S to end by itself
    (run.py stops its runs) before SIGTERM, then SIGKILL."""
    proc = subprocess.Popen(cmd, **popen_kwargs)
    try:
        return proc.wait()
    except BaseException as e:
        if not isinstance(e, KeyboardInterrupt):
            proc.terminate()
        for escalate in (proc.terminate, proc.kill):
            try:
                proc.wait(timeout=KILL_AFTER_S + 5)
                break
            except subprocess.TimeoutExpired:
                escalate()
        proc.wait()
        raise


def reference_run(path, script, env_id, seed, steps, work, args):
    """CleanRL's run of one seed in <work>/cleanrl/seed<S>/ (skipped when its done.json is there, else started over;
    an interrupted run's folder is kept as seed<S>.interrupted/, for lockstep.py): its TensorBoard run dir."""
    run_dir = os.path.join(work, "cleanrl", f"seed{seed}")
    done = os.path.join(run_dir, "done.json")
    if os.path.isfile(done):
        print(f"CleanRL {script} {env_id} seed {seed}: already finished, skipped", flush=True)
    else:
        if os.path.isdir(run_dir):  # an interrupted run: CleanRL's scripts cannot resume; its logs are kept aside
            shutil.rmtree(f"{run_dir}.interrupted", ignore_errors=True)
            os.replace(run_dir, f"{run_dir}.interrupted")
        os.makedirs(run_dir)
        cmd = command(path, env_id, seed, steps, args.cleanrl_python, script in NEEDS_ALE_IMPORT)
        print(f"CleanRL {script} {env_id} seed {seed}: $ {shlex.join(cmd)}", flush=True)
        start = time.time()
        with open(os.path.join(run_dir, "cleanrl.log"), "w") as log:
            status = run_child(
                cmd,
                cwd=run_dir,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=reference_env(args.cleanrl_dir, args.reference_threads),
            )
        if status != 0:
            with open(os.path.join(run_dir, "cleanrl.log"), errors="replace") as f:
                lines = f.read().strip().splitlines() or [f"exit status {status}"]
            raise RuntimeError(f"CleanRL's {script} seed {seed} failed: {lines[-1]} (log: {run_dir}/cleanrl.log)")
        print(f"CleanRL {script} {env_id} seed {seed}: ok {time.time() - start:.1f}s", flush=True)
        with open(done, "w") as f:
            json.dump(
                {
                    "command": cmd,
                    "wall_time_s": round(time.time() - start, 1),
                    "python": args.cleanrl_python,
                    "commit": checkout_commit(args.cleanrl_dir, path),
                },
                f,
                indent=1,
            )
    found = glob.glob(os.path.join(run_dir, "runs", "*"))
    if len(found) != 1:
        raise RuntimeError(f"CleanRL's {script} seed {seed}: {len(found)} run dirs under {run_dir}/runs, not one")
    return found[0]


def our_runs(script, env_id, seeds, steps, work, more=(), threads=0):
    """Ours through the runner, benchmark/tools/run.py (finished runs skipped, interrupted ones resumed), with the flags
    `more` and run.py's --threads `threads` (0: its default): their TensorBoard run dirs."""
    runs_dir = os.path.join(work, "ours", "runs")
    extra = ["--total-timesteps", str(steps), "--save-model", "--save-every", str(SAVE_EVERY), *more]
    cmd = [
        *tool("benchmark.tools.run"),
        "--script",
        script,
        "--env-ids",
        env_id,
        "--seeds",
        *map(str, seeds),
        "--runs-dir",
        runs_dir,
        "--threads",
        str(threads),
        "--",
        *extra,
    ]
    if run_child(cmd, env=root_on_path()) != 0:
        raise RuntimeError(f"our {os.path.basename(script)} failed: run.py printed its log above")
    dirs = {
        s["seed"]: os.path.join(runs_dir, rel)
        for rel, s in load_summaries(runs_dir).items()
        if s.get("ok") and s["env_id"] == env_id and s["args"] == extra and s["seed"] in seeds
    }
    return [dirs[s] for s in seeds]


def fidelity(args, refs, ours_dir, argv):
    commits = {
        "ours": git_commit(os.path.join(ours_dir, args.scripts[0])),
        "ref": checkout_commit(args.cleanrl_dir, refs[args.scripts[0]]),
    }
    verdicts, more = [], shlex.split(args.ours_args)
    for script in args.scripts:
        env_id, default_steps = TASKS[script]
        env_id, steps = args.env_id or env_id, args.steps or default_steps
        name = f"{os.path.splitext(script)[0]}_{env_id.replace('/', '-')}_{steps_str(steps)}"
        work = os.path.join(args.work_dir, name)
        ref_dirs, ours_dirs = [], []
        for seed in args.seeds:  # a pair at a time, so that a sitting that ends early leaves whole pairs
            ref_dirs.append(reference_run(refs[script], script, env_id, seed, steps, work, args))
            ours_dirs += our_runs(os.path.join(ours_dir, script), env_id, [seed], steps, work, more, args.ours_threads)
        flags = "-".join(a.lstrip("-") for a in more).replace("/", "-")  # e.g. gymnasium-normalization
        out = os.path.join(args.out or RESULTS, f"vs_cleanrl_{name}" + (f"_{flags}" if flags else ""))
        if (
            compare.main(
                [
                    "--a",
                    f"ours={ours_dirs[0]}",
                    *ours_dirs[1:],
                    "--b",
                    f"cleanrl={ref_dirs[0]}",
                    *ref_dirs[1:],
                    "--out",
                    out,
                    "--windows",
                    str(args.windows),
                    "--tags",
                    *args.tags,
                ]
            )
            != 0
        ):
            raise RuntimeError(f"compare.py could not compare {script}'s runs (its error above)")
        with open(os.path.join(out, "report.md")) as f:
            md = f.read().split("\n", 1)
        with open(os.path.join(out, "report.md"), "w") as f:  # where the two sides came from, under the title
            f.write(
                "\n".join(
                    [
                        md[0],
                        "",
                        f"- made by: `python -m benchmark.peers.vs_cleanrl {shlex.join(argv)}`",
                        f"- ours: {script} at commit {commits['ours'] or 'unknown'}, in {sys.executable}"
                        + (f", with {shlex.join(more)}" if more else ""),
                        f"- cleanrl: {os.path.relpath(refs[script], args.cleanrl_dir)} in {args.cleanrl_dir} "
                        f"(commit {commits['ref'] or 'unknown: not a git checkout'}), in {args.cleanrl_python}",
                        md[1].lstrip("\n"),
                    ]
                )
            )
        verdicts.append(f"{script} {env_id} {steps_str(steps)}: {out}/report.md")
    print("\nvs_cleanrl.py: wrote " + "; ".join(verdicts))
    return 0


def main(argv=None, ours_dir=ROOT):
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cleanrl-dir", required=True, help="a CleanRL checkout (git clone https://github.com/vwxyzjn/cleanrl)")
    p.add_argument(
        "--cleanrl-python",
        default=sys.executable,
        help="the python of CleanRL's own environment (bash benchmark/peers/cleanrl_env.sh makes it)",
    )
    p.add_argument("--scripts", nargs="+", default=SPEED_GOALS, choices=list(TASKS), help="our scripts to compare")
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3], help="one pair of runs per seed")
    p.add_argument("--steps", type=int, default=0, help="total timesteps of every run (default: the reference's)")
    p.add_argument("--env-id", default=None, help="the env of the pairs (one script only; default: the reference's)")
    p.add_argument("--reference-threads", type=int, default=0, help="OMP_NUM_THREADS for CleanRL (default: unset)")
    p.add_argument(
        "--out",
        default=None,
        help="markdown output (default: benchmark/results/vs_cleanrl_<date>.md); "
        "with --fidelity the folder of the reports (default: benchmark/results)",
    )
    p.add_argument("--fidelity", action="store_true", help="keep both sides' TensorBoard logs and compare the curves")
    p.add_argument("--work-dir", default=os.path.join("runs", "vs_cleanrl"), help="--fidelity: where the runs go")
    p.add_argument("--windows", type=int, default=10, help="--fidelity: windows of compare.py's tables")
    p.add_argument("--tags", nargs="+", default=TAGS, help="--fidelity: the scalars compare.py compares")
    p.add_argument(
        "--ours-args",
        default="",
        help="--fidelity: more flags for ours, one string "
        "(--ours-args=--gymnasium-normalization); the report's folder is named with them",
    )
    p.add_argument("--ours-threads", type=int, default=0, help="--fidelity: run.py --threads for ours (default: its own)")
    args = p.parse_args(argv)
    if not os.access(args.cleanrl_python, os.X_OK):
        print(
            f"vs_cleanrl.py: --cleanrl-python {args.cleanrl_python} is not an executable; "
            "bash benchmark/peers/cleanrl_env.sh makes one",
            file=sys.stderr,
        )
        return 2
    if args.env_id and len(args.scripts) > 1:
        print(
            f"vs_cleanrl.py: --env-id {args.env_id} with {len(args.scripts)} scripts; give one script with --env-id",
            file=sys.stderr,
        )
        return 2
    if args.ours_threads < 0:
        print(
            f"vs_cleanrl.py: --ours-threads must be 1 or more (0: run.py's default), got {args.ours_threads}", file=sys.stderr
        )
        return 2
    if len(set(args.seeds)) != len(args.seeds):
        print("vs_cleanrl.py: a seed is given twice in --seeds; give each once", file=sys.stderr)
        return 2
    refs = {s: reference_path(args.cleanrl_dir, s) for s in args.scripts}
    missing = [s for s, path in refs.items() if path is None]
    if missing:
        print(
            f"vs_cleanrl.py: no cleanrl/{missing[0]} under {args.cleanrl_dir}; pass a CleanRL checkout "
            "(git clone https://github.com/vwxyzjn/cleanrl) as --cleanrl-dir",
            file=sys.stderr,
        )
        return 2
    ours_missing = [s for s in args.scripts if not os.path.isfile(os.path.join(ours_dir, s))]
    if ours_missing:
        print(f"vs_cleanrl.py: {ours_missing[0]} is not in {ours_dir}", file=sys.stderr)
        return 2
    ours_as_ref = [s for s in args.scripts if open(refs[s], "rb").read() == open(os.path.join(ours_dir, s), "rb").read()]
    if ours_as_ref:  # this project (or a copy of a script of it) given as --cleanrl-dir
        print(
            f"vs_cleanrl.py: {refs[ours_as_ref[0]]} is our own {ours_as_ref[0]}, not CleanRL's; pass a CleanRL checkout "
            "(git clone https://github.com/vwxyzjn/cleanrl) as --cleanrl-dir",
            file=sys.stderr,
        )
        return 2
    if args.fidelity:
        before = signal.signal(signal.SIGTERM, stopped)
        try:
            return fidelity(args, refs, ours_dir, argv)
        except RuntimeError as e:
            print(f"vs_cleanrl.py: {e}", file=sys.stderr)
            return 1
        except (KeyboardInterrupt, Stopped) as e:
            print(
                f"vs_cleanrl.py: stopped by {'SIGINT' if isinstance(e, KeyboardInterrupt) else 'SIGTERM'}; the same "
                "command continues: finished runs are skipped, ours resume from their checkpoints",
                file=sys.stderr,
            )
            return 128 + (signal.SIGINT if isinstance(e, KeyboardInterrupt) else signal.SIGTERM)
        finally:
            signal.signal(signal.SIGTERM, before)
    # taken once, before the runs: an edit made while they run must not relabel them
    commits = {
        "ours": git_commit(os.path.join(ours_dir, args.scripts[0])),
        "ref": checkout_commit(args.cleanrl_dir, refs[args.scripts[0]]),
    }
    date = time.strftime("%Y-%m-%d", time.gmtime())
    out = args.out or unused_path(os.path.join(RESULTS, f"vs_cleanrl_{date}"))
    pairs = []
    for script in args.scripts:
        env_id, default_steps = TASKS[script]
        env_id, steps = args.env_id or env_id, args.steps or default_steps
        for i, seed in enumerate(args.seeds):
            ref_cmd = command(refs[script], env_id, seed, steps, args.cleanrl_python, script in NEEDS_ALE_IMPORT)
            ours_cmd = command(os.path.join(ours_dir, script), env_id, seed, steps)
            try:
                if i % 2 == 0:
                    ref = timed_run(ref_cmd, reference_env(args.cleanrl_dir, args.reference_threads))
                    ours = timed_run(ours_cmd)
                else:
                    ours = timed_run(ours_cmd)
                    ref = timed_run(ref_cmd, reference_env(args.cleanrl_dir, args.reference_threads))
            except RuntimeError as e:
                print(f"vs_cleanrl.py: {e}", file=sys.stderr)
                return 1
            pairs.append({"script": script, "env": env_id, "steps": steps, "seed": seed, "ours": ours, "ref": ref})
            print(
                f"{script} seed {seed}: wall ours {ours['wall']:.1f} s, CleanRL {ref['wall']:.1f} s "
                f"({ref['wall'] / ours['wall']:.2f}x)",
                flush=True,
            )
            write_markdown(pairs, refs, args, argv, out, commits)
    print(f"\nvs_cleanrl.py: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
