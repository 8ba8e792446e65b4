"""ppo_atari.py, data-parallel: one process per GPU (or CPU) on one or many nodes, over torch.distributed.

Run:   python ppo_atari_multigpu.py --env-id BreakoutNoFrameskip-v4  (without torchrun: one process, as ppo_atari.py)
Eval:  python ppo_atari_multigpu.py --eval-checkpoint runs/<run>/checkpoint.pt --eval-episodes 10
Run on many GPUs/nodes (the same command on every node, HOST any one of them; a --resume file every node can read):
  torchrun --nproc_per_node=8 ppo_atari_multigpu.py --num-envs 64
  torchrun --nnodes=4 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=HOST:29400 ppo_atari_multigpu.py ...
  D1. --num-envs counts every process's envs: rank r steps n = num_envs / world size of them, seeded as ppo_atari.py
      seeds envs r * n .. (r + 1) * n - 1, so the batch and its update are ppo_atari.py's for any number of processes
  D2. rank 0's parameters are broadcast at the start; each rank updates on its share of every minibatch, averaging each
      gradient over the ranks as backward makes it; detail 7 and --target-kl see the global minibatch: one step for all
  D3. rank 0 logs every rank's games and the ranks' mean losses, and saves; a failed collective (a process died, or
      did not answer within --dist-timeout) stops a process with one line, and torchrun stops the node's others

The core details 1-12 of "The 37 Implementation Details of PPO" as in ppo.py, and the 9 Atari details
(A8 replaces 13), the wrappers in this order around the raw NoFrameskip-v4 game:
  A1. NoopReset: 1..30 random no-ops after every real reset
  A2. MaxAndSkip: each action repeated on 4 frames, rewards summed, observation = max of the last two frames
  A3. EpisodicLife: a lost life ends the *training* episode (terminated), not the game
  A4. FireReset: press FIRE after each reset in games that wait for it
  A5. WarpFrame: grayscale, resized to 84x84 (cv2, INTER_AREA)
  A6. ClipReward: rewards binned to {-1, 0, +1} by their sign
  A7. FrameStack: the last 4 frames stacked as channels
  A8. shared Nature CNN (32x8x8/4, 64x4x4/2, 64x3x3/1, fc512), policy head std 0.01, value head std 1
  A9. observations scaled from [0, 255] to [0, 1] inside the network (stored as uint8: 4x less memory)
charts/episodic_return is a whole game's raw score (before any reward clipping or scaling), as in the published results.

To hack: the rollout and the update both call Agent.get_action_and_value, the optimizer holds agent.parameters()
and update() is CleanRL's loop (D2 is in backward), so an edit to the network, a head or the loop applies everywhere.
Deliberate choices (reference behaviour stays the default): --bootstrap-truncated (off); --torch-threads 0 (one per
core); --channels-last (on, same math, faster CPU convolutions); --resume continues the same games (the emulators'
state is saved beside their wrappers); --compile (off: torch.compile of the rollout's policy step and the update's
minibatch losses, CUDA graphs on a GPU).
"""

import contextlib
import errno
import gc
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
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Optional

try:  # Ctrl-C while these load (torch takes seconds) waits for them, then is one line, no traceback
    sigmask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    import gymnasium as gym
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.distributed.nn  # noqa: F401 (before the process group: a later import holds it past destroy_process_group)
    import torch.nn as nn

    signal.pthread_sigmask(signal.SIG_SETMASK, sigmask)  # a Ctrl-C pressed meanwhile is raised here
except KeyboardInterrupt:
    if __name__ != "__main__":
        raise
    print(f"{os.path.basename(__file__)}: interrupted; no checkpoint was saved", file=sys.stderr)
    sys.exit(130)

try:  # the family's extra; run without it, one line names its install
    import ale_py  # noqa: F401 (importing it registers the ALE game ids)
    import cv2
except ModuleNotFoundError as e:
    if __name__ != "__main__":
        raise
    sys.exit(
        f"{os.path.basename(__file__)}: error: {e.name} is not installed; the Atari scripts need it: "
        "bash scripts/install.sh atari"
    )

SCRIPT = os.path.basename(__file__)  # this file's name: a copy runs, logs and checkpoints as itself


