"""PPO for continuous-action tasks (MuJoCo), separate actor and critic networks.

Run:   python ppo_continuous_action.py --env-id HalfCheetah-v4
Eval:  python ppo_continuous_action.py --eval-checkpoint runs/<run>/checkpoint.pt --eval-episodes 10

The 13 core implementation details of "The 37 Implementation Details of PPO" (seed 000):
  1. vectorized architecture: N envs in a gymnasium SyncVectorEnv, fixed-length rollouts of T steps,
     auto-reset in SAME_STEP mode so `next_obs` after a done is already the new episode's first obs
  2. orthogonal init: hidden layers std sqrt(2), policy head 0.01, value head 1.0, biases 0
  3. Adam epsilon 1e-5
  4. learning rate annealed linearly to exactly 0 at the last iteration
  5. GAE with value bootstrap from the observation after the rollout; returns = advantages + values
  6. minibatch updates: each epoch shuffles the batch and splits it into disjoint minibatches
  7. advantages normalised per minibatch
  8. clipped surrogate objective
  9. clipped value loss (0.5 * max(unclipped, clipped))
  10. loss = pg_loss - ent_coef * entropy + vf_coef * v_loss, one optimizer for both networks
  11. global gradient norm clipped to max_grad_norm
  12. debug variables: policy_loss, value_loss, entropy, old_approx_kl, approx_kl, clipfrac,
      explained_variance
  13. separate 64-64 tanh actor and critic MLPs (ppo_shared.py is the shared-trunk variant)

The 9 details for continuous action domains (seed 000), named C1-C9 in the comments:
  C1. Gaussian policy: the actor outputs the mean of a normal distribution
  C2. state-independent log standard deviation, a parameter initialised to 0
  C3. independent action components: log-probabilities (and entropies) summed over action dimensions
  C4. separate 64-64 tanh policy (mean head std 0.01) and value (head std 1.0) networks
  C5. sampled actions clipped to the action bounds for the env; the unclipped action is stored and trained on
  C6. observations normalised by a running mean and variance (as baselines' VecNormalize)
  C7. normalised observations clipped to [-10, 10]
  C8. rewards divided by the standard deviation of a running discounted return
  C9. scaled rewards clipped to [-10, 10]

Deliberate choices (reference behaviour stays the default):
  - --bootstrap-truncated (off by default, as in the reference): a truncated episode bootstraps from
    the value of its final observation instead of being treated as terminal.
  - the rollout runs only the actor per step; values and log-probs of the whole rollout come from one
    batched forward pass after it (same parameters, so the same numbers, much less Python overhead).
  - --torch-threads 1 by default: for 64-unit networks extra intra-op threads only add overhead.
  - C6-C9 follow baselines' VecNormalize on the vector env, as seed 000 describes them. CleanRL's published
    v4 runs used gymnasium's per-env NormalizeObservation/NormalizeReward wrappers instead, which differ in two
    ways: the terminal observation of an episode enters the statistics, and the running return restarts only
    on termination (not truncation) and before adding that step's reward. --gymnasium-normalization switches
    to their rules (for one env, the default, exactly their numbers; tested against the wrappers themselves).
  - the normalisation statistics are saved in the checkpoint; evaluation restores and freezes them, so a
    saved agent sees the observations it was trained on (the reference's saved models evaluate far below
    their training score because evaluation starts fresh statistics).
  - on CPU the rollout computes the action mean with a numpy forward pass over *views* of the actor's
    weights (NumpyPolicy: same network, same numbers, a fraction of torch's per-step overhead on one
    observation); --no-numpy-rollout uses torch, as on CUDA. The Gaussian noise is torch's either way.
  - all parameters live in one flat tensor (flat_parameters), so gradient clipping and Adam are one
    op each per minibatch instead of one per layer; the model and its state_dict are unchanged.
  - MuJoCo envs pickle only their constructor arguments: the checkpoint adds each one's full physics
    state and random generator, so a resumed run continues the same episodes.
  - the update does per epoch what needs no gradient: one gather per tensor, the advantage normalisation of
    all minibatches at once (each with its own statistics) and, after the epochs, the KL/clipfrac statistics
    of every minibatch; clip_grad_norm is nn.utils.clip_grad_norm_'s rule in fewer ops (both tested equal).
"""

