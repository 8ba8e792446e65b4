"""Tests of benchmark/peers/sb3_trpo.py: SB3-contrib's TRPO is configured as its docstring says (its first update equals one
of trpo_continuous_action.py's from the same weights and rollout), it follows ours' KL schedule, logs our tags, and
refuses in one line what it cannot run."""

import dataclasses
import math
import os
import runpy
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import torch
from conftest import ROOT
from promises import assert_rejected_before_training, read_scalars
from tiny import tiny

import trpo_continuous_action as trpo
from benchmark.peers import sb3_trpo as sb3
from benchmark.processes import root_on_path, tool


def test_flags_are_ours_and_four_defaults_are_what_sb3_runs():
    theirs, mine = dataclasses.asdict(sb3.Args()), dataclasses.asdict(trpo.Args())
    assert set(theirs) == set(mine) | {"kl_test"} and theirs["kl_test"] == "new-old"  # SB3's own line search
    assert {k for k in mine if theirs[k] != mine[k]} == {
        "exp_name",
        "fisher_frac",
        "accept_ratio",
        "vf_coef",
        "bootstrap_truncated",
    }
    sb3.check_args(sb3.Args())


def copy_weights(policy, agent):
    """SB3's MlpPolicy weights into ours, layer by layer: the two then compute the same policy and value."""
    ext = policy.mlp_extractor
    pairs = [
        (ext.policy_net[0], agent.actor_mean[0]),
        (ext.policy_net[2], agent.actor_mean[2]),
        (policy.action_net, agent.actor_mean[4]),
        (ext.value_net[0], agent.critic[0]),
        (ext.value_net[2], agent.critic[2]),
        (policy.value_net, agent.critic[4]),
    ]
    with torch.no_grad():
        for a, b in pairs:
            b.weight.copy_(a.weight)
            b.bias.copy_(a.bias)
        agent.actor_logstd.copy_(policy.log_std[None])
    assert sum(p.numel() for p in policy.parameters()) == sum(p.numel() for p in agent.parameters())  # nothing left out


def one_batch(**changes):
    """One iteration of one env's 256 steps, updated as one batch (the derived sizes set as train() sets them)."""
    return tiny(
        sb3,
        num_steps=256,
        total_timesteps=256,
        num_minibatches=1,
        batch_size=256,
        minibatch_size=256,
        num_iterations=1,
        **changes,
    )


