"""Tests of benchmark/tools/summary.py: the README's figure, one panel per script, is drawn from the stored curves.csv files
(--all: every one of them); compare.py writes curves.csv, and a report's tables rebuild it; a malformed file is refused
in one line; the README shows the figure."""

import csv
import glob
import os
import re
import shutil

import numpy as np
import pytest
from conftest import ROOT
from fakes import NOISY_STEPS, NOISY_TAGS, write_noisy_run
from PIL import Image

from benchmark import curves
from benchmark.runs import RESULTS
from benchmark.tools import compare, summary

STORED = sorted(glob.glob(os.path.join(RESULTS, "**", "curves.csv"), recursive=True))


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    """The front figure redrawn from the stored files: (the panels drawn, its file)."""
    out = tmp_path_factory.mktemp("front") / "summary.png"
    return summary.summarize(RESULTS, str(out)), out


def test_the_stored_figure_is_redrawn_from_the_stored_files_one_panel_per_script(front):
    drawn, out = front
    assert [panel["script"] for panel in drawn] == list(summary.FRONT)
    assert [panel["path"] for panel in drawn] == [os.path.join(RESULTS, d, "curves.csv") for d in summary.FRONT.values()]
    # the stored figure has the grid of panels a redraw has
    assert Image.open(out).size == Image.open(os.path.join(RESULTS, "summary.png")).size
    titles = {panel["script"]: panel["title"] for panel in drawn}
    assert titles["ppo_atari.py"] == (
        "ppo_atari.py · BreakoutNoFrameskip-v4\n10M steps, the published budget · 3 seeds\nwithin the published mean ± std"
    )
    assert titles["ppo_atari_lstm.py"] == (
        "ppo_atari_lstm.py · BreakoutNoFrameskip-v4\n1M steps of the published 10M · 2 vs 2 seeds\nsame: no window differs"
    )
    # stored under the earlier rule as "differ: final means outside each other's seed spread", at Welch p 0.31-0.83
    assert titles["a2c_paac.py"] == (
        "a2c_paac.py · BreakoutNoFrameskip-v4\n2M steps of the paper's 115M · 2 vs 2 seeds\nsame: no window differs"
    )
    assert titles["trpo_continuous_action.py"] == (
        "trpo_continuous_action.py · Hopper-v4\n1M steps · 4 vs 4 seeds\nsame: no window differs"
    )
    # the published final number drawn only where one exists at the runs' budget: CleanRL's 1M Walker2d and 10M Breakout;
    # elsewhere its value and budget in words, and random play on Breakout
    marks = {panel["script"]: panel["published"] for panel in drawn}
    assert marks == {
        "ppo_atari.py": (1e7, 414.66, 28.09),
        "ppo_atari_lstm.py": None,
        "ppo_atari_envpool.py": None,
        "ppo_continuous_action.py": (1e6, 2287.95, 571.78),
        "trpo_continuous_action.py": None,
        "a2c_paac.py": None,
    }
    legends = {panel["script"]: panel["texts"][2:] for panel in drawn}
    assert legends["ppo_atari_lstm.py"] == [
        "ours",
        "CleanRL's script, run here",
        "CleanRL published at 10M: 113.42 ± 5.85",
        "random play ~1.3",
    ]
    assert legends["a2c_paac.py"] == [
        "ours",
        "Stable-Baselines3's A2C, run here",
        "the paper at 115M: 470.1 (the best of 3 agents, evaluated)",
        "random play ~1.3",
    ]
    assert legends["ppo_continuous_action.py"] == ["ours", "CleanRL's script, run here", "CleanRL published: 2287.95 ± 571.78"]


