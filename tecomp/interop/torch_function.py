"""A tecomp kernel and its gradient as a PyTorch custom operator (PyTorch optional).

``f = tc.interop.torch_function(Y, [X, W])`` registers ``Y`` (a tensor expression of the
placeholders ``X, W``) as the operator ``torch.ops.tecomp.<name>_<hash>`` with
``torch.library.custom_op``; ``f(x, w)`` calls it.  That is PyTorch's convention for foreign
code: the operator is opaque to ``torch.compile`` (no graph break; Inductor calls it as an
extern kernel), and three things are registered beside it:

* a *fake* implementation: the output shapes evaluated from the symbolic shapes of ``Y`` with
  the inputs' (possibly symbolic) sizes, so tracing never runs the kernel;
* autograd (``register_autograd``): the backward pass is a second operator of the same kind,
  the kernel of ``tc.gradient(Y, float inputs, head=H)`` with the incoming gradient as ``H``
  (:meth:`tecomp.interop.program.Program.gradient`), registered and compiled on the first
  backward pass and then reused for every shape.  Integer inputs (indices) get no gradient.
  That operator has autograd registered the same way, so double backward (gradient of the
  gradient) works where tecomp can differentiate its own gradient, and raises a
  ``TecompError`` naming the program where it cannot.
* the implementation: CPU tensors reach the LLVM kernel without a copy (DLPack views; a
  non-contiguous input is made contiguous by the kernel) and its NumPy results become tensors
  without a copy (``torch.from_numpy``).  CUDA tensors go to the ``target="cuda"`` build of
  the same program, in place through ``__cuda_array_interface__``; its results are allocated
  with ``torch.empty`` on the inputs' device.  tecomp launches on the legacy default stream:
  when the caller's current stream is another one, that stream is synchronised before the
  call and the default stream after it.

Registered operators live as long as the process (PyTorch has no unregistering): create a
layer once, not once per step.  PyTorch is imported only when such a function is created.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from .. import dtypes
from ..errors import ArgumentError, TecompError
from ..tensor import Tensor
from .dlpack import as_numpy
from .program import Program


def _torch() -> Any:
    try:
        import torch
    except ModuleNotFoundError:
        raise TecompError("tc.interop.torch_function needs PyTorch: pip install torch") from None
    return torch


class TorchOp:
    """A :class:`~tecomp.interop.program.Program` registered as a PyTorch custom operator.

    ``.op`` is the ``torch.library`` operator (``torch.ops.tecomp.<qualname>``), ``.program``
    the tecomp program (made on first use for a gradient operator), ``.gradient_op()`` the
    operator of its gradient.  The first gradient operator is registered with the layer (a
    compiled backward graph loaded from PyTorch's cache names it before any backward pass
    has run); the program behind it and any higher order are made on first use."""

    def __init__(self, qualname: str, in_dtypes: Sequence[str], out_dtypes: Sequence[str], *,
                 program: Program | None = None, parent: TorchOp | None = None,
                 label: str = "") -> None:
        torch = self._torch = _torch()
        self._program = program
        self._parent = parent  # the op this one is the gradient of (shapes, program)
        self.label = label or (program.name if program is not None else qualname)
        self.in_dtypes = list(in_dtypes)
        self.float_inputs = [k for k, dt in enumerate(self.in_dtypes) if dtypes.is_float(dt)]
        self._single = len(out_dtypes) == 1
        self._out_dtypes = [_torch_dtype(torch, dt) for dt in out_dtypes]
        self._in_dtypes = [_torch_dtype(torch, dt) for dt in self.in_dtypes]
        self._grad: TorchOp | None = None
        self.qualname = qualname
        args = ", ".join(f"Tensor x{k}" for k in range(len(self.in_dtypes)))
        rets = "Tensor" if self._single else "(" + ", ".join("Tensor" for _ in out_dtypes) + ")"
        self.op = torch.library.custom_op(f"tecomp::{qualname}", self._run,
                                          mutates_args=(), schema=f"({args}) -> {rets}")
        self.op.register_fake(self._fake)
        if self.float_inputs:
            self.op.register_autograd(self._backward, setup_context=_save_inputs)

    @property
    def program(self) -> Program:
        if self._program is None:
            assert self._parent is not None
            self._program = self._parent.program.gradient()
        return self._program

    # ------------------------------------------------------------------------ registered parts
    def _check(self, tensors: Sequence[Any]) -> None:
        if len(tensors) != len(self.in_dtypes):
            raise ArgumentError(f"{self.label}: takes {len(self.in_dtypes)} tensor(s), got "
                                f"{len(tensors)}")
        for k, (x, want) in enumerate(zip(tensors, self._in_dtypes)):
            if x.dtype != want:
                raise ArgumentError(f"{self.label}: input {self._input_name(k)!r} must have "
                                    f"dtype {self.in_dtypes[k]}, got {x.dtype}; tecomp does "
                                    "not cast implicitly")

    def _input_name(self, k: int) -> str:
        if self._parent is None and self._program is not None:
            return self._program.inputs[k].name
        return f"x{k}"

    def _output_shapes(self, tensors: Sequence[Any]) -> list[tuple[Any, ...]]:
        shapes = [tuple(x.shape) for x in tensors]
        if self._parent is not None:  # a gradient has the shapes of the float inputs
            return [shapes[k] for k in self._parent.float_inputs]
        return self.program.output_shapes(shapes)

    def _fake(self, *tensors: Any) -> Any:
        self._check(tensors)
        dev = tensors[0].device if tensors else "cpu"
        outs = [self._torch.empty(s, dtype=dt, device=dev)
                for s, dt in zip(self._output_shapes(tensors), self._out_dtypes)]
        return outs[0] if self._single else tuple(outs)

    def _run(self, *tensors: Any) -> Any:
        self._check(tensors)
        kinds = {x.device.type for x in tensors}
        if kinds == {"cuda"}:
            return self._run_cuda(tensors)
        if kinds != {"cpu"} and tensors:
            raise ArgumentError(
                f"{self.label}: the inputs are on {sorted(kinds)}; tecomp runs CPU tensors "
                "(the LLVM kernel) or CUDA tensors (the CUDA build), all on one device")
        program = self.program
        try:  # views of the tensors' memory (Tensor.numpy never copies)
            arrays = [x.detach().numpy() for x in tensors]
        except (TypeError, RuntimeError):  # a dtype NumPy lacks: DLPack says which
            arrays = [as_numpy(x.detach(), name=f"{self.label}: input {t.name!r}")
                      for t, x in zip(program.inputs, tensors)]
        got = program.kernel("llvm")(*arrays)
        if self._single:
            return self._torch.from_numpy(got)
        return tuple(self._torch.from_numpy(g) for g in got)

    def _run_cuda(self, tensors: Sequence[Any]) -> Any:
        torch = self._torch
        if len({x.device for x in tensors}) > 1:
            raise ArgumentError(f"{self.label}: the inputs are on several GPUs "
                                f"({sorted({str(x.device) for x in tensors})})")
        try:
            kernel = self.program.kernel("cuda")
        except TecompError as err:
            raise TecompError(f"{self.label}: CUDA tensors need the CUDA build of the "
                              f"program, which failed: {err}") from err
        dev = tensors[0].device
        stream = torch.cuda.current_stream(dev)
        other = stream != torch.cuda.default_stream(dev)
        if other:  # tecomp launches on the legacy default stream
            stream.synchronize()
        try:
            got = kernel(*[x.detach().contiguous() for x in tensors])
        except TecompError as err:
            raise TecompError(f"{self.label}: the CUDA kernel could not run on {dev} "
                              f"({err}); install the cuda extra (pip install "
                              "'tecomp[cuda]') or pass CPU tensors") from err
        if other:
            torch.cuda.default_stream(dev).synchronize()
        return got

    def _backward(self, ctx: Any, *grads: Any) -> Any:
        tensors = ctx.saved_tensors
        heads = []
        for g, dt, shape in zip(grads, self._out_dtypes, self._output_shapes(tensors)):
            if g is None:  # an output the loss does not use
                g = self._torch.zeros(shape, dtype=dt, device=tensors[0].device)
            heads.append(g.to(dt).contiguous())
        got = self.gradient_op().op(*tensors, *heads)
        if not isinstance(got, (tuple, list)):
            got = (got,)
        result: list[Any] = [None] * len(tensors)
        for k, g in zip(self.float_inputs, got):
            result[k] = g
        return tuple(result)

    def gradient_op(self) -> TorchOp:
        """The operator of the program's gradient (registered on the first call)."""
        if self._grad is None:
            ins = self.in_dtypes + [str(dt).replace("torch.", "") for dt in self._out_dtypes]
            outs = [self.in_dtypes[k] for k in self.float_inputs]
            self._grad = TorchOp(_free_name(self._torch, f"{self.qualname}_grad"), ins, outs,
                                 parent=self, label=f"{self.label}_grad")
        return self._grad

    def __call__(self, *tensors: Any) -> Any:
        return self.op(*tensors)


