#!/usr/bin/env bash
# --bf16's learning check: ppo_atari.py on Breakout in fp32 (the reference) and with --bf16, same seeds and
# budget, the curves overlaid by compare.py with a verdict ("same", or the windows where they differ).
#
#   bash benchmark/sweeps/bf16.sh          # Breakout, 1M steps, seeds 1 2 3
#   bash benchmark/sweeps/bf16.sh short    # Breakout, 1M steps, seeds 1 2 (~30 min a run on 2 idle cores)
#
# Runs checkpoint every 50 iterations: rerunning continues them. Logs go to runs/ of the current directory,
# the comparison to OUT (default $RESULTS/bf16_breakout_<mode>/: results/ of the current directory unless RESULTS says
# otherwise). SEEDS="1" and STEPS=... override.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
WORKERS=1
if [ "$MODE" = short ]; then SEEDS="${SEEDS:-1 2}"; else SEEDS="${SEEDS:-1 2 3}"; fi
STEPS="${STEPS:-1000000}"
for seed in $SEEDS; do  # interleaved, so that a stopped sweep leaves pairs
    for ARGS in "--save-model --save-every 50" "--save-model --save-every 50 --bf16"; do
        SEEDS=$seed sweep ppo_atari.py BreakoutNoFrameskip-v4
    done
done
# the finished runs of each precision at this budget, from the runner's summaries
runs_with() {  # runs_with 0|1: the run dirs without (0) or with (1) --bf16
    python - "$1" "$STEPS" <<'PY'
import glob, json, sys
for path in sorted(glob.glob("runs/summaries/ppo_atari__BreakoutNoFrameskip-v4__*.json")):
    s = json.load(open(path))
    if s["ok"] and ("--bf16" in s["args"]) == (sys.argv[1] == "1") and sys.argv[2] in s["args"]:
        print("runs/" + s["tb_dir"])
PY
}
mapfile -t a < <(runs_with 0); mapfile -t b < <(runs_with 1)
python -m benchmark.tools.compare --a "fp32=${a[0]:-}" "${a[@]:1}" --b "bf16=${b[0]:-}" "${b[@]:1}" \
    --out "${OUT:-$RESULTS/bf16_breakout_$MODE}" || status=1
exit $status
