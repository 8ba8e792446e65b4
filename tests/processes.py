"""Process helpers: a script's command line run in this process (run_cli); and those of the torch.distributed tests
(ppo_atari_multigpu.py, impala_vtrace_distributed.py): ranks spawned with torchrun's environment on this host, a torchrun
job stopped and the lines it printed, a rank started by hand that cannot start its process group, a script run after a
prelude (a process group watched to the end), and the /proc checks that no process is left behind."""

import codecs
import contextlib
import glob
import io
import locale
import multiprocessing as mp
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
import warnings

import numpy as np
import torch
from conftest import ROOT

# the warning filters a fresh interpreter starts with (no -W, no PYTHONWARNINGS), in their order
FRESH_FILTERS = [("default", DeprecationWarning, "__main__"), ("ignore", DeprecationWarning, ""),
                 ("ignore", PendingDeprecationWarning, ""), ("ignore", ImportWarning, ""), ("ignore", ResourceWarning, "")]


class _Pipe(io.StringIO):
    """What a script run by subprocess.run(capture_output=True, text=True) writes to: text kept, with the encoding a
    pipe's stream has in a fresh interpreter (tyro draws its error box in "─" only when sys.stdout.encoding is utf-8;
    a StringIO's is None)."""

    encoding = codecs.lookup(os.environ.get("PYTHONIOENCODING", "").split(":")[0] or
                             ("utf-8" if sys.flags.utf8_mode else locale.getpreferredencoding(False))).name


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

    What it cannot see stays tested in real processes (each script's --help and `import <script>` test, the Ctrl-C and
    SIGTERM tests, torchrun's): what the first import of its dependencies prints or does in a fresh interpreter, the
    real entry point and the interpreter's exit, output C++ code writes to the file descriptors directly. Restored
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
            warnings.resetwarnings()
            for action, category, module in FRESH_FILTERS:
                warnings.filterwarnings(action, category=category, module=module, append=True)
            warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: sys.stderr.write(
                warnings.formatwarning(message, category, filename, lineno, line))
            sys.argv = [path, *map(str, flags)]
            sys.path.insert(0, os.path.dirname(path))  # as python puts the script's directory first
            try:
                runpy.run_path(path, run_name="__main__")
                code = 0
            except SystemExit as e:
                if e.code is None or isinstance(e.code, int):
                    code = (e.code or 0) % 256
                else:
                    print(e.code, file=sys.stderr)
                    code = 1
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank, world, port):
    """What torchrun tells rank `rank` of a world on this host."""
    return {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


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
        f.write(f"{prelude}\nimport runpy, sys\nsys.argv = [{script!r}, *sys.argv[1:]]\n"
                f"runpy.run_path(sys.argv[0], run_name='__main__')\n{epilogue}\n")
    return "driver.py"


def group_watcher(script):
    """driver.py: `script`, then a line saying whether the process group it started is still alive. One that is (its
    gloo threads with it) meets the interpreter's exit, where a thread that drops the last collective's tensor cannot
    take the GIL and aborts the process."""
    return driver(script, "import weakref\nimport torch.distributed as dist\ngroups, start = [], dist.init_process_group\n"
                  "dist.init_process_group = lambda *a, **kw: (start(*a, **kw), groups.append(weakref.ref(dist.group.WORLD)))",
                  "print('the group outlived the run' if groups[0]() else 'the group is gone')")


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
    process into the same stream and can land inside one of them (seen in CI: "...with the learnerW1124 15:12:06.994000 ...")."""
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
    one line that names the cause and the fix, exit status 1, and no run directory."""
    name = os.path.basename(script)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = rank_env(0, 2, taken.getsockname()[1])
        if case == "MASTER_ADDR unset":
            del env["MASTER_ADDR"]
        proc = subprocess.run([sys.executable, script, "--no-cuda", *flags], env=env, capture_output=True, text=True,
                              timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and not os.path.exists("runs"), proc.stderr[-2000:]
    assert script_lines(proc.stderr, name) == [{
        "MASTER_ADDR unset": f"{name}: error: WORLD_SIZE 2 without MASTER_ADDR and MASTER_PORT: start the processes with "
                             "torchrun, or give every one both (rank 0's host, and a free port on it)",
        "port in use": f"{name}: error: rank 0 cannot start the process group at 127.0.0.1:{env['MASTER_PORT']} (The server "
                       "socket has failed to listen on any local network address. port: "
                       f"{env['MASTER_PORT']}, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in "
                       "use); set MASTER_PORT to a free port on rank 0's host, or let torchrun choose one"}[case]]
