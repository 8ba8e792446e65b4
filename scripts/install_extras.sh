#!/usr/bin/env bash
# Installs the environments of ppo_procgen.py and ppo_multidiscrete{,_mask}.py next to the project's
# own dependencies (numpy 2), without letting their old pins downgrade anything. scripts/install.sh dev
# runs it; run it alone to add them to an environment of your own (PIP: the pip command, default python -m pip).
# Usage: bash scripts/install_extras.sh [procgen] [microrts]   (no argument: both)
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a pip <<< "${PIP:-python -m pip}"
want=("${@:-procgen microrts}")
want=" ${want[*]} "

# What they import at run time: pinned in requirements/dev.txt, so after scripts/install.sh dev this
# installs nothing; in another environment it adds what is missing (imageio-ffmpeg: --capture-video).
"${pip[@]}" install -r requirements/extras-deps.in

if [[ "$want" == *" procgen "* ]]; then
    # procgen-mirror 0.10.7 is openai/procgen 0.10.7 (the original games) rebuilt for Python 3.11 and 3.12
    # (no wheel for 3.13). --no-deps: gym3 0.3.3 declares numpy<2 and cffi<2, and pip would downgrade the
    # project's numpy; the compiled games run on numpy 2. gym is imported only to register procgen's old gym ids.
    "${pip[@]}" install --require-hashes --no-deps -r requirements/procgen.txt
fi

if [[ "$want" == *" microrts "* ]]; then
    # gym-microrts 0.4.3 (the grid mode the scripts ran until 2026-11-24, kept for those results), --no-deps: it declares
    # gym>=0.18.3,<0.19, a 2021 gym; it only uses gym.spaces, which gym 0.26.2 provides. Its simulator is Java (JPype).
    "${pip[@]}" install --require-hashes --no-deps -r requirements/microrts.txt
    # gym-microrts 0.2.0, the blog's env and the scripts' default, is an sdist whose package shares 0.4.3's import
    # name: its gym_microrts/ folder (Python and microrts.jar, nothing to build) is unpacked as gym_microrts020 into
    # the site-packages of pip's Python, beside 0.4.3; the scripts import it under stand-ins (they say why).
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "${pip[@]}" download --quiet --require-hashes --no-deps -r requirements/microrts020.txt -d "$tmp"
    python=$("${pip[@]}" debug 2>/dev/null | sed -n 's/^sys.executable: //p')
    site=$("${python:?pip debug named no Python}" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    dest=${site:?}/gym_microrts020
    rm -rf "$dest" && mkdir "$dest"
    tar xzf "$tmp"/gym_microrts-0.2.0.tar.gz -C "$dest" --strip-components=2 gym_microrts-0.2.0/gym_microrts
    echo "gym-microrts 0.2.0 unpacked into $dest"
    if ! command -v java >/dev/null 2>&1; then
        # a Java runtime for the simulator (Debian 12: OpenJDK 17, the version tested)
        apt-get update && apt-get install -y --no-install-recommends default-jre-headless
    fi
fi
