// CPU emulation of the CUDA features tecomp's generated kernels use, so that the generated
// CUDA source itself can be compiled with g++ (-x c++ -include emulate.h) and run on a machine
// without a GPU.
//
// * __global__/__device__/__forceinline__/__launch_bounds__ expand to plain C++.
// * threadIdx/blockIdx/blockDim/gridDim are globals; tc_emu_launch runs the grid as two nested
//   loops (blocks, then threads), one thread after another.  That is exact for kernels without
//   __syncthreads or warp shuffles (the plain, fast mode).
// * tc_emu_launch_threaded runs each block as one fiber (ucontext) per CUDA thread on one OS
//   thread, with a scheduler that switches fibers at barriers: __syncthreads waits for every
//   live thread of the block, __syncwarp and the shuffles (__shfl_down_sync, __shfl_xor_sync)
//   for every live thread of the warp (lanes 32w .. 32w+31).  __shared__ variables are
//   function statics (blocks run one after another), so all fibers of a block share them.
//   A barrier nobody can pass (divergent __syncthreads) aborts with a message.
// * __half and __nv_bfloat16 are 16-bit storage types with the CUDA conversion functions
//   (round to nearest even), so buffers have the GPU's byte layout and NumPy float16 arrays
//   can be passed as they are.
// * Atomics are plain read-modify-writes (threads never run concurrently here).
// * The header cuda_fp16.h / cuda_bf16.h includes of the source must resolve to empty files
//   (the test harness puts empty stand-ins on the include path).
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <cmath>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
// static: helpers of different generated programs (translation units of one library) that use
// the per-unit scheduler below must not be merged by the linker
#define __forceinline__ static inline
#define __launch_bounds__(...)
#define __shared__ static

struct dim3 {
    unsigned x, y, z;
};
// One set per translation unit (several generated programs may share one library).
namespace {
dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0};
dim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
}  // namespace

// ---------------------------------------------------------------------------- bit casts
inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
inline int __float_as_int(float f) {
    int i;
    memcpy(&i, &f, sizeof i);
    return i;
}
inline double __longlong_as_double(long long i) {
    double d;
    memcpy(&d, &i, sizeof d);
    return d;
}
inline long long __double_as_longlong(double d) {
    long long i;
    memcpy(&i, &d, sizeof i);
    return i;
}
inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}

// ---------------------------------------------------------------------------- half types
struct __half {
    uint16_t bits;
};
inline float __half2float(__half h) {
    _Float16 f;
    memcpy(&f, &h.bits, 2);
    return (float)f;
}
inline __half __float2half(float x) {
    _Float16 f = (_Float16)x;  // IEEE round to nearest even, as __float2half
    __half h;
    memcpy(&h.bits, &f, 2);
    return h;
}

struct __nv_bfloat16 {
    uint16_t bits;
};
inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a (quiet) NaN
        h.bits = (uint16_t)((u >> 16) | 0x40u);
        return h;
    }
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    h.bits = (uint16_t)(u >> 16);
    return h;
}

// ---------------------------------------------------------------------------- atomics
template <typename T>
T atomicAdd(T* p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}
inline __half atomicAdd(__half* p, __half v) {
    __half old = *p;
    *p = __float2half(__half2float(old) + __half2float(v));
    return old;
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
    __nv_bfloat16 old = *p;
    *p = __float2bfloat16(__bfloat162float(old) + __bfloat162float(v));
    return old;
}
template <typename T>
T atomicCAS(T* p, T compare, T value) {
    T old = *p;
    if (old == compare) *p = value;
    return old;
}

