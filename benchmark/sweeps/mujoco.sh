#!/usr/bin/env bash
# MuJoCo: ppo_continuous_action.py on HalfCheetah-v4, Walker2d-v4, Hopper-v4.
#
#   bash benchmark/sweeps/mujoco.sh          # published protocol: 1M steps, seeds 1 2 3 (~10 min a run on one core)
#   bash benchmark/sweeps/mujoco.sh short    # HalfCheetah-v4 only, 1M steps, seeds 1 2
#   ARGS="--gymnasium-normalization" bash benchmark/sweeps/mujoco.sh   # with CleanRL's normalisation rules (its v4 runs)
#
# Published numbers: CleanRL benchmark/ppo.sh, 1M steps, 3 seeds (benchmark/reference_results.csv).
# Logs go to runs/ of the current directory; rerunning skips the runs that already finished.
# WORKERS=n runs n at a time (default 2; threads per run = cores / n).
# STEPS, SEEDS and ENVS (e.g. ENVS=Hopper-v4) in the environment override the mode's (e.g. STEPS=100000 SEEDS=1); reports go to
# $RESULTS/ (default results/ of the current directory; RESULTS=benchmark/results to update the repository's).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS="${WORKERS:-2}"

STEPS="${STEPS:-1000000}"
if [ "$MODE" = short ]; then ENVS="${ENVS:-HalfCheetah-v4}"; SEEDS="${SEEDS:-1 2}"
else ENVS="${ENVS:-HalfCheetah-v4 Walker2d-v4 Hopper-v4}"; SEEDS="${SEEDS:-1 2 3}"; fi
settings STEPS SEEDS WORKERS

sweep ppo_continuous_action.py $ENVS
report mujoco ppo_continuous_action.py
