"""A run of a training script, as the tools read it: its name, its folder and summary under runs/, its event files,
its final return, and the record of where it ran (machine, commit, the script's own bytes). The scripts write their runs
themselves (they import nothing of the project): what this module reads back, tests/test_contracts.py holds to their
text."""

import glob
import hashlib
import json
import logging
import math
import os
import platform
import re
import shlex
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

from benchmark.cli import ConfigError
from benchmark.reference import number

# the repository: its top-level .py files are the training scripts
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmark", "results")  # the published results: every number quoted in the docs
# The training scripts: every .py file at the repository's top level. Each list of them written elsewhere (pyproject's
# py-modules, the tools' tables keyed by script) is held to this one by tests/test_contracts.py.
SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "*.py")))
# A run's directory name under runs/, as every script writes it (f"{args.env_id}__{args.exp_name}__{args.seed}__
# {int(time.time())}", then -2, -3, ... for a second run in the same second), written and read here alone: run_name()
# and run_name_parts(). tests/test_contracts.py holds each script's text to it.
RUN_NAME = "{env_id}__{exp_name}__{seed}__{time}"
RETURN_TAG = "charts/episodic_return"
FINAL_WINDOW = 100  # the published numbers average the last 100 logged episodic returns of each seed
# seconds between two logged events of a run past which its process was stopped, not training: the scripts log at every
# iteration or learner update (the longest gap while training in the Pong runs' logs here: 24 s, IMPALA's first update)
PAUSE = 120.0
# what every script says when --resume gets a checkpoint that already holds the whole run
WHOLE_RUN_CHECKPOINT = re.compile(r"leaves no (iteration|update) to run .*; the checkpoint is at ")


# ---- the scripts ---------------------------------------------------------------------------------------------


def launch(script, python=sys.executable):
    """The command that starts `script` as its docstring's "Run:" line does: python alone, or, where that line starts
    with torchrun (a learner and actors in processes of their own), torch's launcher with its processes."""
    with open(script if os.path.isabs(script) else os.path.join(ROOT, script)) as f:
        nproc = re.search(r"^Run: +torchrun --nproc_per_node=(\d+) ", f.read(), re.M)
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc[1]}"] if nproc else [python]


# ---- names -----------------------------------------------------------------------------------------------------


def args_hash(extra):
    return hashlib.sha1(json.dumps(extra).encode()).hexdigest()[:8]


def exp_name_for(script, extra):
    # no "__" inside: it separates the parts of the run name
    return f"{os.path.splitext(os.path.basename(script))[0]}-{args_hash(extra)}"


def script_of(exp_name):
    """The script an exp name is of: exp_name_for()'s "<script stem>-<args hash>", or a script's default (its stem)."""
    return exp_name.split("-")[0] + ".py"


def run_name(env_id, exp_name, seed, time=""):
    """RUN_NAME filled in; without `time`, the start that every run of (env, exp name, seed) has."""
    return RUN_NAME.format(env_id=env_id, exp_name=exp_name, seed=seed, time=time)


def run_name_parts(name):
    """{"env_id", "exp_name", "seed", "time"} of a run's name, or None for a name of another form. The env id is all
    before the last three parts: a path relative to runs/ keeps the folders above the run ("ALE/Pong-v5"'s run lies in
    runs/ALE/)."""
    parts = name.rsplit("__", 3)
    return dict(zip(("env_id", "exp_name", "seed", "time"), parts)) if len(parts) == 4 else None


def summary_path(runs_dir, script, env_id, seed, extra):
    stem = os.path.splitext(os.path.basename(script))[0]
    return os.path.join(runs_dir, "summaries", f"{stem}__{env_id.replace('/', '-')}__{seed}__{args_hash(extra)}.json")


def run_dirs(runs_dir, env_id, exp_name, seed):
    return set(glob.glob(os.path.join(runs_dir, glob.escape(run_name(env_id, exp_name, seed)) + "*")))


def steps_str(n):
    if n is None:
        return "?"
    n = int(n)
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)


# ---- reading a run ---------------------------------------------------------------------------------------------


def final_return(returns, window=FINAL_WINDOW):
    """The published definition of one seed's result: the mean of its last `window` episodic returns."""
    if len(returns) == 0:
        return float("nan")
    return float(np.mean(returns[-window:]))


