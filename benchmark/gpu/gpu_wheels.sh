#!/usr/bin/env bash
# Gathers into .gpu/ (ignored by git) what benchmark/gpu/gpu_check.py needs on the device machine and cannot download
# there: wheels for its Python 3.12 (x86-64), and CleanRL's four scripts. The device already has torch, numpy,
# tensorboard, opencv, imageio and cloudpickle (/work/.library/device/KINDS.md), so none of those is fetched.
#   .gpu/ours         ours: gymnasium, ale-py, tyro (the lock's pins, requirements/all.txt) and MuJoCo 3.1.6; in
#                     lib/, this machine's copies of the system libraries that procgen's libenv.so and its bundled
#                     Qt load beyond glibc, libstdc++ and zlib (libGL and what it needs, X11, glib): the device has
#                     no libGL.so.1 (seen 2026-11-26)
#   .gpu/cleanrl      CleanRL's pins (benchmark/peers/cleanrl-requirements.txt) that differ from ours: gymnasium 0.29.1,
#                     numpy 1.26.4, ale-py 0.9.1, stable-baselines3; installed into a site of its own
#   .gpu/cleanrl-src  cleanrl/{ppo,ppo_atari,ppo_atari_envpool,ppo_continuous_action}.py, cleanrl_utils, COMMIT
#   .gpu/procgen      procgen-mirror and its gym, gym3, cffi: 47 MB alone, so it travels in a call of its own
#   .gpu/envpool      envpool 1.2.5 (the lock's 3.12 pin, 1.2.7, is 64 MB) cut to its Atari part by
#                     benchmark/gpu/slim_wheel.py (53 MB -> 3.5 MB), envpool-assets cut to the Atari ROMs, dm-env, optree:
#                     ppo_atari_envpool.py, and the peers' envpool scripts behind peer_shims/old_envpool_api.py
#   .gpu/leanrl       with a LeanRL checkout: tensordict 0.13.0 (0.14 on makes to_module's tensors Parameters that
#                     require grad, and LeanRL's eager update then backpropagates into its rollout), pyvers
#   .gpu/leanrl-src   leanrl/{ppo_continuous_action,ppo_atari_envpool}_torchcompile.py, COMMIT
# .gpu/cleanrl also holds gym 0.23.1 (CleanRL's pin; built here, PyPI has its source only), which both peers' envpool
# scripts import.
# MuJoCo is 3.1.6 on both sides: CleanRL's pin (2.3.7) has no Python 3.12 wheel, and the lock's 4.0.0 is 22 MB.
# Then it checks what each device call carries (the working tree plus its folders) against the tool's 64 MiB.
# Usage: bash benchmark/gpu/gpu_wheels.sh CLEANRL_DIR [LEANRL_DIR]   (git clone https://github.com/vwxyzjn/cleanrl,
#        https://github.com/pytorch-labs/LeanRL)
# PYTHON: the Python whose pip downloads (default .venv/bin/python; any version: the wheels are chosen for 3.12).
set -euo pipefail
# the paths given are read from the folder the command is run in, before the repository becomes the working folder
cleanrl=${1:-}
[[ -z $cleanrl || $cleanrl == /* ]] || cleanrl=$PWD/$cleanrl
leanrl=${2:-}
[[ -z $leanrl || $leanrl == /* ]] || leanrl=$PWD/$leanrl
[[ ${PYTHON:-/} == /* || $PYTHON != */* ]] || PYTHON=$PWD/$PYTHON  # a path; a bare name is looked up on the PATH
cd "$(dirname "$0")/../.."  # the repository
if [[ -z $cleanrl || ! -f $cleanrl/cleanrl/ppo.py ]]; then
    echo "gpu_wheels.sh: error: give a CleanRL checkout (no cleanrl/ppo.py under '${cleanrl}'): git clone" \
         "https://github.com/vwxyzjn/cleanrl /tmp/cleanrl; bash benchmark/gpu/gpu_wheels.sh /tmp/cleanrl" >&2
    exit 2
fi
if [[ -n $leanrl && ! -f $leanrl/leanrl/ppo_continuous_action_torchcompile.py ]]; then
    echo "gpu_wheels.sh: error: give a LeanRL checkout (no leanrl/ppo_continuous_action_torchcompile.py under" \
         "'${leanrl}'): git clone https://github.com/pytorch-labs/LeanRL /tmp/leanrl" >&2
    exit 2
fi
python=${PYTHON:-.venv/bin/python}
out=.gpu
limit=$((64 * 1024 * 1024))

pins() {  # pins FILE NAME...: NAME==VERSION as FILE pins each (a lock's line or a requirements line)
    local file=$1 name pin; shift
    for name in "$@"; do
        pin=$(grep -m1 -oE "^$name==[^ ;\\]+" "$file") ||
            { echo "gpu_wheels.sh: error: $file pins no $name" >&2; exit 1; }
        echo "$pin"
    done
}
download() {  # download FOLDER REQUIREMENT...: wheels for the device's CPython 3.12 on manylinux x86-64
    local folder=$out/$1; shift
    rm -rf "$folder" && mkdir -p "$folder"
    local platform=() n
    for n in 1 2010 2014; do platform+=(--platform "manylinux${n}_x86_64"); done
    for n in 17 24 27 28 31 34 35; do platform+=(--platform "manylinux_2_${n}_x86_64"); done
    "$python" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platform[@]}" -d "$folder" "$@"
}

download ours $(pins requirements/all.txt gymnasium farama-notifications ale-py tyro docstring-parser typeguard glfw) \
    mujoco==3.1.6
