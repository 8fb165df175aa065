//===- Conv.cu - convolution, batch norm, pooling, reductions ---*- CUDA -*-===//
//
// Part of the sparsec project.
//
// The CUDA runtime's ops for convolutional networks, float32 NCHW with 1 to
// 3 spatial dims (handled as 3-D with leading size-1 dims, the geometry and
// its checks shared with the x86 kernels through ConvGeometry.h):
//
//  * conv: a depthwise convolution (one input channel per group) directly:
//    a 2-D 3 x 3 one with stride 1 or 2 four adjacent outputs a thread, its
//    weights and input rows in registers, any other one thread an output; a
//    pointwise one without stride or padding as a
//    cuBLAS GEMM over the input in place; any other as im2col into a device
//    buffer ([C * kernel, P] per image) and a cuBLAS GEMM batched over the
//    images (one group) or the groups of an image. Weights [M/g, C/g *
//    kernel] are row-major, which cuBLAS reads as their transpose, so the
//    product needs no copy. The bias and activation run as one epilogue pass.
//    With float16 weights (--weights f16) the columns are float16 too (a
//    pointwise convolution's are its input, converted) and the GEMMs run on
//    tensor cores with fp32 accumulation; the depthwise kernel reads the
//    weights as float16.
//  * batch_norm: one elementwise pass, the activation fused.
//  * pool: one thread an output window; global pooling one warp a plane.
//  * reduce: over one block of adjacent axes (size-1 dims dropped): one
//    warp a row when the block is trailing, one thread an output otherwise.
//
//===----------------------------------------------------------------------===//

#include "Device.h"
#include "DeviceMath.cuh"
#include "sparsec/rt/cuda/Ops.h"

#include "../cpu/Common.h"
#include "../cpu/ConvGeometry.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace sparsec::rt::cuda {
namespace {

using ops::detail::Geometry;
using ops::detail::product;

/// Geometry in the index type the kernels compute with (32-bit where the
/// tensor sizes allow it: 64-bit divisions are several times slower).
template <typename I> struct Dims {
  I in[3], k[3], out[3], stride[3], padB[3], padE[3], dil[3];
  I P, S, kSize;
};

template <typename I> Dims<I> dimsOf(const Geometry &g) {
  Dims<I> d;
  for (int i = 0; i < 3; ++i) {
    d.in[i] = I(g.in[i]);
    d.k[i] = I(g.k[i]);
    d.out[i] = I(g.out[i]);
    d.stride[i] = I(g.stride[i]);
    d.padB[i] = I(g.padB[i]);
    d.padE[i] = I(g.padE[i]);
    d.dil[i] = I(g.dil[i]);
  }
  d.P = I(g.outSize());
  d.S = I(g.inSize());
  d.kSize = I(g.kSize());
  return d;
}

/// Whether every index a kernel over `elements` outputs computes fits 32
/// bits, the last grid-stride step included (blocksFor gives at most
/// 8 x 65535 blocks of kBlock threads: under 2^27 a step).
bool fits32(int64_t elements, int64_t inputElements) {
  static_assert(int64_t(8) * 65535 * kBlock < (int64_t(1) << 28));
  constexpr int64_t kLimit = (int64_t(1) << 31) - (int64_t(1) << 28);
  return elements < kLimit && inputElements < kLimit;
}

/// The coordinates of flat index i in a row-major [n0, n1, n2] grid (an
/// output position in `out`, a tap in `k`).
template <typename I>
__device__ __forceinline__ void unravel(I i, const I (&n)[3], I (&o)[3]) {
  o[2] = i % n[2];
  I t = i / n[2];
  o[1] = t % n[1];
  o[0] = t / n[1];
}

__device__ __forceinline__ void storeAs(float &to, float v) { to = v; }
__device__ __forceinline__ void storeAs(__half &to, float v) {
  to = __float2half(v);
}
__device__ __forceinline__ void storeAs(__nv_bfloat16 &to, float v) {
  to = __float2bfloat16(v);
}

/// col[(plane * kSize + tap) * P + p] = the input under tap `tap` of output
/// position p in plane `plane` (image * C + channel), 0 in the padding, as
/// a float or a float16.
template <typename I, typename T>
__global__ void im2colKernel(const float *__restrict__ x, Dims<I> g, I rows,
                             T *__restrict__ col) {
  const I total = rows * g.P;
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < total;
       i += I(gridDim.x) * I(blockDim.x)) {
    const I p = i % g.P, row = i / g.P;
    const I tap = row % g.kSize, plane = row / g.kSize;
    I o[3], k[3];
    unravel(p, g.out, o);
    unravel(tap, g.k, k);
    bool inside = true;
    I at[3];
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      at[d] = o[d] * g.stride[d] - g.padB[d] + k[d] * g.dil[d];
      inside = inside && at[d] >= 0 && at[d] < g.in[d];
    }
    storeAs(col[i],
            inside
                ? x[plane * g.S + (at[0] * g.in[1] + at[1]) * g.in[2] + at[2]]
                : 0.0f);
  }
}

