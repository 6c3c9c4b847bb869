"""The capture check: capture's graphs against the original program run eagerly.

After the first call of a compiled function (or module) with `options={"check": True}`, the original
Python program runs once more, eagerly, on copies of the arguments taken before the call (and of the
module, so buffers such as batch-norm statistics are updated once), from the same random state. Its
outputs and mutated arguments are compared with the compiled call's. The graph checks
(graph_check.py) already ran inside the compiled call and fell back where a later stage disagreed,
so a difference left here is capture's: the call's result is then the eager program's (arguments
and module state put back first), and the function runs eagerly from then on.

Running a program twice must not repeat what it does outside its arguments, so the eager run only
happens when the code capture generated for the call has no Python side effects (no global, closure
cell, attribute or container write replayed, no graph break running native code) and no graph
draws random numbers; otherwise the check says why in the `torchsmith.accuracy` log. Later calls are
not compared with eager: which calls compile new graphs is only known after they ran.
"""

import copy
import logging
import warnings

import numpy as np
import torch
from torch.utils._pytree import tree_leaves

from torchsmith.accuracy.compare import SKIP, clone_input, first_difference
from torchsmith.accuracy.graph_check import random_op
from torchsmith.accuracy.localize import Culprit
from torchsmith.accuracy.repro_folder import write_repro
from torchsmith.errors import AccuracyWarning

log = logging.getLogger("torchsmith.accuracy")


def _copy_arguments(args, kwargs):
    """Deep copies of the arguments (containers, modules, objects); tensors keep their strides and
    requires_grad, and a tensor met twice is copied once."""
    memo: dict = {}
    for leaf in tree_leaves((list(args), dict(kwargs))):
        if isinstance(leaf, torch.Tensor):
            memo[id(leaf)] = clone_input(leaf)
    return copy.deepcopy(list(args), memo), copy.deepcopy(dict(kwargs), memo)


# Lines of capture's generated code that only call the graph and return: anything else replays a
# Python side effect or runs native code after a graph break.
_PURE_LINES = ("def run(", "__in = ", "__outs = __graph(", "return ")


def side_effect_of(records) -> str | None:
    """Why the code capture generated for these records is not pure (None when it is)."""
    for record in records:
        if record.graph is None or record.break_reason is not None:
            reason = record.break_reason.reason if record.break_reason is not None else "it ran eagerly"
            return f"{record.code_name} has a graph break ({reason})"
        for line in (record.source or "").splitlines():
            text = line.strip()
            if text and (not text.startswith(_PURE_LINES) or "__resume(" in text):
                return f"{record.code_name} replays a Python side effect ({text})"
    return None


_SCALARS = (int, float, bool, complex, str, type(None))


def _comparable(leaf):
    """A leaf as a value to compare (tensors detached, NumPy arrays as tensors), or `SKIP` for
    objects whose equality says nothing (functions, instances compared by identity)."""
    if isinstance(leaf, torch.Tensor):
        return leaf.detach()
    if isinstance(leaf, np.ndarray):
        return torch.from_numpy(leaf.copy())
    if isinstance(leaf, np.generic):
        return leaf.item()
    return leaf if isinstance(leaf, _SCALARS) else SKIP


def _flat(args, kwargs, result) -> tuple[list, list[str]]:
    """The call's comparable values: output leaves, then tensors of the arguments (and of a module's
    state) that do not require grad, as they are after the call."""
    values, names = [], []
    for i, leaf in enumerate(tree_leaves(result)):
        values.append(_comparable(leaf))
        names.append(f"output {i}")
    for i, a in enumerate(list(args) + list(kwargs.values())):
        tensors = list(a.state_dict().values()) if isinstance(a, torch.nn.Module) else tree_leaves(a)
        for j, t in enumerate(tensors):
            if isinstance(t, torch.Tensor) and not t.requires_grad:
                values.append(t.detach())
                names.append(f"tensor {j} of argument {i} after the call")
    return values, names


