"""Pointwise Triton kernels: a group of pointwise buffers over the same number of elements.

1-D blocks over the flattened iteration space by default; 2-D tiles when a load walks its tensor
transposed (stride 1 along an outer dim, not along the last), so that both the load and the store
touch memory contiguously within a tile. A tile spans `y`, the dim the transposed load steps by 1
along, and `x`, the last dims (those every access walks as one flat dim); the other dims are
`outer`: one value a program, decoded from the program id (`zindex`). An NHWC -> NCHW output
walked as (n c h, w) tiles would read a sector per element; tiles of (n | c, h w) read and write
contiguously. Every access is masked: the last block may run past the end.
"""

import sympy

from torchsmith.inductor.errors import CodegenError
from torchsmith.inductor.loop_ir.program import ComputedBuffer, LoopProgram, index_vars, loads
from torchsmith.inductor.triton.group import drop_unit_vars, resolve_group
from torchsmith.inductor.triton.index import Axis, kernel_symbol, product, to_kernel_space, triton_index
from torchsmith.inductor.triton.writer import (
    TritonBodyWriter,
    TritonKernelSpec,
    in_kernel_space,
    next_power_of_2,
)
from torchsmith.ir.codegen_text import python_comment

POINTWISE_CONFIGS = ((512, 4), (2048, 8))  # (XBLOCK, num_warps)
TILE_CONFIGS = ((32, 32, 4), (64, 64, 8), (16, 128, 4))  # (YBLOCK, XBLOCK, num_warps)
# A y dim shorter than this would leave most rows of a tile masked: its tiles take the leading dims.
MIN_TILE_Y = 16


def live_ranges(buffer: ComputedBuffer) -> tuple[tuple, tuple]:
    """The buffer's loop variables and ranges without the size-1 dims (those only ever take 0)."""
    units = drop_unit_vars(buffer)
    pairs = [
        (v, r) for v, r in zip(index_vars(len(buffer.body.ranges)), buffer.body.ranges) if v not in units
    ]
    return tuple(v for v, _ in pairs), tuple(r for _, r in pairs)


def _transposed(indices: list, variables: tuple) -> bool:
    """Whether some access (a load's or a store's index) steps by 1 along an outer variable but not
    along the last one: a layout change, read or written across the loops' innermost order."""
    if len(variables) < 2:
        return False
    for index in indices:
        index = sympy.expand(sympy.sympify(index))
        last = index.coeff(variables[-1], 1)
        if last in (0, 1):
            continue
        if any(index.coeff(v, 1) == 1 for v in variables[:-1]):
            return True
    return False


def _linear_coefficients(index, variables: tuple) -> dict | None:
    """Each variable's coefficient in `index`, or None when `index` is not linear in them (a `//`
    or `%` of a variable)."""
    index = sympy.expand(sympy.sympify(index))
    coefficients = {v: index.coeff(v, 1) for v in variables}
    rest = sympy.expand(index - sum((c * v for v, c in coefficients.items()), sympy.Integer(0)))
    own = set(variables)
    if rest.free_symbols & own or any(c.free_symbols & own for c in coefficients.values()):
        return None
    return coefficients


def tile_axes(variables: tuple, ranges: tuple, load_indices: list, store_indices: list):
    """Positions of the (outer, y, x) variables of a tiled kernel. x: the last variable and the ones
    before it that every access walks as one flat dim with it; y: a variable some access steps by 1
    along (a load read across the loops' order, or a store written across it); outer: the rest.
    With a non-linear index or a short y, y is every variable before x (a tile of rows of the
    flattened leading dims) and nothing is outer."""
    last = len(variables) - 1
    fallback = ((), tuple(range(last)), (last,))
    accesses = [_linear_coefficients(i, variables) for i in (*load_indices, *store_indices)]
    if any(a is None for a in accesses):
        return fallback

    def flat_with_next(k: int) -> bool:  # every access steps over variable k+1's range per step of k
        return all(sympy.expand(a[variables[k]] - a[variables[k + 1]] * ranges[k + 1]) == 0 for a in accesses)

    first_x = last
    while first_x > 0 and flat_with_next(first_x - 1):
        first_x -= 1
    y = next((k for k in range(first_x) if any(a[variables[k]] == 1 for a in accesses)), None)
    if y is None or (sympy.sympify(ranges[y]).is_Integer and int(ranges[y]) < MIN_TILE_Y):
        return fallback
    outer = tuple(k for k in range(first_x) if k != y)
    return outer, (y,), tuple(range(first_x, last + 1))


def _block_cap(numel) -> int | None:
    numel = sympy.sympify(numel)
    return max(16, next_power_of_2(int(numel))) if numel.is_Integer else None


def _store_index(buffer: ComputedBuffer):
    """Where element (i0, i1, ...) of `buffer` lives, over its live loop variables."""
    strides = buffer.layout.strides
    store = sum((v * s for v, s in zip(index_vars(len(strides)), strides)), sympy.Integer(0))
    return sympy.sympify(store).xreplace(drop_unit_vars(buffer))


