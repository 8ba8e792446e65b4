"""Tests of ppo_atari_multigpu.py on CPU (gloo): two processes make the update of one process with all the envs,
every rank's games reach rank 0's log, torchrun runs, checkpoints and resumes exactly, and a lost process stops the job.
In a world of one (no torchrun) it is ppo_atari.py, which test_ppo_atari.py tests; here only what differs.
"""

import dataclasses
import glob
import math
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import ale_py
import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest import ROOT
from processes import (
    alive,
    assert_process_group_failure_is_one_line,
    descendants,
    driver,
    free_port,
    group_watcher,
    rank_env,
    run_cli,
    run_ranks,
    script_lines,
    stop_job,
    wait_for,
)
from promises import (
    assert_cli_error_is_one_line,
    assert_envs_of_another_version_refused,
    assert_resumes_with_fresh_episodes,
    cli_flags,
    machine_memory,
    read_scalars,
)
from tiny import tiny

import ppo_atari
import ppo_atari_multigpu as mg

SCRIPT = os.path.join(ROOT, "ppo_atari_multigpu.py")


def parameters(agent):
    return {n: p.detach().clone() for n, p in agent.named_parameters()}


# ---- D1, D2: N processes make the update of one process with all the envs --------------------------------------------

T, N, EPOCHS, MINIBATCHES = 8, 4, 2, 2


def update_args():
    args = tiny(mg, num_envs=N, num_steps=T, num_minibatches=MINIBATCHES, update_epochs=EPOCHS)
    args.batch_size, args.minibatch_size = N * T, N * T // MINIBATCHES  # global, as train() sets them
    return args


def share_of_rollout(agent, rank, world):
    """Rank `rank`'s envs' share of one fixed rollout of N envs x T steps (flattened as train() flattens it)."""
    g = torch.Generator().manual_seed(0)
    obs, actions = (
        torch.randint(0, 256, (T, N, 4, 84, 84), generator=g, dtype=torch.uint8),
        torch.randint(0, 9, (T, N), generator=g),
    )
    advantages, returns = torch.randn(T, N, generator=g) * 3 + 1, torch.randn(T, N, generator=g)
    with torch.no_grad():
        _, logprobs, _, values = agent.get_action_and_value(obs.reshape(-1, 4, 84, 84), actions.reshape(-1))
    b = {
        "obs": obs,
        "actions": actions,
        "logprobs": logprobs.view(T, N) - 0.05 * advantages.sign(),
        "values": values.view(T, N),
        "advantages": advantages,
        "returns": returns,
    }
    n = N // world
    return {k: v[:, rank * n : (rank + 1) * n].reshape((-1,) + v.shape[2:]) for k, v in b.items()}


def update_as_rank(rank, world):
    """One update() on this rank's share, after D2's broadcast (each rank built its agent from another seed);
    returns the parameters as built, after the broadcast, and after the update."""
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    torch.manual_seed(10 + rank)
    agent = mg.Agent(4, 9, channels_last=True)
    built = parameters(agent)
    mg.data_parallel(agent)
    start = parameters(agent)
    optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5, fused=True)
    b = share_of_rollout(agent, rank, world)
    torch.manual_seed(1)  # every rank draws the same permutation of its own share
    mg.update(agent, optimizer, b, update_args())
    return built, start, parameters(agent)


def test_two_processes_make_the_update_of_one_with_all_envs(monkeypatch):
    ranks = run_ranks(update_as_rank, method="fork")  # forked: a spawned rank imports torch again (~4 s of CPU)
    (built0, start0, after0), (built1, start1, after1) = ranks
    assert any(not torch.equal(built0[k], built1[k]) for k in built0)  # built differently ...
    assert all(torch.equal(start0[k], start1[k]) and torch.equal(start0[k], built0[k]) for k in start0)  # ... D2's broadcast

    # one process, all N envs: the two shares side by side, and minibatch k = the union of the ranks' minibatches k
    torch.manual_seed(10)
    agent = mg.Agent(4, 9, channels_last=True)
    assert all(torch.equal(p, start0[k]) for k, p in parameters(agent).items())
    shares = [share_of_rollout(agent, rank, 2) for rank in range(2)]
    b = {k: torch.cat([s[k] for s in shares]) for k in shares[0]}
    torch.manual_seed(1)
    share_len = N * T // 2
    perms = [torch.randperm(share_len).view(MINIBATCHES, -1) for _ in range(EPOCHS)]
    joint = iter([torch.cat([p, p + share_len], dim=1).reshape(-1) for p in perms])
    monkeypatch.setattr(torch, "randperm", lambda n, **kw: next(joint))
    optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5, fused=True)
    mg.update(agent, optimizer, b, update_args())
    alone = parameters(agent)
    for k in alone:
        assert torch.equal(after0[k], after1[k]), k  # the ranks stay identical
        torch.testing.assert_close(after0[k], alone[k], rtol=0, atol=1e-6, msg=k)
        assert (alone[k] - start0[k]).abs().max() > 1e-5, k  # the update moved every tensor


