"""``tc.build``: lower a program and compile it into a callable :class:`Kernel`.

``build(outputs, inputs, target="llvm", name=None)`` runs the same pipeline as ``tc.lower``
(zero elimination, simplification, lowering to loop IR), the bounds pass, then the target's code
generator.  For ``target="llvm"`` that is :mod:`tecomp.codegen.llvm`: LLVM IR, the O3 pipeline
with vectorisation for the host CPU, and a JIT; the compiled code is cached in memory and on
disk, keyed by the lowered program, so building the same program again (in this process or a
later one) compiles it once.  A program the bounds pass proved in bounds is not proved again
(:mod:`tecomp.codegen.proof_cache`).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from .errors import TecompError
from .tensor import Tensor

TARGETS = ("llvm", "cuda")


def build(outputs: Tensor | Sequence[Tensor], inputs: Iterable[Any], target: str = "llvm",
          name: str | None = None, *, check_bounds: bool = True) -> Any:
    """Compile ``outputs`` computed from ``inputs`` into a kernel.

    ``inputs`` lists the placeholders, and any scalar ``tc.var`` that no input shape
    determines, in the order the kernel takes its arguments.  The kernel returns one array
    when ``outputs`` is a single tensor, else a tuple.  Failures to compile raise
    :class:`~tecomp.errors.CompileError` naming the stage (emit, verify, optimise, jit).

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
    if not isinstance(target, str) or target not in TARGETS:
        raise TecompError(
            f"unknown target {target!r}; valid targets are {', '.join(map(repr, TARGETS))}")
    if isinstance(inputs, Tensor):
        inputs = [inputs]
    inputs = list(inputs)
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)

    from .diagnostics import run_pass
    from .lowering_api import lower

    lowered = lower(outs, inputs, name=name)
    # data-dependent accesses checked; affine accesses out of range wherever they run are
    # build errors either way (a program proven before is not proved again)
    from .codegen.proof_cache import bounds_checked

    func, bounds = bounds_checked(lowered.func, check_bounds=check_bounds)
    if target == "cuda":  # CUDA C; compiled with NVRTC/nvcc when available, run on a GPU
        from .codegen.cuda.kernel import build_cuda

        return run_pass("codegen.cuda", build_cuda, func, inputs=inputs, outputs=outs,
                        hidden=lowered.constants, single=single, bounds=bounds)
    from .codegen.llvm import build_kernel

    return run_pass("codegen.llvm", build_kernel, func, inputs=inputs, outputs=outs,
                    hidden=lowered.constants, single=single, bounds=bounds)
