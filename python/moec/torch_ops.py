"""PyTorch side: compiled layers on torch tensors, as a torch.library custom op
and as an nn.Module that can replace a transformers MoE block.

Tensors reach the compiled code without copies (the C entry reads the
tensor's memory through a numpy view); the result is a tensor over the
buffer the layer wrote (no copy either)."""
import ml_dtypes
import numpy as np
import torch

_LAYERS = []  # custom-op handles index this list


def to_numpy(name, tensor, want_dtype):
    """A numpy view of a CPU, C-contiguous torch tensor of the layer's dtype;
    ValueError naming `name` otherwise."""
    if tensor.device.type != "cpu":
        raise ValueError(f"{name}: expected a CPU tensor, got one on {tensor.device} "
                         "(this layer was compiled for the CPU; moe-compile --target cuda "
                         "makes one for CUDA tensors)")
    torch_dtype = {np.dtype(np.float32): torch.float32,
                   np.dtype(ml_dtypes.bfloat16): torch.bfloat16}[np.dtype(want_dtype)]
    if tensor.dtype != torch_dtype:
        raise ValueError(f"{name}: expected {torch_dtype}, got {tensor.dtype}")
    if not tensor.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor (call .contiguous())")
    tensor = tensor.detach()
    if torch_dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def to_torch(array):
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


@torch.library.custom_op("moec::moe_layer", mutates_args=())
def moe_layer(x: torch.Tensor, handle: int) -> torch.Tensor:
    """y[T, H] of compiled layer `handle` (see `register`) for x[T, H]."""
    return _LAYERS[handle](x)


@moe_layer.register_fake
def _(x, handle):
    return torch.empty_like(x)


def register(layer):
    """The custom-op handle of a moec Layer."""
    if getattr(layer, "_torch_handle", None) is None:
        _LAYERS.append(layer)
        layer._torch_handle = len(_LAYERS) - 1
    return layer._torch_handle


class MoEModule(torch.nn.Module):
    """A compiled layer as a module: x[..., H] -> y[..., H] through the
    custom op, so it can stand in for a model's MoE block."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer
        self.handle = register(layer)

    def forward(self, hidden_states):
        shape = hidden_states.shape
        hidden = self.layer.plan["hidden_size"]
        if len(shape) == 0 or shape[-1] != hidden:  # named as given, not as flattened
            raise ValueError(f"hidden_states: expected shape [..., {hidden}], got {list(shape)}")
        y = torch.ops.moec.moe_layer(hidden_states.reshape(-1, shape[-1]).contiguous(),
                                     self.handle)
        return y.reshape(shape)
