"""PPO on the Procgen benchmark games, with the IMPALA CNN (procgen detail of seed 000).

Run:   python ppo_procgen.py --env-id starpilot
Eval:  python ppo_procgen.py --eval-checkpoint runs/<run>/checkpoint.pt --eval-episodes 10
Needs: bash scripts/install_extras.sh procgen: procgen-mirror 0.10.7 (openai/procgen 0.10.7, the
       original games, built for Python 3.11) with gym3, installed with --no-deps because gym3
       pins numpy<2, which would downgrade the numpy this project needs; the games run on numpy 2.

The 13 core implementation details of ppo.py (seed 000), with the settings of openai/train-procgen:
  1. vectorized architecture: 64 games in one native Procgen vector env, rollouts of 256 steps; the
     games reset in place, so `next_obs` after a done is already the new episode's first obs
     (SAME_STEP autoreset, as ppo.py sets explicitly)
  2. orthogonal init of the two heads (policy 0.01, value 1.0); the IMPALA CNN keeps PyTorch's default
     init, as in the reference
  3. Adam epsilon 1e-5
  4. learning rate NOT annealed: constant 5e-4, as in openai/train-procgen (--anneal-lr turns it on)
  5. GAE (gamma 0.999, lambda 0.95) with value bootstrap from the observation after the rollout
  6. minibatch updates: 3 epochs of 8 shuffled, disjoint minibatches
  7. advantages normalised per minibatch
  8. clipped surrogate objective (clip 0.2)
  9. clipped value loss
  10. loss = pg_loss - 0.01 * entropy + 0.5 * v_loss, one optimizer for the shared network
  11. global gradient norm clipped to 0.5
  12. debug variables as in ppo.py
  13. one shared network with a policy head and a value head (the IMPALA CNN below)
Procgen detail:
  P1. IMPALA-style CNN: three stages of depth 16, 32, 32, each conv3x3 -> max-pool 3/2 -> two
      residual blocks; then ReLU -> dense 256 -> ReLU; input pixels scaled to [0, 1]
Settings of openai/train-procgen kept here: easy distribution, all levels (num_levels=0), reward
scaling by the running std of the discounted return and clipping to +-10 (VecNormalize(ob=False)),
observations not normalised, 25M steps.

Deliberate choices (reference behaviour stays the default):
  - the reward is scaled with the discount of the discounted return the agent optimises (0.999), as
    in CleanRL's ppo_procgen.py, whose numbers are the published ones (the blog and baselines'
    VecNormalize use 0.99); --reward-norm-gamma sets it.
  - the policy and value of each step come from the rollout's forward pass (the network is shared,
    so a second pass over the rollout, as ppo.py does, would repeat the same work); the update
    recomputes them per minibatch, and the first minibatch still checks that they agree.
  - the rollout stores raw uint8 frames (a quarter of the memory of float32 frames).
  - episodes end only by the games' own rules (including their internal time limits, which Procgen
    does not report separately), so there is no --bootstrap-truncated.
  - --torch-threads 0 by default (torch's default, one thread per core), unlike ppo.py's 1: the envs step
    between the network's calls, not beside them, and the CNN's update runs faster on every core.
  - --channels-last (on by default; --no-channels-last turns it off): the CNN's weights and inputs in NHWC
    memory, where oneDNN's CPU convolutions are fastest (the HWC frames are NHWC already; with 2 threads an
    update step is ~1.25x faster than with NCHW weights). Same math; outputs agree to float rounding.
  - the update does per epoch what needs no gradient: one gather per tensor, the advantage normalisation of
    all minibatches at once (each with its own statistics) and, after the epochs, the KL/clipfrac statistics
    of every minibatch.
"""

import contextlib
import io
import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from typing import Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

SCRIPT = "ppo_procgen.py"

PROCGEN_GAMES = (
    "bigfish", "bossfight", "caveflyer", "chaser", "climber", "coinrun", "dodgeball", "fruitbot",
    "heist", "jumper", "leaper", "maze", "miner", "ninja", "plunder", "starpilot",
)
DISTRIBUTION_MODES = ("easy", "hard", "extreme", "memory", "exploration")


