"""Comparing the values two stages computed: dtype tolerances, cloned inputs, seeded tangents.

A stage's run is "values": the graph's outputs, then every tensor input as it is after the call
(mutations count), then, when training, the gradient of every input that requires grad. Two runs
agree when every pair of values is close within the tolerance of its dtype.
"""

import math
from dataclasses import dataclass

import torch

# (rtol, atol) per dtype. Loose enough for reassociated reductions and fused float math, tight
# enough that a wrong formula (a constant off by 1%) is caught.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),
    torch.complex64: (1e-4, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}
DEFAULT_TOLERANCE = (1e-4, 1e-5)
SKIP = object()  # a value that is not compared (an object whose equality is its identity)


@dataclass(frozen=True, slots=True)
class Difference:
    """Where two runs disagree: which value (`what`), by how much, and the tolerance it broke."""

    what: str
    max_error: float
    rtol: float
    atol: float
    detail: str = ""

    def describe(self) -> str:
        extra = f" ({self.detail})" if self.detail else ""
        return f"{self.what}: max error {self.max_error:.3g} (rtol {self.rtol:g}, atol {self.atol:g}){extra}"


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for values of `dtype`; exact (0, 0) for integers and bools."""
    if dtype in TOLERANCES:
        return TOLERANCES[dtype]
    if dtype.is_floating_point or dtype.is_complex:
        return DEFAULT_TOLERANCE
    return (0.0, 0.0)


def value_difference(expected, actual, what: str) -> Difference | None:
    """The `Difference` between two values (tensors, scalars, None, nested lists), or None when close."""
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        if len(expected) != len(actual):
            return Difference(what, math.inf, 0.0, 0.0, f"{len(expected)} items vs {len(actual)}")
        for i, (e, a) in enumerate(zip(expected, actual)):
            found = value_difference(e, a, f"{what}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        return _tensor_difference(expected, actual, what)
    if isinstance(expected, float) and isinstance(actual, float):
        rtol, atol = DEFAULT_TOLERANCE
        if math.isclose(expected, actual, rel_tol=rtol, abs_tol=atol) or (
            math.isnan(expected) and math.isnan(actual)
        ):
            return None
        return Difference(what, abs(expected - actual), rtol, atol, f"{expected!r} vs {actual!r}")
    try:
        unequal = bool(expected != actual)
    except Exception:  # noqa: BLE001 - values without a yes/no equality are not compared
        return None
    return Difference(what, math.inf, 0.0, 0.0, f"{expected!r} vs {actual!r}") if unequal else None


def _tensor_difference(expected, actual, what: str) -> Difference | None:
    if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)):
        return Difference(what, math.inf, 0.0, 0.0, f"{type(expected).__name__} vs {type(actual).__name__}")
    rtol, atol = tolerance(expected.dtype)
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        return Difference(
            what,
            math.inf,
            rtol,
            atol,
            f"{expected.dtype}{list(expected.shape)} vs {actual.dtype}{list(actual.shape)}",
        )
    e, a = expected.detach(), actual.detach().to(expected.device)
    if e.numel() == 0:
        return None
    if not (e.is_floating_point() or e.is_complex()):
        if torch.equal(e, a):
            return None
        wrong = int((e != a).sum())
        return Difference(
            what, float((e.double() - a.double()).abs().max()), 0.0, 0.0, f"{wrong} elements differ"
        )
    e64, a64 = (
        e.to(torch.complex128 if e.is_complex() else torch.float64),
        a.to(torch.complex128 if e.is_complex() else torch.float64),
    )
    both_nan = torch.isnan(e64) & torch.isnan(a64)
    same_inf = torch.isinf(e64) & (e64 == a64)
    error = torch.where(
        both_nan | same_inf, torch.zeros_like(e64.real if e.is_complex() else e64), (e64 - a64).abs()
    )
    error = torch.nan_to_num(error, nan=math.inf)
    bound = atol + rtol * e64.abs()
    bad = error > bound
    if not bool(bad.any()):
        return None
    worst = float(error.max())
    return Difference(what, worst, rtol, atol, f"{int(bad.sum())} of {e.numel()} elements outside tolerance")


def first_difference(expected: list, actual: list, names: list[str]) -> Difference | None:
    """The first pair of values, in order, that are not close (`names[i]` says what value i is)."""
    if len(expected) != len(actual):
        return Difference("values", math.inf, 0.0, 0.0, f"{len(expected)} values vs {len(actual)}")
    for e, a, name in zip(expected, actual, names):
        if e is SKIP or a is SKIP:
            continue
        found = value_difference(e, a, name)
        if found is not None:
            return found
    return None


def clone_input(x, *, keep_grad: bool = True):
    """A fresh copy of one input with the same strides (a leaf that requires grad if `x` does)."""
    if not isinstance(x, torch.Tensor):
        return x
    copy = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    with torch.no_grad():
        copy.copy_(x.detach())
    if keep_grad and x.requires_grad:
        copy.requires_grad_(True)
    return copy


def clone_inputs(inputs, *, keep_grad: bool = True) -> list:
    """`clone_input` of every input."""
    return [clone_input(x, keep_grad=keep_grad) for x in inputs]


def seeded_like(t: torch.Tensor, seed: int) -> torch.Tensor:
    """A deterministic random tensor shaped, typed and laid out like `t` (tangents for backward checks)."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(t.shape, generator=generator, dtype=torch.float64)
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    out.copy_(values.to(t.dtype) if (t.dtype.is_floating_point or t.dtype.is_complex) else values.round())
    return out


def run_values(fn, inputs, *, training: bool) -> tuple[list, list[str]]:
    """Call `fn(*clones)` and return (values, names): outputs, tensor inputs after the call, and when
    `training` the gradients of the inputs that require grad, from seeded tangents."""
    args = clone_inputs(inputs, keep_grad=training)
    with torch.enable_grad() if training else torch.no_grad():
        outputs = list(fn(*args))
    values = [_detached(o) for o in outputs]
    names = [f"output {i}" for i in range(len(outputs))]
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and not a.requires_grad:
            values.append(a.detach().clone())
            names.append(f"input {i} after the call")
    if training:
        leaves = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]
        roots = [(i, o) for i, o in enumerate(outputs) if isinstance(o, torch.Tensor) and o.requires_grad]
        if leaves and roots:
            tangents = [seeded_like(o, 1000 + i) for i, o in roots]
            grads = torch.autograd.grad(
                [o for _, o in roots], [args[i] for i in leaves], tangents, allow_unused=True
            )
            for i, g in zip(leaves, grads):
                # an unused input has no gradient in one stage and zeros in another: both mean zero
                values.append(torch.zeros_like(args[i]).detach() if g is None else g.detach())
                names.append(f"gradient of input {i}")
    return values, names


def _detached(value):
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (list, tuple)):
        return [_detached(v) for v in value]
    return value
