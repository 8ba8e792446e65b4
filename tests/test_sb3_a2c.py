"""Tests of benchmark/peers/sb3_a2c.py: SB3's A2C is configured as its docstring says (one update of it equals one of
a2c_paac.py from the same weights and rollout), its learning rate follows ours, it logs the whole game's raw score
under our tags, and benchmark/tools/run.py drives it as one of our scripts."""

import dataclasses
import json
import math
import operator
import os
import runpy
import sys
import tempfile

import ale_py
import numpy as np
import pytest
import torch
from conftest import ROOT
from promises import (
    ANNEAL_CASES,
    LOGGED,
    assert_anneals_to_0_at,
    assert_logged,
    assert_rejected_before_training,
    assert_resumed_log_reads_once,
    keep_checkpoint,
    read_scalars,
    resume_later,
)
from stable_baselines3.common.policies import ActorCriticCnnPolicy
from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike
from stable_baselines3.common.torch_layers import NatureCNN
from tiny import ASTERIX, tiny

import a2c_paac as paac
from benchmark import runs
from benchmark.peers import sb3_a2c as sb3
from benchmark.tools import run

RELEASED = dict(loss_scale=5.0, vf_coef=0.25, max_grad_norm=3.0, ent_coef=0.02)  # the authors' released settings


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    here = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("tiny_run"))
    try:
        yield sb3.train(tiny(sb3, **RELEASED)), os.getcwd()
    finally:
        os.chdir(here)


def test_defaults_are_a2c_paac_defaults():
    ours, theirs = dataclasses.asdict(paac.Args()), dataclasses.asdict(sb3.Args())
    assert set(theirs) - set(ours) == {"atari_wrapper"}  # every other flag is one of ours
    shared = set(theirs) - {"atari_wrapper", "exp_name"}
    assert {k: theirs[k] for k in shared} == {k: ours[k] for k in shared}
    assert [theirs[k] for k in ("num_envs", "num_steps", "rmsprop_eps", "max_grad_norm")] == [32, 5, 0.1, 40.0]


def test_built_model_is_configured_as_the_docstring_says(tiny_run):
    model = tiny_run[0]["model"]
    assert (model.n_envs, model.n_steps, model.gamma, model.gae_lambda) == (2, 5, 0.99, 1.0)
    assert model.normalize_advantage is False
    assert (model.ent_coef, model.vf_coef, model.max_grad_norm) == (0.02, 0.25, 3.0)
    opt = model.policy.optimizer
    assert type(opt) is RMSpropTFLike
    assert {k: opt.defaults[k] for k in ("alpha", "eps", "weight_decay", "momentum", "centered")} == {
        "alpha": 0.99,
        "eps": 0.1,
        "weight_decay": 0,
        "momentum": 0,
        "centered": False,
    }
    held = [p for g in opt.param_groups for p in g["params"]]
    assert len(held) == len(list(model.policy.parameters())) and all(map(operator.is_, held, model.policy.parameters()))
    policy = model.policy
    assert type(policy) is ActorCriticCnnPolicy and type(policy.features_extractor) is sb3.NipsCNN
    assert policy.share_features_extractor and not list(policy.mlp_extractor.parameters())  # net_arch=[]
    assert (policy.action_net.in_features, policy.action_net.out_features, policy.value_net.out_features) == (256, 4, 1)
    # the same network as ours: every parameter's shape, in order
    assert [p.shape for p in policy.parameters()] == [p.shape for p in paac.Agent(4, "nips").parameters()]
    assert model.lr_schedule(1.0) == pytest.approx(0.0014)  # the optimizer starts at the paper's 0.0007 * n_e


def test_nature_arch_is_sb3s_nature_cnn_with_ours_shapes():
    args = tiny(sb3, arch="nature", batch_size=10, num_iterations=4, learning_rate=0.0014)
    envs = sb3.make_envs(args)
    try:
        policy = sb3.make_model(args, envs).policy
    finally:
        envs.close()
    assert type(policy.features_extractor) is NatureCNN and policy.features_extractor.features_dim == 512
    assert [p.shape for p in policy.parameters()] == [p.shape for p in paac.Agent(4, "nature").parameters()]
    gains = [(policy.action_net, 0.01), (policy.value_net, 1.0), (policy.features_extractor.linear[0], 2**0.5)]
    for layer, gain in gains:  # orthogonal init with ours' gains, zero biases
        np.testing.assert_allclose(torch.linalg.svdvals(layer.weight.detach()).numpy(), gain, rtol=1e-4)
        assert torch.all(layer.bias == 0)


