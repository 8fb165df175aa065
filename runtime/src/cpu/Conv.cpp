//===- Conv.cpp - convolution and pooling -----------------------*- C++ -*-===//
//
// Part of the sparsec project.
//
// NCHW convolution with 1 to 3 spatial dims (handled as 3-D with leading
// size-1 dims), groups, pads, strides and dilations:
//
//  * a group with one input channel (depthwise): direct convolution,
//    parallel over output planes; each output row is held 64 columns at a
//    time in vector accumulators over all its taps and stored once (with
//    AVX2 the input rows are first copied with zero padding around them,
//    so that no load needs a mask; with AVX-512 the edges are masked
//    loads), or, portably, built from one axpy of an input row a tap (rows
//    split into stride phases either way);
//  * a pointwise convolution without padding or stride: the f32 GEMM of
//    Linear.cpp, weights [M/g, C/g] times the input read in place;
//  * otherwise, per image and group, chunks of output positions, one a
//    task: im2col writes the chunk's columns of the [C/g * kernel, P]
//    matrix straight into the GEMM's packed layout (no second packing;
//    with a stride along the last dim the input rows are first split into
//    their stride phases, so every tap copies contiguous columns) and the
//    GEMM multiplies the weights [M/g, C/g * kernel] by it on the task's
//    thread. Both GEMMs start from the bias and apply the activation while
//    the tile is in cache.
//
// A batch norm after a convolution (ConvNorm, which the compiler passes for
// a norm that is the convolution's only user) is folded into its weights
// and bias once, kept in the context's weight cache.
//
// Max and average pooling over 1 to 3 spatial dims, global when no kernel
// is given.
//
//===----------------------------------------------------------------------===//

#include "Common.h"
#include "ConvGeometry.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

namespace sparsec::rt::ops {

using namespace detail;

namespace {

/// Output positions ow whose input column ow * s + off lies in [0, in):
/// [lo, hi), empty when lo >= hi.
void tapRange(int64_t off, int64_t s, int64_t in, int64_t out, int64_t &lo,
              int64_t &hi) {
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  hi = in - 1 - off < 0 ? 0 : std::min(out, (in - 1 - off) / s + 1);
}

#if SPARSEC_RT_X86
/// Lanes [lo, hi) of a 16-lane vector, clipped to it.
SPARSEC_RT_AVX512 inline __mmask16 laneRange(int64_t lo, int64_t hi) {
  lo = std::max<int64_t>(lo, 0);
  hi = std::min<int64_t>(hi, 16);
  if (lo >= hi)
    return 0;
  return __mmask16(((1u << hi) - 1) & ~((1u << lo) - 1));
}
#endif

/// A run of output positions along the last spatial dim: positions
/// [p, p + ow1 - ow0) are (od, oh, ow0 .. ow1 - 1).
struct Segment {
  int64_t p, od, oh, ow0, ow1;
};

/// The runs that output positions [p0, p1) form.
void segmentsOf(const Geometry &g, int64_t p0, int64_t p1,
                std::vector<Segment> &segs) {
  segs.clear();
  const int64_t outW = g.out[2];
  for (int64_t p = p0; p < p1;) {
    Segment sg;
    sg.p = p;
    sg.ow0 = p % outW;
    sg.oh = p / outW % g.out[1];
    sg.od = p / (g.out[1] * outW);
    sg.ow1 = std::min(outW, sg.ow0 + (p1 - p));
    segs.push_back(sg);
    p += sg.ow1 - sg.ow0;
  }
}

#if SPARSEC_RT_X86
/// splitRow for stride 2 with zmm registers: 32 columns a step into their
/// 16 even and 16 odd ones.
SPARSEC_RT_AVX512 void splitRow2Avx512(const float *src, int64_t inW,
                                       float *even, float *odd) {
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20,
                                          22, 24, 26, 28, 30);
  const __m512i odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21,
                                         23, 25, 27, 29, 31);
  int64_t j = 0;
  for (; 2 * j + 32 <= inW; j += 16) {
    const __m512 a = _mm512_loadu_ps(src + 2 * j);
    const __m512 b = _mm512_loadu_ps(src + 2 * j + 16);
    _mm512_storeu_ps(even + j, _mm512_permutex2var_ps(a, evens, b));
    _mm512_storeu_ps(odd + j, _mm512_permutex2var_ps(a, odds, b));
  }
  for (; 2 * j < inW; ++j) {
    even[j] = src[2 * j];
    if (2 * j + 1 < inW)
      odd[j] = src[2 * j + 1];
  }
}
#endif