@dataclass
class Args:
    exp_name: str = SCRIPT.removesuffix(".py")  # the name of this experiment (the first part of the run name)
    seed: int = 1  # seed of python, numpy, torch and the environments
    torch_deterministic: bool = True  # if toggled, sets `torch.backends.cudnn.deterministic=True`
    cuda: bool = True  # use CUDA when available (else the CPU; a notice when --cuda is given by name)
    torch_threads: int = 0  # torch intra-op threads (0: torch's default, one per core: the CNN update scales)
    compile: bool = False  # torch.compile the policy step and minibatch losses (CUDA graphs on CUDA); no faster on a CPU
    channels_last: bool = True  # the CNN in channels-last (NHWC) memory: same math, oneDNN's ~1.5x faster CPU convolutions
    bf16: bool = False  # the CNN's forward passes under bfloat16 autocast (experimental; heads, losses, Adam stay fp32)
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
    env_id: str = "BreakoutNoFrameskip-v4"  # the id of the environment (an ALE NoFrameskip-v4 game)
    total_timesteps: int = 10000000  # total environment steps of the experiment
    learning_rate: float = 2.5e-4  # the learning rate of the optimizer
    num_envs: int = 8  # the number of parallel environments, over all processes (D1)
    num_steps: int = 128  # the number of steps to run in each environment per rollout
    anneal_lr: bool = True  # anneal the learning rate linearly to 0
    gamma: float = 0.99  # the discount factor gamma
    gae_lambda: float = 0.95  # the lambda of generalized advantage estimation
    num_minibatches: int = 4  # the number of minibatches per epoch
    update_epochs: int = 4  # the number of epochs over each rollout
    norm_adv: bool = True  # normalise advantages per minibatch
    clip_coef: float = 0.1  # the surrogate clipping coefficient
    clip_vloss: bool = True  # use the clipped value loss
    ent_coef: float = 0.01  # coefficient of the entropy bonus
    vf_coef: float = 0.5  # coefficient of the value loss
    max_grad_norm: float = 0.5  # the maximum global norm of the gradients
    target_kl: Optional[float] = None  # stop the epochs early when approx_kl exceeds this (off in the reference)
    bootstrap_truncated: bool = False  # bootstrap time-limit ends from the value of their final observation
    dist_timeout: float = 300  # seconds a process waits for the others in a collective before it stops with an error

    # filled in at runtime
    batch_size: int = 0  # computed: num_envs * num_steps
    minibatch_size: int = 0  # computed: batch_size // num_minibatches
    num_iterations: int = 0  # computed: total_timesteps // batch_size
    local_num_envs: int = 0  # computed: num_envs // world size, the envs of one process


