//===- Attention.cu - attention over many query rows ----------------------===//
//
// Part of the sparsec project.
//
// See sparsec/rt/cuda/Attention.h.
//
// A block (4 warps) owns 64 query rows of one (batch, head). Thread t has
// tk = t % 8 and tq = the warp * 4 + (t % 32) / 8: query rows tq, tq + 16,
// tq + 32, tq + 48 (4 different rows a warp reads lie in different banks)
// and, per tile of 64 keys, keys tk, tk + 8, ..., tk + 56 of the scores,
// and output columns tk * C .. tk * C + C - 1 (C = DMax / 8). Q, K and P
// are row-major in shared memory with rows padded by 4 floats, so that the
// 16-byte loads of 8 consecutive rows (or 4) fall in distinct banks; the
// row maxima and sums of the online softmax are reduced over the 8 lanes
// of a row with shuffles. Keys and values past T, and head dims past D,
// are zeros in shared memory; the scores of keys a row does not see are
// -inf.
//
// The tensor-core form (prefillAttentionMmaKernel) keeps the block shape:
// warp w owns query rows 16 w .. 16 w + 15, holds their q as mma.sync A
// fragments for the whole call, and per tile of 64 keys computes its 16 x
// 64 scores with K's rows as B fragments (ldmatrix), the online softmax on
// the accumulators (a thread holds rows g and g + 8 of the warp's 16, g =
// lane / 4; the row's other values are in the 3 lanes beside it), then
// o += P V with P's accumulators repacked as A fragments and V's rows
// loaded transposed. k and v are rounded to E once (roundRowsKernel), q
// as it is staged. Its softmax works in units of log2 e, so that each
// weight is one ex2 instruction; tiles that every row sees unmasked take
// a path of their own, which only scales the scores, so that the loop a
// warp runs over most tiles stays short.
//
// A mask first goes through prefillSpansKernel: for each tile of 64 query
// rows (and each batch and head the mask does not broadcast over), the
// span of keys any of its rows can see, so that tiles of keys a mask hides
// from every row are skipped. A key is hidden from a row where its mask
// value is at most kHidden (-1e4: the -10000 of older exports, float32's
// lowest, -inf) or false, or past the row's causal limit. A row whose
// mask shows a key (a value above kShown, -1e3) gives a hidden key the
// weight exp(score + mask - max) < exp(score - best shown score - 9000):
// 0 in fp32, as computing it would give, unless a hidden key's score
// exceeded the shown ones' by about 9000. A float mask's row that shows
// no key keeps all its keys (its softmax is over them all, as before); a
// boolean mask's row that sees none is 0 whatever the span.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/Attention.h"

#include "DeviceMath.cuh"
#include "TileStaging.cuh"

#include <algorithm>
#include <climits>

