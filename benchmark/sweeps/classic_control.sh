#!/usr/bin/env bash
# Classic control: ppo.py and ppo_shared.py on CartPole-v1, Acrobot-v1, MountainCar-v0.
#
#   bash benchmark/sweeps/classic_control.sh           # published protocol: 500k steps, seeds 1 2 3 (~1 h on 2 cores)
#   bash benchmark/sweeps/classic_control.sh short     # 100k steps, seeds 1 2: a quick check
#
# The published numbers (CleanRL benchmark/ppo.sh, see benchmark/reference_results.csv) are for ppo.py at
# 500k steps, 3 seeds. ppo_shared.py has none of its own, so the report sets it beside ppo.py's.
# Logs go to runs/ of the current directory; rerunning skips the runs that already finished.
# WORKERS=n runs n at a time (default 2; threads per run = cores / n).
# STEPS, SEEDS and ENVS (e.g. ENVS=CartPole-v1) in the environment override the mode's (e.g. STEPS=100000 SEEDS=1); reports go to
# $RESULTS/ (default results/ of the current directory; RESULTS=benchmark/results to update the repository's).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS="${WORKERS:-2}"

ENVS="${ENVS:-CartPole-v1 Acrobot-v1 MountainCar-v0}"
if [ "$MODE" = short ]; then STEPS="${STEPS:-100000}"; SEEDS="${SEEDS:-1 2}"; else STEPS="${STEPS:-500000}"; SEEDS="${SEEDS:-1 2 3}"; fi
settings STEPS SEEDS WORKERS

sweep ppo.py $ENVS
sweep ppo_shared.py $ENVS
report classic_control ppo.py ppo_shared.py --compare-as ppo_shared.py=ppo.py
