"""Tests of ppo.py and ppo_shared.py: each numbered detail, the logging, checkpoints and bad input.

Most tests run against both scripts (they must agree everywhere but the network).
"""

import dataclasses
import errno
import glob
import importlib
import math
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import processes
import pytest
import torch
from conftest import ROOT, CountingEnv, interrupt_at_update, resume_elsewhere
from hacks import (
    assert_every_group_annealed,
    critic_group_copy,
    edited_agent,
    recorded_rates,
)
from processes import run_cli
from promises import (
    PPO_BAD_INPUT,
    PPO_LOGGED,
    assert_checkpoint_evaluates,
    assert_cli_error_is_one_line,
    assert_logged,
    assert_rejected_before_training,
    assert_resume_matches_uninterrupted_run,
    assert_resume_runs_longer_and_nothing_else,
    keep_checkpoint,
    machine_memory,
    poison_weights_at,
    read_scalars,
    resume_later,
)
from tiny import SCRIPTS as ALL
from tiny import tiny

SCRIPTS = ["ppo", "ppo_shared"]


@pytest.fixture(params=SCRIPTS)
def mod(request):
    return importlib.import_module(request.param)


# ---- detail 5: GAE -------------------------------------------------------------------------------


def brute_force_gae(rewards, values, dones, next_value, gamma, lam):
    """The explicit sum A_t = sum_k (gamma*lam)^(k-t) delta_k, stopped at the end of t's episode."""
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            coef = 1.0
            for k in range(t, T):
                v_next = next_value[n] if k + 1 == T else values[k + 1, n]
                delta = rewards[k, n] + gamma * v_next * (1 - dones[k, n]) - values[k, n]
                adv[t, n] += coef * delta
                if dones[k, n]:
                    break
                coef *= gamma * lam
    return adv


