"""PAAC: Parallel Advantage Actor-Critic on Atari (Clemente et al. 2017, Algorithm 1).

The paper: "Efficient Parallel Methods for Deep Reinforcement Learning", https://arxiv.org/abs/1705.04862

Run:   python a2c_paac.py --env-id BreakoutNoFrameskip-v4 --arch nips
Eval:  python a2c_paac.py --eval-checkpoint runs/<run>/checkpoint.pt --eval-episodes 10

The details of the paper (its section numbers):
  1. one learner, n_e = 32 envs on n_w = 8 worker processes (Sec. 3, 5.1), the policy only in the learner, obs in
     shared memory. Not threads: the wrappers hold the GIL (two threads stepping two ALE envs: 1.07 s, one: 1.30 s)
  2. every t_max = 5 steps: one batched forward for all envs per step picks the actions (Alg. 1 line 5)
  3. n-step returns from R = V(s_{t_max+1}) (0 after a terminal), cut at a terminal in the rollout (Alg. 1 l. 12-15)
  4. loss -(R - V) log pi(a|s) - beta H(pi(s)) + (R - V)^2, means, beta 0.01, R - V without gradient (eqs. 10-11)
  5. one trunk, softmax policy and linear value heads (Sec. 5.1): --arch nips (A3C FF) or nature (the Nature CNN)
  6. RMSProp, decay 0.99, epsilon 0.1, lr 0.0007 * n_e = 0.0224 (Sec. 5.1, 5.2) as TF 1's (our reading of Sec. 5):
     epsilon inside the root, mean square from 1 (`TFRMSprop`); PyTorch's would floor the denominator at 0.1, not
     0.32, and take ~10x larger first steps, so 0.0224 would mean another step size
  7. global gradient norm clipped at 40 (Sec. 5.1, Pascanu et al. 2012)
  8. Atari preprocessing (Sec. 5.1): 1-30 raw no-op frames at every reset, action repeat 4 with the max of the
     last two frames, 84x84 gray; rewards clipped to [-1, 1] for training only; frame stack 4 (as A3C)
  9. global step N grows by n_e * t_max per update (Alg. 1 line 19); N_max = 1.15e8 (Sec. 5.1)

To hack: the rollout and the update both call Agent.get_action_and_value, the optimizer holds agent.parameters()
and update() steps CleanRL's way, so an edit to the network, a head or the step applies everywhere.
Not in the paper: --anneal-lr (on, as A3C); orthogonal init (--init torch: the released code's, uniform within
+-1/sqrt(fan-in) for every weight and bias, PyTorch's own default); no episodic-life or fire-on-reset wrapper (returns
are whole games' raw scores); --bootstrap-truncated (off); charts/time_share_* (Figure 2); --channels-last (on).
The authors' released code: --loss-scale 5 --vf-coef 0.25 --max-grad-norm 3 --ent-coef 0.02 --init torch (with TF's
RMSProp, not scale-invariant, their policy steps are ~5x ours at the same 0.0224).
"""

import contextlib
import errno
import gc
import importlib.util
import io
import math
import multiprocessing as mp
import os
import pickle
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
    import torch.nn as nn

    signal.pthread_sigmask(signal.SIG_SETMASK, sigmask)  # a Ctrl-C pressed meanwhile is raised here
except KeyboardInterrupt:
    if __name__ != "__main__":
        raise
    print(f"{os.path.basename(__file__)}: interrupted; no checkpoint was saved", file=sys.stderr)
    sys.exit(130)

try:  # the family's extra; run without it, one line names its install
    import ale_py
    import cv2
except ModuleNotFoundError as e:
    if __name__ != "__main__":
        raise
    sys.exit(
        f"{os.path.basename(__file__)}: error: {e.name} is not installed; the Atari scripts need it: "
        "bash scripts/install.sh atari"
    )

gym.register_envs(ale_py)

SCRIPT = os.path.basename(__file__)  # this file's name: a copy runs, logs and checkpoints as itself


