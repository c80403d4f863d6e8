// CPU emulation of the CUDA features tecomp's generated kernels use, so that the generated
// CUDA source itself can be compiled with g++ (-x c++ -include emulate.h) and run on a machine
// without a GPU.
//
// * __global__/__device__/__forceinline__/__launch_bounds__ expand to plain C++.
// * threadIdx/blockIdx/blockDim/gridDim are globals; tc_emu_launch runs the grid as two nested
//   loops (blocks, then threads), one thread after another.  That is exact for kernels without
//   __syncthreads or warp shuffles, which tecomp does not emit.
// * __half and __nv_bfloat16 are 16-bit storage types with the CUDA conversion functions
//   (round to nearest even), so buffers have the GPU's byte layout and NumPy float16 arrays
//   can be passed as they are.
// * Atomics are plain read-modify-writes (threads never run concurrently here).
// * The header cuda_fp16.h / cuda_bf16.h includes of the source must resolve to empty files
//   (the test harness puts empty stand-ins on the include path).
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cmath>
#include <cstddef>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

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
}  // namespace
