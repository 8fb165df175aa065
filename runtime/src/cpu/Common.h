//===- Common.h - shared helpers of the CPU op library ----------*- C++ -*-===//
//
// Part of the sparsec project.
//
// Internal to runtime/src/cpu: dtype dispatch, f16 conversion, shape and
// broadcasting helpers, scalar activation functions and the f32 GEMM /
// vector kernels that Linear.cpp implements for the other op files.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RT_CPU_COMMON_H
#define SPARSEC_RT_CPU_COMMON_H

#include "sparsec/rt/Half.h"
#include "sparsec/rt/Ops.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

// The x86 kernels are compiled with target attributes (the library itself
// for baseline x86-64) and chosen at run time (kernelIsa).
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SPARSEC_RT_X86 1
#define SPARSEC_RT_AVX2 __attribute__((target("avx2,fma,f16c")))
#define SPARSEC_RT_AVX512                                                      \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma")))
#else
#define SPARSEC_RT_X86 0
#endif

namespace sparsec::rt::ops::detail {

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

/// Storage type of f16 elements (IEEE binary16 bits).
struct Half {
  uint16_t bits;
};

/// Storage type of bf16 elements (the top 16 bits of a float32).
struct BFloat {
  uint16_t bits;
};

using rt::bfloat16ToFloat;
using rt::floatToBFloat16;
using rt::floatToHalf;
using rt::halfToFloat;

/// A weight element as float32 (float16 and bfloat16 weights are converted
/// as loaded).
inline float toFloat(float f) { return f; }
inline float toFloat(Half h) { return halfToFloat(h.bits); }
inline float toFloat(BFloat b) { return bfloat16ToFloat(b.bits); }

#if SPARSEC_RT_X86
/// Eight weight elements as float32 (F16C for float16).
SPARSEC_RT_AVX2 inline __m256 load8(const float *p) {
  return _mm256_loadu_ps(p);
}
SPARSEC_RT_AVX2 inline __m256 load8(const Half *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}
SPARSEC_RT_AVX2 inline __m256 load8(const BFloat *p) {
  __m256i wide = _mm256_cvtepu16_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
#endif

/// The storage type of b1 (one byte, 0 or 1).
using Bool8 = uint8_t;

template <typename T> struct TypeTag { using type = T; };

/// numpy maximum/minimum: NaN propagates.
template <typename T> T maxOf(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (a != a || b != b)
      return a != a ? a : b;
  return a < b ? b : a;
}
template <typename T> T minOf(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (a != a || b != b)
      return a != a ? a : b;
  return b < a ? b : a;
}

/// Calls f(TypeTag<T>{}) with the storage type of `t`. b1 maps to Bool8
/// (so does u8: callers that care about the difference check the dtype).
template <typename F> decltype(auto) dispatchType(DType t, F &&f) {
  switch (t) {
  case DType::f32:
    return f(TypeTag<float>{});
  case DType::f64:
    return f(TypeTag<double>{});
  case DType::f16:
    return f(TypeTag<Half>{});
  case DType::bf16:
    return f(TypeTag<BFloat>{});
  case DType::i64:
    return f(TypeTag<int64_t>{});
  case DType::i32:
    return f(TypeTag<int32_t>{});
  case DType::i16:
    return f(TypeTag<int16_t>{});
  case DType::i8:
    return f(TypeTag<int8_t>{});
  case DType::u8:
    return f(TypeTag<uint8_t>{});
  case DType::u16:
    return f(TypeTag<uint16_t>{});
  case DType::u32:
    return f(TypeTag<uint32_t>{});
  case DType::u64:
    return f(TypeTag<uint64_t>{});
  case DType::b1:
    return f(TypeTag<Bool8>{});
  }
  return f(TypeTag<float>{});
}

/// Calls f(TypeTag<U>{}) with an unsigned integer type of `bytes` bytes, for
/// ops that only move elements.
template <typename F> decltype(auto) dispatchSize(size_t bytes, F &&f) {
  switch (bytes) {
  case 1:
    return f(TypeTag<uint8_t>{});
  case 2:
    return f(TypeTag<uint16_t>{});
  case 8:
    return f(TypeTag<uint64_t>{});
  default:
    return f(TypeTag<uint32_t>{});
  }
}

inline bool isFloat(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 ||
         t == DType::bf16;
}
inline bool isSignedInt(DType t) {
  return t == DType::i64 || t == DType::i32 || t == DType::i16 ||
         t == DType::i8;
}
inline bool isUnsignedInt(DType t) {
  return t == DType::u8 || t == DType::u16 || t == DType::u32 ||
         t == DType::u64;
}
inline bool isInt(DType t) { return isSignedInt(t) || isUnsignedInt(t); }

/// Loads/stores through the type arithmetic happens in: f16 computes in
/// f32, everything else in its own type.
template <typename T> struct Arith {
  using type = T;
  static T load(T v) { return v; }
  static T store(T v) { return v; }
};
template <> struct Arith<Half> {
  using type = float;
  static float load(Half h) { return halfToFloat(h.bits); }
  static Half store(float f) { return Half{floatToHalf(f)}; }
};
template <> struct Arith<BFloat> {
  using type = float;
  static float load(BFloat b) { return bfloat16ToFloat(b.bits); }
  static BFloat store(float f) { return BFloat{floatToBFloat16(f)}; }
};

//===----------------------------------------------------------------------===//
// Shapes
//===----------------------------------------------------------------------===//

/// "[2, 3]"
inline std::string shapeString(int rank, const int64_t *shape) {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i)
      s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

/// True if the rank is in [0, kMaxRank], every dim is >= 0 and the element
/// count times 16 fits in int64.
inline bool validShape(int rank, const int64_t *shape) {
  if (rank < 0 || rank > kMaxRank)
    return false;
  const int64_t limit = std::numeric_limits<int64_t>::max() / 16;
  int64_t n = 1;
  bool zero = false;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] < 0)
      return false;
    if (shape[i] == 0)
      zero = true;
    else if (!zero && n > limit / shape[i])
      return false;
    else if (!zero)
      n *= shape[i];
  }
  return true;
}

