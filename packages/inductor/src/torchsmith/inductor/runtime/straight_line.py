"""A compiled graph without size symbols run as one generated Python function.

The wrapper's steps are closures run in a loop, each unpacking its allocations, building its kernel's
argument list and dropping dead buffers in loops of its own. Without size symbols every slot, shape,
stride and dtype is a constant when the graph is built, so the steps can be written out once as
straight-line code over the wrapper's slot list `v`:

    def run(v, b, sv, scratch):
        v[5] = empty_strided(s0, t0, dtype=d0)
        call(a0, v[0], v[5])                      # a C++ kernel (native_calls; else ctypes:
                                                  #   k0(v[0].data_ptr(), v[5].data_ptr()))
        v[6] = v[5].as_strided(s1, t1, 0)         # a buffer in a dead one's storage
        r = k1(v[6], g0(v))                       # a library matmul (g0: a view of an argument)
        v[7] = r if r.stride() == t2 else relayout(r, s2, t2, d2)
        r = k2(v[7], v[1], c3, c4)                # a library call with constant parameters
        v[8] = r if r.stride() == t5 and r.shape == s5 else check(r)
        v[5] = v[6] = None
        e0(v, b, sv, scratch)                     # any other step, as its closure
        ...

which does what the closures do, without their per-step calls and loops. Every name in the source
is made here (`k0`, `s1`, `e0`): nothing of the program's is pasted into it.
"""

from dataclasses import dataclass

import torch

from torchsmith.inductor.errors import RuntimeCallError
from torchsmith.inductor.runtime import native_calls


@dataclass(frozen=True)
class KernelStep:
    """A C++ kernel: its allocations `(slot, donor slot or -1, shape, strides, dtype, leaves, same)`
    (as the wrapper plans them), the slots whose addresses it takes, the slots freed after it."""

    fn: object
    allocs: tuple
    arg_slots: tuple[int, ...]
    drop: tuple[int, ...]


@dataclass(frozen=True)
class MatmulStep:
    """A library matmul: `fn` of its arguments `(slot, reader)` (the slot's tensor where `reader` is
    None, else `reader(values)`, a view of it) into `out`, put in the planned strides by
    `relayout(result, shape, strides, dtype)` where the library chose others."""

    fn: object
    args: tuple[tuple[int, object], ...]
    out: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: torch.dtype
    relayout: object
    drop: tuple[int, ...]


@dataclass(frozen=True)
class LibraryStep:
    """A library call whose result is always a new tensor of the call's dtype (a convolution):
    `fn` of its parameters, each `(True, (slot, reader))` for a tensor argument (read as in
    `MatmulStep`) or `(False, value)` for a constant, into `out`; a result of other sizes or strides
    than `shape` and `strides` goes through `check(result)`, which copies it into the planned
    layout or says what is wrong."""

    fn: object
    params: tuple[tuple[bool, object], ...]
    out: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    check: object
    drop: tuple[int, ...]


@dataclass(frozen=True)
class ClosureStep:
    """Any other step: its closure `run(values, bindings, symbol_values, scratch)`."""

    run: object


def straight_line(steps: list, name: str = "graph"):
    """The function `run(values, bindings, symbol_values, scratch)` doing `steps` in order."""
    namespace: dict = {"empty_strided": torch.empty_strided}
    lines = ["def run(v, b, sv, scratch):"]

    def constant(prefix: str, value) -> str:
        key = f"{prefix}{len(namespace)}"
        namespace[key] = value
        return key

    for step in steps:
        if isinstance(step, KernelStep):
            for slot, donor, shape, strides, dtype, leaves, same in step.allocs:
                if donor < 0:
                    s, t, d = constant("s", shape), constant("t", strides), constant("d", dtype)
                    lines.append(f"    v[{slot}] = empty_strided({s}, {t}, dtype={d})")
                    continue
                if same:
                    value = f"v[{donor}]"
                else:
                    value = f"v[{donor}].as_strided({constant('s', shape)}, {constant('t', strides)}, 0)"
                lines.append(f"    v[{slot}] = {value}{'.detach()' if leaves else ''}")
            call = native_calls.caller(len(step.arg_slots))
            if call is not None:
                args = "".join(f", v[{s}]" for s in step.arg_slots)
                address = constant("a", native_calls.address(step.fn))
                lines.append(f"    {constant('call', call)}({address}{args})")
            else:
                args = ", ".join(f"v[{s}].data_ptr()" for s in step.arg_slots)
                lines.append(f"    {constant('k', step.fn)}({args})")
            drop = step.drop
        elif isinstance(step, MatmulStep):
            args = ", ".join(_read(slot, read, constant) for slot, read in step.args)
            s, t, d = constant("s", step.shape), constant("t", step.strides), constant("d", step.dtype)
            lines.append(f"    r = {constant('k', step.fn)}({args})")
            relayout = f"{constant('f', step.relayout)}(r, {s}, {t}, {d})"
            lines.append(f"    v[{step.out}] = r if r.stride() == {t} else {relayout}")
            drop = step.drop
        elif isinstance(step, LibraryStep):
            args = ", ".join(_read(*arg, constant) if is_tensor else constant("c", arg)
                             for is_tensor, arg in step.params)
            s, t = constant("s", step.shape), constant("t", step.strides)
            lines.append(f"    r = {constant('k', step.fn)}({args})")
            check = constant("f", step.check)
            lines.append(f"    v[{step.out}] = r if r.stride() == {t} and r.shape == {s} else {check}(r)")
            drop = step.drop
        elif isinstance(step, ClosureStep):
            lines.append(f"    {constant('e', step.run)}(v, b, sv, scratch)")
            continue
        else:
            raise RuntimeCallError(f"{name}: no straight-line form for step {step!r}")
        if drop:
            lines.append("    " + " = ".join(f"v[{s}]" for s in drop) + " = None")
    if len(lines) == 1:
        lines.append("    pass")
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<torchsmith graph {name}>", "exec"), namespace)  # noqa: S102 - made here
    run = namespace["run"]
    run.source = source
    return run


def _read(slot: int, read, constant) -> str:
    """The source reading an argument: the slot's tensor, or `read(v)` (a view of it)."""
    return f"v[{slot}]" if read is None else f"{constant('g', read)}(v)"
