"""The capture check: capture's graphs against the original program run eagerly.

The first call of a compiled function (or module) with `options={"check": True}` also runs the
original Python program eagerly, on copies of the arguments (and of the module, so buffers such as
batch-norm statistics are updated once), from the same random state. Its outputs and mutated
arguments are compared with the compiled call's. The graph checks (graph_check.py) already ran
inside the compiled call and fell back where a later stage disagreed, so a difference left here is
capture's. Then the call's result is the eager program's, and the function runs eagerly from then on.
Later calls are not compared with eager: which calls compile new graphs is only known after they ran.
"""

import copy
import logging
import warnings

import torch
from torch.utils._pytree import tree_leaves

from torchsmith.accuracy.compare import clone_input, first_difference
from torchsmith.accuracy.graph_check import random_op
from torchsmith.accuracy.localize import Culprit
from torchsmith.accuracy.repro_folder import write_repro
from torchsmith.errors import AccuracyWarning

log = logging.getLogger("torchsmith.accuracy")


def _copy_arguments(args, kwargs):
    """Copies of every tensor argument (same strides, same requires_grad) and of an `nn.Module`
    passed first (`self` of a forward)."""

    def copy_one(x):
        if isinstance(x, torch.nn.Module):
            return copy.deepcopy(x)
        return clone_input(x) if isinstance(x, torch.Tensor) else x

    return [copy_one(a) for a in args], {k: copy_one(v) for k, v in kwargs.items()}


def _flat(args, kwargs, result) -> tuple[list, list[str]]:
    values, names = [], []
    for i, leaf in enumerate(tree_leaves(result)):
        values.append(leaf.detach() if isinstance(leaf, torch.Tensor) else leaf)
        names.append(f"output {i}")
    for i, a in enumerate(list(args) + list(kwargs.values())):
        tensors = list(a.state_dict().values()) if isinstance(a, torch.nn.Module) else [a]
        for j, t in enumerate(tensors):
            if isinstance(t, torch.Tensor) and not t.requires_grad:
                values.append(t.detach())
                names.append(
                    f"argument {i} after the call" if len(tensors) == 1 else f"state {j} of argument {i}"
                )
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
            restore_args, restore_kwargs = _copy_arguments(args, kwargs)
            eager_args, eager_kwargs = _copy_arguments(args, kwargs)
            rng = torch.get_rng_state()
            expected = self.eager(*eager_args, **eager_kwargs)
            torch.set_rng_state(rng)
        except Exception as e:  # noqa: BLE001 - the program's own error shows in the compiled call
            log.info(
                "capture check of %s skipped: the eager run raised %s: %s",
                self.function_name,
                type(e).__name__,
                e,
            )
            return self.captured(*args, **kwargs)
        first_graph = len(self.guarded.checked_graphs)
        result = self.captured(*args, **kwargs)
        graphs = self.guarded.checked_graphs[first_graph:]
        random = next((op for g, _ in graphs if (op := random_op(g))), None)
        if random is not None:
            log.info("capture check of %s skipped: %s draws random numbers", self.function_name, random)
            return result
        want, names = _flat(eager_args, eager_kwargs, expected)
        got, _ = _flat(args, kwargs, result)
        difference = first_difference(want, got, names)
        if difference is None:
            return result
        outputs = len(tree_leaves(expected))
        self._report(difference, graphs, want[:outputs])
        self.eager_only = True
        _restore(args, kwargs, restore_args, restore_kwargs)
        return self.eager(*args, **kwargs)

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
    """Put the arguments (and a module's state) back as they were before the compiled call."""
    with torch.no_grad():
        for now, before in zip(
            list(args) + list(kwargs.values()), list(saved_args) + list(saved_kwargs.values())
        ):
            if isinstance(now, torch.nn.Module):
                for (_, t), (_, b) in zip(
                    now.state_dict(keep_vars=True).items(), before.state_dict(keep_vars=True).items()
                ):
                    t.data.copy_(b.data)
            elif isinstance(now, torch.Tensor) and not now.requires_grad:
                now.copy_(before)


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
