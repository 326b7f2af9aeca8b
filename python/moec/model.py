"""A model compiled by `moe-compile --model DIR -o OUT`: its MoE layers, ready to call
(numpy or CPU torch tensors for `--target cpu`, CUDA torch tensors for `--target cuda`)."""
import json
from pathlib import Path

import numpy as np

from . import safetensors
from .layer import check_arguments
from .memref import CompiledFunction
from .weights import DTYPES

FORMAT = "moe-compile model 1"


class Layer:
    """One MoE layer: `layer(x)` with x [T, H] in the layer's dtype returns y [T, H]."""

    def __init__(self, index, function, plan, weights):
        self.index = index
        self.plan = plan
        self._function = function
        self._weights = weights

    def __call__(self, x, out=None):
        """x: numpy array or CPU torch tensor [T, H] in the layer's dtype; the
        result has x's kind. `out` (torch only): a tensor the result is
        written into and returned."""
        if type(x).__module__.startswith("torch"):
            return self._call_torch(x, out)
        if out is not None:
            raise ValueError("out: only for torch tensors")
        arrays = check_arguments(self.plan, x, self._weights)
        if "phase_argument" in self.plan["entry_point"]:  # --decode-max-tokens
            return self._function(*arrays, 0)  # 0: the variant by the token count
        return self._function(*arrays)

    def _call_torch(self, x, out):
        from . import torch_ops
        y = torch_ops.to_torch(self(torch_ops.to_numpy("x", x, DTYPES[self.plan["element_type"]])))
        if out is None:
            return y
        if out.shape != y.shape or out.dtype != y.dtype or out.device != y.device:
            raise ValueError(f"out: expected a {y.dtype} tensor of shape {list(y.shape)} on "
                             f"cpu, got {out.dtype} {list(out.shape)} on {out.device}")
        return out.copy_(y)

    def module(self):
        """This layer as a torch.nn.Module (a torch.library custom op inside)."""
        from . import torch_ops
        return torch_ops.MoEModule(self)

    def __repr__(self):
        return (f"<moec.Layer {self.index}: {self.plan['model_type']} "
                f"{self.plan['element_type']}, H={self.plan['hidden_size']}, "
                f"E={self.plan['experts']}, top-{self.plan['top_k']}>")


class Model:
    """`layers` maps decoder layer indices to their MoE layers."""

    def __init__(self, path):
        path = Path(path)
        manifest_path = path / "manifest.json"
        if not manifest_path.is_file():
            raise FileNotFoundError(f"{manifest_path}: not found (is {path} the -o directory "
                                    "of moe-compile --model?)")
        self.manifest = _read_json(manifest_path)
        if not isinstance(self.manifest, dict) or self.manifest.get("format") != FORMAT:
            found = self.manifest.get("format") if isinstance(self.manifest, dict) else None
            raise ValueError(f"{manifest_path}: format {found!r}, expected {FORMAT!r}")
        library = self.manifest["library"]
        for part in (library["file"], library["plan"], self.manifest["weights"]):
            if not (path / part).is_file():
                raise FileNotFoundError(f"{path / part}: named by {manifest_path} but missing "
                                        "(an incomplete copy of the moe-compile --model output?)")
        plan = _read_json(path / library["plan"])
        target = self.manifest.get("target", "cpu")
        if target == "cuda":
            # torch first: its NCCL, not the one next to libmoert_cuda, is
            # then the process's (docs/Runtime.md, "CUDA").
            from .cuda import CudaLayer, LazyLibrary
            gpu = LazyLibrary((path / library["file"]).resolve(), plan)
            make = lambda index, weights: CudaLayer(index, gpu, plan, weights)  # noqa: E731
        elif target == "cpu":
            function = CompiledFunction(str((path / library["file"]).resolve()),
                                        library["entry"], [(2, DTYPES[plan["element_type"]])])
            make = lambda index, weights: Layer(index, function, plan, weights)  # noqa: E731
        else:
            raise ValueError(f"{manifest_path}: target {target!r}, expected 'cpu' or 'cuda'")
        tensors = safetensors.read(path / self.manifest["weights"])
        self.layers = {}
        for entry in self.manifest["layers"]:
            weights = {}
            for parameter, name in entry["tensors"].items():
                if name not in tensors:
                    raise ValueError(f"{path / self.manifest['weights']}: tensor {name!r} "
                                     f"(layer {entry['index']}) is missing")
                weights[parameter] = np.asarray(tensors[name])
            self.layers[entry["index"]] = make(entry["index"], weights)

    def __repr__(self):
        return (f"<moec.Model {self.manifest['model_type']} "
                f"({self.manifest.get('target', 'cpu')}): {len(self.layers)} MoE layers "
                f"{sorted(self.layers)}>")


def _read_json(path):
    try:
        return json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e}); is it from moe-compile --model?") from None


def load(path):
    """The MoE layers compiled into directory `path` by moe-compile --model."""
    return Model(path)