@dataclass
class Args:
    exp_name: str = "ppo_procgen"
    """the name of this experiment (the first part of the run name)"""
    seed: int = 1
    """seed of python, numpy, torch and the environments"""
    torch_deterministic: bool = True
    """if toggled, sets `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """use CUDA when available (falls back to CPU with a notice)"""
    torch_threads: int = 0
    """torch intra-op threads (0 keeps torch's default, one per core: the CNN update scales with them)"""
    channels_last: bool = True
    """run the CNN in channels-last (NHWC) memory: the same convolutions, faster updates on CPU (oneDNN)"""
    track: bool = False
    """log to Weights & Biases (imports wandb only when set)"""
    wandb_project_name: str = "ppo-reference"
    """the Weights & Biases project"""
    wandb_entity: Optional[str] = None
    """the Weights & Biases entity (team)"""
    capture_video: bool = False
    """record videos of env 0 into `videos/<run name>/` (gym3's recorder)"""
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
    env_id: str = "starpilot"
    """the Procgen game"""
    distribution_mode: str = "easy"
    """the Procgen level distribution (easy, as in the reference)"""
    num_levels: int = 0
    """the number of distinct levels (0 = unlimited, as in the reference)"""
    start_level: int = 0
    """the seed of the first level"""
    total_timesteps: int = 25000000
    """total environment steps of the experiment"""
    learning_rate: float = 5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 64
    """the number of parallel environments"""
    num_steps: int = 256
    """the number of steps to run in each environment per rollout"""
    anneal_lr: bool = False
    """anneal the learning rate linearly to 0 (off for procgen, detail 4)"""
    gamma: float = 0.999
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda of generalized advantage estimation"""
    num_minibatches: int = 8
    """the number of minibatches per epoch"""
    update_epochs: int = 3
    """the number of epochs over each rollout"""
    norm_adv: bool = True
    """normalise advantages per minibatch (detail 7)"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """use the clipped value loss (detail 9)"""
    ent_coef: float = 0.01
    """coefficient of the entropy bonus"""
    vf_coef: float = 0.5
    """coefficient of the value loss"""
    max_grad_norm: float = 0.5
    """the maximum global norm of the gradients"""
    target_kl: Optional[float] = None
    """stop the epochs early when approx_kl exceeds this (off in the reference)"""
    norm_reward: bool = True
    """scale rewards by the running std of the discounted return (VecNormalize(ob=False))"""
    reward_norm_gamma: Optional[float] = None
    """discount of the return whose std scales the rewards (default: --gamma)"""
    clip_reward: float = 10.0
    """clip the scaled rewards to +-this"""

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
    if args.env_id not in PROCGEN_GAMES:
        raise ConfigError(f"unknown Procgen game {args.env_id!r}; choose one of {', '.join(PROCGEN_GAMES)}")
    if args.distribution_mode not in DISTRIBUTION_MODES:
        raise ConfigError(f"--distribution-mode must be one of {', '.join(DISTRIBUTION_MODES)}, "
                          f"got {args.distribution_mode!r}")
    if args.num_levels < 0 or args.start_level < 0:
        raise ConfigError("--num-levels and --start-level must be >= 0")
    if args.clip_reward <= 0:
        raise ConfigError(f"--clip-reward must be positive, got {args.clip_reward}")
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # gym's deprecation notice, see ProcgenVecEnv
            import procgen  # noqa: F401
    except ImportError:
        raise ConfigError("Procgen is not installed: run `bash scripts/install_extras.sh procgen`") from None
    if args.track:
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise ConfigError("--track needs wandb: pip install wandb") from None


class ProcgenVecEnv:
    """The native gym3 Procgen vector env behind the gymnasium vector API that ppo.py uses.

    Procgen resets a finished game in place (detail 1: SAME_STEP autoreset): the step that ends an
    episode returns the reward of its last action, done=True and the next episode's first frame.
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, args, run_name, num_envs=None, seed=None, capture_video=False):
        # procgen imports the old `gym` only to register its ids; keep gym's deprecation notice out of the logs
        with contextlib.redirect_stderr(io.StringIO()):
            from procgen import ProcgenGym3Env
        self.num_envs = num_envs or args.num_envs
        self.env = ProcgenGym3Env(
            num=self.num_envs, env_name=args.env_id, num_levels=args.num_levels, start_level=args.start_level,
            distribution_mode=args.distribution_mode, rand_seed=args.seed if seed is None else seed,
            render_mode="rgb_array" if capture_video else None,
        )
        if capture_video:
            import gym3

            self.env = gym3.VideoRecorderWrapper(self.env, directory=f"videos/{run_name}", info_key="rgb")
        self.single_observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
        self.single_action_space = gym.spaces.Discrete(self.env.ac_space.eltype.n)

    def reset(self, seed=None):
        _, obs, _ = self.env.observe()  # the games were started (seeded) when the env was built
        return obs["rgb"], {}

    def step(self, actions):
        self.env.act(np.asarray(actions, dtype=np.int32))
        reward, obs, first = self.env.observe()
        return obs["rgb"], reward.astype(np.float32), first, np.zeros_like(first), {}

    def get_state(self):
        return self.env.callmethod("get_state")

    def set_state(self, states):
        self.env.callmethod("set_state", states)

    def close(self):
        pass  # the C++ games are freed with the object


