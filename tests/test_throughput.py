"""Tests of benchmark/tools/throughput.py: the time breakdown it reads, the file it never overwrites, and what it
refuses before it measures."""

import os

import pytest
from conftest import ROOT

from benchmark import cli


def test_throughput_never_overwrites_an_earlier_measurement(tmp_path):

    stem = str(tmp_path / "throughput_2026-11-21")
    assert cli.unused_path(stem) == stem + ".md"
    for expected in (stem + ".md", stem + "_b.md", stem + "_c.md"):
        path = cli.unused_path(stem)
        assert path == expected
        open(path, "w").close()


def test_throughput_reads_the_time_breakdown_a_script_prints(capsys):
    """The "seconds:" line ppo.py prints at the end is what throughput.py parses into env/inference/update shares."""
    import ppo
    from benchmark.tools import throughput

    ppo.train(ppo.Args(total_timesteps=4096))  # 8 iterations: long enough to show on the 0.1 s scale
    seconds = throughput.parse_seconds("iter 4/4 ...\n" + capsys.readouterr().out)
    assert set(seconds) == {"env", "inference", "update", "total"}
    assert seconds["total"] > 0 and seconds["update"] > 0 and min(seconds.values()) >= 0
    assert seconds["env"] + seconds["inference"] + seconds["update"] <= seconds["total"] + 0.1  # printed to 0.1 s
    assert throughput.parse_seconds("no timers here\n") is None
    one = {"env": 1.0, "inference": 0.5, "update": 2.0, "total": 4.0}
    two = {"env": 3.0, "inference": 0.5, "update": 2.0, "total": 6.0}
    assert throughput.shares_str([one, two]) == "40% / 10% / 40%"  # summed over repeats: 4/10, 1/10, 4/10
    assert throughput.shares_str([{"update": 1.0, "total": 4.0}]) == "— / — / 25%"  # IMPALA's: the actors' apart
    assert throughput.seconds_str([{"update": 1.0, "total": 4.0}]) == "— / — / 1.0"
    assert throughput.shares_str([None, None]) == "—"


def test_throughput_ab_with_a_flag_the_script_rejects_reports_the_scripts_own_error(tmp_path, capsys):
    """Issue 37.5: the B side failed, median([]) raised, and neither the report nor the script's error line came out."""
    from benchmark.tools import throughput

    out = str(tmp_path / "ab.md")
    argv = ["--scripts", "ppo.py", "--steps", "512", "--repeats", "1", "--ab=--bogus-flag", "--out", out]
    assert throughput.main(argv) == 1
    said = "failed: ppo.py: error: Unrecognized options: --bogus-flag"  # tyro's box, in the script's one line
    assert f"; --bogus-flag {said}\n" in capsys.readouterr().out
    (row,) = [line for line in open(out) if line.startswith("| ppo.py ")]
    assert row.split(" | ")[4] == said and float(row.split(" | ")[3].split()[0]) > 0  # the A side's rate stays


@pytest.fixture
def throughput(monkeypatch):
    """benchmark/tools/throughput.py, its measurements failing the test: what it refuses, it refuses before measuring."""
    from benchmark.tools import throughput

    monkeypatch.setattr(throughput, "run_ours", lambda *args: pytest.fail("measured"))
    return throughput


# issue 37.5: --repeats 0 measured nothing, wrote "failed: None" and exited 0; issue 75.7: --steps 0 ran 40,960 steps
@pytest.mark.parametrize("flag, value, least", [("--repeats", "0", 1), ("--steps", "0", 1), ("--torch-threads", "0", 1)])
def test_throughput_refuses_a_count_below_its_least_in_one_line(throughput, tmp_path, capsys, flag, value, least):
    assert throughput.main(["--scripts", "ppo.py", flag, value, "--out", str(tmp_path / "t.md")]) == 2
    assert capsys.readouterr().err == f"throughput.py: error: {flag} must be at least {least}, got {value}\n"
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "args, message",
    [
        # issue 75.7: "nope.py not present, skipped", then "wrote t.md", and nothing written
        (["--scripts", "ppo.py", "nope.py"], f"--scripts nope.py: no such script in {ROOT}; choose from ppo.py, "),
        # issue 75.6: found after minutes of measuring, as a traceback
        (["--out", "t.md/t.md"], "--out t.md/t.md cannot be written (Not a directory); give a path you can write to"),
        (["--out", "/dev/full"], "--out /dev/full cannot be written (No space left on device); give a path you can write"),
    ],
)
def test_throughput_refuses_an_unknown_script_or_an_out_it_cannot_write_before_measuring(
    throughput, tmp_path, capsys, args, message
):
    open("t.md", "w").close()
    assert throughput.main(["--scripts", "ppo.py", "--out", "t.md", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"throughput.py: error: {message}") and err.count("\n") == 1
    assert os.listdir(tmp_path) == ["t.md"] and os.path.getsize("t.md") == 0
