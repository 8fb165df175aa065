//===- bench_dense_decode.cu - dense decode kernels vs cuBLAS ------------===//
//
// Part of the sparsec project.
//
// Where a dense decode step of an OPT-shaped model loses bandwidth, kernel
// by kernel, at one shape (--shape 6.7b: d 4096, FFN 16384, 32 heads of
// 128; --shape 1.3b: d 2048, FFN 8192, 32 heads of 64; vocabulary 50272):
//
//   GEMVs      gemvRows (fp16 weights, neuron-major) at every projection
//              of a layer (q, k, v and out are d x d; "qkv" the three as
//              one 3d x d matrix), the FFN up and down and the LM head,
//              against cuBLAS (cublasGemmEx, fp16 W and x, fp32
//              accumulation) on the same weights; microseconds per call,
//              the weights' bytes over that time, and that rate as a share
//              of the read bandwidth measured in the same run.
//   chains     the GEMVs of one layer launched back to back (as in a
//              step), with q, k and v as three launches or as one
//              gemvRowsGroup launch (a sparsec.linear_group), with the two
//              layer norm kernels, with the norms folded into the q/k/v
//              group and the up projection, and as a whole layer (norm
//              kernels and the attention over 192 positions too); launched
//              normally, with the norms and attention as programmatic
//              dependent launches, and with every kernel so (the runtime's
//              default); a whole layer whose out and down projections'
//              last blocks write the norms' outputs (gemvRowsNormOut, an
//              experiment: no norm kernels); and whole layers whose
//              attention reads the cached past before or after its wait.
//   attention  decodeAttention for one query row per head over a cache of
//              T positions (fp32 keys and values); with --only attention,
//              batches of 1 and 16 rows over float32 and float16 caches
//              (a runtime KV cache kept in 16 bits), each call reading
//              another copy of the caches, so that none is in the L2.
//   tiny       a kernel that touches d floats: what one more graph node
//              costs; the greedy pick (argmaxRows) over 1 and 4 rows of
//              logits.
//
// The read bandwidth is a reduction kernel over 4 GiB (each byte read once,
// nothing written but the result). Consecutive GEMV calls read different
// copies of their weight from a 512 MB pool, so none finds it in the L2. Every time is the median of 5 replays
// of a CUDA graph of `inner` calls divided by `inner`. gemvRows results are
// checked against cuBLAS (exit 1 when a relative error passes 2e-3).
//
//   sparsec-bench-dense-decode [--shape 6.7b|1.3b] [--tokens M]
//                              [--only attention] (fp32 / fp16 caches)
//                              [--only layer]   (the chains alone)
//                              [--only pick]    (the greedy pick alone)
//
//===----------------------------------------------------------------------===//

#include "GpuBench.h"
#include "sparsec/rt/cuda/DenseDecode.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace sparsec::rt::cuda;
using namespace sparsec::bench;

namespace {

__global__ void tinyKernel(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] = x[i] * 0.5f + 1.0f;
}

constexpr auto kNone = sparsec::rt::ops::Activation::none;
constexpr auto kRelu = sparsec::rt::ops::Activation::relu;

struct Proj {
  const char *name;
  int N, K;
};

} // namespace

