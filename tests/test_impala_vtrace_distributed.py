"""Tests of impala_vtrace_distributed.py on CPU (gloo): the learner's updates from unrolls received from actor ranks are
impala_vtrace.py's updates from the same unrolls, and V-trace sees the log-probs the actors sampled with; a torchrun
run of 1 learner + 2 actors logs both actors' games, checkpoints and resumes (with 1 actor); a killed rank, under
torchrun or without the agent that watches it (as on another node), and Ctrl-C or SIGTERM to torchrun stop every
process in bounded time; bad input is one line before anything starts.
"""

import ast
import glob
import os
import re
import signal
import subprocess
import sys
import time

import processes
import pytest
import torch
from conftest import ROOT, import_copy
from hacks import assert_every_group_annealed, copy_args, critic_group_copy, recorded_rates
from processes import (
    assert_process_group_failure_is_one_line,
    free_port,
    group_watcher,
    rank_env,
    run_ranks,
    stop_job,
    wait_for,
)
from promises import (
    assert_nonfinite_weights_refused,
    assert_rejected_before_training,
    machine_memory,
    read_scalars,
)
from tiny import tiny

import impala_vtrace as iv
import impala_vtrace_distributed as ivd

SCRIPT = os.path.join(ROOT, "impala_vtrace_distributed.py")
# what an actor sends per unroll, in the order of the learner's `buffers`
KEYS = ("obs", "actions", "versions", "rewards", "dones", "logprobs", "episodes", "actor_seconds")


def test_learner_updates_from_received_unrolls_are_the_single_host_updates(monkeypatch):
    sent, batches, real_send, real_update = [], [], ivd.dist.send, ivd.update

    def record_send(tensor, dst, *a, **k):  # in the actors: every tensor they send
        sent.append((dst, tensor.clone()))
        return real_send(tensor, dst, *a, **k)

    def record_update(agent, optimizer, b, args):  # in the learner: each batch and the weights it starts from
        batches.append({"b": {k: v.clone() for k, v in b.items()}, "before": copy_state(agent)})
        return real_update(agent, optimizer, b, args)

    monkeypatch.setattr(ivd.dist, "send", record_send)
    monkeypatch.setattr(ivd, "update", record_update)

    def rank_main(rank, world):
        out = ivd.train(tiny(ivd, sync=True, num_envs_per_actor=2, unroll_length=64, total_timesteps=64 * 4 * 3))
        if rank > 0:
            return [t for dst, t in sent if dst == 0]
        return {
            "batches": batches,
            "after": copy_state(out["agent"]),
            **{k: out[k] for k in ("losses", "learning_rate", "policy_lag", "episodic_return")},
        }

    learner, *actors = run_ranks(rank_main, world=3, timeout=90, method="fork")  # the ranks keep these patches
    unrolls = [[dict(zip(KEYS, msgs[i : i + len(KEYS)])) for i in range(0, len(msgs), len(KEYS))] for msgs in actors]
    # 3 updates of one unroll from each actor, and each actor's last one, answered with the stop
    assert [len(u) for u in unrolls] == [4, 4] and unrolls[0][0]["obs"].shape == (65, 2, 4, 84, 84)
    # --sync: every unroll is sampled by the weights of the update that consumes it; V-trace's ratios are 1
    assert learner["policy_lag"] == [0.0] * 3 and all(losses["max_abs_logratio"] < 1e-4 for losses in learner["losses"])

    agent = iv.Agent(4, channels_last=True)
    agent.load_state_dict(learner["batches"][0]["before"])
    optimizer = torch.optim.RMSprop(agent.parameters(), lr=6e-4, alpha=0.99, eps=0.01, momentum=0.0)  # detail 6
    for u, batch in enumerate(learner["batches"]):
        # impala_vtrace.py's learner on the rows of rank 1's and rank 2's unroll: [n, T, k, ...] -> [T, n * k, ...]
        rows = {key: torch.stack([unrolls[0][u][key], unrolls[1][u][key]]) for key in KEYS}
        b = {key: rows[key].transpose(0, 1).flatten(1, 2) for key in ("obs", "actions", "rewards", "dones", "logprobs")}
        assert all(torch.equal(b[key], batch["b"][key]) for key in b)  # the learner got what the actors sent
        assert (rows["versions"] == u).all()
        optimizer.param_groups[0]["lr"] = learner["learning_rate"][u]
        iv.update(agent, optimizer, b, iv.Args())
    for key, value in agent.state_dict().items():
        torch.testing.assert_close(value, learner["after"][key], rtol=1e-5, atol=1e-7)
    assert any(not torch.equal(v, learner["batches"][0]["before"][k]) for k, v in learner["after"].items())
    games = [r for u in range(3) for actor in unrolls for r, steps in actor[u]["episodes"].tolist() if steps]
    assert games and games == learner["episodic_return"]  # the games the actors finished, as the learner logged them