def make_envs(args, run_name, restored=None):
    envs = ProcgenVecEnv(args, run_name, capture_video=args.capture_video)
    if restored is not None:  # game states saved in a checkpoint
        envs.set_state(restored)
    return envs


def env_snapshot(envs):
    """The games' states (Procgen serialises them), so that a resumed run continues the same episodes."""
    try:
        return envs.get_state()
    except Exception:
        return None


class RewardScaler:
    """Reward scaling of baselines' VecNormalize(ob=False) and gym's NormalizeReward, then clipping.

    Each env's discounted return R <- gamma * R + r is tracked (reset after a done); rewards are
    divided by the std of all R seen so far (a running mean/variance, count started at 1e-4).
    """

    def __init__(self, num_envs, gamma, clip, epsilon=1e-8):
        self.gamma, self.clip, self.epsilon = gamma, clip, epsilon
        self.returns = np.zeros(num_envs)
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def __call__(self, rewards, dones):
        self.returns = self.returns * self.gamma + rewards
        self.update(self.returns)
        scaled = np.clip(rewards / np.sqrt(self.var + self.epsilon), -self.clip, self.clip)
        self.returns[dones] = 0.0
        return scaled.astype(np.float32)

    def update(self, x):
        # parallel-variance merge of the running statistics with this batch (Chan et al.)
        batch_mean, batch_var, batch_count = x.mean(), x.var(), x.size
        delta, total = batch_mean - self.mean, self.count + batch_count
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.mean, self.var, self.count = self.mean + delta * batch_count / total, m2 / total, total

    def state_dict(self):
        return {"returns": self.returns.copy(), "mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state):
        self.returns, self.mean, self.var, self.count = (state[k] for k in ("returns", "mean", "var", "count"))
        self.returns = self.returns.copy()


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    # detail 2: orthogonal weights, constant biases
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, x):
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ConvSequence(nn.Module):
    """Detail P1: one IMPALA stage, conv3x3 -> max-pool 3/2 (halves height and width) -> 2 residual blocks."""

    def __init__(self, input_shape, out_channels):
        super().__init__()
        self.input_shape, self.out_channels = input_shape, out_channels
        self.conv = nn.Conv2d(input_shape[0], out_channels, kernel_size=3, padding=1)
        self.res_block0 = ResidualBlock(out_channels)
        self.res_block1 = ResidualBlock(out_channels)

    def forward(self, x):
        x = nn.functional.max_pool2d(self.conv(x), kernel_size=3, stride=2, padding=1)
        return self.res_block1(self.res_block0(x))

    def get_output_shape(self):
        _, h, w = self.input_shape
        return self.out_channels, (h + 1) // 2, (w + 1) // 2


