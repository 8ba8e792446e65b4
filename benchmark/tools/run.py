"""Seed-sweep runner: every (env, seed) of one script as its own process, a few at a time.

Run:   python -m benchmark.tools.run --script ppo.py --env-ids CartPole-v1 Acrobot-v1 --seeds 1 2 3 \
           --workers 2 -- --total-timesteps 500000

Everything after `--` goes to the script unchanged. Each run is
    python <script> --env-id E --seed S --exp-name <script stem>-<hash of the extra args> <extra args>
so its TensorBoard log lands in runs/<E>__<exp name>__<S>__<timestamp>/ of the current directory,
and runs with other extra args never mix with these. After each run the runner writes
runs/summaries/<script stem>__<E>__<S>__<hash>.json (script, args, env, seed, git commit, machine,
wall time, steps/s, final return, exit status, log paths, and the script's own code: the sha256 of its bytes and
whether git has it committed, modified or untracked). A run whose summary says "ok" is skipped, so an interrupted
sweep continues where it stopped; a failed run prints its log tail and the others go on; the exit code is 1 if any
run failed. A finished run of other code than the script's now (edited since) is not taken for this code's: the sweep
stops in one line before any run starts, unless --rerun-changed (those runs move to runs/superseded/, where no report
looks, and run again) or --reuse-changed (they stay, skipped, their summaries saying which code they ran).

Long runs: with `--save-model` among the extra args the scripts checkpoint every `--save-every`
iterations, and a rerun continues a run that stopped early (killed, crashed, machine gone) from the
newest checkpoint in its run dir, with `--resume`, logging on into the same TensorBoard dir (the
scripts' purge_step drops what was logged after that checkpoint). The summary's commit is the last
part's; the run's log in runs/logs/ lists every part's start, commit, machine and command (report.py and solved.py
name the machines from it, also for a run stopped short of its budget, which has no summary). Delete the run dir to
start over.

Stopping: Ctrl-C (SIGINT), SIGTERM or a hangup stops the whole sweep. Each run is the leader of its own process
group, which gets the same signal (then SIGKILL after KILL_AFTER_S seconds, or at a second Ctrl-C), and whatever a
run leaves running when it ends is killed with it; no further run starts. The runner then lists the runs finished,
interrupted and not started, and ends by that signal itself (the shell's exit status 130 or 143), so that a sweep
script calling it stops too. The same command run again resumes the sweep. A SIGKILL of the runner, which it cannot
catch, stops its runs with SIGTERM (on Linux); a run that finished with no runner left to record it (killed in between)
is recorded by the rerun, whose --resume the script refuses as holding the whole run.

Bad input (a seed or env id given twice, --workers 0, a flag of the runner's own among the extra args, a --runs-dir
that cannot be written, ...) stops the runner with one line and exit status 2 before any run starts.

Threads: workers x threads <= cores, threads = cores // workers by default. Each run gets
OMP_NUM_THREADS = MKL_NUM_THREADS = threads as a cap, and keeps its own --torch-threads default: 1 in the
MLP scripts (more threads only slow their small networks, many times over when the cores are shared) and in
the PAAC/IMPALA learners (their env workers use the other cores); 0, torch's default, which follows
OMP_NUM_THREADS, in the PPO CNN scripts. `--torch-threads n` among the extra args overrides it.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from benchmark.cli import ConfigError, writable
from benchmark.processes import KILL_AFTER_S, Children, root_on_path
from benchmark.runs import (
    WHOLE_RUN_CHECKPOINT,
    available_cores,
    exp_name_for,
    final_return,
    finished,
    git_commit,
    machine_info,
    machine_str,
    read_run,
    run_dirs,
    script_digest,
    script_git_state,
    summary_path,
)

RUNNER_FLAGS = ("--env-id", "--seed", "--exp-name", "--resume")  # set by the runner for each run


# ---- shared with report.py and throughput.py --------------------------------------------------------


# ---- the runner ---------------------------------------------------------------------------------------


def interrupted_checkpoint(runs_dir, env_id, exp_name, seed):
    """The newest checkpoint.pt in this (env, exp name, seed)'s run dirs, or None: what a run that stopped
    before its summary said "ok" left behind."""
    found = [os.path.join(d, "checkpoint.pt") for d in run_dirs(runs_dir, env_id, exp_name, seed)]
    found = [c for c in found if os.path.isfile(c)]
    return max(found, key=os.path.getmtime) if found else None


def log_tail(path, n=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def run_one(script, env_id, seed, extra, runs_dir, threads, python, children=None):
    """Run one (env, seed) to the end; write and return its summary. None when `children` was stopped before the
    run started; {"interrupted": True, ...} and no summary when it was stopped during the run."""
    children = children or Children()
    if children.stopped_by:
        return None
    exp_name = exp_name_for(script, extra)
    cmd = [python, os.path.abspath(script), "--env-id", env_id, "--seed", str(seed), "--exp-name", exp_name]
    cmd += extra
    resume_from = interrupted_checkpoint(runs_dir, env_id, exp_name, seed) if "--save-model" in extra else None
    if resume_from:  # the script takes every setting from the checkpoint
        cmd += ["--resume", os.path.abspath(resume_from)]
    # the repository on the import path: a peer's stand-in (benchmark/peers/sb3_a2c.py) imports the script it mirrors
    env = dict(root_on_path(), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")

    os.makedirs(os.path.join(runs_dir, "logs"), exist_ok=True)
    summary_file = summary_path(runs_dir, script, env_id, seed, extra)
    log_path = os.path.join(runs_dir, "logs", os.path.basename(summary_file)[: -len(".json")] + ".log")
    before = run_dirs(runs_dir, env_id, exp_name, seed)
    commit = git_commit(script)  # the code the run starts with (edits made while it runs do not count)
    digest, git_state = script_digest(script), script_git_state(script)
    start = time.time()
    with open(log_path, "a" if resume_from else "w") as log:
        # a resumed run appends: its log then holds every part's start, commit and command
        log.write(
            f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(start))} commit {commit} script sha256 {digest} "
            f"({git_state or 'not in git'}) machine: {machine_str(machine_info())}\n$ {' '.join(cmd)}\n"
        )
        log.flush()
        # the scripts write runs/ relative to their working directory: run them in the parent of runs_dir
        status = children.run(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=os.path.dirname(os.path.abspath(runs_dir))
        )
    wall = time.time() - start
    if status is None:
        return None
    if status != 0 and children.stopped_by:  # not a result: the next invocation runs it again
        return {"interrupted": True, "wall_time_s": round(wall, 2), "log_path": log_path}
    # the run ended with no runner to record it (killed between the two, or a run that outlived it): a finished run
    finished_earlier = bool(resume_from) and status != 0 and bool(WHOLE_RUN_CHECKPOINT.search(log_tail(log_path, 3)))

    # the run's own dir: a new one, or (a rerun started within the same second) one written since the start
    new = [d for d in run_dirs(runs_dir, env_id, exp_name, seed) if d not in before or os.path.getmtime(d) >= start]
    tb_dir = os.path.dirname(resume_from) if resume_from else max(new, key=os.path.getmtime) if new else None
    data = read_run(tb_dir) if tb_dir else {"returns": [], "last_step": 0, "sps": None}
    if resume_from:  # the wall time is only this last part's: take the script's own steps/s over it
        sps = data["sps"]
    else:
        sps = data["last_step"] / wall if wall > 0 else None
    summary = {
        "script": os.path.basename(script),
        "script_path": os.path.abspath(script),
        "args": extra,
        "command": cmd,
        "env_id": env_id,
        "seed": seed,
        "exp_name": exp_name,
        "threads": threads,
        "git_commit": commit,
        # the script's own bytes and git's word on them: an edited or untracked copy shows here, not in the commit
        "script_sha256": digest,
        "script_git": git_state,
        "machine": machine_info(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
        "wall_time_s": round(wall, 2),
        "global_step": data["last_step"],
        "steps_per_s": round(sps, 1) if sps is not None else None,
        "resumed_from": os.path.relpath(resume_from, runs_dir) if resume_from else None,
        "episodes": len(data["returns"]),
        "final_return": final_return(data["returns"]),
        "exit_status": status,
        "ok": (status == 0 or finished_earlier) and tb_dir is not None,
        "finished_earlier": finished_earlier,
        "total_timesteps": data.get("hparams", {}).get("total_timesteps"),
        # the MuJoCo the run's env ran on, as the MuJoCo scripts log it: MuJoCo 4 changed some envs' physics
        "mujoco": data.get("hparams", {}).get("mujoco"),
        # relative to runs_dir, so a moved or copied runs/ still finds its logs
        "tb_dir": os.path.relpath(tb_dir, runs_dir) if tb_dir else None,
        "log_path": log_path,
    }
    os.makedirs(os.path.dirname(summary_file), exist_ok=True)
    with open(summary_file + ".tmp", "w") as f:
        json.dump(summary, f, indent=1, default=str)
    os.replace(summary_file + ".tmp", summary_file)  # never a half-written summary that reads as done
    return summary


def supersede(runs_dir, script, env_id, seed, extra):
    """Move a finished run's summary and run dirs into <runs_dir>/superseded/<time>/, where no report looks."""
    path = summary_path(runs_dir, script, env_id, seed, extra)
    exp_name = json.load(open(path))["exp_name"]
    dest = os.path.join(runs_dir, "superseded", time.strftime("%Y%m%dT%H%M%S"))
    os.makedirs(dest, exist_ok=True)
    for src in [path, *run_dirs(runs_dir, env_id, exp_name, seed)]:
        os.replace(src, os.path.join(dest, os.path.basename(src)))