@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (32, 4)])
def test_compute_gae_matches_brute_force(mod, shape):
    g = np.random.default_rng(shape[0])
    rewards, values = g.normal(size=shape), g.normal(size=shape)
    dones = (g.random(shape) < 0.2).astype(np.float64)
    next_value = g.normal(size=shape[1])
    adv, ret = mod.compute_gae(*map(torch.tensor, (rewards, values, dones, next_value)), 0.97, 0.9)
    expected = brute_force_gae(rewards, values, dones, next_value, 0.97, 0.9)
    assert adv.dtype == torch.float64 and adv.shape == shape
    np.testing.assert_allclose(adv.numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(ret.numpy(), expected + values, atol=1e-6)  # returns = advantages + values


# every script with GAE carries the same compute_gae contract; it is checked here once for all of them (ppo.py and
# ppo_shared.py by the tests above)
WITH_GAE = [s.removesuffix(".py") for s in ALL if "\ndef compute_gae(" in open(os.path.join(ROOT, s)).read()]


@pytest.mark.parametrize("name", [s for s in WITH_GAE if s not in SCRIPTS])
def test_compute_gae_contract_in_every_script_with_gae(name):
    family = importlib.import_module(name)
    g = np.random.default_rng(7)
    rewards, values = g.normal(size=(9, 3)), g.normal(size=(9, 3))
    dones = (g.random((9, 3)) < 0.3).astype(np.float64)
    next_value = g.normal(size=3)
    adv, ret = family.compute_gae(*map(torch.tensor, (rewards, values, dones, next_value)), 0.999, 0.9)
    expected = brute_force_gae(rewards, values, dones, next_value, 0.999, 0.9)
    np.testing.assert_allclose(adv.numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(ret.numpy(), expected + values, atol=1e-6)


def test_compute_gae_lambda_one_is_discounted_return_plus_bootstrap(mod):
    g = np.random.default_rng(0)
    T, N, gamma = 20, 3, 0.9
    rewards, values = g.normal(size=(T, N)), g.normal(size=(T, N))
    dones = np.zeros((T, N))
    dones[4, 0] = dones[11, 0] = dones[19, 1] = 1.0
    next_value = g.normal(size=N)
    _, ret = mod.compute_gae(*map(torch.tensor, (rewards, values, dones, next_value)), gamma, 1.0)
    for n in range(N):
        for t in range(T):
            total, k = 0.0, t
            while True:  # forward sum of discounted rewards until the episode ends or the rollout does
                total += gamma ** (k - t) * rewards[k, n]
                if dones[k, n]:
                    break
                if k == T - 1:
                    total += gamma ** (T - t) * next_value[n]
                    break
                k += 1
            assert ret[t, n].item() == pytest.approx(total, abs=1e-6)


# ---- detail 2 and 3: initialisation and Adam -----------------------------------------------------

EXPECTED_INIT = {
    "ppo": {"actor.0": 2**0.5, "actor.2": 2**0.5, "actor.4": 0.01, "critic.0": 2**0.5, "critic.2": 2**0.5, "critic.4": 1.0},
    "ppo_shared": {"network.0": 2**0.5, "network.2": 2**0.5, "actor": 0.01, "critic": 1.0},
}


def test_init_scales(mod):
    torch.manual_seed(0)
    agent = mod.Agent(4, 3)
    linears = {n: m for n, m in agent.named_modules() if isinstance(m, torch.nn.Linear)}
    assert set(linears) == set(EXPECTED_INIT[mod.__name__])
    for name, std in EXPECTED_INIT[mod.__name__].items():
        layer = linears[name]
        # orthogonal with gain `std`: every singular value equals std
        np.testing.assert_allclose(torch.linalg.svdvals(layer.weight.detach()).numpy(), std, rtol=1e-4)
        assert torch.all(layer.bias == 0)
        assert layer.weight.shape[1] in (4, 64) and layer.weight.shape[0] in (64, 3, 1)


def test_adam_eps_and_lr_schedule(mod):
    out = mod.train(tiny(mod, total_timesteps=2 * 16 * 5))
    assert out["optimizer"].defaults["eps"] == 1e-5
    assert all(v > 0 for v in out["seconds"].values()) and set(out["seconds"]) == {"env", "inference", "update"}
    lrs = out["learning_rate"]
    assert len(lrs) == 5 and lrs[0] == 2.5e-4 and lrs[-1] == 0.0  # detail 4: exactly 0 at the last iteration
    np.testing.assert_allclose(np.diff(lrs), -2.5e-4 / 4)  # linear
    assert lrs == [2.5e-4 * (1 - i / 4) for i in range(5)]  # to the last bit, as before param groups had their own
    one = mod.train(tiny(mod, total_timesteps=2 * 16))  # a single iteration keeps the initial rate
    assert one["learning_rate"] == [2.5e-4]


# ---- details 6-11: the update --------------------------------------------------------------------


def hand_args(mod, **kw):
    return mod.Args(**{"clip_coef": 0.2, "ent_coef": 0.01, "vf_coef": 0.5, "norm_adv": False, **kw})


def test_clipped_surrogate_and_value_loss_by_hand(mod):
    ratio = torch.tensor([0.5, 1.0, 1.5], dtype=torch.float64)
    old = torch.tensor([-1.0, -2.0, -0.5], dtype=torch.float64)
    loss, pg, v, ent, logratio = mod.ppo_losses(
        old + ratio.log(),
        old,
        torch.tensor([1.0, -1.0, 2.0], dtype=torch.float64),
        torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64),
        torch.tensor([0.5, 2.1, 0.0], dtype=torch.float64),
        torch.tensor([2.0, 0.0, 1.0], dtype=torch.float64),
        torch.tensor([0.5, 0.6, 0.7], dtype=torch.float64),
        hand_args(mod),
    )
    # per sample max(-A r, -A clip(r, 0.8, 1.2)): -0.5, 1.0, -2.4
    assert pg.item() == pytest.approx(-1.9 / 3)
    # per sample max((v-R)^2, (clip(v, old-0.2, old+0.2)-R)^2): 1.69, 4.0, 1.0
    assert v.item() == pytest.approx(0.5 * 6.69 / 3)
    assert ent.item() == pytest.approx(0.6)
    assert loss.item() == pytest.approx(-1.9 / 3 - 0.01 * 0.6 + 0.5 * 0.5 * 6.69 / 3)
    old_kl, kl, clipfrac = mod.ratio_stats(logratio, 0.2)
    assert clipfrac.item() == pytest.approx(2 / 3)
    assert kl.item() == pytest.approx(np.mean([-0.5 - math.log(0.5), 0.0, 0.5 - math.log(1.5)]))
    assert old_kl.item() == pytest.approx(np.mean([-math.log(0.5), 0.0, -math.log(1.5)]))
    with_grad = logratio.clone().requires_grad_()
    assert not any(x.requires_grad for x in mod.ratio_stats(with_grad, 0.2))  # statistics, not losses
    _, _, v_unclipped, *_ = mod.ppo_losses(
        old,
        old,
        torch.zeros(3),
        torch.tensor([1.0, 2.0, 0.0]),
        torch.tensor([0.5, 2.1, 0.0]),
        torch.tensor([2.0, 0.0, 1.0]),
        torch.zeros(3),
        hand_args(mod, clip_vloss=False),
    )
    assert v_unclipped.item() == pytest.approx(0.5 * 6.0 / 3)


def test_minibatches_partition_each_epoch(mod, monkeypatch):
    # detail 6: every epoch sees each sample once, in minibatch_size pieces, in a new order
    seen, real = [], mod.ppo_losses
    monkeypatch.setattr(mod, "ppo_losses", lambda *a: seen.append(a[0].detach().clone()) or real(*a))
    agent, batch, args = make_batch(mod)
    args.norm_adv = False
    with torch.no_grad():  # newlogprob per sample identifies the sample (obs are random floats)
        _, all_logprobs, _, _ = agent.get_action_and_value(batch["obs"], batch["actions"])
    mod.update(agent, torch.optim.SGD(agent.parameters(), lr=0.0), batch, args)
    assert len(seen) == args.update_epochs * args.num_minibatches and all(len(x) == args.minibatch_size for x in seen)
    epochs = [torch.cat(seen[e * args.num_minibatches : (e + 1) * args.num_minibatches]) for e in range(args.update_epochs)]
    for epoch in epochs:
        torch.testing.assert_close(torch.sort(epoch).values, torch.sort(all_logprobs).values)
    assert not torch.equal(epochs[0], epochs[1])  # reshuffled every epoch


def test_advantages_normalised_per_minibatch(mod, monkeypatch):
    # update() hands ppo_losses minibatches with zero mean and unit std each; normalising the whole batch
    # would leave each minibatch's mean off zero by ~1/sqrt(minibatch size)
    seen, real = [], mod.ppo_losses
    monkeypatch.setattr(mod, "ppo_losses", lambda *a: seen.append(a[2].clone()) or real(*a))
    agent, batch, args = make_batch(mod)
    mod.update(agent, torch.optim.Adam(agent.parameters(), eps=1e-5), batch, args)
    assert len(seen) == args.update_epochs * args.num_minibatches
    for mb_adv in seen:
        assert len(mb_adv) == args.minibatch_size
        assert abs(mb_adv.mean().item()) < 1e-6 and mb_adv.std().item() == pytest.approx(1.0, abs=1e-6)
    # without --norm-adv each epoch's minibatches carry the raw advantages, all of them once
    seen.clear()
    args.norm_adv = False
    mod.update(agent, torch.optim.Adam(agent.parameters(), eps=1e-5), batch, args)
    epoch = torch.cat(seen[: args.num_minibatches])
    assert torch.equal(torch.sort(epoch).values, torch.sort(batch["advantages"]).values)


def make_batch(mod, n=256):
    torch.manual_seed(0)
    args = mod.Args(num_envs=4, num_steps=n // 4, num_minibatches=4, update_epochs=3, max_grad_norm=0.5)
    args.batch_size, args.minibatch_size = n, n // 4
    agent = mod.Agent(4, 3)
    obs, actions = torch.randn(n, 4) * 3, torch.randint(0, 3, (n,))
    with torch.no_grad():
        _, logprobs, _, values = agent.get_action_and_value(obs, actions)
    batch = {
        "obs": obs,
        "actions": actions,
        "logprobs": logprobs,
        "values": values,
        "advantages": torch.randn(n) * 4 + 3,
        "returns": torch.randn(n) * 10,
    }
    return agent, batch, args


def test_first_minibatch_ratio_is_one_and_gradients_are_clipped(mod):
    agent, batch, args = make_batch(mod)
    optimizer = torch.optim.Adam(agent.parameters(), lr=0.01, eps=1e-5)
    norms, step = [], optimizer.step

    def checked_step(*a, **k):  # the global norm the optimizer actually sees
        norms.append(torch.norm(torch.stack([p.grad.norm() for p in agent.parameters()])).item())
        return step(*a, **k)

    optimizer.step = checked_step
    losses, first = mod.update(agent, optimizer, batch, args)
    assert first == {"ratio_max_dev": 0.0, "clipfrac": 0.0, "approx_kl": 0.0}
    assert len(norms) == args.update_epochs * args.num_minibatches
    assert max(norms) <= args.max_grad_norm + 1e-5
    assert max(norms) > args.max_grad_norm - 1e-3  # returns of scale 10 do need clipping here
    assert losses["clipfrac"] > 0  # later minibatches did move the policy


def test_target_kl_stops_the_epochs_early(mod):
    steps = []
    for target_kl in (None, 1e-12):
        agent, batch, args = make_batch(mod)
        args.target_kl = target_kl
        optimizer = torch.optim.Adam(agent.parameters(), lr=0.01, eps=1e-5)
        step = optimizer.step
        optimizer.step = lambda *a, _step=step, **k: steps.append(target_kl) or _step(*a, **k)
        mod.update(agent, optimizer, batch, args)
    assert steps.count(None) == args.update_epochs * args.num_minibatches
    assert steps.count(1e-12) == args.num_minibatches  # the first epoch's last minibatch already exceeds it


def test_training_first_minibatch_is_on_policy(mod):
    out = mod.train(tiny(mod))
    assert len(out["first_minibatch"]) == len(out["losses"]) > 0  # one an iteration, all checked below
    for first in out["first_minibatch"]:  # the batched old log-probs equal the minibatch's recomputation
        assert first["ratio_max_dev"] < 1e-6 and first["clipfrac"] == 0.0 and abs(first["approx_kl"]) < 1e-7


def test_get_action_and_value_samples_the_softmax_and_scores_it(mod):
    torch.manual_seed(0)
    agent = mod.Agent(4, 4)
    with torch.no_grad():  # a head that makes the four probabilities clearly different
        head = agent.actor if isinstance(agent.actor, torch.nn.Linear) else agent.actor[-1]
        head.weight.zero_()
        head.bias.copy_(torch.tensor([0.0, 1.0, 2.0, -1.0]))
        action, logprob, entropy, value = agent.get_action_and_value(torch.randn(200000, 4))
    probs = head.bias.softmax(-1).detach()
    np.testing.assert_allclose(torch.bincount(action, minlength=4).numpy() / 200000, probs.numpy(), atol=4e-3)
    dist = torch.distributions.Categorical(probs=probs)  # the written-out log-prob and entropy are Categorical's
    torch.testing.assert_close(logprob, dist.log_prob(action), rtol=0, atol=1e-6)
    torch.testing.assert_close(entropy, dist.entropy().expand(200000), rtol=0, atol=1e-6)
    assert value.shape == (200000,)


# ---- hack safety: the edits a researcher makes to a copy must work (issue 19) -----------------------


class MaskFirstAction(torch.nn.Module):
    def forward(self, logits):  # the way a researcher masks an action: its logit to -inf
        return logits.masked_fill(torch.arange(logits.shape[-1]) == 0, float("-inf"))


def test_hack_minus_inf_mask_in_the_head_trains(mod, monkeypatch):
    sampled = edited_agent(
        mod, monkeypatch, "actor", lambda agent: setattr(agent, "actor", torch.nn.Sequential(agent.actor, MaskFirstAction()))
    )
    out = mod.train(tiny(mod))
    actions = torch.cat([a.reshape(-1) for a in sampled])
    assert len(actions) == 2 * 16 * 4 and not (actions == 0).any()  # the masked action is never taken
    assert all(np.isfinite(v) for losses in out["losses"] for v in losses.values())  # entropy 0, not nan, for it
    assert all(np.isfinite(p.detach()).all() for p in out["agent"].parameters())


def test_every_param_group_resumes_its_schedule(mod, tmp_path, monkeypatch):
    """(d)'s copy resumed from its checkpoint after iteration 2 of 4 steps at the uninterrupted run's rates in both
    groups: each group's initial rate travels in the checkpoint (the optimizer's param groups keep "initial_lr")."""
    copy = critic_group_copy(mod, tmp_path)
    keep_checkpoint(copy, monkeypatch, kept := "iteration2.pt")
    with recorded_rates() as full:
        out = copy.train(tiny(mod, save_model=True, save_every=1))
    with recorded_rates() as resumed:
        resume_later(copy, kept)
    assert len(resumed) == len(full) // 2 and resumed == full[len(full) // 2 :]
    assert_every_group_annealed(full, out["learning_rate"])


# ---- logging -------------------------------------------------------------------------------------


def test_logged_returns_are_episode_reward_sums(mod):
    CountingEnv.finished.clear()
    out = mod.train(tiny(mod, env_id="Counting-v0"))
    assert len(CountingEnv.finished) > 20
    # same episodes in the same order (env i of a step before env i+1); returns vary with the episode
    assert out["episodic_return"] == CountingEnv.finished
    assert len(set(CountingEnv.finished)) > 3
    logged = read_scalars(f"runs/{out['run_name']}", "charts/episodic_return")
    np.testing.assert_allclose(sorted(logged), sorted(CountingEnv.finished))
    assert set(out["episodic_length"]) <= {3, 4, 5, 6} and 6 in out["episodic_length"]


def test_all_logging_keys_present(mod):
    out = mod.train(tiny(mod))
    run_dir = f"runs/{out['run_name']}"
    assert_logged(run_dir, ["charts/episodic_return", "charts/episodic_length"] + PPO_LOGGED)


# ---- truncation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bootstrap", [False, True])
def test_bootstrap_truncated(mod, monkeypatch, bootstrap):
    agents, calls, real_gae = [], [], mod.compute_gae

    class SpyAgent(mod.Agent):
        def __init__(self, *a):
            super().__init__(*a)
            agents.append(self)

    def spy_gae(rewards, values, dones, next_value, gamma, lam):
        if not calls:  # the first rollout: the agent is still the one that collected it
            with torch.no_grad():
                final_value = agents[0].get_value(torch.tensor([0.6, 0.0, 0.0, 0.0])).item()
            calls.append((rewards.clone(), dones.clone(), final_value))
        return real_gae(rewards, values, dones, next_value, gamma, lam)

    monkeypatch.setattr(mod, "Agent", SpyAgent)
    monkeypatch.setattr(mod, "compute_gae", spy_gae)
    mod.train(tiny(mod, env_id="CountingNoTerm-v0", num_envs=1, bootstrap_truncated=bootstrap, gamma=0.9))
    rewards, dones, final_value = calls[0]
    assert dones[:, 0].tolist()[:12] == [0, 0, 0, 0, 0, 1] * 2  # truncation still ends the episode
    assert rewards[4, 0].item() == 5.0  # untouched mid-episode
    expected = 6.0 + (0.9 * final_value if bootstrap else 0.0)  # step 6 of episode 0 is truncated
    assert rewards[5, 0].item() == pytest.approx(expected, abs=1e-6)
    assert abs(final_value) > 1e-3  # the bootstrap term is not vanishingly small


# ---- seeding, checkpoints, resume, evaluation ----------------------------------------------------


def test_same_seed_same_losses_other_seed_differs(mod):
    a, b = mod.train(tiny(mod, seed=3)), mod.train(tiny(mod, seed=3))
    c = mod.train(tiny(mod, seed=4))
    assert a["losses"] == b["losses"] and a["episodic_return"] == b["episodic_return"]
    assert a["losses"] != c["losses"]


def test_resume_matches_uninterrupted_run(mod, monkeypatch):
    assert_resume_matches_uninterrupted_run(
        mod, tiny(mod, env_id="CartPole-v1", total_timesteps=2 * 16 * 6, save_model=True, save_every=2), monkeypatch
    )


def test_interrupted_run_keeps_its_last_checkpoint(mod, monkeypatch):
    interrupt_at_update(mod, monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        mod.train(tiny(mod, save_model=True, save_every=1, total_timesteps=2 * 16 * 6))
    (ckpt,) = [os.path.join(r, f) for r, _, fs in os.walk("runs") for f in fs if f == "checkpoint.pt"]
    state = torch.load(ckpt, weights_only=False)
    assert state["iteration"] == 2 and state["script"] == f"{mod.__name__}.py"

    # Ctrl-C while torch.save writes the next checkpoint (100 MB: it lands inside the writes, from which torch.save would
    # let out a RuntimeError of its zip writer instead) is a KeyboardInterrupt, and leaves the previous one readable
    state, previous = {"script": "x", "weights": torch.zeros(25_000_000)}, signal.getsignal(signal.SIGALRM)
    signal.signal(signal.SIGALRM, signal.default_int_handler)
    signal.setitimer(signal.ITIMER_REAL, 0.01)
    try:
        with pytest.raises(KeyboardInterrupt):
            mod.save_checkpoint(ckpt, state)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert torch.load(ckpt, weights_only=False)["iteration"] == 2
    assert not os.path.exists(f"{ckpt}.tmp")  # the failed save left no partial file behind


def test_ctrl_c_as_torch_save_ends_its_zip_still_exits_with_the_message(mod, tmp_path):
    """A Ctrl-C landing just as torch.save's zip writer context exits, before it ends the zip (a CI failure under
    --save-every 1), leaves the writer to end it from its destructor once the exception is dropped: into a file that was
    closed by then, the process aborted ("terminate called ... write to closed file") before printing its message. A
    child process here, as the abort would take pytest with it."""
    child = f"""import sys, torch, torch.serialization
sys.path.insert(0, {ROOT!r})
import {mod.__name__} as mod
mod.save_checkpoint("checkpoint.pt", {{"iteration": 1}})
def interrupted(self, *exc_info):
    raise KeyboardInterrupt
torch.serialization._open_zipfile_writer_buffer.__exit__ = interrupted
try:
    mod.save_checkpoint("checkpoint.pt", {{"iteration": 2, "weights": torch.zeros(1000)}})
except KeyboardInterrupt:
    sys.exit("interrupted")
"""
    run = subprocess.run([sys.executable, "-c", child], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (run.returncode, run.stderr.splitlines()[-1:]) == (1, ["interrupted"]), run.stderr[-2000:]
    assert os.listdir(tmp_path) == ["checkpoint.pt"] and torch.load(tmp_path / "checkpoint.pt")["iteration"] == 1


def test_capture_video_records_env_0(mod):
    out = mod.train(tiny(mod, env_id="CartPole-v1", capture_video=True))
    videos = os.listdir(f"videos/{out['run_name']}")
    assert "rl-video-episode-0.mp4" in videos and os.path.getsize(f"videos/{out['run_name']}/rl-video-episode-0.mp4") > 1000


def test_evaluate_checkpoint_matches_live_agent(mod):
    assert_checkpoint_evaluates(mod, mod.train(tiny(mod, env_id="CartPole-v1", save_model=True)), episodes=3)


# the best 20-game mean within 50k steps, seeds 1-4 on an AMD EPYC: ppo.py 224.6-272.6, ppo_shared.py 53.2-64.9 (the
# shared trunk learns more slowly on classic control, seed 000); the bars leave room for another host's rounding and
# stay well above a random policy's ~22 (the first windows: 20.4-26.3)
LEARNING_BAR = {"ppo": 150, "ppo_shared": 40}


def test_learns_cartpole_within_50k_steps(mod):
    out = mod.train(mod.Args(cuda=False, total_timesteps=50_000, seed=1))
    returns = np.array(out["episodic_return"])
    rolling = np.convolve(returns, np.ones(20) / 20, mode="valid")
    assert rolling[:5].max() < 40  # it started from a near-random policy
    assert rolling.max() >= LEARNING_BAR[mod.__name__], f"best 20-episode mean {rolling.max():.1f}"


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"env_id": "NoSuchEnv-v9"}, "unknown env id"),
        ({"env_id": "Pendulum-v1"}, "Discrete only"),
    ]
    + PPO_BAD_INPUT,
)
def test_bad_input_rejected_before_training(mod, kw, message):
    assert_rejected_before_training(mod, tiny(mod, **kw), message)


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="resets the peak RSS (VmHWM) the Linux way")
def test_memory_estimate_bounds_what_more_envs_take(monkeypatch):
    """ppo.py's estimate for 950 CartPole envs of 64 steps is above the peak memory that they add to a run (one
    iteration at 50 and at 1000 envs in a process forked from this one, each from a reset peak: what this process held
    is left out), but less than 3x as high: the check refuses no run that fits."""
    ppo = importlib.import_module("ppo")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its two peaks down the pipe, then out without pytest's exit
        try:
            peaks = []
            for n in (50, 1000):
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")
                ppo.train(ppo.Args(cuda=False, num_envs=n, num_steps=64, total_timesteps=n * 64))
                peaks.append(re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read())[1])
            os.write(write, " ".join(peaks).encode())
        except BaseException as e:  # what went wrong, for the parent's assert
            os.write(write, repr(e).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        out = f.read()
    assert os.waitpid(pid, 0)[1] == 0 and len(out.split()) == 2, out
    small, large = (int(kb) * 1024 for kb in out.split())
    machine_memory(monkeypatch, large - small)
    with pytest.raises(ppo.ConfigError, match="--num-envs 950 needs about"):
        ppo.check_args(ppo.Args(num_envs=950, num_steps=64))
    machine_memory(monkeypatch, 3 * (large - small))
    ppo.check_args(ppo.Args(num_envs=950, num_steps=64))


def test_cli_error_is_one_line_without_traceback(mod):
    code, _, stderr = run_cli(f"{mod.__name__}.py", ["--env-id", "Pendulum-v1", "--no-cuda"])
    assert code != 0
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines() == [
        f"{mod.__name__}.py: error: Pendulum-v1 has a Box action space; "
        f"{mod.__name__}.py handles Discrete only (use ppo_continuous_action.py for Box actions)"
    ]


def test_cli_help_writes_nothing(mod):
    """(Its import: test_repo.py's test_importing_every_script_prints_and_writes_nothing.)"""
    code, printed, _ = run_cli(f"{mod.__name__}.py", ["--help"])
    assert code == 0 and "the surrogate clipping coefficient" in printed
    assert os.listdir(".") == []  # no runs/, no videos/


def test_cuda_falls_back_with_notice(mod, capsys):
    """Without a GPU the run takes the CPU; it says so only when --cuda was named on the command line (issue 72: the
    default, on, said it on every CPU run; CleanRL says nothing)."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present; the fallback path is not taken")
    out = mod.train(tiny(mod, cuda=True, total_timesteps=2 * 16))
    assert "CUDA" not in capsys.readouterr().err and next(out["agent"].parameters()).device.type == "cpu"
    mod.train(tiny(mod, cuda=True, total_timesteps=2 * 16), given={"cuda"})
    assert "--cuda is given but no CUDA device is available; running on CPU" in capsys.readouterr().err


@pytest.mark.parametrize("flag, package", [("track", "wandb"), ("capture_video", "moviepy")])
def test_optional_packages_missing_named_before_training(mod, monkeypatch, flag, package):
    monkeypatch.setitem(sys.modules, package, None)  # makes `import <package>` fail
    with pytest.raises(mod.ConfigError, match=f"needs {package}.*pip install {package}"):
        mod.train(tiny(mod, **{flag: True}))
    assert not os.path.exists("runs")


def test_capture_video_without_a_renderer_is_named_before_training(mod, monkeypatch):
    monkeypatch.setitem(sys.modules, "pygame", None)  # classic control renders with pygame
    with pytest.raises(mod.ConfigError, match="cannot render CartPole-v1.*pygame"):
        mod.train(tiny(mod, env_id="CartPole-v1", capture_video=True))
    assert not os.path.exists("runs")


# ---- run identity and resume (issue 24) ------------------------------------------------------------


def test_resume_applies_a_longer_budget_and_refuses_other_flags(mod):
    full = mod.train(tiny(mod, save_model=True))
    longer = assert_resume_runs_longer_and_nothing_else(mod, full, "num_envs", 8, 2 * 16 * 6)
    assert len(longer["losses"]) == 2
    # the schedule is the longer budget's (docs/reliability.md): iterations 5 and 6 of 6 at 1/5 of the rate and 0, where
    # iteration 4 of 4 had reached 0
    assert full["learning_rate"][-1] == 0.0 and longer["learning_rate"] == pytest.approx([2.5e-4 / 5, 0.0])
    assert longer["run_dir"] == full["run_dir"]  # logs on in the run's own directory


def test_a_flag_named_beside_resume_counts_even_at_its_default_value(mod):
    full, default = mod.train(tiny(mod, save_model=True, learning_rate=1e-3, save_every=1, anneal_lr=False)), mod.Args()
    _, kept = mod.load_checkpoint(full["checkpoint"], mod.Args())  # left out: the checkpoint's values
    assert (kept.learning_rate, kept.save_every) == (1e-3, 1)
    _, applied = mod.load_checkpoint(full["checkpoint"], mod.Args(), given={"save_every"})  # RESUMABLE: applied
    assert (applied.learning_rate, applied.save_every) == (1e-3, default.save_every)
    with pytest.raises(mod.ConfigError, match=r"^--learning-rate cannot change when resuming \(the checkpoint has 0.001\)"):
        mod.load_checkpoint(full["checkpoint"], mod.Args(), given={"learning_rate"})
    # on the command line, where a flag given at its default value parses the same as one left out
    script, resume = f"{mod.__name__}.py", ["--resume", full["checkpoint"]]
    assert_cli_error_is_one_line(
        script,
        resume + ["--learning-rate", str(default.learning_rate)],
        f"{script}: error: --learning-rate cannot change when resuming (the checkpoint has "
        f"0.001); start a new run to train with {default.learning_rate!r}",
    )
    assert_cli_error_is_one_line(
        script,
        resume + ["--anneal-lr"],
        f"{script}: error: --anneal-lr cannot change when "
        "resuming (the checkpoint has False); start a new run to train with True",
    )
    # --no-save-model (Args' default) names save_model: the resumed run's two iterations write no checkpoint
    code, _, stderr = run_cli(
        script, [*resume, "--no-save-model", "--total-timesteps", str(2 * full["global_step"])], timeout=60
    )
    assert code == 0, stderr[-2000:]
    assert mod.load_checkpoint(full["checkpoint"])[0]["iteration"] == len(full["losses"])


def test_resume_from_another_directory_logs_into_the_run(mod, tmp_path, monkeypatch):
    full = mod.train(tiny(mod, save_model=True, total_timesteps=2 * 16 * 2))
    resume_elsewhere(mod, full, tmp_path, monkeypatch, total_timesteps=2 * 16 * 3)
    assert mod.load_checkpoint(str(tmp_path / full["checkpoint"]))[0]["iteration"] == 3


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full, a device that is always full")
def test_full_disk_mid_run_is_one_line_and_keeps_the_last_checkpoint(mod, monkeypatch):
    """Every script's save_checkpoint is this one (tests/test_repo.py). The temporary file is made a link to /dev/full
    from the second save on, so each write to it fails as on a full disk."""
    real_save = mod.save_checkpoint

    def save_on_a_full_disk(path, state):
        if os.path.exists(path):
            os.symlink("/dev/full", f"{path}.tmp")
        real_save(path, state)

    monkeypatch.setattr(mod, "save_checkpoint", save_on_a_full_disk)
    with pytest.raises(mod.ConfigError, match=r"^cannot write runs/.*/checkpoint.pt \(No space left on device\); an earlier"):
        mod.train(tiny(mod, save_model=True, save_every=1, total_timesteps=2 * 16 * 3))
    [path] = glob.glob("runs/*/checkpoint.pt")
    assert not glob.glob("runs/*/*.tmp") and mod.load_checkpoint(path)[0]["iteration"] == 1
    # issue 75: where no checkpoint was written yet, the line says so instead of an intact earlier one
    os.symlink("/dev/full", "first.pt.tmp")
    with pytest.raises(mod.ConfigError, match=r"^cannot write first.pt \(No space left on device\); no checkpoint was saved$"):
        real_save("first.pt", {"iteration": 1})


# ---- progress on long runs (issue 22) ----------------------------------------------------------------


def test_progress_plain_lines_in_a_pipe_and_one_updating_line_in_a_terminal(mod):
    import pty

    flags = ["--no-cuda", "--num-envs", "2", "--num-steps", "16", "--total-timesteps", str(2 * 16 * 12)]
    code, piped, stderr = run_cli(f"{mod.__name__}.py", flags)  # its stdout is a pipe's: not a terminal
    assert code == 0, stderr[-2000:]
    lines = [line for line in piped.splitlines() if line.startswith("step ")]
    # a file or pipe: a plain line every 10 iterations and at the end, with steps done / total, steps/s, ETA, return
    assert [line.split()[1] for line in lines] == ["320/384", "384/384"] and "\r" not in piped and "\033" not in piped
    assert re.fullmatch(r"step 384/384 SPS \d+ ETA 0:00:00 return\(last 20\) [\d.]+", lines[-1])
    pid, fd = pty.fork()
    if pid == 0:  # a terminal: the same line rewritten in place after every iteration
        processes.run_as_main_and_exit(f"{mod.__name__}.py", flags)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    text = out.decode()
    assert text.count("\rstep ") == 12 and "\rstep 384/384" in text and text.count("\n") <= 3


# ---- non-finite training stops in one line (issue 51.1) ---------------------------------------------------------


def test_a_gradient_norm_that_overflows_stops_the_run_in_one_line(mod):
    """Issue 75: --vf-coef 1e25 (in range) overflowed the gradient norm to inf, the clip scaled every gradient by 0, and
    the run went on without a step (entropy exactly ln 2 for 32 iterations) and exited 0; now it stops at once."""
    with pytest.raises(mod.ConfigError) as stopped:
        mod.train(tiny(mod, vf_coef=1e25))
    assert str(stopped.value) == (
        "iteration 1: every gradient of the last step is 0 (their norm overflowed to inf: the clip made it no step); no "
        "checkpoint was saved; likely too large a loss term or reward for float32 (--vf-coef, --ent-coef, the env's)"
    )


def test_finite_weights_whose_outputs_overflow_stop_the_run(mod, monkeypatch):
    """Issue 75: a2c_paac.py --learning-rate 1e37 left finite weights (~3e34) whose forward pass is nan, and named their
    checkpoint the last finite one (evaluated, it always played NOOP). Now the updated network is also run on a few of
    the batch's states: weights of 1e37, finite, whose outputs overflow, stop the run; the checkpoint before stays."""
    poison_weights_at(mod, monkeypatch, 2, poison=lambda agent: [p.fill_(1e37) for p in agent.parameters()])
    with pytest.raises(mod.ConfigError) as stopped:
        mod.train(tiny(mod, save_model=True, save_every=1))
    (path,) = glob.glob("runs/*/checkpoint.pt")
    assert str(stopped.value) == (
        "iteration 2: the updated network's outputs are nan or inf (its weights are finite, but too large); the last "
        f"finite checkpoint is {path} (iteration 1); likely too high a --learning-rate or --max-grad-norm"
    )
    assert torch.load(path, weights_only=False)["iteration"] == 1


def test_an_env_that_returns_nan_is_named_as_the_cause(mod, monkeypatch):
    """Issue 75: an env's nan reward made the loss nan, and the line blamed --learning-rate; now the rollout's
    observations and rewards are checked first, and a nan or inf there is named as the env's."""
    make_envs = mod.make_envs
    monkeypatch.setattr(
        mod,
        "make_envs",
        lambda *a: mod.gym.wrappers.vector.TransformReward(make_envs(*a), lambda r: np.where(r > 0, np.nan, r)),
    )
    with pytest.raises(mod.ConfigError) as stopped:
        mod.train(tiny(mod))
    assert str(stopped.value) == (
        "iteration 1: the env returned a nan or inf (in the rollout's rewards); no checkpoint was saved; the env is the "
        "cause: check it (its wrappers, its physics), not the learning flags"
    )


def test_a_run_being_written_is_locked_against_a_second_writer(mod):
    """Issue 75: a --resume of a run that another process was still writing was accepted, and the two wrote over each
    other's checkpoint and TensorBoard files. A run holds <run dir>/.lock while it trains (every script's lock_run)."""
    import fcntl

    out = mod.train(tiny(mod, save_model=True))
    more = tiny(mod, resume=out["checkpoint"], total_timesteps=2 * 16 * 8)
    with open(os.path.join(out["run_dir"], ".lock")) as other:  # another process training that run
        fcntl.flock(other, fcntl.LOCK_EX)
        with pytest.raises(mod.ConfigError, match=r"^runs/.+ is being written by another process; let it end"):
            mod.train(more)
    assert mod.train(more)["global_step"] == 2 * 16 * 8  # once it has ended, the resume goes on


def test_eval_checkpoint_refuses_a_training_flag_it_would_ignore(mod):
    """Issue 75: `--eval-checkpoint agent.pt --env-id Other` scored the checkpoint's env and said nothing; now a training
    flag named beside it with another value than the checkpoint's is one line, exit 1 (the same value, and the
    evaluation's own flags, evaluate)."""
    checkpoint = mod.train(tiny(mod, save_model=True))["checkpoint"]
    script = f"{mod.__name__}.py"
    code, stdout, stderr = run_cli(script, ["--eval-checkpoint", checkpoint, "--env-id", "Acrobot-v1", "--no-cuda"])
    assert (
        code == 1
        and stdout == ""
        and stderr.strip().splitlines()
        == [
            f"{script}: error: --env-id 'Acrobot-v1' does not apply to --eval-checkpoint, which evaluates with the "
            "checkpoint's own settings (env_id: 'CartPole-v1'); leave it out, or train a run with it"
        ]
    )
    flags = ["--env-id", "CartPole-v1", "--num-envs", "2", "--eval-episodes", "2", "--seed", "3", "--no-cuda"]
    code, stdout, stderr = run_cli(script, ["--eval-checkpoint", checkpoint, *flags])
    assert code == 0 and stdout.startswith("mean return over 2 episodes: "), stderr
    threads = []  # --torch-threads is the evaluation's too (it was taken and ignored: 25x slower beside a busy core)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch, "set_num_threads", threads.append)
        code, stdout, stderr = run_cli(
            script, ["--eval-checkpoint", checkpoint, "--eval-episodes", "1", "--torch-threads", "3"]
        )
    assert code == 0 and threads[0] == 3, stderr  # (then run_cli puts this process's back)


def test_a_diverging_learning_rate_is_one_line_exit_1_and_its_checkpoint_is_refused_on_the_command_line():
    """A real divergence (--learning-rate 1e30: the first update's value loss is nan) from the command line: one line,
    exit 1, nothing saved; a non-finite checkpoint given to --resume or --eval-checkpoint: one line. The other scripts
    print their ConfigError as this one does."""
    mod = importlib.import_module("ppo")
    script = "ppo.py"
    code, _, stderr = run_cli(
        script,
        [
            "--no-cuda",
            "--learning-rate",
            "1e30",
            "--num-envs",
            "2",
            "--num-steps",
            "16",
            "--total-timesteps",
            "64",
            "--save-model",
            "--save-every",
            "1",
        ],
        timeout=120,
    )
    assert code == 1 and "Traceback" not in stderr, stderr[-2000:]
    assert [line for line in stderr.splitlines() if line.startswith(script)] == [
        f"{script}: error: iteration 1: the value loss is nan; no checkpoint was saved; likely too high a --learning-rate "
        "or --max-grad-norm"
    ]
    assert glob.glob("runs/*/checkpoint.pt") == []
    torch.save(
        {"script": script, "args": dataclasses.asdict(mod.Args()), "model": {"w": torch.tensor([math.nan])}}, "nonfinite.pt"
    )
    for flag in ("--eval-checkpoint", "--resume"):
        assert_cli_error_is_one_line(
            script,
            [flag, "nonfinite.pt"],
            (
                f"{script}: error: checkpoint 'nonfinite.pt' holds non-finite weights (nan or inf, in model.w), which neither "
                "train nor evaluate; use an earlier checkpoint of the run"
            ),
        )


# ---- Ctrl-C and SIGTERM are one line (issue 51.4) ---------------------------------------------------------------


def fresh_run(flags):
    """`python ppo.py <flags>` in a fresh interpreter and a session of its own, its Ctrl-C a terminal's."""
    return subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "ppo.py"), "--no-cuda", *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_ctrl_c_while_the_imports_load_is_one_line():
    """Issue 75: Ctrl-C in the seconds torch takes to import was a KeyboardInterrupt traceback (or numpy's ImportError,
    when it landed inside numpy's C extension); the imports now hold it until they are done, then it is one line."""
    proc = fresh_run(["--total-timesteps", "1000"])
    try:
        assert processes.wait_for(lambda: "multiarray" in open(f"/proc/{proc.pid}/maps").read(), 60)  # numpy is loading
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, stderr) == (130, "ppo.py: interrupted; no checkpoint was saved\n")


