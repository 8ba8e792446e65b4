"""IMPALA for Atari: decoupled actor processes and a V-trace learner (Espeholt et al. 2018).

The paper: "IMPALA: Scalable Distributed Deep-RL with Importance Weighted Actor-Learner Architectures",
https://arxiv.org/abs/1802.01561

Run:   python impala_vtrace.py --env-id BreakoutNoFrameskip-v4
Eval:  python impala_vtrace.py --eval-checkpoint runs/<run>/checkpoint.pt --eval-episodes 10

Implementation details (the IMPALA paper's Sec. 3, Sec. 4, Appendix F / Table F.1):
  1. decoupled acting and learning: --num-actors processes with their own envs sample from one copy of the agent in
     shared memory (`actor_model`), into which the learner copies its weights after every update
  2. unrolls of T steps (T+1 observations, the last for the bootstrap) in shared-memory buffers; queues carry indices
  3. the learner trains while the actors act; charts/policy_lag: the learner updates between the weights that
     sampled a step and the update that consumes it (0 with --sync)
  4. V-trace targets and advantages, `vtrace`, truncation levels rho_bar = c_bar = 1 (torchbeast's); --correction
     one-step, epsilon or none: the paper's other off-policy corrections (Sec. 5.2.1, Table 2), for its comparison;
     --replay-fraction: that share of every batch drawn uniformly, with replacement, from the last --replay-size
     unrolls (Table 2's replay), past ones only (a batch is short while the replay holds fewer: at 0.5, the first);
     charts/policy_lag counts their age too. A resumed run's replay starts empty
  5. losses summed over time and batch (Table C.1): policy gradient with the V-trace advantage, baseline 0.5 * 1/2
     (vs - V)^2 (the paper's (vs - V) grad V times its baseline cost 0.5, as torchbeast), entropy bonus 0.01
  6. RMSProp, epsilon 0.01, momentum 0, decay 0.99; 7. learning rate 6e-4 annealed linearly to 0; 8. global gradient
     norm clipped to 40; 10. unroll 20, batch 32 trajectories, gamma 0.99 (Table F.1)
  9. Atari: gymnasium's AtariPreprocessing (1-30 no-op starts, action repeat 4 with a max over the last 2 frames,
     84x84 grayscale), a lost life ends the training episode, FIRE on reset where the game needs it, 4 stacked
     frames, rewards clipped to [-1, 1]; charts/episodic_return logs the raw full-game score. (At a game over the
     last frame may be max-pooled with a stale one: SAME_STEP autoreset shows the policy the next game's first.)
 11. the A3C feed-forward CNN, or with --deep the residual network of Fig. 3

To hack: the actors and the update both call Agent.get_action_and_value, the actors' model is a deep copy of the
learner's agent (same class, same edits), the optimizer holds agent.parameters() and update() ends in CleanRL's
zero_grad/backward/clip_grad_norm_/step, so an edit to the network, a head or the step applies everywhere.
Deliberate choices: actors are forked when the learner is on CPU (spawned with --cuda, which a forked child cannot
use), run on CPU with 1 thread each and read the shared weights without a lock, as monobeast's do (a step that
runs while the learner copies may mix two updates' layers, which V-trace corrects like any lag). torch's RMSProp
adds epsilon outside the square root (torchbeast), TensorFlow's inside. --channels-last (on): NHWC memory, faster
on CPU, same math. --resume restores the learner; the actors' games start afresh. A dead actor stops the run.
"""

import contextlib
import copy
import errno
import importlib.util
import io
import math
import os
import queue
import random
import re
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Literal, Optional

try:  # Ctrl-C while these load (torch takes seconds) waits for them, then is one line, no traceback
    sigmask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    import gymnasium as gym
    import numpy as np
    import torch
    import torch.multiprocessing as mp
    import torch.nn as nn

    signal.pthread_sigmask(signal.SIG_SETMASK, sigmask)  # a Ctrl-C pressed meanwhile is raised here
except KeyboardInterrupt:
    if __name__ != "__main__":
        raise
    print(f"{os.path.basename(__file__)}: interrupted; no checkpoint was saved", file=sys.stderr)
    sys.exit(130)

try:  # the family's extra; run without it, one line names its install
    import ale_py
except ModuleNotFoundError as e:
    if __name__ != "__main__":
        raise
    sys.exit(
        f"{os.path.basename(__file__)}: error: {e.name} is not installed; the Atari scripts need it: "
        "bash scripts/install.sh atari"
    )

SCRIPT = os.path.basename(__file__)  # this file's name: a copy runs, logs and checkpoints as itself
gym.register_envs(ale_py)  # a no-op: importing ale_py registers the ALE ids; this names where they come from


