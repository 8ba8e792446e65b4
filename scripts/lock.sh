#!/usr/bin/env bash
# Remakes the lock, requirements/*.txt: hash-pinned requirement files that plain pip installs
# (scripts/install.sh), one per install target, each valid on Python 3.11, 3.12 and 3.13 (environment
# markers). Made with uv (pip install uv), which resolves for all three versions at once.
# Run it after changing pyproject.toml or requirements/*.in; tests/test_repo.py checks they stay in step.
# Usage: bash scripts/lock.sh [--upgrade]   (without --upgrade, uv keeps the pins already in the lock)
set -euo pipefail
cd "$(dirname "$0")/.."
# torch 2.13.0+cpu is not on PyPI: uv must see a folder or index that holds it
# (the project's machines keep it in /opt/wheels; elsewhere PyTorch's CPU index)
if [[ -d "${TORCH_FIND_LINKS:-/opt/wheels}" ]]; then
    torch_src=(--find-links "${TORCH_FIND_LINKS:-/opt/wheels}")
else
    torch_src=(--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)
fi
compile() {  # compile OUT INPUT... [uv options]
    local out=$1; shift
    uv pip compile --quiet --universal --python-version 3.11 --generate-hashes --no-strip-markers \
        --custom-compile-command "bash scripts/lock.sh" "${torch_src[@]}" -o "requirements/$out" "$@"
}
# all.txt resolves every extra at once; every other target is pinned within it, so that installing two
# targets one after the other (atari, then benchmark) never moves a pin
compile all.txt pyproject.toml requirements/torch.in requirements/extras-deps.in --all-extras "$@"
compile core.txt pyproject.toml requirements/torch.in --constraint requirements/all.txt "$@"
for extra in atari envpool mujoco video track benchmark; do
    compile "$extra.txt" pyproject.toml requirements/torch.in --extra "$extra" --constraint requirements/all.txt "$@"
done
compile dev.txt pyproject.toml requirements/torch.in requirements/extras-deps.in --extra dev \
    --constraint requirements/all.txt "$@"
# mujoco-ref: the mujoco extra on MuJoCo 2.3.3 (requirements/mujoco-ref.in says why), every other pin all.txt's, whose
# mujoco* pins the constraint leaves out (awk drops each pin's block); for Python 3.11 on Linux x86_64 only, not
# --universal: 2.3.3 has no wheel for 3.12+, and manylinux_2_28 is the oldest platform the 3.11 torch wheel is for
trap 'rm -f requirements/all-but-mujoco.txt' EXIT
awk '/^[^ #]/ { skip = /^mujoco/ } !skip' requirements/all.txt > requirements/all-but-mujoco.txt
uv pip compile --quiet --python-version 3.11 --python-platform x86_64-manylinux_2_28 --generate-hashes --no-strip-markers \
    --custom-compile-command "bash scripts/lock.sh" "${torch_src[@]}" -o requirements/mujoco-ref.txt pyproject.toml \
    requirements/torch.in requirements/mujoco-ref.in --extra mujoco --override requirements/mujoco-ref.in \
    --constraint requirements/all-but-mujoco.txt "$@"
for env in procgen microrts microrts020; do  # installed with --no-deps: the pins listed, no resolution
    compile "$env.txt" "requirements/$env.in" --no-deps "$@"
done