namespace sparsec::rt::cuda {
namespace {

constexpr int kRows = 64, kKeys = 64, kThreads = 128;

/// Floats of shared memory for head dims D (rounded up to 4) and DMax.
template <int DMax> int64_t sharedFloats(int64_t D4) {
  return 2 * kRows * (D4 + 4) + kKeys * DMax + kRows * (kKeys + 4);
}

/// Mask values at most kHidden hide a key; a row with a value above
/// kShown sees a key whose score outweighs every hidden one (see the file
/// comment).
constexpr float kHidden = -1e4f, kShown = -1e3f;

/// Query tiles of 64 rows.
__host__ __device__ inline int64_t queryTiles(const PrefillAttention &a) {
  return (a.Sq + kRows - 1) / kRows;
}
/// The query tile of an attention block: the grid is (batch and head,
/// query tile), the blocks launched in x order first, so that every head's
/// last tiles start first. Under a causal limit they read the most keys;
/// the light first tiles fill in behind them as SMs free up (a head's
/// tiles in order put heavy tiles of the last heads behind light ones).
__device__ __forceinline__ int64_t lastTilesFirst() {
  return int64_t(gridDim.y) - 1 - blockIdx.y;
}
/// A tile's key span is computed in kSpanParts parts of kRows / kSpanParts
/// rows, a warp a row, which the attention kernels merge.
constexpr int kSpanParts = 8, kSpanRows = kRows / kSpanParts;
/// Heads of a batch the mask does not broadcast over, and (batch, head)
/// pairs: the spans kernel's grid rows.
__host__ __device__ inline int64_t maskHeadsPerBatch(const PrefillAttention &a) {
  return a.mStr[1] ? a.Hq : 1;
}
__host__ __device__ inline int64_t maskHeads(const PrefillAttention &a) {
  return (a.mStr[0] ? a.B : 1) * maskHeadsPerBatch(a);
}
/// The first of a tile's parts, for each batch and head the mask does not
/// broadcast over.
__host__ __device__ inline int64_t spanIndex(const PrefillAttention &a,
                                             int64_t tile, int64_t b,
                                             int64_t h) {
  return (((a.mStr[0] ? b : 0) * maskHeadsPerBatch(a) + (a.mStr[1] ? h : 0)) *
              queryTiles(a) +
          tile) *
         kSpanParts;
}
/// Where query row qi of (b, h) starts in the mask (mStr[3] apart a key).
__device__ __forceinline__ int64_t maskRow(const PrefillAttention &a,
                                           int64_t b, int64_t h, int64_t qi) {
  return b * a.mStr[0] + h * a.mStr[1] + qi * a.mStr[2];
}
/// The last key query row r of a tile of `rows` (query position qi) may
/// see: T - 1, or its causal limit; -1 past the tile's rows.
__device__ __forceinline__ int lastKey(const PrefillAttention &a, int r,
                                       int rows, int64_t qi) {
  if (r >= rows)
    return -1;
  const int64_t limit = a.causal ? qi + a.T - a.Sq : a.T - 1;
  return int(limit < a.T - 1 ? limit : a.T - 1);
}
/// The score of key kj for a row whose last key is `last` (lastKey) and
/// whose mask row starts at mRow: `dot` times `scale`, plus the float
/// mask's value times `unit`; -inf past `last` or masked out. (The
/// tensor-core kernel works in units of log2 e: scale and unit carry it.)
__device__ __forceinline__ float maskedScore(const PrefillAttention &a,
                                             float dot, float scale,
                                             float unit, int kj, int last,
                                             int64_t mRow) {
  if (kj > last)
    return -INFINITY;
  const float x = dot * scale;
  if (a.maskF)
    return x + a.maskF[mRow + kj * a.mStr[3]] * unit;
  if (a.maskB && !a.maskB[mRow + kj * a.mStr[3]])
    return -INFINITY;
  return x;
}

/// One block a part of a query tile (and batch and head of the mask's
/// own), a warp a row: the row's first and last key not hidden, and
/// whether a key is shown; the part's span is their union, with every key
/// up to the causal limit where a float mask's row shows none.
__global__ void __launch_bounds__(32 * kSpanRows)
    prefillSpansKernel(PrefillAttention a, int4 *spans) {
  pdlTrigger();
  __shared__ int4 rowSpan[kSpanRows];
  const int64_t part = blockIdx.x % kSpanParts,
                tile = blockIdx.x / kSpanParts;
  const int64_t hs = maskHeadsPerBatch(a);
  const int64_t b = blockIdx.y / hs, h = blockIdx.y % hs;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t qi = tile * kRows + part * kSpanRows + warp;
  int f = INT_MAX, l = -1;
  int clean = INT_MAX; // keys [0, clean) shown with 0 (or true) to the row
  if (qi < a.Sq) {
    const int64_t mRow = maskRow(a, b, h, qi);
    int64_t limit = a.T; // keys from it on are hidden
    if (a.causal && qi + a.T - a.Sq + 1 < limit)
      limit = qi + a.T - a.Sq + 1 < 0 ? 0 : qi + a.T - a.Sq + 1;
    bool shown = false;
    int dirty = int(limit); // the first key the mask changes, or hides
    // Activations (the mask) written by earlier kernels: plain loads.
    for (int64_t kj = lane; kj < limit; kj += 32) {
      bool visible, strong, zero;
      if (a.maskF) {
        const float v = a.maskF[mRow + kj * a.mStr[3]];
        visible = !(v <= kHidden); // a NaN is kept
        strong = !(v <= kShown);
        zero = v == 0.0f;
      } else {
        visible = strong = zero = a.maskB[mRow + kj * a.mStr[3]] != 0;
      }
      if (visible) {
        f = min(f, int(kj));
        l = max(l, int(kj));
      }
      if (!zero)
        dirty = min(dirty, int(kj));
      shown |= strong;
    }
    f = __reduce_min_sync(~0u, f);
    l = __reduce_max_sync(~0u, l);
    clean = __reduce_min_sync(~0u, dirty);
    if (!__any_sync(~0u, shown) && a.maskF) {
      f = 0; // the row keeps every key up to its limit
      l = int(limit) - 1;
    }
  }
  if (lane == 0)
    rowSpan[warp] = make_int4(f, l, clean, 0);
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kSpanRows; ++w) {
      f = min(f, rowSpan[w].x);
      l = max(l, rowSpan[w].y);
      clean = min(clean, rowSpan[w].z);
    }
    spans[spanIndex(a, tile, b, h) + part] =
        l < f ? make_int4(0, 0, 0, 0) : make_int4(f, l + 1, clean, 0);
  }
}

