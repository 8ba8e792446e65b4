"""What the tools know of the scripts, written once and held to the scripts' own files: the list of the scripts
(every .py file at the top level), the name a script gives its run directory, and the message that says a checkpoint
already holds the whole run. A new script, or a script's changed wording, that a tool or a list has not followed fails
here, naming the list or the script."""

import ast
import glob
import importlib
import os
import re
import sys

import pytest
from conftest import ROOT

from benchmark import runs
from benchmark.gpu import gpu_check

SCRIPTS = runs.SCRIPTS


def test_the_scripts_are_the_top_level_python_files():
    assert SCRIPTS == sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "*.py"))) and len(SCRIPTS) >= 14


def test_pyproject_installs_every_script():
    tomllib = pytest.importorskip("tomllib")
    modules = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["tool"]["setuptools"]["py-modules"]
    assert sorted(modules) == sorted(s.removesuffix(".py") for s in SCRIPTS) and len(set(modules)) == len(modules)


# Every table keyed by script names in benchmark/ and tests/ (a dict, set, list or tuple of string literals, assigned at
# a module's top level), and what it must hold. EVERY: all the scripts but the ones named, each with its reason; SOME:
# the scripts a tool treats apart (every key one of the scripts: a renamed or removed script fails here). A new table is
# placed in one of the two by the test below, which finds it.
EVERY = {
    "benchmark/tools/throughput.py:BUDGETS": set(),
    "benchmark/gpu/gpu_check.py:TINY": set(),
    "benchmark/gpu/gpu_check.py:SPEED_STEPS": set(),
    "tests/test_docs.py:TINY": {"impala_vtrace_distributed.py"},  # its ranks need torchrun: its tags are read from its code
    "tests/test_repo.py:LINE_CEILINGS": set(),
    "tests/tiny.py:TINY": set(),  # each script's tiny run, which its tests train
}
SOME = {
    "benchmark/gpu/gpu_check.py:NEEDS",  # the scripts that need more than the core packages (held to their imports below)
    "benchmark/gpu/gpu_check.py:CLEANRL_NEEDS",  # the scripts CleanRL has a file of
    "benchmark/gpu/gpu_check.py:LEANRL",
    "benchmark/gpu/gpu_check.py:LEANRL_NEEDS",
    "benchmark/gpu/gpu_check.py:TORCHRUN",  # held to the scripts' Run lines below
    "benchmark/gpu/gpu_check.py:NO_TWIN",
    "benchmark/gpu/gpu_check.py:OLD_ENVPOOL_API",
    "benchmark/gpu/gpu_check.py:ATARI_GOAL",
    "benchmark/tools/throughput.py:SB3_ENVS",  # the scripts Stable-Baselines3's PPO is timed beside
    "benchmark/peers/vs_cleanrl.py:TASKS",
    "benchmark/peers/vs_cleanrl.py:SPEED_GOALS",
    "benchmark/cleanrl.py:NEEDS_ALE_IMPORT",
    "benchmark/tools/summary.py:FRONT",
    "benchmark/studies/atari_agent.py:SCRIPTS",  # the Atari scripts whose one-process runs it ships (tested on each)
    "tests/test_repo.py:LINE_TARGETS",
    "tests/test_gpu_check.py:DRY_RUN",
    "tests/test_ppo.py:SCRIPTS",  # a test file's own scripts, and its tables of them
    "tests/test_ppo.py:EXPECTED_INIT",
    "tests/test_ppo.py:LEARNING_BAR",
    "tests/test_compile.py:HEADS",  # for the scripts with --compile (found by their Args)
    "tests/test_compile.py:ENVS",
    "tests/tiny.py:SKIP",  # the scripts whose extra is installed apart
    "tests/test_every_script.py:NEW_RUN_DIR",  # per-script settings of the promises tested over the scripts
    "tests/test_every_script.py:OLDER_ENVS",
    "tests/test_every_script.py:TEMPERATURE",
    "tests/test_every_script.py:HEAD",
    "tests/test_every_script.py:ADDED_LAYER",
    "tests/test_every_script.py:BF16_RUN",
}


