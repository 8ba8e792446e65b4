"""Tests of ppo_multidiscrete.py, and of what it shares with ppo_multidiscrete_mask.py (the `mod` fixture
runs a test against both): detail M1, the network, the env (spaces, the blog's mask, episode length, ticks per step,
autoreset), a real Gym-μRTS run, checkpoints, bad input and hack safety.

The tests marked `needs_microrts` run the Java simulator (gym-microrts 0.2.0, the blog's env); they are skipped only
when it or JPype is not installed at all (an installed but broken one, or a missing Java, fails them). One that makes
envs starts a JVM in its forked child (~2.4 s of CPU), so the checks that need envs are grouped into three tests a
script (the Ctrl-C test's JVM is in the script's own process), each check of a group run apart from the others
(`separately`).
"""

import contextlib
import importlib
import importlib.util
import os
import sys

import numpy as np
import pytest
import torch

# what a process's first train() imports besides (torch._dynamo, which torch.optim imports, and tensorboard's writer:
# ~2.4 s of CPU), imported in the test process once: the forked children, where the μRTS runs train, start with them
import torch._dynamo  # noqa: E402, F401
import torch.nn as nn
import torch.utils.tensorboard  # noqa: E402, F401
from hacks import (
    Scale,
    assert_added_layer_trains,
    assert_cleanrl_update_trains,
    assert_copy_runs_as_itself,
    assert_every_param_group_anneals,
    assert_new_constructor_argument_evaluates_and_resumes,
    edited_agent,
)
from microrts import NVEC, OBS, FixedLogits, needs_microrts
from processes import run_cli
from promises import (
    PPO_BAD_INPUT,
    PPO_LOGGED,
    assert_checkpoint_evaluates,
    assert_logged,
    assert_nonfinite_stops_and_keeps_the_last_checkpoint,
    assert_rejected_before_training,
    assert_resumes_with_fresh_episodes,
)
from tiny import microrts_missing, tiny


@contextlib.contextmanager
def separately(monkeypatch, folder):
    """One check of a `needs_microrts` test that makes several, so that they share its forked child's JVM (a start:
    ~2.4 s of CPU): run in `folder` (made here), under a MonkeyPatch of its own (yielded), undone with the working
    directory when the check ends; a failure's traceback names the check's line."""
    folder.mkdir()
    with monkeypatch.context() as m:
        m.chdir(folder)
        yield m


@pytest.fixture(params=["ppo_multidiscrete", "ppo_multidiscrete_mask"])
def mod(request):
    return importlib.import_module(request.param)


def act(mod, agent, x, action=None):
    """agent.get_action_and_value(x, action); the mask script gets a mask with every choice valid."""
    if mod.__name__.endswith("_mask"):
        return agent.get_action_and_value(x, torch.ones(len(x), sum(NVEC), dtype=torch.bool), action)
    return agent.get_action_and_value(x, action)


# ---- detail M1: independent action components, one Categorical each ------------------------------


def test_logprob_entropy_and_value_are_sums_over_components(mod):
    torch.manual_seed(0)
    agent = mod.Agent(OBS, NVEC)
    B = 4
    agent.actor = FixedLogits(torch.randn(B, sum(NVEC)) * 2)
    x = torch.randint(0, 2, (B,) + OBS, dtype=torch.uint8)
    actions = torch.stack([torch.randint(0, n, (B,)) for n in NVEC], -1)
    _, logprob, entropy, value = act(mod, agent, x, actions)
    assert logprob.shape == entropy.shape == value.shape == (B,)
    expected_lp, expected_ent = torch.zeros(B), torch.zeros(B)
    for i, part in enumerate(agent.actor.logits.detach().split(NVEC, -1)):  # torch's Categorical per component
        dist = torch.distributions.Categorical(logits=part)
        expected_lp += dist.log_prob(actions[:, i])
        expected_ent += dist.entropy()
    torch.testing.assert_close(logprob, expected_lp)
    torch.testing.assert_close(entropy, expected_ent)
    h = agent.network(x.permute(0, 3, 1, 2).float())  # both heads read one CNN pass over the NCHW planes
    torch.testing.assert_close(value, agent.critic(h).squeeze(-1))
    torch.testing.assert_close(agent.get_value(x), value)


