r"""TRPO for continuous-action tasks (MuJoCo), separate actor and critic networks: ppo_continuous_action.py with
another policy step (Schulman et al. 2015), as "Implementation Matters in Deep Policy Gradients" (Engstrom et al., ICLR
2020, https://arxiv.org/abs/2005.12729) runs it.

Run:   python trpo_continuous_action.py --env-id Walker2d-v4
Eval:  python trpo_continuous_action.py --eval-checkpoint runs/<run>/checkpoint.pt --eval-episodes 10

The defaults are that paper's TRPO on Walker2d (Table 4, column TRPO; its released configs/walker_trpo.py): delta 0.04,
the critic's Adam at 3e-4 for 10 epochs of 32 minibatches, 2048 steps of one env, gamma 0.99, lambda 0.95, and none of
PPO's code-level optimisations: raw rewards, Xavier init, no annealing, no value or gradient clip, observations
normalised but unclipped. Its TRPO+ on Walker2d (Table 4, configs/walker_trpo_plus.py) switches them on by
ppo_continuous_action.py's names, at the constant delta its released code ran (T6; add --max-kl-final 0.04 for footnote 5's):
       python trpo_continuous_action.py --env-id Walker2d-v4 --max-kl 0.07 --value-lr 1e-4 \
           --reward-scaling returns --clip-reward 10 --clip-obs 10 --ortho-init --max-grad-norm inf
Table 4 gives TRPO+ a gradient clip of 1, but the released trpo_step and value_step clip nothing (only its ppo_step
reads CLIP_GRAD_NORM): --max-grad-norm inf is what ran; --max-grad-norm 1 would clip this file's critic step.

The step, in update() instead of PPO's epochs of the clipped surrogate (details 7-11 below change with it):
  T1. surrogate L = mean(ratio * A) + ent_coef * entropy over the whole batch, A normalised over the batch
  T2. Fisher-vector products F v: the Hessian of the mean KL(old || new) over a random --fisher-frac of the batch,
      by double backprop, plus --cg-damping * v
  T3. --cg-steps iterations of conjugate gradient from 0 solve F s = g (g = grad L); the step s sqrt(2 delta / s.F s)
      reaches the KL bound delta = --max-kl in the quadratic model (damping included, as in the paper's code)
  T4. backtracking line search: the step, then halved, --backtrack-steps tries; the first whose exact mean KL(old || new)
      over the batch is <= delta and whose surrogate improves by more than --accept-ratio times g.step (the paper's
      code: 0.1; 0: any improvement) is taken; when none qualifies the policy stays exactly as it was
  T5. the critic alone learns by Adam, --update-epochs epochs of --num-minibatches minibatches, as in PPO
  T6. --max-kl-final: delta moved linearly from --max-kl to it, one increment before each step (footnote 5); in the
      released code `self.MAX_KL +=` never reaches trpo_step (it reads params.MAX_KL): its TRPO+ ran at --max-kl
Logged every iteration beside PPO's keys and the paper's Figure 2 (max_ratio, mean_kl, max_kl): losses/kl (the mean KL
the step reached; 0 without one), kl_bound (delta), backtracks (halvings before the step taken; -1: none taken) and
surrogate_improvement (0 without a step). The paper's code also resets the envs at each rollout and leaves each
episode's last step out of the value loss: rollout details, kept here as ppo_continuous_action.py has them.
benchmark/peers/sb3_trpo.py sets Stable-Baselines3-contrib's TRPO up the same way, beside this file.

The 13 core implementation details of "The 37 Implementation Details of PPO" (Huang et al., ICLR Blog Track 2022):
  1. vectorized envs (gymnasium SyncVectorEnv), fixed-length rollouts, SAME_STEP autoreset
  2. orthogonal init: hidden layers std sqrt(2), policy head 0.01, value head 1.0, biases 0
  3. Adam epsilon 1e-5
  4. --anneal-lr: learning rate annealed linearly to exactly 0 at the last iteration (off)
  5. GAE with value bootstrap from the observation after the rollout; returns = advantages + values
  6. each critic epoch shuffles the batch and splits it into disjoint minibatches
  7. advantages normalised over the whole batch (T1)
  8. the TRPO step (T1-T4) instead of the clipped surrogate objective
  9. --clip-vloss: clipped value loss (0.5 * max(unclipped, clipped)) (off)
  10. loss = vf_coef * v_loss, the critic's alone (T5); one optimizer holds both networks
  11. --max-grad-norm: global gradient norm of the critic step clipped (inf: off)
  12. debug variables: policy_loss, value_loss, entropy, old_approx_kl, approx_kl, clipfrac, explained_variance
  13. separate 64-64 tanh actor and critic MLPs (ppo_shared.py is the shared-trunk variant)
The blog's 9 details for continuous action domains, C1-C9 in the comments:
  C1. Gaussian policy: the actor outputs the mean of a normal distribution
  C2. state-independent log standard deviation, a parameter initialised to 0
  C3. independent action components: log-probabilities and entropies summed over the action dimensions
  C4. separate 64-64 tanh policy (mean head std 0.01) and value (head std 1.0) networks
  C5. the env gets the sampled action clipped to its bounds; the unclipped one is stored and trained on
  C6. observations normalised by a running mean and variance (baselines' VecNormalize)
  C7. normalised observations clipped to [-10, 10]
  C8. rewards divided by the standard deviation of a running discounted return
  C9. scaled rewards clipped to [-10, 10]
The paper's switches are off by default (TRPO+ turns them on): --norm-obs (C6, on), --clip-obs (C7), --reward-scaling
(C8; --clip-reward, C9, clips only what it scales), --ortho-init (detail 2; off: Xavier-uniform weights, zero biases, as
its released code), --max-grad-norm (11), --clip-vloss (9), --anneal-lr (4); --value-lr: the critic's rate.

To hack: the rollout, the surrogate and the line search call Agent.get_action_and_value, the Fisher and the KL
Agent.get_mean_and_logstd; the policy is every parameter but the critic's, the optimizer holds agent.parameters() and
the critic's loop is CleanRL's, so an edit to the network, a head or the loop applies everywhere.
Deliberate choices (reference behaviour stays the default): --bootstrap-truncated (off); --torch-threads 1; --compile
(off: torch.compile of the rollout's policy step and the critic's minibatch losses, CUDA graphs on a GPU; the policy's
natural-gradient step, T2-T4, stays eager).
--gymnasium-normalization: the rules of gymnasium's per-env wrappers (CleanRL's v4 runs): terminal observations enter
the statistics; the running return restarts only at a termination, before the reward. The statistics are saved in the
checkpoint and frozen in evaluation (the reference's evaluation starts fresh ones and scores far below its training).
MuJoCo envs pickle only their constructor arguments: the checkpoint adds their physics state and random generator.
"""

import contextlib
import errno
import gc
import importlib.metadata
import importlib.util
import io
import math
import os
import pickle
import random
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import traceback
import warnings
from dataclasses import asdict, dataclass
from typing import Literal, Optional

try:  # Ctrl-C while these load (torch takes seconds) waits for them, then is one line, no traceback
    sigmask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn

    signal.pthread_sigmask(signal.SIG_SETMASK, sigmask)  # a Ctrl-C pressed meanwhile is raised here
except KeyboardInterrupt:
    if __name__ != "__main__":
        raise
    print(f"{os.path.basename(__file__)}: interrupted; no checkpoint was saved", file=sys.stderr)
    sys.exit(130)

SCRIPT = os.path.basename(__file__)  # this file's name: a copy runs, logs and checkpoints as itself


