"""Every script on CUDA in one prepared command, its speed beside CleanRL's on the same card, and its host-device syncs.
Made for the device machine the `device` tool lends (no network, 15 minutes); runs anywhere.

Run:   python3 -m benchmark.gpu.gpu_check --install .gpu/ours .gpu/cleanrl --cleanrl-dir .gpu/cleanrl-src --out $OUT
Against LeanRL too (benchmark/README.md, "On a lent GPU"): --scripts ppo_continuous_action.py ppo_atari_envpool.py, with
.gpu/envpool and .gpu/leanrl installed too and --leanrl-dir .gpu/leanrl-src.
CPU dry run (the same runs and report, small): python -m benchmark.gpu.gpu_check --no-cuda --tiny --scripts ppo.py --out DIR

1. Correctness, one process per script (torchrun for the two distributed ones), --workers at a time, on TINY settings:
   two iterations with --save-model --save-every 1, then --resume to three, then the checkpoint evaluated on the CPU
   (what --eval-checkpoint runs) and on the device. Checked:
   - every first minibatch's max |ratio - 1| (nothing has changed since the rollout) is below RATIO_TOL;
   - the CPU's first update agrees with the device's: the first update()'s weights and batch, kept, go through
     update() once more on copies as one minibatch, on the CPU and on the device, with TF32 off for cuDNN's
     convolutions (on by default: 10-bit inputs put a value 5e-4 of its size off, and a loss of differences of values,
     PAAC's, further still); the losses (computed before the step) must agree within TWIN_RTOL relative plus TWIN_ATOL
     (a policy loss of normalised advantages is ~0);
   - --bf16 (the CNN scripts): it trains, stays on policy, and its first losses are within BF16_RTOL + BF16_ATOL of
     fp32's (tests/precision.py says why those numbers);
   - ppo_atari_multigpu.py under torchrun --nproc_per_node=1 (NCCL on CUDA), and 2 when two GPUs are visible;
     impala_vtrace_distributed.py with a learner and one actor rank (gloo by design: its actors are CPU processes).
   During the first training torch.cuda.set_sync_debug_mode("warn") is on, and the syncs between consecutive calls of
   Agent.get_action_and_value are counted: gradients off, a rollout step; on, a minibatch (IMPALA and PAAC: a learner
   batch). The figure is the median over the gaps inside a phase: a call of the same phase follows, and update() has
   not returned in between (a minibatch, then the next). A gap that closes its phase (GAE, the end of the update:
   statistics, logging, a checkpoint) shows in the max, and in the median only where every gap closes one (one
   learner batch an update(): PAAC, IMPALA).
2. Speed, one run at a time: each script at its defaults for SPEED_STEPS (x --speed-scale), seed 1; ours with --bf16
   where it has the flag; CleanRL's script of the same name with the same env, steps and seed, under its own pins
   (the site installed from a folder named cleanrl; CleanRL's cuda flag is on by default). steps/s: the last
   charts/SPS each run logged; where ours' time goes: its env / inference / update timers. No run starts after
   --deadline seconds.
   For the scripts LeanRL has a *_torchcompile.py of (LEANRL), with --leanrl-dir, four more runs at the same env,
   steps and seed: ours with --compile (where the script has the flag; else the row says it has none), LeanRL's with
   --compile --cudagraphs, and, last (after every script's first runs, so --deadline cuts them first), LeanRL's
   eager and ours with --bf16. LeanRL's scripts log by wandb: they run with benchmark/peers/shims first on their path,
   whose wandb.py prints each wandb.log; their steps/s is their own "speed", timed from the start of their 3rd
   iteration (measure_burnin) and logged at every 10th, so they need 10 iterations (SPEED_STEPS is sized so). Beside
   each run's logged steps/s, the same window for ours and CleanRL's (their charts/SPS series: iterations 3 to the
   last), and the first update's losses: ours' history, CleanRL's first losses/* (both the last minibatch's); LeanRL
   logs none. CleanRL's and LeanRL's envpool scripts are written for envpool 0.8's gym API, which no Python 3.12
   wheel has: they run behind benchmark/peers/shims/old_envpool_api.py, which gives envpool 1.2 that API.
3. Writes OUT/gpu_check.md (rewritten after every result, so a run cut short keeps what it measured), gpu_check.json
   (the raw results) and gpu_check.log (each process's command and the end of its output).
--no-correctness: the speed runs alone.
--install DIR...: pip installs DIR/*.whl (--no-index) into --site/<DIR's name>, replacing it, and copies DIR/lib there
(shared libraries the device lacks: gpu_wheels.sh says which); ours' processes see every folder of --site but cleanrl
and leanrl, CleanRL's see cleanrl first, LeanRL's leanrl, then cleanrl (it is a CleanRL fork: gymnasium 0.29); both load
libraries from each site's lib first. --install-only stops there (a call that carries one bundle).
Exit status: 0 when every check that ran passed, 1 when one failed, 2 on bad input (one line).
"""

import argparse
import copy
import dataclasses
import faulthandler
import glob
import importlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

from benchmark.cleanrl import NEEDS_ALE_IMPORT, checkout_commit, command, reference_path
from benchmark.processes import Children, last_line
from benchmark.runs import ROOT, git_commit, machine_info, read_run

NAME = "gpu_check.py"