def read_run(run_dir, tag=RETURN_TAG):
    """A TensorBoard run: {"steps", "returns" (in logging order), "wall_times" (when each was logged), "hparams" (the
    script's Args), "last_step", "sps" (the last charts/SPS: the training loop's steps/s since the script started, or
    resumed)}. Of a resumed run, what TensorBoard keeps: a resume's SessionLog START at its purge step drops every
    earlier event of that step or later (the steps it redoes), so each step is logged once."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0, "tensors": 0})
    # that drop is how a resume is meant to read; TensorBoard warns of each one ("out of order event.step likely caused
    # by a TensorFlow restart"), a line per resumed run and read, saying nothing is wrong: not shown
    tb_log = logging.getLogger("tensorboard")
    level = tb_log.level
    tb_log.setLevel(logging.ERROR)
    try:
        acc.Reload()
    finally:
        tb_log.setLevel(level)
    tags = acc.Tags()
    events = acc.Scalars(tag) if tag in tags["scalars"] else []
    last_step = max((acc.Scalars(t)[-1].step for t in tags["scalars"] if acc.Scalars(t)), default=0)
    sps = acc.Scalars("charts/SPS")[-1].value if "charts/SPS" in tags["scalars"] else None
    hparams = {}
    if "hyperparameters/text_summary" in tags.get("tensors", []):
        # the scripts log their Args as a markdown table "|param|value|"
        text = acc.Tensors("hyperparameters/text_summary")[0].tensor_proto.string_val[0].decode()
        for line in text.splitlines()[2:]:
            cells = line.strip().strip("|").split("|")
            if len(cells) == 2:
                hparams[cells[0]] = cells[1]
    return {
        "steps": [e.step for e in events],
        "returns": [e.value for e in events],
        "wall_times": [e.wall_time for e in events],
        "hparams": hparams,
        "last_step": last_step,
        "sps": sps,
    }


def cut_short(run_dir, tool, used="used"):
    """[(event file, the last step it logged)] of the run's TensorBoard files that end inside a record (a process killed
    while writing one, a copy cut short), each named in one warning line: TensorBoard reads the records before the cut
    and says nothing."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    cut = []
    for name in sorted(os.listdir(run_dir)):
        if name.startswith("events.out.tfevents"):
            path, end = os.path.join(run_dir, name), 0
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                while end + 8 <= size:  # a record: its length in 8 bytes, a 4-byte checksum, the data, its checksum
                    f.seek(end)
                    end += 16 + struct.unpack("<Q", f.read(8))[0]
            if end != size:
                cut.append((path, max((event.step for event in EventFileLoader(path).Load()), default=0)))
                print(
                    f"{tool}: warning: {path} is cut short (a process killed while writing it, or a copy cut short): its "
                    f"records up to step {cut[-1][1]} are {used}, the rest is lost",
                    file=sys.stderr,
                )
    return cut


