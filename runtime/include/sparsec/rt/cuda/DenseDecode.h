//===- DenseDecode.h - dense decode kernels ---------------------*- C++ -*-===//
//
// Part of the sparsec project.
//
// CUDA kernels for the dense part of a decode step (a few tokens), where
// every byte of a weight is read once and the step is bound by memory
// latency and bandwidth:
//
//   gemvRows         y[t, n] = act(x[t, :] . wt[n, :] + bias[n]) (+ res[t, n])
//                    over a neuron-major weight wt [N, K]: each block owns 2
//                    (one token) or 4 whole rows and its 256 threads stream
//                    them with 16-byte loads (every load of a row in flight
//                    at once), reduce in registers, shuffles and shared
//                    memory, and apply the epilogue. No split-K, no atomics,
//                    one launch. From 3 tokens, fp16 or bf16 weights: tensor
//                    cores (16 rows a block, the warps splitting K, x in
//                    parts of the weights' type: two fp16, three bf16),
//                    each x chunk read once for 16 rows.
//   decodeAttention  softmax(q k^T * scale + mask) v for a few query rows
//                    over a past (the cache) and the new keys, split over
//                    the key axis (flash-decoding): each warp reads 4 keys
//                    and their values a pass straight into registers (lane
//                    l holds elements l, l + 32, ...; every load of the
//                    pass in flight), keeps an online softmax over its
//                    passes, the block's 4 warps combine in shared memory,
//                    and the last block of a row merges the row's blocks
//                    (at most 32: longer contexts take more passes). The
//                    new rows of the present outputs are written by the
//                    same launch.
//
// Activations, accumulation and the cache are fp32; weights fp16 or fp32.
// Both are graph-capturable (the merge counters reset themselves).
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RT_CUDA_DENSEDECODE_H
#define SPARSEC_RT_CUDA_DENSEDECODE_H

#include "sparsec/rt/Ops.h"

#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