import gc
import math
import os
import pickle
import random
import sys
import time
from dataclasses import asdict, dataclass
from typing import Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

SCRIPT = "ppo_continuous_action.py"


@dataclass
class Args:
    exp_name: str = "ppo_continuous_action"
    """the name of this experiment (the first part of the run name)"""
    seed: int = 1
    """seed of python, numpy, torch and the environments"""
    torch_deterministic: bool = True
    """if toggled, sets `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """use CUDA when available (falls back to CPU with a notice)"""
    torch_threads: int = 1
    """torch intra-op threads (0 keeps torch's default); 1 is fastest for these small networks"""
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
    save_every: int = 50
    """iterations between periodic checkpoints (with --save-model)"""
    resume: Optional[str] = None
    """path of a checkpoint of this script to continue training from (its args are used)"""
    eval_checkpoint: Optional[str] = None
    """evaluate this checkpoint instead of training, and print the mean return"""
    eval_episodes: int = 10
    """episodes to run with --eval-checkpoint"""

    # Algorithm specific arguments
    env_id: str = "HalfCheetah-v4"
    """the id of the environment (gymnasium MuJoCo v4 and v5 ids both work)"""
    total_timesteps: int = 1000000
    """total environment steps of the experiment"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer"""
    num_envs: int = 1
    """the number of parallel environments"""
    num_steps: int = 2048
    """the number of steps to run in each environment per rollout"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 (detail 4)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda of generalized advantage estimation"""
    num_minibatches: int = 32
    """the number of minibatches per epoch"""
    update_epochs: int = 10
    """the number of epochs over each rollout"""
    norm_adv: bool = True
    """normalise advantages per minibatch (detail 7)"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """use the clipped value loss (detail 9)"""
    ent_coef: float = 0.0
    """coefficient of the entropy bonus"""
    vf_coef: float = 0.5
    """coefficient of the value loss"""
    max_grad_norm: float = 0.5
    """the maximum global norm of the gradients"""
    target_kl: Optional[float] = None
    """stop the epochs early when approx_kl exceeds this (off in the reference)"""
    bootstrap_truncated: bool = False
    """bootstrap truncated (time-limit) episodes from the value of their final observation"""
    numpy_rollout: bool = True
    """on CPU, compute rollout action means with NumpyPolicy (the same actor in numpy; off: torch)"""
    clip_obs: float = 10.0
    """normalised observations are clipped to [-clip_obs, clip_obs] (detail C7)"""
    clip_reward: float = 10.0
    """scaled rewards are clipped to [-clip_reward, clip_reward] (detail C9)"""
    gymnasium_normalization: bool = False
    """normalise as gymnasium's per-env NormalizeObservation/NormalizeReward (CleanRL's v4 runs) instead of
    baselines' VecNormalize: terminal observations enter the statistics; the return restarts only on termination"""

    # filled in at runtime
    batch_size: int = 0
    """the batch size (computed: num_envs * num_steps)"""
    minibatch_size: int = 0
    """the minibatch size (computed: batch_size // num_minibatches)"""
    num_iterations: int = 0
    """the number of iterations (computed: total_timesteps // batch_size)"""


class ConfigError(ValueError):
    """Bad input found before training; __main__ prints it as one line."""


