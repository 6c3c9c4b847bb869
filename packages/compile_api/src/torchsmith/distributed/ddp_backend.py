"""The backend capture calls: under DDP, each graph is cut at the gradient buckets and compiled in pieces.

`BucketSplitBackend` sits between capture and compile_api's guarded backend. A graph compiled while a
`DistributedDataParallel` forward runs (DDP marks itself active around its module's call, for
`DDP(torchsmith.compile(model))` and `torchsmith.compile(DDP(model))` alike) is cut where
`plan.plan_split` says, and each piece goes to the guarded backend on its own: each piece keeps its
own stage fallback, and its backward is a separate autograd node, so DDP's reducer sees the
gradients of a bucket, and starts its all-reduce, while the backward of earlier pieces still runs.
DDP rebuilds its buckets once, after the first backward, from the order gradients came in; a cut
planned before that is planned again with the rebuilt buckets on the next call (`PiecewiseCall`).
Until then the pieces hand their parameters' gradients over in the order the plan assumed, so the
rebuilt buckets are the planned ones and each is still completed by one piece (`GradientOrder`).
With `options={"ddp.split_at_buckets": False}`, outside DDP, or under DDP over one rank (its
all-reduces move no data, so there is nothing to overlap and the cut would only cost its boundaries),
graphs are compiled whole.
"""

import logging

import torch

from torchsmith.distributed.buckets import has_final_buckets
from torchsmith.distributed.plan import plan_split
from torchsmith.distributed.split import Piece, split_graph, unbound_symbols
from torchsmith.ir import Graph
from torchsmith.ir.events import emit

log = logging.getLogger("torchsmith.distributed")


def active_ddp_module():
    """The DistributedDataParallel whose forward is running, or None."""
    if not torch.distributed.is_available():
        return None
    from torch.nn.parallel import DistributedDataParallel

    getter = getattr(DistributedDataParallel, "_get_active_ddp_module", None)
    return getter() if getter is not None else None


def ranks_of(ddp) -> int | None:
    """How many ranks `ddp` reduces gradients over (None where it has no process group to ask)."""
    group = getattr(ddp, "process_group", None)
    return group.size() if group is not None else None


class BucketSplitBackend:
    """Called by capture as `backend(graph, example_inputs)`; see the module docstring."""

    def __init__(self, backend, options: dict):
        self.backend = backend
        self.enabled = options.get("ddp.split_at_buckets", True)

    def __call__(self, graph: Graph, example_inputs):
        ddp = active_ddp_module() if self.enabled else None
        if ddp is None:
            return self.backend(graph, example_inputs)
        if ranks_of(ddp) == 1:
            log.info("graph %s compiled whole: DDP runs over one rank, no all-reduce to overlap", graph.name)
            return self.backend(graph, example_inputs)
        cut = cut_at_buckets(graph, example_inputs, ddp)
        if cut is None:
            return self.backend(graph, example_inputs)
        pieces, ready_order = cut
        return PiecewiseCall(self.backend, graph, pieces, planned_final=has_final_buckets(ddp),
                             ready_order=ready_order)


def cut_at_buckets(graph: Graph, example_inputs, ddp) -> tuple[list[Piece], tuple[str, ...]] | None:
    """`graph` cut at `ddp`'s buckets, and the order the cut assumes the parameters' gradients
    become ready in (`SplitPlan.ready_order`); None where it is compiled whole (one bucket, no safe
    cut, a piece that could not bind its sizes, a failed plan: each logged)."""
    try:
        plan = plan_split(graph, example_inputs, ddp)
        pieces = split_graph(graph, list(plan.cuts)) if plan.cuts else []
    except Exception as error:  # the whole graph is still right, only without the overlap
        log.warning("graph %s compiled whole, not cut at its DDP buckets: planning the cut failed with "
                    "%s: %s", graph.name, type(error).__name__, error)
        return None
    if not plan.cuts:
        log.info("%s: compiled whole", plan.describe(graph))
        return None
    unbound = [(p.graph.name, sorted(unbound_symbols(p))) for p in pieces if unbound_symbols(p)]
    if unbound:
        log.info("graph %s compiled whole, not at its DDP buckets: piece %s uses sizes %s that its "
                 "inputs do not bind", graph.name, unbound[0][0], ", ".join(unbound[0][1]))
        return None
    log.info("%s", plan.describe(graph))
    emit("compile_api", "ddp_split", graph=graph, cuts=plan.cuts, buckets=plan.buckets,
         pieces=[p.graph for p in pieces])
    return pieces, plan.ready_order


