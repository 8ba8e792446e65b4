"""Ours and a CleanRL run in lockstep: the 37-details blog's method (same seed; compare observations, actions, then losses step
by step) for the curves of benchmark/peers/vs_cleanrl.py --fidelity.

Run:   python -m benchmark.peers.lockstep --cleanrl-run <CleanRL's TensorBoard run dir> [--script ppo_continuous_action.py] \
           [--iterations 5] [--work-dir DIR] -- --env-id Walker2d-v4 --seed 1 --total-timesteps 1000000 \
           --gymnasium-normalization

ppo_continuous_action.py draws the same random numbers as CleanRL's in its rollout (the init, then one standard
normal per action component), but not in its update: CleanRL shuffles each epoch with numpy (np.random.shuffle of the
previous epoch's order, in place; of the envs in ppo_atari_lstm.py), ours with torch.randperm; and CleanRL anneals the
learning rate to lr / N at the last iteration, ours to 0 (detail 4). This writes a copy of ours with CleanRL's shuffle
and schedule (each line it changes must be found exactly once), runs it for --iterations iterations with the flags
after `--` (the CleanRL run's seed and budget, and for ppo_continuous_action.py --gymnasium-normalization so the
normalisation follows CleanRL's gymnasium 0.29.1), and prints, per iteration, every loss both logged and their
largest relative difference (relative to the larger of |CleanRL's value| and its mean over the iterations compared),
then the first game whose return differs. Identical through an iteration means the same observations, actions,
returns and update up to float rounding, which the chaotic MuJoCo dynamics later amplify. Exits 1 when the first
iteration already differs by more than --tolerance (the two cannot be the same algorithm then), 2 on bad input (and
when the flags after `--` give another value of a flag than the CleanRL run logged, env id and seed included: not a pair
to compare; found by our script's own parser before it runs).
The discrete scripts sample by inverse CDF where CleanRL's Categorical calls torch.multinomial: in them the copy
samples as CleanRL does too (ppo.py: python -m benchmark.peers.lockstep --script ppo.py --cleanrl-run <its CartPole run> --
--seed 1). Measured on seed 1 (benchmark/results/): ppo.py on CartPole is identical to CleanRL's run through 8 of 8
iterations, ppo_atari_envpool.py on Breakout-v5 through 2 of 4 (to 8e-6; then rounding grows to 1e-2 by the 4th, the
games still equal; envpool 1.2.5 against CleanRL's 0.8.4: the same frames); ppo_atari.py and
ppo_atari_lstm.py play the same games, but their losses differ by 0.1-3% from the first update: CleanRL resizes frames
before converting them to gray, ours after, and 0.08% of the pixels differ by one level (ppo_atari_lstm.py with the
two swapped is identical to CleanRL's at the first iteration).
MuJoCo 4 changed the physics of Humanoid, HumanoidStandup, Ant (free joints: from the first reset) and Hopper (from its
first contacts; tests/test_mujoco_physics.py), so on them a run on MuJoCo 4 and one on an earlier MuJoCo part early: the
output names each side's MuJoCo (ours as our run logged it, CleanRL's from --cleanrl-mujoco, which its runs do not log),
and such a pair is refused with exit status 2. CleanRL's runs and published v4 numbers are MuJoCo 2.3.3's: run ours on
it from the mujoco-ref target (bash scripts/install.sh mujoco-ref; .venv-mujoco-ref/bin/python -m benchmark.peers.lockstep
...). Humanoid-v4, seed 3, both on 2.3.3: identical through iteration 1 of 5 (2e-6), the first 188 games equal
(benchmark/results/, the Walker2d report).
"""

import argparse
import dataclasses
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

from benchmark.cli import ConfigError
from benchmark.runs import ROOT, read_run

