"""The documentation: README.md short and readable at a glance, docs/ built by mkdocs --strict, no dead relative link in
README.md, docs/ or a report, each script's page explaining every TensorBoard tag a short run of it logs, and each page's
implementation details the script's own docstring.

`python tests/test_docs.py` rewrites the docstring blocks of docs/*.md from the scripts (the only copy that is edited is
the docstring; the test below fails while a page's copy differs from it)."""

import ast
import glob
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings

import pytest
from conftest import ROOT
from tiny import SCRIPTS

PAGES = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
BLOCK = re.compile(r"(<!-- docstring of (\S+\.py):[^\n]*-->\n```text\n)(.*?)\n?```\n<!-- end of docstring -->", re.S)
END = "\n```\n<!-- end of docstring -->"


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def docstring(script):
    return ast.get_docstring(ast.parse(read(os.path.join(ROOT, script))), clean=True)


def regenerate():
    for page in PAGES:
        text = read(page)
        new = BLOCK.sub(lambda m: m[1] + docstring(m[2]) + END, text)
        if new != text:
            with open(page, "w", encoding="utf-8") as f:
                f.write(new)
            print(f"rewrote {os.path.relpath(page, ROOT)}")


def page_of(script):
    """The docs page whose '## `script`' section documents it."""
    found = [p for p in PAGES if re.search(rf"^## `{re.escape(script)}`\s*$", read(p), re.M)]
    assert len(found) == 1, f"{script}: {len(found)} pages have a '## `{script}`' section (docs/*.md), one should"
    return found[0]


def section(text, script):
    return re.split(r"^## ", text.split(f"\n## `{script}`", 1)[1], maxsplit=1, flags=re.M)[0]


# ---- README ------------------------------------------------------------------------------------------------------


def test_readme_is_short_and_its_table_cells_read_at_a_glance():
    text = read(os.path.join(ROOT, "README.md"))
    assert len(text.splitlines()) <= 120, f"README.md has {len(text.splitlines())} lines: move detail to a docs/ page"
    rows = [line for line in text.splitlines() if line.lstrip().startswith("|")]
    assert len(rows) >= 10  # the scripts table
    long = [cell.strip() for row in rows for cell in re.split(r"(?<!\\)\|", row.strip().strip("|")) if len(cell.strip()) > 100]
    assert long == [], "README.md table cells over 100 characters (put the detail on the script's page): " + repr(long)


def test_readme_links_every_page_and_every_script_has_one():
    text = read(os.path.join(ROOT, "README.md"))
    for page in PAGES:
        assert f"(docs/{os.path.basename(page)}" in text, f"README.md does not link docs/{os.path.basename(page)}"
    for script in SCRIPTS:
        page_of(script)


# ---- links -------------------------------------------------------------------------------------------------------


def relative_links(text):
    """The relative targets of a Markdown file's links and images, and of its HTML href/src, outside code."""
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.S | re.M)  # fenced blocks
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans
    targets = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    targets += re.findall(
        r"^ {0,3}\[[^\]]+\]:[ \t]*<?([^\s>]+)>?(?:[ \t]+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?[ \t]*$", text, re.M
    )  # reference definitions
    targets += re.findall(r"\b(?:href|src)=\"([^\"]+)\"", text)
    return [t for t in targets if not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|#|//", t)]


def markdown_files():
    files = [
        os.path.join(ROOT, "README.md"),
        *glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True),
        *glob.glob(os.path.join(ROOT, "benchmark", "results", "**", "*.md"), recursive=True),
    ]
    return sorted(set(files))


def dead_links(path):
    dead = []
    for target in relative_links(read(path)):
        local = re.split(r"[#?]", target, maxsplit=1)[0]
        if local and not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(path), local))):
            dead.append(target)
    return dead


def test_every_relative_link_and_image_resolves():
    files = markdown_files()
    assert len(files) > 60 and any("/docs/" in f for f in files)
    dead = {os.path.relpath(f, ROOT): d for f in files if (d := dead_links(f))}
    assert dead == {}, f"relative links whose target does not exist: {dead}"


