# Sourced by every sweep script here: the paths, the mode (first argument: full or short), and the two
# steps each sweep takes. The sourcing script sets STEPS, SEEDS and WORKERS, calls `sweep` once per
# training script, then `report` once. A paired sweep also sets ENV_ID and TAGS and calls `compare` (its groups'
# run dirs from `run_dirs`) for compare.py's verdict.
set -uo pipefail
BENCH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"  # benchmark/
REPO="$(dirname "$BENCH")"
# the tools are modules of the package benchmark (python -m benchmark.tools.run): the repository on the import path, so
# that they run from any working directory (a sweep's runs/ and results/ are the current directory's)
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
MODE="${1:-full}"
status=0
# where the reports and comparisons go: results/ of the current directory, beside its runs/, so that a sweep of one's
# own never writes over the results in the repository; RESULTS=benchmark/results (or any folder) to write there
RESULTS="${RESULTS:-results}"

# settings NAME...: the named variables as run.py takes them (STEPS, WORKERS: a whole number from 1; SEEDS: whole
# numbers, each once), checked before any run starts: else one line and exit 2
settings() {
    local name value want
    for name in "$@"; do
        value="${!name-}"
        if [ "$name" = SEEDS ]; then
            want='whole numbers from 0, each once (e.g. SEEDS="1 2")'
            [[ $value =~ ^\ *[0-9]+(\ +[0-9]+)*\ *$ ]] && [ -z "$(tr -s ' ' '\n' <<< "$value" | sort | uniq -d)" ] && continue
        else
            want="a whole number from 1 (e.g. $name=2)"
            [[ $value =~ ^[1-9][0-9]*$ ]] && continue
        fi
        echo "$(basename "$0"): error: $name='$value' must be $want" >&2
        exit 2
    done
}

# sweep SCRIPT ENV_ID...: every (env, seed) of SCRIPT through run.py; a failed run fails the sweep, the rest go on.
# ARGS="--flag value ..." in the environment is passed on to every run (e.g. a variant's settings); THREADS=N caps
# each run's threads (run.py --threads; default cores // workers), e.g. THREADS=1 beside another run on 2 cores.
# RUN_FLAGS=--rerun-changed (or --reuse-changed) is passed on to run.py: what to do with the finished runs of a script
# edited since (run.py refuses to go on without one of them).
sweep() {
    local script="$1"; shift
    # shellcheck disable=SC2086  # ARGS is split into words on purpose
    python -m benchmark.tools.run --script "$REPO/$script" --env-ids "$@" --seeds $SEEDS --workers "$WORKERS" \
        ${THREADS:+--threads "$THREADS"} ${RUN_FLAGS:-} -- --total-timesteps "$STEPS" ${ARGS:-}
    local code=$?
    if [ $code -gt 128 ]; then exit $code; fi  # run.py was stopped by a signal (Ctrl-C, SIGTERM): stop the sweep too
    if [ $code -ne 0 ]; then status=1; fi
}

# report NAME SCRIPT... [REPORT OPTIONS]: table and curves into $RESULTS/NAME_MODE, then exit with the sweep's status
report() {
    local name="$1"; shift
    python -m benchmark.tools.report runs/ --scripts "$@" --steps "$STEPS" --out "$RESULTS/${name}_$MODE"
    exit $status
}

# run_dirs SCRIPT "ARGS": the TensorBoard dir of each of $SEEDS's runs of SCRIPT on $ENV_ID with --total-timesteps
# $STEPS and ARGS, from run.py's summaries; a seed without a finished run: one line naming it, and status 1
run_dirs() {
    python - "$1" "$ENV_ID" "--total-timesteps $STEPS $2" "$(basename "$0")" $SEEDS <<'EOF'
import json, sys
from benchmark.runs import finished, summary_path
script, env_id, extra, name, seeds = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4], sys.argv[5:]
paths = [summary_path("runs", script, env_id, int(seed), extra) for seed in seeds]
unfinished = [seed for seed, path in zip(seeds, paths) if not finished(path)]
if unfinished:  # failed, refused or not run: run.py said why above
    sys.exit(f"{name}: error: no comparison of {script}'s runs: seed {' '.join(unfinished)} on {env_id} did not "
             "finish (run.py said why, above); mend that and run the sweep again")
print(*("runs/" + json.load(open(path))["tb_dir"] for path in paths))
EOF
}

# exp_name SCRIPT "ARGS": the experiment name run.py gives SCRIPT's runs with --total-timesteps $STEPS and ARGS
exp_name() {
    # shellcheck disable=SC2086  # ARGS is split into words on purpose, as sweep passes them
    python -c 'import sys; from benchmark.runs import exp_name_for as f; print(f(sys.argv[1], sys.argv[2:]))' \
        "$1" --total-timesteps "$STEPS" $2
}

# compare OUT LABEL_A SCRIPT_A "ARGS_A" LABEL_B SCRIPT_B "ARGS_B": compare.py's curves and verdicts of the two groups'
# runs (run_dirs) for the tags in $TAGS into OUT/
compare() {
    local dirs_a dirs_b a b
    dirs_a="$(run_dirs "$3" "$4")" && dirs_b="$(run_dirs "$6" "$7")" || { status=1; return; }
    read -r -a a <<< "$dirs_a"; read -r -a b <<< "$dirs_b"
    # shellcheck disable=SC2086  # TAGS is split into words on purpose
    python -m benchmark.tools.compare --a "$2=${a[0]}" "${a[@]:1}" --b "$5=${b[0]}" "${b[@]:1}" --tags $TAGS --out "$1" \
        || status=1
}

# atari_ids SUFFIX GAME...: atari_ids NoFrameskip-v4 Breakout Pong -> BreakoutNoFrameskip-v4 PongNoFrameskip-v4
atari_ids() {
    local suffix="$1"; shift
    for game in "$@"; do printf '%s ' "$game$suffix"; done
}