/// The keys [begin, end) a query tile reads: the union of its parts' spans
/// where the mask's were computed, else every key up to the causal limit.
/// `clean`: keys before it are seen by every row of the tile, unchanged
/// (the mask adds 0 or is true; within the causal limit and T): their
/// scores need no mask.
__device__ __forceinline__ int64_t keySpan(const PrefillAttention &a,
                                           int64_t tile, int64_t b, int64_t h,
                                           int rows, int64_t q0,
                                           const int4 *spans, int64_t &begin,
                                           int64_t &clean) {
  begin = 0;
  if (spans) {
    // Written by prefillSpansKernel: plain loads.
    const int4 *p = spans + spanIndex(a, tile, b, h);
    int f = INT_MAX, l = 0, c = INT_MAX;
#pragma unroll
    for (int i = 0; i < kSpanParts; ++i) {
      const int4 r = p[i];
      c = min(c, r.z); // (a part with no row in the tile: INT_MAX)
      if (r.y > r.x) {
        f = min(f, r.x);
        l = max(l, r.y);
      }
    }
    clean = c;
    begin = f == INT_MAX ? 0 : f;
    return f == INT_MAX ? 0 : l;
  }
  int64_t end = a.T;
  if (a.causal && q0 + rows + a.T - a.Sq < end)
    end = q0 + rows + a.T - a.Sq; // (no tile at all when it is not positive)
  // The first row's causal limit.
  clean = a.causal && q0 + 1 + a.T - a.Sq < a.T ? q0 + 1 + a.T - a.Sq : a.T;
  return end;
}

template <int DMax>
__global__ void __launch_bounds__(kThreads)
    prefillAttentionKernel(PrefillAttention a, int D4, const int4 *spans) {
  pdlTrigger();
  constexpr int C = DMax / 8; // output columns a thread
  extern __shared__ float4 smem4[];
  float *smem = reinterpret_cast<float *>(smem4);
  const int ld = D4 + 4;
  constexpr int ldp = kKeys + 4;
  float *Qs = smem;             // [kRows][ld]
  float *Ks = Qs + kRows * ld;  // [kKeys][ld]
  float *Vs = Ks + kKeys * ld;  // [kKeys][DMax]
  float *Ps = Vs + kKeys * DMax; // [kRows][ldp]
  const int D = int(a.D), Dv = int(a.Dv);
  const int64_t bh = blockIdx.x, b = bh / a.Hq, h = bh % a.Hq;
  const int64_t hk = h / (a.Hq / a.Hk);
  const int64_t tile = lastTilesFirst();
  const int64_t q0 = tile * kRows;
  const int rows = a.Sq - q0 < kRows ? int(a.Sq - q0) : kRows;
  // Activations written by earlier kernels: plain loads (DeviceMath.cuh).
  // Rows qStep (keys kStep, values vStep) elements apart.
  const float *q = a.q + headRow(a.tokenMajor, b, h, q0, a.Hq, a.Sq) * D;
  const int64_t qStep = a.tokenMajor ? a.Hq * D : D;
  const float *key = a.k + headRow(a.kvTokenMajor, b, hk, 0, a.Hk, a.T) * D;
  const float *val = a.v + headRow(a.kvTokenMajor, b, hk, 0, a.Hk, a.T) * Dv;
  const int64_t kStep = a.kvTokenMajor ? a.Hk * D : D,
                vStep = a.kvTokenMajor ? a.Hk * Dv : Dv;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int tk = lane & 7, tq = warp * 4 + (lane >> 3);
  for (int r = warp; r < kRows; r += kThreads / 32)
    for (int d = lane; d < D4; d += 32)
      Qs[r * ld + d] = r < rows && d < D ? q[r * qStep + d] : 0.0f;

  float o[4][C], m[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c)
      o[i][c] = 0.0f;
  }
  int64_t kBegin = 0, kClean = 0,
          kEnd = keySpan(a, tile, b, h, rows, q0, spans, kBegin, kClean);
  for (int64_t k0 = kBegin; k0 < kEnd; k0 += kKeys) {
    const int keys = a.T - k0 < kKeys ? int(a.T - k0) : kKeys;
    __syncthreads(); // the last tile's K, V and P are consumed
    for (int j = warp; j < kKeys; j += kThreads / 32) {
      for (int d = lane; d < D4; d += 32)
        Ks[j * ld + d] = j < keys && d < D ? key[(k0 + j) * kStep + d] : 0.0f;
      for (int c = lane; c < DMax; c += 32)
        Vs[j * DMax + c] =
            j < keys && c < Dv ? val[(k0 + j) * vStep + c] : 0.0f;
    }
    __syncthreads();

    // Scores of rows tq + 16 i, keys tk + 8 j.
    float s[4][8];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        s[i][j] = 0.0f;
    for (int d = 0; d < D4; d += 4) {
      float4 qv[4], kv[8];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        qv[i] = *reinterpret_cast<const float4 *>(Qs + (tq + 16 * i) * ld + d);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        kv[j] = *reinterpret_cast<const float4 *>(Ks + (tk + 8 * j) * ld + d);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          s[i][j] = fmaf(qv[i].x, kv[j].x, s[i][j]);
          s[i][j] = fmaf(qv[i].y, kv[j].y, s[i][j]);
          s[i][j] = fmaf(qv[i].z, kv[j].z, s[i][j]);
          s[i][j] = fmaf(qv[i].w, kv[j].w, s[i][j]);
        }
    }

    // Online softmax: scale, mask, the rows' new maxima, P into shared
    // memory, the rows' sums and the output rescaled. `score(i, j, dot)`:
    // the score of row tq + 16 i and key tk + 8 j.
    auto softmax = [&](auto score) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = tq + 16 * i;
        float tileMax = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float x = score(i, j, s[i][j]);
          s[i][j] = x;
          tileMax = fmaxf(tileMax, x);
        }
        tileMax = fmaxf(tileMax, __shfl_xor_sync(~0u, tileMax, 1));
        tileMax = fmaxf(tileMax, __shfl_xor_sync(~0u, tileMax, 2));
        tileMax = fmaxf(tileMax, __shfl_xor_sync(~0u, tileMax, 4));
        const float mNew = fmaxf(m[i], tileMax);
        // While no key of the row has been visible, nothing is added.
        const bool none = mNew == -INFINITY;
        const float alpha = none ? 1.0f : expf(m[i] - mNew);
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float p = none ? 0.0f : expf(s[i][j] - mNew);
          Ps[r * ldp + tk + 8 * j] = p;
          sum += p;
        }
        sum += __shfl_xor_sync(~0u, sum, 1);
        sum += __shfl_xor_sync(~0u, sum, 2);
        sum += __shfl_xor_sync(~0u, sum, 4);
        l[i] = l[i] * alpha + sum;
