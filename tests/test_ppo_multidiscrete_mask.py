"""Tests of ppo_multidiscrete_mask.py's invalid action masking (detail M2): sampling, gradient, entropy, and the
real game's masks. What it shares with ppo_multidiscrete.py (detail M1, the network, a real run, checkpoints, bad
input, hack safety) is tested in test_ppo_multidiscrete.py, against both scripts.
"""

import numpy as np
import torch
from test_ppo_multidiscrete import NVEC, OBS, FixedLogits, needs_microrts, tiny

import ppo_multidiscrete_mask as mod


def random_case(seed, B=16):
    """An agent whose head returns fixed random logits, masks with a valid choice in every component of every cell
    (except cells 0 and 1 of row 0, which hold no unit: no valid choice), and the observations."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    agent = mod.Agent(OBS, NVEC)
    agent.actor = FixedLogits(torch.randn(B, 100 * sum(NVEC), generator=g, dtype=torch.float64) * 3)
    mask = torch.rand(B, 100, sum(NVEC), generator=g) < 0.5
    for part in mask.split(NVEC, -1):  # views: every component keeps a valid choice...
        part[..., 0] |= ~part.any(-1)
    mask[0, :2] = False  # ...except in two cells without a unit
    return agent, mask, torch.zeros((B,) + OBS, dtype=torch.uint8)


def test_masked_choice_is_never_sampled():
    agent, mask, x = random_case(0, B=64)
    with torch.no_grad():
        agent.actor.logits += 50.0 * (~mask).reshape(64, -1)  # the invalid choices carry by far the largest logits
        actions, *_ = agent.get_action_and_value(x, mask)
    for i, m in enumerate(mask.split(NVEC, -1)):
        chosen = m.gather(-1, actions[..., i, None]).squeeze(-1)
        assert chosen[m.any(-1)].all()  # every sampled choice is valid where any is
    # the valid choices are sampled in proportion to their renormalised probabilities
    agent.actor = FixedLogits(torch.tensor([0.0, 1.0, 2.0, 9.0, 0.0, 0.0] + [0.0] * 72).repeat(200, 100))
    valid = torch.zeros(200, 100, sum(NVEC), dtype=torch.bool)
    valid[..., :3] = valid[..., 6:] = True  # action types 3-5 invalid
    with torch.no_grad():
        actions, *_ = agent.get_action_and_value(torch.zeros((200,) + OBS, dtype=torch.uint8), valid)
    freq = torch.bincount(actions[..., 0].reshape(-1), minlength=6).double() / actions[..., 0].numel()
    np.testing.assert_allclose(freq.numpy(), np.r_[torch.tensor([0.0, 1.0, 2.0]).softmax(-1).numpy(), 0, 0, 0], atol=0.01)


def test_gradient_reaching_an_invalid_logit_is_zero():
    agent, mask, x = random_case(1)
    actions, logprob, entropy, _ = agent.get_action_and_value(x, mask)
    (logprob.sum() + entropy.sum()).backward()
    grad = agent.actor.logits.grad.reshape(mask.shape)
    assert torch.all(grad[~mask] == 0)
    # a valid logit gets gradient wherever its component has another valid choice to trade off with
    contested = torch.cat([p & (p.sum(-1, keepdim=True) > 1) for p in mask.split(NVEC, -1)], -1)
    assert contested.sum() > 1000 and torch.all(grad[contested] != 0)


def test_masked_entropy_and_logprob_are_those_of_the_renormalised_valid_choices():
    agent, mask, x = random_case(2)
    actions, logprob, entropy, _ = agent.get_action_and_value(x, mask)
    lg, mk, ac = agent.actor.logits.detach().reshape(mask.shape).numpy(), mask.numpy(), actions.numpy()
    exp_lp, exp_ent = np.zeros(len(x)), np.zeros(len(x))
    for b in range(len(x)):
        for c in range(100):
            start = 0
            for i, n in enumerate(NVEC):
                l, m = lg[b, c, start:start + n], mk[b, c, start:start + n]
                start += n
                if not m.any():  # a cell without a unit: no entropy, the constant log-prob of a uniform choice
                    exp_lp[b] += -np.log(n)
                    continue
                p = np.exp(l[m] - l[m].max())
                p /= p.sum()  # the valid choices' probabilities, renormalised
                exp_ent[b] += -(p * np.log(p)).sum()
                exp_lp[b] += np.log(p[np.flatnonzero(m).tolist().index(ac[b, c, i])])
    np.testing.assert_allclose(entropy.detach().numpy(), exp_ent, rtol=1e-10)
    np.testing.assert_allclose(logprob.detach().numpy(), exp_lp, rtol=1e-10)
    # with every choice valid it is the plain sum of the components' entropies
    _, _, ent_all, _ = agent.get_action_and_value(x, torch.ones_like(mask), actions)
    per = [torch.distributions.Categorical(logits=part).entropy().sum(-1) for part in
           agent.actor.logits.detach().reshape(mask.shape).split(NVEC, -1)]
    torch.testing.assert_close(ent_all.detach(), sum(per))


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
    assert len(seen) == 32 and out["global_step"] == 64  # 2 iterations of 16 steps of 2 games, one mask a step
    units = 0
    for mask, actions in seen:
        assert mask.shape == (2, 100, 78)
        start = 0
        for i, n in enumerate(NVEC):
            m = mask[..., start:start + n]
            start += n
            chosen = np.take_along_axis(m, actions[..., i:i + 1], -1)[..., 0]
            assert chosen[m.any(-1)].all()
        units += int(mask[..., :6].any(-1).sum())
    assert units > 0  # the games did have units to command (busy units have no valid choice)