class Agent(nn.Module):
    def __init__(self, obs_shape, n_actions, channels_last=False):
        super().__init__()
        h, w, c = obs_shape
        shape, conv_seqs = (c, h, w), []
        for out_channels in [16, 32, 32]:  # detail P1: depths 16, 32, 32
            conv_seq = ConvSequence(shape, out_channels)
            shape = conv_seq.get_output_shape()
            conv_seqs.append(conv_seq)
        # detail 13: one network for both heads; detail 2: PyTorch's default init below the heads
        self.network = nn.Sequential(
            *conv_seqs, nn.Flatten(), nn.ReLU(), nn.Linear(int(np.prod(shape)), 256), nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(256, n_actions), std=0.01)
        self.critic = layer_init(nn.Linear(256, 1), std=1.0)
        # a memory layout, not a change of the math (outputs agree to float rounding): weights and inputs
        # in NHWC take oneDNN's fast convolutions on CPU
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.to(memory_format=self.memory_format)

    def hidden(self, x):
        # uint8 HWC frames in (already NHWC in memory once permuted); pixels scaled to [0, 1], observations
        # otherwise not normalised
        return self.network(x.permute(0, 3, 1, 2).contiguous(memory_format=self.memory_format).float() / 255.0)

    def get_value(self, x):
        return self.critic(self.hidden(x)).squeeze(-1)

    def get_logits(self, x):
        return self.actor(self.hidden(x))

    def get_logits_and_value(self, x):
        hidden = self.hidden(x)
        return self.actor(hidden), self.critic(hidden).squeeze(-1)


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


def sample_categorical(logits):
    """Inverse-CDF sampling of Categorical(logits), one uniform per row (twice as fast as torch.multinomial)."""
    u = torch.rand(logits.shape[:-1] + (1,), device=logits.device)
    return (logits.softmax(-1).cumsum(-1) < u).sum(-1).clamp_(max=logits.shape[-1] - 1)


def categorical_logprob_entropy(logits, actions):
    """Log-probability of `actions` and entropy of Categorical(logits), without building a distribution."""
    logp = logits.log_softmax(-1)
    return logp.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


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
        v_clipped = oldvalue + torch.clamp(newvalue - oldvalue, -args.clip_coef, args.clip_coef)
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
            newlogits, newvalue = agent.get_logits_and_value(mb["obs"])
            newlogprob, entropy = categorical_logprob_entropy(newlogits, mb["actions"])
            loss, pg_loss, v_loss, entropy_loss, logratio = ppo_losses(
                newlogprob, mb["logprobs"], mb["advantages"], newvalue, mb["values"], mb["returns"], entropy, args,
            )
            logratios.append(logratio.detach())  # the statistics wait until after the loop: fewer ops per step
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)  # detail 11
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


def evaluate_agent(agent, args, eval_episodes=10, seed=0, device="cpu"):
    """Returns of `eval_episodes` episodes of the agent's sampling policy in one game of `args`'s
    distribution, seeded for repeatability."""
    env = ProcgenVecEnv(args, "", num_envs=1, seed=seed)
    generator = torch.Generator(device=device).manual_seed(seed)
    returns, episode_return = [], 0.0
    obs, _ = env.reset()
    while len(returns) < eval_episodes:
        with torch.inference_mode():
            logits = agent.get_logits(torch.as_tensor(obs, device=device))
            u = torch.rand((), generator=generator, device=device)
            action = int((logits[0].softmax(-1).cumsum(-1) < u).sum().clamp(max=logits.shape[-1] - 1))
        obs, reward, done, _, _ = env.step([action])
        episode_return += float(reward[0])
        if done[0]:
            returns.append(episode_return)
            episode_return = 0.0
    env.close()
    return returns


