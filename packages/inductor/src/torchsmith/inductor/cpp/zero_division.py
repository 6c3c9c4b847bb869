"""The run-time check of integer division and modulo by zero in generated C++.

An integer `div`, `remainder` or `fmod` goes through cpp_prelude's `ts::int_div` / `ts::int_mod`,
which record a zero divisor in the library's flag and divide by 1 instead, so the kernel never
traps (x86's idiv raises SIGFPE, and GCC may compile a constant zero divisor to a trap). After a
call's kernels the wrapper calls the check `zero_division_check(library, program)` returns, which
raises what eager PyTorch raises: `RuntimeError("ZeroDivisionError")`, with a note naming the nodes.
"""

import ctypes

import torch

from torchsmith.inductor.loop_ir.program import ComputedBuffer, Indirect, Op

DIVIDING_OPS = ("div", "remainder", "fmod")


def _integer(dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def integer_division_origins(program) -> list[str]:
    """The origins (IR node and source line) of the computed buffers of `program` that divide
    integers: where a zero divisor can occur."""

    def divides(expr) -> bool:
        if isinstance(expr, Op):
            if expr.op in DIVIDING_OPS and _integer(expr.args[-1].dtype):
                return True
            return any(divides(a) for a in expr.args)
        if isinstance(expr, Indirect):
            return divides(expr.value) or divides(expr.body)
        return False

    return [
        b.origin or b.name for b in program.buffers if isinstance(b, ComputedBuffer) and divides(b.body.value)
    ]


def zero_division_error(origins: list[str]) -> RuntimeError:
    """Eager PyTorch's error for an integer division by zero, with a note naming the compiled nodes."""
    error = RuntimeError("ZeroDivisionError")
    shown = "; ".join(origins[:3]) + (f"; and {len(origins) - 3} more" if len(origins) > 3 else "")
    error.add_note(f"raised by the compiled kernel of an integer division or modulo: {shown}")
    return error


def zero_division_check(library, program):
    """A function taking the zero-division flag of `library` (clearing it) and returning
    `zero_division_error` if a kernel divided an integer by zero since the last call, else None;
    None itself when `program` divides no integers, so graphs without integer division pay nothing
    per call."""
    origins = integer_division_origins(program)
    take = getattr(library, "ts_take_zero_division", None) if origins else None
    if take is None:
        return None
    take.restype = ctypes.c_int32
    take.argtypes = []

    def check() -> RuntimeError | None:
        return zero_division_error(origins) if take() else None

    return check