#if SPARSEC_RT_X86
/// splitRow2Avx512 with ymm registers.
SPARSEC_RT_AVX2 void splitRow2Avx2(const float *src, int64_t inW, float *even,
                                   float *odd) {
  int64_t j = 0;
  for (; 2 * j + 16 <= inW; j += 8) {
    const __m256 a = _mm256_loadu_ps(src + 2 * j);
    const __m256 b = _mm256_loadu_ps(src + 2 * j + 8);
    // [a0 a2 b0 b2 | a4 a6 b4 b6] -> [a0 a2 a4 a6 b0 b2 b4 b6]
    const __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 o = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    _mm256_storeu_ps(even + j,
                     _mm256_castpd_ps(_mm256_permute4x64_pd(
                         _mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0))));
    _mm256_storeu_ps(odd + j,
                     _mm256_castpd_ps(_mm256_permute4x64_pd(
                         _mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0))));
  }
  for (; 2 * j < inW; ++j) {
    even[j] = src[2 * j];
    if (2 * j + 1 < inW)
      odd[j] = src[2 * j + 1];
  }
}
#endif

/// One input row of inW columns split into its s stride phases: phase f
/// (columns f, f + s, ...) at dst + f * phaseStride (ceil(inW / s) when
/// not given); `isa` (kernelIsa's) picks the vector form of the stride-2
/// split. Only the phases' columns are written.
void splitRow(const float *src, int64_t inW, int64_t s, float *dst, int isa,
              int64_t phaseStride = 0) {
  if (phaseStride == 0)
    phaseStride = (inW + s - 1) / s;
#if SPARSEC_RT_X86
  if (isa >= kIsaAvx512 && s == 2)
    return splitRow2Avx512(src, inW, dst, dst + phaseStride);
  if (isa >= kIsaAvx2 && s == 2)
    return splitRow2Avx2(src, inW, dst, dst + phaseStride);
#endif
  (void)isa;
  for (int64_t f = 0; f < s; ++f)
    for (int64_t j = 0; j * s + f < inW; ++j)
      dst[f * phaseStride + j] = src[j * s + f];
}

/// The input with each row split into its g.stride[2] phases: row `row`'s
/// phase f (columns f, f + s, ...) at `phaseLen` floats apart from
/// row * s * phaseLen, so that a tap reads contiguous columns; `isa` as
/// splitRow takes it.
void splitPhases(Context &ctx, const float *x, int64_t rows, int64_t inW,
                 int64_t s, int isa, std::vector<float> &out) {
  const int64_t phaseLen = (inW + s - 1) / s;
  out.resize(size_t(rows * s * phaseLen));
  parallelFor(
      ctx, rows, std::max<int64_t>(1, 16384 / inW), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r)
          splitRow(x + r * inW, inW, s, out.data() + r * s * phaseLen, isa);
      });
}

/// A kernel tap (kd, kh, kw) as im2col reads it: the output columns whose
/// input column lies inside the row, [lo, hi), and where column lo's input
/// is within a (phase-split) row, `start`.
struct Tap {
  int64_t kd, kh, lo, hi, start;
};

/// The taps of g's kernel in (kd, kh, kw) order; rows of phaseLen-column
/// phases when the stride along the last dim is above 1.
void tapsOf(const Geometry &g, int64_t phaseLen, std::vector<Tap> &taps) {
  taps.clear();
  const int64_t s = g.stride[2];
  for (int64_t kd = 0; kd < g.k[0]; ++kd)
    for (int64_t kh = 0; kh < g.k[1]; ++kh)
      for (int64_t kw = 0; kw < g.k[2]; ++kw) {
        Tap t{kd, kh, 0, 0, 0};
        const int64_t off = kw * g.dil[2] - g.padB[2];
        tapRange(off, s, g.in[2], g.out[2], t.lo, t.hi);
        const int64_t iwLo = t.lo * s + off; // >= 0 when lo < hi
        if (t.lo < t.hi)
          t.start = s == 1 ? iwLo : (iwLo % s) * phaseLen + iwLo / s;
        taps.push_back(t);
      }
}

/// The input row under tap `t` for output row (od, oh) of input plane
/// `plane` (g.in[0] * g.in[1] rows of rowLen floats), as a pointer r with
/// r[ow] the input of output column ow for ow in [t.lo, t.hi); null when
/// that row lies in the padding or the tap covers no output column.
const float *tapRow(const float *plane, const Tap &t, const Geometry &g,
                    int64_t od, int64_t oh, int64_t rowLen) {
  const int64_t id = od * g.stride[0] - g.padB[0] + t.kd * g.dil[0];
  const int64_t ih = oh * g.stride[1] - g.padB[1] + t.kh * g.dil[1];
  if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1] || t.lo >= t.hi)
    return nullptr;
  return plane + (id * g.in[1] + ih) * rowLen + t.start - t.lo;
}

