"""A trained Atari agent (ppo_atari.py's, a2c_paac.py's or impala_vtrace.py's), kept small and shown playing.

Run:   python -m benchmark.studies.atari_agent weights runs/<run name>/checkpoint.pt agent.pt
       python ppo_atari.py --eval-checkpoint agent.pt --eval-episodes 10      (or a2c_paac.py, impala_vtrace.py: its own)
       python -m benchmark.studies.atari_agent gif agent.pt agent.gif [--seed 1] [--every 2] [--max-frames 1500]

weights: a run's checkpoint.pt holds, beside the network, the optimizer's statistics (Adam's two moments, RMSProp's
square average: once or twice the network again), the emulators' states, the RNGs and the rollout's last observations;
this writes the network's weights alone, with what names them (the script, the run's args, its name, iteration and
step): the file --eval-checkpoint reads, and the script's --resume refuses in one line. Written whole or not at all (a
temporary file, then a rename).

gif: the agent plays one whole game (every life): the script's own --eval-checkpoint plays it (its evaluate(), the
same seed, the same sampled actions, the same score), and the emulator's screen before every --every-th step of the
agent (4 frames each) goes into an animated GIF at 20 pictures a second (2.7x the game's speed at --every 2), with the
raw score so far drawn in a corner; at most --max-frames pictures (the rest of the game is played, scored and not
drawn). Prints the game's score, its length, the pictures kept and the file's size.

Bad input (no such checkpoint, one of another script, a path that cannot be written, a --seed the script refuses)
stops it with one line, and so do a full disk and Ctrl-C, which leave no file behind.
"""

import argparse
import importlib
import os
import sys

import gymnasium as gym
import torch
from PIL import Image, ImageDraw

import ppo_atari

PICTURE_MS = 50  # a GIF keeps durations in hundredths of a second
# what a weights-only file holds (of them, what the checkpoint has: IMPALA counts updates, not iterations)
KEPT = ("script", "args", "run_name", "iteration", "update", "global_step", "model")
SCRIPTS = ("ppo_atari.py", "a2c_paac.py", "impala_vtrace.py")  # the Atari scripts whose one-process runs this reads
ERRORS = tuple(importlib.import_module(s[:-3]).ConfigError for s in SCRIPTS)  # their one-line errors


def script_of(path):
    """The module of the script (one of SCRIPTS) that wrote the checkpoint at `path`, and its checkpoint as that
    script's own loader reads it (refusing what it refuses)."""
    try:
        return ppo_atari, ppo_atari.load_checkpoint(path)[0]
    except ppo_atari.ConfigError as e:
        for script in SCRIPTS[1:]:  # ppo_atari.py's loader names the file that wrote a checkpoint it cannot read
            if f"was written by {script}, not by ppo_atari.py" in str(e):
                module = importlib.import_module(script[:-3])
                return module, module.load_checkpoint(path)[0]
        if ", not by ppo_atari.py" not in str(e):
            raise
        raise ppo_atari.ConfigError(f"{str(e).split(', not by')[0]}; this reads those of {', '.join(SCRIPTS)}") from None


def written(out, write):
    """write(path) into out's .tmp, then renamed to out: whole or not at all. A write that fails (a full disk: an OSError,
    or torch's RuntimeError) or is stopped (Ctrl-C) leaves no .tmp; a failed one is one line. Returns out's size."""
    try:
        write(f"{out}.tmp")
        os.replace(f"{out}.tmp", out)
    except (OSError, RuntimeError) as e:
        raise ppo_atari.ConfigError(
            f"cannot write {out!r} ({getattr(e, 'strerror', None) or e}); free some space on its disk, or give another path"
        ) from None
    finally:
        if os.path.exists(f"{out}.tmp"):
            os.remove(f"{out}.tmp")
    return os.path.getsize(out)


def write_weights(checkpoint, out):
    """The network of `checkpoint` (a run's checkpoint.pt of one of SCRIPTS) into `out`; returns out's size in bytes."""
    _, ckpt = script_of(checkpoint)
    return written(out, lambda path: torch.save({k: ckpt[k] for k in KEPT if k in ckpt}, path))


class Filmed(gym.Wrapper):
    """Outermost: the screen and the raw score so far before every `every`-th step of the agent, `max_frames` at most."""

    def __init__(self, env, every, max_frames, score):
        super().__init__(env)
        self.every, self.max_frames, self.score, self.steps, self.screens, self.shown = every, max_frames, score, 0, [], []

    def step(self, action):
        if self.steps % self.every == 0 and len(self.screens) < self.max_frames:
            self.screens.append(self.env.unwrapped.ale.getScreenRGB())
            self.shown.append(self.score.total)
        self.steps += 1
        return self.env.step(action)


