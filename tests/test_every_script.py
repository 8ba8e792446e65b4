"""The promises every script keeps, each tested here once, over the scripts whose runs keep it alike. The checks are in
tests/promises.py (bad input, checkpoints, resume, non-finite training, signals), hacks.py (a copied file edited the
CleanRL way) and precision.py (--bf16); a script's own test file calls them where its run differs (the IMPALA learner's
ranks, the μRTS scripts' one JVM a test). docs/reliability.md names the test of each promise."""

import glob
import importlib
import math
import os
import signal

import pytest
from conftest import ROOT
from hacks import (
    assert_added_layer_trains,
    assert_cleanrl_update_trains,
    assert_copy_runs_as_itself,
    assert_every_param_group_anneals,
    assert_new_constructor_argument_evaluates_and_resumes,
    assert_temperature_changes_rollout,
)
from precision import (
    assert_bf16_checkpoints_load_across_precisions,
    assert_bf16_trains_close_to_fp32_and_stays_on_policy,
    assert_bf16_without_bf16_kernels_is_refused,
    needs_bf16,
)
from promises import (
    assert_command_line_checkpoint_resumes_in_python,
    assert_envs_of_another_version_refused,
    assert_foreign_and_corrupt_checkpoints_rejected,
    assert_memory_checked,
    assert_nonfinite_stops_and_keeps_the_last_checkpoint,
    assert_runs_in_one_second_get_their_own_directories,
    assert_stopped_in_one_line,
    assert_unwritable_directory_is_one_line,
)
from tiny import SCRIPTS, SKIP, steps_per_iteration, tiny


def over(scripts):
    """The scripts as pytest params, each skipped where its extra is missing (tiny.SKIP)."""
    return [pytest.param(s, marks=SKIP.get(s, []), id=s) for s in scripts]


def module(script):
    return importlib.import_module(script.removesuffix(".py"))


def text(script):
    return open(os.path.join(ROOT, script)).read()


# The scripts whose tiny run trains in this process. The others' runs test the same promises in their own files:
# impala_vtrace_distributed.py's learner and actors are ranks under torchrun; a μRTS run starts a JVM, which a process
# can start once, so test_ppo_multidiscrete.py groups its checks into a few tests that share one.
ONE_PROCESS = [
    s for s in SCRIPTS if s not in ("impala_vtrace_distributed.py", "ppo_multidiscrete.py", "ppo_multidiscrete_mask.py")
]


# ---- bad input stops before training, in one line --------------------------------------------------------------


@pytest.mark.parametrize("script", over(SCRIPTS))
def test_num_envs_beyond_memory_refused_and_defaults_fit_8_gb(script, monkeypatch):
    mod = module(script)
    field = "num_envs_per_actor" if "num_envs_per_actor" in mod.Args.__dataclass_fields__ else "num_envs"  # IMPALA's
    assert_memory_checked(mod, monkeypatch, mod.Args(**{field: 10**9}), flag=f"--{field.replace('_', '-')}")


@pytest.mark.parametrize("script", over(SCRIPTS))
def test_every_numeric_flag_is_range_checked(script):
    """Each flag in the script's RANGES is refused at or below its low end (below, where the low end is allowed), as
    nan, and above its high end, with a message that names the flag."""
    mod = module(script)
    for names, low, high, closed in mod.RANGES:
        for name in names.split():
            for v in [low - 1 if closed else low, math.nan] + ([high + 1] if high < math.inf else []):
                with pytest.raises(mod.ConfigError, match=f"^--{name.replace('_', '-')} must be a finite number"):
                    mod.check_args(tiny(mod, **{name: v}))


# new_run_dir() is the same text in every script (tests/test_repo.py): the PPO pair, and the two that start processes
NEW_RUN_DIR = ["ppo.py", "ppo_shared.py", "a2c_paac.py", "impala_vtrace.py"]


@pytest.mark.parametrize("script", over(NEW_RUN_DIR))
def test_unwritable_directory_is_one_line(script, tmp_path):
    mod = module(script)
    assert_unwritable_directory_is_one_line(mod, tiny(mod), tmp_path)


@pytest.mark.parametrize("script", over([*NEW_RUN_DIR, "ppo_continuous_action.py"]))
def test_runs_started_in_the_same_second_get_their_own_directories(script, monkeypatch):
    mod = module(script)
    args = tiny(mod, save_model=True)
    args.total_timesteps = steps_per_iteration(args)
    assert_runs_in_one_second_get_their_own_directories(mod, args, monkeypatch, n=2 if "continuous" in script else 3)


# ---- checkpoints: read by their own script alone ---------------------------------------------------------------


@pytest.mark.parametrize("script", over(SCRIPTS))
def test_foreign_checkpoint_rejected(script):
    assert_foreign_and_corrupt_checkpoints_rejected(module(script), "ppo_atari.py" if script == "ppo.py" else "ppo.py")