def test_world_of_one_is_ppo_atari():
    """Without torchrun the script is ppo_atari.py: same episodes, same losses (to the rounding of detail 7's
    two-pass normalisation)."""
    args = dict(num_steps=128, total_timesteps=2 * 128 * 2)
    ours, theirs = mg.train(tiny(mg, **args)), ppo_atari.train(tiny(ppo_atari, **args))
    assert ours["episodic_return"] == theirs["episodic_return"] and ours["episodic_return"]
    for a, b in zip(ours["losses"], theirs["losses"]):
        np.testing.assert_allclose([a[k] for k in b], list(b.values()), rtol=1e-4, atol=1e-6)
    assert ours["run_name"].split("__")[1] == "ppo_atari_multigpu"


# ---- D3: every rank's games reach rank 0's log -----------------------------------------------------------------------


def train_as_rank(rank, world):
    """A short training run as one rank; returns the raw scores of the games its emulators played (tallied
    below every wrapper), what train() returned, and what rank 0 logged."""
    games, current, original_step = [], {}, ale_py.env.AtariEnv.step

    def recording_step(self, action, *a, **kw):
        obs, reward, terminated, truncated, info = original_step(self, action, *a, **kw)
        current[id(self)] = current.get(id(self), 0.0) + reward
        if terminated or truncated:
            games.append(current.pop(id(self)))
        return obs, reward, terminated, truncated, info

    ale_py.env.AtariEnv.step = recording_step
    out = mg.train(tiny(mg, num_envs=4, num_steps=200, num_minibatches=2, total_timesteps=4 * 200 * 2))
    logged = read_scalars(out["run_dir"], "charts/episodic_return") if rank == 0 else None
    return {
        "games": games,
        "returns": out["episodic_return"],
        "losses": out["losses"],
        "global_step": out["global_step"],
        "parameters": parameters(out["agent"]),
        "logged": logged,
        "run_dir": out["run_dir"],
    }


def test_every_rank_games_are_logged_by_rank_0():
    rank0, rank1 = run_ranks(train_as_rank, method="fork")  # forked, as above: each patches its own AtariEnv.step
    assert rank0["games"] and rank1["games"]  # both ranks finished games
    assert sorted(rank0["logged"]) == sorted(rank0["returns"]) == sorted(rank0["games"] + rank1["games"])
    assert rank1["returns"] == rank0["returns"] and rank1["losses"] == rank0["losses"]  # one history
    assert rank0["global_step"] == 4 * 200 * 2 and rank0["run_dir"] and rank1["run_dir"] is None
    assert all(torch.equal(p, rank1["parameters"][k]) for k, p in rank0["parameters"].items())  # still one agent


def diverge_as_rank(rank, world):
    """A run whose rank 1 alone gets a nan loss from the second iteration on; what each rank's train() raised."""
    real_losses, calls = mg.ppo_losses, []

    def nan_on_rank_1(*a):  # one call a minibatch: 2 an iteration
        calls.append(1)
        loss, *rest = real_losses(*a)
        return (loss * math.nan if rank == 1 and len(calls) > 2 else loss, *rest)

    mg.ppo_losses = nan_on_rank_1
    try:
        mg.train(tiny(mg, save_model=True, save_every=1))
    except mg.ConfigError as e:
        return str(e)


def test_a_nan_on_one_rank_stops_every_rank_at_the_same_iteration():
    """Issue 51.1: the all-reduced gradient carries one rank's nan to every rank's weights, so each rank's check stops it
    at iteration 2, none left waiting in a collective; rank 0 keeps the checkpoint of iteration 1 (run_ranks: exit 0)."""
    rank0, rank1 = run_ranks(diverge_as_rank, method="fork")
    (path,) = glob.glob("runs/*/checkpoint.pt")
    # the second minibatch's value loss, the world's mean, is the first quantity found non-finite on both
    assert rank0.startswith(f"iteration 2: the value loss is nan; the last finite checkpoint is {path} (iteration 1)")
    assert rank1.startswith("iteration 2: the value loss is nan; no checkpoint was saved")  # rank 1 saves none
    assert torch.load(path, weights_only=False)["iteration"] == 1


