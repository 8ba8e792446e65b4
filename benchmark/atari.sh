#!/usr/bin/env bash
# Atari: ppo_atari.py and ppo_atari_lstm.py (gymnasium + ale-py, NoFrameskip-v4 ids) and
# ppo_atari_envpool.py (envpool, v5 ids) on Breakout, Pong and BeamRider.
#
#   bash benchmark/atari.sh           # published protocol: 10M steps, seeds 1 2 3 (a GPU and days)
#   bash benchmark/atari.sh short     # 1M steps of Breakout, seeds 1 2: fits a 2-core CPU overnight
#
# Published numbers: CleanRL benchmark/ppo.sh at 10M steps, 3 seeds (benchmark/reference_results.csv).
# Short runs are reported as "not comparable: budget differs"; their curves still show the trend.
# Logs go to runs/ of the current directory; rerunning skips the runs that already finished.
# WORKERS=n runs n at a time (default 1: each run already steps 8 envs).
set -uo pipefail
BENCH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH")"
MODE="${1:-full}"
WORKERS="${WORKERS:-1}"

if [ "$MODE" = short ]; then
    STEPS=1000000; SEEDS="1 2"
    GAMES="Breakout"
else
    STEPS=10000000; SEEDS="1 2 3"
    GAMES="Breakout Pong BeamRider"
fi
NOFRAMESKIP="" ; V5=""
for g in $GAMES; do NOFRAMESKIP="$NOFRAMESKIP ${g}NoFrameskip-v4"; V5="$V5 ${g}-v5"; done

status=0
for script in ppo_atari.py ppo_atari_lstm.py; do
    python "$BENCH/run.py" --script "$REPO/$script" --env-ids $NOFRAMESKIP --seeds $SEEDS --workers "$WORKERS" \
        -- --total-timesteps "$STEPS" || status=1
done
python "$BENCH/run.py" --script "$REPO/ppo_atari_envpool.py" --env-ids $V5 --seeds $SEEDS --workers "$WORKERS" \
    -- --total-timesteps "$STEPS" || status=1

python "$BENCH/report.py" runs/ --scripts ppo_atari.py ppo_atari_lstm.py ppo_atari_envpool.py --steps "$STEPS" \
    --out "$BENCH/results/atari_$MODE"
exit $status