/// The im2col row of tap `t` over input plane `plane` (g.in[0] * g.in[1]
/// rows of rowLen floats) for the output positions of `segs` (the first at
/// p0): dst[p - p0] is the input under the tap at position p, or 0 in the
/// padding.
void im2colRow(const float *plane, const Tap &t, const Geometry &g,
               const std::vector<Segment> &segs, int64_t p0, int64_t rowLen,
               float *dst) {
  for (const Segment &sg : segs) {
    float *o = dst + (sg.p - p0) - sg.ow0; // o[ow] for ow in [ow0, ow1)
    const float *row = tapRow(plane, t, g, sg.od, sg.oh, rowLen);
    const int64_t a = std::max(sg.ow0, t.lo), b = std::min(sg.ow1, t.hi);
    if (!row || a >= b) {
      std::fill(o + sg.ow0, o + sg.ow1, 0.0f);
      continue;
    }
    std::fill(o + sg.ow0, o + a, 0.0f);
    std::memcpy(o + a, row + a, size_t(b - a) * sizeof(float));
    std::fill(o + b, o + sg.ow1, 0.0f);
  }
}

#if SPARSEC_RT_X86
/// im2colRow with zmm registers: each run is written 16 columns at a time,
/// a masked load (zero outside the tap's columns) and a masked store.
SPARSEC_RT_AVX512 void im2colRowAvx512(const float *plane, const Tap &t,
                                       const Geometry &g,
                                       const std::vector<Segment> &segs,
                                       int64_t p0, int64_t rowLen, float *dst) {
  for (const Segment &sg : segs) {
    float *o = dst + (sg.p - p0) - sg.ow0; // o[ow] for ow in [ow0, ow1)
    const float *row = tapRow(plane, t, g, sg.od, sg.oh, rowLen);
    int64_t a = std::max(sg.ow0, t.lo), b = std::min(sg.ow1, t.hi);
    if (!row)
      a = b = sg.ow0; // all padding: zeros (no lane is loaded)
    for (int64_t q = sg.ow0; q < sg.ow1; q += 16) {
      const __m512 v = _mm512_maskz_loadu_ps(laneRange(a - q, b - q), row + q);
      _mm512_mask_storeu_ps(o + q, laneRange(0, sg.ow1 - q), v);
    }
  }
}
#endif

/// Copies the NR-float strips of `row` (nPad floats) to dst, dst + step, ...
template <int NR>
void scatterStrips(const float *row, int64_t nPad, float *dst, int64_t step) {
  for (int64_t j = 0; j < nPad; j += NR, dst += step)
    std::memcpy(dst, row + j, NR * sizeof(float)); // fixed size: inlined
}

/// The im2col matrix's columns [p0, p1) (rows (c, kd, kh, kw), Cg * kSize
/// in all) written straight into the GEMM's packed layout `lay` (packed:
/// lay.floats(rows, p1 - p0) floats). `x`: Cg planes of g.in[0] * g.in[1]
/// rows of g.in[2] columns, each split into phaseLen-column stride phases
/// when the stride along the last dim is above 1; `taps` as tapsOf gives
/// them. `row` and `segs` are scratch; `avx512`: copy with zmm registers.
void im2colPacked(const float *x, int64_t Cg, const Geometry &g, int64_t p0,
                  int64_t p1, int64_t phaseLen, const std::vector<Tap> &taps,
                  const GemmPackLayout &lay, float *packed,
                  std::vector<float> &row, std::vector<Segment> &segs,
                  bool avx512) {
  const int64_t kSize = g.kSize(), rows = Cg * kSize, width = p1 - p0;
  const int64_t nPad = lay.paddedColumns(width), NR = lay.NR;
  const int64_t rowLen = g.stride[2] * phaseLen;
  row.assign(size_t(nPad), 0.0f); // the padding columns stay zero
  segmentsOf(g, p0, p1, segs);
  for (int64_t c = 0, r = 0; c < Cg; ++c) {
    const float *plane = x + c * g.in[0] * g.in[1] * rowLen;
    for (int64_t t = 0; t < kSize; ++t, ++r) {
#if SPARSEC_RT_X86
      if (avx512)
        im2colRowAvx512(plane, taps[size_t(t)], g, segs, p0, rowLen,
                        row.data());
      else
#endif
        im2colRow(plane, taps[size_t(t)], g, segs, p0, rowLen, row.data());
      const int64_t pc = r / lay.KC * lay.KC;
      const int64_t kc = std::min(lay.KC, rows - pc);
      float *dst = packed + pc * nPad + (r - pc) * NR;
      switch (NR) {
      case 32:
        scatterStrips<32>(row.data(), nPad, dst, kc * NR);
        break;
      case 16:
        scatterStrips<16>(row.data(), nPad, dst, kc * NR);
        break;
      case 8:
        scatterStrips<8>(row.data(), nPad, dst, kc * NR);
        break;
      default:
        for (int64_t j = 0; j < nPad; j += NR, dst += kc * NR)
          std::memcpy(dst, row.data() + j, size_t(NR) * sizeof(float));
      }
    }
  }
}

thread_local std::vector<float> colBuffer;
thread_local Scratch packedColumns;
thread_local std::vector<Segment> segmentBuffer;

/// One tap's contribution to an output row: w * src[j] for the output
/// columns j in [lo, hi).
struct RowTap {
  const float *src;
  float w;
  int64_t lo, hi;
};