class TorchKernel:
    """A callable on ``torch.Tensor`` s backed by tecomp kernels (see the module docstring).

    ``.op`` is the registered operator; ``.forward_kernel`` the compiled forward program;
    ``.gradient_kernel`` the compiled gradient (None until a backward pass has run it);
    ``.gradients`` the gradient tensors (empty until the backward operator exists)."""

    def __init__(self, output: Tensor, inputs: Sequence[Tensor] | Tensor, *,
                 name: str | None = None) -> None:
        if not isinstance(output, Tensor):
            raise TecompError(f"torch_function: the output {output!r} is not a tensor")
        ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
        self.name = name or output.name
        self.output = output
        self.inputs = ins
        self.program = Program([output], ins, self.name, what="torch_function")
        self.float_inputs = self.program.float_inputs
        self.program.kernel("llvm")  # compile errors show here, not inside a traced call
        self._layer = TorchOp(_free_name(_torch(), _op_base(self.program)),
                              [t.dtype for t in ins], [output.dtype], program=self.program)
        self.op = self._layer.op
        if self.float_inputs:
            self._layer.gradient_op()

    @property
    def forward_kernel(self) -> Any:
        return self.program.kernel("llvm")

    @property
    def gradient_kernel(self) -> Any:
        grad = self._layer._grad
        return None if grad is None or grad._program is None else grad._program.built("llvm")

    @property
    def gradients(self) -> list[Tensor]:
        grad = self._layer._grad
        return [] if grad is None or grad._program is None else list(grad._program.outputs)

    def __call__(self, *tensors: Any) -> Any:
        if len(tensors) != len(self.inputs):
            names = ", ".join(t.name for t in self.inputs)
            raise ArgumentError(f"{self.name}: takes {len(self.inputs)} tensor(s) ({names}), "
                                f"got {len(tensors)}")
        return self.op(*tensors)

    def __repr__(self) -> str:
        return (f"<TorchKernel {self.name!r} ({', '.join(t.name for t in self.inputs)}) "
                f"torch.ops.tecomp.{self._layer.qualname}>")


