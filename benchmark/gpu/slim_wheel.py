"""Rewrites a wheel with only some of its files, for the device machine's 64 MiB carry (benchmark/gpu/gpu_wheels.sh).

Run:   python -m benchmark.gpu.slim_wheel WHEEL OUT_DIR LOCAL_TAG KEEP_REGEX [PATH=TEXT ...]

The new wheel keeps the files whose path matches KEEP_REGEX, plus its .dist-info; PATH=TEXT replaces (or adds) a
file. Its version gets +LOCAL_TAG (1.2.5 -> 1.2.5+atari), in its name, its .dist-info folder and METADATA, so an
installed list shows what it is; RECORD is written anew with each file's hash and size.
envpool 1.2.5 (53 MB, every env family) becomes its Atari part alone (~4 MB): the other families' native modules go,
and envpool/entry.py registers the Atari ids only; envpool-assets 0.3.0 (62 MB) its Atari ROMs alone."""

import base64
import hashlib
import os
import re
import sys
import zipfile


def slim(wheel, out_dir, tag, keep, replace):
    name, version, rest = os.path.basename(wheel).split("-", 2)
    new_version = f"{version}+{tag}"
    old_info, new_info = f"{name}-{version}.dist-info/", f"{name}-{new_version}.dist-info/"
    files = {}
    with zipfile.ZipFile(wheel) as z:
        for item in z.infolist():
            path = item.filename
            if path.startswith(old_info):
                if path.endswith("RECORD"):
                    continue
                data = z.read(item)
                if path.endswith("METADATA"):
                    data = re.sub(rb"(?m)^Version: .*$", f"Version: {new_version}".encode(), data, count=1)
                files[new_info + path[len(old_info) :]] = data
            elif re.search(keep, path):
                files[path] = z.read(item)
    files.update({path: text.encode() for path, text in replace.items()})
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, f"{name}-{new_version}-{rest}")
    record = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        record.append(f"{new_info}RECORD,,")
        z.writestr(f"{new_info}RECORD", "\n".join(record) + "\n")
    return out


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__.split("\n\n")[1])
    wheel, out_dir, tag, keep, *pairs = sys.argv[1:]
    print(slim(wheel, out_dir, tag, keep, dict(p.split("=", 1) for p in pairs)))