#pragma unroll
        for (int c = 0; c < C; ++c)
          o[i][c] *= alpha;
        m[i] = mNew;
      }
    };
    // A tile every row of the block sees whole and unmasked only scales
    // its scores (as the tensor-core kernel's).
    if (rows == kRows && k0 + kKeys <= kClean)
      softmax([&](int, int, float dot) { return dot * a.scale; });
    else
      softmax([&](int i, int j, float dot) {
        const int r = tq + 16 * i;
        return maskedScore(a, dot, a.scale, 1.0f, int(k0) + tk + 8 * j,
                           lastKey(a, r, rows, q0 + r),
                           maskRow(a, b, h, q0 + r));
      });
    __syncthreads();

    // o += P V over the tile's keys (4 at a time; past `keys`, P is 0).
    const int keys4 = (keys + 3) & ~3;
    for (int j = 0; j < keys4; j += 4) {
      float4 pv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        pv[i] = *reinterpret_cast<const float4 *>(Ps + (tq + 16 * i) * ldp + j);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        float vv[C];
#pragma unroll
        for (int c = 0; c < C; c += 4) {
          const float4 v4 = *reinterpret_cast<const float4 *>(
              Vs + (j + jj) * DMax + tk * C + c);
          vv[c] = v4.x;
          vv[c + 1] = v4.y;
          vv[c + 2] = v4.z;
          vv[c + 3] = v4.w;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float p = jj == 0   ? pv[i].x
                          : jj == 1 ? pv[i].y
                          : jj == 2 ? pv[i].z
                                    : pv[i].w;
#pragma unroll
          for (int c = 0; c < C; ++c)
            o[i][c] = fmaf(p, vv[c], o[i][c]);
        }
      }
    }
  }

  // A row that saw no key is 0; a NaN sum stays NaN.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = tq + 16 * i;
    if (r >= rows)
      continue;
    const float inv = l[i] == 0.0f ? 0.0f : 1.0f / l[i];
    float *orow =
        a.out + headRow(a.tokenMajor, b, h, q0 + r, a.Hq, a.Sq) * Dv;
#pragma unroll
    for (int c = 0; c < C; ++c)
      if (tk * C + c < Dv)
        orow[tk * C + c] = o[i][c] * inv;
  }
}

/// `rows` rows of `width` floats from `src` (a row `step` apart) into
/// kRows rows of E at `dst` (a row `ld` apart): DMax columns, zeros past
/// the rows and the width; float4 loads where `quads`. Every load is
/// issued before the first store, so that their latencies overlap.
template <typename E, int DMax>
__device__ __forceinline__ void stageRows(E *dst, int ld, const float *src,
                                          int64_t step, int rows, int width,
                                          bool quads) {
  constexpr int Q = DMax / 4, N = kRows * Q / kThreads;
  static_assert(kRows * Q % kThreads == 0, "whole loads a thread");
  float4 v[N];
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const int i = threadIdx.x + n * kThreads, r = i / Q, c = (i % Q) * 4;
    v[n] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < rows && c < width) {
      const float *p = src + r * step + c;
      if (quads) {
        v[n] = *reinterpret_cast<const float4 *>(p);
      } else {
        v[n].x = p[0];
        v[n].y = c + 1 < width ? p[1] : 0.0f;
        v[n].z = c + 2 < width ? p[2] : 0.0f;
        v[n].w = c + 3 < width ? p[3] : 0.0f;
      }
    }
  }
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const int i = threadIdx.x + n * kThreads, r = i / Q, c = (i % Q) * 4;
    *reinterpret_cast<uint2 *>(dst + r * ld + c) =
        make_uint2(pack2<E>(v[n].x, v[n].y), pack2<E>(v[n].z, v[n].w));
  }
}