@dataclass
class Args:
    exp_name: str = SCRIPT.removesuffix(".py")  # the name of this experiment (the first part of the run name)
    seed: int = 1  # seed of python, numpy, torch and the environments
    torch_deterministic: bool = True  # if toggled, sets `torch.backends.cudnn.deterministic=True`
    cuda: bool = True  # use CUDA when available (else the CPU; a notice when --cuda is given by name)
    torch_threads: int = 1  # torch intra-op threads (0: torch's default); 1 is fastest for small networks
    compile: bool = False  # torch.compile the policy step and minibatch losses (CUDA graphs on CUDA); no faster on a CPU
    track: bool = False  # log to Weights & Biases (imports wandb only when set)
    wandb_project_name: str = "ppo-reference"  # the Weights & Biases project
    wandb_entity: Optional[str] = None  # the Weights & Biases entity (team)
    capture_video: bool = False  # record videos of env 0 into `videos/<run name>/` (needs moviepy)
    save_model: bool = False  # write `runs/<run name>/checkpoint.pt` every --save-every iterations and at the end
    save_every: int = 50  # iterations between periodic checkpoints (with --save-model)
    resume: Optional[str] = None  # continue this checkpoint's run (beside it only the budget and saving flags may change)
    eval_checkpoint: Optional[str] = None  # evaluate this checkpoint on the CPU instead of training; print the mean return
    eval_episodes: int = 10  # episodes to run with --eval-checkpoint

    # Algorithm specific arguments
    env_id: str = "HalfCheetah-v4"  # the id of the environment (MuJoCo v4 and v5 ids both work)
    total_timesteps: int = 1000000  # total environment steps of the experiment
    learning_rate: float = 3e-4  # the learning rate of the optimizer (Adam: the critic's, unless --value-lr)
    num_envs: int = 1  # the number of parallel environments
    num_steps: int = 2048  # the number of steps to run in each environment per rollout
    anneal_lr: bool = False  # anneal the learning rate linearly to 0
    gamma: float = 0.99  # the discount factor gamma
    gae_lambda: float = 0.95  # the lambda of generalized advantage estimation
    num_minibatches: int = 32  # the number of minibatches per epoch of the critic
    update_epochs: int = 10  # the number of epochs of the critic over each rollout
    norm_adv: bool = True  # normalise advantages over the batch
    clip_coef: float = 0.2  # the value clipping range (--clip-vloss), and the ratio band that clipfrac counts
    clip_vloss: bool = False  # use the clipped value loss
    ent_coef: float = 0.0  # coefficient of the entropy bonus in the surrogate
    vf_coef: float = 0.5  # coefficient of the value loss (alone in its loss: it scales the gradient that is clipped)
    max_grad_norm: float = math.inf  # the maximum global norm of the critic's gradients (inf: no clipping)
    max_kl: float = 0.04  # delta, the bound on the mean KL(old || new) of a policy step
    max_kl_final: Optional[float] = None  # delta at the last iteration, linearly from --max-kl (None: constant)
    fisher_frac: float = 0.1  # the fraction of the batch, drawn at random, whose KL Hessian is the Fisher matrix
    cg_damping: float = 0.1  # added to the Fisher matrix (times the identity) for conjugate gradient
    cg_steps: int = 10  # the number of conjugate gradient iterations
    backtrack_steps: int = 10  # the line search's tries: the full step, then halved each time
    accept_ratio: float = 0.1  # the least improvement of the surrogate taken, as a fraction of g.step (0: any)
    bootstrap_truncated: bool = False  # bootstrap time-limit ends from the value of their final observation
    clip_obs: float = math.inf  # normalised observations are clipped to [-clip_obs, clip_obs] (inf: not)
    clip_reward: float = 10.0  # scaled rewards are clipped to [-clip_reward, clip_reward] (inf: not)
    gymnasium_normalization: bool = False  # normalise by the rules of gymnasium's per-env wrappers (see above)
    norm_obs: bool = True  # normalise observations by their running statistics; off: raw ones, unclipped
    reward_scaling: Literal["returns", "rewards", "none"] = "none"  # divide rewards by the std of the running
    # discounted return, of the rewards around their mean (Implementation Matters' PPO-NoClip), or not at all (none)
    ortho_init: bool = False  # orthogonal init; off: Xavier-uniform weights, zero biases (Implementation Matters' PPO-M)
    value_lr: Optional[float] = None  # the critic's learning rate, in a param group of its own (None: --learning-rate)

    # filled in at runtime
    batch_size: int = 0  # computed: num_envs * num_steps
    minibatch_size: int = 0  # computed: batch_size // num_minibatches
    num_iterations: int = 0  # computed: total_timesteps // batch_size


def make_envs(args, run_name, restored=None):
    def make_env(idx):
        if restored is not None:  # sub-envs unpickled from a checkpoint continue their episodes
            return lambda: set_physics(*restored[idx])
        if args.capture_video and idx == 0:
            return lambda: gym.wrappers.RecordVideo(gym.make(args.env_id, render_mode="rgb_array"), f"videos/{run_name}")
        return lambda: gym.make(args.env_id)

    # detail 1: SAME_STEP autoreset, as in the reference's gym: the step that ends an episode already
    # returns the next episode's first observation (the final one is in info["final_obs"])
    return VecNormalize(
        gym.vector.SyncVectorEnv(
            [make_env(i) for i in range(args.num_envs)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
        ),
        args,
    )


def update_rms(rms, x):
    """Running (mean, var, count) updated with the batch x (rows): Chan et al.'s parallel update, as baselines'
    RunningMeanStd, which starts from (0, 1, 1e-4): the first batch sets the statistics."""
    (mean, var, count), n = rms, x.shape[0]
    batch_mean = x.sum(0) / n  # sums, not x.mean(0): this runs every env step, and numpy's mean costs 4x a sum
    delta, total = batch_mean - mean, count + n
    m2 = var * count + np.square(x - batch_mean).sum(0) + np.square(delta) * (count * n / total)
    return mean + delta * (n / total), m2 / total, total


def normalize_obs(obs, obs_rms, args):
    """Details C6-C7: standardise by the running statistics (never updated here), then clip; raw with --no-norm-obs."""
    if not args.norm_obs:
        return obs.astype(np.float32)
    return np.clip((obs - obs_rms[0]) / np.sqrt(obs_rms[1] + 1e-8), -args.clip_obs, args.clip_obs).astype(np.float32)


class VecNormalize(gym.vector.VectorWrapper):
    """Details C5-C9, as baselines' VecNormalize: the envs get the actions clipped to their bounds, the agent gets
    observations normalised by running statistics and rewards divided by the std of a running discounted return (the
    mean not subtracted; --reward-scaling picks another), both clipped. infos["reward"] keeps the env's own rewards."""

    def __init__(self, envs, args):
        super().__init__(envs)
        self.args, shape = args, envs.single_observation_space.shape
        self.obs_rms, self.ret_rms = (np.zeros(shape), np.ones(shape), 1e-4), (0.0, 1.0, 1e-4)  # (mean, var, count)
        self.ret = np.zeros(envs.num_envs)  # the running discounted return of each env

    def reset(self, **kwargs):
        obs, infos = self.env.reset(**kwargs)
        self.obs_rms = update_rms(self.obs_rms, obs)
        return normalize_obs(obs, self.obs_rms, self.args), infos

    def step(self, actions):
        low, high, gymnasium_rules = self.action_space.low, self.action_space.high, self.args.gymnasium_normalization
        obs, reward, terminations, truncations, infos = self.env.step(np.clip(actions, low, high))
        if gymnasium_rules:  # gymnasium's per-env wrapper also counts each episode's last observation ...
            for i in np.flatnonzero(terminations | truncations):
                self.obs_rms = update_rms(self.obs_rms, infos["final_obs"][i][None])
        self.obs_rms = update_rms(self.obs_rms, obs)  # after a done: the next episode's first observation
        # ... and restarts the return at a termination, before adding the reward (VecNormalize: after any episode end)
        self.ret = self.ret * (1 - terminations if gymnasium_rules else 1) * self.args.gamma + reward
        scaling = self.args.reward_scaling  # the std of the returns (C8), of the rewards (Engstrom et al.), or none
        self.ret_rms = update_rms(self.ret_rms, self.ret if scaling == "returns" else reward)
        mean, std = (
            self.ret_rms[0] if scaling == "rewards" else 0.0,
            np.sqrt(self.ret_rms[1] + 1e-8),
        )  # the Implementation Matters authors' code
        scaled = (
            reward
            if scaling == "none"
            else np.clip((reward - mean) / std + mean, -self.args.clip_reward, self.args.clip_reward)
        )
        self.ret = self.ret if gymnasium_rules else np.where(terminations | truncations, 0.0, self.ret)
        obs = normalize_obs(obs, self.obs_rms, self.args)
        return obs, scaled, terminations, truncations, {**infos, "reward": reward}


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    # detail 2: orthogonal weights, constant biases
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim, action_dim, ortho_init=True):
        super().__init__()
        # detail 13 / C4: separate actor and critic networks, 64-64 tanh each
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor_mean = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, action_dim), std=0.01),
        )  # detail C1
        self.actor_logstd = nn.Parameter(torch.zeros(1, action_dim))  # detail C2: state-independent, initially 0
        if not ortho_init:  # detail 2 off: PPO-M's init (Implementation Matters' "xavier"), before any edit below
            for layer in (m for m in self.modules() if isinstance(m, nn.Linear)):
                nn.init.xavier_uniform_(layer.weight)
                nn.init.zeros_(layer.bias)

    def get_value(self, x):
        return self.critic(x).squeeze(-1)

    def get_mean_and_logstd(self, x):
        """The Gaussian policy at states x: get_action_and_value samples and scores it, the KL diagnostic compares it."""
        mean = self.actor_mean(x)
        return mean, self.actor_logstd.expand_as(mean)  # detail C2: one std for every state (edit here for more)

    def get_action_and_value(self, x, action=None):
        """Sample an action, or score the given one: (action, log-prob, entropy, value).
        The rollout and the update both call this, so an edit here applies to both."""
        mean, logstd = self.get_mean_and_logstd(x)
        if action is None:  # unbounded: the env gets it clipped to its bounds (detail C5)
            action = mean + logstd.exp() * torch.randn_like(mean)
        # Normal(mean, std) written out: a whole default run of ppo_continuous_action.py (HalfCheetah-v4, 1M steps) takes
        # 445 s, 555 s with torch.distributions.Normal (Intel Xeon, 2 cores, 2026-12-05); detail C3: sums over the
        # independent action components
        logprob = (-0.5 * ((action - mean) / logstd.exp()).square() - logstd - 0.5 * math.log(2 * math.pi)).sum(-1)
        return action, logprob, (0.5 + 0.5 * math.log(2 * math.pi) + logstd).sum(-1), self.get_value(x)


