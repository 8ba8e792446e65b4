"""IMPALA for Atari: decoupled actor processes and a V-trace learner (seed 002, Espeholt et al. 2018).

Run:   python impala_vtrace.py --env-id BreakoutNoFrameskip-v4
Eval:  python impala_vtrace.py --eval-checkpoint runs/<run>/checkpoint.pt --eval-episodes 10

Implementation details (seed 002: Sec. 3, Sec. 4, Appendix F / Table F.1):
  1. decoupled acting and learning: --num-actors processes, each with its own envs and its own copy
     of the policy, refreshed from the learner's latest weights (a shared-memory state dict and a
     version counter) at the start of every unroll
  2. fixed-length unrolls of T steps (T+1 observations, the last one for the bootstrap value) written
     into shared-memory tensor buffers; only buffer indices travel through queues
  3. the learner trains on batches of unrolls while the actors keep acting; the policy lag (learner
     updates between an unroll's weights and the update that consumes it) is logged as
     charts/policy_lag. --sync hands out buffers only after each update, so the lag is 0
  4. V-trace targets and advantages, `vtrace(...)`, truncation levels rho_bar = c_bar = 1 (torchbeast;
     the seed's text lost the paper's numbers)
  5. losses: policy gradient with the V-trace advantage, baseline 0.5 * 1/2 (vs - V)^2 (the paper moves V
     in the direction (vs - V) grad V, the gradient of 1/2 (vs - V)^2, scaled by its baseline cost 0.5;
     torchbeast and scalable_agent write the same 0.25), entropy bonus 0.01, summed over time and batch
     (Table C.1 caption)
  6. RMSProp, epsilon 0.01, momentum 0, decay 0.99 (not stated in the paper; torchbeast's alpha)
  7. learning rate 6e-4 annealed linearly to 0 over training
  8. global gradient norm clipped to 40
  9. Atari pipeline: 1-30 no-op starts, action repeat 4 with a max over the last 2 frames, a lost life
     ends the training episode, FIRE on reset where the game needs it, 84x84 grayscale, 4 stacked
     frames, rewards clipped to [-1, 1]; the raw full-game score is what charts/episodic_return logs
 10. unroll 20, batch 32 trajectories, gamma 0.99 (Table F.1)
 11. networks: the shallow A3C feed-forward CNN (Mnih et al. 2016), or with --deep the residual network
     of Fig. 3 (3 sections of 16, 32, 32 channels, each conv + max-pool + 2 residual blocks, then fc256)

Deliberate choices (reference behaviour stays the default):
  - actors are forked when the learner runs on CPU (as torchbeast's monobeast does): a forked child
    starts at once with torch already loaded, where a spawned one re-imports torch (seconds on a busy
    CPU). With --cuda they are spawned instead, as a forked child cannot use a parent's CUDA state.
    Either way each actor sets 1 intra-op thread and never touches the learner's thread pool.
  - actors always run on CPU; with --cuda only the learner moves to the GPU.
  - --channels-last (on by default; --no-channels-last turns it off): the CNN's weights and inputs in NHWC
    memory, where oneDNN's CPU convolutions are faster for the learner's batch. Same math; outputs agree to
    float rounding.
  - torch's RMSProp adds epsilon outside the square root (as torchbeast does); the paper's TensorFlow
    RMSProp adds it inside.
  - ALE renders grayscale itself (obs_type="grayscale") instead of converting RGB frames.
  - on 2 CPU cores the default is --num-actors 2 with one env each; batch 32 stays the default.
  - --resume restores the learner (weights, optimizer, update count); the actors' episodes live in
    their processes and start afresh.
  - --bootstrap-truncated (off by default): a time-limit end adds gamma * V(final obs) to the
    (clipped) reward, computed by the actor's policy copy.
"""

import os
import queue
import random
import signal
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Optional

import gymnasium as gym
import numpy as np
import torch
import torch.multiprocessing as mp
import torch.nn as nn

SCRIPT = "impala_vtrace.py"