class RawScore(gym.Wrapper):
    """Innermost, on the emulator itself: the sum of the first game's rewards, before any wrapper clips them."""

    total, games = 0.0, 0

    def reset(self, **kwargs):
        self.games += 1
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.total += float(reward) if self.games == 1 else 0.0
        return obs, reward, terminated, truncated, info


def play(weights, seed=None, every=2, max_frames=1500):
    """One whole game of the agent in `weights`, played by its script's evaluate() as --eval-checkpoint plays its first
    with this seed (default: the script's --seed), filmed: (score, agent steps, the screens kept as RGB arrays, the raw
    score shown on each)."""
    module, _ = script_of(weights)
    films, make_env = [], module.make_env

    def filmed_env(*args, **kwargs):  # the script's env, a RawScore slid under its wrappers and a Filmed over them
        env = inner = make_env(*args, **kwargs)
        while inner.env is not inner.unwrapped:
            inner = inner.env
        inner.env = score = RawScore(inner.env)
        films.append(Filmed(env, every, max_frames, score))
        return films[-1]

    module.make_env = filmed_env
    try:
        (score,) = module.evaluate(weights, eval_episodes=1, seed=module.Args.seed if seed is None else seed)
    finally:
        module.make_env = make_env
    (film,) = films
    return score, film.steps, film.screens, film.shown


def write_gif(screens, shown, out):
    """The screens as an animated GIF (looping), each with its score drawn in the top-right corner."""
    pictures = []
    for screen, score in zip(screens, shown):
        picture = Image.fromarray(screen)
        ImageDraw.Draw(picture).text((picture.width - 4, 2), f"{score:.0f}", fill=(255, 255, 255), anchor="ra")
        pictures.append(picture)
    # PIL merges a picture equal to the one before into it (their durations added): fewer frames, the same film
    return written(
        out,
        lambda path: pictures[0].save(
            path, format="GIF", save_all=True, append_images=pictures[1:], duration=PICTURE_MS, loop=0
        ),
    )


def check_out(out, source):
    """An output path whose folder exists and can be written, a file name, and not the input (`weights CKPT CKPT` would
    replace a run's resumable checkpoint by its weights alone), before any work."""
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise ppo_atari.ConfigError(f"cannot write {out!r}: its folder {folder!r} does not exist or is not writable")
    if os.path.isdir(out):
        raise ppo_atari.ConfigError(f"{out!r} is a folder; give the file to write, e.g. {os.path.join(out, 'agent.pt')}")
    if os.path.exists(out) and os.path.exists(source) and os.path.samefile(out, source):
        raise ppo_atari.ConfigError(f"{out!r} is the input {source!r}: it would be written over; give another file")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("weights", help="a run's checkpoint.pt -> the network's weights alone")
    w.add_argument("checkpoint")
    w.add_argument("out")
    g = sub.add_parser("gif", help="one game of the agent as an animated GIF")
    g.add_argument("weights")
    g.add_argument("out")
    g.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the game's seed (default: the script's --seed, whose first game its --eval-checkpoint plays)",
    )
    g.add_argument("--every", type=int, default=2, help="draw every n-th step of the agent")
    g.add_argument("--max-frames", type=int, default=1500, help="draw at most this many pictures")
    args = parser.parse_args(argv)
    try:
        check_out(args.out, args.checkpoint if args.command == "weights" else args.weights)
        if args.command == "weights":
            size = write_weights(args.checkpoint, args.out)
            print(f"{args.out}: {size / 2**20:.1f} MiB, the network of {args.checkpoint}")
            return
        if args.every < 1 or args.max_frames < 1:
            raise ppo_atari.ConfigError(f"--every and --max-frames must be >= 1, got {args.every} and {args.max_frames}")
        if args.seed is not None:  # the seeds the scripts' --eval-checkpoint plays (the same bounds in all three)
            ppo_atari.check_args(ppo_atari.Args(seed=args.seed))
        if not args.out.lower().endswith(".gif"):
            raise ppo_atari.ConfigError(f"{args.out!r} does not end in .gif; name the picture <name>.gif")
        score, steps, screens, shown = play(args.weights, args.seed, args.every, args.max_frames)
        size = write_gif(screens, shown, args.out)
        print(f"{args.out}: score {score:.0f} in {steps} steps of the agent, {len(screens)} pictures, {size / 2**20:.1f} MiB")
    except ERRORS as e:
        sys.exit(f"atari_agent.py: error: {e}")
    except KeyboardInterrupt:  # the .tmp already removed (written)
        print("atari_agent.py: interrupted (Ctrl-C); nothing written", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