class PiecewiseCall:
    """Runs the pieces of one graph in order, each compiled by the backend on its first call (with
    that call's values, which are the graph's example inputs and what earlier pieces made of them).

    A cut planned before DDP's buckets were final (`planned_final=False`: predicted from the forward
    order) is planned again on the first call after DDP rebuilt them from the order the pieces'
    gradients came in, and the graph is cut anew where the buckets moved to other pieces. Until
    then each call's gradients reach the parameters in `ready_order` (`GradientOrder`), which DDP
    records and rebuilds the buckets from: the rebuilt buckets are those planned, and the cut stays."""

    def __init__(self, backend, graph: Graph, pieces: list[Piece], planned_final: bool = True,
                 ready_order: tuple[str, ...] = ()):
        self.backend, self.graph = backend, graph
        self.input_names = [v.name for v in graph.inputs]
        self.output_names = [v.name for v in graph.outputs]
        self.planned_final = planned_final
        self.ready_order = ready_order
        self.inputs_guarded = False  # set by assume_example_signature
        self._use(pieces)

    def _use(self, pieces: list[Piece]) -> None:
        self.pieces = pieces
        self.compiled = [None] * len(pieces)
        self.direct = [None] * len(pieces)  # per piece: (AotFunction, call skipping its lookup)
        made_by = dict.fromkeys(self.input_names, -1)
        self.producers = []  # per piece: the earlier pieces whose outputs it reads
        for k, piece in enumerate(pieces):
            self.producers.append(tuple(sorted({made_by[n] for n in piece.reads} - {-1})))
            made_by.update(dict.fromkeys(piece.writes, k))
        self.gradient_order = GradientOrder.of(pieces, self.ready_order)

    def assume_example_signature(self) -> None:
        """The caller (capture, whose guards check every input's signature before each call)
        promises that every later call passes inputs of the example inputs' signature. A piece whose
        inputs are the graph's inputs, or outputs of earlier pieces that ran their one compiled
        program in this call (their layouts are that program's), then runs its own compiled program
        without looking up its signature. Graphs with size symbols are left alone."""
        if not any(v.type.free_symbols for v in self.graph.inputs):
            self.inputs_guarded = True

    def __call__(self, *args):
        if not self.planned_final:
            self._cut_at_final_buckets(args)
        env = dict(zip(self.input_names, args))
        # DDP builds its final buckets from the order this call's gradients come in
        ordered = not self.planned_final and torch.is_grad_enabled()
        # per piece: whether it ran its one compiled program in this call (known output layouts)
        compiled_ran = [False] * len(self.pieces)
        for k, piece in enumerate(self.pieces):
            if ordered:
                self.gradient_order.pass_through(k, env)
            piece_args = [env[name] for name in piece.reads]
            run = self.compiled[k]
            known = self.inputs_guarded and all(compiled_ran[j] for j in self.producers[k])
            if run is None:
                # compiled for these inputs: later calls match them when the same holds (`known`)
                run = self.compiled[k] = self.backend(piece.graph, piece_args)
                self.direct[k] = _static_aot(run) if known else None
            if known and self.direct[k] is not None:
                function, call = self.direct[k]
                outputs = run.run_via(call, piece_args)
                compiled_ran[k] = run.eager is None and function.last_run_compiled
            else:
                outputs = run(*piece_args)
            env.update(zip(piece.writes, outputs))
        if ordered:
            env.update(zip(self.input_names, args))  # a graph output that is an input is that input
        return [env[name] for name in self.output_names]

    def _cut_at_final_buckets(self, args) -> None:
        ddp = active_ddp_module()
        if ddp is None or not has_final_buckets(ddp):
            return
        self.planned_final = True
        cut = cut_at_buckets(self.graph, list(args), ddp)
        if cut is None:
            pieces = [Piece(self.graph, tuple(self.input_names), tuple(self.output_names))]
        else:
            pieces = cut[0]
        if [p.graph.nodes for p in pieces] == [p.graph.nodes for p in self.pieces]:
            return
        log.info("graph %s cut again at DDP's rebuilt buckets: %d piece(s), were %d", self.graph.name,
                 len(pieces), len(self.pieces))
        emit("compile_api", "ddp_recut", graph=self.graph, pieces=[p.graph for p in pieces])
        self._use(pieces)


class GradientOrder:
    """Hands each call's parameter gradients to the parameters in a chosen order.

    The gradients a piece's backward returns all become ready at once, and autograd accumulates
    them in the order its ready queue pops nodes of equal priority: no order DDP's bucket rebuild
    should depend on (it filled a bucket with the weight a piece returned first, so every later
    bucket took a parameter of the next piece and waited for that piece's backward). So, before
    each piece, the parameters it reads first are passed through a view each, made last for the
    gradient wanted first: autograd runs ready nodes latest-made first, and each view's backward
    hands its gradient on to the parameter at once. Views of a whole parameter cost no copy, and
    they are made only for the calls whose backward DDP records the order of."""

    def __init__(self, before: tuple[tuple[str, ...], ...]):
        self.before = before  # per piece: the parameters to pass through a view, in making order

    @staticmethod
    def of(pieces: list[Piece], ready_order: tuple[str, ...]) -> "GradientOrder":
        """The order for `pieces`: each parameter in `ready_order` (gradient wanted first, first)
        gets its view before the first piece that reads it."""
        first_reader: dict[str, int] = {}
        for k, piece in enumerate(pieces):
            for name in piece.reads:
                first_reader.setdefault(name, k)
        before: list[list[str]] = [[] for _ in pieces]
        for name in reversed(ready_order):
            if name in first_reader:
                before[first_reader[name]].append(name)
        return GradientOrder(tuple(map(tuple, before)))

    def pass_through(self, k: int, env: dict) -> None:
        """Replace the parameters piece `k` reads first in `env` by views made in order."""
        for name in self.before[k]:
            x = env[name]
            if isinstance(x, torch.Tensor) and x.requires_grad:
                env[name] = x.view_as(x)


def _static_aot(run):
    """(AotFunction, its one program of static sizes) behind a piece's compiled callable, when the
    backend made it with the built-in AOT runtime and a fallback wrapper (`RerunnableCall`), else
    None: only then can a call skip the signature lookup and still fall back to eager on failure."""
    from torchsmith.autograd_aot.runtime import AotFunction
    from torchsmith.fallback import RerunnableCall

    if not isinstance(run, RerunnableCall) or not isinstance(run.compiled, AotFunction):
        return None
    function, program = run.compiled, run.compiled.static_program()
    if program is None:
        return None
    function.assume_forward_inputs(program)
    return function, lambda *args: function.run_assumed(program, args)
