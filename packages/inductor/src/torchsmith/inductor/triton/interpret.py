"""`libdevice` for Triton's interpreter (TRITON_INTERPRET=1, how the tests run without a GPU).

Triton 3.6's interpreter runs a kernel as Python over NumPy arrays but maps none of libdevice, so a
kernel calling `libdevice.tanh` gets None back. Generated modules import this namespace instead
when interpreting: plain Python functions (the interpreter calls them like any Python code) that
apply NumPy's version of each function to the block's array. On a GPU the real libdevice runs.
"""

import math

import numpy as np
import triton.language as tl
from triton.runtime.interpreter import TensorHandle


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
    """The libdevice functions torchsmith's generated kernels call."""

    expm1 = staticmethod(_unary(np.expm1))
    log10 = staticmethod(_unary(np.log10))
    log1p = staticmethod(_unary(np.log1p))
    tan = staticmethod(_unary(np.tan))
    asin = staticmethod(_unary(np.arcsin))
    acos = staticmethod(_unary(np.arccos))
    atan = staticmethod(_unary(np.arctan))
    sinh = staticmethod(_unary(np.sinh))
    cosh = staticmethod(_unary(np.cosh))
    tanh = staticmethod(_unary(np.tanh))
    asinh = staticmethod(_unary(np.arcsinh))
    acosh = staticmethod(_unary(np.arccosh))
    atanh = staticmethod(_unary(np.arctanh))
    erfc = staticmethod(_unary(np.vectorize(math.erfc, otypes=[np.float64])))
    lgamma = staticmethod(_unary(np.vectorize(math.lgamma, otypes=[np.float64])))
    nearbyint = staticmethod(_unary(np.rint))
    trunc = staticmethod(_unary(np.trunc))
    pow = staticmethod(_binary(np.power))
    atan2 = staticmethod(_binary(np.arctan2))
    fmod = staticmethod(_binary(np.fmod))

    @staticmethod
    def signbit(x):
        data = np.signbit(x.handle.data).astype(np.int32)
        ty = tl.block_type(tl.int32, list(data.shape)) if x.type.is_block() else tl.int32
        return tl.tensor(TensorHandle(data, tl.int32), ty)


libdevice = _Libdevice()
