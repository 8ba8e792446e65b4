#!/usr/bin/env bash
# Gym-μRTS: ppo_multidiscrete.py and ppo_multidiscrete_mask.py (invalid action masking) on the mining task.
#
#   bash benchmark/microrts.sh          # the blog's protocol (gym-microrts: 2M steps, seeds 1 2 3)
#   bash benchmark/microrts.sh short    # 500k steps, seeds 1 2: masking should already learn far faster
#
# Nothing comparable is published as numbers (the blog shows curves), so the report's verdict is
# "nothing published"; compare the two scripts' curves in the PNG.
# MICRORTS_ENV sets the env id (default: the mining task's id in these scripts; see their --help).
# Logs go to runs/ of the current directory; rerunning skips the runs that already finished.
# WORKERS=n runs n at a time (default 1: each run starts a Java simulator with 8 envs).
set -uo pipefail
BENCH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH")"
MODE="${1:-full}"
WORKERS="${WORKERS:-1}"
ENVS="${MICRORTS_ENV:-MicrortsMining-v1}"

if [ "$MODE" = short ]; then STEPS=500000; SEEDS="1 2"; else STEPS=2000000; SEEDS="1 2 3"; fi

status=0
for script in ppo_multidiscrete.py ppo_multidiscrete_mask.py; do
    python "$BENCH/run.py" --script "$REPO/$script" --env-ids $ENVS --seeds $SEEDS --workers "$WORKERS" \
        -- --total-timesteps "$STEPS" || status=1
done

python "$BENCH/report.py" runs/ --scripts ppo_multidiscrete.py ppo_multidiscrete_mask.py --steps "$STEPS" \
    --out "$BENCH/results/microrts_$MODE"
exit $status