class NoopReset(gym.Wrapper):
    """Detail A1: after a real reset, a random number (1..noop_max) of NOOPs, for diverse starts."""

    noop_max, last_noops = 30, 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.last_noops = int(self.np_random.integers(1, self.noop_max + 1))
        for _ in range(self.last_noops):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class MaxAndSkip(gym.Wrapper):
    """Detail A2: the action repeated on 4 frames, rewards summed, the last two frames max-pooled (sprite flicker)."""

    def step(self, action):
        total_reward, frames = 0.0, []
        for _ in range(4):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total_reward, frames = total_reward + float(reward), frames[-1:] + [obs]
            if terminated or truncated:  # a game that ends on the first frame has only that one
                break
        return np.maximum(frames[0], frames[-1]), total_reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """Detail A3: a lost life is terminal for learning, not for the game: until it is over, reset() plays a NOOP."""

    lives, game_over = 0, True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over, lives = terminated or truncated, self.env.unwrapped.ale.lives()
        terminated, self.lives = terminated or 0 < lives < self.lives, lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if not self.game_over:
            obs, _, terminated, truncated, info = self.env.step(0)
        if self.game_over or terminated or truncated:  # over, or the NOOP itself ended the game
            obs, info = self.env.reset(**kwargs)
        self.game_over, self.lives = False, self.env.unwrapped.ale.lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Detail A4: games like Breakout wait for FIRE after each (life) reset: press it (then action 2), as baselines."""

    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


def gray_84x84(frame):
    """Detail A5: 210x160 RGB -> 84x84 grayscale. A named function, not a lambda: a checkpoint pickles the envs."""
    return cv2.resize(cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY), (84, 84), interpolation=cv2.INTER_AREA)


def make_env(env_id, video_dir=None, frame_stack=4):
    """One game in the Atari wrappers, innermost first; with `video_dir`, its games are recorded there."""
    env = gym.make(env_id, **({"render_mode": "rgb_array"} if video_dir else {}))
    env = gym.wrappers.RecordEpisodeStatistics(gym.wrappers.RecordVideo(env, video_dir) if video_dir else env)
    env = EpisodicLife(MaxAndSkip(NoopReset(env)))  # the statistics inside: a whole game's raw score and frames
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env)
    env = gym.wrappers.TransformReward(env, np.sign)  # detail A6: one scale for all games
    env = gym.wrappers.TransformObservation(env, gray_84x84, gym.spaces.Box(0, 255, (84, 84), np.uint8))
    return gym.wrappers.FrameStackObservation(env, frame_stack)  # detail A7


def make_envs(args, run_name, rank=0, restored=None):
    def thunk(i):
        if restored is not None:  # sub-envs unpickled from a checkpoint continue their games
            return lambda: set_game(*restored[i])
        return lambda: make_env(args.env_id, f"videos/{run_name}" if args.capture_video and rank == i == 0 else None)

    # detail 1: SAME_STEP autoreset, as in the reference's gym (with A3, a life's autoreset continues the game);
    return gym.vector.SyncVectorEnv(
        [thunk(i) for i in range(args.local_num_envs)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    # detail 2: orthogonal weights, constant biases
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, in_channels, n_actions, channels_last=False, bf16=False):
        super().__init__()
        # detail A8: the Nature CNN, shared by the policy and value heads
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(in_channels, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, n_actions), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1.0)
        self.memory_format, self.bf16 = torch.channels_last if channels_last else torch.contiguous_format, bf16
        self.to(memory_format=self.memory_format)

    def hidden(self, x):
        # detail A9: uint8 pixels to [0, 1]; without it the first update's KL explodes (as the blog found)
        x = x.contiguous(memory_format=self.memory_format).to(torch.bfloat16 if self.bf16 else torch.float32) / 255.0
        with torch.autocast(x.device.type, torch.bfloat16, enabled=self.bf16):  # --bf16: the CNN; the heads stay fp32
            return self.network(x).float()

    def get_value(self, x):
        return self.critic(self.hidden(x)).squeeze(-1)

    def get_action_and_value(self, x, action=None):
        """Sample an action, or score the given one: (action, log-prob, entropy, value).
        The rollout and the update both call this, so an edit here applies to both."""
        hidden = self.hidden(x)  # one CNN pass for both heads
        # Categorical written out, sampled by inverse CDF (one uniform a row): ppo_atari.py's first 51,200 steps of
        # Breakout take 103 s, 112 s with Categorical(logits=...).sample() (Intel Xeon, 2 cores, 2026-12-05): 8% of a run
        logp = self.actor(hidden).log_softmax(-1).clamp(min=-1e30)  # keeps -inf masks finite
        if action is None:
            action = (logp.exp().cumsum(-1) < torch.rand_like(logp[..., :1])).sum(-1).clamp(max=logp.shape[-1] - 1)
        logprob = logp.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
        return action, logprob, -(logp.exp() * logp).sum(-1), self.critic(hidden).squeeze(-1)


def make_agent(args, observation_space, action_space):
    """The Agent of a run with these args (a checkpoint's, in evaluate()) and spaces: train() and evaluate() both build
    it here, so a new constructor argument (a new flag's value, say) is given once and evaluates as it trained."""
    return Agent(observation_space.shape[0], action_space.n, args.channels_last, args.bf16)


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


def ppo_losses(newlogprob, oldlogprob, advantages, newvalue, oldvalue, returns, entropy, args):
    """Clipped surrogate (detail 8), clipped value loss (detail 9), overall loss (detail 10).
    Returns (loss, pg_loss, v_loss, entropy_loss, logratio); logratio = log(new / old) feeds ratio_stats."""
    logratio = newlogprob - oldlogprob
    ratio = logratio.exp()
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()
    if args.clip_vloss:
        v_clipped = oldvalue + torch.clamp(newvalue - oldvalue, -args.clip_coef, args.clip_coef)
        v_loss = 0.5 * torch.max((newvalue - returns) ** 2, (v_clipped - returns) ** 2).mean()
    else:
        v_loss = 0.5 * ((newvalue - returns) ** 2).mean()
    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    return loss, pg_loss, v_loss, entropy_loss, logratio


@torch.no_grad()
def ratio_stats(logratio, clip_coef):
    """Detail 12 from log(new / old): (old_approx_kl, approx_kl, clipfrac), the k1 and the lower-variance k3
    estimators of KL(old || new) and the fraction of ratios outside [1 - clip_coef, 1 + clip_coef]."""
    ratio = logratio.exp()
    return (-logratio).mean(), ((ratio - 1) - logratio).mean(), ((ratio - 1).abs() > clip_coef).float().mean()


def minibatch_losses(agent, b, mb, args):
    """What ppo_losses returns for minibatch `mb` (indices into batch `b`): the forward pass the optimizer step
    differentiates. With --compile, update() is handed it compiled (compiled(): an edit here is compiled too)."""
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b["obs"][mb], b["actions"][mb])
    mb_advantages = b["advantages"][mb]
    if args.norm_adv:  # detail 7, over the global minibatch (D2)
        mean, n = world_mean(mb_advantages.mean()), args.minibatch_size
        std = (world_mean((mb_advantages - mean).square().mean()) * n / (n - 1)).sqrt()
        mb_advantages = (mb_advantages - mean) / (std + 1e-8)
    return ppo_losses(newlogprob, b["logprobs"][mb], mb_advantages, newvalue, b["values"][mb], b["returns"][mb], entropy, args)


def update(agent, optimizer, b, args, minibatch_losses=minibatch_losses):
    """update_epochs passes over batch `b` (a dict of flat tensors) in minibatches. Returns the last minibatch's
    losses (clipfrac: the mean over minibatches) and the first minibatch's ratio/clipfrac/approx_kl, which must
    be exactly 1/0/0 as nothing has changed yet."""
    logratios = []  # the KL/clipfrac statistics wait until after the loop: no device sync per minibatch
    for epoch in range(args.update_epochs):
        # detail 6: a new shuffle each epoch, split into disjoint minibatches that cover the batch
        for mb in torch.randperm(len(b["obs"]), device=b["obs"].device).view(args.num_minibatches, -1):  # D2
            loss, pg_loss, v_loss, entropy_loss, logratio = minibatch_losses(agent, b, mb, args)
            logratios.append(logratio.detach())

            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)  # detail 11
            optimizer.step()
        if args.target_kl is not None and world_mean(ratio_stats(logratios[-1], args.clip_coef)[1]) > args.target_kl:
            break
    old_approx_kl, approx_kl, _ = ratio_stats(logratios[-1], args.clip_coef)
    _, first_kl, first_clipfrac = ratio_stats(logratios[0], args.clip_coef)
    first = {
        "ratio_max_dev": logratios[0].exp().sub(1).abs().max().item(),
        "clipfrac": first_clipfrac.item(),
        "approx_kl": first_kl.item(),
    }
    clipfrac = torch.stack([ratio_stats(logratio, args.clip_coef)[2] for logratio in logratios]).mean()
    return {
        "value_loss": v_loss.item(),
        "policy_loss": pg_loss.item(),
        "entropy": entropy_loss.item(),
        "old_approx_kl": old_approx_kl.item(),
        "approx_kl": approx_kl.item(),
        "clipfrac": clipfrac.item(),
    }, first