def check_args(args: Args) -> None:
    """Fail before any training with a message that names the problem and the fix."""
    if args.total_timesteps <= 0:
        raise ConfigError(f"--total-timesteps must be positive, got {args.total_timesteps}")
    if args.num_envs <= 0 or args.num_steps <= 0 or args.num_minibatches <= 0:
        raise ConfigError("--num-envs, --num-steps and --num-minibatches must be positive")
    batch = args.num_envs * args.num_steps
    if batch % args.num_minibatches != 0:
        raise ConfigError(
            f"num_envs * num_steps = {batch} is not divisible by --num-minibatches {args.num_minibatches}; "
            "choose a number of minibatches that divides it"
        )
    if args.total_timesteps < batch:
        raise ConfigError(f"--total-timesteps {args.total_timesteps} is less than one rollout ({batch} steps)")
    try:
        gym.spec(args.env_id)
    except gym.error.Error:
        raise ConfigError(f"unknown env id {args.env_id!r}; see gymnasium.pprint_registry() for the ids") from None
    try:
        probe = gym.make(args.env_id)
    except (gym.error.DependencyNotInstalled, ImportError) as e:
        raise ConfigError(f"{args.env_id} could not be created ({e}): pip install 'gymnasium[mujoco]'") from None
    space = probe.action_space
    probe.close()
    if not isinstance(space, gym.spaces.Box):
        raise ConfigError(
            f"{args.env_id} has a {type(space).__name__} action space; {SCRIPT} handles Box only "
            "(use ppo.py for Discrete actions)"
        )
    if args.capture_video:
        try:
            import moviepy  # noqa: F401
        except ImportError as e:
            raise ConfigError(f"--capture-video needs moviepy, which did not import ({e}): pip install moviepy") from None
    if args.track:
        try:
            import wandb  # noqa: F401
        except ImportError as e:
            raise ConfigError(f"--track needs wandb, which did not import ({e}): pip install wandb") from None


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        return env

    return thunk


def make_envs(args, run_name, restored=None):
    # detail 1: SAME_STEP autoreset, as in the reference's gym: the step that ends an episode already
    # returns the next episode's first observation (the final one is in info["final_obs"])
    thunks = [make_env(args.env_id, i, args.capture_video, run_name) for i in range(args.num_envs)]
    if restored is not None:  # sub-envs unpickled from a checkpoint
        thunks = [lambda env=env: env for env in restored]
    # copy=False: the rollout copies each observation into its buffer before the next step overwrites it
    return gym.vector.SyncVectorEnv(thunks, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, copy=False)


def env_snapshot(envs):
    """The sub-envs pickled, so that a resumed run continues the same episodes; None if they cannot be."""
    try:
        return pickle.dumps((envs.envs, [physics_state(env.unwrapped) for env in envs.envs]))
    except Exception:
        return None


def physics_state(env):
    """A MuJoCo env's full integration state and random generator (its pickle rebuilds a fresh env); None otherwise."""
    if not (hasattr(env, "model") and hasattr(env, "data")):
        return None
    import mujoco

    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    state = np.empty(mujoco.mj_stateSize(env.model, spec))
    mujoco.mj_getState(env.model, env.data, state, spec)
    return state, env.np_random.bit_generator.state


def restore_envs(snapshot):
    sub_envs, physics = pickle.loads(snapshot)
    for env, saved in zip(sub_envs, physics):
        if saved is not None:
            import mujoco

            u = env.unwrapped
            mujoco.mj_setState(u.model, u.data, saved[0], mujoco.mjtState.mjSTATE_INTEGRATION)
            u.np_random.bit_generator.state = saved[1]
    return sub_envs


class RunningMeanStd:
    """Running mean and variance of a stream of batches (the parallel update of Chan et al.), as in baselines.

    Starts from mean 0, variance 1 with a negligible count, so the first batch sets the statistics.
    """

    def __init__(self, shape=(), epsilon=1e-4):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = epsilon

    def update(self, x):
        # sums rather than x.mean / x.var: this runs every env step, and numpy's mean costs 4x a sum here
        batch_count = x.shape[0]
        batch_mean = x.sum(0) / batch_count
        batch_var = np.square(x - batch_mean).sum(0) / batch_count
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean = self.mean + delta * (batch_count / total)
        m2 = self.var * self.count + batch_var * batch_count + np.square(delta) * (self.count * batch_count / total)
        self.var = m2 / total
        self.count = total

    def state_dict(self):
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": self.count}

    def load_state_dict(self, state):
        self.mean, self.var, self.count = state["mean"].copy(), state["var"].copy(), state["count"]


def normalize_obs(obs, obs_rms, clip):
    """Details C6-C7: standardise by the running statistics, then clip. Never updates them."""
    # np.minimum/np.maximum: the same clip at half the call overhead of np.clip
    return np.minimum(np.maximum((obs - obs_rms.mean) / np.sqrt(obs_rms.var + 1e-8), -clip), clip).astype(np.float32)


