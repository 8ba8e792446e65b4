"""Tests of benchmark/studies/bf16_gradients.py: one loss's gradients in both precisions."""


def test_bf16_gradients_compares_one_loss_in_both_precisions():
    import torch

    from benchmark.studies import bf16_gradients

    ppo_atari = bf16_gradients.ppo_atari
    args = ppo_atari.Args()
    torch.manual_seed(0)
    agent, n = ppo_atari.Agent(4, 4), 16
    batch = (
        torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8),
        torch.randint(0, 4, (n,)),
        torch.full((n,), -1.4),
        torch.zeros(n),
        torch.randn(n),
        torch.randn(n),
    )
    mb = torch.arange(n)
    loss32, g32 = bf16_gradients.gradient(agent, batch, mb, args, bf16=False)
    assert bf16_gradients.gradient(agent, batch, mb, args, bf16=False)[0] == loss32  # the same computation again
    loss16, g16 = bf16_gradients.gradient(agent, batch, mb, args, bf16=True)
    assert g32.numel() == sum(p.numel() for p in agent.parameters())  # every parameter's gradient
    assert not torch.equal(g16, g32)  # the bf16 pass really ran in bf16
    assert torch.nn.functional.cosine_similarity(g32, g16, 0) > 0.99 and abs(loss16 - loss32) < 2e-2 * abs(loss32) + 2e-3