/// A batch norm's parameters as device pointers (scale null: none).
struct Norm {
  const float *scale = nullptr, *bias = nullptr, *mean = nullptr,
              *var = nullptr;
  float epsilon = 0.0f;
};

/// What a convolution's epilogue (and a batch norm) makes of value v of
/// channel c: the bias, then the norm, then the activation.
__device__ __forceinline__ float channelEpilogue(float v, int64_t c,
                                                 const float *bias,
                                                 const Norm &norm,
                                                 Activation act) {
  if (bias)
    v += bias[c];
  if (norm.scale)
    v = (v - norm.mean[c]) * (norm.scale[c] / sqrtf(norm.var[c] + norm.epsilon)) +
        norm.bias[c];
  return activate(act, v);
}

/// Depthwise: y[n, m, p] = the epilogue of channel m over the sum over
/// taps of w[m, tap] * x[n, m / Mg, under the tap] (w float or float16).
template <typename I, typename W>
__global__ void
depthwiseKernel(const float *__restrict__ x, const W *__restrict__ w,
                const float *__restrict__ bias, Dims<I> g, I C, I M, I Mg,
                I total, Norm norm, Activation act, float *__restrict__ y) {
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < total;
       i += I(gridDim.x) * I(blockDim.x)) {
    const I p = i % g.P, plane = i / g.P;
    const I m = plane % M, n = plane / M;
    const float *xp = x + (n * C + m / Mg) * g.S;
    const W *wp = w + m * g.kSize;
    I o[3];
    unravel(p, g.out, o);
    float acc = 0.0f;
    I tap = 0;
    for (I kd = 0; kd < g.k[0]; ++kd) {
      const I id = o[0] * g.stride[0] - g.padB[0] + kd * g.dil[0];
      const bool dIn = id >= 0 && id < g.in[0];
      for (I kh = 0; kh < g.k[1]; ++kh) {
        const I ih = o[1] * g.stride[1] - g.padB[1] + kh * g.dil[1];
        const bool hIn = dIn && ih >= 0 && ih < g.in[1];
        for (I kw = 0; kw < g.k[2]; ++kw, ++tap) {
          const I iw = o[2] * g.stride[2] - g.padB[2] + kw * g.dil[2];
          if (hIn && iw >= 0 && iw < g.in[2])
            acc += toFloat(wp[tap]) * xp[(id * g.in[1] + ih) * g.in[2] + iw];
        }
      }
    }
    y[i] = channelEpilogue(acc, m, bias, norm, act);
  }
}

/// Outputs along a row that one thread of depthwise3x3Kernel computes.
constexpr int kDepthwiseRun = 4;

