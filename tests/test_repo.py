"""Repository-level promises: the README's quick start and .ci/run agree, scripts stand alone."""

import ast
import dataclasses
import glob
import importlib
import os
import re
import runpy
import subprocess
import sys

import pytest
from conftest import ROOT
from lock import lock_pins
from processes import install_sh
from tiny import SCRIPTS


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
    scripts = [s.removesuffix(".py") for s in SCRIPTS]
    assert "ppo" in scripts
    pattern = re.compile(r"^\s*(from|import)\s+(" + "|".join(scripts + ["tests", "benchmark"]) + r")\b", re.M)
    for name in scripts:
        assert not pattern.search(open(os.path.join(ROOT, f"{name}.py")).read()), name


def test_every_gymnasium_vector_env_of_the_scripts_resets_in_the_step_that_ends_a_game():
    """gymnasium 1.x's default autoreset (NEXT_STEP) returns an ended game's last observation and resets a step later,
    which the scripts' done flags, bootstrap and LSTM resets would all misread, and a run would still train: every
    SyncVectorEnv or AsyncVectorEnv a script makes names SAME_STEP (envpool, Procgen and Gym-μRTS bring their own)."""
    makes = {}
    for script in SCRIPTS:
        for node in ast.walk(ast.parse(open(os.path.join(ROOT, script)).read())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("SyncVectorEnv", "AsyncVectorEnv"):
                mode = {k.arg: ast.unparse(k.value) for k in node.keywords}.get("autoreset_mode")
                makes.setdefault(script, []).append((node.lineno, mode))
    assert {s: m for s, made in makes.items() for m in made if m[1] != "gym.vector.AutoresetMode.SAME_STEP"} == {}
    assert sorted(makes) == sorted(set(SCRIPTS) - {"ppo_atari_envpool.py", "ppo_procgen.py"})


def test_importing_every_script_prints_and_writes_nothing():
    """`import <script>` as a user's code would, every script in one fresh interpreter (each start imports torch and the
    rest again, 3-4 s of CPU): nothing printed on either stream, no file written. A NUL and the name written before each
    import says whose output is whose. The scripts' own tests run their command lines in-process (processes.run_cli)."""
    names = [s.removesuffix(".py") for s in SCRIPTS]
    code = (
        "import importlib, sys\nfor name in sys.argv[1:]:\n    print(f'\\0{name}', flush=True)\n"
        "    print(f'\\0{name}', file=sys.stderr, flush=True)\n    importlib.import_module(name)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, *names],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    silent = "".join(f"\0{name}\n" for name in names)
    assert (res.stdout, res.stderr) == (silent, silent)  # the text after a name is what its import printed
    assert os.listdir(".") == []  # no runs/, no videos/


def test_lock_pins_every_dependency_of_pyproject_within_its_range():
    tomllib = pytest.importorskip("tomllib")
    from packaging.markers import Marker
    from packaging.requirements import Requirement
    from packaging.version import Version

    project = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    extras = project["optional-dependencies"]

    def requirements(extra):  # an extra's requirements with the project's own extras expanded
        reqs = list(project["dependencies"])
        for r in extras.get(extra, []):
            req = Requirement(r)
            reqs += [x for e in req.extras for x in extras[e]] if req.name == project["name"] else [r]
        return reqs

    for target in ["core", *extras]:
        pins = lock_pins(os.path.join(ROOT, "requirements", f"{target}.txt"))
        assert sorted(v for v, _ in pins["torch"]) == ["2.13.0", "2.13.0+cpu"], target  # see requirements/torch.in
        for r in requirements(target):
            req = Requirement(r)
            name = re.sub(r"[-_.]+", "-", req.name).lower()
            assert name in pins, f"requirements/{target}.txt lacks {req.name}: run bash scripts/lock.sh"
            # on the Python running the tests: the pin that applies lies in pyproject's range
            if req.marker is None or req.marker.evaluate():
                live = [v for v, m in pins[name] if m is None or Marker(m).evaluate()]
                assert live and all(req.specifier.contains(Version(v), prereleases=True) for v in live), (
                    f"requirements/{target}.txt pins {req.name} {live}, outside {req.specifier}"
                )


def test_no_deps_locks_pin_what_their_inputs_name():
    for env in ["procgen", "microrts", "microrts020"]:
        wanted = {
            re.sub(r"[-_.]+", "-", line.split("==")[0]).lower(): line.split("==")[1].split()[0]
            for line in open(os.path.join(ROOT, "requirements", f"{env}.in"))
            if "==" in line
        }
        pins = lock_pins(os.path.join(ROOT, "requirements", f"{env}.txt"))
        assert {n: v[0][0] for n, v in pins.items()} == wanted, env


def test_readme_names_the_lock_and_how_to_remake_it():
    text = open(os.path.join(ROOT, "README.md")).read()
    for name in ["requirements/", "scripts/lock.sh", "scripts/install.sh", "--require-hashes"]:
        assert name in text, name
    assert "scripts/install.sh" in readme_commands()[0] and "scripts/install.sh dev" in readme_commands()[1]


def test_every_target_pins_what_the_whole_lock_pins():
    """requirements/all.txt resolves every extra at once; a target that pinned another release of a package
    would move it when installed after a second target."""
    whole = lock_pins(os.path.join(ROOT, "requirements", "all.txt"))
    # but mujoco-ref, which moves MuJoCo on purpose (issue 38; a venv of its own) to the release its input names, and,
    # a lock for Python 3.11 alone, pins the others without markers
    ref_in = open(os.path.join(ROOT, "requirements", "mujoco-ref.in")).read()
    moved = {name: [(v, None)] for name, v in re.findall(r"^([\w.-]+)==(\S+)", ref_in, re.M)}
    for path in glob.glob(os.path.join(ROOT, "requirements", "*.txt")):
        if os.path.basename(path) not in (
            "procgen.txt",
            "microrts.txt",
            "microrts020.txt",
        ):  # --no-deps, outside the resolution
            for name, versions in lock_pins(path).items():
                if os.path.basename(path) == "mujoco-ref.txt":
                    assert versions == moved.get(name) or {v for v, _ in versions} <= {v for v, _ in whole[name]}, (
                        name,
                        versions,
                    )
                else:  # the same release, under the same marker or one that holds everywhere in the whole lock
                    # (colorama: on Windows only for video's packages, everywhere for the docs' mkdocs-material)
                    assert all((v, m) in whole[name] or (v, None) in whole[name] for v, m in versions), (
                        os.path.basename(path),
                        name,
                        versions,
                    )


# issue 19: a file short enough to read whole, and `diff` between siblings listing only the details between them.
# TARGETS are the issue's; CEILINGS are what the files measured when the one-idiom rewrite landed (2026-11-24),
# a ratchet: no change may make a file longer or a sibling diff wider than that. Lower a ceiling as a file shrinks.
# Raised once since, by 7 lines in the six CNN scripts (and so in the diffs to ppo.py and the μRTS scripts), for
# issue 25's --bf16: a flag, its check, the autocast; and by 3 in all, for a full disk's one-line error (issue 24).
# The μRTS pair grew by ~38 lines for issue 23: the seed's gym-microrts 0.2.0 through a compatibility layer in each.
# And by 2 in all for a Ctrl-C inside torch.save, which left as a RuntimeError of its zip writer (a CI failure).
# And by 4-5 in all for issue 24's memory check of --num-envs (its measured per-env and per-step bytes differ by script),
# by 4-5 more where a checkpoint's saved games are restored (ppo, shared, continuous, procgen, paac): an edited copy of
# the file that cannot restore them says so in one line. And by 4 in all for the flags named on the command line beside
# --resume (one given at its default value is no longer taken for one left out); by 1 in the IMPALA pair, which now
# refuses the sticky-action NoFrameskip-v0 ids as ppo_atari.py and a2c_paac.py do.
# By 14 in impala_vtrace.py (and its diff to _distributed, which has no multiprocessing queue) for put_holding_signals:
# a Ctrl-C landing inside the learner's queue put hung it at exit (a CI failure).
# By 2 in ppo_atari_envpool.py for --mask-reset-steps: masking envpool's reset steps became a flag, off as in the reference.
# And by 3 in all for save_checkpoint's in-memory buffer: a Ctrl-C as torch.save ended its zip aborted the process, its
# message unprinted (a CI failure).
# And by 2 in all for issue 35: --anneal-lr anneals every param group from its own initial rate (a critic in a group of
# its own at another rate stayed at it), a loop over the groups; by 1 more in the seven scripts that log their games from
# final_info, which name the game's return and length first so that the four logging lines are ppo.py's (issue 35's
# sibling diffs, lowered below with the same text: the logging, exp_name from SCRIPT, actions.flatten(0, 1)).
# And by 3 in all for issue 37's --exp-name check (no '/', a run name within 255 bytes: '../' wrote outside runs/); by 1
# more in ppo_continuous_action.py, whose env error blamed a display for an env it could not make; by 22 in
# ppo_atari_multigpu.py (each node's first process says its own bad input, Ctrl-C is one line, the process group starts
# before the run directory and a launch that cannot start it is one line, a resume on a world that does not split the
# checkpoint's envs names the worlds that do) and by 14 in impala_vtrace_distributed.py (start_process_group: the same
# launch checks), and the sibling diffs of those two by as much.
# And by 3 in ppo_continuous_action.py and trpo_continuous_action.py for issue 38: the installed MuJoCo, a row logged after
# the Args (MuJoCo 4 changed some envs' physics), an import and two lines; ppo.py's diff to the first by 5.
# And by 51 in ppo_continuous_action.py for issue 33, seed 004's study in one file: the switches that turn each
# code-level detail off (--no-norm-obs, --reward-scaling, --no-ortho-init, --value-lr's param group, inf for a clip) with
# their checks and docstring lines, and the paper's Figure 2 logged every iteration (get_mean_and_logstd, gaussian_kl,
# the max ratio and exact KL around update()); its diff to ppo.py by as much.
# And by 4 in all (3 where contextlib was imported already) for issue 37's last item: a resume removes the .tmp that a
# save cut short by SIGKILL left beside the checkpoint.
# And by 7 in both multidiscrete scripts for issue 35: --bootstrap-truncated, ppo_atari.py's flag and its five lines (the
# μRTS games end at a 200-step limit, so it means there what it means for Atari), and the evaluation's "episode" test as
# ppo_atari.py writes it; ppo_atari.py -> ppo_multidiscrete.py's diff fell from 266 to 253. The mask script's diff to
# ppo_multidiscrete.py grew by 6: the latter now drops the reset's info, which the mask script reads the mask from.
# And by 5 in ppo_continuous_action.py for issue 33: --grad-clip-scope actor, seed 004's released clip of the policy's
# gradient alone (the joint clip at PPO-NoClip's 0.1 shrank its policy steps), its check and docstring line; its diff
# to ppo.py to 257 and trpo_continuous_action.py's to it to 246 (the TRPO step clips no policy gradient).
# And by 24 in all for issue 51.1, training gone non-finite: check_finite after each update (one line naming the update,
# the quantity, the last finite checkpoint, the likely flags), `saved` tracked beside the saves, and load_checkpoint's
# refusal of non-finite weights; by 4 more in trpo_continuous_action.py (a line search that takes no step 10 iterations
# in a row says so) and 6 more in impala_vtrace_distributed.py (its actor ranks stop as at the end before the learner
# says why). By 19 in the 12 single-process scripts for issue 51.4 (Ctrl-C and SIGTERM: one line naming the last
# checkpoint and the command that resumes it, exit 130/143: interrupted(), raise_interrupt(), two imports), 2 more in
# the μRTS pair (the JVM takes both signals as it starts) and 1 in a2c_paac.py (its forked workers' SIGTERM); impala's
# existing line gained the checkpoint (7); a2c_paac.py's check skips its grad_norm, nan by design where an edited update
# step no longer keeps it (1). By 13 in all for issue 51.5: parse_args(), tyro's parse errors in one line.
# ppo_atari.py's +3 (and its sibling diffs' +2-3) are cc0d83d's (issue 50: a weights-only checkpoint refused by --resume).
# Sibling diffs: ppo_atari.py -> ppo_atari_multigpu.py +18 and the IMPALA pair +27 (51.4 is the single-process
# scripts'; 51.1's rank-wide stops differ), ppo_continuous_action.py -> trpo +10 (51.1's TRPO flags and notice), the μRTS
# pair's diff to ppo_atari.py +2 (the JVM's signals).
# By 25-26 in the four scripts of issue 53 and in ppo_shared.py (where it costs nothing more): --compile, its flag and
# docstring line, its check (a C++ compiler and Python.h, 2 imports), minibatch_losses() taken out of update()'s loop
# (+5, what the flag compiles), compiled() (11), and the two compiled calls in train(); the Atari pair's RESUMABLE is two
# lines now (+1: compiled() samples with torch's generator, fallback_random). Sibling diffs to the scripts without it
# grow by its ~43 changed lines (ppo_atari.py -> LSTM, Procgen, the μRTS pair's first, multigpu;
# ppo_continuous_action.py -> TRPO), ppo.py -> ppo_atari.py by 3 (the docstring's line breaks).
# By 17 in all 14 scripts: signals_held() (13 lines and `import threading`) around each checkpoint's save and `saved`,
# so a Ctrl-C or SIGTERM between the two no longer names the checkpoint before (test_ppo.py's test of it).
LINE_TARGETS = {
    "ppo.py": 400,
    "a2c_paac.py": 550,
    "impala_vtrace.py": 550,  # every other PPO script: 450
    "ppo_atari_multigpu.py": 520,
    "impala_vtrace_distributed.py": 550,  # issue 21: the torch.distributed pair
    "trpo_continuous_action.py": 737,
}  # issue 34: ppo_continuous_action.py's 637 + 100, its diff to it 250
# issue 70: the whole tree formatted by ruff at 127 columns (black's style, as CleanRL formats), and the plumbing moved
# below one banner line: +104 to +142 lines a script (a call or literal past 127 columns is one argument a line; the
# banner is 3); the sibling diffs by as much as the lines that differ reflowed (+2 to +37). Before it, at ~130 columns
# by hand: ppo.py 589, ppo_shared.py 591, ppo_atari.py 693, ppo_atari_lstm.py 705, ppo_atari_envpool.py 627,
# ppo_continuous_action.py 744, ppo_procgen.py 600, ppo_multidiscrete.py 607, ppo_multidiscrete_mask.py 618,
# a2c_paac.py 668, impala_vtrace.py 666, ppo_atari_multigpu.py 761, impala_vtrace_distributed.py 659 (+2 for its ranks'
# group torn down), trpo_continuous_action.py 808 (issue 34: TRPO's step, T1-T6, and its 7 flags in place of PPO's epochs).
# Issue 71: +23 in all (+22 TRPO, +25 the IMPALA pair): make_agent(), which train() and evaluate() both build the Agent
# with (7); the check of who wrote a checkpoint in two, the second naming another version's flags (+11); a tag per
# param group's learning rate (+2); the IMPALA pair's spaces from a probe env. The sibling diffs fell by 1-6.
# Issue 75.1, weights-only loading: +14 in all (the allowed numpy types, the refusal of a pickle that names more) and
# +22 where a checkpoint holds the saved games (the Unpickler that takes this file's, gymnasium's, ale_py's and numpy's
# names alone). Issue 70.2, train() as CleanRL's loop: progress(), rng_state(), set_rng_state(), start_tracking() and
# run_state() below the banner (+58) for 12-40 fewer lines in train(), and its three signposts (+3).
# Issue 75.3-75.4: +23 in all, nonfinite() (every tensor and array of a checkpoint checked as it loads) and
# check_eval_flags() (a training flag beside --eval-checkpoint refused); issue 70.4: +2-3 where a written-out
# distribution says what it saves on a whole run; issue 72.6: quiet_mujoco() in the MuJoCo pair (+12). Issue 74:
# the IMPALA pair +99/+94, --correction (the paper's other off-policy corrections) and --replay-fraction (its
# replay: the Replay ring of past unrolls, the batch split, their checks and docstring lines).
# Issue 75.2: +10 in all (+7 TRPO), check_finite() sees the last step's gradients: all zero means a norm that
# overflowed to inf, which the clip turned into no step; a2c_paac.py +6 more for --init torch (issue 73).
# Issue 75.5: +15 in all, lock_run() and its call: one process writes a run at a time.
# Issue 75.6: +2 where --compile is (the compiler must run: CXX=/bin/false was a traceback); a2c_paac.py +9, a dead
# worker named with its signal in one line.
# Issue 72.5: +8-11 in the Atari and envpool scripts: a missing extra is one line naming its install.
# Issue 70.2, train() as CleanRL's loop (+26 to +36 in all): open_run() (the run directory, its lock, the TensorBoard
# writer), restore() (weights, optimizer, RNGs), envs_state() and resumed_envs() (the saved games) below the banner, for
# 15-40 fewer lines in train(); the weights-only refusal (a network alone cannot resume) moved into load_checkpoint()
# in all 14, RESUMABLE's own flags on a second line. Issue 75.2 and 75.7: check_finite() also runs the updated network
# on a few of the batch's states (finite weights of 1e37 overflow) and names an env's nan or inf as the env's (+12 in
# all); the torchrun pair's Ctrl-C names its checkpoint (+19/+24). Sibling diffs: the Atari pair -> LSTM, envpool,
# Procgen, the muRTS pair, multigpu and the IMPALA pair fell by 2-15; ppo.py -> ppo_atari.py by 29 (285). The earlier
# figures (248 for Procgen, 253 muRTS, 246 TRPO) were measured on 2026-11-26, before issue 50 saved the emulators' games
# (~43 lines of the Atari -> Procgen, muRTS and envpool diffs) and before ruff's reflow (with every multi-line statement
# joined onto one line the diffs are 30-45 lines shorter: Procgen 302, muRTS 313, envpool 235, TRPO 250, multigpu 215).
# Issue 75.6, Ctrl-C at any moment and a full disk under TensorBoard (+16 to +18 in all): the third-party imports hold
# Ctrl-C until they are loaded (a try, the signal mask), raise_interrupt() for SIGINT too (a second signal within 2 s
# ignored, a later one ends the process), parse_args() inside the try of __main__, and interrupted(e, why) for an
# OSError of a full disk.
# Issue 70.5: ppo_procgen.py carries --compile (+50: the flag, its check, compiled(), minibatch_losses() taken out of
# update()), as the Atari pair does; its diff to ppo_atari.py falls by 53, to 340. Then the μRTS pair (+33 each), the
# LSTM (+33; its policy step's state copied out as a tree, the sequences' losses; nn.LSTM and the cuts between episodes
# run eagerly between the compiled parts) and the multi-GPU script (+32; D2's all-reduces traced into the graph): their
# diffs to ppo_atari.py fall 392 -> 343, 164 -> 119, 294 -> 248. The TRPO and envpool copies written as their parents
# where they said the same thing differently: 323 -> 319, 274 -> 270. TRPO carries --compile too (+40: the rollout's
# policy step and the critic's minibatch losses; its natural-gradient step stays eager): its diff 319 -> 295. The
# distributed IMPALA's docstring and comments written as impala_vtrace.py's where they say the same, and its memory
# message naming the replay as the parent's: 254 -> 238.
# --eval-checkpoint applies --torch-threads as training does (+1 in all; it was taken and ignored). impala_vtrace.py +3:
# --actor-timeout counts the learner's waiting, so a suspended run (Ctrl-Z, SIGSTOP) goes on when resumed. The two IMPALA
# scripts +6: batch_plan, the new steps of an update, which check_args now shares with train() (it checked a replay
# run's budget against a whole batch's steps, and refused to resume one past half its budget), and the replay's
# docstring line (with replacement; the first batch's new unrolls alone).
LINE_CEILINGS = {
    "ppo.py": 905,
    "ppo_shared.py": 897,
    "ppo_atari.py": 1012,
    "ppo_atari_lstm.py": 1069,
    "ppo_atari_envpool.py": 944,
    "ppo_continuous_action.py": 1105,
    "ppo_procgen.py": 931,
    "ppo_multidiscrete.py": 927,
    "ppo_multidiscrete_mask.py": 942,
    "a2c_paac.py": 1006,
    "impala_vtrace.py": 1054,
    "ppo_atari_multigpu.py": 1148,
    "impala_vtrace_distributed.py": 1052,
    "trpo_continuous_action.py": 1208,
}
# issue 50: the Atari scripts' --resume continues the same games (ppo_atari.py +34 lines: the emulators' state pickled
# beside the wrappers, as a2c_paac.py's; ppo_atari_lstm.py the same, ppo_atari_multigpu.py +42 with every rank's games
# gathered); +7 each and a2c_paac.py's: an Unpickler that finds the file's classes whether pickled as __main__'s (a run
# of `python <file>`) or by an import; the siblings that cannot save their games (envpool, the JVM's; procgen has its
# own) differ by those lines
# (script, sibling, issue 19's target, ceiling); the ceilings before issue 70's formatting, in the same order: 38, 268,
# 257, 154, 228, 347, 350, 39, 256 (CleanRL's own pair: 162; +16 for issue 50, every rank's games saved), 243 (+2 the
# same), 290 (issue 34: only the policy step)
SIBLINGS = [
    ("ppo.py", "ppo_shared.py", 40, 46),
    ("ppo.py", "ppo_atari.py", 250, 285),
    ("ppo.py", "ppo_continuous_action.py", 200, 302),
    ("ppo_atari.py", "ppo_atari_lstm.py", 150, 119),
    ("ppo_atari.py", "ppo_atari_envpool.py", 180, 270),
    ("ppo_atari.py", "ppo_procgen.py", 250, 341),
    ("ppo_atari.py", "ppo_multidiscrete.py", 200, 343),
    ("ppo_multidiscrete.py", "ppo_multidiscrete_mask.py", 60, 41),
    ("ppo_atari.py", "ppo_atari_multigpu.py", 162, 248),
    ("impala_vtrace.py", "impala_vtrace_distributed.py", 182, 242),  # +4: next_batch counts waiting (gloo waits there)
    ("ppo_continuous_action.py", "trpo_continuous_action.py", 250, 295),
]


def changed_lines(a, b):
    """`diff a b | grep -c '^[<>]'`: the lines only one of the two files has."""
    out = subprocess.run(["diff", os.path.join(ROOT, a), os.path.join(ROOT, b)], capture_output=True, text=True)
    return sum(line[:1] in "<>" for line in out.stdout.splitlines())


def test_script_sizes_and_sibling_diffs(capsys):
    sizes = {s: len(open(os.path.join(ROOT, s)).read().splitlines()) for s in LINE_CEILINGS}
    diffs = {(a, b): changed_lines(a, b) for a, b, _, _ in SIBLINGS}
    assert set(sizes) == set(SCRIPTS)  # every script listed
    with capsys.disabled():  # printed so that the next change sees where it stands against the targets
        print("\nlines (target): " + ", ".join(f"{s} {n} ({LINE_TARGETS.get(s, 450)})" for s, n in sizes.items()))
        print("sibling diffs (target): " + ", ".join(f"{a} -> {b} {diffs[a, b]} ({t})" for a, b, t, _ in SIBLINGS))
    assert {s: n for s, n in sizes.items() if n > LINE_CEILINGS[s]} == {}
    assert {(a, b): diffs[a, b] for a, b, _, ceiling in SIBLINGS if diffs[a, b] > ceiling} == {}


# issue 51's functions too: where a script's copy must differ, it is named (PAAC's check skips its grad norm, TRPO's has
# no optimizer for the policy, IMPALA's Ctrl-C also stops its actors, the torchrun scripts' name a torchrun command;
# IMPALA counts updates and saves no random state; the multi-GPU run's directory is rank 0's)
@pytest.mark.parametrize(
    "function, differ",
    [
        ("new_run_dir", set()),
        ("save_checkpoint", set()),
        ("load_checkpoint", set()),
        ("parse_args", set()),
        ("raise_interrupt", set()),
        ("signals_held", set()),
        ("check_eval_flags", set()),
        ("lock_run", set()),
        ("nonfinite", set()),
        ("progress", set()),
        ("start_tracking", set()),
        ("rng_state", set()),
        ("set_rng_state", set()),
        ("run_state", set()),
        ("check_finite", {"a2c_paac.py", "trpo_continuous_action.py"}),
        ("interrupted", {"impala_vtrace.py", "impala_vtrace_distributed.py", "ppo_atari_multigpu.py"}),
        ("open_run", {"impala_vtrace.py", "impala_vtrace_distributed.py", "ppo_atari_multigpu.py"}),
        ("restore", {"impala_vtrace.py", "impala_vtrace_distributed.py"}),
    ],
)
def test_run_and_checkpoint_functions_are_the_same_text_in_every_script(function, differ):
    """One copy's tests (test_ppo.py: unique dirs, atomic and full-disk saves, refused checkpoints) hold for all."""
    found = {
        os.path.basename(p): re.search(rf"^def {function}\(.*?(?=^\S)", open(p).read(), re.S | re.M)
        for p in (os.path.join(ROOT, s) for s in SCRIPTS)
    }
    texts = {s: m.group(0) for s, m in found.items() if m}
    assert len(texts) >= 11 and {s for s, t in texts.items() if t != texts["ppo.py"]} == differ


@pytest.mark.parametrize(
    "pattern",
    [
        r"^def compiled\(.*?(?=^\S)",
        r"^def minibatch_losses\(.*?(?=^\S)",
        r"^    if args\.compile and not .*? without --compile\"\n        \)$",
    ],
)
def test_compile_is_written_once_in_the_same_text_where_a_script_has_it(pattern):
    """--compile in every PPO script (issue 53's four, ppo_shared.py, and for issue 70.5 Procgen, the μRTS pair, the LSTM
    and multi-GPU scripts) and in TRPO's; its check, compiled() and the minibatch losses it compiles the same text in
    each, the differences named (tests/test_compile.py checks them all)."""
    texts = {s: open(os.path.join(ROOT, s)).read() for s in SCRIPTS}
    have = {s for s, t in texts.items() if "\n    compile: bool = False  # " in t}
    assert have == {
        "ppo.py",
        "ppo_shared.py",
        "ppo_continuous_action.py",
        "ppo_atari.py",
        "ppo_atari_envpool.py",
        "ppo_procgen.py",
        "ppo_multidiscrete.py",
        "ppo_multidiscrete_mask.py",
        "ppo_atari_multigpu.py",
        "ppo_atari_lstm.py",
        "trpo_continuous_action.py",
    }
    found = {s: re.search(pattern, texts[s], re.S | re.M).group(0) for s in have}
    # its one difference: the masked μRTS script scores each minibatch under the masks its rollout stored (detail M2)
    found["ppo_multidiscrete_mask.py"] = found["ppo_multidiscrete_mask.py"].replace('b["masks"][mb], ', "", 1)
    # the copies that must differ, and why: ppo_atari_lstm.py's losses replay whole sequences from the rollout's LSTM state
    # (L5), and its policy step returns that state, a tuple inside the tuple compiled() copies out (as a tree there);
    # ppo_atari_multigpu.py's normalise the advantages over the ranks' global minibatch (D2: mean and std all-reduced);
    # trpo_continuous_action.py's are the critic's value loss alone (T5): its policy takes the TRPO step over the whole
    # batch (conjugate gradient, Fisher-vector products, line search), no minibatch loss, and that step runs eagerly
    differ = {
        "compiled": {"ppo_atari_lstm.py"},
        "minibatch_losses": {"ppo_atari_lstm.py", "ppo_atari_multigpu.py", "trpo_continuous_action.py"},
    }
    named = next((v for k, v in differ.items() if pattern.startswith(f"^def {k}")), set())
    assert {s for s, t in found.items() if t != found["ppo.py"]} == named


# issue 70: a reader meets Args, the env, the Agent, the math and train() first; below one banner line, the same in every
# script, stand the definitions that change nothing that is trained. Every top-level definition below it is one of these,
# none above it is, and a new one must be placed (a test failure names it).
BANNER = (
    "# ---- Below: input checks, run directory, checkpoints, signals, evaluation and the CLI; none of it changes training ----"
)
PLUMBING = {
    "ConfigError", "ActorError", "RANGES", "OFF_AT_INF", "RESUMABLE", "check_args", "compiled", "new_run_dir",
    "save_checkpoint", "load_checkpoint", "check_finite", "evaluate", "interrupted", "signals_held", "raise_interrupt",
    "parse_args", "get_game", "set_game", "Unpickler", "get_physics", "set_physics", "put_holding_signals",
    "start_process_group", "NoWriter", "progress", "rng_state", "set_rng_state", "start_tracking", "run_state",
    "check_eval_flags", "nonfinite", "quiet_mujoco", "lock_run", "open_run", "restore", "envs_state", "resumed_envs",
    "resumed_games",
}  # fmt: skip


def top_level_names(source):
    """(line, name) of each top-level def, class and assignment of a script, in order."""
    import ast

    names = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append((min([node.lineno] + [d.lineno for d in node.decorator_list]), node.name))
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            names.append((node.lineno, node.targets[0].id))
    return names


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_algorithm_comes_first_and_the_plumbing_below_one_banner(script):
    source = open(os.path.join(ROOT, script)).read()
    lines = source.splitlines()
    assert lines.count(BANNER) == 1, f"{script}: the banner line, once"
    at = lines.index(BANNER) + 1
    names = top_level_names(source)
    above, below = [n for line, n in names if line < at], [n for line, n in names if line > at]
    assert [n for n in above if n in PLUMBING] == [] and [n for n in below if n not in PLUMBING] == []
    # the reading order above it: Args, then the Agent (after the env), then train(), the last definition
    assert above.index("Args") < above.index("Agent") < above.index("train") == len(above) - 1
    # train()'s loop signposted as CleanRL's "ALGO LOGIC": where the rollout, the learning and the logging start
    loop = re.search(r"^def train\(.*?(?=^\S)", source, re.S | re.M)[0]
    marks = re.findall(r"^ +# ---- (the rollout|a batch|learning|logging)\b", loop, re.M)
    assert marks in (["the rollout", "learning", "logging"], ["a batch", "learning", "logging"]), marks
    assert lines[-1].startswith(" ") and re.search(r"^if __name__ == \"__main__\":$", source[source.index(BANNER) :], re.M)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_evaluates_with_its_torch_threads(script):
    """--torch-threads beside --eval-checkpoint was taken and ignored (2 threads beside a busy core: 15 ms a batch-1
    step of the Nature CNN, 0.6 ms on one); every script applies it as training does, in the text tests/test_ppo.py
    runs on ppo.py and ppo_shared.py."""
    lines = open(os.path.join(ROOT, script)).read().splitlines()
    at = lines.index("            returns = evaluate(cli_args.eval_checkpoint, cli_args.eval_episodes, cli_args.seed)")
    assert lines[at - 1].strip().startswith("torch.set_num_threads(cli_args.torch_threads or torch.get_num_threads())")


def test_the_tree_is_formatted_and_lint_clean_by_ruff(tmp_path):
    """ruff format --check and ruff check (pyproject.toml's [tool.ruff]) over the whole tree; to fix: `ruff format .` and
    `ruff check --fix .` from the repository's root, with the lock's ruff (bash scripts/install.sh dev)."""
    ruff = [sys.executable, "-m", "ruff"]
    for command in (["format", "--check"], ["check", "--no-cache"]):
        out = subprocess.run(ruff + command + ["."], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # the same commands do fail on what the tree must not hold: a line joined past 127 columns, an unused import
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\nx = [" + ", ".join(["1000000"] * 20) + "]\n")
    config = ["--config", os.path.join(ROOT, "pyproject.toml")]
    for command in (["format", "--check"], ["check", "--no-cache"]):
        assert subprocess.run(ruff + command + config + [str(bad)], capture_output=True).returncode == 1


@pytest.mark.parametrize("exp_name", ["../../../escaped", "a/b", "x" * 300], ids=["dotdot", "slash", "300 chars"])
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_refuses_an_exp_name_that_is_not_one_short_directory(script, exp_name):
    """Issue 37.4: '../' wrote the run outside runs/ and '/' nested it; 300 characters were refused with a hint to find
    a writable directory. check_args refuses them before any directory is made."""
    mod = importlib.import_module(script[:-3])
    with pytest.raises(mod.ConfigError) as refused:
        mod.check_args(mod.Args(exp_name=exp_name))
    assert str(refused.value).startswith(f"--exp-name {exp_name[:60]!r} must be one directory's name in runs/: no '/'")
    assert not os.path.exists("runs")


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_resume_removes_the_tmp_that_a_killed_save_left(script, tmp_path):
    """Issue 37.10: SIGKILL in the middle of a save (rank 0's, or any run's) left checkpoint.pt.tmp beside the whole
    checkpoint for good; resuming removes it, evaluating (which only reads) leaves it."""
    import torch

    mod = importlib.import_module(script[:-3])
    path = str(tmp_path / "checkpoint.pt")
    torch.save({"script": mod.SCRIPT, "args": dataclasses.asdict(mod.Args()), "optimizer": {}}, path)
    with open(f"{path}.tmp", "wb") as f:
        f.write(b"the first half of a zip")
    mod.load_checkpoint(path)
    assert os.path.exists(f"{path}.tmp")
    mod.load_checkpoint(path, mod.Args(), given=set())
    assert not os.path.exists(f"{path}.tmp") and os.path.exists(path)
    mod.load_checkpoint(path, mod.Args(), given=set())  # nothing left to remove: no error


def test_a_refused_exp_name_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    from promises import assert_cli_error_is_one_line

    os.makedirs("a/b/c")
    monkeypatch.chdir("a/b/c")
    assert_cli_error_is_one_line(
        "ppo.py",
        ["--exp-name", "../../../escaped"],
        (
            "ppo.py: error: --exp-name '../../../escaped' must be one directory's name in runs/: no '/', and short enough "
            "that the run name (env id, exp name, seed, time) fits in 255 bytes; choose a short plain name"
        ),
    )
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["a", "a/b", "a/b/c"]


FAKE_PYTHON_310 = """#!/bin/bash
# Python 3.10, as install.sh meets it: fails the version check, and makes a venv of itself when asked
if [[ $1 == -m && $2 == venv ]]; then mkdir -p .venv/bin && ln -s "$0" .venv/bin/python; exit 0; fi
if [[ $1 == -V || $1 == --version ]]; then echo "Python 3.10.14"; exit 0; fi
if [[ $1 == -c && -z $2 ]]; then exit 0; fi  # it runs (install.sh's first question)
exit 1
"""


def test_install_with_an_unsupported_python_makes_no_venv_so_a_rerun_with_the_right_one_proceeds(tmp_path):
    """Issue 37.10: Python 3.10 made a 3.10 .venv before it was refused, and that .venv then refused the rerun with
    the right Python."""
    clone = tmp_path / "clone"
    (tmp_path / "python3.10").write_text(FAKE_PYTHON_310)
    (tmp_path / "python3.10").chmod(0o755)
    old = install_sh(clone, python=tmp_path / "python3.10", empty=["core"])
    assert old.returncode == 1 and not (clone / ".venv").exists()
    assert old.stderr == (
        f"install.sh: error: {tmp_path / 'python3.10'} is Python 3.10.14; the lock is for 3.11-3.13: "
        "PYTHON=python3.12 bash scripts/install.sh\n"
    )
    wheels = tmp_path / "wheels"  # so that Python 3.11 does not look for torch's index
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-none-any.whl").write_text("")
    right = install_sh(clone, python=sys.executable, timeout=300, TORCH_FIND_LINKS=str(wheels))
    assert "the lock is for 3.11-3.13" not in right.stderr and (clone / ".venv" / "bin" / "python").exists()


def test_install_of_mujoco_ref_on_a_python_after_3_11_is_one_line_and_makes_no_venv(tmp_path):
    """Issue 38: MuJoCo 2.3.3, the published v4 numbers' physics, has no wheel for Python 3.12+; its target says so
    before it makes its venv (.venv-mujoco-ref), so that a rerun with Python 3.11 proceeds."""
    python = tmp_path / "python3.12"  # this Python, telling the checks it runs that it is 3.12
    python.write_text(
        f'#!/bin/bash\n[[ $1 == -V ]] && echo "Python 3.12.1" && exit 0\n[[ $1 == -c ]] && exec '
        f'{sys.executable} -c "import sys; sys.version_info = (3, 12, 1); exec(sys.argv[1])" "$2"\nexit 1\n'
    )
    python.chmod(0o755)
    refused = install_sh(tmp_path, "mujoco-ref", python=python, copied=["mujoco-ref"])
    assert refused.returncode == 1 and not (tmp_path / ".venv-mujoco-ref").exists() and not (tmp_path / ".venv").exists()
    assert refused.stderr == (
        f"install.sh: error: {python} is Python 3.12.1; MuJoCo 2.3.3 (requirements/mujoco-ref.txt) "
        "has wheels up to Python 3.11 only: PYTHON=python3.11 bash scripts/install.sh mujoco-ref "
        "(after deleting .venv-mujoco-ref, if made)\n"
    )


@pytest.mark.parametrize(
    "script, package, install",
    [
        (s, package, install)
        for s in SCRIPTS
        for package, install in (("ale_py", "atari"), ("envpool", "envpool"))  # the extras a script imports at its top
        if re.search(rf"^ +import {package}\b", open(os.path.join(ROOT, s)).read(), re.M)
    ],
)
def test_a_missing_extra_is_one_line_naming_its_install(script, package, install, monkeypatch):
    """Issue 72: `python ppo_atari.py ...` after the core install was a ModuleNotFoundError traceback; now the script
    says in one line what is missing and the command that installs it (an import of the module still raises)."""
    from processes import run_cli

    monkeypatch.setitem(sys.modules, package, None)  # `import <package>` fails as where it is not installed
    code, stdout, stderr = run_cli(script, ["--help"])
    assert (
        code == 1
        and stdout == ""
        and stderr.splitlines()
        == [
            f"{script}: error: {package} is not installed; "
            + ("the Atari scripts need it" if install == "atari" else "it needs envpool")
            + f": bash scripts/install.sh {install}"
        ]
    )
    with pytest.raises(ModuleNotFoundError):  # imported, not run: the error is the import's own
        runpy.run_path(os.path.join(ROOT, script), run_name="imported")


# ---- benchmark/ and tests/: one way of importing, folders by kind --------------------------------------------------

# a command of benchmark/ imports the shared modules (benchmark/*.py), never another command, but where it runs that
# command's work as its own: (importer, imported, why)
COMMAND_IMPORTS = {
    ("benchmark/peers/vs_cleanrl.py", "benchmark.tools.compare"): "--fidelity ends in compare.py's comparison",
    ("benchmark/peers/sb3_trpo.py", "benchmark.peers.sb3_a2c"): "its sibling's logging and command line",
    ("benchmark/studies/wallclock.py", "benchmark.studies.solved"): "solved.py's reading of each seed, run per group",
}
# the code of other implementations, run in their environments as files (PYTHONPATH: theirs): outside the package
OTHERS = "benchmark/peers/shims/"


def imports_of(path):
    """(line, the module) of every import in a file; `from a import b` as a.b where a.b is a module of benchmark."""
    found = []
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            for a in node.names:
                dotted = f"{node.module}.{a.name}"
                package = os.path.join(ROOT, *node.module.split("."))
                found.append((node.lineno, dotted if os.path.isfile(os.path.join(package, f"{a.name}.py")) else node.module))
    return found


def test_benchmark_is_one_package_that_imports_one_way():
    """Every module of benchmark/ imports the others and the scripts by their names from the repository's top (a
    command runs as `python -m benchmark.tools.run`); none puts a folder of ours on sys.path; every folder of Python is
    a package; the shared modules import no command, and a command no other (COMMAND_IMPORTS aside)."""
    files = sorted(
        os.path.relpath(p, ROOT)
        for p in glob.glob(os.path.join(ROOT, "benchmark", "**", "*.py"), recursive=True)
        if not os.path.relpath(p, ROOT).startswith((OTHERS, "benchmark/results/"))
    )
    assert {os.path.dirname(f) for f in files} == {
        "benchmark",
        *(f"benchmark/{d}" for d in ("tools", "peers", "gpu", "studies")),
    }
    assert all(os.path.isfile(os.path.join(ROOT, os.path.dirname(f), "__init__.py")) for f in files)
    ours = {f.removesuffix(".py").replace("/", ".") for f in files}
    bare = {os.path.basename(f).removesuffix(".py") for f in files} - {"__init__"}
    for f in files:
        text = open(os.path.join(ROOT, f)).read()
        if f != "benchmark/peers/paper_code.py":  # it puts the paper's own checkout on sys.path, as that code expects
            assert "sys.path.insert" not in text and "sys.path.append" not in text, f
        for line, module in imports_of(os.path.join(ROOT, f)):
            assert module.split(".")[0] not in bare, f"{f}:{line}: import {module}: by its name from the top, benchmark...."
            if module in ours and module.count(".") == 2:  # a command: benchmark.<folder>.<name>
                assert os.path.dirname(f) != "benchmark", f"{f}:{line}: a shared module imports the command {module}"
                assert (f, module) in COMMAND_IMPORTS, f"{f}:{line}: a command imports the command {module}"


def test_no_test_file_imports_another_but_to_run_its_siblings_tests():
    """The helpers are modules of their own (tests/conftest.py lists them); test_trpo_continuous_action.py runs
    ppo_continuous_action.py's tests on its sibling (as_trpo), the one test file another imports."""
    imported = {
        (os.path.basename(p), module)
        for p in glob.glob(os.path.join(ROOT, "tests", "*.py"))
        for _, module in imports_of(p)
        if module.split(".")[0].startswith("test_")
    }
    assert imported == {("test_trpo_continuous_action.py", "test_ppo_continuous_action")}