/// Product of dims [begin, end).
inline int64_t product(const int64_t *shape, int begin, int end) {
  int64_t n = 1;
  for (int i = begin; i < end; ++i)
    n *= shape[i];
  return n;
}

/// Checks a tensor view before an op reads it: rank within [0, kMaxRank],
/// valid dims and non-null data when it has elements. `what` names it in the
/// message ("<op>: <what> ...").
inline bool checkTensor(Context &ctx, const char *op, const char *what,
                        const Tensor &t) {
  if (t.rank < 0 || t.rank > kMaxRank)
    return ctx.fail(std::string(op) + ": " + what + " has invalid rank " +
                    std::to_string(t.rank));
  if (!validShape(t.rank, t.shape))
    return ctx.fail(std::string(op) + ": " + what + " has invalid shape " +
                    shapeString(t.rank, t.shape));
  if (!t.data && t.numel() != 0)
    return ctx.fail(std::string(op) + ": " + what + " has no data");
  return true;
}

/// The second lookup of a summed embedding (both backends): a [V2, D]
/// table of the first's type and width, ids of the first ids' shape (their
/// type and values each backend checks as a lone lookup's).
inline bool checkEmbeddingPair(Context &ctx, const Tensor &table,
                               const Tensor &ids, const Tensor &table2,
                               const Tensor &ids2) {
  if (!checkTensor(ctx, "embedding", "second table", table2) ||
      !checkTensor(ctx, "embedding", "second ids", ids2))
    return false;
  if (table.rank != 2 || table2.rank != 2 || table2.dtype != table.dtype ||
      table2.shape[1] != table.shape[1])
    return ctx.fail("embedding: second table " + table2.describe() +
                    " does not have the first's type and width (" +
                    table.describe() + ")");
  bool sameShape = ids2.rank == ids.rank;
  for (int d = 0; sameShape && d < ids.rank; ++d)
    sameShape = ids2.shape[d] == ids.shape[d];
  if (!sameShape)
    return ctx.fail("embedding: second ids " + ids2.describe() +
                    " do not have the ids' shape " + ids.describe());
  return true;
}

/// Normalises `axis` into [0, rank) (or [0, rank] when `inclusive`);
/// fails with "<op>: axis A is out of range for rank R".
inline bool normalizeAxis(Context &ctx, const char *op, int64_t axis, int rank,
                          int64_t &out, bool inclusive = false) {
  int64_t limit = rank + (inclusive ? 1 : 0);
  int64_t a = axis < 0 ? axis + limit : axis;
  if (a < 0 || a >= limit)
    return ctx.fail(std::string(op) + ": axis " + std::to_string(axis) +
                    " is out of range for rank " + std::to_string(rank));
  out = a;
  return true;
}

