"""PAAC: Parallel Advantage Actor-Critic on Atari (Clemente et al. 2017, seed 001, Algorithm 1).

Run:   python a2c_paac.py --env-id BreakoutNoFrameskip-v4 --arch nips
Eval:  python a2c_paac.py --eval-checkpoint runs/<run>/checkpoint.pt --eval-episodes 10

The details of the paper (section numbers of seed 001):
  1. one learner, n_e = 32 environments stepped by n_w = 8 workers (Sec. 3, 5.1). A worker here is one
     OS process that owns n_e / n_w environments and steps them one after the other; the processes run
     at the same time, so n_w workers use up to n_w cores (the learner is one more process). Observations,
     actions and rewards go through shared memory, only a short "step" message goes through a pipe.
     With more workers than cores the processes take turns: the paper's n_w = 8 still runs on a 2-core
     machine, and n_w = cores - 1 (one core left to the learner) is the natural choice elsewhere.
     Not threads: the preprocessing wrappers below are Python and hold the GIL (two threads stepping two
     ALE envs took 1.07 s where one thread took 1.30 s).
  2. every t_max = 5 steps: one batched forward for all envs per step picks the actions (Alg. 1 line 5)
  3. n-step returns (Alg. 1 lines 12-15): R = V(s_{t_max+1}) for envs whose last transition did not end
     the episode, 0 for those that did; each step gets a (t_max - t + 1)-step return, and a terminal
     inside the rollout cuts the sum there (`nstep_returns`)
  4. loss (Sec. 4 eqs. 10-11, Alg. 1 lines 16-17): -(R - V) log pi(a|s) - beta * H(pi(s)) + (R - V)^2,
     each averaged over n_e * t_max, beta = 0.01; the advantage R - V carries no gradient
  5. one network, two heads (Sec. 5.1): a softmax policy and a linear value on a shared conv trunk;
     --arch nips (A3C FF: conv 16 8x8/4, conv 32 4x4/2, fc 256) or nature (conv 32 8x8/4, conv 64 4x4/2,
     conv 64 3x3/1, fc 512); the flattened conv features have 2592 and 3136 entries
  6. RMSProp, decay 0.99, epsilon 0.1, learning rate 0.0007 * n_e = 0.0224 (Sec. 5.1, 5.2), written as
     TensorFlow 1's tf.train.RMSPropOptimizer, the one the paper ran (Sec. 5 names TensorFlow and RMSProp;
     that it is this class, momentum 0, is our reading): epsilon inside
     the square root and the mean square starting at 1 (`TFRMSprop`). PyTorch's RMSprop puts epsilon outside
     the root and starts the mean square at 0; with epsilon = 0.1 that changes the effective step size
     (the denominator is floored at 0.1 instead of sqrt(0.1) = 0.32) and makes the first updates about
     ten times larger (sqrt(0.01 g^2) + 0.1 instead of sqrt(0.99 + 0.01 g^2 + 0.1)), so the paper's 0.0224
     would not mean the same thing
  7. global gradient norm clipped at 40 (Sec. 5.1, Pascanu et al. 2012)
  8. Atari preprocessing (Sec. 5.1): 1-30 no-ops at every reset (raw frames, applied below the action
     repeat as baselines' NoopResetEnv does; the paper says "no-op actions"), action repeat 4 with the per-pixel
     max of the last two frames, 210x160 RGB -> 84x84 grayscale; rewards clipped to [-1, 1] for training
     only; frame stack 4 (not stated in the paper, which defers to Mnih et al. 2016; A3C stacks 4 frames)
  9. global step N grows by n_e * t_max per update (Alg. 1 line 19); N_max = 1.15e8 (Sec. 5.1)

Deliberate choices (the paper does not state them):
  - learning rate annealed linearly to 0 over the run (--anneal-lr, on): PAAC says it follows the training
    procedure of Mnih et al. (2016), whose A3C anneals the learning rate linearly to 0.
  - orthogonal init as in the other scripts of this project (hidden sqrt(2), policy 0.01, value 1).
  - no episodic-life and no fire-on-reset wrapper (not in the paper); charts/episodic_return is the raw game
    score of one whole game (all lives, unclipped rewards).
  - --bootstrap-truncated (off): an episode cut by the ALE's 108000-frame limit bootstraps from the value of
    its final observation instead of being treated as terminal.
  - the value V(s_t) of the update comes from one batched forward over the whole rollout after it, with the
    same parameters as the rollout, so the same numbers as Alg. 1 line 6; that pass also gives the
    bootstrap value.
  - charts/time_share_env, charts/time_share_act and charts/time_share_learn: the share of wall time spent
    waiting for the environments, choosing actions and learning (the paper's Figure 2).
  - --channels-last (on by default; --no-channels-last turns it off): the CNN's weights and inputs in NHWC
    memory, where oneDNN's CPU convolutions are faster for the update (the forward on the 32 envs of a step is
    slower). Same math; outputs agree to float rounding.

Known difference from the authors' released code (not from the paper): their TensorFlow code multiplies
the loss by 5 and weights the value term by 0.25 (a leftover of tuning the learning rate on sums over
time steps), and its released Breakout run used gradient clip 3 and entropy 0.02. With epsilon 0.1 inside
the root, TF's RMSProp is not scale-invariant, so at the same 0.0224 their policy steps are about 5x ours.
We follow the paper's text (means, beta 0.01, clip 40); --loss-scale 5 --vf-coef 0.25 --max-grad-norm 3
--ent-coef 0.02 give the released run's settings.
"""

