//===- Rotary.cu - rotate-half rotary position embedding --------*- CUDA -*-===//
//
// Part of the sparsec project.
//
// cuda::rotary: threads along a row's first half, rows along y, so each
// thread finds its cos/sin row once (the row's broadcast offset over the
// leading dims) and then rotates element pairs (i, i + h) in a stride loop,
// reading x once. The operands' checks are the x86 op's (rotaryStrides).
//
//===----------------------------------------------------------------------===//

#include "Device.h"
#include "DeviceMath.cuh"
#include "sparsec/rt/cuda/Ops.h"

#include "../cpu/Common.h"

#include <algorithm>

namespace sparsec::rt::cuda {

using ops::detail::rotaryStrides;

namespace {

/// Leading dims of x (all but the last) and cos/sin's strides over them.
struct RotaryRows {
  int lead = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  int64_t rows = 0, h = 0;
  int64_t cs = 0; // cos/sin's last-dim stride: 1, or 0 when broadcast
};

__global__ void rotaryKernel(RotaryRows g, const float *x, const float *cos,
                             const float *sin, float *y) {
  pdlTrigger();
  pdlWait(); // launched early (small kernels): x is the previous op's
  const int64_t row = blockIdx.x * int64_t(blockDim.y) + threadIdx.y;
  if (row >= g.rows)
    return;
  int64_t t = 0, rem = row;
  for (int d = g.lead - 1; d >= 0; --d) {
    t += (rem % g.shape[d]) * g.stride[d];
    rem /= g.shape[d];
  }
  const int64_t h = g.h, cs = g.cs;
  const float *xr = x + row * 2 * h, *c = cos + t, *s = sin + t;
  float *yr = y + row * 2 * h;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    const float lo = xr[i], hi = xr[i + h];
    yr[i] = lo * c[i * cs] - hi * s[i * cs];
    yr[i + h] = hi * c[(i + h) * cs] + lo * s[(i + h) * cs];
  }
}

} // namespace

bool rotary(Context &ctx, const Tensor &x, const Tensor &cos, const Tensor &sin,
            int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  RotaryRows g;
  int64_t strides[kMaxRank];
  if (!requireF32(ctx, "rotary", "input", x) ||
      !rotaryStrides(ctx, x, cos, sin, strides))
    return false;
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, DType::f32, x.rank, x.shape))
    return false;
  out = r;
  const int64_t D = x.shape[x.rank - 1];
  g.lead = x.rank - 1;
  for (int k = 0; k < g.lead; ++k) {
    g.shape[k] = x.shape[k];
    g.stride[k] = strides[k];
  }
  g.cs = strides[g.lead];
  g.h = D / 2;
  g.rows = D == 0 ? 0 : x.numel() / D;
  if (g.rows == 0 || !d.launching())
    return true;
  // A warp (or what the half row needs, rounded to a warp) across a row,
  // the rest of a 256-thread block down the rows.
  const int tx = int(std::min<int64_t>(kBlock, (g.h + 31) / 32 * 32));
  const int ty = kBlock / tx;
  const int64_t blocks = (g.rows + ty - 1) / ty;
  return check(ctx,
               launchKernel(rotaryKernel, dim3(unsigned(blocks)),
                            dim3(unsigned(tx), unsigned(ty)), 0, d.stream,
                            d.earlySmall, g, x.as<float>(), cos.as<float>(),
                            sin.as<float>(), r.as<float>()),
               "rotary");
}

} // namespace sparsec::rt::cuda