/// numpy broadcasting of two shapes; false if incompatible.
inline bool broadcastShapes(int ra, const int64_t *sa, int rb,
                            const int64_t *sb, int &rank, int64_t *shape) {
  rank = ra > rb ? ra : rb;
  for (int i = 0; i < rank; ++i) {
    int ia = i - (rank - ra), ib = i - (rank - rb);
    int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
    if (da == db || db == 1)
      shape[i] = da;
    else if (da == 1)
      shape[i] = db;
    else
      return false;
  }
  return true;
}

/// Reads an integer tensor (int64 or int32, rank 0 or 1) into `values`.
inline bool readIndexTensor(Context &ctx, const char *op, const char *what,
                            const Tensor &t, std::vector<int64_t> &values) {
  if (t.dtype != DType::i64 && t.dtype != DType::i32)
    return ctx.fail(std::string(op) + ": " + what +
                    " must be int64 or int32, got " + t.describe());
  if (t.rank > 1)
    return ctx.fail(std::string(op) + ": " + what + " must be 1-D, got " +
                    t.describe());
  if (!checkTensor(ctx, op, what, t))
    return false;
  int64_t n = t.numel();
  values.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i)
    values[size_t(i)] =
        t.dtype == DType::i64 ? t.as<int64_t>()[i] : t.as<int32_t>()[i];
  return true;
}

/// Reads a shape tensor (int64 or int32, 1-D) of at most kMaxRank dims.
inline bool readShape(Context &ctx, const char *op, const Tensor &t,
                      std::vector<int64_t> &dims) {
  if (!readIndexTensor(ctx, op, "shape", t, dims))
    return false;
  if (dims.size() > size_t(kMaxRank))
    return ctx.fail(std::string(op) + ": shape has " +
                    std::to_string(dims.size()) + " dims, more than " +
                    std::to_string(kMaxRank));
  return true;
}

/// Checks that x can be viewed as rank/shape (same element count); fails
/// with "reshape: cannot reshape X into [..]". Shared by the x86 and CUDA
/// reshapes.
inline bool checkReshapeTo(Context &ctx, const Tensor &x, int rank,
                           const int64_t *shape) {
  if (!checkTensor(ctx, "reshape", "input", x))
    return false;
  if (rank < 0 || rank > kMaxRank || (rank > 0 && !shape) ||
      !validShape(rank, shape) || product(shape, 0, rank) != x.numel())
    return ctx.fail("reshape: cannot reshape " + x.describe() + " into " +
                    (rank >= 0 && rank <= kMaxRank && (shape || rank == 0)
                         ? shapeString(rank, shape)
                         : "rank " + std::to_string(rank)));
  return true;
}

/// ONNX Reshape's target for x from the int64/int32 1-D tensor `shapeT` (0
/// copies x's dim unless allowzero, -1 is inferred) into rank/shape
/// (kMaxRank entries). Shared by the x86 and CUDA reshapes.
inline bool reshapeTarget(Context &ctx, const Tensor &x, const Tensor &shapeT,
                          bool allowzero, int &rank, int64_t *shape) {
  if (!checkTensor(ctx, "reshape", "input", x))
    return false;
  std::vector<int64_t> req;
  if (!readShape(ctx, "reshape", shapeT, req))
    return false;
  auto failShape = [&]() {
    return ctx.fail("reshape: cannot reshape " + x.describe() + " into " +
                    shapeString(int(req.size()), req.data()));
  };
  rank = int(req.size());
  int inferred = -1;
  bool hasZero = false;
  for (int i = 0; i < rank; ++i) {
    int64_t v = req[size_t(i)];
    if (v == 0 && !allowzero) {
      if (i >= x.rank)
        return failShape();
      v = x.shape[i];
    } else if (v == 0) {
      hasZero = true;
    } else if (v == -1) {
      if (inferred >= 0)
        return failShape();
      inferred = i;
      v = 1;
    } else if (v < 0) {
      return failShape();
    }
    shape[i] = v;
  }
  if (inferred >= 0 && hasZero)
    return failShape();
  if (!validShape(rank, shape))
    return failShape();
  const int64_t numel = x.numel();
  int64_t known = product(shape, 0, rank);
  if (inferred >= 0) {
    if (known == 0 || numel % known != 0)
      return failShape();
    shape[inferred] = numel / known;
    known = numel;
  }
  if (known != numel)
    return failShape();
  return true;
}

