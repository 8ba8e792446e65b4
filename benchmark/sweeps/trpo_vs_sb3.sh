#!/usr/bin/env bash
# trpo_continuous_action.py beside Stable-Baselines3-contrib's TRPO configured as it (benchmark/peers/sb3_trpo.py)
# on Hopper-v4, 1M steps, seeds 1-4 a side (3 asked; a fourth fills the core a third would leave idle), at
# Implementation Matters' TRPO settings for Hopper (delta 0.13, the critic at 2e-4) and the four values SB3 cannot change
# (sb3_trpo.py's docstring), given to both; then the curves overlaid by compare.py with a verdict, and the report.
# Then SB3 again with ours' KL direction in its line search (--kl-test old-new), compared with both.
#
#   bash benchmark/sweeps/trpo_vs_sb3.sh                          # 12 runs, 2 at a time
#   STEPS=8192 SEEDS=1 bash benchmark/sweeps/trpo_vs_sb3.sh       # a smoke test: every step, in a minute
#
# Logs go to runs/ of the current directory, the comparison and the report to OUT (default
# $RESULTS/trpo_vs_sb3_hopper_<STEPS>/, RESULTS default results/ of the current directory).
# SB3's runs cannot checkpoint, so neither side does: the same command run again skips the finished runs and starts
# the others afresh.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS="${WORKERS:-2}"; STEPS="${STEPS:-1000000}"; SEEDS="${SEEDS:-1 2 3 4}"; MODE="hopper_$STEPS"
settings STEPS SEEDS WORKERS
ENV_ID=Hopper-v4
SHARED="--max-kl 0.13 --value-lr 2e-4 --fisher-frac 1 --accept-ratio 0 --vf-coef 2 --bootstrap-truncated ${ARGS:-}"
TAGS="charts/episodic_return losses/value_loss losses/kl losses/explained_variance"

OUT="${OUT:-$RESULTS/trpo_vs_sb3_$MODE}"
ARGS="$SHARED" sweep trpo_continuous_action.py "$ENV_ID"
ARGS="$SHARED" sweep benchmark/peers/sb3_trpo.py "$ENV_ID"
compare "$OUT/ours_vs_sb3" ours trpo_continuous_action.py "$SHARED" sb3 sb3_trpo.py "$SHARED"
# the probe of the one rule that still differs: SB3 with ours' KL(old || new) in its line search
ARGS="$SHARED --kl-test old-new" sweep benchmark/peers/sb3_trpo.py "$ENV_ID"
compare "$OUT/ours_vs_sb3_old_new_kl" ours trpo_continuous_action.py "$SHARED" sb3_old_new_kl sb3_trpo.py "$SHARED --kl-test old-new"
compare "$OUT/sb3_vs_sb3_old_new_kl" sb3 sb3_trpo.py "$SHARED" sb3_old_new_kl sb3_trpo.py "$SHARED --kl-test old-new"
report trpo_vs_sb3 trpo_continuous_action.py sb3_trpo.py
