"""CUDA C from a scheduled program: the CUDA subclass of the C-style renderer.

One ``extern "C" __global__`` function per stage (see :mod:`.schedule`).  A mapped stage runs
a grid-stride loop over the flattened iteration space of its mapped loops::

    const long long tc_n0 = tc_extent(lo0, hi0, step0), tc_n1 = ...;
    const long long tc_total = tc_n0 * tc_n1;
    for (long long tc_t = blockIdx.x * blockDim.x + threadIdx.x; tc_t < tc_total;
         tc_t += gridDim.x * blockDim.x) {
        const long long j = lo1 + (tc_t % tc_n1) * step1;
        const long long i = lo0 + (tc_t / tc_n1) * step0;
        <body>
    }

so any grid size is correct (the host picks one from the sizes).  A serial stage runs on
thread 0 of block 0.  Block reductions and tiled contractions (:mod:`.blocks`) are rendered by
:mod:`.render_blocks`.

Types: float16 buffers hold ``__half`` (``cuda_fp16.h``), computed in float.  bfloat16 buffers
passed in or out hold float32, as NumPy stores bfloat16 in tecomp (``dtypes.to_numpy``);
bfloat16 temporaries hold ``__nv_bfloat16`` (``cuda_bf16.h``), and a cast to bfloat16 rounds to
its precision.  Atomics: ``atomicAdd`` for sums (native on float, double, int, 64-bit int,
``__half`` and ``__nv_bfloat16``), compare-and-swap loops for products, maxima and minima.
"""

from __future__ import annotations

from tecomp import dtypes
from tecomp import expr as E
from tecomp.errors import CompileError
from tecomp.gpuir import GpuProgram, Private, Stage
from tecomp.loopir import Buffer, For, IfThenElse, LetStmt, Stmt, Store

from ..cstyle import CStyleRenderer, float_literal, int_literal
from .render_blocks import BLOCK_NAMES, BlockRenderMixin, block_helpers

BLOCK = 256