def copy_state(agent):
    return {k: v.detach().clone() for k, v in agent.state_dict().items()}


def test_hack_every_param_group_anneals(tmp_path):
    """tests/hacks.py's check (d) in the learner (the other hack checks are impala_vtrace.py's, whose learner this is)."""
    copy = critic_group_copy(ivd, tmp_path)

    def rank_main(rank, world):
        with recorded_rates() as rates:
            out = copy.train(tiny(ivd, anneal_lr=True))
        return {"rates": rates, "learning_rate": out["learning_rate"]} if rank == 0 else None

    learner, _ = run_ranks(rank_main, world=2, timeout=90, method="fork")  # the learner's check: 1 actor feeds it
    assert_every_group_annealed(learner["rates"], learner["learning_rate"])


def test_hack_a_copy_runs_checkpoints_and_evaluates_as_itself(tmp_path):
    """tests/hacks.py's copy check for the torch.distributed learner: an unmodified copy's run and checkpoint carry the
    copy's name, and this file refuses the copy's checkpoint in one line naming it."""
    copy = import_copy(open(ivd.__file__).read(), tmp_path / "my_ivd.py")

    def rank_main(rank, world):
        out = copy.train(copy_args(copy, tiny(ivd, save_model=True)))
        return {"run_dir": out["run_dir"], "checkpoint": out["checkpoint"]} if rank == 0 else None

    learner, _ = run_ranks(rank_main, world=2, timeout=90, method="fork")
    assert "__my_ivd__" in os.path.basename(learner["run_dir"])
    assert torch.load(learner["checkpoint"], weights_only=False)["script"] == "my_ivd.py"
    with pytest.raises(ivd.ConfigError, match=r"written by my_ivd\.py, not by impala_vtrace_distributed\.py; read it"):
        ivd.evaluate(learner["checkpoint"], eval_episodes=1)
    assert len(copy.evaluate(learner["checkpoint"], eval_episodes=1)) == 1


def test_hack_an_edited_constructor_trains_on_every_rank_and_evaluates(monkeypatch):
    """An Agent built differently through make_agent() (a state the stock Agent lacks) is what the learner and the
    actor ranks build and what evaluate() loads."""
    stock = ivd.make_agent

    def make_agent(run_args, observation_space, action_space):
        agent = stock(run_args, observation_space, action_space)
        agent.register_buffer("extra", torch.arange(21.0).view(3, 7))
        return agent

    monkeypatch.setattr(ivd, "make_agent", make_agent)

    def rank_main(rank, world):
        out = ivd.train(tiny(ivd, save_model=True))
        return out["checkpoint"] if rank == 0 else None

    checkpoint, _ = run_ranks(rank_main, world=2, timeout=90, method="fork")
    assert "extra" in torch.load(checkpoint, weights_only=False)["model"]
    assert len(ivd.evaluate(checkpoint, eval_episodes=1)) == 1


# ---- torchrun ----------------------------------------------------------------------------------------------------


def torchrun(*flags, nproc=2, script=SCRIPT):
    """A torchrun job of `nproc` ranks: the learner and 1 actor unless a test needs more (each rank costs ~5 s of CPU,
    most of it importing torch)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", script, *flags]


def actors_line(stdout):
    """{rank: [unrolls, games]} from the learner's last line."""
    (line,) = [line for line in stdout.splitlines() if line.startswith("actor ranks (unrolls, games): ")]
    return ast.literal_eval(line.split(": ", 1)[1])


# a learner and its actors on a short budget, saving: the flags of the torchrun runs below
SMALL_RUN = ("--no-cuda", "--batch-size", "4", "--unroll-length", "10", "--total-timesteps", "800", "--save-model")


