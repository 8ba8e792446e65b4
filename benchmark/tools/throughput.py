"""Steps per second of each script on a short fixed budget, and of Stable-Baselines3's PPO beside ours.

Run:   python -m benchmark.tools.throughput [--steps N] [--repeats 3] [--scripts ppo.py ...] [--torch-threads N]

Each script runs with its own defaults except --total-timesteps (the budgets below, or --steps), one
thread (--torch-threads N for more), in a scratch directory, started as its docstring's "Run:" line starts it
(impala_vtrace_distributed.py under torchrun). A script not in the repository, a count below 1 or an
--out that cannot be written (a full disk too) stops it in one line before it measures anything. Ours is the
training-loop rate the script logs as charts/SPS (after env and network construction); scripts that print a
"seconds: env .., inference .., update .., total .." line at the end also get the shares of their loop's time spent in
each. For ppo.py (CartPole-v1) and ppo_continuous_action.py (HalfCheetah-v4), Stable-Baselines3's PPO runs the same
budget with the hyperparameters read from the script's Args defaults (n_envs, n_steps, minibatch
size, epochs, linearly annealed lr, clip, entropy/value coefficients, max grad norm, GAE, separate
64-64 tanh networks with orthogonal init, Adam eps 1e-5; VecNormalize for the continuous script's
observation/reward normalisation), timed around model.learn(). Ours and SB3 alternate, repeats
times, and the ratio of the medians is what we quote: absolute numbers drift on a shared machine.

With --ab=FLAGS (e.g. `--ab=--bf16`), each script instead runs alternately without and with FLAGS, and the
table gives both rates, their ratio and both runs' env / inference / update seconds (the mean over repeats).

Writes benchmark/results/throughput_<date>.md (throughput_<date>_b.md, ... if it exists) with the command,
date and machine.
"""

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmark.cli import unused_path
from benchmark.processes import last_line, root_on_path, tool
from benchmark.runs import RESULTS, ROOT, launch, machine_info, machine_str, read_run, report_head

# a few rollouts of each script's default configuration (at least one rollout of its batch), short
# enough that every script fits in a minute or two on a 2-core CPU
BUDGETS = {
    "ppo.py": 40_960,
    "ppo_shared.py": 40_960,
    "ppo_continuous_action.py": 10_240,
    "ppo_atari.py": 4_096,
    "ppo_atari_lstm.py": 4_096,
    "ppo_atari_envpool.py": 4_096,
    "ppo_procgen.py": 16_384,
    "ppo_multidiscrete.py": 4_096,
    "ppo_multidiscrete_mask.py": 4_096,
    "a2c_paac.py": 8_000,
    "impala_vtrace.py": 8_000,
    "ppo_atari_multigpu.py": 4_096,  # without torchrun: one process, as ppo_atari.py
    "impala_vtrace_distributed.py": 8_000,  # under torchrun, as its docstring runs it: a learner and 2 actor processes
    "trpo_continuous_action.py": 10_240,
}  # every script (tests/test_contracts.py)
# the scripts with an independent implementation to compare with, and the env to compare on
SB3_ENVS = {"ppo.py": "CartPole-v1", "ppo_continuous_action.py": "HalfCheetah-v4"}


def run_ours(script, steps, env_id=None, threads=1, extra=()):
    """One run of a script; returns (training steps/s logged as charts/SPS, the env it ran, the script's
    "seconds:" line as a dict or None) or raises."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            *launch(script),
            os.path.join(ROOT, script),
            "--total-timesteps",
            str(steps),
            "--seed",
            "1",
            "--exp-name",
            "throughput",
            "--torch-threads",
            str(threads),
            *extra,
        ]
        if env_id:
            cmd += ["--env-id", env_id]
        out = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=threads_env(threads))
        if out.returncode != 0:
            raise RuntimeError(last_line(out))
        runs = os.path.join(tmp, "runs")
        dirs = [os.path.join(runs, d) for d in os.listdir(runs)] if os.path.isdir(runs) else []
        data = read_run(dirs[0], "charts/SPS") if dirs else {"returns": []}
        if not data["returns"]:
            raise RuntimeError("no charts/SPS logged")
        return data["returns"][-1], data["hparams"].get("env_id", env_id), parse_seconds(out.stdout)


def parse_seconds(stdout):
    """The last "seconds: env 1.2, inference 0.3, update 4.5, total 6.1" line a script printed, as a dict."""
    lines = [line for line in stdout.splitlines() if line.startswith("seconds: ")]
    if not lines:
        return None
    return {k: float(v) for k, v in (item.split() for item in lines[-1][len("seconds: ") :].split(", "))}


def threads_env(threads=1):
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))


def run_sb3(script, env_id, steps):
    """SB3's PPO in a child process (fresh interpreter, as ours); returns the steps/s of model.learn()."""
    out = subprocess.run(
        [*tool("benchmark.tools.throughput"), "--sb3-child", script, env_id, str(steps)],
        capture_output=True,
        text=True,
        env=root_on_path(threads_env()),
    )
    if out.returncode != 0:
        raise RuntimeError(last_line(out))
    return json.loads(out.stdout.strip().splitlines()[-1])["sps"]


