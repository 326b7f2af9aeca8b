"""The Python entry point checks every argument against the plan before the
compiled code sees it (issue 9: weights in the wrong order or dtype segfaulted)."""
import numpy as np
import pytest

from moec import reference
from moec.layer import run_layer
from moec.toolchain import ROOT, compile_config
from moec.weights import make_inputs

DEEPSEEK = ROOT / "examples" / "deepseek-v3-tiny" / "config.json"


@pytest.fixture(scope="module")
def layer(tmp_path_factory):
    library, plan = compile_config(DEEPSEEK, tmp_path_factory.mktemp("entry"))
    x, weights = make_inputs(plan, 5, seed=1)
    return library, plan, x, weights


def test_weights_in_any_dict_order_reach_their_parameters(layer):
    library, plan, x, weights = layer
    shuffled = dict(reversed(list(weights.items())))
    y = run_layer(library, plan, x, shuffled)
    ref = reference.layer(x, weights, plan)
    assert np.max(np.abs(y - ref)) / np.max(np.abs(ref)) <= 1e-5


def test_a_library_named_without_a_directory_is_found_in_the_working_directory(
        layer, monkeypatch):
    library, plan, x, weights = layer
    monkeypatch.chdir(library.parent)
    y = run_layer(library.name, plan, x, weights)  # "layer.so", as `-o layer.so` names it
    ref = reference.layer(x, weights, plan)
    assert np.max(np.abs(y - ref)) / np.max(np.abs(ref)) <= 1e-5


@pytest.mark.parametrize("name, make, message", [
    ("swapped_experts", lambda w: {**w, "w13": w["w2"], "w2": w["w13"]},
     r"w13: expected shape \[32, 48, 64\], got \[32, 64, 24\]"),
    ("transposed_router", lambda w: {**w, "router_weight": w["router_weight"].T},
     r"router_weight: expected shape \[32, 64\], got \[64, 32\]"),
    ("float64_weights", lambda w: {**w, "w2": w["w2"].astype(np.float64)},
     r"w2: expected dtype f32 \(float32\), got float64"),
    ("bf16_bias", lambda w: {**w, "correction_bias": w["correction_bias"].astype(np.float16)},
     r"correction_bias: expected dtype f32 \(float32\), got float16"),
    ("missing_shared", lambda w: {k: v for k, v in w.items() if k != "shared_w2"},
     r"missing \['shared_w2'\], unexpected \[\]"),
    ("unknown_name", lambda w: {**w, "w3": w["w2"]}, r"unexpected \['w3'\]"),
    ("list_not_array", lambda w: {**w, "w2": w["w2"].tolist()},
     r"w2: expected a numpy array, got list"),
])
def test_bad_arguments_raise_naming_the_argument(layer, name, make, message):
    library, plan, x, weights = layer
    with pytest.raises(ValueError, match=message):
        run_layer(library, plan, x, make(weights))


def test_bad_activations_raise_naming_x(layer):
    library, plan, x, weights = layer
    with pytest.raises(ValueError, match=r"x: expected shape \[T, 64\], got \[5, 32\]"):
        run_layer(library, plan, x[:, :32], weights)
    with pytest.raises(ValueError, match=r"x: expected shape \[T, 64\], got \[320\]"):
        run_layer(library, plan, x.ravel(), weights)
    with pytest.raises(ValueError, match=r"x: expected dtype f32 \(float32\), got int32"):
        run_layer(library, plan, x.astype(np.int32), weights)
