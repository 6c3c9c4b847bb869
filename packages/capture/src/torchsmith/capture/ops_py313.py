"""Opcodes CPython 3.13 added: truth tests, f-string pieces and function attributes.

The fused loads and stores (`LOAD_FAST_LOAD_FAST`, `STORE_FAST_LOAD_FAST`, `STORE_FAST_STORE_FAST`)
and `CALL_KW` are split or folded in instructions.py, so no handler sees them.
"""

from torchsmith.capture.errors import Unsupported
from torchsmith.capture.variables import CellVar, ConstVar

_CONVERSIONS = {1: str, 2: repr, 3: ascii}
_JUMPS_ON_TRUTH = frozenset({"POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE"})


class Py313Ops:
    """Mixin of the Tracer."""

    def op_TO_BOOL(self, frame, ins):
        # 3.13's conditional jumps and UNARY_NOT take exact bools. A value whose truth the capture
        # cannot decide (a tensor) stays as is when a jump follows: the jump breaks the graph with
        # both branches resumed after it. Anywhere else the break is here, so the resumed bytecode
        # runs this TO_BOOL natively.
        value = frame.stack[-1]
        try:
            truth = self.truth(value)
        except Unsupported:
            following = frame.instructions[frame.ip] if frame.ip < len(frame.instructions) else None
            if following is not None and following.opname in _JUMPS_ON_TRUTH:
                return
            raise
        frame.stack[-1] = ConstVar(truth)

    def op_CONVERT_VALUE(self, frame, ins):
        value = frame.pop()
        if not isinstance(value, ConstVar):
            raise Unsupported(f"formatting {value.describe()} into a string")
        frame.push(ConstVar(_CONVERSIONS[ins.arg](value.value)))

    def op_FORMAT_SIMPLE(self, frame, ins):
        value = frame.pop()
        if not isinstance(value, ConstVar):
            raise Unsupported(f"formatting {value.describe()} into a string")
        frame.push(ConstVar(format(value.value, "")))

    def op_FORMAT_WITH_SPEC(self, frame, ins):
        spec = frame.pop()
        value = frame.pop()
        if not isinstance(value, ConstVar) or not isinstance(spec, ConstVar):
            raise Unsupported(f"formatting {value.describe()} into a string")
        frame.push(ConstVar(format(value.value, spec.value)))

    def op_SET_FUNCTION_ATTRIBUTE(self, frame, ins):
        func = frame.pop()
        attr = frame.pop()
        flag = ins.arg
        if flag == 0x01:
            func.defaults = tuple(attr.items)
        elif flag == 0x02:
            func.kwdefaults = dict(attr.items)
        elif flag == 0x08:
            if not all(isinstance(c, CellVar) for c in attr.items):
                raise Unsupported("closure of a nested function is not made of cells")
            func.closure = tuple(attr.items)
        elif flag != 0x04:  # annotations do not change behaviour
            raise Unsupported(f"SET_FUNCTION_ATTRIBUTE {flag}")
        frame.push(func)
