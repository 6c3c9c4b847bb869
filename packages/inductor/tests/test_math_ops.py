"""Every math function of the op table has its spelling in each code generator, derived from its one
entry (loop_ir/math_ops.py), and its interpreter stand-in computes what eager computes."""

import pytest
import torch

from torchsmith.inductor.cpp.expr import LIBM_UNARY
from torchsmith.inductor.cpp.vector_math import UNARY as LIBM_DECLARED
from torchsmith.inductor.loop_ir.index_math import EXPENSIVE_OPS
from torchsmith.inductor.loop_ir.math_ops import BINARY_MATH, UNARY_MATH, libdevice_functions
from torchsmith.prims.elementwise import BINARY, UNARY


@pytest.mark.parametrize("op", UNARY_MATH, ids=lambda op: op.name)
def test_unary_spellings_come_from_the_table(op):
    pytest.importorskip("triton")
    from torchsmith.inductor.triton.ops import UNARY_FLOAT

    assert op.name in UNARY, f"{op.name} is not a prim"
    assert LIBM_UNARY[op.name] == op.c and op.c in LIBM_DECLARED
    assert UNARY_FLOAT[op.name] == f"{op.triton}({{0}})"
    assert (op.name in EXPENSIVE_OPS) == op.expensive


@pytest.mark.parametrize("op", BINARY_MATH, ids=lambda op: op.name)
def test_binary_spellings_come_from_the_table(op):
    pytest.importorskip("triton")
    from torchsmith.inductor.triton.ops import BINARY_FLOAT

    assert op.name in BINARY
    assert BINARY_FLOAT[op.name] == f"{op.triton}({{0}}, {{1}})"


def test_interpreter_stand_ins_match_eager():
    x = torch.linspace(0.1, 0.9, 9, dtype=torch.float64)
    for name, (arity, fn) in libdevice_functions().items():
        op = next(o for o in (*UNARY_MATH, *BINARY_MATH) if o.triton == f"libdevice.{name}")
        eager = getattr(torch, op.name)
        args = (x,) if arity == 1 else (x, x.flip(0))
        expected = eager(*args)
        torch.testing.assert_close(torch.from_numpy(fn(*(a.numpy() for a in args))), expected, equal_nan=True)
