"""Stable-Baselines3-contrib's TRPO configured as trpo_continuous_action.py: an independent implementation to run beside
ours on the same protocol.

Run:   python -m benchmark.peers.sb3_trpo --env-id Hopper-v4 --total-timesteps 1000000
       python -m benchmark.tools.run --script benchmark/peers/sb3_trpo.py --env-ids Hopper-v4 --seeds 1 2 3 \
           -- --max-kl 0.13 --value-lr 2e-4

The flags are trpo_continuous_action.py's (its Args, with its names, help, ranges and checks); four defaults differ, to
the only values SB3 runs, and a like-for-like run of ours gives it the same four: --fisher-frac 1 --accept-ratio 0
--vf-coef 2 --bootstrap-truncated. A flag SB3 cannot honour at another value is refused in one line. The run is logged
as ours is, to runs/<env>__<exp name>__<seed>__<time>/ with the same tags and the Args as the "hyperparameters" text
(benchmark/peers/sb3_a2c.py's callback), so that run.py, report.py and compare.py take it as one of our scripts. Tested
against sb3-contrib 2.9.2 (stable-baselines3 2.9.2).

How SB3 is configured, step by step of trpo_continuous_action.py's T1-T6, and where it still differs:
  T1. normalize_advantage: (A - mean) / (std + 1e-8) over the batch, as ours; the surrogate mean(ratio * A) over the
      whole batch, as ours (SB3 has no entropy term: --ent-coef 0 only)
  KL: SB3 takes the mean of KL(new || old) over the states AND the action components, where ours (and the paper's
      code) sums over the components: SB3's bound is on the KL per action component. So this file gives it
      target_kl = delta / A and cg_damping = --cg-damping / A (A: the action's dimension): then its Fisher is ours / A,
      and its CG direction, step length and KL test are ours' exactly (found by the first-update test: with delta
      itself SB3 stepped sqrt(3) times as far on Hopper). Its logged KL is multiplied back by A (losses/kl)
  T2. SB3's Fisher is the Hessian of that mean KL(new || old) (at the old policy the same matrix as of KL(old || new))
      over the WHOLE batch: it has no Fisher subsample (--fisher-frac 1 only; its sub_sampling_factor thins the whole
      step, surrogate and line search too, and is left at 1)
  T3. cg_max_steps = --cg-steps; the step sqrt(2 delta / s.(F + damping) s) s as ours. SB3's conjugate gradient starts
      from 1e-4 * N(0, 1), not 0, and stops once the squared residual is below 1e-10
  T4. line_search_shrinking_factor 0.5, line_search_max_iter = --backtrack-steps; SB3 takes the first step whose mean
      KL(new || old) (ours: KL(old || new)) is strictly below delta and whose surrogate is strictly higher: ours'
      rule at --accept-ratio 0 (<= delta); with none it restores the parameters, as ours. --kl-test old-new (a probe,
      not SB3's own) makes it test ours' KL(old || new)
  T5. the critic: n_critic_updates = --update-epochs epochs of minibatches of batch_size = the batch / --num-minibatches
      (drawn by numpy's permutation, ours by torch's), after the policy step as ours, by SB3's Adam (eps 1e-5) on
      all the policy's parameters (the actor's gradients set to None) at --value-lr (else --learning-rate): the MSE
      without a 1/2, ours' loss at --vf-coef 2; no value clipping and no gradient clip (--no-clip-vloss, inf only)
  T6. --max-kl-final: the callback sets target_kl to ours' delta (/ A) before each update
  Rollout: SB3's VecNormalize (norm_obs = --norm-obs, norm_reward = --reward-scaling returns, clip_obs, clip_reward,
  epsilon 1e-8) keeps the statistics by baselines' rules, as ours by default (--gymnasium-normalization refused;
  --reward-scaling rewards too: SB3 scales by the returns' std only). SB3 bootstraps every time-limit end from
  V(final observation): ours with --bootstrap-truncated. MlpPolicy with separate 64-64 tanh networks, orthogonal init
  with ours' gains (sqrt 2, policy head 0.01, value head 1); without --ortho-init this file puts Xavier-uniform weights
  and zero biases in every Linear, as ours (SB3's own ortho_init=False leaves torch's default init). The action is
  sampled by torch's Normal (ours: mean + std * randn) and clipped to the bounds for the env, the unclipped one stored.
  Not here: --anneal-lr, --save-model, --resume, --eval-checkpoint, --capture-video, --track.
"""