# how an older version of a script saved its games, which this one's resume refuses: forge(the saved games, a pickle of
# a wrapper class this file does not have), and whether they are a pickle (Procgen's are its own arrays). The Atari
# scripts' are checked beside their resume with fresh games, in their own files.
OLDER_ENVS = {
    "ppo.py": (lambda envs, renamed: renamed, True),
    "ppo_shared.py": (lambda envs, renamed: renamed, True),
    "ppo_continuous_action.py": (lambda envs, renamed: renamed, True),
    "a2c_paac.py": (lambda envs, renamed: [renamed] * len(envs), True),  # one pickle a worker
    "ppo_procgen.py": (lambda envs, renamed: {k: v for k, v in envs.items() if k != "R"}, False),  # other statistics
}


@pytest.mark.parametrize("script", over(OLDER_ENVS))
def test_envs_saved_by_another_version_refused(script):
    mod, (forge, pickled) = module(script), OLDER_ENVS[script]
    assert_envs_of_another_version_refused(mod, mod.train(tiny(mod, save_model=True)), forge, pickled=pickled)


# ---- resume ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("script", over(["a2c_paac.py", "ppo_atari.py", "ppo_atari_lstm.py", "ppo_atari_multigpu.py"]))
def test_a_command_line_checkpoint_resumes_in_python_with_its_games(script):
    """The scripts whose saved games hold wrapper classes of their own, pickled as __main__'s by `python <script>`."""
    mod = module(script)
    assert_command_line_checkpoint_resumes_in_python(mod, tiny(mod, total_timesteps=steps_per_iteration(tiny(mod))))


# ---- training gone non-finite stops in one line ----------------------------------------------------------------


@pytest.mark.parametrize("script", over(ONE_PROCESS))
def test_nonfinite_weights_stop_the_run_and_keep_the_last_checkpoint(script, monkeypatch):
    mod = module(script)
    key = "update" if script.startswith("impala") else "iteration"
    assert_nonfinite_stops_and_keeps_the_last_checkpoint(mod, tiny(mod, save_model=True, save_every=1), monkeypatch, key=key)
    if mod.Args().env_id == "CartPole-v1":  # the kept checkpoint plays (an episode of CartPole is quick)
        assert len(mod.evaluate(glob.glob("runs/*/checkpoint.pt")[0], eval_episodes=1)) == 1


# ---- Ctrl-C and SIGTERM are one line ---------------------------------------------------------------------------

LONG = ["--total-timesteps", "10000000"]
CNN = ["--num-minibatches", "2", "--update-epochs", "1", *LONG]
MUJOCO = ["--env-id", "Hopper-v4", "--num-envs", "2", "--num-steps", "32", *LONG]
MICRORTS = ["--num-envs", "2", "--num-steps", "16", "--max-steps", "20", *LONG]
# (script, the signal, its flags, how it is run): one signal a script, both for ppo.py (ppo_shared.py's __main__ is its
# text). The scripts that start processes of their own run in a fresh interpreter: their exit is multiprocessing's. The
# μRTS scripts' JVM takes both signals as it starts (its shutdown then left a traceback of JVMNotRunning).
STOPPED = [
    ("ppo.py", signal.SIGINT, ["--num-envs", "2", "--num-steps", "16", *LONG], {}),
    ("ppo.py", signal.SIGTERM, ["--num-envs", "2", "--num-steps", "16", *LONG], {}),
    ("ppo_atari.py", signal.SIGTERM, ["--num-envs", "2", "--num-steps", "32", *CNN], {}),
    ("ppo_atari_lstm.py", signal.SIGTERM, ["--num-envs", "2", "--num-steps", "16", *CNN], {}),
    ("ppo_atari_envpool.py", signal.SIGINT, ["--num-envs", "4", "--num-steps", "16", *CNN], {}),
    ("ppo_procgen.py", signal.SIGINT, ["--num-envs", "2", "--num-steps", "16", *CNN], {}),
    ("ppo_continuous_action.py", signal.SIGINT, MUJOCO, {}),
    ("trpo_continuous_action.py", signal.SIGINT, MUJOCO, {}),
    ("a2c_paac.py", signal.SIGTERM, ["--num-envs", "2", "--num-workers", "2", "--num-steps", "5", *LONG], dict(forked=False)),
    (
        "impala_vtrace.py",
        signal.SIGTERM,
        ["--num-actors", "2", "--batch-size", "2", "--unroll-length", "5", *LONG],
        dict(forked=False, key="update", infix="every actor has been stopped; "),
    ),
    ("ppo_multidiscrete.py", signal.SIGINT, MICRORTS, {}),
    ("ppo_multidiscrete_mask.py", signal.SIGTERM, MICRORTS, {}),
]


@pytest.mark.parametrize(
    "script, sig, flags, how",
    [
        pytest.param(
            *case,
            marks=[*SKIP.get(case[0], []), *([pytest.mark.forked] if "multidiscrete" in case[0] else [])],  # a JVM
            id=f"{case[0]}-{case[1].name}",
        )
        for case in STOPPED
    ],
)
def test_ctrl_c_and_sigterm_are_one_line_naming_the_checkpoint_and_how_to_resume(script, sig, flags, how):
    assert_stopped_in_one_line(script, flags, sig, **how)


# ---- hack safety: a copied file edited the CleanRL way works (tests/hacks.py) ----------------------------------

