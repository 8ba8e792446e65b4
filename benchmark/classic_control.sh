#!/usr/bin/env bash
# Classic control: ppo.py and ppo_shared.py on CartPole-v1, Acrobot-v1, MountainCar-v0.
#
#   bash benchmark/classic_control.sh           # published protocol: 500k steps, seeds 1 2 3 (~1 h on 2 cores)
#   bash benchmark/classic_control.sh short     # 100k steps, seeds 1 2: a quick check
#
# The published numbers (CleanRL benchmark/ppo.sh, see benchmark/reference_results.csv) are for ppo.py at
# 500k steps, 3 seeds. ppo_shared.py has none of its own, so the report sets it beside ppo.py's.
# Logs go to runs/ of the current directory; rerunning skips the runs that already finished.
# WORKERS=n runs n at a time (default 2; threads per run = cores / n).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS="${WORKERS:-2}"

ENVS="CartPole-v1 Acrobot-v1 MountainCar-v0"
if [ "$MODE" = short ]; then STEPS=100000; SEEDS="1 2"; else STEPS=500000; SEEDS="1 2 3"; fi

sweep ppo.py $ENVS
sweep ppo_shared.py $ENVS
report classic_control ppo.py ppo_shared.py --compare-as ppo_shared.py=ppo.py