def test_the_link_check_sees_links_images_and_html_but_not_code(tmp_path):
    (tmp_path / "there.md").write_text("")
    page = tmp_path / "page.md"
    page.write_text(
        '[ok](there.md#a) ![img](gone.png) [web](https://x.org/y) <img src="gone2.png">\n'
        "`[code](gone3.md)`\n```\n[block](gone4.md)\n```\n[ref]: gone5.md\n[anchor](#here)\n[1, 2]: not a link\n"
    )
    assert dead_links(str(page)) == ["gone.png", "gone5.md", "gone2.png"]


# ---- the site ----------------------------------------------------------------------------------------------------


def test_mkdocs_builds_the_site_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    log = run.stdout + run.stderr
    assert run.returncode == 0 and "WARNING" not in log, log[-3000:]
    for page in PAGES:  # each page built, and the reports its pages link to
        name = os.path.basename(page)[:-3]
        assert (tmp_path / "site" / ("" if name == "index" else name) / "index.html").exists(), name
    assert (tmp_path / "site" / "benchmark" / "results" / "classic_control_full" / "report" / "index.html").exists()


def test_the_site_holds_only_the_files_git_tracks():
    """docs/hooks.py adds the repository's files to the site from `git ls-files`: an untracked file in the tree (a run's
    MUJOCO_LOG.TXT, a scratch report) is not among them, wherever it lies."""
    pytest.importorskip("mkdocs")
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", os.path.join(ROOT, "docs", "hooks.py"))
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    if subprocess.run(["git", "ls-files", "README.md"], cwd=ROOT, capture_output=True, text=True).stdout != "README.md\n":
        pytest.skip("not a git checkout: the hook adds every file")
    untracked = [f"MUJOCO_LOG-{os.getpid()}.TXT", f"benchmark/results/untracked-{os.getpid()}.md"]
    try:
        for path in untracked:
            with open(os.path.join(ROOT, path), "x") as f:
                f.write("a local run's leftovers\n")
        files = hooks.site_files(ROOT)
    finally:
        for path in untracked:
            os.remove(os.path.join(ROOT, path))
    assert [path for path in untracked if path in files] == []
    assert {"README.md", "ppo.py", "benchmark/results/summary.png", "benchmark/results/classic_control_full/report.md"} <= set(
        files
    )
    assert [path for path in files if path.startswith(("docs/", "runs/", ".")) and "/" in path] == []


def test_the_implementation_matters_pages_tables_are_its_reports_rows():
    """docs/implementation-matters.md shows the study's tables as the report has them: a row that the report no longer
    holds (the report remade from more runs) fails here instead of drifting."""
    report = read(os.path.join(ROOT, "benchmark", "results", "implementation_matters", "report.md"))
    rows = [
        line
        for line in read(os.path.join(ROOT, "docs", "implementation-matters.md")).splitlines()
        if line.startswith("| ") and not line.startswith("| ---")
    ]
    assert len(rows) >= 15
    assert [row for row in rows if row not in report] == []


# issue 72: what a user reads names papers and tools as the field does, never this project's numbering of its sources
# ("seed 004") or of its work ("issue 50"); RESUMABLE (a name in the code) is not --help's to say
NUMBERING = r"\b[Ss]eed 00\d\b|\b[Ii]ssues? \d+\b"
INTERNAL = re.compile(rf"{NUMBERING}|\bRESUMABLE\b")


def what_users_read():
    """(where, text): README.md, every docs/ page, benchmark/README.md, the published numbers' sources (which every
    report quotes), and each script's docstring and --help (its Args' comments)."""
    pages = [os.path.join(ROOT, "README.md"), *PAGES, os.path.join(ROOT, "benchmark", "README.md")]
    pages.append(os.path.join(ROOT, "benchmark", "reference_results.csv"))
    texts = [(os.path.relpath(p, ROOT), read(p)) for p in pages]
    for script in SCRIPTS:
        tree = ast.parse(read(os.path.join(ROOT, script)))
        args = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Args")
        lines = read(os.path.join(ROOT, script)).splitlines()[args.lineno - 1 : args.end_lineno]
        texts += [(f"{script} docstring", docstring(script)), (f"{script} --help", "\n".join(lines))]
    return texts