class RewardScaler:
    """Details C8-C9: reward / std of a running discounted return (mean not subtracted), then clipped.

    VecNormalize's rule (the default): the running return of an env restarts from 0 after each step that
    ended its episode. gymnasium's NormalizeReward rule (gymnasium_rule=True): it restarts only on
    termination, and before that step's reward is added.
    """

    def __init__(self, num_envs, gamma, clip, gymnasium_rule=False):
        self.gamma, self.clip, self.gymnasium_rule = gamma, clip, gymnasium_rule
        self.ret = np.zeros(num_envs)
        self.ret_rms = RunningMeanStd()

    def __call__(self, reward, terminated, done):
        if self.gymnasium_rule:
            self.ret = self.ret * self.gamma * (1 - terminated) + reward
        else:
            self.ret = self.ret * self.gamma + reward
        self.ret_rms.update(self.ret)
        scaled = np.minimum(np.maximum(reward / np.sqrt(self.ret_rms.var + 1e-8), -self.clip), self.clip)
        if not self.gymnasium_rule:
            self.ret[done] = 0.0
        return scaled

    def state_dict(self):
        return {"ret": self.ret.copy(), "ret_rms": self.ret_rms.state_dict()}

    def load_state_dict(self, state):
        self.ret = state["ret"].copy()
        self.ret_rms.load_state_dict(state["ret_rms"])


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    # detail 2: orthogonal weights, constant biases
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim, action_dim):
        super().__init__()
        # detail 13 / C4: separate actor and critic networks, 64-64 tanh each
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        # detail C1: the actor outputs the mean of the Gaussian policy
        self.actor_mean = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, action_dim), std=0.01),
        )
        # detail C2: the log std is a parameter, not an output (state independent), initialised to 0
        self.actor_logstd = nn.Parameter(torch.zeros(1, action_dim))

    def get_value(self, x):
        return self.critic(x).squeeze(-1)

    def get_action_mean(self, x):
        return self.actor_mean(x)

    def get_action_mean_and_value(self, x):
        return self.actor_mean(x), self.critic(x).squeeze(-1)

    def policy_layers(self):
        """The layers from observation to action mean, in order (for NumpyPolicy)."""
        return list(self.actor_mean)


def flat_parameters(module):
    """Move all of `module`'s parameters (and their gradients) into one flat tensor; return it as a Parameter.

    Each parameter becomes a view of the flat tensor and each .grad a view of its flat gradient, so
    backward() fills the flat gradient in place, and clipping and the optimizer step touch one tensor.
    Call it after .to(device); zero the gradient with zero_grad(set_to_none=False) to keep the views.
    """
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    flat_grad = torch.zeros_like(flat)
    offset = 0
    for p in module.parameters():
        n = p.numel()
        p.data = flat[offset:offset + n].view_as(p)
        p.grad = flat_grad[offset:offset + n].view_as(p)
        offset += n
    flat = nn.Parameter(flat)
    flat.grad = flat_grad
    return flat


class NumpyPolicy:
    """The actor's action mean in numpy, for the rollout on CPU.

    The weights are numpy views of the actor's CPU parameters, not copies: optimizer steps and
    load_state_dict are seen at once. Handles Linear and Tanh layers (a variant with other layers
    passes --no-numpy-rollout).
    """

    def __init__(self, layers):
        self.layers = []
        for layer in layers:
            if isinstance(layer, nn.Linear):
                self.layers.append((layer.weight.detach().numpy().T, layer.bias.detach().numpy()))
            elif isinstance(layer, nn.Tanh):
                self.layers.append(None)
            else:
                raise ConfigError(f"NumpyPolicy handles Linear and Tanh layers, not {type(layer).__name__}; "
                                  "pass --no-numpy-rollout")

    def mean(self, obs):
        h = obs
        for layer in self.layers:
            h = np.tanh(h) if layer is None else h @ layer[0] + layer[1]
        return h


