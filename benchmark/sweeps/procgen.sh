#!/usr/bin/env bash
# Procgen: ppo_procgen.py on starpilot, bossfight, bigfish (easy distribution, all levels).
#
#   bash benchmark/sweeps/procgen.sh          # published protocol: 25M steps, seeds 1 2 3 (a GPU)
#   bash benchmark/sweeps/procgen.sh short    # starpilot, 2M steps, seeds 1 2
#
# Published numbers: CleanRL benchmark/ppo.sh, 25M steps, 3 seeds (benchmark/reference_results.csv).
# Logs go to runs/ of the current directory; rerunning skips the runs that already finished and continues
# a run that stopped early from its last checkpoint (written every 5 iterations, 81920 steps: about ten
# minutes on a 2-core CPU, so a run can span several sittings).
# WORKERS=n runs n at a time (default 1: each run already steps 64 envs).
# STEPS, SEEDS and ENVS (e.g. ENVS=bigfish) in the environment override the mode's (e.g. STEPS=100000 SEEDS=1); reports go to
# $RESULTS/ (default results/ of the current directory; RESULTS=benchmark/results to update the repository's).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS="${WORKERS:-1}"
ARGS="--save-model --save-every 5 ${ARGS:-}"

if [ "$MODE" = short ]; then ENVS="${ENVS:-starpilot}"; STEPS="${STEPS:-2000000}"; SEEDS="${SEEDS:-1 2}"
else ENVS="${ENVS:-starpilot bossfight bigfish}"; STEPS="${STEPS:-25000000}"; SEEDS="${SEEDS:-1 2 3}"; fi
settings STEPS SEEDS WORKERS

sweep ppo_procgen.py $ENVS
report procgen ppo_procgen.py