def make_agent(args, observation_space, action_space):
    """The Agent of a run with these args (a checkpoint's, in evaluate()) and spaces: train() and evaluate() both build
    it here, so a new constructor argument (a new flag's value, say) is given once and evaluates as it trained."""
    return Agent(int(np.prod(observation_space.shape)), int(np.prod(action_space.shape)), args.ortho_init)


def compute_gae(rewards, values, dones, next_value, gamma, gae_lambda):
    """Generalized advantage estimation (detail 5). Tensors [T, N]; next_value [N]. Returns (advantages,
    TD(lambda) returns). dones[t] = 1 when step t ended its episode: nothing flows back across it. The T-step
    recursion runs in numpy: on arrays of N elements a numpy op costs a fraction of a torch op."""
    r, v, d, next_v = (x.detach().cpu().numpy() for x in (rewards, values, dones, next_value))
    nextnonterminal = 1.0 - d
    deltas = r + gamma * np.concatenate([v[1:], next_v[None]]) * nextnonterminal - v
    advantages, lastgaelam = np.zeros_like(deltas), 0.0
    for t in reversed(range(r.shape[0])):
        lastgaelam = advantages[t] = deltas[t] + gamma * gae_lambda * nextnonterminal[t] * lastgaelam
    advantages = torch.as_tensor(advantages, device=rewards.device)
    return advantages, advantages + values


def value_loss(newvalue, oldvalue, returns, args):
    """The critic's loss (T5): the squared error, with --clip-vloss its clipped form (detail 9)."""
    if args.clip_vloss:
        v_clipped = oldvalue + torch.clamp(newvalue - oldvalue, -args.clip_coef, args.clip_coef)
        v_loss = 0.5 * torch.max((newvalue - returns) ** 2, (v_clipped - returns) ** 2).mean()
    else:
        v_loss = 0.5 * ((newvalue - returns) ** 2).mean()
    return v_loss


def gaussian_kl(mean0, logstd0, mean1, logstd1):
    """KL(N0 || N1) of two diagonal Gaussians at each state, summed over the action components (C3): exact, not a
    sample estimate, for the Implementation Matters paper's Figure 2 (the KL between the policies before and after an
    update)."""
    r = 2 * (logstd0 - logstd1)  # log(var0 / var1); expm1(r) - r keeps the digits a small KL has in float32
    return 0.5 * (torch.expm1(r) - r + (mean0 - mean1).square() / (2 * logstd1).exp()).sum(-1)


@torch.no_grad()
def ratio_stats(logratio, clip_coef):
    """Detail 12 from log(new / old): (old_approx_kl, approx_kl, clipfrac), the k1 and the lower-variance k3
    estimators of KL(old || new) and the fraction of ratios outside [1 - clip_coef, 1 + clip_coef]."""
    ratio = logratio.exp()
    return (-logratio).mean(), ((ratio - 1) - logratio).mean(), ((ratio - 1).abs() > clip_coef).float().mean()


def minibatch_losses(agent, b, mb, args):
    """The critic's (loss, v_loss) for minibatch `mb` (indices into batch `b`): the forward pass the optimizer step
    differentiates. With --compile, update() is handed it compiled (compiled(): an edit here is compiled too)."""
    v_loss = value_loss(agent.get_value(b["obs"][mb]), b["values"][mb], b["returns"][mb], args)
    return v_loss * args.vf_coef, v_loss  # detail 10: the critic's loss alone (T5)


def flat_grad(y, params, **kw):
    """The gradient of the scalar y with respect to params, as one vector."""
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(y, params, **kw)])


def fisher_product(agent, obs, params, damping):
    """T2: v -> (F + damping I) v, F the Hessian of the mean KL(old || new) over obs in params at the current policy:
    the KL's gradient, kept differentiable, differentiated again along v (double backprop)."""
    mean, logstd = agent.get_mean_and_logstd(obs)
    kl_grad = flat_grad(gaussian_kl(mean.detach(), logstd.detach(), mean, logstd).mean(), params, create_graph=True)
    return lambda v: flat_grad(kl_grad @ v, params, retain_graph=True) + damping * v


def conjugate_gradient(fvp, g, steps):
    """x with F x = g after `steps` iterations of conjugate gradient from x = 0 (T3), given fvp(v) = F v for a symmetric
    positive definite F; an exact solution (a zero residual) ends it early."""
    x, r, p = torch.zeros_like(g), g.clone(), g.clone()
    rr = r @ r
    for _ in range(steps):
        if rr == 0:
            break
        fp = fvp(p)
        alpha = rr / (p @ fp)
        x, r, rr_old = x + alpha * p, r - alpha * fp, rr
        rr = r @ r
        p = r + rr / rr_old * p
    return x


def surrogate(agent, b, advantages, args):
    """T1 on batch `b`: (mean(ratio * advantages) + ent_coef * entropy, log(new / old) of each action, mean entropy)."""
    _, newlogprob, entropy, _ = agent.get_action_and_value(b["obs"], b["actions"])
    logratio = newlogprob - b["logprobs"]
    return (logratio.exp() * advantages).mean() + args.ent_coef * entropy.mean(), logratio, entropy.mean()


def assign(params, vector):
    """Write a flat vector into the parameters, in place: each stays the tensor the optimizer holds."""
    for p, v in zip(params, vector.split([p.numel() for p in params])):
        p.copy_(v.view_as(p))


def trpo_step(agent, b, args, max_kl):
    """T1-T4 on batch `b`: the policy (every parameter but the critic's) takes the natural gradient step scaled to the
    KL bound max_kl, halved until its exact mean KL is <= max_kl and the surrogate improves enough, or stays. Returns
    what the step did (the losses) and the ratio's deviation from 1 and approx_kl before it (exactly 0: on-policy)."""
    critic = {id(p) for p in agent.critic.parameters()}
    params = [p for p in agent.parameters() if id(p) not in critic]
    advantages = b["advantages"]
    if args.norm_adv:  # detail 7: over the whole batch, as the paper's code for TRPO
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    objective, first_logratio, _ = surrogate(agent, b, advantages, args)
    g = flat_grad(objective, params)
    sample = torch.randperm(args.batch_size, device=g.device)[: max(int(args.batch_size * args.fisher_frac), 1)]
    fvp = fisher_product(agent, b["obs"][sample], params, args.cg_damping)  # T2, on a random part of the batch
    direction = conjugate_gradient(fvp, g, args.cg_steps)
    full_step = direction * torch.sqrt(2 * max_kl / (direction @ fvp(direction)))  # T3: s.F s / 2 = delta
    with torch.no_grad():
        theta, expected = torch.cat([p.reshape(-1) for p in params]), (g @ full_step).item()
        old = [x.clone() for x in agent.get_mean_and_logstd(b["obs"])]  # clones: the logstd is a view of a parameter
        for backtracks in range(args.backtrack_steps):  # T4
            assign(params, theta + 0.5**backtracks * full_step)
            new_objective, logratio, entropy = surrogate(agent, b, advantages, args)
            kl = gaussian_kl(*old, *agent.get_mean_and_logstd(b["obs"])).mean().item()
            improvement = (new_objective - objective).item()
            if kl <= max_kl and improvement > max(args.accept_ratio * 0.5**backtracks * expected, 0.0):
                break
        else:  # no step qualifies (a nan one neither): the policy stays exactly where it was
            assign(params, theta)
            (new_objective, logratio, entropy), kl, improvement, backtracks = surrogate(agent, b, advantages, args), 0, 0, -1
    old_approx_kl, approx_kl, clipfrac = ratio_stats(logratio, args.clip_coef)
    first = {
        "ratio_max_dev": first_logratio.detach().exp().sub(1).abs().max().item(),
        "approx_kl": ratio_stats(first_logratio.detach(), args.clip_coef)[1].item(),
    }
    return {
        "policy_loss": -new_objective.item(),
        "entropy": entropy.item(),
        "old_approx_kl": old_approx_kl.item(),
        "approx_kl": approx_kl.item(),
        "clipfrac": clipfrac.item(),
        "kl": kl,
        "kl_bound": max_kl,
        "backtracks": backtracks,
        "surrogate_improvement": improvement,
    }, first