@dataclass
class Args:
    exp_name: str = "impala_vtrace"
    """the name of this experiment (the first part of the run name)"""
    seed: int = 1
    """seed of python, numpy, torch and the environments"""
    torch_deterministic: bool = True
    """if toggled, sets `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """run the learner on CUDA when available (falls back to CPU with a notice); actors stay on CPU"""
    torch_threads: int = 1
    """torch intra-op threads of the learner (0 keeps torch's default); actors always use 1"""
    channels_last: bool = True
    """run the CNN in channels-last (NHWC) memory: the same convolutions, faster on CPU (oneDNN)"""
    track: bool = False
    """log to Weights & Biases (imports wandb only when set)"""
    wandb_project_name: str = "ppo-reference"
    """the Weights & Biases project"""
    wandb_entity: Optional[str] = None
    """the Weights & Biases entity (team)"""
    capture_video: bool = False
    """record videos of actor 0's first env into `videos/<run name>/` (needs moviepy)"""
    save_model: bool = False
    """write a checkpoint to `runs/<run name>/checkpoint.pt` periodically and at the end"""
    save_every: int = 500
    """learner updates between periodic checkpoints (with --save-model)"""
    resume: Optional[str] = None
    """path of a checkpoint of this script to continue training from (its args are used)"""
    eval_checkpoint: Optional[str] = None
    """evaluate this checkpoint instead of training, and print the mean return"""
    eval_episodes: int = 10
    """episodes to run with --eval-checkpoint"""

    # Algorithm specific arguments
    env_id: str = "BreakoutNoFrameskip-v4"
    """the id of the environment (an ALE NoFrameskip id)"""
    total_timesteps: int = 50_000_000
    """total agent steps consumed by the learner (Table F.1: 200M frames = 50M steps at action repeat 4)"""
    learning_rate: float = 6e-4
    """the learning rate of the optimizer"""
    num_actors: int = 2
    """the number of actor processes"""
    num_envs_per_actor: int = 1
    """the environments each actor steps together (each gives one trajectory per unroll)"""
    unroll_length: int = 20
    """the number of steps in each unroll (T)"""
    batch_size: int = 32
    """the number of trajectories in each learner batch"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 (detail 7)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    rho_bar: float = 1.0
    """V-trace truncation level of the importance weights rho (detail 4)"""
    c_bar: float = 1.0
    """V-trace truncation level of the trace coefficients c (detail 4); at most rho_bar"""
    ent_coef: float = 0.01
    """coefficient of the entropy bonus"""
    vf_coef: float = 0.5
    """coefficient of the baseline loss (vs - V)^2"""
    max_grad_norm: float = 40.0
    """the maximum global norm of the gradients"""
    rmsprop_eps: float = 0.01
    """RMSProp epsilon (detail 6)"""
    rmsprop_alpha: float = 0.99
    """RMSProp decay of the squared-gradient average (detail 6)"""
    deep: bool = False
    """use the deep residual network instead of the shallow CNN (detail 11)"""
    sync: bool = False
    """actors wait for each update before starting an unroll, so the policy lag is 0 (for testing)"""
    bootstrap_truncated: bool = False
    """bootstrap truncated (time-limit) episodes from the value of their final observation"""
    actor_fail_after: int = 0
    """testing only: actor 0 raises after this many unrolls (0: never)"""
    actor_timeout: float = 120.0
    """seconds the learner waits for an unroll before giving up on actors that stopped producing"""

    # filled in at runtime
    num_buffers: int = 0
    """the number of shared unroll buffers (computed)"""
    num_updates: int = 0
    """the number of learner updates (computed: total_timesteps // (unroll_length * batch_size))"""


class ConfigError(ValueError):
    """Bad input found before training; __main__ prints it as one line."""


class ActorError(RuntimeError):
    """An actor process crashed or vanished; the message carries its traceback."""


def check_args(args: Args) -> None:
    """Fail before any training with a message that names the problem and the fix."""
    if args.total_timesteps <= 0:
        raise ConfigError(f"--total-timesteps must be positive, got {args.total_timesteps}")
    for name in ("num_actors", "num_envs_per_actor", "unroll_length", "batch_size"):
        if getattr(args, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.batch_size % args.num_envs_per_actor != 0:
        raise ConfigError(
            f"--batch-size {args.batch_size} is not divisible by --num-envs-per-actor {args.num_envs_per_actor}; "
            "a batch is made of whole actor unrolls"
        )
    steps = args.unroll_length * args.batch_size
    if args.total_timesteps < steps:
        raise ConfigError(f"--total-timesteps {args.total_timesteps} is less than one batch ({steps} steps)")
    if not (args.rho_bar > 0 and args.c_bar > 0):
        raise ConfigError("--rho-bar and --c-bar must be positive")
    if args.c_bar > args.rho_bar:
        raise ConfigError(f"--c-bar {args.c_bar} exceeds --rho-bar {args.rho_bar}; V-trace assumes c_bar <= rho_bar")
    if args.actor_timeout <= 0:
        raise ConfigError("--actor-timeout must be positive")
    import ale_py

    gym.register_envs(ale_py)
    try:
        spec = gym.spec(args.env_id)
    except gym.error.Error:
        raise ConfigError(f"unknown env id {args.env_id!r}; use an Atari id such as BreakoutNoFrameskip-v4") from None
    if not str(spec.entry_point).startswith("ale_py"):
        raise ConfigError(f"{args.env_id} is not an Atari (ALE) environment; {SCRIPT} handles Atari only")
    if spec.kwargs.get("frameskip", 1) != 1:
        raise ConfigError(
            f"{args.env_id} already skips frames (frameskip={spec.kwargs['frameskip']}); "
            "use its NoFrameskip-v4 id, the action repeat is done here (detail 9)"
        )
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


# ---- detail 9: the Atari pipeline -----------------------------------------------------------------


class NoopResetEnv(gym.Wrapper):
    """Start each game with 1..noop_max no-ops, so episodes do not all begin in the same state."""

    def __init__(self, env, noop_max=30):
        super().__init__(env)
        self.noop_max = noop_max

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for _ in range(self.np_random.integers(1, self.noop_max + 1)):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class MaxAndSkipEnv(gym.Wrapper):
    """Repeat the action `skip` times; the observation is the pixel-wise max of the last two frames."""

    def __init__(self, env, skip=4):
        super().__init__(env)
        self.skip = skip

    def step(self, action):
        total, terminated, truncated, info = 0.0, False, False, {}
        last_two = []
        for _ in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            last_two = [*last_two[-1:], obs]  # an early game end must not mix in the previous step's frame
            total += reward
            if terminated or truncated:
                break
        return np.maximum(last_two[0], last_two[-1]), total, terminated, truncated, info


class EpisodicLifeEnv(gym.Wrapper):
    """A lost life ends the training episode; the game itself only resets when it is really over."""

    def __init__(self, env):
        super().__init__(env)
        self.lives, self.game_over = 0, True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:  # continue the same game after a lost life
            obs, _, _, _, info = self.env.step(0)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireResetEnv(gym.Wrapper):
    """Press FIRE after a reset, for games that stand still until it is pressed."""

    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(1)
        if terminated or truncated:
            self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(2)
        if terminated or truncated:
            obs, info = self.env.reset(**kwargs)
        return obs, info


class ResizeFrame(gym.ObservationWrapper):
    def __init__(self, env, size=84):
        super().__init__(env)
        self.size = size
        self.observation_space = gym.spaces.Box(0, 255, (size, size), np.uint8)

    def observation(self, obs):
        import cv2

        return cv2.resize(obs, (self.size, self.size), interpolation=cv2.INTER_AREA)


def make_env(env_id, idx, capture_video, run_name, episodic_life=True):
    def thunk():
        import ale_py

        gym.register_envs(ale_py)
        if capture_video and idx == 0:
            env = gym.make(env_id, obs_type="grayscale", render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id, obs_type="grayscale")
        # innermost, so the logged return is the raw full-game score, unclipped and across lives
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = NoopResetEnv(env, noop_max=30)
        env = MaxAndSkipEnv(env, skip=4)
        if episodic_life:
            env = EpisodicLifeEnv(env)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = FireResetEnv(env)
        env = ResizeFrame(env, 84)
        return gym.wrappers.FrameStackObservation(env, 4)

    return thunk


def make_envs(args, actor_id, run_name):
    # SAME_STEP autoreset: the step that ends an episode already returns the next episode's first
    # observation, so obs[t + 1] is always the state the policy acts on next
    thunks = [make_env(args.env_id, actor_id * args.num_envs_per_actor + i, args.capture_video, run_name)
              for i in range(args.num_envs_per_actor)]
    return gym.vector.SyncVectorEnv(thunks, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, copy=False)


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


def conv_section(in_channels, out_channels):
    # detail 11: one section of the deep network: conv 3x3, max-pool 3x3 stride 2, two residual blocks
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1), nn.MaxPool2d(3, stride=2, padding=1),
        ResidualBlock(out_channels), ResidualBlock(out_channels),
    )


class Agent(nn.Module):
    def __init__(self, n_actions, deep=False, channels_last=False):
        super().__init__()
        if deep:  # detail 11: 84 -> 42 -> 21 -> 11 through the three sections
            self.network = nn.Sequential(
                conv_section(4, 16), conv_section(16, 32), conv_section(32, 32),
                nn.ReLU(), nn.Flatten(), layer_init(nn.Linear(32 * 11 * 11, 256)), nn.ReLU(),
            )
        else:  # detail 11: the A3C feed-forward network, 16x8x8/4 -> 32x4x4/2 -> fc256
            self.network = nn.Sequential(
                layer_init(nn.Conv2d(4, 16, 8, stride=4)), nn.ReLU(),
                layer_init(nn.Conv2d(16, 32, 4, stride=2)), nn.ReLU(),
                nn.Flatten(), layer_init(nn.Linear(32 * 9 * 9, 256)), nn.ReLU(),
            )
        self.actor = layer_init(nn.Linear(256, n_actions), std=0.01)
        self.critic = layer_init(nn.Linear(256, 1), std=1.0)
        # a memory layout, not a change of the math (outputs agree to float rounding): weights and inputs
        # in NHWC take oneDNN's fast convolutions on CPU
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.to(memory_format=self.memory_format)

    def hidden(self, x):
        return self.network(x.contiguous(memory_format=self.memory_format).float() / 255.0)

    def get_logits(self, x):
        return self.actor(self.hidden(x))

    def get_logits_and_value(self, x):
        hidden = self.hidden(x)
        return self.actor(hidden), self.critic(hidden).squeeze(-1)


# ---- the math --------------------------------------------------------------------------------------


def vtrace(behaviour_logprobs, target_logprobs, rewards, values, bootstrap_value, discounts, rho_bar=1.0, c_bar=1.0):
    """V-trace targets and policy-gradient advantages (detail 4, seed 002 Sec. 4). Tensors [T, B]; bootstrap_value [B].

    discounts[t] = gamma * (1 - done_t). rho_t = min(rho_bar, pi/mu), c_t = min(c_bar, pi/mu).
    vs_t = V(x_t) + delta_t + discounts_t * c_t * (vs_{t+1} - V(x_{t+1})) with delta_t = rho_t * (r_t +
    discounts_t * V(x_{t+1}) - V(x_t)) (Remark 1), and vs_T = V(x_T) = bootstrap_value.
    pg_advantages_t = rho_t * (r_t + discounts_t * vs_{t+1} - V(x_t)). No gradient flows through either output.
    """
    with torch.no_grad():
        ratios = (target_logprobs - behaviour_logprobs).exp()
        rhos = ratios.clamp(max=rho_bar)
        cs = ratios.clamp(max=c_bar)
        next_values = torch.cat([values[1:], bootstrap_value.unsqueeze(0)])
        deltas = rhos * (rewards + discounts * next_values - values)
        vs_minus_v = torch.zeros_like(values)
        acc = torch.zeros_like(bootstrap_value)
        for t in reversed(range(values.shape[0])):
            acc = deltas[t] + discounts[t] * cs[t] * acc
            vs_minus_v[t] = acc
        vs = vs_minus_v + values
        next_vs = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)])
        pg_advantages = rhos * (rewards + discounts * next_vs - values)
    return vs, pg_advantages


