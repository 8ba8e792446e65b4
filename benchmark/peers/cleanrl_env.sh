#!/usr/bin/env bash
# Creates CleanRL's own Python environment (gymnasium 0.29.1, numpy<2: what its scripts are written for) at
# .cleanrl-venv in the repository, from the pins in benchmark/peers/cleanrl-requirements.txt, and prints its python,
# to pass as benchmark/peers/vs_cleanrl.py --cleanrl-python. Usage: bash benchmark/peers/cleanrl_env.sh [VENV_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${1:-$here/../../.cleanrl-venv}"  # in the repository
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q -r "$here/cleanrl-requirements.txt"
echo "$(cd "$venv" && pwd)/bin/python"
