"""CUDA C for the block-level schedules of :mod:`.blocks`: block reductions (warp shuffles and
shared memory), block-combined private accumulators, shared-memory tiled contractions.

A block reduction of ``for o: allocate acc { acc = init; for r: acc += v; out[o] = f(acc) }``::

    __shared__ float tc_red[32];
    for (long long tc_t = blockIdx.x; tc_t < tc_total; tc_t += gridDim.x) {  // one output
        const long long o = ...;
        float tc_part = 0.0f;
        for (long long tc_u = threadIdx.x; tc_u < tc_inner; tc_u += blockDim.x) {
            const long long r = ...;
            tc_part = (tc_part + v);
        }
        tc_part = tc_block_sum(tc_part, tc_red, 0.0f);   // shuffles, shared memory
        if (threadIdx.x == 0) { float acc; acc = init; acc = (acc + tc_part); out[o] = f(acc); }
    }

The ``tc_block_*`` helpers need every thread of the block (a multiple of 32 threads) to call
them; the loops around them have the same trip count in all threads of a block.  A tiled
contraction needs exactly :data:`.blocks.TILE_THREADS` threads per block (the launch
configuration of :mod:`.kernel` gives it that).
"""

from __future__ import annotations

from tecomp import expr as E
from tecomp.gpuir import TILE_K, TILE_M, TILE_N, TILE_THREADS, BlockReduce, Private, Stage, Tiling
from tecomp.loopir import Buffer, For, Stmt, Store

#: C names the block schedules use (reserved so that program names never collide with them)
BLOCK_NAMES = ("tc_u", "tc_s", "tc_inner", "tc_part", "tc_red", "tc_sa", "tc_sb", "tc_c",
               "tc_e", "tc_q", "tc_v", "tc_ii", "tc_jj", "tc_kk", "tc_k0", "tc_tx", "tc_ty",
               "tc_ni", "tc_nj", "tc_nk", "tc_bi", "tc_bj", "tc_ti", "tc_tj", "tc_w")


