"""What the tests of the two Gym-μRTS scripts (ppo_multidiscrete.py, ppo_multidiscrete_mask.py) share: the mark of a
test that runs the Java simulator, the env's action and observation shapes, and a policy head of fixed logits."""

import pytest
import torch.nn as nn
from tiny import microrts_missing


def needs_microrts(test):
    """Runs the test in a forked child (pytest-forked): the JVM it starts cannot be stopped and restarted
    in one process, and a test worker hosting one crashes when a later test creates procgen envs."""
    return microrts_missing(pytest.mark.forked(test))


NVEC = [100, 6, 4, 4, 4, 4, 7, 100]  # source cell, action type, 4 directions, unit type, attack target cell
OBS = (10, 10, 27)  # the 10x10 map's 27 feature planes: hp 5, resources 5, owner 3, unit type 8, current action 6


class FixedLogits(nn.Module):
    """A policy head that ignores its input and returns `logits` (a parameter, to read its gradient)."""

    def __init__(self, logits):
        super().__init__()
        self.logits = nn.Parameter(logits)

    def forward(self, hidden):
        return self.logits
