"""Sample inputs for every prim: shapes incl. 0-d, empty and non-contiguous, in every dtype of
float32, float64, bfloat16, float16, int64, int32 and bool that the prim accepts.

`prim_samples(name)` is the entry point; the dtypes a prim accepts are read from its own shape
rule (a dtype it refuses is skipped), so samples never disagree with the rules they test.
"""

import functools
import math

import torch

from torchsmith.ir.builder import infer_output_types
from torchsmith.ir.graph import Value
from torchsmith.ir.types import TensorType
from torchsmith.prims.core import PRIMS
from torchsmith.prims.errors import PrimsError
from torchsmith.prims.testing.make import ALL_DTYPES, Sample, make_tensor

ELEMENTWISE_SHAPES = ((), (0,), (7,), (3, 5), (2, 3, 4))

# Operand value ranges (low, high) per prim, to stay in the domain where both libraries are defined.
DOMAINS = {
    "log": (0.1, 4),
    "log2": (0.1, 4),
    "log10": (0.1, 4),
    "sqrt": (0.0, 4),
    "rsqrt": (0.1, 4),
    "lgamma": (0.1, 4),
    "reciprocal": (0.25, 3),
    "log1p": (-0.9, 3),
    "asin": (-0.95, 0.95),
    "acos": (-0.95, 0.95),
    "atanh": (-0.95, 0.95),
    "acosh": (1.05, 4),
    "tan": (-1.4, 1.4),
}
BINARY_DOMAINS = {  # per operand, floats then ints
    "pow": (((0.1, 3), (-2, 2)), ((-3, 3), (0, 3))),
    "shift_left": (None, ((-9, 9), (0, 5))),
    "shift_right": (None, ((-9, 9), (0, 5))),
}
NONZERO_DIVISOR = {"div", "remainder", "fmod"}
SPECIAL_VALUES = (0.0, -0.0, 1.0, -1.5, 2.5, float("inf"), -float("inf"), float("nan"))


def _accepts(name: str, args: tuple, kwargs: dict | None = None) -> bool:
    """Whether the prim's shape rule accepts these arguments (tensors standing in as Values)."""
    count = iter(range(1000))

    def value(a):
        if isinstance(a, torch.Tensor):
            return Value(f"v{next(count)}", TensorType.of(a))
        if isinstance(a, (list, tuple)):
            return tuple(value(x) for x in a)
        return a

    try:
        infer_output_types(
            name, tuple(value(a) for a in args), {k: value(v) for k, v in (kwargs or {}).items()}
        )
    except PrimsError:
        return False
    return True


def _tensor(shape, dtype, seed, domain=None, **kw):
    low, high = domain if domain else ((-9, 9) if not dtype.is_floating_point else (-3, 3))
    if not dtype.is_floating_point and dtype != torch.bool:
        low, high = math.floor(low), math.ceil(high)
    return make_tensor(shape, dtype, seed=seed, low=low, high=high, **kw)


def _elementwise(name: str, arity: int) -> list[Sample]:
    op = name.removeprefix("prims.")
    samples = []
    for dtype in ALL_DTYPES:
        probe = tuple(torch.zeros(2, dtype=dtype) for _ in range(arity))
        if not _accepts(name, probe):
            continue
        floats = dtype.is_floating_point
        domains = BINARY_DOMAINS.get(op, (None, None))[0 if floats else 1] or (DOMAINS.get(op),) * arity
        shapes = ELEMENTWISE_SHAPES if dtype == torch.float32 else ((), (3, 5))
        for i, shape in enumerate(shapes):
            for noncontiguous in (False, True) if len(shape) >= 2 else (False,):
                args = [
                    _tensor(shape, dtype, 10 * i + k, domains[k], noncontiguous=noncontiguous)
                    for k in range(arity)
                ]
                if op in NONZERO_DIVISOR:
                    args[1] = torch.where(args[1] == 0, torch.ones((), dtype=dtype), args[1])
                note = "noncontiguous" if noncontiguous else ""
                samples.append(Sample(tuple(args), note=note))
        if arity == 2 and op not in NONZERO_DIVISOR | {"pow", "shift_left", "shift_right"}:
            scalar = {torch.bool: True}.get(dtype, 2 if not floats else 0.5)
            x = _tensor((3, 5), dtype, 99, domains[0])
            samples += [Sample((x, scalar), note="scalar operand"), Sample((scalar, x), note="scalar first")]
        if floats and op not in DOMAINS and op not in BINARY_DOMAINS and op != "lgamma":
            special = torch.tensor(SPECIAL_VALUES, dtype=dtype)
            others = (special.roll(k) for k in range(arity))
            samples.append(Sample(tuple(others), note="special values"))
    return samples


