"""Building many programs does not grow native memory: the isl contexts and LLVM pass builders
that islpy and llvmlite never free entirely are reused (docs/robustness.md, "Threads and
memory").  Memory only, never time: each test repeats one step enough times that the old
per-step leak (2.4 KiB per isl context, 1.8 KiB per pass builder) would exceed the bound
several times over."""

import threading

import llvmlite.binding as llvm
import pytest

from tecomp.codegen.llvm.jit import optimise
from tecomp.solvers.isl_bridge import IslError, IslSpace

TRIVIAL = "define i64 @f(i64 %a) {\n  %b = add i64 %a, 1\n  ret i64 %b\n}\n"


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        import os

        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _space_work() -> None:
    sp = IslSpace(["i", "k"], ["n"])
    i, n = sp.var("i"), sp.var("n")
    s = sp.universe().intersect(i.ge_set(sp.const(0))).intersect(i.lt_set(n))
    assert not s.is_empty()


def test_isl_spaces_share_their_threads_context():
    a, b = IslSpace(["i"], []), IslSpace(["j"], ["n"])
    assert a.context is b.context
    other = []
    t = threading.Thread(target=lambda: other.append(IslSpace(["i"], []).context))
    t.start()
    t.join()
    assert other[0] is not a.context  # isl contexts are not thread-safe


def test_a_reused_context_starts_without_the_last_spaces_budget():
    sp = IslSpace(["i", "k"], ["n"])
    sp.set_budget(1)
    with pytest.raises(IslError):
        for c in range(50):
            sp.universe().intersect(sp.var("i").ge_set(sp.const(c))).is_empty()
    _space_work()  # a new space: no limit, a reset count


def test_many_isl_spaces_do_not_grow_memory():
    for _ in range(300):
        _space_work()
    start = _rss_mib()
    for _ in range(3000):
        _space_work()
    assert _rss_mib() - start < 2.5  # a context each: about 7 MiB


def test_many_optimisations_do_not_grow_memory():
    def one() -> None:
        mod = llvm.parse_assembly(TRIVIAL, context=llvm.create_context())
        optimise(mod, 3)
        mod.close()

    for _ in range(100):
        one()
    start = _rss_mib()
    for _ in range(900):
        one()
    assert _rss_mib() - start < 0.6  # a pass builder each: about 1.6 MiB


# islpy keeps about 32 bytes of every isl object it makes: a proof makes as few as it can
def _counted_spaces(monkeypatch):
    from tecomp.solvers import isl_bridge

    made = []

    class Counted(isl_bridge.IslSpace):
        def __init__(self, *args):
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(isl_bridge, "IslSpace", Counted)
    return made


def test_a_proof_of_plain_loop_indices_makes_no_isl_objects(monkeypatch):
    import tecomp as tc
    from tecomp.passes.bounds_check import add_bounds_checks

    made = _counted_spaces(monkeypatch)
    n = tc.var("n")
    A = tc.placeholder((n, 16), name="A")
    k = tc.reduce_axis(16, name="k")
    S = tc.compute((n,), lambda i: tc.sum(tc.sin(A[i, k]), axis=k), name="S")
    assert add_bounds_checks(tc.lower(S, [A]).func)[1] is None
    assert made == []
    B = tc.compute((n - 1,), lambda i: A[i + 1, 3], name="B")  # i + 1 <= n - 1: linear
    assert add_bounds_checks(tc.lower(B, [A]).func)[1] is None  # bounds, no isl either
    assert made == []
    D = tc.compute((n,), lambda i: A[(i + 1) // 2, 3], name="D")  # needs isl, still proven
    assert add_bounds_checks(tc.lower(D, [A]).func)[1] is None
    assert len(made) == 1
    C = tc.compute((n,), lambda i: A[i + 1, 3], name="C")  # out of range for every n
    with pytest.raises(tc.LoweringError, match=r"A\[i \+ 1, 3\]"):
        add_bounds_checks(tc.lower(C, [A]).func)


def test_a_space_makes_each_constant_and_variable_once():
    sp = IslSpace(["i"], ["n"])
    assert sp.const(3) is sp.const(3) and sp.var("n") is sp.var("n")
    assert sp.const(3) is not sp.const(4)
