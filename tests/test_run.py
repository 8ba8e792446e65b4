"""Tests of benchmark/tools/run.py, the runner: each (env, seed) once, finished runs skipped, a stopped run continued
from its checkpoint, a failed one named with its log's tail, an edited script's runs not taken for the new code, a
signal that stops the whole sweep, and bad input refused in one line. It runs tests/fakes.py's fake script, which
logs known returns as the real scripts do, so no training is needed."""

import hashlib
import os
import signal
import subprocess
import time

import numpy as np
import pytest
from conftest import next_second
from fakes import calls, runner_summary
from processes import alive, wait_for

from benchmark import runs
from benchmark.processes import root_on_path, tool
from benchmark.tools import run


def test_runner_runs_each_env_seed_once_and_skips_finished_runs(fake, capsys):
    extra = ["--total-timesteps", "1500"]
    argv = ["--script", fake, "--env-ids", "A-v0", "B-v0", "--seeds", "1", "2", "--workers", "2", "--", *extra]
    assert run.main(argv) == 0
    assert sorted(c.split(" ")[0] + c.split(" ")[1] for c in calls()) == ["A-v01", "A-v02", "B-v01", "B-v02"]
    threads = max(1, runs.available_cores() // 2)  # 2 workers share the cores
    # the cap is the environment's; --torch-threads stays the script's own default
    assert all(c.endswith(f"torch_threads=None omp={threads}") for c in calls())
    out = capsys.readouterr().out
    assert sorted(line.split(":")[0][:5] for line in out.splitlines()) == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"]
    assert "fake.py B-v0 seed 2: ok" in out

    s = runner_summary("B-v0", 2, extra)
    # 150 episodes with returns 200..349: the final return is the mean of the last 100 (250..349)
    assert s["ok"] and s["exit_status"] == 0 and s["episodes"] == 150
    assert s["final_return"] == pytest.approx(np.mean(np.arange(250, 350)))
    assert s["global_step"] == 1500 and s["steps_per_s"] > 0 and s["env_id"] == "B-v0" and s["seed"] == 2
    assert s["args"] == extra and s["machine"]["cores"] == runs.available_cores()
    assert os.path.isdir(os.path.join("runs", s["tb_dir"])) and s["total_timesteps"] == "1500"

    # second invocation: everything finished, nothing runs again
    assert run.main(argv) == 0
    assert len(calls()) == 4
    assert capsys.readouterr().out.count("already finished, skipped") == 4

    # an interrupted sweep (one summary missing) resumes with only that run
    os.remove(runs.summary_path("runs", fake, "A-v0", 2, extra))
    assert run.main(argv) == 0
    assert calls()[4:] == [f"A-v0 2 torch_threads=None omp={threads}"]

    # other extra args are another experiment, with its own summaries and exp name
    other = ["--total-timesteps", "1000"]
    assert runs.summary_path("runs", fake, "A-v0", 1, other) != runs.summary_path("runs", fake, "A-v0", 1, extra)
    assert runs.exp_name_for(fake, other) != s["exp_name"] and s["exp_name"].startswith("fake-")


def test_runner_continues_a_run_that_stopped_from_its_checkpoint(fake, capsys):
    extra = ["--total-timesteps", "150", "--save-model", "--save-every", "5"]
    argv = ["--script", fake, "--env-ids", "Crashy-v0", "--seeds", "1", "--", *extra]
    # 15 episodes: the first attempt logs 7, leaves a checkpoint after 5 and crashes
    assert run.main(argv) == 1
    first = runner_summary("Crashy-v0", 1, extra)
    assert not first["ok"] and first["episodes"] == 7 and first["resumed_from"] is None
    next_second()  # a later event file, as a real rerun's (see next_second)
    assert run.main(argv) == 0
    s = runner_summary("Crashy-v0", 1, extra)
    checkpoint = os.path.join("runs", first["tb_dir"], "checkpoint.pt")
    assert calls("resumed.txt") == [os.path.abspath(checkpoint)]
    assert s["ok"] and s["tb_dir"] == first["tb_dir"]
    assert s["resumed_from"] == os.path.join(first["tb_dir"], "checkpoint.pt")
    # every episode once, in one run dir: episodes 6 and 7, logged before the crash, were purged and logged again
    assert s["episodes"] == 15 and s["final_return"] == pytest.approx(np.mean(np.arange(100, 115)))
    assert runs.read_run(os.path.join("runs", s["tb_dir"]))["returns"] == list(range(100, 115))
    assert s["steps_per_s"] == 123.0  # the script's own charts/SPS: the wall time covers only the last part
    with open(s["log_path"]) as f:  # both parts' starts, commits and commands, the second with --resume
        starts = [line for line in f if line.startswith(("# ", "$ "))]
    assert [line[0] for line in starts] == ["#", "$", "#", "$"] and "--resume" in starts[3]
    assert f"commit {s['git_commit']}" in starts[2]
    here = runs.machine_str(runs.machine_info())
    assert starts[0].endswith(f" machine: {here}\n") and starts[2].endswith(f" machine: {here}\n")
    # the machines a report names come from the log: every part's, and also for a run that left no summary (stopped
    # at a budget by a signal); a run with neither names none
    (rec,) = runs.collect("runs", unfinished=True)
    assert rec["machine"] == here
    os.remove(runs.summary_path("runs", fake, "Crashy-v0", 1, extra))
    with open(s["log_path"]) as f:
        log = f.read()
    with open(s["log_path"], "w") as f:
        f.write(log.replace(f" machine: {here}\n", " machine: 8 cores, Another CPU, no GPU\n", 1))
    (rec,) = runs.collect("runs", unfinished=True)
    assert rec["machine"] == "; ".join(sorted([here, "8 cores, Another CPU, no GPU"]))
    os.remove(s["log_path"])
    (rec,) = runs.collect("runs", unfinished=True)
    assert rec["machine"] is None
    assert "Crashy-v0 seed 1: ok" in capsys.readouterr().out


def test_a_finished_run_of_an_edited_script_is_not_taken_for_the_new_code(fake, capsys):
    """Issue 71: the summaries record the script's sha256; after an edit the same sweep stops in one line before any run
    starts, --reuse-changed keeps the old results (said), --rerun-changed moves them to runs/superseded/ and runs again."""
    extra = ["--total-timesteps", "100"]
    argv = ["--script", fake, "--env-ids", "A-v0", "--seeds", "1", "2", "--", *extra]
    assert run.main(argv) == 0 and len(calls()) == 2
    before = {seed: runner_summary("A-v0", seed, extra) for seed in (1, 2)}
    assert before[1]["script_sha256"] == runs.script_digest(fake) and before[1]["script_git"] is None  # not in git
    capsys.readouterr()
    with open(fake, "a") as f:
        f.write("# an edit\n")
    assert run.main(argv) == 2 and len(calls()) == 2  # nothing ran
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("run.py: error: fake.py changed since 2 of these runs finished")
    assert f"{before[1]['script_sha256']} then, {runs.script_digest(fake)} now" in err and "--reuse-changed" in err
    assert run.main([*argv[:-3], "--reuse-changed", "--", *extra]) == 0
    assert len(calls()) == 2 and capsys.readouterr().out.count("skipped (with other code: --reuse-changed)") == 2
    assert run.main([*argv[:-3], "--rerun-changed", "--", *extra]) == 0 and len(calls()) == 4
    after = runner_summary("A-v0", 1, extra)
    assert after["script_sha256"] == runs.script_digest(fake) != before[1]["script_sha256"]
    moved = os.listdir(os.path.join("runs", "superseded"))
    assert len(moved) == 1 and sorted(os.listdir(os.path.join("runs", "superseded", moved[0]))) == sorted(
        [os.path.basename(runs.summary_path("runs", fake, "A-v0", s, extra)) for s in (1, 2)]
        + [os.path.basename(before[s]["tb_dir"]) for s in (1, 2)]
    )
    assert [r["script_sha256"] for r in runs.collect("runs")] == [after["script_sha256"]] * 2  # the old runs unseen
    assert run.main(argv) == 0 and len(calls()) == 4  # now the same code: skipped


def test_the_summary_says_what_git_has_of_the_script(tmp_path):
    """committed, modified or untracked: git's word on the script's own file, which the commit alone does not give."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 1\n")
    subprocess.run(git + ["add", "a.py", "b.py"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "a"], check=True)
    (tmp_path / "b.py").write_text("y = 2\n")
    (tmp_path / "c.py").write_text("z = 1\n")
    states = [runs.script_git_state(str(tmp_path / n)) for n in ("a.py", "b.py", "c.py")]
    assert states == ["committed", "modified", "untracked"]
    assert runs.script_digest(str(tmp_path / "a.py")) == hashlib.sha256(b"x = 1\n").hexdigest()[:12]


def test_a_run_that_finished_unrecorded_is_recorded_by_the_rerun_not_failed(fake, capsys):
    """Issue 37.1: the runner killed after its run ended but before the summary was written (or a run that outlived
    its runner): the rerun's --resume of the final checkpoint was refused, and every rerun failed the same way."""
    extra = ["--total-timesteps", "150", "--save-model", "--save-every", "5"]
    argv = ["--script", fake, "--env-ids", "A-v0", "--seeds", "1", "--", *extra]
    assert run.main(argv) == 0
    first = runner_summary("A-v0", 1, extra)
    os.remove(runs.summary_path("runs", fake, "A-v0", 1, extra))
    for _ in range(2):  # recorded once, then skipped
        assert run.main(argv) == 0
    s = runner_summary("A-v0", 1, extra)
    assert len(calls()) == 2 and len(calls("resumed.txt")) == 1  # the script ran once more: it refused the checkpoint
    assert s["ok"] and s["finished_earlier"] and s["tb_dir"] == first["tb_dir"]
    assert (s["episodes"], s["final_return"], s["global_step"]) == (first["episodes"], first["final_return"], 150)
    out = capsys.readouterr().out
    assert "A-v0 seed 1: ok" in out and "already finished, skipped" in out and "FAILED" not in out


def test_kill_9_of_the_runner_stops_its_runs_and_a_rerun_finishes_the_sweep(fake):
    """Issue 37.1: each run lives in its own session, so it ran on after a SIGKILL of the runner, unrecorded, beside a
    rerun. The kernel now sends it SIGTERM when the runner dies."""
    argv = ["--script", fake, "--env-ids", "Sleepy-v0", "--seeds", "1", "--", "--total-timesteps", "100"]
    runner = subprocess.Popen(
        [*tool("benchmark.tools.run"), *argv],
        env=root_on_path(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pids = []
    try:
        assert wait_for(lambda: os.path.exists("pids.txt") and len(calls("pids.txt")) == 2, 60)
        pids = [int(p) for p in calls("pids.txt")]
        (script,) = [p for p in pids if b"fake.py" in open(f"/proc/{p}/cmdline", "rb").read()]
        runner.kill()
        runner.wait()
        assert wait_for(lambda: not alive(script), 10)
    finally:
        runner.kill()
        for p in pids:  # the helper that ignores SIGTERM (the real scripts stop theirs on SIGTERM)
            if alive(p):
                os.kill(p, signal.SIGKILL)
    open("awake", "w").close()
    assert run.main(argv) == 0 and runner_summary("Sleepy-v0", 1, ["--total-timesteps", "100"])["episodes"] == 10


def test_runner_reports_a_failed_run_with_its_log_tail_and_runs_the_others(fake, capsys):
    argv = [
        "--script",
        fake,
        "--env-ids",
        "Broken-v0",
        "A-v0",
        "--seeds",
        "1",
        "--workers",
        "1",
        "--",
        "--total-timesteps",
        "200",
    ]
    assert run.main(argv) == 1
    captured = capsys.readouterr()
    assert "fake.py Broken-v0 seed 1: FAILED (exit status 3)" in captured.out
    assert "    boom: intentional failure" in captured.out  # the log tail, indented
    assert "fake.py A-v0 seed 1: ok" in captured.out  # started after the failure
    assert "1 of 2 runs failed: Broken-v0 seed 1" in captured.err
    broken = runner_summary("Broken-v0", 1, ["--total-timesteps", "200"])
    assert not broken["ok"] and broken["exit_status"] == 3 and broken["tb_dir"] is None
    assert runner_summary("A-v0", 1, ["--total-timesteps", "200"])["ok"]

    # the failed run is retried on the next invocation, the finished one is not
    assert run.main(argv) == 1
    assert [c.split(" ")[0] for c in calls()] == ["Broken-v0", "A-v0", "Broken-v0"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env-ids", "A-v0", "--seeds", "1", "1"], "--seeds 1 is given twice"),
        (["--env-ids", "A-v0", "B-v0", "A-v0"], "--env-ids A-v0 is given twice"),
        (["--env-ids", "A-v0", "--workers", "0"], "--workers must be at least 1, got 0"),
        (["--env-ids", "A-v0", "--threads", "-1"], "--threads must be at least 1"),
        (["--env-ids", "A-v0", "--seeds", "-1"], "--seeds -1 is out of range"),
        (["--env-ids", "A-v0", "--runs-dir", "out"], "--runs-dir 'out' must end in 'runs'"),
        (["--env-ids", "A-v0", "--", "--seed=5"], "--seed=5 among the extra args: the runner sets"),
        (["--env-ids", "A-v0", "--python", "nowhere"], "--python 'nowhere' is not an executable"),
        (["--env-ids", "A-v0", "--script", "nope.py"], "script 'nope.py' not found"),
        # issue 75.6: a traceback from the first run's thread; a folder under a file cannot be made, by root either
        (["--env-ids", "A-v0", "--runs-dir", "fake.py/runs"], "--runs-dir fake.py/runs cannot be written to (Not a direct"),
    ],
)
def test_runner_refuses_bad_input_with_one_line_before_any_run(fake, capsys, args, message):
    assert run.main(["--script", fake, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"run.py: error: {message}") and err.count("\n") == 1
    assert not os.path.exists("calls.txt") and not os.path.exists("runs")


@pytest.mark.parametrize(
    "sig, workers, stubborn",
    [(signal.SIGINT, 1, False), (signal.SIGTERM, 2, False), (signal.SIGINT, 1, True)],
    ids=["SIGINT", "SIGTERM", "twice"],
)
def test_a_signal_stops_the_sweep_and_every_process_of_its_runs_and_a_rerun_resumes(fake, capsys, sig, workers, stubborn):
    """A-v0's quick runs, then Sleepy-v0's: the signal comes once `workers` of them sleep, each with a process of
    its own that ignores the signal. The runner ends by the signal, leaving no process and no run started after it.
    A run that ignores the signal itself is waited for, and killed at a second one."""
    if stubborn:
        open("stubborn", "w").close()
    seeds = [str(s) for s in range(1, workers + 2)]
    argv = [
        "--script",
        fake,
        "--env-ids",
        "A-v0",
        "Sleepy-v0",
        "--seeds",
        *seeds,
        "--workers",
        str(workers),
        "--",
        "--total-timesteps",
        "100",
    ]
    # with Ctrl-C's default action, as in a terminal, even where the tests run as a background job (which ignores it)
    proc = subprocess.Popen(
        [*tool("benchmark.tools.run"), *argv],
        env=root_on_path(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.time() + 120
        while not (os.path.exists("pids.txt") and len(calls("pids.txt")) == 2 * workers) and time.time() < deadline:
            time.sleep(0.1)
        pids = [int(p) for p in calls("pids.txt")]
        assert len(pids) == 2 * workers and all(alive(p) for p in pids)
        proc.send_signal(sig)
        if stubborn:
            time.sleep(1)
            assert proc.poll() is None and all(alive(p) for p in pids)  # still waiting for its run
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == -sig  # the shell shows 128 + sig
        deadline = time.time() + 10
        while any(alive(p) for p in pids) and time.time() < deadline:  # the stubborn ones wait for init to reap them
            time.sleep(0.1)
        assert not any(alive(p) for p in pids)
    finally:  # what a failing runner leaves behind
        proc.kill()
        for p in map(int, calls("pids.txt") if os.path.exists("pids.txt") else []):
            if alive(p):
                os.kill(p, signal.SIGKILL)
    started = [f"Sleepy-v0 {s}" for s in seeds[:workers]]
    assert sorted(" ".join(c.split()[:2]) for c in calls()) == [f"A-v0 {s}" for s in seeds] + started  # no more
    name = signal.Signals(sig).name
    assert f"run.py: {name}: stopping the sweep" in err and f"run.py: stopped by {name}\n" in err
    assert f"  finished ({len(seeds)}): " + ", ".join(f"A-v0 seed {s}" for s in seeds) in err
    assert f"  interrupted ({workers}): " + ", ".join(f"Sleepy-v0 seed {s}" for s in seeds[:workers]) in err
    assert f"  not started (1): Sleepy-v0 seed {seeds[-1]}\n" in err
    assert "run the same command again to resume: finished runs are skipped, interrupted runs start over" in err
    assert out.count(": interrupted after") == workers and "Traceback" not in err

    open("awake", "w").close()  # Sleepy-v0 now runs as A-v0 does
    assert run.main(argv) == 0
    assert capsys.readouterr().out.count("already finished, skipped") == len(seeds)
    assert sorted(" ".join(c.split()[:2]) for c in calls()[len(seeds) + workers :]) == [f"Sleepy-v0 {s}" for s in seeds]


def test_summary_names_the_commit_the_run_started_with(fake, tmp_path):
    """A run that makes the repository dirty while it runs (here the fake script appending to a tracked
    calls.txt, as an edit made during a long run would) keeps the clean commit it started from."""

    def git(*a):
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path, capture_output=True, text=True, check=True
        ).stdout.strip()

    git("init", "-q")
    (tmp_path / "calls.txt").write_text("")
    git("add", "fake.py", "calls.txt")
    git("commit", "-q", "-m", "start")
    assert run.main(["--script", fake, "--env-ids", "A-v0", "--seeds", "1", "--", "--total-timesteps", "100"]) == 0
    assert git("status", "--porcelain", "--untracked-files=no")  # the run left the tree dirty
    assert runner_summary("A-v0", 1, ["--total-timesteps", "100"])["git_commit"] == git("rev-parse", "HEAD")