/// Rows of `width` floats rounded to E, each padded with zeros to
/// `padded` (a multiple of 8) elements: the keys and values of a
/// tensor-core prompt attention, rounded once for all the query tiles that
/// read them and copied from there into shared memory 16 bytes at a time.
/// Block row blockIdx.y is head bh (of H) of batch bh / H: its T rows, from
/// x [B, H, T, width], or [B, T, H, width] with `tokenMajor`, into y [B, H,
/// T, padded], and as they are in fp32 into `copy` [B, H, T, width] where
/// that is not null (a prompt's present). I: the index type of the T x
/// padded / 8 pieces of a head.
template <typename E, typename I>
__global__ void roundRowsKernel(const float *x, I T, int64_t H, int width,
                                int padded, bool quads, E *y, bool tokenMajor,
                                float *copy) {
  pdlTrigger();
  const int64_t bh = blockIdx.y;
  // Row j of the head: x + (first + j * step) * width.
  const int64_t first = tokenMajor ? headRow(true, bh / H, bh % H, 0, H, T)
                                   : bh * int64_t(T),
                step = tokenMajor ? H : 1;
  const I pieces = I(padded / 8), n = T * pieces;
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n;
       i += I(gridDim.x) * blockDim.x) {
    const I j = i / pieces;
    const int c = int(i - j * pieces) * 8;
    const float *p = x + (first + int64_t(j) * step) * width + c;
    float f[8];
    const bool whole = quads && c + 8 <= width;
    if (whole) {
      const float4 lo = reinterpret_cast<const float4 *>(p)[0],
                   hi = reinterpret_cast<const float4 *>(p)[1];
      f[0] = lo.x, f[1] = lo.y, f[2] = lo.z, f[3] = lo.w;
      f[4] = hi.x, f[5] = hi.y, f[6] = hi.z, f[7] = hi.w;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        f[e] = c + e < width ? p[e] : 0.0f;
    }
    const int64_t r = bh * int64_t(T) + j;
    *reinterpret_cast<uint4 *>(y + r * padded + c) =
        make_uint4(pack2<E>(f[0], f[1]), pack2<E>(f[2], f[3]),
                   pack2<E>(f[4], f[5]), pack2<E>(f[6], f[7]));
    if (copy) {
      float *q = copy + r * width + c;
      if (whole) {
        reinterpret_cast<float4 *>(q)[0] = make_float4(f[0], f[1], f[2], f[3]);
        reinterpret_cast<float4 *>(q)[1] = make_float4(f[4], f[5], f[6], f[7]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (c + e < width)
            q[e] = f[e];
      }
    }
  }
}

/// Head dims padded to whole 16-byte pieces of 16-bit elements.
inline int paddedDim(int64_t d) { return int((d + 7) / 8 * 8); }

/// Whether `p` allows float4 loads.
inline bool aligned16(const float *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

constexpr float kLog2e = 1.4426950408889634f;

/// One tile's online softmax step over a warp's mma accumulators: s holds
/// the 16 x 64 scores of rows g (values 0, 1) and g + 8 (2, 3), g = lane /
/// 4, keys 8 j + 2 (lane % 4) + e; `score(hr, key, dot)` gives a score in
/// units of log2 e (-inf where hidden). On return s holds the weights
/// exp2(score - m) of P; m, l and o are the rows' maxima, this thread's
/// part of their sums, and the output rescaled to the new maxima.
template <int NO, typename Score>
__device__ __forceinline__ void onlineSoftmax(float (&s)[8][4], float (&m)[2],
                                              float (&l)[2], float (&o)[NO][4],
                                              Score score) {
  const int c2 = 2 * (threadIdx.x & 3);
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float tileMax = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float x = score(hr, 8 * j + c2 + e, s[j][2 * hr + e]);
        s[j][2 * hr + e] = x;
        tileMax = fmaxf(tileMax, x);
      }
    tileMax = fmaxf(tileMax, __shfl_xor_sync(~0u, tileMax, 1));
    tileMax = fmaxf(tileMax, __shfl_xor_sync(~0u, tileMax, 2));
    const float mNew = fmaxf(m[hr], tileMax);
    // While no key of the row has been visible, nothing is added.
    const bool none = mNew == -INFINITY;
    const float alpha = none ? 1.0f : fastExp2(m[hr] - mNew);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = none ? 0.0f : fastExp2(s[j][2 * hr + e] - mNew);
        s[j][2 * hr + e] = p;
        sum += p;
      }
    l[hr] = l[hr] * alpha + sum;