# the correctness runs' settings (a small rollout) and the steps of one iteration under them
PPO_TINY = "--num-envs 2 --num-steps 32 --num-minibatches 2 --update-epochs 2"
CNN_TINY = "--num-envs 2 --num-steps 32 --num-minibatches 2 --update-epochs 1"
MICRORTS_TINY = "--num-envs 2 --num-steps 16 --num-minibatches 2 --update-epochs 2 --max-steps 20"
TINY = {
    "ppo.py": (PPO_TINY, 64),
    "ppo_shared.py": (PPO_TINY, 64),
    "ppo_atari.py": (CNN_TINY, 64),
    "ppo_atari_lstm.py": (CNN_TINY, 64),
    "ppo_atari_envpool.py": (CNN_TINY, 64),
    "ppo_atari_multigpu.py": (CNN_TINY, 64),
    "ppo_continuous_action.py": (PPO_TINY, 64),
    "trpo_continuous_action.py": (PPO_TINY, 64),
    "ppo_procgen.py": ("--num-envs 2 --num-steps 16 --num-minibatches 2 --update-epochs 1", 32),
    "ppo_multidiscrete.py": (MICRORTS_TINY, 32),
    "ppo_multidiscrete_mask.py": (MICRORTS_TINY, 32),
    "a2c_paac.py": ("--num-envs 2 --num-workers 2 --num-steps 5", 10),
    # one actor: which actor's unrolls make the first batch is a race, and --bf16's first losses are compared
    "impala_vtrace.py": ("--num-actors 1 --batch-size 4 --unroll-length 10", 40),
    "impala_vtrace_distributed.py": ("--batch-size 4 --unroll-length 10", 40),
}
# the speed runs' steps at each script's defaults: whole iterations, ~10 s each on an H100 by a guess from CPU timings
# (no GPU figure existed when these were set); --speed-scale stretches them all. The two of LEANRL: 10 of LeanRL's
# iterations (batches of 2048 and 1024 at its defaults), the fewest after which it logs its speed
SPEED_STEPS = {
    "ppo.py": 16_384,
    "ppo_shared.py": 16_384,
    "ppo_atari.py": 8_192,
    "ppo_atari_lstm.py": 8_192,
    "ppo_atari_envpool.py": 10_240,
    "ppo_atari_multigpu.py": 8_192,
    "ppo_continuous_action.py": 20_480,
    "trpo_continuous_action.py": 10_240,
    "ppo_procgen.py": 49_152,
    "ppo_multidiscrete.py": 8_192,
    "ppo_multidiscrete_mask.py": 8_192,
    "a2c_paac.py": 16_000,
    "impala_vtrace.py": 6_400,
    "impala_vtrace_distributed.py": 6_400,
}
CORE = ("torch", "gymnasium", "tyro", "tensorboard")
ATARI = ("ale_py", "cv2")
NEEDS = {
    "ppo_atari.py": ATARI,
    "ppo_atari_lstm.py": ATARI,
    "ppo_atari_multigpu.py": ATARI,
    "a2c_paac.py": ATARI,
    "impala_vtrace.py": ATARI,
    "impala_vtrace_distributed.py": ATARI,
    "ppo_atari_envpool.py": ("envpool", "cv2"),
    "ppo_continuous_action.py": ("mujoco",),
    "trpo_continuous_action.py": ("mujoco",),
    "ppo_procgen.py": ("procgen",),
    "ppo_multidiscrete.py": ("gym_microrts020", "jpype"),
    "ppo_multidiscrete_mask.py": ("gym_microrts020", "jpype"),
}
CLEANRL_NEEDS = {
    "ppo.py": ("torch", "gymnasium", "tyro"),
    "ppo_atari.py": ("torch", "gymnasium", "tyro", *ATARI),
    "ppo_atari_envpool.py": ("torch", "gym", "envpool", "tyro"),
    "ppo_continuous_action.py": ("torch", "gymnasium", "tyro", "mujoco"),
}
# LeanRL's torch.compile/cudagraphs rewrites of CleanRL's scripts (github.com/pytorch-labs/LeanRL, leanrl/)
LEANRL = {
    "ppo_continuous_action.py": "ppo_continuous_action_torchcompile.py",
    "ppo_atari_envpool.py": "ppo_atari_envpool_torchcompile.py",
}
LEANRL_NEEDS = {
    "ppo_continuous_action.py": ("torch", "tensordict", "gymnasium", "tyro", "tqdm", "mujoco"),
    "ppo_atari_envpool.py": ("torch", "tensordict", "gym", "envpool", "tyro", "tqdm"),
}
LEANRL_FAST = ["--compile", "--cudagraphs"]
OLD_ENVPOOL_API = {"ppo_atari_envpool.py"}  # the peers' script is written for envpool 0.8's gym API
SHIMS = os.path.join(ROOT, "benchmark", "peers", "shims")
BURN_IN = 2  # iterations the window steps/s leaves out, as LeanRL's measure_burnin=3 does (it times from the 3rd)
WANDB = "gpu_check.wandb "  # peer_shims/wandb.py's prefix
TORCHRUN = {"ppo_atari_multigpu.py": (1, 1), "impala_vtrace_distributed.py": (2, 3)}  # processes: correctness, speed
NO_TWIN = {
    "ppo_atari_multigpu.py": "its update all-reduces over the ranks; ppo_atari.py's is the same",
    "trpo_continuous_action.py": "its losses follow a step whose Fisher sample the device's generator draws",
}
ATARI_GOAL = ("ppo_atari.py", "ppo_atari_envpool.py")  # the goal: --bf16 at 1.3x CleanRL's steps/s
RATIO_TOL, TWIN_RTOL, TWIN_ATOL = 1e-5, 1e-4, 1e-5
BF16_RTOL, BF16_ATOL = 2e-2, 2e-3
LOSSES = ("policy_loss", "value_loss", "entropy")
CHILD_TIMEOUT_S = 300  # a process still running after this dumps its stacks and exits (a hung collective, say)
SYNC = "synchronizing CUDA operation"
PROBE = (
    "import importlib, json, sys\nbad = {}\nfor m in sys.argv[1:]:\n    try:\n        importlib.import_module(m)\n"
    "    except Exception as e:\n        bad[m] = f'{type(e).__name__}: {e}'.splitlines()[0]\nprint(json.dumps(bad))"
)


class ConfigError(ValueError):
    """Bad input, found before any run; main prints it as one line."""


class Stopped(Exception):
    """SIGINT or SIGTERM while the check runs."""


# ---- in a child process: one per script and launch (under torchrun: every rank) ------------------------------------


