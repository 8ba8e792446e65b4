#!/usr/bin/env bash
# IMPALA (V-trace): impala_vtrace.py on Atari.
#
#   bash benchmark/sweeps/impala.sh          # the paper's per-game budget: 200M frames = 50M steps, seeds 1 2 3
#   bash benchmark/sweeps/impala.sh short    # Breakout, 2M steps, seeds 1 2: fits a 2-core CPU
#
# The paper publishes human-normalised scores over all 57 games and evaluation returns, not means of
# training episodes, so the report marks them "not comparable: published metric is ..."; the curves remain.
# GAMES, STEPS and SEEDS override the mode's; reports go to $RESULTS/ (default results/ of the current
# directory; RESULTS=benchmark/results to update the repository's). Logs go to runs/ of the current directory; finished runs are skipped.
# WORKERS=n runs n at a time (default 1).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS="${WORKERS:-1}"

if [ "$MODE" = short ]; then
    STEPS="${STEPS:-2000000}"; SEEDS="${SEEDS:-1 2}"; GAMES="${GAMES:-Breakout}"
else
    STEPS="${STEPS:-50000000}"; SEEDS="${SEEDS:-1 2 3}"; GAMES="${GAMES:-Breakout Pong BeamRider Qbert Seaquest SpaceInvaders}"
fi
settings STEPS SEEDS WORKERS
sweep impala_vtrace.py $(atari_ids NoFrameskip-v4 $GAMES)
report impala impala_vtrace.py
