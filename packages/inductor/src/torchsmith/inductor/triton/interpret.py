"""`libdevice` for Triton's interpreter (TRITON_INTERPRET=1, how the tests run without a GPU).

Triton 3.6's interpreter runs a kernel as Python over NumPy arrays but maps none of libdevice, so a
kernel calling `libdevice.tanh` gets None back. Generated modules import this namespace instead
when interpreting: plain Python functions (the interpreter calls them like any Python code) that
apply NumPy's version of each function to the block's array. On a GPU the real libdevice runs.
"""

import numpy as np
import triton.language as tl
from triton.runtime.interpreter import TensorHandle

from torchsmith.inductor.loop_ir.elementwise_ops import libdevice_stand_ins


def _wrap(data: np.ndarray, like: list, result: np.dtype | None) -> tl.tensor:
    """`data` as a Triton value shaped like the block operands of `like`, in `result`'s dtype (by
    default the first operand's)."""
    if result is None:
        scalar = like[0].dtype.scalar if hasattr(like[0].dtype, "scalar") else like[0].dtype
        data = data.astype(like[0].handle.data.dtype, copy=False)
    else:
        scalar, data = _TRITON_TYPES[np.dtype(result)], data.astype(result)
    blocks = [x for x in like if x.type.is_block()]
    ty = tl.block_type(scalar, list(data.shape)) if blocks else scalar
    return tl.tensor(TensorHandle(data, scalar), ty)


_TRITON_TYPES = {np.dtype(np.int32): tl.int32}


def _stand_in(fn, result):
    def apply(*xs):
        with np.errstate(all="ignore"):
            return _wrap(np.asarray(fn(*(x.handle.data for x in xs))), list(xs), result)

    return apply


class _Libdevice:
    """The libdevice functions torchsmith's generated kernels call, each the NumPy stand-in its op
    family's entry names (loop_ir/math_ops.py, loop_ir/elementwise_ops.py)."""


for _fn in libdevice_stand_ins():
    setattr(_Libdevice, _fn.name, staticmethod(_stand_in(_fn.numpy, _fn.result)))

libdevice = _Libdevice()