def world_op(op, *args):
    """Run a collective; its failure (a process stopped, or did not answer within --dist-timeout) is a DistError."""
    try:
        return op(*args)
    except RuntimeError as e:  # gloo's errors are RuntimeErrors, NCCL's DistErrors; the first line names the cause
        raise dist.DistError(f"rank {dist.get_rank()} lost the other processes: {str(e).splitlines()[0]}") from None


def world_mean(x):
    """The mean of tensor `x` over the ranks (each holds an equal share of the data); `x` in a world of one."""
    if dist.is_initialized():  # collectives need row-major tensors (not channels-last)
        world_op(dist.all_reduce, x := x.clone(memory_format=torch.contiguous_format))
        x /= dist.get_world_size()
    return x


def world_gather(obj):
    """[rank 0's obj, rank 1's obj, ...] on every rank; [obj] in a world of one."""
    objs = [obj] * (dist.get_world_size() if dist.is_initialized() else 1)
    if dist.is_initialized():
        world_op(dist.all_gather_object, objs, obj)
    return objs


def data_parallel(agent):
    """D2: rank 0's parameters to every rank, and a hook that averages each gradient over the ranks as backward
    accumulates it: the update loop, whatever its form, then sees the global gradient."""

    def average_grad(p):
        p.grad.copy_(world_mean(p.grad))

    for p in agent.parameters() if dist.is_initialized() else ():
        with torch.no_grad():
            world_op(dist.broadcast, x := p.clone(memory_format=torch.contiguous_format), 0)
            p.copy_(x)
        p.register_post_accumulate_grad_hook(average_grad)


