"""The normalized instruction list: one form for CPython 3.11 and 3.12 bytecode."""

import sys

import pytest

from torchsmith.capture.instructions import JUMPS, format_instructions, normalize

DROPPED = {
    "CACHE",
    "EXTENDED_ARG",
    "PRECALL",
    "RESUME",
    "NOP",
    "KW_NAMES",
    "RETURN_CONST",
    "BINARY_SLICE",
    "STORE_SLICE",
    "LOAD_FAST_CHECK",
    "CALL_INTRINSIC_1",
    "JUMP_FORWARD",
    "JUMP_BACKWARD",
    "POP_JUMP_FORWARD_IF_TRUE",
    "POP_JUMP_BACKWARD_IF_FALSE",
}


def sample(x, ys, k=2, *rest, flag=None, **named):
    total = 0
    for y in ys:
        if y is None:
            continue
        total = total + y * k
    while k > 0:
        k -= 1
    s = ys[1:3]
    ys[0:1] = [1]
    squares = [i * i for i in range(3) if i]
    text = f"{x!r:>4}"
    a, *b = s
    try:
        total += 1
    except ValueError:
        total -= 1
    with open(__file__) as fh:
        fh.read(1)
    return x.sum(dim=1, keepdim=True) if flag else max(total, 0, key=abs), squares, text, a, b


def test_no_version_specific_instructions_survive():
    names = {ins.opname for ins in normalize(sample.__code__)}
    assert not names & DROPPED


def test_jump_targets_are_indices_of_real_instructions():
    instructions = normalize(sample.__code__)
    for ins in instructions:
        if ins.opname in JUMPS:
            assert 0 <= ins.target <= len(instructions)
        else:
            assert ins.target is None


def test_keyword_names_are_folded_into_call():
    calls = [ins for ins in normalize(sample.__code__) if ins.opname == "CALL"]
    assert ("dim", "keepdim") in [ins.argval for ins in calls]
    assert ("key",) in [ins.argval for ins in calls]


def test_binary_ops_name_their_operator():
    ops = {ins.argval for ins in normalize(sample.__code__) if ins.opname == "BINARY_OP"}
    assert {"+", "*", "-="} <= ops


def test_load_global_and_method_forms():
    instructions = normalize(sample.__code__)
    globals_ = [ins.argval for ins in instructions if ins.opname == "LOAD_GLOBAL"]
    assert ("range", True) in globals_ and ("open", True) in globals_
    assert "sum" in [ins.argval for ins in instructions if ins.opname == "LOAD_METHOD"]


def test_for_iter_exits_past_the_loop():
    instructions = normalize(sample.__code__)
    loop = next(i for i, ins in enumerate(instructions) if ins.opname == "FOR_ITER")
    exit_ins = instructions[instructions[loop].target]
    assert exit_ins.opname != "END_FOR"
    before_exit = [ins.opname for ins in instructions[: instructions[loop].target]][-2:]
    # 3.11 ends the loop with its backward jump, 3.12 with END_FOR, 3.13 with END_FOR + POP_TOP
    assert before_exit[-1] in ("JUMP", "END_FOR") or before_exit == ["END_FOR", "POP_TOP"]


def test_try_body_has_an_exception_handler():
    instructions = normalize(sample.__code__)
    covered = [ins for ins in instructions if ins.exception is not None]
    assert covered
    for ins in covered:
        assert 0 <= ins.exception.target < len(instructions)


def test_slices_become_build_slice():
    names = [ins.opname for ins in normalize(sample.__code__)]
    assert "BUILD_SLICE" in names and "STORE_SUBSCR" in names


def test_comprehension_shape_per_version():
    instructions = normalize(sample.__code__)
    names = [ins.opname for ins in instructions]
    if sys.version_info >= (3, 12):
        assert "LOAD_FAST_AND_CLEAR" in names  # PEP 709: inlined
    else:
        assert "MAKE_FUNCTION" in names


def test_listing_is_readable():
    text = format_instructions(normalize(sample.__code__))
    assert "CALL ('dim', 'keepdim')" in text


@pytest.mark.parametrize("fn", [lambda: None, lambda x: x if x else -x, lambda *a, **k: (a, k)])
def test_small_functions_end_in_return(fn):
    assert normalize(fn.__code__)[-1].opname == "RETURN_VALUE"