TAGS = [
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/old_approx_kl",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
    "charts/learning_rate",
]
# (what ours has, CleanRL's choice in its place): detail 4's schedule, and a stop
PATCHES = [
    ("frac = 1 - (iteration - 1) / max(args.num_iterations - 1, 1)", "frac = 1 - (iteration - 1) / args.num_iterations"),
    (
        """    for iteration in range(start_iteration, args.num_iterations + 1):
""",
        """    for iteration in range(start_iteration, min(args.num_iterations, LOCKSTEP_ITERATIONS) + 1):
""",
    ),
]
# and the update's shuffle: ours draws torch.randperm(n) once an epoch (of the samples, or of the envs in
# ppo_atari_lstm.py); CleanRL makes one np.arange(n) before the epochs and np.random.shuffle's it in place each epoch
EPOCHS = "    for epoch in range(args.update_epochs):\n"
RANDPERM = re.compile(r"torch\.randperm\(([^,]+), device=([^)]+)\)")

# the Args both log that place or track a run and do not change what it computes: left out of the check that the two
# runs were made with the same flags (and mujoco, our row after the Args: the MuJoCo check below judges it)
NOT_COMPARED = {
    "exp_name",
    "cuda",
    "torch_deterministic",
    "track",
    "wandb_project_name",
    "wandb_entity",
    "capture_video",
    "save_model",
    "upload_model",
    "hf_entity",
    "mujoco",
}
# the envs whose physics MuJoCo 4 changed (1,000 random steps from reset(seed=3)): those with a free joint from
# the first reset (Humanoid-v4's observation differs under 4.0.0 from 2.3.3 and 3.1.6, which agree to 4e-10), Hopper from
# its first contacts (step 8). Walker2d agrees to 1e-12 under all three; HalfCheetah's rounding differences (1e-14)
# grow past 1e-9 by step 49 between any two of them, as its dynamics amplify them
CHANGED_IN_MUJOCO_4 = {"Humanoid", "HumanoidStandup", "Ant", "Hopper"}
# the Args that train() computes from the others (0 until then), as CleanRL's scripts compute them
DERIVED = {"batch_size", "minibatch_size", "num_iterations"}


def mujoco_check(env_id, ours, theirs):
    """Why a lockstep of env_id, ours on MuJoCo `ours` and CleanRL's run on `theirs` (None: not known), would compare
    two physics rather than two algorithms; None when it would not (or ours has no MuJoCo: the script then says so)."""
    if env_id.split("-v")[0] not in CHANGED_IN_MUJOCO_4 or ours is None:
        return None
    if theirs is None:
        return (
            f"MuJoCo 4 changed the physics of {env_id}: give --cleanrl-mujoco, the MuJoCo CleanRL's run ran on "
            "($CLEANRL_PY -c 'import mujoco; print(mujoco.__version__)')"
        )
    if (int(ours.split(".")[0]) >= 4) != (int(theirs.split(".")[0]) >= 4):
        return (
            f"ours runs MuJoCo {ours}, CleanRL's run ran on {theirs}: MuJoCo 4 changed the physics of {env_id}, so the "
            "two would part by the physics, not the algorithm; run ours on the run's MuJoCo (2.3.3: bash "
            "scripts/install.sh mujoco-ref, then .venv-mujoco-ref/bin/python -m benchmark.peers.lockstep ...)"
        )
    return None


# and in a discrete script, where it samples: CleanRL's Categorical(logits).sample() in place of the inverse CDF
SAMPLING = (
    "action = (logp.exp().cumsum(-1) < torch.rand_like(logp[..., :1])).sum(-1).clamp(max=logp.shape[-1] - 1)",
    "action = torch.distributions.Categorical(logits=logp).sample()  # lockstep: CleanRL's draw",
)