def _where() -> list[Sample]:
    samples = []
    for i, dtype in enumerate(ALL_DTYPES):
        for shape in ((), (0, 3), (3, 5)):
            pred = make_tensor(shape, torch.bool, seed=i)
            samples.append(Sample((pred, _tensor(shape, dtype, i + 1), _tensor(shape, dtype, i + 2))))
        scalar = {torch.bool: False}.get(dtype, 0 if not dtype.is_floating_point else -1.5)
        samples.append(
            Sample(
                (
                    make_tensor((4, 3), torch.bool, seed=5),
                    _tensor((4, 3), dtype, 6, noncontiguous=True),
                    scalar,
                ),
                note="scalar branch",
            )
        )
    return samples


def _reduction(name: str) -> list[Sample]:
    cases = [
        ((3, 4, 5), [1]),
        ((3, 4, 5), [0, 2]),
        ((3, 4, 5), [0, 1, 2]),
        ((3, 4, 5), []),
        ((), []),
        ((4, 6), [0]),
        ((4, 0), [0]),
        ((4, 0), [1]),
    ]
    samples = []
    for dtype in ALL_DTYPES:
        for i, (shape, dims) in enumerate(cases):
            if dtype != torch.float32 and i % 3:
                continue
            x = _tensor(shape, dtype, i, noncontiguous=shape == (4, 6))
            if name == "prims.var_mean":
                for correction in (0, 1):
                    if _accepts(name, (x, dims, correction)):
                        samples.append(Sample((x, dims, correction)))
            elif name in ("prims.argmax", "prims.argmin"):
                if len(dims) == 1 and _accepts(name, (x, dims[0])):
                    samples.append(Sample((x, dims[0])))
            elif _accepts(name, (x, dims)):
                samples.append(Sample((x, dims)))
    return samples


def _float_and_int(shape_fn):
    """Samples over one float, one low-precision and one int dtype."""
    return [s for dtype in (torch.float32, torch.bfloat16, torch.int64) for s in shape_fn(dtype)]


def _view_samples(name: str) -> list[Sample]:
    x = lambda shape, dtype, nc=False: _tensor(shape, dtype, len(shape), noncontiguous=nc)
    cases = {
        "prims.broadcast_in_dim": lambda d: [
            Sample((x((3,), d), [2, 3], [1])),
            Sample((x((3, 1), d), [2, 3, 4], [1, 2])),
            Sample((x((), d), [2, 0], [])),
            Sample((x((4, 3), d, True), [4, 3], [0, 1])),
        ],
        "prims.reshape": lambda d: [
            Sample((x((3, 4), d), [4, 3])),
            Sample((x((3, 4), d, True), [12])),
            Sample((x((), d), [1, 1])),
            Sample((x((0, 4), d), [2, 0])),
        ],
        "prims.collapse": lambda d: [Sample((x((2, 3, 4), d), 0, 2)), Sample((x((2, 3, 4), d, True), 1, 3))],
        "prims.split_dim": lambda d: [Sample((x((6, 4), d), 0, 2)), Sample((x((4, 6), d, True), 1, 3))],
        "prims.permute": lambda d: [
            Sample((x((2, 3, 4), d), [2, 0, 1])),
            Sample((x((), d), [])),
            Sample((x((3, 4), d, True), [1, 0])),
        ],
        "prims.squeeze": lambda d: [
            Sample((x((1, 3, 1), d), [0, 2])),
            Sample((x((1,), d), [0])),
            Sample((x((3, 4), d), [])),
        ],
        "prims.expand_dims": lambda d: [
            Sample((x((3, 4), d), [0, 3])),
            Sample((x((), d), [0])),
            Sample((x((3, 4), d, True), [1])),
        ],
        "prims.slice": lambda d: [
            Sample((x((6, 5), d), 0, 1, 5, 2)),
            Sample((x((6, 5), d, True), 1, 0, 5, 3)),
            Sample((x((6, 5), d), 1, 3, 3, 1)),
            Sample((x((0,), d), 0, 0, 0, 1)),
        ],
        "prims.flip": lambda d: [
            Sample((x((3, 4), d), [0, 1])),
            Sample((x((3, 4), d, True), [1])),
            Sample((x((), d), [])),
        ],
        "prims.cat": lambda d: [
            Sample(([x((2, 3), d), x((4, 3), d), x((0, 3), d)], 0)),
            Sample(([x((3, 2), d, True), x((3, 1), d)], 1)),
        ],
        "prims.pad": lambda d: [
            Sample((x((2, 3), d), [1, 0, 2, 3], 0 if not d.is_floating_point else -1.5)),
            Sample((x((3, 4), d, True), [0, 0, 1, 1], 1)),
            Sample((x((), d), [], 0)),
        ],
    }
    bool_samples = [s for s in cases[name](torch.bool) if _accepts(name, s.args)]
    return _float_and_int(cases[name]) + bool_samples[:1]


