"""torchsmith.ir: the graph IR every torchsmith stage reads and writes."""

from torchsmith.ir.__about__ import __version__
from torchsmith.ir.builder import GraphBuilder, infer_output_types
from torchsmith.ir.dtypes import dtype_from_name, dtype_name
from torchsmith.ir.errors import (
    ExecutionSetupError,
    FxConversionError,
    GraphBuildError,
    InterpretError,
    IRError,
    ParseError,
    SchemaVersionError,
    SerializationError,
    SymbolicError,
    TorchsmithError,
    TypeParseError,
    UnknownOpError,
    VerifyError,
)
from torchsmith.ir.fx import from_fx, lifted_attributes, to_fx
from torchsmith.ir.graph import ArgList, Graph, Node, Slice, Stamp, Value, iter_values, map_arg
from torchsmith.ir.interpreter import interpret
from torchsmith.ir.ir_kinds import IRKind, register_ir_kind
from torchsmith.ir.meta_kernels import register_missing as _register_missing_meta_kernels
from torchsmith.ir.names import NameGenerator
from torchsmith.ir.parser import parse_arg, parse_graph, parse_node
from torchsmith.ir.passes import Pipeline, Step, StepRun, graph_pass, run_pipeline
from torchsmith.ir.pycodegen import compile_to_python
from torchsmith.ir.random_graph import example_inputs, random_graph
from torchsmith.ir.registry import (
    ArgSpec,
    OpDef,
    OpSchema,
    draws_random,
    lookup_op,
    op_name_of,
    register_op,
    registered_ops,
)
from torchsmith.ir.serialize import SCHEMA_VERSION, dumps, from_json, load, loads, save, to_json
from torchsmith.ir.symbolic import Dim, compare, evaluate, floordiv, format_dim, mod, parse_dim, symbol
from torchsmith.ir.text import format_graph
from torchsmith.ir.types import ScalarType, SymIntType, TensorType, Type, format_type, parse_type, type_of
from torchsmith.ir.verifier import maybe_verify, verify, verify_enabled

# geqrf and the histogram ops get the Meta kernels torch lacks, so every stage can type them.
_register_missing_meta_kernels()
