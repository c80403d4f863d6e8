"""The host's measured peak float32 FMA throughput (GFLOP/s), on one core and on all cores.

A loop of ``K`` independent vector fused multiply-adds at the host's vector width
(:func:`tecomp.host.describe`), generated with llvmlite and compiled by tecomp's JIT: each
iteration does ``K`` FMAs of ``lanes`` floats, 2 flops each.  ``K`` covers the FMA latency
times the issue width of any current core (4 cycles x 2 units = 8 chains) without spilling
registers.  All cores: one Python thread per core calls the compiled loop at the same time
(ctypes releases the GIL), and the peak is the total work over the wall time.
"""

from __future__ import annotations

import ctypes
import threading
import time

from llvmlite import ir

from tecomp.codegen.llvm.jit import compile_ir
from tecomp.host import describe


def _splat(b: ir.IRBuilder, x: ir.Value, vec: ir.VectorType) -> ir.Value:
    one = b.insert_element(ir.Constant(vec, None), x, ir.Constant(ir.IntType(32), 0))
    return b.shuffle_vector(one, ir.Constant(vec, None),
                            ir.Constant(ir.VectorType(ir.IntType(32), vec.count), [0] * vec.count))


def _module(lanes: int, chains: int) -> ir.Module:
    f32 = ir.FloatType()
    vec = ir.VectorType(f32, lanes)
    i64 = ir.IntType(64)
    mod = ir.Module(name="peak")
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, ir.PointerType(f32)]),
                     "fma_peak")
    fma = ir.Function(mod, ir.FunctionType(vec, [vec, vec, vec]), f"llvm.fma.v{lanes}f32")
    entry, loop, done = (fn.append_basic_block(x) for x in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    mul, add = (_splat(b, b.load(b.gep(fn.args[1], [ir.Constant(i64, k)])), vec)
                for k in (0, 1))  # run-time values: nothing to fold
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    accs = [b.phi(vec) for _ in range(chains)]
    new = []
    for n, acc in enumerate(accs):
        acc.add_incoming(ir.Constant(vec, [1.0 + n * 1e-3] * lanes), entry)
        new.append(b.call(fma, [acc, mul, add]))
    for acc, v in zip(accs, new):
        acc.add_incoming(v, loop)
    nxt = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, fn.args[0]), loop, done)
    b.position_at_end(done)
    total = new[0]
    for v in new[1:]:
        total = b.fadd(total, v)
    b.store(b.extract_element(total, ir.Constant(ir.IntType(32), 0)),
            b.gep(fn.args[1], [ir.Constant(i64, 2)]))
    b.ret_void()
    return mod


def peak_gflops(threads: int = 1, seconds: float = 0.02, trials: int = 15) -> float:
    """Measured float32 FMA GFLOP/s with ``threads`` threads: the best of ``trials`` short
    runs (a busy machine preempts long ones, which would understate the peak)."""
    host = describe()
    lanes = host.lanes(4)
    chains = 24 if host.vector_bits >= 512 else 12  # 32 / 16 vector registers
    fn = compile_ir(_module(lanes, chains), "fma_peak", link_runtime=False)
    call = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(ctypes.c_float))(fn.address)
    sink = (ctypes.c_float * (3 * threads))(*([0.9999999, 1e-7, 0.0] * threads))
    per_iter = 2 * lanes * chains
    t0 = time.perf_counter()
    call(100000, ctypes.cast(sink, ctypes.POINTER(ctypes.c_float)))
    iters = max(1000, int(seconds / max(time.perf_counter() - t0, 1e-6) * 100000))
    best = 0.0
    for _ in range(trials):
        workers = [threading.Thread(target=call, args=(
            iters, ctypes.cast(ctypes.byref(sink, 12 * n), ctypes.POINTER(ctypes.c_float))))
            for n in range(threads)]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = max(best, threads * iters * per_iter / (time.perf_counter() - t0) / 1e9)
    return best


if __name__ == "__main__":
    from tecomp.host import cpu_count

    print(f"1 core: {peak_gflops(1):.0f} GFLOP/s; {cpu_count()} cores: "
          f"{peak_gflops(cpu_count()):.0f} GFLOP/s")