def patched(text, iterations):
    """Our script's text with CleanRL's shuffle and schedule (and its draw, in a discrete script), stopping after
    `iterations` iterations."""
    draws = RANDPERM.findall(text)
    counts = [(ours, text.count(ours)) for ours, _ in PATCHES] + [
        (EPOCHS, text.count(EPOCHS)),
        ("torch.randperm(n, device=...)", len(draws)),
    ]
    for line, count in counts:
        if count != 1:
            raise ConfigError(
                f"the script has {count} copies of the line {line.strip().splitlines()[-1]!r}, "
                "not one; lockstep patches that line (update PATCHES to the script's new text)"
            )
    for ours, theirs in PATCHES:
        text = text.replace(ours, theirs)
    ((n, device),) = draws
    text = text.replace(EPOCHS, f"    order = np.arange({n})  # lockstep: CleanRL's order, shuffled in place\n{EPOCHS}")
    text = RANDPERM.sub(f"torch.as_tensor(cleanrl_shuffle(order), device={device})", text)
    if text.count(SAMPLING[0]) > 1:
        raise ConfigError(f"the script samples by inverse CDF in {text.count(SAMPLING[0])} places, not one")
    text = text.replace(*SAMPLING)  # the discrete scripts: CleanRL's draw (one multinomial per row)
    return text.replace(
        "\nSCRIPT = ",
        f"""
LOCKSTEP_ITERATIONS = {iterations}


def cleanrl_shuffle(order):  # lockstep: CleanRL's draw of an epoch's order, np.random.shuffle of the last one
    np.random.shuffle(order)
    return order.copy()


SCRIPT = """,
        1,
    )