/// y[0:n] = act(bias + the taps' contributions), portable: an axpy a tap.
void depthwiseRow(const RowTap *taps, int64_t nt, float bias, Activation act,
                  float *y, int64_t n) {
  std::fill(y, y + n, bias);
  for (int64_t t = 0; t < nt; ++t)
    axpy(taps[t].w, taps[t].src + taps[t].lo, y + taps[t].lo,
         taps[t].hi - taps[t].lo);
  applyActivation(act, y, n);
}

#if SPARSEC_RT_X86
/// depthwiseRow with zmm registers: 64 output columns at a time in four
/// accumulators, every tap a (masked) load and FMA per vector, the row
/// stored once (ReLU and ReLU6 applied in registers).
SPARSEC_RT_AVX512 void depthwiseRowAvx512(const RowTap *taps, int64_t nt,
                                          float bias, Activation act, float *y,
                                          int64_t n) {
  for (int64_t j0 = 0; j0 < n; j0 += 64) {
    const int64_t j1 = std::min(n, j0 + 64);
    __m512 acc[4];
    for (int v = 0; v < 4; ++v)
      acc[v] = _mm512_set1_ps(bias);
    for (int64_t t = 0; t < nt; ++t) {
      const RowTap &tp = taps[t];
      const int64_t a = std::max(tp.lo, j0), b = std::min(tp.hi, j1);
      if (a >= b)
        continue;
      const __m512 w = _mm512_set1_ps(tp.w);
      for (int v = 0; v < 4; ++v) {
        const int64_t base = j0 + 16 * v;
        if (base >= b)
          break;
        if (base + 16 <= a)
          continue;
        const float *src = tp.src + base;
        const __m512 x =
            base >= a && base + 16 <= b
                ? _mm512_loadu_ps(src)
                : _mm512_maskz_loadu_ps(laneRange(a - base, b - base), src);
        acc[v] = _mm512_fmadd_ps(w, x, acc[v]);
      }
    }
    for (int v = 0; v < 4; ++v) {
      const int64_t base = j0 + 16 * v;
      if (base >= j1)
        break;
      // (maskz with all lanes: the unmasked max trips GCC 12's
      // uninitialised-variable warning)
      const __m512 r = activateInRegisters(act, acc[v]);
      if (base + 16 <= j1)
        _mm512_storeu_ps(y + base, r);
      else
        _mm512_mask_storeu_ps(y + base, laneRange(0, j1 - base), r);
    }
  }
  if (!activatesInRegisters(act))
    applyActivation(act, y, n);
}
#endif

/// A tap of the vector row kernels: w times src[ow] for every output
/// column ow of the row, src pointing into a zero-padded copy of the input
/// row (its stride phase) so that no column needs a mask.
struct PaddedTap {
  const float *src;
  float w;
};

/// f(std::integral_constant<int, n>) for a run-time n in [V, Max]: the
/// vector row kernels' last chunk, whose vector count is known only then.
template <int V, int Max, class F> inline void withVectors(int n, F &&f) {
  if constexpr (V <= Max) {
    if (n == V)
      return f(std::integral_constant<int, V>{});
    withVectors<V + 1, Max>(n, f);
  }
}

#if SPARSEC_RT_X86
/// ReLU or ReLU6 (activatesInRegisters) of 8 floats, a NaN kept; v as it
/// is for any other activation.
SPARSEC_RT_AVX2 inline __m256 activate8(Activation act, __m256 v) {
  // max(0, v) and min(6, v): a NaN, the second operand, stays NaN.
  if (activatesInRegisters(act))
    v = _mm256_max_ps(_mm256_setzero_ps(), v);
  if (act == Activation::relu6)
    v = _mm256_min_ps(_mm256_set1_ps(6.0f), v);
  return v;
}

/// Output columns [j0, j0 + 8 V) of a depthwise row in V ymm accumulators:
/// the bias, then every tap's FMA in tap order (depthwiseRow's order, its
/// padding columns adding w * 0), ReLU / ReLU6 in registers; stored to out.
/// The loops have constant trip counts, so the accumulators stay in
/// registers.
template <int V>
SPARSEC_RT_AVX2 inline void
depthwiseChunkAvx2(const PaddedTap *taps, int64_t nt, float bias,
                   Activation act, int64_t j0, float *out) {
  __m256 acc[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v)
    acc[v] = _mm256_set1_ps(bias);
  for (int64_t t = 0; t < nt; ++t) {
    const __m256 w = _mm256_set1_ps(taps[t].w);
    const float *src = taps[t].src + j0;
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
      acc[v] = _mm256_fmadd_ps(w, _mm256_loadu_ps(src + 8 * v), acc[v]);
  }
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v)
    _mm256_storeu_ps(out + 8 * v, activate8(act, acc[v]));
}

