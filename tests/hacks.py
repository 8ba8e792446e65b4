"""Hack-safety checks shared by every script's tests (issue 19): the edits a researcher makes to a copied file
the way CleanRL users do must either work or fail loudly.

  (a) the update written CleanRL's way (zero_grad(), backward(), nn.utils.clip_grad_norm_(agent.parameters()),
      step()) trains: the parameters move. Most scripts' step already is those four lines (comments aside), so
      there (a) holds it to them; a2c_paac.py's and ppo_continuous_action.py's own step is replaced;
  (b) a temperature in the policy head changes what the rollout samples, and the update scores the same policy
      (the first minibatch's ratio stays 1);
  (c) one added layer (a LayerNorm in front of the policy head) trains with no other edit;
  (d) the critic put in a param group of its own at another learning rate (issue 35): --anneal-lr anneals every group
      from its own initial rate by the same fraction.

(a)-(c) take the script's module, Args for a short run, and the name of the policy head attribute of its Agent; (d) the
module and Args (its run anneals, whatever the script's default). With --compile in the Args (issue 53) they check the
compiled script, inside traced_by_dynamo (tests/test_compile.py). tests/test_every_script.py runs them over the scripts.
"""

import contextlib
import dataclasses
import os
import re

import numpy as np
import pytest
import torch
import torch.nn as nn
from conftest import import_copy
from torch.optim.optimizer import register_optimizer_step_pre_hook

CLEANRL_STEP = (
    "optimizer.zero_grad()\n{i}loss.backward()\n"
    "{i}nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)\n{i}optimizer.step()"
)


def cleanrl_edited_copy(mod, tmp_path):
    """A copy of the script whose update step is replaced, textually, by CleanRL's four lines; imported."""
    source = open(mod.__file__).read()
    block = re.compile(r"optimizer\.zero_grad\(.*?\).*\n(\s*)(.*\n\s*)*?\s*optimizer\.step\(\)")
    match = block.search(source)
    assert match, f"{mod.__name__}: no zero_grad ... step block to replace"
    edited = source[: match.start()] + CLEANRL_STEP.format(i=match.group(1)) + source[match.end() :]
    return import_copy(edited, tmp_path / f"edited_{mod.__name__}.py")


def initial_parameters(mod, monkeypatch):
    """Make mod.Agent record a copy of its parameters when built; returns the list they are appended to."""
    kept = []

    class Recorded(mod.Agent):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            kept.append({n: p.detach().clone() for n, p in self.named_parameters()})

    monkeypatch.setattr(mod, "Agent", Recorded)
    return kept


def assert_cleanrl_update_trains(mod, args, tmp_path, monkeypatch):
    """(a): in a copy whose update step is CleanRL's, every parameter tensor of the agent moves in training."""
    copy = cleanrl_edited_copy(mod, tmp_path)
    kept = initial_parameters(copy, monkeypatch)
    out = copy.train(args)
    moved = {n: (p.detach().cpu() - kept[0][n].cpu()).abs().max().item() for n, p in out["agent"].named_parameters()}
    assert min(moved.values()) > 0, f"parameters that did not move: {[n for n, d in moved.items() if d == 0]}"
    return out


def head_of(agent, head):
    """The Linear layer that makes the policy's outputs: `head` itself or the last Linear inside it."""
    module = getattr(agent, head)
    return module if isinstance(module, nn.Linear) else [m for m in module.modules() if isinstance(m, nn.Linear)][-1]


