//===- SparseDecode.h - neuron-granular sparse decode kernels ---*- C++ -*-===//
//
// Part of the sparsec project.
//
// CUDA kernels for one FFN decode step (a few tokens) over an index set of
// neurons, the GPU side of the exact and predicted sparse modes:
//
//   predictIndex      the low-rank predictor: two kernels (the hidden
//                     vector, whose partial sums per block of w1's rows the
//                     last block of each column tile adds up; then the
//                     logits, the threshold and the index set of each
//                     segment of neurons).
//   indexFromActivations
//                     the index set of the non-zero neurons of h (exact
//                     mode), one kernel.
//   sparseUp          h[t, j] = act(x[t, :] . Wt[j, :] + b[j]) for j in the
//                     set. Wt is the neuron-major up projection [F, d]: one
//                     contiguous row per selected neuron, read with 16-byte
//                     loads by one warp; over a list with 3-8 tokens of
//                     fp16 or bf16 rows, 16 rows a block on tensor cores
//                     instead.
//   sparseDown        y[t, :] += sum over j in the set of h[t, j] * W[j, :]
//                     W is the down projection [F, d] (neuron-major too):
//                     whole 512-byte row segments per warp, fp32 partial sums
//                     reduced in shared memory, one atomicAdd per column and
//                     block. y must hold its base (bias, residual) beforehand.
//
// Index sets are segmented (IndexView): no kernel compacts a global list, so
// building one takes one kernel, needs no zeroed counter and lists the
// neurons in increasing order (deterministic). The kernels that read a set
// turn its segment counts into positions in shared memory. Kernels that run
// before sparseDown can write its base (RowsInit), so a step needs no
// memset or fill kernel.
//
// Weights are fp16 (`__half`), bf16 (`__nv_bfloat16`) or fp32; activations
// and accumulation are fp32.
// Everything stays on the device, so a step needs no host round trip and can
// be captured in a CUDA graph. Token counts up to kMaxTokens (decode
// batches) are handled in one pass over the weights.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RT_CUDA_SPARSEDECODE_H
#define SPARSEC_RT_CUDA_SPARSEDECODE_H

#include <cstddef>
#include <cstdint>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace sparsec::rt::cuda {

constexpr int kMaxTokens = 8;
/// Neurons per segment of an index set.
constexpr int kSegment = 64;

inline int indexSegments(int neurons) {
  return (neurons + kSegment - 1) / kSegment;
}

/// An index set of `neurons` neurons on the device, cut into segments of
/// kSegment consecutive neurons: segment s lists its selected neurons in
/// increasing order at idx[s * kSegment, s * kSegment + cnt[s]). idx has
/// indexSegments(neurons) * kSegment entries, cnt indexSegments(neurons).
struct IndexView {
  int32_t *idx = nullptr;
  int32_t *cnt = nullptr;
  int neurons = 0;
  /// The same set as one list, where a kernel made it (predictIndex, or
  /// sparseUp for the sparseDown after it): list[0, *count). When both are
  /// set, sparseUp and sparseDown read these instead of the segments. The
  /// list must have room for `neurons` entries: the kernels read entries
  /// past the count (never using them) together with the count.
  int32_t *list = nullptr;
  int32_t *count = nullptr;
  /// The set (its list and count) was complete when the kernels that read
  /// it started, not written by the kernel just before them: an early
  /// launch of the listed sparseUp (1-2 tokens, 16-bit rows of 2048-8192)
  /// and sparseDown (CUDA cores) then reads the set and requests its first
  /// rows before its wait, while the kernel before it still runs. Such as a
  /// look-ahead predictor on a branch of the step's graph, joined in front
  /// of them. Mind the join: captured into an early launch, an event join
  /// from another stream's kernel becomes a programmatic edge, which lets
  /// the kernel start before that branch has finished; the join must go
  /// through a kernel that waits before it lets its dependents launch (as
  /// sparsec-bench-lookahead's gate does), or be a full dependency.
  bool ready = false;
};

