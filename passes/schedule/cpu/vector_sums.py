"""Vector partial sums kept across a reduction nest whose innermost loop is short (CPU
scheduling).

The weight gradient of a convolution over small images sums over ``(n, y, x)`` with ``x``
only 8 or 16 long, and :mod:`.dot` blocks it by kernel taps into scalar accumulators::

    W_grad_sum0_0 = 0.0  ..  W_grad_sum3_3 = 0.0
    for (t, 0, 8) { for (t_2, 0, 16, step 8) { for (t_1, 0, 16) {
      W_grad_sum0_0 += H[.., t_1] * X[.., t_1] + ..
      ..                                                  (16 accumulators)
    } } }

LLVM vectorises the ``t_1`` loop alone: each time it runs, its vector partial sums are added
up across the lanes again (a horizontal sum per accumulator for every 16 terms), which cost
more than the multiply-adds.  :func:`vector_sums` keeps one vector of partial sums per
accumulator for the whole nest and adds its lanes once, after it::

    allocate W_grad_sum0_0_v: float32[16] (local) { ..
      lanes for (jj, 0, 16) { W_grad_sum0_0_v[jj] = 0.0  .. }
      for (t, 0, 8) { for (t_2, 0, 16, step 8) { for (t_1, 0, 16, step 16) {
        lanes for (jj, 0, 16) { W_grad_sum0_0_v[jj] = W_grad_sum0_0_v[jj] + <term at t_1 + jj>
                                .. } } } }
      for (jj, 0, 16) { W_grad_sum0_0 += W_grad_sum0_0_v[jj]  .. } }

When it applies: a perfect nest of serial loops of constant trip counts, at least two deep,
at most ``max_terms`` terms in all (longer float32 sums are :mod:`.reduce_accumulators`'
blocked float64 ones), whose innermost loop runs a multiple of the vector width (or, when
shorter than one vector, of a half or a quarter of it, at least 4 lanes: rows of 8 on a
16-lane host) and holds only accumulations ``acc += v`` into distinct float scalar locals
that ``v`` does not read, each ``v`` a vector form along the loop
(:func:`tecomp.lanes.vector_form`), and at most as many accumulators as the vector registers
leave room for.

Legality: every accumulator receives each of its terms exactly once (lane ``jj`` of step
``q`` is the term of ``t_1 = q + jj``), after its own initial value; only the association
of the additions changes, as vectorising a sum already does (rounding only).
"""

from __future__ import annotations

from dataclasses import replace

from tecomp import expr as E
from tecomp.functor import fresh_name
from tecomp.host import Host
from tecomp.lanes import vector_form
from tecomp.loopir import Allocate, Buffer, BufferLoad, For, LoweredFunc, Seq, Stmt, Store
from tecomp.stmt_functor import StmtMutator, bound_names, subst_expr, walk_expr

from .microkernel import index_const, vector_registers
from .tile import const_extent

_FLOAT = {"float32": 4, "float64": 8}


def vector_sums(func: LoweredFunc, host: Host, *, max_terms: int = 16384) -> LoweredFunc:
    """``func`` with the short innermost reduction loops of the module doc accumulating in
    vector partial sums over their whole nest."""
    names = bound_names(func.body) | {p.name for p in func.params}
    body = _Sums(host, max_terms, names).visit(func.body)
    return func if body is func.body else replace(func, body=body)


class _Sums(StmtMutator):
    def __init__(self, host: Host, max_terms: int, names: set[str]) -> None:
        self.host, self.max_terms, self.names = host, max_terms, names

    def visit_For(self, s: For) -> Stmt:
        out = self._rewrite(s)
        return out if out is not None else super().visit_For(s)

    def _rewrite(self, nest: For) -> Stmt | None:
        loops = [nest]
        while isinstance(loops[-1].body, For):
            loops.append(loops[-1].body)
        if len(loops) < 2 or any(x.kind != "serial" for x in loops):
            return None
        trips = [const_extent(x.lo, x.hi) for x in loops]
        if None in trips:
            return None
        steps = [-(-n // x.step) for n, x in zip(trips, loops)]
        total = 1
        for n in steps:
            total *= n
        inner = loops[-1]
        items = inner.body.stmts if isinstance(inner.body, Seq) else (inner.body,)
        accs = [st.buffer for st in items if isinstance(st, Store)]
        if (len(accs) != len(items) or len(set(accs)) != len(accs) or total > self.max_terms
                or len(accs) > vector_registers(self.host) - 4):
            return None
        dtype = accs[0].dtype
        if dtype not in _FLOAT or inner.step != 1:
            return None
        lanes = self.host.lanes(_FLOAT[dtype])
        while lanes > 4 and trips[-1] < lanes:
            lanes //= 2  # rows of 8 on a 16-lane host: 8-lane partial sums
        if trips[-1] % lanes:
            return None  # rows of 40: LLVM's whole vectors and a remainder
        for st in items:
            if (st.reduce != "sum" or st.indices or st.buffer.scope != "local"
                    or st.buffer.dtype != dtype or st.buffer.shape):
                return None
            if any(isinstance(x, BufferLoad) and x.buffer in accs for x in walk_expr(st.value)):
                return None
        jj = E.Var(fresh_name("jj", self.names), "int64")
        self.names.add(jj.name)
        q = E.Var(fresh_name(f"{inner.var.name}_q", self.names), inner.var.dtype)
        self.names.add(q.name)
        parts = []
        for a in accs:
            name = fresh_name(f"{a.name}_v", self.names)
            self.names.add(name)
            parts.append(Buffer(name, (index_const(lanes),), dtype, "local"))
        at = E.add(q, jj)
        adds = [Store(v, (jj,), E.add(BufferLoad(v, (jj,), dtype),
                                       subst_expr(st.value, {inner.var: at})))
                for v, st in zip(parts, items)]
        step = For(jj, index_const(0), index_const(lanes), Seq(tuple(adds)), kind="lanes")
        if vector_form(step) is None:
            return None
        zero = For(jj, index_const(0), index_const(lanes), Seq(tuple(
            Store(v, (jj,), E.Const(0.0, dtype)) for v in parts)), kind="lanes")
        new_inner = For(q, inner.lo, inner.hi, step, step=lanes)
        body: Stmt = new_inner
        for x in reversed(loops[:-1]):
            body = replace(x, body=body)
        combine = For(jj, index_const(0), index_const(lanes), Seq(tuple(
            Store(a, (), BufferLoad(v, (jj,), dtype), "sum") for a, v in zip(accs, parts))))
        out: Stmt = Seq((zero, body, combine))
        for v in reversed(parts):
            out = Allocate(v, out)
        return out

