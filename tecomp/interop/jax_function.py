"""A tecomp kernel and its gradient as a differentiable JAX function (JAX optional).

``f = tc.interop.jax_function(Y, [X, W])`` returns a function of JAX arrays with a
``jax.custom_vjp``: the forward pass runs the kernel of ``Y``, the backward pass the kernel of
``tc.gradient(Y, float inputs, head=H)`` with the cotangent as ``H``
(:meth:`tecomp.interop.program.Program.gradient`, built on the first backward trace).  The
backward function is itself such a function, so ``jax.grad`` of ``jax.grad`` works where
tecomp can differentiate its gradient.  Integer inputs (indices) get no cotangent.

How the kernel is called (``via``):

* ``"ffi"`` (the default on the CPU backend): ``jax.ffi.ffi_call`` of one XLA FFI handler
  (:mod:`tecomp.interop.xla_ffi`) that runs the kernel on XLA's buffers in place -- inputs
  read and outputs written without a copy;
* ``"callback"`` (the default on other backends): ``jax.pure_callback``, which hands the
  kernel host copies of the arrays and copies its results back.

Both are usable under ``jax.jit``, ``jax.grad`` and ``jax.vmap``; ``vmap`` runs the kernel once
per batch element (``vmap_method="sequential"``), since a kernel's first axis is not in
general a batch axis.  Shapes are static in JAX: output shapes are evaluated from the inputs'
shapes at trace time, and wrong shapes or dtypes raise ``ArgumentError`` then.  Enable
``jax_enable_x64`` for float64 or int64 programs.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import ArgumentError, TecompError
from ..tensor import Tensor
from .program import Program
from .xla_ffi import CHECK_ATTR, KEY_ATTR, TARGET, Callee, enlist

VIA = ("auto", "ffi", "callback")


def _jax() -> Any:
    try:
        import jax
    except ModuleNotFoundError:
        raise TecompError("tc.interop.jax_function needs JAX: pip install jax") from None
    return jax


def manual_axes(jax: Any) -> bool:
    """Whether this JAX types values by manual mesh axes (``jax.typeof``, ``lax.pcast``)."""
    return hasattr(jax, "typeof") and hasattr(jax.lax, "pcast")


class JaxOp:
    """One :class:`~tecomp.interop.program.Program` as a ``jax.custom_vjp`` function that
    returns a tuple (one array per output)."""

    def __init__(self, program: Program, via: str) -> None:
        self._jax = _jax()
        self.program = program
        self.via = via
        self._callee: Callee | None = None
        self._key = 0
        self._grad: JaxOp | None = None
        jax = self._jax

        @jax.custom_vjp
        def fn(*xs: Any) -> Any:
            return self._call(xs)

        def fwd(*xs: Any) -> Any:  # through fn, so that a second derivative can see it
            return fn(*xs), xs

        def bwd(xs: Any, cts: Any) -> Any:
            got = self.gradient_op().fn(*xs, *cts)
            result: list[Any] = [None] * len(xs)
            for k, g in zip(program.float_inputs, got):
                result[k] = _summed_to(jax, g, xs[k]) if manual_axes(jax) else g
            return tuple(result)

        fn.defvjp(fwd, bwd)
        self.fn = fn

    def gradient_op(self) -> JaxOp:
        if self._grad is None:
            self._grad = JaxOp(self.program.gradient(), self.via)
        return self._grad

    # ------------------------------------------------------------------------ the call
    def _call(self, xs: Sequence[Any]) -> tuple[Any, ...]:
        jax = self._jax
        program = self.program
        shapes = [tuple(int(d) for d in np.shape(x)) for x in xs]
        out_shapes = program.output_shapes(shapes)  # checks count and ranks
        for t, x in zip(program.inputs, xs):
            dt = np.dtype(x.dtype)
            if dt != np.dtype(t.dtype):
                hint = " (enable jax_enable_x64 for 64-bit types)" if "64" in t.dtype else ""
                raise ArgumentError(f"{program.name}: input {t.name!r} must have dtype "
                                    f"{t.dtype}, got {dt}{hint}")
        results = [jax.ShapeDtypeStruct(s, np.dtype(y.dtype))
                   for s, y in zip(out_shapes, program.outputs)]
        via = self.via
        if via == "auto":
            via = "ffi" if jax.default_backend() == "cpu" else "callback"
        axes = frozenset().union(*(_axes(jax, x) for x in xs)) if manual_axes(jax) else None
        if axes:
            xs = [_to_varying(jax, x, axes) for x in xs]
        if via == "ffi":
            got = self._ffi(results, xs)
        else:
            got = jax.pure_callback(self._host_call, results, *xs, vmap_method="sequential")
        return tuple(_to_varying(jax, g, axes) for g in got) if axes else tuple(got)

    def _ffi(self, results: list[Any], xs: Sequence[Any]) -> Any:
        import jax.ffi

        if self._callee is None:
            check = int(self.program.fingerprint(salt="jax-ffi-1"), 16) & (2**62 - 1)
            self._callee = Callee(self.program.kernel("llvm"), check, self.program.name)
            self._key = enlist(self._callee)
        call = jax.ffi.ffi_call(TARGET, results, vmap_method="sequential")
        attrs = {KEY_ATTR.decode(): np.int64(self._key),
                 CHECK_ATTR.decode(): np.int64(self._callee.check)}
        return call(*xs, **attrs)

    def _host_call(self, *arrays: Any) -> Any:
        got = self.program.kernel("llvm")(*[np.asarray(a) for a in arrays])
        return (got,) if len(self.program.outputs) == 1 else got


# Inside jax.shard_map, JAX types each value by the manual mesh axes it varies over and checks
# those types (check_vma).  A foreign call's results are typed as varying over none, so the
# call's inputs are all made varying over the union of their axes, its results typed so too,
# and a cotangent is summed over the axes its primal input does not vary over (the transpose
# of making it varying, as JAX's own autodiff does for a replicated parameter).
def _axes(jax: Any, x: Any) -> frozenset:
    mat = getattr(jax.typeof(x), "manual_axis_type", None)
    return frozenset(getattr(mat, "varying", ()) or ())


def _to_varying(jax: Any, x: Any, axes: frozenset) -> Any:
    missing = tuple(sorted(axes - _axes(jax, x)))
    return jax.lax.pcast(x, missing, to="varying") if missing else x


def _summed_to(jax: Any, g: Any, x: Any) -> Any:
    extra = tuple(sorted(_axes(jax, g) - _axes(jax, x)))
    return jax.lax.psum(g, extra) if extra else g


class JaxFunction:
    """A function of JAX arrays backed by tecomp kernels (see the module docstring).

    ``.program`` is the tecomp program; ``.forward_kernel`` its compiled kernel."""

    def __init__(self, output: Tensor, inputs: Sequence[Tensor] | Tensor, *,
                 name: str | None = None, via: str = "auto") -> None:
        if not isinstance(output, Tensor):
            raise TecompError(f"jax_function: the output {output!r} is not a tensor")
        if via not in VIA:
            raise TecompError(f"jax_function: via={via!r}; valid: {', '.join(map(repr, VIA))}")
        ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
        self.name = name or output.name
        self.inputs = ins
        self.program = Program([output], ins, self.name, what="jax_function")
        self.program.kernel("llvm")  # compile errors show here, not inside a trace
        self._op = JaxOp(self.program, via)

    @property
    def forward_kernel(self) -> Any:
        return self.program.kernel("llvm")

    def __call__(self, *arrays: Any) -> Any:
        if len(arrays) != len(self.inputs):
            names = ", ".join(t.name for t in self.inputs)
            raise ArgumentError(f"{self.name}: takes {len(self.inputs)} array(s) ({names}), "
                                f"got {len(arrays)}")
        return self._op.fn(*arrays)[0]

    def __repr__(self) -> str:
        return f"<JaxFunction {self.name!r} ({', '.join(t.name for t in self.inputs)})>"


def jax_function(output: Tensor, inputs: Sequence[Tensor], *, name: str | None = None,
                 via: str = "auto") -> JaxFunction:
    """``output`` (computed from the placeholders ``inputs``) as a differentiable JAX function.

    Call it on JAX (or NumPy) arrays in the order of ``inputs``, eagerly or under
    ``jax.jit``, ``jax.grad`` and ``jax.vmap``.  ``via`` chooses how the kernel is called:
    ``"ffi"`` (XLA FFI on the CPU, no copies), ``"callback"`` (``jax.pure_callback``, host
    copies), ``"auto"`` (FFI on the CPU backend, else the callback)."""
    return JaxFunction(output, inputs, name=name, via=via)