def test_sampled_components_follow_their_softmax(mod):
    torch.manual_seed(0)
    agent = mod.Agent(OBS, NVEC)
    logits = torch.randn(sum(NVEC)) * 2
    agent.actor = FixedLogits(logits.repeat(20000, 1))  # every row: the same logits
    with torch.no_grad():
        actions, *_ = act(mod, agent, torch.zeros((20000,) + OBS, dtype=torch.uint8))
    assert actions.shape == (20000, len(NVEC))
    for i, part in enumerate(logits.split(NVEC)):
        freq = torch.bincount(actions[:, i], minlength=len(part)).double() / len(actions)
        np.testing.assert_allclose(freq.numpy(), part.softmax(-1).numpy(), atol=0.015)


def test_network_shapes_and_init(mod):
    torch.manual_seed(0)
    agent = mod.Agent(OBS, NVEC)
    layers = {n: m for n, m in agent.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))}
    shapes = {n: tuple(m.weight.shape) for n, m in layers.items()}
    assert shapes == {
        "network.0": (16, 27, 3, 3),
        "network.2": (32, 16, 2, 2),
        "network.5": (128, 32 * 3 * 3),
        "actor": (229, 128),
        "critic": (1, 128),
    }  # the blog's, 229 = sum(NVEC)
    assert agent.network[0].stride == (2, 2)
    for name, std in {"network.0": 2**0.5, "network.2": 2**0.5, "network.5": 2**0.5, "actor": 0.01, "critic": 1.0}.items():
        w = layers[name].weight.detach().reshape(layers[name].weight.shape[0], -1)
        np.testing.assert_allclose(torch.linalg.svdvals(w).numpy(), std, rtol=1e-4)
        assert torch.all(layers[name].bias == 0)


def test_reference_defaults(mod):
    a = mod.Args()
    assert (a.env_id, a.max_steps, a.num_envs, a.num_steps, a.num_minibatches, a.update_epochs) == (
        "MicrortsMining-v1",
        200,
        8,
        128,
        4,
        4,
    )
    assert (a.clip_coef, a.ent_coef, a.learning_rate, a.anneal_lr, a.total_timesteps, a.torch_threads) == (
        0.1,
        0.01,
        2.5e-4,
        True,
        2_000_000,
        1,
    )
    # as gym-microrts 0.2.0's v1.py registers MicrortsMining-v1: harvest reward only, a passive opponent
    assert mod.MICRORTS_TASKS["MicrortsMining-v1"] == ("maps/10x10/basesWorkers10x10.xml", "passiveAI", (0, 1, 0, 0, 0, 0, 0))


# ---- the real game -------------------------------------------------------------------------------


@needs_microrts
def test_training_end_to_end_evaluates_resumes_with_fresh_episodes_and_stops_at_nonfinite_weights(
    mod, tmp_path, capfd, monkeypatch
):
    """Real runs, sharing one JVM: a run end to end, what it logs, and its checkpoint evaluated; a run resumed from its
    first checkpoint; a run whose weights go non-finite (issue 51.1, tests/promises.py's check)."""
    with separately(monkeypatch, tmp_path / "end_to_end"):
        out = mod.train(tiny(mod, total_timesteps=2 * 16 * 3, save_model=True))
        assert_trained_end_to_end(out)
        assert_checkpoint_evaluates(mod, out)
    with separately(monkeypatch, tmp_path / "resume") as m:
        capfd.readouterr()  # what the check before printed
        args = tiny(mod, save_model=True, save_every=1)
        full, resumed = assert_resumes_with_fresh_episodes(mod, args, capfd, m)  # the JVM's games do not pickle
        assert resumed["learning_rate"] == [0.0]  # the schedule continued to its end, not restarted
    with separately(monkeypatch, tmp_path / "nonfinite") as m:
        assert_nonfinite_stops_and_keeps_the_last_checkpoint(mod, tiny(mod, save_model=True, save_every=1), m)


