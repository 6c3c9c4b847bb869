"""Every elementwise prim has a form in every code generator for every real dtype it accepts: the C++
expression (which g++ vectorizes as written, libm calls through libmvec's declarations), the Triton
expression, and the interpreter's stand-in for each libdevice function that expression calls. The
forms come from the op families (loop_ir/elementwise_ops.py, loop_ir/math_ops.py), so a new prim
without an entry there fails here, naming what is missing. Complex dtypes are refused by each
backend as a whole, before code generation. No compiler runs: the forms are printed only."""

import re

import pytest
import torch

from torchsmith.inductor.cpp.expr import cpp_op
from torchsmith.inductor.cpp.vector_math import BINARY as LIBM_BINARY
from torchsmith.inductor.cpp.vector_math import UNARY as LIBM_UNARY
from torchsmith.inductor.errors import CodegenError
from torchsmith.inductor.loop_ir.elementwise_ops import OPERATORS, spelled_ops
from torchsmith.inductor.loop_ir.math_ops import BINARY_MATH, UNARY_MATH
from torchsmith.inductor.loop_ir.program import Load, Op
from torchsmith.prims.core import DTYPE_CLASSES, dtype_category
from torchsmith.prims.elementwise import BINARY, UNARY

REAL_DTYPES = (
    torch.float32, torch.float64, torch.float16, torch.bfloat16,
    torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
)  # fmt: skip

# (op, dtype category, generator) with no form: Triton has no integer pow (C++ computes it by
# repeated squaring, cpp/prelude.py's ts::pow). Code generation raises CodegenError naming the op
# and dtype, so such a graph is not compiled for the GPU (compile_api runs it eagerly, warning why).
NO_FORM = {("pow", "int", "Triton")}


def _prim_signatures():
    """(name, arity, accepted dtype categories) of every elementwise prim, with where and convert."""
    for name, (accepts, *_) in UNARY.items():
        yield name, 1, DTYPE_CLASSES[accepts]
    for name, (accepts, *_) in BINARY.items():
        yield name, 2, DTYPE_CLASSES[accepts]
    yield "where", 3, DTYPE_CLASSES["any"]
    yield "convert", 1, DTYPE_CLASSES["any"]


def _op(name: str, arity: int, dtype: torch.dtype, out: torch.dtype) -> Op:
    args = tuple(Load(f"b{i}", 0, torch.bool if name == "where" and i == 0 else dtype) for i in range(arity))
    return Op(name, args, out)


def _generators():
    pytest.importorskip("triton")
    from torchsmith.inductor.triton.interpret import libdevice
    from torchsmith.inductor.triton.ops import triton_op

    return (("C++", cpp_op), ("Triton", triton_op)), libdevice


def test_every_elementwise_prim_is_spelled_by_every_code_generator():
    generators, interpreter = _generators()
    missing = []
    for name, arity, categories in _prim_signatures():
        for dtype in REAL_DTYPES:
            category = dtype_category(dtype)
            if category not in categories:
                continue
            outs = REAL_DTYPES if name == "convert" else (dtype,)
            for out in outs:
                op = _op(name, arity, dtype, out)
                for generator, spell in generators:
                    if (name, category, generator) in NO_FORM:
                        with pytest.raises(CodegenError, match=name):
                            spell(op, [f"a{i}" for i in range(arity)])
                        continue
                    try:
                        code = spell(op, [f"a{i}" for i in range(arity)])
                    except CodegenError as error:
                        missing.append(f"{generator} {name}({dtype}) -> {out}: {error}")
                        continue
                    for function in re.findall(r"libdevice\.(\w+)", code):
                        if not hasattr(interpreter, function):
                            missing.append(f"interpreter libdevice.{function} (for {name} on {dtype})")
    assert not missing, "elementwise ops without a form:\n" + "\n".join(missing)


def test_every_spelled_op_is_a_prim_and_every_prim_is_spelled():
    prims = {name: 1 for name in UNARY} | {name: 2 for name in BINARY} | {"where": 3, "convert": 1}
    spelled = {name: arity for name, (arity, _) in spelled_ops().items()}
    unspelled = {n: a for n, a in prims.items() if spelled.get(n) != a}
    assert not unspelled, f"prims (name: operands) without an entry in an op family: {unspelled}"
    assert set(spelled) - set(prims) == set(), "op family entries that are no prim"


def test_libm_declarations_come_from_the_math_table():
    assert LIBM_UNARY == tuple(op.c for op in UNARY_MATH)
    assert LIBM_BINARY == tuple(op.c for op in BINARY_MATH if op.cpp is None)


def test_operator_names_are_unique():
    names = [op.name for op in (*OPERATORS, *UNARY_MATH, *BINARY_MATH)]
    assert len(names) == len(set(names))
