#!/usr/bin/env bash
# a2c_paac.py beside Stable-Baselines3's A2C configured as PAAC (benchmark/peers/sb3_a2c.py) on Breakout, 2M steps,
# seeds 1 2, with the settings of the authors' released run (paac_breakout_2m_released_2026-11-21.md), arch nips:
#   1. a2c_paac.py, the learning rate annealed to 0 over the 2M steps: the args of the runs of that report
#   2. a2c_paac.py with the full 115M-step run's schedule (--anneal-timesteps 115000000: 2M steps are its first 2%)
#   3. sb3_a2c.py with the args of 1 (the same schedule)
# then the curves overlaid, 1 against 3 and 1 against 2 (benchmark/tools/compare.py), and the report of the three.
#
#   bash benchmark/sweeps/paac_vs_sb3.sh                                       # 6 runs, one at a time (~1 h each on 2 cores)
#   STEPS=4000 SEEDS=1 ARGS="--num-envs 8" bash benchmark/sweeps/paac_vs_sb3.sh   # a smoke test: every step, in minutes
#
# ARGS is added to every run's args (a variant is its own group); THREADS=1 runs it beside another run on 2 cores.
# Logs go to runs/ of the current directory, the comparisons and the report to OUT (default
# $RESULTS/paac_vs_sb3_breakout_<STEPS>/, RESULTS default results/ of the current directory). The same command run again skips finished runs; the others, both
# implementations' (SAVE), continue from their last checkpoint.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS="${WORKERS:-1}"; STEPS="${STEPS:-2000000}"; SEEDS="${SEEDS:-1 2}"; MODE="breakout_$STEPS"
ENV_ID=BreakoutNoFrameskip-v4
SAVE="--save-model --save-every ${SAVE_EVERY:-500}"  # a checkpoint every 500 updates (80k steps)
SHARED="--loss-scale 5 --vf-coef 0.25 --max-grad-norm 3 --ent-coef 0.02 $SAVE ${ARGS:-}"  # both implementations' flags
SHARED_115M="$SHARED --anneal-timesteps 115000000"
TAGS="charts/episodic_return losses/value_loss losses/policy_loss losses/entropy charts/learning_rate"

ARGS="$SHARED" sweep a2c_paac.py "$ENV_ID"
ARGS="$SHARED_115M" sweep a2c_paac.py "$ENV_ID"
ARGS="$SHARED" sweep benchmark/peers/sb3_a2c.py "$ENV_ID"
OUT="${OUT:-$RESULTS/paac_vs_sb3_$MODE}"
compare "$OUT/ours_vs_sb3" ours a2c_paac.py "$SHARED" sb3 sb3_a2c.py "$SHARED"
compare "$OUT/anneal_2m_vs_115m" anneal_2m a2c_paac.py "$SHARED" anneal_115m a2c_paac.py "$SHARED_115M"
report paac_vs_sb3 a2c_paac.py sb3_a2c.py
