"""Repository-level promises: the README's quick start and .ci/run agree, scripts stand alone."""

import glob
import os
import re

from conftest import ROOT


def readme_commands():
    text = open(os.path.join(ROOT, "README.md")).read()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", quick, re.S)


def test_quick_start_has_two_commands_and_ci_runs_the_second_verbatim():
    commands = readme_commands()
    assert len(commands) == 2 and all("\n" not in c for c in commands)
    assert "python ppo.py --env-id CartPole-v1" in commands[0]
    ci = open(os.path.join(ROOT, ".ci", "run")).read().strip().splitlines()
    assert ci[-1] == commands[1]


def test_scripts_import_nothing_from_the_project():
    scripts = [os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "*.py"))]
    assert "ppo" in scripts
    pattern = re.compile(r"^\s*(from|import)\s+(" + "|".join(scripts + ["tests", "benchmark"]) + r")\b", re.M)
    for name in scripts:
        assert not pattern.search(open(os.path.join(ROOT, f"{name}.py")).read()), name
