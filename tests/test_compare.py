"""Tests of benchmark/tools/compare.py: two groups of synthetic TensorBoard runs, the windows, Welch, Holm and the verdict."""

import json
import os
import re

import numpy as np
import pytest
from fakes import NOISY_STEPS, NOISY_TAGS, write_noisy_run
from scipy import stats

from benchmark import cleanrl, cli, curves
from benchmark.tools import compare


def group(tmp_path, label, seeds, **kw):
    return [
        f"{label}={write_noisy_run(tmp_path / label / f's{seeds[0]}', seeds[0], **kw)}",
        *(write_noisy_run(tmp_path / label / f"s{s}", s, **kw) for s in seeds[1:]),
    ]


def run_compare(tmp_path, a, b, *extra):
    out = tmp_path / "out"
    code = compare.main(["--a", *a, "--b", *b, "--out", str(out), "--tags", *NOISY_TAGS, *extra])
    return code, (out / "report.md").read_text() if code == 0 else ""


def verdicts(md):
    return dict(re.findall(r"^\| (charts/\S+|losses/\S+) \| (.+) \|$", md, re.M))


def rows(md, tag):
    """The table of one tag: [[window, steps, a, b, p, holm, differs]]."""
    part = md.split(f"## {tag}\n")[1].split("\n## ")[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in part.splitlines() if re.match(r"\| \d", line)]


def test_two_groups_from_one_distribution_are_the_same_and_the_report_and_plots_are_written(tmp_path, capsys):
    # Holm holds the windows' false alarms to 5% at any number of seeds: the verdict is that test alone
    a = group(tmp_path, "fp32", [1, 2, 3, 4], hparams={"precision": "fp32", "lr": 0.1})
    b = group(tmp_path, "bf16", [100, 101, 102, 103], hparams={"precision": "bf16", "lr": 0.1, "loss_scale": 1})
    code, md = run_compare(tmp_path, a, b)
    assert code == 0
    assert verdicts(md) == {tag: "same" for tag in NOISY_TAGS}
    assert all(not r[6] for tag in NOISY_TAGS for r in rows(md, tag))
    assert sorted(os.listdir(tmp_path / "out")) == [
        "charts_episodic_return.png",
        "curves.csv",
        "losses_value_loss.png",
        "report.md",
    ]
    assert "| charts/episodic_return | same |" in capsys.readouterr().out
    assert (
        "- settings that differ (the Args each run logged): `precision` fp32=fp32, bf16=bf16; "
        "only bf16 logs `loss_scale`\n" in md
    )


def test_the_report_names_the_mujoco_each_groups_runs_ran_on(tmp_path):
    """Issue 38: our MuJoCo scripts log the installed MuJoCo (CleanRL's do not), whose version 4 runs some envs on
    other physics than the published numbers'; runs without MuJoCo get no such line."""
    a = group(tmp_path, "ours", [1, 2], hparams={"env_id": "Humanoid-v4", "mujoco": "4.0.0"})
    b = group(tmp_path, "cleanrl", [3, 4], hparams={"env_id": "Humanoid-v4"})
    code, md = run_compare(tmp_path, a, b, "--no-plots")
    assert (
        code == 0
        and (
            "\n- MuJoCo of the runs: ours: 4.0.0; cleanrl: not logged (MuJoCo 4 runs Humanoid, "
            "HumanoidStandup, Ant and Hopper on other physics than the published v4 numbers' 2.3.3; "
            "that physics: bash scripts/install.sh mujoco-ref)\n"
        )
        in md
    )
    code, md = run_compare(tmp_path, group(tmp_path, "x", [1, 2]), group(tmp_path, "y", [3, 4]), "--no-plots")
    assert code == 0 and "MuJoCo" not in md


