"""A/B of the steps of the CPU target, each switched off alone, against the full schedule:

* ``phases``: a stage per stride phase when window widths differ (:mod:`tecomp.passes.phase_split`);
* ``rows``: packed row operands of the register tiles (``microkernel.row_operand``);
* ``image_rows``: panels of a flattened image copied by image rows (``microkernel._row_width``);
* ``vector_sums``: vector partial sums across short reduction nests
  (:mod:`tecomp.passes.schedule.cpu.vector_sums`);
* ``k_unroll``: four reduction steps a trip of the register tile's loop
  (``microkernel.K_UNROLL``; off: one);
* ``rows_once``: a packed row operand copied once per slice, before the column blocks
  (``microkernel.ROWS_BEFORE_COLUMNS``; off: once per column block);
* ``column_split``: column blocks across threads when the rows fit in fewer blocks than
  cores (``gemm_dot._split_columns``; only with ``--threads`` above 1);
* ``k_inner``: panels gathered through divisions copied with the reduction innermost
  (``microkernel._divided``);
* ``shared_pads``: one zero-bordered copy of a tensor for every stage that pads it along
  the same dimensions (``pad_windows.SHARE_COPIES``; off: a copy per stage);
* ``in_place``: a flattened image over rows a multiple of the vector wide read where it lies,
  a window's tile loop over whole windows (``microkernel.IN_PLACE``; off: packed panels);
* ``dot_unroll``: four reduction steps a trip of the plain-order tiles that broadcast their
  row operand in place (``gemm_dot.UNROLL``; off: one);
* ``transposed_pack``: panels of a transposed operand (``W[j, k]``) copied by blocks of rows,
  the reduction innermost (``microkernel.TRANSPOSED_COPY``; off: a strided gather a row);
* ``borders``: bordered (zero-padded) copies split where their guard changes
  (``schedule.BORDERS``; off: one guarded store an element);
* ``narrow_rows``: panels of a flattened image copied by image rows of 8 elements or more
  (``microkernel.NARROW_ROWS``; off: rows of half a strip or more);
* ``whole_tiles``: no loops past the whole register tiles where every block is whole tiles
  (``tile.WHOLE_STRIPS``; off: tails that never run);
* ``whole_packs``: a panel's strips copied by their lane loop alone where every block is
  whole strips (``microkernel.WHOLE_PACKS``; off: behind a test of the strip's width, with
  the partial copies that never run beside it);
* ``share_indices``: integer index arithmetic emitted once per basic block
  (``emit_expr.SHARE_INDICES``; off: once per statement, LLVM removes the copies);
* ``outer_loops``: loops of constant bounds around a loop LLVM would not unroll whole left
  rolled (``emit.KEEP_OUTER_LOOPS``; off: LLVM may unroll them whole);
* ``inner_rows``: an innermost loop of constant trips inside another loop, reading a row,
  left rolled for LLVM's vectoriser (``emit.KEEP_INNER_ROWS``; off: LLVM may unroll it whole
  and vectorise the loop around it through gathers);
* ``column_blocks``: a chain of stages that keep to their columns (the real DCT's butterfly
  stages) run block of columns by block (``column_blocks.COLUMN_BLOCKS``; off: stage by
  stage over all columns);
* ``row_groups``: within a block, tree-shaped stages run group of rows by group
  (``row_groups.ROW_GROUPS``; off: stage by stage over the block);
* ``pack_columns``: each block's columns of an input read in scattered rows and larger than
  L2 copied in row order first (``column_blocks.PACK``; off: read where they lie);
* ``copy_forward``: a stage copied into the output in row order stores there itself
  (``copy_forward.COPY_FORWARD``; off: the stage, then the copy);
* ``unrolled_adjoint``: the DCT gradient's input stage with its products written out, a
  buffer the inverse permutation gathers from (``butterfly_grad.UNROLL_BUFFERED``; off: a
  ``tc.sum`` stage, register-tiled, outside the column blocks).
* ``sparse_terms``: the DCT's stages without the products of their factors' structural
  zeros (``butterfly.SPARSE_TERMS``; off: every product written out).
* ``fit_l2``: column blocks of one vector where two would not fit the largest intermediate's
  part in half of L2 (``column_blocks.FIT_L2``; off: always the widest block).
* ``small_runs``: chains whose intermediates fit in half of L2 blocked too
  (``column_blocks.SMALL_RUNS``; off: only larger ones);
* ``fit_l1``: the widest column block whose part of the largest intermediate fits in L1,
  where one does (``column_blocks.FIT_L1``; off: the widest within half of L2);
* ``group_l1``: tree-shaped stages of a column block run group of rows by group wherever the
  block's part of the largest intermediate exceeds L1 (``column_blocks.GROUP_IN_L1``; off:
  only above half of L2);
* ``one_plus``: a float ``a * (1 + y)`` emitted as ``a + a * y``, one multiply-add
  (``emit_expr.FMA_ONE_PLUS``; off: the product);
* ``stream``: non-temporal stores into outputs larger than the last-level cache
  (``stream.STREAM``; off: plain stores).
* ``aligned_heap``: temporaries on the heap (packed panels) at 64-byte boundaries
  (``emit.ALIGNED_HEAP``; off: ``malloc``'s 16).
* ``backend_unroll``: a register tile's steps a trip made by LLVM's unroller from the loop's
  ``unroll`` hint (``microkernel.UNROLL_IN_BACKEND``; off: the schedule writes the copies).
* ``backend_digits``: the same for the digit steps of a window's flattened reduction
  (``digits.UNROLL_IN_BACKEND``; off: the schedule writes the copies).
* ``direct_inits``: a scatter's element-wise init (the zeros of a gather's gradient)
  computed straight into the scatter's buffer (``lower.DIRECT_INITS``; off: into a
  temporary, then copied).
* ``row_chunks``: a column sum (a stage whose only data axis is the sum's innermost loop: a
  bias's or a layer norm's shift's gradient) as one partial sum a core over contiguous rows,
  a parallel loop, then combined (``sum_order.COLUMN_CHUNKS``; off: one serial nest). Only
  on more than one core (``--threads 2``).
* ``slots``: a column-blocked chain's intermediates indexed by the slot of the thread that
  runs a chunk, one set a running thread (``column_blocks.SLOTS``; off: one set a chunk, which
  a call on fewer threads than chunks walks through in turn). Only where the kernel is
  compiled for more cores than a call uses: ``--unpinned --threads 1``.
* ``keep_staged``: the DCT's staged last factor keeps its buffer (``butterfly.KEEP_STAGED``;
  off: the inliner may compute it in the copy's row order, as it did at 2048 points).
* ``keep_adjoints``: the butterfly gradient's staged adjoints keep their buffers, their views
  always inlined (``butterfly_grad.KEEP_ADJOINTS``; off: the inliner's size rule decides,
  which computed the DCT's first transposed stages in their copies' row order).
* ``one_column_loop``: the columns past a plain-order contraction's whole tiles computed a
  column at a time by one reduction loop for the tile's rows (``gemm_dot.ONE_COLUMN_LOOP``;
  off: a reduction loop a row).
* ``from_zero``: a slice's unrolled tile loop counted from 0, not from the slice's start
  (``microkernel.FROM_ZERO``; off: from the start).
* ``glue``: a kernel's loops at the top level that are not parallel outlined like the
  parallel ones, and its own module, left with calls and straight-line code, compiled
  without optimisation (``emit.OUTLINE_SERIAL``, ``tecomp.codegen.llvm.GLUE_UNOPTIMISED``;
  off: the loops in the kernel's own module, compiled at O3).
* ``split``: two or more large serial loops side by side in a parallel loop's body each a
  body of their own, compiled apart (``codegen.llvm.split.SPLIT_BODIES``; off: all in the one body).
* ``contract``: the row temporaries of a fused row loop (a softmax's exponentials, a layer
  norm's centred rows) kept to the current row, allocated inside the loop
  (``contract_rows.CONTRACT_ROWS``; off: whole matrices).
* ``batch_rows``: the row loops of a batch (a short parallel loop over heads around the loop
  over rows, ``S[h, i, :]``) fused like long row loops (``fuse_loops.BATCH_ROWS``; off: only
  parallel loops of 64 iterations or more).
* ``shared_dots``: plain-order reductions blocked in registers only where some load serves
  several accumulators (``dot.SHARED_ONLY``; off: every matching nest, a softmax's maxima over a
  batch of rows too).
* ``ldexp``: ``exp``'s scaling by ``2^n`` one ``llvm.ldexp`` (``vscalef``) on AVX-512 hosts
  (``codegen.llvm.vmath.LDEXP``; off: two multiplications by powers of two from the bits).
* ``erf_compact``: float ``erf`` in the form with the fewest constants
  (``codegen.llvm.vmath.ERF_COMPACT``; off: the previous form, whose 27 constants left a
  GELU's loop short of vector registers on AVX-512).
* ``hand_inward``: a parallel loop of one iteration (a batch of one) hands its mark to the
  loop inside before the blocking passes (``schedule.HAND_INWARD``; off: it waits for the
  final collapse, by when the blocked nest below it has become one thread's). Only on more
  than one core (``--threads 2``).

    python -m benchmarks.ab_cpu_steps [--reps 9] [--threads 1] [--unpinned] [--only STEP,...]
                                      [--programs NAME,...]

Each program is built once per variant (in-process kernel cache cleared, persistent cache
off), checked against the full build, and all builds are timed round-robin in one process
(medians; one thread pinned to one CPU by default).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("TECOMP_CACHE", "0")

import tecomp as tc  # noqa: E402
from benchmarks import bench_cpu_cases as bench_cases  # noqa: E402
from benchmarks.bench_cpu_cases import _cross_entropy_tc, gelu_erf_tc, gelu_tc  # noqa: E402
from benchmarks.bench_cpu_child import round_robin  # noqa: E402
from tecomp.codegen import llvm as llvm_backend  # noqa: E402
from tecomp.codegen.cache import KERNELS  # noqa: E402
from tecomp.codegen.llvm import emit, emit_expr, parts, split, stream, vmath  # noqa: E402
from tecomp.ops import butterfly, butterfly_grad  # noqa: E402
from tecomp.passes import lower, pad_windows, phase_split  # noqa: E402
from tecomp.passes.schedule.cpu import (  # noqa: E402
    column_blocks,
    contract_rows,
    copy_forward,
    digits,
    dot,
    fuse_loops,
    gemm,
    gemm_dot,
    microkernel,
    row_groups,
    sum_order,
    tile,
    vector_sums,
)
from tecomp.passes.schedule.cpu import schedule as cpu_schedule  # noqa: E402


def _off() -> dict[str, Callable[[], Callable[[], None]]]:
    """Each step's switch: a function that turns it off and returns its undo."""
    def patch(pairs):
        def off():
            old = [(m, n, getattr(m, n)) for m, n, _ in pairs]
            for m, n, v in pairs:
                setattr(m, n, v)
            return lambda: [setattr(m, n, v) for m, n, v in old]
        return off

    return {
        "phases": patch([(phase_split, "_stage_per_phase", lambda *a: None)]),
        "rows": patch([(gemm, "row_operand", lambda *a: None),
                       (gemm_dot, "row_operand", lambda *a: None)]),
        "image_rows": patch([(microkernel, "_row_width", lambda *a, **k: None)]),
        "vector_sums": patch([(vector_sums, "vector_sums", lambda f, h, **k: f)]),
        "k_unroll": patch([(microkernel, "K_UNROLL", 1)]),
        "rows_once": patch([(microkernel, "ROWS_BEFORE_COLUMNS", False)]),
        "column_split": patch([(gemm_dot, "_split_columns", lambda *a, **k: None)]),
        "k_inner": patch([(microkernel, "_divided", lambda *a, **k: False)]),
        "shared_pads": patch([(pad_windows, "SHARE_COPIES", False)]),
        "in_place": patch([(microkernel, "IN_PLACE", False)]),
        "dot_unroll": patch([(gemm_dot, "UNROLL", False)]),
        "transposed_pack": patch([(microkernel, "TRANSPOSED_COPY", False)]),
        "borders": patch([(cpu_schedule, "BORDERS", False)]),
        "narrow_rows": patch([(microkernel, "NARROW_ROWS", False)]),
        "whole_tiles": patch([(tile, "WHOLE_STRIPS", False)]),
        "whole_packs": patch([(microkernel, "WHOLE_PACKS", False)]),
        "share_indices": patch([(emit_expr, "SHARE_INDICES", False)]),
        "outer_loops": patch([(emit, "KEEP_OUTER_LOOPS", False)]),
        "inner_rows": patch([(emit, "KEEP_INNER_ROWS", False)]),
        "column_blocks": patch([(column_blocks, "COLUMN_BLOCKS", False)]),
        "row_groups": patch([(row_groups, "ROW_GROUPS", False)]),
        "pack_columns": patch([(column_blocks, "PACK", False)]),
        "copy_forward": patch([(copy_forward, "COPY_FORWARD", False)]),
        "unrolled_adjoint": patch([(butterfly_grad, "UNROLL_BUFFERED", False)]),
        "sparse_terms": patch([(butterfly, "SPARSE_TERMS", False)]),
        "fit_l2": patch([(column_blocks, "FIT_L2", False)]),
        "small_runs": patch([(column_blocks, "SMALL_RUNS", False)]),
        "fit_l1": patch([(column_blocks, "FIT_L1", False)]),
        "group_l1": patch([(column_blocks, "GROUP_IN_L1", False)]),
        "one_plus": patch([(emit_expr, "FMA_ONE_PLUS", False)]),
        "stream": patch([(stream, "STREAM", False)]),
        "aligned_heap": patch([(emit, "ALIGNED_HEAP", False)]),
        "direct_inits": patch([(lower, "DIRECT_INITS", False)]),
        "backend_unroll": patch([(microkernel, "UNROLL_IN_BACKEND", False)]),
        "backend_digits": patch([(digits, "UNROLL_IN_BACKEND", False)]),
        "row_chunks": patch([(sum_order, "COLUMN_CHUNKS", False)]),
        "slots": patch([(column_blocks, "SLOTS", False)]),
        "keep_staged": patch([(butterfly, "KEEP_STAGED", False)]),
        "keep_adjoints": patch([(butterfly_grad, "KEEP_ADJOINTS", False)]),
        "hand_inward": patch([(cpu_schedule, "HAND_INWARD", False)]),
        "one_column_loop": patch([(gemm_dot, "ONE_COLUMN_LOOP", False)]),
        "from_zero": patch([(microkernel, "FROM_ZERO", False)]),
        "glue": patch([(emit, "OUTLINE_SERIAL", False), (llvm_backend, "GLUE_UNOPTIMISED", False)]),
        "split": patch([(split, "SPLIT_BODIES", False)]),
        "contract": patch([(contract_rows, "CONTRACT_ROWS", False)]),
        "batch_rows": patch([(fuse_loops, "BATCH_ROWS", False)]),
        "shared_dots": patch([(dot, "SHARED_ONLY", False)]),
        "ldexp": patch([(vmath, "LDEXP", False)]),
        "erf_compact": patch([(vmath, "ERF_COMPACT", False)]),
    }