/// y[0:n] = act(bias + the taps' contributions) with ymm registers, 64
/// columns a chunk; the last chunk's vectors past n (which read the rows'
/// padding) go through a scratch row. Each tap's src must be readable up
/// to n rounded up to 8 columns.
SPARSEC_RT_AVX2 void depthwiseRowAvx2(const PaddedTap *taps, int64_t nt,
                                      float bias, Activation act, float *y,
                                      int64_t n) {
  int64_t j0 = 0;
  for (; j0 + 64 <= n; j0 += 64)
    depthwiseChunkAvx2<8>(taps, nt, bias, act, j0, y + j0);
  if (j0 < n) {
    const int64_t rem = n - j0;
    alignas(32) float tail[64];
    float *out = rem % 8 == 0 ? y + j0 : tail;
    withVectors<1, 7>(int(rem + 7) / 8, [&](auto v) {
      depthwiseChunkAvx2<decltype(v)::value>(taps, nt, bias, act, j0, out);
    });
    if (out == tail)
      std::memcpy(y + j0, tail, size_t(rem) * sizeof(float));
  }
  if (!activatesInRegisters(act))
    applyActivation(act, y, n);
}

/// Floor division by a positive divisor.
inline int64_t floorDiv(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/// depthwisePlane's AVX2 form. Every input row is first copied into
/// `padded`, split into its stride phases when the last dim is strided,
/// each phase with zeros before and after it, so that tap kw's input
/// column for output column ow (ow * s + off, off = kw * dil - pad) lies
/// at a fixed offset of its phase for every ow in the row (the padding
/// supplying the zeros a padded convolution reads). The row kernel then
/// loads every tap unmasked. Rows wholly in the padding are skipped, as
/// depthwiseRow skips them. (AVX-512 machines keep depthwiseRowAvx512's
/// masked loads: on an Intel Xeon a zmm form of this kernel ran slower
/// than them, docs/Benchmarks.md.)
void depthwisePlaneVector(const float *xin, const float *wk, float bias,
                          Activation act, const Geometry &g, float *yo,
                          std::vector<float> &padded,
                          std::vector<PaddedTap> &rowTaps, int isa) {
  const int64_t s = g.stride[2], inW = g.in[2], outW = g.out[2];
  const int64_t phaseLen = (inW + s - 1) / s;
  const int64_t inRows = g.in[0] * g.in[1];
  // Where tap kw's columns start in its phase (q) and which phase (f).
  int64_t qMin = 0, qMax = 0;
  for (int64_t kw = 0; kw < g.k[2]; ++kw) {
    const int64_t q = floorDiv(kw * g.dil[2] - g.padB[2], s);
    qMin = std::min(qMin, q);
    qMax = std::max(qMax, q);
  }
  // The kernel reads up to outW rounded up to 8 columns past the start.
  const int64_t lead = -qMin;
  const int64_t trail =
      std::max<int64_t>(0, qMax + (outW + 7) / 8 * 8 - phaseLen);
  const int64_t seg = lead + phaseLen + trail, rowLen = s * seg;
  padded.resize(size_t(inRows * rowLen));
  for (int64_t r = 0; r < inRows; ++r) {
    float *row = padded.data() + r * rowLen;
    for (int64_t f = 0; f < s; ++f) {
      const int64_t cols = (inW - f + s - 1) / s; // phase f's columns
      float *ph = row + f * seg;
      std::fill(ph, ph + lead, 0.0f);
      std::fill(ph + lead + cols, ph + seg, 0.0f);
    }
    if (s == 1)
      std::memcpy(row + lead, xin + r * inW, size_t(inW) * sizeof(float));
    else
      splitRow(xin + r * inW, inW, s, row + lead, isa, seg);
  }
  // Tap kw's first column within a padded row.
  std::vector<int64_t> colOf(size_t(g.k[2]));
  for (int64_t kw = 0; kw < g.k[2]; ++kw) {
    const int64_t off = kw * g.dil[2] - g.padB[2];
    const int64_t q = floorDiv(off, s), f = off - q * s;
    colOf[size_t(kw)] = f * seg + lead + q;
  }
  rowTaps.resize(size_t(g.kSize()));
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
      int64_t nt = 0, t = 0;
      for (int64_t kd = 0; kd < g.k[0]; ++kd)
        for (int64_t kh = 0; kh < g.k[1]; ++kh) {
          const int64_t id = od * g.stride[0] - g.padB[0] + kd * g.dil[0];
          const int64_t ih = oh * g.stride[1] - g.padB[1] + kh * g.dil[1];
          if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1]) {
            t += g.k[2];
            continue;
          }
          const float *row = padded.data() + (id * g.in[1] + ih) * rowLen;
          for (int64_t kw = 0; kw < g.k[2]; ++kw, ++t)
            rowTaps[size_t(nt++)] = {row + colOf[size_t(kw)], wk[t]};
        }
      float *yrow = yo + (od * g.out[1] + oh) * outW;
      depthwiseRowAvx2(rowTaps.data(), nt, bias, act, yrow, outW);
    }
}
#endif