def update(agent, optimizer, b, args, max_kl, minibatch_losses=minibatch_losses):
    """The policy's TRPO step (trpo_step), then update_epochs passes of the critic over batch `b` (a dict of flat
    tensors) in minibatches. Returns the step's losses with the last minibatch's value loss, and trpo_step's `first`."""
    losses, first = trpo_step(agent, b, args, max_kl)
    for epoch in range(args.update_epochs):
        # detail 6: a new shuffle each epoch, split into disjoint minibatches that cover the batch
        for mb in torch.randperm(args.batch_size, device=b["obs"].device).view(-1, args.minibatch_size):
            loss, v_loss = minibatch_losses(agent, b, mb, args)

            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)  # detail 11
            optimizer.step()
    return {**losses, "value_loss": v_loss.item()}, first


def train(args: Args, given=None):
    """Train; return a dict with the per-episode returns/lengths, per-iteration losses, the agent and optimizer."""
    quiet_mujoco()
    ckpt, args = load_checkpoint(args.resume, args, given) if args.resume else (None, args)
    check_args(args, ckpt)
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    # the Args' table, then a row with the installed MuJoCo (a version, not a flag): MuJoCo 4 changed some envs' physics
    mujoco = importlib.metadata.version("mujoco") if importlib.util.find_spec("mujoco") else "none"
    run_name, run_dir, writer, lock = open_run(args, ckpt, mujoco=mujoco)  # the lock is held while `lock` lives

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    torch.set_num_threads(args.torch_threads or torch.get_num_threads())
    if args.cuda and not torch.cuda.is_available() and "cuda" in (given or ()):  # asked for by name: said; else quiet
        print(f"{SCRIPT}: --cuda is given but no CUDA device is available; running on CPU", file=sys.stderr)
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")

    envs = make_envs(args, run_name)
    obs_shape = envs.single_observation_space.shape
    agent = make_agent(args, envs.single_observation_space, envs.single_action_space).to(device)
    # detail 3: eps 1e-5; fused: the same Adam in one kernel per step, on CPU and CUDA. The critic is a param group of
    # its own, at --value-lr (Implementation Matters' value network learning rate; by default the same rate as the policy)
    critic = {id(p) for p in agent.critic.parameters()}
    optimizer = torch.optim.Adam(
        [
            {"params": [p for p in agent.parameters() if id(p) not in critic]},
            {"params": agent.critic.parameters(), "lr": args.value_lr or args.learning_rate},
        ],
        lr=args.learning_rate,
        eps=1e-5,
        fused=True,
    )
    # compiled: the rollout's policy step and the critic's minibatch losses; trpo_step (T2-T4) runs eagerly
    policy_step, losses_step = compiled(agent.get_action_and_value, args, device), compiled(minibatch_losses, args, device)

    T, N = args.num_steps, args.num_envs
    # what the envs return is stored in numpy (cheap per-step writes), what the agent returns in torch
    obs, rewards, dones = np.zeros((T, N) + obs_shape, np.float32), np.zeros((T, N), np.float32), np.zeros((T, N), np.float32)
    episode_return, episode_length = np.zeros(N), np.zeros(N, dtype=np.int64)
    history = {
        "episodic_return": [],
        "episodic_length": [],
        "losses": [],
        "first_minibatch": [],
        "learning_rate": [],
        "seconds": {"env": 0.0, "inference": 0.0, "update": 0.0},
    }  # where the wall time goes
    seconds, start_iteration, global_step = history["seconds"], 1, 0
    next_obs, _ = envs.reset(seed=args.seed)
    if ckpt:  # continue where the checkpoint stopped: the same episodes (where saved), weights, Adam's state, RNGs
        envs, next_obs = resumed_envs(ckpt, args, run_name, envs, next_obs)
        if ckpt["envs"] is not None:  # the episodes under way go on
            episode_return, episode_length = ckpt["episode_return"], ckpt["episode_length"]
        envs.obs_rms, envs.ret_rms, envs.ret = ckpt["obs_rms"], ckpt["ret_rms"], ckpt["ret"]  # details C6-C9 go on
        if ckpt["envs"] is None:  # the fresh episodes' first observations, normalised by those statistics
            next_obs, _ = envs.reset(seed=args.seed)
        start_iteration, global_step = restore(ckpt, agent, optimizer, device)

    saved = (args.resume, ckpt["iteration"]) if ckpt else None  # the last finite checkpoint (check_finite)
    stuck = 0  # T4's no-step streak: iterations in a row whose line search took no step
    gc.freeze()  # the ~300k objects made so far (mostly torch's) are never garbage: full collections skip them
    start_time, start_step = time.time(), global_step
    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:  # detail 4, in every param group from its own initial rate (a critic's own rate too)
            frac = 1 - (iteration - 1) / max(args.num_iterations - 1, 1)
            for group in optimizer.param_groups:
                group["lr"] = group.setdefault("initial_lr", group["lr"]) * frac
        # T6: the KL schedule of Implementation Matters' footnote 5, the bound moved before each step as its code does
        max_kl = (
            args.max_kl
            if args.max_kl_final is None
            else args.max_kl + (args.max_kl_final - args.max_kl) * iteration / args.num_iterations
        )

        # ---- the rollout: num_steps steps of every env, the actions from Agent.get_action_and_value ----
        rollout = []  # the agent's (action, logprob, value) of each step, stacked into [T, N] tensors after it
        for step in range(T):
            global_step += N
            obs[step] = next_obs
            t0 = time.perf_counter()
            with torch.inference_mode():
                action, logprob, _, value = policy_step(torch.as_tensor(next_obs, dtype=torch.float32, device=device))
            rollout.append((action, logprob, value))
            t1 = time.perf_counter()
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            seconds["inference"] += t1 - t0
            seconds["env"] += time.perf_counter() - t1
            rewards[step], dones[step] = reward, terminations | truncations
            if args.bootstrap_truncated and (idx := np.flatnonzero(truncations & ~terminations)).size:
                # r + gamma * V(final obs) for time-limit ends, so the done cut leaves the right target
                final = normalize_obs(np.stack([infos["final_obs"][i] for i in idx]), envs.obs_rms, args)
                final = torch.as_tensor(final, device=device)
                with torch.no_grad():
                    rewards[step, idx] += args.gamma * agent.get_value(final).cpu().numpy()

            episode_return, episode_length = episode_return + infos["reward"], episode_length + 1  # unscaled (C8)
            for i in np.flatnonzero(dones[step]):
                writer.add_scalar("charts/episodic_return", episode_return[i], global_step)
                writer.add_scalar("charts/episodic_length", episode_length[i], global_step)
                history["episodic_return"].append(float(episode_return[i]))
                history["episodic_length"].append(int(episode_length[i]))
                episode_return[i], episode_length[i] = 0.0, 0

        # ---- learning: the targets from the rollout, then update() ----
        t0 = time.perf_counter()
        actions, logprobs, values = (torch.stack(x) for x in zip(*rollout))
        with torch.no_grad():
            next_value = agent.get_value(torch.as_tensor(next_obs, dtype=torch.float32, device=device))
            advantages, returns = compute_gae(
                torch.as_tensor(rewards, device=device),
                values,
                torch.as_tensor(dones, device=device),
                next_value,
                args.gamma,
                args.gae_lambda,
            )
        b = {
            "obs": torch.as_tensor(obs, device=device).reshape((-1,) + obs_shape),
            "actions": actions.flatten(0, 1),
            "logprobs": logprobs.reshape(-1),
            "values": values.reshape(-1),
            "advantages": advantages.reshape(-1),
            "returns": returns.reshape(-1),
        }
        with torch.no_grad():  # cloned: the logstd is a view of the parameter that the update changes in place
            old_policy = [x.clone() for x in agent.get_mean_and_logstd(b["obs"])]
        losses, first = (
            update(agent, optimizer, b, args, max_kl, losses_step)
            if args.compile
            else update(agent, optimizer, b, args, max_kl)
        )
        with (
            torch.no_grad()
        ):  # the Implementation Matters paper's Figure 2: how far this update moved the policy on the batch's states
            _, newlogprob, _, _ = agent.get_action_and_value(b["obs"], b["actions"])
            kl = gaussian_kl(*old_policy, *agent.get_mean_and_logstd(b["obs"]))
            figure2 = torch.stack([(newlogprob - b["logprobs"]).exp().max(), kl.mean(), kl.max()]).tolist()
        losses.update(zip(("max_ratio", "mean_kl", "max_kl"), figure2))
        stuck = stuck + 1 if losses["backtracks"] < 0 else 0  # T4 took no step: the policy has not moved
        if stuck == 10:  # said once a streak: the run goes on, as a few such iterations in a row are normal
            print(
                f"{SCRIPT}: the line search has taken no step for 10 iterations in a row ({iteration - 9}-{iteration}): "
                "the policy is not learning; likely too high a --max-kl or --accept-ratio",
                file=sys.stderr,
            )
        seconds["update"] += time.perf_counter() - t0
        y_pred, y_true = b["values"].cpu().numpy(), b["returns"].cpu().numpy()
        losses["explained_variance"] = np.nan if np.var(y_true) == 0 else 1 - np.var(y_true - y_pred) / np.var(y_true)
        # ---- logging ----
        history["first_minibatch"].append(first)
        history["losses"].append(losses)
        history["learning_rate"].append(optimizer.param_groups[-1]["lr"])  # the critic's: the policy has no rate
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[-1]["lr"], global_step)
        for k, v in losses.items():
            writer.add_scalar(f"losses/{k}", v, global_step)
        sps = int((global_step - start_step) / (time.time() - start_time))
        writer.add_scalar("charts/SPS", sps, global_step)
        progress(iteration, args.num_iterations, global_step, args.batch_size, sps, history["episodic_return"])

        sample = (b["obs"][:8], b["actions"][:8])  # a few of the batch's states, for the updated network
        check_finite(iteration, losses, agent, optimizer, saved, sample, {"obs": obs, "rewards": rewards})
        if args.save_model and (iteration % args.save_every == 0 or iteration == args.num_iterations):
            state = run_state(args, run_name, iteration, global_step, agent, optimizer, device, **envs_state(envs, next_obs))
            state.update(episode_return=episode_return, episode_length=episode_length)
            state.update(obs_rms=envs.obs_rms, ret_rms=envs.ret_rms, ret=envs.ret)  # details C6-C9
            with signals_held():  # a signal in between would name the checkpoint before this one
                save_checkpoint(f"{run_dir}/checkpoint.pt", state)
                saved = (f"{run_dir}/checkpoint.pt", iteration)

    envs.close()
    writer.close()
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()) + f", total {time.time() - start_time:.1f}")
    history.update(
        run_name=run_name,
        run_dir=run_dir,
        global_step=global_step,
        agent=agent,
        optimizer=optimizer,
        obs_rms=envs.obs_rms,
        ret_rms=envs.ret_rms,
        ret=envs.ret,
        checkpoint=f"{run_dir}/checkpoint.pt" if args.save_model else None,
    )
    return history


