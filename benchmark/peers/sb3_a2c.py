"""Stable-Baselines3's A2C configured as PAAC (a2c_paac.py's algorithm): an independent implementation to run beside
ours on the same protocol.

Run:   python -m benchmark.peers.sb3_a2c --env-id BreakoutNoFrameskip-v4 --total-timesteps 2000000
       python -m benchmark.tools.run --script benchmark/peers/sb3_a2c.py --env-ids BreakoutNoFrameskip-v4 --seeds 1 2 -- \
           --total-timesteps 2000000 --loss-scale 5 --vf-coef 0.25 --max-grad-norm 3 --ent-coef 0.02

The flags carry a2c_paac.py's names, defaults, ranges and checks; the run is logged as ours is, to
runs/<env>__<exp name>__<seed>__<time>/ with the same tags (charts/episodic_return, charts/episodic_length,
charts/learning_rate, charts/SPS, losses/*) and the Args as the "hyperparameters" text, so that benchmark/tools/run.py,
report.py and compare.py take it as one of our scripts. Tested against stable-baselines3 2.9.2.

How SB3 is configured, detail by detail of a2c_paac.py, and where it still differs:
  1. 32 envs in this process (DummyVecEnv), not on 8 worker processes: the same data, only the speed differs; env i
     is seeded seed + i in both, but the random numbers are drawn in another order, so the games differ
  2. A2C(n_steps=5): one batched forward for all envs per step; the actions sampled by torch's Categorical (ours:
     inverse-CDF sampling of the same softmax)
  3. gae_lambda=1: GAE(1) is the n-step return minus V, cut at a done and bootstrapped from V(s_{t_max+1}), as
     ours. SB3 takes V from the rollout's forward, ours from the update's, with the same parameters (one update per
     rollout). SB3 always bootstraps a time-limit end, r + gamma V(final obs) (ours only with --bootstrap-truncated,
     off): the ALE ends a game at 108k frames (27k steps), which no near-random Breakout game reaches
  4. SB3's loss is pg + ent_coef * (-H) + vf_coef * MSE(R, V), means over the batch, MSE without a 1/2 and the
     advantage without gradient: ours term by term, once SB3's defaults (vf_coef 0.5, ent_coef 0) are set to ours;
     normalize_advantage=False (SB3's default, ours has none). --loss-scale, which SB3 lacks, is a hook on every
     parameter multiplying its gradient before SB3 clips the global norm: the gradient of ours, clip included
  5. CnnPolicy: one trunk shared by a softmax policy head and a linear value head, orthogonal init (gain sqrt 2,
     policy 0.01, value 1, zero biases; --init torch is ortho_init=False, every layer's own PyTorch init, as ours),
     pixels / 255; net_arch=[] (no layers between trunk and heads). --arch nature is SB3's NatureCNN; SB3 has no nips
     trunk, so NipsCNN below is ours (conv16 8x8/4, conv32 4x4/2, fc256) in SB3's features-extractor API: the only
     network code here that is not SB3's
  6. RMSpropTFLike(alpha=--rmsprop-decay, eps=--rmsprop-eps), SB3's TensorFlow-form RMSProp: mean square from 1,
     epsilon inside the root, the same update as ours (A2C's own default is torch's RMSprop with eps 1e-5)
  7. max_grad_norm: SB3 clips the global gradient norm as ours (its default 0.5 set to ours)
  8. --atari-wrapper paac (default): SB3's own wrapper classes in ours' order: NoopResetEnv(30) (1-30 no-ops at
     each reset), MaxAndSkipEnv(4) (max of the last two frames), WarpFrame (84x84 gray, INTER_AREA, as ours),
     ClipRewardEnv (the reward's sign; ours clips to [-1, 1]: the same on the ALE's integer rewards), then
     VecFrameStack(4). No life-loss terminal, no FIRE on reset, as ours. VecFrameStack starts an episode with
     zeros in the three older frames, ours with three copies of the first frame.
     --atari-wrapper sb3: SB3's AtariWrapper as make_atari_env uses it: also a lost life ends the training episode
     (the return is cut there and the frame stack zeroed) and FIRE (then action 2) is pressed after every reset and
     lost life, in games that have FIRE
  9. the step count grows by n_envs * n_steps per update; SB3 runs ceil(total / batch) updates, ours floor: here
     learn() gets the floor times the batch
  The learning rate: SB3 calls the schedule with progress_remaining p = 1 - k * batch / total before update k.
  lr_schedule() turns p back into k and returns ours, lr (1 - (k - 1) / (A - 1)), floored at 0, where A is the
  number of updates in --anneal-timesteps (default: --total-timesteps): lr at the first update, 0 at update A.
  SB3's own linear schedule, lr * p = lr (1 - k / I) over the I updates of the run, never uses lr itself and cannot
  anneal over another step count.
  Logged: charts/episodic_return is SB3's Monitor's info["episode"]["r"]: Monitor sits on the ALE env below every
  wrapper, so it sums the raw rewards of the whole game (all lives), as ours. charts/episodic_length counts the
  agent steps of that game, as ours (Monitor's own "l" counts raw frames). losses/ value_loss, policy_loss,
  entropy (SB3 logs -H as entropy_loss) and explained_variance are SB3's numbers of the same definitions; SB3
  keeps no gradient norm, so losses/grad_norm is not logged.
  Checkpoints: --save-model writes runs/<run>/checkpoint.pt every --save-every updates and at the end, and --resume
  continues one as ours does (benchmark/tools/run.py resumes an interrupted run so): the policy, RMSProp's state, the random
  number generators, and the games where they stood (each ALE's emulator and RNG, the wrappers' state, the frame
  stack), so that a resumed run takes the same steps as an uninterrupted one.
  Not here: --eval-checkpoint, --capture-video, --track, --bf16, --channels-last.
"""