#pragma unroll
    for (int j = 0; j < NO; ++j) {
      o[j][2 * hr] *= alpha;
      o[j][2 * hr + 1] *= alpha;
    }
    m[hr] = mNew;
  }
}

/// Blocks an SM holds of the tensor-core kernel: 3 of 64-wide heads (at
/// most 168 registers), 2 of 128-wide.
constexpr int mmaBlocksPerSM(int DMax) { return DMax <= 64 ? 3 : 2; }

template <typename E, int DMax>
__global__ void __launch_bounds__(kThreads, mmaBlocksPerSM(DMax))
    prefillAttentionMmaKernel(PrefillAttention a, bool quads,
                              const int4 *spans, const E *kh, const E *vh,
                              int dp, int dvp) {
  pdlTrigger();
  constexpr int LD = DMax + 8; // E a staged row: ldmatrix's 8 rows in
                               // distinct banks
  constexpr int KS = DMax / 16, NO = DMax / 8;
  extern __shared__ float4 smem4[];
  E *Qs = reinterpret_cast<E *>(smem4); // [kRows][LD]
  E *Ks = Qs + kRows * LD;              // [2][kKeys][LD]: double buffered
  E *Vs = Ks + 2 * kKeys * LD;          // [2][kKeys][LD]
  const int D = int(a.D), Dv = int(a.Dv);
  const int64_t bh = blockIdx.x, b = bh / a.Hq, h = bh % a.Hq;
  const int64_t kvh = b * a.Hk + h / (a.Hq / a.Hk);
  const int64_t tile = lastTilesFirst();
  const int64_t q0 = tile * kRows;
  const int rows = a.Sq - q0 < kRows ? int(a.Sq - q0) : kRows;
  const E *key = kh + kvh * a.T * dp;
  const E *val = vh + kvh * a.T * dvp;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, c2 = 2 * (lane & 3);
  // The keys' columns from dp to DMax, which the scores read against q's
  // zeros and no copy writes: zeros (not whatever shared memory held).
  for (int i = threadIdx.x; i < 2 * kKeys * (DMax - dp); i += kThreads)
    Ks[(i / (DMax - dp)) * LD + dp + i % (DMax - dp)] = E(0.0f);
  // Activations written by earlier kernels: plain loads (DeviceMath.cuh).
  stageRows<E, DMax>(Qs, LD,
                     a.q + headRow(a.tokenMajor, b, h, q0, a.Hq, a.Sq) * D,
                     a.tokenMajor ? a.Hq * D : D, rows, D, quads);
  // A tile of keys and values from the rounded rows into buffer `buf`,
  // rows past T zero-filled; one commit group.
  auto loadTile = [&](int64_t k0, int buf) {
    const int keys = a.T - k0 < kKeys ? int(a.T - k0) : kKeys;
    // Rows k0.. of `src` (`width` elements apart) into `dst`: DMax / 8
    // pieces of 16 bytes a row (a constant divisor), those past the width
    // skipped.
    auto copy = [&](E *dst, const E *src, int width) {
      constexpr int P = DMax / 8;
      static_assert(kKeys * P % kThreads == 0, "whole pieces a thread");
#pragma unroll
      for (int n = 0; n < kKeys * P / kThreads; ++n) {
        const int i = threadIdx.x + n * kThreads, r = i / P, c = (i % P) * 8;
        const bool in = r < keys;
        if (c < width)
          cpAsync16(dst + r * LD + c, in ? src + (k0 + r) * width + c : src,
                    in ? 16 : 0);
      }
    };
    copy(Ks + buf * kKeys * LD, key, dp);
    copy(Vs + buf * kKeys * LD, val, dvp);
    cpAsyncCommit();
  };
  __syncthreads();
  unsigned qf[KS][4];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk)
    ldmatrixX4(qf[kk], Qs + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) *
                                LD +
                            kk * 16 + (lane >> 4) * 8);

  float o[NO][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < NO; ++j)
    o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  int64_t kBegin = 0, kClean = 0,
          kEnd = keySpan(a, tile, b, h, rows, q0, spans, kBegin, kClean);
  const float scale2 = a.scale * kLog2e;
  // Tile i + 1 is copied while tile i is computed.
  if (kBegin < kEnd)
    loadTile(kBegin, 0);
  int buf = 0;
  for (int64_t k0 = kBegin; k0 < kEnd; k0 += kKeys, buf ^= 1) {
    if (k0 + kKeys < kEnd) {
      loadTile(k0 + kKeys, buf ^ 1); // consumed before the last barrier
      cpAsyncWait<1>();
    } else {
      cpAsyncWait<0>();
    }
    __syncthreads(); // every thread's copies of tile `buf` have landed
    const E *Kt = Ks + buf * kKeys * LD, *Vt = Vs + buf * kKeys * LD;

    // Scores: the warp's 16 rows against the tile's 64 keys, 8 at a time.
    float s[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KS; kk += 2) {
        unsigned kb[4];
        ldmatrixX4(kb, Kt + (8 * j + (lane & 7)) * LD + kk * 16 +
                           (lane >> 3) * 8);
        mma16816<E>(s[j], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], kb[0],
                    kb[1]);
        mma16816<E>(s[j], qf[kk + 1][0], qf[kk + 1][1], qf[kk + 1][2],
                    qf[kk + 1][3], kb[2], kb[3]);
      }
    }

    // Online softmax of rows g (values 0, 1) and g + 8 (2, 3), in units
    // of log2 e (exp2 is one instruction). A tile every row of the block
    // sees whole and unmasked (keySpan's `clean`; below the diagonal of a
    // causal mask) only scales its scores: the branch is taken once a
    // tile, outside the scores' loops.
    if (rows == kRows && k0 + kKeys <= kClean)
      onlineSoftmax(s, m, l, o, [&](int, int, float dot) { return dot * scale2; });
    else
      onlineSoftmax(s, m, l, o, [&](int hr, int key, float dot) {
        const int r = warp * 16 + g + 8 * hr;
        return maskedScore(a, dot, scale2, kLog2e, int(k0) + key,
                           lastKey(a, r, rows, q0 + r),
                           maskRow(a, b, h, q0 + r));
      });

    // o += P V: P's accumulators of keys 16 kk .. 16 kk + 15 are the A
    // fragment of that step; V's rows transposed are its B fragments.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const unsigned p0 = pack2<E>(s[2 * kk][0], s[2 * kk][1]),
                     p1 = pack2<E>(s[2 * kk][2], s[2 * kk][3]),
                     p2 = pack2<E>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                     p3 = pack2<E>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int j = 0; j < NO; j += 2) {
        unsigned vb[4];
        ldmatrixX4T(vb, Vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) *
                                 LD +
                             j * 8 + (lane >> 4) * 8);
        mma16816<E>(o[j], p0, p1, p2, p3, vb[0], vb[1]);
        mma16816<E>(o[j + 1], p0, p1, p2, p3, vb[2], vb[3]);
      }
    }
    __syncthreads(); // tile `buf` is consumed before it is copied over
  }

  // A row that saw no key is 0; a NaN sum stays NaN.
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float sum = l[hr];
    sum += __shfl_xor_sync(~0u, sum, 1);
    sum += __shfl_xor_sync(~0u, sum, 2);
    const int r = warp * 16 + g + 8 * hr;
    if (r >= rows)
      continue;
    const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
    float *orow =
        a.out + headRow(a.tokenMajor, b, h, q0 + r, a.Hq, a.Sq) * Dv;