def test_resume_without_env_state_continues_with_fresh_games_and_another_versions_envs_refused(monkeypatch, capsys):
    """In a world of one (tests/promises.py's checks): envs that cannot be pickled (a video recorder) leave the checkpoint
    without them, and a resume starts new games; envs another version of the file pickled are refused in one line."""
    assert_resumes_with_fresh_episodes(mg, tiny(mg, save_model=True, save_every=1), capsys, monkeypatch, "get_game")
    saved = mg.train(tiny(mg, save_model=True, total_timesteps=2 * 32))
    assert_envs_of_another_version_refused(mg, saved, lambda envs, wrapper: [wrapper] * len(envs))  # one pickle an env


# ---- torchrun --------------------------------------------------------------------------------------------------------


def torchrun(args, nproc=2, script=SCRIPT):
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        script,
        *cli_flags(args),
    ]


KEEP_ITERATION_2 = """import torch
real_save = torch.save
def save(obj, f, *a, **kw):  # save_checkpoint's: iteration 2's checkpoint kept, as a run stopped after it leaves it
    real_save(obj, f, *a, **kw)
    if isinstance(obj, dict) and obj.get("iteration") == 2:
        real_save(obj, "iteration2.pt")
torch.save = save
"""


def test_torchrun_trains_checkpoints_and_resumes_exactly_and_the_process_group_is_gone_before_the_exit(monkeypatch):
    """A run of 3 iterations, then its checkpoint of iteration 2 resumed: the log reads as the uninterrupted run's, every
    loss and game of iteration 3 the same (both ranks' games and sampling streams were saved), and so does the final
    checkpoint (the weights, and Adam's moments, which took iteration 3's gradients at its learning rate of 0). One
    process resumes the two ranks' games too (D1: the envs split over any world that splits them).
    The group: CI's abort at the end of a torchrun job (rank 1 "terminate called without an active exception"): the
    first optimizer imports torch.distributed.nn, whose functions' defaults then hold the group, so
    destroy_process_group left it and its gloo threads running into the exit (processes.group_watcher)."""
    args = tiny(mg, num_steps=128, total_timesteps=2 * 128 * 3, save_model=True, save_every=1)
    run = subprocess.run(torchrun(args, script=driver(SCRIPT, KEEP_ITERATION_2)), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    progress = [line for line in run.stdout.splitlines() if line.startswith("step ")]
    assert len(progress) == 1 and progress[0].startswith("step 768/768 ")  # from rank 0 alone
    (ckpt,) = glob.glob("runs/*/checkpoint.pt")
    state = torch.load("iteration2.pt", weights_only=False)
    assert state["iteration"] == 2 and state["script"] == "ppo_atari_multigpu.py" and state["args"]["local_num_envs"] == 1
    assert len(state["envs"]) == len(state["next_obs"]) == len(state["rngs"]) == 2  # both ranks' games and streams
    run_dir, tags = (
        os.path.dirname(ckpt),
        [
            "charts/episodic_return",
            "charts/learning_rate",
            "losses/value_loss",
            "losses/policy_loss",
            "losses/entropy",
            "losses/approx_kl",
            "losses/clipfrac",
        ],
    )
    full, final = {tag: read_scalars(run_dir, tag) for tag in tags}, torch.load(ckpt, weights_only=False)
    assert full["charts/episodic_return"]  # whose: test_every_rank_games_are_logged_by_rank_0

    resume = subprocess.run(
        torchrun(mg.Args(resume="iteration2.pt"), script=group_watcher(SCRIPT)), capture_output=True, text=True, timeout=120
    )
    assert resume.returncode == 0, resume.stderr[-3000:]
    assert resume.stdout.count("the group is gone") == 2, resume.stdout
    assert "step 768/768 " in resume.stdout
    # issue 37.10: its notice once, from rank 0, not once per rank
    assert resume.stderr.count(": resuming ") == 1 and "holds no env state" not in resume.stderr
    # iterations 1, 2, then the resumed 3, each logged once, each value the uninterrupted run's
    assert full["charts/learning_rate"] == pytest.approx([2.5e-4, 1.25e-4, 0.0])
    assert {tag: read_scalars(run_dir, tag) for tag in tags} == full
    resumed = torch.load(ckpt, weights_only=False)
    assert resumed["iteration"] == 3
    torch.testing.assert_close(resumed["model"], final["model"], rtol=0, atol=0)
    torch.testing.assert_close(resumed["optimizer"]["state"], final["optimizer"]["state"], rtol=0, atol=0)

    frames, init = [], gym.vector.SyncVectorEnv.__init__

    def init_and_record(self, *a, **kw):  # the frame each emulator is at as its envs are made
        init(self, *a, **kw)
        frames.append([env.unwrapped.ale.getEpisodeFrameNumber() for env in self.envs])

    monkeypatch.setattr(gym.vector.SyncVectorEnv, "__init__", init_and_record)
    # one process, in this one (run_cli: the script as __main__, the module whose names the torchrun ranks pickled)
    code, _, stderr = run_cli("ppo_atari_multigpu.py", ["--resume", "iteration2.pt"], timeout=120)
    assert code == 0 and "holds no env state" not in stderr, stderr[-3000:]
    assert frames[0] == [0, 0] and min(frames[1]) > 0  # the new games, then both ranks' saved ones, mid-play


# ---- a lost process stops the job ------------------------------------------------------------------------------------


def test_killing_one_rank_under_torchrun_stops_the_job():
    args = tiny(mg, num_steps=128, total_timesteps=2 * 128 * 1000, save_model=True, save_every=1)
    job = subprocess.Popen(torchrun(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    workers = []
    try:
        assert wait_for(lambda: glob.glob("runs/*/checkpoint.pt"), 90), "no iteration finished"
        workers = descendants(job.pid)
        (rank1,) = [pid for pid in workers if b"\0RANK=1\0" in open(f"/proc/{pid}/environ", "rb").read()]
        os.kill(rank1, signal.SIGKILL)
        killed = time.time()
        out, err = job.communicate(timeout=60)
        stopped = time.time() - killed
    finally:
        for pid in [job.pid] + workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert job.returncode != 0 and stopped < 30
    assert "exitcode  : -9" in err and "rank      : 1" in err  # torchrun names the rank that died
    assert not [pid for pid in workers if alive(pid)]  # no process left behind


def assert_names_the_checkpoint_it_keeps(stderr):
    """The script's one line (rank 0's) names the checkpoint on disk and the command that resumes it."""
    (ckpt,) = glob.glob("runs/*/checkpoint.pt")
    kept = torch.load(ckpt, weights_only=False)["iteration"]
    assert script_lines(stderr, "ppo_atari_multigpu.py") == [
        f"ppo_atari_multigpu.py: interrupted; the last checkpoint is {ckpt} (iteration {kept}); continue with: "
        f"torchrun ... ppo_atari_multigpu.py --resume {ckpt}"
    ], stderr[-3000:]


def test_ctrl_c_under_torchrun_is_one_line_and_keeps_the_checkpoint():
    """Issue 37.2: Ctrl-C in the terminal (SIGINT to torchrun and every rank) printed a KeyboardInterrupt traceback
    from every rank; issue 75: its one line did not name the checkpoint. Rank 0 now names it as ppo_atari.py does
    (torchrun's own traceback after it is torch's launcher's, which a script cannot change)."""
    args = tiny(mg, num_steps=128, total_timesteps=2 * 128 * 1000, save_model=True, save_every=1)
    code, stderr, took = stop_job(torchrun(args), lambda job, workers: os.killpg(job.pid, signal.SIGINT))
    assert code != 0 and took < 30 and "KeyboardInterrupt" not in stderr, stderr[-3000:]
    assert_names_the_checkpoint_it_keeps(stderr)


def test_sigterm_without_torchrun_names_the_checkpoint_and_exits_143():
    """Issue 75: one process without torchrun, stopped by SIGTERM (`kill`, a scheduler), exited 1 without naming its
    checkpoint; now it ends as ppo_atari.py does: the line, exit 143."""
    args = tiny(mg, num_steps=128, total_timesteps=2 * 128 * 1000, save_model=True, save_every=1)
    code, stderr, took = stop_job([sys.executable, SCRIPT, *cli_flags(args)], lambda job, workers: job.terminate())
    assert code == 143 and took < 30 and "Traceback" not in stderr, stderr[-3000:]
    assert_names_the_checkpoint_it_keeps(stderr)


def test_a_hung_rank_stops_the_other_with_a_one_line_error():
    """Without torchrun to stop it (e.g. on another node), a rank whose peer stops answering gives up after
    --dist-timeout with one line."""
    args = tiny(mg, num_steps=128, total_timesteps=2 * 128 * 1000, save_model=True, save_every=1, dist_timeout=5)
    port = free_port()
    ranks = [
        subprocess.Popen(
            [sys.executable, SCRIPT, *cli_flags(args)],
            env=rank_env(rank, 2, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    try:
        assert wait_for(lambda: glob.glob("runs/*/checkpoint.pt"), 90), "no iteration finished"
        os.kill(ranks[1].pid, signal.SIGSTOP)
        stopped = time.time()
        _, err = ranks[0].communicate(timeout=60)
        waited = time.time() - stopped
    finally:
        for proc in ranks:
            proc.kill()
            proc.communicate()
    assert ranks[0].returncode == 1 and waited < 30
    (line,) = [line for line in err.splitlines() if "error" in line.lower()]
    assert (
        line.startswith("ppo_atari_multigpu.py: error: rank 0 lost the other processes: ")
        and "Timed out waiting 5000ms" in line
    )
    assert "Traceback" not in err


# ---- bad input -------------------------------------------------------------------------------------------------------


def test_bad_input_is_one_line_from_the_first_process_of_each_node(monkeypatch):
    """Issue 37.3: only rank 0 spoke, so a rank that could not read --resume (a file one node sees and another does
    not) exited 1 in silence. The first process of each node (LOCAL_RANK 0) says what it found, naming its rank. Each
    command line runs in this process (processes.run_cli), under the environment torchrun gives that rank."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert_cli_error_is_one_line(
        "ppo_atari_multigpu.py",
        ["--num-envs", "3"],
        (
            "ppo_atari_multigpu.py: error: --num-envs 3 does not split over 2 processes into 4 equal minibatch shares; "
            "choose a multiple of 2, and --num-minibatches dividing num_envs / 2 * num_steps"
        ),
    )
    with monkeypatch.context() as rank_1:
        rank_1.setenv("RANK", "1")
        rank_1.setenv("LOCAL_RANK", "0")  # the first process of the second node
        code, _, stderr = run_cli("ppo_atari_multigpu.py", ["--resume", "elsewhere.pt"], timeout=60)
        assert code == 1 and "Traceback" not in stderr
        assert (
            stderr.startswith(
                "ppo_atari_multigpu.py: error: rank 1: checkpoint 'elsewhere.pt' could not be read (FileNotFoundError: "
            )
            and stderr.count("\n") == 1
        )
        rank_1.setenv("LOCAL_RANK", "1")  # the second process of the first node
        code, _, stderr = run_cli("ppo_atari_multigpu.py", ["--num-envs", "3"], timeout=60)
        assert code == 1 and stderr == ""  # rank 0 says it on this node's output
    with pytest.raises(mg.ConfigError, match="does not split"):  # every rank checks before the process group starts
        mg.train(tiny(mg, num_envs=2, num_steps=3))  # 1 env x 3 steps per process: not 2 equal minibatch shares
    assert not os.path.exists("runs")


def test_resuming_on_a_number_of_processes_that_does_not_split_the_envs_says_what_fits(monkeypatch):
    """Issue 37.10: resuming 2 envs on 3 processes said "choose a multiple of 3", which --resume then refused as a
    changed --num-envs."""
    args = dataclasses.asdict(tiny(mg, num_envs=2))
    torch.save({"script": "ppo_atari_multigpu.py", "args": args, "iteration": 1, "optimizer": {}}, "ckpt.pt")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(mg.ConfigError) as refused:
        mg.train(mg.Args(resume="ckpt.pt"))
    assert str(refused.value) == (
        "the checkpoint's --num-envs 2 does not split over 3 processes into 2 equal minibatch "
        "shares; resume it on one of these numbers of processes: 1, 2; or start a new run"
    )
    assert not os.path.exists("runs")


@pytest.mark.parametrize("case", ["MASTER_ADDR unset", "port in use"])
def test_a_rank_started_by_hand_that_cannot_start_the_process_group_is_one_line_and_writes_nothing(case):
    """Issue 37.7: without torchrun, MASTER_ADDR unset was a ValueError traceback, and both cases left an empty run
    directory. The process group now starts before anything is written."""
    assert_process_group_failure_is_one_line(SCRIPT, case, ["--num-envs", "2", "--num-minibatches", "2"])


# ---- hack safety in a world of one (issue 19) ------------------------------------------------------------------------


def test_the_memory_check_counts_this_ranks_share_of_the_envs(monkeypatch):
    """(The check itself, in every script: test_every_script.py.)"""
    machine_memory(monkeypatch, 8e9)
    monkeypatch.setenv("WORLD_SIZE", "8000")  # one rank a node: this one holds 1 of the 8000 envs (the 8 GB hold 200)
    mg.check_args(mg.Args(num_envs=8000))
