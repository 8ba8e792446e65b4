#!/usr/bin/env bash
# PAAC: a2c_paac.py on Atari games of the PAAC paper (Clemente et al. 2017, Table 1).
#
#   bash benchmark/sweeps/paac.sh          # the paper's budget: 115M steps (460M frames), seeds 1 2 3 (a GPU, days)
#   bash benchmark/sweeps/paac.sh short    # Breakout, 2M steps, seeds 1 2: fits a 2-core CPU
#
# The paper reports the best of 3 actors evaluated with no-op starts, not a mean of training episodes,
# so the report shows those numbers as "not comparable: published metric is ..."; the curves remain.
# GAMES, STEPS and SEEDS override the mode's; reports go to $RESULTS/ (default results/ of the current
# directory; RESULTS=benchmark/results to update the repository's). Logs go to runs/ of the current directory; finished runs are skipped.
# WORKERS=n runs n at a time (default 1: each run steps 32 envs).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS="${WORKERS:-1}"

if [ "$MODE" = short ]; then
    STEPS="${STEPS:-2000000}"; SEEDS="${SEEDS:-1 2}"; GAMES="${GAMES:-Breakout}"
else
    STEPS="${STEPS:-115000000}"; SEEDS="${SEEDS:-1 2 3}"
    GAMES="${GAMES:-Amidar Centipede BeamRider Boxing Breakout MsPacman NameThisGame Pong Qbert Seaquest SpaceInvaders UpNDown}"
fi
settings STEPS SEEDS WORKERS
sweep a2c_paac.py $(atari_ids NoFrameskip-v4 $GAMES)
report paac a2c_paac.py
