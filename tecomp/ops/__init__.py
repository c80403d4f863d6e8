"""The operator library ``tc.ops``, written in the DSL (like TVM's topi)."""

from .butterfly import butterfly_chain, dct, kron_sparse_matmul
from .butterfly_factors import real_butterfly
from .conv_transpose import conv_transpose2d
from .nn import avg_pool2d, conv2d, dense, layer_norm, log_softmax, max_pool2d, pad2d, softmax, take
from .scan_ops import cumprod, cumsum

__all__ = [
    "avg_pool2d", "butterfly_chain", "conv2d", "conv_transpose2d", "cumprod", "cumsum", "dct",
    "dense",
    "kron_sparse_matmul",
    "layer_norm", "log_softmax", "max_pool2d", "pad2d", "real_butterfly", "softmax", "take",
]
