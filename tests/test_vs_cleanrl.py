"""Tests of benchmark/peers/vs_cleanrl.py: CleanRL's script and ours run in turn (each here the fake script behind a
wrapper), the ratios of their walls and steps/s, CleanRL's own environment, and what it refuses."""

import os
import subprocess
import sys

import numpy as np
import pytest
from fakes import vs_argv, wrap

from benchmark import cleanrl


def test_vs_cleanrl_runs_both_in_turn_and_reports_walls_returns_and_ratios(fake, tmp_path, monkeypatch):
    """The fake script plays both sides (as ppo.py in a folder of ours and cleanrl/ppo.py in a checkout), the
    reference side 2 s slower (a sleep: the margin is far beyond the host's noise); episode i of seed s returns
    100 s + i, so 1500 steps (150 episodes) end at a last-100 mean of 100 s + 99.5."""
    from benchmark.peers import vs_cleanrl

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # ours keeps it; --reference-threads 2 must reach CleanRL only
    log = tmp_path / "order.txt"
    wrap(tmp_path / "ours" / "ppo.py", fake, log, "ours", 0.0)
    wrap(tmp_path / "checkout" / "cleanrl" / "ppo.py", fake, log, "ref", 2.0)
    out = tmp_path / "vs.md"
    argv = [
        *vs_argv(tmp_path, 1500),
        "--reference-threads",
        "2",
        "--out",
        str(out),
    ]
    assert vs_cleanrl.main(argv, ours_dir=str(tmp_path / "ours")) == 0
    # in turn, the order alternating by seed; the thread setting on the reference side only
    assert log.read_text().splitlines() == ["ref 1 2", "ours 1 1", "ours 2 1", "ref 2 2"]
    text = out.read_text()
    assert "(commit unknown: not a git checkout), OMP_NUM_THREADS=2" in text
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ppo.py | CartPole-v1")]
    assert [r[3] for r in rows] == ["1", "2"]
    for r, seed in zip(rows, (1, 2)):
        ours_wall, ref_wall = float(r[4]), float(r[5])
        assert ref_wall > ours_wall  # the columns are not swapped: the reference slept 2 s
        # walls printed to 0.01 s: each off by up to 0.005 s, which is 3% of the ~0.17 s our side takes in a venv
        rounding = 0.0051 / ours_wall + 0.0051 / ref_wall + 0.001
        assert float(r[6]) == pytest.approx(ref_wall / ours_wall, rel=rounding)
        assert r[7] == r[8] == "123"  # the charts/SPS each logged
        assert float(r[9]) == float(r[10].rstrip(" |")) == 100 * seed + 99.5
    (summary_line,) = [line for line in text.splitlines() if line.startswith("| ppo.py | 2 |")]
    cells = summary_line.split(" | ")
    walls = [(float(r[4]), float(r[5])) for r in rows]
    assert float(cells[2]) == pytest.approx(np.mean([w[0] for w in walls]), abs=0.06)
    assert float(cells[3]) == pytest.approx(np.mean([w[1] for w in walls]), abs=0.06)
    assert summary_line.endswith("| 123 | 123 | 1.00 |")


def test_vs_cleanrl_runs_the_reference_under_its_own_python(fake, tmp_path, capsys):
    """--cleanrl-python (CleanRL's own environment) runs the reference side only; ours runs in this Python; a
    python that is not there stops with one line before any run."""
    from benchmark.peers import vs_cleanrl

    log, used = tmp_path / "order.txt", tmp_path / "used.txt"
    wrap(tmp_path / "ours" / "ppo.py", fake, log, "ours", 0.0)
    wrap(tmp_path / "checkout" / "cleanrl" / "ppo.py", fake, log, "ref", 0.0)
    python = tmp_path / "cleanrl-python"
    python.write_text(f'#!/bin/sh\necho "$1" >> {used}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    argv = [
        *vs_argv(tmp_path, 200),
        "--cleanrl-python",
        str(python),
        "--out",
        str(tmp_path / "vs.md"),
    ]
    assert vs_cleanrl.main(argv, ours_dir=str(tmp_path / "ours")) == 0
    assert used.read_text().splitlines() == [str(tmp_path / "checkout" / "cleanrl" / "ppo.py")] * 2
    assert f"python {python}" in (tmp_path / "vs.md").read_text()
    capsys.readouterr()
    runs = len(log.read_text().splitlines())
    assert vs_cleanrl.main(argv[:-4] + ["--cleanrl-python", str(tmp_path / "nowhere")]) == 2
    said = capsys.readouterr().err
    assert said == (
        f"vs_cleanrl.py: --cleanrl-python {tmp_path / 'nowhere'} is not an executable; "
        "bash benchmark/peers/cleanrl_env.sh makes one\n"
    )
    assert len(log.read_text().splitlines()) == runs  # no run started