# they need glibc 2.34 at most (objdump -T); the device has 2.39 (ldd --version there, 2026-11-26)
mkdir -p "$out/ours/lib"
cache=$(/sbin/ldconfig -p)  # read once: awk leaving a pipe early would end ldconfig by SIGPIPE, and pipefail the script
for lib in libGL.so.1 libGLdispatch.so.0 libGLX.so.0 libX11.so.6 libxcb.so.1 libXau.so.6 libXdmcp.so.6 libbsd.so.0 \
           libmd.so.0 libglib-2.0.so.0 libgthread-2.0.so.0 libpcre2-8.so.0; do
    path=$(awk -v l="$lib" '$1 == l && /x86-64/ {print $NF; exit}' <<< "$cache")
    [[ -n $path ]] || { echo "gpu_wheels.sh: error: no $lib here to copy; apt-get install libgl1 libglib2.0-0" >&2; exit 1; }
    cp -L "$path" "$out/ours/lib/$lib"
done
download cleanrl $(pins benchmark/peers/cleanrl-requirements.txt gymnasium numpy ale-py stable-baselines3)
"$python" -m pip wheel --quiet --no-deps --no-binary gym -w "$out/cleanrl" "$(pins benchmark/peers/cleanrl-requirements.txt gym)"
# envpool: the 1.2.5 wheel for 3.12, then only its Atari part (the other families' native modules are 49 MB)
download envpool envpool==1.2.5 envpool-assets==0.3.0 dm-env==1.6 optree==0.20.0
atari='^envpool(\.libs/|/atari/|/python/|/[^/]+\.py$|/py\.typed$|/[^/]+/(__init__|registration)\.py$|/[^/]+/[^/]+/(__init__|registration)\.py$)'
"$python" -m benchmark.gpu.slim_wheel "$out"/envpool/envpool-1.2.5-*.whl "$out/envpool" atari "$atari" \
    "envpool/entry.py=import envpool.atari.registration  # noqa: F401  (gpu_wheels.sh: the Atari ids alone)"$'\n' >/dev/null
"$python" -m benchmark.gpu.slim_wheel "$out"/envpool/envpool_assets-0.3.0-*.whl "$out/envpool" atari \
    '^envpool_assets/(__init__\.py|atari/)' >/dev/null
rm "$out"/envpool/envpool-1.2.5-*.whl "$out"/envpool/envpool_assets-0.3.0-*.whl
bundles=(ours cleanrl cleanrl-src envpool procgen)
if [[ -n $leanrl ]]; then
    download leanrl tensordict==0.13.0 pyvers==0.2.3
    lsrc=$out/leanrl-src
    rm -rf "$lsrc" && mkdir -p "$lsrc/leanrl"
    cp "$leanrl"/leanrl/{ppo_continuous_action,ppo_atari_envpool}_torchcompile.py "$lsrc/leanrl/"
    git -C "$leanrl" rev-parse HEAD > "$lsrc/COMMIT" 2>/dev/null ||
        echo "unknown: $leanrl is not a git checkout" > "$lsrc/COMMIT"
    bundles=(ours cleanrl cleanrl-src envpool leanrl leanrl-src procgen)
fi
download procgen $(pins requirements/procgen.txt procgen-mirror gym3 gym-notices) \
    $(pins requirements/all.txt cffi pycparser)
# gym 0.26.2 (procgen registers its ids with it) is on PyPI as source only: its pure-Python wheel is built here
"$python" -m pip wheel --quiet --no-deps --no-binary gym -w "$out/procgen" "$(pins requirements/procgen.txt gym)"

src=$out/cleanrl-src
rm -rf "$src" && mkdir -p "$src/cleanrl" "$src/cleanrl_utils"
cp "$cleanrl"/cleanrl/{ppo,ppo_atari,ppo_atari_envpool,ppo_continuous_action}.py "$src/cleanrl/"
cp "$cleanrl"/cleanrl_utils/{__init__,atari_wrappers}.py "$src/cleanrl_utils/"
git -C "$cleanrl" rev-parse HEAD > "$src/COMMIT" 2>/dev/null ||
    echo "unknown: $cleanrl is not a git checkout" > "$src/COMMIT"

total() { awk '{s += $1} END {print s + 0}'; }
bytes() { find "$@" -type f -printf '%s\n' | total; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
# what every call sends besides its carry: tracked files and untracked ones that git does not ignore
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | total)
echo "working tree: $(mib "$tree")"
for f in "${bundles[@]}"; do
    names=$(find "$out/$f" -name '*.whl' -printf '%f\n' | cut -d- -f1,2 | sort | tr '\n' ' ')
    echo "  .gpu/$f: $(mib "$(bytes "$out/$f")"): $names"
done
status=0
call() {  # call N FOLDER...: one device call's size against the limit
    local n=$1 total; shift
    total=$((tree + $(bytes "${@/#/$out/}")))
    echo "call $n carries ${*/#/.gpu/}: $(mib "$total") of 64 MiB with the working tree"
    if ((total > limit)); then echo "gpu_wheels.sh: error: call $n is over the tool's 64 MiB" >&2; status=1; fi
}
call 1 procgen
call 2 ours cleanrl cleanrl-src envpool
[[ -z $leanrl ]] || call "2 (LeanRL)" ours cleanrl cleanrl-src envpool leanrl leanrl-src
echo "left out: gym-microrts (needs a Java runtime); CleanRL's envpool 0.8.4 (no Python 3.12 wheel: its script runs"
echo "  on envpool 1.2.5 behind benchmark/peers/shims/old_envpool_api.py); opencv-python-headless 4.10 for CleanRL"
echo "  (~50 MB: the device's opencv serves it); wandb for LeanRL (benchmark/peers/shims/wandb.py stands in)"
exit $status
