"""Interoperability: PyTorch ``autograd.Function`` wrappers and DLPack exchange.

* :func:`torch_function` (PyTorch optional): a tecomp kernel and its gradient kernel as a
  ``torch.autograd.Function``, so a tecomp layer drops into a PyTorch model.
* :func:`as_numpy`, :func:`call_dlpack`: hand arrays from any DLPack producer (PyTorch, JAX,
  CuPy on the host, NumPy) to a CPU kernel without copying; kernel outputs are NumPy arrays,
  themselves DLPack producers (``torch.from_dlpack(out)`` shares their memory).
"""

from .dlpack import as_numpy, call_dlpack
from .torch_function import TorchKernel, torch_function

__all__ = ["TorchKernel", "as_numpy", "call_dlpack", "torch_function"]
