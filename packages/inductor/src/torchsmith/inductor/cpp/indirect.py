"""C++ for `Indirect` (loads at an index read from data: gather, index, embedding) and the run-time
check of those indices.

An indirect index goes through `ts::checked_index(value, size, site)`: a value outside `[0, size)`
is recorded with its site (the number k of the index variable `x<k>`; the first bad one wins) and
replaced by 0, so a kernel never reads outside a buffer. After a call's kernels the wrapper calls the
check `index_check(library, program)` returns, which raises what eager PyTorch raises for that op
(IndexError for index/embedding/index_select, RuntimeError for gather), with a note naming the node.

Hooks for the code generators (cpp_expr.BodyWriter): `emit_indirect(writer, expr)` writes the
statements of one `Indirect` and returns the name of its value; `INDIRECT_PRELUDE` goes into every
translation unit that `uses_indirect`.
"""

import ctypes

import sympy

from torchsmith.inductor.loop_ir.program import ComputedBuffer, Indirect, substitute

INDIRECT_PRELUDE = r"""
namespace ts {
// The first out-of-range indirect index met since the last check: {found, value, size, site}.
// `inline`: one instance per library even when the translation unit is compiled in parts.
inline int64_t bad_index[4] = {0, 0, 0, 0};

inline int64_t checked_index(int64_t i, int64_t size, int64_t site) {
  if (__builtin_expect(i < 0 || i >= size, 0)) {
    if (!__atomic_exchange_n(&bad_index[0], 1, __ATOMIC_RELAXED)) {
      bad_index[1] = i;
      bad_index[2] = size;
      bad_index[3] = site;
    }
    return 0;
  }
  return i;
}

// A write position read from data (scatter, index_put): an index outside [0, size) is recorded as
// checked_index records it and gives -1, so the kernel skips that write instead of making it.
inline int64_t checked_position(int64_t i, int64_t size, int64_t site) {
  if (__builtin_expect(i < 0 || i >= size, 0)) {
    checked_index(i, size, site);
    return -1;
  }
  return i;
}
}  // namespace ts

// Weak: each part of a split translation unit defines it; the linker keeps one.
extern "C" __attribute__((weak)) int64_t ts_take_bad_index(int64_t* out) {
  int64_t found = __atomic_exchange_n(&ts::bad_index[0], 0, __ATOMIC_RELAXED);
  out[0] = ts::bad_index[1];
  out[1] = ts::bad_index[2];
  out[2] = ts::bad_index[3];
  return found;
}
"""


# The prelude may be repeated in every part of a translation unit that cpp_build compiles in parts
# (inline variable, weak accessor): generate_cpp reads this to allow the split.
SPLIT_SAFE = True


def _site(var: sympy.Symbol) -> int:
    """The number k of the index variable `x<k>` (what a failed check reports)."""
    return int(var.name[1:]) if var.name[1:].isdigit() else -1


def emit_indirect(writer, expr: Indirect) -> str:
    """Write the checked index of `expr` as a fresh `int64_t` temporary, then its body with the index
    variable renamed to that temporary; returns the C++ name holding the body's value."""
    from torchsmith.inductor.cpp.expr import cpp_index  # here: cpp_expr imports this module

    value = writer.value(expr.value)
    name = f"t{writer.counter[0]}"
    writer.counter[0] += 1
    statement = (
        f"int64_t {name} = ts::checked_index(static_cast<int64_t>({value}), "
        f"{cpp_index(expr.size)}, {_site(expr.var)});"
    )
    # An index the inner loop does not change is checked once, before that loop, with its load.
    invariant = getattr(writer, "_invariant", None)
    if invariant is not None and getattr(writer, "hoisted", None) is not None and invariant(expr.value):
        writer.hoisted.append(f"{writer.hoisted_indent}{statement}")
        writer.hoisted_temps.add(name)
    else:
        writer.lines.append(f"{writer.indent}{statement}")
    # A temporary per emission: two Indirects of one kernel never share a C++ name.
    renamed = substitute(expr.body, {expr.var: sympy.Symbol(name, integer=True, nonnegative=True)})
    return writer.value(renamed)


def uses_indirect(program) -> bool:
    """Whether any computed buffer of `program` loads through an `Indirect` (then its translation
    unit needs `INDIRECT_PRELUDE`)."""

    def walk(expr) -> bool:
        if isinstance(expr, Indirect):
            return True
        return any(walk(a) for a in getattr(expr, "args", ()))

    return any(walk(b.body.value) for b in program.buffers if isinstance(b, ComputedBuffer))


def index_error(op: str, value: int, size: int, node: str) -> Exception:
    """The exception eager PyTorch raises for index `value` outside a dim of `size` in `op`, with a
    note naming the compiled node."""
    if op in ("prims.gather", "prims.scatter", "prims.scatter_add"):
        error: Exception = RuntimeError(f"index {value} is out of bounds for dimension with size {size}")
    elif op in ("prims.index", "prims.index_put"):
        error = IndexError(f"index {value} is out of bounds for dimension with size {size}")
    else:  # embedding and index_select say it this way in eager
        error = IndexError(f"index out of range in self (index {value}, size {size})")
    error.add_note(f"raised by the compiled kernel of {node}" if node else "raised by a compiled kernel")
    return error


def index_check(library, program=None):
    """A function raising the eager exception (see `index_error`) if a kernel of `library` met an
    out-of-range indirect index since its last call, clearing the record; None when `library` has no
    indirect loads. `program` (the LoopProgram, or just its name) names the node in the note."""
    take = getattr(library, "ts_take_bad_index", None)
    if take is None:
        return None
    take.restype = ctypes.c_int64
    take.argtypes = [ctypes.c_void_p]
    out = (ctypes.c_int64 * 3)()
    sites = {int(var[1:]): (op, node) for var, op, node in getattr(program, "indirect_sites", ())}
    graph = getattr(program, "name", program) or ""

    def check() -> None:
        if take(out):
            op, node = sites.get(out[2], ("", f"graph {graph}" if graph else ""))
            raise index_error(op, out[0], out[1], node)

    return check