# the policy head's attribute of the Agent, where it is not `actor` (a Gaussian's mean)
HEAD = {"ppo_continuous_action.py": "actor_mean", "trpo_continuous_action.py": "actor_mean"}
BREAKOUT = dict(env_id="BreakoutNoFrameskip-v4", num_envs=4, num_steps=128, total_timesteps=512)  # 4 actions
FOUR = (0.0, 1.0, 0.0, 0.0)
# the temperature's check for a Categorical head: (the changes to the tiny run, for 500 actions or more; the head's
# fixed logits). The Gaussian heads' and the IMPALA actors' checks are in their own files.
TEMPERATURE = {
    "ppo.py": (dict(num_envs=8, num_steps=256, total_timesteps=2048), (0.0, 1.0)),
    "ppo_shared.py": (dict(num_envs=8, num_steps=256, total_timesteps=2048), (0.0, 1.0)),
    "ppo_atari.py": (BREAKOUT, FOUR),
    "ppo_atari_lstm.py": (BREAKOUT, FOUR),
    "ppo_atari_multigpu.py": (BREAKOUT, FOUR),
    "ppo_atari_envpool.py": ({**BREAKOUT, "env_id": "Breakout-v5"}, FOUR),
    "ppo_procgen.py": (dict(num_envs=4, num_steps=128, num_minibatches=1, total_timesteps=512), (0.0, 1.0) + (0.0,) * 13),
    # a tiny learning rate keeps the fixed logits where they are during the run
    "a2c_paac.py": (dict(num_envs=8, num_workers=2, total_timesteps=8 * 5 * 40, learning_rate=1e-9), (0.0, 1.0, 0.5, -1.0)),
}
ADDED_LAYER = {
    # at n_e = 2's rate (0.0014) TF RMSProp's first steps on the LayerNorm (lr * g, g ~ 1e-5) are below float32's
    # resolution at 1.0: train at the paper's 0.0224
    "a2c_paac.py": dict(learning_rate=0.0224),
}


@pytest.mark.parametrize("script", over(ONE_PROCESS))
def test_hack_cleanrl_update_trains(script, tmp_path, monkeypatch):
    mod = module(script)
    assert_cleanrl_update_trains(mod, tiny(mod), tmp_path, monkeypatch)


@pytest.mark.parametrize("script", over(TEMPERATURE))
def test_hack_temperature_changes_what_the_rollout_samples(script, monkeypatch):
    mod, (changes, logits) = module(script), TEMPERATURE[script]
    assert_temperature_changes_rollout(mod, tiny(mod, **changes), monkeypatch, logits=logits)


@pytest.mark.parametrize("script", over([s for s in ONE_PROCESS if s != "impala_vtrace.py"]))  # IMPALA's: its own file
def test_hack_added_layer_trains(script, monkeypatch):
    mod = module(script)
    assert_added_layer_trains(mod, tiny(mod, **ADDED_LAYER.get(script, {})), monkeypatch, head=HEAD.get(script, "actor"))


# the continuous pair keeps its critic in a group of its own already (--value-lr): its own files check that one
@pytest.mark.parametrize("script", over([s for s in ONE_PROCESS if s not in HEAD]))
def test_hack_every_param_group_anneals(script, tmp_path):
    mod = module(script)
    assert_every_param_group_anneals(mod, tiny(mod), tmp_path)


@pytest.mark.parametrize("script", over(ONE_PROCESS))
def test_hack_a_copy_runs_checkpoints_and_resumes_as_itself(script, tmp_path, capsys):
    mod = module(script)
    assert_copy_runs_as_itself(mod, tiny(mod), tmp_path, capsys)


@pytest.mark.parametrize("script", over(ONE_PROCESS))
def test_hack_an_edited_constructor_evaluates_and_resumes(script):
    mod = module(script)
    assert_new_constructor_argument_evaluates_and_resumes(mod, tiny(mod))


# ---- --bf16: the CNN's forward passes under bfloat16 autocast (tests/precision.py) -----------------------------

BF16 = [s for s in ONE_PROCESS if "\n    bf16: bool = False" in text(s)]
BF16_RUN = {"impala_vtrace.py": dict(num_actors=1)}


@needs_bf16
@pytest.mark.parametrize("script", over(BF16))
def test_bf16_trains_close_to_fp32_and_stays_on_policy(script):
    mod = module(script)
    assert_bf16_trains_close_to_fp32_and_stays_on_policy(mod, tiny(mod, **BF16_RUN.get(script, {})))


@needs_bf16
@pytest.mark.parametrize("script", over(BF16))
def test_bf16_checkpoints_load_across_precisions(script):
    mod = module(script)
    assert_bf16_checkpoints_load_across_precisions(mod, tiny(mod, **BF16_RUN.get(script, {})))


@pytest.mark.parametrize("script", over(BF16))
def test_bf16_without_bf16_kernels_is_refused(script, monkeypatch):
    mod = module(script)
    assert_bf16_without_bf16_kernels_is_refused(mod, tiny(mod, **BF16_RUN.get(script, {})), monkeypatch)