/// Depthwise convolution of one plane (one input channel `xin`, output
/// plane `m` with weights `wk`): each output row is the bias plus, for
/// every tap whose input row exists, w * (that row from the tap's first
/// column, with the stride) over the output columns it covers. With a
/// stride along the last dim above 1, the plane's rows are first split
/// into their stride phases (once, into `phases`), so that every tap reads
/// contiguous columns. `taps` as tapsOf gives them; `phases`, `rowTaps`
/// and `paddedTaps` are scratch. With AVX2 (`isa`), depthwisePlaneVector
/// computes the plane instead.
void depthwisePlane(const float *xin, const float *wk, float bias,
                    Activation act, const Geometry &g, float *yo,
                    const std::vector<Tap> &taps, std::vector<float> &phases,
                    std::vector<RowTap> &rowTaps,
                    std::vector<PaddedTap> &paddedTaps, int isa) {
#if SPARSEC_RT_X86
  if (isa == kIsaAvx2)
    return depthwisePlaneVector(xin, wk, bias, act, g, yo, phases, paddedTaps,
                                isa);
#endif
  const int64_t s = g.stride[2], inW = g.in[2], outW = g.out[2];
  const int64_t phaseLen = (inW + s - 1) / s, rowLen = s * phaseLen;
  const int64_t inRows = g.in[0] * g.in[1];
  const float *plane = xin;
  if (s > 1) {
    phases.resize(size_t(inRows * rowLen));
    for (int64_t r = 0; r < inRows; ++r)
      splitRow(xin + r * inW, inW, s, phases.data() + r * rowLen, isa);
    plane = phases.data();
  }
  rowTaps.resize(taps.size());
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
      int64_t nt = 0;
      for (size_t t = 0; t < taps.size(); ++t)
        if (const float *row = tapRow(plane, taps[t], g, od, oh, rowLen))
          rowTaps[size_t(nt++)] = {row, wk[t], taps[t].lo, taps[t].hi};
      float *yrow = yo + (od * g.out[1] + oh) * outW;
#if SPARSEC_RT_X86
      if (isa >= kIsaAvx512) {
        depthwiseRowAvx512(rowTaps.data(), nt, bias, act, yrow, outW);
        continue;
      }
#endif
      depthwiseRow(rowTaps.data(), nt, bias, act, yrow, outW);
    }
}

thread_local std::vector<RowTap> rowTapBuffer;
thread_local std::vector<PaddedTap> paddedTapBuffer;

} // namespace

namespace {
/// The weights and bias of a convolution with batch norm `n` folded in
/// ([M * rowLen] weights, then [M] biases), from the context's cache (made
/// there by the first call) or, beyond the cache's limit, into `local`;
/// null after an error in ctx.
const float *foldNorm(Context &ctx, const Tensor &x, const Tensor &w,
                      const Tensor *bias, const ConvNorm &n,
                      std::vector<float> &local) {
  const int64_t M = w.shape[0], rowLen = w.numel() / std::max<int64_t>(M, 1);
  if (!normOperands(ctx, "conv (batch norm)", x, M, n))
    return nullptr;
  uint32_t epsBits;
  std::memcpy(&epsBits, &n.epsilon, sizeof epsBits);
  const std::array<const void *, 7> key = {
      w.data,
      bias ? bias->data : nullptr,
      n.scale->data,
      n.bias->data,
      n.mean->data,
      n.var->data,
      reinterpret_cast<const void *>(uintptr_t(epsBits))};
  auto fold = [&](std::vector<float> &v) {
    v.resize(size_t(M * rowLen + M));
    const float *wp = w.as<float>(), *bp = bias ? bias->as<float>() : nullptr;
    for (int64_t m = 0; m < M; ++m) {
      const double a =
          double(n.scale->as<float>()[m]) /
          std::sqrt(double(n.var->as<float>()[m]) + double(n.epsilon));
      for (int64_t i = 0; i < rowLen; ++i)
        v[size_t(m * rowLen + i)] = float(double(wp[m * rowLen + i]) * a);
      v[size_t(M * rowLen + m)] = float(
          (double(bp ? bp[m] : 0.0f) - double(n.mean->as<float>()[m])) * a +
          double(n.bias->as<float>()[m]));
    }
  };
  PackCache *cache = packCacheOf(ctx);
  std::lock_guard<std::mutex> lock(cache->mutex);
  auto it = cache->folded.find(key);
  if (it != cache->folded.end())
    return it->second.data();
  const size_t bytes = sizeof(float) * size_t(M * rowLen + M);
  if (cache->bytes + bytes > cache->limit) {
    fold(local);
    return local.data();
  }
  std::vector<float> &v = cache->folded[key];
  fold(v);
  cache->bytes += bytes;
  return v.data();
}
} // namespace

