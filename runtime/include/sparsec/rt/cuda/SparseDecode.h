//===- SparseDecode.h - neuron-granular sparse decode kernels ---*- C++ -*-===//
//
// Part of the sparsec project.
//
// CUDA kernels for one FFN decode step (a few tokens) over an index set of
// neurons, the GPU side of the exact and predicted sparse modes:
//
//   predictIndex      the low-rank predictor, its threshold and the index
//                     construction in one pass over w2 (see below).
//   buildIndex        idx = sorted positions j with flags[j] != 0, and their
//                     count, on the device (deterministic: cub's stable
//                     select); no host synchronisation.
//   sparseUp          h[t, idx[i]] = act(x[t, :] . Wt[idx[i], :] + b[idx[i]])
//                     Wt is the neuron-major up projection [F, d]: one
//                     contiguous row per selected neuron, read with 16-byte
//                     loads by one warp.
//   sparseDown        y[t, :] += sum_i h[t, idx[i]] * W[idx[i], :]
//                     W is the down projection [F, d] (neuron-major too):
//                     whole 512-byte row segments per warp, fp32 partial sums
//                     reduced in shared memory, one atomicAdd per column and
//                     block. y must hold the bias (or 0) beforehand.
//
// Weights are fp16 (`__half`) or fp32; activations and accumulation are fp32.
// The index count lives on the device; the kernels read it, so a step needs
// no host round trip and can be captured in a CUDA graph. Token counts up to
// kMaxTokens (decode batches) are handled in one pass over the weights.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RT_CUDA_SPARSEDECODE_H
#define SPARSEC_RT_CUDA_SPARSEDECODE_H

#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>

namespace sparsec::rt::cuda {

constexpr int kMaxTokens = 8;

/// Streaming multiprocessors of the current device (cached).
int multiprocessorCount();

/// Temporary device bytes buildIndex needs for `n` flags.
size_t buildIndexTempBytes(int n);

/// idx[0, *count) = the j in [0, n) with flags[j] != 0, in increasing order.
/// `temp` has buildIndexTempBytes(n) bytes.
cudaError_t buildIndex(const uint8_t *flags, int n, int32_t *idx,
                       int32_t *count, void *temp, size_t tempBytes,
                       cudaStream_t stream);

/// Flags of the neurons whose value in any of `tokens` rows of h [tokens, n]
/// is non-zero (exact mode: the union over a decode batch).
cudaError_t nonzeroFlags(const float *h, int tokens, int n, uint8_t *flags,
                         cudaStream_t stream);

/// h[t, idx[i]] for t < tokens, i < *count; other entries of h untouched.
/// x [tokens, d], wt [F, d], bias [F] or null. relu applies max(., 0).
/// `capacity` bounds *count (F); it sizes the grid. W: __half or float.
template <typename W>
cudaError_t sparseUp(const float *x, int tokens, const W *wt, int d,
                     const float *bias, const int32_t *idx,
                     const int32_t *count, int capacity, bool relu, float *h,
                     int ldh, cudaStream_t stream);

/// y[t, :] += sum over i < *count of h[t, idx[i]] * w[idx[i], :];
/// h [tokens, ldh], w [F, d], y [tokens, d]. `splits` > 0 overrides how
/// many blocks share the selected rows of one column tile (0: chosen from
/// the multiprocessor count). `density` (or null): two device counters
/// that get += *count * tokens (the (token, neuron) pairs computed) and
/// capacity * tokens (what a dense kernel computes).
template <typename W>
cudaError_t sparseDown(const float *h, int tokens, int ldh, const W *w, int d,
                       const int32_t *idx, const int32_t *count, int capacity,
                       float *y, cudaStream_t stream, int splits = 0,
                       unsigned long long *density = nullptr);

/// The DejaVu predictor of a decode step with the index construction fused
/// into its epilogue: flags[j] = (any token t) (x[t] . w1) . w2[:, j] +
/// bias[j] > threshold, and idx / *count = the flagged neurons. w1 [d, r],
/// w2 [r, f] (k-major, as the CPU kernels), bias [f] or null. `scratch`
/// is fp32 scratch of tokens * (r + f). With `sorted`, idx is increasing (cub's
/// stable select over the flags, deterministic; `temp` has
/// buildIndexTempBytes(f) bytes); otherwise each warp appends its neurons
/// with one atomic (the order varies, the set does not; temp unused).
template <typename W>
cudaError_t predictIndex(const float *x, int tokens, const W *w1, int d,
                         int r, const W *w2, int f, const float *bias,
                         float threshold, float *scratch, uint8_t *flags,
                         int32_t *idx, int32_t *count, bool sorted, void *temp,
                         size_t tempBytes, cudaStream_t stream);

} // namespace sparsec::rt::cuda

#endif // SPARSEC_RT_CUDA_SPARSEDECODE_H