/// Depthwise 3 x 3 over 2-D planes, stride S in both dims, no dilation:
/// each thread computes kDepthwiseRun adjacent outputs of one row, keeping
/// the plane's nine weights and the input rows under them in registers
/// (3 x (S * (run - 1) + 3) loads for `run` outputs, against 9 a output).
/// Items are (plane, output row, run of columns), the columns fastest.
template <int S, typename W>
__global__ void depthwise3x3Kernel(const float *__restrict__ x,
                                   const W *__restrict__ w,
                                   const float *__restrict__ bias, int H,
                                   int Wd, int OH, int OW, int padT, int padL,
                                   int C, int M, int Mg, int items, Norm norm,
                                   Activation act, float *__restrict__ y) {
  constexpr int R = kDepthwiseRun, span = S * (R - 1) + 3;
  const int runs = (OW + R - 1) / R;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < items;
       i += gridDim.x * blockDim.x) {
    const int run = i % runs, t = i / runs;
    const int oh = t % OH, plane = t / OH;
    const int m = plane % M, n = plane / M;
    const float *xp = x + int64_t(n * C + m / Mg) * H * Wd;
    float k[9];
#pragma unroll
    for (int j = 0; j < 9; ++j)
      k[j] = toFloat(w[m * 9 + j]);
    const int ow0 = run * R, iw0 = ow0 * S - padL;
    float acc[R] = {};
#pragma unroll
    for (int kh = 0; kh < 3; ++kh) {
      const int ih = oh * S - padT + kh;
      if (ih < 0 || ih >= H)
        continue;
      const float *row = xp + int64_t(ih) * Wd;
      float v[span];
#pragma unroll
      for (int j = 0; j < span; ++j) {
        const int iw = iw0 + j;
        v[j] = iw >= 0 && iw < Wd ? row[iw] : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int kw = 0; kw < 3; ++kw)
          acc[r] += k[kh * 3 + kw] * v[r * S + kw];
    }
    float *yp = y + (int64_t(plane) * OH + oh) * OW;
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (ow0 + r < OW)
        yp[ow0 + r] = channelEpilogue(acc[r], m, bias, norm, act);
  }
}

/// y[i] = the epilogue of channel (i / P) % C over x[i], for [N, C, P]: a
/// convolution's (in place) or a batch norm's.
__global__ void channelEpilogueKernel(const float *x, int64_t n, int64_t P,
                                      int64_t C, const float *__restrict__ bias,
                                      Norm norm, Activation act, float *y) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = channelEpilogue(x[i], (i / P) % C, bias, norm, act);
}

/// Checks a batch norm's parameters for C channels (float32, C elements
/// each: ops::detail::normOperands) and points `norm` at them.
bool normOperands(Context &ctx, const char *op, const Tensor &x, int64_t C,
                  const ConvNorm &n, Norm &norm) {
  if (!ops::detail::normOperands(ctx, op, x, C, n))
    return false;
  norm = {n.scale->as<float>(), n.bias->as<float>(), n.mean->as<float>(),
          n.var->as<float>(), n.epsilon};
  return true;
}

/// max that keeps a NaN once seen (as ops::pool and ops::reduce do).
__device__ __forceinline__ float maxKeepingNan(float m, float v) {
  return (m != m || v != v) ? (m != m ? m : v) : fmaxf(m, v);
}
__device__ __forceinline__ float minKeepingNan(float m, float v) {
  return (m != m || v != v) ? (m != m ? m : v) : fminf(m, v);
}

template <typename I>
__global__ void poolKernel(const float *__restrict__ x, Dims<I> g, I total,
                           bool isMax, bool countIncludePad,
                           float *__restrict__ y) {
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < total;
       i += I(gridDim.x) * I(blockDim.x)) {
    const I p = i % g.P, plane = i / g.P;
    const float *xp = x + plane * g.S;
    I o[3], lo[3], hi[3];
    unravel(p, g.out, o);
    I padded = 1;
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      const I s = o[d] * g.stride[d] - g.padB[d], e = s + g.k[d];
      // The window clipped to the padded input, then to the input.
      padded *= min(e, g.in[d] + g.padE[d]) - max(s, -g.padB[d]);
      lo[d] = max(s, I(0));
      hi[d] = min(e, g.in[d]);
    }
    float m = -INFINITY, sum = 0.0f;
    I count = 0;
    for (I id = lo[0]; id < hi[0]; ++id)
      for (I ih = lo[1]; ih < hi[1]; ++ih) {
        const float *row = xp + (id * g.in[1] + ih) * g.in[2];
        for (I iw = lo[2]; iw < hi[2]; ++iw) {
          const float v = row[iw];
          if (isMax)
            m = maxKeepingNan(m, v);
          else
            sum += v;
          ++count;
        }
      }
    const I div = countIncludePad ? padded : count;
    y[i] = isMax ? m : div > 0 ? sum / float(div) : 0.0f;
  }
}

enum class Combine { sum, max, min };

__device__ __forceinline__ float combine(Combine c, float a, float b) {
  return c == Combine::sum   ? a + b
         : c == Combine::max ? maxKeepingNan(a, b)
                             : minKeepingNan(a, b);
}