def copy_layers(policy, agent, arch):
    """SB3's weights into ours, layer by layer: the two networks then compute the same function."""
    ext = policy.features_extractor
    theirs = [ext.cnn[0], ext.cnn[2]] + ([ext.cnn[5]] if arch == "nips" else [ext.cnn[4], ext.linear[0]])
    ours = [m for m in agent.network.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    with torch.no_grad():
        pairs = zip(theirs + [policy.action_net, policy.value_net], ours + [agent.actor, agent.critic], strict=True)
        for a, b in pairs:
            b.weight.copy_(a.weight)
            b.bias.copy_(a.bias)


# the released settings with a clip between the first update's gradient norms without and with the x5 (0.06, 0.29):
# SB3 must scale before it clips, as ours does
@pytest.mark.parametrize("arch, settings", [("nips", {**RELEASED, "max_grad_norm": 0.15}), ("nature", {})])
def test_one_update_equals_a2c_paac_update(arch, settings):
    """One rollout and update of SB3's A2C, then ours (n-step returns, losses, clip, TF RMSProp) from the same weights
    on the same rollout: the same returns, log-probs, losses and new weights."""
    args = tiny(sb3, arch=arch, total_timesteps=10, batch_size=10, num_iterations=1, learning_rate=0.0224, **settings)
    envs = sb3.make_envs(args)
    try:
        model = sb3.make_model(args, envs)
        agent = paac.Agent(4, arch)
        copy_layers(model.policy, agent, arch)
        model.learn(10)  # one rollout of 5 steps x 2 envs, one update
    finally:
        envs.close()
    buf = model.rollout_buffer
    assert not buf.episode_starts[1:].any()  # no game ends in these 5 steps: the returns bootstrap throughout
    with torch.no_grad():
        bootstrap = agent.get_value(torch.as_tensor(model._last_obs))
    returns = paac.nstep_returns(torch.as_tensor(buf.rewards), torch.zeros(5, 2), bootstrap, 0.99)
    # GAE(1) = ours' n-step returns (SB3 has flattened its buffer env by env for the update)
    np.testing.assert_allclose(buf.returns.reshape(2, 5).T, returns.numpy(), rtol=1e-5, atol=1e-6)

    b = {
        k: torch.as_tensor(getattr(buf, name)).reshape(-1)
        for k, name in [("actions", "actions"), ("logprobs", "log_probs"), ("returns", "returns")]
    }  # in SB3's (flattened) order
    b["obs"] = torch.as_tensor(buf.observations).reshape(10, 4, 84, 84)
    optimizer = paac.TFRMSprop(agent.parameters(), lr=0.0224, decay=0.99, eps=0.1)
    before = [p.detach().clone() for p in agent.parameters()]
    losses, first = paac.update(agent, optimizer, b, paac.Args(**{k: getattr(args, k) for k in RELEASED}))
    assert first["ratio_max_dev"] < 1e-5  # SB3's sampled actions have the same log-probs under ours
    logged = model.logger.name_to_value
    assert logged["train/value_loss"] == pytest.approx(losses["value_loss"], rel=1e-5)
    assert logged["train/policy_loss"] == pytest.approx(losses["policy_loss"], rel=1e-4, abs=1e-7)
    assert -logged["train/entropy_loss"] == pytest.approx(losses["entropy"], rel=1e-6)
    if settings:
        assert losses["grad_norm"] / args.loss_scale < args.max_grad_norm < losses["grad_norm"]
    for theirs_p, ours_p in zip(model.policy.parameters(), agent.parameters(), strict=True):
        torch.testing.assert_close(theirs_p.detach(), ours_p.detach(), rtol=1e-4, atol=1e-6)
    assert max((p.detach() - q).abs().max().item() for p, q in zip(agent.parameters(), before)) > 1e-4  # it moved


def test_init_torch_keeps_every_layers_own_init_as_a2c_paac_does():
    """--init torch (the PAAC authors' init, which Pong learned with): SB3's ortho_init off, so that every weight and bias
    is PyTorch's uniform within +-1/sqrt(fan-in), as a2c_paac.py's --init torch; the orthogonal default is not."""
    args = tiny(sb3, init="torch", total_timesteps=10, batch_size=10, num_iterations=1, learning_rate=0.0014)
    envs = sb3.make_envs(args)
    try:
        torch.manual_seed(0)
        policy = sb3.make_model(args, envs).policy
        torch.manual_seed(0)
        orthogonal = sb3.make_model(dataclasses.replace(args, init="orthogonal"), envs).policy
    finally:
        envs.close()
    layers = [m for m in policy.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    ours = [m for m in paac.Agent(4, "nips", init="torch").modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert [m.weight.shape for m in layers] == [m.weight.shape for m in ours]
    for m in layers:  # uniform within the bound, the weights filling it (orthogonal weights of std 0.01 or 1 do neither)
        bound = 1 / math.sqrt(m.weight[0].numel())
        assert bound >= m.weight.abs().max() > 0.8 * bound and bound >= m.bias.abs().max() > 0
    assert policy.action_net.weight.std() > 10 * orthogonal.action_net.weight.std()  # the head 0.01 only when orthogonal
    assert not orthogonal.action_net.bias.any()


@pytest.mark.parametrize("anneal_timesteps, anneal_updates", ANNEAL_CASES)
def test_learning_rate_follows_a2c_paac_schedule(anneal_timesteps, anneal_updates):
    assert_anneals_to_0_at(sb3.train(tiny(sb3, anneal_timesteps=anneal_timesteps)), anneal_updates)


@pytest.mark.parametrize("atari_wrapper", ["paac", "sb3"])
def test_logged_return_is_the_whole_games_raw_score(monkeypatch, atari_wrapper):
    games, current, frames = [], {}, {}
    original_step = ale_py.env.AtariEnv.step

    def tally(self, action, *a, **kw):  # the emulator's own rewards, summed per game
        obs, reward, terminated, truncated, info = original_step(self, action, *a, **kw)
        current[id(self)], frames[id(self)] = current.get(id(self), 0.0) + reward, frames.get(id(self), 0) + 1
        if terminated or truncated:
            games.append((current.pop(id(self)), frames.pop(id(self))))
        return obs, reward, terminated, truncated, info

    monkeypatch.setattr(ale_py.env.AtariEnv, "step", tally)
    out = sb3.train(tiny(sb3, env_id=ASTERIX, num_steps=25, total_timesteps=2 * 25 * 24, atari_wrapper=atari_wrapper))
    assert len(games) >= 3 and sorted(out["episodic_return"]) == sorted(r for r, _ in games)
    assert max(r for r, _ in games) > 50  # Asterix scores 50 a reward: far above a sum of clipped rewards
    assert sorted(read_scalars(out["run_dir"], "charts/episodic_return")) == sorted(out["episodic_return"])
    # lengths in agent steps of 4 frames, as ours: the frames of the game less its no-ops (and life-loss no-ops)
    for length, (_, n_frames) in zip(sorted(out["episodic_length"]), sorted(games, key=lambda g: g[1]), strict=True):
        assert -1 <= n_frames / 4 - length <= 7.5 + 2 * (atari_wrapper == "sb3")


@pytest.mark.parametrize("atari_wrapper, life_loss_ends", [("paac", False), ("sb3", True)])
def test_life_loss_ends_a_training_episode_only_with_sb3s_wrapper(atari_wrapper, life_loss_ends):
    envs = sb3.make_envs(tiny(sb3, env_id=ASTERIX, num_envs=1, atari_wrapper=atari_wrapper))
    envs.seed(0)
    envs.reset()
    ale, dones, rng = envs.venv.envs[0].unwrapped.ale, [], np.random.default_rng(0)
    try:
        while len(dones) < 1 or not dones[-1][1]:  # until the first game ends
            _, _, done, infos = envs.step(rng.integers(0, 9, size=1))
            if done[0]:
                dones.append((ale.lives(), "episode" in infos[0]))
    finally:
        envs.close()
    assert (len(dones) > 1) == life_loss_ends  # Asterix has 3 lives: sb3's wrapper ends an episode at each
    assert all(lives > 0 for lives, game_over in dones if not game_over)


def test_tiny_run_writes_our_tags_and_run_py_reads_it(tiny_run):
    out, where = tiny_run
    assert out["run_dir"].startswith("runs/BreakoutNoFrameskip-v4__sb3_a2c__1__") and out["global_step"] == 40
    tb = os.path.join(where, out["run_dir"])
    assert_logged(tb, LOGGED, count=4)
    assert 1.35 < read_scalars(tb, "losses/entropy")[0] <= np.log(4)  # H, not SB3's -H: near uniform over 4 actions
    data = runs.read_run(tb)
    assert data["last_step"] == 40 and data["hparams"]["total_timesteps"] == "40"
    assert data["hparams"]["loss_scale"] == "5.0" and data["hparams"]["atari_wrapper"] == "paac"


def test_run_py_drives_it_unmodified(capsys):
    argv = [
        "--script",
        os.path.join(ROOT, "benchmark", "peers", "sb3_a2c.py"),
        "--env-ids",
        ASTERIX,
        "--seeds",
        "3",
        "--",
        "--total-timesteps",
        "100",
        "--num-envs",
        "2",
        "--num-steps",
        "25",
    ]
    assert run.main(argv) == 0
    (path,) = [os.path.join("runs", "summaries", f) for f in os.listdir("runs/summaries")]
    summary = json.load(open(path))
    assert summary["ok"] and summary["global_step"] == 100 and summary["total_timesteps"] == "100"
    assert summary["tb_dir"].startswith(f"{ASTERIX}__sb3_a2c-") and "ok" in capsys.readouterr().out


def test_resume_matches_uninterrupted_run(monkeypatch, tmp_path):
    """Resumed from its checkpoint at update 20 of 50, a run takes the uninterrupted run's steps: the same losses and
    learning rates, and the same games, two of which end after the checkpoint (their no-ops, frame stacks and
    Monitor sums were saved); the log reads once. A finished run, or another setting, is refused. Neither run leaves
    anything in the temporary directory (SB3's default logger made an empty SB3-<time> folder there for each)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.mkdir(tmp_path / "tmp")
    keep_checkpoint(sb3, monkeypatch, kept := "update20.pt", at=20)
    full = sb3.train(tiny(sb3, total_timesteps=2 * 5 * 50, save_model=True, save_every=10, **RELEASED))
    resumed = resume_later(sb3, kept)
    assert resumed["global_step"] == 500 and resumed["run_dir"] == full["run_dir"]
    assert resumed["losses"] == full["losses"][20:] and resumed["learning_rate"] == full["learning_rate"][20:]
    n_before = len(full["episodic_return"]) - len(resumed["episodic_return"])
    assert len(resumed["episodic_return"]) >= 2 and resumed["episodic_return"] == full["episodic_return"][n_before:]
    assert resumed["episodic_length"] == full["episodic_length"][n_before:]
    assert_resumed_log_reads_once(full)
    assert os.listdir(tmp_path / "tmp") == []
    with pytest.raises(sb3.ConfigError, match="--total-timesteps 500 leaves no iteration to run"):
        sb3.train(sb3.Args(resume=full["checkpoint"]))
    with pytest.raises(sb3.ConfigError, match="--num-envs cannot change when resuming"):
        sb3.train(sb3.Args(resume=full["checkpoint"], num_envs=4))
    torch.save({"script": "a2c_paac.py", "args": {}}, "ours.pt")
    with pytest.raises(sb3.ConfigError, match="checkpoint 'ours.pt' was not written by this sb3_a2c.py"):
        sb3.train(sb3.Args(resume="ours.pt"))
    with pytest.raises(sb3.ConfigError, match="checkpoint 'missing.pt' could not be read"):
        sb3.train(sb3.Args(resume="missing.pt"))


def test_resume_restores_the_observation_in_the_layout_a_step_gives():
    """The checkpoint holds the last observation as a C-order copy; restored, it is again VecTransposeImage's NCHW view
    of NHWC frames, as every step's is. The convolutions pick their kernel by the input's layout, and on an AVX2-only
    CPU (AMD EPYC) the two kernels differ in the last bits: a C-order first step broke the exact resume there."""
    run = sb3.train(tiny(sb3, save_model=True, **RELEASED))
    ckpt, args = sb3.load_checkpoint(run["checkpoint"], sb3.Args())
    stepped = run["model"]._last_obs
    assert not stepped.flags["C_CONTIGUOUS"] and ckpt["last_obs"].flags["C_CONTIGUOUS"]  # what made the two differ
    envs = sb3.make_envs(args)
    try:
        model = sb3.make_model(dataclasses.replace(args, learning_rate=0.0014, batch_size=10, num_iterations=4), envs)
        sb3.restore(model, envs, ckpt)
        assert model._last_obs.strides == stepped.strides and np.array_equal(model._last_obs, stepped)
    finally:
        envs.close()


def test_bad_input_is_one_line_naming_this_script(monkeypatch):
    assert_rejected_before_training(sb3, tiny(sb3, env_id="ALE/Breakout-v5"), "; sb3_a2c.py needs a NoFrameskip-v4 id")
    assert_rejected_before_training(sb3, tiny(sb3, anneal_timesteps=0), "anneal-timesteps must be a finite number >= 1")
    monkeypatch.setattr(sys, "argv", ["sb3_a2c.py", "--ent-coef", "-1", "--no-cuda"])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(os.path.join(ROOT, "benchmark", "peers", "sb3_a2c.py"), run_name="__main__")
    assert e.value.code == "sb3_a2c.py: error: --ent-coef must be a finite number >= 0, got -1.0"