@dataclass
class Args:
    exp_name: str = SCRIPT.removesuffix(".py")  # the name of this experiment (the first part of the run name)
    seed: int = 1  # seed of python, numpy, torch and the environments
    torch_deterministic: bool = True  # if toggled, sets `torch.backends.cudnn.deterministic=True`
    cuda: bool = True  # run the learner on CUDA when available (a notice if named and none is); actors stay on CPU
    torch_threads: int = 1  # torch intra-op threads of the learner (0: torch's default); actors always use 1
    channels_last: bool = True  # run the CNN in channels-last (NHWC) memory: the same convolutions, faster on CPU
    bf16: bool = False  # the CNN's forward passes under bfloat16 autocast (experimental; heads, losses, RMSProp stay fp32)
    track: bool = False  # log to Weights & Biases (imports wandb only when set)
    wandb_project_name: str = "ppo-reference"  # the Weights & Biases project
    wandb_entity: Optional[str] = None  # the Weights & Biases entity (team)
    capture_video: bool = False  # record videos of actor 0's first env into `videos/<run name>/` (needs moviepy)
    save_model: bool = False  # write `runs/<run name>/checkpoint.pt` every --save-every updates and at the end
    save_every: int = 500  # learner updates between periodic checkpoints (with --save-model)
    resume: Optional[str] = None  # continue this checkpoint's run (beside it only the budget and saving flags may change)
    eval_checkpoint: Optional[str] = None  # evaluate this checkpoint on the CPU instead of training; print the mean return
    eval_episodes: int = 10  # episodes to run with --eval-checkpoint

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"  # the id of the environment (an ALE NoFrameskip id)
    total_timesteps: int = 50_000_000  # agent steps the learner consumes (Table F.1: 200M frames, action repeat 4)
    learning_rate: float = 6e-4  # the learning rate of the optimizer
    num_actors: int = 2  # the number of actor processes
    num_envs_per_actor: int = 1  # the environments each actor steps together (each gives one trajectory per unroll)
    unroll_length: int = 20  # the number of steps in each unroll (T)
    batch_size: int = 32  # the number of trajectories in each learner batch
    anneal_lr: bool = True  # anneal the learning rate linearly to 0
    gamma: float = 0.99  # the discount factor gamma
    rho_bar: float = 1.0  # V-trace truncation level of the importance weights rho
    c_bar: float = 1.0  # V-trace truncation level of the trace coefficients c; at most rho_bar
    # the off-policy correction (the paper's Sec. 5.2.1): V-trace; one-step importance sampling (each step's advantage
    # times its clipped weight, uncorrected value targets); epsilon (log(pi + 1e-6) in the gradient, no weights); none
    correction: Literal["vtrace", "one-step", "epsilon", "none"] = "vtrace"
    replay_fraction: float = 0.0  # the share of each batch's unrolls drawn from past ones (Table 2's "with replay": 0.5)
    replay_size: int = 1000  # the past unrolls the replay keeps, the oldest dropped first (~0.6 MB each)
    ent_coef: float = 0.01  # coefficient of the entropy bonus
    vf_coef: float = 0.5  # coefficient of the baseline loss (vs - V)^2
    max_grad_norm: float = 40.0  # the maximum global norm of the gradients
    rmsprop_eps: float = 0.01  # RMSProp epsilon
    rmsprop_alpha: float = 0.99  # RMSProp decay of the squared-gradient average
    deep: bool = False  # use the deep residual network instead of the shallow CNN
    sync: bool = False  # actors wait for each update before starting an unroll, so the policy lag is 0 (for testing)
    bootstrap_truncated: bool = False  # bootstrap time-limit ends from the value of their final observation
    actor_timeout: float = 120.0  # seconds the learner waits for an unroll while every actor is alive


