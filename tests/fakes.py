"""Stand-ins that the tests of benchmark/ run instead of the real scripts: a fake training script that logs known
returns as the scripts log them (in a fraction of a second, no torch), the runs it writes, a wrapper that times it as
another implementation, and benchmark/ copied where a sweep's outputs stay in the test's folder."""

import glob
import json
import math
import os
import shutil
import sys
import textwrap

import numpy as np
from conftest import ROOT

from benchmark import runs

FAKE_SCRIPT = textwrap.dedent('''
    """Logs `--total-timesteps // 10` episodic returns seed*100 + i as the real scripts log; Broken-v0 fails.

    With --save-model it checkpoints (the number of episodes done) every --save-every episodes, and
    Crashy-v0 crashes halfway unless resumed; --resume continues the checkpoint's run dir with a
    purge_step, as the scripts' SummaryWriter does, and refuses a checkpoint that holds the whole run, as they do.
    Sleepy-v0 sleeps ten minutes (unless a file "awake" exists) beside
    a process of its own that ignores SIGINT and SIGTERM (as it does too if a file "stubborn" exists); both write their
    pid to pids.txt.

    Writes the events with tensorboard's own writer: importing torch would take most of the test's time.
    """
    import argparse, os, subprocess, sys, time


    def write_tb(run_dir, hparams, returns, steps, purge_step=None, extra=None):
        """The script's Args as the markdown table the scripts log, then one charts/episodic_return per episode, then
        `extra`'s scalars ({tag: [(step, value)]}, e.g. impala_vtrace.py's charts/policy_lag)."""
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        w = EventFileWriter(run_dir)
        if purge_step is not None:
            start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            w.add_event(event_pb2.Event(wall_time=time.time(), step=purge_step, session_log=start))
        text = "|param|value|\\n|-|-|\\n" + "\\n".join(f"|{k}|{v}|" for k, v in hparams.items())
        meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[text.encode()])
        value = summary_pb2.Summary.Value(tag="hyperparameters/text_summary", metadata=meta, tensor=tensor)
        w.add_event(event_pb2.Event(wall_time=time.time(), step=0, summary=summary_pb2.Summary(value=[value])))
        for step, r in zip(steps, returns):
            value = summary_pb2.Summary.Value(tag="charts/episodic_return", simple_value=float(r))
            w.add_event(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary_pb2.Summary(value=[value])))
        for tag, points in (extra or {}).items():
            for step, v in points:
                value = summary_pb2.Summary.Value(tag=tag, simple_value=float(v))
                w.add_event(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary_pb2.Summary(value=[value])))
        value = summary_pb2.Summary.Value(tag="charts/SPS", simple_value=123.0)
        w.add_event(event_pb2.Event(wall_time=time.time(), step=steps[-1], summary=summary_pb2.Summary(value=[value])))
        w.close()


    if __name__ == "__main__":
        p = argparse.ArgumentParser()
        for flag in ("--env-id", "--exp-name", "--resume"):
            p.add_argument(flag)
        for flag in ("--seed", "--torch-threads", "--total-timesteps", "--save-every"):
            p.add_argument(flag, type=int)
        p.add_argument("--save-model", action="store_true")
        a, _ = p.parse_known_args()  # a sweep's other flags (a study's protocol) are not read
        if a.resume:
            with open("resumed.txt", "a") as f:
                f.write(a.resume + "\\n")
        with open("calls.txt", "a") as f:
            f.write(f"{a.env_id} {a.seed} torch_threads={a.torch_threads} omp={os.environ['OMP_NUM_THREADS']}\\n")
        if a.env_id == "Sleepy-v0" and not os.path.exists("awake"):
            ignore = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                      "signal.signal(signal.SIGTERM, signal.SIG_IGN)")
            subprocess.Popen([sys.executable, "-c", ignore + "; import os, time; f = open('pids.txt', 'a'); "
                              "print(os.getpid(), file=f); f.close(); time.sleep(600)"])
            if os.path.exists("stubborn"):
                exec(ignore)
            with open("pids.txt", "a") as f:
                print(os.getpid(), file=f)
            time.sleep(600)
        if a.env_id == "Broken-v0":
            print("step 0 ...")
            print("boom: intentional failure", file=sys.stderr)
            sys.exit(3)
        n = a.total_timesteps // 10
        returns, steps = [a.seed * 100 + i for i in range(n)], [10 * (i + 1) for i in range(n)]
        run_dir, done = f"runs/{a.env_id}__{a.exp_name}__{a.seed}__{int(time.time())}", 0
        if a.resume:
            with open(a.resume) as f:
                run_dir, done = os.path.dirname(a.resume), int(f.read())
            if done >= n:  # as the scripts refuse a checkpoint that holds the whole run
                sys.exit(f"fake.py: error: --total-timesteps {a.total_timesteps} leaves no iteration to run (one is 10 "
                         f"steps; the checkpoint is at iteration {done})")
        end = n // 2 if a.env_id == "Crashy-v0" and not a.resume else n
        hparams = {"exp_name": a.exp_name, "seed": a.seed, "env_id": a.env_id, "total_timesteps": a.total_timesteps}
        if a.env_id.startswith("Humanoid"):  # a row after the Args, as the MuJoCo scripts log the installed MuJoCo
            hparams["mujoco"] = "2.3.3"
        write_tb(run_dir, hparams, returns[done:end], steps[done:end], purge_step=steps[done - 1] + 1 if a.resume else None)
        if a.save_model:
            with open(f"{run_dir}/checkpoint.pt", "w") as f:
                f.write(str(end // a.save_every * a.save_every))  # the last checkpoint before the end
        if end < n:
            sys.exit("crashed halfway")
''')