def compute_gae(rewards, values, dones, next_value, gamma, gae_lambda):
    """Generalized advantage estimation (detail 5). Tensors [T, N]; next_value [N].

    dones[t] = 1 when the transition at step t ended its episode, so neither the value of the next
    step nor its advantage flows back across it. Returns (advantages, TD(lambda) returns).
    The T-step recursion runs in numpy: on arrays of N elements a numpy op costs a fraction of a torch op.
    """
    r, v, d = (x.detach().cpu().numpy() for x in (rewards, values, dones))
    next_v = next_value.detach().cpu().numpy()
    nextnonterminal = 1.0 - d
    nextvalues = np.concatenate([v[1:], next_v[None]])
    deltas = r + gamma * nextvalues * nextnonterminal - v  # all T TD errors at once; only the sum below recurses
    discounts = gamma * gae_lambda * nextnonterminal
    advantages = np.zeros_like(deltas)
    lastgaelam = np.zeros_like(next_v)
    for t in reversed(range(r.shape[0])):
        lastgaelam = deltas[t] + discounts[t] * lastgaelam
        advantages[t] = lastgaelam
    advantages = torch.as_tensor(advantages, device=rewards.device)
    return advantages, advantages + values


def sample_gaussian(mean, logstd, generator=None):
    """A sample of Normal(mean, exp(logstd)) per row (detail C1); unbounded, the env step clips it (C5)."""
    noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
    return mean + logstd.exp() * noise


def gaussian_logprob_entropy(mean, logstd, actions):
    """Log-probability of `actions` and entropy of Normal(mean, exp(logstd)), without building a distribution.

    Detail C3: the action components are independent, so both are sums over the action dimensions.
    """
    logstd = logstd.expand_as(mean)
    logp = -0.5 * ((actions - mean) / logstd.exp()) ** 2 - logstd - 0.5 * math.log(2 * math.pi)
    return logp.sum(-1), (0.5 + 0.5 * math.log(2 * math.pi) + logstd).sum(-1)


def normalize_advantages(advantages):
    """Detail 7: zero mean and unit std within each minibatch. Works along the last dim, so the
    [num_minibatches, minibatch_size] advantages of an epoch are done at once, each row with its own statistics."""
    return (advantages - advantages.mean(-1, keepdim=True)) / (advantages.std(-1, keepdim=True) + 1e-8)


def ppo_losses(newlogprob, oldlogprob, advantages, newvalue, oldvalue, returns, entropy, args):
    """Clipped surrogate (detail 8), clipped value loss (detail 9), overall loss (detail 10).

    `advantages` are used as given (update() has normalised them when --norm-adv).
    Returns (loss, pg_loss, v_loss, entropy_loss, logratio); logratio = log(new / old) feeds ratio_stats.
    """
    logratio = newlogprob - oldlogprob
    ratio = logratio.exp()
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

    if args.clip_vloss:
        v_loss_unclipped = (newvalue - returns) ** 2
        v_clipped = torch.clamp(newvalue, oldvalue - args.clip_coef, oldvalue + args.clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
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


def clip_grad_norm(parameters, max_norm):
    """Detail 11: scale all gradients by max_norm / (norm + 1e-6) when that is below 1, where norm is their global
    L2 norm: nn.utils.clip_grad_norm_'s rule and result, in a third of its ops on one flat gradient.
    Returns the norm before clipping."""
    grads = [p.grad for p in parameters]
    norms = [torch.linalg.vector_norm(g) for g in grads]
    norm = norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms))
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale)
    return norm


def linear_lr(iteration, num_iterations, lr):
    """Detail 4: lr at `iteration` (1-based), reaching exactly 0 at the last iteration."""
    return lr * (1.0 - (iteration - 1.0) / (num_iterations - 1)) if num_iterations > 1 else lr


def minibatch_indices(batch_size, minibatch_size, device="cpu"):
    """Detail 6: shuffle the batch and split it into disjoint minibatches that cover all of it: row i of the
    returned [batch_size // minibatch_size, minibatch_size] tensor indexes minibatch i."""
    return torch.randperm(batch_size, device=device).view(-1, minibatch_size)