class Scale(nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


def edited_agent(mod, monkeypatch, head, edit, bias=None):
    """Make mod.Agent apply `edit(agent)` after building (and, with `bias`, first fix the policy head to a
    constant output); every action sampled with gradients off (the rollout) is recorded in the returned list."""
    sampled = []

    class Edited(mod.Agent):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            if bias is not None:
                with torch.no_grad():
                    head_of(self, head).weight.zero_()
                    head_of(self, head).bias.copy_(torch.as_tensor(bias))
            edit(self)

        def get_action_and_value(self, *a, **k):
            out = super().get_action_and_value(*a, **k)
            if not torch.is_grad_enabled() and not any(out[0] is x for x in (*a, *k.values())):  # sampled, not scored
                sampled.append(out[0].detach().cpu())
            return out

    monkeypatch.setattr(mod, "Agent", Edited)
    return sampled


def assert_temperature_changes_rollout(mod, args, monkeypatch, head="actor", logits=(0.0, 1.0), temperature=0.25):
    """(b) for a Categorical head: fix the head's logits, divide them by a temperature in the policy head; the
    rollout's actions follow softmax(logits / temperature), not softmax(logits), and the first ratio is 1."""
    sampled = edited_agent(
        mod,
        monkeypatch,
        head,
        lambda agent: setattr(agent, head, nn.Sequential(getattr(agent, head), Scale(1 / temperature))),
        bias=logits,
    )
    out = mod.train(args)
    actions = torch.cat([a.reshape(-1) for a in sampled]).long()
    assert len(actions) >= 500, "the rollout did not sample through Agent.get_action_and_value"
    freq = torch.bincount(actions, minlength=len(logits)).double() / len(actions)
    edited, unedited = ((torch.tensor(logits, dtype=torch.float64) / t).softmax(-1) for t in (temperature, 1.0))
    tol = 4 / np.sqrt(len(actions))
    assert (freq - edited).abs().max() < tol and (freq - unedited).abs().max() > 2 * tol, (freq, edited, unedited)
    assert len(out["first_minibatch"]) == len(out["losses"]) > 0  # one an iteration
    assert all(f["ratio_max_dev"] < 1e-5 for f in out["first_minibatch"])
    return out


def assert_added_layer_trains(mod, args, monkeypatch, head="actor"):
    """(c): a LayerNorm added in front of the policy head trains (its weights move) and the rollout and update
    still agree (the first minibatch's ratio is 1)."""

    def add_layer_norm(agent):
        width = (
            head_of(agent, head).in_features
            if isinstance(getattr(agent, head), nn.Linear)
            else [m for m in getattr(agent, head).modules() if isinstance(m, nn.Linear)][0].in_features
        )
        setattr(agent, head, nn.Sequential(nn.LayerNorm(width), getattr(agent, head)))

    edited_agent(mod, monkeypatch, head, add_layer_norm)
    out = mod.train(args)
    norm = getattr(out["agent"], head)[0]
    assert isinstance(norm, nn.LayerNorm) and (norm.weight - 1).abs().max().item() > 0
    assert len(out["first_minibatch"]) == len(out["losses"]) > 0  # one an iteration
    assert all(f["ratio_max_dev"] < 1e-5 for f in out["first_minibatch"])
    return out


@contextlib.contextmanager
def traced_by_dynamo():
    """Inside: torch.compile traces as --compile does (dynamo, from the code as it is at the first call: whether an edit
    is compiled is decided there), then runs each traced graph as it is, not built by inductor (C++: 38-110 s a script
    cold on 2 busy cores); yields the list of the graphs' code."""
    graphs, real = [], torch.compile

    def keep(graph, example_inputs):
        graphs.append(graph.code)
        return graph.forward

    torch._dynamo.reset()  # no graph traced before (another edit's) is reused
    torch.compile = lambda fn, **options: real(fn, backend=keep)
    try:
        yield graphs
    finally:
        torch.compile = real
        torch._dynamo.reset()


CRITIC_LR = 1e-3  # (d): the critic's own rate, unlike every script's default
# a researcher's two groups, written into the optimizer's construction: the critic's parameters, and all the others
CRITIC_GROUP = (
    '[{"params": [p for name, p in agent.named_parameters() if not name.startswith("critic.")]}, '
    '{"params": agent.critic.parameters(), "lr": %r}]' % CRITIC_LR
)


def critic_group_copy(mod, tmp_path):
    """A copy of the script whose optimizer holds the critic in its own param group at CRITIC_LR, the rest at the
    script's rate (torch.optim.Adam([{"params": actor}, {"params": critic, "lr": 1e-3}], ...)); imported."""
    source = open(mod.__file__).read()
    made = re.compile(r"(optimizer = [\w.]+\(\s*)agent\.parameters\(\)")
    assert len(made.findall(source)) == 1, f"{mod.__name__}: not one `optimizer = ...(agent.parameters()` to edit"
    return import_copy(made.sub(lambda m: m.group(1) + CRITIC_GROUP, source), tmp_path / f"groups_{mod.__name__}.py")


@contextlib.contextmanager
def recorded_rates():
    """Inside: the learning rate of every param group at each optimizer step, one list per step."""
    rates = []
    hook = register_optimizer_step_pre_hook(
        lambda optimizer, *_: rates.append([group["lr"] for group in optimizer.param_groups])
    )
    try:
        yield rates
    finally:
        hook.remove()


def assert_every_group_annealed(rates, logged):
    """(d) on the rates of every step of a run (recorded_rates) and the rates it logged (its history's): two groups,
    the critic's starting at CRITIC_LR and the other at the logged rate, and at every step the critic's rate the same
    fraction of CRITIC_LR as the other's of its own; the rates the steps used are the schedule's, annealed."""
    assert rates and {len(r) for r in rates} == {2}, "the optimizer did not step with two param groups"
    (first, first_critic), others = rates[0], [r[0] for r in rates]
    assert first == logged[0] != CRITIC_LR and first_critic == CRITIC_LR
    np.testing.assert_allclose(
        [r[1] for r in rates],
        [CRITIC_LR * r / first for r in others],
        rtol=1e-12,
        atol=0,
        err_msg="the critic's group is not annealed by the other group's fraction",
    )
    assert sorted(set(others)) == sorted(set(logged)) and len(set(logged)) > 1  # annealed, as logged


def assert_every_param_group_anneals(mod, args, tmp_path):
    """(d): in a copy whose optimizer holds the critic in its own param group, --anneal-lr (on for the run) anneals
    both groups, each from its own initial rate."""
    copy = critic_group_copy(mod, tmp_path)
    with recorded_rates() as rates:
        out = copy.train(dataclasses.replace(args, anneal_lr=True))
    assert_every_group_annealed(rates, out["learning_rate"])
    # issue 71: each group's rate reaches TensorBoard, one tag a group (group 0's the tag CleanRL logs)
    logged = {tag: logged_scalars(out["run_dir"], tag) for tag in ("charts/learning_rate", "charts/learning_rate_group1")}
    assert logged["charts/learning_rate"] == pytest.approx(out["learning_rate"], rel=1e-6)
    assert logged["charts/learning_rate_group1"] == pytest.approx(
        [CRITIC_LR * r / out["learning_rate"][0] for r in out["learning_rate"]], rel=1e-6
    )
    return out


def logged_scalars(run_dir, tag):
    """The values a run logged under `tag` to TensorBoard, in order (None if it logged no such tag)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    events.Reload()
    return [e.value for e in events.Scalars(tag)] if tag in events.Tags()["scalars"] else None


# ---- issue 71: a copy of a file and an edited constructor, with no silent trap --------------------------------------


def copy_args(copy, args, **changes):
    """`args` (an Args of the original module) as the copy's own Args, with the copy's default experiment name."""
    return copy.Args(**{**dataclasses.asdict(args), "exp_name": copy.Args().exp_name, **changes})


def assert_copy_runs_as_itself(mod, args, tmp_path, capsys):
    """An unmodified copy of the file under another name (cp ppo.py my_ppo.py) runs as itself: its run directory and
    checkpoint carry the copy's name, the original refuses the copy's checkpoint and the copy the original's, each in
    one line naming the file that wrote it; and where the script has interrupted(), a stop prints the copy's resume
    command."""
    name = f"my_{mod.__name__}"
    copy = import_copy(open(mod.__file__).read(), tmp_path / f"{name}.py")
    assert copy.SCRIPT == f"{name}.py" and copy.Args().exp_name == name
    out = copy.train(copy_args(copy, args, save_model=True))
    assert f"__{name}__" in os.path.basename(out["run_dir"]) and out["run_name"] == os.path.basename(out["run_dir"])
    checkpoint = out["checkpoint"]
    assert torch.load(checkpoint, weights_only=False)["script"] == f"{name}.py"
    with pytest.raises(mod.ConfigError, match=rf"written by {name}\.py, not by {mod.__name__}\.py; read it with {name}\.py"):
        mod.load_checkpoint(checkpoint)
    original = mod.train(dataclasses.replace(args, save_model=True))["checkpoint"]
    with pytest.raises(copy.ConfigError, match=rf"written by {mod.__name__}\.py, not by {name}\.py"):
        copy.evaluate(original, eval_episodes=1)
    if hasattr(copy, "interrupted") and mod.__name__ != "impala_vtrace":  # IMPALA's also stops its actors

        def stop(*a, **k):  # Ctrl-C during the second iteration, after the first one's checkpoint
            raise KeyboardInterrupt

        resumed = copy_args(copy, args, save_model=True, save_every=1)
        resumed.total_timesteps = 2 * args.total_timesteps
        with pytest.MonkeyPatch.context() as m:
            m.setattr(copy, "check_finite", lambda iteration, *a: stop() if iteration == 2 else None)
            try:
                copy.train(resumed)
            except KeyboardInterrupt as e:
                assert copy.interrupted(e) == 130
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert line.startswith(f"{name}.py: interrupted; the last checkpoint is ")
        assert re.search(rf"continue with: (python|torchrun \.\.\.) {name}\.py --resume ", line), line


def assert_new_constructor_argument_evaluates_and_resumes(mod, args):
    """An Agent whose construction was edited (a new argument, say from a new flag, giving it another layer) trains,
    evaluates and resumes with no second edit: train(), evaluate() and a resume all build it through make_agent()."""
    stock = mod.make_agent

    def make_agent(run_args, observation_space, action_space):  # what an edited constructor would make
        agent = stock(run_args, observation_space, action_space)
        agent.register_buffer("extra", torch.arange(21.0).view(3, 7))  # a state the stock Agent lacks, to load too
        return agent

    with pytest.MonkeyPatch.context() as m:
        m.setattr(mod, "make_agent", make_agent)
        out = mod.train(dataclasses.replace(args, save_model=True))
        assert "extra" in torch.load(out["checkpoint"], weights_only=False)["model"]
        assert len(mod.evaluate(out["checkpoint"], eval_episodes=1)) == 1
        more = dataclasses.replace(args, resume=out["checkpoint"], total_timesteps=2 * args.total_timesteps)
        resumed = mod.train(more)
        assert resumed["global_step"] > out["global_step"] and hasattr(resumed["agent"], "extra")
