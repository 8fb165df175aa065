//===- Linear.cpp - linear, matmul and the f32 GEMM kernels -----*- C++ -*-===//
//
// Part of the sparsec project.
//
// y = act(x . W + b) and numpy matmul on top of one f32 GEMM (W may also be
// float16: converted to float32 as it is loaded, F16C on x86):
//
//  * M <= 32 (decode, small batches): W is streamed once, unpacked. Each
//    thread owns a contiguous block of columns. K is walked in blocks of 8
//    rows of W (eight sequential streams); per block, 16-64 wide chunks of
//    y are accumulated in registers for groups of up to 6 rows of x, and y
//    itself stays in cache (a private, padded copy) between blocks.
//  * larger M: Goto/BLIS-style blocking. Per task (a tile of rows x columns
//    of C), K is cut into panels of KC; the W panel is packed into strips of
//    NR columns, and a register-blocked micro-kernel (6 x 16 floats in 12
//    ymm accumulators with AVX2/FMA) reads up to MR rows of x where they
//    are and computes each MR x NR tile of C.
//
// The AVX2/FMA and AVX-512 kernels (streaming: 64-wide chunks of y in zmm
// registers, masked tails; blocked: a 12 x 32 micro-kernel in 24 zmm
// accumulators) are compiled with target attributes, the library itself
// for baseline x86-64, and chosen at run time (see kernelIsa below:
// SPARSEC_ISA=scalar|avx2|avx512 or the setKernelIsa test hook can force a
// lower one); the portable kernels use the same drivers. A full tile of C
// starts from the bias; the activation (and a partial tile's bias) is
// applied after its last K panel, while it is in L1.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace sparsec::rt::ops {
namespace detail {

//===----------------------------------------------------------------------===//
// CPU features
//===----------------------------------------------------------------------===//

// Kernel ISA selection. The best ISA the CPU supports is used unless
//  * the environment variable SPARSEC_ISA=scalar|avx2|avx512 is set (read
//    once, at the first GEMM/dot/axpy call; other values are ignored), or
//  * the test hook setKernelIsa(isa) asks for one (overrides SPARSEC_ISA;
//    setKernelIsa(kIsaBest) restores the default).
// An ISA the CPU lacks falls back to the best available lower one.

namespace {
std::atomic<int> requestedIsa{kIsaBest};

int bestIsa() {
  static const int best = [] {
#if SPARSEC_RT_X86
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") &&
                      __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c");
    if (avx2 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq"))
      return kIsaAvx512;
    if (avx2)
      return kIsaAvx2;
#endif
    return kIsaScalar;
  }();
  return best;
}

int envIsa() {
  static const int env = [] {
    const char *v = std::getenv("SPARSEC_ISA");
    if (!v)
      return kIsaBest;
    if (!std::strcmp(v, "scalar"))
      return kIsaScalar;
    if (!std::strcmp(v, "avx2"))
      return kIsaAvx2;
    if (!std::strcmp(v, "avx512"))
      return kIsaAvx512;
    return kIsaBest;
  }();
  return env;
}
} // namespace

int kernelIsa() {
  int isa = requestedIsa.load(std::memory_order_relaxed);
  if (isa <= kIsaBest || isa > kIsaAvx512)
    isa = envIsa();
  if (isa == kIsaBest)
    isa = kIsaAvx512;
  return std::min(isa, bestIsa());
}

bool useAvx2() { return kernelIsa() >= kIsaAvx2; }

void setKernelIsa(int isa) {
  requestedIsa.store(isa, std::memory_order_relaxed);
}

void setForceScalarKernels(bool force) {
  setKernelIsa(force ? kIsaScalar : kIsaBest);
}

namespace {

thread_local Scratch packAScratch, packBScratch;

// Weights are float32, float16 or bfloat16 (W = Half or BFloat; converted
// to float32 as they are loaded by toFloat / load8 of Common.h, fp32
// accumulation).
template <typename W> const W *weightsOf(const GemmArgs &g);
template <> const float *weightsOf<float>(const GemmArgs &g) { return g.B; }
template <> const Half *weightsOf<Half>(const GemmArgs &g) { return g.Bh; }
template <> const BFloat *weightsOf<BFloat>(const GemmArgs &g) { return g.Bb; }

#if SPARSEC_RT_X86
SPARSEC_RT_AVX512 inline __m512 load16(const float *p) {
  return _mm512_loadu_ps(p);
}
SPARSEC_RT_AVX512 inline __m512 load16(const Half *p) {
  // (maskz with all lanes: the unmasked intrinsic trips GCC 12's
  // uninitialised-variable warning)
  return _mm512_maskz_cvtph_ps(
      0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
}
SPARSEC_RT_AVX512 inline __m512 load16(const float *p, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p);
}
SPARSEC_RT_AVX512 inline __m512 load16(const Half *p, __mmask16 m) {
  return _mm512_maskz_cvtph_ps(0xffff, _mm256_maskz_loadu_epi16(m, p));
}
SPARSEC_RT_AVX512 inline __m512 widenBFloat16(__m256i bits) {
  // (maskz forms, as load16 above)
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
      0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, bits), 16));
}
SPARSEC_RT_AVX512 inline __m512 load16(const BFloat *p) {
  return widenBFloat16(
      _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
}
SPARSEC_RT_AVX512 inline __m512 load16(const BFloat *p, __mmask16 m) {
  return widenBFloat16(_mm256_maskz_loadu_epi16(m, p));
}
/// dst[0:n] = float(src[0:n]) for W = Half (F16C) or BFloat (a shift a
/// lane), eight at a time through load8.
template <typename W>
SPARSEC_RT_AVX2 void widenRowAvx2(const W *src, float *dst, int64_t n) {
  const int64_t n8 = n / 8 * 8;
  for (int64_t j = 0; j < n8; j += 8)
    _mm256_storeu_ps(dst + j, load8(src + j));
  for (int64_t j = n8; j < n; ++j)
    dst[j] = toFloat(src[j]);
}
/// dst[0:n] = half(src[0:n]) with F16C (round to nearest even).
SPARSEC_RT_AVX2 void narrowRowAvx2(const float *src, Half *dst, int64_t n) {
  const int64_t n8 = n / 8 * 8;
  for (int64_t j = 0; j < n8; j += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + j),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + j),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (int64_t j = n8; j < n; ++j)
    dst[j] = Half{floatToHalf(src[j])};
}
#endif

} // namespace

