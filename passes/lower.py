"""Lowering: tensor expressions to a :class:`~tecomp.loopir.LoweredFunc`.

``lower(outputs, inputs)`` guarantees a program that computes every output exactly as the
reference evaluator (:func:`tecomp.evaluate`) defines it, in this shape:

1. Stages are the compute (and scatter) tensors reachable from the outputs without passing
   through an input, in the deterministic topological order of
   :func:`tecomp.functor.topo_order` (producers first; outputs in the order given).
2. Cheap element-wise stages are inlined into their consumers (:mod:`.inline`), and a stage
   whose only reader is a crop of it is computed by that reader (:mod:`.absorb_crop`).  Short
   sums over several axes with strided reads become one flat sum over staged columns
   (:mod:`.flatten_sum`), and sums that read with a stride along a short output row are
   computed over the flattened output grid (:mod:`.flatten_rows`); both add gather stages.
3. Each remaining stage is one loop nest in its declaration order (:mod:`.lower_stage`): the
   data axes outermost, each reduction in a local inside them, for every target.  Choosing
   a loop order for the target is the schedule's job (the CPU's "i, k, j" sums and residue
   splitting: :mod:`tecomp.passes.schedule.cpu.sum_order`).  Outputs store into their
   ``"output"`` buffer; other stages into a ``"temp"`` buffer whose ``Allocate`` encloses the
   rest of the program.  An output read by another stage is computed once and read back from
   its output buffer.  An output that is an input, or that appears twice, is copied.

Conventions of the produced :class:`LoweredFunc`, beyond those of :mod:`tecomp.loopir`, that
backends may rely on:

* ``inputs`` has one ``"input"`` buffer per tensor in ``inputs`` (in that order), then one per
  constant tensor (``tc.constant``) the outputs read, in order of first appearance: the caller
  passes their data (:func:`lower_program` returns it); ``outputs`` has one ``"output"``
  buffer per output (in that order).  Buffer names are unique within the function, are
  identifiers, and differ from every parameter name.
* ``params`` lists every size variable, in order of first appearance while scanning
  ``inputs``: for a tensor, the variables that are a whole extent of its shape (dimension
  order); for a scalar ``tc.var``, the variable itself.  A parameter that is a whole extent of
  an input buffer's shape is bound from that array's shape; the others are scalar arguments.
  Every variable in a shape or loop bound is a parameter or an enclosing loop variable.
* Loop variables never shadow an enclosing loop variable or a parameter (reduction axes are
  renamed where needed; data axes keep their names).
* Expressions hold only ``Const``, ``Var``, arithmetic, comparisons, ``And/Or/Not``,
  ``Select``, ``Cast``, ``Call`` and ``BufferLoad`` (no ``TensorRead``, ``Reduce``, ``Delta``,
  ``Zero``).  ``Select`` and the right operand of ``&``/``|`` may contain loads that are out of
  bounds where they are not evaluated (padding): backends evaluate them lazily.
* Reductions accumulate with ``Store(buf, idx, value, reduce=combiner)`` into a ``"local"``
  buffer of shape ``()`` initialised with the combiner's identity (see :mod:`.lower_stage`).
* A scatter stage (``ScatterOp``) is a copy of its ``init`` (or a zero fill) followed by serial
  loops over its axes storing ``Store(buf, indices, value, reduce="sum")`` at data-dependent
  indices; its loops are never ``"parallel"``.  An ``init`` that is an element-wise stage
  (no reduction) read by nothing else is computed straight into the scatter's buffer, in its
  own loop nest, instead of into a buffer of its own that is then copied
  (:func:`_direct_inits`): the gradient of a gather (``tc.ops.take``) zeroes its result once
  instead of zeroing a temporary and copying it.
* A ``For`` of kind ``"parallel"`` is the outermost data loop of a stage: every store in it
  to a non-local buffer indexes that buffer with the loop variable as its first index, so
  iterations write disjoint elements; ``"local"`` buffers allocated inside it are private to
  an iteration.  Reads of buffers written by earlier stages happen after those stages end.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

import numpy as np

from tecomp import expr as E
from tecomp.errors import LoweringError
from tecomp.functor import free_vars, fresh_name, input_tensors, op_exprs, tensor_reads, walk
from tecomp.loopir import Buffer, LoweredFunc
from tecomp.scan import check_not_state
from tecomp.scan_op import ScanOp
from tecomp.tensor import ComputeOp, ScatterOp, Tensor

from .absorb_crop import absorb_crops
from .checkpoint_plan import find_checkpointed
from .flatten_rows import flatten_rows
from .flatten_sum import flatten_sums
from .inline import inline_stages
from .lower_checkpoint import lower_checkpointed
from .lower_scan import lower_scan
from .lower_stage import (
    AllocMark,
    Context,
    block,
    fill,
    lower_scatter,
    lower_stage,
)
from .pad_windows import pad_windows
from .phase_split import split_phases


def _ident(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name or "t")
    return s if s and not s[0].isdigit() else "_" + s


def _tensor_list(x: Any, what: str) -> list[Tensor]:
    items = [x] if isinstance(x, Tensor) else list(x)
    if not items:
        raise LoweringError(f"lower: no {what} given")
    for t in items:
        if not isinstance(t, Tensor):
            raise LoweringError(f"lower: {what} must be tensors, got {t!r}")
    return items


def _split_inputs(inputs: Iterable[Any]) -> tuple[list[Tensor], list[E.Var]]:
    tensors: list[Tensor] = []
    scalars: list[E.Var] = []
    for x in [inputs] if isinstance(inputs, Tensor) else list(inputs):
        if isinstance(x, Tensor):
            if any(x is t for t in tensors):
                raise LoweringError(f"lower: the input {x.name!r} is listed twice")
            tensors.append(x)
        elif isinstance(x, E.Var):
            if x in scalars:
                raise LoweringError(f"lower: the scalar input {x.name!r} is listed twice")
            scalars.append(x)
        else:
            raise LoweringError(
                f"lower: inputs must be placeholders or tc.var scalars, got {x!r}")
    return tensors, scalars


def _stages(outputs: list[Tensor], cut: set[int]) -> tuple[list[Tensor], list[Tensor]]:
    """Stages reachable from ``outputs`` without entering an input, producers first, and the
    constant tensors they read (first appearance first)."""
    order: list[Tensor] = []
    consts: list[Tensor] = []
    done: set[int] = set()

    def leaf(t: Tensor, reader: Tensor | None) -> bool:
        if id(t) in cut or id(t) in done:
            return True
        if t.is_constant:
            done.add(id(t))
            consts.append(t)
            return True
        if t.is_placeholder:
            _unbound(t, reader)
        return False

    for root in outputs:
        if leaf(root, None):
            continue
        stack: list[tuple[Tensor, int, list[Tensor]]] = [(root, 0, input_tensors(root))]
        on_path = {id(root)}
        while stack:
            t, i, deps = stack.pop()
            if i < len(deps):
                stack.append((t, i + 1, deps))
                d = deps[i]
                if id(d) in on_path or leaf(d, t):
                    continue
                on_path.add(id(d))
                stack.append((d, 0, input_tensors(d)))
            else:
                on_path.discard(id(t))
                done.add(id(t))
                order.append(t)
    return order, consts


def _unbound(p: Tensor, reader: Tensor | None) -> None:
    check_not_state(p, reader)
    where = f"read by {reader.name!r}" if reader is not None else "listed as an output"
    raise LoweringError(
        f"placeholder {p.name!r} ({where}) is not in inputs; add it to the inputs list")


def _params(inputs: list[Any]) -> list[E.Var]:
    params: list[E.Var] = []
    for x in inputs:
        cands = [s for s in x.shape if isinstance(s, E.Var)] if isinstance(x, Tensor) else [x]
        for v in cands:
            if v not in params:
                params.append(v)
    return params


def _check_vars(e: E.Expr, allowed: set[E.Var], what: str) -> None:
    for v in sorted(free_vars(e), key=lambda v: v.name):
        if v not in allowed:
            raise LoweringError(
                f"variable {v.name!r} in {what} is neither an axis, a reduction axis, nor a "
                "size available from the inputs (a whole extent of an input's shape or a "
                "scalar tc.var in inputs); add it to inputs")


def _validate(stages: list[Tensor], tensors: list[Tensor], params: set[E.Var]) -> None:
    for t in tensors:
        for d, s in enumerate(t.shape):
            _check_vars(s, params, f"the shape of input {t.name!r} (axis {d}: {s})")
    for t in stages:
        for d, s in enumerate(t.shape):
            _check_vars(s, params, f"the shape of {t.name!r} (axis {d}: {s})")
        if isinstance(t.op, ComputeOp):
            axes = {ax.var for ax in t.op.axes}
            _check_vars(t.op.body, params | axes, f"the body of {t.name!r}")
        elif isinstance(t.op, ScatterOp):
            bound = set(params)
            for ax in t.op.axes:
                _check_vars(ax.lo, bound, f"the bounds of axis {ax.var.name!r} of {t.name!r}")
                _check_vars(ax.extent, bound,
                            f"the bounds of axis {ax.var.name!r} of {t.name!r}")
                bound.add(ax.var)
            for e in op_exprs(t)[2 * len(t.op.axes):]:
                _check_vars(e, bound, f"the scatter {t.name!r}")
        elif isinstance(t.op, ScanOp):
            for b in t.op.scan.body:
                axes = {ax.var for ax in b.op.axes}
                for e in op_exprs(b):
                    _check_vars(e, params | axes, f"the body of {b.name!r}")
        else:
            raise LoweringError(f"cannot lower {t!r}: unknown operation {type(t.op).__name__}")


def _var_names(stages: list[Tensor]) -> set[str]:
    names: set[str] = set()
    for t in stages:
        if isinstance(t.op, (ComputeOp, ScatterOp)):
            names |= {ax.var.name for ax in t.op.axes}
        for e in op_exprs(t):
            for x in walk(e):
                if isinstance(x, E.Var):
                    names.add(x.name)
                elif isinstance(x, E.Reduce):
                    names |= {ax.var.name for ax in x.axes}
    return names


def lower_program(outputs: Tensor | Sequence[Tensor], inputs: Iterable[Any], *,
                  name: str | None = None,
                  cpu: bool = False) -> tuple[LoweredFunc, dict[Buffer, np.ndarray]]:
    """:func:`lower`, also returning the data of the constant tensors' input buffers.

    ``cpu``: also the rewrites that turn convolution windows into implicit GEMMs for the CPU's
    register tiles (:mod:`.phase_split`, :mod:`.pad_windows`, the in-place mode of
    :mod:`.flatten_rows`); the CUDA schedule tiles convolutions over their own axes."""
    outs = _tensor_list(outputs, "outputs")
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    tensors, _ = _split_inputs(inputs)
    cut = {id(t) for t in tensors}
    stages, consts = _stages(outs, cut)
    param_list = _params(inputs)
    params = set(param_list)
    _validate(stages, tensors, params)
    for t in outs:
        for d, s in enumerate(t.shape):
            _check_vars(s, params, f"the shape of output {t.name!r} (axis {d}: {s})")

    ctx = Context({}, {p.name for p in param_list})
    ctx.taken |= ctx.params | _var_names(stages)
    in_bufs: list[Buffer] = []
    bnames: set[str] = set(ctx.params)

    def new_buffer(t: Tensor, scope: str) -> Buffer:
        b = Buffer(fresh_name(_ident(t.name), bnames), t.shape, t.dtype, scope)
        bnames.add(b.name)
        return b

    data: dict[Buffer, np.ndarray] = {}
    for t in tensors + consts:
        b = new_buffer(t, "input")
        ctx.buffers[id(t)] = b
        in_bufs.append(b)
        if t.is_constant:
            data[b] = t.op.data
    out_bufs: list[Buffer] = []
    copies: list[tuple[Tensor, Buffer]] = []
    for t in outs:
        b = new_buffer(t, "output")
        out_bufs.append(b)
        if id(t) in ctx.buffers:
            copies.append((t, b))
        else:
            ctx.buffers[id(t)] = b
    ctx.taken |= bnames

    keep = {id(t) for t in outs} | {id(x) for t in stages if isinstance(t.op, ScanOp)
                                    for x in t.op.scan.outer} \
        | {id(t) for t in stages if t.attrs.get("keep_buffer")}
    exprs, inlined = inline_stages(stages, keep=keep)
    live = [t for t in stages if id(t) not in inlined]
    found = find_checkpointed(live, exprs)
    if found is not None:  # tc.gradient(checkpoint=k): the time loop tiled (no crops/flattening)
        items = lower_checkpointed(ctx, live, exprs, found, {id(t) for t in outs})
        return _finish(ctx, items, copies, outs, name, in_bufs, out_bufs, param_list), data
    absorb_crops(stages, exprs, inlined, keep=keep)
    scans_done: set[int] = set()
    if cpu:
        stages = pad_windows(split_phases(stages, exprs, inlined), exprs, inlined)
    stages = flatten_rows(flatten_sums(stages, exprs, inlined), exprs, inlined,
                          max_in_place=64 if cpu else 0)
    items: list = []
    direct = _direct_inits([t for t in stages if id(t) not in inlined], exprs, keep)
    for t in stages:
        if id(t) in inlined or id(t) in direct:
            continue
        if isinstance(t.op, ScanOp):  # every state of the scan at its first member
            if id(t.op.scan) not in scans_done:
                scans_done.add(id(t.op.scan))
                members = [x for x in stages if isinstance(x.op, ScanOp)
                           and x.op.scan is t.op.scan]
                items.extend(lower_scan(ctx, t.op.scan, members))
            continue
        buf = ctx.buffers.get(id(t))
        if buf is None:
            buf = Buffer(ctx.fresh(_ident(t.name)), t.shape, t.dtype, "temp")
            ctx.buffers[id(t)] = buf
            items.append(AllocMark(buf))
        if isinstance(t.op, ScatterOp):
            first = t.op.init
            if first is not None and id(first) in direct:
                assert isinstance(first.op, ComputeOp)
                items.append(lower_stage(ctx, buf.name, first.op.axes, exprs[id(first)][0], buf))
            else:
                init = None if first is None else ctx.buffer_of(first)
                items.append(fill(buf, init, ctx.params))
            items.append(lower_scatter(ctx, buf.name, t.op, exprs[id(t)], buf))
            continue
        assert isinstance(t.op, ComputeOp)
        items.append(lower_stage(ctx, buf.name, t.op.axes, exprs[id(t)][0], buf))
    return _finish(ctx, items, copies, outs, name, in_bufs, out_bufs, param_list), data


#: compute a scatter's element-wise ``init`` straight into its buffer (:func:`_direct_inits`);
#: False: into a buffer of its own, then copied (an A/B switch of ``benchmarks/ab_cpu_steps.py``)
DIRECT_INITS = True


def _direct_inits(live: list[Tensor], exprs: dict[int, tuple[E.Expr, ...]],
                  keep: set[int]) -> set[int]:
    """The ids of the scatters' ``init`` stages that are computed straight into their
    scatter's buffer: element-wise computes (no reduction) of the scatter's shape and dtype,
    not kept (outputs, scan states, ``keep_buffer``), and read by nothing but that one
    scatter's ``init``.  Their stage ran before the scatter's and read only buffers no later
    stage writes (each stage writes its own buffer), so computing it at the scatter's place
    gives the same values; the copy and the buffer go."""
    if not DIRECT_INITS or any(isinstance(t.op, ScanOp) for t in live):
        return set()  # a scan's step reads its outer tensors outside ``exprs``
    inits: dict[int, int] = {}
    for t in live:
        if isinstance(t.op, ScatterOp) and t.op.init is not None:
            inits[id(t.op.init)] = inits.get(id(t.op.init), 0) + 1
    if not inits:
        return set()  # no scatter with an init: no walk of the program's expressions
    read = {id(r.tensor) for t in live for e in exprs.get(id(t), ()) for r in tensor_reads(e)}
    out: set[int] = set()
    for t in live:
        first = t.op.init if isinstance(t.op, ScatterOp) else None
        if first is None or inits[id(first)] != 1 or id(first) in read or id(first) in keep:
            continue
        if not isinstance(first.op, ComputeOp) or id(first) not in exprs \
                or any(isinstance(x, E.Reduce) for x in walk(exprs[id(first)][0])):
            continue
        if first.dtype == t.dtype and tuple(first.shape) == tuple(t.shape):
            out.add(id(first))
    return out


def _finish(ctx: Context, items: list, copies: list, outs: list[Tensor], name: str | None,
            in_bufs: list[Buffer], out_bufs: list[Buffer], param_list: list) -> LoweredFunc:
    for t, dst in copies:
        items.append(fill(dst, ctx.buffers[id(t)], ctx.params))
    fname = _ident(name) if name else _ident(outs[0].name)
    return LoweredFunc(fname, tuple(in_bufs), tuple(out_bufs), tuple(param_list), block(items))


def lower(outputs: Tensor | Sequence[Tensor], inputs: Iterable[Any], *,
          name: str | None = None) -> LoweredFunc:
    """Lower ``outputs`` (computed from ``inputs``) to a :class:`LoweredFunc`.

    ``inputs`` lists the placeholders (any tensor listed is treated as given) and the scalar
    ``tc.var`` sizes that no input shape determines.  Raises :class:`tc.LoweringError` naming
    the placeholder or variable when the outputs need something the inputs do not provide.
    Constant tensors become extra input buffers; :func:`lower_program` also returns their data.
    """
    return lower_program(outputs, inputs, name=name)[0]
