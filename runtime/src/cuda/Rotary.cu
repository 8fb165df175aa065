//===- Rotary.cu - rotate-half rotary position embedding --------*- CUDA -*-===//
//
// Part of the sparsec project.
//
// cuda::rotary: threads along a row's first half, rows along y, so each
// thread finds its cos/sin row once (the row's broadcast offset over the
// leading dims of more than one element) and then rotates element pairs
// (i, i + h) in a stride loop, four at a time in 16-byte loads where the
// rows allow, reading x once. The operands' checks are the x86 op's (rotaryStrides).
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

/// V = 4: four pairs a thread in float4 loads and stores (a half row of
/// whole 16-byte pieces, cos/sin rows of the full width); V = 1 otherwise.
template <int V>
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
  for (int64_t i = threadIdx.x * int64_t(V); i < h; i += blockDim.x * V) {
    if constexpr (V == 4) {
      auto at = [](const float *p) {
        return *reinterpret_cast<const float4 *>(p);
      };
      const float4 lo = at(xr + i), hi = at(xr + i + h), c0 = at(c + i),
                   c1 = at(c + i + h), s0 = at(s + i), s1 = at(s + i + h);
      *reinterpret_cast<float4 *>(yr + i) =
          make_float4(lo.x * c0.x - hi.x * s0.x, lo.y * c0.y - hi.y * s0.y,
                      lo.z * c0.z - hi.z * s0.z, lo.w * c0.w - hi.w * s0.w);
      *reinterpret_cast<float4 *>(yr + i + h) =
          make_float4(hi.x * c1.x + lo.x * s1.x, hi.y * c1.y + lo.y * s1.y,
                      hi.z * c1.z + lo.z * s1.z, hi.w * c1.w + lo.w * s1.w);
    } else {
      const float lo = xr[i], hi = xr[i + h];
      yr[i] = lo * c[i * cs] - hi * s[i * cs];
      yr[i + h] = hi * c[(i + h) * cs] + lo * s[(i + h) * cs];
    }
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
  // Leading dims of size 1 cost each row a division and add nothing.
  for (int k = 0; k < x.rank - 1; ++k)
    if (x.shape[k] != 1) {
      g.shape[g.lead] = x.shape[k];
      g.stride[g.lead] = strides[k];
      ++g.lead;
    }
  g.cs = strides[x.rank - 1];
  g.h = D / 2;
  g.rows = D == 0 ? 0 : x.numel() / D;
  if (g.rows == 0 || !d.launching())
    return true;
  auto aligned = [](const void *p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
  };
  // Rows and table rows start on 16-byte pieces when the half width and
  // the table's strides are multiples of 4 floats.
  bool vec = g.h % 4 == 0 && g.cs == 1 && aligned(x.data) &&
             aligned(cos.data) && aligned(sin.data) && aligned(r.data);
  for (int k = 0; k < g.lead && vec; ++k)
    vec = g.stride[k] % 4 == 0;
  const int v = vec ? 4 : 1;
  // Threads across a row (the smallest power of two covering its pieces,
  // at most a block), the rest of a 256-thread block down the rows.
  int tx = 1;
  while (tx < kBlock && tx * v < g.h)
    tx *= 2;
  const int ty = kBlock / tx;
  const int64_t blocks = (g.rows + ty - 1) / ty;
  auto kernel = vec ? rotaryKernel<4> : rotaryKernel<1>;
  return check(ctx,
               launchKernel(kernel, dim3(unsigned(blocks)),
                            dim3(unsigned(tx), unsigned(ty)), 0, d.stream,
                            d.earlySmall, g, x.as<float>(), cos.as<float>(),
                            sin.as<float>(), r.as<float>()),
               "rotary");
}

} // namespace sparsec::rt::cuda
