"""The small shared pieces: fresh names, the registry's explicit registrations, the paused GC."""

import gc

import pytest
import torch

from torchsmith.ir import GraphBuilder, NameGenerator, lookup_op, register_op
from torchsmith.ir.gc_pause import paused_gc
from torchsmith.ir.registry import explicit_registrations


def test_fresh_names_are_readable_and_never_repeat():
    names = NameGenerator(taken={"x", "add_2"})
    assert [names.fresh("add") for _ in range(4)] == ["add", "add_1", "add_3", "add_4"]
    assert names.fresh("x") == "x_1" and "x_1" in names and "y" not in names


def test_unused_does_not_take_the_name():
    names = NameGenerator()
    assert names.unused("v") == "v" and names.unused("v") == "v"
    names.take("v")
    assert names.unused("v") == "v_1"


def test_fresh_names_match_the_builder_s():
    b = GraphBuilder("g")
    x = b.input("x", "f32[2] cpu")
    made = [b.op("aten.relu.default", x).name for _ in range(3)]
    names = NameGenerator(taken={"x"})
    assert made == [names.fresh("relu") for _ in range(3)] == ["relu", "relu_1", "relu_2"]
    assert b.fresh_name("not an identifier") == "v"


def test_explicit_registrations_do_not_grow_with_lookups():
    register_op("testnames.double", lambda x: x * 2, replace=True)
    before = explicit_registrations()
    assert "testnames.double" in before
    lookup_op("aten.sinh.default")
    lookup_op("torch.cosh")
    after = explicit_registrations()
    assert after.keys() == before.keys()
    assert "aten.sinh.default" not in after and "torch.cosh" not in after
    assert after["testnames.double"].eager(torch.ones(1)).item() == 2.0


def test_paused_gc_restores_the_collector_even_on_error():
    assert gc.isenabled()
    with pytest.raises(ValueError):
        with paused_gc():
            assert not gc.isenabled()
            with paused_gc():  # nested: the inner exit leaves it paused
                pass
            assert not gc.isenabled()
            raise ValueError
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()
