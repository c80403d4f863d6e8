"""Host overhead of a CUDA kernel call, measured without a GPU.

The driver is the fake of :mod:`fake_driver` with launches that do nothing, so what is timed
is tecomp's own per-call work (argument checks, sizes, launch configurations, argument
packing, temporaries, error records) plus the cost of calling the fake driver's Python
functions (cheaper than cuda-python's, so real calls add a little per driver call: the count
of driver calls per call is printed too).  Inputs and outputs are device arrays given with
``out=``, as in the steady state of ``benchmarks/gpu.py``.

    python tests/codegen/cuda/host_overhead.py [--calls 10000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from fake_driver import FakeDriver  # noqa: E402

import tecomp as tc  # noqa: E402
from tecomp.codegen.cuda import runtime  # noqa: E402


class NoLaunchDriver(FakeDriver):
    """The fake driver with launches that do nothing; counts every driver function looked up
    (each lookup is one call)."""

    looked_up = 0

    def __getattribute__(self, name: str):
        if name.startswith("cu") and name[2:3].isupper():
            NoLaunchDriver.looked_up += 1
        return super().__getattribute__(name)

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):  # noqa: N802
        return (self.CUresult.CUDA_SUCCESS,)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=10000)
    ap.add_argument("--only", nargs="*", default=["flatten", "softmax", "gather"])
    opts = ap.parse_args(argv)
    import gpu

    fake = NoLaunchDriver()
    runtime._driver = lambda: fake
    runtime._DEVICES.clear()
    dev = runtime.cuda_device()
    rng = np.random.default_rng(0)
    print(f"{'case':12s} {'kernels':>7s} {'us/call':>8s} {'driver calls/call':>18s}")
    for case in gpu.suite(small=True):
        if case.name not in opts.only:
            continue
        kern = tc.build(case.outputs, case.inputs, target="cuda", name=case.name)
        dargs = []
        for a in case.args(rng):
            d = runtime.DeviceArray(dev, a.shape, a.dtype)
            dev.copy_in(d.ptr, a)
            dargs.append(d)
        outs = kern(*dargs)
        for _ in range(10):
            kern(*dargs, out=outs)
        before = NoLaunchDriver.looked_up
        t0 = time.perf_counter()
        for _ in range(opts.calls):
            kern(*dargs, out=outs)
        dt = time.perf_counter() - t0
        per = (NoLaunchDriver.looked_up - before) / opts.calls
        print(f"{case.name:12s} {len(kern.kernel_names):7d} {dt / opts.calls * 1e6:8.1f} "
              f"{per:18.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