def tables_of_scripts():
    """{"path:NAME": the script names it holds} of every top-level literal table of benchmark/ and tests/ that names at
    least one script, by its file name or its module's."""
    found = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "benchmark", "**", "*.py"), recursive=True)) + sorted(
        glob.glob(os.path.join(ROOT, "tests", "*.py"))
    ):
        for node in ast.parse(open(path).read()).body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)):
                continue
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            value = node.value
            if isinstance(value, ast.Dict):
                items = value.keys
            elif isinstance(value, (ast.Set, ast.List, ast.Tuple)):
                items = value.elts
            else:
                continue
            names = {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
            names = {f"{n}.py" if f"{n}.py" in SCRIPTS else n for n in names}  # a module's name: "ppo" for ppo.py
            if isinstance(target, ast.Name) and names & set(SCRIPTS):
                found[f"{os.path.relpath(path, ROOT)}:{target.id}"] = {n for n in names if n.endswith(".py")}
    return found


def test_every_table_of_scripts_holds_every_script_or_only_scripts():
    tables = tables_of_scripts()
    assert set(tables) - set(EVERY) - SOME == set(), "a new table of scripts: put it in EVERY or SOME above"
    assert set(EVERY) | SOME <= set(tables), "a table named above is gone or renamed"
    for name, but in EVERY.items():
        assert tables[name] == set(SCRIPTS) - but, f"{name} misses {sorted(set(SCRIPTS) - but - tables[name])}"
    for name in SOME:
        assert tables[name] <= set(SCRIPTS), f"{name} names {sorted(tables[name] - set(SCRIPTS))}, not a script"


def imported_packages(script):
    """The top-level packages a script imports or looks for (importlib.util.find_spec("x")), wherever in the file."""
    text = open(os.path.join(ROOT, script)).read()
    found = set(re.findall(r"find_spec\(\"(\w+)\"\)", text))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("script", SCRIPTS)
def test_gpu_check_probes_the_packages_each_script_needs_beyond_the_core(script):
    """gpu_check.py leaves out (as not run) a script whose packages the device lacks: NEEDS must name every package of
    an extra that the script imports, or it starts a run that fails on the import. wandb and moviepy serve flags that
    are off by default."""
    extras = imported_packages(script) - set(sys.stdlib_module_names) - set(gpu_check.CORE) - {"numpy", "wandb", "moviepy"}
    assert extras <= set(gpu_check.NEEDS.get(script, ())), f"add {sorted(extras)} to gpu_check.NEEDS[{script!r}]"


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_script_that_runs_under_torchrun_is_started_so_by_the_tools(script):
    """runs.launch() reads the script's "Run:" line; gpu_check.py's TORCHRUN gives its speed run as many processes."""
    command = runs.launch(script)
    if command[1:3] == ["-m", "torch.distributed.run"]:
        assert gpu_check.TORCHRUN[script][1] == int(command[-1].split("=")[1])
    else:
        assert command == [sys.executable]


# ---- the run name ------------------------------------------------------------------------------------------------

WRITTEN = runs.RUN_NAME.format(
    env_id="{args.env_id}", exp_name="{args.exp_name}", seed="{args.seed}", time="{int(time.time())}"
)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_names_its_run_as_the_tools_read_it(script):
    """The scripts write the run name themselves (they import nothing of the project); each f-string of theirs that
    builds one must be runs.RUN_NAME: the directory a new run makes, and the name check_args measures (with the room of
    a "-99" that a 99th run in the same second adds)."""
    text = open(os.path.join(ROOT, script)).read()
    assert f'run_dir = new_run_dir(f"{WRITTEN}")' in text
    built = re.findall(r'f"([^"]*\{args\.env_id\}__[^"]*)"', text)
    assert len(built) >= 2 and {b.removesuffix("-99") for b in built} == {WRITTEN}, built


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_tools_read_back_the_run_name_and_exp_name_the_runner_gives(script):
    stem = script.removesuffix(".py")
    for exp_name in (stem, runs.exp_name_for(script, ["--total-timesteps", "1000"])):  # by hand, and by run.py
        name = runs.run_name("ALE/Pong-v5", exp_name, 3, "1700000000-2")
        assert runs.run_name_parts(name) == {
            "env_id": "ALE/Pong-v5",
            "exp_name": exp_name,
            "seed": "3",
            "time": "1700000000-2",
        }
        assert runs.script_of(exp_name) == script and name.startswith(runs.run_name("ALE/Pong-v5", exp_name, 3))
    assert runs.run_name_parts("no-run-name") is None


# ---- the whole run ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_says_a_checkpoint_holds_the_whole_run_as_the_runner_reads_it(script):
    """run.py takes a run whose --resume the script refused because its checkpoint already holds the whole run (a run
    that finished with no runner left to record it) for a finished run, by runs.WHOLE_RUN_CHECKPOINT in its last lines;
    a budget too small for one iteration of a new run is no such thing."""
    mod = importlib.import_module(script.removesuffix(".py"))
    with pytest.raises(mod.ConfigError) as done:
        mod.check_args(mod.Args(), {"iteration": 10**9, "update": 10**9})
    assert runs.WHOLE_RUN_CHECKPOINT.search(str(done.value)) and "\n" not in str(done.value), str(done.value)
    with pytest.raises(mod.ConfigError) as small:
        mod.check_args(mod.Args(total_timesteps=1))
    assert not runs.WHOLE_RUN_CHECKPOINT.search(str(small.value)), str(small.value)