void widenRow(const float *src, float *dst, int64_t n) {
  std::memcpy(dst, src, size_t(n) * sizeof(float));
}
namespace {
template <typename W> void widenRowTyped(const W *src, float *dst, int64_t n) {
#if SPARSEC_RT_X86
  if (kernelIsa() >= kIsaAvx2)
    return widenRowAvx2(src, dst, n);
#endif
  for (int64_t j = 0; j < n; ++j)
    dst[j] = toFloat(src[j]);
}
} // namespace
void widenRow(const Half *src, float *dst, int64_t n) {
  widenRowTyped(src, dst, n);
}
void widenRow(const BFloat *src, float *dst, int64_t n) {
  widenRowTyped(src, dst, n);
}
void narrowRow(const float *src, Half *dst, int64_t n) {
#if SPARSEC_RT_X86
  if (kernelIsa() >= kIsaAvx2)
    return narrowRowAvx2(src, dst, n);
#endif
  for (int64_t j = 0; j < n; ++j)
    dst[j] = Half{floatToHalf(src[j])};
}

namespace {

//===----------------------------------------------------------------------===//
// Portable kernels
//===----------------------------------------------------------------------===//

struct ScalarKernel {
  static constexpr int MR = 4, NR = 8;
  static constexpr int64_t KC = 256, MC = 64, NC = 2048;

  /// c[ROWS, NR] (row stride ldc) = act((accumulate ? c : bias + rowBias)
  /// + a . bp), A's ROWS rows read in place (row stride lda); see
  /// tileDirect.
  template <int ROWS>
  static void tileRows(int64_t kc, const float *a, int64_t lda, const float *bp,
                       float *c, int64_t ldc, bool accumulate,
                       const float *bias, const float *rowBias,
                       Activation act) {
    float acc[ROWS][NR];
    for (int i = 0; i < ROWS; ++i)
      for (int j = 0; j < NR; ++j)
        acc[i][j] = (bias ? bias[j] : 0.0f) + (rowBias ? rowBias[i] : 0.0f);
    for (int64_t k = 0; k < kc; ++k) {
      for (int i = 0; i < ROWS; ++i) {
        float ak = a[i * lda + k];
        for (int j = 0; j < NR; ++j)
          acc[i][j] += ak * bp[j];
      }
      bp += NR;
    }
    for (int i = 0; i < ROWS; ++i)
      for (int j = 0; j < NR; ++j) {
        float v = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
        if (act == Activation::relu)
          v = reluOf(v);
        else if (act == Activation::relu6)
          v = relu6Of(v);
        c[i * ldc + j] = v;
      }
  }
};

/// The streaming kernels behind the small-M path compute one block:
///   y[0:rows, n0:n1] = (k0 > 0 ? y : 0) + x[0:rows, k0:k0+kb] . B[k0:k0+kb,
///   n0:n1]
/// where x and B point at column/row 0.
template <typename W>
void streamBlockScalar(int64_t rows, int64_t k0, int64_t kb, const float *x,
                       int64_t ldx, const W *B, int64_t ldb, float *y,
                       int64_t ldy, int64_t n0, int64_t n1) {
  for (int64_t r = 0; r < rows; ++r) {
    float *yr = y + r * ldy;
    if (k0 == 0)
      for (int64_t j = n0; j < n1; ++j)
        yr[j] = 0.0f;
    for (int64_t k = k0; k < k0 + kb; ++k) {
      const float a = x[r * ldx + k];
      const W *br = B + k * ldb;
      for (int64_t j = n0; j < n1; ++j)
        yr[j] += a * toFloat(br[j]);
    }
  }
}

//===----------------------------------------------------------------------===//
// AVX2/FMA kernels
//===----------------------------------------------------------------------===//

#if SPARSEC_RT_X86
struct Avx2Kernel {
  static constexpr int MR = 6, NR = 16;
  // Tuned on Zen 4 (32 KB L1, 1 MB L2): a 24 KB W strip in L1, a 144 KB x
  // block in L2, a 3 MB W panel in L3.
  static constexpr int64_t KC = 384, MC = 96, NC = 2048;

  /// tile over ROWS <= MR rows of A read where they are (row stride lda).
  template <int ROWS>
  SPARSEC_RT_AVX2 static void tileRows(int64_t kc, const float *a, int64_t lda,
                                       const float *bp, float *c, int64_t ldc,
                                       bool accumulate, const float *bias,
                                       const float *rowBias, Activation act) {
    const __m256 i0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    const __m256 i1 = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
    __m256 acc[ROWS][2];
#pragma GCC unroll 6
    for (int i = 0; i < ROWS; ++i) {
      const __m256 r =
          rowBias ? _mm256_set1_ps(rowBias[i]) : _mm256_setzero_ps();
      acc[i][0] = _mm256_add_ps(i0, r);
      acc[i][1] = _mm256_add_ps(i1, r);
    }
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; ++k) {
      const __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
#pragma GCC unroll 6
      for (int i = 0; i < ROWS; ++i) {
        const __m256 av = _mm256_broadcast_ss(a + i * lda + k);
        acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
      }
      bp += NR;
    }
#pragma GCC unroll 6
    for (int i = 0; i < ROWS; ++i) {
      float *row = c + i * ldc;
      __m256 v0 = acc[i][0], v1 = acc[i][1];
      if (accumulate) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(row));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(row + 8));
      }
      if (activatesInRegisters(act)) {
        // max(0, v): a NaN (the second operand) stays NaN.
        v0 = _mm256_max_ps(_mm256_setzero_ps(), v0);
        v1 = _mm256_max_ps(_mm256_setzero_ps(), v1);
      }
      if (act == Activation::relu6) {
        v0 = _mm256_min_ps(_mm256_set1_ps(6.0f), v0);
        v1 = _mm256_min_ps(_mm256_set1_ps(6.0f), v1);
      }
      _mm256_storeu_ps(row, v0);
      _mm256_storeu_ps(row + 8, v1);
    }
  }
};

/// streamBlockScalar for ROWS rows and (n1 - n0) % CH == 0: each CH-wide
/// chunk of y is accumulated in registers over the kb rows of W.
template <int ROWS, int CH, typename W>
SPARSEC_RT_AVX2 void streamChunks(int64_t k0, int64_t kb, const float *xp,
                                  const W *B, int64_t ldb, float *y,
                                  int64_t ldy, int64_t n0, int64_t n1) {
  constexpr int V = CH / 8;
  for (int64_t n = n0; n < n1; n += CH) {
    __m256 acc[ROWS][V];
    for (int r = 0; r < ROWS; ++r)
      for (int j = 0; j < V; ++j)
        acc[r][j] =
            k0 ? _mm256_loadu_ps(y + r * ldy + n + 8 * j) : _mm256_setzero_ps();
    const W *b = B + k0 * ldb + n;
    for (int64_t k = k0; k < k0 + kb; ++k, b += ldb) {
      __m256 w[V];
      for (int j = 0; j < V; ++j)
        w[j] = load8(b + 8 * j);
      for (int r = 0; r < ROWS; ++r) {
        __m256 xv = _mm256_broadcast_ss(xp + k * ROWS + r);
        for (int j = 0; j < V; ++j)
          acc[r][j] = _mm256_fmadd_ps(xv, w[j], acc[r][j]);
      }
    }
    for (int r = 0; r < ROWS; ++r)
      for (int j = 0; j < V; ++j)
        _mm256_storeu_ps(y + r * ldy + n + 8 * j, acc[r][j]);
  }
}

