#!/usr/bin/env bash
# The IMPALA paper's Table 2 on an Atari game: impala_vtrace.py with each of its off-policy corrections (--correction
# vtrace, one-step, epsilon, none), without replay and with half of every batch drawn from past unrolls
# (--replay-fraction 0.5), the same seeds and budget a cell; then, per correction and replay setting, compare.py's
# curves and verdict of V-trace beside it, report.py's table of the eight cells (each cell its own experiment), and
# wallclock.py's table of them as Table 2 sets them (each cell's final scores and policy lag, the steps and hours at
# which it reached the GOALS, default "-10 0", Pong's) with every run's score against the steps and the hours.
#
#   bash benchmark/sweeps/impala_corrections.sh                                    # Pong, seeds 1 2, 5M steps a run
#   STEPS=2000 SEEDS=1 SAVE_EVERY=1 bash benchmark/sweeps/impala_corrections.sh    # a smoke test: every step, in minutes
#
# GAME (default Pong), STEPS, SEEDS, GOALS, WORKERS (default 1), TAGS (compared), ARGS (more flags for every run, e.g.
# --anneal-timesteps) and OUT override. Runs checkpoint every SAVE_EVERY updates (default 500), so running it again
# resumes them; logs go to runs/ of the current directory, the comparisons and the report to OUT (default
# $RESULTS/impala_corrections_<game>_<steps>, RESULTS default results/ of the current directory).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS="${WORKERS:-1}"; STEPS="${STEPS:-5000000}"; SEEDS="${SEEDS:-1 2}"; GAME="${GAME:-Pong}"
GOALS="${GOALS:--10 0}"
SAVE_EVERY="${SAVE_EVERY:-500}"
settings STEPS SEEDS WORKERS SAVE_EVERY
ENV_ID="${GAME}NoFrameskip-v4"; MODE="${GAME,,}_$STEPS"; EXTRA="${ARGS:-}"
TAGS="${TAGS:-charts/episodic_return losses/value_loss losses/policy_loss losses/entropy charts/policy_lag}"
cell() {  # cell CORRECTION REPLAY: the flags of that cell's runs
    echo "--correction $1 --replay-fraction $2 --save-model --save-every $SAVE_EVERY $EXTRA"
}

for replay in 0 0.5; do
    for correction in vtrace one-step epsilon none; do
        ARGS="$(cell "$correction" "$replay")" sweep impala_vtrace.py "$ENV_ID"
    done
done
OUT="${OUT:-$RESULTS/impala_corrections_$MODE}"
for replay in 0 0.5; do
    for correction in one-step epsilon none; do
        compare "$OUT/vtrace_vs_${correction}_replay_$replay" vtrace impala_vtrace.py "$(cell vtrace "$replay")" \
            "$correction" impala_vtrace.py "$(cell "$correction" "$replay")"
    done
done
python -m benchmark.tools.report runs/ --scripts impala_vtrace.py --steps "$STEPS" --out "$OUT/report" || status=1
groups=()
for replay in 0 0.5; do
    for correction in vtrace one-step epsilon none; do
        exp="$(exp_name impala_vtrace.py "$(cell "$correction" "$replay")")"
        groups+=(--group "$correction, replay $replay=runs/:$exp")
    done
done
# shellcheck disable=SC2086  # GOALS is split into words on purpose
python -m benchmark.studies.wallclock --script impala_vtrace.py --env-id "$ENV_ID" "${groups[@]}" --goals $GOALS \
    --out "$OUT/wallclock" || status=1
exit $status