def test_a_shift_in_the_last_windows_is_flagged_there_after_holm_and_p_is_welchs_over_per_seed_means(tmp_path):
    a, b = [1, 2, 3, 4], [5, 6, 7, 8]
    code, md = run_compare(tmp_path, group(tmp_path, "ours", a), group(tmp_path, "ref", b, shift=5.0), "--no-plots")
    assert code == 0
    table = rows(md, "charts/episodic_return")
    assert [r[0] for r in table if r[6] == "yes"] == ["9", "10"]
    assert verdicts(md)["charts/episodic_return"].startswith("differ: windows 9, 10 differ (Holm-adjusted p < 0.05)")
    final = rows(md, "charts/episodic_return")[-1]
    assert verdicts(md)["charts/episodic_return"].endswith(f"; final means ours {final[2]}, ref {final[3]}")

    # window 9 recomputed independently: each seed's mean over its 10 values in (8000, 9000]
    def window9(seed, shift):
        noise = np.random.default_rng(seed).normal(0, 1, len(NOISY_STEPS))  # the return tag's draws come first
        return np.mean([s / 1000 + n + shift for s, n in zip(NOISY_STEPS, noise) if 8000 < s <= 9000])

    per_seed = [[window9(seed, 0.0) for seed in a], [window9(seed, 5.0) for seed in b]]
    assert float(table[8][4]) == pytest.approx(stats.ttest_ind(*per_seed, equal_var=False).pvalue, rel=5e-3)
    assert table[8][2].startswith(f"{np.mean(per_seed[0]):.4g} [{min(per_seed[0]):.4g}, {max(per_seed[0]):.4g}] (4)")


def test_holm_against_a_hand_computed_example():
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> 0.06 (non-decreasing)
    assert curves.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    adj = curves.holm([np.nan, 0.01, 0.02])  # an untested window is not one of the m tests
    assert np.isnan(adj[0]) and adj[1:] == pytest.approx([0.02, 0.02])
    assert curves.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    # Bonferroni would flag none of these (0.02 x 3 > 0.05); Holm flags the smallest only (0.012 x 3 < 0.05)
    assert (curves.holm([0.012, 0.04, 0.03]) < 0.05).tolist() == [True, False, False]


def test_welch_p_matches_scipy_and_the_formula_and_needs_two_values_a_side():
    a = [19.8, 20.4, 19.6, 17.8, 18.5, 18.9, 18.3, 18.9, 19.5, 22.0]
    b = [28.2, 26.6, 20.1, 23.3, 25.2, 22.1, 17.7, 27.6]
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    t = (np.mean(a) - np.mean(b)) / np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    assert curves.welch_p(a, b) == pytest.approx(2 * stats.t.sf(abs(t), df), rel=1e-9)
    assert curves.welch_p(a, b) == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-12)
    assert curves.welch_p([1.0], b) is None and curves.welch_p(a, [2.0]) is None
    assert np.isnan(curves.welch_p([3.0, 3.0], [3.0, 3.0]))
    assert curves.welch_p([3.0, 3.0], [4.0, 4.0]) == 0.0


def constant_runs(window_values, edges):
    """Loaded runs (as compare.load returns them) that log one value per window, so that each seed's window mean is it."""
    centers = (edges[:-1] + edges[1:]) / 2
    return [{"charts/episodic_return": (centers, np.full(len(centers), v))} for v in window_values]


def test_the_verdict_does_not_flip_on_two_seeds_whose_final_means_lie_outside_each_others_range():
    """Issue 72: 2 seeds a side whose final means each lie outside the other's min-max, at Welch p = 0.45 in every
    window. The earlier rule (also asking each final mean within the other's range) called it "differ"; the test alone
    finds nothing, so "same"."""
    a, b = [10.0, 12.0], [11.2, 14.6]
    assert not (min(b) <= np.mean(a) <= max(b))  # 11 is outside [11.2, 14.6]: the earlier rule's "differ"
    assert stats.ttest_ind(a, b, equal_var=False).pvalue == pytest.approx(0.45, abs=0.01)
    edges = np.linspace(0, 10_000, 11)
    res = compare.compare_tag(
        [("ours", constant_runs(a, edges)), ("ref", constant_runs(b, edges))], "charts/episodic_return", edges, 0.05
    )
    assert [r["holm"] for r in res["rows"]] == pytest.approx([1.0] * 10)
    assert res["verdict"] == res["short"] == "same" and res["flagged"] == []
    # a report written under the earlier rule reads the same way; the windows a "differ" names stay
    assert curves.short_verdict("differ: final means outside each other's seed spread (ours 11 [10, 12] (2), ...)") == "same"
    assert curves.short_verdict("differ: windows 9, 10 differ (Holm-adjusted p < 0.05); final means ...") == (
        "differ: windows 9, 10 differ"
    )
    assert curves.short_verdict("no test: n=1 in ours (Welch's test needs 2 seeds a side); final means ...") == (
        "no test: n=1 in ours"
    )
    assert curves.short_verdict("same") == "same"