import ctypes
import multiprocessing as mp
import os
import pickle
import random
import signal
import sys
import time
from dataclasses import asdict, dataclass
from typing import Literal, Optional

import ale_py
import cv2
import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

gym.register_envs(ale_py)

SCRIPT = "a2c_paac.py"


@dataclass
class Args:
    exp_name: str = "a2c_paac"
    """the name of this experiment (the first part of the run name)"""
    seed: int = 1
    """seed of python, numpy, torch and the environments"""
    torch_deterministic: bool = True
    """if toggled, sets `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """use CUDA when available (falls back to CPU with a notice)"""
    torch_threads: int = 1
    """torch intra-op threads of the learner (0 keeps torch's default); the workers use the other cores"""
    channels_last: bool = True
    """run the CNN in channels-last (NHWC) memory: the same convolutions, faster on CPU (oneDNN)"""
    track: bool = False
    """log to Weights & Biases (imports wandb only when set)"""
    wandb_project_name: str = "ppo-reference"
    """the Weights & Biases project"""
    wandb_entity: Optional[str] = None
    """the Weights & Biases entity (team)"""
    capture_video: bool = False
    """record videos of env 0 into `videos/<run name>/` (needs moviepy)"""
    save_model: bool = False
    """write a checkpoint to `runs/<run name>/checkpoint.pt` periodically and at the end"""
    save_every: int = 5000
    """iterations between periodic checkpoints (with --save-model)"""
    resume: Optional[str] = None
    """path of a checkpoint of this script to continue training from (its args are used)"""
    eval_checkpoint: Optional[str] = None
    """evaluate this checkpoint instead of training, and print the mean return"""
    eval_episodes: int = 10
    """episodes to run with --eval-checkpoint"""

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the environment (an ALE NoFrameskip-v4 game)"""
    total_timesteps: int = 115_000_000
    """total environment steps (agent steps, 4 frames each) of the experiment (paper: N_max = 1.15e8)"""
    arch: Literal["nips", "nature"] = "nips"
    """the network: nips (conv16-conv32-fc256) or nature (conv32-conv64-conv64-fc512)"""
    learning_rate: Optional[float] = None
    """the learning rate of RMSProp (default: 0.0007 * num_envs, the paper's rule; 0.0224 for 32 envs)"""
    num_envs: int = 32
    """n_e, the number of parallel environments"""
    num_workers: int = 8
    """n_w, the number of worker processes stepping the environments (must divide num_envs)"""
    num_steps: int = 5
    """t_max, the number of steps to run in each environment per update"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 (not stated in PAAC; A3C does)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    ent_coef: float = 0.01
    """beta, the coefficient of the entropy bonus"""
    vf_coef: float = 1.0
    """coefficient of the value loss (R - V)^2 (the paper writes no factor)"""
    max_grad_norm: float = 40.0
    """the maximum global norm of the gradients"""
    loss_scale: float = 1.0
    """multiplies the loss before backward (paper's text: 1; authors' released code: 5). With epsilon inside
    RMSProp's root the step is not scale-invariant, so this is a step-size knob; logged losses are unscaled"""
    rmsprop_decay: float = 0.99
    """the decay of RMSProp's mean square"""
    rmsprop_eps: float = 0.1
    """the epsilon of RMSProp (inside the square root, as in TensorFlow)"""
    bootstrap_truncated: bool = False
    """bootstrap truncated (frame-limit) episodes from the value of their final observation"""

    # filled in at runtime
    batch_size: int = 0
    """the batch size (computed: num_envs * num_steps)"""
    num_iterations: int = 0
    """the number of iterations (computed: total_timesteps // batch_size)"""


class ConfigError(ValueError):
    """Bad input found before training; __main__ prints it as one line."""


def check_args(args: Args) -> None:
    """Fail before any training with a message that names the problem and the fix."""
    if args.total_timesteps <= 0:
        raise ConfigError(f"--total-timesteps must be positive, got {args.total_timesteps}")
    if args.num_envs <= 0 or args.num_steps <= 0 or args.num_workers <= 0:
        raise ConfigError("--num-envs, --num-steps and --num-workers must be positive")
    if args.num_envs % args.num_workers != 0:
        raise ConfigError(
            f"--num-envs {args.num_envs} is not divisible by --num-workers {args.num_workers}; "
            "each worker steps the same number of environments"
        )
    batch = args.num_envs * args.num_steps
    if args.total_timesteps < batch:
        raise ConfigError(f"--total-timesteps {args.total_timesteps} is less than one rollout ({batch} steps)")
    if args.arch not in ("nips", "nature"):
        raise ConfigError(f"--arch must be nips or nature, got {args.arch!r}")
    if args.learning_rate is not None and args.learning_rate <= 0:
        raise ConfigError(f"--learning-rate must be positive, got {args.learning_rate}")
    if not 0.0 <= args.rmsprop_decay < 1.0 or args.rmsprop_eps <= 0.0:
        raise ConfigError("--rmsprop-decay must be in [0, 1) and --rmsprop-eps positive")
    if args.loss_scale <= 0:
        raise ConfigError(f"--loss-scale must be positive, got {args.loss_scale}")
    try:
        spec = gym.spec(args.env_id)
    except gym.error.Error:
        raise ConfigError(f"unknown env id {args.env_id!r}; see gymnasium.pprint_registry() for the ids") from None
    if not str(spec.entry_point).startswith("ale_py"):
        raise ConfigError(f"{args.env_id} is not an Atari (ale_py) env; {SCRIPT} needs one, e.g. PongNoFrameskip-v4")
    if spec.kwargs.get("frameskip", 1) != 1:
        raise ConfigError(f"{args.env_id} skips frames itself; use the NoFrameskip-v4 id, {SCRIPT} repeats actions")
    if args.capture_video:
        try:
            import moviepy  # noqa: F401
        except ImportError:
            raise ConfigError("--capture-video needs moviepy: pip install moviepy") from None
    if args.track:
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise ConfigError("--track needs wandb: pip install wandb") from None


# ---- detail 8: the paper's Atari preprocessing -------------------------------------------------------


class NoopReset(gym.Wrapper):
    """Detail 8: 1 to `noop_max` no-op frames after every reset, so episodes start in different states."""

    def __init__(self, env, noop_max=30):
        super().__init__(env)
        self.noop_max = noop_max
        assert env.unwrapped.get_action_meanings()[0] == "NOOP"

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for _ in range(self.unwrapped.np_random.integers(1, self.noop_max + 1)):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class MaxAndSkip(gym.Wrapper):
    """Detail 8: repeat the action `skip` times, sum the rewards, return the per-pixel max of the last 2 frames.

    The max removes the flicker of sprites that the Atari draws only on every other frame.
    """

    def __init__(self, env, skip=4):
        super().__init__(env)
        self.skip = skip

    def step(self, action):
        total_reward, last_two = 0.0, []
        for _ in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            last_two = [*last_two[-1:], obs]
            total_reward += float(reward)
            if terminated or truncated:
                break
        return np.maximum(last_two[0], last_two[-1]), total_reward, terminated, truncated, info


class GrayResize(gym.ObservationWrapper):
    """Detail 8: 210x160 RGB -> 84x84 grayscale (pixel intensity), uint8."""

    def __init__(self, env, size=84):
        super().__init__(env)
        self.size = size
        self.observation_space = gym.spaces.Box(0, 255, (size, size), dtype=np.uint8)

    def observation(self, obs):
        gray = cv2.cvtColor(obs, cv2.COLOR_RGB2GRAY)
        return cv2.resize(gray, (self.size, self.size), interpolation=cv2.INTER_AREA)


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        env = NoopReset(env, noop_max=30)
        env = MaxAndSkip(env, skip=4)
        env = GrayResize(env, 84)
        return gym.wrappers.FrameStackObservation(env, 4)

    return thunk


# ---- detail 1: n_e environments stepped by n_w worker processes ------------------------------------


def snapshot_envs(envs):
    """Pickle the wrapper stacks with each emulator's state: an AtariEnv pickles only its constructor
    arguments, so the emulator (with its RNG) and the no-op generator are saved beside it."""
    return pickle.dumps([(env, env.unwrapped.clone_state(include_rng=True), env.unwrapped.np_random) for env in envs])


def restore_envs(blob):
    envs = []
    for env, ale_state, np_random in pickle.loads(blob):
        env.unwrapped.restore_state(ale_state)
        env.unwrapped.np_random = np_random
        envs.append(env)
    return envs


def env_worker(conn, env_id, first, count, capture_video, run_name, restored, raw, layout):
    """One worker (detail 1): steps environments first..first+count-1 and writes their results to shared memory."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle; it closes the workers
    buf = {k: np.frombuffer(raw[k], dtype=dt).reshape(shape)[first:first + count] for k, (dt, shape) in layout.items()}
    thunks = [make_env(env_id, first + i, capture_video, run_name) for i in range(count)]
    if restored is not None:  # sub-envs from a checkpoint
        thunks = [lambda env=env: env for env in restore_envs(restored)]
    # SAME_STEP autoreset as in ppo.py: the step that ends an episode already returns the next one's first obs
    envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, copy=False)
    try:
        while True:
            cmd, data = conn.recv()
            if cmd == "step":
                obs, reward, terminations, truncations, infos = envs.step(buf["actions"])
                buf["obs"][:], buf["rewards"][:] = obs, reward
                buf["terminations"][:], buf["truncations"][:] = terminations, truncations
                for i in np.flatnonzero(truncations):
                    buf["final_obs"][i] = infos["final_obs"][i]
                conn.send(None)
            elif cmd == "reset":
                obs, _ = envs.reset(seed=None if data is None else data + first)
                buf["obs"][:] = obs
                conn.send(None)
            elif cmd == "snapshot":
                try:
                    conn.send(snapshot_envs(envs.envs))
                except Exception:
                    conn.send(None)
            elif cmd == "close":
                break
    except (EOFError, BrokenPipeError):  # the learner went away
        pass
    finally:
        envs.close()


class ParallelEnvs:
    """n_e environments split over n_w worker processes (detail 1), stepped together with one call.

    `step` returns (obs, rewards, terminations, truncations, final_obs) for all n_e envs; `obs` and
    `final_obs` are views of shared memory that the next step overwrites.
    """

    def __init__(self, args, run_name, restored=None):
        n, w = args.num_envs, args.num_workers
        probe = make_env(args.env_id, -1, False, run_name)()
        self.single_observation_space, self.single_action_space = probe.observation_space, probe.action_space
        probe.close()
        shape = self.single_observation_space.shape
        layout = {"obs": (np.uint8, (n,) + shape), "final_obs": (np.uint8, (n,) + shape),
                  "actions": (np.int64, (n,)), "rewards": (np.float64, (n,)),
                  "terminations": (np.bool_, (n,)), "truncations": (np.bool_, (n,))}
        # fork starts the workers in milliseconds; they never touch torch, so its threads do not matter
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        raw = {k: ctx.RawArray(ctypes.c_uint8, int(np.prod(s)) * np.dtype(dt).itemsize)
               for k, (dt, s) in layout.items()}
        self.buf = {k: np.frombuffer(raw[k], dtype=dt).reshape(s) for k, (dt, s) in layout.items()}
        self.pipes, self.procs = [], []
        for k in range(w):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=env_worker, daemon=True, args=(
                child, args.env_id, k * (n // w), n // w, args.capture_video, run_name,
                None if restored is None else restored[k], raw, layout))
            proc.start()
            child.close()
            self.pipes.append(parent)
            self.procs.append(proc)

    def _all(self, cmd, data=None):
        for pipe in self.pipes:
            pipe.send((cmd, data))
        try:
            return [pipe.recv() for pipe in self.pipes]
        except EOFError:
            raise RuntimeError(f"{SCRIPT}: an environment worker died; see its error above") from None

    def reset(self, seed=None):
        self._all("reset", seed)
        return self.buf["obs"]

    def step(self, actions):
        self.buf["actions"][:] = actions
        self._all("step")
        b = self.buf
        return b["obs"], b["rewards"].copy(), b["terminations"].copy(), b["truncations"].copy(), b["final_obs"]

    def snapshot(self):
        """Each worker's sub-envs pickled, so that a resumed run continues the same episodes; None if they cannot be."""
        states = self._all("snapshot")
        return None if any(s is None for s in states) else states

    def close(self):
        for pipe, proc in zip(self.pipes, self.procs):
            try:
                pipe.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
            pipe.close()
        self.pipes, self.procs = [], []


# ---- detail 5: the network ----------------------------------------------------------------------------


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def conv_trunk(arch):
    """Detail 5: the conv layers of arch_nips or arch_nature and the flattened feature size they give on 4x84x84."""
    if arch == "nips":
        layers = [layer_init(nn.Conv2d(4, 16, 8, stride=4)), nn.ReLU(),
                  layer_init(nn.Conv2d(16, 32, 4, stride=2)), nn.ReLU(), nn.Flatten()]
        return nn.Sequential(*layers), 32 * 9 * 9
    layers = [layer_init(nn.Conv2d(4, 32, 8, stride=4)), nn.ReLU(),
              layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
              layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(), nn.Flatten()]
    return nn.Sequential(*layers), 64 * 7 * 7


class Agent(nn.Module):
    def __init__(self, n_actions, arch="nips", channels_last=False):
        super().__init__()
        trunk, n_features = conv_trunk(arch)
        hidden = 256 if arch == "nips" else 512
        # detail 5: one shared network, a softmax policy head and a linear value head
        self.network = nn.Sequential(trunk, layer_init(nn.Linear(n_features, hidden)), nn.ReLU())
        self.actor = layer_init(nn.Linear(hidden, n_actions), std=0.01)
        self.critic = layer_init(nn.Linear(hidden, 1), std=1.0)
        # a memory layout, not a change of the math (outputs agree to float rounding): weights and inputs
        # in NHWC take oneDNN's fast convolutions on CPU
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.to(memory_format=self.memory_format)

    def hidden(self, x):
        return self.network(x.contiguous(memory_format=self.memory_format) / 255.0)

    def get_value(self, x):
        return self.critic(self.hidden(x)).squeeze(-1)

    def get_logits(self, x):
        return self.actor(self.hidden(x))

    def get_logits_and_value(self, x):
        hidden = self.hidden(x)
        return self.actor(hidden), self.critic(hidden).squeeze(-1)


# ---- detail 6: TensorFlow's RMSProp ---------------------------------------------------------------------


class TFRMSprop(torch.optim.Optimizer):
    """Detail 6: tf.train.RMSPropOptimizer without momentum, the optimizer the paper ran.

    ms <- decay * ms + (1 - decay) * g^2, with ms starting at 1;  theta <- theta - lr * g / sqrt(ms + eps).
    """

    def __init__(self, params, lr, decay=0.99, eps=0.1):
        super().__init__(params, {"lr": lr, "decay": decay, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["square_avg"] = torch.ones_like(p)  # TF initialises the mean square to ones
                square_avg = state["square_avg"]
                square_avg.mul_(group["decay"]).addcmul_(p.grad, p.grad, value=1 - group["decay"])
                p.addcdiv_(p.grad, square_avg.add(group["eps"]).sqrt_(), value=-group["lr"])


# ---- details 3 and 4: returns and losses ----------------------------------------------------------------


def nstep_returns(rewards, dones, bootstrap_value, gamma):
    """Detail 3 (Alg. 1 lines 12-15): n-step returns. Tensors [T, N]; bootstrap_value [N].

    dones[t] = 1 when the transition at step t ended its episode: R_t = r_t there, and neither the
    bootstrap nor a later episode's rewards flow back across it.
    """
    returns = torch.empty_like(rewards)
    running = bootstrap_value
    for t in reversed(range(rewards.shape[0])):
        running = rewards[t] + gamma * running * (1.0 - dones[t])
        returns[t] = running
    return returns


def sample_categorical(logits):
    """Inverse-CDF sampling of Categorical(logits), one uniform per row (twice as fast as torch.multinomial)."""
    u = torch.rand(logits.shape[:-1] + (1,), device=logits.device)
    return (logits.softmax(-1).cumsum(-1) < u).sum(-1).clamp_(max=logits.shape[-1] - 1)


def categorical_logprob_entropy(logits, actions):
    """Log-probability of `actions` and entropy of Categorical(logits), without building a distribution."""
    logp = logits.log_softmax(-1)
    return logp.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


def a2c_losses(logprob, entropy, values, returns, ent_coef, vf_coef):
    """Detail 4 (eqs. 10-11): each term a mean over the n_e * t_max transitions.

    Returns (loss, pg_loss, v_loss, entropy_loss).
    """
    advantages = (returns - values).detach()  # the critic is fitted by v_loss only
    pg_loss = -(advantages * logprob).mean()
    v_loss = ((returns - values) ** 2).mean()
    entropy_loss = entropy.mean()
    return pg_loss - ent_coef * entropy_loss + vf_coef * v_loss, pg_loss, v_loss, entropy_loss


def linear_lr(iteration, num_iterations, lr):
    """lr at `iteration` (1-based), reaching exactly 0 at the last iteration."""
    return lr * (1.0 - (iteration - 1.0) / (num_iterations - 1)) if num_iterations > 1 else lr


def update(agent, optimizer, b, args):
    """The learning phase (Alg. 1 lines 12-18): one gradient step on the whole rollout `b`.

    `b` holds obs [T*N, ...], next_obs [N, ...], actions/logprobs [T*N], rewards/dones [T, N].
    Returns (losses, values [T*N], returns [T*N]); losses["logprob_max_dev"] compares the log-probs of
    this forward with the rollout's, which must agree as nothing has changed yet.
    """
    n = b["actions"].shape[0]
    # one forward for the rollout and the bootstrap observation
    logits, values = agent.get_logits_and_value(torch.cat([b["obs"], b["next_obs"]]))
    logits, values, bootstrap_value = logits[:n], values[:n], values[n:].detach()
    logprob, entropy = categorical_logprob_entropy(logits, b["actions"])
    returns = nstep_returns(b["rewards"], b["dones"], bootstrap_value, args.gamma).reshape(-1)
    loss, pg_loss, v_loss, entropy_loss = a2c_losses(logprob, entropy, values, returns, args.ent_coef, args.vf_coef)
    optimizer.zero_grad(set_to_none=True)
    (args.loss_scale * loss).backward()
    grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)  # detail 7
    optimizer.step()
    losses = {
        "value_loss": v_loss.item(), "policy_loss": pg_loss.item(), "entropy": entropy_loss.item(),
        "grad_norm": grad_norm.item(), "logprob_max_dev": (logprob.detach() - b["logprobs"]).abs().max().item(),
    }
    return losses, values.detach(), returns


def explained_variance(y_pred, y_true):
    var_y = np.var(y_true)
    return np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y


def save_checkpoint(path, state):
    """Write atomically: a crash or Ctrl-C mid-write leaves the previous checkpoint intact."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path):
    if not os.path.isfile(path):
        raise ConfigError(f"checkpoint {path!r} does not exist")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:
        raise ConfigError(f"checkpoint {path!r} could not be read ({type(e).__name__}: {e})") from None
    if not isinstance(ckpt, dict) or ckpt.get("script") != SCRIPT:
        owner = ckpt.get("script") if isinstance(ckpt, dict) else None
        raise ConfigError(f"checkpoint {path!r} was written by {owner or 'something else'}, not {SCRIPT}")
    return ckpt


def rng_states():
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states):
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def pick_device(args):
    if args.cuda and not torch.cuda.is_available():
        print(f"{SCRIPT}: --cuda is set but no CUDA device is available; running on CPU", file=sys.stderr)
    return torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")


def evaluate_agent(agent, env_id, eval_episodes=10, seed=0, device="cpu"):
    """Raw game scores of `eval_episodes` episodes of the agent's sampling policy, seeded for repeatability."""
    env = make_env(env_id, -1, False, "eval")()
    generator = torch.Generator(device=device).manual_seed(seed)
    returns = []
    obs, _ = env.reset(seed=seed)
    while len(returns) < eval_episodes:
        episode_return, done = 0.0, False
        while not done:
            with torch.inference_mode():
                logits = agent.get_logits(torch.as_tensor(np.asarray(obs)[None], dtype=torch.float32, device=device))[0]
                u = torch.rand((), generator=generator, device=device)
                action = int((logits.softmax(-1).cumsum(-1) < u).sum().clamp(max=logits.shape[-1] - 1))
            obs, reward, terminated, truncated, _ = env.step(action)
            episode_return += float(reward)
            done = terminated or truncated
        returns.append(episode_return)
        obs, _ = env.reset()
    env.close()
    return returns


def evaluate(checkpoint_path, eval_episodes=10, seed=0, device="cpu"):
    """Load a checkpoint of this script and return the returns of `eval_episodes` episodes."""
    ckpt = load_checkpoint(checkpoint_path)
    env = gym.make(ckpt["args"]["env_id"])
    agent = Agent(env.action_space.n, ckpt["args"]["arch"]).to(device)
    env.close()
    agent.load_state_dict(ckpt["model"])
    return evaluate_agent(agent, ckpt["args"]["env_id"], eval_episodes, seed, device)


def train(args: Args):
    """Train; return a dict with the per-episode returns/lengths, per-iteration losses, the agent and optimizer."""
    ckpt = None
    if args.resume:
        ckpt = load_checkpoint(args.resume)
        args = Args(**{**ckpt["args"], "resume": args.resume})
    check_args(args)
    if args.learning_rate is None:
        args.learning_rate = 0.0007 * args.num_envs  # detail 6: the paper's rule, 0.0224 for n_e = 32
    args.batch_size = args.num_envs * args.num_steps
    args.num_iterations = args.total_timesteps // args.batch_size
    run_name = ckpt["run_name"] if ckpt else f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"

    if args.track:
        import wandb

        wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True,
                   config=asdict(args), name=run_name, save_code=True, resume="allow")
    from torch.utils.tensorboard import SummaryWriter

    # a resumed run logs on into the same directory; purge_step makes TensorBoard drop what the interrupted
    # run logged after its checkpoint, so those steps are not counted twice
    writer = SummaryWriter(f"runs/{run_name}", purge_step=ckpt["global_step"] + 1 if ckpt else None)
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items()))

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)
    device = pick_device(args)

    restored = ckpt["envs"] if ckpt else None
    if ckpt and restored is None:
        print(f"{SCRIPT}: the checkpoint holds no env state; resuming with fresh episodes", file=sys.stderr)
    envs = ParallelEnvs(args, run_name, restored)
    try:
        return _train_loop(args, ckpt, run_name, writer, device, envs)
    finally:
        envs.close()
        writer.close()


