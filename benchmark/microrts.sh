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
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS="${WORKERS:-1}"
ENVS="${MICRORTS_ENV:-MicrortsMining-v1}"

if [ "$MODE" = short ]; then STEPS=500000; SEEDS="1 2"; else STEPS=2000000; SEEDS="1 2 3"; fi

sweep ppo_multidiscrete.py $ENVS
sweep ppo_multidiscrete_mask.py $ENVS
report microrts ppo_multidiscrete.py ppo_multidiscrete_mask.py