int main(int argc, char **argv) {
  std::string shape = "6.7b";
  int tokens = 1; // of the projection table
  std::string only; // "layer": the layer chains alone; "pick": the argmax
  if (!Options("sparsec-bench-dense-decode")
           .add("--shape", shape)
           .add("--tokens", tokens)
           .add("--only", only)
           .parse(argc, argv))
    return 1;
  if (!only.empty() && only != "layer" && only != "pick" &&
      only != "attention") {
    std::fprintf(stderr,
                 "error: --only takes 'layer', 'pick' or 'attention', not "
                 "'%s'\n",
                 only.c_str());
    return 1;
  }
  if (tokens < 1 || tokens > kGemvRowsTokens) {
    std::fprintf(stderr, "error: --tokens takes 1 to %d\n", kGemvRowsTokens);
    return 1;
  }
  int d, f, heads;
  if (shape == "6.7b") {
    d = 4096, f = 16384, heads = 32;
  } else if (shape == "1.3b") {
    d = 2048, f = 8192, heads = 32;
  } else {
    std::fprintf(stderr, "error: --shape takes 6.7b or 1.3b, not '%s'\n",
                 shape.c_str());
    return 1;
  }
  const int vocab = 50272, head = d / heads;
  cudaDeviceProp prop;
  cublasHandle_t blas;
  cusparseHandle_t sparse;
  setUp(prop, blas, sparse);
  bool g;

  const double readBw = readBandwidth(prop); // GB/s
  std::printf("GPU: %s, %d SMs; read bandwidth %.0f GB/s (4 GiB reduction)\n",
              prop.name, prop.multiProcessorCount, readBw);
  std::printf("OPT-%s shapes: d %d, FFN %d, %d heads of %d, vocabulary %d; "
              "fp16 weights, batch %d (projections; the rest batch 1); "
              "microseconds per call (graph of 100, median of 5)\n\n",
              shape.c_str(), d, f, heads, head, vocab, tokens);

  const Proj projs[] = {{"q / k / v / out", d, d}, {"qkv (merged)", 3 * d, d},
                        {"FFN up", f, d},         {"FFN down", d, f},
                        {"LM head", vocab, d}};
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> val(-1, 1);
  // A pool of weights larger than the L2 cache: consecutive calls read
  // different copies, so that no call finds its weights cached.
  size_t maxW = size_t(256) << 20; // halves: 512 MB
  for (const Proj &p : projs)
    maxW = std::max(maxW, size_t(p.N) * p.K);
  std::vector<__half> w(maxW);
  for (auto &v : w)
    v = __float2half(val(rng) * 0.05f);
  __half *dW = upload(w);
  std::vector<float> x(size_t(tokens) * f);
  for (float &v : x)
    v = val(rng);
  std::vector<__half> xh(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xh[i] = __float2half(x[i]);
    x[i] = __half2float(xh[i]); // the same values on both paths
  }
  float *dX = upload(x);
  __half *dXh = upload(xh);
  float *dY = alloc<float>(size_t(tokens) * vocab),
        *dYRef = alloc<float>(size_t(tokens) * vocab);
  float one = 1.0f, zero = 0.0f;

  bool ok = true;
  if (only.empty())
    std::printf("| projection | N x K | MB | sparsec gemvRows | TB/s | %% of read "
                "bw | cuBLAS | TB/s | rel. err |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Proj &p : projs) {
    if (!only.empty())
      break;
    const double bytes = 2.0 * p.N * p.K;
    const size_t size = size_t(p.N) * p.K, copies = std::max<size_t>(1, maxW / size);
    size_t call = 0;
    auto next = [&] { return dW + (call++ % copies) * size; };
    double ours = timeUs(
        [&] {
          gemvRows<__half>(dX, tokens, next(), p.K, p.N, nullptr, kNone,
                           nullptr, dY, stream);
        },
        g);
    // Y^T [N, M] = Wt[N, K] . x^T[K, M]: W stored [N, K] row-major is column-major
    // [K, N], so op T.
    auto cub = [&] {
      cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, p.N, tokens, p.K, &one, next(),
                   CUDA_R_16F, p.K, dXh, CUDA_R_16F, p.K, &zero, dYRef,
                   CUDA_R_32F, p.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
    double theirs = timeUs(cub, g);
    call = 0;
    cub();
    call = 0;
    gemvRows<__half>(dX, tokens, next(), p.K, p.N, nullptr, kNone, nullptr,
                     dY, stream);
    double err = relErr(download(dY, size_t(tokens) * p.N),
                        download(dYRef, size_t(tokens) * p.N));
    ok &= err < 2e-3;
    std::printf("| %s | %d x %d | %.1f | %.1f | %.2f | %.0f %% | %.1f | %.2f | %.1e |\n",
                p.name, p.N, p.K, bytes / 1e6, ours, bytes / (ours * 1e6),
                100.0 * bytes / (ours * 1e3) / readBw, theirs,
                bytes / (theirs * 1e6), err);
  }

  // One layer's GEMVs back to back (separate weights, as in a step), alone,
  // with the layer's two norm kernels and with its attention too (a whole
  // layer but the cache append), launched normally, with the norms and the
  // attention early and with everything early (the runtime's default).
  if (only != "pick" && only != "attention") {
    const size_t layerW = size_t(4) * d * d + size_t(2) * f * d;
    std::vector<__half> lw(layerW);
    for (auto &v : lw)
      v = __float2half(val(rng) * 0.05f);
    __half *dL = upload(lw);
    float *y1 = alloc<float>(f), *y2 = alloc<float>(f),
          *att = alloc<float>(d);
    const double bytes = 2.0 * layerW;
    // A layer norm's parameters, for the chains with norms: two norm
    // kernels a layer (before q, k, v and before up), or folded into those
    // GEMVs (with each weight's folding terms made once here).
    std::vector<float> ones(size_t(f), 1.0f), zeros(size_t(f), 0.0f);
    float *dOnes = upload(ones), *dZeros = upload(zeros);
    float *xn = alloc<float>(d),
          *terms = alloc<float>(2 * (3 * d + f));
    const __half *q = dL, *o = dL + size_t(3) * d * d,
                 *up = dL + size_t(4) * d * d, *down = up + size_t(f) * d;
    GemvNorm lnQkv, lnUp;
    lnQkv.scale = lnUp.scale = dOnes;
    lnQkv.bias = lnUp.bias = dZeros;
    {
      float *t = terms;
      for (int i = 0; i < 3; ++i, t += 2 * d) {
        CHECK_CUDA(gemvNormTerms<__half>(q + size_t(i) * d * d, d, d, dOnes,
                                         dZeros, t, stream));
        lnQkv.wScale[i] = t;
        lnQkv.wBias[i] = t + d;
      }
      CHECK_CUDA(gemvNormTerms<__half>(up, d, f, dOnes, dZeros, t,
                                       stream));
      lnUp.wScale[0] = t;
      lnUp.wBias[0] = t + f;
      CHECK_CUDA(cudaStreamSynchronize(stream));
    }
    // The attention of the whole layer: 191 cached positions and the new
    // one (q, k, v from the q/k/v group), fp32 cache as the runtime's.
    // (Up to 256: the runtime's padded cache at prompt 128 + 128 new
    // tokens, 257 positions, in the prefetch table below.)
    const int past = 191, maxPast = 256;
    std::vector<float> kv(size_t(heads) * maxPast * head);
    for (float &v : kv)
      v = val(rng);
    float *dK = upload(kv), *dV = upload(kv);
    int *counters = alloc<int>(heads);
    CHECK_CUDA(cudaMemset(counters, 0, sizeof(int) * heads));
    DecodeAttention a;
    a.q = y1;
    a.k = y1 + d;
    a.v = y1 + 2 * d;
    a.pastK = dK;
    a.pastV = dV;
    a.B = 1;
    a.Hq = a.Hk = heads;
    a.Sq = a.Sk = 1;
    a.P = past;
    a.D = a.Dv = head;
    a.scale = 1.0f / std::sqrt(float(head));
    a.out = att;
    DecodeAttention aMax = a;
    aMax.P = maxPast;
    float *scratch = alloc<float>(
        std::max(decodeAttentionScratchBytes(a), decodeAttentionScratchBytes(aMax)) / 4 + 1);
    enum Norms { kNoNorms, kNormKernels, kNormsFolded, kNormsInLastBlocks };
    // kNormsInLastBlocks: the out and down projections' last blocks write
    // the next norm's output (gemvRowsNormOut), so the q/k/v group reads
    // the previous chain's xn and the up projection xn2.
    float *xn2 = alloc<float>(d);
    unsigned *normCounters = alloc<unsigned>(2);
    CHECK_CUDA(cudaMemset(normCounters, 0, 2 * sizeof(unsigned)));
    GemvNormOut outNorm, downNorm;
    outNorm.scale = downNorm.scale = dOnes;
    outNorm.bias = downNorm.bias = dZeros;
    outNorm.out = xn2;
    downNorm.out = xn;
    outNorm.counter = normCounters;
    downNorm.counter = normCounters + 1;
    // gemvEarly: the GEMVs are early launches; smallEarly: the norms and
    // the attention.
    auto chain = [&](bool gemvEarly, bool smallEarly, bool merged,
                     Norms norms = kNoNorms, bool attention = false) {
      // The out and down projections (into y2), writing the next norm's
      // output too with kNormsInLastBlocks.
      auto toResidual = [&](const float *in, const __half *w, int K,
                            const GemvNormOut &next) {
        if (norms == kNormsInLastBlocks)
          gemvRowsNormOut<__half>(in, w, K, d, nullptr, kNone, nullptr, y2,
                                  next, stream);
        else
          gemvRows<__half>(in, 1, w, K, d, nullptr, kNone, nullptr, y2,
                           stream, gemvEarly);
      };
      const float *in = norms == kNormsInLastBlocks ? xn : dX;
      if (norms == kNormKernels) {
        normRows(dX, 1, d, dOnes, dZeros, 1e-5f, false, xn, stream,
                 smallEarly);
        in = xn;
      }
      if (merged) {
        // One launch over the three weights (what linear_group runs).
        const __half *w3[] = {q, q + size_t(d) * d, q + size_t(2) * d * d};
        const int n3[] = {d, d, d};
        float *y3[] = {y1, y1 + d, y1 + 2 * d};
        gemvRowsGroup<__half>(in, 1, d, 3, w3, n3, nullptr, kNone, nullptr,
                              y3, stream, gemvEarly,
                              norms == kNormsFolded ? &lnQkv : nullptr);
      } else {
        for (int i = 0; i < 3; ++i)
          gemvRows<__half>(in, 1, q + size_t(i) * d * d, d, d, nullptr,
                           kNone, nullptr, y1 + i * d, stream, gemvEarly);
      }
      const float *outIn = y1;
      if (attention) {
        decodeAttention(a, scratch, counters, stream, smallEarly);
        outIn = att;
      }
      toResidual(outIn, o, d, outNorm);
      if (norms == kNormsInLastBlocks) {
        gemvRows<__half>(xn2, 1, up, d, f, nullptr, kRelu, nullptr, y1,
                         stream, gemvEarly);
      } else if (norms == kNormsFolded) {
        const int nf = f;
        gemvRowsGroup<__half>(y2, 1, d, 1, &up, &nf, nullptr, kRelu, nullptr,
                              &y1, stream, gemvEarly, &lnUp);
      } else {
        const float *upIn = y2;
        if (norms == kNormKernels) {
          normRows(y2, 1, d, dOnes, dZeros, 1e-5f, false, xn, stream,
                   smallEarly);
          upIn = xn;
        }
        gemvRows<__half>(upIn, 1, up, d, f, nullptr, kRelu, nullptr, y1,
                         stream, gemvEarly);
      }
      toResidual(y1, down, f, downNorm);
    };
    std::printf("\nOne layer's GEMVs back to back (%.1f MB of weights); the "
                "whole layer adds its attention over %d positions:\n\n"
                "| launches | q, k, v separate | TB/s | q, k, v grouped | TB/s | "
                "grouped + 2 norm kernels | TB/s | grouped, norms folded | "
                "TB/s | whole layer | TB/s |\n"
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
                bytes / 1e6, past + 1);
    const struct {
      const char *name;
      bool gemv, small;
    } modes[] = {{"normal", false, false},
                 {"norms, attention early", false, true},
                 {"all early (default)", true, true}};
    for (const auto &m : modes) {
      double sep = timeUs([&] { chain(m.gemv, m.small, false); }, g, 20);
      double mer = timeUs([&] { chain(m.gemv, m.small, true); }, g, 20);
      double nk = timeUs(
          [&] { chain(m.gemv, m.small, true, kNormKernels); }, g, 20);
      double nrm = timeUs(
          [&] { chain(m.gemv, m.small, true, kNormsFolded); }, g, 20);
      double lay = timeUs(
          [&] { chain(m.gemv, m.small, true, kNormKernels, true); }, g, 20);
      std::printf("| %s | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f | %.1f | "
                  "%.2f | %.1f | %.2f |\n",
                  m.name, sep, bytes / (sep * 1e6), mer, bytes / (mer * 1e6),
                  nk, bytes / (nk * 1e6), nrm, bytes / (nrm * 1e6), lay,
                  bytes / (lay * 1e6));
    }
    // The norms in the out and down projections' last blocks (an
    // experiment, gemvRowsNormOut; the GEMVs launched normally).
    {
      const double nl = timeUs(
          [&] { chain(false, false, true, kNormsInLastBlocks, true); }, g, 20);
      const double nle = timeUs(
          [&] { chain(false, true, true, kNormsInLastBlocks, true); }, g, 20);
      std::printf("\nWhole layer with the norms in the out and down "
                  "projections' last blocks (no norm kernels): %.1f us "
                  "(%.2f TB/s), %.1f us (%.2f TB/s) with the attention "
                  "early\n",
                  nl, bytes / (nl * 1e6), nle, bytes / (nle * 1e6));
      // Its norm against the norm kernel over the same row.
      chain(false, false, true, kNormsInLastBlocks, true);
      normRows(y2, 1, d, dOnes, dZeros, 1e-5f, false, xn2, stream);
      CHECK_CUDA(cudaStreamSynchronize(stream));
      const double lastErr = relErr(download(xn, d), download(xn2, d));
      std::printf("Norm in the last block against the norm kernel: relative "
                  "error %.1e\n",
                  lastErr);
      ok &= lastErr < 1e-5;
    }
    // The attention's past read before it waits for the q/k/v GEMVs
    // (pastReady: the runtime's cache), at 192 positions and at the 257 of
    // the runtime's padded cache after a 128-token prompt (256 + the new).
    {
      std::printf("\nWhole layer (q, k, v grouped, 2 norm kernels), the "
                  "attention's past read after its wait or prefetched "
                  "before it:\n\n| positions | launches | past after the "
                  "wait | TB/s | past prefetched | TB/s |\n"
                  "|---:|---|---:|---:|---:|---:|\n");
      double prefErr = 0;
      for (int P : {past, maxPast}) {
        a.P = P;
        for (const auto &m : {modes[1], modes[2]}) {
          a.pastReady = false;
          const double after = timeUs(
              [&] { chain(m.gemv, m.small, true, kNormKernels, true); }, g, 20);
          chain(m.gemv, m.small, true, kNormKernels, true);
          std::vector<float> ref = download(att, d);
          a.pastReady = true;
          const double pre = timeUs(
              [&] { chain(m.gemv, m.small, true, kNormKernels, true); }, g, 20);
          chain(m.gemv, m.small, true, kNormKernels, true);
          CHECK_CUDA(cudaStreamSynchronize(stream));
          prefErr = std::max(prefErr, relErr(download(att, d), ref));
          std::printf("| %d | %s | %.1f | %.2f | %.1f | %.2f |\n", P + 1,
                      m.name, after, bytes / (after * 1e6), pre,
                      bytes / (pre * 1e6));
        }
      }
      a.P = past;
      a.pastReady = false;
      std::printf("\nPrefetched against after the wait: relative error "
                  "%.1e\n",
                  prefErr);
      ok &= prefErr < 1e-6;
    }
    // Every launch mode computes the same layer: y2 of the whole layer,
    // normal against all early.
    chain(false, false, true, kNormKernels, true);
    std::vector<float> normal = download(y2, d);
    chain(true, true, true, kNormKernels, true);
    const double earlyErr = relErr(download(y2, d), normal);
    std::printf("\nAll early against normal launches: relative error %.1e\n",
                earlyErr);
    ok &= earlyErr == 0.0;
    cudaFree(dK);
    cudaFree(dV);
    cudaFree(counters);
    cudaFree(scratch);
    cudaFree(xn2);
    cudaFree(normCounters);
    // The folded chain against the one with norm kernels (same result up
    // to rounding): y2 of one chain each.
    chain(false, false, true, kNormKernels);
    std::vector<float> withKernels = download(y2, d);
    chain(false, false, true, kNormsFolded);
    const double foldErr = relErr(download(y2, d), withKernels);
    std::printf("\nFolded against norm kernels: relative error %.1e\n", foldErr);
    ok &= foldErr < 1e-3;
    cudaFree(xn);
    cudaFree(terms);
    cudaFree(dOnes);
    cudaFree(dZeros);
    cudaFree(dL);
    cudaFree(y1);
    cudaFree(y2);
    cudaFree(att);
  }

  // Decode attention: one query row per head over T cached positions.
  if (only.empty()) {
    std::printf("\nDecode attention, %d heads of %d, fp32 cache:\n\n"
                "| positions | us | cache MB | TB/s |\n|---:|---:|---:|---:|\n",
                heads, head);
    const int maxT = 2048;
    std::vector<float> kv(size_t(heads) * maxT * head);
    for (float &v : kv)
      v = val(rng);
    float *dK = upload(kv), *dV = upload(kv);
    std::vector<float> qh(size_t(heads) * head);
    for (float &v : qh)
      v = val(rng);
    float *dQ = upload(qh), *dNew = upload(qh), *dOut = alloc<float>(qh.size());
    int *counters = alloc<int>(heads);
    CHECK_CUDA(cudaMemset(counters, 0, sizeof(int) * heads));
    for (int T : {128, 192, 256, 512, 1024, 2047}) {
      DecodeAttention a;
      a.q = dQ;
      a.pastK = dK;
      a.pastV = dV;
      a.k = dNew;
      a.v = dNew;
      a.B = 1;
      a.Hq = a.Hk = heads;
      a.Sq = a.Sk = 1;
      a.P = T - 1;
      a.D = a.Dv = head;
      a.scale = 1.0f / std::sqrt(float(head));
      a.out = dOut;
      float *scratch = alloc<float>(decodeAttentionScratchBytes(a) / 4 + 1);
      double us = timeUs(
          [&] { decodeAttention(a, scratch, counters, stream); }, g);
      const double mb = 2.0 * 4 * heads * double(T) * head / 1e6;
      std::printf("| %d | %.1f | %.1f | %.2f |\n", T, us, mb, mb / us);
      cudaFree(scratch);
    }
  }

  // Decode attention over float32 and float16 caches, batches of 1 and 16
  // (one query row per head and sequence), each call on another copy of
  // the caches (at least 512 MB of them in all: none is in the L2).
  if (only == "attention") {
    std::printf("\nDecode attention, %d heads of %d, caches not in the L2:\n\n"
                "| batch | positions | cache | us | cache MB | TB/s | max diff to fp32 |\n"
                "|---:|---:|---|---:|---:|---:|---:|\n",
                heads, head);
    for (int B : {1, 16})
      for (int T : {128, 1024, 2048}) {
        const int64_t rows = int64_t(B) * heads, elems = rows * (T - 1) * head;
        std::vector<float> kh(static_cast<size_t>(elems)),
            vh(static_cast<size_t>(elems));
        for (float &v : kh)
          v = val(rng);
        for (float &v : vh)
          v = val(rng);
        std::vector<__half> k16(kh.size()), v16(vh.size());
        for (size_t i = 0; i < kh.size(); ++i) {
          k16[i] = __float2half_rn(kh[i]);
          v16[i] = __float2half_rn(vh[i]);
        }
        std::vector<float> qh(size_t(rows) * head);
        for (float &v : qh)
          v = val(rng);
        float *dQ = upload(qh), *dNew = upload(qh);
        float *out32 = alloc<float>(qh.size()), *out16 = alloc<float>(qh.size());
        int *counters = alloc<int>(rows);
        CHECK_CUDA(cudaMemset(counters, 0, sizeof(int) * rows));
        std::vector<float> got[2];
        double usOf[2] = {0, 0};
        for (int half = 0; half < 2; ++half) {
          const size_t bytes = (half ? 2 : 4) * 2 * size_t(elems);
          const int copies = int(std::max<size_t>(1, (512u << 20) / bytes + 1));
          std::vector<void *> ks, vs;
          for (int c = 0; c < copies; ++c) {
            if (half) {
              ks.push_back(upload(k16));
              vs.push_back(upload(v16));
            } else {
              ks.push_back(upload(kh));
              vs.push_back(upload(vh));
            }
          }
          DecodeAttention a;
          a.q = dQ;
          a.k = dNew;
          a.v = dNew;
          a.B = B;
          a.Hq = a.Hk = heads;
          a.Sq = a.Sk = 1;
          a.P = T - 1;
          a.D = a.Dv = head;
          a.scale = 1.0f / std::sqrt(float(head));
          a.out = half ? out16 : out32;
          float *scratch = alloc<float>(decodeAttentionScratchBytes(a) / 4 + 1);
          int next = 0;
          auto use = [&](int c) {
            if (half) {
              a.pastKHalf = static_cast<const uint16_t *>(ks[size_t(c)]);
              a.pastVHalf = static_cast<const uint16_t *>(vs[size_t(c)]);
            } else {
              a.pastK = static_cast<const float *>(ks[size_t(c)]);
              a.pastV = static_cast<const float *>(vs[size_t(c)]);
            }
          };
          const double us = timeUs(
              [&] {
                use(next);
                next = (next + 1) % copies;
                CHECK_CUDA(decodeAttention(a, scratch, counters, stream));
              },
              g, 4 * copies);
          usOf[half] = us;
          got[half] = download(a.out, qh.size());
          const double mb = double(bytes) / 1e6;
          std::printf("| %d | %d | %s | %.1f | %.1f | %.2f | |\n", B, T,
                      half ? "fp16" : "fp32", us, mb, mb / us);
          cudaFree(scratch);
          for (void *p : ks)
            cudaFree(p);
          for (void *p : vs)
            cudaFree(p);
        }
        double diff = 0;
        for (size_t i = 0; i < got[0].size(); ++i)
          diff = std::max(diff, double(std::fabs(got[0][i] - got[1][i])));
        std::printf("| %d | %d | fp16 / fp32 | %.2fx faster | | | %.2e |\n", B, T,
                    usOf[0] / usOf[1], diff);
        cudaFree(dQ);
        cudaFree(dNew);
        cudaFree(out32);
        cudaFree(out16);
        cudaFree(counters);
      }
    return 0;
  }

  if (only.empty()) {
    float *t = alloc<float>(d);
    double us = timeUs(
        [&] { tinyKernel<<<(d + 255) / 256, 256, 0, stream>>>(t, d); }, g);
    std::printf("\nA kernel that touches %d floats: %.2f us per graph node\n", d,
                us);
    cudaFree(t);
  }
  if (only.empty() || only == "pick") {
    // The greedy pick over the logits, as a decode step ends (the ids
    // written to pinned host memory by the kernel).
    for (int rows : {1, 4}) {
      float *logits = alloc<float>(size_t(rows) * vocab);
      std::vector<float> lv(size_t(rows) * vocab);
      for (float &v : lv)
        v = val(rng);
      CHECK_CUDA(cudaMemcpy(logits, lv.data(), lv.size() * 4,
                            cudaMemcpyHostToDevice));
      const size_t sb = argmaxScratchBytes(rows, vocab);
      char *scratch = alloc<char>(sb);
      CHECK_CUDA(cudaMemset(scratch, 0, sb));
      int64_t *ids = alloc<int64_t>(rows), *hostIds = nullptr;
      CHECK_CUDA(cudaMallocHost(&hostIds, sizeof(int64_t) * rows));
      double aus = timeUs(
          [&] {
            CHECK_CUDA(argmaxRows(logits, rows, vocab, ids, scratch, hostIds,
                                  stream));
          },
          g);
      CHECK_CUDA(cudaStreamSynchronize(stream));
      bool right = true;
      for (int r = 0; r < rows; ++r) {
        const float *row = lv.data() + size_t(r) * vocab;
        right &= hostIds[r] == std::max_element(row, row + vocab) - row;
      }
      std::printf("Greedy pick (argmaxRows) over %d row%s of %d logits: %.2f "
                  "us%s\n",
                  rows, rows > 1 ? "s" : "", vocab, aus,
                  right ? "" : " (WRONG ids)");
      ok &= right;
      cudaFree(logits);
      cudaFree(scratch);
      cudaFree(ids);
      cudaFreeHost(hostIds);
    }
  }
  if (!ok)
    std::fprintf(stderr, "error: a gemvRows result differs from cuBLAS, or "
                         "the greedy pick from std::max_element\n");
  return ok ? 0 : 1;
}