def test_a_window_holding_inf_is_named_not_called_equal_constants():
    """Issue 75: a window holding inf (a diverged run) read "no spread: equal constants" and could end "same"; it is now
    named, and the verdict is no test."""
    edges = np.linspace(0, 10_000, 11)
    runs = constant_runs([10.0, 12.0], edges)
    runs[1]["charts/episodic_return"][1][-2:] = np.inf  # seed 2 diverged in the last two windows
    res = compare.compare_tag(
        [("ours", runs), ("ref", constant_runs([10.5, 11.5], edges))], "charts/episodic_return", edges, 0.05
    )
    assert [r["note"] for r in res["rows"]][-3:] == ["", "holds inf: no test", "holds inf: no test"]
    assert res["short"] == "no test: windows 9, 10 hold inf" and res["verdict"].startswith(res["short"] + " (a run diverged)")
    assert curves.short_verdict(res["verdict"]) == res["short"]


def test_one_seed_a_side_gives_no_test_and_no_same(tmp_path):
    code, md = run_compare(tmp_path, group(tmp_path, "ours", [1]), group(tmp_path, "ref", [1]), "--no-plots")
    assert code == 0
    assert all(r[4] == "n=1: no test" and r[5] == "" for r in rows(md, "charts/episodic_return"))
    assert verdicts(md)["charts/episodic_return"].startswith("no test: n=1 in ours, ref")
    final = rows(md, "charts/episodic_return")[-1]
    assert verdicts(md)["charts/episodic_return"].endswith(f"final means ours {final[2]}, ref {final[3]}")
    assert final[2] == final[3] and final[2].endswith("(1)")  # the same seed's log on both sides


def test_window_means_put_each_step_in_its_window():
    edges = np.array([0.0, 10.0, 20.0, 30.0])
    means = curves.window_means([0, 5, 10, 11, 30], [1.0, 3.0, 5.0, 7.0, 9.0], edges)
    assert means[[0, 1, 2]] == pytest.approx([3.0, 7.0, 9.0])  # (0, 10] holds 0, 5, 10
    assert np.isnan(curves.window_means([5], [1.0], edges)[1:]).all()


@pytest.mark.parametrize(
    "case, message",
    [
        ("no events", "no TensorBoard event files under"),
        ("no label", "give LABEL=DIR first"),
        ("tag missing", "logged no losses/value_loss; leave it out of --tags"),
        ("one window", "both groups have data in only 1 of 10 windows; give fewer --windows or longer runs"),
        ("same label", "both groups are labelled 'x'"),
        ("windows", "--windows must be at least 2, got 1"),
        ("out unmakeable", "cannot be made (Not a directory); give a folder that can be created"),
    ],
)
def test_bad_input_is_one_line(tmp_path, capsys, case, message):
    a, b = group(tmp_path, "x", [1, 2]), group(tmp_path, "y", [3, 4])
    extra = []
    if case == "no events":
        os.makedirs(tmp_path / "empty")
        b = [f"y={tmp_path / 'empty'}"]
    elif case == "no label":
        a = [a[0].split("=", 1)[1]]
    elif case == "tag missing":
        b = [f"y={write_noisy_run(tmp_path / 'partial', 3, tags=NOISY_TAGS[:1])}"]
    elif case == "one window":
        b = [f"y={write_noisy_run(tmp_path / 'late', 3, steps=np.arange(9100, 10_001, 100))}"]
        a = [f"x={write_noisy_run(tmp_path / 'late2', 4, steps=np.arange(9100, 10_001, 100))}"]
    elif case == "same label":
        b = ["x=" + b[0].split("=", 1)[1]]
    elif case == "out unmakeable":  # issue 37.6: a NotADirectoryError traceback
        (tmp_path / "file").write_text("")
        extra = ["--out", str(tmp_path / "file" / "out")]
    elif case == "windows":
        extra = ["--windows", "1"]
    code, _ = run_compare(tmp_path, a, b, "--no-plots", *extra)
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1 and err.startswith("compare.py: error: ")
    assert not (tmp_path / "out").exists()


