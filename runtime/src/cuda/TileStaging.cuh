//===- TileStaging.cuh - shared-memory staging and warpgroup MMAs -*- CUDA -*-===//
//
// Part of the sparsec project.
//
// Asynchronous copies into shared memory, ldmatrix, and Hopper's warpgroup
// MMAs with their matrix descriptors: the tensor-core kernels' staging,
// shared by the runtime's kernels (through DeviceMath.cuh) and the GPU
// benchmarks' own kernels (through bench/gpu/GpuBench.h). Inline functions
// of a named namespace, so that a benchmark's kernels in an anonymous
// namespace may use them (internal).
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RUNTIME_CUDA_TILESTAGING_CUH
#define SPARSEC_RUNTIME_CUDA_TILESTAGING_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace sparsec::rt::cuda {

/// Shared-memory staging for tensor-core tiles (sm_80+): 16-byte (or 4-byte)
/// asynchronous copies that zero-fill past `bytes`, and ldmatrix of 8 x 8
/// fp16 tiles, as stored or transposed.
__device__ __forceinline__ unsigned smemAddr(const void *p) {
  return unsigned(__cvta_generic_to_shared(p));
}
/// To a shared-space address (smemAddr's): no conversion from a generic
/// pointer in the copy loop.
__device__ __forceinline__ void cpAsync16(unsigned dst, const void *src,
                                          int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cpAsync16(void *dst, const void *src,
                                          int bytes) {
  cpAsync16(smemAddr(dst), src, bytes);
}
/// The same through L1 (cp.async.ca). For rows gathered from the L2 (PIT's
/// W rows, the batched sparse down projection's) on the H200 it moves the
/// rows' bytes where cp.async.cg moved about 1.5 times as many: 32-row
/// chunks of 256-byte slices at 90 % micro-tile sparsity copied in 51.3 us
/// against 79.9 (sparsec-bench-pit-bound, docs/GPU.md). It costs L1
/// throughput twice (the fill, then the copy into shared memory), so a
/// kernel uses it for its largest gathered operand only.
__device__ __forceinline__ void cpAsync16L1(unsigned dst, const void *src,
                                            int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cpAsync16L1(void *dst, const void *src,
                                            int bytes) {
  cpAsync16L1(smemAddr(dst), src, bytes);
}
__device__ __forceinline__ void cpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
/// 4 bytes; cp.async.ca (the only kind of that size) goes through L1.
__device__ __forceinline__ void cpAsync4(void *dst, const void *src,
                                         int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                   smemAddr(dst)),
               "l"(src), "r"(bytes));
}
template <int N> __device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrixX4(unsigned (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smemAddr(p)));
}
__device__ __forceinline__ void ldmatrixX4T(unsigned (&r)[4], const void *p) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(smemAddr(p)));
}
__device__ __forceinline__ void ldmatrixX2T(unsigned (&r)[2], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smemAddr(p)));
}

/// Hopper's warpgroup MMAs (sm_90a): shared-memory matrix descriptors and
/// wgmma.mma_async, m64n32k16, fp16 or bf16 in, fp32 accumulate, both operands
/// MN-major (transposed) in shared memory. Compiled for sm_90a only; other
/// targets trap (callers check pitWarpgroupMma() on the host).
constexpr uint64_t kSwizzle128 = 1, kSwizzle64 = 2;
/// Start address, leading and stride byte offsets (for MN-major operands:
/// between 64- (or 32-) element column blocks and between 8-row groups),
/// swizzle mode.
__device__ __forceinline__ uint64_t wgmmaDesc(unsigned addr, unsigned lbo,
                                              unsigned sbo, uint64_t swizzle) {
  return uint64_t((addr & 0x3FFFF) >> 4) |
         (uint64_t((lbo & 0x3FFFF) >> 4) << 16) |
         (uint64_t((sbo & 0x3FFFF) >> 4) << 32) | (swizzle << 62);
}
/// The copies this thread waited for, made visible to the async proxy.
__device__ __forceinline__ void fenceProxyAsyncShared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/// Keeps the compiler from moving accesses to the accumulators across the
/// asynchronous MMAs that own them.
template <int N>
__device__ __forceinline__ void wgmmaFenceOperands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void wgmmaFence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmmaCommit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
/// Waits until at most N committed groups of warpgroup MMAs are pending.
template <int N> __device__ __forceinline__ void wgmmaWait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/// d [64 x 32] += a [64 x 16] . b [16 x 32], E (__half or __nv_bfloat16)
/// the type of both operands; thread 32 w + l of the
/// warpgroup holds rows 16 w + l / 4 (+ 8) of d, register 4 j + r column
/// 8 j + 2 (l % 4) + r % 2 (+ 8 rows for r >= 2).
#define SPARSEC_WGMMA_M64N32K16(TYPE)                                          \
  asm volatile(                                                                \
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                               \
      "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE " "          \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "     \
      "%15}, %16, %17, p, 1, 1, 1, 1;\n}\n"                                    \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]),            \
        "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),            \
        "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),       \
        "+f"(d[15])                                                            \
      : "l"(a), "l"(b))
template <typename E = __half>
__device__ __forceinline__ void wgmmaM64N32K16(float (&d)[16], uint64_t a,
                                               uint64_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (std::is_same_v<E, __nv_bfloat16>)
    SPARSEC_WGMMA_M64N32K16("bf16");
  else
    SPARSEC_WGMMA_M64N32K16("f16");
#else
  (void)d, (void)a, (void)b;
  __trap(); // built for sm_90a only (pitWarpgroupMma)
#endif
}
#undef SPARSEC_WGMMA_M64N32K16

} // namespace sparsec::rt::cuda

#endif // SPARSEC_RUNTIME_CUDA_TILESTAGING_CUH
