"""The loop-IR verifier: `verify_loops(program)` raises `LoopIRVerificationError` for a program no code
generator can run correctly, naming the buffer and what is wrong.

It checks that

- every buffer is defined once, and every load, extern argument and output reads an input or a
  buffer defined earlier in the program;
- every index variable in a body is bound where it is used: `i<k>` by one of the buffer's `ranges`,
  `r<k>` by one of its `reduction_ranges` (reductions and scatters only), `x<k>` by an enclosing
  `Indirect`; any other symbol is one of the program's size symbols;
- a load whose index is affine in variables of static ranges stays inside the storage of what it
  reads, for every value of the variables (clamped and other non-affine indices are not checked);
- dtypes agree: a load has the dtype of what it reads, a pointwise body has its buffer's dtype, a
  reduction's type is known.

The pass runner (`torchsmith.ir.passes`) runs it between inductor's steps under `TORCHSMITH_VERIFY=1`
or `TORCHSMITH_VERIFY_LOOPS=1` (`register_loop_ir_kind` plugs it in); it is never on the hot path.
"""

import sympy

from torchsmith.inductor.errors import InductorError
from torchsmith.inductor.loop_ir.program import (
    REDUCTION_TYPES,
    ComputedBuffer,
    Constant,
    ExternCall,
    IndexValue,
    Indirect,
    Load,
    LoopProgram,
    Op,
    Pointwise,
    Reduction,
    Scatter,
    format_program,
)
from torchsmith.ir.ir_kinds import IRKind, ir_parts, register_ir_kind


class LoopIRVerificationError(InductorError):
    """A loop program that breaks one of the loop IR's rules (see `verify_loops`)."""


def verify_loops(program: LoopProgram) -> LoopProgram:
    """Check `program` against the loop IR's rules and return it; raise `LoopIRVerificationError`
    naming the first broken rule, the buffer and the program.

    >>> verify_loops(lower(prims_graph))   # doctest: +SKIP
    """
    dtypes, extents = {}, {}
    for b in program.inputs:
        _define(program, dtypes, b.name, b.layout.dtype)
        extents[b.name] = _extent(b.layout)
    for buffer in program.buffers:
        if isinstance(buffer, ExternCall):
            for view in buffer.args:
                _check_read(program, dtypes, buffer.name, view.buffer, None)
        else:
            _check_body(program, dtypes, extents, buffer)
        _define(program, dtypes, buffer.name, buffer.layout.dtype)
        extents[buffer.name] = _extent(buffer.layout)
    for view in program.outputs:
        _check_read(program, dtypes, "the outputs", view.buffer, None)
    return program


def verify_step(old_state, new_state, pipeline: str, step: str) -> None:
    """Verify the loop programs a pipeline step made (the `LoopProgram` fields of `new_state` that
    are not those of `old_state`), naming the step in the error: how TORCHSMITH_VERIFY_LOOPS=1 checks
    inductor's loop IR alone (TORCHSMITH_VERIFY=1 has the pass runner verify every IR)."""
    before = {name: value for name, value in ir_parts(old_state)}
    for name, value in ir_parts(new_state):
        if isinstance(value, LoopProgram) and before.get(name) is not value:
            try:
                verify_loops(value)
            except LoopIRVerificationError as error:
                error.add_note(f"found by the verifier after step {step!r} of the {pipeline} pipeline")
                raise


def register_loop_ir_kind() -> None:
    """Let the pass runner verify and dump `LoopProgram`s between pipeline steps."""
    register_ir_kind(LoopProgram, IRKind("loop IR", verify=verify_loops, format=format_program))


def _fail(program: LoopProgram, where: str, what: str) -> None:
    raise LoopIRVerificationError(
        f"loop IR of {program.name}: {where}: {what} (a lowering or loop-IR pass produced an invalid "
        "program; TORCHSMITH_DUMP_IR=DIR TORCHSMITH_DUMP_IR_STEPS=1 writes the program after every step)"
    )


def _define(program: LoopProgram, dtypes: dict, name: str, dtype) -> None:
    if name in dtypes:
        _fail(program, f"buffer {name}", "is defined twice")
    dtypes[name] = dtype


def _check_read(program: LoopProgram, dtypes: dict, reader: str, name: str, dtype) -> None:
    if name not in dtypes:
        _fail(program, reader, f"reads buffer {name}, which no input or earlier buffer defines")
    if dtype is not None and dtypes[name] != dtype:
        _fail(program, reader, f"loads {name} as {dtype}, but {name} holds {dtypes[name]}")


