"""PPO for discrete-action classic-control tasks, one shared network with policy and value heads.

Run:   python ppo_shared.py --env-id CartPole-v1
Eval:  python ppo_shared.py --eval-checkpoint runs/<run>/checkpoint.pt --eval-episodes 10

This is ppo.py with detail 13's other architecture, openai/baselines' default: one 64-64 tanh trunk
feeding a policy head and a value head, so the policy and value losses pull on the same weights.
The blog found it learns worse than separate networks on classic control.

The 13 core implementation details of "The 37 Implementation Details of PPO" (seed 000):
  1. vectorized architecture: N envs in a gymnasium SyncVectorEnv, fixed-length rollouts of T steps,
     auto-reset in SAME_STEP mode so `next_obs` after a done is already the new episode's first obs
  2. orthogonal init: hidden layers std sqrt(2), policy head 0.01, value head 1.0, biases 0
  3. Adam epsilon 1e-5
  4. learning rate annealed linearly to exactly 0 at the last iteration (the reference's schedule,
     1 - (i - 1) / N, ends at lr / N instead: a difference of one iteration's step)
  5. GAE with value bootstrap from the observation after the rollout; returns = advantages + values
  6. minibatch updates: each epoch shuffles the batch and splits it into disjoint minibatches
  7. advantages normalised per minibatch
  8. clipped surrogate objective
  9. clipped value loss (0.5 * max(unclipped, clipped))
  10. loss = pg_loss - ent_coef * entropy + vf_coef * v_loss, one optimizer for both networks
  11. global gradient norm clipped to max_grad_norm
  12. debug variables: policy_loss, value_loss, entropy, old_approx_kl, approx_kl, clipfrac,
      explained_variance
  13. one shared 64-64 tanh trunk with a policy head and a value head (ppo.py: separate networks)

Deliberate choices (reference behaviour stays the default):
  - --bootstrap-truncated (off by default, as in the reference): a truncated episode bootstraps from
    the value of its final observation instead of being treated as terminal.
  - the rollout runs only the actor per step; values and log-probs of the whole rollout come from one
    batched forward pass after it (same parameters, so the same numbers, much less Python overhead).
  - --torch-threads 1 by default: for 64-unit networks extra intra-op threads only add overhead.
  - on CPU the rollout samples actions from a numpy forward pass over *views* of the actor's weights
    (NumpyPolicy: same network, same numbers, a third of torch's per-step overhead on 4 observations);
    --no-numpy-rollout uses torch, as on CUDA.
  - all parameters live in one flat tensor (flat_parameters), so gradient clipping and Adam are one
    op each per minibatch instead of one per layer; the model and its state_dict are unchanged.
  - the update does per epoch what needs no gradient: one gather per tensor, the advantage normalisation of
    all minibatches at once (each with its own statistics) and, after the epochs, the KL/clipfrac statistics
    of every minibatch; clip_grad_norm is nn.utils.clip_grad_norm_'s rule in fewer ops (both tested equal).
  - gymnasium's env checker runs once, on check_args' probe env; the training envs skip its wrapper.
"""

import gc
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

SCRIPT = "ppo_shared.py"


