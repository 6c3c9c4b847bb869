"""Opcode handlers for control flow: jumps, loops, `with`, returns, function creation, raising."""

import contextlib

import torch

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.variables import (
    CellVar,
    ConstVar,
    FunctionVar,
    GradModeVar,
    IteratorVar,
    ObjectVar,
    TensorVar,
    VariableTracker,
    WithExitVar,
)


class ControlOps:
    """Mixin of the Tracer."""

    def op_JUMP(self, frame, ins):
        frame.ip = ins.target

    def _branch(self, frame, ins, jump_if: bool, pop_always: bool):
        value = frame.stack[-1]
        if isinstance(value, TensorVar):
            raise Unsupported("branching on a tensor value (data-dependent control flow)")
        taken = self.truth(value) == jump_if
        if pop_always or not taken:
            frame.pop()
        if taken:
            frame.ip = ins.target

    def op_POP_JUMP_IF_TRUE(self, frame, ins):
        self._branch(frame, ins, True, True)

    def op_POP_JUMP_IF_FALSE(self, frame, ins):
        self._branch(frame, ins, False, True)

    def op_JUMP_IF_TRUE_OR_POP(self, frame, ins):
        self._branch(frame, ins, True, False)

    def op_JUMP_IF_FALSE_OR_POP(self, frame, ins):
        self._branch(frame, ins, False, False)

    def op_POP_JUMP_IF_NONE(self, frame, ins):
        value = frame.pop()
        if isinstance(value, ConstVar) and value.value is None:
            frame.ip = ins.target

    def op_POP_JUMP_IF_NOT_NONE(self, frame, ins):
        value = frame.pop()
        if not (isinstance(value, ConstVar) and value.value is None):
            frame.ip = ins.target

    # ----------------------------------------------------------------- loops
    def op_GET_ITER(self, frame, ins):
        value = frame.pop()
        frame.push(value if isinstance(value, IteratorVar) else IteratorVar(self.sequence_items(value)))

    def op_FOR_ITER(self, frame, ins):
        iterator = frame.stack[-1]
        if not isinstance(iterator, IteratorVar):
            raise Unsupported(f"iterating over {iterator.describe()}")
        item = iterator.next()
        if item is None:
            frame.pop()
            frame.ip = ins.target
        else:
            frame.push(item)

    # ----------------------------------------------------------------- returns and generators
    def op_RETURN_VALUE(self, frame, ins):
        value = frame.pop()
        if frame.yields is not None:
            return IteratorVar(frame.yields)
        return value

    def op_RETURN_GENERATOR(self, frame, ins):
        if frame.yields is None:
            raise Unsupported("generator outside of capture's eager generator support")
        frame.push(ConstVar(None))

    def op_YIELD_VALUE(self, frame, ins):
        if frame.yields is None:
            raise Unsupported("yield in the compiled function itself (generators are not supported)")
        frame.yields.append(frame.pop())
        frame.push(ConstVar(None))

    # ----------------------------------------------------------------- with blocks
    def op_BEFORE_WITH(self, frame, ins):
        ctx = frame.pop()
        if isinstance(ctx, ConstVar) and type(ctx.value) in (torch.no_grad, torch.enable_grad):
            ctx = GradModeVar(type(ctx.value) is torch.enable_grad)
        entered = null_context_value(ctx)
        if entered is not None:  # `with nullcontext(v) as t`: t is v, and leaving changes nothing
            frame.push(WithExitVar(None))
            frame.push(entered)
            return
        if not isinstance(ctx, GradModeVar):
            raise Unsupported(
                f"context manager {ctx.describe()} is not supported (only grad-mode contexts and nullcontext)"
            )
        if ctx.previous is None:
            ctx.previous = self.grad_enabled
        self.set_grad_mode(ctx.enabled)
        frame.push(WithExitVar(ctx))
        frame.push(ConstVar(None))

    # ----------------------------------------------------------------- functions
    def op_MAKE_FUNCTION(self, frame, ins):
        code = frame.pop().value
        flags = ins.arg or 0  # 3.13: no operand; SET_FUNCTION_ATTRIBUTE adds the parts
        closure = frame.pop().items if flags & 0x08 else ()
        if flags & 0x04:
            frame.pop()  # annotations do not change behaviour
        kwdefaults = frame.pop().items if flags & 0x02 else {}
        defaults = frame.pop().items if flags & 0x01 else ()
        if not all(isinstance(c, CellVar) for c in closure):
            raise Unsupported("closure of a nested function is not made of cells")
        frame.push(FunctionVar(code, frame.globals, frame.globals_source, defaults, kwdefaults, closure))

    # ----------------------------------------------------------------- raising
    def op_LOAD_ASSERTION_ERROR(self, frame, ins):
        frame.push(ConstVar(AssertionError))

    def op_RAISE_VARARGS(self, frame, ins):
        raise Unsupported("raising an exception (the function runs eagerly from here)")

    def op_RERAISE(self, frame, ins):
        raise Unsupported("re-raising an exception")

    def op_SETUP_ANNOTATIONS(self, frame, ins):
        raise Unsupported("annotations in a function body")

    def op_GET_LEN(self, frame, ins):
        frame.push(ConstVar(len(self.sequence_items(frame.stack[-1]))))

    def op_CHECK_EXC_MATCH(self, frame, ins):
        raise Unsupported("exception handling (except clauses) is not captured")

    def op_PUSH_EXC_INFO(self, frame, ins):
        raise Unsupported("exception handling (except clauses) is not captured")

    # ----------------------------------------------------------------- imports inside functions
    def op_IMPORT_NAME(self, frame, ins):
        fromlist = self.as_python(frame.pop())
        level = self.as_python(frame.pop())
        try:  # importing is idempotent once done, so doing it at capture time is what eager would see
            module = __import__(ins.argval, frame.globals, None, fromlist, level)
        except ImportError as e:
            raise Unsupported(f"import of {ins.argval!r} failed: {e}") from e
        frame.push(ConstVar(module))

    def op_IMPORT_FROM(self, frame, ins):
        module = frame.stack[-1]
        try:
            frame.push(self.wrap_unguarded(getattr(module.value, ins.argval)))
        except AttributeError as e:
            raise Unsupported(f"cannot import name {ins.argval!r}: {e}") from e


def null_context_value(ctx) -> VariableTracker | None:
    """What `with ctx as t` binds to `t` when `ctx` is a `contextlib.nullcontext` (made inside the
    captured code or passed in with a constant `enter_result`), else None. Such a block runs its
    body unchanged: transformers returns one from `maybe_autocast` where autocast is off."""
    if isinstance(ctx, ObjectVar) and ctx.cls is contextlib.nullcontext:
        return ctx.attrs.get("enter_result", ConstVar(None))
    if isinstance(ctx, ConstVar) and type(ctx.value) is contextlib.nullcontext:
        result = ctx.value.enter_result
        if result is None or isinstance(result, (bool, int, float, str)):
            return ConstVar(result)
    return None