class CudaRenderer(BlockRenderMixin, CStyleRenderer):
    """The CUDA target: ``__device__`` helpers, half types, atomics, grid mapping and the
    block-level schedules (:mod:`.render_blocks`)."""

    helper_qualifier = "__device__ __forceinline__"

    def __init__(self, program: GpuProgram) -> None:
        super().__init__()
        self.program = program
        self.temps = set(program.temps)
        self.atomic: frozenset[Store] = frozenset()
        self.private: dict[tuple, Private] = {}
        self.reserve("tc_t", "tc_r", "tc_total", *BLOCK_NAMES)
        self.bind_names(program.func)

    # ------------------------------------------------------------------------------- hooks
    def mem_type(self, buf: Buffer) -> str:
        if buf.dtype == "float16":
            return "__half"
        if buf.dtype == "bfloat16":
            return "__nv_bfloat16" if self._bf16_native(buf) else "float"
        return self.reg_type(buf.dtype)

    def _bf16_native(self, buf: Buffer) -> bool:
        return buf.scope not in ("input", "output")

    def load_conv(self, buf: Buffer, text: str) -> str:
        if buf.dtype == "float16":
            return f"__half2float({text})"
        if buf.dtype == "bfloat16" and self._bf16_native(buf):
            return f"__bfloat162float({text})"
        return text

    def store_conv(self, buf: Buffer, text: str) -> str:
        if buf.dtype == "float16":
            return f"__float2half({text})"
        if buf.dtype == "bfloat16" and self._bf16_native(buf):
            return f"__float2bfloat16({text})"
        return text

    def round_to(self, dtype: str, text: str) -> str:
        if dtype == "float16":
            return f"__half2float(__float2half({text}))"
        if dtype == "bfloat16":
            return f"__bfloat162float(__float2bfloat16({text}))"
        return text

    def unroll_pragma(self) -> str | None:
        return "#pragma unroll"

    # ------------------------------------------------------------------------------- stores
    def stmt_Store(self, s: Store, depth: int) -> list[str]:
        key = (s.buffer, s.indices)
        priv = self.private.get(key)
        if priv is not None:
            value = self.convert(self.expr(s.value), s.value.dtype, s.buffer.dtype, False)
            cur = priv.name
            combined = self.combine(s.reduce, s.buffer.dtype, cur, value)
            return [f"{self.pad(depth)}{cur} = {combined};"]
        if s in self.atomic:
            buf = s.buffer
            value = self.convert(self.expr(s.value), s.value.dtype, buf.dtype, False)
            addr = f"&{self.buffer(buf)}[{self.flat_index(buf, s.indices)}]"
            return [f"{self.pad(depth)}tc_atomic_{s.reduce}({addr}, {value});"]
        return super().stmt_Store(s, depth)

    # ------------------------------------------------------------------------------- kernels
    def render(self) -> str:
        """The whole CUDA source: includes, prelude, one kernel per stage."""
        kernels = [self.render_kernel(st) for st in self.program.stages]
        body = "\n\n".join(kernels)
        head = [f"// tecomp CUDA kernels for {self.program.func.name!r}: "
                f"{len(self.program.stages)} kernel(s), launched in order"]
        if "__half" in body or "half2float" in body or "float2half" in body:
            head.append("#include <cuda_fp16.h>")
        if "bfloat16" in body:
            head.append("#include <cuda_bf16.h>")
        pre = self.prelude()
        if "tc_block_" in body:
            pre += block_helpers(self.helper_qualifier)
        if "tc_atomic_" in body:
            pre += _ATOMICS.replace("QUAL", self.helper_qualifier)
            if "__half" in body or "half2float" in body or "float2half" in body:
                pre += _ATOMICS_HALF.replace("QUAL", self.helper_qualifier)
            if "bfloat16" in body:
                pre += _ATOMICS_BF16.replace("QUAL", self.helper_qualifier)
        return "\n".join(head) + "\n" + pre + "\n" + body + "\n"

    def kernel_params(self, st: Stage) -> list[str]:
        out = []
        for b in st.buffers:
            const = "" if b in st.written else "const "
            out.append(f"{const}{self.mem_type(b)}* __restrict__ {self.buffer(b)}")
        for p in self.program.func.params:
            out.append(f"{self.reg_type(p.dtype)} {self.var(p)}")
        return out

    def render_kernel(self, st: Stage) -> str:
        self.atomic = st.atomic
        self.private = {(p.buffer, p.indices): p for p in st.private}
        self.locals = set()
        params = ",\n    ".join(self.kernel_params(st)) or "void"
        bounds = f"__launch_bounds__({BLOCK}) " if not st.serial else ""
        lines = [f'extern "C" __global__ void {bounds}{st.name}(\n    {params}) {{']
        depth = 1
        closers = 0
        for v, value in st.lets:
            lines.append(self.pad(depth) + "{")
            depth += 1
            closers += 1
            lines.append(f"{self.pad(depth)}const {self.reg_type(v.dtype)} {self.var(v)} = "
                         f"{self.conv(value, v.dtype)};")
        if st.serial:
            lines.append(f"{self.pad(depth)}if (blockIdx.x != 0 || threadIdx.x != 0) return;")
            lines += self.render_stmt(st.stmt, depth)
        else:
            lines += self._render_mapped(st, depth)
        for _ in range(closers):
            depth -= 1
            lines.append(self.pad(depth) + "}")
        lines.append("}")
        return "\n".join(lines)

    def _render_mapped(self, st: Stage, depth: int) -> list[str]:
        lines: list[str] = []
        s: Stmt = st.stmt
        closers = 0
        while not isinstance(s, For):
            if isinstance(s, LetStmt):
                lines.append(self.pad(depth) + "{")
                depth += 1
                closers += 1
                lines.append(f"{self.pad(depth)}const {self.reg_type(s.var.dtype)} "
                             f"{self.var(s.var)} = {self.conv(s.value, s.var.dtype)};")
                s = s.body
            elif isinstance(s, IfThenElse) and s.else_ is None:
                lines.append(f"{self.pad(depth)}if ({self.conv(s.cond, 'bool')}) {{")
                depth += 1
                closers += 1
                s = s.then
            else:  # pragma: no cover - the scheduler only maps through these wrappers
                raise CompileError(f"render: cannot map {type(s).__name__} onto the grid")
        if st.tiling is not None:
            lines += self.render_tiled(st, depth)
        elif st.block_reduce is not None:
            lines += self.render_block_reduce(st, depth)
        else:
            lines += self._render_grid_stride(st, depth)
        for _ in range(closers):
            depth -= 1
            lines.append(self.pad(depth) + "}")
        return lines

    def _render_grid_stride(self, st: Stage, depth: int) -> list[str]:
        lines: list[str] = []
        p = self.pad(depth)
        for priv in st.private:
            t = self.reg_type(priv.buffer.dtype)
            lines.append(f"{p}{t} {priv.name} = {self.identity(priv.reduce, priv.buffer.dtype)};")
        ext = []
        for k, loop in enumerate(st.mapped):
            lo, hi = self.conv(loop.lo, "int64"), self.conv(loop.hi, "int64")
            lines.append(f"{p}const long long tc_lo{k} = {lo};")
            lines.append(f"{p}const long long tc_n{k} = tc_extent(tc_lo{k}, {hi}, {loop.step});")
            ext.append(f"tc_n{k}")
        lines.append(f"{p}const long long tc_total = {' * '.join(ext)};")
        lines.append(f"{p}for (long long tc_t = (long long)blockIdx.x * blockDim.x + threadIdx.x;"
                     f" tc_t < tc_total; tc_t += (long long)gridDim.x * blockDim.x) {{")
        q = self.pad(depth + 1)
        if len(st.mapped) > 1:
            lines.append(f"{q}long long tc_r = tc_t;")
        for k in range(len(st.mapped) - 1, -1, -1):
            loop = st.mapped[k]
            t = self.reg_type(loop.var.dtype)
            step = "" if loop.step == 1 else f" * {loop.step}"
            if len(st.mapped) == 1:
                pos = "tc_t"
            elif k == 0:
                pos = "tc_r"
            else:
                pos = f"(tc_r % tc_n{k})"
            lines.append(f"{q}const {t} {self.var(loop.var)} = ({t})(tc_lo{k} + {pos}{step});")
            if 0 < k:
                lines.append(f"{q}tc_r /= tc_n{k};")
        lines += self.render_stmt(st.mapped[-1].body, depth + 1)
        lines.append(p + "}")
        if st.private:
            lines += self.render_private_combine(st, depth)
        return lines

    def identity(self, reduce: str, dtype: str) -> str:
        """The C literal of the combiner's identity in the register type of ``dtype``."""
        if reduce == "sum":
            return self.visit_Const(E.Const(0, dtype))
        if reduce == "prod":
            return self.visit_Const(E.Const(1, dtype))
        if dtypes.is_float(dtype):
            return float_literal(float("-inf") if reduce == "max" else float("inf"), dtype)
        bits = 32 if dtype == "int32" else 64
        return int_literal(-(1 << (bits - 1)) if reduce == "max" else (1 << (bits - 1)) - 1,
                           dtype)

    def prelude(self) -> str:
        q = self.helper_qualifier
        return super().prelude() + (  # guarded like the prelude: sources can be concatenated
            "#ifndef TC_EXTENT_DEFINED\n#define TC_EXTENT_DEFINED\n"
            f"{q} long long tc_extent(long long lo, long long hi, long long step) {{\n"
            "    return hi > lo ? (hi - lo + step - 1) / step : 0;\n}\n#endif\n")


