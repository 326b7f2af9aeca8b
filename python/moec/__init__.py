"""Python side of the MoE compiler: drive moe-compile, call compiled layers, check them."""