class EpisodicLife(gym.Wrapper):
    """Detail 9: a lost life ends the training episode; the game itself only resets when it is really over."""

    lives, game_over = 0, True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over, lives = terminated or truncated, self.env.unwrapped.ale.lives()
        terminated, self.lives = terminated or 0 < lives < self.lives, lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:  # continue the same game after a lost life
            obs, _, _, _, info = self.env.step(0)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Detail 9: games like Breakout wait for FIRE after each (life) reset: press it (then action 2), as baselines."""

    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


def make_env(env_id, video_dir=None, episodic_life=True):
    """One game in the Atari wrappers (detail 9), innermost first; with `video_dir`, its games are recorded there."""
    env = gym.make(env_id, obs_type="grayscale", **({"render_mode": "rgb_array"} if video_dir else {}))
    # RecordEpisodeStatistics innermost: the logged return is the raw full-game score, unclipped and across lives
    env = gym.wrappers.AtariPreprocessing(
        gym.wrappers.RecordEpisodeStatistics(gym.wrappers.RecordVideo(env, video_dir) if video_dir else env),
        noop_max=30,
        frame_skip=4,
        screen_size=84,
    )
    env = EpisodicLife(env) if episodic_life else env
    env = FireReset(env) if "FIRE" in env.unwrapped.get_action_meanings() else env
    return gym.wrappers.FrameStackObservation(env, 4)


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv0, self.conv1 = (nn.Conv2d(channels, channels, 3, padding=1) for _ in range(2))

    def forward(self, x):
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


def conv_section(in_channels, out_channels):
    # detail 11: one section of the deep network: conv 3x3, max-pool 3x3 stride 2, two residual blocks
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1),
        nn.MaxPool2d(3, stride=2, padding=1),
        ResidualBlock(out_channels),
        ResidualBlock(out_channels),
    )


class Agent(nn.Module):
    def __init__(self, n_actions, deep=False, channels_last=False, bf16=False):
        super().__init__()
        if deep:  # detail 11: 84 -> 42 -> 21 -> 11 through the three sections
            self.network = nn.Sequential(
                conv_section(4, 16),
                conv_section(16, 32),
                conv_section(32, 32),
                nn.ReLU(),
                nn.Flatten(),
                layer_init(nn.Linear(32 * 11 * 11, 256)),
                nn.ReLU(),
            )
        else:  # detail 11: the A3C feed-forward network, 16x8x8/4 -> 32x4x4/2 -> fc256
            self.network = nn.Sequential(
                layer_init(nn.Conv2d(4, 16, 8, stride=4)),
                nn.ReLU(),
                layer_init(nn.Conv2d(16, 32, 4, stride=2)),
                nn.ReLU(),
                nn.Flatten(),
                layer_init(nn.Linear(32 * 9 * 9, 256)),
                nn.ReLU(),
            )
        self.actor = layer_init(nn.Linear(256, n_actions), std=0.01)
        self.critic = layer_init(nn.Linear(256, 1), std=1.0)
        # a memory layout, not a change of the math: NHWC weights and inputs take oneDNN's fast CPU convolutions
        self.memory_format, self.bf16 = torch.channels_last if channels_last else torch.contiguous_format, bf16
        self.to(memory_format=self.memory_format)

    def hidden(self, x):
        x = x.contiguous(memory_format=self.memory_format).to(torch.bfloat16 if self.bf16 else torch.float32) / 255.0
        with torch.autocast(x.device.type, torch.bfloat16, enabled=self.bf16):  # --bf16: the CNN; the heads stay fp32
            return self.network(x).float()

    def get_value(self, x):
        return self.critic(self.hidden(x)).squeeze(-1)

    def get_action_and_value(self, x, action=None):
        """Sample an action, or score the given one: (action, log-prob, entropy, value).
        The actors and the update both call this, so an edit here applies to both."""
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
    return Agent(action_space.n, args.deep, args.channels_last, args.bf16)


def vtrace(
    behaviour_logprobs,
    target_logprobs,
    rewards,
    values,
    bootstrap_value,
    discounts,
    rho_bar=1.0,
    c_bar=1.0,
    correction="vtrace",
):
    """V-trace targets and policy-gradient advantages (detail 4, the paper's Sec. 4). Tensors [T, B]; bootstrap_value [B].
    discounts[t] = gamma * (1 - done_t). rho_t = min(rho_bar, pi/mu), c_t = min(c_bar, pi/mu). vs_t = V(x_t) + delta_t
    + discounts_t c_t (vs_{t+1} - V(x_{t+1})), delta_t = rho_t (r_t + discounts_t V(x_{t+1}) - V(x_t)) (Remark 1),
    vs_T = bootstrap_value; pg_advantages_t = rho_t (r_t + discounts_t vs_{t+1} - V(x_t)). Neither carries a gradient.
    The paper's other corrections (Sec. 5.2.1) take rho_t = c_t = 1 in the targets (n-step returns, as if the behaviour
    policy were the target's); "one-step" weights each advantage by its clipped rho_t, "epsilon" and "none" do not."""
    with torch.no_grad():
        ratios = (target_logprobs - behaviour_logprobs).exp()
        rhos, cs = ratios.clamp(max=rho_bar), ratios.clamp(max=c_bar)
        pg_rhos = rhos if correction in ("vtrace", "one-step") else torch.ones_like(rhos)
        if correction != "vtrace":
            rhos = cs = torch.ones_like(rhos)
        next_values = torch.cat([values[1:], bootstrap_value.unsqueeze(0)])
        deltas = rhos * (rewards + discounts * next_values - values)
        vs_minus_v, acc = torch.zeros_like(values), torch.zeros_like(bootstrap_value)
        for t in reversed(range(values.shape[0])):
            acc = deltas[t] + discounts[t] * cs[t] * acc
            vs_minus_v[t] = acc
        vs = vs_minus_v + values
        next_vs = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)])
        pg_advantages = pg_rhos * (rewards + discounts * next_vs - values)
    return vs, pg_advantages


