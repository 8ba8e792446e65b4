"""--bf16 checks shared by the CNN scripts' tests (issue 25): the CNN's forward passes run under bfloat16 autocast,
while the heads, losses, optimizer and checkpoints stay fp32.

Tolerance of the loss comparison: bfloat16 keeps 8 significant bits, so each rounding is off by at most 2**-9
(0.2%) of the value. The CNN accumulates in fp32 and rounds each layer's output once, so the features, logits and
values drift by a few tenths of a percent per layer, and a loss (a mean over the batch) no more. Measured on these
short runs: at most 0.6% on the Nature CNN scripts, 2.1% (6e-4 absolute) on Procgen's 15-layer IMPALA CNN. Hence
2% relative plus 2e-3 absolute, the latter for losses near 0 (the policy loss of normalised advantages).
"""

import dataclasses

import pytest
import torch

LOSS_RTOL, LOSS_ATOL = 2e-2, 2e-3
# the scripts' own test of a CPU's bfloat16 kernels (oneDNN's: AVX512-BF16 or AMX; an AVX2-only CPU, e.g. AMD EPYC up
# to Zen 3, has none, and there --bf16 is refused)
HOST_BF16 = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
needs_bf16 = pytest.mark.skipif(
    not HOST_BF16,
    reason="this CPU has no bfloat16 kernels (AVX512-BF16 or AMX), so the "
    "script refuses --bf16 here: test_every_script.py's test_bf16_without_bf16_kernels_is_refused runs instead",
)


def assert_bf16_trains_close_to_fp32_and_stays_on_policy(mod, args):
    """`args` (a script's short run: its fp32 settings, save_model off) and the same with --bf16: the first losses
    agree within the tolerance above, the weights stay fp32, and the rollout and the update score the same policy."""
    fp32, bf16 = mod.train(dataclasses.replace(args, seed=3)), mod.train(dataclasses.replace(args, seed=3, bf16=True))
    a, b = fp32["losses"][0], bf16["losses"][0]
    for k in ("policy_loss", "value_loss", "entropy"):
        assert b[k] == pytest.approx(a[k], rel=LOSS_RTOL, abs=LOSS_ATOL), k
    assert any(a[k] != b[k] for k in a), "--bf16 changed nothing: the autocast is not in effect"
    assert all(p.dtype == torch.float32 for p in bf16["agent"].parameters())  # the weights and Adam stay fp32
    # PPO and PAAC: old (rollout) and new (update) log-probs come from the same bf16 CNN, only at other batch sizes;
    # IMPALA keeps no first minibatch (its actors' policy lags the learner's by design), so it has no such check
    assert ("first_minibatch" not in bf16) == (mod.__name__.startswith("impala")), mod.__name__
    assert len(bf16.get("first_minibatch", [])) == len(bf16["losses"]) or mod.__name__.startswith("impala")
    for first in bf16.get("first_minibatch", []):
        assert first["ratio_max_dev"] < 1e-5 and first.get("clipfrac", 0.0) == 0.0


def assert_bf16_checkpoints_load_across_precisions(mod, args):
    """A --bf16 run's checkpoint holds fp32 weights, and an fp32 run goes on in bf16 (--bf16 is a RESUMABLE flag)."""
    trained = mod.train(dataclasses.replace(args, save_model=True, bf16=True))
    ckpt, resume_args = mod.load_checkpoint(trained["checkpoint"])
    assert resume_args.bf16 and all(v.dtype != torch.bfloat16 for v in ckpt["model"].values())
    fp32 = mod.train(dataclasses.replace(args, save_model=True))
    resumed = mod.train(mod.Args(resume=fp32["checkpoint"], total_timesteps=2 * args.total_timesteps, bf16=True))
    assert resumed["global_step"] > fp32["global_step"]
    ckpt, resume_args = mod.load_checkpoint(resumed["checkpoint"])
    assert resume_args.bf16 and all(v.dtype != torch.bfloat16 for v in ckpt["model"].values())


def assert_bf16_without_bf16_kernels_is_refused(mod, args, monkeypatch):
    """On a CPU without bf16 kernels, the check as it is; on one with them, told there are none."""
    if HOST_BF16:
        monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    with pytest.raises(mod.ConfigError, match=r"^--bf16 needs bfloat16 kernels .*; run without --bf16$"):
        mod.check_args(dataclasses.replace(args, bf16=True, cuda=False))
    mod.check_args(dataclasses.replace(args, cuda=False))  # fp32 still runs there