def _conv(n, c, f, hw, r, stride, pad, transposed=False, dilation=1):
    X = tc.placeholder((n, c, hw, hw), name="X")
    W = tc.placeholder((c, f, r, r) if transposed else (f, c, r, r), name="W")
    op = tc.ops.conv_transpose2d if transposed else tc.ops.conv2d
    Y = op(X, W, stride=stride, padding=pad, dilation=dilation)
    H = tc.placeholder(Y.shape, name="H")
    return Y, tc.gradient(Y, [X, W], head=H), [X, W], [X, W, H]


def _matmul(n: int):
    A, B = tc.placeholder((n, n), name="A"), tc.placeholder((n, n), name="B")
    k = tc.reduce_axis(n, name="k")
    return A, B, tc.compute((n, n), lambda i, j: tc.sum(A[i, k] * B[k, j], axis=k), name="C")


def programs():
    """(name, outputs, inputs, steps it is measured against); outputs may be a function that
    makes them, called per variant (a switch of how the gradient is built)."""
    for name, spec, steps in (
            ("conv3x3 8x64x32x32->64", (8, 64, 64, 32, 3, 1, 1),
             ("image_rows", "vector_sums", "in_place")),
            ("conv3x3/2 8x64x32x32->128", (8, 64, 128, 32, 3, 2, 1),
             ("phases", "rows", "vector_sums", "column_split", "k_inner", "in_place")),
            ("conv3x3/2 8x128x16x16->256", (8, 128, 256, 16, 3, 2, 1), ("in_place",)),
            ("conv1x1 8x256x16x16->64", (8, 256, 64, 16, 1, 1, 0),
             ("image_rows", "column_split", "in_place", "dot_unroll")),
            ("conv1x1 8x64x32x32->128", (8, 64, 128, 32, 1, 1, 0), ("in_place", "dot_unroll")),
            ("conv3x3 d2 8x64x32x32->64", (8, 64, 64, 32, 3, 1, 2, False, 2), ("in_place",)),
            ("conv3x3 8x256x8x8->256", (8, 256, 256, 8, 3, 1, 1), ("vector_sums", "dot_unroll")),
            ("conv_transpose4x4/2 8x64x16x16->32", (8, 64, 32, 16, 4, 2, 1, True),
             ("rows", "vector_sums", "rows_once", "shared_pads", "in_place")),
            ("conv_transpose4x4/2 8x128x16x16->64", (8, 128, 64, 16, 4, 2, 1, True),
             ("shared_pads", "in_place")),
            ("conv3x3 1x16x32x32->32", (1, 16, 32, 32, 3, 1, 1), ("hand_inward", "glue")),
            ("conv3x3/2 1x16x32x32->32", (1, 16, 32, 32, 3, 2, 1), ("hand_inward",))):
        Y, grads, fins, gins = _conv(*spec)
        if spec[0] == 1:  # a batch of one: the latency suite's
            yield f"{name} fwd", [Y], fins, steps
            yield f"{name} grad", grads, gins, steps
            continue
        every = ("k_unroll", "borders", "narrow_rows", "whole_tiles", "whole_packs",
                 "share_indices", "outer_loops", "inner_rows",
                 "column_blocks", "aligned_heap", "backend_unroll", "backend_digits",
                 "from_zero", "split", "shared_dots", "contract", "batch_rows")
        yield f"{name} fwd", [Y], fins, steps + every
        yield f"{name} grad", grads, gins, steps + every
    x = tc.placeholder((256, 784), name="x")
    W1, b1 = tc.placeholder((1024, 784), name="W1"), tc.placeholder((1024,), name="b1")
    W2, b2 = tc.placeholder((10, 1024), name="W2"), tc.placeholder((10,), name="b2")
    y = tc.placeholder((256,), name="y", dtype="int64")
    h = tc.ops.dense(x, W1, b1, name="h")
    relu = tc.compute(h.shape, lambda i, j: tc.maximum(h[i, j], 0.0), name="relu")
    loss = _cross_entropy_tc(tc.ops.dense(relu, W2, b2, name="z"), y, 256)
    yield "MLP 784-1024-10 + CE fwd", [loss], [x, W1, b1, W2, b2, y], \
        ("dot_unroll", "share_indices", "whole_packs", "aligned_heap", "backend_unroll",
         "inner_rows", "from_zero", "glue", "split", "contract", "shared_dots")
    yield "MLP 784-1024-10 + CE grad", list(tc.gradient(loss, [W1, b1, W2, b2])), \
        [x, W1, b1, W2, b2, y], ("rows", "k_unroll", "rows_once", "column_split", "dot_unroll",
                                 "share_indices", "whole_packs", "aligned_heap", "backend_unroll",
                                 "inner_rows", "from_zero", "glue", "split", "contract",
                                 "shared_dots")
    for nin, nout in ((768, 3072), (3072, 768)):
        xd, Wd, bd = (tc.placeholder((512, nin), name="x"), tc.placeholder((nout, nin), name="W"),
                      tc.placeholder((nout,), name="b"))
        hd = tc.ops.dense(xd, Wd, bd)
        Hd = tc.placeholder(hd.shape, name="H")
        yield f"dense 512x{nin}->{nout} fwd", [hd], [xd, Wd, bd], \
            ("dot_unroll", "transposed_pack", "share_indices", "whole_packs", "aligned_heap",
             "backend_unroll", "inner_rows", "from_zero")
        yield f"dense 512x{nin}->{nout} grad", list(tc.gradient(hd, [xd, Wd, bd], head=Hd)), \
            [xd, Wd, bd, Hd], ("dot_unroll", "transposed_pack", "share_indices", "whole_packs",
                               "aligned_heap", "backend_unroll", "row_chunks", "inner_rows",
                               "from_zero")
    # columns past the whole tiles: 1000 = 31 strips of 32 and 8
    xd, Wd, bd = (tc.placeholder((512, 768), name="x"), tc.placeholder((1000, 768), name="W"),
                  tc.placeholder((1000,), name="b"))
    hd = tc.ops.dense(xd, Wd, bd)
    Hd = tc.placeholder(hd.shape, name="H")
    yield "dense 512x768->1000 fwd", [hd], [xd, Wd, bd], ("one_column_loop", "split")
    yield "dense 512x768->1000 grad", list(tc.gradient(hd, [xd, Wd, bd], head=Hd)), \
        [xd, Wd, bd, Hd], ("one_column_loop", "split")
    X, g, b = (tc.placeholder((2048, 768), name="X"), tc.placeholder((768,), name="g"),
               tc.placeholder((768,), name="b"))
    Y = tc.ops.layer_norm(X, g, b)
    H = tc.placeholder(Y.shape, name="H")
    yield "layer norm 2048x768 fwd", [Y], [X, g, b], ("contract",)
    yield "layer norm 2048x768 grad", list(tc.gradient(Y, [X, g, b], head=H)), [X, g, b, H], \
        ("row_chunks", "inner_rows", "glue", "contract")
    for n in (256, 1024):
        X = tc.placeholder((n, n), name="X")
        Y = tc.ops.softmax(X)
        H = tc.placeholder(Y.shape, name="H")
        yield f"softmax {n}^2 fwd", [Y], [X], ("contract", "ldexp")
        yield f"softmax {n}^2 grad", list(tc.gradient(Y, [X], head=H)), [X, H], \
            ("contract", "ldexp")
    Z = tc.placeholder((4096, 1000), name="Z")
    y = tc.placeholder((4096,), name="y", dtype="int64")
    loss = _cross_entropy_tc(Z, y, 4096)
    yield "softmax cross-entropy 4096x1000 fwd", [loss], [Z, y], ("contract", "ldexp")
    yield "softmax cross-entropy 4096x1000 grad", list(tc.gradient(loss, [Z])), [Z, y], \
        ("contract", "ldexp")
    for heads, length, causal in ((4, 256, True), (8, 512, False)):
        case = bench_cases.attention(heads, length, 64, causal=causal)
        ins = [tc.placeholder(i.shape, name=i.name) for i in case.inputs]
        O = case.tecomp(*ins)
        HO = tc.placeholder(O.shape, name="HO")
        steps = ("contract", "batch_rows", "shared_dots", "ldexp")
        yield f"{case.name} fwd", [O], ins, steps
        yield f"{case.name} grad", list(tc.gradient(O, ins, head=HO)), [*ins, HO], steps
    S = tc.placeholder((8192, 768), name="S")
    t = tc.reduce_axis(8192, name="t")
    yield "column sum 8192x768", [tc.compute((768,), lambda j: tc.sum(S[t, j], axis=t),
                                             name="Y")], [S], ("row_chunks", "inner_rows")
    for n, dtype in ((256, "float64"), (512, "float64"), (1024, "float64"), (2048, "float64"),
                     (4096, "float64"), (4096, "float32"), (128, "float32"), (256, "float32"),
                     (512, "float32"), (1024, "float32"), (2048, "float32")):
        X = tc.placeholder((n, 128), name="X", dtype=dtype)
        Y = tc.ops.dct(X)
        G = tc.placeholder((n, 128), name="G", dtype=dtype)
        steps = ("column_blocks", "row_groups", "pack_columns", "copy_forward", "outer_loops",
                 "fit_l2", "slots", "keep_staged", "inner_rows", "small_runs", "fit_l1",
                 "group_l1", "split")
        yield f"DCT-II {n}x128 {dtype} fwd", lambda X=X: [tc.ops.dct(X)], [X], \
            steps + ("sparse_terms",)
        yield f"DCT-II {n}x128 {dtype} grad", lambda Y=Y, X=X, G=G: tc.gradient(Y, [X], head=G), \
            [G], steps + ("unrolled_adjoint", "keep_adjoints")
    X = tc.placeholder((2048, 2048), name="X")
    for form, gelu in (("erf", gelu_erf_tc), ("tanh", gelu_tc)):
        steps = ("one_plus", "erf_compact") if form == "erf" else ("one_plus",)
        yield f"GELU ({form}) 2048x2048 fwd", [gelu(X)], [X], steps
    HG = tc.placeholder((2048, 2048), name="HG")
    yield "GELU (erf) 2048x2048 grad", list(tc.gradient(gelu_erf_tc(X), [X], head=HG)), \
        [X, HG], ("erf_compact",)
    yield "erf 2048x2048", [tc.compute((2048, 2048), lambda i, j: tc.erf(X[i, j]), name="Y")], \
        [X], ("erf_compact",)
    X = tc.placeholder((4096, 4096), name="X")
    k = tc.reduce_axis(4096, name="k")
    Y = tc.compute((4096,), lambda i: tc.sum(X[i, k], axis=k), name="Y")
    H = tc.placeholder((4096,), name="H")
    yield "row sum 4096x4096 grad", list(tc.gradient(Y, [X], head=H)), [X, H], ("stream",)
    for vocab, dim, count in ((1000, 64, 4096), (32000, 512, 8192)):
        E = tc.placeholder((vocab, dim), name="E")
        idx = tc.placeholder((count,), name="idx", dtype="int64")
        Y = tc.ops.take(E, idx)
        H = tc.placeholder(Y.shape, name="H")
        yield f"embedding {vocab}x{dim}[{count}] grad", list(tc.gradient(Y, [E], head=H)), \
            [idx, H], ("direct_inits", "glue")
    X = tc.placeholder((1 << 24,), name="X")
    k = tc.reduce_axis(1 << 24, name="k")
    Y = tc.compute((), lambda: tc.sum(X[k] * X[k], axis=k), name="Y")
    H = tc.placeholder((), name="H")
    yield "sum of squares 16M grad", list(tc.gradient(Y, [X], head=H)), [X, H], \
        ("stream", "glue")
    for n in (1024, 2048):
        A, B, C = _matmul(n)
        HC = tc.placeholder((n, n), name="HC")
        yield f"matmul {n}^3 fwd", [C], [A, B], ("transposed_pack", "share_indices",
                                                 "whole_packs", "aligned_heap", "backend_unroll",
                                                 "from_zero", "split")
        yield f"matmul {n}^3 grad", list(tc.gradient(C, [A, B], head=HC)), [A, B, HC], \
            ("rows", "k_unroll", "rows_once", "transposed_pack", "share_indices", "whole_packs",
             "aligned_heap", "backend_unroll", "from_zero", "split")


