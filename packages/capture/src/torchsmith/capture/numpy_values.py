"""NumPy values met during capture: kept opaque, so every NumPy operation runs eagerly.

A NumPy array shares memory with the tensors it came from (`x.numpy()`, `torch.from_numpy(a)`,
`np.asarray(x)`), and NumPy code reads and writes that memory at the moment it runs. Capture therefore
never reads an array's contents or folds an operation on it into a constant: an array or NumPy scalar
read by the compiled code becomes a `NumpyVar`, guarded by its type only, that capture can store,
pass to user functions, put in containers and return (the generated code reads it again through its
source). Anything that would look inside it (an operator, a subscript, an attribute, a method, a NumPy
function, `torch.from_numpy`, a tensor op taking it as an argument) is a graph break: the graph so
far runs, the NumPy code runs natively in program order, and a resume function continues. Results,
mutations seen through either side and aliasing are then eager's by construction.
"""

import sys

from torchsmith.capture.variables import VariableTracker


def is_numpy_value(value) -> bool:
    """Whether `value` is a NumPy array or a NumPy scalar (`np.float64(2.0)`, a Python float subclass
    that capture must not treat as a float constant). NumPy is never imported here: a program that
    holds such a value has already imported it."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, (np.ndarray, np.generic))


class NumpyVar(VariableTracker):
    """A NumPy array or scalar read through `source`; capture never looks inside it (see above).
    `example` is the object read at capture time, used only for its type (isinstance, type())."""

    __slots__ = ("example",)

    def __init__(self, example, source: str):
        super().__init__(source)
        self.example = example

    def describe(self) -> str:
        kind = "array" if type(self.example).__name__ == "ndarray" else "scalar"
        return f"NumPy {kind} {self.source} (NumPy code runs eagerly)"