def damage(run_dir, how):
    """Its event file cut to its first 3/4 (the second tag's later half lost), or replaced by random bytes."""
    (path,) = [p for p in (run_dir).iterdir() if p.name.startswith("events.out.tfevents")]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 3 // 4] if how == "truncated" else np.random.default_rng(0).bytes(len(data)))
    return path


def test_a_run_that_ends_short_or_groups_of_other_envs_are_named_and_an_unreadable_file_stops_it(tmp_path, capsys):
    """Issue 37.8: a truncated event file was read as a shorter run without a word (the verdict changed), groups of
    different envs were compared without one, and a file of random bytes got the advice to leave a tag out."""
    a = group(tmp_path, "x", [1, 2], hparams={"env_id": "CartPole-v1"})
    b = group(tmp_path, "y", [3, 4], hparams={"env_id": "Acrobot-v1"})
    damage(tmp_path / "y" / "s4", "truncated")
    code, md = run_compare(tmp_path, a, b, "--no-plots")
    err = capsys.readouterr().err.splitlines()
    assert code == 0 and md
    short = [line for line in err if "short of" in line]
    assert (
        len(short) == 1
        and short[0].startswith(
            f"compare.py: warning: y run {str(tmp_path / 'y' / 's4')!r} logs losses/value_loss up to step "
        )
        and "of the others' 10000" in short[0]
    )
    assert "compare.py: warning: the groups' runs are of different envs (x: CartPole-v1; y: Acrobot-v1)" in "\n".join(err)

    path = damage(tmp_path / "y" / "s3", "random")
    code, _ = run_compare(tmp_path, a, b, "--no-plots")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"no events could be read from {str(path)!r}" in err
    assert "--tags" not in err