template <int ROWS, int CH, typename W>
void streamBlockAvx2(int64_t k0, int64_t kb, const float *x, int64_t ldx,
                     const float *xp, const W *B, int64_t ldb, float *y,
                     int64_t ldy, int64_t n0, int64_t n1) {
  const int64_t nMain = n0 + (n1 - n0) / CH * CH;
  const int64_t n8 = nMain + (n1 - nMain) / 8 * 8;
  if (nMain > n0)
    streamChunks<ROWS, CH, W>(k0, kb, xp, B, ldb, y, ldy, n0, nMain);
  if (n8 > nMain)
    streamChunks<ROWS, 8, W>(k0, kb, xp, B, ldb, y, ldy, nMain, n8);
  if (n1 > n8)
    streamBlockScalar(ROWS, k0, kb, x, ldx, B, ldb, y, ldy, n8, n1);
}

/// Register budget: ROWS * CH / 8 accumulators + CH / 8 W vectors <= 15.
template <typename W>
void streamBlockAvx2Rows(int64_t rows, int64_t k0, int64_t kb, const float *x,
                         int64_t ldx, const float *xp, const W *B,
                         int64_t ldb, float *y, int64_t ldy, int64_t n0,
                         int64_t n1) {
  switch (rows) {
  case 1:
    return streamBlockAvx2<1, 64, W>(k0, kb, x, ldx, xp, B, ldb, y, ldy, n0, n1);
  case 2:
    return streamBlockAvx2<2, 32, W>(k0, kb, x, ldx, xp, B, ldb, y, ldy, n0, n1);
  case 3:
    return streamBlockAvx2<3, 24, W>(k0, kb, x, ldx, xp, B, ldb, y, ldy, n0, n1);
  case 4:
    return streamBlockAvx2<4, 24, W>(k0, kb, x, ldx, xp, B, ldb, y, ldy, n0, n1);
  case 5:
    return streamBlockAvx2<5, 16, W>(k0, kb, x, ldx, xp, B, ldb, y, ldy, n0, n1);
  default:
    return streamBlockAvx2<6, 16, W>(k0, kb, x, ldx, xp, B, ldb, y, ldy, n0, n1);
  }
}

/// exp(x) for x in [-87, 0] (8 lanes): x = n ln2 + r, |r| <= ln2 / 2,
/// e^r by its Taylor polynomial to r^7 (truncation under 2e-9 relative),
/// times 2^n through the exponent bits.
SPARSEC_RT_AVX2 inline __m256 expAvx2(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

SPARSEC_RT_AVX2 double expShiftSumAvx2(float *s, int64_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m), lo = _mm256_set1_ps(-87.0f);
  __m256d sum0 = _mm256_setzero_pd(), sum1 = _mm256_setzero_pd();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s + j), mv);
    // Lanes below -87 are 0; NaN lanes stay NaN (max_ps returns its second
    // operand when either is NaN).
    const __m256 keep = _mm256_cmp_ps(x, lo, _CMP_NLT_UQ);
    const __m256 e = _mm256_and_ps(expAvx2(_mm256_max_ps(lo, x)), keep);
    _mm256_storeu_ps(s + j, e);
    sum0 = _mm256_add_pd(sum0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    sum1 = _mm256_add_pd(sum1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double part[4];
  _mm256_store_pd(part, _mm256_add_pd(sum0, sum1));
  double sum = (part[0] + part[1]) + (part[2] + part[3]);
  for (; j < n; ++j) {
    const float x = s[j] - m;
    s[j] = x < -87.0f ? 0.0f : std::exp(x);
    sum += double(s[j]);
  }
  return sum;
}

SPARSEC_RT_AVX2 float scaleAddMaxAvx2(float *s, int64_t n, float scale,
                                      const float *add) {
  const __m256 sv = _mm256_set1_ps(scale);
  __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + j), sv);
    if (add)
      v = _mm256_add_ps(v, _mm256_loadu_ps(add + j));
    _mm256_storeu_ps(s + j, v);
    mv = _mm256_max_ps(v, mv); // a NaN v keeps mv, as std::max(m, v) does
  }
  alignas(32) float part[8];
  _mm256_store_ps(part, mv);
  float m = part[0];
  for (int i = 1; i < 8; ++i)
    m = std::max(m, part[i]);
  for (; j < n; ++j) {
    const float v = s[j] * scale + (add ? add[j] : 0.0f);
    s[j] = v;
    m = std::max(m, v);
  }
  return m;
}

SPARSEC_RT_AVX2 float dotAvx2(const float *a, const float *b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8),
                         s1);
  }
  if (i + 8 <= n) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    i += 8;
  }
  s0 = _mm256_add_ps(s0, s1);
  __m128 h =
      _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float s = _mm_cvtss_f32(h);
  for (; i < n; ++i)
    s += a[i] * b[i];
  return s;
}

SPARSEC_RT_AVX2 void axpyAvx2(float alpha, const float *x, float *y,
                              int64_t n) {
  __m256 av = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i),
                                            _mm256_loadu_ps(y + i)));
  for (; i < n; ++i)
    y[i] += alpha * x[i];
}

//===----------------------------------------------------------------------===//
// AVX-512 kernels
//===----------------------------------------------------------------------===//

struct Avx512Kernel {
  static constexpr int MR = 12, NR = 32;
  // A 32 KB W strip (L1/L2), a 144 KB x block in L2, a 2 MB W panel in L3.
  // On the development machine (AMD EPYC with AVX-512) this measures on
  // par with the AVX2 kernel; KC 192-384 and MC 96-192 were within noise.
  static constexpr int64_t KC = 256, MC = 144, NC = 2048;