def impala_losses(target_logprobs, entropy, values, vs, pg_advantages, args):
    """Detail 5, summed over time and batch: (loss, pg_loss, baseline_loss, entropy_sum)."""
    pg_loss = -(pg_advantages * target_logprobs).sum()
    baseline_loss = 0.5 * ((vs - values) ** 2).sum()  # gradient (V - vs) grad V, as in the paper
    entropy_sum = entropy.sum()
    loss = pg_loss + args.vf_coef * baseline_loss - args.ent_coef * entropy_sum
    return loss, pg_loss, baseline_loss, entropy_sum


def update(agent, optimizer, b, args):
    """One learner step on a batch `b` of unrolls ([T(+1), B, ...]); returns per-step losses and log(pi/mu) statistics."""
    T, B = b["actions"].shape
    _, logprobs, entropy, values = (
        x.view(T, B) for x in agent.get_action_and_value(b["obs"][:-1].flatten(0, 1), b["actions"].flatten())
    )
    bootstrap_value = agent.get_value(b["obs"][-1]).detach()
    vs, pg_advantages = vtrace(
        b["logprobs"],
        logprobs,
        b["rewards"],
        values,
        bootstrap_value,
        args.gamma * (1.0 - b["dones"]),
        args.rho_bar,
        args.c_bar,
        args.correction,
    )
    # --correction epsilon: log(pi(a) + 1e-6) in the policy gradient, as GA3C (the paper's Sec. 5.2.1)
    pg_logprobs = torch.log(logprobs.exp() + 1e-6) if args.correction == "epsilon" else logprobs
    loss, pg_loss, baseline_loss, entropy_sum = impala_losses(pg_logprobs, entropy, values, vs, pg_advantages, args)

    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)  # detail 8
    optimizer.step()

    logratio = (logprobs - b["logprobs"]).detach()
    ratio, y_pred, y_true = logratio.exp(), values.detach().cpu().numpy(), vs.cpu().numpy()
    return {
        "value_loss": baseline_loss.item() / (T * B),
        "policy_loss": pg_loss.item() / (T * B),
        "entropy": entropy_sum.item() / (T * B),
        "old_approx_kl": (-logratio).mean().item(),
        "approx_kl": ((ratio - 1) - logratio).mean().item(),
        "clipfrac": (ratio > args.rho_bar).float().mean().item(),
        "explained_variance": np.nan if np.var(y_true) == 0 else 1 - np.var(y_true - y_pred) / np.var(y_true),
        "max_abs_logratio": logratio.abs().max().item(),
    }