__device__ __forceinline__ float identityOf(Combine c) {
  return c == Combine::sum ? 0.0f : c == Combine::max ? -INFINITY : INFINITY;
}

/// One warp a row of `width` values: y[row] = the row combined, times
/// `scale` (1 / width for a mean).
__global__ void rowReduceKernel(const float *__restrict__ x, int64_t rows,
                                int64_t width, Combine c, float scale,
                                float *__restrict__ y) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       row < rows; row += warps) {
    const float *xr = x + row * width;
    float v = identityOf(c);
    for (int64_t j = lane; j < width; j += 32)
      v = combine(c, v, xr[j]);
    for (int o = 16; o > 0; o >>= 1)
      v = combine(c, v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0)
      y[row] = c == Combine::sum ? v * scale : v;
  }
}

/// y[o, i] = the combination over r of x[o, r, i] ([outer, R, inner]), times
/// `scale` for a sum; one thread an output.
__global__ void middleReduceKernel(const float *__restrict__ x, int64_t outer,
                                   int64_t R, int64_t inner, Combine c,
                                   float scale, float *__restrict__ y) {
  const int64_t n = outer * inner;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / inner, in = i % inner;
    const float *xp = x + o * R * inner + in;
    float v = identityOf(c);
    for (int64_t r = 0; r < R; ++r)
      v = combine(c, v, xp[r * inner]);
    y[i] = c == Combine::sum ? v * scale : v;
  }
}

/// Blocks for one warp a row.
int warpBlocksFor(int64_t rows) { return blocksFor(rows * 32); }

/// Images whose im2col columns one GEMM batch takes: as many as fit 64 Mi
/// elements (256 MB of floats, 128 MB of float16), at least one.
int64_t imagesPerBatch(int64_t N, int64_t elementsPerImage) {
  constexpr int64_t kColumnElements = int64_t(64) << 20;
  return std::max<int64_t>(1, std::min(N, kColumnElements / elementsPerImage));
}

/// Launches im2col for `rows` rows of columns (32-bit indices where they
/// fit).
template <typename T>
bool im2col(Context &ctx, Device &d, const float *x, const Geometry &g,
            int64_t rows, int64_t inputElements, T *columns) {
  const int64_t total = rows * g.outSize();
  if (fits32(total, inputElements))
    im2colKernel<int32_t, T><<<blocksFor(total), kBlock, 0, d.stream>>>(
        x, dimsOf<int32_t>(g), int32_t(rows), columns);
  else
    im2colKernel<int64_t, T><<<blocksFor(total), kBlock, 0, d.stream>>>(
        x, dimsOf<int64_t>(g), rows, columns);
  return launched(ctx, "conv (im2col)");
}

/// y = op(A) . op(B), batched, on float32 (cublasSgemmStridedBatched) or
/// 16-bit operands (`type`: float16 or bfloat16) with fp32 accumulation and
/// a float32 result.
bool gemmBatched(Context &ctx, Device &d, DType type, int m, int n, int k,
                 const void *a, int lda, int64_t strideA, const void *b,
                 int ldb, int64_t strideB, float *c, int ldc, int64_t strideC,
                 int batch, const char *what) {
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType_t cudaType = halfDataType(type);
  ProfileTimer timer(d.profile, d.blasUs, d.blasCalls);
  if (type == DType::f32)
    return checkBlas(
        ctx,
        cublasSgemmStridedBatched(d.blas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k,
                                  &one, static_cast<const float *>(a), lda,
                                  strideA, static_cast<const float *>(b), ldb,
                                  strideB, &zero, c, ldc, strideC, batch),
        what);
  return checkBlas(ctx,
                   cublasGemmStridedBatchedEx(
                       d.blas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a,
                       cudaType, lda, strideA, b, cudaType, ldb, strideB, &zero,
                       c, CUDA_R_32F, ldc, strideC, batch, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT),
                   what);
}

bool fitsInt(Context &ctx, const char *op, int64_t v, const char *what,
             const Tensor &x) {
  if (v <= std::numeric_limits<int>::max())
    return true;
  return ctx.fail(std::string(op) + ": " + what + " " + std::to_string(v) +
                  " of " + x.describe() +
                  " exceeds what a cuBLAS call takes on the CUDA backend");
}

} // namespace