  /// tile over ROWS <= MR rows of A read where they are (row stride lda).
  template <int ROWS>
  SPARSEC_RT_AVX512 static void
  tileRows(int64_t kc, const float *a, int64_t lda, const float *bp, float *c,
           int64_t ldc, bool accumulate, const float *bias,
           const float *rowBias, Activation act) {
    const __m512 i0 = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    const __m512 i1 = bias ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();
    __m512 acc[ROWS][2];
#pragma GCC unroll 12
    for (int i = 0; i < ROWS; ++i) {
      const __m512 r =
          rowBias ? _mm512_set1_ps(rowBias[i]) : _mm512_setzero_ps();
      acc[i][0] = _mm512_add_ps(i0, r);
      acc[i][1] = _mm512_add_ps(i1, r);
    }
#pragma GCC unroll 12
    for (int i = 0; i < ROWS; ++i) {
      _mm_prefetch(reinterpret_cast<const char *>(c + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char *>(c + i * ldc + 31),
                   _MM_HINT_T0);
    }
#pragma GCC unroll 2
    for (int64_t k = 0; k < kc; ++k) {
      const __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
#pragma GCC unroll 12
      for (int i = 0; i < ROWS; ++i) {
        const __m512 av = _mm512_set1_ps(a[i * lda + k]);
        acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
      }
      bp += NR;
    }
#pragma GCC unroll 12
    for (int i = 0; i < ROWS; ++i) {
      float *row = c + i * ldc;
      __m512 v0 = acc[i][0], v1 = acc[i][1];
      if (accumulate) {
        v0 = _mm512_add_ps(v0, _mm512_loadu_ps(row));
        v1 = _mm512_add_ps(v1, _mm512_loadu_ps(row + 16));
      }
      v0 = activateInRegisters(act, v0);
      v1 = activateInRegisters(act, v1);
      _mm512_storeu_ps(row, v0);
      _mm512_storeu_ps(row + 16, v1);
    }
  }
};

/// streamChunks with zmm registers: CH-wide chunks (a multiple of 16) over
/// [n0, n1), (n1 - n0) % CH == 0; with MASKED, one 16-wide chunk at n0 of
/// which the lanes in `mask` are used.
template <int ROWS, int CH, bool MASKED, typename W>
SPARSEC_RT_AVX512 void streamChunks512(int64_t k0, int64_t kb, const float *xp,
                                       const W *B, int64_t ldb, float *y,
                                       int64_t ldy, int64_t n0, int64_t n1,
                                       __mmask16 mask) {
  constexpr int V = CH / 16;
  for (int64_t n = n0; n < n1; n += CH) {
    __m512 acc[ROWS][V];
    for (int r = 0; r < ROWS; ++r)
      for (int j = 0; j < V; ++j) {
        const float *yr = y + r * ldy + n + 16 * j;
        acc[r][j] = !k0       ? _mm512_setzero_ps()
                    : MASKED ? _mm512_maskz_loadu_ps(mask, yr)
                             : _mm512_loadu_ps(yr);
      }
    const W *b = B + k0 * ldb + n;
    for (int64_t k = k0; k < k0 + kb; ++k, b += ldb) {
      __m512 w[V];
      for (int j = 0; j < V; ++j)
        w[j] = MASKED ? load16(b + 16 * j, mask) : load16(b + 16 * j);
      for (int r = 0; r < ROWS; ++r) {
        const __m512 xv = _mm512_set1_ps(xp[k * ROWS + r]);
        for (int j = 0; j < V; ++j)
          acc[r][j] = _mm512_fmadd_ps(xv, w[j], acc[r][j]);
      }
    }
    for (int r = 0; r < ROWS; ++r)
      for (int j = 0; j < V; ++j) {
        float *yr = y + r * ldy + n + 16 * j;
        if (MASKED)
          _mm512_mask_storeu_ps(yr, mask, acc[r][j]);
        else
          _mm512_storeu_ps(yr, acc[r][j]);
      }
  }
}

template <int ROWS, int CH, typename W>
void streamBlockAvx512(int64_t k0, int64_t kb, const float *xp, const W *B,
                       int64_t ldb, float *y, int64_t ldy, int64_t n0,
                       int64_t n1) {
  const int64_t nMain = n0 + (n1 - n0) / CH * CH;
  const int64_t n16 = nMain + (n1 - nMain) / 16 * 16;
  if (nMain > n0)
    streamChunks512<ROWS, CH, false, W>(k0, kb, xp, B, ldb, y, ldy, n0, nMain,
                                     0xffff);
  if (n16 > nMain)
    streamChunks512<ROWS, 16, false, W>(k0, kb, xp, B, ldb, y, ldy, nMain, n16,
                                     0xffff);
  if (n1 > n16)
    streamChunks512<ROWS, 16, true, W>(k0, kb, xp, B, ldb, y, ldy, n16, n16 + 16,
                                    __mmask16((1u << (n1 - n16)) - 1));
}

/// Register budget (32 zmm): ROWS * CH / 16 accumulators + CH / 16 W
/// vectors + 1 broadcast.
template <typename W>
void streamBlockAvx512Rows(int64_t rows, int64_t k0, int64_t kb,
                           const float *xp, const W *B, int64_t ldb,
                           float *y, int64_t ldy, int64_t n0, int64_t n1) {
  switch (rows) {
  case 1:
    return streamBlockAvx512<1, 64, W>(k0, kb, xp, B, ldb, y, ldy, n0, n1);
  case 2:
    return streamBlockAvx512<2, 64, W>(k0, kb, xp, B, ldb, y, ldy, n0, n1);
  case 3:
    return streamBlockAvx512<3, 64, W>(k0, kb, xp, B, ldb, y, ldy, n0, n1);
  case 4:
    return streamBlockAvx512<4, 64, W>(k0, kb, xp, B, ldb, y, ldy, n0, n1);
  case 5:
    return streamBlockAvx512<5, 64, W>(k0, kb, xp, B, ldb, y, ldy, n0, n1);
  default:
    return streamBlockAvx512<6, 64, W>(k0, kb, xp, B, ldb, y, ldy, n0, n1);
  }
}
#endif // SPARSEC_RT_X86

/// c[rows, NR] = act((accumulate ? c : bias + rowBias) + A[rows, kc] . bp)
/// through Kern::tileRows<rows>: A read in place (row stride lda: no
/// packing, no padding rows), 1 <= rows <= R = Kern::MR; `bias` (NR values,
/// added to every row) and `rowBias` (one value a row) may be null; `act`
/// is none, relu or relu6 (the ones applied in registers).
template <typename Kern, int R = Kern::MR>
void tileDirect(int rows, int64_t kc, const float *a, int64_t lda,
                const float *bp, float *c, int64_t ldc, bool accumulate,
                const float *bias, const float *rowBias,
                Activation act = Activation::none) {
  if constexpr (R > 1)
    if (rows < R)
      return tileDirect<Kern, R - 1>(rows, kc, a, lda, bp, c, ldc, accumulate,
                                     bias, rowBias, act);
  Kern::template tileRows<R>(kc, a, lda, bp, c, ldc, accumulate, bias, rowBias,
                             act);
}

//===----------------------------------------------------------------------===//
// Blocked GEMM driver
//===----------------------------------------------------------------------===//

/// Biases + activation over a tile of C: rows [m, m + rows) and columns
/// [n, n + cols), the tile's first element at `c`. `biasesDone`: both
/// biases are in already.
void epilogue(const GemmArgs &g, float *c, int64_t m, int64_t rows, int64_t n,
              int64_t cols, bool biasesDone = false) {
  for (int64_t i = 0; i < rows; ++i) {
    float *row = c + i * g.ldc;
    if (biasesDone) {
      applyActivation(g.act, row, cols);
      continue;
    }
    if (g.bias) {
      const float *b = g.bias + n;
      for (int64_t j = 0; j < cols; ++j)
        row[j] += b[j];
    }
    if (g.rowBias) {
      const float b = g.rowBias[m + i];
      for (int64_t j = 0; j < cols; ++j)
        row[j] += b;
    }
    applyActivation(g.act, row, cols);
  }
}

/// B[k0, j0] of g's weights: the start of a panel's part (transB: [N, K]).
template <typename W>
const W *bAt(const GemmArgs &g, const W *B, int64_t k0, int64_t j0) {
  return g.transB ? B + j0 * g.ldb + k0 : B + k0 * g.ldb + j0;
}

/// Packs B[0:kc, 0:nc] (row stride ldb) into strips of NR columns:
/// bp[s][k][NR], zero padded. `trans`: b is [nc, kc] (element (k, j) at
/// j * ldb + k), read a strip's rows KG elements at a time.
template <int NR, typename W>
void packB(const W *b, int64_t ldb, int64_t kc, int64_t nc, float *bp,
           bool trans = false) {
  const int64_t strips = (nc + NR - 1) / NR;
  if (trans) {
    constexpr int64_t KG = 16;
    for (int64_t s = 0; s < strips; ++s) {
      const int64_t n = s * NR, w = std::min<int64_t>(NR, nc - n);
      float *dst = bp + s * kc * NR;
      for (int64_t k0 = 0; k0 < kc; k0 += KG) {
        const int64_t k1 = std::min(kc, k0 + KG);
        float seg[KG]; // a row's KG elements widened at once (F16C)
        for (int64_t j = 0; j < w; ++j) {
          const W *row = b + (n + j) * ldb + k0;
          if constexpr (std::is_same_v<W, float>)
            std::memcpy(seg, row, sizeof(float) * size_t(k1 - k0));
          else
            widenRow(row, seg, k1 - k0);
          for (int64_t k = k0; k < k1; ++k)
            dst[k * NR + j] = seg[k - k0];
        }
        for (int64_t j = w; j < NR; ++j)
          for (int64_t k = k0; k < k1; ++k)
            dst[k * NR + j] = 0.0f;
      }
    }
    return;
  }
  // Rows in small groups so that both the rows read and the strips written
  // stay within the TLB and the prefetchers' reach.
  constexpr int64_t KG = 16;
  for (int64_t k0 = 0; k0 < kc; k0 += KG) {
    const int64_t k1 = std::min(kc, k0 + KG);
    for (int64_t s = 0; s < strips; ++s) {
      const int64_t n = s * NR, w = std::min<int64_t>(NR, nc - n);
      float *dst = bp + s * kc * NR;
      if (w == NR) {
        // A float row is a fixed-size copy the compiler inlines (a call to
        // memcpy per 128-byte row cost 8 % of a prefill).
        for (int64_t k = k0; k < k1; ++k) {
          if constexpr (std::is_same_v<W, float>)
            std::memcpy(dst + k * NR, b + k * ldb + n, NR * sizeof(float));
          else
            widenRow(b + k * ldb + n, dst + k * NR, NR);
        }
      } else {
        for (int64_t k = k0; k < k1; ++k) {
          for (int64_t j = 0; j < w; ++j)
            dst[k * NR + j] = toFloat(b[k * ldb + n + j]);
          for (int64_t j = w; j < NR; ++j)
            dst[k * NR + j] = 0.0f;
        }
      }
    }
  }
}

/// N rounded up to whole strips of NR columns.
template <typename Kern> int64_t paddedColumns(int64_t n) {
  return (n + Kern::NR - 1) / Kern::NR * Kern::NR;
}

/// The whole of B packed for Kern: panel pc (KC rows; the last may be
/// shorter) starts at pc * Npad floats, Npad = N rounded up to NR, and
/// holds B[pc:pc+kc, :] as packB writes it, strip s (columns s*NR..) at
/// s * kc * NR. gemmTile reads any column range of it.
template <typename Kern, typename W>
PackCache::Panels packWhole(ThreadPool *pool, const GemmArgs &g) {
  constexpr int NR = Kern::NR;
  const int64_t KC = Kern::KC, nPad = paddedColumns<Kern>(g.N);
  // The kernels load B with aligned loads.
  const size_t bytes = (size_t(g.K * nPad) * sizeof(float) + 63) / 64 * 64;
  PackCache::Panels data(static_cast<float *>(std::aligned_alloc(64, bytes)));
  if (!data)
    return nullptr;
  const W *B = weightsOf<W>(g);
  const int64_t panels = (g.K + KC - 1) / KC;
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t pc = p * KC, kc = std::min(KC, g.K - pc);
      packB<NR, W>(bAt(g, B, pc, 0), g.ldb, kc, g.N, data.get() + pc * nPad,
                   g.transB);
    }
  };
  if (pool && panels > 1)
    pool->parallelFor(panels, 1, run);
  else
    run(0, panels);
  return data;
}

