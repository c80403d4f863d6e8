"""Hand lowering for tests: element-wise tensors to loop IR without ``passes/lower.py``."""

from __future__ import annotations

import tecomp as tc
from tecomp import expr as E
from tecomp.functor import ExprMutator, free_vars
from tecomp.loopir import Buffer, BufferLoad, For, LoweredFunc, Seq, Stmt, Store


class ToLoads(ExprMutator):
    """Tensor reads of placeholders become buffer loads."""

    def __init__(self, bufs: dict[int, Buffer]) -> None:
        super().__init__()
        self.bufs = bufs

    def visit_TensorRead(self, e: E.TensorRead) -> E.Expr:
        return BufferLoad(self.bufs[id(e.tensor)], tuple(self.visit(i) for i in e.indices),
                          e.dtype)


def lower_elementwise(name: str, outs: list[tc.Tensor], inputs: list[tc.Tensor],
                      kind: str = "parallel") -> LoweredFunc:
    """One loop nest per reduction-free output (outermost loop of kind ``kind``)."""
    bufs = {id(p): Buffer(p.name, p.shape, p.dtype, "input") for p in inputs}
    conv = ToLoads(bufs)
    stages: list[Stmt] = []
    obufs = []
    for out in outs:
        y = Buffer(out.name, out.shape, out.dtype, "output")
        obufs.append(y)
        axes = out.op.axes
        stmt: Stmt = Store(y, tuple(a.var for a in axes), conv.visit(out.op.body))
        for d in range(len(axes) - 1, -1, -1):
            a = axes[d]
            stmt = For(a.var, a.lo, a.extent, stmt, kind=kind if d == 0 else "serial")
        stages.append(stmt)
    params = sorted({v for t in [*outs, *inputs] for s in t.shape for v in free_vars(s)},
                    key=lambda v: v.name)
    body = stages[0] if len(stages) == 1 else Seq(tuple(stages))
    return LoweredFunc(name, tuple(bufs.values()), tuple(obufs), tuple(params), body)