#pragma unroll
    for (int j = 0; j < NO; ++j) {
      const int col = 8 * j + c2;
      if (col < Dv)
        orow[col] = o[j][2 * hr] * inv;
      if (col + 1 < Dv)
        orow[col + 1] = o[j][2 * hr + 1] * inv;
    }
  }
}

/// Allows Kernel `bytes` of dynamic shared memory, the most any of its
/// launches takes: once a process (as the PIT kernels, on the device the
/// runtime uses), not at every launch.
template <auto Kernel> cudaError_t allowSharedOnce(size_t bytes) {
  static const cudaError_t e = cudaFuncSetAttribute(
      Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  return e;
}

template <int DMax>
cudaError_t launch(const PrefillAttention &a, const int4 *spans,
                   cudaStream_t stream) {
  const int D4 = int((a.D + 3) / 4 * 4);
  const size_t smem = sizeof(float) * size_t(sharedFloats<DMax>(D4));
  if (cudaError_t e = allowSharedOnce<prefillAttentionKernel<DMax>>(
          sizeof(float) * size_t(sharedFloats<DMax>(DMax)));
      e != cudaSuccess)
    return e;
  const dim3 grid(unsigned(a.B * a.Hq), unsigned(queryTiles(a)));
  prefillAttentionKernel<DMax><<<grid, kThreads, smem, stream>>>(a, D4, spans);
  return cudaGetLastError();
}

template <typename E, int DMax>
cudaError_t launchMma(const PrefillAttention &a, const int4 *spans,
                      const E *kh, const E *vh, cudaStream_t stream) {
  // Q, and K and V twice.
  const size_t smem = sizeof(E) * size_t((kRows + 4 * kKeys) * (DMax + 8));
  if (cudaError_t e = allowSharedOnce<prefillAttentionMmaKernel<E, DMax>>(smem);
      e != cudaSuccess)
    return e;
  // float4 loads of q's rows (the keys and values come rounded, through
  // cp.async): every row 16-byte aligned.
  const bool quads = a.D % 4 == 0 && aligned16(a.q);
  const dim3 grid(unsigned(a.B * a.Hq), unsigned(queryTiles(a)));
  prefillAttentionMmaKernel<E, DMax><<<grid, kThreads, smem, stream>>>(
      a, quads, spans, kh, vh, paddedDim(a.D), paddedDim(a.Dv));
  return cudaGetLastError();
}

/// The keys and values rounded to E (roundRowsKernel) into `scratch`,
/// then the attention over them.
template <typename E>
cudaError_t launchMma(const PrefillAttention &a, const int4 *spans,
                      void *scratch, cudaStream_t stream) {
  const int dp = paddedDim(a.D), dvp = paddedDim(a.Dv);
  const int64_t rows = a.B * a.Hk * a.T;
  E *kh = static_cast<E *>(scratch);
  E *vh = kh + rows * dp;
  // A block row a head (B * Hk <= B * Hq <= 65535).
  auto round = [&](const float *x, int width, int padded, E *y, float *copy) {
    const int64_t n = a.T * (padded / 8);
    const dim3 grid(unsigned(std::min<int64_t>((n + 255) / 256, 4096)),
                    unsigned(a.B * a.Hk));
    const bool quads = width % 4 == 0 && aligned16(x) &&
                       (!copy || aligned16(copy));
    if (n <= INT_MAX)
      roundRowsKernel<E, uint32_t><<<grid, 256, 0, stream>>>(
          x, uint32_t(a.T), a.Hk, width, padded, quads, y, a.kvTokenMajor,
          copy);
    else
      roundRowsKernel<E, int64_t><<<grid, 256, 0, stream>>>(
          x, a.T, a.Hk, width, padded, quads, y, a.kvTokenMajor, copy);
    return cudaGetLastError();
  };
  if (rows > 0) {
    if (cudaError_t e = round(a.k, int(a.D), dp, kh, a.kCopy);
        e != cudaSuccess)
      return e;
    if (cudaError_t e = round(a.v, int(a.Dv), dvp, vh, a.vCopy);
        e != cudaSuccess)
      return e;
  }
  if (a.D <= 64 && a.Dv <= 64)
    return launchMma<E, 64>(a, spans, kh, vh, stream);
  return launchMma<E, 128>(a, spans, kh, vh, stream);
}

} // namespace