@dataclass
class Args:
    exp_name: str = SCRIPT.removesuffix(".py")  # the name of this experiment (the first part of the run name)
    seed: int = 1  # seed of python, numpy, torch and the environments
    torch_deterministic: bool = True  # if toggled, sets `torch.backends.cudnn.deterministic=True`
    cuda: bool = True  # use CUDA when available (else the CPU; a notice when --cuda is given by name)
    torch_threads: int = 1  # torch intra-op threads of the learner (0: torch's default); the workers use the rest
    channels_last: bool = True  # run the CNN in channels-last (NHWC) memory: same math, faster on CPU (oneDNN)
    bf16: bool = False  # the CNN's forward passes under bfloat16 autocast (experimental; heads, losses, RMSProp stay fp32)
    track: bool = False  # log to Weights & Biases (imports wandb only when set)
    wandb_project_name: str = "ppo-reference"  # the Weights & Biases project
    wandb_entity: Optional[str] = None  # the Weights & Biases entity (team)
    capture_video: bool = False  # record videos of env 0 into `videos/<run name>/` (needs moviepy)
    save_model: bool = False  # write `runs/<run name>/checkpoint.pt` every --save-every iterations and at the end
    save_every: int = 5000  # iterations between periodic checkpoints (with --save-model)
    resume: Optional[str] = None  # continue this checkpoint's run (beside it only the budget and saving flags may change)
    eval_checkpoint: Optional[str] = None  # evaluate this checkpoint on the CPU instead of training; print the mean return
    eval_episodes: int = 10  # episodes to run with --eval-checkpoint

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"  # the id of the environment (an ALE NoFrameskip-v4 game)
    total_timesteps: int = 115_000_000  # total environment steps (4 frames each); paper: N_max = 1.15e8
    arch: Literal["nips", "nature"] = "nips"  # the network: nips (conv16-conv32-fc256) or nature (conv32-64-64-fc512)
    init: Literal["orthogonal", "torch"] = "orthogonal"  # CleanRL's orthogonal init, or torch: the authors' code's
    learning_rate: Optional[float] = None  # the learning rate of RMSProp (default: the paper's 0.0007 * num_envs)
    num_envs: int = 32  # n_e, the number of parallel environments
    num_workers: int = 8  # n_w, the number of worker processes stepping the environments (must divide num_envs)
    num_steps: int = 5  # t_max, the number of steps to run in each environment per update
    anneal_lr: bool = True  # anneal the learning rate linearly to 0 (not stated in PAAC; A3C does)
    anneal_timesteps: Optional[int] = None  # the step at which --anneal-lr reaches 0 (default: --total-timesteps)
    gamma: float = 0.99  # the discount factor gamma
    ent_coef: float = 0.01  # beta, the coefficient of the entropy bonus
    vf_coef: float = 1.0  # coefficient of the value loss (R - V)^2 (the paper writes no factor)
    max_grad_norm: float = 40.0  # the maximum global norm of the gradients
    loss_scale: float = 1.0  # multiplies the loss (paper: 1, released code: 5): a step size under TF RMSProp
    rmsprop_decay: float = 0.99  # the decay of RMSProp's mean square
    rmsprop_eps: float = 0.1  # the epsilon of RMSProp (inside the square root, as in TensorFlow)
    bootstrap_truncated: bool = False  # bootstrap time-limit ends from the value of their final observation

    # filled in at runtime
    batch_size: int = 0  # computed: num_envs * num_steps
    num_iterations: int = 0  # computed: total_timesteps // batch_size


class NoopReset(gym.Wrapper):
    """Detail 8: 1 to `noop_max` no-op frames after every reset, so episodes start in different states."""

    noop_max = 30

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for _ in range(self.unwrapped.np_random.integers(1, self.noop_max + 1)):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class MaxAndSkip(gym.Wrapper):
    """Detail 8: the action repeated on `skip` frames, rewards summed, the last two frames max-pooled (flicker)."""

    skip = 4

    def step(self, action):
        total_reward, frames = 0.0, []
        for _ in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total_reward, frames = total_reward + float(reward), frames[-1:] + [obs]
            if terminated or truncated:
                break
        return np.maximum(frames[0], frames[-1]), total_reward, terminated, truncated, info


def gray_84x84(frame):
    """Detail 8: 210x160 RGB -> 84x84 grayscale. A named function, not a lambda: a checkpoint pickles the envs."""
    return cv2.resize(cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY), (84, 84), interpolation=cv2.INTER_AREA)


def make_env(env_id, video_dir=None):
    """Detail 8: one game in the paper's preprocessing; with `video_dir`, its games are recorded there."""
    env = gym.make(env_id, **({"render_mode": "rgb_array"} if video_dir else {}))
    env = MaxAndSkip(NoopReset(gym.wrappers.RecordVideo(env, video_dir) if video_dir else env))
    env = gym.wrappers.TransformObservation(env, gray_84x84, gym.spaces.Box(0, 255, (84, 84), np.uint8))
    return gym.wrappers.FrameStackObservation(env, 4)