def sample_categorical(logits):
    """Inverse-CDF sampling of Categorical(logits), one uniform per row (twice as fast as torch.multinomial)."""
    u = torch.rand(logits.shape[:-1] + (1,), device=logits.device)
    return (logits.softmax(-1).cumsum(-1) < u).sum(-1).clamp_(max=logits.shape[-1] - 1)


def categorical_logprob_entropy(logits, actions):
    """Log-probability of `actions` and entropy of Categorical(logits), without building a distribution."""
    logp = logits.log_softmax(-1)
    return logp.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


def impala_losses(target_logprobs, entropy, values, vs, pg_advantages, args):
    """Detail 5: the three terms of the V-trace actor-critic update, summed over time and batch.

    Returns (loss, pg_loss, baseline_loss, entropy_sum).
    """
    pg_loss = -(pg_advantages * target_logprobs).sum()
    baseline_loss = 0.5 * ((vs - values) ** 2).sum()  # gradient (V - vs) grad V, as in the paper
    entropy_sum = entropy.sum()
    loss = pg_loss + args.vf_coef * baseline_loss - args.ent_coef * entropy_sum
    return loss, pg_loss, baseline_loss, entropy_sum


def linear_lr(update, num_updates, lr):
    """Detail 7: lr at `update` (1-based), reaching exactly 0 at the last update."""
    return lr * (1.0 - (update - 1.0) / (num_updates - 1)) if num_updates > 1 else lr


