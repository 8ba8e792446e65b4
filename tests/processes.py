"""Process helpers: a script's command line run in this process (run_cli) or in a process forked from this one (Forked);
and those of the torch.distributed tests
(ppo_atari_multigpu.py, impala_vtrace_distributed.py): ranks spawned with torchrun's environment on this host, a torchrun
job stopped and the lines it printed, a rank started by hand that cannot start its process group, a script run after a
prelude (a process group watched to the end), and the /proc checks that no process is left behind."""

import atexit
import codecs
import contextlib
import glob
import io
import locale
import logging
import multiprocessing as mp
import multiprocessing.util
import os
import random
import re
import runpy
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import warnings

import numpy as np
import torch
from conftest import ROOT

# the warning filters a fresh interpreter starts with (no -W, no PYTHONWARNINGS), in their order
FRESH_FILTERS = [
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
]


class _Pipe(io.StringIO):
    """What a script run by subprocess.run(capture_output=True, text=True) writes to: text kept, with the encoding a
    pipe's stream has in a fresh interpreter (tyro draws its error box in "─" only when sys.stdout.encoding is utf-8;
    a StringIO's is None)."""

    encoding = codecs.lookup(
        os.environ.get("PYTHONIOENCODING", "").split(":")[0]
        or ("utf-8" if sys.flags.utf8_mode else locale.getpreferredencoding(False))
    ).name


def fresh_warnings():
    """The warning filters of a fresh interpreter, and warnings printed to sys.stderr (pytest records them otherwise)."""
    warnings.resetwarnings()
    for action, category, module in FRESH_FILTERS:
        warnings.filterwarnings(action, category=category, module=module, append=True)
    warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: sys.stderr.write(
        warnings.formatwarning(message, category, filename, lineno, line)
    )


def exit_status(e):
    """The status the interpreter exits with on SystemExit `e`; a message (not an int) is printed to stderr, status 1."""
    if e.code is None or isinstance(e.code, int):
        return (e.code or 0) % 256
    print(e.code, file=sys.stderr)
    return 1


class CliTimeout(Exception):
    """run_cli's `timeout` passed (subprocess.run's TimeoutExpired, in this process)."""


def run_cli(script, flags, timeout=None):
    """`python <ROOT>/<script> <flags>`, run in this process: (exit status, stdout, stderr) as the process would give.

    A launch imports torch, gymnasium, tyro and the rest afresh (3-4 s of CPU, ~50 launches in the suite) for tests that
    read no more than what the command line prints and its status. Here the script's file runs as __main__ (runpy), with
    sys.argv = [path, *flags] and its directory first on sys.path: its module top level and its __main__ block run as
    from a shell (tyro parses sys.argv, the block installs its SIGTERM handler and turns ConfigError into sys.exit's
    line), only against modules imported already. Its stdout and stderr are pipes' (not terminals, utf-8); the warnings it
    raises are printed to its stderr under the filters a fresh interpreter starts with (pytest records none of them).
    The status: 0 when it returns, SystemExit's code when an int (None: 0); 1 when sys.exit gets a message, which is
    added to stderr with a newline, as the interpreter prints it. Any other exception propagates: a test failure, as the
    traceback the process would print.

    What it cannot see stays tested in real processes (`import <script>` of every script in a fresh interpreter,
    test_repo.py's; the Ctrl-C and SIGTERM tests in processes forked from this one, Forked; torchrun's):
    what the first import of its dependencies prints or does in a fresh interpreter, real signals and the interpreter's
    exit, output C++ code writes to the file descriptors directly. Restored
    afterwards: sys.argv, sys.path, the SIGTERM and SIGINT handlers, torch's thread count and cudnn.deterministic (train()
    sets them), the RNGs of random, numpy and torch, the warning filters and the working directory. `timeout` (seconds,
    in the main thread) raises CliTimeout by SIGALRM, as subprocess.run's raises TimeoutExpired."""
    path = os.path.join(ROOT, script)
    out, err = _Pipe(), _Pipe()
    saved_argv, saved_path, cwd = sys.argv, sys.path[:], os.getcwd()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    threads, deterministic = torch.get_num_threads(), torch.backends.cudnn.deterministic
    rngs = random.getstate(), np.random.get_state(), torch.get_rng_state()
    alarm = timeout is not None and threading.current_thread() is threading.main_thread()
    if alarm:

        def expire(*_):
            raise CliTimeout(f"{script} {' '.join(flags)} ran past {timeout} s")

        old_alarm = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            fresh_warnings()
            sys.argv = [path, *map(str, flags)]
            sys.path.insert(0, os.path.dirname(path))  # as python puts the script's directory first
            try:
                runpy.run_path(path, run_name="__main__")
                code = 0
            except SystemExit as e:
                code = exit_status(e)
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old_alarm)
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(cwd)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads)
        torch.backends.cudnn.deterministic = deterministic
        random.setstate(rngs[0]), np.random.set_state(rngs[1]), torch.set_rng_state(rngs[2])
    return code, out.getvalue(), err.getvalue()