def train(args: Args, given=None):
    """Train; return a dict with the per-episode returns/lengths, per-iteration losses, the agent and optimizer."""
    ckpt, args = load_checkpoint(args.resume, args, given) if args.resume else (None, args)
    check_args(args, ckpt)
    rank, world, local_rank = (int(os.environ.get(k, d)) for k, d in (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0)))
    if args.num_envs % world or args.num_envs // world * args.num_steps % args.num_minibatches:
        fits = [
            str(n)
            for n in range(1, args.num_envs + 1)  # the numbers of processes that would split them
            if args.num_envs % n == 0 == args.num_envs // n * args.num_steps % args.num_minibatches
        ]
        raise ConfigError(
            f"the checkpoint's --num-envs {args.num_envs} does not split over {world} processes into "
            f"{args.num_minibatches} equal minibatch shares; resume it on one of these numbers of processes: "
            f"{', '.join(fits)}; or start a new run"
            if ckpt
            else f"--num-envs {args.num_envs} does not split over {world} processes into {args.num_minibatches} "
            f"equal minibatch shares; choose a multiple of {world}, and --num-minibatches dividing "
            f"num_envs / {world} * num_steps"
        )
    args.local_num_envs = args.num_envs // world
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    device = torch.device(f"cuda:{local_rank}" if args.cuda and torch.cuda.is_available() else "cpu")
    if world > 1:  # torchrun's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT say who and where the others are
        if not (os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT")):
            raise ConfigError(
                f"WORLD_SIZE {world} without MASTER_ADDR and MASTER_PORT: start the processes with torchrun, "
                "or give every one both (rank 0's host, and a free port on it)"
            )
        if device.type == "cuda":
            torch.cuda.set_device(device)
        try:  # before anything is written: a process group that cannot start leaves no run directory
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timedelta(seconds=args.dist_timeout))
        except dist.DistNetworkError as e:
            raise ConfigError(
                f"rank {rank} cannot start the process group at {os.environ['MASTER_ADDR']}:"
                f"{os.environ['MASTER_PORT']} ({str(e).splitlines()[0]}); set MASTER_PORT to a free port on "
                "rank 0's host, or let torchrun choose one"
            ) from None
    run_name, run_dir, writer, lock = open_run(args, ckpt, rank)  # the lock is held while `lock` lives

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    torch.set_num_threads(args.torch_threads or torch.get_num_threads())
    if args.cuda and not torch.cuda.is_available() and "cuda" in (given or ()):  # asked for by name: said; else quiet
        print(f"{SCRIPT}: --cuda is given but no CUDA device is available; running on CPU", file=sys.stderr)

    envs = make_envs(args, run_name, rank)
    obs_shape = envs.single_observation_space.shape
    agent = make_agent(args, envs.single_observation_space, envs.single_action_space).to(device)
    # detail 3: eps 1e-5; fused: the same Adam in one kernel per step, on CPU and CUDA
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)
    policy_step, losses_step = compiled(agent.get_action_and_value, args, device), compiled(minibatch_losses, args, device)

    T, N = args.num_steps, args.local_num_envs
    # what the envs return is stored in numpy (cheap per-step writes), what the agent returns in torch
    obs, rewards, dones = np.zeros((T, N) + obs_shape, np.uint8), np.zeros((T, N), np.float32), np.zeros((T, N), np.float32)
    history = {
        "episodic_return": [],
        "episodic_length": [],
        "losses": [],
        "first_minibatch": [],
        "learning_rate": [],
        "seconds": {"env": 0.0, "inference": 0.0, "update": 0.0},
    }  # where the wall time goes
    seconds, start_iteration, global_step = history["seconds"], 1, 0
    next_obs, _ = envs.reset(seed=args.seed + rank * N)
    if ckpt:  # continue where the checkpoint stopped: the same episodes (where saved), weights, Adam's state, RNGs
        envs, next_obs = resumed_envs(ckpt, args, run_name, envs, next_obs, rank)
        start_iteration, global_step = restore(ckpt, agent, optimizer, device)

    if rank and ckpt and len(ckpt.get("rngs", ())) == world:  # resumed on as many processes: each rank's streams go on
        torch.set_rng_state(ckpt["rngs"][rank]["torch"])
        if device.type == "cuda" and "cuda" in ckpt["rngs"][rank]:
            torch.cuda.set_rng_state_all(ckpt["rngs"][rank]["cuda"])
    elif rank:  # D1: the other ranks sample with their own streams (rank 0's is ppo_atari.py's, and the checkpoint's)
        torch.manual_seed(args.seed + rank + world * start_iteration)
    data_parallel(agent)
    saved = (args.resume, ckpt["iteration"]) if ckpt else None  # the last finite checkpoint (check_finite)
    gc.freeze()  # the ~300k objects made so far (mostly torch's) are never garbage: full collections skip them
    start_time, start_step = time.time(), global_step
    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:  # detail 4, in every param group from its own initial rate (a critic's own rate too)
            frac = 1 - (iteration - 1) / max(args.num_iterations - 1, 1)
            for group in optimizer.param_groups:
                group["lr"] = group.setdefault("initial_lr", group["lr"]) * frac

        # ---- the rollout: num_steps steps of every env, the actions from Agent.get_action_and_value ----
        rollout = []  # the agent's (action, logprob, value) of each step, stacked into [T, N] tensors after it
        episodes = []  # (global step, return, length) of this rank's finished games
        for step in range(T):
            global_step += args.num_envs
            obs[step] = next_obs
            t0 = time.perf_counter()
            with torch.inference_mode():
                action, logprob, _, value = policy_step(torch.as_tensor(next_obs, device=device))
            rollout.append((action, logprob, value))
            t1 = time.perf_counter()
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            seconds["inference"] += t1 - t0
            seconds["env"] += time.perf_counter() - t1
            rewards[step], dones[step] = reward, terminations | truncations
            if args.bootstrap_truncated and (idx := np.flatnonzero(truncations & ~terminations)).size:
                # r + gamma * V(final obs) for time-limit ends, so the done cut leaves the right target
                final = torch.as_tensor(np.stack([infos["final_obs"][i] for i in idx]), device=device)
                with torch.no_grad():
                    rewards[step, idx] += args.gamma * agent.get_value(final).cpu().numpy()

            final_info = infos.get("final_info", {})  # "episode" is there only when a game (not a life) is over
            for i in np.flatnonzero(final_info.get("_episode", ())):
                episode_return, episode_length = final_info["episode"]["r"], final_info["episode"]["l"]
                episodes.append((global_step, float(episode_return[i]), int(episode_length[i])))
        # ---- learning: the targets from the rollout, then update() ----
        for step_of_game, r, length in sorted(sum(world_gather(episodes), []), key=lambda e: e[0]):  # D3: every rank's
            writer.add_scalar("charts/episodic_return", r, step_of_game)
            writer.add_scalar("charts/episodic_length", length, step_of_game)
            history["episodic_return"].append(r)
            history["episodic_length"].append(length)

        t0 = time.perf_counter()
        actions, logprobs, values = (torch.stack(x) for x in zip(*rollout))
        with torch.no_grad():
            next_value = agent.get_value(torch.as_tensor(next_obs, device=device))
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
        losses, first = update(agent, optimizer, b, args, losses_step) if args.compile else update(agent, optimizer, b, args)
        seconds["update"] += time.perf_counter() - t0
        y_pred, y_true = b["values"].cpu().numpy(), b["returns"].cpu().numpy()
        losses["explained_variance"] = np.nan if np.var(y_true) == 0 else 1 - np.var(y_true - y_pred) / np.var(y_true)
        losses = dict(zip(losses, world_mean(torch.tensor([*losses.values()], dtype=torch.double, device=device)).tolist()))
        # ---- logging ----
        history["first_minibatch"].append(first)
        history["losses"].append(losses)
        history["learning_rate"].append(optimizer.param_groups[0]["lr"])
        for i, group in enumerate(optimizer.param_groups):  # one tag a group: group 0 as CleanRL logs it
            writer.add_scalar("charts/learning_rate" + (f"_group{i}" if i else ""), group["lr"], global_step)
        for k, v in losses.items():
            writer.add_scalar(f"losses/{k}", v, global_step)
        sps = int((global_step - start_step) / (time.time() - start_time))
        writer.add_scalar("charts/SPS", sps, global_step)
        if rank == 0:
            progress(iteration, args.num_iterations, global_step, args.batch_size, sps, history["episodic_return"])

        sample = (b["obs"][:8], b["actions"][:8])  # a few of the batch's states, for the updated network
        check_finite(iteration, losses, agent, optimizer, saved, sample, {"obs": obs, "rewards": rewards})  # every rank's
        if args.save_model and (iteration % args.save_every == 0 or iteration == args.num_iterations):
            try:  # one pickle an env: a resume on another number of processes unpickles its share (D1)
                env_state = [pickle.dumps((env, get_game(env))) for env in envs.envs]  # the same games, resumed
            except Exception:  # e.g. a video recorder
                env_state = None
            env_states, ranks_obs, rngs = zip(
                *world_gather((env_state, next_obs, rng_state(device)))
            )  # D3: every rank's, in env order
            if rank:  # D3: rank 0 saves
                continue
            env_state = None if None in env_states else sum(env_states, [])  # one rank's unsaveable envs: fresh games
            state = run_state(
                args,
                run_name,
                iteration,
                global_step,
                agent,
                optimizer,
                device,
                next_obs=np.concatenate(ranks_obs),
                envs=env_state,
                rngs=rngs,
            )
            with signals_held():  # a signal in between would name the checkpoint before this one
                save_checkpoint(f"{run_dir}/checkpoint.pt", state)
                saved = (f"{run_dir}/checkpoint.pt", iteration)

    envs.close()
    writer.close()
    if dist.is_initialized():
        dist.destroy_process_group()
    if rank == 0:
        print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()) + f", total {time.time() - start_time:.1f}")
    history.update(
        run_name=run_name,
        run_dir=run_dir,
        global_step=global_step,
        agent=agent,
        optimizer=optimizer,
        checkpoint=f"{run_dir}/checkpoint.pt" if args.save_model and rank == 0 else None,
    )
    return history


