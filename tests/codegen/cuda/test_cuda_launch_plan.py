"""The steady-state call of a CUDA kernel through the driver code path (fake driver, kernels
run by the CPU emulation): launch plans reused per shape, temporaries and the bounds-error
record kept on the device and reused, the context made current once per call, no
device-wide synchronisation, and the same results and errors as before."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_emulator import compile_emulated, gxx_available
from fake_driver import FakeDriver

import tecomp as tc
from tecomp.codegen.cuda import launch_plan, runtime
from tecomp.codegen.cuda.compile import available_compilers
from tecomp.codegen.cuda.runtime import DeviceArray

pytestmark = pytest.mark.skipif(not available_compilers() or not gxx_available(),
                                reason="needs a CUDA compiler (cubins) and g++ (emulation)")

R = tc.var("R")
XS = tc.placeholder((R, 7), name="XS")
SOFTMAX = tc.ops.softmax(XS)
EM = tc.placeholder((13, 3), name="EM")
IX = tc.placeholder((29,), name="IX", dtype="int64")
TAKE = tc.ops.take(EM, IX)


@pytest.fixture(scope="module")
def kernels():
    soft = tc.build(SOFTMAX, [XS], target="cuda", name="plan_softmax")
    take = tc.build(TAKE, [EM, IX], target="cuda", name="plan_take")
    assert soft.program.temps and take._bounds is not None
    compile_emulated([soft.source, take.source])
    return soft, take


@pytest.fixture
def fake(monkeypatch):
    drv = FakeDriver()
    monkeypatch.setattr(runtime, "_driver", lambda: drv)
    monkeypatch.setattr(runtime, "_DEVICES", {})
    return drv


def _on_device(dev, *arrays):
    out = []
    for a in arrays:
        d = DeviceArray(dev, a.shape, a.dtype)
        dev.copy_in(d.ptr, a)
        out.append(d)
    return out


def _softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_steady_state_call_reuses_temporaries_and_does_not_synchronise(kernels, fake):
    soft, _ = kernels
    soft._plans.clear()
    dev = runtime.cuda_device()
    x = np.random.default_rng(0).standard_normal((11, 7)).astype(np.float32)
    (dx,) = _on_device(dev, x)
    out = soft(dx)
    np.testing.assert_allclose(out.get(), _softmax(x), rtol=1e-5, atol=1e-6)
    kept = len(fake.emu.mem)
    for seed in (1, 2):
        x = np.random.default_rng(seed).standard_normal((11, 7)).astype(np.float32)
        dev.copy_in(dx.ptr, x)
        n = len(fake.calls)
        assert soft(dx, out=out) is out
        calls = fake.calls[n:]
        # one context switch, the launches, nothing else: no allocation, free or sync
        assert calls == ["cuCtxSetCurrent"] + ["cuLaunchKernel"] * len(soft.kernel_names)
        assert len(fake.emu.mem) == kept
        np.testing.assert_allclose(out.get(), _softmax(x), rtol=1e-5, atol=1e-6)
    assert fake.syncs == 3  # only the three get() above


def test_new_shapes_get_their_own_plan_and_evicted_plans_free_their_buffers(kernels, fake):
    soft, _ = kernels
    soft._plans.clear()
    runtime.cuda_device()  # made before its memory is counted
    base = len(fake.emu.mem)
    rows = list(range(1, launch_plan.MAX_PLANS + 3))
    for r in rows:
        x = np.random.default_rng(r).standard_normal((r, 7)).astype(np.float32)
        np.testing.assert_allclose(soft(x), _softmax(x), rtol=1e-5, atol=1e-6)
    assert len(soft._plans) == launch_plan.MAX_PLANS
    temps = len(soft.program.temps)
    assert len(fake.emu.mem) == base + temps * launch_plan.MAX_PLANS
    soft._plans.clear()
    assert len(fake.emu.mem) == base  # freed (stream-ordered) with their plans
    assert fake.calls.count("cuMemFree") == 0 and fake.syncs == 0


def test_bounds_errors_are_raised_by_the_call_that_caused_them(kernels, fake):
    _, take = kernels
    take._plans.clear()
    dev = runtime.cuda_device()
    rng = np.random.default_rng(3)
    em = rng.standard_normal((13, 3)).astype(np.float32)
    ix = rng.integers(0, 13, 29)
    dem, dix = _on_device(dev, em, ix)
    out = take(dem, dix)
    np.testing.assert_array_equal(out.get(), em[ix])
    bad = ix.copy()
    bad[4] = 10**6
    dev.copy_in(dix.ptr, bad)
    n = len(fake.calls)
    with pytest.raises(tc.IndexBoundsError, match=r"tensor 'EM'.*index 1000000"):
        take(dem, dix, out=out)
    # the kept record is zeroed in order with the launches, then read back
    assert fake.calls[n:] == ["cuCtxSetCurrent", "cuMemsetD32Async", "cuLaunchKernel",
                              "cuMemcpyDtoH"]
    dev.copy_in(dix.ptr, ix)
    take(dem, dix, out=out)  # the next good call does not see the old error
    np.testing.assert_array_equal(out.get(), em[ix])


def test_without_async_memset_the_record_is_zeroed_by_a_copy(kernels, monkeypatch):
    class NoMemset(FakeDriver):
        cuMemsetD32Async = None  # an old driver

    drv = NoMemset()
    monkeypatch.setattr(runtime, "_driver", lambda: drv)
    monkeypatch.setattr(runtime, "_DEVICES", {})
    _, take = kernels
    take._plans.clear()
    em = np.arange(39, dtype=np.float32).reshape(13, 3)
    bad = np.array([0, 12, 13] + [1] * 26)
    with pytest.raises(tc.IndexBoundsError, match=r"index 13"):
        take(em, bad)
    ix = np.array([12, 0] + [5] * 27)
    np.testing.assert_array_equal(take(em, ix), em[ix])
    assert "cuMemcpyHtoD" in drv.calls and "cuMemsetD32Async" not in drv.calls


def test_context_is_set_again_when_another_library_changed_it(kernels, fake):
    soft, _ = kernels
    dev = runtime.cuda_device()
    x = np.ones((3, 7), np.float32)
    (dx,) = _on_device(dev, x)
    out = soft(dx)
    fake.current_ctx = "someone else's"
    soft(dx, out=out)
    assert fake.current_ctx == dev.ctx
    # outside a call every driver operation sets the context itself
    fake.current_ctx = "someone else's"
    dev.synchronize()
    assert fake.current_ctx == dev.ctx
