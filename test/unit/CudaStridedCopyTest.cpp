//===- CudaStridedCopyTest.cpp - the CUDA strided copies' index plan ------===//
//
// Part of the sparsec project.
//
// The CUDA runtime's strided copies (runtime/src/cuda/StridedCopy.h) move
// 16-byte pieces where they can: the pieces' plan, run on the host, reads
// what the element plan reads, for transposes and slices of random shapes;
// and the cases it must refuse stay element copies. No GPU needed.
//
//===----------------------------------------------------------------------===//

#include "cuda/StridedCopy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

using namespace sparsec::rt::cuda;

namespace {

struct Piece {
  unsigned char b[16];
};

/// The copy of `s` over elements of `bytes` bytes, as stridedKernel does.
std::vector<unsigned char> copy(const Strided &s, const unsigned char *in,
                                size_t bytes, int64_t n) {
  std::vector<unsigned char> out(size_t(n) * bytes);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(&out[size_t(i) * bytes], in + stridedOffset(s, i) * bytes,
                bytes);
  return out;
}

/// The plan of a transpose of `shape` by `perm` (as Ops.cu's transpose
/// builds it), or of a slice of its last dim from `start` when `sliced`.
Strided plan(int rank, const int64_t *shape, const int *perm) {
  int64_t own[8];
  own[rank - 1] = 1;
  for (int i = rank - 2; i >= 0; --i)
    own[i] = own[i + 1] * shape[i + 1];
  Strided s;
  s.rank = rank;
  for (int i = 0; i < rank; ++i) {
    s.shape[i] = shape[perm[i]];
    s.stride[i] = own[perm[i]];
  }
  return s;
}

} // namespace

TEST(CudaStridedCopy, PiecesReadWhatElementsRead) {
  std::mt19937 rng(7);
  // 16-byte aligned buffers for widenToPieces' pointer check.
  alignas(16) static unsigned char in[1 << 22];
  for (unsigned char &c : in)
    c = static_cast<unsigned char>(rng());
  int widened = 0;
  for (int t = 0; t < 3000; ++t) {
    const size_t bytes = size_t(1) << (rng() % 4); // 1, 2, 4, 8
    const int rank = 1 + int(rng() % 4);
    int64_t shape[8];
    int perm[8];
    for (int i = 0; i < rank; ++i) {
      shape[i] =
          rng() % 2 ? 1 + int64_t(rng() % 7) : 8 * (1 + int64_t(rng() % 3));
      perm[i] = i;
    }
    std::shuffle(perm, perm + rank, rng);
    Strided s = plan(rank, shape, perm);
    const int64_t total =
        std::accumulate(shape, shape + rank, int64_t(1), std::multiplies<>());
    // A slice: the last dim shortened, the base moved along it.
    if (rng() % 3 == 0 && s.stride[rank - 1] == 1 && s.shape[rank - 1] > 8) {
      s.base = 8 * int64_t(rng() % 2);
      s.shape[rank - 1] -= 8;
    }
    int64_t n = 1;
    for (int i = 0; i < rank; ++i)
      n *= s.shape[i];
    ASSERT_LE(total * int64_t(bytes), int64_t(sizeof in));
    const std::vector<unsigned char> want = copy(s, in, bytes, n);
    Strided w = s;
    if (!widenToPieces(w, bytes, in, in + 16))
      continue;
    ++widened;
    const int64_t per = int64_t(16 / bytes);
    ASSERT_EQ(n % per, 0);
    EXPECT_EQ(copy(w, in, 16, n / per), want)
        << "case " << t << ": rank " << rank << ", " << bytes
        << "-byte elements";
  }
  // Enough of the cases take pieces for the comparison to mean something.
  EXPECT_GT(widened, 300);
}

TEST(CudaStridedCopy, RefusesWhatPiecesCannotCopy) {
  alignas(16) static unsigned char buf[64];
  const int64_t shape[] = {4, 8};
  const int swap[] = {1, 0}, same[] = {0, 1};
  // A transpose that moves the last dim reads it with a stride.
  Strided t = plan(2, shape, swap);
  EXPECT_FALSE(widenToPieces(t, 4, buf, buf));
  // Rows of 8 fp32 elements are 2 pieces; an unaligned buffer is refused,
  // and so is a base or a row length that is not whole pieces.
  Strided s = plan(2, shape, same);
  EXPECT_FALSE(widenToPieces(s, 4, buf + 4, buf));
  EXPECT_FALSE(widenToPieces(s, 4, buf, buf + 8));
  Strided based = s;
  based.base = 2;
  EXPECT_FALSE(widenToPieces(based, 4, buf, buf));
  Strided narrow = s;
  narrow.shape[1] = 6;
  EXPECT_FALSE(widenToPieces(narrow, 4, buf, buf));
  // Elements wider than a piece or of no size.
  EXPECT_FALSE(widenToPieces(s, 32, buf, buf));
  EXPECT_FALSE(widenToPieces(s, 0, buf, buf));
  // A refusal leaves the plan as it was; an acceptance divides it.
  EXPECT_EQ(based.base, 2);
  EXPECT_EQ(narrow.shape[1], 6);
  ASSERT_TRUE(widenToPieces(s, 4, buf, buf));
  EXPECT_EQ(s.shape[1], 2);
  EXPECT_EQ(s.stride[0], 2);
  EXPECT_EQ(s.stride[1], 1);
}