/// y[t, c] = bias[c] + residual[t, c] (either may be null: 0) for t <
/// tokens, c < n: the base a later sparseDown adds to, written by a kernel
/// that runs before it. y == nullptr: nothing is written.
struct RowsInit {
  float *y = nullptr;
  const float *bias = nullptr;
  const float *residual = nullptr;
  int tokens = 0;
  int n = 0;
};

/// Every kernel here waits (griddepcontrol.wait) before it reads what an
/// earlier kernel wrote, so each call's `early` may make its kernels
/// programmatic dependent launches (see DenseDecode.h); the predictor's
/// select kernel requests its weights before that wait.

/// Streaming multiprocessors of the current device (cached).
int multiprocessorCount();

/// The index set of the neurons j with flags[j] != 0 (one kernel).
cudaError_t indexFromFlags(const uint8_t *flags, IndexView ix,
                           cudaStream_t stream);

/// The index set of the neurons whose value in any of `tokens` rows of h
/// [tokens, ix.neurons] is non-zero (exact mode: the union over a decode
/// batch), and `init`; one kernel.
cudaError_t indexFromActivations(const float *h, int tokens, IndexView ix,
                                 RowsInit init, cudaStream_t stream,
                                 bool early = false);

/// The index set of a gated MLP's gate h [tokens, ix.neurons]: the neurons
/// above 0 (`positive`) or not 0 in any of the rows, and each row's own
/// selection as bytes in mask [tokens, ix.neurons]; one kernel.
cudaError_t indexFromGate(const float *h, int tokens, bool positive,
                          uint8_t *mask, IndexView ix, cudaStream_t stream,
                          bool early = false);

/// h[t, j] for t < tokens and j in ix; other entries of h untouched. x
/// [tokens, d], wt [F, d], bias [F] or null. relu applies max(., 0). Also
/// writes `init` (for the sparseDown that follows) and, where `list` and
/// `count` are given (F and 1 ints), the set as one list (IndexView::list).
/// `tokenMask` (or null): [tokens, F] bytes; h[t, j] is 0 where it is 0
/// (each token keeps its own predicted neurons within the batch's union).
/// W: __half, __nv_bfloat16 or float.
template <typename W>
cudaError_t sparseUp(const float *x, int tokens, const W *wt, int d,
                     const float *bias, IndexView ix, bool relu, float *h,
                     int ldh, RowsInit init, cudaStream_t stream,
                     int32_t *list = nullptr, int32_t *count = nullptr,
                     bool early = false, const uint8_t *tokenMask = nullptr);

/// The CUDA-core kernels sparseUp and predictUp run for 1-2 tokens of fp16
/// rows whose length d is 2048, 4096, 6144 or 8192 (sparseUp: over a list,
/// IndexView::list): by default (kAuto) the split kernels, where a block's
/// warps share each row and keep their slice of x in registers;
/// kWarpPerRow forces the kernels that take a whole row a warp over x
/// staged in shared memory, as every other case runs. `blocksPerSM` > 0
/// caps the split sparseUp's blocks an SM (0: as many as fit). Set by
/// SPARSEC_CUDA_UP (docs/GPU.md), benchmarks and tests; process-wide, not
/// thread-safe.
enum class UpKernel { kAuto, kWarpPerRow };
void setUpKernel(UpKernel kernel, int blocksPerSM = 0);

/// y[t, :] += sum over j in ix of h[t, j] * w[j, :]; h [tokens, ldh], w [F,
/// d], y [tokens, d]. `splits` > 0 overrides how many blocks share the
/// selected rows of one column tile (0: chosen from the multiprocessor
/// count). `density` (or null): two device counters that get += |ix| *
/// tokens (the (token, neuron) pairs computed) and F * tokens (what a dense
/// kernel computes). 3-8 tokens over a list with 16-bit rows (16-byte
/// aligned, y too) run on tensor cores (the sums' order differs from the
/// CUDA-core kernel's; both add in a varying order through atomics).
template <typename W>
cudaError_t sparseDown(const float *h, int tokens, int ldh, const W *w, int d,
                       IndexView ix, float *y, cudaStream_t stream,
                       int splits = 0, unsigned long long *density = nullptr,
                       bool early = false);