def run_as_main_and_exit(script, flags):
    """In a child just forked from this process: `python <ROOT>/<script> <flags>` as a fresh interpreter runs it, then its
    exit (non-daemon threads joined, the exit functions run: the script's, multiprocessing's and logging's) with its
    status. Never returns. What the fork saves is the start: the modules the script imports are imported already."""
    code = 1
    try:
        sys.stdout = open(1, "w", closefd=False)  # line-buffered on a terminal, block-buffered on a pipe, as at a start
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        # this process's exit functions (pytest's, xdist's) and child processes are not the script's: multiprocessing's
        # made new as in its own children, and those a fresh interpreter's imports register, in their order
        mp.process._children = set()
        mp.util._finalizer_registry.clear()
        atexit._clear()
        atexit.register(logging.shutdown), atexit.register(mp.util._exit_function)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a fresh interpreter's handlers
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        fresh_warnings()
        path = os.path.join(ROOT, script)
        sys.argv = [path, *map(str, flags)]
        sys.path.insert(0, os.path.dirname(path))
        runpy.run_path(path, run_name="__main__")
        code = 0
    except SystemExit as e:
        code = exit_status(e)
    except KeyboardInterrupt:  # uncaught, the interpreter ends by SIGINT
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
    try:
        threading._shutdown()  # what the interpreter's exit does first: wait for the non-daemon threads
        atexit._run_exitfuncs()
        sys.stdout.flush(), sys.stderr.flush()
    finally:
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code)


class Forked:
    """`python <ROOT>/<script> <flags>` in a child forked from this process (run_as_main_and_exit): a real process, sent
    real signals, without the 3-4 s of CPU a fresh interpreter spends importing torch and the rest. Popen's pid, poll(),
    communicate(timeout) (raises subprocess.TimeoutExpired), kill() and returncode (-N: ended by signal N), as with
    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True; in a session of its own with `new_session`."""

    def __init__(self, script, flags, new_session=False):
        read, write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                if new_session:
                    os.setsid()
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1), os.dup2(write, 2)
                for fd in (devnull, read, write):
                    os.close(fd)
            except BaseException:
                os._exit(1)
            run_as_main_and_exit(script, flags)
        os.close(write)
        self.returncode, self.args, self.chunks = None, [script, *flags], []
        self.reader = threading.Thread(target=self._drain, args=(read,), daemon=True)
        self.reader.start()

    def _drain(self, fd):
        with open(fd, "rb") as f:
            for chunk in iter(lambda: f.read1(65536), b""):
                self.chunks.append(chunk)

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def communicate(self, timeout=None):
        deadline = None if timeout is None else time.time() + timeout
        while self.poll() is None:
            if deadline is not None and time.time() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.05)
        # to the pipe's end: the children the script left (none, if it is right) hold it
        self.reader.join(None if deadline is None else max(0.0, deadline - time.time()))
        if self.reader.is_alive():
            raise subprocess.TimeoutExpired(self.args, timeout)
        return None, b"".join(self.chunks).decode(errors="replace")

    def kill(self):
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.returncode = -signal.SIGKILL