// ---------------------------------------------------------------------------- fibers
namespace {
enum TcFiberState { TC_READY, TC_AT_BLOCK, TC_AT_WARP, TC_DONE };
struct TcFiber {
    ucontext_t ctx;
    TcFiberState state;
};
const size_t TC_STACK = 256 * 1024;
struct TcScheduler {
    ucontext_t main;
    std::vector<TcFiber> fibers;
    std::vector<char*> stacks;
    unsigned current = 0;
    bool threaded = false;
    void (*entry)(void*) = nullptr;
    void* data = nullptr;
    unsigned long long slots[1024];  // one shuffle slot per thread of the block
};
TcScheduler tc_sched;

inline void tc_memory_barrier() { asm volatile("" ::: "memory"); }

void tc_fiber_main() {
    tc_sched.entry(tc_sched.data);
    tc_sched.fibers[tc_sched.current].state = TC_DONE;
}  // returns to tc_sched.main through uc_link

inline void tc_wait(TcFiberState why, const char* what) {
    if (!tc_sched.threaded) {
        fprintf(stderr, "emulate.h: %s in a kernel launched in the plain mode\n", what);
        abort();
    }
    TcFiber& f = tc_sched.fibers[tc_sched.current];
    f.state = why;
    tc_memory_barrier();
    swapcontext(&f.ctx, &tc_sched.main);
    tc_memory_barrier();
}

// Runs the threads of the current block as fibers until all of them return.
void tc_run_block(unsigned n) {
    if (n > 1024) {
        fprintf(stderr, "emulate.h: %u threads in a block (at most 1024)\n", n);
        abort();
    }
    asm volatile("" : : "r"(&threadIdx), "r"(&tc_sched) : "memory");  // both escape
    while (tc_sched.stacks.size() < n) tc_sched.stacks.push_back((char*)malloc(TC_STACK));
    tc_sched.fibers.assign(n, TcFiber());
    for (unsigned t = 0; t < n; ++t) {
        TcFiber& f = tc_sched.fibers[t];
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = tc_sched.stacks[t];
        f.ctx.uc_stack.ss_size = TC_STACK;
        f.ctx.uc_link = &tc_sched.main;
        makecontext(&f.ctx, tc_fiber_main, 0);
        f.state = TC_READY;
    }
    for (;;) {
        for (unsigned t = 0; t < n; ++t) {
            if (tc_sched.fibers[t].state != TC_READY) continue;
            tc_sched.current = t;
            threadIdx = {t, 0, 0};
            tc_memory_barrier();
            swapcontext(&tc_sched.main, &tc_sched.fibers[t].ctx);
            tc_memory_barrier();
        }
        // every fiber now waits or is done: open the barriers that everyone reached
        bool opened = false;
        for (unsigned w = 0; w < n; w += 32) {
            unsigned end = w + 32 < n ? w + 32 : n, waiting = 0, live = 0;
            for (unsigned t = w; t < end; ++t) {
                live += tc_sched.fibers[t].state != TC_DONE;
                waiting += tc_sched.fibers[t].state == TC_AT_WARP;
            }
            if (waiting && waiting == live) {
                for (unsigned t = w; t < end; ++t)
                    if (tc_sched.fibers[t].state == TC_AT_WARP) tc_sched.fibers[t].state = TC_READY;
                opened = true;
            }
        }
        if (opened) continue;
        unsigned live = 0, at_block = 0;
        for (unsigned t = 0; t < n; ++t) {
            live += tc_sched.fibers[t].state != TC_DONE;
            at_block += tc_sched.fibers[t].state == TC_AT_BLOCK;
        }
        if (live == 0) return;
        if (at_block != live) {
            fprintf(stderr, "emulate.h: block %u cannot pass a barrier (%u of %u live threads "
                    "at __syncthreads, the others at a warp barrier)\n", blockIdx.x, at_block,
                    live);
            abort();
        }
        for (unsigned t = 0; t < n; ++t)
            if (tc_sched.fibers[t].state == TC_AT_BLOCK) tc_sched.fibers[t].state = TC_READY;
    }
}
}  // namespace

namespace {
inline void __syncthreads() { tc_wait(TC_AT_BLOCK, "__syncthreads"); }
inline void __syncwarp(unsigned = 0xffffffffu) { tc_wait(TC_AT_WARP, "__syncwarp"); }

template <typename T>
T tc_shuffle(T v, unsigned lane_from_mask, bool xor_mode, unsigned arg, int width) {
    static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
    unsigned t = threadIdx.x, lane = t % 32, seg = lane - lane % (unsigned)width;
    if (lane_from_mask == 0xffffffffu && t - lane + 32 > tc_sched.fibers.size()) {
        fprintf(stderr, "emulate.h: a full-mask shuffle in a partial warp (%zu threads in the "
                "block; undefined on a GPU)\n", tc_sched.fibers.size());
        abort();
    }
    memcpy(&tc_sched.slots[t], &v, sizeof(T));
    tc_wait(TC_AT_WARP, "a warp shuffle");
    unsigned src = xor_mode ? (lane ^ arg) : lane + arg;
    T out = v;
    if (src >= seg && src < seg + (unsigned)width && t - lane + src < tc_sched.fibers.size())
        memcpy(&out, &tc_sched.slots[t - lane + src], sizeof(T));
    tc_wait(TC_AT_WARP, "a warp shuffle");  // nobody overwrites a slot before all have read
    return out;
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return tc_shuffle(v, mask, false, delta, width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return tc_shuffle(v, mask, true, (unsigned)lane_mask, width);
}
}  // namespace

// ---------------------------------------------------------------------------- launching
// args[k] points at the value of the kernel's k-th parameter (cuLaunchKernel's convention).
namespace {
template <typename... A, std::size_t... I>
void tc_emu_call(void (*kernel)(A...), void** args, std::index_sequence<I...>) {
    kernel(*static_cast<typename std::remove_reference<A>::type*>(args[I])...);
}

template <typename... A>
void tc_emu_launch(void (*kernel)(A...), unsigned grid, unsigned block, void** args) {
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    for (unsigned b = 0; b < grid; ++b) {
        blockIdx = {b, 0, 0};
        for (unsigned t = 0; t < block; ++t) {
            threadIdx = {t, 0, 0};
            tc_emu_call(kernel, args, std::index_sequence_for<A...>{});
        }
    }
}

template <typename... A>
struct TcCall {
    void (*kernel)(A...);
    void** args;
    static void run(void* p) {
        TcCall* c = static_cast<TcCall*>(p);
        tc_emu_call(c->kernel, c->args, std::index_sequence_for<A...>{});
    }
};

// The threaded mode: each block's threads run as fibers (kernels with __syncthreads/shuffles).
template <typename... A>
void tc_emu_launch_threaded(void (*kernel)(A...), unsigned grid, unsigned block, void** args) {
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    TcCall<A...> call = {kernel, args};
    tc_sched.entry = &TcCall<A...>::run;
    tc_sched.data = &call;
    tc_sched.threaded = true;
    for (unsigned b = 0; b < grid; ++b) {
        blockIdx = {b, 0, 0};
        tc_run_block(block);
    }
    tc_sched.threaded = false;
}
}  // namespace