# ---- Below: input checks, run directory, checkpoints, signals, evaluation and the CLI; none of it changes training ----


class ConfigError(ValueError):
    """Bad input found before training, a checkpoint that cannot be written, or training gone non-finite (check_finite);
    __main__ prints it as one line."""


# every numeric flag's valid range (flags, low, high, low allowed), checked before anything is created; ent_coef may
# be negative (Implementation Matters' PPO-NoClip penalises entropy), and a clip's bound may be inf: no clip (OFF_AT_INF)
RANGES = [
    ("total_timesteps num_envs num_steps num_minibatches update_epochs save_every eval_episodes", 1, math.inf, True),
    ("cg_steps backtrack_steps", 1, math.inf, True),
    ("learning_rate value_lr clip_coef max_grad_norm max_kl max_kl_final clip_obs clip_reward", 0, math.inf, False),
    ("vf_coef torch_threads cg_damping", 0, math.inf, True),
    ("ent_coef", -math.inf, math.inf, True),
    ("gamma gae_lambda accept_ratio", 0, 1, True),
    ("fisher_frac", 0, 1, False),
    ("seed", 0, 2**32 - 1, True),
]
OFF_AT_INF = {"max_grad_norm", "clip_obs", "clip_reward"}
# the flags that may change beside --resume: the budget, and how the run is saved or placed
RESUMABLE = {"resume", "total_timesteps", "save_model", "save_every", "cuda", "torch_threads", "track"}
RESUMABLE |= {"compile"}


def quiet_mujoco():
    """The v4 envs are the published results' own: gymnasium's warning that they are out of date is dropped, and so is
    MuJoCo 4's that their models' settotalmass is deprecated (it still applies it); MuJoCo's other warnings go to
    stderr, one line each, not into a MUJOCO_LOG.TXT in the working directory."""
    warnings.filterwarnings("ignore", message=r".*is out of date\. You should consider upgrading", category=DeprecationWarning)
    with contextlib.suppress(ImportError):  # a missing MuJoCo is check_args()'s to say
        import mujoco

        def warn(text):
            if "settotalmass" not in text:
                print(f"{SCRIPT}: MuJoCo warning: {text.strip()}", file=sys.stderr)

        mujoco.set_mju_user_warning(warn)