def assert_trained_end_to_end(out):
    """A run of 3 iterations of 2 envs x 16 steps (train()'s output)."""
    # the 20-step limit ends every episode; returns count harvest and return actions, never negative
    assert out["episodic_length"] == [20] * (2 * 48 // 20)
    assert all(r >= 0 for r in out["episodic_return"])
    assert out["learning_rate"][0] == 2.5e-4 and out["learning_rate"][-1] == 0.0  # detail 4
    assert len(out["first_minibatch"]) == len(out["losses"]) > 0  # one an iteration, all checked below
    for first in out["first_minibatch"]:
        # the update scores the actions the rollout sampled under the same policy (and, masked, the same masks)
        assert first["ratio_max_dev"] < 1e-5 and first["clipfrac"] == 0.0
    run_dir = out["run_dir"]
    assert_logged(run_dir, ["charts/episodic_return", "charts/episodic_length"] + PPO_LOGGED)


def blog_mask(obs):
    """The blog's action mask computed from an observation's one-hot planes, apart from the env's: source cells hold
    a unit (type plane 13 off) of ours (owner plane 11) with no action under way (action plane 21), attack targets
    the same of the enemy's (owner plane 12); components 1-6 (29 choices) all valid."""
    idle_unit = (obs[..., 13] == 0) & (obs[..., 21] == 1)
    return np.concatenate(
        [(idle_unit & (obs[..., 11] == 1)).reshape(-1), np.ones(29, bool), (idle_unit & (obs[..., 12] == 1)).reshape(-1)]
    )


@needs_microrts
def test_env_spaces_mask_episode_length_ticks_same_step_autoreset_and_bootstrap_at_time_limits(mod, tmp_path, monkeypatch):
    """The env and its time limit, sharing one JVM: one game's spaces, mask, episode length and ticks per step; the
    vector env's autoreset; --bootstrap-truncated's final value, added where a game hit the limit."""
    assert_env_spaces_mask_episode_length_and_ticks(mod)
    assert_vector_env_autoresets_in_the_same_step(mod)
    with separately(monkeypatch, tmp_path / "bootstrap") as m:
        assert_bootstrap_truncated_adds_the_final_value_at_time_limits_only(mod, m)


def assert_env_spaces_mask_episode_length_and_ticks(mod):
    env = mod.MicrortsEnv("MicrortsMining-v1", mod.Args().max_steps)
    assert env.observation_space == mod.gym.spaces.Box(0, 1, OBS, np.uint8)
    assert env.action_space.nvec.tolist() == NVEC
    obs, info = env.reset(seed=0)
    assert obs.dtype == np.uint8 and (obs.sum(-1) == 5).all()  # one plane of each of the 5 features per cell
    assert np.flatnonzero(info["action_mask"][:100]).tolist() == [11, 12]  # our worker and base
    rng, steps, sources, truncated = np.random.default_rng(0), 0, set(), False
    while not truncated:  # random valid source cells, moves and harvests: the units get busy and idle again
        mask = info["action_mask"]
        assert mask.dtype == bool and np.array_equal(mask, blog_mask(obs))
        sources.add(tuple(np.flatnonzero(mask[:100])))
        units = np.flatnonzero(mask[:100])
        action = [rng.choice(units) if len(units) else 0, rng.choice([1, 2]), *rng.integers(0, 4, 4), 0, 0]
        obs, reward, terminated, truncated, info = env.step(np.array(action))
        steps += 1
        assert not terminated and reward >= 0  # the opponent is passive: only the time limit ends the game
    assert steps == 200 and len(sources) > 2  # 0.2.0's 200-step limit; the mask changed with the game
    # a step plays 10 game ticks: the state after one step equals that after 10 single ticks of the raw simulator,
    # the first with the same move, the other 9 with an invalid (ignored) action, and not that after 9
    obs, info = env.reset()
    twin = mod.MicrortsEnv("MicrortsMining-v1", 200)
    twin.reset()
    move = np.array([11, 1, 2, 0, 0, 0, 0, 0])  # our worker one cell south
    after_step = env.step(move)[0]
    ticks = [twin.game.client.step(np.array([a]), 0, 0).observation for a in [move] + [[0] * 8] * 9]
    encode = lambda raw: twin.game._encode_obs(np.array(raw)).astype(np.uint8)  # noqa: E731
    assert np.array_equal(after_step, encode(ticks[9])) and not np.array_equal(after_step, encode(ticks[8]))
    env.close(), twin.close()


def assert_vector_env_autoresets_in_the_same_step(mod):
    envs = mod.make_envs(tiny(mod), "x")
    assert isinstance(envs, mod.gym.vector.SyncVectorEnv) and envs.single_action_space.nvec.tolist() == NVEC
    obs, infos = envs.reset(seed=1)
    assert obs.shape == (2,) + OBS and infos["action_mask"].shape == (2, 229)
    for step in range(20):
        obs, reward, terminated, truncated, infos = envs.step(envs.action_space.sample())
    assert truncated.all() and not terminated.any()  # max_steps 20
    assert infos["final_info"]["episode"]["l"].tolist() == [20, 20] and infos["final_info"]["_episode"].all()
    assert np.array_equal(obs, envs.reset()[0])  # the observation returned is the next game's first (SAME_STEP)
    assert all(np.array_equal(m, blog_mask(o)) for m, o in zip(infos["action_mask"], obs))  # and so is the mask
    envs.close()


def assert_bootstrap_truncated_adds_the_final_value_at_time_limits_only(mod, monkeypatch):
    """--bootstrap-truncated: at the 20-step limit of both games (step 19 of the rollout), GAE's reward gains
    gamma * V(the final observation), V the rollout's agent, where the game was truncated and not terminated (env 0's
    end is made terminal too); every other reward is the env's own."""
    agents, final_obs, seen = [], {}, {}
    real_make_envs, real_gae = mod.make_envs, mod.compute_gae

    class SpyAgent(mod.Agent):
        def __init__(self, *a):
            super().__init__(*a)
            agents.append(self)

    def spy_make_envs(*a):
        envs, steps = real_make_envs(*a), []
        real_step = envs.step

        def step(actions):
            obs, reward, terminated, truncated, infos = real_step(actions)
            if "final_obs" in infos:
                final_obs[len(steps)] = np.stack(infos["final_obs"])
                terminated = terminated | (np.arange(len(terminated)) == 0)  # env 0's game also ends terminally
            steps.append(None)
            return obs, reward, terminated, truncated, infos

        envs.step = step
        return envs

    def spy_gae(rewards, *a):
        with torch.no_grad():  # before the update: the agent that collected the rollout
            seen[run] = (rewards.clone(), {s: agents[-1].get_value(torch.as_tensor(o)) for s, o in final_obs.items()})
        return real_gae(rewards, *a)

    monkeypatch.setattr(mod, "Agent", SpyAgent)
    monkeypatch.setattr(mod, "make_envs", spy_make_envs)
    monkeypatch.setattr(mod, "compute_gae", spy_gae)
    for run in (False, True):
        final_obs.clear()
        mod.train(tiny(mod, num_steps=32, total_timesteps=2 * 32, bootstrap_truncated=run, gamma=0.9))
    (off, _), (on, values) = seen[False], seen[True]
    assert list(values) == [19]  # the games of both envs hit the time limit together
    changed = torch.nonzero(on != off).tolist()
    assert changed == [[19, 1]]  # env 1's truncation only: env 0's end was terminal
    torch.testing.assert_close(on[19, 1] - off[19, 1], 0.9 * values[19][1], rtol=1e-5, atol=1e-6)
    assert values[19].abs().min() > 1e-4  # the added term is not vanishingly small


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"env_id": "MicrortsAttack-v9"}, "unknown Gym-μRTS task 'MicrortsAttack-v9'"),
        ({"max_steps": 0}, "--max-steps must be a finite number >= 1"),
        ({"total_timesteps": 10}, "leaves no iteration to run"),
    ]
    + PPO_BAD_INPUT,
)
def test_bad_input_rejected_before_training(mod, kw, message):
    assert_rejected_before_training(mod, tiny(mod, **kw), message)