def install_sh(folder, *targets, python, empty=(), copied=(), timeout=60, **env):
    """`bash scripts/install.sh TARGETS` run with PYTHON=python in `folder`, where scripts/install.sh is copied first, with
    requirements/NAME.txt for each NAME in `empty` (an empty file) and in `copied` (ours)."""
    texts = {"scripts/install.sh": open(os.path.join(ROOT, "scripts", "install.sh")).read()}
    texts |= {f"requirements/{name}.txt": "" for name in empty}
    texts |= {f"requirements/{name}.txt": open(os.path.join(ROOT, "requirements", f"{name}.txt")).read() for name in copied}
    for path, text in texts.items():
        os.makedirs(os.path.join(folder, os.path.dirname(path)), exist_ok=True)
        with open(os.path.join(folder, path), "w") as f:
            f.write(text)
    return subprocess.run(
        ["bash", "scripts/install.sh", *targets],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHON": str(python), **env},
    )


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank, world, port):
    """What torchrun tells rank `rank` of a world on this host."""
    return {
        **os.environ,
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def _rank_main(rank, world, port, fn):
    os.environ.update(rank_env(rank, world, port))
    torch.save(fn(rank, world), f"rank{rank}.pt")


def run_ranks(fn, world=2, timeout=120, method="spawn"):
    """fn(rank, world) in `world` processes (spawned, or forked: then they keep the parent's monkeypatches) with
    torchrun's environment; their return values, by rank."""
    ctx, port = mp.get_context(method), free_port()
    procs = [ctx.Process(target=_rank_main, args=(rank, world, port, fn)) for rank in range(world)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout)
        assert [p.exitcode for p in procs] == [0] * world
    finally:
        for p in procs:
            p.kill()
            p.join()
    return [torch.load(f"rank{rank}.pt", weights_only=False) for rank in range(world)]


def driver(script, prelude="", epilogue=""):
    """Write driver.py: `prelude`, then `script` as python or torchrun runs it (a fresh interpreter, its __main__ block),
    then `epilogue`; its name."""
    with open("driver.py", "w") as f:
        f.write(
            f"{prelude}\nimport runpy, sys\nsys.argv = [{script!r}, *sys.argv[1:]]\n"
            f"runpy.run_path(sys.argv[0], run_name='__main__')\n{epilogue}\n"
        )
    return "driver.py"


def group_watcher(script):
    """driver.py: `script`, then a line saying whether the process group it started is still alive. One that is (its
    gloo threads with it) meets the interpreter's exit, where a thread that drops the last collective's tensor cannot
    take the GIL and aborts the process."""
    return driver(
        script,
        "import weakref\nimport torch.distributed as dist\ngroups, start = [], dist.init_process_group\n"
        "dist.init_process_group = lambda *a, **kw: (start(*a, **kw), groups.append(weakref.ref(dist.group.WORLD)))",
        "print('the group outlived the run' if groups[0]() else 'the group is gone')",
    )


def descendants(pid):
    """The pids of the processes below `pid`, from /proc."""
    children = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = open(stat).read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found, todo = found + below, todo + below
    return found


def alive(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(condition, timeout):
    deadline = time.time() + timeout
    while not condition() and time.time() < deadline:
        time.sleep(0.1)
    return condition()


def script_lines(stderr, script):
    """The lines `script` printed itself. torchrun's log records ([IWE]MMDD hh:mm:ss.ffffff ...) come from another
    process into the same stream and can land inside one of them
    (seen in CI: "...with the learnerW1124 15:12:06.994000 ...")."""
    lines = re.split(r"\n|(?=[IWE]\d{4} \d\d:\d\d:\d\d\.\d{6} )", stderr)
    return [line for line in lines if line.startswith(f"{script}: ")]


def stop_job(command, how):
    """Start `command` (a torchrun job, in a session of its own as in a terminal), `how(job, workers)` once it has
    checkpointed; (return code, stderr, seconds it took to stop). Every process it started is gone by then: killed here
    otherwise, and the test fails."""
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    workers = []
    try:
        assert wait_for(lambda: glob.glob("runs/*/checkpoint.pt"), 90), "no update finished"
        workers = descendants(job.pid)
        how(job, workers)
        start = time.time()
        _, stderr = job.communicate(timeout=60)
        took = time.time() - start
        assert wait_for(lambda: not any(alive(pid) for pid in workers), 10), "a process outlived the job"
    finally:
        for pid in [job.pid] + workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    return job.returncode, stderr, took


def assert_process_group_failure_is_one_line(script, case, flags=()):
    """Rank 0 of 2 started by hand (no torchrun) with MASTER_ADDR unset, or with MASTER_PORT taken by another program:
    one line that names the cause and the fix, exit status 1, no run directory and no process group left; the command
    line runs in this process (run_cli), under the environment such a rank has."""
    name = os.path.basename(script)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = rank_env(0, 2, taken.getsockname()[1])
        if case == "MASTER_ADDR unset":
            del env["MASTER_ADDR"]
        saved = dict(os.environ)
        os.environ.clear(), os.environ.update(env)
        try:  # in this process (run_cli), under that environment
            code, _, stderr = run_cli(name, ["--no-cuda", *flags], timeout=120)
        finally:
            os.environ.clear(), os.environ.update(saved)
    assert code == 1 and "Traceback" not in stderr and not os.path.exists("runs"), stderr[-2000:]
    assert not torch.distributed.is_initialized()
    assert script_lines(stderr, name) == [
        {
            "MASTER_ADDR unset": f"{name}: error: WORLD_SIZE 2 without MASTER_ADDR and MASTER_PORT: start the processes with "
            "torchrun, or give every one both (rank 0's host, and a free port on it)",
            "port in use": f"{name}: error: rank 0 cannot start the process group at 127.0.0.1:{env['MASTER_PORT']} "
            "(The server socket has failed to listen on any local network address. port: "
            f"{env['MASTER_PORT']}, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in "
            "use); set MASTER_PORT to a free port on rank 0's host, or let torchrun choose one",
        }[case]
    ]