@dataclass
class Args:
    exp_name: str = "ppo_shared"
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
    env_id: str = "CartPole-v1"
    """the id of the environment"""
    total_timesteps: int = 500000
    """total environment steps of the experiment"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 4
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
    bootstrap_truncated: bool = False
    """bootstrap truncated (time-limit) episodes from the value of their final observation"""
    numpy_rollout: bool = True
    """on CPU, sample rollout actions with NumpyPolicy (the same actor in numpy; off: torch)"""

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
    probe = gym.make(args.env_id)
    space = probe.action_space
    if not isinstance(space, gym.spaces.Discrete):
        probe.close()
        raise ConfigError(
            f"{args.env_id} has a {type(space).__name__} action space; {SCRIPT} handles Discrete only "
            "(use ppo_continuous_action.py for Box actions)"
        )
    probe.reset(seed=0)  # gymnasium's env checker checks this first reset and step; the training envs skip it
    probe.step(space.sample())
    probe.close()
    if args.capture_video:
        try:
            import moviepy  # noqa: F401
        except ImportError as e:
            raise ConfigError(f"--capture-video needs moviepy, which did not import ({e}): pip install moviepy") from None
        probe = gym.make(args.env_id, render_mode="rgb_array")
        try:  # rendering needs the env family's own extra (pygame for classic control)
            probe.reset(seed=0)
            probe.render()
        except gym.error.DependencyNotInstalled as e:
            raise ConfigError(f"--capture-video cannot render {args.env_id}: {e}") from None
        finally:
            probe.close()
    if args.track:
        try:
            import wandb  # noqa: F401
        except ImportError as e:
            raise ConfigError(f"--track needs wandb, which did not import ({e}): pip install wandb") from None


def make_env(env_id, idx, capture_video, run_name):
    def thunk():
        # the env checker already ran on check_args' probe; here its wrapper would cost 5% of the env time
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array", disable_env_checker=True)
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id, disable_env_checker=True)
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
        return pickle.dumps(envs.envs)
    except Exception:
        return None


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    # detail 2: orthogonal weights, constant biases
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim, n_actions):
        super().__init__()
        # detail 13: one shared 64-64 tanh trunk, two heads
        self.network = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
        )
        self.actor = layer_init(nn.Linear(64, n_actions), std=0.01)
        self.critic = layer_init(nn.Linear(64, 1), std=1.0)

    def get_value(self, x):
        return self.critic(self.network(x)).squeeze(-1)

    def get_logits(self, x):
        return self.actor(self.network(x))

    def get_logits_and_value(self, x):
        hidden = self.network(x)
        return self.actor(hidden), self.critic(hidden).squeeze(-1)

    def policy_layers(self):
        """The layers from observation to logits, in order (for NumpyPolicy)."""
        return [*self.network, self.actor]


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
    """Sample Categorical(actor(obs)) in numpy, for the rollout on CPU.

    The weights are numpy views of the actor's CPU parameters, not copies: optimizer steps and
    load_state_dict are seen at once. Handles Linear and Tanh layers (a variant with other layers
    passes --no-numpy-rollout). Sampling is inverse-CDF with one uniform per row from numpy's RNG.
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

    def logits(self, obs):
        h = obs
        for layer in self.layers:
            h = np.tanh(h) if layer is None else h @ layer[0] + layer[1]
        return h

    def sample(self, obs):
        logits = self.logits(obs)
        cdf = np.exp(logits - logits.max(-1, keepdims=True)).cumsum(-1)
        u = np.random.random((len(cdf), 1)) * cdf[:, -1:]
        return (cdf < u).sum(-1)


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
            newlogits, newvalue = agent.get_logits_and_value(mb["obs"])
            newlogprob, entropy = categorical_logprob_entropy(newlogits, mb["actions"])
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