import contextlib
import io
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Literal

import torch
import torch.nn as nn

# gym (installed for Procgen and Gym-uRTS), which SB3 imports where it is, prints a 4-line notice when imported: imported
# quietly first, so that bad input is one line
with contextlib.suppress(ImportError), contextlib.redirect_stderr(io.StringIO()):
    import gym  # noqa: F401
from sb3_contrib import TRPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.logger import Logger  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize  # noqa: E402

import trpo_continuous_action as ours  # noqa: E402  the flags, their checks, the run directory
from benchmark.peers.sb3_a2c import PAACLogging, cli  # noqa: E402

SCRIPT = "sb3_trpo.py"
ConfigError = ours.ConfigError  # bad input, found before anything starts; __main__ prints it as one line


@dataclass
class Args(ours.Args):
    exp_name: str = "sb3_trpo"  # the name of this experiment (the first part of the run name)
    fisher_frac: float = 1.0  # SB3's Fisher matrix is over the whole batch (the only value it runs)
    accept_ratio: float = 0.0  # SB3's line search takes any improvement (the only value it runs)
    vf_coef: float = 2.0  # SB3's critic loss is the MSE: ours at 2 (the only value it runs)
    bootstrap_truncated: bool = True  # SB3 bootstraps every time-limit end (the only value it runs)
    kl_test: Literal["new-old", "old-new"] = "new-old"  # the line search's KL: SB3's KL(new || old), or ours' (a probe)


# (flag, the only value SB3 runs, why): anything else is refused before the run starts
ONLY = [
    ("fisher_frac", 1.0, "takes its Fisher matrix over the whole batch"),
    ("accept_ratio", 0.0, "takes any improvement in its line search"),
    ("vf_coef", 2.0, "learns the critic on the MSE, ours' loss at --vf-coef 2"),
    ("bootstrap_truncated", True, "bootstraps every time-limit end"),
    ("clip_vloss", False, "has no value clipping"),
    ("max_grad_norm", math.inf, "clips no gradient"),
    ("ent_coef", 0.0, "has no entropy bonus"),
    ("anneal_lr", False, "runs here at a constant learning rate"),
    ("gymnasium_normalization", False, "normalises by baselines' rules (VecNormalize)"),
    ("save_model", False, "runs here without checkpoints"),
    ("resume", None, "runs here without checkpoints"),
    ("eval_checkpoint", None, "runs here without checkpoints"),
    ("capture_video", False, "records no video here"),
    ("track", False, "logs to TensorBoard only here"),
]


def check_args(args: Args) -> None:
    """The flags SB3-contrib's TRPO cannot honour, then trpo_continuous_action.py's checks."""
    for name, only, why in ONLY + [
        (
            "reward_scaling",
            "returns" if args.reward_scaling == "returns" else "none",
            "scales rewards by the std of the returns or not at all",
        )
    ]:
        if getattr(args, name) != only:
            raise ConfigError(
                f"--{name.replace('_', '-')} {getattr(args, name)!r}: SB3-contrib's TRPO {why}; {SCRIPT} runs {only!r} only"
            )
    try:
        ours.check_args(args)
    except ConfigError as e:
        raise ConfigError(str(e).replace(ours.SCRIPT, SCRIPT)) from None


def make_envs(args):
    """num_envs MuJoCo envs in this process, SB3's Monitor on each (the raw return), under SB3's VecNormalize."""
    envs = make_vec_env(args.env_id, args.num_envs, args.seed, vec_env_cls=DummyVecEnv)
    return VecNormalize(
        envs,
        norm_obs=args.norm_obs,
        norm_reward=args.reward_scaling == "returns",
        clip_obs=args.clip_obs,
        clip_reward=args.clip_reward,
        gamma=args.gamma,
        epsilon=1e-8,
    )


