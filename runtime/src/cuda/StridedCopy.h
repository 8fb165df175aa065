//===- StridedCopy.h - the index plan of a strided copy --------*- C++ -*-===//
//
// Part of the sparsec project.
//
// The plan of the CUDA runtime's strided copies (transposes, slices): the
// output is contiguous over `shape`, element i reads the input at base plus
// its multi-index times `stride`. Plain C++, so that the unit tests check
// the 16-byte form against the element form without a GPU (internal).
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RUNTIME_CUDA_STRIDEDCOPY_H
#define SPARSEC_RUNTIME_CUDA_STRIDEDCOPY_H

#include "sparsec/rt/Runtime.h"

#include <cstddef>
#include <cstdint>

namespace sparsec::rt::cuda {

struct Strided {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  int64_t base = 0;
};

#if defined(__CUDACC__)
#define SPARSEC_HOST_DEVICE __host__ __device__
#else
#define SPARSEC_HOST_DEVICE
#endif

/// Where output element i of `s` is read from (in elements of the input).
SPARSEC_HOST_DEVICE inline int64_t stridedOffset(const Strided &s, int64_t i) {
  int64_t off = s.base;
  for (int d = s.rank - 1; d >= 0; --d) {
    off += (i % s.shape[d]) * s.stride[d];
    i /= s.shape[d];
  }
  return off;
}

/// `s` over 16-byte pieces of `bytes`-byte elements, where the last dim is
/// contiguous in the input and its rows, every other stride and the base
/// are whole pieces, and both buffers are 16-byte aligned: 16-byte accesses
/// and a piece's share of the index arithmetic (a head transpose of a
/// prompt, [S, H, D] to [H, S, D] in fp32, is 4 elements a piece). False,
/// and `s` unchanged, otherwise.
inline bool widenToPieces(Strided &s, size_t bytes, const void *in,
                          const void *out) {
  const int last = s.rank - 1;
  if (last < 0 || bytes == 0 || 16 % bytes != 0 || s.stride[last] != 1 ||
      reinterpret_cast<uintptr_t>(in) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(out) % 16 != 0)
    return false;
  const int64_t per = int64_t(16 / bytes);
  if (s.shape[last] % per != 0 || s.base % per != 0)
    return false;
  for (int d = 0; d < last; ++d)
    if (s.shape[d] > 1 && s.stride[d] % per != 0)
      return false;
  for (int d = 0; d < last; ++d)
    s.stride[d] = s.shape[d] > 1 ? s.stride[d] / per : 0;
  s.shape[last] /= per;
  s.base /= per;
  return true;
}

/// Division of 32-bit numerators below 2^31 by a fixed divisor as a
/// multiply-high, an add and a shift (the round-up method of Granlund and
/// Montgomery): q = (hi(n * magic) + n) >> shift, with shift the divisor's
/// bits rounded up and magic = 2^32 (2^shift - d) / d + 1. The sum stays
/// below 2^32 since hi(n * magic) <= n < 2^31. Divisors from 1 to 2^31.
struct FastDiv {
  uint32_t d = 1, magic = 1, shift = 0;
};

inline FastDiv makeFastDiv(uint32_t d) {
  FastDiv f;
  f.d = d;
  f.shift = 0;
  while ((uint64_t(1) << f.shift) < d)
    ++f.shift;
  f.magic =
      uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << f.shift) - d)) / d + 1);
  return f;
}

SPARSEC_HOST_DEVICE inline uint32_t divide(const FastDiv &f, uint32_t n) {
#if defined(__CUDA_ARCH__)
  const uint32_t hi = __umulhi(n, f.magic);
#else
  const uint32_t hi = uint32_t((uint64_t(n) * f.magic) >> 32);
#endif
  return (hi + n) >> f.shift;
}

/// A strided copy's plan in 32-bit index arithmetic: the dims of more
/// than one element only, each a FastDiv. For copies of fewer than 2^31
/// elements (or pieces) that read below offset 2^31: a division of 64-bit
/// indices is a call of some 70 instructions, which bounded the head
/// transposes of a prompt.
struct Strided32 {
  int rank = 0;
  FastDiv shape[kMaxRank];
  uint32_t stride[kMaxRank] = {};
  uint32_t base = 0;
};

/// `s` (of n output elements) as a Strided32; false where an index or an
/// offset could reach 2^31.
inline bool narrowIndices(const Strided &s, int64_t n, Strided32 &out) {
  constexpr int64_t kLimit = int64_t(1) << 31;
  if (n <= 0 || n >= kLimit || s.base < 0)
    return false;
  int64_t last = s.base; // the largest offset read
  Strided32 r;
  r.base = uint32_t(s.base);
  for (int d = 0; d < s.rank; ++d) {
    if (s.shape[d] == 1)
      continue;
    if (s.stride[d] < 0)
      return false;
    last += (s.shape[d] - 1) * s.stride[d];
    if (last >= kLimit)
      return false;
    r.shape[r.rank] = makeFastDiv(uint32_t(s.shape[d]));
    r.stride[r.rank] = uint32_t(s.stride[d]);
    ++r.rank;
  }
  out = r;
  return true;
}

/// Where output element i of `s` is read from (stridedOffset's value).
SPARSEC_HOST_DEVICE inline uint32_t stridedOffset(const Strided32 &s,
                                                  uint32_t i) {
  uint32_t off = s.base;
  for (int d = s.rank - 1; d >= 0; --d) {
    const uint32_t q = divide(s.shape[d], i);
    off += (i - q * s.shape[d].d) * s.stride[d];
    i = q;
  }
  return off;
}

} // namespace sparsec::rt::cuda

#endif // SPARSEC_RUNTIME_CUDA_STRIDEDCOPY_H