def part_spans(run_dir):
    """[(first, last, last kept wall time)] of each stretch a run trained without a stop, in time order: its event files
    (a file per start and per resume of its process; one with no event left out), each cut where two consecutive events
    are more than PAUSE seconds apart (its process stopped and went on: SIGSTOP, Ctrl-Z, a suspended machine). Its last
    kept event is its last one that TensorBoard keeps: a resume starts its file with a SessionLog START at its
    checkpoint's step, and drops every earlier file's event of that step or later (the steps it redoes); where it keeps
    none, the stretch's first."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto.event_pb2 import SessionLog

    files = []
    for name in os.listdir(run_dir):
        if name.startswith("events.out.tfevents"):
            events = EventFileLoader(os.path.join(run_dir, name)).Load()
            starts = [
                (e.wall_time, e.step, e.HasField("session_log") and e.session_log.status == SessionLog.START) for e in events
            ]
            if starts:
                files.append(sorted(starts))
    files.sort()
    spans = []
    for i, events in enumerate(files):
        cut = min((step for later in files[i + 1 :] for _, step, purge in later if purge), default=math.inf)
        first, kept = events[0][0], None
        for j, (t, step, _) in enumerate(events):
            kept = t if step < cut else kept
            if j + 1 == len(events) or events[j + 1][0] - t > PAUSE:  # the file's end, or a stop: the stretch ends
                spans.append((first, t, first if kept is None else kept))
                if j + 1 < len(events):
                    first, kept = events[j + 1][0], None
    return sorted(spans)


def run_hours(run_dir, spans=None):
    """The hours a run's processes ran: each part's span (part_spans: a file per start and per resume, cut at pauses)
    summed, so the time between an interruption and its resume, and a pause, are left out (the steps redone after the
    checkpoint are not). `spans`: part_spans(run_dir), where already read."""
    return sum(last - first for first, last, _ in (part_spans(run_dir) if spans is None else spans)) / 3600


def mujoco_line(groups):
    """A report's line on the MuJoCo its runs ran on, [] when none did. groups: [(label or None, [the version each run
    logged])], from the MuJoCo scripts' hyperparameters row "mujoco" (None: a run without it; "none": not installed)."""
    used = [(label, sorted({v for v in versions if v not in (None, "none")})) for label, versions in groups]
    if not any(v for _, v in used):
        return []
    text = "; ".join((f"{label}: " if label else "") + (", ".join(v) or "not logged") for label, v in used)
    if any(int(x.split(".")[0]) >= 4 for _, v in used for x in v):  # tests/test_mujoco_physics.py
        text += (
            " (MuJoCo 4 runs Humanoid, HumanoidStandup, Ant and Hopper on other physics than the published v4 "
            "numbers' 2.3.3; that physics: bash scripts/install.sh mujoco-ref)"
        )
    return [f"- MuJoCo of the runs: {text}"]


# ---- the runner's summaries, and a folder of runs --------------------------------------------------------------


def finished(path):
    try:
        with open(path) as f:
            return json.load(f).get("ok") is True
    except (OSError, ValueError):
        return False


def load_summaries(runs_dir):
    """The runner's summaries, keyed by the run's TensorBoard dir relative to runs_dir."""
    out = {}
    sdir = os.path.join(runs_dir, "summaries")
    for name in sorted(os.listdir(sdir)) if os.path.isdir(sdir) else []:
        if name.endswith(".json"):
            path = os.path.join(sdir, name)
            try:
                with open(path) as f:
                    s = json.load(f)
            except (OSError, ValueError):
                s = None
            if not (isinstance(s, dict) and all(k in s for k in ("script", "args", "machine", "ok"))):
                raise ConfigError(
                    f"{path} is not a readable runner summary; delete it (the runner, benchmark/tools/run.py, then "
                    "runs that run again) or move it out of the way"
                )
            if s.get("tb_dir"):
                out[os.path.normpath(s["tb_dir"])] = s
    return out


def find_run_dirs(runs_dir):
    found = []
    for root, dirs, files in os.walk(runs_dir):
        dirs[:] = sorted(d for d in dirs if d not in ("summaries", "logs", "superseded"))
        if any(f.startswith("events.out.tfevents") for f in files):
            found.append(root)
    return found


