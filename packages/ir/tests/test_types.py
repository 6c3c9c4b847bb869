"""IR types: text form round trip, strides as torch computes them, types of real tensors, errors."""

import pytest
import torch

from torchsmith.ir import (
    ScalarType,
    SymIntType,
    TensorType,
    TypeParseError,
    format_type,
    parse_type,
    symbol,
    type_of,
)
from torchsmith.ir.dtypes import DTYPE_BY_NAME
from torchsmith.ir.symbolic import floordiv
from torchsmith.ir.types import as_type, contiguous_strides

s0, s1 = symbol("s0"), symbol("s1")


@pytest.mark.parametrize(
    "text",
    [
        "f32[s0, 64] cpu",
        "f16[4, 8]{1, 4} cuda:0 grad",
        "bf16[s0, s1 // 2] cpu",
        "f32[max(s0, s1), 2*s0 + 1] cpu",
        "f32[4, 3]{0, 1} cpu",
        "i64[0, 3] cpu",
        "b8[] cpu",
        "f64[] meta grad",
        "c64[2] cuda",
        "sym(s0)",
        "sym(2*s0 + 1)",
        "sym(7)",
        "int",
        "float",
        "bool",
        "complex",
        "none",
    ],
)
def test_text_round_trip(text):
    t = parse_type(text)
    assert format_type(t) == text
    assert str(t) == text
    assert parse_type(format_type(t)) == t


@pytest.mark.parametrize("name", sorted(DTYPE_BY_NAME))
def test_every_dtype_round_trips(name):
    t = TensorType.make((2, s0), DTYPE_BY_NAME[name])
    assert format_type(t) == f"{name}[2, s0] cpu"
    assert parse_type(format_type(t)) == t


def test_parsed_types_have_normalized_parts():
    t = parse_type("float32[ s0 , 2*2 ]   cpu")  # torch's dtype names and loose spacing are read too
    assert t == TensorType.make((s0, 4), torch.float32)
    assert t.strides == (4, 1) and type(t.shape[1]) is int
    assert parse_type("f32[s0 * 4 // 2] cpu").shape == (2 * s0,)
    assert parse_type("sym(s0 // 1)") == SymIntType(s0)


@pytest.mark.parametrize("shape", [(2, 3, 4), (0,), (0, 3), (3, 0, 2), (5, 1, 0), (1,), (), (1, 1, 7)])
def test_contiguous_strides_match_torch(shape):
    assert contiguous_strides(shape) == torch.empty(shape).stride()
    t = TensorType.make(shape, torch.float32)
    assert t.strides == torch.empty(shape).stride()
    assert t.is_contiguous


def test_symbolic_contiguous_strides():
    assert contiguous_strides((s0, 4)) == (4, 1)
    assert contiguous_strides((s0, s1, 2)) == (2 * s1, 2, 1)
    assert contiguous_strides((3, floordiv(s0, 2))) == (floordiv(s0, 2), 1)
    t = parse_type("f32[s0, s1] cpu")
    assert t.strides == (s1, 1) and t.free_symbols == {"s0", "s1"}


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(4, 6).t(),
        lambda: torch.randn(3).expand(4, 3),
        lambda: torch.randn(1, 3).expand(0, 3),
        lambda: torch.randn(4, 1).t(),
        lambda: torch.randn(4, 6)[:, ::2],
        lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
        lambda: torch.randn(2, 3, requires_grad=True),
        lambda: torch.randn(2, 3, device="meta").transpose(0, 1),
        lambda: torch.tensor(3, dtype=torch.int64),
    ],
)
def test_type_of_real_tensors(make):
    tensor = make()
    t = TensorType.of(tensor)
    assert t.shape == tuple(tensor.shape)
    assert t.strides == tensor.stride()
    assert t.dtype == tensor.dtype and t.device == str(tensor.device)
    assert t.requires_grad == tensor.requires_grad
    # is_contiguous means "exactly the row-major strides" (what the text form may omit); torch also
    # calls a tensor contiguous when it only differs in strides of size-0 or size-1 dims
    assert t.is_contiguous == (tensor.stride() == torch.empty(tensor.shape).stride())
    assert parse_type(format_type(t)) == t
    assert type_of(tensor) == t


def test_expanded_and_transposed_text():
    assert format_type(TensorType.of(torch.randn(3).expand(4, 3))) == "f32[4, 3]{0, 1} cpu"
    assert format_type(TensorType.of(torch.randn(4, 6).t())) == "f32[6, 4]{1, 6} cpu"


def test_replace_recomputes_strides_for_a_new_shape():
    t = parse_type("f32[4, 6]{1, 4} cpu")
    assert t.replace(shape=(2, 3)).strides == (3, 1)
    assert t.replace(dtype=torch.float16).strides == (1, 4)


def test_scalar_types():
    assert type_of(3) == ScalarType("int")
    assert type_of(True) == ScalarType("bool")
    assert type_of(2.5) == ScalarType("float")
    assert type_of(1j) == ScalarType("complex")
    assert type_of(None) == ScalarType("none")
    assert ScalarType("float").python_type is float
    with pytest.raises(TypeParseError, match="unknown scalar kind 'long'"):
        ScalarType("long")
    with pytest.raises(TypeParseError, match="not a Python scalar type"):
        type_of("text")


def test_as_type_accepts_types_and_text_only():
    t = TensorType.make((2,), torch.float32)
    assert as_type(t) is t and as_type("f32[2] cpu") == t
    with pytest.raises(TypeParseError, match="expected an IR type or its text form"):
        as_type(3)


def test_strides_must_match_rank():
    with pytest.raises(TypeParseError, match="TensorType.make"):
        TensorType((2, 3), torch.float32, "cpu", (1,))


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("f33[2] cpu", "unknown dtype 'f33'"),
        ("f32[2]", "cannot read type 'f32[2]'; expected e.g. 'f32[s0, 64] cpu'"),
        ("f32[2, cpu", "cannot read type"),
        ("tensor", "cannot read type 'tensor'"),
        ("", "cannot read type ''"),
        ("f32[2]{1, 1} cpu", "has 1 dims but 2 strides"),
        ("f32[s0 +] cpu", "in type 'f32[s0 +] cpu'"),
        ("f32[2.5] cpu", "in type 'f32[2.5] cpu'"),
        ("f32[s0 / 2] cpu", "in type 'f32[s0 / 2] cpu'"),
        ("sym(1.5)", "in type 'sym(1.5)'"),
        ("sym(s0 +)", "in type 'sym(s0 +)'"),
        ("f32[2] CPU", "cannot read type"),
    ],
)
def test_bad_type_texts(text, fragment):
    with pytest.raises(TypeParseError) as info:
        parse_type(text)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "dtype, name",
    [(torch.uint16, "u16"), (torch.uint32, "u32"), (torch.uint64, "u64"), (torch.complex32, "c32")],
)
def test_unsigned_and_complex_half_dtypes_have_short_names_and_survive_json(dtype, name):
    from torchsmith.ir import GraphBuilder, dumps, loads
    from torchsmith.ir.dtypes import dtype_name

    assert dtype_name(dtype) == name
    b = GraphBuilder("g")
    x = b.input("x", f"{name}[3] cpu")
    graph = b.build(x)
    back = loads(dumps(graph))
    assert back.inputs[0].type.dtype == dtype and str(back) == str(graph)