def env_worker(learner_end, conn, args, run_name, first, count, restored, shared_obs):
    """Detail 1: a worker steps envs first..first+count-1 on each message; observations go into shared memory."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle; it closes the workers
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker must not inherit the learner's handler
    learner_end.close()  # only the learner holds it now: if the learner goes away, recv() here fails, not waits
    thunks = [
        lambda i=first + i: make_env(args.env_id, f"videos/{run_name}" if args.capture_video and i == 0 else None)
        for i in range(count)
    ]
    for i, (env, ale_state, np_random) in enumerate(Unpickler(io.BytesIO(saved)).load() for saved in restored or []):
        env.unwrapped.restore_state(ale_state)  # an AtariEnv pickles only its arguments: the emulator comes beside it
        env.unwrapped.np_random = np_random
        thunks[i] = lambda env=env: env
    # SAME_STEP autoreset as in ppo.py: the step that ends an episode already returns the next one's first obs
    envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, copy=False)
    obs = np.frombuffer(shared_obs, np.uint8).reshape((-1,) + envs.single_observation_space.shape)[first : first + count]
    try:
        if restored is None:
            obs[:] = envs.reset(seed=args.seed + first)[0]
        conn.send(None)  # ready: the first observations are in place
        while (actions := conn.recv()) is not None:
            if isinstance(actions, str):  # "snapshot": the envs pickled, so that a resumed run continues their episodes
                try:
                    conn.send(
                        [
                            pickle.dumps((env, env.unwrapped.clone_state(include_rng=True), env.unwrapped.np_random))
                            for env in envs.envs
                        ]
                    )
                except Exception:  # e.g. a video recorder
                    conn.send(None)
                continue
            obs[:], reward, term, trunc, infos = envs.step(actions)
            conn.send((reward, term, trunc, {first + i: infos["final_obs"][i] for i in np.flatnonzero(trunc)}))
    except (EOFError, BrokenPipeError):  # the learner went away
        pass
    finally:
        envs.close()


class ParallelEnvs:
    """Detail 1: n_e envs on n_w worker processes, stepped like a gymnasium vector env; obs in shared memory."""

    def __init__(self, args, run_name, restored=None):
        n, count = args.num_envs, args.num_envs // args.num_workers  # count: the envs of one worker
        with make_env(args.env_id) as probe:
            self.single_observation_space, self.single_action_space = probe.observation_space, probe.action_space
        # fork starts the workers in milliseconds; they never touch torch, so its threads do not matter
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        shared_obs = ctx.RawArray("B", n * int(np.prod(self.single_observation_space.shape)))
        self.obs = np.frombuffer(shared_obs, np.uint8).reshape((n,) + self.single_observation_space.shape)
        self.pipes, self.procs = [], []
        for first in range(0, n, count):
            self.pipes.append((pipe := ctx.Pipe())[0])
            self.procs.append(
                ctx.Process(
                    target=env_worker,
                    daemon=True,
                    args=(*pipe, args, run_name, first, count, restored and restored[first : first + count], shared_obs),
                )
            )
            self.procs[-1].start()
            pipe[1].close()  # only the worker holds its end now: if it dies, recv() here fails instead of waiting
        self._all([])  # wait until every worker is ready

    def _all(self, messages):
        try:
            for pipe, message in zip(self.pipes, messages):
                pipe.send(message)
            return [pipe.recv() for pipe in self.pipes]
        except (EOFError, BrokenPipeError):  # which worker, and how: a signal (the OOM killer's) leaves no traceback
            for i, p in enumerate(self.procs):
                p.join(timeout=5)
                if p.exitcode is not None:
                    how = f"killed by {signal.Signals(-p.exitcode).name}" if p.exitcode < 0 else f"exit code {p.exitcode}"
                    raise ConfigError(
                        f"environment worker {i} (pid {p.pid}) died ({how}"
                        + ("; its traceback is above)" if p.exitcode > 0 else ")")
                        + "; the run stops: resume it from its last checkpoint"
                    ) from None
            raise ConfigError(
                "an environment worker's pipe closed; the run stops: resume it from its last checkpoint"
            ) from None

    def step(self, actions):
        rewards, terminations, truncations, final_obs = zip(*self._all(np.split(actions, len(self.pipes))))
        return (
            self.obs.copy(),
            np.concatenate(rewards),
            np.concatenate(terminations),
            np.concatenate(truncations),
            {"final_obs": {i: o for worker in final_obs for i, o in worker.items()}},
        )

    def snapshot(self):
        states = self._all(["snapshot"] * len(self.pipes))
        return None if None in states else [env for state in states for env in state]

    def close(self):
        for pipe, proc in zip(self.pipes, self.procs):
            with contextlib.suppress(OSError):  # that worker may be gone already
                pipe.send(None)
            proc.join(timeout=5)
            proc.terminate()  # a no-op if it has exited
            proc.join()
        self.pipes, self.procs = [], []


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, n_actions, arch="nips", channels_last=False, bf16=False, init="orthogonal"):
        super().__init__()
        # --init torch keeps each layer's own init, U(+-1/sqrt(fan-in)) for weights and biases: the released code's
        initialized = layer_init if init == "orthogonal" else lambda layer, std=None: layer
        # detail 5: one shared network, a softmax policy head and a linear value head
        if arch == "nips":  # A3C FF: 32 * 9 * 9 = 2592 conv features on 4x84x84
            convs, n_features, hidden = [nn.Conv2d(4, 16, 8, stride=4), nn.Conv2d(16, 32, 4, stride=2)], 32 * 9 * 9, 256
        else:  # the Nature CNN: 64 * 7 * 7 = 3136 conv features
            convs, n_features, hidden = (
                [nn.Conv2d(4, 32, 8, stride=4), nn.Conv2d(32, 64, 4, stride=2), nn.Conv2d(64, 64, 3, stride=1)],
                64 * 7 * 7,
                512,
            )
        trunk = nn.Sequential(*[m for conv in convs for m in (initialized(conv), nn.ReLU())], nn.Flatten())
        self.network = nn.Sequential(trunk, initialized(nn.Linear(n_features, hidden)), nn.ReLU())
        self.actor = initialized(nn.Linear(hidden, n_actions), std=0.01)
        self.critic = initialized(nn.Linear(hidden, 1), std=1.0)
        # a memory layout, not a change of the math: NHWC weights and inputs take oneDNN's fast CPU convolutions
        self.memory_format, self.bf16 = torch.channels_last if channels_last else torch.contiguous_format, bf16
        self.to(memory_format=self.memory_format)

    def hidden(self, x):  # uint8 pixels to [0, 1]
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
    return Agent(action_space.n, args.arch, args.channels_last, args.bf16, args.init)


class TFRMSprop(torch.optim.Optimizer):
    """Detail 6, TF's RMSProp: ms <- decay ms + (1 - decay) g^2, from ms = 1; theta <- theta - lr g / sqrt(ms + eps)."""

    def __init__(self, params, lr, decay=0.99, eps=0.1):
        super().__init__(params, {"lr": lr, "decay": decay, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in (p for p in group["params"] if p.grad is not None):
                if not self.state[p]:
                    self.state[p]["square_avg"] = torch.ones_like(p)  # TF initialises the mean square to ones
                square_avg = self.state[p]["square_avg"]
                square_avg.mul_(group["decay"]).addcmul_(p.grad, p.grad, value=1 - group["decay"])
                p.addcdiv_(p.grad, square_avg.add(group["eps"]).sqrt_(), value=-group["lr"])


def nstep_returns(rewards, dones, bootstrap_value, gamma):
    """Detail 3 (Alg. 1 lines 12-15): [T, N] n-step returns; dones[t] = 1 stops the bootstrap and later rewards."""
    returns, running = torch.empty_like(rewards), bootstrap_value
    for t in reversed(range(rewards.shape[0])):
        running = returns[t] = rewards[t] + gamma * running * (1.0 - dones[t])
    return returns


def a2c_losses(newlogprob, entropy, newvalue, returns, args):
    """Detail 4 (eqs. 10-11): means over the n_e * t_max steps. (loss, pg_loss, v_loss, entropy_loss); loss scaled."""
    advantages = (returns - newvalue).detach()  # the critic is fitted by v_loss only
    pg_loss = -(advantages * newlogprob).mean()
    v_loss = ((returns - newvalue) ** 2).mean()
    entropy_loss = entropy.mean()
    return args.loss_scale * (pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss), pg_loss, v_loss, entropy_loss


def update(agent, optimizer, b, args):
    """Alg. 1 lines 16-18: one gradient step on the rollout `b` (flat tensors). Returns the losses and, as ppo.py's
    first minibatch (here the only batch), max |ratio - 1|, which must be 0: nothing has changed since the rollout."""
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b["obs"], b["actions"])
    loss, pg_loss, v_loss, entropy_loss = a2c_losses(newlogprob, entropy, newvalue, b["returns"], args)
    grad_norm = torch.tensor(math.nan)  # logged as nan if the step below no longer keeps the norm
    optimizer.zero_grad()
    loss.backward()
    grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)  # detail 7
    optimizer.step()
    return {
        "value_loss": v_loss.item(),
        "policy_loss": pg_loss.item(),
        "entropy": entropy_loss.item(),
        "grad_norm": grad_norm.item(),
    }, {"ratio_max_dev": (newlogprob.detach() - b["logprobs"]).exp().sub(1).abs().max().item()}