/// Row-major element strides.
inline void contiguousStrides(int rank, const int64_t *shape,
                              int64_t *strides) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
}

/// `t`'s element strides over `rank` dims it broadcasts to (numpy
/// alignment: its dims are the last t.rank), 0 on the dims it lacks or has
/// as 1.
inline void broadcastStridesOf(const Tensor &t, int rank, int64_t *strides) {
  int64_t own[kMaxRank];
  contiguousStrides(t.rank, t.shape, own);
  for (int d = 0; d < rank; ++d) {
    const int td = d - (rank - t.rank);
    strides[d] = td < 0 || t.shape[td] == 1 ? 0 : own[td];
  }
}

/// Checks rotary's operand shapes (see ops::rotary; each backend checks
/// the dtypes) and sets `strides` to cos and sin's element strides over
/// x's dims, 0 where they broadcast.
bool rotaryStrides(Context &ctx, const Tensor &x, const Tensor &cos,
                   const Tensor &sin, int64_t *strides);

/// The dims of scaled dot-product attention's operands (see ops::attention),
/// checked (with the mask's dtype: float32 or bool), the mask's strides over
/// [B, Hq, Sq, T] (0 on broadcast dims), and the element strides of q, k, v
/// and the output in either HeadLayout. Shared by the x86 and CUDA kernels.
struct AttentionDims {
  int64_t B = 0, Hq = 0, Sq = 0, D = 0, Hk = 0, Sk = 0, Dv = 0, P = 0, T = 0;
  int64_t mStr[4] = {0, 0, 0, 0};
  /// Strides of {batch, head, position}; a row's elements are contiguous.
  int64_t qStr[3] = {}, kStr[3] = {}, vStr[3] = {}, oStr[3] = {};
  bool tokenMajor = false;
  /// Element offsets of row i of head h, batch b.
  int64_t qAt(int64_t b, int64_t h, int64_t i) const {
    return b * qStr[0] + h * qStr[1] + i * qStr[2];
  }
  int64_t kAt(int64_t b, int64_t h, int64_t i) const {
    return b * kStr[0] + h * kStr[1] + i * kStr[2];
  }
  int64_t vAt(int64_t b, int64_t h, int64_t i) const {
    return b * vStr[0] + h * vStr[1] + i * vStr[2];
  }
  int64_t oAt(int64_t b, int64_t h, int64_t i) const {
    return b * oStr[0] + h * oStr[1] + i * oStr[2];
  }
};
/// {batch, head, position} strides of a [B, H, S, W] tensor, or of a
/// [B, S, H, W] one with `tokenMajor`.
inline void attentionStrides(bool tokenMajor, int64_t H, int64_t S, int64_t W,
                             int64_t *str) {
  str[0] = H * S * W;
  str[1] = tokenMajor ? W : S * W;
  str[2] = tokenMajor ? H * W : W;
}
inline bool attentionDims(Context &ctx, const Tensor &q, const Tensor &k,
                          const Tensor &v, const Tensor *mask,
                          const Tensor *pastK, const Tensor *pastV,
                          ops::HeadLayout layout, AttentionDims &a) {
  const bool tm = layout == ops::HeadLayout::tokenMajor;
  if (mask && mask->dtype != DType::f32 && mask->dtype != DType::b1)
    return ctx.fail("attention: mask must be float32 (additive) or bool, got " +
                    mask->describe());
  if (q.rank != 4 || k.rank != 4 || v.rank != 4)
    return ctx.fail(std::string("attention: q, k and v must be ") +
                    (tm ? "[B, S, H, D]" : "[B, H, S, D]") + ", got " +
                    q.describe() + ", " + k.describe() + ", " + v.describe());
  if ((pastK == nullptr) != (pastV == nullptr))
    return ctx.fail("attention: past_k and past_v must be given together");
  // Where the heads and the positions lie in q, k and v.
  const int hd = tm ? 2 : 1, sd = tm ? 1 : 2;
  const int64_t B = q.shape[0], Hq = q.shape[hd], Sq = q.shape[sd],
                D = q.shape[3];
  const int64_t Hk = k.shape[hd], Sk = k.shape[sd], Dv = v.shape[3];
  a = AttentionDims{};
  a.B = B, a.Hq = Hq, a.Sq = Sq, a.D = D, a.Hk = Hk, a.Sk = Sk, a.Dv = Dv;
  a.tokenMajor = tm;
  if (k.shape[0] != B || v.shape[0] != B || v.shape[hd] != Hk ||
      k.shape[3] != D || v.shape[sd] != Sk || Hk == 0 || Hq % Hk != 0)
    return ctx.fail("attention: shapes q " + q.describe() + ", k " +
                    k.describe() + ", v " + v.describe() + " do not match");
  attentionStrides(tm, Hq, Sq, D, a.qStr);
  attentionStrides(tm, Hk, Sk, D, a.kStr);
  attentionStrides(tm, Hk, Sk, Dv, a.vStr);
  attentionStrides(tm, Hq, Sq, Dv, a.oStr);
  int64_t P = 0;
  if (pastK) {
    P = pastK->shape[2];
    if (pastK->rank != 4 || pastV->rank != 4 || pastK->shape[0] != B ||
        pastK->shape[1] != Hk || pastK->shape[3] != D || pastV->shape[0] != B ||
        pastV->shape[1] != Hk || pastV->shape[2] != P || pastV->shape[3] != Dv)
      return ctx.fail("attention: past_k " + pastK->describe() + " / past_v " +
                      pastV->describe() + " do not match k " + k.describe() +
                      " and v " + v.describe());
  }
  const int64_t T = P + Sk;
  a.P = P;
  a.T = T;
  // Mask strides over [B, Hq, Sq, T] (0 on broadcast dims).
  int64_t *mStr = a.mStr;
  if (mask) {
    const int64_t full[4] = {B, Hq, Sq, T};
    if (mask->rank > 4)
      return ctx.fail("attention: mask " + mask->describe() +
                      " does not broadcast to " + shapeString(4, full));
    int64_t own[kMaxRank];
    contiguousStrides(mask->rank, mask->shape, own);
    for (int d = 0; d < 4; ++d) {
      int md = d - (4 - mask->rank);
      if (md < 0)
        continue;
      if (mask->shape[md] != 1 && mask->shape[md] != full[d])
        return ctx.fail("attention: mask " + mask->describe() +
                        " does not broadcast to " + shapeString(4, full));
      mStr[d] = mask->shape[md] == 1 ? 0 : own[md];
    }
  }

  return true;
}

