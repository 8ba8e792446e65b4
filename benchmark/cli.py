"""What every tool's command line shares: bad input as one line (ConfigError: the tool prints it, exit status 2) before
any work, and the output paths checked, or chosen, before the work."""

import os
import sys
import tempfile


class ConfigError(ValueError):
    """Bad input found before any run starts; main prints it as one line."""


def one_line_errors(tool, command, argv=None):
    """command(argv) (default: this process's arguments), its ConfigError printed as "<tool>: error: ..." and exit 2."""
    try:
        return command(sys.argv[1:] if argv is None else argv)
    except ConfigError as e:
        print(f"{tool}: error: {e}", file=sys.stderr)
        return 2


def make_out_dir(path):
    """os.makedirs(path), its failure (a file in the way, no permission) a ConfigError that names the path and the fix."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {path!r} cannot be made ({e.strerror}); give a folder that can be created") from None


def writable(path, flag):
    """Make the folder `path` and write a file in it, before any work: a failure is one line naming it."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise ConfigError(f"{flag} {path} cannot be written to ({e.strerror}); give a folder you can write to") from None


def unused_path(stem, ext=".md"):
    """stem.md, or stem_b.md, stem_c.md, ... : a second measurement on the same day keeps the first one's file."""
    suffixes = [""] + [f"_{c}" for c in "bcdefghijklmnopqrstuvwxyz"]
    return next(stem + s + ext for s in suffixes if not os.path.exists(stem + s + ext))
