//===- bench_l2_prefetch.cu - the next GEMV's weights read into the L2 -----===//
//
// Part of the sparsec project.
//
// A predicted decode layer ends with a latency-bound chain (the predictor's
// hidden vector and selection with the up projection, then the down
// projection over the few rows selected) that leaves the DRAM mostly idle,
// and the next layer starts with a bandwidth-bound GEMV (q/k/v). This
// program measures whether that idle time can be spent reading the GEMV's
// first bytes into the L2: a prefetch kernel on a forked stream
// (cp.async.bulk.prefetch.L2, a few blocks) starts with the chain, and the
// GEMV then finds those bytes in the L2.
//
// Layers rotate over 8 sets of weights (2.9 GB at the default shape, far
// above the L2), each an OPT-6.7B FFN (d 4096, F 16384, fp16) with a rank-r
// predictor whose threshold selects the given density (computed here from
// the predictor's logits), and a q/k/v weight (3d x d, fp16). A graph of 64
// layers is replayed 6 times; the median of the last 5, divided by 64, is
// printed, microseconds a layer:
//   chain     predictUp + sparseDown, early launches as a step runs them
//   GEMV      gemvRows over q/k/v (early)
//   layer     chain then GEMV, with X MB of the GEMV's weights prefetched
//             from the chain's start (0: none), with the L2's default
//             eviction priority or evict_last
// The GEMV's result is checked against a layer without prefetch (exit 1
// when it differs: a prefetch must not change what is computed).
//
//   sparsec-bench-l2-prefetch [--density 0.1] [--rank 32] [--d 4096]
//                             [--ffn 16384]
//
//===----------------------------------------------------------------------===//

#include "GpuBench.h"
#include "sparsec/rt/cuda/DenseDecode.h"
#include "sparsec/rt/cuda/SparseDecode.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace sparsec::rt::cuda;
using namespace sparsec::bench;

namespace {
constexpr int kLayers = 8, kGraphLayers = 64;


/// Requests `bytes` from p into the L2, 32 KB a bulk prefetch, the chunks
/// dealt round the grid's threads. Last: with the evict_last priority.
template <bool Last>
__global__ void prefetchKernel(const char *p, size_t bytes) {
  constexpr size_t kChunk = 32768;
  const size_t n = (bytes + kChunk - 1) / kChunk;
  uint64_t policy = 0;
  if constexpr (Last)
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;"
                 : "=l"(policy));
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const char *a = p + i * kChunk;
    const size_t left = bytes - i * kChunk;
    const unsigned size = unsigned(left < kChunk ? left : kChunk);
    if constexpr (Last)
      asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;"
                   ::"l"(a), "r"(size), "l"(policy) : "memory");
    else
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a),
                   "r"(size) : "memory");
  }
}

/// The same bytes read by plain 16-byte loads (kept in the L2 with the
/// evict_last priority), the lines dealt round the grid's threads; `sink`
/// is written only when the XOR of everything read is a value it cannot
/// be, so the loads stay.
__global__ void loadKernel(const int4 *p, size_t n, int *sink) {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  int acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    int4 v;
    asm volatile("ld.global.nc.L2::cache_hint.v4.s32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p + i), "l"(policy));
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7fffffff && sink)
    *sink = acc;
}

struct Layer {
  __half *up = nullptr, *down = nullptr, *p1 = nullptr, *p2 = nullptr,
         *qkv = nullptr;
  float threshold = 0.0f;
};
} // namespace

