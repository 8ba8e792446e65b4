"""A stand-in for wandb, for the peers' scripts on the device machine (LeanRL's import wandb and call wandb.init and
wandb.log unconditionally; the device has no wandb and no network). Each call prints one line to stdout,
"gpu_check.wandb " and then JSON: {"config": ...} for init, {"step": ..., "log": {...}} for log, the values as floats
where they convert (tensors, numpy scalars), else as text. benchmark/gpu/gpu_check.py reads LeanRL's steps/s from them.
It imports neither torch nor numpy: a script sets its torch environment variables before importing them."""

import json
import sys

PREFIX = "gpu_check.wandb "


def _plain(value):
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def _emit(record):
    sys.stdout.write(PREFIX + json.dumps(record) + "\n")
    sys.stdout.flush()


class _Run:
    def log(self, data, step=None, **_):
        log(data, step=step)

    def finish(self, *_, **__):
        pass


def init(*_, config=None, **__):
    _emit({"config": {str(k): _plain(v) for k, v in dict(config or {}).items()}})
    return _Run()


def log(data, step=None, **_):
    _emit({"step": step, "log": {str(k): _plain(v) for k, v in data.items()}})


def finish(*_, **__):
    pass