def test_vs_cleanrl_fidelity_keeps_both_logs_skips_finished_pairs_and_compares(tmp_path, capsys):
    """tests/fakes.py's fake script plays both sides (logging seed * 100 + i for episode i): identical curves."""
    from fakes import FAKE_SCRIPT, vs_argv, wrap

    from benchmark.peers import vs_cleanrl

    fake, log = tmp_path / "fake.py", tmp_path / "order.txt"
    fake.write_text(FAKE_SCRIPT)
    wrap(tmp_path / "ours" / "ppo.py", str(fake), log, "ours", 0.0)
    wrap(tmp_path / "checkout" / "cleanrl" / "ppo.py", str(fake), log, "ref", 0.0)
    work, results = tmp_path / "work" / "ppo_CartPole-v1_1500", tmp_path / "results" / "vs_cleanrl_ppo_CartPole-v1_1500"
    argv = [
        "--fidelity",
        *vs_argv(tmp_path, 1500),
        "--work-dir",
        str(tmp_path / "work"),
        "--out",
        str(tmp_path / "results"),
        "--tags",
        "charts/episodic_return",
        "--windows",
        "5",
    ]

    def sides():
        return [line.split()[:2] for line in log.read_text().splitlines()]

    threads = os.cpu_count() + 1  # not run.py's default (cores // workers), so the test sees the flag pass through
    assert vs_cleanrl.main(argv + ["--ours-threads", str(threads)], ours_dir=str(tmp_path / "ours")) == 0
    assert sides() == [["ref", "1"], ["ours", "1"], ["ref", "2"], ["ours", "2"]]
    summaries = [json.loads(f.read_text()) for f in (work / "ours" / "runs" / "summaries").iterdir()]
    assert len(summaries) == 2 and [s["threads"] for s in summaries] == [threads] * 2
    assert [len(os.listdir(work / "cleanrl" / f"seed{s}" / "runs")) for s in (1, 2)] == [1, 1]
    md = (results / "report.md").read_text()
    assert verdicts(md) == {"charts/episodic_return": "same"}
    assert f"- cleanrl: cleanrl/ppo.py in {tmp_path / 'checkout'} (commit unknown: not a git checkout)" in md
    assert all(r[2] == r[3] for r in rows(md, "charts/episodic_return"))  # the same fake: the same window means

    assert vs_cleanrl.main(argv, ours_dir=str(tmp_path / "ours")) == 0  # finished pairs are skipped
    assert len(sides()) == 4
    for interruption in range(2):  # as if CleanRL's run had been interrupted: it starts over, the last one kept aside
        before = sorted(os.listdir(work / "cleanrl" / "seed2" / "runs"))
        os.remove(work / "cleanrl" / "seed2" / "done.json")
        assert vs_cleanrl.main(argv, ours_dir=str(tmp_path / "ours")) == 0
        assert sides()[4 + interruption :] == [["ref", "2"]] and len(os.listdir(work / "cleanrl" / "seed2" / "runs")) == 1
        assert sorted(os.listdir(work / "cleanrl" / "seed2.interrupted" / "runs")) == before
        assert not (work / "cleanrl" / "seed2.interrupted" / "done.json").exists()

    # ours with one more flag: new runs of ours only (run.py tells them apart by their args), a report of their own
    md = (results / "report.md").read_text()
    assert vs_cleanrl.main(argv + ["--ours-args=--torch-threads 1"], ours_dir=str(tmp_path / "ours")) == 0
    assert sides()[6:] == [["ours", "1"], ["ours", "2"]] and len(os.listdir(work / "ours" / "runs" / "summaries")) == 4
    flagged = (results.parent / f"{results.name}_torch-threads-1" / "report.md").read_text()
    assert " with --torch-threads 1\n" in flagged and verdicts(flagged) == {"charts/episodic_return": "same"}
    assert (results / "report.md").read_text() == md  # the default's report stays as it was

    (tmp_path / "checkout" / "cleanrl" / "ppo.py").write_text("import sys\nsys.exit('boom: no module named ale_py')\n")
    capsys.readouterr()
    assert vs_cleanrl.main(argv[:-6] + ["--seeds", "3"], ours_dir=str(tmp_path / "ours")) == 1
    err = capsys.readouterr().err
    assert err.startswith("vs_cleanrl.py: CleanRL's ppo.py seed 3 failed: boom: no module named ale_py (log: ")
    assert err.count("\n") == 1


def test_cleanrl_atari_scripts_run_as_main_after_import_ale_py_with_the_checkout_on_the_path(tmp_path):
    import subprocess

    from benchmark.peers import vs_cleanrl

    (tmp_path / "ale_py.py").write_text("")  # found only through reference_env's PYTHONPATH (the checkout)
    script = tmp_path / "cleanrl" / "ppo_atari.py"
    script.parent.mkdir()
    script.write_text("import os, sys\nprint(__name__, 'ale_py' in sys.modules, os.path.basename(__file__), sys.argv)\n")
    cmd = cleanrl.command(str(script), "BreakoutNoFrameskip-v4", 3, 100, import_ale=True)
    out = subprocess.run(cmd, env=vs_cleanrl.reference_env(str(tmp_path)), capture_output=True, text=True, cwd="/")
    argv = [str(script), "--env-id", "BreakoutNoFrameskip-v4", "--seed", "3", "--total-timesteps", "100"]
    assert out.stdout == f"__main__ True ppo_atari.py {argv}\n"
    plain = subprocess.run(cleanrl.command(str(script), "CartPole-v1", 3, 100), capture_output=True, text=True)
    assert plain.stdout.startswith("__main__ False ppo_atari.py")  # ours: no runner


