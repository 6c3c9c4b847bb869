"""The code generator: lowers a `prims.*` graph to a loop-level IR, fuses loops, and emits C++/OpenMP
kernels for the CPU and Triton kernels for the GPU, cached on disk by source hash.
"""

from torchsmith.inductor.__about__ import __version__

__all__ = ["__version__"]
