"""C++ kernels called from the generated wrapper through a small extension instead of ctypes.

A ctypes call converts each argument and the wrapper reads each buffer's `data_ptr()` in Python
first: a few microseconds per kernel, which is much of a small model's call. `kernel_calls.cpp`'s
`call(address, *tensors)` reads the pointers from the tensors and calls the kernel through a
function pointer of its arity. It is built once per torch and Python as `torchsmith.ir.native_extension`
builds every extension; until it is loaded kernels are called through ctypes.
`TORCHSMITH_NATIVE_CALLS=0` turns it off.
"""

import ctypes
from pathlib import Path

from torchsmith.ir.native_extension import NativeExtension

EXTENSION = NativeExtension("torchsmith_kernel_calls", Path(__file__).with_name("kernel_calls.cpp"),
                            "kernel calls", switch="TORCHSMITH_NATIVE_CALLS")


def caller(arity: int):
    """The extension's `call(address, *tensors)` for a kernel of `arity` buffers; None where the
    extension is not loaded (it is requested here) or the kernel takes more than it can pass."""
    module = EXTENSION.loaded()
    if module is None:
        EXTENSION.request()
        return None
    return module.call if arity <= module.max_arity() else None


def address(fn) -> int:
    """The address of a ctypes function."""
    return ctypes.cast(fn, ctypes.c_void_p).value
