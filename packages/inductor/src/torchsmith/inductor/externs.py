"""Extern kernels: the library ops the generated wrapper runs with torch (kept prims and fallbacks),
keyed by the name an `ExternCall` carries in `kernel`."""

import torch

EXTERN_KERNELS = {"prims.mm": torch.mm, "prims.bmm": torch.bmm}
