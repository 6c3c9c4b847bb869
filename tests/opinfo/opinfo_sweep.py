"""Runs torch's own OpInfo samples through a compiler and sorts each sample into pass, wrong, error
or fallback, against eager on the same sample.

torch ships its op test database in `torch.testing._internal` (tests only, never package code). For
each OpInfo, dtype (float32, int64, bfloat16 where the op supports them) and sample, the op is called
through a small function `f(*tensors)` with the sample's non-tensor arguments closed over, eagerly
and compiled. A sample is:
- `pass`     the compiled call returns what eager returns (values within the dtype's tolerance,
             shapes, dtypes), and mutates its inputs the same way;
- `wrong`    it returns or mutates something else: the one outcome a compiler must never have;
- `error`    the compiled call raises where eager does not;
- `fallback` torchsmith ran the graph eagerly after a stage failed (a FallbackWarning), or
             the compiler compiled no graph for a sample that has tensors to compute with.
A sample with no tensor among its arguments or results (broadcast_shapes: sizes in, a size out)
has nothing for a tensor compiler to compile: it passes when the compiled call returns eager's
value, whether or not a graph was made (torch.compile hands its backend a graph holding the dead
call; torchsmith computes the size while capturing).
Random ops (two eager runs with different seeds disagree) and samples eager itself rejects are
skipped. An op's status is its worst sample's: wrong, then error, then fallback, then pass.
"""

import dataclasses
import warnings
from collections.abc import Callable

import torch

DTYPES = (torch.float32, torch.int64, torch.bfloat16)
ORDER = ("wrong", "error", "fallback", "pass")
TOLERANCE = {torch.float64: (1e-7, 1e-7), torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2),
             torch.float16: (2e-3, 2e-3), torch.complex64: (1e-4, 1e-4), torch.complex128: (1e-7, 1e-7)}


@dataclasses.dataclass
class OpResult:
    op: str
    status: str = "pass"
    samples: dict = dataclasses.field(default_factory=lambda: dict.fromkeys(ORDER, 0))
    first_problem: str | None = None

    def add(self, status: str, detail: str | None = None) -> None:
        self.samples[status] += 1
        if ORDER.index(status) < ORDER.index(self.status):
            self.status = status
            self.first_problem = detail


def op_database():
    """torch's OpInfo list (imports torch's test utilities: seconds, and needs `expecttest`)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def _tensors(x) -> list:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _split(sample) -> tuple[list, Callable]:
    """The sample's tensor leaves (the compiled function's inputs) and a rebuild of the call."""
    structure = (sample.input, tuple(sample.args), dict(sample.kwargs))
    leaves = _tensors(structure)

    def rebuild(values):
        it = iter(values)

        def fill(x):
            if isinstance(x, torch.Tensor):
                return next(it)
            if isinstance(x, (list, tuple)):
                return type(x)(fill(v) for v in x)
            if isinstance(x, dict):
                return {k: fill(v) for k, v in x.items()}
            return x

        return fill(structure)

    return leaves, rebuild


def differs(expected, actual, dtype) -> str | None:
    """None when `actual` equals `expected` within the dtype's tolerance, else what differs."""
    if isinstance(expected, torch.Tensor) != isinstance(actual, torch.Tensor):
        return f"{type(expected).__name__} vs {type(actual).__name__}"
    if isinstance(expected, torch.Tensor):
        if expected.shape != actual.shape or expected.dtype != actual.dtype:
            return f"{tuple(expected.shape)}/{expected.dtype} vs {tuple(actual.shape)}/{actual.dtype}"
        if expected.layout != actual.layout:
            return f"layout {expected.layout} vs {actual.layout}"
        atol, rtol = TOLERANCE.get(expected.dtype, (0, 0))
        a, b = expected.detach(), actual.detach()
        if a.layout != torch.strided:
            a, b = a.to_dense(), b.to_dense()
        if a.is_complex() or b.is_complex():
            a, b = torch.view_as_real(a.resolve_conj()), torch.view_as_real(b.resolve_conj())
        if a.dtype == torch.bool:
            same = torch.equal(a, b)
        else:
            same = torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True)
        if not same:
            return f"values differ ({tuple(expected.shape)} {expected.dtype})"
        return None
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(expected) != len(actual):
            return f"{type(expected).__name__} of {len(expected)} vs {actual!r:.60}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            problem = differs(e, a, dtype)
            if problem:
                return f"[{i}] {problem}"
        return None
    if expected != actual and not (expected != expected and actual != actual):
        return f"{expected!r:.40} vs {actual!r:.40}"
    return None