def sb3_child(script, env_id, steps):
    """Build SB3's PPO with `script`'s Args defaults and time learn(steps)."""
    import torch
    import torch.nn as nn
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)  # as --torch-threads 1 in ours
    a = importlib.import_module(os.path.splitext(script)[0]).Args()
    env = make_vec_env(env_id, n_envs=a.num_envs, seed=1)
    if script == "ppo_continuous_action.py":  # C6-C9: obs and reward normalisation, both clipped at 10
        env = VecNormalize(env, norm_obs=True, norm_reward=True, clip_obs=10.0, clip_reward=10.0, gamma=a.gamma)
    lr = a.learning_rate
    model = PPO(
        "MlpPolicy",
        env,
        seed=1,
        device="cpu",
        verbose=0,
        learning_rate=(lambda progress_remaining: progress_remaining * lr) if a.anneal_lr else lr,
        n_steps=a.num_steps,
        batch_size=a.num_envs * a.num_steps // a.num_minibatches,
        n_epochs=a.update_epochs,
        gamma=a.gamma,
        gae_lambda=a.gae_lambda,
        clip_range=a.clip_coef,
        clip_range_vf=a.clip_coef if a.clip_vloss else None,
        normalize_advantage=a.norm_adv,
        ent_coef=a.ent_coef,
        vf_coef=a.vf_coef,
        max_grad_norm=a.max_grad_norm,
        policy_kwargs=dict(
            net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=nn.Tanh, ortho_init=True, optimizer_kwargs=dict(eps=1e-5)
        ),
    )
    start = time.time()
    model.learn(total_timesteps=steps)
    print(json.dumps({"sps": model.num_timesteps / (time.time() - start)}))


def write_markdown(rows, args, argv, sb3_version, out):
    """The results so far (rewritten after each script, so an interrupted run keeps what it measured)."""
    from importlib.metadata import version

    m = machine_info()
    md = [
        *report_head("Throughput", "benchmark.tools.throughput", sys.argv[1:] if argv is None else argv),
        f"- machine: {machine_str(m)}; torch {version('torch')}, python {m['python']}"
        + (f", stable-baselines3 {sb3_version}" if sb3_version else ""),
        f"- each script with its default hyperparameters, --torch-threads {args.torch_threads} and "
        f"OMP_NUM_THREADS={args.torch_threads} (SB3: one thread); ours = last charts/SPS (training loop); "
        "SB3 = num_timesteps / time of model.learn(); median of the repeats (each repeat in parentheses)",
        "- where the time goes: the script's own env / inference / update timers over all repeats, as shares of "
        "its training loop (the rest: logging, episode bookkeeping, buffers); — where a script has no timers",
        "- the ratio ours/SB3 is the number to quote: absolute steps/s drift with the load of a shared machine",
        "",
        "| script | env | steps | ours steps/s | SB3 PPO steps/s | ours / SB3 | env / inference / update |",
        "|---|---|---|---|---|---|---|",
    ]
    if args.ab:
        md[-6:] = [
            f"- each script alternately without and with `{args.ab}`, median of the repeats (each in parentheses); "
            "seconds: the script's env / inference / update timers, mean over the repeats",
            "",
            f"| script | env | steps | steps/s | steps/s with {args.ab} | with / without | seconds without | seconds with |",
            "|---|---|---|---|---|---|---|---|",
        ]
    for r in rows:
        if args.ab:
            md.append(
                f"| {r['script']} | {r['env']} | {r['steps']} | {measured(r['ours'], r)} | {measured(r['sb3'], r)} | "
                f"{r.get('ratio', float('nan')):.2f} | {seconds_str(r['seconds'])} | {seconds_str(r['seconds_b'])} |"
            )
            continue
        ours = measured(r["ours"], r)
        sb3 = median_str(r["sb3"]) if r["sb3"] else "—"
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "—"
        md.append(f"| {r['script']} | {r['env']} | {r['steps']} | {ours} | {sb3} | {ratio} | {shares_str(r['seconds'])} |")
    if not os.path.exists(os.path.dirname(os.path.abspath(out))):  # a file in its place: open() says "Not a directory"
        os.makedirs(os.path.dirname(os.path.abspath(out)))
    with open(out, "w") as f:
        f.write("\n".join(md) + "\n")


def saved(rows, args, argv, sb3_version, out):
    """write_markdown; a path that cannot be written, or a full disk, is one line and False."""
    try:
        write_markdown(rows, args, argv, sb3_version, out)
    except OSError as e:
        print(
            f"throughput.py: error: --out {out} cannot be written ({e.strerror}); give a path you can write to",
            file=sys.stderr,
        )
        return False
    return True


def shares_str(seconds):
    """'21% / 6% / 70%': env, inference and update time summed over the repeats, as shares of the loop's total."""
    seconds = [s for s in seconds if s]
    if not seconds:
        return "—"
    total = sum(s["total"] for s in seconds)
    return " / ".join(
        f"{100 * sum(s[k] for s in seconds) / total:.0f}%" if all(k in s for s in seconds) else "—"  # IMPALA: actors' apart
        for k in ("env", "inference", "update")
    )


