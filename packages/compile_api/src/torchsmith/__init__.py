__path__ = __import__("pkgutil").extend_path(__path__, __name__)

# The line above must stay first: it lets the other torchsmith portions (torchsmith.ir,
# torchsmith.capture, ...) be found wherever they are installed, editable or not. So the
# docstring is assigned, not written as the first statement.
__doc__ = """torchsmith: a PyTorch compiler built as small packages.

`torchsmith` is a namespace shared by every torchsmith distribution. `torchsmith.ir`,
`torchsmith.capture`, `torchsmith.autograd_aot`, `torchsmith.prims` and `torchsmith.inductor`
are separate packages that work without this one; this one (the `torchsmith` distribution,
packages/compile_api) is the thin user API on top of them.
"""

from torchsmith.__about__ import __version__  # noqa: E402

__all__ = ["__version__"]
