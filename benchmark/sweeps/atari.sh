#!/usr/bin/env bash
# Atari: ppo_atari.py and ppo_atari_lstm.py (gymnasium + ale-py, NoFrameskip-v4 ids) and
# ppo_atari_envpool.py (envpool, v5 ids) on Breakout, Pong and BeamRider.
#
#   bash benchmark/sweeps/atari.sh           # published protocol: 10M steps, seeds 1 2 3 (a GPU and days)
#   bash benchmark/sweeps/atari.sh short     # 1M steps of Breakout, seeds 1 2: fits a 2-core CPU overnight
#
# Published numbers: CleanRL benchmark/ppo.sh at 10M steps, 3 seeds (benchmark/reference_results.csv).
# Short runs are reported as "not comparable: budget differs"; their curves still show the trend.
# Logs go to runs/ of the current directory; rerunning skips the runs that already finished.
# WORKERS=n runs n at a time (default 1: each run already steps 8 envs).
# STEPS, SEEDS and GAMES (e.g. GAMES=Pong) in the environment override the mode's (e.g. STEPS=100000 SEEDS=1); reports go to
# $RESULTS/ (default results/ of the current directory; RESULTS=benchmark/results to update the repository's).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS="${WORKERS:-1}"

if [ "$MODE" = short ]; then
    STEPS="${STEPS:-1000000}"; SEEDS="${SEEDS:-1 2}"; GAMES="${GAMES:-Breakout}"
else
    STEPS="${STEPS:-10000000}"; SEEDS="${SEEDS:-1 2 3}"; GAMES="${GAMES:-Breakout Pong BeamRider}"
fi
settings STEPS SEEDS WORKERS
sweep ppo_atari.py $(atari_ids NoFrameskip-v4 $GAMES)
sweep ppo_atari_lstm.py $(atari_ids NoFrameskip-v4 $GAMES)
sweep ppo_atari_envpool.py $(atari_ids -v5 $GAMES)
report atari ppo_atari.py ppo_atari_lstm.py ppo_atari_envpool.py
