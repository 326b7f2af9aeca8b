"""Layers compiled with `moe-compile --target cuda` on CUDA torch tensors.

The library's C entry takes device pointers (MLIR memref descriptors of
contiguous tensors), then the result `out`, one device workspace of
`<entry>_workspace_bytes(T)` bytes and a CUstream; it enqueues everything on
the stream and returns without synchronising. Here `out` and the workspace
come from torch's caching allocator and the stream is torch's current one,
so a layer composes with the tensors around it.

Only ctypes and torch are imported: the GPU check (benchmarks/gpu) loads this
file on machines that have nothing else of the package's dependencies.
"""
import ctypes
import warnings

import torch


class Descriptor:
    """MLIR's strided memref descriptor of a contiguous tensor."""

    _types = {}

    @classmethod
    def of(cls, tensor):
        rank = tensor.dim()
        if rank not in cls._types:
            cls._types[rank] = type(f"Memref{rank}", (ctypes.Structure,), {"_fields_": [
                ("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
                ("offset", ctypes.c_int64), ("sizes", ctypes.c_int64 * rank),
                ("strides", ctypes.c_int64 * rank)]})
        if not tensor.is_contiguous():
            raise ValueError("a memref descriptor needs a contiguous tensor")
        desc = cls._types[rank]()
        desc.allocated = desc.aligned = tensor.data_ptr()
        desc.offset = 0
        for i in range(rank):
            desc.sizes[i] = tensor.shape[i]
            desc.strides[i] = tensor.stride(i)
        return desc


class GpuLayer:
    """`_mlir_ciface_<entry>(inputs..., out, workspace, stream)` of a library."""

    def __init__(self, path, plan):
        self.lib = ctypes.CDLL(str(path))
        symbol = plan["entry_point"]["symbol"]
        self.fn = getattr(self.lib, symbol)
        self.fn.restype = None
        self.workspace_fn = getattr(self.lib,
                                    symbol.removeprefix("_mlir_ciface_") + "_workspace_bytes")
        self.workspace_fn.restype = ctypes.c_int64
        self.workspace_fn.argtypes = [ctypes.c_int64]

    def workspace_bytes(self, tokens):
        return int(self.workspace_fn(tokens))

    def prepare(self, inputs, out, workspace):
        """The argument list of a call (descriptors kept alive by the list)."""
        descs = [Descriptor.of(t) for t in list(inputs) + [out, workspace]]
        return descs, [ctypes.byref(d) for d in descs]

    def call(self, args, stream=None):
        stream = stream or torch.cuda.current_stream()
        self.fn(*args, ctypes.c_void_p(stream.cuda_stream))


class LazyLibrary:
    """A GpuLayer loaded at its first use: loading a CUDA library loads its
    kernels, which needs a GPU and its driver (without them the runtime ends
    the process), so a machine without one can still read a model."""

    def __init__(self, path, plan):
        self.path, self.plan, self._layer = path, plan, None

    def get(self):
        if self._layer is None:
            if not torch.cuda.is_available():
                raise RuntimeError(f"{self.path}: a CUDA library needs a GPU, and torch sees "
                                   "none (torch.cuda.is_available() is False)")
            self._layer = GpuLayer(self.path, self.plan)
        return self._layer


def _as_tensor(weight):
    """A torch tensor of a weight given as a tensor or a numpy array (ml_dtypes
    arrays, bf16 or e4m3, as their bits: the caller views them)."""
    if isinstance(weight, torch.Tensor):
        return weight
    import numpy as np
    host = np.ascontiguousarray(weight)
    if host.dtype.kind == "V" or host.dtype.name in ("bfloat16", "float8_e4m3fn"):
        host = host.view({2: np.int16, 1: np.uint8}[host.dtype.itemsize])
    with warnings.catch_warnings():  # a read-only (mapped) array: only copied from
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(host)


TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "i32": torch.int32,
                "fp8_e4m3": torch.float8_e4m3fn}


class CudaLayer:
    """One MoE layer of a CUDA library: `layer(x)` with x a CUDA tensor [T, H]
    in the layer's dtype returns y [T, H] on x's device, computed on torch's
    current stream. The weights move to the device at the first call (or
    `to(device)`)."""

    def __init__(self, index, library, plan, weights):
        """`library`: a GpuLayer, or a LazyLibrary that loads one."""
        self.index = index
        self.plan = plan
        self._library = library
        self._host_weights = weights  # name -> numpy array or torch tensor
        self._weights = None
        self._device = None
        self._dtype = TORCH_DTYPES[plan["element_type"]]
        self._phase = "phase_argument" in plan["entry_point"]

    def to(self, device):
        """Copies the weights to `device` (a CUDA device) once; returns self."""
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"{self}: compiled for CUDA; cannot move its weights to {device}")
        if self._device != device:
            params = [q for q in self.plan["entry_point"]["parameters"]
                      if q["name"] not in ("x", "phase")]
            weights = []
            for q in params:
                tensor = _as_tensor(self._host_weights[q["name"]])
                weights.append(tensor.to(device).view(TORCH_DTYPES[q["dtype"]]).contiguous())
            self._weights, self._device = weights, device
        return self

    def __call__(self, x, out=None):
        if not isinstance(x, torch.Tensor) or x.device.type != "cuda":
            where = x.device if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x: {self} was compiled for CUDA: expected a CUDA tensor, "
                             f"got {where}")
        hidden = self.plan["hidden_size"]
        if x.dim() != 2 or x.shape[1] != hidden or x.dtype != self._dtype:
            raise ValueError(f"x: expected a {self._dtype} tensor [T, {hidden}], got "
                             f"{x.dtype} {list(x.shape)}")
        if not x.is_contiguous():
            raise ValueError("x: expected a contiguous tensor (call .contiguous())")
        library = self._library.get() if isinstance(self._library, LazyLibrary) \
            else self._library
        self.to(x.device)
        tokens = x.shape[0]
        if out is None:
            out = torch.empty_like(x)
        elif out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
            raise ValueError(f"out: expected a {x.dtype} tensor of shape {list(x.shape)} on "
                             f"{x.device}, got {out.dtype} {list(out.shape)} on {out.device}")
        if tokens == 0:
            return out
        with torch.cuda.device(x.device):
            workspace = torch.empty(max(library.workspace_bytes(tokens), 1),
                                    dtype=torch.uint8, device=x.device)
            descs, args = library.prepare([x] + self._weights, out, workspace)
            if self._phase:  # 0: the variant by the token count
                args.insert(len(self._weights) + 1, ctypes.c_int32(0))
            # The workspace returns to torch's caching allocator after the
            # call, for later work on the same stream: stream order keeps it
            # from being reused before the layer's kernels ran.
            library.call(args)
        del descs
        return out

    def module(self):
        """This layer as a torch.nn.Module."""
        from . import torch_ops
        return torch_ops.MoEModule(self)

    def __repr__(self):
        return (f"<moec.CudaLayer {self.index}: {self.plan['model_type']} "
                f"{self.plan['element_type']}, H={self.plan['hidden_size']}, "
                f"E={self.plan['experts']}, top-{self.plan['top_k']}>")