bool conv(Context &ctx, const Tensor &x, const Tensor &w, const Tensor *bias,
          const int64_t *strides, const int64_t *pads,
          const int64_t *dilations, int64_t group, const ConvNorm *convNorm,
          Activation act, int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  Geometry g;
  int64_t shape[5];
  Norm norm;
  if (!ops::detail::convOperands(ctx, x, w, bias, strides, pads, dilations,
                                 group, g, shape, /*halfWeights=*/true) ||
      (convNorm &&
       !normOperands(ctx, "conv (batch norm)", x, w.shape[0], *convNorm, norm)))
    return false;
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, DType::f32, x.rank, shape))
    return false;
  out = r;
  const bool half = w.dtype == DType::f16 || w.dtype == DType::bf16;
  const int64_t N = x.shape[0], C = x.shape[1], M = w.shape[0];
  const int64_t Cg = C / group, Mg = M / group;
  const int64_t P = g.outSize(), S = g.inSize(), kSize = g.kSize();
  const int64_t Kdim = Cg * kSize;
  const float *bp = bias ? bias->as<float>() : nullptr;
  if (r.numel() == 0)
    return true;

  if (Cg == 1 && (group > 1 || kSize > 1)) {
    // Depthwise (or a single-channel input): direct, with its epilogue.
    if (!d.launching())
      return true;
    const int64_t total = r.numel();
    // The common 2-D 3 x 3 case (stride 1 or 2 in both dims, no
    // dilation), whose indices fit 32 bits: runs of outputs a thread.
    // (out[0] > 1 where a 3-D conv pads a depth-1 input: not planar.)
    const bool planar = g.in[0] == 1 && g.k[0] == 1 && g.out[0] == 1 &&
                        g.k[1] == 3 && g.k[2] == 3 && g.dil[1] == 1 &&
                        g.dil[2] == 1 && g.stride[1] == g.stride[2] &&
                        (g.stride[1] == 1 || g.stride[1] == 2);
    const int64_t items =
        total / g.out[2] * ((g.out[2] + kDepthwiseRun - 1) / kDepthwiseRun);
    const bool narrow = fits32(total, x.numel());
    const bool inRuns = planar && narrow && fits32(items, x.numel());
    // One launch for the weights' element type W (float, __half or
    // __nv_bfloat16).
    auto launch = [&](auto weight) {
      using W = decltype(weight);
      const W *wp = w.as<W>();
      if (inRuns) {
        auto *kernel = g.stride[1] == 1 ? depthwise3x3Kernel<1, W>
                                        : depthwise3x3Kernel<2, W>;
        kernel<<<blocksFor(items), kBlock, 0, d.stream>>>(
            x.as<float>(), wp, bp, int(g.in[1]), int(g.in[2]), int(g.out[1]),
            int(g.out[2]), int(g.padB[1]), int(g.padB[2]), int(C), int(M),
            int(Mg), int(items), norm, act, r.as<float>());
      } else if (narrow) {
        depthwiseKernel<int32_t, W><<<blocksFor(total), kBlock, 0, d.stream>>>(
            x.as<float>(), wp, bp, dimsOf<int32_t>(g), int32_t(C), int32_t(M),
            int32_t(Mg), int32_t(total), norm, act, r.as<float>());
      } else {
        depthwiseKernel<int64_t, W><<<blocksFor(total), kBlock, 0, d.stream>>>(
            x.as<float>(), wp, bp, dimsOf<int64_t>(g), C, M, Mg, total, norm,
            act, r.as<float>());
      }
    };
    withWeightType(w.dtype, launch);
    return launched(ctx, inRuns ? "conv (depthwise 3x3)" : "conv (depthwise)");
  }

  if (!fitsInt(ctx, "conv", P, "output positions", x) ||
      !fitsInt(ctx, "conv", Kdim, "channels times kernel size", x) ||
      !fitsInt(ctx, "conv", Mg, "output channels", x))
    return false;
  bool pointwise = kSize == 1;
  for (int i = 0; i < 3; ++i)
    pointwise = pointwise && g.stride[i] == 1 && g.padB[i] == 0 &&
                g.padE[i] == 0;
  // A pointwise convolution's columns are its input: read in place with
  // float32 weights, converted to float16 (one vectorised pass) with
  // float16 ones.
  const bool inPlace = pointwise && !half;
  const size_t element = half ? sizeof(__half) : sizeof(float);
  const int64_t perImage = C * kSize * P; // im2col elements of one image
  const int64_t images = inPlace ? N : imagesPerBatch(N, perImage);
  if (!inPlace &&
      !d.ensure(ctx, d.convColumns, element * size_t(images * perImage),
                "convolution columns"))
    return false;
  if (!d.launching())
    return true;
  float *yp = r.as<float>();
  for (int64_t n0 = 0; n0 < N; n0 += images) {
    const int64_t batch = std::min(images, N - n0);
    // The [C * kSize, P] columns of images n0 .. n0 + batch.
    const float *in = x.as<float>() + n0 * C * S;
    const void *cols = in;
    if (!inPlace) {
      const int64_t rows = batch * C * kSize;
      const bool ok = withWeightType(w.dtype, [&](auto z) {
        using W = decltype(z);
        auto *columns = static_cast<W *>(d.convColumns.ptr);
        if constexpr (std::is_same_v<W, float>)
          return im2col(ctx, d, in, g, rows, x.numel(), columns);
        else
          return pointwise ? toHalf(ctx, d, in, columns, batch * C * S)
                           : im2col(ctx, d, in, g, rows, x.numel(), columns);
      });
      if (!ok)
        return false;
      cols = d.convColumns.ptr;
    }
    // Column-major, per image and group: y^T [P, Mg] = cols^T [P, Kdim] .
    // w^T [Kdim, Mg].
    if (group == 1) {
      if (!gemmBatched(ctx, d, w.dtype, int(P), int(M), int(Kdim), cols, int(P),
                       Kdim * P, w.data, int(Kdim), 0, yp + n0 * M * P, int(P),
                       M * P, int(batch), "cuBLAS GEMM (conv)"))
        return false;
      continue;
    }
    for (int64_t n = 0; n < batch; ++n)
      if (!gemmBatched(ctx, d, w.dtype, int(P), int(Mg), int(Kdim),
                       static_cast<const char *>(cols) +
                           element * size_t(n * C * kSize * P),
                       int(P), Kdim * P, w.data, int(Kdim), Mg * Kdim,
                       yp + (n0 + n) * M * P, int(P), Mg * P, int(group),
                       "cuBLAS GEMM (grouped conv)"))
        return false;
  }
  if (!bp && !norm.scale && act == Activation::none)
    return true;
  channelEpilogueKernel<<<blocksFor(r.numel()), kBlock, 0, d.stream>>>(
      yp, r.numel(), P, M, bp, norm, act, yp);
  return launched(ctx, "conv (epilogue)");
}

