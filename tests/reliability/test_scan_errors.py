"""User errors in scan declarations raise tc.DeclarationError naming the fault."""

from __future__ import annotations

import numpy as np
import pytest

import tecomp as tc


def _parts(T=5, n=3):
    X = tc.placeholder((T, n), name="X")
    st = tc.placeholder((T, n), name="state")
    init = tc.compute((1, n), lambda _, i: X[0, i], name="init")
    return X, st, init


def test_state_read_at_current_step():
    X, st, init = _parts()
    upd = tc.compute((5, 3), lambda t, i: st[t, i] + X[t, i], name="upd")
    with pytest.raises(tc.DeclarationError, match="current or a later step"):
        tc.scan(init, upd, st)


def test_state_read_at_later_step():
    X, st, init = _parts()
    upd = tc.compute((5, 3), lambda t, i: st[t + 1, i], name="upd")
    with pytest.raises(tc.DeclarationError, match="later step"):
        tc.scan(init, upd, st)


def test_non_constant_lag():
    X, st, init = _parts()
    upd = tc.compute((5, 3), lambda t, i: st[t - 1 - i, i], name="upd")
    with pytest.raises(tc.DeclarationError, match="constant lag"):
        tc.scan(init, upd, st)


def test_lag_beyond_given_steps():
    X, st, init = _parts()
    upd = tc.compute((5, 3), lambda t, i: st[t - 2, i], name="upd")
    with pytest.raises(tc.DeclarationError, match="lag 2"):
        tc.scan(init, upd, st)


def test_shapes_disagree():
    X, st, init = _parts()
    upd = tc.compute((5, 4), lambda t, i: X[t, 0], name="upd")
    with pytest.raises(tc.DeclarationError, match="update 'upd' has shape"):
        tc.scan(init, upd, st)
    bad_init = tc.compute((1, 4), lambda _, i: X[0, 0], name="bad_init")
    upd2 = tc.compute((5, 3), lambda t, i: st[t - 1, i], name="upd2")
    with pytest.raises(tc.DeclarationError, match="init 'bad_init'"):
        tc.scan(bad_init, upd2, st)


def test_dtype_disagrees():
    X, st, init = _parts()
    upd = tc.compute((5, 3), lambda t, i: tc.cast(st[t - 1, i], "float64"), name="upd")
    with pytest.raises(tc.DeclarationError, match="dtype"):
        tc.scan(init, upd, st)


def test_counts_disagree():
    X, st, init = _parts()
    upd = tc.compute((5, 3), lambda t, i: st[t - 1, i], name="upd")
    with pytest.raises(tc.DeclarationError, match="one of each"):
        tc.scan([init, init], [upd], [st])


def test_state_read_by_init():
    X, st, _ = _parts()
    init = tc.compute((1, 3), lambda _, i: st[0, i], name="init")
    upd = tc.compute((5, 3), lambda t, i: st[t - 1, i], name="upd")
    with pytest.raises(tc.DeclarationError, match="init 'init' reads the state"):
        tc.scan(init, upd, st)


def test_state_used_outside_its_scan():
    X, st, init = _parts()
    upd = tc.compute((5, 3), lambda t, i: st[t - 1, i] + X[t, i], name="upd")
    S = tc.scan(init, upd, st)
    leak = tc.compute((5, 3), lambda t, i: S[t, i] + st[t, i], name="leak")
    with pytest.raises(tc.DeclarationError, match="used outside its scan"):
        tc.evaluate([leak], {X: np.zeros((5, 3), np.float32)})
    with pytest.raises(tc.DeclarationError, match="used outside its scan"):
        tc.build([leak], [X])
    upd2 = tc.compute((5, 3), lambda t, i: st[t - 1, i] * 2.0, name="upd2")
    with pytest.raises(tc.DeclarationError, match="already the state"):
        tc.scan(init, upd2, st)


def test_state_listed_as_input():
    X, st, init = _parts()
    upd = tc.compute((5, 3), lambda t, i: st[t - 1, i], name="upd")
    with pytest.raises(tc.DeclarationError, match=r"is \(or reads\) a state"):
        tc.scan(init, upd, st, inputs=[st])


def test_step_tensor_without_time_axis():
    X, st, init = _parts()
    j = tc.reduce_axis(3, name="j")
    last = tc.compute((3,), lambda i: tc.sum(st[4 - 1, j], axis=j), name="last")
    upd = tc.compute((5, 3), lambda t, i: last[i] + X[t, i], name="upd")
    with pytest.raises(tc.DeclarationError):
        tc.scan(init, upd, st)


def test_not_tensors():
    X, st, init = _parts()
    with pytest.raises(tc.DeclarationError, match="not a tensor"):
        tc.scan([init], [3], [st])