def test_torchrun_learner_and_two_actors_log_both_checkpoint_and_resume_with_one():
    """And the process group is gone before the exit on every rank, as in test_ppo_atari_multigpu.py's test of the
    name: torch.distributed.nn held the learner's group past its destroy_process_group, and the actors never called it.
    The resumed run is 2 updates: past the one it starts from, and each logged once."""
    run = subprocess.run(
        torchrun(
            *SMALL_RUN,
            "--save-every",
            "10",
            nproc=3,
            script=group_watcher(SCRIPT),
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("the group is gone") == 3, run.stdout
    assert [line for line in run.stdout.splitlines() if line.startswith("step ")][-1].startswith("step 800/800 ")
    ranks = actors_line(run.stdout)
    assert set(ranks) == {1, 2} and all(u == 40 and g > 0 for u, g in ranks.values())  # round-robin; both finish games
    (ckpt,) = glob.glob("runs/*/checkpoint.pt")
    run_dir = os.path.dirname(ckpt)
    assert len(read_scalars(run_dir, "charts/episodic_return")) == sum(g for _, g in ranks.values())
    assert torch.load(ckpt, weights_only=False)["update"] == 20

    resumed = subprocess.run(
        torchrun("--resume", ckpt, "--total-timesteps", "880"), capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming" in resumed.stderr and "step 880/880 " in resumed.stdout
    assert actors_line(resumed.stdout).keys() == {1} and actors_line(resumed.stdout)[1][0] == 8  # 2 updates x 4
    assert torch.load(ckpt, weights_only=False)["update"] == 22
    assert len(read_scalars(run_dir, "charts/policy_lag")) == 22  # updates 1-20, then 21-22, each logged once


NAN_AT_THE_THIRD_UPDATE = """import torch
real_step, steps = torch.optim.RMSprop.step, []
def step(self, *a, **kw):  # the learner's third update leaves a nan in its first weight
    out = real_step(self, *a, **kw)
    steps.append(1)
    if len(steps) == 3:
        with torch.no_grad():
            weight = self.param_groups[0]["params"][0]
            weight[(0,) * weight.dim()] = float("nan")
    return out
torch.optim.RMSprop.step = step
"""


def test_nonfinite_weights_stop_every_rank_in_one_line_and_keep_the_last_checkpoint():
    """Issue 51.1 under torchrun: the learner's check stops it at update 3 in one line, its actor stops with it, and the
    checkpoint of update 2 stays; --eval-checkpoint refuses it made non-finite (tests/promises.py's check)."""
    run = subprocess.run(
        torchrun(
            *SMALL_RUN,
            "--save-every",
            "1",
            script=processes.driver(SCRIPT, NAN_AT_THE_THIRD_UPDATE),
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    (path,) = glob.glob("runs/*/checkpoint.pt")
    assert run.returncode != 0 and script_lines(run.stderr) == [
        f"impala_vtrace_distributed.py: error: iteration 3: the weights hold nan; the last finite checkpoint is {path} "
        "(iteration 2); likely too high a --learning-rate or --max-grad-norm"
    ], run.stderr[-3000:]
    assert torch.load(path, weights_only=False)["update"] == 2
    assert_nonfinite_weights_refused(ivd, path, resume=False)


# ---- faults and signals --------------------------------------------------------------------------------------------

LONG_RUN = (
    "--no-cuda",
    "--batch-size",
    "2",
    "--unroll-length",
    "5",
    "--total-timesteps",
    "1000000",
    "--save-model",
    "--save-every",
    "1",
)


def script_lines(stderr):
    return processes.script_lines(stderr, "impala_vtrace_distributed.py")


def stop_torchrun(how):
    """A long torchrun job (the learner and 1 actor) stopped by `how(job, workers)` once it has checkpointed:
    processes.stop_job."""
    return stop_job(torchrun(*LONG_RUN, "--actor-timeout", "30"), how)


def rank_pid(workers, rank):
    (pid,) = [pid for pid in workers if f"\0RANK={rank}\0".encode() in open(f"/proc/{pid}/environ", "rb").read()]
    return pid


def test_killed_actor_under_torchrun_stops_the_job():
    code, stderr, took = stop_torchrun(lambda job, workers: os.kill(rank_pid(workers, 1), signal.SIGKILL))
    assert code != 0 and took < 30
    assert "rank      : 1" in stderr and "exitcode  : -9" in stderr  # torchrun names the rank that died
    # the learner's own line: the lost connection (or torchrun's SIGTERM, if that came first)
    (line,) = script_lines(stderr)
    assert re.fullmatch(r"impala_vtrace_distributed.py: (error: rank 0 lost a rank \(.+\)|interrupted; .*)", line)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_to_torchrun_stops_every_rank(sig):
    code, stderr, took = stop_torchrun(lambda job, workers: job.send_signal(sig))
    assert code != 0 and took < 30
    (ckpt,) = glob.glob("runs/*/checkpoint.pt")  # issue 75: the learner's line names the checkpoint it keeps
    kept = torch.load(ckpt, weights_only=False)["update"]
    assert script_lines(stderr) == [
        f"impala_vtrace_distributed.py: interrupted; the actor ranks stop with the learner; the last checkpoint is "
        f"{ckpt} (update {kept}); continue with: torchrun ... impala_vtrace_distributed.py --resume {ckpt}"
    ], stderr[-3000:]


def test_the_learners_log_writer_is_impala_vtrace_pys_so_a_ctrl_c_inside_a_write_exits_within_its_flush_interval():
    """test_impala_vtrace.py runs that Ctrl-C (a SIGINT raised inside the writer's Condition.notify); it depends on the
    writer's flush_secs and on its close() in the finally of train(), which this learner must keep as that one has them.
    (Run here under torchrun too, it cost three ranks' start for the same code, and its 30 s bound failed under load.)"""
    lines = {}
    for path in (SCRIPT, os.path.join(ROOT, "impala_vtrace.py")):
        with open(path) as f:
            source = f.read()
        lines[path] = [
            line.strip()
            for line in source.splitlines()
            if line.strip().startswith(("writer = SummaryWriter(", "writer.close()"))
        ]
        lines[path].sort(key=lambda line: not line.startswith("writer = "))  # the writer's line first, wherever it is
        assert len(lines[path]) == 2 and "flush_secs=10" in lines[path][0], (path, lines[path])
        (fn,) = [f for f in ast.parse(source).body if isinstance(f, ast.FunctionDef) and f.name == "train"]
        finals = [ast.unparse(n) for t in ast.walk(fn) if isinstance(t, ast.Try) for n in t.finalbody]
        assert "writer.close()" in finals, path  # closed on the way out of a Ctrl-C as well
    assert len(set(map(tuple, lines.values()))) == 1, lines


@pytest.mark.parametrize("world, victim, sig", [(3, 2, signal.SIGKILL), (2, 0, signal.SIGKILL), (2, 1, signal.SIGSTOP)])
def test_dead_or_stuck_rank_without_an_agent_stops_the_others_with_one_line(world, victim, sig):
    # as on another node: no torchrun agent watches the rank, the others see it themselves: a dead one at once (its
    # connection closes), a stuck one (SIGSTOP) after --actor-timeout s. A dead actor of two: the learner loses it and
    # the other actor then loses the learner; a dead learner: its actor; a stuck actor: the learner's wait times out
    port, procs, command = free_port(), [], [sys.executable, SCRIPT, *LONG_RUN, "--actor-timeout", "10"]
    try:
        for rank in range(world):
            procs.append(
                subprocess.Popen(
                    command, env=rank_env(rank, world, port), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
                )
            )
        assert wait_for(lambda: glob.glob("runs/*/checkpoint.pt"), 90), "no update finished"
        procs[victim].send_signal(sig)
        start = time.time()
        errors = {rank: p.communicate(timeout=60)[1] for rank, p in enumerate(procs) if rank != victim}
        assert time.time() - start < 30
    finally:
        for p in procs:
            p.kill()
            p.wait()
    for rank, stderr in errors.items():
        assert procs[rank].returncode == 1 and "Traceback" not in stderr
        # a stuck rank, the learner's only actor: the learner's wait on it times out
        reason = "Timed out waiting 10000ms" if sig == signal.SIGSTOP else "Connection|peer"
        assert re.fullmatch(
            rf"impala_vtrace_distributed.py: error: rank {rank} lost a rank \(.*({reason}).*\)",
            stderr.strip().splitlines()[-1],
        ), stderr[-2000:]


# ---- bad input -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, env, message",
    [
        ({}, {}, r"^WORLD_SIZE 1 leaves no actor rank: run it with torchrun --nproc_per_node=3 impala_vtrace_distrib"),
        ({"sync": True}, {"WORLD_SIZE": "4"}, r"--sync takes one unroll per actor: --batch-size 3$"),
        ({"env_id": "CartPole-v1"}, {"WORLD_SIZE": "3"}, "not an Atari NoFrameskip id"),
        ({"env_id": "BreakoutNoFrameskip-v0"}, {"WORLD_SIZE": "3"}, "not an Atari NoFrameskip id"),  # sticky actions
        ({"batch_size": 6, "num_envs_per_actor": 4}, {"WORLD_SIZE": "3"}, "not divisible"),
        ({"actor_timeout": 0.0}, {"WORLD_SIZE": "3"}, "--actor-timeout must be a finite number > 0"),
    ],
)
def test_bad_input_rejected_before_anything_starts(monkeypatch, kw, env, message):
    for key, value in {"RANK": "0", **env}.items():
        monkeypatch.setenv(key, value)
    assert_rejected_before_training(ivd, tiny(ivd, **kw), message)


def test_cli_without_torchrun_says_how_to_launch_and_bad_flags_are_one_line_under_torchrun():
    """Without torchrun: the command line run in this process (processes.run_cli); under it, a job of 2 ranks."""
    code, stdout, stderr = processes.run_cli("impala_vtrace_distributed.py", ["--no-cuda"], timeout=60)
    assert code == 1 and stdout == "" and os.listdir(".") == []
    assert stderr.strip().splitlines() == [
        "impala_vtrace_distributed.py: error: WORLD_SIZE 1 leaves no actor rank: run it with torchrun "
        "--nproc_per_node=3 impala_vtrace_distributed.py"
    ]
    start = time.time()
    bad = subprocess.run(torchrun("--no-cuda", "--c-bar", "2"), capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and time.time() - start < 40 and not os.path.exists("runs")
    assert script_lines(bad.stderr) == [
        "impala_vtrace_distributed.py: error: --c-bar 2.0 exceeds --rho-bar 1.0; V-trace assumes c_bar <= rho_bar"
    ]


def test_the_memory_check_counts_every_rank_on_the_machine(monkeypatch):
    """(The check itself, in every script: test_every_script.py.)"""
    machine_memory(monkeypatch, 8e9)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "100")  # torchrun's ranks on this machine: 100 of ~400 MB exceed its 8 GB
    with pytest.raises(ivd.ConfigError, match="needs about 40.5 GB"):
        ivd.check_args(ivd.Args())
    # the replay's unrolls count too, and the message names them (it said "envs and unrolls" after the replay came)
    machine_memory(monkeypatch, 1e12)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    with pytest.raises(ivd.ConfigError, match=r"\(envs, unrolls and the replay\).*or a smaller --replay-size"):
        ivd.check_args(ivd.Args(replay_fraction=0.5, replay_size=10**8))


def test_a_replay_runs_budget_counts_new_steps():
    """As impala_vtrace.py's (tested there on a run): with --replay-fraction 0.5 an update takes half a batch of new
    steps, 20 here, so a budget of 20 runs, and a checkpoint at update 2 resumes to 60 (both refused at a batch's 40)."""
    ivd.check_args(tiny(ivd, replay_fraction=0.5, total_timesteps=10 * 2))
    ivd.check_args(tiny(ivd, replay_fraction=0.5, total_timesteps=10 * 2 * 3), {"update": 2})
    with pytest.raises(ivd.ConfigError, match=r"leaves no update to run \(one is 20 steps; the checkpoint is at update 3"):
        ivd.check_args(tiny(ivd, replay_fraction=0.5, total_timesteps=10 * 2 * 3), {"update": 3})


@pytest.mark.parametrize("case", ["MASTER_ADDR unset", "port in use"])
def test_a_rank_started_by_hand_that_cannot_start_the_process_group_is_one_line_and_writes_nothing(case):
    """Issue 37.7: without torchrun, MASTER_ADDR unset was a ValueError traceback and a port in use a DistNetworkError
    one, and both left an empty run directory. The learner's process group now starts before anything is written."""
    assert_process_group_failure_is_one_line(SCRIPT, case)