def test_missing_microrts_is_a_config_error(mod, monkeypatch):
    monkeypatch.setitem(sys.modules, "gym_microrts020", None)  # as if it were not installed
    message = r"gym-microrts 0.2.0 \(the blog's Gym-μRTS\) is not installed: run `bash scripts/install_extras.sh microrts`"
    with pytest.raises(mod.ConfigError, match=message):
        mod.check_args(tiny(mod))


@microrts_missing
def test_missing_java_is_a_config_error(mod, monkeypatch):
    import jpype

    def no_jvm():
        raise jpype.JVMNotFoundException("No JVM shared library file (libjvm.so) found", "", "")

    monkeypatch.setattr(jpype, "getDefaultJVMPath", no_jvm)
    with pytest.raises(mod.ConfigError, match="needs a Java runtime and none was found"):
        mod.check_args(tiny(mod))


def test_cli_errors_are_one_line_and_write_nothing():
    """`python <script> --max-steps 0` (processes.run_cli, in this process) stops with exit 1 and one line, no traceback,
    and writes nothing. (Their imports: test_repo.py's test_importing_every_script_prints_and_writes_nothing.)"""
    for name in ("ppo_multidiscrete", "ppo_multidiscrete_mask"):
        code, stdout, stderr = run_cli(f"{name}.py", ["--max-steps", "0", "--no-cuda"])
        assert code == 1 and "Traceback" not in stderr, stderr[-2000:]
        assert stderr.strip().splitlines() == [f"{name}.py: error: --max-steps must be a finite number >= 1, got 0"]
        assert stdout == "" and os.listdir(".") == [], name