def test_the_front_figure_is_ours_at_its_defaults_beside_another_implementation_and_the_rest_stay_on_their_pages():
    """One panel per script, each our runs at the script's defaults beside another implementation's (or alone, beside
    the published number); the comparisons of two settings of ours, or of SB3 with either KL direction, are not on it,
    and each of them is linked from a page of the documentation."""
    assert len(summary.FRONT) == len(set(summary.FRONT)) >= 6
    for script, folder in summary.FRONT.items():
        curves = summary.read_curves(os.path.join(RESULTS, folder, "curves.csv"))
        (first, ours, _), *other = curves["groups"]
        assert first == "ours" and ours == script, folder
        if other:  # the reference: CleanRL's script of the same name, or another library's
            ((label, theirs, _),) = other
            assert (label == "cleanrl" and theirs == script) or theirs in summary.REFERENCE_NAMES, folder
            report = open(os.path.join(RESULTS, folder, "report.md")).read()
            assert not re.search(r"^- ours: .*, with --", report, re.M), f"{folder}: ours ran with a flag"
    front = {os.path.join(RESULTS, d, "curves.csv") for d in summary.FRONT.values()}
    pages = "".join(open(p).read() for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    left = [os.path.relpath(os.path.dirname(p), RESULTS) for p in STORED if p not in front]
    assert len(left) >= 6 and "trpo_vs_sb3_hopper_1000000/sb3_vs_sb3_old_new_kl" in left
    assert [d for d in left if f"../benchmark/results/{d}/" not in pages] == [], "link each from its script's page"


def test_the_figure_names_groups_in_plain_words(front):
    """No run-group label of compare.py (cleanrl, sb3, sb3_old_new_kl, anneal_2m) and no folder name on the figure:
    apart from the scripts' file names, no word with an underscore."""
    drawn, _ = front
    labels = {g for p in STORED for g, _, _ in summary.read_curves(p)["groups"]} - {"ours"}
    assert {"cleanrl", "sb3", "sb3_old_new_kl", "anneal_2m", "fp32"} <= labels
    texts = [text for panel in drawn for text in panel["texts"]]
    assert len(texts) >= 6 * 4
    assert [t for t in texts if "_" in re.sub(r"\b\w+\.py\b", "", t)] == []
    assert [t for t in texts for label in labels if re.search(rf"\b{re.escape(label)}\b", t)] == []
    assert [t for t in texts for d in summary.FRONT.values() if os.path.basename(d) in t] == []


def test_all_draws_every_stored_comparison_one_panel_each(tmp_path, capsys):
    assert summary.main(["--all", "--out", str(tmp_path / "all.png")]) == 0
    assert capsys.readouterr().out == f"summary.py: drew {len(STORED)} panels into {tmp_path / 'all.png'}\n"
    assert len(STORED) >= 12 and (tmp_path / "all.png").exists()


def named_group(tmp_path, label, exp_name, seeds, **kw):
    """LABEL=DIR ... of runs named as the scripts name them: <env id>__<exp name>__<seed>__<time>."""
    dirs = [write_noisy_run(tmp_path / label / f"Walker2d-v4__{exp_name}__{seed}__17", seed, **kw) for seed in seeds]
    return [f"{label}={dirs[0]}", *dirs[1:]]


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_compare_writes_curves_csv_and_its_report_rebuilds_it(tmp_path):
    a = named_group(tmp_path, "ours", "ppo_continuous_action-1a2b3c4d", [1, 2, 3])
    b = named_group(tmp_path, "cleanrl", "ppo_continuous_action", [5, 6], shift=5.0)
    out = tmp_path / "out"
    assert compare.main(["--a", *a, "--b", *b, "--out", str(out), "--tags", *NOISY_TAGS, "--no-plots"]) == 0
    verdicts = dict(re.findall(r"^\| (charts/\S+|losses/\S+) \| (.+) \|$", (out / "report.md").read_text(), re.M))
    live = [r for r in read_rows(out / "curves.csv") if r["tag"] == "charts/episodic_return"]
    assert [(r["window"], r["group"]) for r in live] == [(str(w), g) for w in range(1, 11) for g in ("ours", "cleanrl")]
    assert {(r["script"], r["env_id"]) for r in live} == {("ppo_continuous_action.py", "Walker2d-v4")}

    # each seed's mean over its 10 returns in each window, recomputed from the draws write_run made
    def seed_means(seed, shift):
        values = (
            NOISY_STEPS / 1000
            + np.random.default_rng(seed).normal(0, 1, len(NOISY_STEPS))
            + np.where(NOISY_STEPS > 8000, shift, 0)
        )
        return values.reshape(10, 10).mean(1)

    expected = {
        "ours": np.array([seed_means(s, 0.0) for s in (1, 2, 3)]),
        "cleanrl": np.array([seed_means(s, 5.0) for s in (5, 6)]),
    }
    for r in live:
        seeds = expected[r["group"]][:, int(r["window"]) - 1]
        np.testing.assert_allclose([float(v) for v in r["per_seed"].split()], seeds, rtol=1e-6)  # logged as float32
        np.testing.assert_allclose(
            [float(r[k]) for k in ("mean", "min", "max")], [seeds.mean(), seeds.min(), seeds.max()], rtol=1e-6
        )
        assert r["seeds"] == str(len(seeds)) and r["verdict"] == verdicts["charts/episodic_return"]

    # the report's tables (four digits, no per-seed values) give the same rows
    rebuilt = summary.curves_from_report(str(out))
    assert len(rebuilt) == len(read_rows(out / "curves.csv")) == 2 * 10 * len(NOISY_TAGS)
    for old, new in zip(read_rows(out / "curves.csv"), rebuilt):
        assert {k: str(new[k]) for k in old if k not in ("mean", "min", "max", "per_seed")} == {
            k: v for k, v in old.items() if k not in ("mean", "min", "max", "per_seed")
        }
        np.testing.assert_allclose(
            [float(new[k]) for k in ("mean", "min", "max")], [float(old[k]) for k in ("mean", "min", "max")], rtol=5e-4
        )
        assert new["per_seed"] == ""


def malformed(rows, case):
    """Rows of a stored curves.csv broken one way."""
    ret = [r for r in rows if r["tag"] == "charts/episodic_return"]
    if case == "not a number":
        ret[3]["mean"] = "about 3"
    elif case == "three groups":
        ret.append({**ret[0], "group": "third"})
    elif case == "min above mean":
        ret[5]["min"] = str(float(ret[5]["mean"]) + 1)
    elif case == "a window missing":
        ret = [r for r in ret if r["window"] != "4"]
    elif case == "no return rows":
        ret = [r for r in rows if r["tag"] != "charts/episodic_return"]
    return ret


@pytest.mark.parametrize(
    "case, message",
    [
        ("not a number", "a charts/episodic_return row holds a value that is not a number"),
        ("three groups", "holds 3 groups of charts/episodic_return rows (ours, cleanrl, third), not 1 or 2"),
        ("min above mean", "a charts/episodic_return row is not min <= mean <= max over its seeds"),
        ("a window missing", "the charts/episodic_return windows are not 1..n (n >= 2) with one row per group"),
        ("no return rows", "holds 0 groups of charts/episodic_return rows (none), not 1 or 2"),
        ("no max column", "has no 'max' column"),
        ("not a CSV", "cannot be read ('utf-8' codec can't decode byte 0x89"),
    ],
)
def test_a_malformed_curves_csv_is_refused_in_one_line(tmp_path, capsys, case, message):
    source = os.path.join(RESULTS, "vs_cleanrl_ppo_atari_breakout_1m_2026-11-24", "curves.csv")
    bad = tmp_path / "results" / "pair" / "curves.csv"
    bad.parent.mkdir(parents=True)
    shutil.copy(os.path.join(RESULTS, "bf16_breakout_short", "curves.csv"), tmp_path / "results" / "curves.csv")
    columns = [c for c in curves.CURVE_COLUMNS if not (case == "no max column" and c == "max")]
    if case == "not a CSV":
        bad.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    else:
        with open(bad, "w", newline="") as f:
            writer = csv.DictWriter(f, columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(malformed(read_rows(source), case))
    assert summary.main(["--results", str(tmp_path / "results"), "--all"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"summary.py: error: {os.path.relpath(bad)}")
    assert message in err and err.endswith(
        "write it with benchmark/tools/compare.py, or rebuild it from its report with --from-report\n"
    )
    assert not (tmp_path / "results" / "summary.png").exists()


def test_nothing_to_draw_or_no_report_is_one_line(tmp_path, capsys):
    assert summary.main(["--results", str(tmp_path), "--all"]) == 2
    assert capsys.readouterr().err == (
        f"summary.py: error: no curves.csv under {tmp_path}; run benchmark/tools/compare.py, or give --from-report DIR\n"
    )
    assert summary.main(["--results", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"summary.py: error: {tmp_path} has no {summary.FRONT['ppo_atari.py']}/curves.csv, ppo_atari.py's panel; give "
        "the repository's benchmark/results, or --all to draw every curves.csv there\n"
    )
    assert summary.main(["--results", str(tmp_path), "--from-report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"summary.py: error: --from-report {tmp_path}: cannot read ") and err.count("\n") == 1


def test_readme_shows_the_figure_near_the_top_and_its_links_exist():
    text = open(os.path.join(ROOT, "README.md")).read()
    top = text.split("\n## ", 1)[0]  # before the first section: the title, what the project is, the figure
    assert re.search(r"\n\n(?:[^\n]+\n)+\n!\[[^\]]+\]\(benchmark/results/summary\.png\)\n", top)  # under a sentence
    links = re.findall(r"\]\(((?!https?:)[^)#\s]+)\)", text)
    assert "benchmark/results/summary.png" in links and len(links) >= 12
    assert [link for link in links if not os.path.exists(os.path.join(ROOT, link))] == []


@pytest.mark.parametrize(
    "out, message",
    [
        ("fig", "--out fig is a folder; give the figure's file, e.g. fig/summary.png\n"),  # it drew into fig.png
        ("summary.foo", "--out summary.foo: matplotlib cannot write .foo; end it in one of .avif, .eps, "),
        ("summary", "--out summary: no extension; end it in one of .avif, .eps, "),
        ("/proc/summary.png", "--out /proc/summary.png: its folder cannot be written to ("),  # none can create a file there
    ],
)
def test_an_out_that_cannot_take_the_figure_is_one_line_before_anything_is_drawn(tmp_path, capsys, out, message):
    os.makedirs("fig")
    assert summary.main(["--out", out]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"summary.py: error: {message}") and err.count("\n") == 1
    assert os.listdir(tmp_path) == ["fig"]