# Ops whose values are uninitialized memory: only shapes, dtypes and strides are compared.
UNINITIALIZED = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted"}


def _values_erased(x):
    if isinstance(x, torch.Tensor):
        return torch.zeros_like(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_values_erased(v) for v in x)
    return x


def _is_random(call, leaves) -> bool:
    torch.manual_seed(1)
    a = call(*_clone(leaves))
    torch.manual_seed(2)
    b = call(*_clone(leaves))
    return differs(a, b, None) is not None


def run_sample(compile_fn, op, sample, dtype) -> tuple[str, str | None]:
    """One sample under `compile_fn(f) -> compiled f`: (status, detail)."""
    leaves, rebuild = _split(sample)

    def f(*tensors):
        x, args, kwargs = rebuild(tensors)
        return op.op(x, *args, **kwargs)

    try:
        expected_inputs = _clone(leaves)
        torch.manual_seed(0)
        expected = f(*expected_inputs)
    except Exception:
        return "skip", None
    try:
        if op.name not in UNINITIALIZED and _is_random(f, leaves):
            return "skip", None
    except Exception:  # eager's own outputs do not compare (an op returning objects): not swept
        return "skip", None
    inputs = _clone(leaves)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            torch.manual_seed(0)
            compiled, ran_graph = compile_fn(f)
            actual = compiled(*inputs)
        except Exception as e:
            return "error", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    if op.name in UNINITIALIZED:
        expected, actual = _values_erased(expected), _values_erased(actual)
    try:
        problem = differs(expected, actual, dtype) or differs(expected_inputs, inputs, dtype)
    except Exception as e:  # eager's output compares with itself, so this is the compiled output
        problem = f"the compiled output does not compare with eager's: {type(e).__name__}: {e}"
    if problem:
        return "wrong", problem
    fell_back = [w for w in caught if type(w.message).__name__ == "FallbackWarning"]
    if fell_back:
        return "fallback", str(fell_back[0].message).splitlines()[0][:160]
    if not ran_graph() and (leaves or _tensors(expected)):
        return "fallback", "no graph was compiled"
    return "pass", None


def sweep_op(compile_fn, op, dtypes=DTYPES, samples_per_dtype: int = 3) -> OpResult:
    """Every sample (up to `samples_per_dtype` per dtype) of one OpInfo under one compiler."""
    result = OpResult(op.name if not op.variant_test_name else f"{op.name}.{op.variant_test_name}")
    supported = op.supported_dtypes("cpu")
    for dtype in dtypes:
        if dtype not in supported:
            continue
        try:
            samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:samples_per_dtype]
        except Exception:
            continue
        for sample in samples:
            status, detail = run_sample(compile_fn, op, sample, dtype)
            if status != "skip":
                result.add(status, f"{dtype}: {detail}" if detail else None)
    return result


def torchsmith_compiler(backend: str = "inductor"):
    """compile_fn for torchsmith: a fresh compile per sample; `ran_graph` says a graph was compiled."""
    import torchsmith

    def compile_fn(f):
        graphs = []
        inner = torchsmith.lookup_backend(backend)

        def counting(graph, example_inputs):
            graphs.append(graph)
            return inner(graph, example_inputs)

        return torchsmith.compile(f, backend=counting), lambda: bool(graphs)

    return compile_fn


def torch_compiler(backend: str = "inductor"):
    """compile_fn for torch.compile (the baseline), reset per sample so no cache limit is hit."""

    def compile_fn(f):
        import torch._dynamo

        torch._dynamo.reset()
        graphs = []

        def counting(gm, example_inputs):
            graphs.append(gm)
            if backend == "inductor":
                from torch._inductor import compile_fx

                return compile_fx.compile_fx(gm, example_inputs)
            return gm.forward

        return torch.compile(f, backend=counting), lambda: bool(graphs)

    return compile_fn