def parse(argv):
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="everything after -- goes to the script")
    p.add_argument("--script", required=True, help="the training script, e.g. ppo.py")
    p.add_argument("--env-ids", nargs="+", required=True)
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--workers", type=int, default=1, help="runs at the same time")
    p.add_argument("--threads", type=int, default=0, help="threads per run (default: cores // workers, at least 1)")
    p.add_argument("--runs-dir", default="runs", help="where the scripts' TensorBoard logs land (default: ./runs)")
    p.add_argument("--python", default=sys.executable, help="the interpreter that runs the script")
    changed = p.add_mutually_exclusive_group()
    changed.add_argument(
        "--rerun-changed",
        action="store_true",
        help="run again the finished runs of an edited script (their run dirs and summaries move to runs/superseded/)",
    )
    changed.add_argument(
        "--reuse-changed", action="store_true", help="keep the finished runs of an edited script as they are: skip them"
    )
    args = p.parse_args(argv)
    dup = next(
        (
            f"{flag} {v}"
            for flag, values in (("--env-ids", args.env_ids), ("--seeds", args.seeds))
            for i, v in enumerate(values)
            if v in values[:i]
        ),
        None,
    )
    own = next((a for a in extra if a.split("=")[0].replace("_", "-") in RUNNER_FLAGS), None)
    bad_seed = next((v for v in args.seeds if not 0 <= v < 2**32), None)
    problems = [  # (is it wrong, the message naming it and the fix)
        (not os.path.isfile(args.script), f"script {args.script!r} not found; give the path of a training script"),
        (dup, f"{dup} is given twice: the sweep would run it twice into one summary; give each once"),
        (bad_seed is not None, f"--seeds {bad_seed} is out of range; seeds go from 0 to 2**32 - 1"),
        (args.workers < 1, f"--workers must be at least 1, got {args.workers}"),
        (args.threads < 0, f"--threads must be at least 1 (or 0: cores // workers), got {args.threads}"),
        (
            os.path.basename(os.path.normpath(args.runs_dir)) != "runs",
            f"--runs-dir {args.runs_dir!r} must end in 'runs': the scripts always log into runs/ of their working directory",
        ),
        (
            own,
            f"{own} among the extra args: the runner sets {', '.join(RUNNER_FLAGS)} for each run; "
            "use --env-ids and --seeds, and leave the others out",
        ),
        (shutil.which(args.python) is None, f"--python {args.python!r} is not an executable; give a Python's path"),
    ]
    wrong = next((message for bad, message in problems if bad), None)
    if wrong:
        raise ConfigError(wrong)
    writable(args.runs_dir, "--runs-dir")  # else a traceback of the first run's thread
    return args, extra


