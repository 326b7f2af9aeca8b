"""Runs a compiled MoE layer on numpy inputs, after checking them against its plan."""
import ml_dtypes
import numpy as np

from .memref import CompiledFunction
from .weights import DTYPES

PHASES = {"auto": 0, "prefill": 1, "decode": 2}
_DTYPES = {**DTYPES, "i32": np.int32, "fp8_e4m3": ml_dtypes.float8_e4m3fn}


def check_arguments(plan, x, weights):
    """Returns the arrays in the entry point's order, or raises ValueError naming
    the argument whose name, shape or dtype differs from the plan's parameters.
    `weights` maps parameter names to arrays (any order)."""
    parameters = [p for p in plan["entry_point"]["parameters"] if p["name"] != "phase"]
    names = [p["name"] for p in parameters]
    given = {"x": x, **weights}
    missing = [n for n in names if n not in given]
    extra = [n for n in given if n not in names]
    if missing or extra:
        raise ValueError(f"layer arguments: missing {missing}, unexpected {extra}; "
                         f"the entry point takes {names}")
    ordered = []
    for p in parameters:
        a = given[p["name"]]
        if not isinstance(a, np.ndarray):
            raise ValueError(f"{p['name']}: expected a numpy array, got {type(a).__name__}")
        want = np.dtype(_DTYPES[p["dtype"]])
        if a.dtype != want:
            raise ValueError(f"{p['name']}: expected dtype {p['dtype']} ({want}), got {a.dtype}")
        shape = p["shape"]
        if a.ndim != len(shape) or any(w not in (-1, g) for w, g in zip(shape, a.shape)):
            expected = "[" + ", ".join("T" if w == -1 else str(w) for w in shape) + "]"
            raise ValueError(f"{p['name']}: expected shape {expected}, got {list(a.shape)}")
        ordered.append(a)
    # More tokens than the plan allows is the runtime's to report: with
    # expert parallelism every rank must fail together.
    tokens = x.shape[0]
    if tokens >= 2**31:
        raise ValueError(f"x: {tokens} tokens is more than the 2^31 a call takes")
    return ordered


def run_layer(library, plan, x, weights, phase="auto"):
    """`weights` maps the plan's parameter names to arrays; `phase` matters for
    layers compiled with prefill and decode variants."""
    arrays = check_arguments(plan, x, weights)
    fn = CompiledFunction(library, plan["entry_point"]["symbol"].removeprefix("_mlir_ciface_"),
                          [(2, DTYPES[plan["element_type"]])])
    if "phase_argument" in plan["entry_point"]:
        if phase not in PHASES:
            raise ValueError(f"phase: expected one of {list(PHASES)}, got {phase!r}")
        most = plan["phases"]["decode"]["max_tokens_per_rank"]
        # One process: refused here rather than by the runtime, which ends the
        # process (with expert parallelism every rank must fail together).
        if phase == "decode" and plan["layout"]["ep"] == 1 and x.shape[0] > most:
            raise ValueError(f"x: {x.shape[0]} tokens, but the decode variant (phase "
                             f"'decode') takes at most {most}; use 'auto' or 'prefill'")
        return fn(*arrays, PHASES[phase])
    return fn(*arrays)
