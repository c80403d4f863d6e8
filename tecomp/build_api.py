"""``tc.build``: lower a program and compile it into a callable :class:`Kernel`.

``build(outputs, inputs, target="llvm", name=None)`` runs the pipeline
(:func:`tecomp.pipeline.build`): zero elimination, simplification, lowering to loop IR, the
bounds pass, then the target (:mod:`tecomp.codegen.target`) with its schedule.  For
``target="llvm"`` that is :mod:`tecomp.codegen.llvm`: the CPU schedule, LLVM IR, the O3
pipeline with vectorisation for the host CPU, and a JIT; the compiled code is cached in memory
and on disk, keyed by the lowered program, so building the same program again (in this
process or a later one) compiles it once.  A program the bounds pass proved in bounds is not
proved again (:mod:`tecomp.proof_cache`).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from .pipeline import TARGETS, check_target
from .tensor import Tensor

__all__ = ["TARGETS", "build"]


def build(outputs: Tensor | Sequence[Tensor], inputs: Iterable[Any], target: str = "llvm",
          name: str | None = None, *, check_bounds: bool = True) -> Any:
    """Compile ``outputs`` computed from ``inputs`` into a kernel.

    ``inputs`` lists the placeholders, and any scalar ``tc.var`` that no input shape
    determines, in the order the kernel takes its arguments.  The kernel returns one array
    when ``outputs`` is a single tensor, else a tuple.  Failures to compile raise
    :class:`~tecomp.errors.CompileError` naming the stage (emit, verify, optimise, jit).
    Outputs of ``tc.gradient(..., optimize=False)`` are compiled as written.

    With ``check_bounds`` (the default) every read or write at a data-dependent index (through
    an integer index tensor) is checked (:mod:`tecomp.passes.bounds_check`): an index out of
    range raises :class:`~tecomp.errors.IndexBoundsError` naming the tensor and position after
    the call.  ``check_bounds=False`` skips the checks (a few integer operations per such
    access) and leaves such reads unchecked.  Both targets check (on CUDA, threads race only
    on which failure is recorded).

    Example::

        >>> n = tc.var("n")
        >>> A = tc.placeholder((n, 4), name="A")
        >>> k = tc.reduce_axis(4, name="k")
        >>> S = tc.compute((n,), lambda i: tc.sum(A[i, k], axis=k), name="S")
        >>> (dA,) = tc.gradient(S, [A])
        >>> kernel = tc.build([S, dA], [A])               # n is bound from the array
        >>> s, da = kernel(np.arange(8, dtype=np.float32).reshape(2, 4))
        >>> s, da.shape
        (array([ 6., 22.], dtype=float32), (2, 4))
    """
    from . import pipeline

    check_target(target)
    if isinstance(inputs, Tensor):
        inputs = [inputs]
    inputs = list(inputs)
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    return pipeline.build(outs, inputs, target_name=target, name=name,
                          check_bounds=check_bounds, single=single)