class BlockRenderMixin:
    """Rendering of block-level stages; mixed into :class:`.render.CudaRenderer` (which
    provides ``pad``, ``conv``, ``var``, ``render_stmt``, ``identity``, ``combine`` ...)."""

    # ------------------------------------------------------------------------------ helpers
    def _decode(self, loops: tuple[For, ...], lo: str, n: str, pos: str, rem: str,
                depth: int) -> list[str]:
        """Declarations of the loops' variables from the flat position ``pos`` (innermost loop
        fastest); ``lo{k}``/``n{k}`` name each loop's start and trip count."""
        q = self.pad(depth)
        lines = []
        if len(loops) > 1:
            lines.append(f"{q}long long {rem} = {pos};")
        for k in range(len(loops) - 1, -1, -1):
            loop = loops[k]
            t = self.reg_type(loop.var.dtype)
            step = "" if loop.step == 1 else f" * {loop.step}"
            if len(loops) == 1:
                at = pos
            elif k == 0:
                at = rem
            else:
                at = f"({rem} % {n}{k})"
            lines.append(f"{q}const {t} {self.var(loop.var)} = ({t})({lo}{k} + {at}{step});")
            if 0 < k:
                lines.append(f"{q}{rem} /= {n}{k};")
        return lines

    def _extents(self, loops: tuple[For, ...], lo: str, n: str, total: str, depth: int
                 ) -> list[str]:
        p = self.pad(depth)
        lines = []
        for k, loop in enumerate(loops):
            a, b = self.conv(loop.lo, "int64"), self.conv(loop.hi, "int64")
            lines.append(f"{p}const long long {lo}{k} = {a};")
            lines.append(f"{p}const long long {n}{k} = tc_extent({lo}{k}, {b}, {loop.step});")
        prod = " * ".join(f"{n}{k}" for k in range(len(loops))) or "1"
        lines.append(f"{p}const long long {total} = {prod};")
        return lines

    # ------------------------------------------------------------------- block reduction
    def render_block_reduce(self, st: Stage, depth: int) -> list[str]:
        br: BlockReduce = st.block_reduce
        p, q = self.pad(depth), self.pad(depth + 1)
        t = self.reg_type(br.acc.dtype)
        ident = self.identity(br.reduce, br.acc.dtype)
        lines = [f"{p}__shared__ {t} tc_red[32];"]
        lines += self._extents(br.outer, "tc_lo", "tc_n", "tc_total", depth)
        lines.append(f"{p}for (long long tc_t = blockIdx.x; tc_t < tc_total; "
                     "tc_t += gridDim.x) {")
        lines += self._decode(br.outer, "tc_lo", "tc_n", "tc_t", "tc_r", depth + 1)
        lines.append(f"{q}{t} tc_part = {ident};")
        lines += self._extents(br.inner, "tc_ilo", "tc_in", "tc_inner", depth + 1)
        lines.append(f"{q}for (long long tc_u = threadIdx.x; tc_u < tc_inner; "
                     "tc_u += blockDim.x) {")
        lines += self._decode(br.inner, "tc_ilo", "tc_in", "tc_u", "tc_s", depth + 2)
        saved = self.private
        self.private = {(br.acc, ()): Private(br.acc, (), br.reduce, "tc_part")}
        lines += self.render_stmt(br.body, depth + 2)
        self.private = saved
        lines.append(q + "}")
        lines.append(f"{q}tc_part = tc_block_{br.reduce}(tc_part, tc_red, {ident});")
        lines.append(f"{q}if (threadIdx.x == 0) {{")
        lines += self._finish(br.acc, br.init, br.reduce, "tc_part", br.rest, depth + 2)
        lines.append(q + "}")
        lines.append(p + "}")
        return lines

    def _finish(self, acc: Buffer, init: Store, reduce: str, part: str,
                rest: tuple[Stmt, ...], depth: int) -> list[str]:
        """``acc = init; acc <reduce>= part; rest`` in a scope of its own."""
        r = self.pad(depth)
        self.locals.add(acc)
        name = self.buffer(acc)
        lines = [f"{r}{{", f"{r}    {self.reg_type(acc.dtype)} {name};"]
        lines += self.render_stmt(init, depth + 1)
        lines.append(f"{r}    {name} = {self.combine(reduce, acc.dtype, name, part)};")
        for s in rest:
            lines += self.render_stmt(s, depth + 1)
        lines.append(r + "}")
        return lines

    # --------------------------------------------------------- private accumulators
    def render_private_combine(self, st: Stage, depth: int) -> list[str]:
        """After the grid-stride loop: combine each private accumulator across the block,
        then one atomic per block that had work (thread 0)."""
        p, q = self.pad(depth), self.pad(depth + 1)
        lines = []
        for priv in st.private:
            t = self.reg_type(priv.buffer.dtype)
            ident = self.identity(priv.reduce, priv.buffer.dtype)
            lines.append(f"{p}{{")
            lines.append(f"{q}__shared__ {t} tc_red[32];")
            lines.append(f"{q}{priv.name} = tc_block_{priv.reduce}({priv.name}, tc_red, "
                         f"{ident});")
            lines.append(p + "}")
        lines.append(f"{p}if (threadIdx.x == 0 && (long long)blockIdx.x * blockDim.x < "
                     "tc_total) {")
        for priv in st.private:
            b = priv.buffer
            addr = f"&{self.buffer(b)}[{self.flat_index(b, priv.indices)}]"
            lines.append(f"{q}tc_atomic_{priv.reduce}({addr}, {priv.name});")
        lines.append(p + "}")
        return lines

    # --------------------------------------------------------------- tiled contraction
    def render_tiled(self, st: Stage, depth: int) -> list[str]:
        tl: Tiling = st.tiling
        p, q, r = self.pad(depth), self.pad(depth + 1), self.pad(depth + 2)
        t = self.reg_type(tl.acc.dtype)
        zero = self.identity("sum", tl.acc.dtype)
        tm, tn, tk = TILE_M, TILE_N, TILE_K
        wm, wn = tm // 2, tn // 2  # threads along rows and columns
        lines = [f"{p}__shared__ {t} tc_sa[{tm}][{tk + 1}];",
                 f"{p}__shared__ {t} tc_sb[{tk}][{tn}];"]
        lines += self._extents(tl.batch, "tc_lo", "tc_n", "tc_total", depth)
        lines += self._extents(tl.rows, "tc_ilo", "tc_ni", "tc_ni", depth)
        lines += self._extents(tl.cols, "tc_jlo", "tc_nj", "tc_nj", depth)
        lines += self._extents(tl.kloops, "tc_klo", "tc_kn", "tc_nk", depth)
        lines.append(f"{p}const long long tc_ti = (tc_ni + {tm - 1}) / {tm}, "
                     f"tc_tj = (tc_nj + {tn - 1}) / {tn};")
        lines.append(f"{p}const int tc_tx = threadIdx.x % {wn}, tc_ty = threadIdx.x / {wn};")
        lines.append(f"{p}for (long long tc_t = blockIdx.x; tc_t < tc_total * tc_ti * tc_tj; "
                     "tc_t += gridDim.x) {")
        lines.append(f"{q}const long long tc_bj = (tc_t % tc_tj) * {tn};")
        lines.append(f"{q}const long long tc_bi = ((tc_t / tc_tj) % tc_ti) * {tm};")
        lines.append(f"{q}const long long tc_u = tc_t / (tc_tj * tc_ti);")
        lines += self._decode(tl.batch, "tc_lo", "tc_n", "tc_u", "tc_r", depth + 1)
        lines.append(f"{q}{t} tc_c[2][2] = {{{{{zero}, {zero}}}, {{{zero}, {zero}}}}};")
        lines.append(f"{q}for (long long tc_k0 = 0; tc_k0 < tc_nk; tc_k0 += {tk}) {{")
        lines += self._tile_load("tc_sa", tl.a, tl.rows, "tc_ilo", "tc_ni", "tc_bi", tm, tk,
                                 True, tl, depth + 2)
        lines += self._tile_load("tc_sb", tl.b, tl.cols, "tc_jlo", "tc_nj", "tc_bj", tn, tk,
                                 False, tl, depth + 2)
        lines.append(f"{r}__syncthreads();")
        if self.unroll_pragma():
            lines.append(r + self.unroll_pragma())
        lines.append(f"{r}for (int tc_q = 0; tc_q < {tk}; ++tc_q) {{")
        s = self.pad(depth + 3)
        for a in range(2):
            for b in range(2):
                lines.append(f"{s}tc_c[{a}][{b}] += tc_sa[tc_ty + {wm * a}][tc_q] * "
                             f"tc_sb[tc_q][tc_tx + {wn * b}];")
        lines.append(r + "}")
        lines.append(f"{r}__syncthreads();")
        lines.append(q + "}")
        for a in range(2):
            for b in range(2):
                lines += self._tile_store(tl, a, b, wm, wn, depth + 1)
        lines.append(p + "}")
        return lines

    def _tile_load(self, arr: str, value: E.Expr, group: tuple[For, ...], lo: str, n: str,
                   base: str, rows: int, tk: int, row_major: bool, tl: Tiling, depth: int
                   ) -> list[str]:
        """Stage ``value`` for ``rows`` positions of the flattened ``group`` loops x ``tk`` of
        the flattened k loops in the shared array ``arr`` (``arr[row][k]`` for the row factor,
        ``arr[k][col]`` for the column factor); zero outside the iteration space."""
        q, r = self.pad(depth), self.pad(depth + 1)
        t = self.reg_type(tl.acc.dtype)
        if row_major:
            pos, kpos, cell = f"tc_e / {tk}", f"tc_e % {tk}", f"{arr}[tc_e / {tk}][tc_e % {tk}]"
        else:
            pos, kpos = f"tc_e % {rows}", f"tc_e / {rows}"
            cell = f"{arr}[tc_e / {rows}][tc_e % {rows}]"
        lines = [f"{q}for (int tc_e = threadIdx.x; tc_e < {rows * tk}; tc_e += blockDim.x) {{",
                 f"{r}const long long tc_ii = {base} + {pos}, tc_kk = tc_k0 + {kpos};",
                 f"{r}{t} tc_v = {self.identity('sum', tl.acc.dtype)};",
                 f"{r}if (tc_ii < {n} && tc_kk < tc_nk) {{"]
        s = self.pad(depth + 2)
        lines += self._decode(group, lo, f"{n}", "tc_ii", "tc_w", depth + 2)
        lines += self._decode(tl.kloops, "tc_klo", "tc_kn", "tc_kk", "tc_s", depth + 2)
        lines.append(f"{s}tc_v = {self.conv(value, tl.acc.dtype)};")
        lines.append(r + "}")
        lines.append(f"{r}{cell} = tc_v;")
        lines.append(q + "}")
        return lines

    def _tile_store(self, tl: Tiling, a: int, b: int, wm: int, wn: int, depth: int
                    ) -> list[str]:
        q, r = self.pad(depth), self.pad(depth + 1)
        lines = [f"{q}{{",
                 f"{r}const long long tc_ii = tc_bi + tc_ty + {wm * a}, "
                 f"tc_jj = tc_bj + tc_tx + {wn * b};",
                 f"{r}if (tc_ii < tc_ni && tc_jj < tc_nj) {{"]
        lines += self._decode(tl.rows, "tc_ilo", "tc_ni", "tc_ii", "tc_w", depth + 2)
        lines += self._decode(tl.cols, "tc_jlo", "tc_nj", "tc_jj", "tc_s", depth + 2)
        lines += self._finish(tl.acc, tl.init, "sum", f"tc_c[{a}][{b}]", tl.rest, depth + 2)
        lines.append(r + "}")
        lines.append(q + "}")
        return lines