# ---- Below: input checks, run directory, checkpoints, signals, evaluation and the CLI; none of it changes training ----


class ConfigError(ValueError):
    """Bad input found before training, a checkpoint that cannot be written, or training gone non-finite (check_finite);
    __main__ prints it as one line."""


# every numeric flag's valid range (flags, low, high, low allowed), checked before anything is created
RANGES = [
    ("total_timesteps num_envs num_steps num_minibatches update_epochs save_every eval_episodes", 1, math.inf, True),
    ("learning_rate clip_coef max_grad_norm target_kl dist_timeout", 0, math.inf, False),
    ("ent_coef vf_coef torch_threads", 0, math.inf, True),
    ("gamma gae_lambda", 0, 1, True),
    ("seed", 0, 2**32 - 1, True),
]
# the flags that may change beside --resume: the budget, and how the run is saved or placed
RESUMABLE = {"resume", "total_timesteps", "save_model", "save_every", "cuda", "torch_threads", "track"}
RESUMABLE |= {"compile", "channels_last", "bf16", "dist_timeout"}


def check_args(args: Args, ckpt=None) -> None:
    """Fail before any training with a message that names the problem and the fix."""
    if "/" in args.exp_name or len(f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}-99".encode()) > 255:
        raise ConfigError(
            f"--exp-name {args.exp_name[:60]!r} must be one directory's name in runs/: no '/', and short enough "
            "that the run name (env id, exp name, seed, time) fits in 255 bytes; choose a short plain name"
        )
    for names, low, high, closed in RANGES:
        for name, v in ((name, getattr(args, name)) for name in names.split()):
            if v is not None and not (math.isfinite(v) and (low <= v if closed else low < v) and v <= high):
                raise ConfigError(
                    f"--{name.replace('_', '-')} must be a finite number {'>=' if closed else '>'} {low}"
                    + (f" and <= {high}" if high < math.inf else "")
                    + f", got {v}"
                )
    need = args.num_envs * (2e6 + args.num_steps * 250e3)  # measured: ~1 MB per Atari env, ~200 kB per env-step
    need *= int(os.environ.get("LOCAL_WORLD_SIZE", 1)) / int(os.environ.get("WORLD_SIZE", 1))  # this node's share
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
    if args.bf16 and not (
        torch.cuda.is_bf16_supported()
        if args.cuda and torch.cuda.is_available()
        else torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    ):
        raise ConfigError(
            "--bf16 needs bfloat16 kernels (a CPU with AVX512 or AMX, a GPU of compute capability 8.0+), "
            "which this machine lacks; run without --bf16"
        )
    try:
        spec = gym.spec(args.env_id)
    except gym.error.Error:
        raise ConfigError(f"unknown env id {args.env_id!r}; see gymnasium.pprint_registry() for the ids") from None
    if not str(spec.entry_point).startswith("ale_py"):
        raise ConfigError(f"{args.env_id} is not an Atari (ALE) game; {SCRIPT} needs one, e.g. BreakoutNoFrameskip-v4")
    if spec.kwargs.get("frameskip") != 1 or spec.kwargs.get("repeat_action_probability", 0.0) != 0.0:
        raise ConfigError(
            f"{args.env_id} skips frames or has sticky actions (detail A2 skips them); use its NoFrameskip-v4 id"
        )