def seconds_str(seconds):
    """'8.5 / 3.1 / 16.6': the env, inference and update seconds, the mean over the repeats."""
    seconds = [s for s in seconds if s]
    return (
        " / ".join(
            f"{statistics.mean(s[k] for s in seconds):.1f}" if all(k in s for s in seconds) else "—"
            for k in ("env", "inference", "update")
        )
        if seconds
        else "—"
    )


def median_str(values):
    return f"{statistics.median(values):.0f} ({', '.join(f'{v:.0f}' for v in values)})"


def measured(values, row):
    """The median and repeats of one side of a row, or the error that stopped it before any."""
    return median_str(values) if values else f"failed: {row['error']}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, help="budget of every script (default: per-script BUDGETS)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each measurement; the median is reported")
    p.add_argument("--scripts", nargs="+", default=list(BUDGETS), help="scripts to measure (default: all)")
    p.add_argument("--no-sb3", action="store_true", help="skip the Stable-Baselines3 comparison")
    p.add_argument("--torch-threads", type=int, default=1, help="--torch-threads and OMP_NUM_THREADS of our scripts")
    p.add_argument("--ab", default="", help="A/B: compare each script without and with these flags, e.g. --ab=--bf16")
    p.add_argument("--out", default=None, help="markdown output (default: benchmark/results/throughput_<date>.md)")
    p.add_argument("--sb3-child", nargs=3, metavar=("SCRIPT", "ENV", "STEPS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    low = next(
        (
            (flag, least)
            for flag, least in (("repeats", 1), ("steps", 1), ("torch_threads", 1))
            if getattr(args, flag) is not None and getattr(args, flag) < least
        ),
        None,
    )
    if low:
        print(
            f"throughput.py: error: --{low[0].replace('_', '-')} must be at least {low[1]}, got {getattr(args, low[0])}",
            file=sys.stderr,
        )
        return 2
    if args.sb3_child:
        sb3_child(args.sb3_child[0], args.sb3_child[1], int(args.sb3_child[2]))
        return 0

    unknown = next((script for script in args.scripts if not os.path.isfile(os.path.join(ROOT, script))), None)
    if unknown:
        print(
            f"throughput.py: error: --scripts {unknown}: no such script in {ROOT}; choose from "
            + ", ".join(s for s in BUDGETS if os.path.isfile(os.path.join(ROOT, s))),
            file=sys.stderr,
        )
        return 2
    out = args.out or unused_path(os.path.join(RESULTS, f"throughput_{time.strftime('%Y-%m-%d', time.gmtime())}"))
    rows, sb3_version = [], None
    if not saved(rows, args, argv, sb3_version, out):  # the table's head, before minutes of measuring
        return 2
    if not args.no_sb3 and not args.ab:
        try:
            import stable_baselines3

            sb3_version = stable_baselines3.__version__
        except ImportError:
            print(
                "throughput.py: stable-baselines3 is not installed (pip install stable-baselines3); measuring ours only",
                file=sys.stderr,
            )
    for script in args.scripts:
        steps = args.steps or BUDGETS.get(script, 20_000)
        env_id = SB3_ENVS.get(script)
        with_sb3 = sb3_version is not None and env_id is not None
        ours, sb3, seconds, seconds_b, error, env_ran = [], [], [], [], None, env_id
        for _ in range(args.repeats):
            try:  # alternate ours and SB3, so that load from other users hits both alike
                sps, env_ran, secs = run_ours(script, steps, env_id, args.torch_threads)
                ours.append(sps)
                seconds.append(secs)
                if args.ab:  # the B side takes SB3's place
                    sps, _, secs = run_ours(script, steps, env_id, args.torch_threads, args.ab.split())
                    sb3.append(sps)
                    seconds_b.append(secs)
                elif with_sb3:
                    sb3.append(run_sb3(script, env_id, steps))
            except RuntimeError as e:
                error = str(e)
                break
        row = {
            "script": script,
            "env": env_ran or "(script default)",
            "steps": steps,
            "ours": ours,
            "sb3": sb3,
            "seconds": seconds,
            "seconds_b": seconds_b,
            "error": error,
        }
        rows.append(row)
        msg = f"{script}: ours {median_str(ours)} steps/s" if ours else f"{script}: failed: {error}"
        if sb3:
            a, b = statistics.median(ours), statistics.median(sb3)
            row["ratio"] = b / a if args.ab else a / b  # A/B: with / without; SB3: ours / SB3
            msg += f", {args.ab or 'SB3'} {median_str(sb3)} steps/s, ratio {row['ratio']:.2f}"
        if ours and error:  # the other side failed: its own error line
            msg += f"; {args.ab or 'SB3'} failed: {error}"
        print(msg, flush=True)
        if not saved(rows, args, argv, sb3_version, out):  # the disk filled while measuring: the results are above
            return 1
    print(f"\nthroughput.py: wrote {out}")
    return 1 if any(r["error"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