def explained_variance(y_pred, y_true):
    var_y = np.var(y_true)
    return np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y


def update(agent, optimizer, batch, args):
    """One learner step on a batch of unrolls (tensors [T(+1), B, ...] on the learner's device)."""
    T, B = batch["actions"].shape
    logits, values = agent.get_logits_and_value(batch["obs"].flatten(0, 1))
    logits, values = logits.view(T + 1, B, -1), values.view(T + 1, B)
    target_logprobs, entropy = categorical_logprob_entropy(logits[:-1], batch["actions"])
    discounts = args.gamma * (1.0 - batch["dones"])
    vs, pg_advantages = vtrace(batch["logprobs"], target_logprobs, batch["rewards"], values[:-1], values[-1],
                               discounts, args.rho_bar, args.c_bar)
    loss, pg_loss, baseline_loss, entropy_sum = impala_losses(target_logprobs, entropy, values[:-1], vs,
                                                              pg_advantages, args)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)  # detail 8
    optimizer.step()

    with torch.no_grad():
        logratio = target_logprobs - batch["logprobs"]
        ratio = logratio.exp()
        n = T * B  # logged per step, so the numbers do not scale with the batch
        return {
            "value_loss": baseline_loss.item() / n, "policy_loss": pg_loss.item() / n, "entropy": entropy_sum.item() / n,
            "old_approx_kl": (-logratio).mean().item(), "approx_kl": ((ratio - 1) - logratio).mean().item(),
            "clipfrac": (ratio > args.rho_bar).float().mean().item(),
            "explained_variance": explained_variance(values[:-1].detach().cpu().numpy(), vs.cpu().numpy()),
            "max_abs_logratio": logratio.abs().max().item(), "grad_norm": grad_norm.item(),
        }


