#!/usr/bin/env bash
# Engstrom et al., Implementation Matters in Deep Policy Gradients, ICLR 2020), with ppo_continuous_action.py
# and trpo_continuous_action.py on the paper's protocol: 1M steps, 2048 steps per iteration from one env, 32
# minibatches, 10 epochs, the settings of its released configs for each algorithm and env
# (benchmark/studies/implementation_matters.py lists them, and what we run otherwise).
#
#   bash benchmark/studies/implementation_matters.sh          # Tables 2-3: PPO, PPO-M, TRPO, TRPO+, PPO-NoClip on Walker2d-v4
#                                                     # and Hopper-v4, 10 seeds a cell; Figure 1: 16 combinations on
#                                                     # Walker2d-v4, 4 seeds each (160 runs)
#   bash benchmark/studies/implementation_matters.sh short    # seeds 1-4 of the ten table cells only (40 runs)
#   CELLS="TRPO TRPO+" bash benchmark/studies/implementation_matters.sh   # only these cells' runs (fig1: Figure 1's)
#   PATH=.venv-mujoco-ref/bin:$PATH CELLS=PPO bash benchmark/studies/implementation_matters.sh   # PPO's runs on MuJoCo 2.3.3
#   STORE=/tmp/smoke STEPS=2048 CELLS=PPO bash benchmark/studies/implementation_matters.sh short   # a smoke sweep: one
#                                                     # iteration a run, stored and reported in /tmp/smoke
#
# Runs go to runs/ of the current directory through run.py (WORKERS at a time, default 2, one thread each; checkpointed
# every 50 iterations, so a rerun continues a stopped run). After each cell, the runs that finished are stored,
# compactly, in STORE (default $RESULTS/implementation_matters/, RESULTS default results/ of the current directory:
# their final returns and per-iteration Figure 2 numbers): a rerun runs only what is not stored there yet, and the
# report is made from the stored runs alone, into STORE, when this sweep ran something (with nothing left to run, the
# report is left as it is). STORE=benchmark/results/implementation_matters continues the repository's own study.
# STEPS (default 1000000, the paper's) is each run's length; another wants a STORE of its own. A STORE that cannot be
# written stops the sweep in one line before any run.
source "$(dirname "${BASH_SOURCE[0]}")/../sweeps/common.sh"
WORKERS="${WORKERS:-2}"
STEPS="${STEPS:-1000000}"
settings STEPS WORKERS
study() { python -m benchmark.studies.implementation_matters "$@"; }  # plan, store, report, mujoco-dir
if [ "$STEPS" != 1000000 ] && [ -z "${STORE:-}" ]; then  # the study's store keeps the study's runs alone
    echo "implementation_matters.sh: error: STEPS=$STEPS wants a STORE of its own (e.g. STORE=/tmp/smoke): the" \
         "study's, $RESULTS/implementation_matters/ (or the repository's), holds runs of 1000000 steps" >&2
    exit 2
fi
STORE="${STORE:-$RESULTS/implementation_matters}"
[[ $STORE == /* ]] || STORE="$PWD/$STORE"  # absolute: on another MuJoCo the sweep runs in a folder of its own
if ! { mkdir -p "$STORE" && [ -w "$STORE" ]; } 2>/dev/null; then  # found now, not by the first store after a cell trained
    echo "implementation_matters.sh: error: STORE=$STORE cannot be written to; give a folder you can write to" >&2
    exit 2
fi

# on a MuJoCo other than the lock's (bash scripts/install.sh mujoco-ref, its .venv-mujoco-ref/bin first on the PATH), the
# runs go to mujoco-<version>/runs/ and are stored, and planned, in the store's mujoco-<version>/: the tables' own stay
sub=$(study mujoco-dir) || exit 2
# one line per run.py call still to make: cell, env id, seeds, script, the script's flags
# shellcheck disable=SC2086  # CELLS is split into cell names on purpose
plan=$(study plan --mode "$MODE" --store "$STORE" --steps "$STEPS" ${CELLS:+--cells $CELLS}) || exit 2
if [ -z "$plan" ]; then
    echo "nothing left to run: every planned run is stored in $STORE; its report:" \
         "python -m benchmark.studies.implementation_matters report --store $STORE --steps $STEPS"
    exit 0
fi
if [ -n "$sub" ]; then mkdir -p "$sub" && cd "$sub" || exit 2; fi

while IFS=$'\t' read -r cell env_id seeds script args; do
    echo "== $cell on $env_id, seeds $seeds"
    SEEDS="$seeds" ARGS="$args" sweep "$script" "$env_id"
    study store runs/ --store "$STORE" --steps "$STEPS" || status=1
done <<< "$plan"

if [ -n "$sub" ]; then  # the report's plotting is not in .venv-mujoco-ref: the lock's python makes it
    echo "stored in $STORE/$sub; the report: python -m benchmark.studies.implementation_matters report --store $STORE" \
         "--steps $STEPS, with the lock's python"
else
    study report --store "$STORE" --steps "$STEPS" || status=1
fi
exit $status