import io
import os
import pickle
import random
import sys
import time
from dataclasses import asdict, dataclass
from typing import Literal, Optional

import numpy as np
import torch
import torch.nn as nn
from stable_baselines3 import A2C
from stable_baselines3.common.atari_wrappers import AtariWrapper, ClipRewardEnv, MaxAndSkipEnv, NoopResetEnv, WarpFrame
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, NatureCNN
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack, VecTransposeImage

import a2c_paac as paac  # the flag checks, the run directory, the ALE's env ids

SCRIPT = "sb3_a2c.py"
ConfigError = paac.ConfigError  # bad input, found before anything starts; __main__ prints it as one line
save_checkpoint = paac.save_checkpoint  # atomic: a crash mid-write leaves the previous checkpoint intact


@dataclass
class Args:
    exp_name: str = "sb3_a2c"  # the name of this experiment (the first part of the run name)
    seed: int = 1  # seed of python, numpy, torch and the environments
    torch_deterministic: bool = True  # if toggled, sets `torch.backends.cudnn.deterministic=True`
    cuda: bool = True  # use CUDA when available (falls back to CPU with a notice)
    torch_threads: int = 1  # torch intra-op threads (0: torch's default); 2 ran 5x slower than 1 on 2 busy cores

    # Algorithm specific arguments: a2c_paac.py's, with its defaults
    env_id: str = "BreakoutNoFrameskip-v4"  # the id of the environment (an ALE NoFrameskip-v4 game)
    total_timesteps: int = 115_000_000  # total environment steps (4 frames each); paper: N_max = 1.15e8
    arch: Literal["nips", "nature"] = "nips"  # the network: nips (conv16-conv32-fc256) or nature (SB3's NatureCNN)
    init: Literal["orthogonal", "torch"] = "orthogonal"  # SB3's orthogonal init, or torch: ortho_init=False (the authors')
    learning_rate: Optional[float] = None  # the learning rate of RMSProp (default: the paper's 0.0007 * num_envs)
    num_envs: int = 32  # n_e, the number of parallel environments
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
    atari_wrapper: Literal["paac", "sb3"] = "paac"  # paac: SB3's wrappers in ours' preprocessing; sb3: AtariWrapper
    save_model: bool = False  # write `runs/<run name>/checkpoint.pt` every --save-every updates and at the end
    save_every: int = 5000  # updates between periodic checkpoints (with --save-model)
    resume: Optional[str] = None  # continue this checkpoint's run (flags beside it: only those in RESUMABLE)

    # filled in at runtime
    batch_size: int = 0  # computed: num_envs * num_steps
    num_iterations: int = 0  # computed: total_timesteps // batch_size