def emit_pointwise(
    name: str, group: tuple[ComputedBuffer, ...], program: LoopProgram, stored: set[str], redirects=None
) -> tuple[TritonKernelSpec, str]:
    """The Triton kernel computing the pointwise `group`, storing the members in `stored`; and with
    `redirects` (`{member name: [FoldedCopy, ...]}`, triton.folded_copy), doing those index_copy
    calls too: each stores its source (the member itself, or what it loads over the member's
    elements) into its target, at the positions its index tensor names."""
    redirects = redirects or {}
    folds = [fold for member_folds in redirects.values() for fold in member_folds]
    resolved = resolve_group(group, shared=0)
    shapes = [live_ranges(b) for b in group]
    numel = product(shapes[0][1])
    for buffer, (_, ranges) in zip(group, shapes):
        if sympy.expand(product(ranges) - numel) != 0:
            raise CodegenError(
                f"pointwise group {[b.name for b in group]}: {buffer.name} runs over {product(ranges)} "
                f"elements, the group over {numel}; one kernel needs one iteration space"
            )
    all_loads = [ld for b in group for ld in loads(resolved[b.name])]
    same_shape = all(s == shapes[0] for s in shapes)
    stores = [_store_index(b) for b in group if b.name in stored]
    tiled = same_shape and _transposed([ld.index for ld in all_loads] + stores, shapes[0][0])
    if tiled and redirects:
        raise CodegenError(f"pointwise group {[b.name for b in group]}: a folded copy needs a 1-d kernel")
    writes = tuple(b.name for b in group if b.name in stored) + tuple(f.target.buffer for f in folds)
    members = {b.name for b in group}
    extra = [name for f in folds for name in f.reads(members)]
    reads = tuple(dict.fromkeys([*(ld.buffer for ld in all_loads if ld.buffer not in members), *extra]))
    pointer_of = {n: f"out_{i}" for i, n in enumerate(writes)} | {n: f"in_{i}" for i, n in enumerate(reads)}
    params = [pointer_of[n] for n in writes + reads] + list(program.symbols)
    x = kernel_symbol("xindex")
    if tiled:
        variables, ranges = shapes[0]
        outer, ys, xs = tile_axes(variables, ranges, [ld.index for ld in all_loads], stores)
        pick = lambda positions: (tuple(variables[k] for k in positions), tuple(ranges[k] for k in positions))  # noqa: E731
        tile_of = {"z": pick(outer), "y": pick(ys), "x": pick(xs)}
        znumel, ynumel, xnumel = (product(tile_of[a][1]) for a in "zyx")
        numels = (znumel, ynumel, xnumel) if outer else (ynumel, xnumel)
        params += ["YBLOCK: tl.constexpr", "XBLOCK: tl.constexpr"]
        lines = [
            "@triton.jit",
            f"def {name}({', '.join(params)}):",
            f"    ynumel = {triton_index(ynumel)}",
            f"    xnumel = {triton_index(xnumel)}",
            "    pid = tl.program_id(0)",
            "    xtiles = (xnumel + XBLOCK - 1) // XBLOCK",
        ]
        if outer:  # one outer index a program: the grid is exact along it, no mask
            lines += [
                "    tiles = xtiles * ((ynumel + YBLOCK - 1) // YBLOCK)",
                "    zindex = pid // tiles",
                "    pid = pid % tiles",
            ]
        lines += [
            "    yindex = (pid // xtiles) * YBLOCK + tl.arange(0, YBLOCK)[:, None]",
            "    xindex = (pid % xtiles) * XBLOCK + tl.arange(0, XBLOCK)[None, :]",
            "    mask = (yindex < ynumel) & (xindex < xnumel)",
        ]
        mask, zero, rank = "mask", "0 * (yindex + xindex)", 2
        cap_y, cap_x = _block_cap(ynumel), _block_cap(xnumel)
        configs = tuple(
            dict.fromkeys(
                (("YBLOCK", min(yb, cap_y or yb)), ("XBLOCK", min(xb, cap_x or xb)), ("num_warps", w))
                for yb, xb, w in TILE_CONFIGS
            )
        )
    else:
        numels = (numel,)
        params += ["XBLOCK: tl.constexpr"]
        lines = [
            "@triton.jit",
            f"def {name}({', '.join(params)}):",
            f"    xnumel = {triton_index(numel)}",
            "    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)",
            "    xmask = xindex < xnumel",
        ]
        mask, zero, rank = "xmask", "0 * xindex", 1
        cap = _block_cap(numel)
        configs = tuple(
            dict.fromkeys((("XBLOCK", min(xb, cap or xb)), ("num_warps", w)) for xb, w in POINTWISE_CONFIGS)
        )
    # One writer for all members: in kernel space, equal expressions are equal work.
    writer = TritonBodyWriter(pointer_of, lambda used: mask, zero, rank, lines, "    ", [0])
    for buffer, (variables, ranges) in zip(group, shapes):
        if tiled:
            axes = tuple(Axis(kernel_symbol(f"{a}index"), *tile_of[a]) for a in "zyx" if tile_of[a][0])
        else:
            axes = (Axis(x, variables, ranges),)
        lines.append(f"    # {python_comment(buffer.origin or buffer.name)}")
        value = writer.value(in_kernel_space(resolved[buffer.name], axes))
        if buffer.name in stored:
            store = to_kernel_space(_store_index(buffer), axes)
            writer.store(pointer_of[buffer.name], store, value, buffer.layout.dtype, mask)
        for fold in redirects.get(buffer.name, ()):
            stored_value = value
            if fold.source.buffer != buffer.name:  # a copy carried along: the same element of its source
                stored_value = writer.value(in_kernel_space(fold.source_load(buffer), axes))
            position, store = fold.store_index(buffer)
            position = writer.value(in_kernel_space(position, axes))
            writer.indirect_store(
                pointer_of[fold.target.buffer],
                to_kernel_space(store, axes),
                position,
                fold.target,
                fold.dim,
                stored_value,
                mask,
            )
    kind = "tiled" if tiled else "pointwise"
    return TritonKernelSpec(name, kind, writes, reads, numels, configs), "\n".join(lines)