def get_game(env):
    """A game's emulator state (its RNG included) and the env's random generator (A1's no-ops), which its pickle lacks:
    an AtariEnv pickles only its constructor's arguments, and comes back at frame 0."""
    return env.unwrapped.clone_state(include_rng=True), env.unwrapped.np_random


def set_game(env, saved):
    env.unwrapped.restore_state(saved[0])
    env.unwrapped.np_random = saved[1]
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


class NoWriter:  # the SummaryWriter of the ranks other than 0, which log nothing (D3)
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


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


def open_run(args, ckpt, rank, **rows):
    """The run's directory (a new one, or a resumed run's own), locked against a second writer, and its TensorBoard
    writer: (run_name, run_dir, writer, lock), rank 0's (D3: it logs and saves); the other ranks write nothing."""
    if ckpt:  # a resumed run logs on in the checkpoint's own directory (or in runs/<its name> if it was moved)
        run_name, run_dir = ckpt["run_name"], os.path.dirname(args.resume) or "."
        run_dir = run_dir if os.path.basename(os.path.abspath(run_dir)) == run_name else f"runs/{run_name}"
        if rank == 0:
            print(f"{SCRIPT}: resuming {run_name} after iteration {ckpt['iteration']} in {run_dir}", file=sys.stderr)
    elif rank == 0:
        run_dir = new_run_dir(f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}")
        run_name = os.path.basename(run_dir)
    else:  # D3: rank 0 logs and saves
        run_dir = run_name = None
    if rank:
        return run_name, run_dir, NoWriter(), None
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