# the flags that may change beside --resume: the budget, and how the run is saved or placed
RESUMABLE = {"resume", "total_timesteps", "save_model", "save_every", "cuda", "torch_threads"}


def check_args(args: Args, ckpt=None) -> None:
    """a2c_paac.py's checks (RANGES, the budget, the env id) on the flags the two scripts share."""
    shared = {k: v for k, v in asdict(args).items() if k in paac.Args.__dataclass_fields__}
    try:
        paac.check_args(paac.Args(**shared, num_workers=1), ckpt)
    except ConfigError as e:
        raise ConfigError(str(e).replace(paac.SCRIPT, SCRIPT)) from None


def paac_preprocessing(env):
    """--atari-wrapper paac: a2c_paac.py's detail 8 from SB3's own wrappers (the frame stack comes after them)."""
    return ClipRewardEnv(WarpFrame(MaxAndSkipEnv(NoopResetEnv(env, noop_max=30), skip=4)))


def make_envs(args):
    """num_envs games in this process; make_vec_env puts SB3's Monitor right on each ALE env, below the wrappers."""
    wrapper = paac_preprocessing if args.atari_wrapper == "paac" else AtariWrapper
    envs = make_vec_env(args.env_id, args.num_envs, args.seed, wrapper_class=wrapper, vec_env_cls=DummyVecEnv)
    return VecFrameStack(envs, 4)