def names(runs):
    return ", ".join(f"{e} seed {s}" for e, s in runs)


def main(argv=None):
    try:
        args, extra = parse(sys.argv[1:] if argv is None else argv)
    except ConfigError as e:
        print(f"run.py: error: {e}", file=sys.stderr)
        return 2
    cores = available_cores()
    threads = args.threads or max(1, cores // args.workers)
    if args.workers * threads > cores:
        print(f"run.py: warning: {args.workers} workers x {threads} threads > {cores} cores", file=sys.stderr)
    jobs = [(e, s) for e in args.env_ids for s in args.seeds]
    name = os.path.basename(args.script)
    todo, finished_runs, failed, interrupted, not_started = [], [], [], [], []
    digest = script_digest(args.script)
    # a finished run of other code than the script's now (its summary's hash): refused, rerun or reused, as asked
    done_before = {}
    for e, s in jobs:
        if finished(path := summary_path(args.runs_dir, args.script, e, s, extra)):
            with open(path) as f:
                done_before[e, s] = json.load(f)
    changed = {job: s["script_sha256"] for job, s in done_before.items() if s.get("script_sha256") not in (None, digest)}
    if changed and not (args.rerun_changed or args.reuse_changed):
        (env_id, seed), then = next(iter(changed.items()))
        print(
            f"run.py: error: {name} changed since {len(changed)} of these runs finished ({env_id} seed {seed}: script "
            f"sha256 {then} then, {digest} now); --rerun-changed runs them again with it, --reuse-changed keeps their "
            "results (a sweep script takes them as RUN_FLAGS=--rerun-changed)",
            file=sys.stderr,
        )
        return 2
    for env_id, seed in jobs:
        if (env_id, seed) in changed and args.rerun_changed:
            supersede(args.runs_dir, args.script, env_id, seed, extra)
            print(f"{name} {env_id} seed {seed}: finished with other code, moved to runs/superseded/; runs again")
        if finished(summary_path(args.runs_dir, args.script, env_id, seed, extra)):
            finished_runs.append((env_id, seed))
            other = " (with other code: --reuse-changed)" if (env_id, seed) in changed else ""
            print(
                f"[{len(finished_runs)}/{len(jobs)}] {name} {env_id} seed {seed}: already finished, skipped{other}",
                flush=True,
            )
        else:
            todo.append((env_id, seed))
    done = len(finished_runs)

    children = Children()

    def stop(sig, frame):
        if children.stopped_by:  # a second Ctrl-C, or the alarm KILL_AFTER_S later: no more waiting
            children.stop(signal.SIGKILL)
            return
        children.stop(sig)
        signal.signal(signal.SIGALRM, stop)
        signal.alarm(KILL_AFTER_S)
        signame = signal.Signals(sig).name
        print(
            f"\nrun.py: {signame}: stopping the sweep: no new run starts, the running ones get {signame} "
            f"(SIGKILL in {KILL_AFTER_S} s, or at a second Ctrl-C)",
            file=sys.stderr,
            flush=True,
        )

    # Python runs every handler in the main thread; nohup and background jobs keep ignoring their signals
    stop_signals = [
        sig for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) if signal.getsignal(sig) is not signal.SIG_IGN
    ]
    before = {sig: signal.getsignal(sig) for sig in stop_signals + [signal.SIGALRM]}
    for sig in stop_signals:
        signal.signal(sig, stop)
    try:
        with ThreadPoolExecutor(max_workers=args.workers) as pool:
            futures = {
                pool.submit(run_one, args.script, e, s, extra, args.runs_dir, threads, args.python, children): (e, s)
                for e, s in todo
            }
            for fut in as_completed(futures):
                env_id, seed = futures[fut]
                s = fut.result()
                if s is None:
                    not_started.append((env_id, seed))
                    continue
                done += 1
                head = f"[{done}/{len(jobs)}] {name} {env_id} seed {seed}:"
                if s.get("interrupted"):
                    interrupted.append((env_id, seed))
                    print(f"{head} interrupted after {s['wall_time_s']:.1f}s; log {s['log_path']}", flush=True)
                elif s["ok"]:
                    finished_runs.append((env_id, seed))
                    print(
                        f"{head} ok {s['wall_time_s']:.1f}s {s['steps_per_s'] or float('nan'):.0f} steps/s "
                        f"return {s['final_return']:.1f}",
                        flush=True,
                    )
                else:
                    failed.append((env_id, seed))
                    why = f"exit status {s['exit_status']}" if s["exit_status"] else "no TensorBoard log found"
                    print(
                        f"{head} FAILED ({why}) after {s['wall_time_s']:.1f}s; log {s['log_path']}; its tail:\n"
                        + "".join("    " + line for line in log_tail(s["log_path"]).splitlines(True)),
                        flush=True,
                    )
    finally:
        if children.stopped_by:
            signal.alarm(0)
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if children.stopped_by:
        lines = [f"run.py: stopped by {signal.Signals(children.stopped_by).name}"]
        for what, runs in (
            ("finished", finished_runs),
            ("failed", failed),
            ("interrupted", interrupted),
            ("not started", not_started),
        ):
            if runs:
                lines.append(f"  {what} ({len(runs)}): {names(sorted(runs, key=jobs.index))}")
        again = (
            "interrupted runs continue from their last checkpoint"
            if "--save-model" in extra
            else "interrupted runs start over (--save-model --save-every K among the extra args lets them continue)"
        )
        print(
            "\n".join(lines + [f"run the same command again to resume: finished runs are skipped, {again}"]),
            file=sys.stderr,
            flush=True,
        )
        return 128 + children.stopped_by
    if failed:
        print(f"run.py: {len(failed)} of {len(jobs)} runs failed: {names(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    if code > 128:  # stopped by a signal: end by it too, so that a shell script running the sweep stops as well
        signal.signal(code - 128, signal.SIG_DFL)
        os.kill(os.getpid(), code - 128)
    sys.exit(code)