def test_two_ctrl_c_a_millisecond_apart_are_one_line():
    """Issue 75: a second Ctrl-C 1 ms after the first broke the exit with a traceback (inside interrupted(), or in
    torch's or threading's shutdown); a second signal within 2 s is now ignored, and the line is the first one's."""
    proc = fresh_run(["--num-envs", "2", "--num-steps", "16", "--total-timesteps", "10000000", "--save-model"])
    try:
        assert processes.wait_for(lambda: glob.glob("runs/*/checkpoint.pt"), 120)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.001)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    (path,) = glob.glob("runs/*/checkpoint.pt")
    assert proc.returncode == 130 and stderr.splitlines() == [
        f"ppo.py: interrupted; the last checkpoint is {path} (iteration "
        f"{torch.load(path, weights_only=False)['iteration']}); continue with: python ppo.py --resume {path}"
    ], stderr[-3000:]


def test_a_disk_that_fills_as_tensorboard_writes_is_one_line_naming_the_checkpoint(monkeypatch):
    """Issue 75: a full disk met by TensorBoard's writer (its thread's OSError, raised again at the next add_scalar) was
    a traceback; now it is one line naming the cause and the checkpoint kept, exit 1."""
    from tensorboard.summary.writer import record_writer

    real_write, written = record_writer.RecordWriter.write, []

    def write(self, data):  # the disk is full once a checkpoint and ~30 records are written
        if glob.glob("runs/*/checkpoint.pt") and len(written) > 30:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(real_write(self, data))

    monkeypatch.setattr(record_writer.RecordWriter, "write", write)
    flags = ["--no-cuda", "--num-envs", "2", "--num-steps", "16", "--total-timesteps", "3200", "--save-model"]
    code, _, stderr = run_cli("ppo.py", [*flags, "--save-every", "1"])
    (path,) = glob.glob("runs/*/checkpoint.pt")
    done = torch.load(path, weights_only=False)["iteration"]
    assert (code, stderr.splitlines()) == (
        1,
        [
            "ppo.py: error: No space left on device, writing the run's logs; free some space; the last checkpoint is "
            f"{path} (iteration {done}); continue with: python ppo.py --resume {path}"
        ],
    )