def test_vs_cleanrl_summary_is_the_ratio_of_mean_walls_and_of_median_steps_per_second():
    from benchmark.peers import vs_cleanrl

    def pair(ours_wall, ref_wall, ours_sps, ref_sps):
        return {"script": "ppo.py", "ours": {"wall": ours_wall, "sps": ours_sps}, "ref": {"wall": ref_wall, "sps": ref_sps}}

    # skewed so that mean and median differ in every column
    pairs = [pair(30.0, 90.0, 100.0, 40.0), pair(30.0, 90.0, 200.0, 50.0), pair(60.0, 120.0, 900.0, 210.0)]
    (s,) = vs_cleanrl.summary_rows(pairs)
    assert s["runs"] == 3 and s["ours_wall"] == 40.0 and s["ref_wall"] == 100.0 and s["wall_ratio"] == 2.5
    assert s["ours_sps"] == 200.0 and s["ref_sps"] == 50.0 and s["sps_ratio"] == 4.0


def test_vs_cleanrl_names_a_checkouts_commit_but_not_that_of_a_repository_around_a_folder(tmp_path):

    def git(*a):
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path, capture_output=True, text=True, check=True
        ).stdout.strip()

    (tmp_path / "cleanrl").mkdir()
    (tmp_path / "cleanrl" / "ppo.py").write_text("")
    git("init", "-q")
    git("add", "cleanrl/ppo.py")
    git("commit", "-q", "-m", "start")
    path = str(tmp_path / "cleanrl" / "ppo.py")
    assert cleanrl.checkout_commit(str(tmp_path), path) == git("rev-parse", "HEAD")
    assert cleanrl.checkout_commit(str(tmp_path / "cleanrl"), path) is None  # a folder inside the repository


def test_vs_cleanrl_stops_with_one_line_on_a_missing_or_failing_reference(tmp_path, capsys):
    from benchmark.peers import vs_cleanrl

    assert vs_cleanrl.main(["--cleanrl-dir", str(tmp_path), "--scripts", "ppo.py", "--out", str(tmp_path / "a.md")]) == 2
    err = capsys.readouterr().err
    assert "no cleanrl/ppo.py under" in err and "--cleanrl-dir" in err and err.count("\n") == 1
    assert not (tmp_path / "a.md").exists()

    (tmp_path / "ppo.py").write_text("import sys\nsys.exit('boom: ModuleNotFoundError gym')\n")  # a flat folder
    argv = ["--cleanrl-dir", str(tmp_path), "--scripts", "ppo.py", "--seeds", "1", "--out", str(tmp_path / "b.md")]
    assert vs_cleanrl.main(argv) == 1
    err = capsys.readouterr().err
    assert "boom: ModuleNotFoundError gym" in err and err.count("\n") == 1

    # a run that logs no steps/s stops the comparison with a line, not a traceback
    (tmp_path / "ppo.py").write_text("import os\nos.makedirs('runs/x')\n")
    assert vs_cleanrl.main(argv) == 1
    assert "no charts/SPS logged" in capsys.readouterr().err


def test_vs_cleanrl_refuses_our_own_scripts_as_the_reference(tmp_path, capsys):
    """Issue 37.9: --cleanrl-dir <this project> was taken as CleanRL and our ppo.py ran as its ppo.py."""
    from benchmark.peers import vs_cleanrl

    (tmp_path / "ppo.py").write_text("import sys\nsys.exit('ran')\n")
    argv = ["--cleanrl-dir", str(tmp_path), "--scripts", "ppo.py", "--seeds", "1", "--out", str(tmp_path / "a.md")]
    assert vs_cleanrl.main(argv, ours_dir=str(tmp_path)) == 2
    assert capsys.readouterr().err == (
        f"vs_cleanrl.py: {tmp_path / 'ppo.py'} is our own ppo.py, not CleanRL's; pass a "
        "CleanRL checkout (git clone https://github.com/vwxyzjn/cleanrl) as --cleanrl-dir\n"
    )
    assert not (tmp_path / "a.md").exists() and not os.path.exists("runs")
