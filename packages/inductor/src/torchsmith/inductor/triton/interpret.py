"""`libdevice` for Triton's interpreter (TRITON_INTERPRET=1, how the tests run without a GPU).

Triton 3.6's interpreter runs a kernel as Python over NumPy arrays but maps none of libdevice, so a
kernel calling `libdevice.tanh` gets None back. Generated modules import this namespace instead
when interpreting: plain Python functions (the interpreter calls them like any Python code) that
apply NumPy's version of each function to the block's array. On a GPU the real libdevice runs.
"""

import numpy as np
import triton.language as tl
from triton.runtime.interpreter import TensorHandle

from torchsmith.inductor.loop_ir.math_ops import libdevice_functions


def _wrap(data: np.ndarray, like: list) -> tl.tensor:
    scalar = like[0].dtype.scalar if hasattr(like[0].dtype, "scalar") else like[0].dtype
    blocks = [x for x in like if x.type.is_block()]
    ty = tl.block_type(scalar, list(data.shape)) if blocks else scalar
    return tl.tensor(TensorHandle(data.astype(like[0].handle.data.dtype, copy=False), scalar), ty)


def _unary(fn):
    def apply(x):
        with np.errstate(all="ignore"):
            return _wrap(np.asarray(fn(x.handle.data)), [x])

    return apply


def _binary(fn):
    def apply(x, y):
        with np.errstate(all="ignore"):
            return _wrap(np.asarray(fn(x.handle.data, y.handle.data)), [x, y])

    return apply


class _Libdevice:
    """The libdevice functions torchsmith's generated kernels call: the op table's NumPy functions
    (loop_ir/math_ops.py), and signbit."""

    @staticmethod
    def signbit(x):
        data = np.signbit(x.handle.data).astype(np.int32)
        ty = tl.block_type(tl.int32, list(data.shape)) if x.type.is_block() else tl.int32
        return tl.tensor(TensorHandle(data, tl.int32), ty)


for _name, (_arity, _fn) in libdevice_functions().items():
    setattr(_Libdevice, _name, staticmethod((_unary if _arity == 1 else _binary)(_fn)))

libdevice = _Libdevice()