def _train_loop(args, ckpt, run_name, writer, device, envs):
    obs_shape = envs.single_observation_space.shape
    agent = Agent(envs.single_action_space.n, args.arch, args.channels_last).to(device)
    optimizer = TFRMSprop(agent.parameters(), lr=args.learning_rate, decay=args.rmsprop_decay, eps=args.rmsprop_eps)

    T, N = args.num_steps, args.num_envs
    # rollout storage lives in numpy: per-step writes are cheap and become tensors once per rollout
    obs_buf = np.zeros((T, N) + obs_shape, dtype=np.uint8)
    actions_buf = np.zeros((T, N), dtype=np.int64)
    logprobs_buf = np.zeros((T, N), dtype=np.float32)
    rewards_buf = np.zeros((T, N), dtype=np.float32)
    dones_buf = np.zeros((T, N), dtype=np.float32)
    episode_return, episode_length = np.zeros(N), np.zeros(N, dtype=np.int64)
    history = {"episodic_return": [], "episodic_length": [], "losses": [], "learning_rate": [], "global_steps": []}

    start_iteration, global_step = 1, 0
    if ckpt and ckpt["envs"] is not None:  # the workers continue the very same episodes
        next_obs = envs.buf["obs"]
        next_obs[:] = ckpt["next_obs"]
        episode_return, episode_length = ckpt["episode_return"], ckpt["episode_length"]
    else:
        next_obs = envs.reset(seed=args.seed)
    if ckpt:
        agent.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start_iteration, global_step = ckpt["iteration"] + 1, ckpt["global_step"]
        set_rng_states(ckpt["rng"])

    def checkpoint_state(iteration):
        return {
            "script": SCRIPT, "args": asdict(args), "run_name": run_name, "iteration": iteration,
            "global_step": global_step, "model": agent.state_dict(), "optimizer": optimizer.state_dict(),
            "rng": rng_states(), "next_obs": next_obs.copy(), "episode_return": episode_return.copy(),
            "episode_length": episode_length.copy(), "envs": envs.snapshot(),
        }

    ckpt_path = f"runs/{run_name}/checkpoint.pt"
    timers = {"env": 0.0, "act": 0.0, "learn": 0.0}  # detail 1 / Figure 2: where the wall time goes
    start_time, start_step = time.time(), global_step
    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = linear_lr(iteration, args.num_iterations, args.learning_rate)

        for step in range(T):
            global_step += N  # detail 9: n_e * t_max per update
            obs_buf[step] = next_obs
            t0 = time.perf_counter()
            with torch.inference_mode():  # detail 2: one batched forward for all n_e envs
                logits = agent.get_logits(torch.as_tensor(next_obs, device=device).float())
                action = sample_categorical(logits)
                logprobs_buf[step] = categorical_logprob_entropy(logits, action)[0].cpu().numpy()
                action = action.cpu().numpy()
            actions_buf[step] = action
            t1 = time.perf_counter()
            next_obs, reward, terminations, truncations, final_obs = envs.step(action)
            timers["act"] += t1 - t0
            timers["env"] += time.perf_counter() - t1
            done = terminations | truncations
            rewards_buf[step] = np.clip(reward, -1.0, 1.0)  # detail 8: clipped for training only
            dones_buf[step] = done

            if args.bootstrap_truncated and truncations.any():
                # r + gamma * V(final obs) for frame-limit ends, so the done cut leaves the right target
                idx = np.flatnonzero(truncations & ~terminations)
                if idx.size:
                    with torch.inference_mode():
                        v = agent.get_value(torch.as_tensor(final_obs[idx], device=device).float()).cpu().numpy()
                    rewards_buf[step, idx] += args.gamma * v

            episode_return += reward  # the raw game score
            episode_length += 1
            for i in np.flatnonzero(done):
                writer.add_scalar("charts/episodic_return", episode_return[i], global_step)
                writer.add_scalar("charts/episodic_length", episode_length[i], global_step)
                history["episodic_return"].append(float(episode_return[i]))
                history["episodic_length"].append(int(episode_length[i]))
                episode_return[i], episode_length[i] = 0.0, 0

        t0 = time.perf_counter()
        b = {"obs": torch.as_tensor(obs_buf, device=device).reshape((-1,) + obs_shape).float(),
             "next_obs": torch.as_tensor(next_obs, device=device).float(),
             "actions": torch.as_tensor(actions_buf, device=device).reshape(-1),
             "logprobs": torch.as_tensor(logprobs_buf, device=device).reshape(-1),
             "rewards": torch.as_tensor(rewards_buf, device=device),
             "dones": torch.as_tensor(dones_buf, device=device)}
        losses, b_values, b_returns = update(agent, optimizer, b, args)
        timers["learn"] += time.perf_counter() - t0
        losses["explained_variance"] = explained_variance(b_values.cpu().numpy(), b_returns.cpu().numpy())
        history["losses"].append(losses)
        history["learning_rate"].append(optimizer.param_groups[0]["lr"])
        history["global_steps"].append(global_step)
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        for k, v in losses.items():
            if k != "logprob_max_dev":
                writer.add_scalar(f"losses/{k}", v, global_step)
        elapsed = time.time() - start_time
        sps = int((global_step - start_step) / elapsed)
        writer.add_scalar("charts/SPS", sps, global_step)
        shares = {k: v / elapsed for k, v in timers.items()}
        for k, v in shares.items():
            writer.add_scalar(f"charts/time_share_{k}", v, global_step)
        if iteration % 500 == 0 or iteration == args.num_iterations:
            recent = history["episodic_return"][-20:]
            print(f"iter {iteration}/{args.num_iterations} step {global_step} SPS {sps} "
                  f"time env {shares['env']:.0%} act {shares['act']:.0%} learn {shares['learn']:.0%} "
                  f"return(last 20) {np.mean(recent) if recent else float('nan'):.1f}")

        if args.save_model and (iteration % args.save_every == 0 or iteration == args.num_iterations):
            save_checkpoint(ckpt_path, checkpoint_state(iteration))

    history.update(run_name=run_name, global_step=global_step, agent=agent, optimizer=optimizer,
                   time_shares={k: v / (time.time() - start_time) for k, v in timers.items()},
                   checkpoint=ckpt_path if args.save_model else None)
    return history


if __name__ == "__main__":
    import tyro

    cli_args = tyro.cli(Args)
    try:
        if cli_args.eval_checkpoint:
            returns = evaluate(cli_args.eval_checkpoint, cli_args.eval_episodes, cli_args.seed)
            print(f"mean return over {len(returns)} episodes: {np.mean(returns):.2f} +- {np.std(returns):.2f}")
        else:
            train(cli_args)
    except ConfigError as e:
        sys.exit(f"{SCRIPT}: error: {e}")
