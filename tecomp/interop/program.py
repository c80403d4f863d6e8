"""A differentiable tecomp program, independent of the framework that calls it.

A :class:`Program` is a list of outputs computed from a list of placeholders.  It knows:

* its kernels, built on first use, once for every shape (tecomp kernels bind their symbolic
  sizes at each call): ``kernel("llvm")`` and ``kernel("cuda")``;
* the shapes of its outputs for given input shapes, evaluated with plain Python arithmetic so
  that the sizes may be symbolic integers of the calling framework (``torch.SymInt``): this is
  what a fake/abstract implementation needs (:meth:`output_shapes`);
* its vector-Jacobian program (:meth:`gradient`), itself a :class:`Program`: with one head
  ``H_j`` for every output ``Y_j``, its inputs are the original inputs followed by the heads,
  and its outputs are ``sum_j d<H_j, Y_j>/dX`` for each float input ``X`` (integer inputs such
  as indices get no gradient).  Because the heads are float inputs of the gradient program,
  the gradient of the gradient differentiates with respect to them too: that is the double
  backward pass of reverse-mode frameworks.

Worked example: ``Y = tanh(X W^T)``, one output.  ``gradient()`` has inputs ``(X, W, H)`` and
outputs ``(dX, dW)`` with ``dX = (H * (1 - Y^2)) W``; ``gradient().gradient()`` has inputs
``(X, W, H, U_dX, U_dW)`` and outputs the derivatives of ``<U_dX, dX> + <U_dW, dW>`` with
respect to ``X``, ``W`` and ``H``.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

from .. import dtypes
from .. import expr as E
from ..errors import ArgumentError, TecompError
from ..tensor import Tensor


class Program:
    """``outputs`` computed from the placeholders ``inputs`` (see the module docstring)."""

    def __init__(self, outputs: Sequence[Tensor], inputs: Sequence[Tensor], name: str,
                 *, what: str = "interop") -> None:
        self.outputs = list(outputs)
        self.inputs = list(inputs)
        self.name = name
        for y in self.outputs:
            if not isinstance(y, Tensor):
                raise TecompError(f"{what}: the output {y!r} is not a tensor")
        for t in self.inputs:
            if not isinstance(t, Tensor) or not t.is_placeholder:
                raise TecompError(
                    f"{what}: inputs must be placeholders, got {t!r} (computing "
                    f"{', '.join(repr(y.name) for y in self.outputs)})")
        #: positions (in ``inputs``) of the inputs that get a gradient
        self.float_inputs = [k for k, t in enumerate(self.inputs) if dtypes.is_float(t.dtype)]
        self._kernels: dict[str, Any] = {}
        self._gradient: Program | None = None

    # ------------------------------------------------------------------------ kernels
    def kernel(self, target: str = "llvm") -> Any:
        """The compiled program for ``target`` (built on the first call); it returns one
        array for a single output, else a tuple."""
        hit = self._kernels.get(target)
        if hit is None:
            from ..build_api import build

            outs = self.outputs[0] if len(self.outputs) == 1 else self.outputs
            hit = self._kernels[target] = build(outs, self.inputs, target=target,
                                                name=self.name)
        return hit

    def built(self, target: str = "llvm") -> Any:
        """The kernel for ``target`` if it was built already, else None."""
        return self._kernels.get(target)

    def gradient(self) -> Program:
        """The vector-Jacobian program (built on the first call; see the module docstring).

        Raises :class:`~tecomp.errors.TecompError` when the program has no float input, or
        when tecomp cannot differentiate it (e.g. an op without a derivative rule)."""
        if self._gradient is not None:
            return self._gradient
        from ..autodiff_api import gradient
        from ..dsl import placeholder

        wrt = [self.inputs[k] for k in self.float_inputs]
        if not wrt:
            raise TecompError(f"{self.name}: no float input to differentiate with respect to")
        heads = [placeholder(y.shape, name=f"{y.name}_head", dtype=y.dtype)
                 for y in self.outputs]
        terms: list[list[Tensor]] = [[] for _ in wrt]
        for y, h in zip(self.outputs, heads):
            if not dtypes.is_float(y.dtype):
                continue  # an integer output carries no gradient
            try:
                grads = gradient(y, wrt, head=h)
            except TecompError as err:
                raise TecompError(f"{self.name}: cannot build the gradient ({err})") from err
            for acc, g in zip(terms, grads):
                acc.append(g)
        outs = []
        for x, acc in zip(wrt, terms):
            if not acc:
                raise TecompError(f"{self.name}: no float output depends on {x.name!r}")
            outs.append(acc[0] if len(acc) == 1 else _sum_of(acc, f"d_{x.name}"))
        self._gradient = Program(outs, [*self.inputs, *heads], f"{self.name}_grad")
        return self._gradient

    def gradient_dtypes(self) -> tuple[list[str], list[str]]:
        """The input and output dtypes of :meth:`gradient`'s program, known without building
        it: the inputs then one head per output; one result per float input."""
        ins = [t.dtype for t in self.inputs] + [y.dtype for y in self.outputs]
        return ins, [self.inputs[k].dtype for k in self.float_inputs]

    # ------------------------------------------------------------------------ shapes
    def bind_sizes(self, shapes: Sequence[Sequence[Any]]) -> dict[E.Var, Any]:
        """The symbolic sizes of the inputs bound from ``shapes`` (ints or symbolic ints).

        A dimension that is a bare size variable binds it; one that is affine in a single
        unbound variable (``n + 2``, ``2 * n``) is solved for it; constant dimensions are
        checked when the given extent is a plain int.  Raises ``ArgumentError`` naming the
        input and axis."""
        if len(shapes) != len(self.inputs):
            names = ", ".join(t.name for t in self.inputs)
            raise ArgumentError(f"{self.name}: takes {len(self.inputs)} tensor(s) ({names}), "
                                f"got {len(shapes)}")
        sizes: dict[E.Var, Any] = {}
        pending = []
        for t, shape in zip(self.inputs, shapes):
            if len(shape) != t.ndim:
                raise ArgumentError(f"{self.name}: input {t.name!r} has {t.ndim} dimension(s), "
                                    f"got {len(shape)} (shape {tuple(shape)})")
            for axis, (e, got) in enumerate(zip(t.shape, shape)):
                if isinstance(e, E.Var) and e not in sizes:
                    sizes[e] = got
                elif isinstance(e, E.Const):
                    if isinstance(got, int) and got != e.value:
                        raise ArgumentError(f"{self.name}: input {t.name!r}, axis {axis}: "
                                            f"expected extent {e.value}, got {got}")
                elif not isinstance(e, E.Var):
                    pending.append((t, axis, e, got))
        for t, axis, e, got in pending:
            free = [v for v in _vars(e) if v not in sizes]
            if len(free) == 1:  # affine in it: e = a*v + b
                v = free[0]
                b = eval_size(e, {**sizes, v: 0})
                a = eval_size(e, {**sizes, v: 1}) - b
                sizes[v] = (got - b) // a
            elif free:
                raise ArgumentError(f"{self.name}: input {t.name!r}, axis {axis}: extent {e} "
                                    f"does not determine {', '.join(v.name for v in free)}")
        return sizes

    def output_shapes(self, shapes: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        """The outputs' shapes for inputs of ``shapes`` (ints or symbolic ints)."""
        sizes = self.bind_sizes(shapes)
        return [tuple(eval_size(d, sizes) for d in y.shape) for y in self.outputs]

    # ------------------------------------------------------------------------ naming
    def fingerprint(self, salt: str = "") -> str:
        """A short hash of ``salt``, the program's text, its inputs and their dtypes."""
        from ..printer import show

        text = salt + "|" + show(self.outputs) + "|" + ";".join(
            f"{t.name}:{t.dtype}:{','.join(map(str, t.shape))}" for t in self.inputs)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def __repr__(self) -> str:
        return (f"<Program {self.name!r} ({', '.join(t.name for t in self.inputs)}) -> "
                f"({', '.join(y.name for y in self.outputs)})>")


