#!/usr/bin/env bash
# Gym-μRTS: ppo_multidiscrete.py and ppo_multidiscrete_mask.py (invalid action masking) on the blog's mining task,
# gym-microrts 0.2.0's MicrortsMining-v1 (the scripts' default since 2026-11-24; 200 steps of 10 ticks a game).
#
#   bash benchmark/sweeps/microrts.sh          # the blog's protocol (2M steps, seeds 1 2 3)
#   bash benchmark/sweeps/microrts.sh short    # 500k steps, seeds 1 2: masking should already learn far faster
#
# Nothing comparable is published as numbers (the blog shows curves), so the report's verdict is
# "nothing published"; compare the two scripts' curves in the PNG.
# Run it where runs/ holds no μRTS runs made before that (0.4.3's grid mode, same script and env names): the
# report reads every run under runs/. Its results go to $RESULTS/microrts020_MODE (microrts_* are the grid mode's).
# MICRORTS_ENV sets the env id (default: the mining task's id in these scripts; see their --help).
# Logs go to runs/ of the current directory; rerunning skips the runs that already finished.
# WORKERS=n runs n at a time (default 1: each run drives 8 Java games in one process).
# STEPS, SEEDS and ENVS in the environment override the mode's (e.g. STEPS=100000 SEEDS=1); reports go to
# $RESULTS/ (default results/ of the current directory; RESULTS=benchmark/results to update the repository's).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS="${WORKERS:-1}"
ENVS="${ENVS:-${MICRORTS_ENV:-MicrortsMining-v1}}"

if [ "$MODE" = short ]; then STEPS="${STEPS:-500000}"; SEEDS="${SEEDS:-1 2}"; else STEPS="${STEPS:-2000000}"; SEEDS="${SEEDS:-1 2 3}"; fi
settings STEPS SEEDS WORKERS

sweep ppo_multidiscrete.py $ENVS
sweep ppo_multidiscrete_mask.py $ENVS
report microrts020 ppo_multidiscrete.py ppo_multidiscrete_mask.py