def check_args(args: Args, ckpt=None) -> None:
    """Fail before any training with a message that names the problem and the fix."""
    if "/" in args.exp_name or len(f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}-99".encode()) > 255:
        raise ConfigError(
            f"--exp-name {args.exp_name[:60]!r} must be one directory's name in runs/: no '/', and short enough "
            "that the run name (env id, exp name, seed, time) fits in 255 bytes; choose a short plain name"
        )
    for names, low, high, closed in RANGES:
        for name, v in ((name, getattr(args, name)) for name in names.split()):
            if v is not None and not (
                (math.isfinite(v) or v == math.inf and name in OFF_AT_INF) and (low <= v if closed else low < v) and v <= high
            ):
                raise ConfigError(
                    f"--{name.replace('_', '-')} must be a finite number"
                    + (f" {'>=' if closed else '>'} {low}" if low > -math.inf else "")
                    + (f" and <= {high}" if high < math.inf else "")
                    + (" or inf (no clip)" if name in OFF_AT_INF else "")
                    + f", got {v}"
                )
    if args.reward_scaling not in ("returns", "rewards", "none"):
        raise ConfigError(f"--reward-scaling must be returns, rewards or none, got {args.reward_scaling!r}")
    need = args.num_envs * (2e6 + args.num_steps * 2e3)  # measured: ~1.1 MB per MuJoCo env, ~1 kB per env-step
    if need > (ram := os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")):
        raise ConfigError(
            f"--num-envs {args.num_envs} needs about {need / 1e9:.1f} GB (envs and rollout storage), "
            f"more than this machine's {ram / 1e9:.1f} GB; use fewer envs"
        )
    batch = args.num_envs * args.num_steps
    if batch % args.num_minibatches != 0 or batch // args.num_minibatches < 2:
        raise ConfigError(
            f"num_envs * num_steps = {batch} is not divisible by --num-minibatches "
            f"{args.num_minibatches} into minibatches of 2 or more; choose a number that divides it"
        )
    if args.total_timesteps < batch or (ckpt and args.total_timesteps // batch <= ckpt["iteration"]):
        raise ConfigError(
            f"--total-timesteps {args.total_timesteps} leaves no iteration to run (one is {batch} "
            f"steps{'; the checkpoint is at iteration %d' % ckpt['iteration'] if ckpt else ''})"
        )
    for flag, package in (("capture_video", "moviepy"), ("track", "wandb")):
        if getattr(args, flag) and importlib.util.find_spec(package) is None:
            raise ConfigError(f"--{flag.replace('_', '-')} needs {package}, which is not installed: pip install {package}")
    if args.compile and not (
        shutil.which(cxx := os.environ.get("CXX", "g++"))  # inductor's default compiler, and one that runs
        and subprocess.run([cxx, "--version"], capture_output=True).returncode == 0
        and os.path.exists(os.path.join(sysconfig.get_path("include"), "Python.h"))
    ):
        raise ConfigError(
            "--compile needs a working C++ compiler ($CXX, or g++) and Python's headers (Python.h), which inductor "
            "builds its kernels with: install them (e.g. apt install g++ python3-dev) or run without --compile"
        )
    try:
        probe = gym.make(args.env_id, **({"render_mode": "rgb_array"} if args.capture_video else {}))
        if args.capture_video:  # MuJoCo renders through OpenGL (MUJOCO_GL=egl gives it one without a display)
            probe.reset(seed=0)
            probe.render()
        probe.close()
    except gym.error.DependencyNotInstalled as e:
        raise ConfigError(f"{args.env_id} could not be created ({e}): pip install 'gymnasium[mujoco]'") from None
    except gym.error.Error:
        raise ConfigError(f"unknown env id {args.env_id!r}; see gymnasium.pprint_registry() for the ids") from None
    except Exception as e:  # mujoco.FatalError: no OpenGL context to render in; the v2/v3 ids: their mujoco-py is gone
        fix = "without a display: MUJOCO_GL=egl" if args.capture_video else "use another version of the id (MuJoCo: -v4, -v5)"
        raise ConfigError(f"cannot create or render {args.env_id} ({e}); {fix}") from None
    if not isinstance(probe.action_space, gym.spaces.Box):
        raise ConfigError(
            f"{args.env_id} has a {type(probe.action_space).__name__} action space; {SCRIPT} handles "
            "Box only (use ppo.py for Discrete actions)"
        )


def get_physics(env):
    """A MuJoCo env's integration state and random generator, which its pickle (constructor arguments) lacks."""
    if not hasattr(u := env.unwrapped, "data"):
        return None
    import mujoco

    state = np.empty(mujoco.mj_stateSize(u.model, mujoco.mjtState.mjSTATE_INTEGRATION))
    mujoco.mj_getState(u.model, u.data, state, mujoco.mjtState.mjSTATE_INTEGRATION)
    return state, u.np_random.bit_generator.state


def set_physics(env, saved):
    if saved is not None:
        import mujoco

        mujoco.mj_setState(env.unwrapped.model, env.unwrapped.data, saved[0], mujoco.mjtState.mjSTATE_INTEGRATION)
        env.unwrapped.np_random.bit_generator.state = saved[1]
    return env


class Unpickler(pickle.Unpickler):
    """The saved games of a checkpoint (--resume), unpickled only from what games are made of: this file's classes (as
    __main__'s when `python <file>` pickled them, or an import's) and gray_84x84, gymnasium's and ale_py's classes,
    numpy's arrays and random generators. Any other name, which could run code as it loads, is refused unimported."""

    NUMPY = {"ndarray", "dtype", "sign", "_reconstruct", "scalar", "PCG64", "MT19937", "SeedSequence", "__generator_ctor"}
    NUMPY |= {"__bit_generator_ctor", "__randomstate_ctor", "__pyx_unpickle_SeedSequence"}

    def find_class(self, module, name):
        package = module.split(".")[0]
        if module in ("__main__", SCRIPT[:-3]):  # this file's, run as __main__ or imported
            found = getattr(sys.modules[__name__], name)  # an AttributeError: saved by a version with other wrappers
            if isinstance(found, type) or name == "gray_84x84":
                return found
        elif (package == "numpy" and name in self.NUMPY) or (module, name) == ("collections", "deque"):
            return super().find_class(module, name)
        elif package in ("gymnasium", "ale_py") and isinstance(found := super().find_class(module, name), type):
            return found
        raise pickle.UnpicklingError(f"{module}.{name} is no part of a saved game (refused: it could run code as it loads)")


def compiled(fn, args, device):
    """`fn`, or with --compile `fn` through torch.compile: traced at its first call from the code as it is then (an edited
    Agent or loss too) into inductor's kernels, on CUDA in mode reduce-overhead: CUDA graphs, whose next replay
    overwrites their outputs, so these are copied out. The update compiles the forward pass (and so its backward); the
    optimizer step stays eager, as dynamo leaves fused Adam (one kernel) untraced, and GAE stays in numpy: its T-step
    loop compiles unrolled (141 s for T = 128 on 2 busy CPU cores) and ran no faster."""
    if not args.compile:
        return fn
    torch._inductor.config.fallback_random = True  # sample with torch's generator, as eager does: a seed's same actions
    fast = torch.compile(fn, mode="reduce-overhead" if device.type == "cuda" else None)
    return lambda *a: tuple(x.clone() for x in fast(*a))


def progress(iteration, iterations, global_step, steps_per_iteration, sps, returns, every=10, note=""):
    """The run's progress and the time left: one updating line in a terminal, in a log file a line every `every`
    iterations and at the last."""
    tty, last = sys.stdout.isatty(), iteration == iterations
    if tty or iteration % every == 0 or last:
        left = int((iterations - iteration) * steps_per_iteration / max(sps, 1))
        line = (
            f"step {global_step}/{iterations * steps_per_iteration} SPS {sps} ETA {left // 3600}:{left % 3600 // 60:02d}:"
            f"{left % 60:02d} {note}return(last 20) {np.mean(returns[-20:] or np.nan):.1f}"
        )
        print(f"\r{line}\033[K" if tty else line, end="" if tty and not last else "\n", flush=True)


def rng_state(device):
    """Every random generator's state, for a checkpoint: a resumed run draws what the uninterrupted one would."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        **({"cuda": torch.cuda.get_rng_state_all()} if device.type == "cuda" else {}),
    }


def set_rng_state(rng, device):
    """Restore what rng_state() saved."""
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if device.type == "cuda" and "cuda" in rng:
        torch.cuda.set_rng_state_all(rng["cuda"])


def start_tracking(args, run_name):
    """--track: Weights & Biases mirrors the TensorBoard logs (imported only here)."""
    import wandb

    wandb.init(
        project=args.wandb_project_name,
        entity=args.wandb_entity,
        sync_tensorboard=True,
        config=asdict(args),
        name=run_name,
        save_code=True,
        resume="allow",
    )


def open_run(args, ckpt, **rows):
    """The run's directory (a new one, or a resumed run's own), locked against a second writer, and its TensorBoard
    writer, the args (and `rows`) its first text: (run_name, run_dir, writer, lock); the lock lasts while `lock` lives."""
    if ckpt:  # a resumed run logs on in the checkpoint's own directory (or in runs/<its name> if it was moved)
        run_name, run_dir = ckpt["run_name"], os.path.dirname(args.resume) or "."
        run_dir = run_dir if os.path.basename(os.path.abspath(run_dir)) == run_name else f"runs/{run_name}"
        print(f"{SCRIPT}: resuming {run_name} after iteration {ckpt['iteration']} in {run_dir}", file=sys.stderr)
    else:
        run_dir = new_run_dir(f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}")
        run_name = os.path.basename(run_dir)
    lock = lock_run(run_dir)
    if args.track:
        start_tracking(args, run_name)
    from torch.utils.tensorboard import SummaryWriter

    # purge_step: TensorBoard drops what an interrupted run logged after its checkpoint, so nothing counts twice
    writer = SummaryWriter(run_dir, purge_step=ckpt["global_step"] + 1 if ckpt else None)
    rows = {**asdict(args), **rows}
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in rows.items()))
    return run_name, run_dir, writer, lock


def restore(ckpt, agent, optimizer, device):
    """A resumed run's weights, optimizer state and random generators (last: nothing after draws from them before the
    loop); returns the iteration to start from and the global step."""
    agent.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    set_rng_state(ckpt["rng"], device)
    return ckpt["iteration"] + 1, ckpt["global_step"]


def envs_state(envs, next_obs):
    """What a checkpoint keeps of the envs: pickled with each simulation's state, with their last observations, so that
    a resumed run continues the same episodes (None where they do not pickle: a video recorder)."""
    try:
        return dict(envs=pickle.dumps([(env, get_physics(env)) for env in envs.unwrapped.envs]), next_obs=next_obs)
    except Exception:
        return dict(envs=None)


def resumed_envs(ckpt, args, run_name, envs, next_obs):
    """A resumed run's envs and observations: the checkpoint's, which continue their episodes, in place of the fresh
    `envs` and `next_obs`; or, where it saved none, the fresh ones, said in one line."""
    if ckpt["envs"] is None:  # keep the fresh episodes' first observations: the saved ones belong to other games
        print(f"{SCRIPT}: the checkpoint holds no env state; resuming with fresh episodes", file=sys.stderr)
        return envs, next_obs
    envs.close()
    try:  # pickled by the version of this file that saved them, which may have had other wrappers
        return make_envs(args, run_name, Unpickler(io.BytesIO(ckpt["envs"])).load()), ckpt["next_obs"]
    except Exception as e:
        raise ConfigError(
            f"the envs in {args.resume} do not fit this version of {SCRIPT} ({type(e).__name__}: "
            f"{e}); resume it with the version that wrote it, or start a new run"
        ) from None


def run_state(args, run_name, iteration, global_step, agent, optimizer, device, **more):
    """What a checkpoint holds: the run's args and place, the network, the optimizer, every random generator, and
    `more` (the script's own: the episodes under way, the saved games); --resume continues from it exactly."""
    return {
        "script": SCRIPT,
        "args": asdict(args),
        "run_name": run_name,
        "iteration": iteration,
        "global_step": global_step,
        "model": agent.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": rng_state(device),
        **more,
    }


def lock_run(run_dir):
    """Hold <run_dir>/.lock while this process runs: a second process that would write the same run (a --resume of a
    run still going) is refused in one line, not left to collide on its checkpoint and TensorBoard files."""
    import fcntl

    held = open(os.path.join(run_dir, ".lock"), "a")  # the lock lasts as long as this file stays open
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        held.close()
        raise ConfigError(f"{run_dir} is being written by another process; let it end (or stop it), then resume") from None
    return held


def new_run_dir(name, suffix=""):
    """Create runs/<name> (<name>-2, -3, ... if it exists: mkdir is atomic, so no two runs share one)."""
    try:
        os.makedirs(f"runs/{name}{suffix}")
        return f"runs/{name}{suffix}"
    except FileExistsError:
        return new_run_dir(name, f"-{int(suffix[1:] or 1) + 1}")
    except OSError as e:
        raise ConfigError(f"cannot create runs/{name}{suffix}: {e.strerror}; run from a writable directory") from None


def save_checkpoint(path, state):
    """Write atomically: a crash, Ctrl-C or full disk mid-write leaves the previous checkpoint intact, no partial file."""
    buffer = io.BytesIO()  # torch.save into memory first: after a Ctrl-C inside it, its zip writer may still end the
    try:  # zip from its destructor, which must find an open buffer (into a closed file, it aborts the process)
        torch.save(state, buffer)
        with open(f"{path}.tmp", "wb") as f:  # to a file object, a full disk is an OSError that names its cause
            f.write(buffer.getvalue())
        os.replace(f"{path}.tmp", path)
    except OSError as e:
        kept = "an earlier checkpoint there is intact: --resume it" if os.path.exists(path) else "no checkpoint was saved"
        raise ConfigError(f"cannot write {path} ({e.strerror}); {kept}") from None
    except RuntimeError as e:  # a Ctrl-C inside torch.save's writes comes out of its zip writer as a RuntimeError
        raise KeyboardInterrupt if isinstance(e.__context__, KeyboardInterrupt) else e
    finally:
        if os.path.exists(f"{path}.tmp"):
            os.remove(f"{path}.tmp")


def load_checkpoint(path, args=None, given=None):
    """The checkpoint at `path`; with `args` (given beside --resume) also the args to resume with: the checkpoint's,
    with the RESUMABLE flags `given` in `args` (the command line's; by default those that differ from Args()). Any
    other flag given with a value other than the checkpoint's is refused."""
    # weights only: tensors, numpy arrays and plain values; a pickle naming anything else, which could run code as it
    # loads, is refused unread (a shared checkpoint or agent cannot run code here)
    arrays = [np._core.multiarray._reconstruct, np._core.multiarray.scalar, np.ndarray, np.dtype]
    arrays += [t for t in vars(np.dtypes).values() if isinstance(t, type)]  # numpy 2 pickles a dtype's class too
    try:  # missing, a directory, truncated or not a checkpoint at all
        with torch.serialization.safe_globals(arrays):
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        if unsafe := re.search(r"GLOBAL ([\w.]+)|but got <class '([^']+)'>", str(e)):
            raise ConfigError(
                f"checkpoint {path!r} holds more than weights, arrays and plain values ({unsafe[1] or unsafe[2]}), "
                "which loading could run as code; it is not loaded: use checkpoints written by this project's scripts"
            ) from None
        why = str(e).split("WeightsUnpickler error:")[-1].split("Check the documentation")[0]  # torch's own words
        raise ConfigError(f"checkpoint {path!r} could not be read ({type(e).__name__}: {' '.join(why.split())})") from None
    # a checkpoint is read by the file of the name that wrote it: a copy's by the copy, the original's by the original
    owner = ckpt.get("script") if isinstance(ckpt, dict) else None
    if owner != SCRIPT:
        raise ConfigError(
            f"checkpoint {path!r} was written by {owner or 'something else'}, not by {SCRIPT}"
            + (f"; read it with {owner}" if isinstance(owner, str) else "")
        )
    stored = ckpt.get("args")  # another version's flags do not fit Args
    unknown = sorted(set(stored) - set(asdict(Args()))) if isinstance(stored, dict) else None
    if unknown != []:
        raise ConfigError(
            f"checkpoint {path!r} was written by another version of {SCRIPT} "
            + (
                f"(flags this one lacks: {', '.join('--' + k.replace('_', '-') for k in unknown[:3])})"
                if unknown
                else "(no flags)"
            )
            + "; read it with the version that wrote it"
        )
    if where := nonfinite({k: v for k, v in ckpt.items() if k != "args"}):  # the optimizer's, normalisers', LSTM's too
        raise ConfigError(
            f"checkpoint {path!r} holds non-finite {'weights' if where.startswith('model.') else 'values'} (nan or inf, "
            f"in {where}), which neither train nor evaluate; use an earlier checkpoint of the run"
        )
    if args is not None and "optimizer" not in ckpt:  # a network's weights alone (atari_agent.py's)
        raise ConfigError(
            f"checkpoint {path!r} holds the network's weights only: it evaluates "
            "(--eval-checkpoint) but cannot resume; resume from a run's checkpoint.pt"
        )
    if args is not None:  # resuming: a save that SIGKILL cut short left its .tmp beside this whole checkpoint
        with contextlib.suppress(FileNotFoundError):  # (every rank resuming together tries)
            os.remove(f"{path}.tmp")
    default, values = asdict(Args()), asdict(args or Args())
    given = set(values) & (set(given) if given is not None else {k for k, v in values.items() if v != default[k]})
    for k in sorted(given - RESUMABLE):
        if values[k] != ckpt["args"].get(k):
            raise ConfigError(
                f"--{k.replace('_', '-')} cannot change when resuming (the checkpoint has "
                f"{ckpt['args'].get(k)!r}); start a new run to train with {values[k]!r}"
            )
    return ckpt, Args(**{**ckpt["args"], **{k: values[k] for k in given & RESUMABLE}})


def nonfinite(x, where=""):
    """The path in `x` (nested dicts, lists and tuples) of its first tensor or array holding a nan or inf, or None."""
    if isinstance(x, dict):
        return next((found for k, v in x.items() if (found := nonfinite(v, f"{where}{k}."))), None)
    if isinstance(x, (list, tuple)):
        return next((found for i, v in enumerate(x) if (found := nonfinite(v, f"{where}{i}."))), None)
    if torch.is_tensor(x) and x.is_floating_point() and not x.isfinite().all():
        return where[:-1]
    if isinstance(x, np.ndarray) and x.dtype.kind in "fc" and not np.isfinite(x).all():
        return where[:-1]
    return None


def check_finite(iteration, losses, agent, optimizer, saved, probe, env_data):
    """After each update, before its checkpoint: a nan or inf in the rollout's `env_data` (the env's), a loss, a weight,
    the optimizer's state or the updated network's outputs on a few of the batch's states (`probe`, the arguments of
    Agent.get_action_and_value), or a last step whose gradients are all 0, stops the run in one line naming the likely
    cause; the last finite checkpoint `saved` ((path, iteration) or None) stays as it is."""
    params = list(agent.parameters())
    grads = [p.grad for p in params if p.grad is not None]  # the last step's, after the clip
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.is_floating_point()]
    with torch.no_grad():  # finite weights can still overflow a forward pass (~1e34 ones give nan logits)
        outputs = [t for t in agent.get_action_and_value(*probe) if torch.is_tensor(t) and t.is_floating_point()]
    # a nan or inf makes its tensor's sum one too: a sum per tensor, one sync per iteration (measured on an AMD EPYC,
    # 1 thread: 0.8 ms in ppo.py, 4 ms in ppo_atari.py, under 0.1% of an iteration; a max-abs norm took 3-7 times longer)
    tensors = params + state + outputs + [g.abs() for g in grads]
    sums = torch.stack([t.sum() for t in tensors]).tolist()
    # a sum of large finite values can overflow to inf: only then is its tensor looked at whole (exact, and rare)
    sums = [v if math.isfinite(v) or not t.isfinite().all() else 1.0 for v, t in zip(sums, tensors)]
    nw, ns, no = len(params), len(params) + len(state), len(params) + len(state) + len(outputs)  # where each ends
    # a norm that overflowed to inf makes clip_grad_norm_ scale every gradient by max_norm / inf = 0: no update
    zeroed = bool(grads) and sum(sums[no:]) == 0
    env = nonfinite(env_data)  # the env's nan or inf comes first: it makes everything after it non-finite
    bad = [f"the env returned a nan or inf (in the rollout's {env})"] if env else []
    bad += [
        f"the {k.replace('_', ' ')} is {v}" for k, v in losses.items() if k != "explained_variance" and not math.isfinite(v)
    ]
    bad += [
        f"the {what} {v}"
        for what, v in (("weights hold", sum(sums[:nw])), ("optimizer state holds", sum(sums[nw:ns])))
        if not math.isfinite(v)
    ]
    bad += ["the updated network's outputs are nan or inf (its weights are finite, but too large)"] * (
        not math.isfinite(sum(sums[ns:no]))
    )
    bad += ["every gradient of the last step is 0 (their norm overflowed to inf: the clip made it no step)"] * zeroed
    if bad:
        raise ConfigError(
            f"iteration {iteration}: {bad[0]}; "
            + (f"the last finite checkpoint is {saved[0]} (iteration {saved[1]})" if saved else "no checkpoint was saved")
            + (
                "; the env is the cause: check it (its wrappers, its physics), not the learning flags"
                if env
                else "; likely too high a --max-kl or too low a --cg-damping or --accept-ratio (or the critic's "
                "--learning-rate too high)"
            )
        )


