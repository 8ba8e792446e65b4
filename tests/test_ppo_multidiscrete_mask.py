"""Tests of ppo_multidiscrete_mask.py's invalid action masking (detail M2): sampling, gradient, entropy, and the
real game's masks. What it shares with ppo_multidiscrete.py (detail M1, the network, the env, a real run,
checkpoints, bad input, hack safety) is tested in test_ppo_multidiscrete.py, against both scripts.
"""

import numpy as np
import torch
from microrts import NVEC, OBS, FixedLogits, needs_microrts
from tiny import tiny

import ppo_multidiscrete as unmasked
import ppo_multidiscrete_mask as mod


def random_case(seed, B=16):
    """An agent whose head returns fixed random logits, masks with a valid choice in every component of every row
    (except the source cells of row 0: no unit can act), and the observations."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    agent = mod.Agent(OBS, NVEC)
    agent.actor = FixedLogits(torch.randn(B, sum(NVEC), generator=g, dtype=torch.float64) * 3)
    mask = torch.rand(B, sum(NVEC), generator=g) < 0.5
    for part in mask.split(NVEC, -1):  # views: every component keeps a valid choice...
        part[:, 0] |= ~part.any(-1)
    mask[0, :100] = False  # ...except row 0's source cell
    return agent, mask, torch.zeros((B,) + OBS, dtype=torch.uint8)


def test_masked_choice_is_never_sampled():
    agent, mask, x = random_case(0, B=256)
    with torch.no_grad():
        agent.actor.logits += 50.0 * ~mask  # the invalid choices carry by far the largest logits
        actions, *_ = agent.get_action_and_value(x, mask)
    for i, m in enumerate(mask.split(NVEC, -1)):
        chosen = m.gather(-1, actions[:, i, None]).squeeze(-1)
        assert chosen[m.any(-1)].all()  # every sampled choice is valid where any is
    # the valid choices are sampled in proportion to their renormalised probabilities
    agent.actor = FixedLogits(torch.tensor([0.0] * 100 + [0.0, 1.0, 2.0, 9.0, 0.0, 0.0] + [0.0] * 123).repeat(20000, 1))
    valid = torch.ones(20000, sum(NVEC), dtype=torch.bool)
    valid[:, 103:106] = False  # action types 3-5 invalid
    with torch.no_grad():
        actions, *_ = agent.get_action_and_value(torch.zeros((20000,) + OBS, dtype=torch.uint8), valid)
    freq = torch.bincount(actions[:, 1], minlength=6).double() / len(actions)
    np.testing.assert_allclose(freq.numpy(), np.r_[torch.tensor([0.0, 1.0, 2.0]).softmax(-1).numpy(), 0, 0, 0], atol=0.015)


def test_gradient_reaching_an_invalid_logit_is_zero():
    agent, mask, x = random_case(1)
    actions, logprob, entropy, _ = agent.get_action_and_value(x, mask)
    (logprob.sum() + entropy.sum()).backward()
    grad = agent.actor.logits.grad
    assert torch.all(grad[~mask] == 0)
    # a valid logit gets gradient wherever its component has another valid choice to trade off with
    contested = torch.cat([p & (p.sum(-1, keepdim=True) > 1) for p in mask.split(NVEC, -1)], -1)
    assert contested.sum() > 1000 and torch.all(grad[contested] != 0)


def test_masked_entropy_and_logprob_are_those_of_the_renormalised_valid_choices():
    agent, mask, x = random_case(2)
    actions, logprob, entropy, _ = agent.get_action_and_value(x, mask)
    lg, mk, ac = agent.actor.logits.detach().numpy(), mask.numpy(), actions.numpy()
    exp_lp, exp_ent = np.zeros(len(x)), np.zeros(len(x))
    for b in range(len(x)):
        start = 0
        for i, n in enumerate(NVEC):
            row, m = lg[b, start : start + n], mk[b, start : start + n]
            start += n
            if not m.any():  # no unit can act: no entropy, the constant log-prob of a uniform choice
                exp_lp[b] += -np.log(n)
                continue
            p = np.exp(row[m] - row[m].max())
            p /= p.sum()  # the valid choices' probabilities, renormalised
            exp_ent[b] += -(p * np.log(p)).sum()
            exp_lp[b] += np.log(p[np.flatnonzero(m).tolist().index(ac[b, i])])
    np.testing.assert_allclose(entropy.detach().numpy(), exp_ent, rtol=1e-10)
    np.testing.assert_allclose(logprob.detach().numpy(), exp_lp, rtol=1e-10)
    # with every choice valid it is the plain sum of the components' entropies
    _, _, ent_all, _ = agent.get_action_and_value(x, torch.ones_like(mask), actions)
    per = [torch.distributions.Categorical(logits=part).entropy() for part in agent.actor.logits.detach().split(NVEC, -1)]
    torch.testing.assert_close(ent_all.detach(), sum(per))


def spy_on_steps(script, monkeypatch):
    """Record, for every step of every game, the blog's mask of the state the action was chosen in and the action."""
    seen, real_step = [], script.MicrortsEnv.step

    def spy_step(self, action):
        seen.append((self.game.action_mask.astype(bool), np.array(action)))
        return real_step(self, action)

    monkeypatch.setattr(script.MicrortsEnv, "step", spy_step)
    return seen


def valid_source_and_target(seen):
    """Per step: (a source cell was valid, the one sampled was valid, an attack target was valid, the one sampled was)."""
    return np.array([(m[:100].any(), m[a[0]], m[129:].any(), m[129 + a[7]]) for m, a in seen])


@needs_microrts
def test_rollout_samples_only_valid_source_cells_and_targets_of_the_real_game(monkeypatch):
    seen = spy_on_steps(mod, monkeypatch)
    out = mod.train(tiny(mod, update_epochs=1, max_steps=200))
    assert len(seen) == out["global_step"] == 64  # 2 iterations of 16 steps of 2 games
    any_source, source_ok, any_target, target_ok = valid_source_and_target(seen).T
    assert any_source.sum() >= 10 and any_target.all()  # units to command on many steps; the idle enemy's always
    assert source_ok[any_source].all() and target_ok.all()  # the blog's mask: never a masked source or target


@needs_microrts
def test_without_the_mask_most_sampled_source_cells_are_invalid(monkeypatch):
    """The contrast that makes the test above mean something: the unmasked script, in the same games, picks a
    source cell without a unit of ours that can act nearly always (2 of 100 cells at the start)."""
    seen = spy_on_steps(unmasked, monkeypatch)
    unmasked.train(tiny(unmasked, update_epochs=1, max_steps=200))
    any_source, source_ok, _, _ = valid_source_and_target(seen).T
    assert any_source.sum() >= 10 and source_ok[any_source].mean() < 0.3