def test_the_benchmark_readme_opens_with_its_layout_and_a_row_for_every_file():
    """benchmark/README.md's table names every file of benchmark/ (a file of a folder named before it in the same cell
    by its name alone), results/ as one; a file added, moved or renamed without its row fails here."""
    text = read(os.path.join(ROOT, "benchmark", "README.md"))
    head = text.split("\n## ", 1)[0]
    assert "```text\nbenchmark/" in head, "the layout first"
    table = "\n".join(line for line in head.splitlines() if line.startswith("| `"))
    named = set(re.findall(r"`([^`]+)`", table))
    files = []
    for root, dirs, fs in os.walk(os.path.join(ROOT, "benchmark")):
        dirs[:] = [d for d in dirs if d not in ("results", "__pycache__")]
        rel = os.path.relpath(root, os.path.join(ROOT, "benchmark"))
        files += [os.path.normpath(os.path.join(rel, f)) for f in fs if f not in ("README.md", "__init__.py")]
    assert len(files) > 30 and "results/" in named
    assert [f for f in files if f not in named and os.path.basename(f) not in named] == []


def test_the_sibling_diff_table_says_what_diff_shows(tmp_path):
    """docs/hacking.md's table: each sibling against its parent, the lines only one has (`diff`) above and below the
    banner."""
    page = open(os.path.join(ROOT, "docs/hacking.md")).read()
    rows = re.findall(r"^\| `(\S+)` → `(\S+)` \| (\d+) \| (\d+) \|", page, re.M)
    assert len(rows) >= 11

    def halves(script):  # the file up to its banner line, and from it
        lines = open(os.path.join(ROOT, script)).read().splitlines(keepends=True)
        cut = next(i for i, line in enumerate(lines) if line.startswith("# ---- Below: input checks,"))
        for name, part in (("above", lines[: cut + 1]), ("below", lines[cut:])):
            (tmp_path / f"{script}.{name}").write_text("".join(part))
        return [str(tmp_path / f"{script}.{name}") for name in ("above", "below")]

    for parent, sibling, above, below in rows:
        changed = [
            sum(
                line[:1] in "<>" for line in subprocess.run(["diff", a, b], capture_output=True, text=True).stdout.splitlines()
            )
            for a, b in zip(halves(parent), halves(sibling))
        ]
        assert changed == [int(above), int(below)], (parent, sibling)


def test_every_test_the_reliability_page_names_is_a_test():
    """docs/reliability.md names the test of each promise; a test renamed or gone is a stale name there."""
    named = set(re.findall(r"`(test_\w+)`", read(os.path.join(ROOT, "docs", "reliability.md"))))
    defined = set()
    for path in glob.glob(os.path.join(ROOT, "tests", "test_*.py")):
        defined |= set(re.findall(r"^def (test_\w+)\(", read(path), re.M))
    assert len(named) > 20 and named - defined == set()


def test_no_internal_numbering_in_what_users_read():
    found = [f"{where}: {m[0]!r}" for where, text in what_users_read() for m in INTERNAL.finditer(text)]
    assert found == [], found
    assert INTERNAL.findall("seed 004's study, issue 50, issues 2 and 4, in RESUMABLE") == [
        "seed 004",
        "issue 50",
        "issues 2",
        "RESUMABLE",
    ]
    assert INTERNAL.findall("seeds 1 2 3, seed 4, a known issue, resumable") == []


