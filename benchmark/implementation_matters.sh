#!/usr/bin/env bash
# Seed 004 (Engstrom et al., Implementation Matters in Deep Policy Gradients, ICLR 2020), with ppo_continuous_action.py
# and trpo_continuous_action.py on the paper's protocol: 1M steps, 2048 steps per iteration from one env, 32
# minibatches, 10 epochs, the settings of its released configs for each algorithm and env
# (benchmark/implementation_matters.py lists them, and what we run otherwise).
#
#   bash benchmark/implementation_matters.sh          # Tables 2-3: PPO, PPO-M, TRPO, TRPO+, PPO-NoClip on Walker2d-v4
#                                                     # and Hopper-v4, 10 seeds a cell; Figure 1: 16 combinations on
#                                                     # Walker2d-v4, 4 seeds each (160 runs)
#   bash benchmark/implementation_matters.sh short    # seeds 1-4 of the ten table cells only (40 runs)
#   CELLS="TRPO TRPO+" bash benchmark/implementation_matters.sh   # only these cells' runs (fig1: Figure 1's)
#   PATH=.venv-mujoco-ref/bin:$PATH CELLS=PPO bash benchmark/implementation_matters.sh   # PPO's runs on MuJoCo 2.3.3
#
# Runs go to runs/ of the current directory through run.py (2 at a time, one thread each; checkpointed every 50
# iterations, so a rerun continues a stopped run). After each cell, the runs that finished are stored, compactly,
# in benchmark/results/implementation_matters/ (their final returns and per-iteration Figure 2 numbers): a rerun on
# another machine runs only what is not stored there yet, and the report is made from the stored runs alone.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS="${WORKERS:-2}"
STEPS=1000000
STUDY="$BENCH/implementation_matters.py"
STORE="$BENCH/results/implementation_matters"

# on a MuJoCo other than the lock's (bash scripts/install.sh mujoco-ref, its .venv-mujoco-ref/bin first on the PATH), the
# runs go to mujoco-<version>/runs/ and are stored, and planned, in the store's mujoco-<version>/: the tables' own stay
sub=$(python "$STUDY" mujoco-dir) || exit 2
if [ -n "$sub" ]; then mkdir -p "$sub" && cd "$sub" || exit 2; fi

# one line per run.py call still to make: cell, env id, seeds, script, the script's flags
# shellcheck disable=SC2086  # CELLS is split into cell names on purpose
plan=$(python "$STUDY" plan --mode "$MODE" --store "$STORE" ${CELLS:+--cells $CELLS}) || exit 2
while IFS=$'\t' read -r cell env_id seeds script args; do
    [ -n "$cell" ] || continue
    echo "== $cell on $env_id, seeds $seeds"
    SEEDS="$seeds" ARGS="$args" sweep "$script" "$env_id"
    python "$STUDY" store runs/ --store "$STORE" || status=1
done <<< "$plan"

if [ -n "$sub" ]; then  # the report's plotting is not in .venv-mujoco-ref: the lock's python makes it
    echo "stored in $STORE/$sub; the report: python benchmark/implementation_matters.py report --store $STORE, with the lock's python"
else
    python "$STUDY" report --store "$STORE" || status=1
fi
exit $status