/// Iteration plan for a contiguous output of `rank`/`shape` whose operands
/// are broadcast views: per operand, element strides (0 on broadcast dims).
/// Size-1 dims are dropped and mergeable dims collapsed, so a "row"
/// broadcast ([M, N] with [N]) becomes a 2-D plan with unit inner strides
/// and a scalar operand a stride of 0.
struct BroadcastPlan {
  static constexpr int kMaxOperands = 3;
  int rank = 1;
  int nin = 0;
  int64_t shape[kMaxRank] = {1};
  int64_t strides[kMaxOperands][kMaxRank] = {};
  int64_t total = 1;
};

/// `inputs` must each broadcast to `shape` (checked by the caller).
inline BroadcastPlan makeBroadcastPlan(int rank, const int64_t *shape, int nin,
                                       const Tensor *const *inputs) {
  BroadcastPlan p;
  p.nin = nin;
  // Per operand strides aligned to the output dims (0 where broadcast).
  int64_t full[BroadcastPlan::kMaxOperands][kMaxRank];
  for (int i = 0; i < nin; ++i)
    broadcastStridesOf(*inputs[i], rank, full[i]);
  // Drop size-1 dims, then merge dims that are contiguous for all operands.
  int r = 0;
  p.total = 1;
  for (int d = 0; d < rank; ++d) {
    p.total *= shape[d];
    if (shape[d] == 1)
      continue;
    bool merge = r > 0;
    for (int i = 0; i < nin && merge; ++i)
      merge = p.strides[i][r - 1] == full[i][d] * shape[d];
    if (merge) {
      p.shape[r - 1] *= shape[d];
      for (int i = 0; i < nin; ++i)
        p.strides[i][r - 1] = full[i][d];
      continue;
    }
    p.shape[r] = shape[d];
    for (int i = 0; i < nin; ++i)
      p.strides[i][r] = full[i][d];
    ++r;
  }
  if (r == 0) {
    r = 1;
    p.shape[0] = 1;
    for (int i = 0; i < nin; ++i)
      p.strides[i][0] = 0;
  }
  p.rank = r;
  return p;
}

