"""The pass order, written once: declare -> differentiate -> zero elimination -> lower
(target-independent) -> bounds checks -> schedule(target) -> codegen(target).

Every public entry point (``tc.gradient``, ``tc.optimize``, ``tc.lower``, ``tc.cost``,
``tc.build``) calls the functions here, and each pass runs through
:func:`tecomp.diagnostics.run_pass`, so ``tc.pass_log`` sees every pass whichever entry point
ran it.  Passes never call back into this module or the API.

The order (after Halide's ``lower_impl``)::

    differentiate        autodiff (reverse mode; forward/DOF come from forward_api)
    optimize             zero elimination, then simplification
    lower                tensor expressions -> loop IR, target-independent
    bounds_checked       data-dependent accesses checked, affine ones proven (remembered)
    schedule(target)     passes/schedule/cpu or passes/schedule/gpu
    codegen(target)      codegen/llvm or codegen/cuda, through the Target interface

``optimize=False``.  A tensor returned by ``tc.gradient(..., optimize=False)`` (or
``tc.jacobian``) records that choice (``tensor.attrs["as_written"]``): :func:`lower` and so
``tc.lower``, ``tc.cost`` and ``tc.build`` do not optimise it later; the other outputs of
the same program are optimised as usual.  ``tc.cost(..., optimize=False)`` and
``tc.lower(..., optimize=False)`` skip optimisation for every output; ``optimize=True``
optimises every output, those recorded as written too (to compare a naive gradient with
its optimised form).

Schedules and caches.  ``tc.build`` hands the bounds-checked program to the target with its
schedule (:func:`target`); the target looks the program up in its caches first and schedules
it only when it compiles it (:mod:`tecomp.codegen.target`).  ``tc.lower(..., target=...)``
shows the scheduled loop IR of a target.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .diagnostics import run_pass
from .loopir import Buffer, LoweredFunc
from .tensor import Tensor

TARGETS = ("llvm", "cuda")
#: the attribute of a tensor built with ``optimize=False``
AS_WRITTEN = "as_written"


# ------------------------------------------------------------------ tensor-expression passes
def differentiate(output: Tensor, inputs: Sequence[Tensor], head: Tensor, *,
                  overrides: Mapping[Any, Any] | None = None, optimize: bool = True,
                  check: Callable[[Tensor], None] | None = None) -> list[Tensor]:
    """Reverse-mode adjoints of ``inputs`` (arguments already checked by the API), then, with
    ``optimize``, zero elimination and simplification; without, marked as written.

    From the persistent cache when this gradient was computed before
    (:mod:`tecomp.gradient_cache`; not with ``overrides``, not inside ``tc.pass_log()``);
    else ``check(output)`` (the API's refusal of a forward its build would refuse) runs
    first."""
    from . import gradient_cache
    from .codegen.disk_cache import default_cache
    from .diagnostics import recording_passes
    from .logs import timed

    keyed = None
    if overrides is None and default_cache() is not None and not recording_passes():
        with timed("gradient_cache", logging.INFO):
            keyed = gradient_cache.gradient_key(output, inputs, head, optimize=optimize)
            found = gradient_cache.load(*keyed) if keyed is not None else None
        if found is not None:
            return found
    if check is not None:
        check(output)
    from .passes.autodiff import differentiate as reverse  # not imported on a cache hit

    grads = run_pass("autodiff", reverse, output, inputs, head, overrides=overrides)
    grads = optimize_tensors(grads) if optimize else as_written(grads)
    if keyed is not None:
        gradient_cache.store(keyed[0], keyed[1], grads)
    return grads


def forward_jacobian(output: Tensor, x: Tensor, *, optimize: bool = True) -> Tensor:
    """The Jacobian of ``output`` w.r.t. ``x`` by forward mode (a graph with a scan), then
    optimised or marked as written as :func:`differentiate`."""
    from .passes.forward.hessian import forward_jacobian as forward

    jac = run_pass("autodiff", forward, output, x)
    return (optimize_tensors([jac]) if optimize else as_written([jac]))[0]


def optimize_tensors(outputs: Sequence[Tensor]) -> list[Tensor]:
    """Zero elimination, then simplification, on every stage of ``outputs``."""
    from .passes.simplify import simplify
    from .passes.zero_elimination import eliminate_zeros

    outs = run_pass("zero_elimination", eliminate_zeros, list(outputs), log_tensors=True)
    return run_pass("simplify", simplify, outs, log_tensors=True)


def as_written(tensors: list[Tensor]) -> list[Tensor]:
    """``tensors``, recorded as not to be optimised by later pipeline runs."""
    for t in tensors:
        if not t.is_placeholder:
            t.attrs[AS_WRITTEN] = True
    return tensors


def prepare(outputs: Sequence[Tensor], *, optimize: bool | None = None) -> list[Tensor]:
    """``outputs`` optimised: with ``optimize=None`` all except those built with
    ``optimize=False`` (kept in place), with ``True`` all of them, with ``False`` none."""
    outs = list(outputs)
    todo = [n for n, t in enumerate(outs)
            if optimize or (optimize is None and not t.attrs.get(AS_WRITTEN))]
    if todo:
        done = optimize_tensors([outs[n] for n in todo])
        for n, t in zip(todo, done):
            outs[n] = t
    return outs


# ------------------------------------------------------------------ loop-IR passes
def lower(outputs: Sequence[Tensor], inputs: Iterable[Any], *, name: str | None = None,
          optimize: bool | None = None,
          target_name: str | None = None) -> tuple[LoweredFunc, dict[Buffer, np.ndarray]]:
    """The loop IR of ``outputs`` and the data of its constant buffers: target-independent,
    with the CPU's implicit-GEMM rewrites of convolution windows for ``target_name="llvm"``
    (:func:`tecomp.passes.lower.lower_program`'s ``cpu``)."""
    from .passes.lower import lower_program

    prepared = prepare(outputs, optimize=optimize)                 # zero elimination
    return run_pass("lower", lower_program, prepared, inputs, name=name,
                    cpu=target_name == "llvm")                     # -> loop IR


def bounds_checked(func: LoweredFunc, *, check_bounds: bool = True) -> tuple[LoweredFunc, Any]:
    """The bounds pass on ``func`` (a verdict "in bounds" is remembered)."""
    from .proof_cache import bounds_checked as checked

    return run_pass("bounds_check", checked, func, check_bounds=check_bounds)


def schedule_of(target_name: str) -> Any:
    """The schedule of a target as a :class:`~tecomp.codegen.target.Schedule` (its function
    and a digest of the source it runs)."""
    from .codegen.target import Schedule

    check_target(target_name)
    # a schedule runs modules of its own folder and others (lowering's helpers, index
    # folding, the lane-loop rules of the IR): versioned by all of tecomp's own source below
    # the targets, the digest the program cache uses (computed once per process)
    from .program_cache import passes_version

    if target_name == "llvm":
        from .passes.schedule import cpu

        return Schedule(cpu.schedule_cpu, passes_version())
    from .passes.schedule import gpu

    return Schedule(gpu.schedule_gpu, passes_version())


def target(target_name: str, **options: Any) -> Any:
    """The :class:`~tecomp.codegen.target.Target` called ``target_name``, with its schedule."""
    check_target(target_name)
    if target_name == "llvm":
        from .codegen.llvm import LlvmTarget

        return LlvmTarget(schedule_of("llvm"), **options)
    from .codegen.cuda.target import CudaTarget

    return CudaTarget(schedule_of("cuda"), **options)


def check_target(target_name: Any) -> None:
    """Raise :class:`~tecomp.errors.TecompError` unless ``target_name`` names a target."""
    from .errors import TecompError

    if not isinstance(target_name, str) or target_name not in TARGETS:
        raise TecompError(f"unknown target {target_name!r}; valid targets are "
                          f"{', '.join(map(repr, TARGETS))}")


def check_checkpoint_target(outputs: Sequence[Tensor], target_name: str) -> None:
    """Raise :class:`~tecomp.errors.TecompError` for a gradient built with ``checkpoint=k``
    and a target other than the CPU: the checkpointed lowering's nested time loops have no
    GPU schedule."""
    from .errors import TecompError
    from .scan import checkpoint_of

    if target_name != "llvm" and checkpoint_of(outputs) is not None:
        raise TecompError(
            f"a gradient built with checkpoint=k runs on the CPU (target 'llvm') only, not on "
            f"target {target_name!r}; for {target_name!r} build the gradient without "
            "checkpoint=")


def scheduled(func: LoweredFunc, target_name: str, *, check_bounds: bool = True) -> LoweredFunc:
    """``func`` as the target compiles it: bounds-checked, then scheduled (for CUDA, the loop
    IR the GPU schedule cuts into kernels)."""
    func, bounds = bounds_checked(func, check_bounds=check_bounds)     # bounds checks
    sched = schedule_of(target_name)
    if target_name == "llvm":
        return run_pass("schedule.llvm", sched.run, func, threads=True)  # CPU schedule
    records = frozenset() if bounds is None else frozenset((bounds.error,))
    return run_pass("schedule.cuda", sched.run, func, records=records).func  # GPU schedule


# ------------------------------------------------------------------ the whole pipeline
def loop_program(outputs: Sequence[Tensor], inputs: Sequence[Any], *, target_name: str,
                 name: str | None, check_bounds: bool
                 ) -> tuple[LoweredFunc, dict[Buffer, np.ndarray], Any]:
    """The bounds-checked loop program of ``outputs``, its constants and its bounds record:
    from the persistent cache when this program was built before (:mod:`tecomp.program_cache`;
    not inside ``tc.pass_log()``), else zero elimination, lowering and the bounds pass."""
    from . import program_cache
    from .codegen.disk_cache import default_cache
    from .diagnostics import recording_passes
    from .logs import timed

    key = None
    if default_cache() is not None and not recording_passes():
        with timed("program_cache", logging.INFO):
            key = program_cache.program_key(outputs, inputs, name=name,
                                            check_bounds=check_bounds, target_name=target_name)
            found = program_cache.load(key) if key is not None else None
        if found is not None:
            return found
    func, constants = lower(outputs, inputs, name=name,               # declare .. lower
                            target_name=target_name)
    func, bounds = bounds_checked(func, check_bounds=check_bounds)     # bounds checks
    if key is not None:
        program_cache.store(key, func, constants, bounds)
    return func, constants, bounds


def build(outputs: Sequence[Tensor], inputs: Sequence[Any], *, target_name: str = "llvm",
          name: str | None = None, check_bounds: bool = True, single: bool = False) -> Any:
    """A kernel for ``outputs``: every pass in order, then the target's code generator."""
    check_target(target_name)
    check_checkpoint_target(outputs, target_name)
    tgt = target(target_name)                                          # schedule + codegen
    with tgt.preparing():
        func, constants, bounds = loop_program(outputs, inputs, target_name=target_name,
                                               name=name, check_bounds=check_bounds)
        return run_pass(f"codegen.{target_name}", tgt.build, func, inputs=inputs,
                        outputs=list(outputs), hidden=constants, single=single,
                        bounds=bounds)