namespace sparsec::rt::cuda {

/// Largest token count of gemvRows (one pass over the weight for all).
constexpr int kGemvRowsTokens = 8;

/// y[t, n] = act(x[t, :] . wt[n, :] + bias[n]) + residual[t, n] for
/// t < tokens <= kGemvRowsTokens. x [tokens, K] fp32, wt [N, K] (W: __half
/// or float), bias [N] or null, residual [tokens, N] or null (may be y).
/// 16-byte loads when wt, x and their rows are 16-byte aligned; element
/// loads otherwise. `early`: a programmatic dependent launch (Hopper) that
/// starts streaming the weights while the previous kernel on the stream
/// finishes, reading x only once that kernel has completed.
template <typename W>
cudaError_t gemvRows(const float *x, int tokens, const W *wt, int K, int N,
                     const float *bias, ops::Activation act,
                     const float *residual, float *y, cudaStream_t stream,
                     bool early = false);

/// The norm gemvRowsNormOut applies to its output row: out = (y - mean) /
/// sqrt(var + epsilon) * scale + bias (layer norm), or y / sqrt(mean(y^2)
/// + epsilon) * scale (rms; bias may be null either way).
struct GemvNormOut {
  const float *scale = nullptr; // [N]
  const float *bias = nullptr;  // [N] or null
  float epsilon = 1e-5f;
  bool rms = false;
  float *out = nullptr; // [N]
  /// One zero-initialised counter a call site (left zero after the call).
  unsigned *counter = nullptr;
};

/// Widest row gemvRowsNormOut normalises.
constexpr int kGemvNormOutWidth = 4096;

/// gemvRows at one token whose last block also normalises the output row y
/// into norm.out (the norm that follows a projection with the residual,
/// without a kernel of its own). An experiment measured by
/// sparsec-bench-dense-decode and not used by the compiler: correct, but an
/// OPT-6.7B layer took 129 us with it against 112 with the norm kernels on
/// an H200 (docs/GPU.md). One token, 16-byte aligned x, wt rows and
/// norm.scale, N <= kGemvNormOutWidth, normal launches
/// (cudaErrorNotSupported otherwise).
template <typename W>
cudaError_t gemvRowsNormOut(const float *x, const W *wt, int K, int N,
                            const float *bias, ops::Activation act,
                            const float *residual, float *y,
                            const GemvNormOut &norm, cudaStream_t stream);

/// Most weights one gemvRowsGroup launch computes.
constexpr int kGemvGroupMax = 4;

/// A layer or RMS norm over x's rows that gemvRowsGroup applies on the way
/// (folded from the norm that feeds the group): the linears read
/// n(x) = (x - mean) / sqrt(var + epsilon) * scale + bias, or
/// x / sqrt(mean(x^2) + epsilon) * scale (rms). Nothing is normalised in
/// memory: each block sums x - x[0] and its square over the row while it
/// streams its weights, computes W (scale * (x - x[0])) in the same pass
/// and corrects its outputs at the end with the folding terms,
///   y = rstd * (W (scale * (x - x[0])) - (mean - x[0]) * (W scale))
///       + W bias,
/// where W scale and W bias are per weight and fixed (gemvNormTerms).
struct GemvNorm {
  const float *scale = nullptr; // [K]
  const float *bias = nullptr;  // [K] or null
  float epsilon = 1e-5f;
  bool rms = false;
  /// Per weight g of the group: W_g scale [N_g] and W_g bias [N_g] (null
  /// without a bias), from gemvNormTerms.
  const float *wScale[kGemvGroupMax] = {};
  const float *wBias[kGemvGroupMax] = {};
};

/// The folding terms of `norm` for one weight wt [N, K]: terms [N] = wt
/// scale and, with a bias, terms[N .. 2N) = wt bias (a gemvRows over each).
template <typename W>
cudaError_t gemvNormTerms(const W *wt, int K, int N, const float *scale,
                          const float *bias, float *terms, cudaStream_t stream);

/// gemvRows for `count` <= kGemvGroupMax weights over the same x in one
/// launch (sibling projections, such as q, k and v): weight g is wt[g]
/// [N[g], K] with bias[g] (bias null, or entries null: none), residual[g]
/// (likewise) and output y[g] [tokens, N[g]]; one activation for all.
/// `norm` (or null): the linears read x normalised (GemvNorm), which needs
/// norm->scale and every wScale[g] (cudaErrorInvalidValue otherwise).
template <typename W>
cudaError_t gemvRowsGroup(const float *x, int tokens, int K, int count,
                          const W *const *wt, const int *N,
                          const float *const *bias, ops::Activation act,
                          const float *const *residual, float *const *y,
                          cudaStream_t stream, bool early = false,
                          const GemvNorm *norm = nullptr);

/// An embedding lookup, or the sum of two (token and position tables):
/// out[i][c] = table[ids[i]][c] (+ table2[ids2[i]][c] where table2 is not
/// null) for i < n, c < D, as float32. Both tables fp16 (`half`) or both
/// fp32, [V, D] and [V2, D]; the ids (int64, on the device) must already be
/// checked to lie in [-V, V) (and [-V2, V2)): negative ids count from the
/// table's end, as ONNX Gather's indices do. `early` as for gemvRows.
cudaError_t embeddingRows(const void *table, int64_t V, const int64_t *ids,
                          const void *table2, int64_t V2, const int64_t *ids2,
                          bool half, int64_t n, int64_t D, float *out,
                          cudaStream_t stream, bool early = false);

/// A layer or RMS norm over `rows` rows of `width` floats (x -> y; bias
/// may be null): one block a row, the row held in registers up to 8192
/// wide. `early` as for gemvRows.
cudaError_t normRows(const float *x, int64_t rows, int64_t width,
                     const float *scale, const float *bias, float epsilon,
                     bool rms, float *y, cudaStream_t stream,
                     bool early = false);

/// The index of the largest value of each of `rows` rows of `width` floats
/// (out: rows int64), as std::max_element finds it: the first of equal
/// maxima, a NaN never the largest unless it is the row's first element
/// (then 0). The greedy pick of `generate`, on the device, so a decode step
/// brings back one id a row instead of its logits. A row is shared by
/// blocks of 2048 elements (an OPT row of 50272 by 25, each with all its
/// loads in flight), whose last to finish merges the others' bests: rows
/// wider than 2048 need `scratch`, argmaxScratchBytes(rows, width) of
/// zeroed device memory. A call leaves it zeroed again where the next call
/// of the same rows and width reads it (its counters reset themselves;
/// such calls on one stream may share it); a call of another shape needs
/// it zeroed again. `hostOut`, if not null, is pinned host memory that
/// receives the ids too, written by the kernel itself. `early`: a
/// programmatic dependent launch (see gemvRows), as the last node of a
/// decode step's graph.
cudaError_t argmaxRows(const float *x, int64_t rows, int64_t width,
                       int64_t *out, void *scratch, int64_t *hostOut,
                       cudaStream_t stream, bool early = false);
size_t argmaxScratchBytes(int64_t rows, int64_t width);

/// Whether this device and build can use the `early` launches (Hopper or
/// later, kernels compiled for sm_90 or later).
bool earlyLaunchSupported();

/// One attention call of a decode step. Keys 0..P-1 come from the past,
/// P..P+Sk-1 from the new keys (row-major [B, Hk, rows, D]; values with Dv).
struct DecodeAttention {
  const float *q = nullptr;                        // [B, Hq, Sq, D]
  const float *pastK = nullptr, *pastV = nullptr;  // [B, Hk, P, .] or null
  /// Or a float16 past (the bits; a runtime's 16-bit KV cache): set these
  /// instead of pastK / pastV.
  const uint16_t *pastKHalf = nullptr, *pastVHalf = nullptr;
  const float *k = nullptr, *v = nullptr;          // [B, Hk, Sk, .]
  const float *maskF = nullptr;    // additive, over [B, Hq, Sq, T] by mStr
  const uint8_t *maskB = nullptr;  // or boolean (0 = masked out)
  int64_t mStr[4] = {};
  int64_t B = 0, Hq = 0, Hk = 0, Sq = 0, P = 0, Sk = 0, D = 0, Dv = 0;
  float scale = 1.0f;
  bool causal = false;             // query i sees keys up to P + i (Sq = Sk)
  float *out = nullptr;            // [B, Hq, Sq, Dv]
  /// [B, Hk, P + Sk, .]: rows P.. receive the new keys/values (or null).
  float *presentK = nullptr, *presentV = nullptr;
  /// The past keys and values are complete before any kernel launched
  /// with this one can start (a runtime KV cache, written between steps):
  /// an early launch requests its first pass's past rows before it waits
  /// for the kernel before, so they stream while that kernel finishes.
  bool pastReady = false;
  /// q, k, v and out are [B, S, H, .] (ops::HeadLayout::tokenMajor); the
  /// past and present stay [B, Hk, P, .].
  bool tokenMajor = false;
};

/// Whether decodeAttention handles these head sizes (D, Dv <= 128).
bool decodeAttentionSupported(int64_t D, int64_t Dv);
/// Rows (B * Hq * Sq) decodeAttention needs merge counters for.
int64_t decodeAttentionRows(const DecodeAttention &a);
/// fp32 scratch bytes for the per-chunk partial results.
size_t decodeAttentionScratchBytes(const DecodeAttention &a);
/// `counters`: decodeAttentionRows(a) ints, zero (and left zero).
/// `early`: a programmatic dependent launch (its launch overlaps the
/// kernel before, whose results it waits for).
cudaError_t decodeAttention(const DecodeAttention &a, float *scratch,
                            int *counters, cudaStream_t stream,
                            bool early = false);

} // namespace sparsec::rt::cuda

#endif // SPARSEC_RT_CUDA_DENSEDECODE_H