def update(agent, optimizer, b, args):
    """The learning phase: update_epochs passes over batch `b` (a dict of flat tensors) in minibatches.

    Returns the last minibatch's losses (as in the reference's logs; clipfrac: the mean over minibatches) and
    the first minibatch's ratio/clipfrac/approx_kl, which must be exactly 1/0/0 as nothing has changed yet.
    """
    logratios = []
    for epoch in range(args.update_epochs):
        idx = minibatch_indices(args.batch_size, args.minibatch_size, b["obs"].device)
        shuffled = {k: v[idx] for k, v in b.items()}  # one gather per tensor per epoch; minibatch i is row i
        if args.norm_adv:
            shuffled["advantages"] = normalize_advantages(shuffled["advantages"])
        for i in range(args.num_minibatches):
            mb = {k: v[i] for k, v in shuffled.items()}
            newmean, newvalue = agent.get_action_mean_and_value(mb["obs"])
            newlogprob, entropy = gaussian_logprob_entropy(newmean, agent.actor_logstd, mb["actions"])
            loss, pg_loss, v_loss, entropy_loss, logratio = ppo_losses(
                newlogprob, mb["logprobs"], mb["advantages"], newvalue, mb["values"], mb["returns"], entropy, args,
            )
            logratios.append(logratio.detach())  # the statistics wait until after the loop: fewer ops per step
            optimizer.zero_grad(set_to_none=False)  # keeps the parameters' .grad views of the flat gradient
            loss.backward()
            clip_grad_norm(optimizer.param_groups[0]["params"], args.max_grad_norm)
            optimizer.step()
        if args.target_kl is not None and ratio_stats(logratios[-1], args.clip_coef)[1] > args.target_kl:
            break
    old_approx_kl, approx_kl, _ = ratio_stats(logratios[-1], args.clip_coef)
    _, first_kl, first_clipfrac = ratio_stats(logratios[0], args.clip_coef)
    first = {"ratio_max_dev": logratios[0].exp().sub(1).abs().max().item(), "clipfrac": first_clipfrac.item(),
             "approx_kl": first_kl.item()}
    clipfrac = torch.stack([ratio_stats(logratio, args.clip_coef)[2] for logratio in logratios]).mean()
    losses = {
        "value_loss": v_loss.item(), "policy_loss": pg_loss.item(), "entropy": entropy_loss.item(),
        "old_approx_kl": old_approx_kl.item(), "approx_kl": approx_kl.item(), "clipfrac": clipfrac.item(),
    }
    return losses, first


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


def evaluate_agent(agent, env_id, obs_rms, eval_episodes=10, seed=0, device="cpu", clip_obs=10.0):
    """Returns of `eval_episodes` episodes of the agent's sampling policy, seeded for repeatability.

    Observations are normalised by `obs_rms`, the training statistics, frozen: evaluation never updates them.
    """
    env = gym.make(env_id)
    low, high = env.action_space.low, env.action_space.high
    generator = torch.Generator(device=device).manual_seed(seed)
    returns = []
    obs, _ = env.reset(seed=seed)
    while len(returns) < eval_episodes:
        episode_return, done = 0.0, False
        while not done:
            with torch.inference_mode():
                mean = agent.get_action_mean(torch.as_tensor(normalize_obs(obs, obs_rms, clip_obs), device=device))
                action = sample_gaussian(mean, agent.actor_logstd[0], generator).cpu().numpy()
            obs, reward, terminated, truncated, _ = env.step(np.clip(action, low, high))
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
    agent = Agent(int(np.prod(env.observation_space.shape)), int(np.prod(env.action_space.shape))).to(device)
    env.close()
    agent.load_state_dict(ckpt["model"])
    obs_rms = RunningMeanStd()
    obs_rms.load_state_dict(ckpt["obs_rms"])
    return evaluate_agent(agent, ckpt["args"]["env_id"], obs_rms, eval_episodes, seed, device, ckpt["args"]["clip_obs"])


