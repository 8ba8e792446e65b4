"""Tests of ppo_multidiscrete_mask.py's invalid action masking (detail M2). What it shares with
ppo_multidiscrete.py (GAE, network, a real run, checkpoints, bad input) is tested in test_ppo_multidiscrete.py.
"""

import numpy as np
import torch
from test_ppo_multidiscrete import needs_microrts, tiny

import ppo_multidiscrete_mask as mod

NVEC = [3, 5, 2]


def random_case(seed, B=64, cells=3, dtype=torch.float64):
    """Logits, masks with at least one valid choice per component (but cell 0 of row 0 has none), and valid actions."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, cells * sum(NVEC), generator=g, dtype=dtype) * 3
    masks = torch.rand(B, cells * sum(NVEC), generator=g) < 0.5
    parts = list(masks.view(B, cells, sum(NVEC)).split(NVEC, -1))
    for p, n in zip(parts, NVEC):
        p[..., 0] |= ~p.any(-1)  # every component keeps a valid choice...
    masks = torch.cat(parts, -1).reshape(B, -1)
    masks.view(B, cells, -1)[0, 0] = False  # ...except in one cell without a unit
    actions = mod.sample_multidiscrete(logits, NVEC, masks)
    return logits, masks, actions


def test_masked_action_is_never_sampled():
    torch.manual_seed(0)
    logits, masks, _ = random_case(0, B=2000)
    logits = logits + 50.0 * (~masks)  # invalid choices carry by far the largest logits
    actions = mod.sample_multidiscrete(logits, NVEC, masks)
    parts = mod.split_logits(masks, NVEC)
    for i, m in enumerate(parts):
        chosen = m.gather(-1, actions[..., i : i + 1]).squeeze(-1)
        has_valid = m.any(-1)
        assert chosen[has_valid].all()  # every sampled choice is valid where any is
        assert has_valid.sum() > 5000
    # valid choices are still sampled in proportion to their renormalised probabilities
    one = torch.tensor([[0.0, 1.0, 2.0, 9.0]]).repeat(100000, 1)
    valid = torch.tensor([[True, True, True, False]]).repeat(100000, 1)
    picks = mod.sample_categorical(mod.masked_logits(one, valid))
    freq = torch.bincount(picks, minlength=4).double() / 100000
    np.testing.assert_allclose(freq.numpy(), np.r_[torch.softmax(one[0, :3], -1).numpy(), 0.0], atol=5e-3)


def test_gradient_reaching_an_invalid_logit_is_zero():
    logits, masks, actions = random_case(1)
    logits.requires_grad_(True)
    logprob, entropy = mod.multidiscrete_logprob_entropy(logits, actions, NVEC, masks)
    (logprob.sum() + entropy.sum()).backward()
    assert torch.all(logits.grad[~masks] == 0)
    # a valid logit receives gradient wherever its component has another valid choice to trade off with
    parts = masks.view(masks.shape[0], -1, sum(NVEC)).split(NVEC, -1)
    contested = torch.cat([p & (p.sum(-1, keepdim=True) > 1) for p in parts], -1).reshape(masks.shape)
    assert contested.sum() > 200 and torch.all(logits.grad[contested] != 0)


def test_masked_entropy_is_entropy_of_renormalised_valid_distribution():
    logits, masks, actions = random_case(2)
    logprob, entropy = mod.multidiscrete_logprob_entropy(logits, actions, NVEC, masks)
    lg, mk, ac = logits.numpy(), masks.numpy(), actions.numpy()
    B, cells = ac.shape[:2]
    exp_lp, exp_ent = np.zeros(B), np.zeros(B)
    for b in range(B):
        for c in range(cells):
            start = c * sum(NVEC)
            for i, n in enumerate(NVEC):
                l, m = lg[b, start : start + n], mk[b, start : start + n]
                start += n
                if not m.any():
                    # no valid choice (a cell without a unit): no entropy; a constant log-prob of a uniform choice
                    exp_lp[b] += -np.log(n)
                    continue
                p = np.exp(l[m] - l[m].max())
                p /= p.sum()  # the valid choices' probabilities, renormalised
                exp_ent[b] += -(p * np.log(p)).sum()
                exp_lp[b] += np.log(p[np.flatnonzero(m).tolist().index(ac[b, c, i])])
    np.testing.assert_allclose(entropy.numpy(), exp_ent, rtol=1e-10)
    np.testing.assert_allclose(logprob.numpy(), exp_lp, rtol=1e-10)
    # without masks (everything valid) it is the plain sum of the components' entropies
    full = torch.ones_like(masks)
    _, ent_all = mod.multidiscrete_logprob_entropy(logits, actions, NVEC, full)
    per = [torch.distributions.Categorical(logits=l).entropy().sum(-1) for l in mod.split_logits(logits, NVEC)]
    torch.testing.assert_close(ent_all, sum(per))


@needs_microrts
def test_rollout_samples_only_valid_actions_of_the_real_game(monkeypatch):
    seen, real_mask, real_step = [], mod.MicrortsVecEnv.action_mask, mod.MicrortsVecEnv.step

    def spy_mask(self):
        seen.append([real_mask(self)])
        return seen[-1][0]

    def spy_step(self, actions):
        seen[-1].append(np.array(actions))
        return real_step(self, actions)

    monkeypatch.setattr(mod.MicrortsVecEnv, "action_mask", spy_mask)
    monkeypatch.setattr(mod.MicrortsVecEnv, "step", spy_step)
    out = mod.train(tiny(mod, update_epochs=1))
    assert len(seen) == 32 and out["global_step"] == 64  # 2 iterations of 16 steps of 2 games
    units = 0
    for mask, actions in seen:
        assert mask.shape == (2, 100, 78)
        start = 0
        for i, n in enumerate([6, 4, 4, 4, 4, 7, 49]):
            m = mask[..., start : start + n]
            start += n
            chosen = np.take_along_axis(m, actions[..., i : i + 1], -1)[..., 0]
            assert chosen[m.any(-1)].all()
        units += int(mask[..., :6].any(-1).sum())
    assert units > 0  # the games did have units to command (busy units have no valid choice)
