"""PPO with a MultiDiscrete action space, on Gym-μRTS (the MultiDiscrete detail of seed 000).

Run:   python ppo_multidiscrete.py --env-id MicrortsMining-v1
Eval:  python ppo_multidiscrete.py --eval-checkpoint runs/<run>/checkpoint.pt --eval-episodes 10
Needs: bash scripts/install_extras.sh microrts: gym-microrts 0.4.3 (installed with --no-deps: it
       pins gym>=0.18.3,<0.19, a 2021 release, and uses only gym.spaces, which gym 0.26.2 provides),
       JPype1, and a Java runtime (OpenJDK 17 tested; the script installs Debian's if none is found).

The 13 core implementation details of ppo.py (seed 000), with the Atari hyperparameters the blog
used for Gym-μRTS (8 envs x 128 steps, 4 minibatches, 4 epochs, lr 2.5e-4 annealed, clip 0.1):
  1. vectorized architecture: 8 games in one Gym-μRTS vector env (a Java simulator), rollouts of
     128 steps; the simulator resets a finished game itself, so `next_obs` after a done is already
     the new episode's first obs (SAME_STEP autoreset, as ppo.py sets explicitly)
  2. orthogonal init: hidden layers std sqrt(2), policy head 0.01, value head 1.0, biases 0
  3. Adam epsilon 1e-5
  4. learning rate annealed linearly to exactly 0 at the last iteration
  5. GAE with value bootstrap from the observation after the rollout; returns = advantages + values
  6. minibatch updates: each epoch shuffles the batch and splits it into disjoint minibatches
  7. advantages normalised per minibatch
  8. clipped surrogate objective
  9. clipped value loss (0.5 * max(unclipped, clipped))
  10. loss = pg_loss - ent_coef * entropy + vf_coef * v_loss, one optimizer for the shared network
  11. global gradient norm clipped to max_grad_norm
  12. debug variables as in ppo.py
  13. one shared network with a policy head and a value head (the blog's Gym-μRTS CNN:
      conv 16 3x3/2 -> conv 32 2x2 -> dense 128, on the map's 27 binary feature planes)
MultiDiscrete detail:
  M1. independent action components: one Categorical per component; the log-probability of an
      action is the sum of its components' log-probabilities, and the entropy the sum of theirs

The environment, as close to the reference's MicrortsMining-v1 (gym-microrts 0.2.0) as gym-microrts
0.4.3 allows: the same 10x10 map with one base and one worker a side, an opponent that does
nothing (passiveAI), reward only for harvesting (ResourceGatherRewardFunction), 2M steps.
What differs, because 0.4.3 no longer has the reference's env class:
  - the reference's agent chose one unit per step (MultiDiscrete [100, 6, 4, 4, 4, 4, 7, 100]) with
    9 game ticks per step and 200 steps per episode; 0.4.3's grid mode (MicroRTSGridModeVecEnv)
    gives every map cell its own components [6, 4, 4, 4, 4, 7, 49] (action type, move, harvest,
    return, produce direction, produce type, attack target) each tick. An episode here is the same
    2000 game ticks (--max-steps), which are 2000 agent steps.
  - the simulator executes only the actions of cells that hold a unit of ours able to act (it reads
    which from its action mask); the policy still chooses, and is trained on, all 100 cells.
    ppo_multidiscrete_mask.py shows the policy the full mask.
  - the games are deterministic given the actions (the opponent is passive), so --seed seeds the
    policy only.

Deliberate choices (reference behaviour stays the default):
  - the policy and value of each step come from the rollout's forward pass (the network is shared,
    so a second pass over the rollout, as ppo.py does, would repeat the same work).
  - sampling is Gumbel-max (argmax of logits + Gumbel noise), exact for any logits; the masked
    sibling needs it (inverse-CDF sampling can land on a probability-0 action at u = 0).
  - episodes end only at the time limit or a win, which the simulator does not tell apart, so
    there is no --bootstrap-truncated; no --capture-video (the simulator renders only to a window).
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

SCRIPT = "ppo_multidiscrete.py"

MICRORTS_TASKS = {
    # the reference's MicrortsMining-v1: reward weights follow gym-microrts' reward functions
    # [win-loss, resource gathering, produce worker, produce building, attack, produce combat unit]
    "MicrortsMining-v1": dict(map_path="maps/10x10/basesWorkers10x10.xml", opponent="passiveAI",
                              reward_weight=(0.0, 1.0, 0.0, 0.0, 0.0, 0.0)),
}


@dataclass
class Args:
    exp_name: str = "ppo_multidiscrete"
    """the name of this experiment (the first part of the run name)"""
    seed: int = 1
    """seed of python, numpy and torch (the games are deterministic)"""
    torch_deterministic: bool = True
    """if toggled, sets `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """use CUDA when available (falls back to CPU with a notice)"""
    torch_threads: int = 1
    """torch intra-op threads (0 keeps torch's default); 1 is fastest for this small network"""
    track: bool = False
    """log to Weights & Biases (imports wandb only when set)"""
    wandb_project_name: str = "ppo-reference"
    """the Weights & Biases project"""
    wandb_entity: Optional[str] = None
    """the Weights & Biases entity (team)"""
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
    env_id: str = "MicrortsMining-v1"
    """the Gym-μRTS task (map, opponent and reward weights in MICRORTS_TASKS)"""
    max_steps: int = 2000
    """game ticks (= agent steps) per episode"""
    total_timesteps: int = 2000000
    """total environment steps of the experiment"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 8
    """the number of parallel environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per rollout"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 (detail 4)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda of generalized advantage estimation"""
    num_minibatches: int = 4
    """the number of minibatches per epoch"""
    update_epochs: int = 4
    """the number of epochs over each rollout"""
    norm_adv: bool = True
    """normalise advantages per minibatch (detail 7)"""
    clip_coef: float = 0.1
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
    if args.env_id not in MICRORTS_TASKS:
        raise ConfigError(f"unknown Gym-μRTS task {args.env_id!r}; choose one of {', '.join(MICRORTS_TASKS)}")
    if args.max_steps <= 0:
        raise ConfigError(f"--max-steps must be positive, got {args.max_steps}")
    try:
        import gym_microrts  # noqa: F401
        import jpype
    except ImportError:
        raise ConfigError("Gym-μRTS is not installed: run `bash scripts/install_extras.sh microrts`") from None
    try:
        jpype.getDefaultJVMPath()
    except jpype.JVMNotFoundException:
        raise ConfigError("Gym-μRTS needs a Java runtime and none was found (set JAVA_HOME, or run "
                          "`bash scripts/install_extras.sh microrts`)") from None
    if args.track:
        try:
            import wandb  # noqa: F401
        except ImportError:
            raise ConfigError("--track needs wandb: pip install wandb") from None


class MicrortsVecEnv:
    """Gym-μRTS's grid-mode vector env behind the gymnasium vector API that ppo.py uses.

    The simulator resets a finished game itself (detail 1: SAME_STEP autoreset): the step that ends
    an episode returns its reward, done=True and the next game's first observation.
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, args, num_envs=None):
        np.int = int  # gym-microrts 0.4.3 still uses numpy's `np.int` alias, removed in numpy 1.24
        with contextlib.redirect_stderr(io.StringIO()):  # gym's deprecation notice; only gym.spaces is used
            from gym_microrts import microrts_ai
            from gym_microrts.envs.new_vec_env import MicroRTSGridModeVecEnv
        task = MICRORTS_TASKS[args.env_id]
        self.num_envs = num_envs or args.num_envs
        self.env = MicroRTSGridModeVecEnv(
            num_selfplay_envs=0, num_bot_envs=self.num_envs, max_steps=args.max_steps,
            ai2s=[getattr(microrts_ai, task["opponent"])] * self.num_envs, map_path=task["map_path"],
            reward_weight=np.array(task["reward_weight"]),
        )
        h, w, planes = self.env.observation_space.shape
        self.nvec = self.env.action_plane_space.nvec  # one cell's components: [6, 4, 4, 4, 4, 7, 49]
        self.single_observation_space = gym.spaces.Box(0.0, 1.0, (h, w, planes), np.float32)
        self.single_action_space = gym.spaces.MultiDiscrete(np.tile(self.nvec, (h * w, 1)))

    def reset(self, seed=None):
        return self.env.reset().astype(np.float32), {}

    def step(self, actions):
        # the simulator takes actions only from cells holding a unit that can act, and reads those
        # cells from the mask it computes here; the policy never sees the mask
        self.env.get_action_mask()
        obs, reward, done, _ = self.env.step(np.asarray(actions))
        return obs.astype(np.float32), reward.astype(np.float32), done.astype(bool), np.zeros_like(done, bool), {}

    def close(self):
        # not self.env.close(): that shuts the JVM down, and JPype cannot start one again in this process
        self.env.vec_client.close()


def make_envs(args, run_name, restored=None):
    return MicrortsVecEnv(args)


def env_snapshot(envs):
    """None: the Java games cannot be saved, so a resumed run starts fresh episodes."""
    return None


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    # detail 2: orthogonal weights, constant biases
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_shape, nvec):
        super().__init__()
        h, w, planes = obs_shape
        self.nvec = [int(n) for n in nvec]  # one cell's action components
        # detail 13: the blog's Gym-μRTS network, one trunk for both heads
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(planes, 16, kernel_size=3, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(16, 32, kernel_size=2)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.network(torch.zeros(1, planes, h, w)).shape[1]  # 32 * 3 * 3 on a 10x10 map
        self.network.append(layer_init(nn.Linear(flat, 128)))
        self.network.append(nn.ReLU())
        self.actor = layer_init(nn.Linear(128, h * w * sum(self.nvec)), std=0.01)  # every cell's components
        self.critic = layer_init(nn.Linear(128, 1), std=1.0)

    def hidden(self, x):
        return self.network(x.permute(0, 3, 1, 2))  # NHWC feature planes -> NCHW

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
    """Gumbel-max sampling of Categorical(logits) along the last dim: exact for any finite logits."""
    u = torch.rand_like(logits).clamp_(min=torch.finfo(logits.dtype).tiny)
    return (logits - (-u.log()).log()).argmax(-1)


def categorical_logprob_entropy(logits, actions):
    """Log-probability of `actions` and entropy of Categorical(logits), without building a distribution."""
    logp = logits.log_softmax(-1)
    return logp.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


def split_logits(logits, nvec):
    """[B, cells * sum(nvec)] logits -> one [B, cells, n] tensor per component of a cell's action."""
    return logits.reshape(logits.shape[0], -1, int(sum(nvec))).split([int(n) for n in nvec], dim=-1)


def sample_multidiscrete(logits, nvec):
    """Actions [B, cells, len(nvec)]: each component sampled from its own Categorical (detail M1)."""
    return torch.stack([sample_categorical(l) for l in split_logits(logits, nvec)], dim=-1)


def multidiscrete_logprob_entropy(logits, actions, nvec):
    """Detail M1: the components are independent, so the action's log-probability is the sum of the
    components' log-probabilities and its entropy the sum of their entropies. actions [B, cells, len(nvec)]."""
    parts = enumerate(split_logits(logits, nvec))
    logps, entropies = zip(*(categorical_logprob_entropy(l, actions[..., i]) for i, l in parts))
    return torch.stack(logps, -1).sum((-2, -1)), torch.stack(entropies, -1).sum((-2, -1))


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
            newlogprob, entropy = multidiscrete_logprob_entropy(newlogits, mb["actions"], agent.nvec)
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
    """Returns of `eval_episodes` episodes of the agent's sampling policy in one game of `args`'s task,
    seeded for repeatability."""
    env = MicrortsVecEnv(args, num_envs=1)
    generator = torch.Generator(device=device).manual_seed(seed)
    returns, episode_return = [], 0.0
    obs, _ = env.reset()
    while len(returns) < eval_episodes:
        with torch.inference_mode():
            logits = agent.get_logits(torch.as_tensor(obs, device=device))
            parts = split_logits(logits, agent.nvec)
            u = [torch.rand(p.shape, generator=generator, device=device).clamp_(min=1e-38) for p in parts]
            action = torch.stack([(p - (-x.log()).log()).argmax(-1) for p, x in zip(parts, u)], -1)
        obs, reward, done, _, _ = env.step(action.cpu().numpy())
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
    agent = Agent(tuple(ckpt["obs_shape"]), ckpt["nvec"]).to(device)
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

    envs = make_envs(args, run_name)
    obs_shape, action_shape = envs.single_observation_space.shape, envs.single_action_space.shape
    agent = Agent(obs_shape, envs.nvec).to(device)
    # detail 3: eps 1e-5. fused=True is the same Adam in one kernel per step
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, fused=True)

    T, N = args.num_steps, args.num_envs
    obs_buf = np.zeros((T, N) + obs_shape, dtype=np.float32)
    actions_buf = np.zeros((T, N) + action_shape, dtype=np.int64)
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
        print(f"{SCRIPT}: the Java games cannot be checkpointed; resuming with fresh episodes", file=sys.stderr)
        set_rng_states(ckpt["rng"])

    def checkpoint_state(iteration):
        return {
            "script": SCRIPT, "args": asdict(args), "run_name": run_name, "iteration": iteration,
            "global_step": global_step, "model": agent.state_dict(), "optimizer": optimizer.state_dict(),
            "rng": rng_states(), "next_obs": next_obs, "episode_return": episode_return.copy(),
            "episode_length": episode_length.copy(), "envs": env_snapshot(envs),
            "obs_shape": obs_shape, "nvec": agent.nvec,
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
                action = sample_multidiscrete(logits, agent.nvec)
                logprobs_buf[step], _ = multidiscrete_logprob_entropy(logits, action, agent.nvec)
                values_buf[step] = value
            action = action.cpu().numpy()
            actions_buf[step] = action
            next_obs, reward, done, _, _ = envs.step(action)
            rewards_buf[step] = reward
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
        b = {"obs": b_obs, "actions": torch.as_tensor(actions_buf, device=device).reshape((-1,) + action_shape),
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
