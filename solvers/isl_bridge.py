"""The isl bridge: integer sets over named dimensions and parameters (islpy), for the exact
set questions of the passes (the static bounds proofs of :mod:`tecomp.passes.bounds_affine`).

isl (Verdoolaege, "isl: An Integer Set Library for the Polyhedral Model", ICMS 2010) decides
emptiness and inclusion of Presburger sets exactly and represents ``floor``/``mod`` with
existential divisions.  This module is the one place that names isl itself: contexts,
spaces, values, dimension kinds, the operation budget and reading sets back into plain data.
Callers combine the sets and piecewise quasi-affine functions it returns with their own
methods (``intersect``, ``union``, ``complement``, ``add``, ``min``, ``ge_set``, ``is_empty``,
``is_subset``, ...), which stay inside isl.

An :class:`IslSpace` works in its thread's isl context (isl contexts are not thread-safe, and
``tc.build`` may run in several threads), made on the thread's first proof and reused: islpy
never frees a context (about 2.4 KiB of native memory each, measured with islpy 2026.2), so a
context per proof grew a process by several KiB for every program it built.  Each space
starts with no operation limit and a reset count, as a fresh context would.  An operation
past the budget raises :data:`IslError`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import islpy as isl

#: what an isl operation past the budget (or any isl failure) raises
IslError = isl.Error
PwAff = isl.PwAff
IslSet = isl.Set

_T = isl.dim_type
_CONTEXTS = threading.local()  # one isl context per thread (a bounded cache)


def _context() -> isl.Context:
    """This thread's isl context, with no operation limit and a reset count."""
    ctx = getattr(_CONTEXTS, "ctx", None)
    if ctx is None:
        ctx = _CONTEXTS.ctx = isl.Context()
    ctx.set_max_operations(0)
    ctx.reset_operations()
    return ctx


class IslSpace:
    """A set space with named dimensions ``dims`` and parameters ``params``."""

    def __init__(self, dims: Sequence[str], params: Sequence[str]) -> None:
        self._ctx = _context()
        self.space = isl.Space.create_from_names(self._ctx, set=list(dims), params=list(params))
        self._ls = isl.LocalSpace.from_space(self.space)
        self._dim = {n: (_T.set, i) for i, n in enumerate(dims)}
        self._dim.update({n: (_T.param, i) for i, n in enumerate(params)})
        self.params = tuple(params)
        # isl objects are values (islpy copies the operands a function consumes), so one
        # object per constant and dimension serves every use: islpy keeps a few dozen bytes
        # of every object it makes (about 32, measured with islpy 2026.2) until the process
        # ends, and a proof asks for the same few constants and variables many times
        self._made: dict[tuple[str, int | str], PwAff] = {}

    @property
    def context(self) -> isl.Context:
        """The isl context of this space (this thread's)."""
        return self._ctx

    # ---------------------------------------------------------------- building
    def const(self, v: int) -> PwAff:
        """The constant function ``v``."""
        key = ("const", int(v))
        out = self._made.get(key)
        if out is None:
            aff = isl.Aff.zero_on_domain(self._ls).set_constant_val(
                isl.Val.int_from_si(self._ctx, int(v)))
            out = self._made[key] = isl.PwAff.from_aff(aff)
        return out

    def var(self, name: str) -> PwAff | None:
        """The function giving dimension or parameter ``name`` (None when there is none)."""
        where = self._dim.get(name)
        if where is None:
            return None
        key = ("var", name)
        out = self._made.get(key)
        if out is None:
            out = self._made[key] = isl.PwAff.from_aff(isl.Aff.var_on_domain(self._ls, *where))
        return out

    def floordiv(self, a: PwAff, d: int) -> PwAff:
        """``floor(a / d)`` for ``d > 0``."""
        return a.scale_down_val(isl.Val.int_from_si(self._ctx, d)).floor()

    def mod(self, a: PwAff, d: int) -> PwAff:
        """``a mod d`` (in ``[0, d)``) for ``d > 0``."""
        return a.mod_val(isl.Val.int_from_si(self._ctx, d))

    def universe(self) -> IslSet:
        return isl.Set.universe(self.space)

    def empty(self) -> IslSet:
        return isl.Set.empty(self.space)

    def eliminate(self, s: IslSet, name: str) -> IslSet:
        """``s`` with no constraint left on dimension ``name``."""
        t, i = self._dim[name]
        return s.eliminate(t, i, 1)

    # ---------------------------------------------------------------- budget
    def set_budget(self, operations: int) -> None:
        """At most ``operations`` isl operations between resets (0: no limit)."""
        self._ctx.set_max_operations(operations)

    def reset_budget(self) -> None:
        self._ctx.reset_operations()

    @contextmanager
    def unlimited(self, then: int) -> Iterator[None]:
        """No operation limit inside the block; ``then`` operations after it."""
        self._ctx.set_max_operations(0)
        try:
            yield
        finally:
            self._ctx.set_max_operations(then)

    # ---------------------------------------------------------------- reading back
    def sample(self, s: IslSet) -> list[tuple[str, bool, int]]:
        """One point of the non-empty ``s``: ``(name, is_parameter, value)`` for the
        parameters, then the dimensions, each in its order."""
        pt = s.sample_point()
        order = sorted(self._dim.items(), key=lambda kv: (kv[1][0] != _T.param, kv[1][1]))
        return [(name, t == _T.param, int(pt.get_coordinate_val(t, i).to_python()))
                for name, (t, i) in order]

    def parameter_constraints(
            self, s: IslSet) -> list[list[tuple[dict[str, int], int, bool]]] | None:
        """``s`` (a set of parameters) as a union of conjunctions of constraints
        ``sum(coeffs[p] * p) + const (== or >=) 0``, each ``(coeffs, const, is_equality)``;
        None when a piece needs an existential division."""
        out = []
        for bs in s.get_basic_sets():
            if bs.dim(_T.div):
                return None
            conj = []
            for c in bs.get_constraints():
                coeffs = {}
                for name in self.params:
                    k = int(c.get_coefficient_val(*self._dim[name]).to_python())
                    if k:
                        coeffs[name] = k
                conj.append((coeffs, int(c.get_constant_val().to_python()), c.is_equality()))
            out.append(conj)
        return out
