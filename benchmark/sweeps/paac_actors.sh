#!/usr/bin/env bash
# The PAAC paper's claims about the number of actors (Clemente et al. 2017, Figures 3 and 4): a2c_paac.py at the
# authors' released settings with n_e in {16, 32, 64, 128, 256} environments and the paper's learning rate 0.0007 * n_e
# (the script's default when --learning-rate is not given), the same seeds and step budget each; then, per n_e,
# compare.py's curves and verdict beside n_e = 32 (the paper's default), report.py's table of every n_e (each its own
# experiment), and wallclock.py's score of every n_e against the steps and the training hours, with the steps and hours
# at which each reached the GOALS (default "-10 0", Pong's). The time shares (charts/time_share_*) and the steps per
# second are among the compared tags.
#
#   bash benchmark/sweeps/paac_actors.sh                                  # Pong, seeds 1 2, 10M steps a run
#   STEPS=2000 SEEDS=1 SAVE_EVERY=1 NES="16 32" bash benchmark/sweeps/paac_actors.sh   # a smoke test, in minutes
#
# GAME (default Pong), STEPS, SEEDS, NES (the n_e values), GOALS, WORKERS (runs at a time, default 1: each steps n_e envs
# on 8 processes), TAGS (compared), ARGS (more flags for every run) and OUT override. Runs checkpoint every SAVE_EVERY
# updates of n_e = 32 (default 2000: 320k steps, the same steps at every n_e), so running it again resumes them; logs go
# to runs/ of the current directory, the comparisons and the report to OUT (default
# $RESULTS/paac_actors_<game>_<steps>, RESULTS default results/ of the current directory).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS="${WORKERS:-1}"; STEPS="${STEPS:-10000000}"; SEEDS="${SEEDS:-1 2}"; GAME="${GAME:-Pong}"
SAVE_EVERY="${SAVE_EVERY:-2000}"; NES="${NES:-16 32 64 128 256}"; GOALS="${GOALS:--10 0}"
settings STEPS SEEDS WORKERS SAVE_EVERY
for ne in $NES; do
    [[ $ne =~ ^[1-9][0-9]*$ ]] || { echo "$(basename "$0"): error: NES='$NES' must be whole numbers from 1 (e.g. NES=\"16 32\")" >&2; exit 2; }
done
ENV_ID="${GAME}NoFrameskip-v4"; MODE="${GAME,,}_$STEPS"; EXTRA="${ARGS:-}"
TAGS="${TAGS:-charts/episodic_return charts/SPS losses/entropy charts/time_share_env charts/time_share_inference charts/time_share_update}"
RELEASED="--loss-scale 5 --vf-coef 0.25 --max-grad-norm 3 --ent-coef 0.02 --init torch --anneal-timesteps 80000000"
cell() {  # cell NE: the flags of that n_e's runs, a checkpoint every SAVE_EVERY updates of n_e = 32's steps (320k)
    local every=$(( SAVE_EVERY * 32 / $1 ))
    echo "--num-envs $1 $RELEASED --save-model --save-every $(( every > 0 ? every : 1 )) $EXTRA"
}

for ne in $NES; do
    ARGS="$(cell "$ne")" sweep a2c_paac.py "$ENV_ID"
done
OUT="${OUT:-$RESULTS/paac_actors_$MODE}"
for ne in $NES; do
    [ "$ne" = 32 ] || compare "$OUT/ne32_vs_ne$ne" ne32 a2c_paac.py "$(cell 32)" "ne$ne" a2c_paac.py "$(cell "$ne")"
done
python -m benchmark.tools.report runs/ --scripts a2c_paac.py --steps "$STEPS" --out "$OUT/report" || status=1
groups=()
for ne in $NES; do
    groups+=(--group "n_e $ne=runs/:$(exp_name a2c_paac.py "$(cell "$ne")")")
done
# shellcheck disable=SC2086  # GOALS is split into words on purpose
python -m benchmark.studies.wallclock --script a2c_paac.py --env-id "$ENV_ID" "${groups[@]}" --goals $GOALS \
    --out "$OUT/wallclock" || status=1
exit $status