def make_model(args, envs, device="cpu"):
    """SB3-contrib's TRPO set to ours' step (args with batch_size, minibatch_size, num_iterations filled in)."""
    policy_kwargs = dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=nn.Tanh, ortho_init=args.ortho_init)
    per_component = envs.action_space.shape[0]  # SB3's KL is a mean over the action's components, ours their sum
    algo = TRPO if args.kl_test == "new-old" else TRPOOldNewKL
    model = algo(
        "MlpPolicy",
        envs,
        learning_rate=args.value_lr or args.learning_rate,
        n_steps=args.num_steps,
        batch_size=args.minibatch_size,
        gamma=args.gamma,
        gae_lambda=args.gae_lambda,
        cg_max_steps=args.cg_steps,
        cg_damping=args.cg_damping / per_component,
        line_search_shrinking_factor=0.5,
        line_search_max_iter=args.backtrack_steps,
        n_critic_updates=args.update_epochs,
        normalize_advantage=args.norm_adv,
        target_kl=args.max_kl / per_component,
        policy_kwargs=policy_kwargs,
        seed=args.seed,
        device=device,
    )
    model.set_logger(Logger(None, []))  # the losses in name_to_value; SB3's own left an empty SB3-<time> dir in /tmp a run
    if not args.ortho_init:  # ours' --no-ortho-init: Xavier-uniform weights and zero biases in every Linear
        for layer in (m for m in model.policy.modules() if isinstance(m, nn.Linear)):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
    return model


class TRPOOldNewKL(TRPO):
    """--kl-test old-new: SB3-contrib's TRPO with the KL(old || new) of ours and the paper's code in its line search
    (sb3_contrib.trpo.trpo's kl_divergence called with its arguments swapped while train() runs; the Fisher matrix, the
    KL's Hessian at the old policy, is the same either way)."""

    def train(self):
        module, sb3_kl = sys.modules[TRPO.__module__], sys.modules[TRPO.__module__].kl_divergence
        module.kl_divergence = lambda new, old: sb3_kl(old, new)
        try:
            super().train()
        finally:
            module.kl_divergence = sb3_kl


def kl_bound(args, update):
    """Ours' delta at update 1, 2, ...: moved linearly from --max-kl to --max-kl-final, the last update at the final."""
    if args.max_kl_final is None:
        return args.max_kl
    return args.max_kl + (args.max_kl_final - args.max_kl) * update / args.num_iterations


class TRPOLogging(PAACLogging):
    """sb3_a2c.py's tags, game records and progress line, with TRPO's losses; delta set before each update."""

    def _on_rollout_end(self):  # TRPO.train() comes next; its KL is per action component
        self.model.target_kl = kl_bound(self.args, self.model._n_updates + 1) / self.model.action_space.shape[0]

    def losses(self, logged):
        per_component = self.model.action_space.shape[0]
        return {
            "value_loss": logged["train/value_loss"],
            "policy_loss": -logged["train/policy_objective"],
            "kl": logged["train/kl_divergence_loss"] * per_component,  # KL(new || old) of the step taken (0: none)
            "line_search_success": logged["train/is_line_search_success"],
            "kl_bound": self.model.target_kl * per_component,
            "explained_variance": logged["train/explained_variance"],
        }


def train(args: Args):
    """Train; return a dict with the per-episode returns/lengths, per-update losses and learning rates, and the model."""
    check_args(args)
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    run_dir = ours.new_run_dir(f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(run_dir)
    writer.add_text(
        "hyperparameters",  # as ours: run.py and report.py read the Args from it
        "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items()),
    )
    torch.set_num_threads(args.torch_threads or torch.get_num_threads())
    device = "cuda" if args.cuda and torch.cuda.is_available() else "cpu"
    history = {"episodic_return": [], "episodic_length": [], "losses": [], "learning_rate": []}
    envs = make_envs(args)
    try:
        model = make_model(args, envs, device)
        callback = TRPOLogging(args, writer, history, envs, run_dir, os.path.basename(run_dir))
        model.learn(args.num_iterations * args.batch_size, callback=callback, log_interval=None)
    finally:
        envs.close()
        writer.close()
    history.update(run_name=os.path.basename(run_dir), run_dir=run_dir, global_step=model.num_timesteps, model=model)
    return history


if __name__ == "__main__":
    cli(SCRIPT, train, Args, ConfigError)