def _creation(name: str) -> list[Sample]:
    cases = {
        "prims.iota": [
            Sample((5, 0, 1), {"dtype": torch.int64, "device": "cpu"}),
            Sample((4, 2, -3), {"dtype": torch.int32, "device": "cpu"}),
            Sample((6, 0.5, 0.25), {"dtype": torch.float32, "device": "cpu"}),
            Sample((0, 0, 1), {"dtype": torch.float64, "device": "cpu"}),
        ],
        "prims.full": [Sample(([2, 3], 1.5), {"dtype": d, "device": "cpu"}) for d in ALL_DTYPES[:4]]
        + [
            Sample(([], 7), {"dtype": torch.int32, "device": "cpu"}),
            Sample(([0, 2], True), {"dtype": torch.bool, "device": "cpu"}),
        ],
        "prims.empty_strided": [
            Sample(([2, 3], [1, 2]), {"dtype": torch.float32, "device": "cpu"}),
            Sample(([], []), {"dtype": torch.bool, "device": "cpu"}),
        ],
        "prims.empty": [
            Sample(([2, 3],), {"dtype": torch.float32, "device": "cpu"}),
            Sample(([],), {"dtype": torch.int64, "device": "cpu"}),
        ],
    }
    return cases[name]


def _conversion(name: str) -> list[Sample]:
    if name == "prims.convert_element_type":
        return [
            Sample((_tensor((3, 5), src, i, (-100, 100)), dst))
            for i, src in enumerate(ALL_DTYPES)
            for dst in ALL_DTYPES
            if src != dst
        ] + [
            Sample((_tensor((4, 3), torch.float32, 1, noncontiguous=True), torch.float16)),
            Sample((_tensor((), torch.float64, 2), torch.int32)),
        ]
    if name == "prims.clone":
        return [
            Sample((_tensor(s, d, 3, noncontiguous=nc),))
            for s, nc in (((), False), ((3, 4), True))
            for d in ALL_DTYPES
        ]
    return [
        Sample((_tensor(s, d, 4, noncontiguous=nc), dim))  # cumsum
        for d in ALL_DTYPES
        if d != torch.bool
        for s, dim, nc in (((), 0, False), ((5,), 0, False), ((3, 4), 1, True), ((2, 0), 0, False))
    ]