/// Calls fn(outOffset, const int64_t *inOffsets, len, const int64_t
/// *innerStrides) for runs of output elements [begin, end) that are
/// contiguous in the output; operand i advances by innerStrides[i].
template <typename F>
void forEachSpan(const BroadcastPlan &p, int64_t begin, int64_t end, F &&fn) {
  if (begin >= end)
    return;
  const int r = p.rank;
  int64_t idx[kMaxRank];
  int64_t off[BroadcastPlan::kMaxOperands] = {0, 0, 0};
  int64_t inner[BroadcastPlan::kMaxOperands] = {0, 0, 0};
  int64_t rem = begin;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % p.shape[d];
    rem /= p.shape[d];
  }
  for (int i = 0; i < p.nin; ++i) {
    inner[i] = p.strides[i][r - 1];
    for (int d = 0; d < r; ++d)
      off[i] += idx[d] * p.strides[i][d];
  }
  const int64_t n = p.shape[r - 1];
  int64_t pos = begin;
  while (pos < end) {
    int64_t len = n - idx[r - 1];
    if (len > end - pos)
      len = end - pos;
    fn(pos, static_cast<const int64_t *>(off), len,
       static_cast<const int64_t *>(inner));
    pos += len;
    idx[r - 1] += len;
    if (idx[r - 1] < n) {
      for (int i = 0; i < p.nin; ++i)
        off[i] += len * inner[i];
      continue;
    }
    // Carry into the outer dims.
    for (int i = 0; i < p.nin; ++i)
      off[i] += (len - n) * inner[i];
    idx[r - 1] = 0;
    for (int d = r - 2; d >= 0; --d) {
      for (int i = 0; i < p.nin; ++i)
        off[i] += p.strides[i][d];
      if (++idx[d] < p.shape[d])
        break;
      for (int i = 0; i < p.nin; ++i)
        off[i] -= p.shape[d] * p.strides[i][d];
      idx[d] = 0;
    }
  }
}

/// Elements per parallel chunk for cheap elementwise work.
constexpr int64_t kGrainCheap = 1 << 15;
/// ... and for work with a transcendental function per element.
constexpr int64_t kGrainHeavy = 1 << 12;

/// ctx.pool.parallelFor, with small ranges run inline.
template <typename F>
void parallelFor(Context &ctx, int64_t n, int64_t grain, F &&fn) {
  if (n <= 0)
    return;
  if (ctx.pool.size() <= 1 || n <= grain) {
    fn(int64_t(0), n);
    return;
  }
  ctx.pool.parallelFor(n, grain, fn);
}

/// Allocates `out` in `slot` after validating the shape.
/// Whether transposing `shape` by `perm` keeps the elements' memory order
/// (only dims of size 1 move), so the result can be a view of the input.
/// The memory planner keeps a transpose's input live as long as its result
/// for this reason.
inline bool transposeIsView(int rank, const int64_t *shape,
                            const int64_t *perm) {
  int64_t last = -1;
  for (int i = 0; i < rank; ++i) {
    if (shape[perm[i]] == 1)
      continue;
    if (perm[i] < last)
      return false;
    last = perm[i];
  }
  return true;
}

inline bool allocateOut(Context &ctx, const char *op, int slot, Tensor &out,
                        DType dtype, int rank, const int64_t *shape) {
  if (!validShape(rank, shape))
    return ctx.fail(std::string(op) + ": invalid result shape " +
                    shapeString(rank < 0          ? 0
                                : rank > kMaxRank ? kMaxRank
                                                  : rank,
                                shape));
  if (!ctx.allocate(slot, out, dtype, rank, shape))
    return ctx.ok() ? ctx.fail(std::string(op) + ": cannot allocate " +
                               shapeString(rank, shape))
                    : false;
  return true;
}

//===----------------------------------------------------------------------===//
// Activations (scalar)
//===----------------------------------------------------------------------===//

template <typename T> inline T sigmoidOf(T x) {
  return x >= T(0) ? T(1) / (T(1) + std::exp(-x))
                   : std::exp(x) / (T(1) + std::exp(x));
}
template <typename T> inline T geluOf(T x) {
  return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
}
template <typename T> inline T geluTanhOf(T x) {
  const T c = T(0.79788456080286535588); // sqrt(2/pi)
  return T(0.5) * x * (T(1) + std::tanh(c * (x + T(0.044715) * x * x * x)));
}
template <typename T> inline T siluOf(T x) { return x * sigmoidOf(x); }
template <typename T> inline T reluOf(T x) { return x < T(0) ? T(0) : x; }
template <typename T> inline T relu6Of(T x) {
  return x < T(0) ? T(0) : x > T(6) ? T(6) : x; // NaN stays NaN
}