def _arrays(ins, rng) -> list[np.ndarray]:
    out = []
    for t in ins:
        shape = tuple(int(d) for d in t.shape)
        if t.dtype == "int64":
            out.append(rng.integers(0, 10, shape))
        else:
            out.append(rng.standard_normal(shape).astype(t.dtype))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--unpinned", action="store_true", help="with --threads 1: compile for "
                    "every core the process may use, call on one thread (default: the process "
                    "pinned to one core, so kernels are compiled for one)")
    ap.add_argument("--only", default="", help="comma-separated steps: programs measured "
                    "against one of them, and only those variants")
    ap.add_argument("--programs", default="", help="comma-separated substrings of the "
                    "programs' names (default: all)")
    args = ap.parse_args(argv)
    if args.threads == 1 and not args.unpinned and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    from tecomp.host import describe

    print(f"# {describe()}, {args.threads} thread(s), medians of {args.reps} rounds")
    switches = _off()
    rng = np.random.default_rng(0)
    for name, outs, ins, steps in programs():
        if args.programs and not any(p in name for p in args.programs.split(",")):
            continue
        if args.threads == 1 and not args.unpinned:  # never taken on one core
            steps = tuple(s for s in steps if s not in ("column_split", "slots"))
        if args.only:
            steps = tuple(s for s in steps if s in args.only.split(","))
            if not steps:
                continue
        arrays = _arrays(ins, rng)
        fns: dict[str, Any] = {}
        want = None
        for variant in ("all",) + tuple(f"no {s}" for s in steps):
            undo = switches[variant[3:]]() if variant != "all" else (lambda: None)
            try:
                KERNELS.clear()  # and the bodies, whose keys no switch changes
                parts.BODIES.clear()
                kernel = tc.build(outs() if callable(outs) else outs, ins)  # a gradient a variant
            finally:
                undo()
            kernel.threads = args.threads
            got = kernel(*arrays)
            got = list(got) if isinstance(got, tuple) else [got]
            if want is None:
                want = got
            for g, w in zip(got, want):
                scale = max(1.0, float(np.abs(w).max()))
                assert float(np.abs(g - w).max()) / scale < 1e-3, (name, variant)
            fns[variant] = lambda k=kernel, a=arrays: k(*a)
        times = round_robin(fns, args.reps, 0.1)
        base = times["all"][0]
        cells = "  ".join(f"{v}: {t * 1e3:.2f} ms ({t / base:.2f}x)" for v, (t, _) in times.items())
        print(f"{name}: {cells}")


if __name__ == "__main__":
    main()
