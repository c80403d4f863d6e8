"""The parallel-loop runtime's code is made ready while the first program is lowered
(:func:`tecomp.codegen.llvm.runtime_code.runtime_ahead`): compiled on the compile pool when the
persistent cache lacks it, read from the cache otherwise, and never still compiling when the
build returns (a process that forks then must not fork in the middle of LLVM's work).

Each case runs in a fresh process with a cache directory of its own, since the runtime is
loaded once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tecomp.host import describe

CHILD = textwrap.dedent("""
    import json, os, sys, threading
    import numpy as np
    import tecomp as tc
    from tecomp.codegen.llvm import runtime_code as rc

    threads = []
    compile_runtime = rc._compile

    def recorded():
        threads.append(threading.current_thread().name)
        return compile_runtime()

    rc._compile = recorded

    def program():
        X = tc.placeholder((64, 256), name="X")
        S = tc.compute((64, 256), lambda i, j: tc.exp(X[i, j]) * 2.0, name="S")
        return tc.build(S, [X]), X

    def check(k):
        x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
        got = k(x)
        np.testing.assert_allclose(got, np.exp(x) * 2.0, rtol=1e-6)

    if sys.argv[1] == "fork":  # a build's context that linked no runtime, then a fork
        with rc.runtime_ahead():
            pending = not isinstance(rc._state.get("code"), tuple)
        settled = isinstance(rc._state.get("code"), tuple)
        pid = os.fork()
        if pid == 0:
            try:
                check(program()[0])
            except BaseException:
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        check(program()[0])
        print(json.dumps({"child": os.waitstatus_to_exitcode(status), "pending": pending,
                          "settled": settled}))
    else:
        k, X = program()
        check(k)
        print(json.dumps({"threads": threads, "stored": "code" in rc._state}))
""")


def _run(tmp_path, mode):
    env = dict(os.environ, TECOMP_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("TECOMP_CACHE", None)
    res = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(describe().cores < 2, reason="one core: no compile pool, nothing ahead")
def test_runtime_compiles_on_the_pool_then_comes_from_the_cache(tmp_path):
    first = _run(tmp_path, "build")
    assert len(first["threads"]) == 1 and first["threads"][0].startswith("tecomp-llvm")
    assert not first["stored"]  # taken by the first kernel that links it
    second = _run(tmp_path, "build")
    assert second["threads"] == []  # read from the persistent cache: no compile at all


@pytest.mark.skipif(not hasattr(os, "fork") or describe().cores < 2,
                    reason="needs fork and a compile pool")
def test_no_compile_of_the_runtime_outlives_the_build_that_started_it(tmp_path):
    got = _run(tmp_path, "fork")
    assert got["pending"]  # compiling inside the context
    assert got["settled"]  # compiled, not linked, and not running once it is left
    assert got["child"] == 0  # and a child forked afterwards builds and runs parallel code