def calls(path="calls.txt"):
    with open(path) as f:
        return f.read().splitlines()


def runner_summary(env_id, seed, extra):
    """The runner's summary of the fake script's run of (env, seed) with the extra args."""
    with open(runs.summary_path("runs", "fake.py", env_id, seed, extra)) as f:
        return json.load(f)


def write_run(write_tb, env_id, exp_name, seed, returns, total_timesteps, last_step=None, stamp=1):
    """A run as the scripts write it: runs/<env>__<exp name>__<seed>__<time>/ with hyperparameters and returns."""
    steps = np.linspace(1, last_step or total_timesteps, len(returns)).astype(int)
    write_tb(
        f"runs/{env_id}__{exp_name}__{seed}__{stamp}",
        {"exp_name": exp_name, "seed": seed, "env_id": env_id, "total_timesteps": total_timesteps},
        returns,
        steps,
    )


WRAPPER = textwrap.dedent('''
    """Appends "<side> <seed> OMP_NUM_THREADS" to LOG, sleeps SLEEP seconds, then runs the fake script as itself."""
    import os, runpy, sys, time
    with open(LOG, "a") as f:
        f.write(f"{SIDE} {sys.argv[sys.argv.index('--seed') + 1]} {os.environ['OMP_NUM_THREADS']}\\n")
    time.sleep(SLEEP)
    sys.argv[0] = FAKE
    runpy.run_path(FAKE, run_name="__main__")
''')


def wrap(path, fake, log, side, sleep):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"LOG, SIDE, SLEEP, FAKE = {str(log)!r}, {side!r}, {sleep}, {fake!r}\n" + WRAPPER)


def vs_argv(tmp_path, steps):
    """vs_cleanrl.py's command line on the stand-in checkout in `tmp_path`: ppo.py, seeds 1 and 2, `steps` steps."""
    return ["--cleanrl-dir", str(tmp_path / "checkout"), "--scripts", "ppo.py", "--seeds", "1", "2", "--steps", str(steps)]


def sweep_copy(tmp_path):
    """benchmark/'s code (its folders and modules, not its results) copied into tmp_path/benchmark: a sweep run from
    there takes tmp_path for the repository (the fake scripts put there run as ours) and writes under tmp_path alone,
    never into benchmark/results/. Returns the copy and the environment to run it in, this Python first on the PATH."""
    shutil.copytree(
        os.path.join(ROOT, "benchmark"), tmp_path / "benchmark", ignore=shutil.ignore_patterns("results", "__pycache__")
    )
    return tmp_path / "benchmark", {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}


def tree(folder):
    """Every file under `folder`, relative to it (a copy's, to see that a refused sweep wrote nothing there)."""
    return sorted(os.path.relpath(os.path.join(r, f), folder) for r, _, fs in os.walk(folder) for f in fs)


# ---- two groups of runs for compare.py and summary.py --------------------------------------------------------------

NOISY_STEPS = np.arange(100, 10_001, 100)  # 100 points a tag, 10 per window of the 10k-step axis
NOISY_TAGS = ["charts/episodic_return", "losses/value_loss"]


def write_noisy_run(path, seed, shift=0.0, tags=NOISY_TAGS, steps=NOISY_STEPS, hparams=None):
    """One seed's run: each tag logs noise around a slow ramp, plus `shift` after 80% of the steps; `hparams` as the
    scripts log their Args (a markdown table)."""
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(seed)
    w = SummaryWriter(str(path))
    if hparams:
        w.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in hparams.items()))
    for tag in tags:
        for s in steps:
            w.add_scalar(tag, s / 1000 + rng.normal(0, 1) + (shift if s > 8000 else 0.0), int(s))
    w.close()
    return str(path)


# ---- fake runs with known scores and times (solved.py's and wallclock.py's tests) ------------------------------------

PONG = "PongNoFrameskip-v4"
# 300 games, game i at step 1,000 (i + 1)
STEPS = 1000 * np.arange(1, 301)
RISE_AT_150 = [-21.0] * 150 + [21.0] * 150  # the last 100 games' mean first >= 18 at game 242 (93 of them 21), 20 at 247
RISE_AT_200 = [-21.0] * 200 + [21.0] * 100  # 18 at game 292, 20 at game 297


def retime(run_dir, start, base_step=0, seconds_per_step=0.036, stop=(math.inf, 0.0)):
    """The part write_tb has just written (the run's one event file not yet retimed) as if its process started at
    `start` and logged step s at start + (s - base_step) x seconds_per_step (0.036: 100k steps an hour); with
    stop=(STEP, SECONDS), as if stopped that long after logging STEP (every later step logged SECONDS later)."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    (path,) = [p for p in glob.glob(f"{run_dir}/events.out.tfevents.*") if not p.endswith(".retimed")]
    events = [event_pb2.Event.FromString(record) for record in RawEventFileLoader(path).Load()]
    with open(f"{run_dir}/events.out.tfevents.{int(start)}.retimed", "wb") as f:  # named, as TensorBoard orders, by start
        for event in events:
            event.wall_time = start + max(event.step - base_step, 0) * seconds_per_step + stop[1] * (event.step > stop[0])
            RecordWriter(f).write(event.SerializeToString())
    os.remove(path)


T0, HOUR = 1_000_000_000.0, 3600.0


def last_100_mean(returns):
    """The mean of the last 100 games at each game from the 100th on, by a sliding window, not solved.py's way."""
    return np.convolve(returns, np.ones(100), mode="valid") / 100