class CheckedCall:
    """Wraps a captured function (`captured._fn` is the original) with the capture check on its first call."""

    def __init__(self, captured, function_name: str, options: dict, guarded):
        self.captured, self.eager = captured, captured._fn
        self.function_name, self.options, self.guarded = function_name, options, guarded
        self.checked = False
        self.eager_only = False

    def __call__(self, *args, **kwargs):
        if self.eager_only:
            return self.eager(*args, **kwargs)
        if self.checked:
            return self.captured(*args, **kwargs)
        self.checked = True
        try:
            restore = _copy_arguments(args, kwargs)
            baseline = _copy_arguments(args, kwargs)
        except Exception as e:  # noqa: BLE001 - arguments that cannot be copied: no eager twin
            log.info(
                "capture check of %s skipped: its arguments cannot be copied (%s)", self.function_name, e
            )
            return self.captured(*args, **kwargs)
        rng_before = torch.get_rng_state()
        records = len(self.captured.session.records)
        self.guarded.checked_graphs = []
        try:
            result = self.captured(*args, **kwargs)
        finally:
            graphs, self.guarded.checked_graphs = self.guarded.checked_graphs, None
        records = self.captured.session.records[records:]
        why_not = side_effect_of(records) or next(
            (f"{op} draws random numbers" for g, _ in graphs if (op := random_op(g))), None
        )
        if not records:
            why_not = "the call captured nothing new"
        if why_not is not None:
            log.info("capture check of %s skipped: %s", self.function_name, why_not)
            return result
        try:
            difference, expected = self._compare(args, kwargs, result, baseline, rng_before)
        except Exception as e:  # noqa: BLE001 - the check must not change what the call returns
            log.warning("capture check of %s failed: %s: %s", self.function_name, type(e).__name__, e)
            return result
        if difference is None:
            return result
        self._report(difference, graphs, expected)
        self.eager_only = True
        _restore(args, kwargs, *restore)
        torch.set_rng_state(rng_before)
        return self.eager(*args, **kwargs)

    def _compare(self, args, kwargs, result, baseline, rng_before):
        """(difference or None, the eager outputs) of the eager program on `baseline` vs this call."""
        eager_args, eager_kwargs = baseline
        rng_after = torch.get_rng_state()
        torch.set_rng_state(rng_before)
        try:
            expected = self.eager(*eager_args, **eager_kwargs)
        finally:
            torch.set_rng_state(rng_after)
        want, names = _flat(eager_args, eager_kwargs, expected)
        got, _ = _flat(args, kwargs, result)
        outputs = len(tree_leaves(expected))
        return first_difference(want, got, names), want[:outputs]

    def _report(self, difference, graphs, expected) -> None:
        folder = "(no graph was captured)"
        if graphs:
            graph, inputs = graphs[0]
            culprit = Culprit("capture", "torch", graph, inputs, difference)
            try:
                path = write_repro(culprit, self.function_name, self.options)
                torch.save([e for e in expected if isinstance(e, torch.Tensor)], path / "expected.pt")
                folder = str(path)
            except Exception as e:  # noqa: BLE001 - the warning still names the stage
                folder = f"(not written: {type(e).__name__}: {e})"
        from torchsmith.fallback import _user_stacklevel

        warnings.warn(
            "torchsmith accuracy check: stage capture disagrees with the eager program "
            f"{self.function_name}: "
            f"{difference.describe()} ({len(graphs)} graph(s) captured in the call).\n"
            f"  repro folder: {folder}\n"
            f"  {self.function_name} runs eagerly from now on.",
            AccuracyWarning,
            stacklevel=_user_stacklevel(),
        )


def _restore(args, kwargs, saved_args, saved_kwargs) -> None:
    """Put the tensors of the arguments (and a module's state) back as they were before the call."""
    with torch.no_grad():
        for now, before in zip(
            list(args) + list(kwargs.values()), list(saved_args) + list(saved_kwargs.values())
        ):
            if isinstance(now, torch.nn.Module):
                pairs = zip(
                    now.state_dict(keep_vars=True).values(), before.state_dict(keep_vars=True).values()
                )
            else:
                pairs = zip(tree_leaves(now), tree_leaves(before))
            for t, b in pairs:
                if isinstance(t, torch.Tensor) and isinstance(b, torch.Tensor) and t.shape == b.shape:
                    t.data.copy_(b.data)


def with_capture_check(result, function_name: str, options: dict, guarded):
    """`result` (what capture returned) with `CheckedCall` on its captured function, where it has one."""
    from torchsmith.capture.api import CapturedFunction, CapturedModule

    if isinstance(result, CapturedModule):
        forward = result.__dict__.get("_forward")
        if isinstance(forward, CapturedFunction):
            object.__setattr__(result, "_forward", CheckedCall(forward, function_name, options, guarded))
        else:
            log.info("capture check of %s skipped: its forward is not a plain function", function_name)
        return result
    if isinstance(result, CapturedFunction):
        checked = CheckedCall(result, function_name, options, guarded)
        wrapper = lambda *args, **kwargs: checked(*args, **kwargs)  # noqa: E731
        wrapper.__wrapped__ = result
        wrapper.__name__ = getattr(result, "__name__", function_name)
        wrapper.session = result.session
        return wrapper
    log.info(
        "capture check of %s skipped: %s is not a captured function", function_name, type(result).__name__
    )
    return result