/// B packed for Kern from g's cache (packed now if it is not there yet and
/// fits the cache's limit), or null.
template <typename Kern, typename W>
const float *cachedPack(ThreadPool *pool, const GemmArgs &g) {
  PackCache *cache = g.packCache;
  if (!cache)
    return nullptr;
  const void *key = weightsOf<W>(g);
  std::lock_guard<std::mutex> lock(cache->mutex);
  auto id =
      std::make_tuple(key, g.K, g.N, g.transB ? -g.ldb : g.ldb, int(Kern::KC),
                      int(Kern::NR) * (std::is_same_v<W, float> ? 1 : -1));
  auto it = cache->entries.find(id);
  if (it != cache->entries.end())
    return it->second.get();
  const size_t bytes = size_t(g.K * paddedColumns<Kern>(g.N)) * sizeof(float);
  if (cache->bytes + bytes > cache->limit)
    return nullptr;
  PackCache::Panels data = packWhole<Kern, W>(pool, g);
  if (!data)
    return nullptr;
  cache->bytes += bytes;
  return (cache->entries[id] = std::move(data)).get();
}

/// C[m0:m1, n0:n1] of the product, over all of K; `packed`: all of B as
/// packWhole lays it out, or null to pack panels here.
template <typename Kern, typename W>
void gemmTile(const GemmArgs &g, int64_t m0, int64_t m1, int64_t n0,
              int64_t n1, const float *packed) {
  const W *B = weightsOf<W>(g);
  constexpr int MR = Kern::MR, NR = Kern::NR;
  const int64_t KC = Kern::KC, MC = Kern::MC, NC = Kern::NC;
  const int64_t kcMax = std::min(KC, g.K);
  float *bp = packed
                  ? nullptr
                  : packBScratch.get(size_t(
                        kcMax * ((std::min(NC, n1 - n0) + NR - 1) / NR * NR)));
  if (!packed && !bp) { // out of memory for the packed panels: unblocked
    for (int64_t i = m0; i < m1; ++i) {
      float *c = g.C + i * g.ldc;
      for (int64_t j = n0; j < n1; ++j)
        c[j] = 0.0f;
      for (int64_t k = 0; k < g.K; ++k) {
        const float a = g.A[i * g.lda + k];
        for (int64_t j = n0; j < n1; ++j)
          c[j] += a * toFloat(*bAt(g, B, k, j));
      }
      epilogue(g, c + n0, i, 1, n0, n1 - n0);
    }
    return;
  }
  alignas(64) float edge[MR * NR];
  for (int64_t jc = n0; jc < n1; jc += NC) {
    const int64_t nc = std::min(NC, n1 - jc);
    for (int64_t pc = 0; pc < g.K; pc += KC) {
      const int64_t kc = std::min(KC, g.K - pc);
      const bool first = pc == 0, last = pc + kc >= g.K;
      // The panel's strips: packed once for all calls, or now.
      const float *panel = bp;
      if (packed)
        panel = packed + pc * paddedColumns<Kern>(g.N) + (jc / NR) * kc * NR;
      else
        packB<NR, W>(bAt(g, B, pc, jc), g.ldb, kc, nc, bp, g.transB);
      for (int64_t ic = m0; ic < m1; ic += MC) {
        const int64_t mc = std::min(MC, m1 - ic);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const float *bs = panel + (jr / NR) * kc * NR;
          const int64_t cols = std::min<int64_t>(NR, nc - jr);
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t rows = std::min<int64_t>(MR, mc - ir);
            float *c = g.C + (ic + ir) * g.ldc + jc + jr;
            // A's rows where they are (tileDirect): a partial strip of rows
            // computes only those; a partial strip of columns goes through
            // `edge`. A full strip starts from the biases (first panel)
            // instead of adding them afterwards.
            const float *as = g.A + (ic + ir) * g.lda + pc;
            // The last panel of a full strip applies a ReLU or ReLU6 in
            // registers too.
            const bool biasIn = cols == NR;
            const bool actIn = biasIn && last && activatesInRegisters(g.act);
            if (cols == NR) {
              tileDirect<Kern>(int(rows), kc, as, g.lda, bs, c, g.ldc, !first,
                               first && g.bias ? g.bias + jc + jr : nullptr,
                               first && g.rowBias ? g.rowBias + ic + ir
                                                  : nullptr,
                               actIn ? g.act : Activation::none);
            } else {
              tileDirect<Kern>(int(rows), kc, as, g.lda, bs, edge, NR, false,
                               nullptr, nullptr);
              for (int64_t i = 0; i < rows; ++i)
                for (int64_t j = 0; j < cols; ++j)
                  c[i * g.ldc + j] = first ? edge[i * NR + j]
                                           : c[i * g.ldc + j] + edge[i * NR + j];
            }
            if (last && !actIn)
              epilogue(g, c, ic + ir, rows, jc + jr, cols, biasIn);
          }
        }
      }
    }
  }
}