bool prefillAttentionSupported(int64_t D, int64_t Dv) {
  return D >= 1 && D <= 128 && Dv >= 1 && Dv <= 128;
}

namespace {
/// Bytes of the key spans, rounded up to a multiple of 256 (the rounded
/// keys and values follow them).
size_t spanBytes(const PrefillAttention &a) {
  if (!a.maskF && !a.maskB)
    return 0;
  const size_t bytes =
      sizeof(int4) * size_t(maskHeads(a) * queryTiles(a) * kSpanParts);
  return (bytes + 255) / 256 * 256;
}
} // namespace

size_t prefillAttentionScratchBytes(const PrefillAttention &a,
                                    PromptMath math) {
  size_t bytes = spanBytes(a);
  if (math != PromptMath::f32 && prefillAttentionSupported(a.D, a.Dv))
    bytes += 2 * size_t(a.B * a.Hk * a.T) *
             size_t(paddedDim(a.D) + paddedDim(a.Dv));
  return bytes;
}

cudaError_t prefillAttention(const PrefillAttention &a, PromptMath math,
                             void *scratch, cudaStream_t stream) {
  if (!prefillAttentionSupported(a.D, a.Dv) || a.Hk <= 0 || a.Hq % a.Hk != 0 ||
      a.B * a.Hq > 65535 || a.Sq < 0 || a.T < 0 || a.T > INT_MAX ||
      queryTiles(a) > 65535 ||
      (prefillAttentionScratchBytes(a, math) && !scratch) ||
      ((a.kCopy || a.vCopy) && math == PromptMath::f32))
    return cudaErrorInvalidValue;
  if (a.B * a.Hq * a.Sq == 0 || a.Dv == 0)
    return cudaSuccess;
  int4 *spans = nullptr;
  if (a.maskF || a.maskB) {
    spans = static_cast<int4 *>(scratch);
    const dim3 grid(unsigned(queryTiles(a) * kSpanParts),
                    unsigned(maskHeads(a)));
    prefillSpansKernel<<<grid, 32 * kSpanRows, 0, stream>>>(a, spans);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      return e;
  }
  void *rounded = static_cast<char *>(scratch) + spanBytes(a);
  switch (math) {
  case PromptMath::f16:
    return launchMma<__half>(a, spans, rounded, stream);
  case PromptMath::bf16:
    return launchMma<__nv_bfloat16>(a, spans, rounded, stream);
  case PromptMath::f32:
    break;
  }
  if (a.D <= 64 && a.Dv <= 64)
    return launch<64>(a, spans, stream);
  return launch<128>(a, spans, stream);
}

} // namespace sparsec::rt::cuda