/// Calls `f` with the scalar function of `act` (the identity for none), so
/// that a loop over values is compiled once per activation.
template <typename F> inline void withActivation(Activation act, F &&f) {
  switch (act) {
  case Activation::none:
    return f([](auto v) { return v; });
  case Activation::relu:
    return f([](auto v) { return reluOf(v); });
  case Activation::gelu:
    return f([](auto v) { return geluOf(v); });
  case Activation::gelu_tanh:
    return f([](auto v) { return geluTanhOf(v); });
  case Activation::silu:
    return f([](auto v) { return siluOf(v); });
  case Activation::sigmoid:
    return f([](auto v) { return sigmoidOf(v); });
  case Activation::relu6:
    return f([](auto v) { return relu6Of(v); });
  }
}

/// Whether a kernel applies `act` in its vector registers (ReLU, ReLU6);
/// the others go through applyActivation.
inline bool activatesInRegisters(Activation act) {
  return act == Activation::relu || act == Activation::relu6;
}

#if SPARSEC_RT_X86
/// ReLU or ReLU6 (activatesInRegisters) of 16 floats, a NaN kept; v as it
/// is for any other activation.
SPARSEC_RT_AVX512 inline __m512 activateInRegisters(Activation act, __m512 v) {
  // max(0, v) and min(6, v): a NaN, the second operand, stays NaN. (maskz
  // with all lanes: the unmasked forms trip GCC 12's uninitialised-variable
  // warning.)
  if (activatesInRegisters(act))
    v = _mm512_maskz_max_ps(0xffff, _mm512_setzero_ps(), v);
  if (act == Activation::relu6)
    v = _mm512_maskz_min_ps(0xffff, _mm512_set1_ps(6.0f), v);
  return v;
}
#endif

/// Applies `act` to n floats in place.
inline void applyActivation(Activation act, float *x, int64_t n) {
  if (act == Activation::none)
    return;
  withActivation(act, [&](auto fn) {
    for (int64_t i = 0; i < n; ++i)
      x[i] = fn(x[i]);
  });
}

//===----------------------------------------------------------------------===//
// f32 kernels (Linear.cpp)
//===----------------------------------------------------------------------===//

/// C[M, N] = act(A[M, K] . B[K, N] + bias[N]); row-major with leading
/// dimensions lda/ldb/ldc. pool == nullptr runs on the calling thread.
struct GemmArgs {
  int64_t M = 0, N = 0, K = 0;
  const float *A = nullptr;
  int64_t lda = 0;
  const float *B = nullptr;
  /// Instead of B: the weights as float16 (converted as they are read).
  const Half *Bh = nullptr;
  const BFloat *Bb = nullptr; // bfloat16 B (instead of B or Bh)
  int64_t ldb = 0;
  float *C = nullptr;
  int64_t ldc = 0;
  const float *bias = nullptr;
  /// Instead of B: B already packed as gemmPackLayout() describes, 64-byte
  /// aligned (the product then always runs blocked).
  const float *Bpacked = nullptr;
  /// A bias per row of C (M values, e.g. a convolution's per channel),
  /// added before the activation; null for none. Either bias may be set.
  const float *rowBias = nullptr;
  Activation act = Activation::none;
  /// Where the blocked GEMM (more than kStreamMaxRows rows) keeps B packed
  /// across calls, or null to pack on every call: only for an immutable B
  /// (a model weight), which the cache identifies by its address.
  struct PackCache *packCache = nullptr;
  /// B (B, Bh or Bb) is stored transposed, [N, K] with row stride ldb:
  /// element (k, j) at j * ldb + k (a neuron-major weight). The product
  /// then always runs blocked (B is read as it is packed).
  bool transB = false;
};
void gemm(ThreadPool *pool, const GemmArgs &args);

/// How the blocked GEMM packs B on this machine's kernels, for a B given
/// packed (GemmArgs::Bpacked; any M): panels of KC rows of B (the last may
/// be shorter), panel pc (its first row) at pc * Npad floats, Npad = N
/// rounded up to NR; within a panel of kc rows, strip s (columns s*NR to
/// s*NR+NR-1) at s * kc * NR, element (k, j) of the strip at k * NR + j;
/// padding columns are zero.
struct GemmPackLayout {
  int64_t KC = 0, NR = 0;
  int64_t paddedColumns(int64_t n) const { return (n + NR - 1) / NR * NR; }
  /// Floats of a packed [K, N] B.
  int64_t floats(int64_t K, int64_t N) const { return K * paddedColumns(N); }
};
GemmPackLayout gemmPackLayout();

