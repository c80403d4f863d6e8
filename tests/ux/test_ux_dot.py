"""tc.to_dot: Graphviz text of the compute DAG."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import tecomp as tc


def _graph():
    X = tc.placeholder((4, 5), name="X")
    S = tc.ops.softmax(X)
    return X, S


def test_nodes_and_edges_match_the_dag():
    from tecomp.functor import input_tensors, topo_order

    X, S = _graph()
    text = tc.to_dot(S)
    order = topo_order([S])
    assert text.startswith('digraph "tecomp" {') and text.rstrip().endswith("}")
    assert len(re.findall(r"^  t\d+ \[", text, re.M)) == len(order)
    assert len(re.findall(r"->", text)) == sum(len(input_tensors(t)) for t in order)
    assert 'shape="ellipse", label="X\\nfloat32(4, 5)"' in text
    assert "tag=softmax" in text


def test_delta_stages_are_red_only_before_optimisation():
    X, S = _graph()
    naive = tc.gradient(S, [X], optimize=False)
    assert 'color="red"' in tc.to_dot(naive)
    assert 'color="red"' not in tc.to_dot(tc.optimize(naive))


def test_quotes_in_bodies_are_escaped():
    X, S = _graph()
    text = tc.to_dot(S, bodies=True, name='my "graph"')
    assert 'digraph "my \\"graph\\""' in text
    assert "exp(" in text


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz not installed")
def test_graphviz_accepts_it():
    X, S = _graph()
    res = subprocess.run(["dot", "-Tsvg"], input=tc.to_dot(tc.gradient(S, [X])), text=True,
                         capture_output=True)
    assert res.returncode == 0, res.stderr