def _extent(layout) -> int | None:
    """The number of elements a layout's storage spans, or None when its sizes are symbolic."""
    try:
        shape, strides = [int(d) for d in layout.shape], [int(s) for s in layout.strides]
    except TypeError:
        return None
    if any(d == 0 for d in shape):
        return 0
    return 1 + sum((d - 1) * abs(s) for d, s in zip(shape, strides))


def _static(d) -> int | None:
    d = sympy.sympify(d)
    return int(d) if d.is_Integer else None


def _check_body(program: LoopProgram, dtypes: dict, extents: dict, buffer: ComputedBuffer) -> None:
    body, where = buffer.body, f"buffer {buffer.name}"
    bound = {f"i{k}" for k in range(len(body.ranges))}
    ranges = {f"i{k}": _static(d) for k, d in enumerate(body.ranges)}
    if isinstance(body, (Reduction, Scatter)):
        bound |= {f"r{k}" for k in range(len(body.reduction_ranges))}
        ranges |= {f"r{k}": _static(d) for k, d in enumerate(body.reduction_ranges)}
    if isinstance(body, Reduction) and body.reduction_type not in REDUCTION_TYPES:
        _fail(program, where, f"has reduction type {body.reduction_type!r}, not one of {REDUCTION_TYPES}")
    if isinstance(body, Pointwise) and body.value.dtype != buffer.layout.dtype:
        _fail(program, where, f"computes {body.value.dtype} values into a {buffer.layout.dtype} buffer")
    sizes = set(program.symbols)
    check = _ExprChecker(program, dtypes, where, bound, sizes, extents, ranges)
    check.expr(body.value, frozenset())
    if isinstance(body, Scatter):
        check.index(body.position, _indirect_vars(body.write), "the scatter position")


def _indirect_vars(expr) -> frozenset:
    """The indirect variables bound by the `Indirect`s on the path to the innermost body."""
    found = set()
    while isinstance(expr, Indirect):
        found.add(str(expr.var))
        expr = expr.body
    return frozenset(found)


class _ExprChecker:
    """Walks one buffer's body: reads, bound variables and load dtypes."""

    def __init__(self, program, dtypes, where, bound, sizes, extents, ranges):
        self.program, self.dtypes, self.where, self.bound, self.sizes = program, dtypes, where, bound, sizes
        self.extents, self.ranges = extents, dict(ranges)  # variable name -> static range, or None

    def expr(self, e, indirect: frozenset) -> None:
        if isinstance(e, Load):
            _check_read(self.program, self.dtypes, self.where, e.buffer, e.dtype)
            self.index(e.index, indirect, f"the load of {e.buffer}")
            self.in_bounds(e)
        elif isinstance(e, IndexValue):
            self.index(e.expr, indirect, "an index value")
        elif isinstance(e, Op):
            for arg in e.args:
                self.expr(arg, indirect)
        elif isinstance(e, Indirect):
            self.expr(e.value, indirect)
            outer = self.ranges.get(str(e.var))
            self.ranges[str(e.var)] = _static(e.size)
            self.expr(e.body, indirect | {str(e.var)})
            self.ranges[str(e.var)] = outer
        elif not isinstance(e, Constant):
            _fail(self.program, self.where, f"holds {type(e).__name__} {e!r}, not a loop-IR expression")

    def index(self, index, indirect: frozenset, what: str) -> None:
        for symbol in sympy.sympify(index).free_symbols:
            name = str(symbol)
            if name in self.bound or name in indirect or name in self.sizes:
                continue
            loops = ", ".join(sorted(self.bound)) or "none"
            sizes = ", ".join(sorted(self.sizes)) or "none"
            _fail(
                self.program, self.where,
                f"{what} uses {name} ({index}), which no loop of this buffer binds (loops: {loops}; "
                f"size symbols: {sizes})",
            )  # fmt: skip

    def in_bounds(self, load: Load) -> None:
        """An affine index over static ranges reaches only elements of the storage it reads."""
        extent = self.extents.get(load.buffer)
        index = sympy.expand(sympy.sympify(load.index))
        if extent is None:
            return
        low = high = 0
        const, terms = index.as_coeff_add()
        if not const.is_Integer:
            return
        for term in terms:
            coeff, rest = term.as_coeff_Mul()
            top = self.ranges.get(str(rest)) if rest.is_Symbol else None
            if not coeff.is_Integer or top is None or top == 0:
                return
            span = int(coeff) * (top - 1)
            low, high = low + min(span, 0), high + max(span, 0)
        low, high = low + int(const), high + int(const)
        if low < 0 or high >= max(extent, 1):
            _fail(
                self.program, self.where,
                f"the load of {load.buffer} at {load.index} reaches elements {low}..{high}, outside its "
                f"storage of {extent} elements",
            )  # fmt: skip
