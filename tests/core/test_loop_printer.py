"""Golden text of the loop-IR printer (the only string comparisons of the loop IR)."""

from __future__ import annotations

import tecomp as tc
from tecomp import expr as E
from tecomp.loop_printer import format_func, format_stmt
from tecomp.loopir import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    LetStmt,
    LoweredFunc,
    Seq,
    Store,
)
from tecomp.lowering_api import Lowered
from tecomp.passes.schedule.cpu.sum_order import order_sums

MATMUL = """\
func matmul(A: float32[n, 8], B: float32[8, 4]) -> (C: float32[n, 4]) params(n) {
  parallel for (i, 0, n) {
    for (j, 0, 4) {
      C[i, j] = 0.0
    }
    for (k, 0, 8) {
      for (j, 0, 4) {
        C[i, j] += A[i, k] * B[k, j]
      }
    }
  }
}"""

NORM = """\
func norm(X: float32[n, 4]) -> (Y: float32[n, 4], L: float32[]) params(n) {
  allocate E: float32[n, 4] {
    parallel for (i, 0, n) {
      for (j, 0, 4) {
        E[i, j] = exp(X[i, j])
      }
    }
    allocate S: float32[n] {
      parallel for (i, 0, n) {
        allocate S_sum: float32[] (local) {
          S_sum = 0.0
          for (r, 0, 4) {
            if (r != i % 4) {
              S_sum += E[i, r]
            }
          }
          S[i] = S_sum
        }
      }
      parallel for (i, 0, n) {
        for (j, 0, 4) {
          Y[i, j] = select(j > 0, E[i, j] / S[i], -E[i, j])
        }
      }
      allocate L_max: float32[] (local) {
        L_max = -inf
        for (q, 0, n) {
          L_max = max(L_max, S[q])
        }
        L = L_max
      }
    }
  }
}"""


def test_matmul_golden():
    n = tc.var("n")
    A = tc.placeholder((n, 8), name="A")
    B = tc.placeholder((8, 4), name="B")
    k = tc.reduce_axis(8, name="k")
    C = tc.compute((n, 4), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")
    low = tc.lower(C, [A, B], name="matmul")
    # in the CPU schedule's loop order ("i, k, j"): an init loop and in-place "+="
    cpu = Lowered(order_sums(low.func))
    assert str(cpu) == MATMUL
    assert format_func(cpu.func) == MATMUL


def test_multi_stage_golden():
    n = tc.var("n")
    X = tc.placeholder((n, 4), name="X")
    Ex = tc.compute((n, 4), lambda i, j: tc.exp(X[i, j]), name="E")
    r = tc.reduce_axis(4, name="r")
    S = tc.compute((n,), lambda i: tc.sum(Ex[i, r], axis=r, where=tc.ne(r, i % 4)), name="S")
    Y = tc.compute((n, 4), lambda i, j: tc.if_then_else(j > 0, Ex[i, j] / S[i], -Ex[i, j]),
                   name="Y")
    q = tc.reduce_axis(n, name="q")
    L = tc.compute((), lambda: tc.max(S[q], axis=q), name="L")
    assert str(tc.lower([Y, L], [X], name="norm")) == NORM


def test_statement_forms():
    j, k, t = E.Var("j"), E.Var("k"), E.Var("t")
    W = Buffer("W", (E.Const(3, "int64"),), "float64", "input")
    acc = Buffer("acc", (), "float64", "local")
    load = BufferLoad(W, (k,), "float64")
    loop = For(k, E.maximum(0, j - 2), E.minimum(3, j + 1),
               Seq((Store(acc, (), load, "prod"), Store(acc, (), load, "min"))), step=2)
    body = LetStmt(t, j * 2, IfThenElse(E.compare(E.LT, t, 4), loop,
                                        Store(acc, (), E.Const(1.5, "float64"))))
    text = format_stmt(For(j, E.Const(0, "int64"), E.Const(5, "int64"),
                           Allocate(acc, body), kind="vectorized"))
    assert text == """\
vectorized for (j, 0, 5) {
  allocate acc: float64[] (local) {
    let t = j * 2 {
      if (t < 4) {
        for (k, max(0, j - 2), min(3, j + 1), step 2) {
          acc *= W[k]
          acc = min(acc, W[k])
        }
      } else {
        acc = 1.5:float64
      }
    }
  }
}"""
    assert str(loop).startswith("for (k, max(0, j - 2), min(3, j + 1), step 2) {")
    func = LoweredFunc("f", (W,), (), (), Store(acc, (), load))
    assert format_func(func) == "func f(W: float64[3]) -> () {\n  acc = W[k]\n}"