bool conv(Context &ctx, const Tensor &x, const Tensor &w, const Tensor *bias,
          const int64_t *strides, const int64_t *pads, const int64_t *dilations,
          int64_t group, const ConvNorm *norm, Activation act, int outSlot,
          Tensor &out) {
  Geometry g;
  int64_t shape[5];
  if (!convOperands(ctx, x, w, bias, strides, pads, dilations, group, g, shape))
    return false;
  // A batch norm after the convolution: its weights and bias folded.
  std::vector<float> localFold;
  const float *folded =
      norm ? foldNorm(ctx, x, w, bias, *norm, localFold) : nullptr;
  if (norm && !folded)
    return false;
  const int64_t N = x.shape[0], C = x.shape[1], M = w.shape[0];
  Tensor res;
  if (!allocateOut(ctx, "conv", outSlot, res, DType::f32, x.rank, shape))
    return false;
  if (res.numel() == 0) {
    out = res;
    return true;
  }
  const int64_t Cg = C / group, Mg = M / group;
  const int64_t P = g.outSize(), S = g.inSize(), kSize = g.kSize();
  const int64_t Kdim = Cg * kSize;
  const float *xp = x.as<float>();
  const float *wp = folded ? folded : w.as<float>();
  const float *bp = folded ? folded + M * Kdim
                    : bias ? bias->as<float>()
                           : nullptr;
  float *yp = res.as<float>();

  // The kernel's taps, shared by every plane and chunk; rows split into
  // stride phases of phaseLen columns when the last dim is strided.
  const int isa = kernelIsa();
  const bool avx512 = isa >= kIsaAvx512;
  const int64_t s = g.stride[2], phaseLen = (g.in[2] + s - 1) / s;
  std::vector<Tap> taps;
  tapsOf(g, phaseLen, taps);

  if (Cg == 1) {
    // Depthwise: one input channel per group, a plane at a time.
    parallelFor(ctx, N * M, std::max<int64_t>(1, 4096 / (P * kSize)),
                [&](int64_t b, int64_t e) {
                  for (int64_t plane = b; plane < e; ++plane) {
                    const int64_t n = plane / M, m = plane % M, c = m / Mg;
                    depthwisePlane(xp + (n * C + c) * S, wp + m * kSize,
                                   bp ? bp[m] : 0.0f, act, g, yp + plane * P,
                                   taps, colBuffer, rowTapBuffer,
                                   paddedTapBuffer, isa);
                  }
                });
    out = res;
    return true;
  }

  // Pointwise convolutions without padding or stride: the GEMM reads the
  // input directly (and packs it), the bias and activation in its epilogue.
  bool pointwise = kSize == 1;
  for (int d = 0; d < 3; ++d)
    pointwise =
        pointwise && g.stride[d] == 1 && g.padB[d] == 0 && g.padE[d] == 0;
  if (pointwise) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t gi = 0; gi < group; ++gi) {
        GemmArgs a;
        a.M = Mg;
        a.N = P;
        a.K = Kdim;
        a.A = wp + gi * Mg * Kdim;
        a.lda = Kdim;
        a.B = xp + (n * C + gi * Cg) * S;
        a.ldb = S;
        a.C = yp + (n * M + gi * Mg) * P;
        a.ldc = P;
        a.rowBias = bp ? bp + gi * Mg : nullptr;
        a.act = act;
        gemm(&ctx.pool, a);
      }
    out = res;
    return true;
  }

  // Otherwise, per image and group, chunks of output positions: each task
  // writes its chunk's im2col columns straight into the GEMM's packed
  // layout (a per-thread buffer of about 512 KB, so that the product reads
  // it from L2) and runs the product on its thread, bias and activation in
  // the GEMM's epilogue.
  const GemmPackLayout lay = gemmPackLayout();
  constexpr int64_t kPackedBytes = int64_t(1) << 19;
  int64_t chunk = std::max<int64_t>(
      lay.NR, kPackedBytes / int64_t(sizeof(float)) / Kdim / lay.NR * lay.NR);
  // Tasks in a multiple of the threads while they are few (3 tasks on 2
  // threads run as 2 + 1), and enough of them for every thread.
  const int64_t threads = ctx.pool.size(), images = N * group;
  const int64_t tasks = (P + chunk - 1) / chunk * images;
  if (threads > 1 && tasks < 8 * threads && tasks % threads != 0) {
    const int64_t perImage =
        ((tasks + threads - 1) / threads * threads + images - 1) / images;
    chunk = ((P + perImage - 1) / perImage + lay.NR - 1) / lay.NR * lay.NR;
  }
  chunk = std::min(chunk, P);
  const int64_t chunks = (P + chunk - 1) / chunk;
  // With a stride along the last dim, the input's rows split into their
  // phases once, so that every tap copies contiguous columns.
  std::vector<float> phased;
  const float *src = xp;
  if (s > 1) {
    splitPhases(ctx, xp, N * C * g.in[0] * g.in[1], g.in[2], s, isa, phased);
    src = phased.data();
  }
  const int64_t imageFloats = C * g.in[0] * g.in[1] * s * phaseLen;
  std::atomic<bool> outOfMemory{false};
  parallelFor(ctx, N * group * chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / (group * chunks), gi = t / chunks % group;
      const int64_t p0 = t % chunks * chunk, p1 = std::min(P, p0 + chunk);
      float *packed = packedColumns.get(size_t(lay.floats(Kdim, p1 - p0)));
      if (!packed) {
        outOfMemory = true;
        return;
      }
      im2colPacked(src + n * imageFloats + gi * (imageFloats / C) * Cg, Cg, g,
                   p0, p1, phaseLen, taps, lay, packed, colBuffer,
                   segmentBuffer, avx512);
      GemmArgs a;
      a.M = Mg;
      a.N = p1 - p0;
      a.K = Kdim;
      a.A = wp + gi * Mg * Kdim;
      a.lda = Kdim;
      a.Bpacked = packed;
      a.C = yp + (n * M + gi * Mg) * P + p0;
      a.ldc = P;
      a.rowBias = bp ? bp + gi * Mg : nullptr;
      a.act = act;
      gemm(nullptr, a);
    }
  });
  if (outOfMemory)
    return ctx.fail("conv: out of memory for the packed im2col columns of " +
                    x.describe());
  out = res;
  return true;
}