TEST(CudaStridedCopy, FastDivisionIsExact) {
  std::mt19937 rng(11);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 300; ++d)
    divisors.push_back(d);
  for (int k = 1; k <= 31; ++k) { // powers of two and their neighbours
    const uint32_t p = uint32_t(1) << k;
    for (uint32_t d : {p - 1, p, p + 1})
      if (d <= (uint32_t(1) << 31)) // divisors up to 2^31
        divisors.push_back(d);
  }
  for (int t = 0; t < 200; ++t)
    divisors.push_back(1 + uint32_t(rng() % 0x7fffffffu));
  const uint32_t kTop = 0x7fffffffu; // numerators below 2^31
  for (uint32_t d : divisors) {
    const FastDiv f = makeFastDiv(d);
    std::vector<uint32_t> ns = {0, 1, kTop, kTop - 1, d - 1, d};
    // Around multiples of d, where a wrong quotient shows first.
    for (int t = 0; t < 60; ++t) {
      const uint32_t q = uint32_t(rng()) % (kTop / d + 1);
      const uint64_t m = uint64_t(q) * d;
      for (int64_t e = -1; e <= 1; ++e)
        if (int64_t(m) + e >= 0 && int64_t(m) + e <= kTop)
          ns.push_back(uint32_t(int64_t(m) + e));
    }
    for (int t = 0; t < 40; ++t)
      ns.push_back(uint32_t(rng()) & kTop);
    for (uint32_t n : ns) {
      if (n > kTop)
        continue;
      ASSERT_EQ(divide(f, n), n / d)
          << n << " / " << d << " magic " << f.magic << " shift " << f.shift;
    }
  }
}

TEST(CudaStridedCopy, NarrowIndicesReadWhatWideIndicesRead) {
  std::mt19937 rng(13);
  int narrowed = 0;
  for (int t = 0; t < 2000; ++t) {
    const int rank = 1 + int(rng() % 6);
    int64_t shape[8];
    int perm[8];
    int64_t total = 1;
    for (int i = 0; i < rank; ++i) {
      // Unit dims (dropped by the narrow plan), small and large ones; up
      // to about 2^36 elements, so that some cases pass 2^31.
      const int kind = int(rng() % 4);
      shape[i] = kind == 0                          ? 1
                 : kind == 1 || total > (1LL << 24) ? 1 + int64_t(rng() % 9)
                                                    : 1 + int64_t(rng() % 3000);
      total *= shape[i];
      perm[i] = i;
    }
    std::shuffle(perm, perm + rank, rng);
    Strided s = plan(rank, shape, perm);
    if (rng() % 4 == 0)
      s.base = int64_t(rng() % 1000);
    int64_t n = 1;
    for (int i = 0; i < rank; ++i)
      n *= s.shape[i];
    Strided32 s32;
    int64_t last = s.base;
    for (int i = 0; i < rank; ++i)
      last += (s.shape[i] - 1) * s.stride[i];
    const bool fits = n < (int64_t(1) << 31) && last < (int64_t(1) << 31);
    ASSERT_EQ(narrowIndices(s, n, s32), fits) << "case " << t;
    if (!fits)
      continue;
    ++narrowed;
    // The first and last elements, and a sample between.
    std::vector<int64_t> is = {0, n - 1};
    for (int k = 0; k < 500; ++k)
      is.push_back(int64_t(rng() % uint64_t(n)));
    for (int64_t i : is)
      ASSERT_EQ(int64_t(stridedOffset(s32, uint32_t(i))), stridedOffset(s, i))
          << "case " << t << ", element " << i;
  }
  EXPECT_GT(narrowed, 1000);
  // A copy of 2^31 elements, or one that reads past offset 2^31 - 1,
  // keeps 64-bit indices.
  Strided big;
  big.rank = 1;
  big.shape[0] = int64_t(1) << 31;
  big.stride[0] = 1;
  Strided32 unused;
  EXPECT_FALSE(narrowIndices(big, big.shape[0], unused));
  big.shape[0] = 1 << 20;
  big.stride[0] = 1 << 12;
  EXPECT_FALSE(narrowIndices(big, big.shape[0], unused));
  big.stride[0] = (1 << 11) - 1;
  EXPECT_TRUE(narrowIndices(big, big.shape[0], unused));
}
