#!/usr/bin/env bash
# Installs the environments of ppo_procgen.py and ppo_multidiscrete{,_mask}.py next to the project's
# own dependencies (Python 3.11, numpy 2), without letting their old pins downgrade anything.
# Usage: bash scripts/install_extras.sh [procgen] [microrts]   (no argument: both)
set -euo pipefail
want=("${@:-procgen microrts}")
want=" ${want[*]} "

if [[ "$want" == *" procgen "* ]]; then
    # procgen-mirror 0.10.7 is openai/procgen 0.10.7 (the original games) rebuilt for Python 3.11.
    # --no-deps: gym3 0.3.3 declares numpy<2 and cffi<2, and pip would downgrade the project's numpy;
    # the compiled games run on numpy 2. gym is imported only to register procgen's old gym ids.
    pip install --no-deps procgen-mirror==0.10.7 gym3==0.3.3 gym==0.26.2 gym-notices==0.1.0
    # what procgen, gym3 and gym import at run time (imageio-ffmpeg: --capture-video)
    pip install cffi cloudpickle imageio "imageio-ffmpeg>=0.5"
fi

if [[ "$want" == *" microrts "* ]]; then
    # --no-deps: gym-microrts 0.4.3 declares gym>=0.18.3,<0.19, a 2021 gym; it only uses gym.spaces,
    # which gym 0.26.2 provides. Its simulator is Java, driven through JPype.
    pip install --no-deps gym-microrts==0.4.3 gym==0.26.2 gym-notices==0.1.0
    pip install "JPype1>=1.3,<2" pillow cloudpickle
    if ! command -v java >/dev/null 2>&1; then
        # a Java runtime for the simulator (Debian 12: OpenJDK 17, the version tested)
        apt-get update && apt-get install -y --no-install-recommends default-jre-headless
    fi
fi