def train(args: Args, given=None):
    """Train; return a dict with the per-episode returns/lengths, per-iteration losses, the agent and optimizer."""
    ckpt, args = load_checkpoint(args.resume, args, given) if args.resume else (None, args)
    check_args(args, ckpt)
    args.learning_rate = args.learning_rate or 0.0007 * args.num_envs  # detail 6: the paper's rule, 0.0224 for n_e = 32
    args.batch_size = args.num_envs * args.num_steps
    args.num_iterations = args.total_timesteps // args.batch_size
    games = resumed_games(ckpt, args)  # a resumed run's saved games, checked before anything is written
    run_name, run_dir, writer, lock = open_run(args, ckpt)  # the lock is held while `lock` lives

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    torch.set_num_threads(args.torch_threads or torch.get_num_threads())
    if args.cuda and not torch.cuda.is_available() and "cuda" in (given or ()):  # asked for by name: said; else quiet
        print(f"{SCRIPT}: --cuda is given but no CUDA device is available; running on CPU", file=sys.stderr)
    device = torch.device("cuda" if args.cuda and torch.cuda.is_available() else "cpu")

    with contextlib.closing(ParallelEnvs(args, run_name, games)) as envs:  # closed however it ends
        agent = make_agent(args, envs.single_observation_space, envs.single_action_space).to(device)
        optimizer = TFRMSprop(agent.parameters(), lr=args.learning_rate, decay=args.rmsprop_decay, eps=args.rmsprop_eps)
        T, N, obs_shape = args.num_steps, args.num_envs, envs.single_observation_space.shape
        # what the envs return is stored in numpy (cheap per-step writes), what the agent returns in torch
        obs, rewards, dones = (
            np.zeros((T, N) + obs_shape, np.uint8),
            np.zeros((T, N), np.float32),
            np.zeros((T, N), np.float32),
        )
        episode_return, episode_length = np.zeros(N), np.zeros(N, dtype=np.int64)
        history = {
            "episodic_return": [],
            "episodic_length": [],
            "losses": [],
            "first_minibatch": [],
            "learning_rate": [],
            "seconds": {"env": 0.0, "inference": 0.0, "update": 0.0},
        }  # where the wall time goes (Figure 2)
        seconds, start_iteration, global_step = history["seconds"], 1, 0
        next_obs = envs.obs  # the workers reset their envs (seed + index) as they started
        if ckpt:  # continue where the checkpoint stopped: the same episodes (where saved), weights, RMSProp's state, RNGs
            if games is not None:  # the workers continue the very same episodes
                next_obs, episode_return, episode_length = ckpt["next_obs"], ckpt["episode_return"], ckpt["episode_length"]
            start_iteration, global_step = restore(ckpt, agent, optimizer, device)

        saved = (args.resume, ckpt["iteration"]) if ckpt else None  # the last finite checkpoint (check_finite)
        gc.freeze()  # the ~300k objects made so far (mostly torch's) are never garbage: full collections skip them
        start_time, start_step = time.time(), global_step
        for iteration in range(start_iteration, args.num_iterations + 1):
            if args.anneal_lr:  # linearly, to 0 at the iteration that ends --anneal-timesteps, and 0 after it
                anneal = (args.anneal_timesteps or args.total_timesteps) // args.batch_size
                frac = max(1 - (iteration - 1) / max(anneal - 1, 1), 0.0)
                for group in optimizer.param_groups:  # every param group from its own initial rate (a critic's own rate too)
                    group["lr"] = group.setdefault("initial_lr", group["lr"]) * frac

            # ---- the rollout: num_steps steps of every env, the actions from Agent.get_action_and_value ----
            rollout = []  # the agent's (action, logprob, value) of each step, stacked into [T, N] tensors after it
            for step in range(T):
                global_step += N  # detail 9: n_e * t_max per update
                obs[step] = next_obs
                t0 = time.perf_counter()
                with torch.inference_mode():  # detail 2: one batched forward for all n_e envs
                    action, logprob, _, value = agent.get_action_and_value(torch.as_tensor(next_obs, device=device))
                rollout.append((action, logprob, value))
                action, t1 = action.cpu().numpy(), time.perf_counter()  # the copy waits for the forward on a GPU
                next_obs, reward, terminations, truncations, infos = envs.step(action)
                seconds["inference"] += t1 - t0
                seconds["env"] += time.perf_counter() - t1
                rewards[step], dones[step] = np.clip(reward, -1.0, 1.0), terminations | truncations  # detail 8
                if args.bootstrap_truncated and (idx := np.flatnonzero(truncations & ~terminations)).size:
                    # r + gamma * V(final obs) for frame-limit ends, so the done cut leaves the right target
                    final = torch.as_tensor(np.stack([infos["final_obs"][i] for i in idx]), device=device)
                    with torch.no_grad():
                        rewards[step, idx] += args.gamma * agent.get_value(final).cpu().numpy()

                episode_return, episode_length = episode_return + reward, episode_length + 1  # the raw game score
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
                next_value = agent.get_value(torch.as_tensor(next_obs, device=device))
                returns = nstep_returns(
                    torch.as_tensor(rewards, device=device), torch.as_tensor(dones, device=device), next_value, args.gamma
                )
            b = {
                "obs": torch.as_tensor(obs, device=device).reshape((-1,) + obs_shape),
                "actions": actions.reshape(-1),
                "logprobs": logprobs.reshape(-1),
                "values": values.reshape(-1),
                "returns": returns.reshape(-1),
            }
            losses, first = update(agent, optimizer, b, args)
            seconds["update"] += time.perf_counter() - t0
            y_pred, y_true = b["values"].cpu().numpy(), b["returns"].cpu().numpy()
            losses["explained_variance"] = np.nan if np.var(y_true) == 0 else 1 - np.var(y_true - y_pred) / np.var(y_true)
            # ---- logging ----
            history["first_minibatch"].append(first)
            history["losses"].append(losses)
            history["learning_rate"].append(optimizer.param_groups[0]["lr"])
            for i, group in enumerate(optimizer.param_groups):  # one tag a group: group 0 as CleanRL logs it
                writer.add_scalar("charts/learning_rate" + (f"_group{i}" if i else ""), group["lr"], global_step)
            for k, v in losses.items():
                writer.add_scalar(f"losses/{k}", v, global_step)
            elapsed = time.time() - start_time
            sps = int((global_step - start_step) / elapsed)
            writer.add_scalar("charts/SPS", sps, global_step)
            for k, v in seconds.items():
                writer.add_scalar(f"charts/time_share_{k}", v / elapsed, global_step)
            progress(iteration, args.num_iterations, global_step, args.batch_size, sps, history["episodic_return"], every=500)

            sample = (b["obs"][:8], b["actions"][:8])  # a few of the batch's states, for the updated network
            check_finite(iteration, losses, agent, optimizer, saved, sample, {"obs": obs, "rewards": rewards})
            if args.save_model and (iteration % args.save_every == 0 or iteration == args.num_iterations):
                state = run_state(args, run_name, iteration, global_step, agent, optimizer, device, envs=envs.snapshot())
                state.update(next_obs=next_obs.copy(), episode_return=episode_return, episode_length=episode_length)
                with signals_held():  # a signal in between would name the checkpoint before this one
                    save_checkpoint(f"{run_dir}/checkpoint.pt", state)
                    saved = (f"{run_dir}/checkpoint.pt", iteration)
    writer.close()
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()) + f", total {time.time() - start_time:.1f}")
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