@pytest.mark.parametrize("ortho_init, cg_from_0", [(False, False), (True, False), (False, True)])
def test_first_update_equals_ours_on_the_same_rollout(ortho_init, cg_from_0, monkeypatch):
    """One rollout (256 Hopper steps) and one TRPO update of SB3, then ours' update() from the same weights on SB3's
    batch: the same GAE, the same accepted step and surrogate, the same critic after 3 full-batch Adam epochs.
    Tolerance: SB3 starts conjugate gradient at 1e-4 * N(0, 1), ours at 0; after 10 iterations the policies differ by
    up to 1.8e-5 in a step of 0.08 (measured, 2e-4 of it): 5e-5. Started at 0 (randn_like patched to zeros, which only
    its CG calls) they differ by float32 rounding (2.4e-7 measured): 2e-6. The critic: 1e-4 relative."""
    args = one_batch(update_epochs=3, ortho_init=ortho_init)
    envs = sb3.make_envs(args)
    try:
        model = sb3.make_model(args, envs)
        agent = trpo.Agent(11, 3)
        copy_weights(model.policy, agent)
        before = [p.detach().clone() for p in agent.actor_mean.parameters()]
        if cg_from_0:  # SB3's CG starts at 1e-4 * randn_like(g) (its only randn_like): from 0, as ours
            monkeypatch.setattr(torch, "randn_like", torch.zeros_like)
        model.learn(256)
    finally:
        envs.close()
    buf = model.rollout_buffer
    dones = np.append(buf.episode_starts[1:, 0], model._last_episode_starts[0])  # ours: step t ended an episode
    assert dones.sum() >= 2  # Hopper's early episodes end by falling: GAE is cut inside the rollout
    with torch.no_grad():
        next_value = agent.get_value(torch.as_tensor(model._last_obs, dtype=torch.float32))
    advantages, _ = trpo.compute_gae(
        torch.as_tensor(buf.rewards),
        torch.as_tensor(buf.values),  # [256, 1]: SB3's, flat
        torch.as_tensor(dones[:, None]),
        next_value,
        0.99,
        0.95,
    )
    np.testing.assert_allclose(advantages.numpy(), buf.advantages, rtol=1e-4, atol=1e-4)
    b = {
        k: torch.as_tensor(getattr(buf, name), dtype=torch.float32).reshape(256, -1).squeeze(1)
        for k, name in [
            ("obs", "observations"),
            ("actions", "actions"),
            ("logprobs", "log_probs"),
            ("values", "values"),
            ("advantages", "advantages"),
            ("returns", "returns"),
        ]
    }
    with torch.no_grad():
        _, logprob, _, value = agent.get_action_and_value(b["obs"], b["actions"])
    torch.testing.assert_close(logprob, b["logprobs"], rtol=1e-5, atol=1e-5)  # SB3's samples, scored by ours
    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-4, eps=1e-5)
    losses, _ = trpo.update(agent, optimizer, b, args, args.max_kl)
    logged = model.logger.name_to_value
    assert losses["backtracks"] == 0 and logged["train/is_line_search_success"] == 1.0  # both take the full step
    assert -losses["policy_loss"] == pytest.approx(logged["train/policy_objective"], rel=1e-3)
    ext, policy = model.policy.mlp_extractor, model.policy
    theirs = [*ext.policy_net.parameters(), *policy.action_net.parameters(), policy.log_std[None]]
    actor_step = max(
        (a.detach() - b.detach()).abs().max().item()
        for a, b in zip(theirs, [*agent.actor_mean.parameters(), agent.actor_logstd])
    )
    moved = max((p.detach() - q).abs().max().item() for p, q in zip(agent.actor_mean.parameters(), before))
    assert actor_step < (2e-6 if cg_from_0 else 5e-5) and moved > 1e-2
    for a, b in zip([*ext.value_net.parameters(), *policy.value_net.parameters()], agent.critic.parameters(), strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kl_test", ["new-old", "old-new"])
def test_kl_test_is_the_direction_its_line_search_measures(kl_test):
    """--kl-test: SB3's line search tests (and logs, per action component) its own KL(new || old), or with old-new the
    KL(old || new) of ours and the paper's code: the logged KL of the step taken times A equals that direction's exact
    Gaussian KL between the policies before and after the update on the batch's states, and not the other's."""
    args = one_batch(update_epochs=1, kl_test=kl_test)
    envs = sb3.make_envs(args)
    try:
        model = sb3.make_model(args, envs)
        before, after = trpo.Agent(11, 3), trpo.Agent(11, 3)
        copy_weights(model.policy, before)
        model.learn(256)
    finally:
        envs.close()
    copy_weights(model.policy, after)
    obs = torch.as_tensor(model.rollout_buffer.observations, dtype=torch.float32).reshape(256, -1)
    with torch.no_grad():
        old, new = before.get_mean_and_logstd(obs), after.get_mean_and_logstd(obs)
        kl = {"old-new": trpo.gaussian_kl(*old, *new).mean().item(), "new-old": trpo.gaussian_kl(*new, *old).mean().item()}
    logged = model.logger.name_to_value["train/kl_divergence_loss"] * 3
    other = "new-old" if kl_test == "old-new" else "old-new"
    assert logged == pytest.approx(kl[kl_test], rel=1e-4) and logged != pytest.approx(kl[other], rel=1e-3), kl


def test_kl_schedule_and_our_tags(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # SB3's default logger made an SB3-<time> folder there
    out = sb3.train(tiny(sb3, max_kl=0.07, max_kl_final=0.01))
    assert not [name for name in os.listdir(tmp_path) if name.startswith("SB3-")]
    bounds = [losses["kl_bound"] for losses in out["losses"]]
    assert bounds == pytest.approx([0.07 - 0.06 * k / 3 for k in (1, 2, 3)], rel=1e-12)
    for tag in (
        "charts/learning_rate",
        "losses/value_loss",
        "losses/policy_loss",
        "losses/kl",
        "losses/kl_bound",
        "losses/explained_variance",
    ):
        assert len(read_scalars(out["run_dir"], tag)) == 3, tag
    assert all(0 <= losses["kl"] < losses["kl_bound"] for losses in out["losses"])
    assert out["global_step"] == 192 and out["learning_rate"] == [3e-4] * 3


@pytest.mark.parametrize("name", [name for name, _, _ in sb3.ONLY] + ["reward_scaling"])
def test_what_sb3_cannot_run_is_refused_in_one_line(name):
    value = {
        "fisher_frac": 0.1,
        "accept_ratio": 0.1,
        "vf_coef": 0.5,
        "max_grad_norm": 1.0,
        "ent_coef": 0.01,
        "reward_scaling": "rewards",
        "resume": "x.pt",
        "eval_checkpoint": "x.pt",
    }.get(name)
    value = value if value is not None else not dataclasses.asdict(sb3.Args())[name]
    assert_rejected_before_training(
        sb3,
        tiny(sb3, **{name: value}),
        rf"^--{name.replace('_', '-')} .*: SB3-contrib's TRPO .*"
        rf"sb3_trpo.py runs .* only$",
    )


def test_our_checks_name_this_script(monkeypatch):
    assert_rejected_before_training(sb3, tiny(sb3, env_id="CartPole-v1"), "; sb3_trpo.py handles Box only")
    monkeypatch.setattr(sys, "argv", ["sb3_trpo.py", "--max-kl", "-1", "--no-cuda"])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(os.path.join(ROOT, "benchmark", "peers", "sb3_trpo.py"), run_name="__main__")
    assert e.value.code == "sb3_trpo.py: error: --max-kl must be a finite number > 0, got -1.0"
    # run afresh: gym, which SB3 imports, printed its 4-line notice before that line
    res = subprocess.run(
        [*tool("benchmark.peers.sb3_trpo"), "--max-kl", "-1", "--no-cuda"],
        capture_output=True,
        text=True,
        env=root_on_path(),
    )
    assert (res.returncode, res.stdout, res.stderr) == (1, "", f"{e.value.code}\n")
    assert math.isinf(sb3.Args().max_grad_norm)
