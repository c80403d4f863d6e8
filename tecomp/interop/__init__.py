"""Interoperability: PyTorch custom operators, JAX functions and DLPack exchange.

* :func:`torch_function` (PyTorch optional): a tecomp kernel and its gradient kernel as a
  ``torch.library.custom_op`` (namespace ``tecomp``) with a fake implementation and autograd,
  usable eagerly and under ``torch.compile(fullgraph=True)``, on CPU and CUDA tensors.
* :func:`jax_function` (JAX optional): the same as a ``jax.custom_vjp`` function, called
  through the XLA FFI on the CPU (no copies), usable under ``jax.jit``, ``jax.grad`` and
  ``jax.vmap``.
* :func:`as_numpy`, :func:`call_dlpack`: hand arrays from any DLPack producer (PyTorch, JAX,
  CuPy on the host, NumPy) to a CPU kernel without copying; kernel outputs are NumPy arrays,
  themselves DLPack producers (``torch.from_dlpack(out)`` shares their memory).

Neither PyTorch nor JAX is imported until such a function is created.
"""

from .dlpack import as_numpy, call_dlpack
from .jax_function import JaxFunction, jax_function
from .torch_function import TorchKernel, torch_function

__all__ = ["JaxFunction", "TorchKernel", "as_numpy", "call_dlpack", "jax_function",
           "torch_function"]