int main(int argc, char **argv) {
  int d = 4096, f = 16384, rank = 32;
  double density = 0.1;
  if (!Options("sparsec-bench-l2-prefetch")
           .add("--density", density)
           .add("--rank", rank)
           .add("--d", d)
           .add("--ffn", f)
           .parse(argc, argv))
    return 1;
  if (d < 256 || f < 256 || rank < 1 || !(density > 0 && density <= 1) ||
      !predictUpFits(1, d, rank)) {
    std::fprintf(stderr, "error: bad arguments (or predictUp does not take them)\n");
    return 1;
  }
  cudaDeviceProp prop;
  cublasHandle_t blas;
  cusparseHandle_t sparse;
  setUp(prop, blas, sparse);
  std::printf("%s, L2 %.0f MB; d %d, FFN %d, rank %d, density %.3f, fp16\n\n", prop.name,
              prop.l2CacheSize / 1e6, d, f, rank, density);

  // One token's input, the same for every layer (the bench measures time,
  // not a model: each layer's threshold selects `density` of its neurons
  // for this x).
  std::vector<float> x(d);
  for (int i = 0; i < d; ++i)
    x[i] = float((i * 7919) % 2001 - 1000) / 1000.0f;
  float *dX = upload(x);
  std::vector<Layer> layers(kLayers);
  for (int l = 0; l < kLayers; ++l) {
    Layer &L = layers[l];
    const uint32_t s = uint32_t(l) * 16;
    L.up = filledHalf(size_t(f) * d, s + 1, 0.02f);
    L.down = filledHalf(size_t(f) * d, s + 2, 0.02f);
    L.p1 = filledHalf(size_t(d) * rank, s + 3, 0.02f);
    L.p2 = filledHalf(size_t(rank) * f, s + 4, 0.02f);
    L.qkv = filledHalf(size_t(3) * d * d, s + 5, 0.02f);
    // The threshold at the logits' (1 - density) quantile.
    L.threshold = quantileThreshold(predictorLogits(x, L.p1, L.p2, d, rank, f), density);
  }
  const size_t sf = predictScratchFloats(1, d, rank);
  float *dScratch = alloc<float>(sf), *dH = alloc<float>(f),
        *dY = alloc<float>(d), *dQ = alloc<float>(3 * size_t(d));
  CHECK_CUDA(cudaMemset(dScratch, 0, sizeof(float) * sf));
  IndexView ix;
  ix.neurons = f;
  ix.idx = alloc<int32_t>(size_t(indexSegments(f)) * kSegment);
  ix.cnt = alloc<int32_t>(indexSegments(f));
  ix.list = alloc<int32_t>(f);
  ix.count = alloc<int32_t>(1);
  const size_t qkvBytes = size_t(3) * d * d * sizeof(__half);

  cudaStream_t side;
  CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CHECK_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

  auto chain = [&](const Layer &L) {
    CHECK_CUDA(predictUp<__half>(dX, 1, L.p1, d, rank, L.p2, f, nullptr, L.threshold,
                                 dScratch, ix, nullptr, 0, L.up, nullptr, true, dH, f,
                                 RowsInit{dY, nullptr, nullptr, 1, d}, stream, true));
    CHECK_CUDA(sparseDown<__half>(dH, 1, f, L.down, d, ix, dY, stream, 0, nullptr, true));
  };
  auto gemv = [&](const Layer &L) {
    CHECK_CUDA(gemvRows<__half>(dX, 1, L.qkv, d, 3 * d, nullptr, sparsec::rt::ops::Activation::none,
                                nullptr, dQ, stream, true));
  };
  int *sink = alloc<int>(1);
  // mode 0: bulk prefetch, 1: bulk with evict_last, 2: loads by 16 blocks,
  // 3: loads by 64 blocks.
  auto launchPrefetch = [&](const __half *w, size_t bytes, int mode, cudaStream_t s) {
    if (mode == 0)
      prefetchKernel<false><<<4, 128, 0, s>>>((const char *)w, bytes);
    else if (mode == 1)
      prefetchKernel<true><<<4, 128, 0, s>>>((const char *)w, bytes);
    else
      loadKernel<<<mode == 2 ? 16 : 64, 512, 0, s>>>((const int4 *)w, bytes / 16, sink);
  };
  // 0: chain, 1: GEMV, 2: layer (prefetch forked at the chain's start),
  // 3: prefetch then GEMV on one stream, 4: prefetch alone. mb: prefetched
  // MB.
  auto timeGraph = [&](int what, double mb, int mode) {
    const size_t bytes = std::min(qkvBytes, size_t(mb * 1e6) & ~size_t(15));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    bool forked = false;
    for (int i = 0; i < kGraphLayers; ++i) {
      const Layer &L = layers[i % kLayers];
      if (what >= 3 && bytes > 0)
        launchPrefetch(L.qkv, bytes, mode, stream);
      if (what == 4)
        continue;
      if (what == 3) {
        gemv(L);
        continue;
      }
      if (what == 2 && bytes > 0) {
        CHECK_CUDA(cudaEventRecord(fork, stream));
        CHECK_CUDA(cudaStreamWaitEvent(side, fork, 0));
        launchPrefetch(L.qkv, bytes, mode, side);
        CHECK_CUDA(cudaGetLastError());
        forked = true;
      }
      if (what != 1)
        chain(L);
      if (what != 0)
        gemv(L);
    }
    if (forked) {
      CHECK_CUDA(cudaEventRecord(join, side));
      CHECK_CUDA(cudaStreamWaitEvent(stream, join, 0));
    }
    CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    const double us = replayUs(exec, kGraphLayers);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return us;
  };

  // What each part takes alone, and the selection's size.
  const double chainUs = timeGraph(0, 0, 0), gemvUs = timeGraph(1, 0, 0);
  const int selected = download(ix.count, 1)[0];
  const double gemvTBs = qkvBytes / (gemvUs * 1e6);
  std::printf("chain (predictUp + sparseDown): %.1f us, %d of %d neurons selected "
              "(layer %d's)\n", chainUs, selected, f, (kGraphLayers - 1) % kLayers);
  std::printf("GEMV (q/k/v, %.1f MB): %.1f us, %.2f TB/s\n\n", qkvBytes / 1e6, gemvUs,
              gemvTBs);
  const std::vector<float> ref = download(dQ, 3 * size_t(d));

  const char *modes[] = {"bulk", "bulk, evict_last", "loads, 16 blocks", "loads, 64 blocks"};
  bool ok = true;
  std::printf("Each row: X MB of the q/k/v weight prefetched; per prefetch kind, the\n"
              "prefetch alone, prefetch then GEMV on one stream, and the layer (chain\n"
              "and GEMV, the prefetch forked at the chain's start); us a layer\n\n");
  std::printf("| prefetched MB | kind | prefetch alone | prefetch, GEMV | layer | layer saved |\n"
              "|---:|---|---:|---:|---:|---:|\n");
  const double base = timeGraph(2, 0, 0);
  ok = ok && relErr(download(dQ, 3 * size_t(d)), ref) == 0.0;
  std::printf("| 0 | | | %.2f | %.2f | |\n", gemvUs, base);
  for (double mb : {4.0, 8.0, 16.0, 24.0, 32.0}) {
    for (int mode = 0; mode < 4; ++mode) {
      const double alone = timeGraph(4, mb, mode), seq = timeGraph(3, mb, mode);
      const double layer = timeGraph(2, mb, mode);
      ok = ok && relErr(download(dQ, 3 * size_t(d)), ref) == 0.0;
      std::printf("| %.0f | %s | %.2f | %.2f | %.2f | %.2f |\n", mb, modes[mode], alone, seq,
                  layer, base - layer);
    }
  }
  std::printf("\nlayer without prefetch again: %.2f", timeGraph(2, 0, 0));
  std::printf("\n\n%s\n", ok ? "GEMV results equal with and without prefetch"
                               : "MISMATCH: a prefetch changed the GEMV's result");
  return ok ? 0 : 1;
}