template <typename Kern, typename W>
void gemmBlocked(ThreadPool *pool, const GemmArgs &g) {
  constexpr int MR = Kern::MR, NR = Kern::NR;
  const int threads = pool ? pool->size() : 1;
  const int64_t mStrips = (g.M + MR - 1) / MR, nStrips = (g.N + NR - 1) / NR;
  // Tasks form a tm x tn grid of C tiles; prefer splitting N (no duplicated
  // packing of W) while each part keeps at least 4 strips.
  int64_t tn = std::max<int64_t>(1, std::min<int64_t>(threads, nStrips / 4));
  int64_t tm = std::max<int64_t>(
      1, std::min<int64_t>((threads + tn - 1) / tn, mStrips / 2));
  const int64_t tasks = tm * tn;
  const float *packed = g.Bpacked ? g.Bpacked : cachedPack<Kern, W>(pool, g);
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t im = t / tn, in = t % tn;
      int64_t m0 = std::min(g.M, mStrips * im / tm * MR);
      int64_t m1 = std::min(g.M, mStrips * (im + 1) / tm * MR);
      int64_t n0 = std::min(g.N, nStrips * in / tn * NR);
      int64_t n1 = std::min(g.N, nStrips * (in + 1) / tn * NR);
      if (m0 < m1 && n0 < n1)
        gemmTile<Kern, W>(g, m0, m1, n0, n1, packed);
    }
  };
  if (tasks <= 1 || !pool)
    run(0, tasks);
  else
    pool->parallelFor(tasks, 1, run);
}

