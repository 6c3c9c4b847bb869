"""Guards checked in C++: one call per tensor or module where the Python form reads several attributes.

A tensor's guard compares its class, dtype, device, requires_grad, sizes and strides with those at
capture. In Python that reads six attributes through torch's bindings and builds a tuple, most of
a microsecond per tensor, and a model's guard checks every parameter and buffer on every call.
`guard_checks.cpp` reads them from the tensor itself, one call of a few dozen nanoseconds; and a
module's five checks that it has no hooks and keeps its class's `forward`, from its dict at once.

The extension is built and loaded as `torchsmith.ir.native_extension` builds every one: once per
torch and Python, in the background, from a private directory, its hash checked. Guards compiled
before it is loaded keep the Python form and are recompiled when it is (`when_ready`).
`TORCHSMITH_NATIVE_GUARDS=0` turns it off.
"""

from pathlib import Path

import torch

from torchsmith.ir.native_extension import NativeExtension

# Tensor classes whose attributes are the C++ tensor's own (a subclass may compute them in Python).
NATIVE_TYPES = (torch.Tensor, torch.nn.Parameter)

EXTENSION = NativeExtension("torchsmith_guard_checks", Path(__file__).with_name("guard_checks.cpp"),
                            "guard checks", switch="TORCHSMITH_NATIVE_GUARDS")
loaded = EXTENSION.loaded
enabled = EXTENSION.enabled
request = EXTENSION.request
when_ready = EXTENSION.when_ready
wait = EXTENSION.wait