def resumed_envs(ckpt, args, run_name, envs, next_obs, rank):
    """A resumed run's envs and observations, this rank's share of the checkpoint's (D1), which continue their games,
    in place of the fresh `envs` and `next_obs`; or, where it saved none, the fresh ones, said in one line."""
    N = envs.num_envs
    if ckpt["envs"] is None:  # keep the fresh games' first observations: the saved ones belong to other games
        if rank == 0:
            print(f"{SCRIPT}: the checkpoint holds no env state; resuming with fresh episodes", file=sys.stderr)
        return envs, next_obs
    envs.close()
    try:  # pickled by the version of this file that saved them, which may have had other wrappers
        mine = ckpt["envs"][rank * N : (rank + 1) * N]  # D1: this rank's share of the games
        envs = make_envs(args, run_name, rank, [Unpickler(io.BytesIO(env)).load() for env in mine])
    except Exception as e:
        raise ConfigError(
            f"the envs in {args.resume} do not fit this version of {SCRIPT} ({type(e).__name__}: "
            f"{e}); resume it with the version that wrote it, or start a new run"
        ) from None
    return envs, ckpt["next_obs"][rank * N : (rank + 1) * N]


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
                else "; likely too large a loss term or reward for float32 (--vf-coef, --ent-coef, the env's)"
                if zeroed and bad[-1] == bad[0]
                else "; likely too high a --learning-rate or --max-grad-norm"
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
    """Raw full-game scores of `eval_episodes` games of a checkpoint's sampling policy, seeded for repeatability."""
    ckpt, args = load_checkpoint(checkpoint_path)
    check_args(Args(env_id=args.env_id, eval_episodes=eval_episodes, seed=seed))
    env = make_env(args.env_id)
    agent = make_agent(args, env.observation_space, env.action_space).to(device)
    agent.load_state_dict(ckpt["model"])
    returns, (obs, _) = [], env.reset(seed=seed)
    with torch.random.fork_rng(), torch.inference_mode():
        torch.manual_seed(seed)
        while len(returns) < eval_episodes:
            action, *_ = agent.get_action_and_value(torch.as_tensor(obs[None], device=device))
            obs, _, terminated, truncated, info = env.step(action.item())
            if "episode" in info:  # a game, not a life, is over
                returns.append(float(info["episode"]["r"]))
            if terminated or truncated:
                obs, _ = env.reset()
    env.close()
    return returns


def interrupted(e: BaseException, why="interrupted") -> int:
    """Ctrl-C or SIGTERM (or, `why`, another end: a full disk): one line naming the last checkpoint train() saved (its
    `saved`, in the frame `e` stopped) and the command that resumes it; the signal's exit status, 130 or 143 (else 1)."""
    saved = next((f.f_locals.get("saved") for f, _ in traceback.walk_tb(e.__traceback__) if f.f_code is train.__code__), None)
    print(
        f"{SCRIPT}: {why}; "
        + (
            f"the last checkpoint is {saved[0]} (iteration {saved[1]}); continue with: torchrun ... {SCRIPT} --resume "
            f"{saved[0]}"
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
    signal.signal(signal.SIGTERM, raise_interrupt)  # torchrun's stop after a Ctrl-C (or a `kill`) ends a rank as Ctrl-C does
    first_of_node = os.environ.get("LOCAL_RANK", "0") == "0"  # a node's processes share one output: one of them speaks
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
    except ConfigError as e:  # every rank checks, before the process group starts, what its node sees (files, memory)
        where = "" if os.environ.get("RANK", "0") == "0" else f"rank {os.environ['RANK']}: "
        sys.exit(f"{SCRIPT}: error: {where}{e}" if first_of_node else 1)
    except dist.DistError as e:  # torchrun stops a node's other processes when one exits non-zero; on other nodes, this
        print(f"{SCRIPT}: error: {e}; see the other processes' output", file=sys.stderr, flush=True)
        os._exit(1)  # not sys.exit: the process group's threads may still wait on the lost process
    except KeyboardInterrupt as e:  # Ctrl-C reaches every rank; a checkpoint is written whole or not at all
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.exit(interrupted(e) if os.environ.get("RANK", "0") == "0" else 128 + (e.args[0] if e.args else signal.SIGINT))
    except OSError as e:  # the disk filled as TensorBoard wrote (a checkpoint's own write says so itself)
        if e.errno != errno.ENOSPC:
            raise
        sys.exit(interrupted(e, f"error: {e.strerror}, writing the run's logs; free some space"))