def torch_function(output: Tensor, inputs: Sequence[Tensor], *,
                   name: str | None = None) -> TorchKernel:
    """``output`` (computed from the placeholders ``inputs``) as a PyTorch custom operator.

    Returns a :class:`TorchKernel`: call it on CPU or CUDA ``torch.Tensor`` s in the order
    of ``inputs``, eagerly or under ``torch.compile(fullgraph=True)``; gradients flow to the
    float inputs through tecomp's own gradient kernel."""
    return TorchKernel(output, inputs, name=name)


def _save_inputs(ctx: Any, inputs: Sequence[Any], output: Any) -> None:
    ctx.save_for_backward(*inputs)


def _torch_dtype(torch: Any, dtype: str) -> Any:
    got = getattr(torch, dtype, None)
    if got is None:
        raise TecompError(f"torch_function: PyTorch has no dtype {dtype!r}")
    return got


def _op_base(program: Program) -> str:
    """``<name>_<fingerprint>`` as an identifier."""
    base = re.sub(r"\W", "_", program.name)
    if not base or base[0].isdigit():
        base = "k_" + base
    # the salt names how the gradient operators are named and registered: a compiled graph
    # cached by PyTorch under an older scheme does not match a layer of a newer one
    return f"{base}_{program.fingerprint(salt='torch-op-1')}"


def _free_name(torch: Any, base: str) -> str:
    """``base``, with a suffix when an operator of that name exists already."""
    name, n = base, 0
    while hasattr(torch.ops.tecomp, name):
        n += 1
        name = f"{base}_{n}"
    return name