# ---- details 1-3: actors, shared buffers and weights -----------------------------------------------


def create_buffers(args, n_actions):
    """Shared-memory unroll buffers, one row per buffer; `obs` holds T+1 frames (the last for bootstrapping)."""
    T, k, n = args.unroll_length, args.num_envs_per_actor, args.num_buffers
    specs = {
        "obs": ((n, T + 1, k, 4, 84, 84), torch.uint8),
        "actions": ((n, T, k), torch.int64),
        "rewards": ((n, T, k), torch.float32),
        "dones": ((n, T, k), torch.float32),
        "logprobs": ((n, T, k), torch.float32),
        "version": ((n,), torch.int64),
    }
    return {key: torch.zeros(shape, dtype=dtype).share_memory_() for key, (shape, dtype) in specs.items()}


def get_or_stop(q, stop_event, timeout=0.5):
    """A blocking get that gives up when the run stops or the learner process is gone."""
    while not stop_event.is_set():
        try:
            return q.get(timeout=timeout)
        except queue.Empty:
            parent = mp.parent_process()
            if parent is not None and not parent.is_alive():
                return None
    return None


def actor_loop(actor_id, args, run_name, n_actions, buffers, shared_state, version, lock, free_queue, full_queue,
               stop_event):
    """One actor process: step its envs with its own policy copy and fill the buffers the learner frees."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the learner, which stops every actor
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked actor must not inherit the learner's handler
    torch.set_num_threads(1)
    envs = None
    try:
        torch.manual_seed(args.seed * 1000 + actor_id)
        envs = make_envs(args, actor_id, run_name)
        agent = Agent(n_actions, args.deep, args.channels_last)  # the learner's layout: weight copies are plain
        local_version = -1
        next_obs, _ = envs.reset(seed=args.seed * 1000 + actor_id * args.num_envs_per_actor)
        unrolls = 0
        while True:
            idx = get_or_stop(free_queue, stop_event)
            if idx is None:
                break
            # detail 1: refresh the policy copy from the learner's latest weights at the start of each unroll
            with lock:
                if version.value != local_version:
                    agent.load_state_dict(shared_state)
                    local_version = version.value
            buffers["version"][idx] = local_version
            obs, actions, rewards = buffers["obs"][idx], buffers["actions"][idx], buffers["rewards"][idx]
            dones, logprobs = buffers["dones"][idx], buffers["logprobs"][idx]
            obs[0] = torch.from_numpy(next_obs)
            episodes = []
            for t in range(args.unroll_length):
                with torch.no_grad():
                    logits = agent.get_logits(obs[t])
                    action = sample_categorical(logits)
                    logprobs[t] = categorical_logprob_entropy(logits, action)[0]
                actions[t] = action
                next_obs, reward, terminations, truncations, infos = envs.step(action.numpy())
                obs[t + 1] = torch.from_numpy(next_obs)
                clipped = np.clip(reward, -1.0, 1.0)  # detail 9: rewards clipped to [-1, 1]
                if args.bootstrap_truncated and truncations.any():
                    for i in np.flatnonzero(truncations & ~terminations):
                        final = torch.as_tensor(np.asarray(infos["final_obs"][i])).unsqueeze(0)
                        with torch.inference_mode():
                            clipped[i] += args.gamma * agent.get_logits_and_value(final)[1].item()
                rewards[t] = torch.from_numpy(clipped.astype(np.float32))
                dones[t] = torch.from_numpy((terminations | truncations).astype(np.float32))
                final_info = infos.get("final_info", {})
                if "episode" in final_info:  # only at a real game over, not at a lost life
                    for i in np.flatnonzero(final_info["_episode"]):
                        episodes.append((float(final_info["episode"]["r"][i]), int(final_info["episode"]["l"][i])))
            unrolls += 1
            if args.actor_fail_after and actor_id == 0 and unrolls >= args.actor_fail_after:
                raise RuntimeError(f"injected failure after {unrolls} unrolls (--actor-fail-after)")
            full_queue.put((idx, episodes))  # detail 2: an index and a few numbers, never the tensors
    except Exception:
        full_queue.put(("error", actor_id, traceback.format_exc()))
        full_queue.close()
        full_queue.join_thread()  # make sure the learner can read the error before this process is gone
        sys.exit(1)
    finally:
        if envs is not None:
            envs.close()


def next_batch(full_queue, n, actors, timeout):
    """Buffer indices of the next `n` unrolls and the games they finished; raises ActorError on a crash."""
    indices, episodes, waited = [], [], 0.0
    while len(indices) < n:
        try:
            msg = full_queue.get(timeout=1.0)
        except queue.Empty:
            waited += 1.0
            for i, p in enumerate(actors):
                if not p.is_alive():
                    raise ActorError(f"actor {i} exited with code {p.exitcode} without reporting an error")
            if waited >= timeout:
                raise ActorError(f"no unroll arrived for {timeout:.0f} s although every actor is alive")
            continue
        if msg[0] == "error":
            raise ActorError(f"actor {msg[1]} crashed:\n{msg[2].rstrip()}")
        indices.append(msg[0])
        episodes.extend(msg[1])
        waited = 0.0
    return indices, episodes


def stop_actors(actors, stop_event, queues):
    stop_event.set()
    for p in actors:
        p.join(timeout=5)
    for p in actors:
        if p.is_alive():
            p.terminate()
            p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()
    for q in queues:  # nobody reads these any more: do not block exit flushing them
        q.cancel_join_thread()
        q.close()


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
    """Full-game scores (all lives, unclipped) of the agent's sampling policy, seeded for repeatability."""
    env = make_env(env_id, 1, False, "", episodic_life=False)()
    generator = torch.Generator(device=device).manual_seed(seed)
    returns = []
    obs, _ = env.reset(seed=seed)
    while len(returns) < eval_episodes:
        episode_return, done = 0.0, False
        while not done:
            with torch.inference_mode():
                logits = agent.get_logits(torch.as_tensor(np.asarray(obs), device=device).unsqueeze(0))[0]
                u = torch.rand((), generator=generator, device=device)
                action = int((logits.softmax(-1).cumsum(-1) < u).sum().clamp(max=logits.shape[-1] - 1))
            obs, reward, terminated, truncated, _ = env.step(action)
            episode_return += float(reward)
            done = terminated or truncated
        returns.append(episode_return)
        obs, _ = env.reset()
    env.close()
    return returns


