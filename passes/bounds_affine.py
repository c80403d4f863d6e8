"""Static bounds proofs for affine indices in the loop IR (used by :mod:`.bounds_check`).

Every ``BufferLoad``/``Store`` index that is affine in the enclosing loop variables and the
symbolic sizes is checked over its *iteration domain*: the integer points of the enclosing
loops (``lo <= v < hi``, ``v = lo (mod step)``), ``LetStmt`` bindings, ``IfThenElse``
conditions (the negation in the else branch) and the path condition of ``select`` arms and
short-circuit operands that lead to the access.  Exact integer reasoning: each expression
becomes an isl piecewise quasi-affine function (Verdoolaege, "isl: An Integer Set Library for
the Polyhedral Model", ICMS 2010), so loop bounds with ``min``/``max``/``select`` become pieces
and ``//``/``%`` by constants existentially quantified divisions, not approximations.

For an axis with index ``e`` and extent ``x``, the *violation set* is ``domain ∩ (e < 0 or e
>= x)``, with every extent (and every size that is an extent) ``>= 0``:

* empty: the access is in bounds for every size — nothing is added;
* non-empty and the domain exact (every guard on the path translated): project it onto the
  sizes, ``P``.  When ``P`` holds for all sizes ``>= 1`` (always, for constant sizes), the
  program is wrong: :class:`LoweringError` at build time,
  naming the tensor, axis, expression and a witness.  Otherwise the access is wrong only for
  some sizes (``A[i]`` over ``i < n`` with ``A`` of extent ``m``; a read in a ``select`` arm
  taken only when ``n >= 2``): ``P`` becomes a condition on the sizes that the kernel tests
  before running (:class:`SizeCheck`);
* anything not translatable (a guard or index reading data, a product of loop variables, a
  division by a size, a ``P`` with existentials): a runtime check in the loop, through the
  error record of :mod:`.bounds_check`.

Before isl, three cheaper tests may settle an access: the index is the variable of a loop
over exactly the axis (``_loop_index``), interval arithmetic over the loops' ranges puts it
inside a constant extent (``_in_interval``), or substituting the enclosing loops', lets' and
guards' linear bounds shows ``0 <= e`` and ``e < x`` (:mod:`.bounds_linear`: causal sums
over a symbolic length, padded windows under their guards).  Each only ever answers "in
bounds"; whatever they leave goes to isl.

Worked example: the zero-eliminated input gradient of a stride-2 convolution loops over
``t_1`` from ``max(0, (j2 - 1) // 2)`` to ``min(7, j2 // 2) + 1`` and reads ``W[t, j1, j2 -
2*t_1, j3 - 2*t_2]`` (extent 3 on axis 2).  isl writes the lower bound with a division ``d =
floor((j2 - 1)/2)``, ``2d <= j2 - 1 <= 2d + 1``, so ``t_1 >= d`` gives ``j2 - 2*t_1 <= j2 -
2d <= 2`` exactly; with the rational shadow ``t_1 >= (j2 - 2)/2`` the index could reach 3 and
the proof would fail.  Piecewise bounds matter the same way: ``for (t, 0, select(j3 <= 16,
4, 0))`` is two pieces, one empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from tecomp import expr as E
from tecomp.errors import LoweringError
from tecomp.loopir import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    LetStmt,
    LoweredFunc,
    Store,
)
from tecomp.printer import format_expr
from tecomp.stmt_functor import expr_children, expr_vars, stmt_exprs, walk_stmt

from .bounds_linear import in_bounds
from .value_range import value_range

if TYPE_CHECKING:
    from tecomp.solvers.isl_bridge import IslSet, PwAff


def _isl() -> Any:
    """The isl bridge, imported on the first proof (so that a program whose loop program and
    checks come from a cache loads no islpy)."""
    from tecomp.solvers import isl_bridge

    return isl_bridge

_INT = ("int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64")
#: accesses proven in bounds by interval arithmetic before isl is asked
#: (:meth:`AffineProver._in_interval`; an A/B switch)
INTERVALS = True
#: accesses proven in bounds by substituting linear loop bounds before isl is asked
#: (:mod:`.bounds_linear`; an A/B switch)
SUBSTITUTION = True


# Most pieces an operation on two piecewise bounds may combine: a chain of k nested max/min
# terms (a loop bound left by a large Fourier–Motzkin projection) would otherwise grow to 2^k
# pieces; past this, the bound is treated as not affine and its accesses get runtime checks.
MAX_PIECES = 16
# isl operations one loop, let or proof may take (isl counts them; past the budget an
# operation fails and the access gets a runtime check): a conv2d gradient's proofs take well
# under 1e5, the loop bounds of a large Fourier–Motzkin projection many millions.  At 1e5 no
# kernel of the CPU benchmark or of the DCT/DST/DHT at n = 16..1024 (forward and gradient)
# gains a runtime check over 1e6, and the DCT-II gradient at n = 64 builds in 7 s, not 16 s.
MAX_OPERATIONS = 100_000


@dataclass(frozen=True)
class SizeCheck:
    """An access that leaves its tensor exactly when ``cond`` (on the sizes) holds."""

    cond: E.Expr
    buffer: str
    axis: int
    access: str
    kind: str  # "read" or "write"

    def message(self, sizes: Mapping[E.Var, int], kernel: str) -> str:
        names = sorted({v.name: v for v in expr_vars(self.cond)}.items())
        vals = ", ".join(f"{n} = {sizes[v]}" for n, v in names if v in sizes)
        verb = "read of" if self.kind == "read" else "write to"
        return (f"kernel {kernel!r}: with sizes {vals} the {verb} tensor {self.buffer!r} "
                f"in {self.access} leaves axis {self.axis} (out of range when "
                f"{format_expr(self.cond)}); nothing was run")


def eval_cond(e: E.Expr, sizes: Mapping[E.Var, int]) -> bool:
    """The value of a size condition built by :class:`AffineProver` (compares, and, or)."""
    from tecomp.stmt_functor import eval_int

    if isinstance(e, E.Const):
        return bool(e.value)
    if isinstance(e, E.And):
        return eval_cond(e.a, sizes) and eval_cond(e.b, sizes)
    if isinstance(e, E.Or):
        return eval_cond(e.a, sizes) or eval_cond(e.b, sizes)
    a, b = eval_int(e.a, sizes), eval_int(e.b, sizes)
    return {E.GE: a >= b, E.EQ: a == b}[type(e)]


def _syntactically_affine(e: E.Expr) -> bool:
    if isinstance(e, (E.Const, E.Var, E.Zero)):
        return True
    if isinstance(e, (E.Add, E.Sub, E.Min, E.Max)):
        return _syntactically_affine(e.a) and _syntactically_affine(e.b)
    if isinstance(e, E.Neg):
        return _syntactically_affine(e.a)
    if isinstance(e, E.Cast):
        return e.value.dtype in _INT and _syntactically_affine(e.value)
    if isinstance(e, E.Mul):
        return ((isinstance(e.a, E.Const) or isinstance(e.b, E.Const))
                and _syntactically_affine(e.a) and _syntactically_affine(e.b))
    if isinstance(e, (E.FloorDiv, E.Mod)):
        return isinstance(e.b, E.Const) and _syntactically_affine(e.a)
    if isinstance(e, E.Select):
        return _affine_cond(e.cond) and _syntactically_affine(e.t) and \
            _syntactically_affine(e.f)
    return False


def _affine_cond(e: E.Expr) -> bool:
    if isinstance(e, E.Const):
        return True
    if isinstance(e, (E.And, E.Or)):
        return _affine_cond(e.a) and _affine_cond(e.b)
    if isinstance(e, E.Not):
        return _affine_cond(e.a)
    return isinstance(e, E.CmpOp) and _syntactically_affine(e.a) and \
        _syntactically_affine(e.b)


class AffineProver:
    """Iteration domains of a lowered function, pushed and popped as a walker descends."""

    def __init__(self, func: LoweredFunc) -> None:
        bound: list[str] = []
        free: dict[str, E.Var] = {}
        opaque: dict[E.Expr, str] = {}  # non-affine expressions of sizes only -> a parameter
        extents: list[E.Expr] = []
        buffers = [*func.inputs, *func.outputs]
        exprs: list[E.Expr] = [e for b in buffers for e in b.shape]
        for s in walk_stmt(func.body):
            if isinstance(s, (For, LetStmt)) and s.var.name not in bound:
                bound.append(s.var.name)
            if isinstance(s, Allocate):
                buffers.append(s.buffer)
            exprs += stmt_exprs(s)
            if isinstance(s, Store):
                exprs += s.buffer.shape
        extents = [e for b in buffers for e in b.shape]
        bound_set = set(bound)
        seen: set[E.Expr] = set()
        while exprs:
            e = exprs.pop()
            if e in seen:
                continue
            seen.add(e)
            if isinstance(e, BufferLoad):
                exprs += [*e.indices, *e.buffer.shape]
                continue
            if isinstance(e, E.Var) and e.name not in bound_set:
                free[e.name] = e
            if (e.dtype in _INT and not _syntactically_affine(e) and not isinstance(e, E.Cast)
                    and all(v.name not in bound_set for v in expr_vars(e))
                    and not _has_load(e)):
                opaque.setdefault(e, "")
            exprs += expr_children(e)
        taken = bound_set | set(free)
        for k, e in enumerate(sorted(opaque, key=format_expr)):
            name = f"_s{k}"
            while name in taken:
                name += "_"
            taken.add(name)
            opaque[e] = name
        self.params: dict[str, E.Expr] = {**free, **{n: e for e, n in opaque.items()}}
        self._opaque = opaque
        names = sorted(self.params)
        self._dims, self._names, self._extents = sorted(bound), names, extents
        self._space: Any = None  # the isl space, made by the first proof that needs isl
        self._aff_memo: dict[E.Expr, PwAff | None] = {}
        self._cond_memo: dict[E.Expr, tuple[IslSet, bool]] = {}
        # levels: [domain of the loops and lets (None: not computed yet), exact?, guards not
        # yet intersected, bound names, what the level adds]; domains are computed when a
        # proof needs one, so a function whose accesses are all proven without isl makes none
        self._stack: list[list[Any]] = [[None, True, (), frozenset(), None]]

    @property
    def isl(self) -> Any:
        """The isl space of the proofs, in this thread's context (tc.build may run in
        threads)."""
        if self._space is None:
            self._space = _isl().IslSpace(self._dims, self._names)
        return self._space

    def _base(self) -> IslSet:
        """Every extent (and every size that is an extent) ``>= 0``; sets ``_always``."""
        extents, names = self._extents, self._names
        valid = self.isl.universe()
        zero = self._const(0)
        # each extent and each size in one, once (islpy keeps part of every object it makes:
        # the same constraint intersected again for every buffer grew every proof)
        sizes: dict[int, PwAff] = {}  # by object: aff() and the bridge make one per value
        for x in extents:
            pa = self.aff(x)
            if pa is not None and not isinstance(x, E.Const):
                sizes[id(pa)] = pa
                sizes.update((id(a), a) for a in map(self.aff, expr_vars(x)))
        for name in names:  # an opaque extent is a size
            if self.params[name] in extents:
                pa = self.aff(E.Var(name))
                sizes[id(pa)] = pa
        for pa in sizes.values():
            valid = valid.intersect(pa.ge_set(zero))
        one = self._const(1)
        positive = valid
        for name in names:
            if isinstance(self.params[name], E.Var) and any(
                    self.params[name] in expr_vars(x) for x in extents):
                positive = positive.intersect(self.aff(E.Var(name)).ge_set(one))
        # "always wrong" means: for every valid sizes of at least 1 (a guard or a zero-
        # eliminated loop bound that runs an access only for n >= 2 leaves n = 1 correct)
        self._always = positive.intersect(valid).params()
        self.isl.set_budget(MAX_OPERATIONS)  # each loop, let and proof from here on
        return valid

    # ---------------------------------------------------------------- translation
    def _const(self, v: int) -> PwAff:
        return self.isl.const(v)

    def aff(self, e: E.Expr) -> PwAff | None:
        """``e`` as an isl piecewise quasi-affine function, or None when it is not one."""
        try:
            return self._aff_memo[e]
        except KeyError:
            pass
        out = self._aff(e)
        self._aff_memo[e] = out
        return out

    def _aff(self, e: E.Expr) -> PwAff | None:
        name = self._opaque.get(e)
        if name:
            e = E.Var(name)
        if isinstance(e, E.Var):
            return self.isl.var(e.name)
        if isinstance(e, (E.Const, E.Zero)):
            v = getattr(e, "value", 0)
            return self._const(int(v)) if isinstance(v, (int, bool)) or e.dtype in _INT \
                else None
        if e.dtype not in _INT:
            return None
        if isinstance(e, E.Cast):
            return self.aff(e.value) if e.value.dtype in _INT else None
        if isinstance(e, E.Neg):
            a = self.aff(e.a)
            return None if a is None else a.neg()
        if isinstance(e, E.Select):
            c, exact = self.cond(e.cond)
            t, f = self.aff(e.t), self.aff(e.f)
            if not exact or t is None or f is None:
                return None
            return t.intersect_domain(c).union_add(f.intersect_domain(c.complement()))
        if not isinstance(e, E.BinaryOp):
            return None
        a, b = self.aff(e.a), self.aff(e.b)
        if a is None or b is None:
            return None
        if a.n_piece() * b.n_piece() > MAX_PIECES:
            return None  # not analysed: the access gets a runtime check
        if isinstance(e, E.Add):
            return a.add(b)
        if isinstance(e, E.Sub):
            return a.sub(b)
        if isinstance(e, (E.Min, E.Max)):
            return a.min(b) if isinstance(e, E.Min) else a.max(b)
        if isinstance(e, E.Mul):
            if a.is_cst() or b.is_cst():
                return a.mul(b)
            return None
        if isinstance(e, (E.FloorDiv, E.Mod)) and isinstance(e.b, E.Const):
            d = int(e.b.value)
            if d <= 0:
                return None
            return self.isl.floordiv(a, d) if isinstance(e, E.FloorDiv) else self.isl.mod(a, d)
        return None

    def cond(self, e: E.Expr) -> tuple[IslSet, bool]:
        """A superset of the points where ``e`` holds, and whether it is exact."""
        try:
            return self._cond_memo[e]
        except KeyError:
            pass
        out = self._cond(e)
        self._cond_memo[e] = out
        return out

    def _cond(self, e: E.Expr) -> tuple[IslSet, bool]:
        universe = self.isl.universe()
        if isinstance(e, E.Const):
            return (universe if e.value else self.isl.empty()), True
        if isinstance(e, E.And):
            (a, x), (b, y) = self.cond(e.a), self.cond(e.b)
            return a.intersect(b), x and y
        if isinstance(e, E.Or):
            (a, x), (b, y) = self.cond(e.a), self.cond(e.b)
            return a.union(b), x and y
        if isinstance(e, E.Not):
            a, x = self.cond(e.a)
            return (a.complement(), True) if x else (universe, False)
        if isinstance(e, E.CmpOp) and e.a.dtype in _INT and e.b.dtype in _INT:
            a, b = self.aff(e.a), self.aff(e.b)
            if a is not None and b is not None:
                op = {E.LT: a.lt_set, E.LE: a.le_set, E.GT: a.gt_set, E.GE: a.ge_set,
                      E.EQ: a.eq_set, E.NE: a.ne_set}[type(e)]
                return op(b), True
        return universe, False

    # ---------------------------------------------------------------- domains
    def push_loop(self, s: For) -> None:
        self._push(s.var, ("loop", s))

    def push_let(self, s: LetStmt) -> None:
        self._push(s.var, ("let", s))

    def push_cond(self, cond: E.Expr, holds: bool = True) -> None:
        """Enter a guarded region; the guard is intersected only when a proof needs it."""
        _, _, guards, names, _ = self._stack[-1]
        new = _conjuncts(cond if holds else E.Not(cond))
        self._stack.append([None, None, guards + tuple(new), names, ("cond", None)])

    def pop(self) -> None:
        self._stack.pop()

    def _push(self, var: E.Var, how: tuple[str, Any]) -> None:
        _, _, guards, names, _ = self._stack[-1]
        rebound = var.name in names  # rebinding a name in scope: its guards no longer apply
        self._stack.append([None, None, () if rebound else guards, names | {var.name},
                            (*how, rebound)])

    def _level(self, k: int) -> list[Any]:
        """Level ``k`` of the stack with its domain and exactness computed."""
        level = self._stack[k]
        if level[0] is not None:
            return level
        if k == 0:
            level[0] = self._base()
            return level
        dom, exact = self._level(k - 1)[:2]
        kind, s, *rebound = level[4]
        if kind != "cond":
            self.isl.reset_budget()
            try:
                dom, exact = (self._loop_domain if kind == "loop" else self._let_domain)(
                    s, self.isl.eliminate(dom, s.var.name), exact)
            except _isl().IslError:  # over the operation budget: the bounds are not used
                # (one projection of the enclosing domain, which its levels already paid for)
                with self.isl.unlimited(then=MAX_OPERATIONS):
                    dom, exact = self.isl.eliminate(dom, s.var.name), False
            exact = exact and not rebound[0]
        level[0], level[1] = dom, exact
        return level

    def _loop_domain(self, s: For, dom: IslSet, exact: bool) -> tuple[IslSet, bool]:
        v = self.aff(s.var)
        for bound, make in ((s.lo, lambda b: v.ge_set(b)), (s.hi, lambda b: v.lt_set(b))):
            b = self.aff(bound)
            if b is None:
                exact = False
            else:
                dom = dom.intersect(make(b))
        if s.step > 1:
            lo = self.aff(s.lo)
            if lo is None:
                exact = False
            else:
                dom = dom.intersect(self.isl.mod(v.sub(lo), s.step).eq_set(self._const(0)))
        return dom, exact

    def _let_domain(self, s: LetStmt, dom: IslSet, exact: bool) -> tuple[IslSet, bool]:
        value = self.aff(s.value) if s.value.dtype in _INT else None
        if value is None:
            return dom, False
        return dom.intersect(self.aff(s.var).eq_set(value)), exact

    def _loop_index(self, buf: Buffer, axis: int, index: E.Expr) -> bool:
        """Whether ``index`` is the variable of the innermost loop binding it, a loop from 0
        to the axis's extent (``A[i, k]`` in ``for i in [0, n)``, ``for k in [0, 16)``): in
        bounds without isl."""
        if not isinstance(index, E.Var):
            return False
        for level in reversed(self._stack):
            how = level[4]
            if how is not None and how[0] != "cond" and how[1].var.name == index.name:
                s = how[1]
                return (how[0] == "loop" and isinstance(s.lo, E.Const) and s.lo.value == 0
                        and _at_most(s.hi, buf.shape[axis]))
        return False

    def _in_interval(self, buf: Buffer, axis: int, index: E.Expr) -> bool:
        """Whether interval arithmetic over the enclosing loops' and lets' ranges puts
        ``index`` inside ``[0, extent)`` of a constant extent: in bounds without isl (a
        sound over-approximation: guards are ignored, every bound is widened to an
        interval).  A DCT's bit-reversed reads (``2 * (i % 2 * 32 + i // 2 % 2 * 16 + ...)``)
        are proven so, and a program whose every access is never imports islpy (40-50 ms of
        a cold build)."""
        extent = value_range(buf.shape[axis], {})
        if extent is None:
            return False
        ranges: dict[E.Var, tuple[int, int]] = {}
        for level in self._stack:  # outermost first: an inner binding shadows an outer one
            how = level[4]
            if how is None or how[0] == "cond":
                continue
            kind, st = how[0], how[1]
            if kind == "loop":
                lo, hi = (value_range(st.lo, ranges, signed=True),
                          value_range(st.hi, ranges, signed=True))
                got = None if lo is None or hi is None or hi[1] - 1 < lo[0] else (
                    lo[0], hi[1] - 1)
            else:
                got = value_range(st.value, ranges, signed=True)
            if got is None:
                ranges.pop(st.var, None)
            else:
                ranges[st.var] = got
        r = value_range(index, ranges, signed=True)
        return r is not None and r[0] >= 0 and r[1] < extent[0]

    # ---------------------------------------------------------------- verdicts
    def verdict(self, buf: Buffer, axis: int, index: E.Expr, path: E.Expr, kind: str,
                access: str) -> str | SizeCheck:
        """"safe", "runtime" or a :class:`SizeCheck` for one axis; raises when always wrong.

        Guards (``IfThenElse`` conditions and the path) are intersected one conjunct at a time
        and only while the violation set is not yet empty: most accesses are in bounds by
        their loops alone, and a zero-eliminated guard can hold dozens of nested divisions.
        A proof over :data:`MAX_OPERATIONS` isl operations gives up: "runtime".
        """
        if self._loop_index(buf, axis, index):
            return "safe"
        if INTERVALS and self._in_interval(buf, axis, index):
            return "safe"
        if SUBSTITUTION and in_bounds(index, buf.shape[axis], [
                lv[4][:2] for lv in self._stack if lv[4] is not None and lv[4][0] != "cond"],
                (*self._stack[-1][2], *_conjuncts(path))):
            return "safe"
        self._level(len(self._stack) - 1)
        self.isl.reset_budget()
        try:
            return self._verdict(buf, axis, index, path, kind, access)
        except _isl().IslError:
            self.isl.reset_budget()
            return "runtime"

    def _verdict(self, buf: Buffer, axis: int, index: E.Expr, path: E.Expr, kind: str,
                 access: str) -> str | SizeCheck:
        idx, ext = self.aff(index), self.aff(buf.shape[axis])
        if idx is None or ext is None:
            return "runtime"
        dom, exact, guards, _, _ = self._stack[-1]
        bad = dom.intersect(idx.lt_set(self._const(0)).union(idx.ge_set(ext)))
        if bad.is_empty():
            return "safe"
        for g in (*guards, *_conjuncts(path)):
            c, x = self.cond(g)
            exact = exact and x
            if x:
                dom = dom.intersect(c)
                bad = bad.intersect(c)
                if bad.is_empty():
                    return "safe"
        if not exact:
            return "runtime"
        sizes = bad.params()
        if self._always.is_subset(sizes):
            raise LoweringError(self._witness(bad, buf, axis, index, kind, access))
        cond = self._size_expr(sizes)
        if cond is None:
            return "runtime"
        return SizeCheck(cond, buf.name, axis, access, kind)

    def _witness(self, bad: IslSet, buf: Buffer, axis: int, index: E.Expr, kind: str,
                 access: str) -> str:
        vals = []
        used = {v.name for v in expr_vars(index)}
        for name, is_param, value in self.isl.sample(bad):
            if name in self._opaque.values() or (not is_param and name not in used):
                continue
            vals.append(f"{name} = {value}")
        verb = "read of" if kind == "read" else "write to"
        where = f" (e.g. at {', '.join(vals)})" if vals else ""
        return (f"out-of-bounds {verb} tensor {buf.name!r} in {access}: axis {axis} index "
                f"{format_expr(index)} leaves [0, {format_expr(buf.shape[axis])}){where} for "
                "all sizes")

    def _size_expr(self, sizes: IslSet) -> E.Expr | None:
        terms: list[E.Expr] = []
        pieces = self.isl.parameter_constraints(sizes)
        if pieces is None:
            return None
        for constraints in pieces:
            conj: list[E.Expr] = []
            for coeffs, const, is_eq in constraints:
                lhs: E.Expr = E.Const(const, "int64")
                for name, k in coeffs.items():
                    v = self.params[name]
                    lhs = E.Add(lhs, v if k == 1 else E.Mul(E.Const(k, "int64"), v,
                                                            "int64"), "int64")
                zero = E.Const(0, "int64")
                conj.append(E.EQ(lhs, zero) if is_eq else E.GE(lhs, zero))
            out: E.Expr = E.Const(True, "bool")
            for c in conj:
                out = c if out == E.Const(True, "bool") else E.And(out, c)
            terms.append(out)
        if not terms:
            return None
        res = terms[0]
        for t in terms[1:]:
            res = E.Or(res, t)
        return res


def _conjuncts(e: E.Expr) -> list[E.Expr]:
    """``e`` as a list of conditions whose conjunction it is (``not (a or b)`` splits too)."""
    if isinstance(e, E.And):
        return _conjuncts(e.a) + _conjuncts(e.b)
    if isinstance(e, E.Not) and isinstance(e.a, E.Or):
        return _conjuncts(E.Not(e.a.a)) + _conjuncts(E.Not(e.a.b))
    if isinstance(e, E.Not) and isinstance(e.a, E.Not):
        return _conjuncts(e.a.a)
    if isinstance(e, E.Const) and e.value is True:
        return []
    return [e]


def _at_most(hi: E.Expr, extent: E.Expr) -> bool:
    """Whether ``hi <= extent`` for every size: the same expression, or constants."""
    if isinstance(hi, E.Const) and isinstance(extent, E.Const):
        return isinstance(hi.value, int) and isinstance(extent.value, int) and \
            hi.value <= extent.value
    return bool(hi == extent)


def _has_load(e: E.Expr) -> bool:
    if isinstance(e, BufferLoad):
        return True
    return any(_has_load(c) for c in expr_children(e))


def check_static_bounds(func: LoweredFunc) -> None:
    """Raise :class:`LoweringError` for an affine access out of bounds wherever it runs.

    The build-time half of :func:`~tecomp.passes.bounds_check.add_bounds_checks`, for builds
    that skip the runtime checks.
    """
    from .bounds_check import add_bounds_checks

    add_bounds_checks(func)