def train(args: Args):
    """Train; return a dict with the per-episode returns/lengths, per-iteration losses, the agent and optimizer."""
    ckpt = None
    if args.resume:
        ckpt = load_checkpoint(args.resume)
        args = Args(**{**ckpt["args"], "resume": args.resume})
    check_args(args)
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
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

    envs = make_envs(args, run_name)
    obs_shape, action_shape = envs.single_observation_space.shape, envs.single_action_space.shape
    action_low, action_high = envs.action_space.low, envs.action_space.high
    agent = Agent(int(np.prod(obs_shape)), int(np.prod(action_shape))).to(device)
    # detail 3: eps 1e-5. fused=True is the same Adam in one kernel per step, on the one flat tensor
    optimizer = torch.optim.Adam([flat_parameters(agent)], lr=args.learning_rate, eps=1e-5, fused=True)
    policy = NumpyPolicy(agent.policy_layers()) if args.numpy_rollout and device.type == "cpu" else None

    T, N = args.num_steps, args.num_envs
    # rollout storage lives in numpy: per-step writes are cheap and become tensors once per rollout
    obs_buf = np.zeros((T, N) + obs_shape, dtype=np.float32)
    actions_buf = np.zeros((T, N) + action_shape, dtype=np.float32)
    rewards_buf = np.zeros((T, N), dtype=np.float32)
    dones_buf = np.zeros((T, N), dtype=np.float32)
    episode_return, episode_length = np.zeros(N), np.zeros(N, dtype=np.int64)
    history = {"episodic_return": [], "episodic_length": [], "losses": [], "first_minibatch": [], "learning_rate": [],
               "seconds": {"env": 0.0, "inference": 0.0, "update": 0.0}}  # where the wall time goes
    seconds = history["seconds"]

    obs_rms = RunningMeanStd(obs_shape)
    reward_scaler = RewardScaler(N, args.gamma, args.clip_reward, args.gymnasium_normalization)

    start_iteration, global_step = 1, 0
    first_obs, _ = envs.reset(seed=args.seed)
    obs_rms.update(first_obs)
    next_obs = normalize_obs(first_obs, obs_rms, args.clip_obs)
    if ckpt:
        agent.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        obs_rms.load_state_dict(ckpt["obs_rms"])
        reward_scaler.load_state_dict(ckpt["reward_scaler"])
        start_iteration, global_step = ckpt["iteration"] + 1, ckpt["global_step"]
        if ckpt["envs"] is not None:  # continue the very same episodes
            envs.close()
            envs = make_envs(args, run_name, restore_envs(ckpt["envs"]))
            next_obs, episode_return, episode_length = ckpt["next_obs"], ckpt["episode_return"], ckpt["episode_length"]
        else:  # keep the fresh episodes' first observations (the saved ones belong to other games)
            print(f"{SCRIPT}: the checkpoint holds no env state; resuming with fresh episodes", file=sys.stderr)
            next_obs = normalize_obs(first_obs, obs_rms, args.clip_obs)  # with the restored statistics
        set_rng_states(ckpt["rng"])

    def checkpoint_state(iteration):
        return {
            "script": SCRIPT, "args": asdict(args), "run_name": run_name, "iteration": iteration,
            "global_step": global_step, "model": agent.state_dict(), "optimizer": optimizer.state_dict(),
            "rng": rng_states(), "next_obs": next_obs, "episode_return": episode_return.copy(),
            "episode_length": episode_length.copy(), "envs": env_snapshot(envs),
            "obs_rms": obs_rms.state_dict(), "reward_scaler": reward_scaler.state_dict(),
        }

    ckpt_path = f"runs/{run_name}/checkpoint.pt"
    gc.freeze()  # the ~300k objects made so far (mostly torch's) are never garbage: full collections skip them
    start_time, start_step = time.time(), global_step
    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = linear_lr(iteration, args.num_iterations, args.learning_rate)

        # detail C1: the std is fixed during a rollout, so the Gaussian noise of all its steps is drawn at once
        std = agent.actor_logstd.detach().exp().cpu().numpy()
        noise = torch.randn((T, N) + action_shape, device=device).cpu().numpy()
        for step in range(T):
            global_step += N
            obs_buf[step] = next_obs
            t0 = time.perf_counter()
            if policy is not None:
                mean = policy.mean(next_obs)
            else:
                with torch.inference_mode():
                    mean = agent.get_action_mean(torch.as_tensor(next_obs, device=device)).cpu().numpy()
            action = mean + std * noise[step]
            actions_buf[step] = action  # detail C5: the unclipped sample is stored and trained on ...
            t1 = time.perf_counter()
            next_obs, reward, terminations, truncations, infos = envs.step(np.clip(action, action_low, action_high))
            done = terminations | truncations  # ... and only the env sees it clipped to the bounds
            rewards_buf[step] = reward_scaler(reward, terminations, done)  # details C8-C9
            dones_buf[step] = done
            if args.gymnasium_normalization:  # gymnasium's per-env wrapper also sees each episode's last observation
                for i in np.flatnonzero(done):
                    obs_rms.update(np.asarray(infos["final_obs"][i], dtype=np.float64)[None])
            obs_rms.update(next_obs)  # detail C6: after a done this is the new episode's first observation
            next_obs = normalize_obs(next_obs, obs_rms, args.clip_obs)
            seconds["inference"] += t1 - t0
            seconds["env"] += time.perf_counter() - t1  # the step and the normalisation (the reference's wrappers)

            if args.bootstrap_truncated and truncations.any():
                # r + gamma * V(final obs) for time-limit ends, so the done cut leaves the right target
                idx = np.flatnonzero(truncations & ~terminations)
                if idx.size:
                    final = normalize_obs(np.stack([infos["final_obs"][i] for i in idx]), obs_rms, args.clip_obs)
                    with torch.inference_mode():
                        v = agent.get_value(torch.as_tensor(final, device=device)).cpu().numpy()
                    rewards_buf[step, idx] += args.gamma * v

            episode_return += reward  # the raw env reward: the logged return is the task's own score
            episode_length += 1
            for i in np.flatnonzero(done):
                writer.add_scalar("charts/episodic_return", episode_return[i], global_step)
                writer.add_scalar("charts/episodic_length", episode_length[i], global_step)
                history["episodic_return"].append(float(episode_return[i]))
                history["episodic_length"].append(int(episode_length[i]))
                episode_return[i], episode_length[i] = 0.0, 0

        t0 = time.perf_counter()
        # one batched forward for the whole rollout: old log-probs, old values and the bootstrap value
        b_obs = torch.as_tensor(obs_buf, device=device).reshape((-1,) + obs_shape)
        b_actions = torch.as_tensor(actions_buf, device=device).reshape((-1,) + action_shape)
        with torch.no_grad():
            b_mean, b_values = agent.get_action_mean_and_value(b_obs)
            b_logprobs, _ = gaussian_logprob_entropy(b_mean, agent.actor_logstd, b_actions)
            next_value = agent.get_value(torch.as_tensor(next_obs, device=device))
            advantages, returns = compute_gae(
                torch.as_tensor(rewards_buf, device=device), b_values.reshape(T, N),
                torch.as_tensor(dones_buf, device=device), next_value, args.gamma, args.gae_lambda,
            )
        b = {"obs": b_obs, "actions": b_actions, "logprobs": b_logprobs, "values": b_values,
             "advantages": advantages.reshape(-1), "returns": returns.reshape(-1)}
        losses, first = update(agent, optimizer, b, args)
        seconds["update"] += time.perf_counter() - t0
        losses["explained_variance"] = explained_variance(b_values.cpu().numpy(), b["returns"].cpu().numpy())
        history["first_minibatch"].append(first)
        history["losses"].append(losses)
        history["learning_rate"].append(optimizer.param_groups[0]["lr"])
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        for k, v in losses.items():
            writer.add_scalar(f"losses/{k}", v, global_step)
        sps = int((global_step - start_step) / (time.time() - start_time))
        writer.add_scalar("charts/SPS", sps, global_step)
        if iteration % 10 == 0 or iteration == args.num_iterations:
            recent = history["episodic_return"][-20:]
            print(f"iter {iteration}/{args.num_iterations} step {global_step} SPS {sps} "
                  f"return(last 20) {np.mean(recent) if recent else float('nan'):.1f}")

        if args.save_model and (iteration % args.save_every == 0 or iteration == args.num_iterations):
            save_checkpoint(ckpt_path, checkpoint_state(iteration))

    envs.close()
    writer.close()
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()) + f", total {time.time() - start_time:.1f}")
    history.update(run_name=run_name, global_step=global_step, agent=agent, optimizer=optimizer, obs_rms=obs_rms,
                   reward_scaler=reward_scaler, checkpoint=ckpt_path if args.save_model else None)
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