def parsed_flags(script, flags):
    """The Args `script` runs with given `flags` (its own parse_args, in this process; nothing runs), as its
    TensorBoard table logs them: {name: str(value)}. Its one-line error for a flag it cannot read is a ConfigError."""
    spec = importlib.util.spec_from_file_location("lockstep_flags", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # where tyro reads the Args' docstrings from (its help and its errors)
    saved, sys.argv = sys.argv, [script, *flags]
    try:
        spec.loader.exec_module(module)
        args = module.parse_args()
    except SystemExit as e:
        if not e.code:  # --help, printed
            raise
        raise ConfigError(f"the flags after --: {str(e.code).split(': error: ', 1)[-1]}") from None
    finally:
        sys.argv = saved
        del sys.modules[spec.name]
    return {k: str(v) for k, v in dataclasses.asdict(args).items()}


def side_by_side(ours_dir, ref_dir, iterations, tolerance):
    """Per iteration, "ours/CleanRL" for each tag both logged, and the largest relative difference; then the first
    game whose return differs. Returns (lines, the number of leading iterations identical within tolerance)."""
    rows, worst = [], np.zeros(iterations)
    for tag in TAGS:
        a, b = read_run(ours_dir, tag), read_run(ref_dir, tag)
        n = min(iterations, len(a["returns"]), len(b["returns"]))
        if n == 0:
            continue
        x, y = np.array(a["returns"][:n]), np.array(b["returns"][:n])
        # relative to the tag's size: a loss that crosses 0 (policy_loss) is judged against its usual magnitude
        rel = np.abs(x - y) / np.maximum(np.maximum(np.abs(y), np.abs(y).mean()), 1e-12)
        worst[:n] = np.maximum(worst[:n], rel)
        worst[n:] = np.inf  # a tag one side did not log that far: not shown identical
        rows.append(f"{tag:26s} " + "  ".join(f"{u:.6g}/{v:.6g}" for u, v in zip(x, y)))
    same = int(np.argmax(worst > tolerance)) if (worst > tolerance).any() else iterations
    a, b = read_run(ours_dir), read_run(ref_dir)
    n = min(len(a["returns"]), len(b["returns"]))
    off = np.flatnonzero(np.abs(np.array(a["returns"][:n]) - np.array(b["returns"][:n])) > 1e-3)
    games = (
        f"games: the first {off[0]} of {n} returns agree to 1e-3 (game {off[0] + 1} ends at step "
        f"{a['steps'][off[0]]} in ours, {b['steps'][off[0]]} in CleanRL)"
        if off.size
        else f"games: all {n} returns agree to 1e-3"
    )
    lines = [
        "iteration                  " + "  ".join(f"{i + 1:>17d}" for i in range(iterations)),
        *rows,
        "largest relative difference " + "  ".join(f"{w:.1e}" for w in worst),
        games,
        f"identical (relative difference <= {tolerance:g}) through iteration {same} of {iterations}",
    ]
    return lines, same


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    ours_flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cleanrl-run", required=True, help="CleanRL's TensorBoard run dir, made with the same flags")
    p.add_argument(
        "--script",
        default="ppo_continuous_action.py",
        help="our script: a path, or the name of one at the top of this repository",
    )
    p.add_argument("--iterations", type=int, default=5, help="iterations to run and compare")
    p.add_argument("--tolerance", type=float, default=1e-4, help="largest relative difference counted as identical")
    p.add_argument("--work-dir", default=None, help="where the patched copy runs (default: a temporary folder)")
    p.add_argument(
        "--cleanrl-mujoco",
        default=None,
        help="the MuJoCo CleanRL's run ran on (its scripts do not log it); "
        "needed for the envs whose physics MuJoCo 4 changed (Humanoid, HumanoidStandup, Ant, Hopper)",
    )
    args = p.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    try:
        if args.iterations < 1:
            raise ConfigError(f"--iterations must be 1 or more, got {args.iterations}")
        if args.cleanrl_mujoco is not None and not re.fullmatch(r"\d+(\.\d+)*", args.cleanrl_mujoco):
            raise ConfigError(f"--cleanrl-mujoco {args.cleanrl_mujoco!r} is not a version; give one such as 2.3.3")
        if not os.path.isdir(args.cleanrl_run) or not read_run(args.cleanrl_run, "losses/value_loss")["steps"]:
            raise ConfigError(f"--cleanrl-run {args.cleanrl_run} holds no losses/value_loss: not a CleanRL run dir")
        theirs = read_run(args.cleanrl_run)["hparams"]
        # ours runs on the MuJoCo this interpreter imports (the copy's PYTHONPATH keeps this one's)
        their_mujoco = args.cleanrl_mujoco or theirs.get("mujoco")
        ours_mujoco = importlib.metadata.version("mujoco") if importlib.util.find_spec("mujoco") else None
        refused = mujoco_check(theirs.get("env_id", ""), ours_mujoco, their_mujoco)
        if refused:
            raise ConfigError(refused)
        script = args.script if os.path.isfile(args.script) else os.path.join(ROOT, args.script)
        if not os.path.isfile(script):
            raise ConfigError(f"--script {args.script}: no such file here or at the top of {ROOT}")
        with open(script) as f:
            text = patched(f.read(), args.iterations)
        work = args.work_dir or tempfile.mkdtemp(prefix="lockstep_")
        os.makedirs(work, exist_ok=True)
        copy = os.path.join(work, "lockstep_" + os.path.basename(script))
        with open(copy, "w") as f:
            f.write(text)
        ours = parsed_flags(copy, ["--no-cuda", *ours_flags])
        differ = [
            f"{k} {ours[k]} (CleanRL's run {theirs[k]})"
            for k in sorted(set(ours) & set(theirs) - NOT_COMPARED - DERIVED)
            if ours[k] != theirs[k]
        ]
        if differ:
            raise ConfigError(
                f"the flags after -- give {', '.join(differ)}: not the CleanRL run's flags; give its flags after --"
            )
        before = set(os.listdir(os.path.join(work, "runs"))) if os.path.isdir(os.path.join(work, "runs")) else set()
        path = [os.path.dirname(os.path.abspath(script)), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(path))
        cmd = [sys.executable, copy, "--no-cuda", *ours_flags]
        print(f"lockstep.py: $ {' '.join(cmd)}  (in {work})", flush=True)
        if subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            raise ConfigError(f"our patched script failed (its error above); it ran as {copy}")
        new = sorted(set(os.listdir(os.path.join(work, "runs"))) - before)
        ours = read_run(os.path.join(work, "runs", new[-1]))["hparams"]
        lines, same = side_by_side(os.path.join(work, "runs", new[-1]), args.cleanrl_run, args.iterations, args.tolerance)
    except ConfigError as e:
        print(f"lockstep.py: {e}", file=sys.stderr)
        return 2
    if "mujoco" in ours:  # what each side ran on: ours as it logged it
        lines.insert(0, f"MuJoCo: ours {ours['mujoco']}, CleanRL's run {their_mujoco or 'not given (--cleanrl-mujoco)'}")
    print("\n".join(lines))
    return 0 if same >= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
