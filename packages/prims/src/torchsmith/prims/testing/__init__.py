"""The shared sample-input database and comparison helpers that every prims and decomposition test
uses (STYLE 15): `prim_samples(name)`, `aten_samples(name)`, `one_node_graph`, `assert_close`."""

from torchsmith.prims.testing.compare import assert_close, assert_decomposition_close, to_numpy
from torchsmith.prims.testing.make import ALL_DTYPES, Sample, make_tensor, one_node_graph
from torchsmith.prims.testing.prim_samples import prim_samples