_ATOMICS = r"""
#ifndef TC_ATOMICS_DEFINED
#define TC_ATOMICS_DEFINED
QUAL void tc_atomic_sum(float* p, float v) { atomicAdd(p, v); }
QUAL void tc_atomic_sum(double* p, double v) { atomicAdd(p, v); }
QUAL void tc_atomic_sum(int* p, int v) { atomicAdd(p, v); }
QUAL void tc_atomic_sum(long long* p, long long v) {
    atomicAdd((unsigned long long*)p, (unsigned long long)v);
}
QUAL unsigned int tc_bits(float x) { return __float_as_uint(x); }
QUAL unsigned long long tc_bits(double x) { return (unsigned long long)__double_as_longlong(x); }
QUAL unsigned int tc_bits(int x) { return (unsigned int)x; }
QUAL unsigned long long tc_bits(long long x) { return (unsigned long long)x; }
QUAL float tc_unbits(unsigned int u, float) { return __uint_as_float(u); }
QUAL double tc_unbits(unsigned long long u, double) { return __longlong_as_double((long long)u); }
QUAL int tc_unbits(unsigned int u, int) { return (int)u; }
QUAL long long tc_unbits(unsigned long long u, long long) { return (long long)u; }
#define TC_CAS_OP(NAME, T, U, EXPR)                                                   \
    QUAL void NAME(T* p, T v) {                                                       \
        U* q = (U*)p;                                                                 \
        U old = *q, assumed;                                                          \
        do {                                                                          \
            assumed = old;                                                            \
            T cur = tc_unbits(assumed, (T)0);                                         \
            T nv = EXPR;                                                              \
            old = atomicCAS(q, assumed, tc_bits(nv));                                 \
        } while (old != assumed);                                                     \
    }
TC_CAS_OP(tc_atomic_prod, float, unsigned int, cur * v)
TC_CAS_OP(tc_atomic_prod, double, unsigned long long, cur * v)
TC_CAS_OP(tc_atomic_prod, int, unsigned int, (int)((unsigned)cur * (unsigned)v))
TC_CAS_OP(tc_atomic_prod, long long, unsigned long long,
          (long long)((unsigned long long)cur * (unsigned long long)v))
TC_CAS_OP(tc_atomic_max, float, unsigned int, tc_max(cur, v))
TC_CAS_OP(tc_atomic_max, double, unsigned long long, tc_max(cur, v))
TC_CAS_OP(tc_atomic_max, int, unsigned int, tc_max(cur, v))
TC_CAS_OP(tc_atomic_max, long long, unsigned long long, tc_max(cur, v))
TC_CAS_OP(tc_atomic_min, float, unsigned int, tc_min(cur, v))
TC_CAS_OP(tc_atomic_min, double, unsigned long long, tc_min(cur, v))
TC_CAS_OP(tc_atomic_min, int, unsigned int, tc_min(cur, v))
TC_CAS_OP(tc_atomic_min, long long, unsigned long long, tc_min(cur, v))
#endif
"""

_ATOMICS_HALF = r"""
#ifndef TC_ATOMICS_HALF_DEFINED
#define TC_ATOMICS_HALF_DEFINED
QUAL void tc_atomic_sum(__half* p, float v) { atomicAdd(p, __float2half(v)); }
#endif
"""

_ATOMICS_BF16 = r"""
#ifndef TC_ATOMICS_BF16_DEFINED
#define TC_ATOMICS_BF16_DEFINED
QUAL void tc_atomic_sum(__nv_bfloat16* p, float v) { atomicAdd(p, __float2bfloat16(v)); }
#endif
"""