def test_a_runs_folder_and_experiment_names_select_each_group_as_report_py_does(tmp_path):
    """Issue 71: --a LABEL=runs/ --exp-a NAME picks that experiment's runs there (one per env and seed, as report.py
    does), --env-id one env; without them the folder's every run would join the group."""
    runs = tmp_path / "runs"
    for exp in ("ppo-aaaa1111", "ppo-bbbb2222"):
        for env, seed in (("Env-v0", 1), ("Env-v0", 2), ("Other-v0", 1)):
            write_noisy_run(runs / f"{env}__{exp}__{seed}__1800000000", seed)
    label, dirs = compare.parse_group(["a=" + str(runs)], "--a", ["ppo-aaaa1111"], "Env-v0")
    assert label == "a" and sorted(os.path.basename(d) for d in dirs) == [
        "Env-v0__ppo-aaaa1111__1__1800000000",
        "Env-v0__ppo-aaaa1111__2__1800000000",
    ]
    assert len(compare.parse_group(["a=" + str(runs)], "--a", ["ppo-aaaa1111"])[1]) == 3  # every env
    assert len(compare.parse_group(["a=" + str(runs)], "--a")[1]) == 6  # no filter: every run under it
    code, md = run_compare(
        tmp_path, ["a=" + str(runs)], ["b=" + str(runs)], "--exp-a", "ppo-aaaa1111", "--exp-b", "ppo-bbbb2222",
        "--env-id", "Env-v0", "--no-plots",
    )  # fmt: skip
    assert code == 0 and "ppo-aaaa1111" in md and "Other-v0" not in md
    with pytest.raises(cli.ConfigError, match=r"^--b b: no run of ppo-cccc on Env-v0 under .*runs/summaries"):
        compare.parse_group(["b=" + str(runs)], "--b", ["ppo-cccc"], "Env-v0")


def test_steps_reads_every_run_up_to_one_budget(tmp_path, capsys):
    """A group that went on past another's budget (a seed read at the budget of a study it ran longer than) is compared
    up to --steps alone: here a shift of 5 after step 8000 differs over the whole runs and is not seen up to 8000."""
    a, b = group(tmp_path, "short", [1, 2, 3, 4]), group(tmp_path, "long", [5, 6, 7, 8], shift=5.0)
    code, md = run_compare(tmp_path, a, b, "--no-plots")
    assert code == 0 and verdicts(md)["charts/episodic_return"].startswith("differ: windows 9, 10")
    code, md = run_compare(tmp_path, a, b, "--no-plots", "--steps", "8000")
    assert code == 0 and verdicts(md) == {tag: "same" for tag in NOISY_TAGS}
    assert "- each run read up to step 8000 (--steps)\n" in md and "10 windows of 800 steps over 0-8000;" in md
    assert [r[1] for r in rows(md, "charts/episodic_return")][-1] == "7200-8000"
    # window 10 recomputed independently: each seed's mean of its values in (7200, 8000]
    mean = np.mean(
        [
            np.mean(
                [
                    s / 1000 + n
                    for s, n in zip(NOISY_STEPS, np.random.default_rng(seed).normal(0, 1, len(NOISY_STEPS)))
                    if 7200 < s <= 8000
                ]
            )
            for seed in (1, 2, 3, 4)
        ]
    )
    assert rows(md, "charts/episodic_return")[-1][2].startswith(f"{mean:.4g} [")
    whole, past = (
        run_compare(tmp_path, a, b, "--no-plots")[1],
        run_compare(tmp_path, a, b, "--no-plots", "--steps", "20000")[1],
    )
    assert verdicts(past) == verdicts(whole) and rows(past, "charts/episodic_return") == rows(whole, "charts/episodic_return")
    for steps, message in (
        ("0", "--steps must be at least 1, got 0"),
        ("50", "logged no charts/episodic_return up to step 50; give a larger --steps"),
    ):
        capsys.readouterr()
        code, _ = run_compare(tmp_path, a, b, "--no-plots", "--steps", steps)
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.count("\n") == 1, err
