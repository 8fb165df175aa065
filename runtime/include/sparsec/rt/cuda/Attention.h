//===- Attention.h - attention over many query rows -------------*- C++ -*-===//
//
// Part of the sparsec project.
//
// softmax(q k^T * scale + mask) v for a prompt's query rows (decode steps,
// a few rows, take decodeAttention in DenseDecode.h): one block of 128
// threads a tile of 64 query rows of one head, the keys and values
// streamed through shared memory 64 at a time with an online softmax
// (flash attention), in fp32 on the CUDA cores. Each thread holds a 4 x 8
// tile of the scores and 4 rows x Dv / 8 columns of the output in
// registers. Causal tiles past a query tile's last key are skipped.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RT_CUDA_ATTENTION_H
#define SPARSEC_RT_CUDA_ATTENTION_H

#include <cuda_runtime.h>

#include <cstdint>

namespace sparsec::rt::cuda {

/// One attention call: keys and values [B, Hk, T, D] and [B, Hk, T, Dv]
/// (the present: past rows, then the new ones), the queries the last Sq
/// positions.
struct PrefillAttention {
  const float *q = nullptr;             // [B, Hq, Sq, D]
  const float *k = nullptr, *v = nullptr;
  const float *maskF = nullptr;         // additive, over [B, Hq, Sq, T] by mStr
  const uint8_t *maskB = nullptr;       // or boolean (0 = masked out)
  int64_t mStr[4] = {};
  int64_t B = 0, Hq = 0, Hk = 0, Sq = 0, T = 0, D = 0, Dv = 0;
  float scale = 1.0f;
  bool causal = false; // query i sees keys up to i + T - Sq
  float *out = nullptr; // [B, Hq, Sq, Dv]; a row that sees no key is 0
};

/// Whether prefillAttention handles these head sizes (D, Dv <= 128).
bool prefillAttentionSupported(int64_t D, int64_t Dv);
cudaError_t prefillAttention(const PrefillAttention &a, cudaStream_t stream);

} // namespace sparsec::rt::cuda

#endif // SPARSEC_RT_CUDA_ATTENTION_H