def n_actions_of(env_id):
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(env_id)
    n = env.action_space.n
    env.close()
    return n


def evaluate(checkpoint_path, eval_episodes=10, seed=0, device="cpu"):
    """Load a checkpoint of this script and return the full-game scores of `eval_episodes` games."""
    ckpt = load_checkpoint(checkpoint_path)
    env_id = ckpt["args"]["env_id"]
    agent = Agent(n_actions_of(env_id), ckpt["args"]["deep"]).to(device)
    agent.load_state_dict(ckpt["model"])
    return evaluate_agent(agent, env_id, eval_episodes, seed, device)


def train(args: Args):
    """Train; return a dict with the per-game returns/lengths, per-update losses and lags, the agent and optimizer."""
    ckpt = None
    if args.resume:
        ckpt = load_checkpoint(args.resume)
        args = Args(**{**ckpt["args"], "resume": args.resume})
    check_args(args)
    steps_per_update = args.unroll_length * args.batch_size
    args.num_updates = args.total_timesteps // steps_per_update
    buffers_per_batch = args.batch_size // args.num_envs_per_actor
    # two spare buffers per actor keep the actors busy while the learner holds a batch
    args.num_buffers = buffers_per_batch + 2 * args.num_actors
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

    n_actions = n_actions_of(args.env_id)
    agent = Agent(n_actions, args.deep, args.channels_last).to(device)
    # detail 6: RMSProp, epsilon 0.01, no momentum
    optimizer = torch.optim.RMSprop(agent.parameters(), lr=args.learning_rate, alpha=args.rmsprop_alpha,
                                    eps=args.rmsprop_eps, momentum=0.0)
    start_update, global_step = 1, 0
    if ckpt:
        agent.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start_update, global_step = ckpt["update"] + 1, ckpt["global_step"]
        set_rng_states(ckpt["rng"])
        print(f"{SCRIPT}: resuming at update {start_update}; the actors start fresh episodes", file=sys.stderr)

    ctx = mp.get_context("spawn" if device.type == "cuda" else "fork")
    buffers = create_buffers(args, n_actions)
    shared_state = {k: v.detach().cpu().clone().share_memory_() for k, v in agent.state_dict().items()}
    version = ctx.Value("q", start_update - 1, lock=False)  # learner updates applied so far
    lock, stop_event = ctx.Lock(), ctx.Event()
    free_queue, full_queue = ctx.Queue(), ctx.Queue()
    # detail 3: with --sync only one batch worth of buffers circulates, handed out after each update
    for i in range(buffers_per_batch if args.sync else args.num_buffers):
        free_queue.put(i)
    actors = [
        ctx.Process(target=actor_loop, daemon=True, name=f"impala-actor-{i}",
                    args=(i, args, run_name, n_actions, buffers, shared_state, version, lock, free_queue, full_queue,
                          stop_event))
        for i in range(args.num_actors)
    ]
    for p in actors:
        p.start()

    history = {"episodic_return": [], "episodic_length": [], "losses": [], "learning_rate": [], "policy_lag": [],
               "actor_pids": [p.pid for p in actors]}

    def checkpoint_state(update_idx):
        return {"script": SCRIPT, "args": asdict(args), "run_name": run_name, "update": update_idx,
                "global_step": global_step, "model": agent.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": rng_states()}

    ckpt_path = f"runs/{run_name}/checkpoint.pt"
    start_time, start_step = time.time(), global_step
    try:
        for update_idx in range(start_update, args.num_updates + 1):
            if args.anneal_lr:
                optimizer.param_groups[0]["lr"] = linear_lr(update_idx, args.num_updates, args.learning_rate)
            indices, episodes = next_batch(full_queue, buffers_per_batch, actors, args.actor_timeout)
            rows = torch.tensor(indices)
            # indexing copies the rows out of shared memory: the buffers can go back to the actors at once
            batch = {key: buffers[key][rows] for key in ("obs", "actions", "rewards", "dones", "logprobs")}
            lag = (update_idx - 1) - buffers["version"][rows]
            if not args.sync:
                for i in indices:
                    free_queue.put(i)
            # [n, T, k, ...] -> [T, n * k, ...]
            batch = {key: v.transpose(0, 1).flatten(1, 2).to(device) for key, v in batch.items()}
            losses = update(agent, optimizer, batch, args)
            with lock:  # detail 1: publish the new weights for the next unrolls
                for key, v in agent.state_dict().items():
                    shared_state[key].copy_(v)
                version.value = update_idx
            if args.sync:
                for i in indices:
                    free_queue.put(i)
            global_step += steps_per_update

            for ret, length in episodes:
                writer.add_scalar("charts/episodic_return", ret, global_step)
                writer.add_scalar("charts/episodic_length", length, global_step)
                history["episodic_return"].append(ret)
                history["episodic_length"].append(length)
            history["losses"].append(losses)
            history["learning_rate"].append(optimizer.param_groups[0]["lr"])
            history["policy_lag"].append(lag.tolist())
            writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
            writer.add_scalar("charts/policy_lag", lag.float().mean().item(), global_step)
            for key, v in losses.items():
                writer.add_scalar(f"losses/{key}", v, global_step)
            sps = int((global_step - start_step) / (time.time() - start_time))
            writer.add_scalar("charts/SPS", sps, global_step)
            if update_idx % 10 == 0 or update_idx == args.num_updates:
                recent = history["episodic_return"][-20:]
                print(f"update {update_idx}/{args.num_updates} step {global_step} SPS {sps} "
                      f"lag {lag.float().mean():.2f} return(last 20) {np.mean(recent) if recent else float('nan'):.1f}")

            if args.save_model and (update_idx % args.save_every == 0 or update_idx == args.num_updates):
                save_checkpoint(ckpt_path, checkpoint_state(update_idx))
    finally:  # the end of training, Ctrl-C or a crash: no actor outlives the learner
        stop_actors(actors, stop_event, [free_queue, full_queue])
        writer.close()
    history.update(run_name=run_name, global_step=global_step, agent=agent, optimizer=optimizer,
                   checkpoint=ckpt_path if args.save_model else None)
    return history


if __name__ == "__main__":
    import tyro

    cli_args = tyro.cli(Args)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` and timeouts stop the actors as Ctrl-C does
    try:
        if cli_args.eval_checkpoint:
            returns = evaluate(cli_args.eval_checkpoint, cli_args.eval_episodes, cli_args.seed)
            print(f"mean return over {len(returns)} episodes: {np.mean(returns):.2f} +- {np.std(returns):.2f}")
        else:
            train(cli_args)
    except ConfigError as e:
        sys.exit(f"{SCRIPT}: error: {e}")
    except ActorError as e:
        sys.exit(f"{SCRIPT}: error: {e}")
    except KeyboardInterrupt:
        sys.exit(f"{SCRIPT}: interrupted; every actor has been stopped")
