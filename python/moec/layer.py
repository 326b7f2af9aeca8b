"""Runs a compiled MoE layer on numpy inputs."""
from .memref import CompiledFunction
from .weights import DTYPES


def run_layer(library, plan, x, weights):
    fn = CompiledFunction(library, plan["entry_point"]["symbol"].removeprefix("_mlir_ciface_"),
                          [(2, DTYPES[plan["element_type"]])])
    return fn(x, *weights.values())
