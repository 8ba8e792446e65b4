#!/usr/bin/env bash
# The 37-details blog's rule of thumb, "Check if your PPO could obtain 400 episodic return in Breakout", at the published 10M steps:
# docs/atari.md's command, `python ppo_atari.py --env-id BreakoutNoFrameskip-v4`, for seeds 1 2 3 through
# run.py, checkpointed every 50 iterations so that running this again resumes each seed exactly where it stopped
# (and skips the finished ones); then, into OUT:
#   report.md, per_seed.csv, curves.csv, *.png  the final returns beside CleanRL's 414.66 ± 28.09 (report.py --curves;
#                                               benchmark/tools/summary.py then draws curves.csv as a panel of the figure)
#   agent.pt   the network alone of the median seed's final checkpoint (atari_agent.py weights, ~6.4 MiB)
#   eval.txt   which seed that is, and its score over EVAL_EPISODES whole games (ppo_atari.py --eval-checkpoint)
#   agent.gif  the first of those games (atari_agent.py gif)
#
#   bash benchmark/sweeps/breakout_10m.sh      # ~5 h a seed on 2 Intel cores, ~15 h on 2 AMD EPYC Zen 3, ~7 h on Zen 4
#
# OUT (default $RESULTS/ppo_atari_breakout_10m_<date>, RESULTS default results/ of the current directory), SEEDS
# (default "1 2 3"), WORKERS (default 1, so that seed 1 ends first; WORKERS=2 on 2 cores gives each run one thread:
# 143 + 158 steps/s together against 235 for one run of two threads on an AMD EPYC Zen 3 host, 268 + 254 against 409
# on Zen 4, 2026-11-29/30), THREADS (run.py --threads), EVAL_EPISODES (default 10) and ARGS (more flags for every run:
# another experiment, e.g. `ARGS="--total-timesteps 1000000"`, with its own runs).
# Logs go to runs/ of the current directory. The report reads every finished run of this experiment there (its flags:
# run.py's <script>-<args hash> name), seeds outside SEEDS too: run seeds apart, then report them together.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SEEDS="${SEEDS:-1 2 3}"; WORKERS="${WORKERS:-1}"; EVAL_EPISODES="${EVAL_EPISODES:-10}"
OUT="${OUT:-$RESULTS/ppo_atari_breakout_10m_$(date +%F)}"
settings SEEDS WORKERS EVAL_EPISODES
read -r -a extra <<< "--save-model --save-every 50 ${ARGS:-}"

# shellcheck disable=SC2086  # SEEDS is split into words on purpose
python -m benchmark.tools.run --script "$REPO/ppo_atari.py" --env-ids BreakoutNoFrameskip-v4 --seeds $SEEDS \
    --workers "$WORKERS" ${THREADS:+--threads "$THREADS"} -- "${extra[@]}"
code=$?
[ $code -eq 0 ] || exit $code  # a seed failed or was stopped: run.py said which; running this again resumes it
exp_name="$(python -c 'import sys; from benchmark.runs import exp_name_for
print(exp_name_for("ppo_atari.py", sys.argv[1:]))' "${extra[@]}")" || exit 1
python -m benchmark.tools.report runs/ --scripts ppo_atari.py --exp-names "$exp_name" --curves --out "$OUT" || exit 1

median="$(python -c 'import sys; from benchmark.tools.report import median_seed
row = median_seed(sys.argv[1]); print(row["seed"], row["final_return"], row["run_dir"])' "$OUT/per_seed.csv")" \
    || exit 1
read -r seed final run_dir <<< "$median"
python -m benchmark.studies.atari_agent weights "$run_dir/checkpoint.pt" "$OUT/agent.pt" || exit 1
{
    echo "median seed $seed (final return $final, the mean of its last 100 training games): $run_dir"
    echo "\$ python ppo_atari.py --eval-checkpoint agent.pt --eval-episodes $EVAL_EPISODES"
    python "$REPO/ppo_atari.py" --eval-checkpoint "$OUT/agent.pt" --eval-episodes "$EVAL_EPISODES"
} > "$OUT/eval.txt" || exit 1
python -m benchmark.studies.atari_agent gif "$OUT/agent.pt" "$OUT/agent.gif" || exit 1
cat "$OUT/eval.txt"