def collect(runs_dir, tag=RETURN_TAG, unfinished=False, tool="report.py"):
    """One record per (exp name, env, seed): the runner's finished run, else the latest complete one; with `unfinished`,
    a run stopped short of its budget counts too (one in progress, interrupted, or failed). `tool` names the command in
    the lines it prints."""
    summaries = load_summaries(runs_dir)
    best = {}
    for d in find_run_dirs(runs_dir):
        rel = os.path.normpath(os.path.relpath(d, runs_dir))
        summary = summaries.get(rel)
        if summary is not None and not summary.get("ok") and not unfinished:
            continue  # a failed run of the runner
        data = read_run(d, tag)
        hp = data["hparams"]
        named = run_name_parts(rel) or {"env_id": rel, "exp_name": os.path.basename(d), "seed": 0}
        env_id = hp.get("env_id") or named["env_id"]
        exp_name = hp.get("exp_name") or named["exp_name"]
        seed = int(hp.get("seed") or named["seed"])
        budget = number(hp.get("total_timesteps"))
        budget = int(budget) if budget is not None else None
        if not data["returns"]:
            print(f"{tool}: {rel}: no {tag} logged, left out", file=sys.stderr)
            continue
        if summary is None and budget and data["last_step"] < 0.95 * budget and not unfinished:
            print(f"{tool}: {rel}: stopped at step {data['last_step']} of {budget}, left out", file=sys.stderr)
            continue
        script = summary["script"] if summary else script_of(exp_name)
        parts = part_spans(d)
        rec = {
            "cut": cut_short(d, tool),
            "script": script,
            "env_id": env_id,
            "exp_name": exp_name,
            "seed": seed,
            "budget": budget,
            "last_step": data["last_step"],
            "episodes": len(data["returns"]),
            "final_return": final_return(data["returns"]),
            "steps": data["steps"],
            "returns": data["returns"],
            "wall_times": data["wall_times"],
            "parts": parts,
            "hours": round(run_hours(d, parts), 2),
            "threads": summary.get("threads") if summary else None,
            "run_dir": d,
            "git_commit": summary.get("git_commit") if summary else None,
            "script_sha256": summary.get("script_sha256") if summary else None,
            "script_git": summary.get("script_git") if summary else None,
            "extra_args": " ".join(summary["args"]) if summary else "",
            "from_runner": summary is not None,
            # every part's machine from the runner's log (a run stopped at a budget has no summary), else the summary's
            "machine": logged_machines(runs_dir, env_id, exp_name, seed)
            or (machine_str(summary["machine"]) if summary else None),
            "mujoco": hp.get("mujoco"),
            # the run name ends in the start time of the run
            "started": int(named["time"]) if named.get("time", "").isdigit() else os.path.getmtime(d),
        }
        key = (exp_name, env_id, seed)
        old = best.get(key)
        if old is None or (rec["from_runner"], rec["started"]) > (old["from_runner"], old["started"]):
            best[key] = rec
    return sorted(best.values(), key=lambda r: (r["env_id"], r["script"], r["exp_name"], r["seed"]))


# ---- where a run ran -------------------------------------------------------------------------------------------


def available_cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def machine_info():
    """Cores, CPU model and GPU (if nvidia-smi finds one), without importing torch."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = None
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
            )
            gpu = ", ".join(line.strip() for line in out.stdout.splitlines() if line.strip()) or None
        except (OSError, subprocess.SubprocessError):
            pass
    return {
        "cores": available_cores(),
        "cpu": cpu,
        "gpu": gpu,
        "hostname": platform.node(),
        "python": platform.python_version(),
    }


def logged_machines(runs_dir, env_id, exp_name, seed):
    """The machines the parts of a runner's run (its start, then each resume) ran on, as its log's header lines name
    them, "; "-joined; None without a log (a run the runner did not start) or a machine in it."""
    stem, _, digest = exp_name.rpartition("-")
    path = os.path.join(runs_dir, "logs", f"{stem}__{env_id.replace('/', '-')}__{seed}__{digest}.log")
    try:
        with open(path, errors="replace") as f:
            found = {m[1] for line in f if (m := re.match(r"# \S+ commit .* machine: (.+)$", line.rstrip("\n")))}
    except OSError:
        return None
    return "; ".join(sorted(found)) or None


def machine_str(m):
    return f"{m['cores']} cores, {m['cpu']}" + (f", GPU {m['gpu']}" if m.get("gpu") else ", no GPU")


def report_head(title, tool, argv, records=None):
    """The first lines of a report's markdown: its title with the time (UTC), the command that wrote it (`python -m tool
    argv`) and, given the runs it read (read_run's records), their machines beside this one."""
    lines = [
        f"# {title} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"- command: `python -m {tool} {shlex.join(argv)}`",
    ]
    if records is not None:
        machines = sorted({r["machine"] for r in records if r["machine"]})
        lines.append(
            f"- machine{'s' * (len(machines) > 1)} of the runs: {'; '.join(machines) or 'unknown'} "
            f"(of this report: {machine_str(machine_info())})"
        )
    return lines


def git_commit(path):
    """The commit of the repository holding `path`, with '+dirty' when it has uncommitted changes."""
    cwd = os.path.dirname(os.path.abspath(path))
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=20)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True, timeout=20
        ).stdout.strip()
        return rev.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def script_digest(path):
    """The first 12 hex digits of the sha256 of the script's bytes: the code a run ran, committed or not."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:12]


def script_git_state(path):
    """'committed', 'modified' or 'untracked' (as git sees the script itself), None outside a git checkout."""
    cwd, name = os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--", name], cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return {"": "committed", "??": "untracked"}.get(out.stdout[:2].strip(), "modified")