/// A per-thread, 64-byte aligned scratch buffer that only grows.
class Scratch {
public:
  Scratch() = default;
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
  ~Scratch() { std::free(data_); }
  /// At least `floats` floats (contents undefined), or null when out of
  /// memory.
  float *get(size_t floats) {
    if (floats > size_) {
      std::free(data_);
      size_t bytes = (floats * sizeof(float) + 4095) / 4096 * 4096;
      data_ = static_cast<float *>(std::aligned_alloc(64, bytes));
      size_ = data_ ? bytes / sizeof(float) : 0;
    }
    return data_;
  }

private:
  float *data_ = nullptr;
  size_t size_ = 0;
};

/// Packed weight panels kept across calls, up to `limitBytes` in all (the
/// weights beyond it are packed on every call, as without a cache).
struct PackCache {
  explicit PackCache(size_t limitBytes) : limit(limitBytes) {}
  size_t limit, bytes = 0;
  std::mutex mutex;
  struct Free {
    void operator()(float *p) const { std::free(p); }
  };
  using Panels = std::unique_ptr<float[], Free>; // 64-byte aligned
  std::map<std::tuple<const void *, int64_t, int64_t, int64_t, int, int>, Panels>
      entries;
  /// Convolution weights and biases with a batch norm folded in
  /// (ops::conv with a ConvNorm), by the weight, bias and norm parameters'
  /// data and the epsilon's bits: [M * C/g * kernel] weights, then [M]
  /// biases.
  std::map<std::array<const void *, 7>, std::vector<float>> folded;
};
/// The cache of `ctx` (made on first use; 1 GiB at most).
PackCache *packCacheOf(Context &ctx);

/// c [M, N] = act(x [M, K] . w + bias) for a 2-D weight tensor w (float32,
/// float16 or bfloat16): [K, N], or [N, K] where `transB` (a neuron-major
/// weight; always blocked). A model weight is packed once for all calls of
/// more rows than the streaming kernels take (ctx's pack cache).
void gemmWeight(Context &ctx, const float *x, int64_t M, const Tensor &w,
                bool transB, const float *bias, Activation act, float *c);

/// sum a[i] * b[i]
float dot(const float *a, const float *b, int64_t n);
/// y[i] += alpha * x[i]
void axpy(float alpha, const float *x, float *y, int64_t n);

/// dst[0:n] = float(src[0:n]) and dst[0:n] = half(src[0:n]) (round to
/// nearest even, as floatToHalf): F16C where the kernels use AVX2.
void widenRow(const float *src, float *dst, int64_t n); // a copy
void widenRow(const Half *src, float *dst, int64_t n);
void widenRow(const BFloat *src, float *dst, int64_t n);
void narrowRow(const float *src, Half *dst, int64_t n);

/// Softmax pieces (attention): s[j] = s[j] * scale + (add ? add[j] : 0)
/// for j < n, returning their maximum (-inf for n = 0; NaN propagates).
float scaleAddMax(float *s, int64_t n, float scale, const float *add);
/// s[j] = exp(s[j] - m) for j < n, 0 where s[j] - m < -87 (below float's
/// normal range, a share under 1e-37 of the largest term, which is 1);
/// returns the sum in double. AVX2 / AVX-512 polynomial (within 2 ulp of
/// libm's expf) where the kernels use them.
double expShiftSum(float *s, int64_t n, float m);

/// Kernel ISAs for setKernelIsa / kernelIsa.
enum : int { kIsaBest = 0, kIsaScalar = 1, kIsaAvx2 = 2, kIsaAvx512 = 3 };
/// The ISA the f32 kernels use now (never kIsaBest); see Linear.cpp.
int kernelIsa();
/// Whether the AVX2/FMA (or wider) kernels are used.
bool useAvx2();
/// Test hook: request an ISA (kIsaBest restores the default); one the CPU
/// lacks falls back to the best available lower one.
void setKernelIsa(int isa);
/// Test hook: force the portable kernels (true) or restore the default.
void setForceScalarKernels(bool force);

} // namespace sparsec::rt::ops::detail

#endif // SPARSEC_RT_CPU_COMMON_H
