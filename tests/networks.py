"""Checks of a network that the scripts whose networks are alike share: the CNN scripts' heads on one trunk of scaled
pixels, a Categorical head that samples its softmax and scores the draw, and --channels-last as the same math."""

import numpy as np
import torch


def assert_heads_read_one_trunk_of_scaled_pixels(agent, x, actions):
    """Details A8-A9 on uint8 frames x: the agent's log-prob, entropy and value are those of its actor and critic on
    one trunk output, of the frames already scaled to [0, 1]."""
    _, logprob, entropy, value = agent.get_action_and_value(x, actions)
    hidden = agent.network(x.float() / 255.0)
    dist = torch.distributions.Categorical(logits=agent.actor(hidden))
    torch.testing.assert_close(logprob, dist.log_prob(actions))
    torch.testing.assert_close(entropy, dist.entropy())
    torch.testing.assert_close(value, agent.critic(hidden).squeeze(-1))
    torch.testing.assert_close(agent.get_value(x), value)
    assert value.shape == (len(x),)


def assert_samples_the_softmax_and_scores_it(agent, n, atol):
    """With the actor's weight zeroed and its bias making four clearly different probabilities, get_action_and_value
    on n frames draws the actions at the softmax's frequencies (to atol) and scores each draw: its log-prob, the
    entropy, and (on the first 64) the value get_value gives."""
    torch.manual_seed(0)
    with torch.no_grad():
        agent.actor.weight.zero_()
        agent.actor.bias.copy_(torch.tensor([0.0, 1.0, 2.0, -1.0]))
        x = torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8)
        action, logprob, entropy, value = agent.get_action_and_value(x)
    dist = torch.distributions.Categorical(logits=agent.actor.bias.detach())
    np.testing.assert_allclose(torch.bincount(action, minlength=4).numpy() / n, dist.probs.numpy(), atol=atol)
    torch.testing.assert_close(logprob, dist.log_prob(action), rtol=0, atol=1e-6)
    torch.testing.assert_close(entropy, dist.entropy().expand(n), rtol=0, atol=1e-6)
    assert value.shape == (n,)
    torch.testing.assert_close(value[:64], agent.get_value(x[:64]).detach())


def assert_channels_last_is_the_same_math(make_agent, x, forward=None, on_by_default=None):
    """--channels-last changes only the memory layout: same initial parameters, NHWC conv weights, outputs and
    gradients equal to float rounding, and a checkpoint that loads into a default (NCHW) agent; with on_by_default (a
    script's module), the flag is that script's default.

    make_agent(channels_last) builds an agent; forward(agent, x) returns a tensor or a tuple of tensors (by default the
    log-probs, entropies and values get_action_and_value gives actions 0, 1, 2, 3, 0, ...)."""
    assert on_by_default is None or on_by_default.Args().channels_last
    actions = torch.arange(len(x)) % 4

    def outputs(agent):
        out = forward(agent, x) if forward else agent.get_action_and_value(x, actions)[1:]
        return torch.cat([o.reshape(-1) for o in (out if isinstance(out, (tuple, list)) else (out,))])

    torch.manual_seed(0)
    plain = make_agent(False)
    torch.manual_seed(0)
    nhwc = make_agent(True)
    for (name, p), q in zip(plain.named_parameters(), nhwc.parameters()):
        assert torch.equal(p, q), name
        if p.dim() == 4:
            assert p.is_contiguous() and q.is_contiguous(memory_format=torch.channels_last), name
    out_plain, out_nhwc = outputs(plain), outputs(nhwc)
    torch.testing.assert_close(out_nhwc, out_plain, rtol=1e-5, atol=1e-5)
    out_plain.square().sum().backward()
    out_nhwc.square().sum().backward()
    for (name, p), q in zip(plain.named_parameters(), nhwc.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
    restored = make_agent(False)
    restored.load_state_dict(nhwc.state_dict())
    torch.testing.assert_close(outputs(restored), out_nhwc, rtol=1e-5, atol=1e-5)