def one_line(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"


def tree(x, fn):
    """fn applied to every tensor in a batch (dicts, tuples and lists of tensors: the LSTM's batch holds its state)."""
    if isinstance(x, dict):
        return {k: tree(v, fn) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(tree(v, fn) for v in x)
    return fn(x)


def train(mod, flags):
    """What the script's __main__ does with `flags`: tyro's Args, the flag names given (for --resume), train()."""
    import tyro

    given = {f[2:].split("=")[0].replace("-", "_").removeprefix("no_") for f in flags if f.startswith("--")}
    args = tyro.cli(mod.Args, args=flags)
    start = time.perf_counter()
    history = mod.train(args, given)
    return args, history, time.perf_counter() - start


def summary(history):
    first = history["losses"][0]
    return {
        "global_step": int(history["global_step"]),
        "checkpoint": history.get("checkpoint"),
        "ratio": max((f["ratio_max_dev"] for f in history.get("first_minibatch", [])), default=None),
        "losses": {k: float(first[k]) for k in LOSSES},
        "seconds": {k: float(v) for k, v in history["seconds"].items()},
    }


class Probe:
    """During one training: the syncs between consecutive Agent.get_action_and_value calls, counted from the warnings
    of torch.cuda.set_sync_debug_mode("warn") (`syncs`), and the first update()'s inputs, kept (`keep`)."""

    def __init__(self, mod, syncs, keep):
        self.mod, self.syncs, self.keep = mod, syncs, keep
        self.calls, self.first, self.seen, self.count, self.returns = [], None, 0, 0, set()

    def counted(self):
        for w in self.caught[self.seen :]:
            self.count += SYNC in str(w.message)
        self.seen = len(self.caught)
        return self.count

    def __enter__(self):
        import torch

        probe, self.real_call, self.real_update = self, self.mod.Agent.get_action_and_value, self.mod.update

        def call(agent, *a, **k):
            probe.calls.append((torch.is_grad_enabled(), probe.counted()))
            return probe.real_call(agent, *a, **k)

        def update(agent, optimizer, b, args, *rest):
            if probe.keep and probe.first is None:
                probe.first = (
                    copy.deepcopy(agent),
                    type(optimizer),
                    dict(optimizer.defaults),
                    tree(b, lambda t: t.detach().clone()),
                    copy.deepcopy(args),
                    rest,
                )
            try:
                return probe.real_update(agent, optimizer, b, args, *rest)
            finally:
                probe.returns.add(len(probe.calls))  # the gap after that many calls holds update()'s return

        self.mod.Agent.get_action_and_value, self.mod.update = call, update
        self.catcher = warnings.catch_warnings(record=True)
        self.caught = self.catcher.__enter__()
        warnings.simplefilter("always")
        if self.syncs:
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc):
        import torch

        if self.syncs:
            torch.cuda.set_sync_debug_mode("default")
        self.counted()
        self.catcher.__exit__(*exc)
        self.mod.Agent.get_action_and_value, self.mod.update = self.real_call, self.real_update

    def per_call(self, iterations):
        """Syncs per rollout step and per minibatch: the median over the gaps after each call of that phase that lie
        inside it (the same phase follows, update() has not returned; all its gaps where none does), the max over all."""
        marks, gaps, inner = self.calls + [(None, self.count)], {True: [], False: []}, {True: [], False: []}
        for i, ((grad, n), (after, m)) in enumerate(zip(marks, marks[1:])):
            gaps[grad].append(m - n)
            if after == grad and i + 1 not in self.returns:
                inner[grad].append(m - n)
        stats = {
            phase: {
                "calls": len(gaps[grad]),
                "median": statistics.median(inner[grad] or gaps[grad]) if gaps[grad] else None,
                "max": max(gaps[grad], default=None),
            }
            for phase, grad in (("rollout", False), ("update", True))
        }
        return {**stats, "per_iteration": self.count / iterations, "counted": self.syncs}


def step_train(mod, spec, state):
    with Probe(mod, spec["device"] == "cuda" and state["rank"] == 0, "twin" in spec["steps"] and state["rank"] == 0) as probe:
        args, history, _ = train(mod, spec["train"])
    state.update(first=probe.first, update=probe.real_update)
    if state["rank"] == 0:  # the other ranks' train() returns no history (IMPALA's actors) or a partial one
        state["checkpoint"] = history["checkpoint"]
        return {**summary(history), "syncs": probe.per_call(len(history["losses"])), "env_id": getattr(args, "env_id", "")}


def step_twin(mod, spec, state):
    """The first update's batch and weights through update() once more, as one minibatch, on the CPU and the device."""
    import torch

    agent, optimizer_type, defaults, b, args, rest = state["first"]
    one = {k: v for k, v in (("num_minibatches", 1), ("update_epochs", 1), ("target_kl", None)) if hasattr(args, k)}
    if hasattr(args, "minibatch_size"):
        one["minibatch_size"] = args.batch_size
    args, out, tf32 = dataclasses.replace(args, **one), {}, torch.backends.cudnn.allow_tf32
    for side, device in (("cpu", "cpu"), ("device", spec["device"])):
        copied = copy.deepcopy(agent).to(device)
        with torch.random.fork_rng(devices=[torch.cuda.current_device()] if device == "cuda" else []):
            torch.manual_seed(0)
            torch.backends.cudnn.allow_tf32 = False
            try:
                result = state["update"](
                    copied, optimizer_type(copied.parameters(), **defaults), tree(b, lambda t: t.to(device)), args, *rest
                )
            finally:
                torch.backends.cudnn.allow_tf32 = tf32
        losses = result[0] if isinstance(result, tuple) else result
        out[side] = {k: float(losses[k]) for k in LOSSES}
    return out


def step_resume(mod, spec, state):
    checkpoint = state.get("checkpoint") or spec.get("checkpoint")
    if state["rank"] == 0:
        state["checkpoint"] = checkpoint
    _, history, _ = train(mod, ["--resume", checkpoint, *spec["resume"]])
    if state["rank"] == 0:
        return summary(history)


def step_eval(mod, spec, state):
    checkpoint = state.get("checkpoint") or spec.get("checkpoint")
    return {
        "cpu": [float(r) for r in mod.evaluate(checkpoint, 1, 1)],  # what --eval-checkpoint runs
        "device": [float(r) for r in mod.evaluate(checkpoint, 1, 1, spec["device"])],
    }


def step_bf16(mod, spec, state):
    _, history, _ = train(mod, spec["bf16"])
    if state["rank"] == 0:
        return summary(history)


def step_speed(mod, spec, state):
    args, history, wall = train(mod, spec["speed"])
    if state["rank"] == 0:
        first = history["losses"][0] if history.get("losses") else {}
        return {
            "sps": read_run(history["run_dir"])["sps"],
            "wall": wall,
            "global_step": int(history["global_step"]),
            "env_id": getattr(args, "env_id", ""),
            "seconds": {k: float(v) for k, v in history["seconds"].items()},
            "window": window_sps(tb_scalars(history["run_dir"], ["charts/SPS"])["charts/SPS"]),
            "losses": {k: float(first[k]) for k in LOSSES if k in first} or None,
        }


def tb_scalars(run_dir, tags):
    """{tag: [(step, value), ...]} of a TensorBoard run, in step order ([] for a tag it lacks)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    have = acc.Tags()["scalars"]
    return {t: sorted((e.step, e.value) for e in acc.Scalars(t)) if t in have else [] for t in tags}


def window_sps(series, burn_in=BURN_IN):
    """Steps/s from the end of iteration `burn_in` to the last, from a charts/SPS series logged once an iteration as
    steps since the start / seconds since the start (ours', CleanRL's): the seconds at each point are step / SPS.
    None with too few points (or an SPS of 0: a run too short for whole steps/s)."""
    if len(series) <= burn_in or any(v <= 0 for _, v in (series[burn_in - 1], series[-1])):
        return None
    (g0, s0), (g1, s1) = series[burn_in - 1], series[-1]
    seconds = g1 / s1 - g0 / s0
    return (g1 - g0) / seconds if seconds > 0 else None


STEPS = {
    "train": step_train,
    "twin": step_twin,
    "resume": step_resume,
    "eval": step_eval,
    "bf16": step_bf16,
    "speed": step_speed,
}


def child(spec_path):
    """Runs spec["steps"] in order; rank 0 writes what each measured, or its error, to spec["result"]."""
    with open(spec_path) as f:
        spec = json.load(f)
    faulthandler.dump_traceback_later(spec["timeout"], exit=True)
    mod = importlib.import_module(os.path.splitext(spec["script"])[0])
    state, results = {"rank": int(os.environ.get("RANK", "0"))}, {}
    for name in spec["steps"] if state["rank"] == 0 else [s for s in spec["steps"] if s not in ("twin", "eval")]:
        try:
            results[name] = STEPS[name](mod, spec, state)
        except (Exception, SystemExit) as e:  # SystemExit: tyro refusing a flag, or a script's sys.exit
            results[name] = {"error": one_line(e)}
    if state["rank"] == 0:
        with open(spec["result"], "w") as f:
            json.dump(results, f)


# ---- the parent: what runs, judged, reported -----------------------------------------------------------------------


def judge(r, batch):
    """The correctness row: each check's text and whether all passed."""
    cells, failed = {}, []

    def cell(name, ok, text):
        cells[name] = text if ok else f"**FAIL** {text}"
        if not ok:
            failed.append(name)

    def error(step):
        return (r.get(step) or {}).get("error") or ("not run" if step not in r else None)

    for step, want in (("train", 2 * batch), ("resume", 3 * batch)):
        if step in r or step == "train":
            e = error(step)
            cell(step, not e and r[step]["global_step"] == want, e or f"{r[step]['global_step']} steps")
    if "eval" in r:
        e = error("eval")
        ok = not e and all(len(r["eval"][k]) == 1 and math.isfinite(r["eval"][k][0]) for k in ("cpu", "device"))
        cell("eval", ok, e or f"{r['eval']['cpu'][0]:.1f} / {r['eval']['device'][0]:.1f}")
    ratios = [r[s]["ratio"] for s in ("train", "resume") if not error(s) and r[s]["ratio"] is not None]
    if ratios:
        cell("ratio", max(ratios) < RATIO_TOL, f"{max(ratios):.1e}")
    if "twin" in r:
        e = error("twin")
        if e:
            cell("twin", False, e)
        else:
            c, d = r["twin"]["cpu"], r["twin"]["device"]
            # the loss nearest its bound: its difference and what it is allowed
            worst = max(LOSSES, key=lambda k: abs(d[k] - c[k]) / (TWIN_RTOL * abs(c[k]) + TWIN_ATOL))
            allowed = TWIN_RTOL * abs(c[worst]) + TWIN_ATOL
            cell(
                "twin",
                all(abs(d[k] - c[k]) <= TWIN_RTOL * abs(c[k]) + TWIN_ATOL for k in LOSSES),
                f"{worst} {abs(d[worst] - c[worst]):.1e} of {allowed:.1e}",
            )
    if "bf16" in r:
        e = error("bf16") or error("train")
        if e:
            cell("bf16", False, e)
        else:
            b, f = r["bf16"], r["train"]["losses"]
            close = all(abs(b["losses"][k] - f[k]) <= BF16_RTOL * abs(f[k]) + BF16_ATOL for k in LOSSES)
            on_policy = b["ratio"] is None or b["ratio"] < RATIO_TOL
            cell(
                "bf16",
                close and on_policy,
                f"ratio {'—' if b['ratio'] is None else format(b['ratio'], '.1e')}, "
                + ("losses within" if close else "losses off")
                + f" {BF16_RTOL:.0%} + {BF16_ATOL} of fp32",
            )
    return cells, failed


class Check:
    def __init__(self, args, argv):
        self.args, self.argv, self.children, self.lock = args, argv, Children(), threading.Lock()
        self.start, self.device, self.machine = time.time(), "cpu" if args.no_cuda else "cuda", machine_info()
        self.stopped_by = None
        self.work = tempfile.mkdtemp(prefix="gpu_check-")
        self.meta, self.checks, self.speed, self.not_run, self.logs, self.cleanrl = {}, {}, {}, {}, [], {}
        self.leanrl = {}
        sites = sorted(glob.glob(os.path.join(args.site, "*")))
        ours = [s for s in sites if os.path.basename(s) not in ("cleanrl", "leanrl")]
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        libs = [
            p
            for p in [
                *sorted(glob.glob(os.path.join(args.site, "*", "lib"))),
                *os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep),
            ]
            if p
        ]
        base = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(libs))
        # ours: the repository too, whose modules the child (this one, -m) and the scripts it imports are
        self.env = dict(base, PYTHONPATH=os.pathsep.join(ours + [ROOT] + extra))
        if args.cleanrl_dir:  # its scripts import cleanrl_utils from the top of the checkout; its pins come first
            self.cleanrl_env = dict(
                base,
                PYTHONPATH=os.pathsep.join(
                    [os.path.abspath(args.cleanrl_dir), *[s for s in sites if os.path.basename(s) == "cleanrl"], *ours, *extra]
                ),
            )
        if args.leanrl_dir:  # the wandb stand-in first; its own pins (tensordict), then CleanRL's (gymnasium 0.29)
            self.leanrl_env = dict(
                base,
                PYTHONPATH=os.pathsep.join(
                    [
                        SHIMS,
                        os.path.abspath(args.leanrl_dir),
                        *[s for name in ("leanrl", "cleanrl") for s in sites if os.path.basename(s) == name],
                        *ours,
                        *extra,
                    ]
                ),
            )
        self.installed = {
            os.path.basename(s): sorted(d.removesuffix(".dist-info") for d in os.listdir(s) if d.endswith(".dist-info"))
            for s in sites
        }

    def past_deadline(self, what):
        """Whether --deadline has passed; if so, `what` goes to the list of what did not run."""
        if time.time() - self.start < self.args.deadline:
            return False
        self.not_run[what] = f"--deadline {self.args.deadline:.0f} s passed"
        return True

    def launch(self, script, tag, spec, nproc=0):
        """One child process (torchrun with nproc > 0) in the script's scratch directory: what each of its steps
        measured, or the error that ended it."""
        cwd = os.path.join(self.work, os.path.splitext(script)[0])
        os.makedirs(cwd, exist_ok=True)
        spec = {
            **spec,
            "script": script,
            "device": self.device,
            "timeout": CHILD_TIMEOUT_S,
            "result": os.path.join(cwd, f"{tag}.json"),
        }
        spec_path = os.path.join(cwd, f"{tag}.spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        head = (
            [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
            if nproc
            else [sys.executable]
        )
        cmd = [*head, "-m", "benchmark.gpu.gpu_check", "--child", spec_path]  # torchrun's -m: a module too
        # the correctness runs share the cores; a speed run has the machine, with each script's own thread default
        env = self.env if spec["steps"] == ["speed"] else dict(self.env, OMP_NUM_THREADS=str(self.threads))
        with open(os.path.join(cwd, f"{tag}.log"), "w+") as log:
            status = self.children.run(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
            log.seek(0)
            lines = log.read().splitlines()
        with self.lock:
            self.logs.append(f"$ {' '.join(cmd)}  # {script} {tag}, exit status {status}\n" + "\n".join(lines[-40:]))
        if status is None:
            raise Stopped
        if not os.path.isfile(spec["result"]):
            why = f"exit status {status}: {lines[-1] if lines else 'no output'}"
            return {step: {"error": why} for step in spec["steps"]}
        with open(spec["result"]) as f:
            return json.load(f)

    def check(self, script):
        if self.past_deadline(f"{script} (correctness)"):
            return
        self.check_launch(script, TORCHRUN.get(script, (0, 0))[0])
        if script == "ppo_atari_multigpu.py" and self.meta["devices"] >= 2:
            self.check_launch(script, 2, full=False)
        elif script == "ppo_atari_multigpu.py":
            self.not_run[f"{script} (torchrun x2)"] = f"{self.meta['devices']} GPU(s) visible; NCCL wants one per process"

    def check_launch(self, script, nproc, full=True):
        """Train, twin, resume, eval, bf16 for one script: in one process, or under torchrun in one launch per
        training (a process of several ranks makes its process group once); not `full`: training alone."""
        t0, r, launch = time.time(), {}, f"torchrun x{nproc}" if nproc else "python"
        flags, batch = TINY[script]
        cuda = ["--cuda" if self.device == "cuda" else "--no-cuda", "--seed", "1"]
        spec = {
            "train": [*flags.split(), *cuda, "--total-timesteps", str(2 * batch), "--save-model", "--save-every", "1"],
            "resume": ["--total-timesteps", str(3 * batch), cuda[0]],
            "bf16": [*flags.split(), *cuda, "--total-timesteps", str(2 * batch), "--bf16"],
        }
        twin = [] if script in NO_TWIN else ["twin"]
        bf16 = ["bf16"] if self.has_bf16(script) and self.meta["bf16"] else []
        try:
            if not nproc:
                r = self.launch(script, "check", {**spec, "steps": ["train", *twin, "resume", "eval", *bf16]})
            else:
                for i, steps in enumerate((["train", *twin], ["resume", "eval"], bf16) if full else (["train"],)):
                    if steps and (i == 0 or "error" not in r["train"]):
                        r.update(
                            self.launch(
                                script,
                                f"check{nproc}-{i}",
                                {**spec, "steps": steps, "checkpoint": r.get("train", {}).get("checkpoint")},
                                nproc,
                            )
                        )
            cells, failed = judge(r, batch)
            if script in NO_TWIN:
                cells["twin"] = f"— ({NO_TWIN[script]})"
        except Stopped:
            raise
        except Exception as e:  # a fault of this check, not of the script: say so, and go on with the others
            cells, failed = {"train": f"**FAIL** gpu_check.py: {one_line(e)}"}, ["gpu_check.py"]
        with self.lock:
            self.checks[script if full else f"{script} ({launch})"] = {
                "launch": launch,
                "cells": cells,
                "failed": failed,
                "raw": r,
                "seconds": time.time() - t0,
            }
        print(
            f"{script} ({launch}): {'ok' if not failed else 'FAILED ' + ', '.join(failed)} ({time.time() - t0:.0f} s)",
            flush=True,
        )
        self.write()

    def speed_run(self, script, flag=None):
        steps = 2 * TINY[script][1] if self.args.tiny else int(SPEED_STEPS[script] * self.args.speed_scale)
        flags = [
            "--total-timesteps",
            str(steps),
            "--seed",
            "1",
            "--cuda" if self.device == "cuda" else "--no-cuda",
            *(TINY[script][0].split() if self.args.tiny else []),
            *([flag] if flag else []),
        ]
        return self.launch(
            script,
            f"speed{flag or ''}".replace("--", "-"),
            {"steps": ["speed"], "speed": flags},
            TORCHRUN.get(script, (0, 0))[1],
        )["speed"]

    def peer(self, script, side, path, flags=()):
        """CleanRL's or LeanRL's script for `script` at ours' env, steps and seed, in the same order of runs."""
        o = self.speed[script]["ours"]
        old_api = script in OLD_ENVPOOL_API
        cmd = command(path, o["env_id"], 1, o["global_step"], sys.executable, script in NEEDS_ALE_IMPORT)
        if old_api:  # behind the runner that gives envpool 1.2 the gym API of 0.8
            cmd[1:1] = [os.path.join(SHIMS, "old_envpool_api.py")]
        cmd += flags  # their cuda flag is on by default, and they fall back to the CPU where there is none
        result = peer_run(cmd, self.cleanrl_env if side == "cleanrl" else self.leanrl_env, self.children)
        if result is None:
            raise Stopped
        with self.lock:
            self.logs.append(
                f"$ {' '.join(cmd)}  # {side}'s {script}: "
                + json.dumps({k: v for k, v in result.items() if k != "output"})
                + "\n"
                + result.pop("output", "")
            )
        return result

    def speeds(self, script, extras=False):
        """First: ours, ours --compile (LEANRL's scripts), CleanRL's and LeanRL's --compile --cudagraphs script of the
        same name, one after the other; `extras`: ours with --bf16, LeanRL's eager. No run starts past --deadline."""
        if not extras and self.past_deadline(f"{script} (speed)"):
            return
        row = self.speed.setdefault(script, {})
        if extras and "error" in row.get("ours", {"error": "not run"}):
            return
        runs = []
        if not extras:
            runs.append(("ours", lambda: self.speed_run(script)))
            if script in LEANRL:
                runs.append(
                    (
                        "compile",
                        lambda: (
                            self.speed_run(script, "--compile")
                            if self.has_flag(script, "compile")
                            else {"not_run": f"{script} has no --compile"}
                        ),
                    )
                )
            if script in self.cleanrl:
                runs.append(("cleanrl", lambda: self.peer(script, "cleanrl", self.cleanrl[script])))
            if script in self.leanrl:
                runs.append(("leanrl", lambda: self.peer(script, "leanrl", self.leanrl[script], LEANRL_FAST)))
        else:
            if self.has_flag(script, "bf16") and self.meta["bf16"]:
                runs.append(("bf16", lambda: self.speed_run(script, "--bf16")))
            if script in self.leanrl:
                runs.append(("leanrl_eager", lambda: self.peer(script, "leanrl", self.leanrl[script])))
        for name, run in runs:
            if name != "ours" and ("error" in row["ours"] or self.past_deadline(f"{script} (speed: {name})")):
                continue
            try:
                result = run()
            except (Stopped, KeyboardInterrupt):
                raise
            except Exception as e:  # a fault of this check: say so in the row, and go on
                result = {"error": f"gpu_check.py: {one_line(e)}"}
            with self.lock:
                row[name] = result
            print(f"{script} {name}: steps/s {result.get('sps') or result.get('error') or result.get('not_run')}", flush=True)
            self.write()

    def peer_scripts(self, peer, folder, runnable, needs, path_of, names=None):
        """{our script: the peer's file} of those that are in `folder` and whose packages import in the peer's env; the
        others said in not_run. `names`: the peer's file name of each of ours (CleanRL's: the same)."""
        if not folder:
            return {}
        side, name = peer.lower(), (names or {}).get
        found = {s: path_of(folder, s) for s in runnable if s in needs}
        for s in [s for s, path in found.items() if path is None]:
            self.not_run[f"{peer}'s {name(s, s)}"] = f"no {side}/{name(s, s)} in {folder}"
        usable = self.missing({s: needs[s] for s, path in found.items() if path}, getattr(self, f"{side}_env"), f"{peer}'s ")
        return {s: found[s] for s in usable}

    def has_bf16(self, script):
        return self.has_flag(script, "bf16")

    def has_flag(self, script, name):
        """Whether the script's Args has the bool field `name` (its --name flag)."""
        with open(os.path.join(ROOT, script)) as f:
            return f"\n    {name}: bool" in f.read()

    def probe(self, modules, env):
        """The modules of `modules` that do not import under `env`: {module: the error's first line}."""
        out = subprocess.run([sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, env=env, cwd=self.work)
        if out.returncode != 0:  # the interpreter itself failed: every module counts as missing
            return {m: last_line(out) for m in modules}
        return json.loads(out.stdout.strip().splitlines()[-1])

    def missing(self, needs, env, prefix=""):
        """Which scripts of `needs` ({script: modules}) cannot run under `env`: each goes to not_run with the reason."""
        bad = self.probe(sorted({m for modules in needs.values() for m in modules}), env)
        for script, modules in needs.items():
            lost = [m for m in modules if m in bad]
            if lost:
                self.not_run[prefix + script] = f"needs {lost[0]}, which does not import here ({bad[lost[0]]})"
        return [s for s, modules in needs.items() if not any(m in bad for m in modules)]

    def run(self):
        import torch

        cuda = self.device == "cuda"
        self.meta = {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "devices": torch.cuda.device_count() if cuda else 0,
            "device": torch.cuda.get_device_name() if cuda else "CPU (dry run, --no-cuda)",
            # the scripts' own test of --bf16
            "bf16": torch.cuda.is_bf16_supported()
            if cuda
            else torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported(),
            "tf32": f"convolutions {torch.backends.cudnn.allow_tf32}, matmul {torch.backends.cuda.matmul.allow_tf32}",
            "commit": git_commit(os.path.join(ROOT, "ppo.py")) or "unknown (no git checkout here)",
        }
        self.threads = max(1, (os.cpu_count() or 1) // self.args.workers)
        runnable = self.missing({s: CORE + NEEDS.get(s, ()) for s in self.args.scripts}, self.env)
        if not self.args.no_speed:
            self.cleanrl = self.peer_scripts("CleanRL", self.args.cleanrl_dir, runnable, CLEANRL_NEEDS, reference_path)
            self.leanrl = self.peer_scripts("LeanRL", self.args.leanrl_dir, runnable, LEANRL_NEEDS, leanrl_path, LEANRL)
        self.write()
        if not self.args.no_correctness:
            with ThreadPoolExecutor(self.args.workers) as pool:
                list(pool.map(self.check, runnable))
        if not self.args.no_speed:  # the CleanRL pairs first: the goals rest on them; then what only adds to a row
            order = sorted(runnable, key=lambda s: s not in self.cleanrl)
            for s in order:
                self.speeds(s)
            for s in order:
                self.speeds(s, extras=True)

    # ---- the report ----

    def write(self):
        with self.lock:
            os.makedirs(self.args.out, exist_ok=True)
            with open(os.path.join(self.args.out, "gpu_check.md"), "w") as f:
                f.write(self.markdown())
            with open(os.path.join(self.args.out, "gpu_check.json"), "w") as f:
                json.dump(
                    {
                        "meta": self.meta,
                        "installed": self.installed,
                        "checks": self.checks,
                        "speed": self.speed,
                        "not_run": self.not_run,
                    },
                    f,
                    indent=1,
                    default=str,
                )
            with open(os.path.join(self.args.out, "gpu_check.log"), "w") as f:
                f.write("\n\n".join(self.logs) + "\n")

    def markdown(self):
        m, mi, d, lean = self.meta, self.machine, self.args.cleanrl_dir, self.args.leanrl_dir
        commit = d and cleanrl_commit(d)
        md = [
            f"# GPU check ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(self.start))}, {time.time() - self.start:.0f} s)",
            "",
            f"- command: `python -m benchmark.gpu.gpu_check {' '.join(self.argv)}`",
            f"- device: {m.get('device')} x{m.get('devices')}; {mi['cores']} cores, {mi['cpu']}; python {mi['python']}, "
            f"torch {m.get('torch')}, CUDA {m.get('cuda')}, bf16 {m.get('bf16')}, TF32 for {m.get('tf32')}",
            f"- ours: commit {m.get('commit')}; CleanRL: "
            + (f"{d} (commit {commit})" if d else "not run")
            + "; LeanRL: "
            + (f"{lean} (commit {cleanrl_commit(lean, 'leanrl')})" if lean else "not run"),
            "- installed: "
            + ("; ".join(f"{k}: {', '.join(v)}" for k, v in self.installed.items()) or "nothing (this Python's own packages)"),
            "",
            "## Correctness",
            "",
            "Two iterations of each script's small settings (TINY in gpu_check.py) with --save-model --save-every 1, "
            "--resume to three, the checkpoint evaluated on the CPU (as --eval-checkpoint does) and on the device "
            f"(one game each). Ratio: the max |ratio - 1| of every first minibatch (< {RATIO_TOL:g}). CPU vs device: "
            "the first update's batch and weights through update() as one minibatch on both, cuDNN's TF32 off; of "
            "policy loss, value loss and entropy, the one nearest its tolerance, its difference and the tolerance "
            f"({TWIN_RTOL:g} relative + {TWIN_ATOL:g}). --bf16: a third run, "
            "its ratio and its first losses against fp32's"
            + (
                "."
                if m.get("bf16")
                else ", not run: this device has no bfloat16 kernels, and the scripts refuse --bf16 there."
            ),
            "",
            "| script | launch | train | --resume | eval CPU / device | ratio | CPU vs device | --bf16 | verdict |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        checks = sorted(self.checks.items(), key=lambda item: list(TINY).index(item[0].split()[0]))
        for name, c in checks:
            md.append(
                f"| {name} | {c['launch']} | "
                + " | ".join(c["cells"].get(k, "—") for k in ("train", "resume", "eval", "ratio", "twin", "bf16"))
                + f" | {'ok' if not c['failed'] else 'FAILED'} |"
            )
        md += [
            "",
            "## Speed at the defaults",
            "",
            "steps/s: the last charts/SPS of one run each, seed 1, one after the other on the same card; threads: "
            "ours' --torch-threads defaults, CleanRL's torch's default; time: ours' env / inference / update "
            "seconds. Goals: every PPO script at CleanRL's steps/s or more; ppo_atari.py and "
            "ppo_atari_envpool.py at 1.3x it with --bf16.",
            "",
            "| script | env | steps | ours | ours --bf16 | CleanRL | ours / CleanRL | --bf16 / CleanRL | goal | time (s) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s, row in self.speed.items():
            if "ours" in row:
                md.append(speed_line(s, row))
        rows = [(s, row) for s, row in self.speed.items() if s in LEANRL and "ours" in row]
        if rows:
            md += [
                "",
                "## Against CleanRL and LeanRL",
                "",
                "The same env, steps and seed, one run each, one after the other on the same card. Logged: the "
                "run's own last steps/s (ours, CleanRL: charts/SPS, from the start; LeanRL: its `speed`, from the "
                "start of its 3rd iteration). From iteration 3: the same window for ours and CleanRL, from their "
                "charts/SPS series, so that start-up and compilation in the first two iterations count for none. "
                "Ratios: of the from-iteration-3 steps/s. First losses: the first update's last minibatch "
                "(policy / value / entropy); LeanRL logs none. Goals: ours --compile at or above LeanRL "
                "--compile --cudagraphs; ppo_atari_envpool.py eager at or above CleanRL's.",
                "",
                "| script | run | steps/s logged | from iteration 3 | / CleanRL | / LeanRL --compile --cudagraphs "
                "| first losses | wall (s) |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for s, row in rows:
                md += peer_lines(s, row)
        md += [
            "",
            "## Host-device syncs",
            "",
            "During the first correctness training, torch.cuda.set_sync_debug_mode('warn'): the syncs between one "
            "call of Agent.get_action_and_value and the next; the median over the gaps a call of the same phase "
            "follows (over all where none does), and in brackets the max over all, which holds GAE, logging and "
            "checkpoints; rollout = "
            "gradients off, update = on (one minibatch; IMPALA, PAAC: one learner batch; IMPALA's rollout runs in "
            "CPU actor processes, not seen here). Per iteration: all syncs / iterations.",
            "",
            "| script | per rollout step | per minibatch | per iteration | calls: rollout / update |",
            "|---|---|---|---|---|",
        ]
        for name, c in checks:
            syncs = (c["raw"].get("train") or {}).get("syncs")
            if syncs:
                md.append(f"| {name} | " + sync_cells(syncs) + " |")
        md += ["", "## Not run", "", *(f"- {k}: {v}" for k, v in self.not_run.items() or [("nothing", "all ran")])]
        return "\n".join(md) + "\n"


def leanrl_path(folder, script):
    """LeanRL's file for our `script` in a checkout (leanrl/<name>) or gpu_wheels.sh's copy, else None."""
    path = os.path.join(folder, "leanrl", LEANRL[script])
    return path if os.path.isfile(path) else None


def peer_run(cmd, env, children):
    """A CleanRL or LeanRL run to the end in a scratch directory (killed after CHILD_TIMEOUT_S): {"sps", "window",
    "losses", "wall", "output"} or {"error", "wall", "output"}; None when the check was stopped. CleanRL's: its
    TensorBoard run (charts/SPS, the first losses/*); LeanRL's: the wandb stand-in's lines (its last "speed")."""
    with tempfile.TemporaryDirectory() as tmp, open(os.path.join(tmp, "output.log"), "w+") as log:
        start = time.perf_counter()
        status = children.run(
            ["timeout", "-k", "10", str(CHILD_TIMEOUT_S), *cmd], cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        wall = time.perf_counter() - start
        if status is None:
            return None
        log.seek(0)
        lines = log.read().replace("\r", "\n").splitlines()
        out = {"wall": wall, "output": "\n".join(line for line in lines if line.strip())[-4000:]}
        wandb = [json.loads(line[len(WANDB) :]) for line in lines if line.startswith(WANDB)]
        dirs = glob.glob(os.path.join(tmp, "runs", "*"))
        if status != 0:
            last = next((line for line in reversed(lines) if line.strip()), "no output")
            return {**out, "error": f"exit status {status}: {last.strip()[:300]}"}
        if wandb:  # LeanRL: wandb.log({"speed": ...}) at every 10th iteration
            speeds = [w["log"]["speed"] for w in wandb if "speed" in w.get("log", {})]
            if not speeds:
                return {
                    **out,
                    "error": "logged no speed: LeanRL logs it at every 10th iteration from its 3rd; give "
                    "it 10 iterations or more",
                }
            return {
                **out,
                "sps": speeds[-1],
                "window": speeds[-1],
                "losses": None,
                "global_step": max(w["step"] for w in wandb if "step" in w),
            }
        if len(dirs) != 1:
            return {**out, "error": f"expected one run directory under runs/ or a wandb line, found {len(dirs)} dirs"}
        tags = tb_scalars(dirs[0], ["charts/SPS", *(f"losses/{k}" for k in LOSSES)])
        if not tags["charts/SPS"]:
            return {**out, "error": "no charts/SPS logged"}
        first = {k: tags[f"losses/{k}"][0][1] for k in LOSSES if tags[f"losses/{k}"]}
        return {
            **out,
            "sps": tags["charts/SPS"][-1][1],
            "window": window_sps(tags["charts/SPS"]),
            "losses": first if len(first) == len(LOSSES) else None,
            "global_step": tags["charts/SPS"][-1][0],
        }


def cleanrl_commit(folder, package="cleanrl"):
    """The commit gpu_wheels.sh wrote beside CleanRL's (LeanRL's) copied scripts, or the checkout's own."""
    stamp = os.path.join(folder, "COMMIT")
    if os.path.isfile(stamp):
        with open(stamp) as f:
            return f.read().strip()
    inside = glob.glob(os.path.join(folder, package, "*.py"))
    return (inside and checkout_commit(folder, inside[0])) or "unknown: not a git checkout"


def speed_line(script, row):
    """One row of the speed table: the three rates, their ratios, the goal and where ours' time went."""
    o, b, c = row["ours"], row.get("bf16", {}), row.get("cleanrl", {})

    def sps(r):
        return f"{r['sps']:.0f}" if r.get("sps") else (f"failed: {r['error']}" if r.get("error") else "—")

    ratio = o.get("sps") and c.get("sps") and o["sps"] / c["sps"]
    ratio_b = b.get("sps") and c.get("sps") and b["sps"] / c["sps"]
    goal = "—"
    if ratio:
        atari = script in ATARI_GOAL and bool(ratio_b)
        met = ratio >= 1 and (not atari or ratio_b >= 1.3)
        goal = ("met" if met else "not met") + (" (1.0x, 1.3x with --bf16)" if atari else " (1.0x)")
    secs = (
        " / ".join(f"{o['seconds'].get(k, math.nan):.1f}" for k in ("env", "inference", "update")) if o.get("seconds") else "—"
    )
    return (
        f"| {script} | {o.get('env_id', '')} | {o.get('global_step', '')} | {sps(o)} | {sps(b)} | {sps(c)} | "
        f"{f'{ratio:.2f}' if ratio else '—'} | {f'{ratio_b:.2f}' if ratio_b else '—'} | {goal} | {secs} |"
    )


PEER_RUNS = {
    "ours": "ours",
    "compile": "ours --compile",
    "bf16": "ours --bf16",
    "cleanrl": "CleanRL",
    "leanrl": "LeanRL --compile --cudagraphs",
    "leanrl_eager": "LeanRL eager",
}


def peer_lines(script, row):
    """The issue-53 rows of one script (every run it has), then its goals."""

    def rate(r):
        return r.get("window") if r else None

    lines = []
    cleanrl, leanrl = rate(row.get("cleanrl")), rate(row.get("leanrl"))
    for key, label in PEER_RUNS.items():
        r = row.get(key)
        if r is None:
            continue
        if not r.get("sps"):
            why = f"failed: {r['error']}" if r.get("error") else f"not run: {r.get('not_run', 'no steps/s')}"
            lines.append(f"| {script} | {label} | {why} | — | — | — | — | {r.get('wall', 0):.0f} |")
            continue
        w = rate(r)
        losses = r.get("losses")
        first = (
            " / ".join(f"{losses[k]:.4g}" for k in LOSSES) if losses else ("not logged" if key.startswith("leanrl") else "—")
        )
        lines.append(
            f"| {script} | {label} | {r['sps']:.0f} | {f'{w:.0f}' if w else '—'} | "
            f"{f'{w / cleanrl:.2f}' if w and cleanrl else '—'} | {f'{w / leanrl:.2f}' if w and leanrl else '—'} "
            f"| {first} | {r.get('wall', 0):.0f} |"
        )
    goals = []
    compiled = rate(row.get("compile"))
    if compiled and leanrl:
        goals.append(
            f"ours --compile {'at or above' if compiled >= leanrl else 'below'} LeanRL --compile --cudagraphs "
            f"({compiled / leanrl:.2f}x)"
        )
    if script == "ppo_atari_envpool.py" and rate(row.get("ours")) and cleanrl:
        ratio = rate(row["ours"]) / cleanrl
        goals.append(f"eager {'at or above' if ratio >= 1 else 'below'} CleanRL's ({ratio:.2f}x)")
    if goals:
        lines.append(f"| {script} | **goals** | " + "; ".join(goals) + " | | | | | |")
    return lines


def sync_cells(syncs):
    def phase(p):
        return f"{syncs[p]['median']:g} ({syncs[p]['max']})" if syncs[p]["calls"] and syncs["counted"] else "—"

    per_iteration = f"{syncs['per_iteration']:.1f}" if syncs["counted"] else "— (CPU)"
    calls = f"{syncs['rollout']['calls']} / {syncs['update']['calls']}"
    return f"{phase('rollout')} | {phase('update')} | {per_iteration} | {calls}"


def install(dirs, site):
    """pip installs each DIR/*.whl into site/<DIR's name>, from those files alone, and copies DIR/lib there."""
    for d in dirs:
        target = os.path.join(site, os.path.basename(os.path.normpath(d)))
        shutil.rmtree(target, ignore_errors=True)
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--no-cache-dir",
                "--target",
                target,
                *sorted(glob.glob(os.path.join(d, "*.whl"))),
            ],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise RuntimeError(f"pip could not install {d} into {target}: {last_line(out)}")
        if os.path.isdir(os.path.join(d, "lib")):
            shutil.copytree(os.path.join(d, "lib"), os.path.join(target, "lib"), dirs_exist_ok=True)
        print(f"{NAME}: installed {d} into {target}", flush=True)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--scripts",
        nargs="+",
        default=[s for s in TINY if os.path.isfile(os.path.join(ROOT, s))],
        help="the scripts to check (default: all)",
    )
    p.add_argument("--out", help="the folder of the report (on the device: $OUT)")
    p.add_argument("--install", nargs="+", default=[], metavar="DIR", help="folders of wheels to install first")
    p.add_argument("--install-only", action="store_true", help="install, then stop (a call that carries one folder)")
    p.add_argument("--site", default=os.path.join(ROOT, ".gpu", "site"), help="where --install puts the packages")
    p.add_argument("--cleanrl-dir", help="CleanRL's scripts: cleanrl/<script> (gpu_wheels.sh's .gpu/cleanrl-src)")
    p.add_argument("--leanrl-dir", help="LeanRL's scripts: leanrl/<name>_torchcompile.py (gpu_wheels.sh's .gpu/leanrl-src)")
    p.add_argument("--no-cuda", action="store_true", help="the CPU dry run: every run with --no-cuda")
    p.add_argument("--tiny", action="store_true", help="speed runs on the correctness runs' small settings")
    p.add_argument("--no-speed", action="store_true", help="correctness and syncs only")
    p.add_argument("--no-correctness", action="store_true", help="the speed runs only")
    p.add_argument("--workers", type=int, default=4, help="correctness processes at a time")
    p.add_argument("--deadline", type=float, default=420, help="seconds after which no new run starts")
    p.add_argument("--speed-scale", type=float, default=1.0, help="factor on every speed run's steps")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return args
    unknown = [s for s in args.scripts if s not in TINY]
    problems = [
        (unknown, f"--scripts {unknown[0] if unknown else ''} is not one of {', '.join(TINY)}"),
        (len(set(args.scripts)) != len(args.scripts), "a script is given twice in --scripts; give each once"),
        (not args.install_only and not args.out, "--out is required: the folder of the report (on the device: $OUT)"),
        (args.install_only and not args.install, "--install-only without --install: name the wheel folders"),
        (args.workers < 1, f"--workers must be 1 or more, got {args.workers}"),
        (not args.deadline > 0, f"--deadline must be > 0 seconds, got {args.deadline}"),
        (not args.speed_scale > 0, f"--speed-scale must be > 0, got {args.speed_scale}"),
        *(
            (
                not glob.glob(os.path.join(d, "*.whl")),
                f"--install {d}: no *.whl there; bash benchmark/gpu/gpu_wheels.sh CLEANRL_DIR gathers them",
            )
            for d in args.install
        ),
        (
            args.cleanrl_dir and not any(reference_path(args.cleanrl_dir, s) for s in CLEANRL_NEEDS),
            f"--cleanrl-dir {args.cleanrl_dir} holds none of cleanrl/{{{','.join(CLEANRL_NEEDS)}}}; give a CleanRL "
            "checkout or gpu_wheels.sh's .gpu/cleanrl-src",
        ),
        (
            args.leanrl_dir and not any(os.path.isfile(os.path.join(args.leanrl_dir, "leanrl", n)) for n in LEANRL.values()),
            f"--leanrl-dir {args.leanrl_dir} holds none of leanrl/{{{','.join(LEANRL.values())}}}; give a LeanRL checkout "
            "or gpu_wheels.sh's .gpu/leanrl-src",
        ),
        (args.no_speed and args.no_correctness, "--no-speed with --no-correctness leaves nothing to run"),
        *((not os.path.isfile(os.path.join(ROOT, s)), f"--scripts {s}: no such file in {ROOT}") for s in args.scripts),
    ]
    wrong = next((message for bad, message in problems if bad), None)
    if wrong:
        raise ConfigError(wrong)
    # the children run in scratch directories: what they are given must not depend on this one
    args.site, args.cleanrl_dir = os.path.abspath(args.site), args.cleanrl_dir and os.path.abspath(args.cleanrl_dir)
    args.leanrl_dir = args.leanrl_dir and os.path.abspath(args.leanrl_dir)
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parse(argv)
    except ConfigError as e:
        print(f"{NAME}: error: {e}", file=sys.stderr)
        return 2
    if args.child:
        child(args.child)
        return 0
    try:
        install(args.install, args.site)
    except RuntimeError as e:
        print(f"{NAME}: error: {e}", file=sys.stderr)
        return 1
    if args.install_only:
        return 0
    import torch

    if not args.no_cuda and not torch.cuda.is_available():
        print(
            f"{NAME}: error: no CUDA device is visible to {sys.executable} (torch {torch.__version__}); "
            "run with --no-cuda for the CPU dry run",
            file=sys.stderr,
        )
        return 2
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        print(f"{NAME}: error: cannot create --out {args.out} ({e.strerror}); give a writable folder", file=sys.stderr)
        return 2
    check = Check(args, argv)

    def stop(sig, frame):
        check.stopped_by = check.stopped_by or sig
        check.children.stop(sig)
        kill = threading.Timer(10, check.children.stop, (signal.SIGKILL,))  # what has not ended by then
        kill.daemon = True
        kill.start()
        raise Stopped

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        check.run()
        status = 1 if any(c["failed"] for c in check.checks.values()) else 0
    except Stopped:
        check.not_run["the rest"] = f"stopped by {signal.Signals(check.stopped_by).name}"
        status = 128 + check.stopped_by
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        check.write()
        shutil.rmtree(check.work, ignore_errors=True)
    print(f"\n{NAME}: wrote {os.path.join(args.out, 'gpu_check.md')}")
    return status


if __name__ == "__main__":
    sys.exit(main())
