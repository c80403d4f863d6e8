"""The decomposition ``A = L^T D L`` of DOF and constant matrices as compute stages.

DOF (Li et al., "DOF: Accelerating High-order Differential Operators with Forward
Propagation", 2024) propagates ``g = L grad v`` and needs ``A = L^T D L`` with ``D`` diagonal
in {+1, -1}.  We take the eigendecomposition ``A = sum_k lam_k u_k u_k^T``, keep the
``|lam_k| > tol * max |lam|``, and set row ``k`` of ``L`` to ``sqrt|lam_k| u_k^T`` and
``D_kk = sign(lam_k)``; positive rows come first, so ``g^T D g`` is a sum over the first
``p`` rows minus a sum over the rest.  Indefinite matrices are included; a rank-``r`` ``A``
gives an ``r x N`` ``L``, so every tangent carries ``r`` components instead of ``N``.
Diagonal ``A`` (the Laplacian among them) is decomposed exactly, row ``k`` of ``L`` being
``sqrt|a_ii| e_i^T``.

The seed ``g_x[b..., n, k] = L[k, n]`` is built by :func:`seed_tangent`: when ``L`` is a
scaled identity up to the sign order (the Laplacian, any diagonal ``A`` whose non-zero entries
all have one sign and fill the diagonal) it is the Kronecker delta ``l_k delta(n, k)``, which
zero elimination resolves in the first consumer (``sum_n W[j, n] x[b, n]`` gets the tangent
``W[j, k] l_k``, not an ``N x N x width`` contraction with a stored identity); otherwise it
reads ``L^T`` from a constant stage.

Constant matrices enter the IR through :func:`constant_stage`: a diagonal-like matrix (one
non-zero a row, the identity among them) as a small compute stage whose body is one comparison,
which later passes can see through; a dense one as a ``tc.constant`` tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tecomp import expr as E
from tecomp.dsl import constant
from tecomp.errors import TecompError
from tecomp.tensor import Tensor

from ..forward.context import ExprTangent, TangentTensor, new_stage


@dataclass(frozen=True)
class Decomposition:
    """``A = L^T diag(signs) L``; ``L`` has shape ``(r, N)``, positive signs first."""

    L: np.ndarray
    signs: np.ndarray

    @property
    def rank(self) -> int:
        return int(self.L.shape[0])

    @property
    def positives(self) -> int:
        return int(np.sum(self.signs > 0))


def check_operator_matrix(A: Any, n: int | None, who: str) -> np.ndarray:
    """``A`` as a float64 square symmetric matrix of size ``n`` (TecompError otherwise)."""
    try:
        a = np.asarray(A, dtype=np.float64)
    except (TypeError, ValueError):
        raise TecompError(f"{who}: A must be a numeric NumPy matrix, got {A!r}") from None
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise TecompError(f"{who}: A must be a square matrix, got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise TecompError(
            f"{who}: A has size {a.shape[0]} but x's last axis has extent {n}")
    if not np.all(np.isfinite(a)):
        raise TecompError(f"{who}: A has non-finite entries")
    scale = max(float(np.abs(a).max()), 1e-300)
    if not np.allclose(a, a.T, rtol=0.0, atol=1e-12 * scale):
        i, j = np.unravel_index(int(np.argmax(np.abs(a - a.T))), a.shape)
        raise TecompError(
            f"{who}: A must be symmetric; A[{i},{j}] = {a[i, j]!r} but A[{j},{i}] = {a[j, i]!r}")
    return a


def decompose(a: np.ndarray, tol: float = 1e-10) -> Decomposition:
    """``A = L^T D L`` (see the module docstring); ``A = 0`` gives ``r = 0``."""
    a = np.asarray(a, dtype=np.float64)
    n = a.shape[0]
    if np.count_nonzero(a - np.diag(np.diag(a))) == 0:
        diag = np.diag(a)
        order = [i for i in range(n) if diag[i] > 0] + [i for i in range(n) if diag[i] < 0]
        L = np.zeros((len(order), n))
        for k, i in enumerate(order):
            L[k, i] = np.sqrt(abs(diag[i]))
        return Decomposition(L, np.sign(diag[order]) if order else np.zeros(0))
    lam, u = np.linalg.eigh(0.5 * (a + a.T))
    big = float(np.abs(lam).max()) if lam.size else 0.0
    keep = np.abs(lam) > tol * big
    pos = [k for k in np.argsort(-lam) if keep[k] and lam[k] > 0]
    neg = [k for k in np.argsort(lam) if keep[k] and lam[k] < 0]
    order = pos + neg
    L = np.stack([np.sqrt(abs(lam[k])) * u[:, k] for k in order]) if order else np.zeros((0, n))
    return Decomposition(L, np.sign(lam[order]))


def _chain(index: E.Expr, values: list[E.Expr], default: E.Expr) -> E.Expr:
    """``values[index]`` as a chain of selects (``default`` for the rest)."""
    out = default
    for k in reversed(range(len(values))):
        if values[k] == default:
            continue
        out = E.select(E.compare(E.EQ, index, k), values[k], out)
    return out


def constant_stage(m: np.ndarray, name: str, dtype: str, names: Any) -> Tensor:
    """A tensor of shape ``m.shape`` (2-D) holding the constant matrix ``m``: a compute stage
    selecting by index when each row has at most one non-zero, else a ``tc.constant``."""
    rows, cols = m.shape
    i = names.axis("ci", rows)
    j = names.axis("cj", cols)
    zero = E.Const(0.0, dtype)

    def c(v: float) -> E.Expr:
        return E.Const(float(v), dtype)

    nnz_rows = [np.flatnonzero(m[r]) for r in range(rows)]
    if rows and all(len(nz) <= 1 for nz in nnz_rows):
        # at most one entry per row: m[i, j] = select(j == col(i), val(i), 0)
        if all(len(nz) == 1 and nz[0] == r and m[r, r] == 1.0
               for r, nz in enumerate(nnz_rows)):
            body = E.select(E.compare(E.EQ, j.var, i.var), c(1.0), zero)
        else:
            col = _chain(i.var, [E.Const(int(nz[0]) if len(nz) else -1, "int64")
                                 for nz in nnz_rows], E.Const(-1, "int64"))
            val = _chain(i.var, [c(m[r, nz[0]]) if len(nz) else zero
                                 for r, nz in enumerate(nnz_rows)], zero)
            body = E.select(E.compare(E.EQ, j.var, col), val, zero)
    else:
        return constant(m, name=name, dtype=dtype)
    return new_stage(name, [i, j], body)


def seed_tangent(dec: Decomposition, x: Tensor, names: Any,
                 block: int | None = None) -> TangentTensor | ExprTangent:
    """The DOF seed ``g_x[b..., n, k] = L[k, n]`` (see the module docstring).  With ``block``
    the rank axis is split in two direction axes, ``k = kb * block + ki``; rows of ``L`` past
    its rank (the padding of the last block) are zero."""
    L = dec.L
    r, n = L.shape
    nb = x.ndim - 1

    def k_of(ix: Sequence[E.Expr]) -> E.Expr:
        return ix[nb + 1] if block is None else E.add(E.mul(ix[nb + 1], block), ix[nb + 2])
    if r == n and np.count_nonzero(L - np.diag(np.diag(L))) == 0:
        scale = np.diag(L)
        if np.all(scale == 1.0):
            return ExprTangent(lambda ix: E.delta(ix[nb], k_of(ix), x.dtype))
        if block is not None:
            scale = np.concatenate([scale, np.zeros(-r % block)])
        col = constant(scale, name=f"dof_l_{x.name}", dtype=x.dtype)
        return ExprTangent(lambda ix: E.mul(E.TensorRead(col, (k_of(ix),), x.dtype),
                                            E.delta(ix[nb], k_of(ix), x.dtype)))
    if block is None:
        lt = constant_stage(L.T, f"dof_L_{x.name}", x.dtype, names)
        return TangentTensor(lt, (nb, nb + 1))
    lt3 = np.concatenate([L, np.zeros((-r % block, n))]).T.reshape(n, -1, block)
    return TangentTensor(constant(lt3, name=f"dof_L_{x.name}", dtype=x.dtype),
                         (nb, nb + 1, nb + 2))