_BLOCK_HELPERS = r"""
#ifndef TC_BLOCK_DEFINED
#define TC_BLOCK_DEFINED
// Combine one value per thread across the block (blockDim.x a multiple of 32): shuffles inside
// each warp, one value per warp through shared memory, shuffles in warp 0.  The result is
// valid in thread 0; every thread of the block must call it.
#define TC_BLOCK_REDUCE(NAME, COMBINE)                                                 \
    template <typename T>                                                             \
    QUAL T NAME(T v, T* tc_sh, T identity) {                                          \
        const unsigned lane = threadIdx.x % 32u, warp = threadIdx.x / 32u;            \
        for (int o = 16; o > 0; o >>= 1) {                                            \
            T a = v, b = __shfl_down_sync(0xffffffffu, v, o);                         \
            v = COMBINE;                                                              \
        }                                                                             \
        if (lane == 0) tc_sh[warp] = v;                                               \
        __syncthreads();                                                              \
        if (warp == 0) {                                                              \
            v = lane < (blockDim.x + 31u) / 32u ? tc_sh[lane] : identity;             \
            for (int o = 16; o > 0; o >>= 1) {                                        \
                T a = v, b = __shfl_down_sync(0xffffffffu, v, o);                     \
                v = COMBINE;                                                          \
            }                                                                         \
        }                                                                             \
        __syncthreads();                                                              \
        return v;                                                                     \
    }
TC_BLOCK_REDUCE(tc_block_sum, a + b)
TC_BLOCK_REDUCE(tc_block_prod, a * b)
TC_BLOCK_REDUCE(tc_block_max, tc_max(a, b))
TC_BLOCK_REDUCE(tc_block_min, tc_min(a, b))
#endif
"""


def block_helpers(qualifier: str) -> str:
    """The ``tc_block_*`` device helpers (see :data:`_BLOCK_HELPERS`)."""
    return _BLOCK_HELPERS.replace("QUAL", qualifier)


__all__ = ["BLOCK_NAMES", "BlockRenderMixin", "TILE_THREADS", "block_helpers"]