# ---- hack safety: the edits a researcher makes to a copy must work (issue 19) -----------------------


@needs_microrts
def test_hack_safety_cleanrl_update_temperature_added_layer_and_param_groups(mod, tmp_path, monkeypatch, capsys):
    """tests/hacks.py's four checks, sharing one JVM: (a) CleanRL's update step trains, (b) a temperature changes what
    the rollout samples, (c) an added layer trains, (d) --anneal-lr anneals every param group."""
    with separately(monkeypatch, tmp_path / "cleanrl_update") as m:
        assert_cleanrl_update_trains(mod, tiny(mod), tmp_path / "cleanrl_update", m)
    with separately(monkeypatch, tmp_path / "temperature") as m:
        assert_temperature_changes_what_the_rollout_samples(mod, m)
    with separately(monkeypatch, tmp_path / "added_layer") as m:
        assert_added_layer_trains(mod, tiny(mod), m)
    with separately(monkeypatch, tmp_path / "param_groups"):
        assert_every_param_group_anneals(mod, tiny(mod), tmp_path / "param_groups")
    with separately(monkeypatch, tmp_path / "copy"):  # issue 71: a copy runs as itself, an edited constructor evaluates
        assert_copy_runs_as_itself(mod, tiny(mod), tmp_path / "copy", capsys)
    with separately(monkeypatch, tmp_path / "constructor"):
        assert_new_constructor_argument_evaluates_and_resumes(mod, tiny(mod))


def assert_temperature_changes_what_the_rollout_samples(mod, monkeypatch):
    """tests/hacks.py's check (b) for a MultiDiscrete head: the head fixed so that component 1 (the action type, which
    the mask script leaves unmasked) has logits (0, 1, 0, 0, 0, 0), a temperature dividing them in the policy head;
    the rollout's action types follow softmax(logits / temperature), not softmax(logits), and the update scores the
    same policy."""
    logits, temperature = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64), 0.25
    bias = torch.zeros(sum(NVEC))
    bias[100:106] = logits
    sampled = edited_agent(
        mod,
        monkeypatch,
        "actor",
        lambda agent: setattr(agent, "actor", nn.Sequential(agent.actor, Scale(1 / temperature))),
        bias=bias,
    )
    out = mod.train(tiny(mod, num_envs=4, num_steps=64, total_timesteps=4 * 64 * 2, update_epochs=1))
    actions = torch.cat([a[:, 1] for a in sampled]).long()
    assert len(actions) == 4 * 64 * 2  # every rollout step sampled through Agent.get_action_and_value
    freq = torch.bincount(actions, minlength=6).double() / len(actions)
    edited, unedited = ((logits / t).softmax(-1) for t in (temperature, 1.0))
    tol = 4 / np.sqrt(len(actions))
    assert (freq - edited).abs().max() < tol and (freq - unedited).abs().max() > 2 * tol, (freq, edited, unedited)
    assert all(f["ratio_max_dev"] < 1e-5 for f in out["first_minibatch"])
