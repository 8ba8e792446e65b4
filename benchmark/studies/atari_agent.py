"""A trained ppo_atari.py agent, kept small and shown playing (issue 50: the Breakout rule of thumb's agent).

Run:   python -m benchmark.studies.atari_agent weights runs/<run name>/checkpoint.pt agent.pt
       python ppo_atari.py --eval-checkpoint agent.pt --eval-episodes 10
       python -m benchmark.studies.atari_agent gif agent.pt agent.gif [--seed 1] [--every 2] [--max-frames 1500]

weights: a run's checkpoint.pt holds, beside the network, Adam's two moments (twice the network again), the emulators'
states, the RNGs and the rollout's last observations; this writes the network's weights alone, with what names them
(the script, the run's args, its name, iteration and step): the file --eval-checkpoint reads, and ppo_atari.py's
--resume refuses in one line. Written whole or not at all (a temporary file, then a rename).

gif: the agent plays one whole game (every life), as --eval-checkpoint plays its first (the same seed, the same
sampled actions, the same score), and the emulator's screen after every --every-th step of the agent (4 frames each)
goes into an animated GIF at 20 pictures a second (2.7x the game's speed at --every 2), with the score so far drawn
in a corner; at most --max-frames pictures (the rest of the game is played, scored and not drawn). Prints the game's
score, its length, the pictures kept and the file's size.

Bad input (no such checkpoint, one of another script, a path that cannot be written, a --seed ppo_atari.py refuses)
stops it with one line, and so do a full disk and Ctrl-C, which leave no file behind.
"""

import argparse
import os
import sys

import torch
from PIL import Image, ImageDraw

import ppo_atari

PICTURE_MS = 50  # a GIF keeps durations in hundredths of a second
KEPT = ("script", "args", "run_name", "iteration", "global_step", "model")  # what a weights-only file holds


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
    """The network of `checkpoint` (a ppo_atari.py checkpoint.pt) into `out`; returns out's size in bytes."""
    ckpt, _ = ppo_atari.load_checkpoint(checkpoint)
    return written(out, lambda path: torch.save({k: ckpt[k] for k in KEPT if k in ckpt}, path))


def play(weights, seed=ppo_atari.Args.seed, every=2, max_frames=1500):
    """One whole game of the agent in `weights`, played as ppo_atari.evaluate plays its first with this seed:
    (score, agent steps, the screens kept as RGB arrays, the score shown on each)."""
    ckpt, args = ppo_atari.load_checkpoint(weights)
    env = ppo_atari.make_env(args.env_id)
    agent = ppo_atari.Agent(env.observation_space.shape[0], env.action_space.n, args.channels_last, args.bf16)
    agent.load_state_dict(ckpt["model"])
    screens, shown, score, steps = [], [], 0.0, 0
    obs, _ = env.reset(seed=seed)
    with torch.random.fork_rng(), torch.inference_mode():
        torch.manual_seed(seed)
        while True:
            if steps % every == 0 and len(screens) < max_frames:
                screens.append(env.unwrapped.ale.getScreenRGB())
                shown.append(score)
            action, *_ = agent.get_action_and_value(torch.as_tensor(obs[None]))
            obs, _, terminated, truncated, info = env.step(action.item())
            steps += 1
            score = float(env.get_wrapper_attr("episode_returns"))  # the raw score so far (the statistics' sum)
            if "episode" in info:  # the whole game is over (its raw score, as evaluate() reads it)
                env.close()
                return float(info["episode"]["r"]), steps, screens, shown
            if terminated or truncated:  # a life lost: the game goes on from here
                obs, _ = env.reset()


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
    """An output path whose folder exists and can be written, a file name, and not the input (issue 75: `weights CKPT
    CKPT` replaced a run's resumable checkpoint by its weights alone), before any work."""
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
        default=ppo_atari.Args.seed,
        help="the game's seed (default: ppo_atari.py's --seed, whose first game --eval-checkpoint plays)",
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
        ppo_atari.check_args(ppo_atari.Args(seed=args.seed))  # the seeds ppo_atari.py's --eval-checkpoint plays
        if not args.out.lower().endswith(".gif"):
            raise ppo_atari.ConfigError(f"{args.out!r} does not end in .gif; name the picture <name>.gif")
        score, steps, screens, shown = play(args.weights, args.seed, args.every, args.max_frames)
        size = write_gif(screens, shown, args.out)
        print(f"{args.out}: score {score:.0f} in {steps} steps of the agent, {len(screens)} pictures, {size / 2**20:.1f} MiB")
    except ppo_atari.ConfigError as e:
        sys.exit(f"atari_agent.py: error: {e}")
    except KeyboardInterrupt:  # the .tmp already removed (written)
        print("atari_agent.py: interrupted (Ctrl-C); nothing written", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