bool batchNorm(Context &ctx, const Tensor &x, const Tensor &scale,
               const Tensor &bias, const Tensor &mean, const Tensor &var,
               float epsilon, Activation act, int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  const char *op = "batch_norm";
  if (!requireF32(ctx, op, "input", x))
    return false;
  if (x.rank < 2)
    return ctx.fail("batch_norm: input must be [N, C, ...], got " +
                    x.describe());
  const int64_t C = x.shape[1], S = product(x.shape, 2, x.rank);
  Norm norm;
  if (!normOperands(ctx, op, x, C, {&scale, &bias, &mean, &var, epsilon},
                    norm))
    return false;
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, DType::f32, x.rank, x.shape))
    return false;
  out = r;
  if (r.numel() == 0 || !d.launching())
    return true;
  channelEpilogueKernel<<<blocksFor(r.numel()), kBlock, 0, d.stream>>>(
      x.as<float>(), r.numel(), S, C, nullptr, norm, act, r.as<float>());
  return launched(ctx, op);
}

bool pool(Context &ctx, ops::Pool kind, const Tensor &x, const int64_t *kernel,
          const int64_t *strides, const int64_t *pads, bool countIncludePad,
          int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  const bool isMax = kind == ops::Pool::max;
  const char *op = isMax ? "max_pool" : "average_pool";
  Geometry g;
  int64_t shape[5];
  if (!ops::detail::poolGeometry(ctx, op, x, kernel, strides, pads, g,
                                 shape) ||
      !requireF32(ctx, op, "input", x))
    return false;
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, DType::f32, x.rank, shape))
    return false;
  out = r;
  const int64_t total = r.numel();
  if (total == 0 || !d.launching())
    return true;
  if (!kernel) {
    // Global: one warp a plane.
    const int64_t S = g.inSize();
    rowReduceKernel<<<warpBlocksFor(total), kBlock, 0, d.stream>>>(
        x.as<float>(), total, S, isMax ? Combine::max : Combine::sum,
        S > 0 ? 1.0f / float(S) : 0.0f, r.as<float>());
    return launched(ctx, op);
  }
  if (fits32(total, x.numel()))
    poolKernel<int32_t><<<blocksFor(total), kBlock, 0, d.stream>>>(
        x.as<float>(), dimsOf<int32_t>(g), int32_t(total), isMax,
        countIncludePad, r.as<float>());
  else
    poolKernel<int64_t><<<blocksFor(total), kBlock, 0, d.stream>>>(
        x.as<float>(), dimsOf<int64_t>(g), total, isMax, countIncludePad,
        r.as<float>());
  return launched(ctx, op);
}