def test_no_internal_numbering_in_the_code_users_run():
    """A researcher who copies a script reads all of it, comments included, and the benchmark tools' help and reports
    come from their code: the papers by their names there too (a name in the code such as RESUMABLE is the code's own;
    the stored results are records of their day)."""
    files = [os.path.join(ROOT, script) for script in SCRIPTS]
    for folder in ("benchmark", "scripts", "requirements"):
        for root, dirs, names in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = [d for d in dirs if d not in ("results", "__pycache__")]
            files += [os.path.join(root, n) for n in names if n.endswith((".py", ".sh", ".in", ".txt", ".md"))]
    assert len(files) > 60
    found = [
        f"{os.path.relpath(path, ROOT)}:{text[: m.start()].count(chr(10)) + 1}: {m[0]!r}"
        for path in files
        for text in [read(path)]
        for m in re.finditer(NUMBERING, text)
    ]
    assert found == [], found


# ---- each script's page ------------------------------------------------------------------------------------------


def test_each_page_holds_its_scripts_docstring_as_it_is_now():
    for script in SCRIPTS:
        text = read(page_of(script))
        blocks = {m[2]: m[3] for m in BLOCK.finditer(text)}
        assert script in blocks, f"{page_of(script)} has no docstring block for {script}"
        assert blocks[script] == docstring(script), (
            f"{os.path.relpath(page_of(script), ROOT)}: {script}'s docstring changed; run python tests/test_docs.py"
        )
        for heading in ["Usage", "Explanation of the logged metrics", "Implementation details", "Experiment results"]:
            assert re.search(rf"^### {heading}", section(text, script), re.M), (script, heading)


def documented_tags(page):
    """The tags a page explains: the first cell of a table row, in backticks."""
    return set(re.findall(r"^\|\s*`([a-zA-Z_]+/[A-Za-z0-9_]+)`\s*\|", read(page), re.M))


def literal_tags(script):
    """The tags a script's code writes by name (an episode's return is logged only when a game ends)."""
    return set(re.findall(r"add_scalar\(\s*\"([^\"{}]+)\"", read(os.path.join(ROOT, script))))


# One tiny run of each script, all in one process (torch imported once; ~30 s of CPU here), each in a folder of its
# own; its TensorBoard tags are read back from the event files. The sizes are the scripts' tests' tiny runs, smaller.
TINY = {
    "ppo.py": dict(env_id="CartPole-v1", num_envs=2, num_steps=8, num_minibatches=2, update_epochs=1),
    "ppo_shared.py": dict(env_id="CartPole-v1", num_envs=2, num_steps=8, num_minibatches=2, update_epochs=1),
    "ppo_atari.py": dict(env_id="AsterixNoFrameskip-v4", num_envs=2, num_steps=8, num_minibatches=2, update_epochs=1),
    "ppo_atari_multigpu.py": dict(
        env_id="AsterixNoFrameskip-v4", num_envs=2, num_steps=8, num_minibatches=2, update_epochs=1
    ),  # a world of one: no torchrun
    "ppo_atari_lstm.py": dict(env_id="AsterixNoFrameskip-v4", num_envs=2, num_steps=8, num_minibatches=2, update_epochs=1),
    "ppo_atari_envpool.py": dict(env_id="Asterix-v5", num_envs=2, num_steps=8, num_minibatches=2, update_epochs=1),
    "ppo_continuous_action.py": dict(env_id="Hopper-v4", num_envs=2, num_steps=8, num_minibatches=2, update_epochs=1),
    "trpo_continuous_action.py": dict(env_id="Hopper-v4", num_envs=2, num_steps=8, num_minibatches=2, update_epochs=1),
    "ppo_procgen.py": dict(num_envs=2, num_steps=8, num_minibatches=2, update_epochs=1),
    "ppo_multidiscrete.py": dict(num_envs=2, num_steps=8, num_minibatches=2, update_epochs=1, max_steps=20),
    "ppo_multidiscrete_mask.py": dict(num_envs=2, num_steps=8, num_minibatches=2, update_epochs=1, max_steps=20),
    "a2c_paac.py": dict(num_envs=2, num_workers=2, num_steps=5),
    "impala_vtrace.py": dict(num_actors=2, batch_size=2, unroll_length=5),
}
for args in TINY.values():  # two iterations (updates) each
    args["total_timesteps"] = 2 * (
        args["unroll_length"] * args["batch_size"] if "unroll_length" in args else args["num_envs"] * args["num_steps"]
    )
