"""The lock (requirements/*.txt, hash-pinned, made by scripts/lock.sh), as the tests read it."""

import os
import re


def lock_pins(path):
    """{normalised name: [(version, marker or None)]} of a hash-pinned requirements file, every pin checked
    to carry at least one hash."""
    text = open(path).read().replace("\\\n", " ")
    pins = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s*(?:;\s*(.*?))?\s*(--hash=.*)?$", line)
        assert m and m[4], f"{os.path.basename(path)}: not a hash-pinned line: {line[:80]}"
        name = re.sub(r"[-_.]+", "-", m[1]).lower()
        pins.setdefault(name, []).append((m[2], m[3]))
    return pins
