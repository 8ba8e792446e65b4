#!/usr/bin/env bash
# Installs the lock (requirements/<target>.txt, hash-pinned) into .venv in this clone, made first if missing.
# Needs only Python 3.11-3.13 and pip; PYTHON picks the interpreter (default python3). Safe to run again.
# Usage: bash scripts/install.sh [core|atari|envpool|mujoco|video|track|benchmark|dev|mujoco-ref]   (default core;
# dev is everything the test suite needs, Procgen and Gym-uRTS included: see scripts/install_extras.sh; mujoco-ref is
# mujoco on MuJoCo 2.3.3, the published v4 numbers' physics, into .venv-mujoco-ref: requirements/mujoco-ref.in)
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-core}
[[ -f requirements/$target.txt ]] || { echo "install.sh: error: no lock requirements/$target.txt" >&2; exit 2; }
python=${PYTHON:-python3}
# mujoco-ref in a venv of its own: in .venv, pip would put 2.3.3's files over the mujoco package that MuJoCo 4's
# mujoco-core installs and leave mujoco-core there, so that neither version would be whole
venv=.venv
[[ $target != mujoco-ref ]] || venv=.venv-mujoco-ref
# the venv is made by PYTHON: one that does not start is named as such, not taken for a Python of the wrong version
if [[ ! -x $venv/bin/python ]] && ! "$python" -c '' 2>/dev/null; then
    echo "install.sh: error: PYTHON $python does not run$(command -v "$python" >/dev/null || echo ' (not found)'); give" \
         "one that does: PYTHON=python3.$([[ $target == mujoco-ref ]] && echo 11 || echo 12) bash scripts/install.sh $target" >&2
    exit 2
fi
if [[ $target == mujoco-ref ]]; then
    py=$([[ -x $venv/bin/python ]] && echo "$venv/bin/python" || echo "$python")
    "$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null || {
        echo "install.sh: error: $py is $("$py" -V 2>&1); MuJoCo 2.3.3 (requirements/mujoco-ref.txt) has wheels up to" \
             "Python 3.11 only: PYTHON=python3.11 bash scripts/install.sh mujoco-ref (after deleting $venv, if made)" >&2
        exit 1
    }
fi

# A virtual environment, so that a system Python that refuses pip installs (PEP 668) is never touched.
if [[ ! -x $venv/bin/python ]]; then
    # checked first: a venv of another Python would refuse the rerun with the right one
    "$python" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null || {
        echo "install.sh: error: $python is $("$python" -V 2>&1); the lock is for 3.11-3.13:" \
             "PYTHON=python3.12 bash scripts/install.sh" >&2
        exit 1
    }
    # Debian's python3 without python3-venv has no ensurepip: then make the venv without pip and drive
    # it with the system's pip (pip --python, pip >= 22.3)
    "$python" -m venv "$venv" 2>/dev/null || { rm -rf "$venv" && "$python" -m venv --without-pip "$venv"; }
fi
"$venv/bin/python" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' || {
    echo "install.sh: error: $venv has Python $("$venv/bin/python" -V 2>&1 | cut -d' ' -f2); the lock is for 3.11-3.13" \
         "(PYTHON=python3.12, after deleting $venv)" >&2
    exit 1
}
if "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    pip=("$venv/bin/python" -m pip)
elif "$python" -m pip --version >/dev/null 2>&1; then
    pip=("$python" -m pip --python "$venv/bin/python")
else
    echo "install.sh: error: $python has neither venv's ensurepip nor pip (Debian: apt-get install python3-venv)" >&2
    exit 1
fi

# On Python 3.11 the lock's torch is 2.13.0+cpu, PyTorch's CPU build, which PyPI does not carry: pip takes
# it from TORCH_FIND_LINKS (a folder holding the wheel; the project's machines keep it in /opt/wheels),
# or else from PyTorch's CPU index. Python 3.12+ take PyPI's torch 2.13.0 (on Linux a CUDA build).
src=()
if [[ -n $(ls "${TORCH_FIND_LINKS:-/opt/wheels}"/torch-2.13.0+cpu-* 2>/dev/null) ]]; then
    src=(--find-links "${TORCH_FIND_LINKS:-/opt/wheels}")
elif "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    index=https://download.pytorch.org/whl/cpu
    # fail at once where that index is out of reach (pip would retry it for every package)
    "$venv/bin/python" -c "import urllib.request as u; u.urlopen('$index/torch/', timeout=20)" 2>/dev/null || {
        echo "install.sh: error: the lock's torch for Python 3.11 is 2.13.0+cpu, which is not on PyPI, and $index" \
             "is out of reach: set TORCH_FIND_LINKS to a folder holding torch-2.13.0+cpu-cp311-*.whl," \
             "or use Python 3.12 or 3.13 (PYTHON=python3.12, after deleting $venv)" >&2
        exit 1
    }
    src=(--extra-index-url "$index")
fi
"${pip[@]}" install --require-hashes "${src[@]}" -r "requirements/$target.txt"

if [[ $target == dev ]]; then
    PIP="${pip[*]}" bash scripts/install_extras.sh
fi
