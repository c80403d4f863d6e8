"""``tc.to_dot(tensors)``: the compute DAG as Graphviz text.

One node per tensor the outputs depend on (placeholders as ellipses, constants as notes,
compute stages as boxes, scatter stages as dashed boxes), one edge per producer → consumer
read.  A stage that still holds a Kronecker delta is drawn red, so a gradient that zero
elimination could not fully clean up stands out.  Render with ``dot -Tsvg dag.dot``; no
Graphviz installation is needed to produce the text.
"""

from __future__ import annotations

from typing import Sequence

from . import expr as E
from .functor import input_tensors, op_exprs, topo_order, walk
from .printer import format_expr, unique_names
from .tensor import ComputeOp, ScatterOp, Tensor


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(tensors: Tensor | Sequence[Tensor], *, name: str = "tecomp",
           bodies: bool = False) -> str:
    """Graphviz ``digraph`` text of the DAG of ``tensors`` (outputs drawn with a bold border).

    ``bodies=True`` adds each compute stage's expression to its label (long for big graphs).
    Render it with Graphviz (``dot -Tsvg``).

    Example::

        >>> A = tc.placeholder((4,), name="A")
        >>> S = tc.compute((4,), lambda i: A[i] * 2.0, name="S")
        >>> print(tc.to_dot(S))
        digraph "tecomp" {
          rankdir=TB;
          node [fontname="monospace", fontsize=10];
          t0 [shape="ellipse", label="A\\nfloat32(4)"];
          t1 [shape="box", penwidth="2", label="S\\nfloat32(4)"];
          t0 -> t1;
        }
    """
    outs = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    order = topo_order(outs)
    names = unique_names(order)
    ids = {id(t): f"t{n}" for n, t in enumerate(order)}
    out_ids = {id(t) for t in outs}
    lines = [f"digraph {_quote(name)} {{", "  rankdir=TB;",
             '  node [fontname="monospace", fontsize=10];']
    for t in order:
        shape = "(" + ", ".join(format_expr(s, names) for s in t.shape) + ")"
        label = f"{names[id(t)]}\n{t.dtype}{shape}"
        attrs: dict[str, str] = {}
        if t.is_placeholder:
            attrs["shape"] = "ellipse"
        elif t.is_constant:
            attrs["shape"] = "note"
            label += "\nconstant"
        elif isinstance(t.op, ScatterOp):
            attrs["shape"] = "box"
            attrs["style"] = "dashed"
            label += "\nscatter-add"
        else:
            attrs["shape"] = "box"
            if isinstance(t.op, ComputeOp) and t.op.tag:
                label += f"\ntag={t.op.tag}"
            if bodies and isinstance(t.op, ComputeOp):
                label += "\n" + format_expr(t.op.body, names)
        if any(isinstance(x, E.Delta) for e in op_exprs(t) for x in walk(e)):
            attrs["color"] = "red"
            label += "\n(delta left)"
        if id(t) in out_ids:
            attrs["penwidth"] = "2"
        attrs["label"] = label
        body = ", ".join(f"{k}={_quote(v)}" for k, v in attrs.items())
        lines.append(f"  {ids[id(t)]} [{body}];")
    for t in order:
        for d in input_tensors(t):
            lines.append(f"  {ids[id(d)]} -> {ids[id(t)]};")
    lines.append("}")
    return "\n".join(lines) + "\n"
