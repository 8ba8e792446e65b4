"""The promises every script keeps, each an assert_* function that takes the script's module (or file name) and the
run to check it on: bad input refused before training in one line, checkpoints read only by their own script, a resume
that is the rest of the uninterrupted run, training gone non-finite stopped in one line, Ctrl-C and SIGTERM one line.
tests/test_every_script.py calls those that hold alike in every script, over the scripts; a script's own test file
calls them where its run differs. docs/reliability.md names the test of each promise."""

import contextlib
import dataclasses
import glob
import math
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import processes
import pytest
import torch
from conftest import ROOT, next_second
from processes import run_cli

# ---- reading a run ----------------------------------------------------------------------------------------------------


def read_scalars(run_dir, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    return [e.value for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else None


# the tags every script's run writes (its doc's "Explanation of the logged metrics"), and those PPO's update adds
LOGGED = [
    "charts/learning_rate",
    "charts/SPS",
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/explained_variance",
]
PPO_LOGGED = LOGGED + ["losses/old_approx_kl", "losses/approx_kl", "losses/clipfrac"]


def assert_logged(run_dir, tags, count=None):
    """Each tag has finite values in the run's TensorBoard file, `count` of them where given."""
    for tag in tags:
        values = read_scalars(run_dir, tag)
        assert values and all(np.isfinite(values)), tag
        assert count is None or len(values) == count, (tag, len(values))


# ---- bad input stops before training, in one line ---------------------------------------------------------------------


# bad input every PPO script refuses with the same words; each test file adds its own cases
PPO_BAD_INPUT = [
    ({"num_minibatches": 3}, "not divisible"),
    ({"total_timesteps": 0}, "total-timesteps must be a finite number >= 1"),
    ({"resume": "missing.pt"}, "could not be read.*No such file"),
    ({"update_epochs": 0}, "update-epochs must be a finite number >= 1"),
    ({"save_every": 0}, "save-every must be"),
    ({"learning_rate": float("nan")}, "learning-rate must be"),
    ({"learning_rate": -1e-3}, "learning-rate must be a finite number > 0"),
    ({"max_grad_norm": -1.0}, "max-grad-norm must be"),
    ({"clip_coef": -1.0}, "clip-coef must be"),
    ({"gamma": 1.5}, "gamma must be a finite number >= 0 and <= 1"),
    ({"gae_lambda": float("nan")}, "gae-lambda must be"),
    ({"seed": -1}, "seed must be"),
    ({"seed": 2**32}, "seed must be"),
    ({"torch_threads": -1}, "torch-threads must be a finite number >= 0"),
    ({"num_envs": 1, "num_steps": 4, "num_minibatches": 4}, "minibatches of 2 or more"),
]


# the bad input every script on the NoFrameskip-v4 games refuses (each test file adds its own to these)
ATARI_BAD_INPUT = [
    (dict(env_id="NoSuchGame-v4"), "unknown env id"),
    (dict(env_id="CartPole-v1"), "not an Atari"),
    (dict(env_id="ALE/Breakout-v5"), "NoFrameskip-v4"),
    (dict(total_timesteps=10), "leaves no iteration to run"),
] + PPO_BAD_INPUT


def assert_rejected_before_training(mod, args, message):
    """train(args) stops with a ConfigError matching `message` before anything is written."""
    with pytest.raises(mod.ConfigError, match=message):
        mod.train(args)
    assert not os.path.exists("runs")  # nothing started


def assert_cli_error_is_one_line(script, flags, expected):
    """`python <script> <flags>` (run in this process: processes.run_cli) stops with exit 1 and exactly the line
    `expected` on stderr, no traceback."""
    code, _, stderr = run_cli(script, flags, timeout=60)
    assert code == 1 and "Traceback" not in stderr
    assert [line for line in stderr.splitlines() if line.startswith(script)] == [expected]


def machine_memory(monkeypatch, nbytes):
    """os.sysconf reports `nbytes` of physical memory (in pages of 4 kB)."""
    pages = {"SC_PHYS_PAGES": int(nbytes) // 4096, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(os, "sysconf", lambda name, real=os.sysconf: pages[name] if name in pages else real(name))


def assert_memory_checked(mod, monkeypatch, huge, flag="--num-envs"):
    """`huge` args, needing more memory than any machine has, are refused before any env is made or anything is
    written, in one line naming `flag`, the estimate and the machine's memory; the defaults fit an 8 GB laptop."""
    assert_rejected_before_training(
        mod,
        huge,
        rf"^{flag} \d+ .*needs about [\d.]+ GB \(.*\), more than this machine's "
        r"[\d.]+ GB; use fewer",
    )
    machine_memory(monkeypatch, 8e9)
    mod.check_args(mod.Args())


def assert_unwritable_directory_is_one_line(mod, args, tmp_path):
    """Training with args where runs/ cannot be made is refused in one line that says what to do."""
    if os.geteuid() == 0:  # root writes anywhere: make runs/ a file instead, which no one can make a directory in
        open("runs", "w").close()
    else:
        os.chmod(tmp_path, 0o500)
    with pytest.raises(mod.ConfigError, match="cannot create runs/.*run from a writable directory"):
        mod.train(args)


# ---- checkpoints: read by their own script alone, evaluated, one directory a run --------------------------------------


class RunsCode:
    """Pickled, a call of os.system that creates pwned.txt when unpickled: what a crafted checkpoint could hold."""

    def __reduce__(self):
        return os.system, ("touch pwned.txt",)


def assert_checkpoint_evaluates(mod, out, episodes=2):
    """A run's saved checkpoint holds its final weights and evaluates, seeded: the same scores twice; 0 episodes refused."""
    ckpt, _ = mod.load_checkpoint(out["checkpoint"])
    assert all(torch.equal(ckpt["model"][k], v) for k, v in out["agent"].state_dict().items())
    scores = mod.evaluate(out["checkpoint"], eval_episodes=episodes, seed=3)
    assert len(scores) == episodes and scores == mod.evaluate(out["checkpoint"], eval_episodes=episodes, seed=3)  # seeded
    with pytest.raises(mod.ConfigError, match="eval-episodes must be"):
        mod.evaluate(out["checkpoint"], eval_episodes=0)


def assert_foreign_and_corrupt_checkpoints_rejected(mod, owner):
    """A checkpoint written by the script `owner` and a file that is no checkpoint are both refused."""
    torch.save({"script": owner, "model": {}}, "other.pt")
    with pytest.raises(mod.ConfigError, match=f"written by {owner}"):
        mod.train(mod.Args(resume="other.pt"))
    open("garbage.pt", "w").write("not a checkpoint")
    with pytest.raises(mod.ConfigError, match="could not be read"):
        mod.evaluate("garbage.pt")
    # an older version's checkpoint of this very script (its args name a flag that is gone): one line, no TypeError
    older = {**dataclasses.asdict(mod.Args()), "numpy_rollout": True}
    torch.save({"script": f"{mod.__name__}.py", "args": older, "model": {}}, "older.pt")
    with pytest.raises(
        mod.ConfigError, match=rf"another version of {mod.__name__}\.py \(flags this one lacks: --numpy-rollout\)"
    ):
        mod.train(mod.Args(resume="older.pt"))
    torch.save({"script": f"{mod.__name__}.py"}, "forged.pt")  # no args at all
    with pytest.raises(mod.ConfigError, match=r"another version of .*\(no flags\)"):
        mod.evaluate("forged.pt")
    # issue 75: a checkpoint whose pickle would run code (os.system) is refused unread by --resume and --eval-checkpoint
    torch.save({"script": f"{mod.__name__}.py", "model": RunsCode()}, "evil.pt")
    for load in (lambda: mod.train(mod.Args(resume="evil.pt")), lambda: mod.evaluate("evil.pt")):
        with pytest.raises(mod.ConfigError, match=r"^checkpoint 'evil.pt' holds more than weights, arrays and plain"):
            load()
    assert not os.path.exists("pwned.txt")
    # a network's weights alone (as benchmark/studies/atari_agent.py keeps them) evaluate but cannot resume: one line
    torch.save({"script": f"{mod.__name__}.py", "args": dataclasses.asdict(mod.Args()), "model": {}}, "weights.pt")
    with pytest.raises(mod.ConfigError, match=r"^checkpoint 'weights.pt' holds the network's weights only: it evaluates"):
        mod.train(mod.Args(resume="weights.pt"))


def assert_envs_of_another_version_refused(mod, out, forge, pickled=True):
    """Resuming `out`'s checkpoint with its env state replaced by `forge(saved env state, a pickle of a wrapper class
    this file does not have)`, as an older version of the file may have saved it, is refused in one line; and where the
    saved games are a pickle, one that would run code is refused before it runs."""
    ckpt = torch.load(out["checkpoint"], weights_only=False)
    renamed_wrapper = f"c{mod.__name__}\nRenamedWrapper\n)\x81.".encode()  # pickle opcodes: the class, no arguments
    torch.save({**ckpt, "envs": forge(ckpt["envs"], renamed_wrapper)}, "other_version.pt")
    with pytest.raises(
        mod.ConfigError,
        match=rf"^the envs in other_version.pt do not fit this version of {mod.__name__}"
        r"\.py \((AttributeError|KeyError): .+\); resume it with the version that",
    ):
        mod.train(mod.Args(resume="other_version.pt", total_timesteps=2 * ckpt["args"]["total_timesteps"]))
    if not pickled:
        return
    # issue 75: saved games whose pickle would run code (os.system) are refused unimported, and nothing runs
    torch.save({**ckpt, "envs": forge(ckpt["envs"], pickle.dumps(RunsCode()))}, "evil.pt")
    with pytest.raises(mod.ConfigError, match=r"^the envs in evil.pt .*\(UnpicklingError: (os|posix)\.system is no part of"):
        mod.train(mod.Args(resume="evil.pt", total_timesteps=2 * ckpt["args"]["total_timesteps"]))
    assert not os.path.exists("pwned.txt")


def assert_runs_in_one_second_get_their_own_directories(mod, args, monkeypatch, n=3):
    """n runs of args (with --save-model) started within one second: runs/<name>, <name>-2, ..., each its checkpoint."""
    clock = iter(1234567890.0 + 1e-6 * np.arange(1, 10**6))  # every run starts within the same second
    monkeypatch.setattr(mod.time, "time", lambda: next(clock))
    runs = [mod.train(args) for _ in range(n)]
    name = f"runs/{args.env_id}__{mod.__name__}__{args.seed}__1234567890"
    assert [r["run_dir"] for r in runs] == [name] + [f"{name}-{i}" for i in range(2, n + 1)]
    assert all(os.path.isfile(r["checkpoint"]) for r in runs)


# ---- resume: the rest of the uninterrupted run ------------------------------------------------------------------------


def keep_checkpoint(mod, monkeypatch, kept, at=2, key="iteration"):
    """Make `mod.save_checkpoint` also copy the checkpoint it writes at `state[key] == at` to `kept`:
    the file a run interrupted there would have left behind."""
    real_save = mod.save_checkpoint

    def save_and_keep(path, state):
        real_save(path, state)
        if state[key] == at:
            shutil.copy(path, kept)

    monkeypatch.setattr(mod, "save_checkpoint", save_and_keep)


def resume_later(mod, checkpoint):
    """`mod.train(mod.Args(resume=checkpoint))`, in a later wall-clock second than the run it resumes (next_second)."""
    next_second()
    return mod.train(mod.Args(resume=checkpoint))


def assert_resume_runs_longer_and_nothing_else(mod, full, field, value, longer, **flags):
    """A finished run (`full`, saved) resumes with its own settings only: `field` changed to `value` or another learning
    rate is refused by name, its own budget leaves nothing to run, and a budget of `longer` steps (with `flags`, which
    may change on a resume) runs on to it; the longer run's result."""
    with pytest.raises(mod.ConfigError, match=f"^--{field.replace('_', '-')} cannot change when resuming"):
        mod.train(mod.Args(resume=full["checkpoint"], **{field: value}))
    with pytest.raises(mod.ConfigError, match="^--learning-rate cannot change when resuming"):
        mod.train(mod.Args(resume=full["checkpoint"], learning_rate=1e-3))
    with pytest.raises(mod.ConfigError, match="leaves no (iteration|update) to run"):  # the run is already finished
        mod.train(mod.Args(resume=full["checkpoint"]))
    next_second()
    longer_run = mod.train(mod.Args(resume=full["checkpoint"], total_timesteps=longer, **flags))
    assert longer_run["global_step"] == longer
    return longer_run


def assert_resumed_log_reads_once(full, returns=True):
    """The run's directory holds the full run's event file and then the resumed run's, which logged again
    everything after the checkpoint. Read together (as TensorBoard and benchmark/tools/report.py read them), every
    iteration, and every episode when `returns`, must appear once: the resumed run's purge_step."""
    run_dir = f"runs/{full['run_name']}"
    np.testing.assert_allclose(read_scalars(run_dir, "charts/learning_rate"), full["learning_rate"], rtol=1e-6)
    if returns:
        assert full["episodic_return"]
        np.testing.assert_allclose(read_scalars(run_dir, "charts/episodic_return"), full["episodic_return"], rtol=1e-6)


def cli_flags(args):
    """The command-line flags that give `args` (those that differ from its Args' defaults)."""
    out, default = [], dataclasses.asdict(type(args)())
    for k, v in dataclasses.asdict(args).items():
        if v != default[k]:
            name = k.replace("_", "-")
            out += ([f"--{name}"] if v else [f"--no-{name}"]) if isinstance(v, bool) else [f"--{name}", str(v)]
    return out


def assert_command_line_checkpoint_resumes_in_python(mod, args):
    """A checkpoint of `python <script>` (its own wrappers pickled as __main__'s) resumes by train() in Python, games and
    all, not with the line that the envs do not fit: the script's Unpickler finds them in the module."""
    code, _, stderr = run_cli(f"{mod.__name__}.py", cli_flags(dataclasses.replace(args, save_model=True)))
    assert code == 0, stderr[-3000:]
    (ckpt,) = glob.glob("runs/*/checkpoint.pt")
    assert mod.load_checkpoint(ckpt)[0]["envs"] is not None
    next_second()
    resumed = mod.train(mod.Args(resume=ckpt, total_timesteps=2 * args.total_timesteps))
    assert resumed["global_step"] == 2 * args.total_timesteps


def assert_resumes_with_fresh_episodes(mod, args, capture, monkeypatch, unsaveable=None):
    """For the scripts whose games cannot be saved (envpool, μRTS's JVM), or, with `unsaveable` (the name of the
    function that reads an env's state beside its pickle, made to raise as a video recorder's pickle does), for envs
    that cannot be saved this time: train `args` (2 iterations, a checkpoint after each), resume from the first one,
    and check that the run continues with fresh episodes to the same final step, the learning-rate schedule where it
    was, and a log that reads once. Returns both runs."""

    def raises(env):
        raise TypeError("cannot pickle this env")

    keep_checkpoint(mod, monkeypatch, kept := "iteration1.pt", at=1)
    with monkeypatch.context() as m:
        if unsaveable:
            m.setattr(mod, unsaveable, raises)
        full = mod.train(args)
        final, _ = mod.load_checkpoint(full["checkpoint"])  # read before the resumed run writes over it
        assert final["script"] == f"{mod.__name__}.py" and final["iteration"] == 2
        assert mod.load_checkpoint(kept)[0]["envs"] is None
        resumed = resume_later(mod, kept)
    assert "resuming with fresh episodes" in capture.readouterr().err
    assert resumed["global_step"] == full["global_step"] == 2 * args.num_envs * args.num_steps
    assert len(resumed["losses"]) == 1 and resumed["learning_rate"] == full["learning_rate"][1:]
    assert_resumed_log_reads_once(full, returns=False)  # fresh episodes: the games after the resume differ
    return full, resumed


def assert_resume_matches_uninterrupted_run(mod, args, monkeypatch, at=2, returns=True):
    """Train `args` (its checkpoint at iteration `at` kept), then resume that checkpoint: the resumed run must be the
    rest of the uninterrupted one, its losses, final step and game scores (a game that spanned the checkpoint
    included: its envs were saved), and the log must read once. Returns both runs."""
    keep_checkpoint(mod, monkeypatch, kept := f"iteration{at}.pt", at=at)
    full = mod.train(args)
    resumed = resume_later(mod, kept)
    assert len(full["losses"]) > at and resumed["losses"] == full["losses"][at:]
    assert resumed["global_step"] == full["global_step"]
    n_before = len(full["episodic_return"]) - len(resumed["episodic_return"])
    assert resumed["episodic_return"] == full["episodic_return"][n_before:]
    assert_resumed_log_reads_once(full, returns)
    return full, resumed


# ---- training gone non-finite stops in one line -------------------------------------------------------------------


def poison_weights_at(mod, monkeypatch, at, poison=None):
    """Write a nan into the agent's first weight (or apply `poison(agent)`) just before check_finite looks at update
    `at`, as a diverged update leaves it."""
    real_check = mod.check_finite

    def poisoned(iteration, losses, agent, *rest):
        if iteration == at:
            with torch.no_grad():
                weight = next(agent.parameters())
                if poison:
                    poison(agent)
                else:
                    weight[(0,) * weight.dim()] = math.nan  # (a view(-1) fails on channels-last weights)
        return real_check(iteration, losses, agent, *rest)

    monkeypatch.setattr(mod, "check_finite", poisoned)


def assert_nonfinite_weights_refused(mod, path, resume=True):
    """The checkpoint at `path` with an inf written into its first weight is refused in one line by --eval-checkpoint
    and (`resume`) by --resume."""
    ckpt = torch.load(path, weights_only=False)
    weight = next(v for v in ckpt["model"].values() if v.is_floating_point())
    weight[(0,) * weight.dim()] = math.inf
    torch.save(ckpt, "nonfinite.pt")
    message = (
        "^checkpoint 'nonfinite.pt' holds non-finite weights \\(nan or inf, in model\\.[\\w.]+\\), which neither train nor "
    )
    with pytest.raises(mod.ConfigError, match=message):
        mod.evaluate("nonfinite.pt")
    with pytest.raises(mod.ConfigError, match=message):
        mod.load_checkpoint("nonfinite.pt", mod.Args(), given=set()) if resume else mod.load_checkpoint("nonfinite.pt")
    # issue 75: every tensor and array of the checkpoint is checked, not the weights alone (the optimizer's state, the
    # normalisers', an LSTM's): a nan in the first of them outside the network is refused, named by its path
    ckpt = torch.load(path, weights_only=False)
    where = poison_first_state({k: v for k, v in ckpt.items() if k not in ("model", "args")})
    torch.save(ckpt, "nonfinite_state.pt")
    with pytest.raises(mod.ConfigError, match=rf"holds non-finite values \(nan or inf, in {re.escape(where)}\), which"):
        mod.load_checkpoint("nonfinite_state.pt")


def poison_first_state(x, where=""):
    """Write a nan into the first floating tensor or array in `x` (nested dicts, lists, tuples); return its path."""
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, (list, tuple)) else []
    for k, v in items:
        if (
            torch.is_tensor(v)
            and v.is_floating_point()
            and v.numel()
            or isinstance(v, np.ndarray)
            and v.dtype.kind == "f"
            and v.size
        ):
            v[(0,) * v.ndim] = math.nan  # in place, contiguous or not
            return f"{where}{k}"
        if found := poison_first_state(v, f"{where}{k}."):
            return found
    return None


def assert_nonfinite_stops_and_keeps_the_last_checkpoint(mod, args, monkeypatch, at=2, key="iteration"):
    """Training `args` (--save-model, --save-every 1, more than `at` updates) with a nan in the weights after update `at`
    stops there with one message that names the update, the quantity and the checkpoint of update at - 1, which stays
    as it was: finite, and it evaluates. That checkpoint made non-finite is refused by --resume and --eval-checkpoint."""
    poison_weights_at(mod, monkeypatch, at)
    with pytest.raises(mod.ConfigError) as stopped:
        mod.train(args)
    (path,) = glob.glob("runs/*/checkpoint.pt")
    assert str(stopped.value).startswith(
        f"iteration {at}: the weights hold nan; the last finite checkpoint is {path} "
        f"(iteration {at - 1}); likely too high a --"
    ), str(stopped.value)
    kept = torch.load(path, weights_only=False)
    assert kept[key] == at - 1 and all(v.isfinite().all() for v in kept["model"].values() if v.is_floating_point())
    assert_nonfinite_weights_refused(mod, path)


# ---- Ctrl-C and SIGTERM are one line -------------------------------------------------------------------------------


def assert_stopped_in_one_line(script, flags, sig, key="iteration", infix="", forked=True):
    """`python <script> <flags>` (a long run that saves every iteration), sent `sig` once it has a checkpoint (SIGINT to
    its process group, as a terminal's Ctrl-C; SIGTERM to it alone, as `kill`), ends with exit 128 + sig and one line
    naming that checkpoint and the command that resumes it, no traceback. The process is forked from this one
    (processes.Forked: a fresh interpreter's start and exit around the script, without its 3-4 s of imports), or with
    `forked=False` a fresh interpreter (the scripts that start processes of their own: their exit is multiprocessing's).
    Its SIGINT handler is a fresh interpreter's, which a shell that ran pytest in the background would have left ignored."""
    flags = ["--no-cuda", "--save-model", "--save-every", "1", *flags]
    proc = (
        processes.Forked(script, flags, new_session=True)
        if forked
        else subprocess.Popen(
            [sys.executable, os.path.join(ROOT, script), *flags],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    )
    stderr = "(still running 120 s after two signals)"
    try:
        deadline = time.time() + 120
        while not glob.glob("runs/*/checkpoint.pt") and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        for wait in (30, 90):  # a second signal, as a person presses Ctrl-C again: once, in a loaded run of the whole
            # suite on 2 cores, ppo.py had not ended 120 s after the first (not seen in 40 runs of this alone); unexplained
            os.killpg(proc.pid, sig) if sig == signal.SIGINT else os.kill(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                _, stderr = proc.communicate(timeout=wait)
                break
    finally:
        proc.kill()
    (path,) = glob.glob("runs/*/checkpoint.pt")
    done = torch.load(path, weights_only=False)[key]
    assert proc.returncode == 128 + sig and "Traceback" not in stderr, stderr[-3000:]
    assert [line for line in stderr.splitlines() if line.startswith(script)] == [
        f"{script}: interrupted; {infix}the last checkpoint is {path} (iteration {done}); continue with: python {script} "
        f"--resume {path}"
    ], stderr[-3000:]


# ---- a2c_paac.py's --anneal-timesteps, which its Stable-Baselines3 twin (benchmark/peers/sb3_a2c.py) keeps too -----------

# (--anneal-timesteps, the update at which the rate reaches 0) of the tiny run's 4 updates
# --anneal-timesteps of a run of 4 updates x 10 steps, and the update at which the rate reaches 0
ANNEAL_CASES = [(None, 4), (2 * 5 * 10, 10), (2 * 5 * 2, 2)]


def assert_anneals_to_0_at(out, anneal_updates, updates=4):
    """The rate falls by equal amounts from 0.0014 (n_e = 2) at the first update to 0 at update `anneal_updates`, and
    stays 0 after it: in the history and in TensorBoard."""
    expected = np.concatenate([np.linspace(0.0014, 0.0, anneal_updates), np.zeros(updates)])[:updates]
    np.testing.assert_allclose(out["learning_rate"], expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(read_scalars(out["run_dir"], "charts/learning_rate"), expected, rtol=1e-6, atol=1e-12)