class NipsCNN(BaseFeaturesExtractor):
    """--arch nips, which SB3 lacks: a2c_paac.py's A3C FF trunk, 32 * 9 * 9 = 2592 conv features, then fc256."""

    def __init__(self, observation_space, features_dim=256):
        super().__init__(observation_space, features_dim)
        self.cnn = nn.Sequential(
            nn.Conv2d(observation_space.shape[0], 16, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(16, 32, 4, stride=2),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(32 * 9 * 9, features_dim),
            nn.ReLU(),
        )

    def forward(self, observations):
        return self.cnn(observations)


def lr_schedule(args):
    """a2c_paac.py's learning rate as an SB3 schedule of progress_remaining p = 1 - k * batch / total (update k)."""
    anneal = (args.anneal_timesteps or args.total_timesteps) // args.batch_size

    def lr(p):
        k = max(round((1 - p) * args.num_iterations), 1)  # SB3 asks for p = 1 when it builds the optimizer
        return args.learning_rate * (max(1 - (k - 1) / max(anneal - 1, 1), 0.0) if args.anneal_lr else 1.0)

    return lr


def make_model(args, envs, device="cpu"):
    """SB3's A2C set to PAAC's algorithm (args with learning_rate, batch_size, num_iterations filled in)."""
    policy_kwargs = dict(
        features_extractor_class={"nips": NipsCNN, "nature": NatureCNN}[args.arch],
        net_arch=[],
        ortho_init=args.init == "orthogonal",
        optimizer_class=RMSpropTFLike,
        optimizer_kwargs=dict(alpha=args.rmsprop_decay, eps=args.rmsprop_eps, weight_decay=0),
    )
    model = A2C(
        "CnnPolicy",
        envs,
        learning_rate=lr_schedule(args),
        n_steps=args.num_steps,
        gamma=args.gamma,
        gae_lambda=1.0,
        ent_coef=args.ent_coef,
        vf_coef=args.vf_coef,
        max_grad_norm=args.max_grad_norm,
        normalize_advantage=False,
        policy_kwargs=policy_kwargs,
        seed=args.seed,
        device=device,
    )
    model.set_logger(Logger(None, []))  # the losses in name_to_value; SB3's own left an empty SB3-<time> dir in /tmp a run
    if args.loss_scale != 1.0:  # ours multiplies the loss: here each gradient, before SB3 clips their global norm
        for p in model.policy.parameters():
            p.register_hook(lambda grad: grad * args.loss_scale)
    return model


class GamesUnpickler(paac.Unpickler):
    """a2c_paac.py's unpickler of saved games, which also takes Stable-Baselines3's classes (its Atari wrappers)."""

    def find_class(self, module, name):
        if module.split(".")[0] == "stable_baselines3" and isinstance(
            found := pickle.Unpickler.find_class(self, module, name), type
        ):
            return found
        return super().find_class(module, name)


def load_checkpoint(path, args):
    """The checkpoint at `path` and the args to resume with: the checkpoint's, with the RESUMABLE flags that `args`
    sets to other than the defaults. Any other flag set to a value other than the checkpoint's is refused."""
    arrays = [np._core.multiarray._reconstruct, np._core.multiarray.scalar, np.ndarray, np.dtype]
    arrays += [t for t in vars(np.dtypes).values() if isinstance(t, type)]
    try:  # weights only, as a2c_paac.py loads its own: a pickle that could run code is refused unread
        with torch.serialization.safe_globals(arrays):
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        why = " ".join(str(e).split("WeightsUnpickler error:")[-1].split("Check the documentation")[0].split())
        raise ConfigError(f"checkpoint {path!r} could not be read ({type(e).__name__}: {why})") from None
    if not isinstance(ckpt, dict) or ckpt.get("script") != SCRIPT or set(ckpt.get("args") or {}) - set(asdict(Args())):
        raise ConfigError(f"checkpoint {path!r} was not written by this {SCRIPT}")
    default, values = asdict(Args()), asdict(args)
    given = {k for k, v in values.items() if v != default[k]}
    for k in sorted(given - RESUMABLE):
        if values[k] != ckpt["args"][k]:
            raise ConfigError(
                f"--{k.replace('_', '-')} cannot change when resuming (the checkpoint has "
                f"{ckpt['args'][k]!r}); start a new run to train with {values[k]!r}"
            )
    return ckpt, Args(**{**ckpt["args"], **{k: values[k] for k in given & RESUMABLE}})


def restore(model, envs, ckpt):
    """Put a checkpoint's training state into a new model and its envs (make_envs'), where the saved run stood."""
    model.policy.load_state_dict(ckpt["policy"])
    model.policy.optimizer.load_state_dict(ckpt["optimizer"])
    model.num_timesteps, model._n_updates = ckpt["global_step"], ckpt["iteration"]
    # learn() resets no game. The observation goes back in the memory layout a step gives it (VecTransposeImage's
    # NCHW view of NHWC frames; the checkpoint holds a C-order copy): the convolutions pick their kernel by the
    # input's layout, and on an AVX2-only CPU the two kernels' values differ in the last bits
    model._last_obs = VecTransposeImage.transpose_image(np.ascontiguousarray(ckpt["last_obs"].transpose(0, 2, 3, 1)))
    model._last_episode_starts = ckpt["episode_starts"]
    games = envs.venv.envs  # DummyVecEnv's: swapped for the saved ones
    for i, saved in enumerate(ckpt["envs"]):
        games[i].close()
        games[i], ale_state, np_random = GamesUnpickler(io.BytesIO(saved)).load()
        games[i].unwrapped.restore_state(ale_state)  # an AtariEnv pickles only its arguments: the emulator is beside
        games[i].unwrapped.np_random = np_random  # NoopResetEnv draws its no-ops from it
    envs.stacked_obs.stacked_obs[:] = ckpt["stacked_obs"]
    random.setstate(ckpt["rng"]["python"])
    np.random.set_state(ckpt["rng"]["numpy"])
    torch.set_rng_state(ckpt["rng"]["torch"])  # the actions are sampled from it (on a GPU, from CUDA's)
    if "cuda" in ckpt["rng"] and model.device.type == "cuda":
        torch.cuda.set_rng_state_all(ckpt["rng"]["cuda"])


class PAACLogging(BaseCallback):
    """a2c_paac.py's TensorBoard tags and progress line from SB3's training; the history into `history`; with
    --save-model the checkpoints, each between an update and the next rollout."""

    def __init__(self, args, writer, history, envs, run_dir, run_name, ckpt=None):
        super().__init__()
        self.args, self.writer, self.history, self.envs = args, writer, history, envs
        self.run_dir, self.run_name = run_dir, run_name
        self.game_length = ckpt["game_length"] if ckpt else np.zeros(args.num_envs, dtype=np.int64)
        self.updates_logged = ckpt["iteration"] if ckpt else 0

    def _on_training_start(self):  # the envs are reset (the ALE loads each game twice): SPS counts from here
        self.start_time, self.start_step = time.time(), self.model.num_timesteps

    def _on_step(self):
        self.game_length += 1
        for i, info in enumerate(self.locals["infos"]):
            if "episode" in info:  # Monitor below every wrapper: the game is over (not a life), its raw score
                self.writer.add_scalar("charts/episodic_return", info["episode"]["r"], self.num_timesteps)
                self.writer.add_scalar("charts/episodic_length", self.game_length[i], self.num_timesteps)
                self.history["episodic_return"].append(float(info["episode"]["r"]))
                self.history["episodic_length"].append(int(self.game_length[i]))
                self.game_length[i] = 0
        return True

    def _on_rollout_start(self):  # the previous rollout's update is done, the next rollout has drawn nothing yet
        self.log_update()

    def _on_training_end(self):
        self.log_update()

    def save(self):
        model, envs = self.model, self.envs
        save_checkpoint(
            f"{self.run_dir}/checkpoint.pt",
            {
                "script": SCRIPT,
                "args": asdict(self.args),
                "run_name": self.run_name,
                "iteration": model._n_updates,
                "global_step": model.num_timesteps,
                "policy": model.policy.state_dict(),
                "optimizer": model.policy.optimizer.state_dict(),
                "rng": {
                    "python": random.getstate(),
                    "numpy": np.random.get_state(),
                    "torch": torch.get_rng_state(),
                    **({"cuda": torch.cuda.get_rng_state_all()} if model.device.type == "cuda" else {}),
                },
                "last_obs": model._last_obs.copy(),
                "episode_starts": model._last_episode_starts.copy(),
                "stacked_obs": envs.stacked_obs.stacked_obs.copy(),
                "game_length": self.game_length.copy(),
                "envs": [
                    pickle.dumps((game, game.unwrapped.clone_state(include_rng=True), game.unwrapped.np_random))
                    for game in envs.venv.envs
                ],
            },
        )

    def losses(self, logged):
        """Our losses/ tags from what A2C.train() recorded (benchmark/peers/sb3_trpo.py: TRPO.train())."""
        return {
            "value_loss": logged["train/value_loss"],
            "policy_loss": logged["train/policy_loss"],
            "entropy": -logged["train/entropy_loss"],
            "explained_variance": logged["train/explained_variance"],
        }

    def log_update(self):
        if self.model._n_updates == self.updates_logged:
            return
        self.updates_logged, step = self.model._n_updates, self.model.num_timesteps
        losses = self.losses(self.model.logger.name_to_value)
        lr = self.model.policy.optimizer.param_groups[0]["lr"]
        self.history["losses"].append(losses)
        self.history["learning_rate"].append(lr)
        self.writer.add_scalar("charts/learning_rate", lr, step)
        for k, v in losses.items():
            self.writer.add_scalar(f"losses/{k}", v, step)
        sps = int((step - self.start_step) / (time.time() - self.start_time))
        self.writer.add_scalar("charts/SPS", sps, step)
        # progress with the time left, as ours: one updating line in a terminal, a line every 500 updates in a log file
        tty, last = sys.stdout.isatty(), self.updates_logged == self.args.num_iterations
        if tty or self.updates_logged % 500 == 0 or last:
            left = int((self.args.num_iterations - self.updates_logged) * self.args.batch_size / max(sps, 1))
            line = (
                f"step {step}/{self.args.num_iterations * self.args.batch_size} SPS {sps} ETA {left // 3600}:"
                f"{left % 3600 // 60:02d}:{left % 60:02d} return(last 20) "
                f"{np.mean(self.history['episodic_return'][-20:] or np.nan):.1f}"
            )
            print(f"\r{line}\033[K" if tty else line, end="" if tty and not last else "\n", flush=True)
        if self.args.save_model and (self.updates_logged % self.args.save_every == 0 or last):
            self.save()


def train(args: Args):
    """Train; return a dict with the per-game returns/lengths, per-update losses and learning rates, and the model."""
    ckpt, args = load_checkpoint(args.resume, args) if args.resume else (None, args)
    check_args(args, ckpt)
    args.learning_rate = args.learning_rate or 0.0007 * args.num_envs  # the paper's rule, as ours
    args.batch_size = args.num_envs * args.num_steps
    args.num_iterations = args.total_timesteps // args.batch_size
    if ckpt:  # a resumed run logs on in the checkpoint's own directory (or in runs/<its name> if it was moved)
        run_name, run_dir = ckpt["run_name"], os.path.dirname(args.resume) or "."
        run_dir = run_dir if os.path.basename(os.path.abspath(run_dir)) == run_name else f"runs/{run_name}"
        print(f"{SCRIPT}: resuming {run_name} after update {ckpt['iteration']} in {run_dir}", file=sys.stderr)
    else:
        run_dir = paac.new_run_dir(f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}")
        run_name = os.path.basename(run_dir)
    from torch.utils.tensorboard import SummaryWriter

    # purge_step: TensorBoard drops what an interrupted run logged after its checkpoint, so nothing counts twice
    writer = SummaryWriter(run_dir, purge_step=ckpt["global_step"] + 1 if ckpt else None)
    writer.add_text(
        "hyperparameters",  # as ours: run.py and report.py read the Args from it
        "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in asdict(args).items()),
    )
    torch.backends.cudnn.deterministic = args.torch_deterministic
    torch.set_num_threads(args.torch_threads or torch.get_num_threads())
    if args.cuda and not torch.cuda.is_available():
        print(f"{SCRIPT}: --cuda is set but no CUDA device is available; running on CPU", file=sys.stderr)
    device = "cuda" if args.cuda and torch.cuda.is_available() else "cpu"
    history = {"episodic_return": [], "episodic_length": [], "losses": [], "learning_rate": []}
    envs = make_envs(args)
    try:
        model = make_model(args, envs, device)
        if ckpt:
            restore(model, envs, ckpt)
        callback = PAACLogging(args, writer, history, envs, run_dir, run_name, ckpt)
        # learn() counts the steps it is given from model.num_timesteps on (0 for a new run): the schedule's steps stay
        # the whole run's; no SB3 log output
        model.learn(
            args.num_iterations * args.batch_size - model.num_timesteps,
            callback=callback,
            log_interval=None,
            reset_num_timesteps=False,
        )
    finally:
        envs.close()
        writer.close()
    history.update(
        run_name=run_name,
        run_dir=run_dir,
        global_step=model.num_timesteps,
        model=model,
        checkpoint=f"{run_dir}/checkpoint.pt" if args.save_model else None,
    )
    return history


def cli(script, train, args_type, config_error):
    """An SB3 stand-in's command line, as the top-level scripts': bad input is one line and exit status 1."""
    import tyro

    try:
        train(tyro.cli(args_type))
    except config_error as e:
        sys.exit(f"{script}: error: {e}")


if __name__ == "__main__":
    cli(SCRIPT, train, Args, ConfigError)