def evaluate(checkpoint_path, eval_episodes=10, seed=0, device="cpu"):
    """Load a checkpoint of this script and return the returns of `eval_episodes` episodes."""
    ckpt = load_checkpoint(checkpoint_path)
    args = Args(**ckpt["args"])
    agent = Agent((64, 64, 3), ckpt["model"]["actor.weight"].shape[0]).to(device)
    agent.load_state_dict(ckpt["model"])
    return evaluate_agent(agent, args, eval_episodes, seed, device)


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

    envs = make_envs(args, run_name, ckpt["envs"] if ckpt else None)
    obs_shape = envs.single_observation_space.shape
    agent = Agent(obs_shape, envs.single_action_space.n, args.channels_last).to(device)
    # detail 3: eps 1e-5. fused=True is the same Adam in one kernel per step
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)
    gamma_r = args.gamma if args.reward_norm_gamma is None else args.reward_norm_gamma
    reward_scaler = RewardScaler(args.num_envs, gamma_r, args.clip_reward)

    T, N = args.num_steps, args.num_envs
    obs_buf = np.zeros((T, N) + obs_shape, dtype=np.uint8)
    actions_buf = np.zeros((T, N), dtype=np.int64)
    logprobs_buf = torch.zeros((T, N), device=device)
    values_buf = torch.zeros((T, N), device=device)
    rewards_buf = np.zeros((T, N), dtype=np.float32)
    dones_buf = np.zeros((T, N), dtype=np.float32)
    episode_return, episode_length = np.zeros(N), np.zeros(N, dtype=np.int64)
    history = {"episodic_return": [], "episodic_length": [], "losses": [], "first_minibatch": [], "learning_rate": []}

    start_iteration, global_step = 1, 0
    next_obs, _ = envs.reset(seed=args.seed)
    if ckpt:
        agent.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start_iteration, global_step = ckpt["iteration"] + 1, ckpt["global_step"]
        if ckpt["envs"] is None:
            print(f"{SCRIPT}: the checkpoint holds no env state; resuming with fresh episodes", file=sys.stderr)
        else:
            next_obs = ckpt["next_obs"]
        episode_return, episode_length = ckpt["episode_return"], ckpt["episode_length"]
        reward_scaler.load_state_dict(ckpt["reward_scaler"])
        set_rng_states(ckpt["rng"])

    def checkpoint_state(iteration):
        return {
            "script": SCRIPT, "args": asdict(args), "run_name": run_name, "iteration": iteration,
            "global_step": global_step, "model": agent.state_dict(), "optimizer": optimizer.state_dict(),
            "rng": rng_states(), "next_obs": next_obs, "episode_return": episode_return.copy(),
            "episode_length": episode_length.copy(), "envs": env_snapshot(envs),
            "reward_scaler": reward_scaler.state_dict(),
        }

    ckpt_path = f"runs/{run_name}/checkpoint.pt"
    start_time, start_step = time.time(), global_step
    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = linear_lr(iteration, args.num_iterations, args.learning_rate)

        for step in range(T):
            global_step += N
            obs_buf[step] = next_obs
            with torch.inference_mode():
                logits, value = agent.get_logits_and_value(torch.as_tensor(next_obs, device=device))
                action = sample_categorical(logits)
                logprobs_buf[step], _ = categorical_logprob_entropy(logits, action)
                values_buf[step] = value
            action = action.cpu().numpy()
            actions_buf[step] = action
            next_obs, reward, done, _, _ = envs.step(action)
            # reward scaling and clipping (VecNormalize); the logged returns stay the raw game scores
            rewards_buf[step] = reward_scaler(reward, done) if args.norm_reward else reward
            dones_buf[step] = done

            episode_return += reward
            episode_length += 1
            for i in np.flatnonzero(done):
                writer.add_scalar("charts/episodic_return", episode_return[i], global_step)
                writer.add_scalar("charts/episodic_length", episode_length[i], global_step)
                history["episodic_return"].append(float(episode_return[i]))
                history["episodic_length"].append(int(episode_length[i]))
                episode_return[i], episode_length[i] = 0.0, 0

        b_obs = torch.as_tensor(obs_buf, device=device).reshape((-1,) + obs_shape)
        with torch.no_grad():
            next_value = agent.get_value(torch.as_tensor(next_obs, device=device))
            advantages, returns = compute_gae(
                torch.as_tensor(rewards_buf, device=device), values_buf,
                torch.as_tensor(dones_buf, device=device), next_value, args.gamma, args.gae_lambda,
            )
        b = {"obs": b_obs, "actions": torch.as_tensor(actions_buf, device=device).reshape(-1),
             "logprobs": logprobs_buf.reshape(-1), "values": values_buf.reshape(-1),
             "advantages": advantages.reshape(-1), "returns": returns.reshape(-1)}
        losses, first = update(agent, optimizer, b, args)
        losses["explained_variance"] = explained_variance(b["values"].cpu().numpy(), b["returns"].cpu().numpy())
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
    history.update(run_name=run_name, global_step=global_step, agent=agent, optimizer=optimizer,
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