/// fp32 elements of predictIndex's scratch. Its last elements are
/// counters that must be zero before the first call (predictIndex leaves
/// them at zero): zero the scratch when it is allocated. They stay at the
/// same place for any token count up to kMaxTokens, so one scratch serves
/// calls of different token counts.
size_t predictScratchFloats(int tokens, int d, int r);

/// The DejaVu predictor of a decode step with the index construction fused
/// into its epilogue: neuron j is selected when, for any token t, (x[t] .
/// w1) . w2[:, j] + bias[j] > threshold. w1 [d, r], w2 [r, f] (k-major, as
/// the CPU kernels), bias [f] or null, ix.neurons == f. `mask` (or null):
/// `maskRows` rows of f bytes: row t < tokens token t's own selection, any
/// further row the union over the tokens (the set computed). `scratch`
/// has predictScratchFloats(tokens, d, r) floats.
/// Two kernels, no memset; the segments are in increasing order. With
/// ix.list and ix.count (F and 1 ints), the set is also written as one
/// list: each segment's neurons in increasing order, the segments in the
/// order their blocks finish (the set is the same every time, its order
/// may differ).
template <typename W>
cudaError_t predictIndex(const float *x, int tokens, const W *w1, int d,
                         int r, const W *w2, int f, const float *bias,
                         float threshold, float *scratch, IndexView ix,
                         uint8_t *mask, int maskRows, cudaStream_t stream,
                         bool early = false);

/// The layer or RMS norm in front of a predicted FFN, which predictUp can
/// apply itself: y[t] = (x[t] - mean) / sqrt(var + epsilon) * scale + bias
/// over rows of d (RMS: no mean, no bias), as normRows computes it.
struct FfnNorm {
  const float *x = nullptr;     ///< [tokens, d], the norm's input
  const float *scale = nullptr; ///< [d]
  const float *bias = nullptr;  ///< [d] or null
  float epsilon = 0.0f;
  bool rms = false;
};

/// predictIndex followed by sparseUp over its set, in two kernels instead
/// of three: the hidden vector, then one block per segment that selects
/// the segment's neurons (writing ix, its list and the mask rows exactly as
/// predictIndex) and computes their up projection right away, a warp a
/// row: h[t, j] = act(x[t] . wt[j] + upBias[j]) where token t selected j,
/// 0 where only other tokens of the batch did; h elsewhere is not written.
/// Also writes `init` (the base of the sparseDown that follows). x is the
/// input of both the predictor and the up projection. Errors as the two
/// calls it replaces; x [tokens, d] must fit in shared memory with the
/// hidden vector. With `norm` (where predictUpNormFits), x is not an input
/// but where the call writes the norm of norm->x: the hidden-vector kernel
/// normalises x itself (every block all of it, with normRows' arithmetic:
/// the same bits) and writes it for the select kernel, so normRows and
/// predictUp become two kernels instead of three.
template <typename W>
cudaError_t predictUp(const float *x, int tokens, const W *w1, int d, int r,
                      const W *w2, int f, const float *predBias,
                      float threshold, float *scratch, IndexView ix,
                      uint8_t *mask, int maskRows, const W *wt,
                      const float *upBias, bool relu, float *h, int ldh,
                      RowsInit init, cudaStream_t stream, bool early = false,
                      const FfnNorm *norm = nullptr);
/// Whether predictUp takes `tokens` tokens of d inputs with a rank-r
/// predictor (x and the hidden vector in shared memory).
bool predictUpFits(int tokens, int d, int r);
/// Whether predictUp takes a norm for these shapes: 1-2 tokens, d up to
/// 4096 (rows held in registers as normRows does), ranks up to 128 (the
/// one-pass hidden kernel), and predictUpFits.
bool predictUpNormFits(int tokens, int d, int r);


} // namespace sparsec::rt::cuda

#endif // SPARSEC_RT_CUDA_SPARSEDECODE_H