def _indexing(name: str) -> list[Sample]:
    g = torch.Generator().manual_seed(0)
    idx = lambda high, shape: torch.randint(0, high, shape, generator=g)
    samples = []
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        a = _tensor((4, 5), dtype, 1)
        if name == "prims.gather":
            samples += [
                Sample((a, 0, idx(4, (3, 5)))),
                Sample((a, 1, idx(5, (4, 2)))),
                Sample((a.t(), 1, idx(4, (2, 3)))),
            ]
        elif name in ("prims.scatter", "prims.scatter_add"):
            if name == "prims.scatter_add" and dtype == torch.bool:
                continue
            perm = torch.stack([torch.randperm(4, generator=g)[:3] for _ in range(5)], 1)
            samples += [
                Sample((a, 0, perm, _tensor((3, 5), dtype, 2))),
                Sample((a, 1, idx(5, (4, 3)), _tensor((4, 3), dtype, 3))),
            ]
        elif name == "prims.index":
            samples += [
                Sample((a, [idx(4, (6,))])),
                Sample((a, [None, idx(5, (2, 3))])),
                Sample((_tensor((3, 4, 5), dtype, 4), [idx(3, (2,)), None, idx(5, (2,))])),
                Sample((a.t(), [idx(5, (3,)), idx(4, (3,))])),
            ]
        elif name == "prims.index_put":
            accumulate = dtype != torch.bool
            samples += [
                Sample((a, [torch.randperm(4, generator=g)[:3]], _tensor((3, 5), dtype, 5), False)),
                Sample((a, [idx(4, (6,)), idx(5, (6,))], _tensor((6,), dtype, 6), accumulate)),
            ]
    return samples


def _random(name: str) -> list[Sample]:
    return [
        Sample((shape, seed, offset), {"dtype": dtype, "device": "cpu"})
        for shape, seed, offset in (([1000], 0, 0), ([3, 7], 12345, 2**33 + 5), ([0, 3], 1, 1))
        for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16)
    ]


def _library(name: str) -> list[Sample]:
    t = _tensor
    samples = []
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        if name == "prims.mm":
            samples += [
                Sample((t((3, 4), dtype, 1), t((4, 5), dtype, 2))),
                Sample((t((3, 4), dtype, 1, noncontiguous=True), t((4, 0), dtype, 2))),
            ]
        elif name == "prims.bmm":
            samples += [Sample((t((2, 3, 4), dtype, 1), t((2, 4, 5), dtype, 2, noncontiguous=True)))]
        elif name == "prims.convolution":
            samples += [
                Sample(
                    (
                        t((2, 4, 7, 6), dtype, 1),
                        t((6, 2, 3, 2), dtype, 2),
                        t((6,), dtype, 3),
                        [2, 1],
                        [1, 0],
                        [1, 2],
                        False,
                        [0, 0],
                        2,
                    )
                ),
                Sample((t((1, 3, 9), dtype, 4), t((5, 3, 3), dtype, 5), None, [1], [2], [1], False, [0], 1)),
                Sample(
                    (
                        t((2, 4, 5, 4), dtype, 6),
                        t((4, 3, 3, 2), dtype, 7),
                        t((6,), dtype, 8),
                        [2, 1],
                        [1, 0],
                        [1, 1],
                        True,
                        [1, 0],
                        2,
                    )
                ),
            ]
        elif name == "prims.scaled_dot_product_attention":
            q, k, v = t((2, 3, 5, 8), dtype, 1), t((2, 3, 6, 8), dtype, 2), t((2, 3, 6, 4), dtype, 3)
            samples += [
                Sample((q, k, v, None, False, None)),
                Sample((q, k, v, None, True, 0.5)),
                Sample(
                    (q, k, v, make_tensor((5, 6), torch.bool, seed=4) | torch.eye(5, 6).bool(), False, None)
                ),
                Sample((q, k, v, t((3, 5, 6), dtype, 5), False, None)),
            ]
    return samples


@functools.cache
def prim_samples(name: str) -> tuple[Sample, ...]:
    """The samples for prim `name` (e.g. `"prims.add"`)."""
    kind = PRIMS[name].kind
    if kind == "elementwise.unary":
        samples = _elementwise(name, 1)
    elif kind == "elementwise.binary":
        samples = _elementwise(name, 2)
    elif kind == "elementwise.ternary":
        samples = _where()
    elif kind == "reduction":
        samples = _reduction(name)
    elif kind in ("view", "shape"):
        samples = _view_samples(name)
    elif kind == "creation":
        samples = _creation(name)
    elif kind in ("conversion", "scan"):
        samples = _conversion(name)
    elif kind == "indexing":
        samples = _indexing(name)
    elif kind == "random":
        samples = _random(name)
    else:
        samples = _library(name)
    return tuple(samples)