/// C[:, n0:n1] for small M without packing: W is read once, in blocks of
/// KB rows (KB sequential streams); rows of x go in groups of up to 6.
template <typename W>
void streamRange(const GemmArgs &g, int64_t n0, int64_t n1, int isa) {
  const W *B = weightsOf<W>(g);
  bool avx2 = isa >= kIsaAvx2;
  const int64_t KB = avx2 ? 8 : 32, NB = 512;
  const int64_t groups = (g.M + 5) / 6;
  const int64_t width = n1 - n0;
  // The AVX2/AVX-512 kernels read x transposed per group of rows (xp[k * rows + r])
  // and accumulate into a private y. The rows of W (and of x and C) are
  // typically a large power of two apart, so the KB rows of W streamed
  // together share their L1 sets and fill them; y's rows are placed at
  // different set offsets (row stride 64 bytes more than a multiple of
  // 64) and, as a whole, 1 KB away from W's column n0 modulo 4 KB.
  const int64_t ldy = (width + 15) / 16 * 16 + 16;
  constexpr uintptr_t kPage = 4096, kShift = 1024;
  float *xp = avx2 ? packAScratch.get(size_t(g.M * g.K)) : nullptr;
  float *yb = avx2 ? packBScratch.get(size_t(g.M * ldy) + kPage / 4) : nullptr;
  float *yp = nullptr;
  if (xp && yb) {
    const uintptr_t w = reinterpret_cast<uintptr_t>(B + n0);
    const uintptr_t base = reinterpret_cast<uintptr_t>(yb);
    yp = yb + ((w + kShift - base) % kPage) / sizeof(float);
  } else {
    avx2 = false;
  }
  for (int64_t gi = 0; avx2 && gi < groups; ++gi) {
    const int64_t r0 = g.M * gi / groups, r1 = g.M * (gi + 1) / groups;
    float *dst = xp + r0 * g.K;
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t r = r0; r < r1; ++r)
        dst[k * (r1 - r0) + (r - r0)] = g.A[r * g.lda + k];
  }
  for (int64_t k0 = 0; k0 < g.K; k0 += KB) {
    const int64_t kb = std::min(KB, g.K - k0);
    for (int64_t nb = 0; nb < width; nb += NB) {
      const int64_t ne = std::min(width, nb + NB);
      for (int64_t gi = 0; gi < groups; ++gi) {
        const int64_t r0 = g.M * gi / groups, r1 = g.M * (gi + 1) / groups;
        const float *x = g.A + r0 * g.lda;
#if SPARSEC_RT_X86
        if (avx2 && isa >= kIsaAvx512) {
          streamBlockAvx512Rows<W>(r1 - r0, k0, kb, xp + r0 * g.K, B + n0,
                                   g.ldb, yp + r0 * ldy, ldy, nb, ne);
          continue;
        }
        if (avx2) {
          streamBlockAvx2Rows<W>(r1 - r0, k0, kb, x, g.lda, xp + r0 * g.K,
                                 B + n0, g.ldb, yp + r0 * ldy, ldy, nb, ne);
          continue;
        }
#endif
        streamBlockScalar<W>(r1 - r0, k0, kb, x, g.lda, B + n0, g.ldb,
                             g.C + r0 * g.ldc + n0, g.ldc, nb, ne);
      }
    }
  }
  if (avx2)
    for (int64_t r = 0; r < g.M; ++r)
      std::memcpy(g.C + r * g.ldc + n0, yp + r * ldy,
                  size_t(width) * sizeof(float));
  epilogue(g, g.C + n0, 0, g.M, n0, width);
}

template <typename W>
void gemmStream(ThreadPool *pool, const GemmArgs &g, int isa) {
  const int threads = pool ? pool->size() : 1;
  // Contiguous column blocks, multiples of 16 floats, at least 256 wide.
  const int64_t blocks16 = (g.N + 15) / 16;
  int64_t parts =
      std::max<int64_t>(1, std::min<int64_t>(threads, blocks16 / 16));
  if (g.M * g.K * g.N < (1 << 16))
    parts = 1;
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      int64_t n0 = std::min(g.N, blocks16 * p / parts * 16);
      int64_t n1 = std::min(g.N, blocks16 * (p + 1) / parts * 16);
      if (n0 < n1)
        streamRange<W>(g, n0, n1, isa);
    }
  };
  if (parts <= 1 || !pool)
    run(0, parts);
  else
    pool->parallelFor(parts, 1, run);
}

} // namespace

constexpr int64_t kStreamMaxRows = 32;

GemmPackLayout gemmPackLayout() {
  const int isa = kernelIsa();
#if SPARSEC_RT_X86
  if (isa >= kIsaAvx512)
    return {Avx512Kernel::KC, Avx512Kernel::NR};
  if (isa >= kIsaAvx2)
    return {Avx2Kernel::KC, Avx2Kernel::NR};
#endif
  (void)isa;
  return {ScalarKernel::KC, ScalarKernel::NR};
}

PackCache *packCacheOf(Context &ctx) {
  if (!ctx.packCache)
    ctx.packCache = std::make_shared<PackCache>(size_t(1) << 30);
  return static_cast<PackCache *>(ctx.packCache.get());
}

namespace {
template <typename W>
void gemmTyped(ThreadPool *pool, const GemmArgs &g, int isa) {
  // Streaming W beats packing it up to a few dozen rows (decode, small
  // batches); measured crossover on Zen 4 is around M = 32-48. A B given
  // packed is multiplied blocked at any M.
  if (g.M <= kStreamMaxRows && !g.Bpacked && !g.transB)
    return gemmStream<W>(pool, g, isa);
#if SPARSEC_RT_X86
  if (isa >= kIsaAvx512)
    return gemmBlocked<Avx512Kernel, W>(pool, g);
  if (isa >= kIsaAvx2)
    return gemmBlocked<Avx2Kernel, W>(pool, g);
#endif
  gemmBlocked<ScalarKernel, W>(pool, g);
}
} // namespace

void gemm(ThreadPool *pool, const GemmArgs &g) {
  if (g.M <= 0 || g.N <= 0)
    return;
  if (g.K <= 0) {
    for (int64_t i = 0; i < g.M; ++i)
      std::fill(g.C + i * g.ldc, g.C + i * g.ldc + g.N, 0.0f);
    epilogue(g, g.C, 0, g.M, 0, g.N);
    return;
  }
  const int isa = kernelIsa();
  if (g.Bh && !g.Bpacked)
    return gemmTyped<Half>(pool, g, isa);
  if (g.Bb && !g.Bpacked)
    return gemmTyped<BFloat>(pool, g, isa);
  gemmTyped<float>(pool, g, isa);
}

float dot(const float *a, const float *b, int64_t n) {
#if SPARSEC_RT_X86
  if (useAvx2())
    return dotAvx2(a, b, n);
#endif
  float s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j)
      s[j] += a[i + j] * b[i + j];
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; ++i)
    r += a[i] * b[i];
  return r;
}

float scaleAddMax(float *s, int64_t n, float scale, const float *add) {
#if SPARSEC_RT_X86
  if (useAvx2())
    return scaleAddMaxAvx2(s, n, scale, add);
#endif
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const float v = s[j] * scale + (add ? add[j] : 0.0f);
    s[j] = v;
    m = std::max(m, v);
  }
  return m;
}

double expShiftSum(float *s, int64_t n, float m) {
#if SPARSEC_RT_X86
  if (useAvx2())
    return expShiftSumAvx2(s, n, m);
#endif
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float x = s[j] - m;
    s[j] = x < -87.0f ? 0.0f : std::exp(x);
    sum += double(s[j]);
  }
  return sum;
}

void axpy(float alpha, const float *x, float *y, int64_t n) {
#if SPARSEC_RT_X86
  if (useAvx2())
    return axpyAvx2(alpha, x, y, n);
#endif
  for (int64_t i = 0; i < n; ++i)
    y[i] += alpha * x[i];
}

} // namespace detail

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

using namespace detail;

