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
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/Attention.h"

#include "DeviceMath.cuh"

#include <algorithm>

namespace sparsec::rt::cuda {
namespace {

constexpr int kRows = 64, kKeys = 64, kThreads = 128;

/// Floats of shared memory for head dims D (rounded up to 4) and DMax.
template <int DMax> int64_t sharedFloats(int64_t D4) {
  return 2 * kRows * (D4 + 4) + kKeys * DMax + kRows * (kKeys + 4);
}

template <int DMax>
__global__ void __launch_bounds__(kThreads)
    prefillAttentionKernel(PrefillAttention a, int D4) {
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
  const int64_t bh = blockIdx.y, b = bh / a.Hq, h = bh % a.Hq;
  const int64_t kvh = b * a.Hk + h / (a.Hq / a.Hk);
  const int64_t q0 = int64_t(blockIdx.x) * kRows;
  const int rows = a.Sq - q0 < kRows ? int(a.Sq - q0) : kRows;
  // Activations written by earlier kernels: plain loads (DeviceMath.cuh).
  const float *q = a.q + (bh * a.Sq + q0) * D;
  const float *key = a.k + kvh * a.T * D;
  const float *val = a.v + kvh * a.T * Dv;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int tk = lane & 7, tq = warp * 4 + (lane >> 3);
  for (int r = warp; r < kRows; r += kThreads / 32)
    for (int d = lane; d < D4; d += 32)
      Qs[r * ld + d] = r < rows && d < D ? q[int64_t(r) * D + d] : 0.0f;

  float o[4][C], m[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c)
      o[i][c] = 0.0f;
  }
  // Query row i is at position i + shift of the keys.
  const int64_t shift = a.T - a.Sq;
  int64_t kEnd = a.T;
  if (a.causal && q0 + rows + shift < kEnd)
    kEnd = q0 + rows + shift; // (no tile at all when it is not positive)
  for (int64_t k0 = 0; k0 < kEnd; k0 += kKeys) {
    const int keys = a.T - k0 < kKeys ? int(a.T - k0) : kKeys;
    __syncthreads(); // the last tile's K, V and P are consumed
    for (int j = warp; j < kKeys; j += kThreads / 32) {
      for (int d = lane; d < D4; d += 32)
        Ks[j * ld + d] = j < keys && d < D ? key[(k0 + j) * D + d] : 0.0f;
      for (int c = lane; c < DMax; c += 32)
        Vs[j * DMax + c] = j < keys && c < Dv ? val[(k0 + j) * Dv + c] : 0.0f;
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
    // memory, the rows' sums and the output rescaled.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = tq + 16 * i;
      const int64_t qi = q0 + r;
      const int64_t mRow = b * a.mStr[0] + h * a.mStr[1] + qi * a.mStr[2];
      float tileMax = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int64_t kj = k0 + tk + 8 * j;
        float x = s[i][j] * a.scale;
        if (r >= rows || kj >= a.T || (a.causal && kj > qi + shift))
          x = -INFINITY;
        else if (a.maskF)
          x += a.maskF[mRow + kj * a.mStr[3]];
        else if (a.maskB && !a.maskB[mRow + kj * a.mStr[3]])
          x = -INFINITY;
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
    float *orow = a.out + (bh * a.Sq + q0 + r) * Dv;
#pragma unroll
    for (int c = 0; c < C; ++c)
      if (tk * C + c < Dv)
        orow[tk * C + c] = o[i][c] * inv;
  }
}

template <int DMax>
cudaError_t launch(const PrefillAttention &a, cudaStream_t stream) {
  const int D4 = int((a.D + 3) / 4 * 4);
  const size_t smem = sizeof(float) * size_t(sharedFloats<DMax>(D4));
  cudaError_t e = cudaFuncSetAttribute(
      prefillAttentionKernel<DMax>,
      cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess)
    return e;
  const dim3 grid(unsigned((a.Sq + kRows - 1) / kRows), unsigned(a.B * a.Hq));
  prefillAttentionKernel<DMax><<<grid, kThreads, smem, stream>>>(a, D4);
  return cudaGetLastError();
}

} // namespace

bool prefillAttentionSupported(int64_t D, int64_t Dv) {
  return D >= 1 && D <= 128 && Dv >= 1 && Dv <= 128;
}

cudaError_t prefillAttention(const PrefillAttention &a, cudaStream_t stream) {
  if (!prefillAttentionSupported(a.D, a.Dv) || a.Hk <= 0 || a.Hq % a.Hk != 0 ||
      a.B * a.Hq > 65535 || a.Sq < 0 || a.T < 0)
    return cudaErrorInvalidValue;
  if (a.B * a.Hq * a.Sq == 0 || a.Dv == 0)
    return cudaSuccess;
  if (a.D <= 64 && a.Dv <= 64)
    return launch<64>(a, stream);
  return launch<128>(a, stream);
}

} // namespace sparsec::rt::cuda