# SIGTERM raised right after save_checkpoint's os.replace puts the first checkpoint in place, before train() records it
SIGTERM_AS_A_CHECKPOINT_LANDS = """import os, signal
real_replace, fired = os.replace, []
def replace(src, dst):
    real_replace(src, dst)
    if dst.endswith("checkpoint.pt") and not fired:
        fired.append(signal.raise_signal(signal.SIGTERM))
os.replace = replace
"""


def test_a_signal_as_a_checkpoint_lands_names_that_checkpoint():
    """A full-suite run caught it (a2c_paac.py: the line said iteration 3 of a file that held 4): between the save's
    os.replace and `saved = ...` a signal named the checkpoint before (here, the first: none). signals_held() makes it
    wait for both; the same text in every script (tests/test_repo.py)."""
    flags = [
        "--no-cuda",
        "--save-model",
        "--save-every",
        "1",
        "--num-envs",
        "2",
        "--num-steps",
        "16",
        "--total-timesteps",
        "320",
    ]
    run = subprocess.run(
        [sys.executable, processes.driver(os.path.join(ROOT, "ppo.py"), SIGTERM_AS_A_CHECKPOINT_LANDS), *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    (path,) = glob.glob("runs/*/checkpoint.pt")
    assert torch.load(path, weights_only=False)["iteration"] == 1
    assert run.returncode == 128 + signal.SIGTERM and [
        line for line in run.stderr.splitlines() if line.startswith("ppo.py")
    ] == [f"ppo.py: interrupted; the last checkpoint is {path} (iteration 1); continue with: python ppo.py --resume {path}"], (
        run.stderr[-3000:]
    )


# ---- tyro's parse errors are one line (issue 51.5) --------------------------------------------------------------


def test_a_flag_tyro_cannot_parse_is_one_line(mod, monkeypatch):
    """A number that is none, a flag without its value: tyro's 6-10 line box became `<script>: error: ...`, exit 1."""
    script = f"{mod.__name__}.py"
    assert_cli_error_is_one_line(
        script,
        ["--num-envs", "abc"],
        f"{script}: error: Error parsing --num-envs: invalid literal for int() with base 10: 'abc'",
    )
    assert_cli_error_is_one_line(
        script, ["--learning-rate"], f"{script}: error: Missing value for argument '--learning-rate'. Expected 1 values."
    )
    # tyro draws the box in ASCII where sys.stdout's encoding is not utf-8 (PYTHONIOENCODING=ascii, pytest's capsys:
    # "UTF-8"): the same line
    monkeypatch.setattr(processes._Pipe, "encoding", "ascii")
    assert_cli_error_is_one_line(
        script,
        ["--num-envs", "abc"],
        f"{script}: error: Error parsing --num-envs: invalid literal for int() with base 10: 'abc'",
    )