def check_eval_flags(args, given):
    """--eval-checkpoint evaluates with the checkpoint's own settings: a training flag named beside it with another
    value than the checkpoint's, which it would ignore, is refused in one line."""
    ckpt, _ = load_checkpoint(args.eval_checkpoint)
    values = asdict(args)
    for k in sorted(set(given) - {"eval_checkpoint", "eval_episodes", "seed", "cuda", "torch_threads"}):
        if k in values and values[k] != ckpt["args"].get(k):
            raise ConfigError(
                f"--{k.replace('_', '-')} {values[k]!r} does not apply to --eval-checkpoint, which evaluates with the "
                f"checkpoint's own settings ({k}: {ckpt['args'].get(k)!r}); leave it out, or train a run with it"
            )


def evaluate(checkpoint_path, eval_episodes=10, seed=0, device="cpu"):
    """Returns of `eval_episodes` episodes of a checkpoint's sampling policy, seeded for repeatability; details C5-C7
    as in training, with the training statistics, frozen (the reference's evaluation starts fresh ones)."""
    quiet_mujoco()
    ckpt, args = load_checkpoint(checkpoint_path)
    check_args(Args(env_id=args.env_id, eval_episodes=eval_episodes, seed=seed))
    env = gym.wrappers.TransformObservation(
        gym.wrappers.ClipAction(gym.make(args.env_id)), lambda obs: normalize_obs(obs, ckpt["obs_rms"], args), None
    )
    agent = make_agent(args, env.observation_space, env.action_space).to(device)
    agent.load_state_dict(ckpt["model"])
    returns, (obs, _), episode_return = [], env.reset(seed=seed), 0.0
    with torch.random.fork_rng(), torch.inference_mode():
        torch.manual_seed(seed)
        while len(returns) < eval_episodes:
            action, *_ = agent.get_action_and_value(torch.as_tensor(obs[None], dtype=torch.float32, device=device))
            obs, reward, terminated, truncated, _ = env.step(action[0].cpu().numpy())
            episode_return += float(reward)
            if terminated or truncated:
                returns.append(episode_return)
                (obs, _), episode_return = env.reset(), 0.0
    env.close()
    return returns