# impala_vtrace_distributed.py needs ranks under torchrun: its losses come from impala_vtrace.py's update(), which the
# test below asserts it still is, and its other tags are read from its code.

COLLECT = textwrap.dedent("""
    import glob, importlib, json, os, sys, traceback
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    root, tiny, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    sys.path.insert(0, root)
    found = {}
    for script, args in tiny.items():
        os.makedirs(os.path.join(out, script)); os.chdir(os.path.join(out, script))
        try:
            mod = importlib.import_module(script[:-3])
            mod.train(mod.Args(cuda=False, **args))
        except BaseException as e:  # an env whose package is missing here (Procgen on 3.13, Java for Gym-uRTS)
            found[script] = {"error": "".join(traceback.format_exception_only(e)).strip()}
            continue
        tags = set()
        for events in glob.glob("runs/*"):
            acc = EventAccumulator(events, size_guidance={"scalars": 0}); acc.Reload()
            tags |= set(acc.Tags()["scalars"])
        found[script] = {"tags": sorted(tags)}
    print("TAGS " + json.dumps(found))
""")


def logged_tags(out):
    """{script: {"tags": [...]} or {"error": "..."}} from one tiny run of each script in TINY, run in `out`."""
    run = subprocess.run(
        [sys.executable, "-c", COLLECT, ROOT, json.dumps(TINY), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(out),
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    line = [x for x in run.stdout.splitlines() if x.startswith("TAGS ")]
    assert run.returncode == 0 and line, (run.stdout + run.stderr)[-3000:]
    return json.loads(line[0][5:])


MISSING_HERE = re.compile(r"No module named '(procgen|gym_microrts\w*)'|JVM|[Jj]ava")


def update_source(script):
    tree = ast.parse(read(os.path.join(ROOT, script)))
    return next(ast.dump(f) for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "update")


def test_every_tag_a_short_run_logs_is_explained_on_its_page(tmp_path):
    """One test, not one per script: under pytest -n 2 a fixture shared by several tests would run once per worker."""
    assert set(TINY) | {"impala_vtrace_distributed.py"} == set(SCRIPTS), "give a new script a tiny run in TINY"
    # impala_vtrace_distributed.py's losses are impala_vtrace.py's as long as its update() is
    assert update_source("impala_vtrace_distributed.py") == update_source("impala_vtrace.py"), (
        "impala_vtrace_distributed.py's update() is no longer impala_vtrace.py's: give it a tiny run of its own here"
    )
    runs, problems, unavailable = logged_tags(tmp_path), [], []
    for script in SCRIPTS:
        source = "impala_vtrace.py" if script == "impala_vtrace_distributed.py" else script
        if "error" in runs[source]:
            (unavailable if MISSING_HERE.search(runs[source]["error"]) else problems).append(
                f"{source}'s tiny run failed: {runs[source]['error'][:300]}"
            )
            tags = set()
        else:
            tags = {t for t in runs[source]["tags"] if script == source or t.startswith("losses/")}
            assert "losses/policy_loss" in tags, (script, tags)
        assert "charts/SPS" in literal_tags(script), script
        missing = sorted((tags | literal_tags(script)) - documented_tags(page_of(script)))
        if missing:
            problems.append(
                f"{script} logs {missing}, which {os.path.relpath(page_of(script), ROOT)} does not explain "
                "(a table row starting with the tag in backticks)"
            )
    assert problems == []
    if unavailable:  # Procgen has no wheel for Python 3.13; Gym-uRTS needs Java
        warnings.warn("not run here, so their tags were read from their code alone: " + "; ".join(unavailable))
        assert len(unavailable) <= 3


if __name__ == "__main__":
    regenerate()