# every numeric flag's valid range (flags, low, high, low allowed), checked before anything is created
RANGES = [
    ("total_timesteps anneal_timesteps num_envs num_workers num_steps save_every eval_episodes", 1, math.inf, True),
    ("learning_rate max_grad_norm loss_scale rmsprop_eps", 0, math.inf, False),
    ("seed", 0, 2**32 - 1, True),
    ("ent_coef vf_coef torch_threads", 0, math.inf, True),
    ("gamma rmsprop_decay", 0, 1, True),
]
# the flags that may change beside --resume: the budget, and how the run is saved or placed
RESUMABLE = {"resume", "total_timesteps", "save_model", "save_every", "cuda", "torch_threads", "track"}
RESUMABLE |= {"channels_last", "bf16", "num_workers"}


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
    # measured: ~6 MB per worker process, ~1.5 MB per Atari env, ~225 kB per env-step (storage, update)
    need = args.num_workers * 20e6 + args.num_envs * (2e6 + args.num_steps * 300e3)
    if need > (ram := os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")):
        raise ConfigError(
            f"--num-envs {args.num_envs} needs about {need / 1e9:.1f} GB (envs, rollout storage and "
            f"{args.num_workers} workers), more than this machine's {ram / 1e9:.1f} GB; use fewer envs"
        )
    if args.num_envs % args.num_workers != 0:
        raise ConfigError(
            f"--num-envs {args.num_envs} is not divisible by --num-workers {args.num_workers}; "
            "each worker steps the same number of environments"
        )
    batch = args.num_envs * args.num_steps
    if args.total_timesteps < batch or (ckpt and args.total_timesteps // batch <= ckpt["iteration"]):
        raise ConfigError(
            f"--total-timesteps {args.total_timesteps} leaves no iteration to run (one is {batch} "
            f"steps{'; the checkpoint is at iteration %d' % ckpt['iteration'] if ckpt else ''})"
        )
    if args.init not in ("orthogonal", "torch"):
        raise ConfigError(f"--init must be orthogonal or torch, got {args.init!r}")
    if args.arch not in ("nips", "nature"):
        raise ConfigError(f"--arch must be nips or nature, got {args.arch!r}")
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
    if (spec := gym.envs.registry.get(args.env_id)) is None:
        raise ConfigError(f"unknown env id {args.env_id!r}; see gymnasium.pprint_registry() for the ids")
    if spec.kwargs.get("frameskip") != 1 or spec.kwargs.get("repeat_action_probability") != 0.0:  # ALE's own kwargs
        raise ConfigError(
            f"{args.env_id} is not an Atari game without frame skip or sticky actions; {SCRIPT} "
            "needs a NoFrameskip-v4 id, e.g. PongNoFrameskip-v4"
        )


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


def resumed_games(ckpt, args):
    """A resumed run's saved games (one pickle an env, which the workers unpickle), or None where it saved none (said
    in one line); checked here first, before the run's files are touched."""
    if ckpt is None:
        return None
    if ckpt["envs"] is None:
        print(f"{SCRIPT}: the checkpoint holds no env state; resuming with fresh episodes", file=sys.stderr)
        return None
    try:  # pickled by the version of this file that saved them, which may have had other wrappers
        [Unpickler(io.BytesIO(env)).load() for env in ckpt["envs"]]
    except Exception as e:
        raise ConfigError(
            f"the envs in {args.resume} do not fit this version of {SCRIPT} ({type(e).__name__}: "
            f"{e}); resume it with the version that wrote it, or start a new run"
        ) from None
    return ckpt["envs"]


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
        f"the {k.replace('_', ' ')} is {v}"
        for k, v in losses.items()  # grad_norm: nan where an edited step drops it
        if k not in ("explained_variance", "grad_norm") and not math.isfinite(v)
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
    """Raw game scores of `eval_episodes` episodes of a checkpoint's sampling policy, seeded for repeatability."""
    ckpt, args = load_checkpoint(checkpoint_path)
    check_args(Args(env_id=args.env_id, eval_episodes=eval_episodes, seed=seed))
    env = make_env(args.env_id)
    agent = make_agent(args, env.observation_space, env.action_space).to(device)
    agent.load_state_dict(ckpt["model"])
    returns, (obs, _), episode_return = [], env.reset(seed=seed), 0.0
    with torch.random.fork_rng(), torch.inference_mode():
        torch.manual_seed(seed)
        while len(returns) < eval_episodes:
            action, *_ = agent.get_action_and_value(torch.as_tensor(obs[None], device=device))
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