def _sum_of(parts: list[Tensor], name: str) -> Tensor:
    from ..dsl import compute

    def total(*i: Any) -> Any:
        acc = parts[0][i]
        for p in parts[1:]:
            acc = acc + p[i]
        return acc

    return compute(parts[0].shape, total, name=name)


_SIZE_OPS = {
    E.Add: lambda a, b: a + b, E.Sub: lambda a, b: a - b, E.Mul: lambda a, b: a * b,
    E.FloorDiv: lambda a, b: a // b, E.Mod: lambda a, b: a % b,
    E.Min: min, E.Max: max,
}


def eval_size(e: Any, sizes: dict[E.Var, Any]) -> Any:
    """The value of the size expression ``e`` with ``sizes`` bound: Python arithmetic only,
    so the sizes may be symbolic integers of another framework."""
    if isinstance(e, int):
        return e
    if isinstance(e, E.Const):
        return int(e.value)
    if isinstance(e, E.Var):
        try:
            return sizes[e]
        except KeyError:
            raise ArgumentError(f"the size {e.name!r} is not bound by the inputs' shapes") \
                from None
    if isinstance(e, E.Cast):
        return eval_size(e.value, sizes)
    if isinstance(e, E.Neg):
        return -eval_size(e.a, sizes)
    op = _SIZE_OPS.get(type(e))
    if op is None:
        raise ArgumentError(f"cannot evaluate the extent {e} from the inputs' shapes")
    return op(eval_size(e.a, sizes), eval_size(e.b, sizes))


def _vars(e: Any) -> list[E.Var]:
    if isinstance(e, E.Var):
        return [e]
    out: list[E.Var] = []
    for child in (getattr(e, "a", None), getattr(e, "b", None), getattr(e, "value", None)):
        if isinstance(child, E.Expr):
            out += [v for v in _vars(child) if v not in out]
    return out