@torch.inference_mode()
def actor_loop(actor_id, args, run_name, actor_model, buffers, version, free_queue, full_queue, stop_event):
    """One actor process: step its envs, sampling from the shared model, into the buffers the learner frees. An
    exception ends it with its traceback on stderr and exit code 1, which the learner watches for."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the learner, which stops every actor
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked actor must not inherit the learner's handler
    torch.set_num_threads(1)
    torch.manual_seed(args.seed * 1000 + actor_id)
    # SAME_STEP autoreset: the step that ends an episode already returns the next one's first observation, so obs[t + 1]
    # is always the state the policy acts on next; copy=False: each observation is copied into a buffer at once
    envs = gym.vector.SyncVectorEnv(  # --capture-video records actor 0's first env
        [
            lambda i=i: make_env(args.env_id, f"videos/{run_name}" if args.capture_video and actor_id == i == 0 else None)
            for i in range(args.num_envs_per_actor)
        ],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        copy=False,
    )
    next_obs, _ = envs.reset(seed=args.seed * 1000 + actor_id * args.num_envs_per_actor)
    while not stop_event.is_set() and mp.parent_process().is_alive():  # until the end, or the learner is gone
        try:
            idx = free_queue.get(timeout=0.5)
        except queue.Empty:
            continue
        obs, actions, rewards, dones, logprobs, versions = (
            buffers[key][idx] for key in ("obs", "actions", "rewards", "dones", "logprobs", "versions")
        )
        obs[0] = torch.from_numpy(next_obs)
        episodes, env_seconds, inference_seconds = [], 0.0, 0.0
        for t in range(args.unroll_length):
            t0 = time.perf_counter()
            versions[t] = version.value  # detail 3: the weights this step samples from
            actions[t], logprobs[t], _, _ = actor_model.get_action_and_value(obs[t])
            t1 = time.perf_counter()
            next_obs, reward, terminations, truncations, infos = envs.step(actions[t].numpy())
            env_seconds, inference_seconds = env_seconds + time.perf_counter() - t1, inference_seconds + t1 - t0
            obs[t + 1] = torch.from_numpy(next_obs)
            rewards[t] = torch.from_numpy(np.clip(reward, -1.0, 1.0))  # detail 9: rewards clipped to [-1, 1]
            for i in np.flatnonzero(truncations & ~terminations) if args.bootstrap_truncated else []:
                rewards[t, i] += args.gamma * actor_model.get_value(torch.as_tensor(infos["final_obs"][i])[None])[0]
            dones[t] = torch.from_numpy(terminations | truncations)
            if "episode" in infos.get("final_info", {}):  # only at a real game over, not at a lost life
                stats = infos["final_info"]["episode"]
                episodes += [(float(stats["r"][i]), int(stats["l"][i])) for i in np.flatnonzero(stats["_r"])]
        buffers["actor_seconds"][actor_id] += torch.tensor([env_seconds, inference_seconds], dtype=torch.float64)
        full_queue.put((idx, episodes))  # detail 2: an index and a few numbers, never the tensors
    envs.close()


def next_batch(full_queue, n, actors, timeout):
    """Buffer indices of the next `n` unrolls and the games they finished. Every actor is checked at every
    unroll, not only when the queue runs dry (the others may keep it full), so a dead one stops the run at once. The
    `timeout` counts the time spent waiting: a wait of one poll that took far longer was the process suspended (Ctrl-Z,
    SIGSTOP; its actors with it), which counts as two polls, so that the run goes on when it is resumed."""
    indices, episodes, waited, poll = [], [], 0.0, min(1.0, timeout)
    while len(indices) < n:
        for i, p in enumerate(actors):
            if p.exitcode is not None:  # an exception (its traceback is on stderr), an exit, or the OOM killer's SIGKILL
                how = f"killed by {signal.Signals(-p.exitcode).name}" if p.exitcode < 0 else f"exit code {p.exitcode}"
                raise ActorError(f"actor {i} (pid {p.pid}) died ({how}); the run stops")
        if waited > timeout:
            raise ActorError(f"no unroll arrived for {timeout:.0f} s although every actor is alive")
        start = time.monotonic()
        try:
            idx, finished = full_queue.get(timeout=poll)
        except queue.Empty:
            waited += min(time.monotonic() - start, 2 * poll)
            continue
        indices, episodes, waited = indices + [idx], episodes + finished, 0.0
    return indices, episodes


class Replay:
    """The paper's experience replay (Table 2): a ring of the last `size` unrolls (each a dict of tensors), from which
    a batch draws uniformly; `sample` draws before the new unrolls are `add`ed, so it returns past ones only."""

    def __init__(self, size):
        self.size, self.unrolls, self.count, self.next = size, None, 0, 0

    def sample(self, n):
        if not self.count:
            return None
        rows = torch.randint(self.count, (min(n, self.count),))
        return {key: value[rows] for key, value in self.unrolls.items()}

    def add(self, unrolls):
        if self.unrolls is None:
            self.unrolls = {key: torch.zeros((self.size, *v.shape[1:]), dtype=v.dtype) for key, v in unrolls.items()}
        for i in range(len(unrolls["actions"])):
            for key, value in unrolls.items():
                self.unrolls[key][self.next] = value[i]
            self.next, self.count = (self.next + 1) % self.size, min(self.count + 1, self.size)


def batch_plan(args):
    """The unrolls of a learner batch, how many of them the replay gives, and the new env steps an update consumes."""
    buffers_per_batch = args.batch_size // args.num_envs_per_actor
    replayed = round(args.replay_fraction * buffers_per_batch)
    return buffers_per_batch, replayed, args.unroll_length * (buffers_per_batch - replayed) * args.num_envs_per_actor


def train(args: Args, given=None):
    """Train; return a dict with the per-game returns/lengths, per-update losses and lags, the agent and optimizer."""
    ckpt, args = load_checkpoint(args.resume, args, given) if args.resume else (None, args)
    check_args(args, ckpt)
    buffers_per_batch, replayed, steps_per_update = batch_plan(args)
    num_updates = args.total_timesteps // steps_per_update
    num_buffers = buffers_per_batch + 2 * args.num_actors  # the spare ones keep the actors busy during updates
    run_name, run_dir, writer, lock = open_run(args, ckpt)  # the lock is held while `lock` lives

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    torch.set_num_threads(args.torch_threads or torch.get_num_threads())
    if args.cuda and not torch.cuda.is_available() and "cuda" in (given or ()):  # asked for by name: said; else quiet
        print(f"{SCRIPT}: --cuda is given but no CUDA device is available; running on CPU", file=sys.stderr)
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")

    probe = make_env(args.env_id)  # the spaces of the envs the actors step
    agent = make_agent(args, probe.observation_space, probe.action_space).to(device)
    probe.close()
    optimizer = torch.optim.RMSprop(
        agent.parameters(), lr=args.learning_rate, alpha=args.rmsprop_alpha, eps=args.rmsprop_eps, momentum=0.0
    )  # detail 6: epsilon 0.01, no momentum
    start_update, global_step = 1, 0
    if ckpt:  # continue where the checkpoint stopped: the weights and RMSProp's state (the learner draws no random numbers)
        start_update, global_step = restore(ckpt, agent, optimizer)

    actor_model = copy.deepcopy(agent).cpu().share_memory()  # detail 1: the agent (edits included), shared, on CPU
    ctx = mp.get_context("spawn" if device.type == "cuda" else "fork")
    T, k, n = args.unroll_length, args.num_envs_per_actor, num_buffers  # detail 2: `obs` holds T+1 frames
    buffers = {
        key: torch.zeros(shape, dtype=dtype).share_memory_()
        for key, shape, dtype in (
            ("obs", (n, T + 1, k, 4, 84, 84), torch.uint8),
            ("actions", (n, T, k), torch.int64),
            ("versions", (n, T), torch.int64),
            *((key, (n, T, k), torch.float32) for key in ("rewards", "dones", "logprobs")),
            ("actor_seconds", (args.num_actors, 2), torch.float64),
        )
    }
    version = ctx.Value("q", start_update - 1, lock=False)  # learner updates applied so far
    replay = Replay(args.replay_size)
    stop_event, free_queue, full_queue = ctx.Event(), ctx.Queue(), ctx.Queue()
    for i in range(buffers_per_batch - replayed if args.sync else num_buffers):  # detail 3: --sync circulates one batch
        put_holding_signals(free_queue, i)
    actors = [
        ctx.Process(
            target=actor_loop,
            daemon=True,
            name=f"impala-actor-{i}",
            args=(i, args, run_name, actor_model, buffers, version, free_queue, full_queue, stop_event),
        )
        for i in range(args.num_actors)
    ]
    for p in actors:
        p.start()

    history = {
        "episodic_return": [],
        "episodic_length": [],
        "losses": [],
        "learning_rate": [],
        "policy_lag": [],
        "actor_pids": [p.pid for p in actors],
        "seconds": {"update": 0.0},
    }  # where the wall time goes
    saved = (args.resume, ckpt["update"]) if ckpt else None  # the last finite checkpoint (check_finite)
    start_time, start_step = time.time(), global_step
    try:
        for update_idx in range(start_update, num_updates + 1):
            if args.anneal_lr:  # detail 7, in every param group from its own initial rate (a critic's own rate too)
                frac = 1 - (update_idx - 1) / max(num_updates - 1, 1)
                for group in optimizer.param_groups:
                    group["lr"] = group.setdefault("initial_lr", group["lr"]) * frac
            # ---- a batch: the actors' unrolls (their rollout, with the policy they acted with) ----
            indices, episodes = next_batch(full_queue, buffers_per_batch - replayed, actors, args.actor_timeout)
            t0 = time.perf_counter()
            rows = torch.tensor(indices)
            # indexing copies the rows out of shared memory: [n, T, k, ...]
            unrolls = {key: buffers[key][rows] for key in ("obs", "actions", "rewards", "dones", "logprobs", "versions")}
            if replayed:  # past unrolls beside the new ones (drawn before these join the replay)
                past = replay.sample(replayed)
                replay.add(unrolls)
                unrolls = {key: torch.cat([v, past[key]]) for key, v in unrolls.items()} if past else unrolls
            b = {key: v.transpose(0, 1).flatten(1, 2).to(device) for key, v in unrolls.items() if key != "versions"}
            lag = ((update_idx - 1) - unrolls["versions"]).double().mean().item()  # [n, T] -> the mean age of a step
            for i in indices if not args.sync else []:  # the rows are copied: the actors refill them during the update
                put_holding_signals(free_queue, i)
            # ---- learning: V-trace targets and the losses, in update() ----
            losses = update(agent, optimizer, b, args)
            actor_model.load_state_dict(agent.state_dict())  # detail 1: the actors' next steps use the new weights
            version.value = update_idx
            for i in indices if args.sync else []:
                put_holding_signals(free_queue, i)
            history["seconds"]["update"] += time.perf_counter() - t0
            global_step += steps_per_update

            # ---- logging ----
            for ret, length in episodes:
                writer.add_scalar("charts/episodic_return", ret, global_step)
                writer.add_scalar("charts/episodic_length", length, global_step)
                history["episodic_return"].append(ret)
                history["episodic_length"].append(length)
            history["losses"].append(losses)
            history["learning_rate"].append(optimizer.param_groups[0]["lr"])
            history["policy_lag"].append(lag)
            for i, group in enumerate(optimizer.param_groups):  # one tag a group: group 0 as CleanRL logs it
                writer.add_scalar("charts/learning_rate" + (f"_group{i}" if i else ""), group["lr"], global_step)
            writer.add_scalar("charts/policy_lag", lag, global_step)
            for k, v in losses.items():
                writer.add_scalar(f"losses/{k}", v, global_step)
            sps = int((global_step - start_step) / (time.time() - start_time))
            writer.add_scalar("charts/SPS", sps, global_step)
            progress(
                update_idx, num_updates, global_step, steps_per_update, sps, history["episodic_return"], note=f"lag {lag:.2f} "
            )

            sample = (b["obs"][0], b["actions"][0])  # a few of the batch's states, for the updated network
            check_finite(update_idx, losses, agent, optimizer, saved, sample, {"rewards": b["rewards"]})
            if args.save_model and (update_idx % args.save_every == 0 or update_idx == num_updates):
                with signals_held():  # a signal in between would name the checkpoint before this one
                    save_checkpoint(
                        f"{run_dir}/checkpoint.pt",
                        {
                            "script": SCRIPT,
                            "args": asdict(args),
                            "run_name": run_name,
                            "update": update_idx,
                            "global_step": global_step,
                            "model": agent.state_dict(),
                            "optimizer": optimizer.state_dict(),
                        },
                    )
                    saved = (f"{run_dir}/checkpoint.pt", update_idx)
    finally:  # the end of training, Ctrl-C or a crash: no actor outlives the learner
        stop_event.set()
        for p in actors:
            p.join(timeout=5)
            p.kill()  # a no-op for an actor that has exited; SIGKILL, which nothing ignores, for a stuck one
            p.join()
        writer.close()  # <= flush_secs late if a Ctrl-C cut a write (3.11's Condition.notify then loses a wakeup)
    # env and inference add up over the actors, which run side by side with each other and with the learner's update
    history["seconds"] = dict(zip(("env", "inference"), buffers["actor_seconds"].sum(0).tolist()), **history["seconds"])
    # the learner's seconds add up to its total; the actors' are theirs, summed over them, beside it
    print(f"seconds: update {history['seconds']['update']:.1f}, total {time.time() - start_time:.1f}")
    print(
        f"actor seconds, summed over the {args.num_actors} actors beside the learner: env {history['seconds']['env']:.1f}, "
        f"inference {history['seconds']['inference']:.1f}"
    )
    history.update(
        run_name=run_name,
        run_dir=run_dir,
        global_step=global_step,
        agent=agent,
        optimizer=optimizer,
        checkpoint=f"{run_dir}/checkpoint.pt" if args.save_model else None,
    )
    return history


# ---- Below: input checks, run directory, checkpoints, signals, evaluation and the CLI; none of it changes training ----


class ConfigError(ValueError):
    """Bad input found before training, a checkpoint that cannot be written, or training gone non-finite (check_finite);
    __main__ prints it as one line."""


class ActorError(RuntimeError):
    """An actor process died or stopped producing; __main__ prints it as one line."""


# every numeric flag's valid range (flags, low, high, low allowed), checked before anything is created
RANGES = [
    (
        "total_timesteps num_actors num_envs_per_actor unroll_length batch_size save_every eval_episodes replay_size",
        1,
        math.inf,
        True,
    ),
    ("replay_fraction", 0, 1, True),
    ("learning_rate max_grad_norm rho_bar c_bar rmsprop_eps actor_timeout", 0, math.inf, False),
    ("ent_coef vf_coef torch_threads", 0, math.inf, True),
    ("gamma rmsprop_alpha", 0, 1, True),
    ("seed", 0, 2**32 - 1, True),
]
# the flags that may change beside --resume: the budget, and how the run is saved or placed
RESUMABLE = {"resume", "total_timesteps", "save_model", "save_every", "cuda", "torch_threads", "track"}
RESUMABLE |= {"channels_last", "bf16", "num_actors", "actor_timeout"}


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
    envs = args.num_actors * args.num_envs_per_actor  # measured: ~26 MB an actor, ~1.4 MB an env, ~260 kB a batch step
    need = args.num_actors * 50e6 + envs * 2e6 + args.unroll_length * (args.batch_size * 400e3 + 2 * envs * 30e3)
    need += (args.unroll_length + 1) * args.num_envs_per_actor * 28224 * args.replay_size * (args.replay_fraction > 0)
    if need > (ram := os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")):
        raise ConfigError(
            f"--num-envs-per-actor {args.num_envs_per_actor} needs about {need / 1e9:.1f} GB (envs, unrolls and "
            f"the replay), more than this machine's {ram / 1e9:.1f} GB; use fewer envs or a smaller --replay-size"
        )
    if (
        round(args.replay_fraction * (args.batch_size // args.num_envs_per_actor))
        >= args.batch_size // args.num_envs_per_actor
    ):
        raise ConfigError(
            f"--replay-fraction {args.replay_fraction} leaves no new unroll in a batch of "
            f"{args.batch_size // args.num_envs_per_actor}; give a smaller fraction or a larger --batch-size"
        )
    if args.batch_size % args.num_envs_per_actor != 0:
        raise ConfigError(
            f"--batch-size {args.batch_size} is not divisible by --num-envs-per-actor "
            f"{args.num_envs_per_actor}; a batch is made of whole actor unrolls"
        )
    steps = batch_plan(args)[2]  # the new env steps of an update: with replay, fewer than a batch's
    if args.total_timesteps < steps or (ckpt and args.total_timesteps // steps <= ckpt["update"]):
        raise ConfigError(
            f"--total-timesteps {args.total_timesteps} leaves no update to run (one is {steps} "
            f"steps{'; the checkpoint is at update %d' % ckpt['update'] if ckpt else ''})"
        )
    if args.correction not in ("vtrace", "one-step", "epsilon", "none"):
        raise ConfigError(f"--correction must be vtrace, one-step, epsilon or none, got {args.correction!r}")
    if args.c_bar > args.rho_bar:
        raise ConfigError(f"--c-bar {args.c_bar} exceeds --rho-bar {args.rho_bar}; V-trace assumes c_bar <= rho_bar")
    for flag, package in (("capture_video", "moviepy"), ("track", "wandb")):
        if getattr(args, flag) and importlib.util.find_spec(package) is None:
            raise ConfigError(f"--{flag.replace('_', '-')} needs {package}, which is not installed: pip install {package}")
    if args.bf16 and not (
        torch.cuda.is_bf16_supported()
        if args.cuda and torch.cuda.is_available()
        else torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    ):
        raise ConfigError(
            "--bf16 needs bfloat16 kernels (a CPU with AVX512 or AMX, a GPU of compute capability 8.0+), "
            "which this machine lacks; run without --bf16"
        )
    spec = gym.registry.get(args.env_id)
    if (
        spec is None
        or not str(spec.entry_point).startswith("ale_py")
        or spec.kwargs.get("frameskip") != 1
        or spec.kwargs.get("repeat_action_probability", 0.0) != 0.0
    ):  # the v0 ids' sticky actions
        raise ConfigError(
            f"{args.env_id!r} is not an Atari NoFrameskip id such as BreakoutNoFrameskip-v4; {SCRIPT} "
            "handles Atari only, without sticky actions, and repeats each action itself (detail 9)"
        )


def put_holding_signals(q, item):
    """q.put with Ctrl-C and SIGTERM held until it returns: one landing just after put takes the queue's lock leaves
    it taken (CPython's bpo-29988), and the learner hung at exit, where the queue's finalizer takes the lock again."""
    held = set()
    handlers = {s: signal.signal(s, lambda sig, frame: held.add(sig)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        q.put(item)
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
    for s in held:  # under the handler each came to: Ctrl-C's KeyboardInterrupt, or SIGTERM's
        signal.raise_signal(s)


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
        print(f"{SCRIPT}: resuming {run_name} after update {ckpt['update']} in {run_dir}, with new games", file=sys.stderr)
    else:
        run_dir = new_run_dir(f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}")
        run_name = os.path.basename(run_dir)
    lock = lock_run(run_dir)
    if args.track:
        start_tracking(args, run_name)
    from torch.utils.tensorboard import SummaryWriter

    # purge_step: TensorBoard drops what an interrupted run logged after its checkpoint, so nothing counts twice
    writer = SummaryWriter(run_dir, purge_step=ckpt["global_step"] + 1 if ckpt else None, flush_secs=10)
    rows = {**asdict(args), **rows}
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in rows.items()))
    return run_name, run_dir, writer, lock


def restore(ckpt, agent, optimizer):
    """A resumed run's weights and optimizer state; returns the update to start from and the global step."""
    agent.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    return ckpt["update"] + 1, ckpt["global_step"]


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
    """Full-game scores (all lives, unclipped) of `eval_episodes` games of a checkpoint's sampling policy, seeded."""
    ckpt, args = load_checkpoint(checkpoint_path)
    check_args(Args(env_id=args.env_id, eval_episodes=eval_episodes, seed=seed))
    env = make_env(args.env_id, episodic_life=False)
    agent = make_agent(args, env.observation_space, env.action_space).to(device)
    agent.load_state_dict(ckpt["model"])
    returns, (obs, _), episode_return = [], env.reset(seed=seed), 0.0
    with torch.random.fork_rng(), torch.inference_mode():
        torch.manual_seed(seed)
        while len(returns) < eval_episodes:
            action, *_ = agent.get_action_and_value(torch.as_tensor(np.asarray(obs)[None], device=device))
            obs, reward, terminated, truncated, _ = env.step(action.item())
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
        f"{SCRIPT}: {why}; every actor has been stopped; "
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
    signal.signal(signal.SIGTERM, raise_interrupt)  # `kill` and timeouts stop the actors as Ctrl-C does
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
    except (ConfigError, ActorError) as e:
        sys.exit(f"{SCRIPT}: error: {e}")
    except KeyboardInterrupt as e:
        sys.exit(interrupted(e))
    except OSError as e:  # the disk filled as TensorBoard wrote (a checkpoint's own write says so itself)
        if e.errno != errno.ENOSPC:
            raise
        sys.exit(interrupted(e, f"error: {e.strerror}, writing the run's logs; free some space"))