void detail::gemmWeight(Context &ctx, const float *x, int64_t M,
                        const Tensor &w, bool transB, const float *bias,
                        Activation act, float *c) {
  GemmArgs g;
  g.M = M;
  g.K = w.shape[transB ? 1 : 0];
  g.N = w.shape[transB ? 0 : 1];
  g.A = x;
  g.lda = g.K;
  if (w.dtype == DType::f16)
    g.Bh = w.as<Half>();
  else if (w.dtype == DType::bf16)
    g.Bb = w.as<BFloat>();
  else
    g.B = w.as<float>();
  g.ldb = w.shape[1];
  g.transB = transB;
  g.C = c;
  g.ldc = g.N;
  // A model weight is packed once for all batched calls.
  if (g.M > kStreamMaxRows && ctx.weights && ctx.weights->contains(w.data))
    g.packCache = packCacheOf(ctx);
  g.bias = bias;
  g.act = act;
  gemm(&ctx.pool, g);
}

bool linear(Context &ctx, const Tensor &x, const Tensor &w, const Tensor *bias,
            Activation act, int outSlot, Tensor &out) {
  if (!checkTensor(ctx, "linear", "x", x) ||
      !checkTensor(ctx, "linear", "weight", w) ||
      (bias && !checkTensor(ctx, "linear", "bias", *bias)))
    return false;
  if (x.dtype != DType::f32 ||
      (w.dtype != DType::f32 && w.dtype != DType::f16 &&
       w.dtype != DType::bf16) ||
      (bias && bias->dtype != DType::f32))
    return ctx.fail(
        "linear: x and bias must be float32 and the weight float32, "
        "float16 or bfloat16, got x " +
        x.describe() + ", weight " + w.describe() +
        (bias ? ", bias " + bias->describe() : std::string()));
  if (x.rank < 1 || w.rank != 2 || x.shape[x.rank - 1] != w.shape[0])
    return ctx.fail("linear: x " + x.describe() + " and weight " +
                    w.describe() +
                    " do not match (expected [..., K] and "
                    "[K, N])");
  const int64_t N = w.shape[1];
  if (bias && bias->numel() != N)
    return ctx.fail("linear: bias " + bias->describe() + " does not have " +
                    std::to_string(N) + " elements");
  int64_t shape[kMaxRank];
  for (int i = 0; i < x.rank - 1; ++i)
    shape[i] = x.shape[i];
  shape[x.rank - 1] = N;
  Tensor r;
  if (!allocateOut(ctx, "linear", outSlot, r, DType::f32, x.rank, shape))
    return false;
  gemmWeight(ctx, x.as<float>(), product(x.shape, 0, x.rank - 1), w, false,
             bias ? bias->as<float>() : nullptr, act, r.as<float>());
  out = r;
  return true;
}

bool matmul(Context &ctx, const Tensor &a, const Tensor &b, int outSlot,
            Tensor &out) {
  if (!checkTensor(ctx, "matmul", "a", a) ||
      !checkTensor(ctx, "matmul", "b", b))
    return false;
  if (a.dtype != DType::f32 || b.dtype != DType::f32)
    return ctx.fail("matmul: only float32 is supported, got " + a.describe() +
                    " and " + b.describe());
  if (a.rank < 1 || b.rank < 1)
    return ctx.fail("matmul: operands must have rank >= 1, got " +
                    a.describe() + " and " + b.describe());
  // Promote 1-D operands: a [K] -> [1, K], b [K] -> [K, 1].
  const bool aVec = a.rank == 1, bVec = b.rank == 1;
  const int64_t M = aVec ? 1 : a.shape[a.rank - 2];
  const int64_t K = a.shape[a.rank - 1];
  const int64_t Kb = bVec ? b.shape[0] : b.shape[b.rank - 2];
  const int64_t N = bVec ? 1 : b.shape[b.rank - 1];
  if (K != Kb)
    return ctx.fail("matmul: inner dimensions of " + a.describe() + " and " +
                    b.describe() + " do not match");
  const int ab = aVec ? 0 : a.rank - 2, bb = bVec ? 0 : b.rank - 2;
  int batchRank;
  int64_t batch[kMaxRank];
  if (!broadcastShapes(ab, a.shape, bb, b.shape, batchRank, batch))
    return ctx.fail("matmul: batch dimensions of " + a.describe() + " and " +
                    b.describe() + " do not broadcast");
  int64_t shape[kMaxRank + 2];
  int rank = 0;
  for (int i = 0; i < batchRank; ++i)
    shape[rank++] = batch[i];
  if (!aVec)
    shape[rank++] = M;
  if (!bVec)
    shape[rank++] = N;
  if (rank > kMaxRank)
    return ctx.fail("matmul: result rank exceeds " + std::to_string(kMaxRank));
  Tensor r;
  if (!allocateOut(ctx, "matmul", outSlot, r, DType::f32, rank, shape))
    return false;
  const int64_t nBatch = product(batch, 0, batchRank);
  const float *A = a.as<float>(), *B = b.as<float>();
  float *C = r.as<float>();
  if (r.numel() == 0) {
    out = r;
    return true;
  }
  GemmArgs base;
  base.M = M;
  base.N = N;
  base.K = K;
  base.lda = K;
  base.ldb = N;
  base.ldc = N;
  // b without (non-trivial) batch dims: fold a's batch into M.
  if (product(b.shape, 0, bb) == 1) {
    GemmArgs g = base;
    g.M = M * nBatch;
    g.A = A;
    g.B = B;
    g.C = C;
    gemm(&ctx.pool, g);
    out = r;
    return true;
  }
  // Per batch element offsets into a and b (broadcast dims stride 0).
  int64_t aStr[kMaxRank] = {}, bStr[kMaxRank] = {};
  {
    int64_t s = M * K;
    for (int i = ab - 1; i >= 0; --i) {
      int d = i + (batchRank - ab);
      aStr[d] = a.shape[i] == 1 ? 0 : s;
      s *= a.shape[i];
    }
    s = K * N;
    for (int i = bb - 1; i >= 0; --i) {
      int d = i + (batchRank - bb);
      bStr[d] = b.shape[i] == 1 ? 0 : s;
      s *= b.shape[i];
    }
  }
  auto runBatch = [&](int64_t t, ThreadPool *pool) {
    int64_t rem = t, ao = 0, bo = 0;
    for (int d = batchRank - 1; d >= 0; --d) {
      int64_t i = rem % batch[d];
      rem /= batch[d];
      ao += i * aStr[d];
      bo += i * bStr[d];
    }
    GemmArgs g = base;
    g.A = A + ao;
    g.B = B + bo;
    g.C = C + t * M * N;
    gemm(pool, g);
  };
  const double flops = 2.0 * double(M) * double(N) * double(K);
  if (ctx.pool.size() > 1 && nBatch >= ctx.pool.size() && flops < 8e6) {
    parallelFor(ctx, nBatch, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        runBatch(t, nullptr);
    });
  } else {
    for (int64_t t = 0; t < nBatch; ++t)
      runBatch(t, &ctx.pool);
  }
  out = r;
  return true;
}

} // namespace sparsec::rt::ops
