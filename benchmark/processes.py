"""The processes a tool starts: a training run in a process group of its own, stopped with everything it started; the
line that says why a child failed; and the command of a tool run as a module, with the repository on its import path
(every module of benchmark/ imports the others, and the scripts, by their names from the repository's top)."""

import os
import signal
import subprocess
import sys
import threading

from benchmark.runs import ROOT

KILL_AFTER_S = 30  # a stopped run gets this long to end (IMPALA stops its actors, PAAC its workers) before SIGKILL


# on Linux, a run gets SIGTERM when the runner dies, of SIGKILL too (PR_SET_PDEATHSIG, kept across the exec): none goes
# on unrecorded beside a rerun of the sweep; and one whose runner is already gone does not start
DIE_WITH_RUNNER = (
    "import ctypes, os, signal, sys; ctypes.CDLL(None).prctl(1, signal.SIGTERM); "
    "os.getppid() == int(sys.argv[1]) or sys.exit(1); os.execvp(sys.argv[2], sys.argv[2:])"
)


def tool(module, python=sys.executable):
    """The command that runs benchmark's `module` ("benchmark.tools.run"): `python -m`, from any working directory when
    its environment is root_on_path()'s."""
    return [python, "-m", module]


def root_on_path(env=None):
    """`env` (os.environ's by default) with the repository first on PYTHONPATH: a tool's child that imports benchmark's
    modules or a script (a peer's stand-in imports the script it mirrors) finds them from any working directory."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    return env


def kill_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except OSError:  # the group has ended
        pass


class Children:
    """The running training processes. Each leads its own process group (a new session), so that a signal
    reaches the processes it started too; once the sweep is stopped, no new one starts."""

    def __init__(self):
        # reentrant: a second signal's handler may run inside the first one's stop()
        self.lock, self.procs, self.stopped_by = threading.RLock(), set(), None

    def run(self, cmd, **popen_kwargs):
        """cmd's exit status, or None when the sweep was stopped before it could start."""
        with self.lock:
            if self.stopped_by:
                return None
            if sys.platform == "linux":
                cmd = [sys.executable, "-c", DIE_WITH_RUNNER, str(os.getpid()), *cmd]
            proc = subprocess.Popen(cmd, start_new_session=True, **popen_kwargs)
            self.procs.add(proc)
        status = proc.wait()
        with self.lock:
            kill_group(proc.pid, signal.SIGKILL)  # what the run left running (a crashed learner's actors)
            self.procs.discard(proc)
        return status

    def stop(self, sig):
        """Stop the sweep (the first signal is the reason): send every running group `sig`."""
        with self.lock:
            self.stopped_by = self.stopped_by or sig
            for proc in self.procs:
                kill_group(proc.pid, sig)


def last_line(completed):
    """The child's error: its last line that says something ("ppo.py: error: ...", a traceback's last line, or the
    line inside tyro's box: "Unrecognized options: --bogus")."""
    lines = [line.strip("│╭╮╰╯─ ") for line in (completed.stderr or completed.stdout).strip().splitlines()]
    said = [line for line in lines if ": " in line]
    return said[-1] if said else lines[-1] if lines else f"exit status {completed.returncode}"
