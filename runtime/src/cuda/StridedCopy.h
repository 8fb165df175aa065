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

} // namespace sparsec::rt::cuda

#endif // SPARSEC_RUNTIME_CUDA_STRIDEDCOPY_H
