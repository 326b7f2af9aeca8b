"""Python side of the MoE compiler: drive moe-compile, call compiled layers, check them."""
from .model import Layer, Model, load  # noqa: F401
