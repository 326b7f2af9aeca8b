"""Runs a compiled MoE layer on numpy inputs."""
from .memref import CompiledFunction
from .weights import DTYPES


PHASES = {"auto": 0, "prefill": 1, "decode": 2}


def run_layer(library, plan, x, weights, phase="auto"):
    """`phase` matters for layers compiled with prefill and decode variants."""
    fn = CompiledFunction(library, plan["entry_point"]["symbol"].removeprefix("_mlir_ciface_"),
                          [(2, DTYPES[plan["element_type"]])])
    if "phase_argument" in plan["entry_point"]:
        return fn(x, *weights.values(), PHASES[phase])
    return fn(x, *weights.values())
