"""A tecomp kernel and its gradient as a PyTorch ``autograd.Function`` (PyTorch optional).

``f = tc.interop.torch_function(Y, [X, W])`` compiles ``Y`` (a tensor expression of the
placeholders ``X, W``) with ``tc.build``; ``f(x, w)`` takes CPU ``torch.Tensor`` s, runs the
kernel on them without copying (DLPack/NumPy views) and returns a ``torch.Tensor``.  When
autograd asks for the backward pass, ``f`` builds -- once, on first use -- the kernel of
``tc.gradient(Y, float inputs, head=H)`` with the incoming gradient as the head ``H`` and
returns its results; integer inputs (indices) get no gradient.  Symbolic sizes are bound
from the tensors' shapes as for any kernel.

PyTorch is imported only when such a function is created.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .. import dtypes
from ..errors import ArgumentError, TecompError
from ..tensor import Tensor
from .dlpack import as_numpy


def _torch() -> Any:
    try:
        import torch
    except ModuleNotFoundError:
        raise TecompError("tc.interop.torch_function needs PyTorch: pip install torch") from None
    return torch


class TorchKernel:
    """A callable on ``torch.Tensor`` s backed by tecomp kernels (see the module docstring).

    ``.forward_kernel`` is the compiled forward program; ``.gradient_kernel`` the compiled
    gradient (None until the first backward pass); ``.gradients`` the gradient tensors.
    """

    def __init__(self, output: Tensor, inputs: Sequence[Tensor], *, name: str | None = None):
        import tecomp as tc

        self._torch = _torch()
        if not isinstance(output, Tensor):
            raise TecompError(f"torch_function: the output {output!r} is not a tensor")
        self.inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
        for t in self.inputs:
            if not isinstance(t, Tensor) or not t.is_placeholder:
                raise TecompError(
                    f"torch_function: inputs must be placeholders, got {t!r} (computing "
                    f"{output.name!r})")
        self.output = output
        self.name = name or output.name
        self.forward_kernel = tc.build(output, self.inputs, name=self.name)
        self.float_inputs = [n for n, t in enumerate(self.inputs) if dtypes.is_float(t.dtype)]
        self.gradient_kernel: Any = None
        self.gradients: list[Tensor] = []
        self._function = self._make_function()

    def _build_gradient(self) -> Any:
        import tecomp as tc

        if self.gradient_kernel is None:
            head = tc.placeholder(self.output.shape, name=f"{self.output.name}_head",
                                  dtype=self.output.dtype)
            wrt = [self.inputs[n] for n in self.float_inputs]
            self.gradients = tc.gradient(self.output, wrt, head=head)
            self.gradient_kernel = tc.build(self.gradients, [*self.inputs, head],
                                            name=f"{self.name}_grad")
        return self.gradient_kernel

    def _make_function(self) -> Any:
        torch = self._torch
        owner = self

        class _Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, *tensors: Any) -> Any:
                arrays = owner._arrays(tensors)
                ctx.save_for_backward(*tensors)
                return torch.from_numpy(np.asarray(owner.forward_kernel(*arrays)))

            @staticmethod
            def backward(ctx: Any, grad_out: Any) -> Any:
                tensors = ctx.saved_tensors
                kernel = owner._build_gradient()
                want = np.dtype(dtypes.to_numpy(owner.output.dtype))
                head = as_numpy(grad_out.detach().contiguous(), name="incoming gradient")
                grads = kernel(*owner._arrays(tensors), head.astype(want, copy=False))
                if not isinstance(grads, tuple):
                    grads = (grads,)
                result: list[Any] = [None] * len(tensors)
                for n, g in zip(owner.float_inputs, grads):
                    if ctx.needs_input_grad[n]:
                        result[n] = torch.from_numpy(np.asarray(g))
                return tuple(result)

        _Fn.__name__ = f"TecompFunction_{self.name}"
        return _Fn

    def _arrays(self, tensors: Sequence[Any]) -> list[np.ndarray]:
        if len(tensors) != len(self.inputs):
            names = ", ".join(t.name for t in self.inputs)
            raise ArgumentError(f"{self.name}: takes {len(self.inputs)} tensor(s) ({names}), "
                                f"got {len(tensors)}")
        out = []
        for t, x in zip(self.inputs, tensors):
            if isinstance(x, self._torch.Tensor):
                if x.device.type != "cpu":
                    raise ArgumentError(
                        f"{self.name}: input {t.name!r} is on {x.device}; torch_function runs "
                        "the CPU kernel (build with target='cuda' for device arrays)")
                x = x.detach()
            out.append(as_numpy(x, name=f"{self.name}: input {t.name!r}"))
        return out

    def __call__(self, *tensors: Any) -> Any:
        return self._function.apply(*tensors)

    def __repr__(self) -> str:
        return f"<TorchKernel {self.name!r} ({', '.join(t.name for t in self.inputs)})>"


def torch_function(output: Tensor, inputs: Sequence[Tensor], *,
                   name: str | None = None) -> TorchKernel:
    """``output`` (computed from the placeholders ``inputs``) as a differentiable PyTorch op.

    Returns a :class:`TorchKernel`: call it on CPU ``torch.Tensor`` s in the order of
    ``inputs``; gradients flow to the float inputs through tecomp's own gradient kernel.
    """
    return TorchKernel(output, inputs, name=name)