namespace {
/// The sum of row[0:n) in double, four partial sums in turn (independent
/// chains of adds, so a global average pool is not one long dependency).
template <class A, class T> double rowSum(const T *row, int64_t n) {
  double s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k)
      s[k] += double(A::load(row[i + k]));
  for (; i < n; ++i)
    s[0] += double(A::load(row[i]));
  return (s[0] + s[1]) + (s[2] + s[3]);
}
} // namespace

bool pool(Context &ctx, Pool kind, const Tensor &x, const int64_t *kernel,
          const int64_t *strides, const int64_t *pads, bool countIncludePad,
          int outSlot, Tensor &out) {
  const char *op = kind == Pool::max ? "max_pool" : "average_pool";
  Geometry g;
  int64_t shape[5];
  if (!poolGeometry(ctx, op, x, kernel, strides, pads, g, shape))
    return false;
  Tensor res;
  if (!allocateOut(ctx, op, outSlot, res, x.dtype, x.rank, shape))
    return false;
  const int64_t planes = x.shape[0] * x.shape[1];
  const int64_t P = g.outSize(), S = g.inSize();
  if (res.numel() == 0) {
    out = res;
    return true;
  }
  dispatchType(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, Half>) {
      using A = Arith<T>;
      using C = typename A::type;
      const T *in = x.as<T>();
      T *o = res.as<T>();
      parallelFor(
          ctx, planes, std::max<int64_t>(1, 4096 / (P * g.kSize())),
          [&](int64_t b, int64_t e) {
            for (int64_t plane = b; plane < e; ++plane) {
              const T *xin = in + plane * S;
              T *yo = o + plane * P;
              for (int64_t od = 0; od < g.out[0]; ++od)
                for (int64_t oh = 0; oh < g.out[1]; ++oh)
                  for (int64_t ow = 0; ow < g.out[2]; ++ow) {
                    const int64_t pos[3] = {od, oh, ow};
                    int64_t lo[3], hi[3];
                    int64_t padded = 1;
                    for (int d = 0; d < 3; ++d) {
                      const int64_t s = pos[d] * g.stride[d] - g.padB[d];
                      const int64_t eEnd = s + g.k[d];
                      // Window clipped to the padded input, then to the input.
                      padded *= std::min(eEnd, g.in[d] + g.padE[d]) -
                                std::max(s, -g.padB[d]);
                      lo[d] = std::max<int64_t>(s, 0);
                      hi[d] = std::min(eEnd, g.in[d]);
                    }
                    C m = -std::numeric_limits<C>::infinity();
                    double sum = 0;
                    int64_t cnt = 0;
                    for (int64_t id = lo[0]; id < hi[0]; ++id)
                      for (int64_t ih = lo[1]; ih < hi[1]; ++ih) {
                        const T *row = xin + (id * g.in[1] + ih) * g.in[2];
                        if (kind == Pool::max) {
                          for (int64_t iw = lo[2]; iw < hi[2]; ++iw) {
                            const C v = A::load(row[iw]);
                            if (m == m && (v != v || v > m))
                              m = v; // NaN propagates and then sticks
                          }
                        } else {
                          sum += rowSum<A>(row + lo[2], hi[2] - lo[2]);
                        }
                        cnt += std::max<int64_t>(0, hi[2] - lo[2]);
                      }
                    C r;
                    if (kind == Pool::max)
                      r = m;
                    else {
                      const int64_t div = countIncludePad ? padded : cnt;
                      r = div > 0 ? C(sum / double(div)) : C(0);
                    }
                    yo[(od * g.out[1] + oh) * g.out[2] + ow] = A::store(r);
                  }
            }
          });
    }
  });
  out = res;
  return true;
}

} // namespace sparsec::rt::ops
