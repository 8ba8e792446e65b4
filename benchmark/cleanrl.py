"""CleanRL's scripts, run as they are: where a checkout holds one, the checkout's commit, and the command that runs it
with the flags our runs get (benchmark/peers/vs_cleanrl.py runs them beside ours; benchmark/gpu/gpu_check.py on a GPU)."""

import os
import subprocess
import sys

from benchmark.runs import git_commit

NEEDS_ALE_IMPORT = {"ppo_atari.py", "ppo_atari_lstm.py"}  # ale-py 0.9 registers its gymnasium ids on import


RUN_AS_MAIN = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def reference_path(cleanrl_dir, script):
    """CleanRL's file for `script` in a checkout (cleanrl/<script>) or a flat folder (<script>), else None."""
    for path in (os.path.join(cleanrl_dir, "cleanrl", script), os.path.join(cleanrl_dir, script)):
        if os.path.isfile(path):
            return path
    return None


def command(path, env_id, seed, steps, python=sys.executable, import_ale=False):
    """`path` with the flags both sides get; with `import_ale`, behind a two-line runner that imports ale_py first."""
    head = [python, "-c", "import ale_py; " + RUN_AS_MAIN] if import_ale else [python]
    return head + [path, "--env-id", env_id, "--seed", str(seed), "--total-timesteps", str(steps)]


def checkout_commit(cleanrl_dir, path):
    """The commit of the CleanRL checkout holding `path`, or None when `cleanrl_dir` is not the top of a git
    repository (a folder of copies inside some other repository must not report that repository's commit)."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cleanrl_dir, capture_output=True, text=True)
    except OSError:  # no git
        return None
    if top.returncode != 0 or os.path.realpath(top.stdout.strip()) != os.path.realpath(cleanrl_dir):
        return None
    return git_commit(path)