bool reduce(Context &ctx, ops::Reduce kind, const Tensor &x, int naxes,
            const int64_t *axes, bool keepdims, int outSlot, Tensor &out) {
  Device &d = dev(ctx);
  const char *op = kind == ops::Reduce::sum    ? "reduce_sum"
                   : kind == ops::Reduce::mean ? "reduce_mean"
                   : kind == ops::Reduce::max  ? "reduce_max"
                                               : "reduce_min";
  if (!requireF32(ctx, op, "input", x))
    return false;
  const int rank = x.rank;
  bool red[kMaxRank] = {};
  if (naxes < 0 || (naxes > 0 && !axes))
    return ctx.fail(std::string(op) + ": invalid axes");
  for (int i = 0; i < naxes; ++i) {
    int64_t a;
    if (!ops::detail::normalizeAxis(ctx, op, axes[i], rank, a))
      return false;
    if (red[a])
      return ctx.fail(std::string(op) + ": axis " + std::to_string(axes[i]) +
                      " is repeated");
    red[a] = true;
  }
  if (naxes == 0)
    for (int i = 0; i < rank; ++i)
      red[i] = true;
  // [outer, R, inner]: the reduced dims (size-1 dims dropped) must be
  // adjacent.
  int64_t outer = 1, R = 1, inner = 1;
  int orank = 0;
  int64_t oshape[kMaxRank];
  int phase = 0; // 0: before the reduced block, 1: in it, 2: after it
  for (int i = 0; i < rank; ++i) {
    if (!red[i] || keepdims)
      oshape[orank++] = red[i] ? 1 : x.shape[i];
    if (x.shape[i] == 1)
      continue;
    if (red[i]) {
      if (phase == 2)
        return ctx.fail(std::string(op) + " over axes that are not adjacent " +
                        "of " + x.describe() +
                        " is not supported on the CUDA backend");
      phase = 1;
      R *= x.shape[i];
    } else if (phase == 0) {
      outer *= x.shape[i];
    } else {
      phase = 2;
      inner *= x.shape[i];
    }
  }
  if (R == 0 && (kind == ops::Reduce::max || kind == ops::Reduce::min) &&
      outer * inner != 0)
    return ctx.fail(std::string(op) + ": reduction over an empty dimension of " +
                    x.describe());
  Tensor r;
  if (!allocate(ctx, d, outSlot, r, DType::f32, orank, oshape))
    return false;
  out = r;
  if (r.numel() == 0 || !d.launching())
    return true;
  const Combine c = kind == ops::Reduce::max   ? Combine::max
                    : kind == ops::Reduce::min ? Combine::min
                                               : Combine::sum;
  const float scale =
      kind == ops::Reduce::mean ? (R > 0 ? 1.0f / float(R) : NAN) : 1.0f;
  if (inner == 1)
    rowReduceKernel<<<warpBlocksFor(outer), kBlock, 0, d.stream>>>(
        x.as<float>(), outer, R, c, scale, r.as<float>());
  else
    middleReduceKernel<<<blocksFor(outer * inner), kBlock, 0, d.stream>>>(
        x.as<float>(), outer, R, inner, c, scale, r.as<float>());
  return launched(ctx, op);
}

} // namespace sparsec::rt::cuda
