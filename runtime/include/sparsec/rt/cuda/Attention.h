//===- Attention.h - attention over many query rows -------------*- C++ -*-===//
//
// Part of the sparsec project.
//
// softmax(q k^T * scale + mask) v for a prompt's query rows (decode steps,
// a few rows, take decodeAttention in DenseDecode.h): one block of 128
// threads a tile of 64 query rows of one head, the keys and values
// streamed through shared memory 64 at a time with an online softmax
// (flash attention). Two forms: on the tensor cores (mma.sync m16n8k16, q,
// k, v and the probabilities rounded to fp16 or bf16, fp32 accumulation)
// for models whose weights are 16-bit, whose GEMMs round their inputs
// alike; in fp32 on the CUDA cores otherwise. A mask's rows are first
// reduced to the span of keys each query tile can see (a kernel of its own),
// so that a causal mask given as data skips the tiles past the diagonal
// as the causal flag does.
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
  /// q and out are [B, Sq, Hq, .] instead (ops::HeadLayout::tokenMajor).
  bool tokenMajor = false;
  /// k and v are [B, T, Hk, .] instead (the new keys of a token-major
  /// attention without a past).
  bool kvTokenMajor = false;
  /// Where not null, k (v) is also written there in fp32 as [B, Hk, T, D]
  /// (Dv) by the kernel that rounds it: a prompt's present, made from
  /// token-major keys on their one read. Tensor-core arithmetic only.
  float *kCopy = nullptr, *vCopy = nullptr;
};

/// The arithmetic of a prompt attention: fp32 on the CUDA cores, or the
/// tensor cores with fp16 or bf16 operands.
enum class PromptMath { f32, f16, bf16 };

/// Bytes of device scratch prefillAttention needs in arithmetic `math`:
/// the key spans of a mask's query tiles and, on the tensor cores, the
/// keys and values rounded to 16 bits (0 for fp32 without a mask).
size_t prefillAttentionScratchBytes(const PrefillAttention &a, PromptMath math);

/// Whether prefillAttention handles these head sizes (D, Dv <= 128).
bool prefillAttentionSupported(int64_t D, int64_t Dv);
/// `scratch`: prefillAttentionScratchBytes(a, math) bytes of device memory.
cudaError_t prefillAttention(const PrefillAttention &a, PromptMath math,
                             void *scratch, cudaStream_t stream);

} // namespace sparsec::rt::cuda

#endif // SPARSEC_RT_CUDA_ATTENTION_H