def interrupted(e: BaseException, why="interrupted") -> int:
    """Ctrl-C or SIGTERM (or, `why`, another end: a full disk): one line naming the last checkpoint train() saved (its
    `saved`, in the frame `e` stopped) and the command that resumes it; the signal's exit status, 130 or 143 (else 1)."""
    saved = next((f.f_locals.get("saved") for f, _ in traceback.walk_tb(e.__traceback__) if f.f_code is train.__code__), None)
    print(
        f"{SCRIPT}: {why}; "
        + (
            f"the last checkpoint is {saved[0]} (iteration {saved[1]}); continue with: python {SCRIPT} --resume {saved[0]}"
            if saved
            else "no checkpoint was saved"
        ),
        file=sys.stderr,
    )
    return 128 + (e.args[0] if e.args else signal.SIGINT) if isinstance(e, KeyboardInterrupt) else 1


@contextlib.contextmanager
def signals_held():
    """Ctrl-C and SIGTERM wait for the block (a checkpoint's save and `saved`), then come as they came: the line
    interrupted() prints names the checkpoint on disk, not the one before it. Off the main thread it only runs it."""
    held, main = [], threading.current_thread() is threading.main_thread()
    old = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in (signal.SIGINT, signal.SIGTERM) if main}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for s in held[:1]:
            signal.raise_signal(s)


def raise_interrupt(signum, frame):  # Ctrl-C, or SIGTERM (`kill`, a scheduler's stop): the run unwinds as from Ctrl-C;
    first = time.time()  # a second signal within 2 s (a double press) is ignored, a later one ends the process at once
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda signum, frame: None if time.time() - first < 2 else os._exit(128 + signum))
    raise KeyboardInterrupt(signum)


def parse_args() -> Args:
    """tyro.cli(Args), with its parse errors (a choice or a number it cannot read: a box of 6-10 lines) in one line."""
    import tyro

    with contextlib.redirect_stderr(io.StringIO()) as box:
        try:
            return tyro.cli(Args)
        except SystemExit as e:
            if not e.code:  # --help
                raise
    text = box.getvalue().split("\n", 1)[-1].replace("-" * 8, "──").strip(" │─-\n").split("──")[0]  # ASCII if not utf-8
    sys.exit(f"{SCRIPT}: error: {' '.join(text.replace('│', ' ').split())}")


if __name__ == "__main__":
    signal.signal(signal.SIGINT, raise_interrupt)  # Ctrl-C, from its first moment to the last
    signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        cli_args = parse_args()
        # the flags on the command line (--no-cuda names cuda): beside --resume, one given at its default value counts too
        given = {a[2:].split("=")[0].replace("-", "_").removeprefix("no_") for a in sys.argv[1:] if a.startswith("--")}
        if cli_args.eval_checkpoint:
            check_eval_flags(cli_args, given)
            torch.set_num_threads(cli_args.torch_threads or torch.get_num_threads())  # --torch-threads, as in training
            returns = evaluate(cli_args.eval_checkpoint, cli_args.eval_episodes, cli_args.seed)
            print(f"mean return over {len(returns)} episodes: {np.mean(returns):.2f} +- {np.std(returns):.2f}")
        else:
            train(cli_args, given)
    except ConfigError as e:
        sys.exit(f"{SCRIPT}: error: {e}")
    except KeyboardInterrupt as e:
        sys.exit(interrupted(e))
    except OSError as e:  # the disk filled as TensorBoard wrote (a checkpoint's own write says so itself)
        if e.errno != errno.ENOSPC:
            raise
        sys.exit(interrupted(e, f"error: {e.strerror}, writing the run's logs; free some space"))