def evaluate_agent(agent, env_id, eval_episodes=10, seed=0, device="cpu"):
    """Returns of `eval_episodes` episodes of the agent's sampling policy, seeded for repeatability."""
    env = gym.make(env_id)
    generator = torch.Generator(device=device).manual_seed(seed)
    returns = []
    obs, _ = env.reset(seed=seed)
    while len(returns) < eval_episodes:
        episode_return, done = 0.0, False
        while not done:
            with torch.inference_mode():
                logits = agent.get_logits(torch.as_tensor(obs, dtype=torch.float32, device=device))
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
    agent = Agent(int(np.prod(env.observation_space.shape)), env.action_space.n).to(device)
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
    obs_shape = envs.single_observation_space.shape
    agent = Agent(int(np.prod(obs_shape)), envs.single_action_space.n).to(device)
    # detail 3: eps 1e-5. fused=True is the same Adam in one kernel per step, on the one flat tensor
    optimizer = torch.optim.Adam([flat_parameters(agent)], lr=args.learning_rate, eps=1e-5, fused=True)
    policy = NumpyPolicy(agent.policy_layers()) if args.numpy_rollout and device.type == "cpu" else None

    T, N = args.num_steps, args.num_envs
    # rollout storage lives in numpy: per-step writes are cheap and become tensors once per rollout
    obs_buf = np.zeros((T, N) + obs_shape, dtype=np.float32)
    actions_buf = np.zeros((T, N), dtype=np.int64)
    rewards_buf = np.zeros((T, N), dtype=np.float32)
    dones_buf = np.zeros((T, N), dtype=np.float32)
    episode_return, episode_length = np.zeros(N), np.zeros(N, dtype=np.int64)
    history = {"episodic_return": [], "episodic_length": [], "losses": [], "first_minibatch": [], "learning_rate": [],
               "seconds": {"env": 0.0, "inference": 0.0, "update": 0.0}}  # where the wall time goes
    seconds = history["seconds"]

    start_iteration, global_step = 1, 0
    next_obs, _ = envs.reset(seed=args.seed)
    if ckpt:
        agent.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start_iteration, global_step = ckpt["iteration"] + 1, ckpt["global_step"]
        if ckpt["envs"] is not None:  # continue the very same episodes
            envs.close()
            envs = make_envs(args, run_name, pickle.loads(ckpt["envs"]))
            next_obs, episode_return, episode_length = ckpt["next_obs"], ckpt["episode_return"], ckpt["episode_length"]
        else:  # keep the fresh episodes' first observations: the saved ones belong to other games
            print(f"{SCRIPT}: the checkpoint holds no env state; resuming with fresh episodes", file=sys.stderr)
        set_rng_states(ckpt["rng"])

    def checkpoint_state(iteration):
        return {
            "script": SCRIPT, "args": asdict(args), "run_name": run_name, "iteration": iteration,
            "global_step": global_step, "model": agent.state_dict(), "optimizer": optimizer.state_dict(),
            "rng": rng_states(), "next_obs": next_obs, "episode_return": episode_return.copy(),
            "episode_length": episode_length.copy(), "envs": env_snapshot(envs),
        }

    ckpt_path = f"runs/{run_name}/checkpoint.pt"
    gc.freeze()  # the ~300k objects made so far (mostly torch's) are never garbage: full collections skip them
    start_time, start_step = time.time(), global_step
    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = linear_lr(iteration, args.num_iterations, args.learning_rate)

        for step in range(T):
            global_step += N
            obs_buf[step] = next_obs
            t0 = time.perf_counter()
            if policy is not None:
                action = policy.sample(next_obs)
            else:
                with torch.inference_mode():
                    logits = agent.get_logits(torch.as_tensor(next_obs, dtype=torch.float32, device=device))
                    action = sample_categorical(logits).cpu().numpy()
            actions_buf[step] = action
            t1 = time.perf_counter()
            next_obs, reward, terminations, truncations, infos = envs.step(action)
            seconds["inference"] += t1 - t0
            seconds["env"] += time.perf_counter() - t1
            done = terminations | truncations
            rewards_buf[step] = reward
            dones_buf[step] = done

            if args.bootstrap_truncated and truncations.any():
                # r + gamma * V(final obs) for time-limit ends, so the done cut leaves the right target
                idx = np.flatnonzero(truncations & ~terminations)
                if idx.size:
                    final = np.stack([infos["final_obs"][i] for i in idx]).astype(np.float32)
                    with torch.inference_mode():
                        v = agent.get_value(torch.as_tensor(final, device=device)).cpu().numpy()
                    rewards_buf[step, idx] += args.gamma * v

            episode_return += reward
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
        b_actions = torch.as_tensor(actions_buf, device=device).reshape(-1)
        with torch.no_grad():
            logits, b_values = agent.get_logits_and_value(b_obs)
            b_logprobs, _ = categorical_logprob_entropy(logits, b_actions)
            next_value = agent.get_value(torch.as_tensor(next_obs, dtype=torch.float32, device=device))
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
