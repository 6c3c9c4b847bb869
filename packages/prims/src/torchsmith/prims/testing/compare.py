"""Comparing results: NumPy references against torch, and decompositions against eager torch."""

import numpy as np
import torch

# (rtol, atol) by dtype for reference-vs-torch comparisons: a few ulps, since the two libraries
# evaluate transcendental functions with different (each correctly-rounded-ish) algorithms.
TOLERANCES = {
    torch.float64: (1e-10, 1e-12),
    torch.float32: (2e-5, 2e-6),
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}


def to_numpy(x):
    """Tensors (and nested lists of them) as NumPy arrays; bfloat16 becomes float32."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return (x.float() if x.dtype == torch.bfloat16 else x).numpy()
    if isinstance(x, list):
        return [to_numpy(a) for a in x]
    if isinstance(x, tuple):
        return tuple(to_numpy(a) for a in x)
    return x


def assert_close(actual: torch.Tensor, expected: torch.Tensor, *, what: str, scale: float = 1.0) -> None:
    """Equal shapes and dtypes; values equal for integers and bools, close for floats (nan == nan)."""
    assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual).__name__}"
    assert actual.shape == expected.shape, f"{what}: shape {list(actual.shape)} != {list(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if not actual.dtype.is_floating_point:
        assert torch.equal(actual, expected), f"{what}: values differ\n{actual}\n{expected}"
        return
    rtol, atol = TOLERANCES[actual.dtype]
    torch.testing.assert_close(
        actual, expected, rtol=rtol * scale, atol=atol * scale, equal_nan=True, msg=lambda m: f"{what}: {m}"
    )


def from_numpy(result, dtype: torch.dtype) -> torch.Tensor:
    """A NumPy reference result as a torch tensor of the prim's declared dtype."""
    array = np.asarray(result)
    if array.dtype == object:
        array = array.astype(np.float64)
    return torch.from_numpy(array.copy()).to(dtype)


def assert_decomposition_close(
    actual: torch.Tensor, eager: torch.Tensor, reference: torch.Tensor | None, *, what: str
) -> None:
    """The numerics rule for decompositions: equal to eager where they agree exactly; otherwise no
    farther from the float64 `reference` than eager is (plus a sliver of the dtype's tolerance),
    elementwise. Without a reference (integer results), the values must be equal."""
    assert actual.shape == eager.shape, f"{what}: shape {list(actual.shape)} != eager {list(eager.shape)}"
    assert actual.dtype == eager.dtype, f"{what}: dtype {actual.dtype} != eager {eager.dtype}"
    if not actual.dtype.is_floating_point or reference is None:
        assert torch.equal(actual, eager), f"{what}: values differ from eager\n{actual}\n{eager}"
        return
    same = (actual == eager) | (torch.isnan(actual) & torch.isnan(eager))
    if bool(same.all()):
        return
    nan_mismatch = torch.isnan(actual) != torch.isnan(eager)
    assert not bool(nan_mismatch.any()), (
        f"{what}: nan where eager has none (or the reverse)\n{actual}\n{eager}"
    )
    ref = reference.to(torch.float64)
    finite = torch.isfinite(ref)
    inf_mismatch = ~finite & ~torch.isnan(ref) & (actual.double() != ref)
    assert not bool((inf_mismatch & (eager.double() == ref)).any()), f"{what}: infinities differ from eager"
    rtol, atol = TOLERANCES[actual.dtype]
    err_actual = (actual.double() - ref).abs()
    err_eager = (eager.double() - ref).abs()
    slack = 0.25 * (atol + rtol * ref.abs())
    bad = finite & ~same & (err_actual > err_eager + slack)
    if bool(bad.any()):
        worst = int(torch.argmax(torch.where(bad, err_actual - err_eager, 0).flatten()))
        raise AssertionError(
            f"{what}: {int(bad.sum())} elements are farther from float64 than eager; worst at flat index "
            f"{worst}: decomposed {actual.flatten()[worst].item()!r}, "
            f"eager {eager.flatten()[worst].item()!r}, "
            f"float64 {ref.flatten()[worst].item()!r}"
        )
