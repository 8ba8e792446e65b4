"""Process helpers of the torch.distributed tests (ppo_atari_multigpu.py, impala_vtrace_distributed.py): ranks spawned
with torchrun's environment on this host, and the /proc checks that no process is left behind."""

import glob
import multiprocessing as mp
import os
import socket
import time

import torch


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
