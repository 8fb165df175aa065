//===- SparsecFolds.cpp - constant folding of sparsec ops ----------------===//
//
// Part of the sparsec project.
//
// Exported graphs compute masks, positions and reshape targets with integer
// shape arithmetic (Shape -> Gather -> Unsqueeze -> Concat -> Reshape). These
// folders evaluate it whenever the inputs are known, so that the raise phase
// sees static shapes. Folding is bounded to small tensors: it is for shape
// math, never for weights.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Dialect/Sparsec/IR/DimAnalysis.h"
#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/APSInt.h"
#include <cmath>

using namespace mlir;
using namespace sparsec;

namespace {
constexpr int64_t kMaxFoldElements = 1 << 16;

DenseElementsAttr asDense(Attribute a) {
  return dyn_cast_if_present<DenseElementsAttr>(a);
}

bool foldable(ShapedType t) {
  return t.hasStaticShape() && t.getNumElements() <= kMaxFoldElements;
}

/// Row-major strides of a static shape.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

/// For every element of `out`, the linear index of the element of `in` that
/// numpy broadcasting reads.
SmallVector<int64_t> broadcastIndices(ArrayRef<int64_t> in,
                                      ArrayRef<int64_t> out) {
  int64_t numel = 1;
  for (int64_t d : out)
    numel *= d;
  SmallVector<int64_t> inStrides = stridesOf(in);
  SmallVector<int64_t> result(numel);
  SmallVector<int64_t> idx(out.size(), 0);
  int64_t offset = out.size() - in.size();
  for (int64_t n = 0; n < numel; ++n) {
    int64_t src = 0;
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i] != 1)
        src += idx[i + offset] * inStrides[i];
    result[n] = src;
    for (int64_t i = static_cast<int64_t>(out.size()) - 1; i >= 0; --i) {
      if (++idx[i] < out[i])
        break;
      idx[i] = 0;
    }
  }
  return result;
}

using IntFn = std::function<std::optional<APInt>(const APInt &, const APInt &)>;
using FloatFn =
    std::function<std::optional<APFloat>(const APFloat &, const APFloat &)>;

/// Folds a broadcasting binary op whose operands are both constant.
Attribute foldBinary(Attribute lhsAttr, Attribute rhsAttr, ShapedType type,
                     IntFn intFn, FloatFn floatFn) {
  DenseElementsAttr lhs = asDense(lhsAttr), rhs = asDense(rhsAttr);
  if (!lhs || !rhs || !foldable(type) ||
      lhs.getElementType() != rhs.getElementType())
    return {};
  Type elt = lhs.getElementType();
  SmallVector<int64_t> li = broadcastIndices(lhs.getType().getShape(),
                                             type.getShape());
  SmallVector<int64_t> ri = broadcastIndices(rhs.getType().getShape(),
                                             type.getShape());
  bool boolResult = type.getElementType().isInteger(1) && !elt.isInteger(1);
  if (isa<IntegerType>(elt) && intFn) {
    auto a = llvm::to_vector(lhs.getValues<APInt>());
    auto b = llvm::to_vector(rhs.getValues<APInt>());
    SmallVector<APInt> out;
    for (size_t n = 0; n < li.size(); ++n) {
      std::optional<APInt> v = intFn(a[li[n]], b[ri[n]]);
      if (!v)
        return {};
      out.push_back(*v);
    }
    return DenseElementsAttr::get(type, out);
  }
  if (isa<FloatType>(elt) && floatFn) {
    auto a = llvm::to_vector(lhs.getValues<APFloat>());
    auto b = llvm::to_vector(rhs.getValues<APFloat>());
    if (boolResult) {
      SmallVector<bool> out;
      for (size_t n = 0; n < li.size(); ++n) {
        std::optional<APFloat> v = floatFn(a[li[n]], b[ri[n]]);
        if (!v)
          return {};
        out.push_back(!v->isZero());
      }
      return DenseElementsAttr::get(type, out);
    }
    SmallVector<APFloat> out;
    for (size_t n = 0; n < li.size(); ++n) {
      std::optional<APFloat> v = floatFn(a[li[n]], b[ri[n]]);
      if (!v)
        return {};
      out.push_back(*v);
    }
    return DenseElementsAttr::get(type, out);
  }
  return {};
}

APInt boolInt(bool b) { return APInt(1, b ? 1 : 0); }
APFloat boolFloat(bool b) { return APFloat(b ? 1.0f : 0.0f); }

/// Gathers `count` elements of a constant at the given linear indices.
Attribute gatherElements(DenseElementsAttr src, ArrayRef<int64_t> indices,
                         ShapedType type) {
  if (isa<FloatType>(src.getElementType())) {
    auto all = llvm::to_vector(src.getValues<APFloat>());
    SmallVector<APFloat> out;
    for (int64_t i : indices)
      out.push_back(all[i]);
    return DenseElementsAttr::get(type, out);
  }
  auto all = llvm::to_vector(src.getValues<APInt>());
  SmallVector<APInt> out;
  for (int64_t i : indices)
    out.push_back(all[i]);
  return DenseElementsAttr::get(type, out);
}
} // namespace

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

OpFoldResult NegOp::fold(FoldAdaptor adaptor) {
  DenseElementsAttr in = asDense(adaptor.getInput());
  if (!in || !foldable(getType()))
    return {};
  if (isa<FloatType>(in.getElementType()))
    return in.mapValues(in.getElementType(), [](const APFloat &v) {
      APFloat r = v;
      r.changeSign();
      return r.bitcastToAPInt();
    });
  return in.mapValues(in.getElementType(),
                      [](const APInt &v) { return -v; });
}

OpFoldResult CastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  DenseElementsAttr in = asDense(adaptor.getInput());
  if (!in || !foldable(getType()))
    return {};
  Type from = in.getElementType(), to = getType().getElementType();
  if (auto toInt = dyn_cast<IntegerType>(to)) {
    unsigned width = toInt.getWidth();
    SmallVector<APInt> out;
    if (auto fromInt = dyn_cast<IntegerType>(from)) {
      for (const APInt &v : in.getValues<APInt>())
        out.push_back(width == 1 ? boolInt(!v.isZero())
                      : fromInt.getWidth() == 1 ? v.zext(width)
                                                : v.sextOrTrunc(width));
    } else {
      for (const APFloat &v : in.getValues<APFloat>()) {
        if (width == 1) {
          out.push_back(boolInt(!v.isZero()));
          continue;
        }
        APSInt r(width, /*isUnsigned=*/false);
        bool exact;
        v.convertToInteger(r, APFloat::rmTowardZero, &exact);
        out.push_back(r);
      }
    }
    return DenseElementsAttr::get(getType(), out);
  }
  auto toFloat = cast<FloatType>(to);
  SmallVector<APFloat> out;
  if (auto fromInt = dyn_cast<IntegerType>(from)) {
    for (const APInt &v : in.getValues<APInt>()) {
      APFloat f(toFloat.getFloatSemantics());
      f.convertFromAPInt(v, /*isSigned=*/fromInt.getWidth() != 1,
                         APFloat::rmNearestTiesToEven);
      out.push_back(f);
    }
  } else {
    for (APFloat v : in.getValues<APFloat>()) {
      bool lost;
      v.convert(toFloat.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                &lost);
      out.push_back(v);
    }
  }
  return DenseElementsAttr::get(getType(), out);
}

OpFoldResult AddOp::fold(FoldAdaptor a) {
  return foldBinary(
      a.getLhs(), a.getRhs(), getType(),
      [](const APInt &x, const APInt &y) { return x + y; },
      [](const APFloat &x, const APFloat &y) { return x + y; });
}
OpFoldResult SubOp::fold(FoldAdaptor a) {
  return foldBinary(
      a.getLhs(), a.getRhs(), getType(),
      [](const APInt &x, const APInt &y) { return x - y; },
      [](const APFloat &x, const APFloat &y) { return x - y; });
}
OpFoldResult MulOp::fold(FoldAdaptor a) {
  return foldBinary(
      a.getLhs(), a.getRhs(), getType(),
      [](const APInt &x, const APInt &y) { return x * y; },
      [](const APFloat &x, const APFloat &y) { return x * y; });
}
OpFoldResult DivOp::fold(FoldAdaptor a) {
  return foldBinary(
      a.getLhs(), a.getRhs(), getType(),
      [](const APInt &x, const APInt &y) -> std::optional<APInt> {
        if (y.isZero())
          return std::nullopt;
        return x.sdiv(y);
      },
      [](const APFloat &x, const APFloat &y) { return x / y; });
}
OpFoldResult PowOp::fold(FoldAdaptor a) {
  return foldBinary(a.getLhs(), a.getRhs(), getType(), nullptr,
                    [](const APFloat &x, const APFloat &y) {
                      double r = std::pow(x.convertToDouble(),
                                          y.convertToDouble());
                      APFloat f(r);
                      bool lost;
                      f.convert(x.getSemantics(),
                                APFloat::rmNearestTiesToEven, &lost);
                      return std::optional<APFloat>(f);
                    });
}
OpFoldResult MaxOp::fold(FoldAdaptor a) {
  return foldBinary(
      a.getLhs(), a.getRhs(), getType(),
      [](const APInt &x, const APInt &y) { return x.sge(y) ? x : y; },
      [](const APFloat &x, const APFloat &y) { return llvm::maximum(x, y); });
}
OpFoldResult MinOp::fold(FoldAdaptor a) {
  return foldBinary(
      a.getLhs(), a.getRhs(), getType(),
      [](const APInt &x, const APInt &y) { return x.sle(y) ? x : y; },
      [](const APFloat &x, const APFloat &y) { return llvm::minimum(x, y); });
}
OpFoldResult AndOp::fold(FoldAdaptor a) {
  return foldBinary(
      a.getLhs(), a.getRhs(), getType(),
      [](const APInt &x, const APInt &y) { return x & y; }, nullptr);
}
OpFoldResult OrOp::fold(FoldAdaptor a) {
  return foldBinary(
      a.getLhs(), a.getRhs(), getType(),
      [](const APInt &x, const APInt &y) { return x | y; }, nullptr);
}

OpFoldResult CompareOp::fold(FoldAdaptor a) {
  ComparePredicate pred = getPredicate();
  auto intCmp = [pred](const APInt &x, const APInt &y) -> std::optional<APInt> {
    switch (pred) {
    case ComparePredicate::eq: return boolInt(x == y);
    case ComparePredicate::lt: return boolInt(x.slt(y));
    case ComparePredicate::le: return boolInt(x.sle(y));
    case ComparePredicate::gt: return boolInt(x.sgt(y));
    case ComparePredicate::ge: return boolInt(x.sge(y));
    }
    return std::nullopt;
  };
  auto floatCmp = [pred](const APFloat &x,
                         const APFloat &y) -> std::optional<APFloat> {
    APFloat::cmpResult c = x.compare(y);
    switch (pred) {
    case ComparePredicate::eq: return boolFloat(c == APFloat::cmpEqual);
    case ComparePredicate::lt: return boolFloat(c == APFloat::cmpLessThan);
    case ComparePredicate::le:
      return boolFloat(c == APFloat::cmpLessThan || c == APFloat::cmpEqual);
    case ComparePredicate::gt: return boolFloat(c == APFloat::cmpGreaterThan);
    case ComparePredicate::ge:
      return boolFloat(c == APFloat::cmpGreaterThan || c == APFloat::cmpEqual);
    }
    return std::nullopt;
  };
  return foldBinary(a.getLhs(), a.getRhs(), getType(), intCmp, floatCmp);
}

OpFoldResult ShapeOp::fold(FoldAdaptor) {
  auto in = getInput().getType();
  int64_t rank = in.getRank();
  int64_t start = normalizeAxis(getStart(), rank);
  int64_t end = getEnd() ? normalizeAxis(*getEnd(), rank) : rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  SmallVector<APInt> dims;
  for (int64_t i = start; i < end; ++i) {
    if (in.isDynamicDim(i))
      return {};
    dims.push_back(APInt(64, in.getDimSize(i)));
  }
  if (!getType().hasStaticShape() ||
      getType().getNumElements() != static_cast<int64_t>(dims.size()))
    return {};
  return DenseElementsAttr::get(getType(), dims);
}

OpFoldResult GatherOp::fold(FoldAdaptor adaptor) {
  DenseElementsAttr data = asDense(adaptor.getData());
  DenseElementsAttr idx = asDense(adaptor.getIndices());
  if (!data || !idx || !foldable(getType()) || !data.getType().hasStaticShape())
    return {};
  ArrayRef<int64_t> dshape = data.getType().getShape();
  const int64_t rank = static_cast<int64_t>(dshape.size());
  const int64_t axis = normalizeAxis(getAxis(), rank);
  if (axis < 0 || axis >= rank)
    return {};
  int64_t outer = 1, inner = 1, n = dshape[axis];
  for (int64_t i = 0; i < axis; ++i)
    outer *= dshape[i];
  for (size_t i = axis + 1; i < dshape.size(); ++i)
    inner *= dshape[i];
  SmallVector<int64_t> ids;
  for (const APInt &v : idx.getValues<APInt>()) {
    int64_t id = v.getSExtValue();
    if (id < 0)
      id += n;
    if (id < 0 || id >= n)
      return {}; // out of range: leave it for the runtime check
    ids.push_back(id);
  }
  SmallVector<int64_t> linear;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t id : ids)
      for (int64_t i = 0; i < inner; ++i)
        linear.push_back((o * n + id) * inner + i);
  return gatherElements(data, linear, getType());
}

/// True when every entry of `op`'s target is provably its input's dim at
/// that index (ONNX's 0, the same static size, or a dim of the same origin;
/// at most one -1, which then infers that dim too): the reshape copies.
static bool keepsShape(ReshapeOp op) {
  auto type = cast<RankedTensorType>(op.getType());
  std::optional<SmallVector<ShapeEntry>> entries = shapeEntries(op.getShape());
  if (!entries || static_cast<int64_t>(entries->size()) != type.getRank())
    return false;
  int inferred = 0;
  for (auto [i, e] : llvm::enumerate(*entries)) {
    const int64_t d = static_cast<int64_t>(i);
    if (e.kind == ShapeEntry::Constant) {
      if ((e.constant == 0 && !op.getAllowzero()) ||
          (!type.isDynamicDim(d) && e.constant == type.getDimSize(d)))
        continue;
      if (e.constant == -1 && ++inferred == 1)
        continue;
      return false;
    }
    if (e.kind != ShapeEntry::Dim ||
        !sameDim(e.dim.value, e.dim.index, op.getInput(), d))
      return false;
  }
  return true;
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType() && getType().hasStaticShape())
    return getInput();
  // `x.transpose(1, 2).reshape(batch, heads, q_len, hd)` (Falcon's heads):
  // the target read from other tensors' shapes, dynamic batch and length.
  if (getInput().getType() == getType() && keepsShape(*this))
    return getInput();
  if (DenseElementsAttr in = asDense(adaptor.getInput()))
    if (foldable(getType()))
      return in.reshape(getType());
  return {};
}

OpFoldResult UnsqueezeOp::fold(FoldAdaptor adaptor) {
  if (DenseElementsAttr in = asDense(adaptor.getInput()))
    if (foldable(getType()))
      return in.reshape(getType());
  return {};
}

OpFoldResult SqueezeOp::fold(FoldAdaptor adaptor) {
  if (getAxes().empty() && getInput().getType() == getType())
    return getInput();
  if (DenseElementsAttr in = asDense(adaptor.getInput()))
    if (foldable(getType()))
      return in.reshape(getType());
  return {};
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  for (auto [i, p] : llvm::enumerate(getPermutation()))
    if (static_cast<int64_t>(i) != p)
      return {};
  return getInput().getType() == getType() ? getInput() : Value();
}

OpFoldResult ConcatOp::fold(FoldAdaptor adaptor) {
  if (getInputs().size() == 1 && getInputs()[0].getType() == getType())
    return getInputs()[0];
  if (!foldable(getType()))
    return {};
  ArrayRef<int64_t> shape = getType().getShape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t axis = normalizeAxis(getAxis(), rank);
  if (axis < 0 || axis >= rank)
    return {};
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= shape[i];
  for (size_t i = axis + 1; i < shape.size(); ++i)
    inner *= shape[i];
  SmallVector<DenseElementsAttr> parts;
  for (Attribute a : adaptor.getInputs()) {
    DenseElementsAttr d = asDense(a);
    if (!d || !d.getType().hasStaticShape())
      return {};
    parts.push_back(d);
  }
  bool isFloat = isa<FloatType>(getType().getElementType());
  SmallVector<APInt> ints;
  SmallVector<APFloat> floats;
  for (int64_t o = 0; o < outer; ++o)
    for (DenseElementsAttr d : parts) {
      int64_t chunk = d.getType().getDimSize(axis) * inner;
      if (isFloat) {
        auto vals = llvm::to_vector(d.getValues<APFloat>());
        floats.append(vals.begin() + o * chunk, vals.begin() + (o + 1) * chunk);
      } else {
        auto vals = llvm::to_vector(d.getValues<APInt>());
        ints.append(vals.begin() + o * chunk, vals.begin() + (o + 1) * chunk);
      }
    }
  return isFloat ? DenseElementsAttr::get(getType(), floats)
                 : DenseElementsAttr::get(getType(), ints);
}

OpFoldResult SliceOp::fold(FoldAdaptor adaptor) {
  DenseElementsAttr data = asDense(adaptor.getData());
  DenseElementsAttr starts = asDense(adaptor.getStarts());
  DenseElementsAttr ends = asDense(adaptor.getEnds());
  DenseElementsAttr axes = asDense(adaptor.getAxes());
  DenseElementsAttr steps = asDense(adaptor.getSteps());
  if (!data || !starts || !ends || !axes || !steps || !foldable(getType()) ||
      !data.getType().hasStaticShape())
    return {};
  ArrayRef<int64_t> shape = data.getType().getShape();
  int64_t rank = shape.size();
  SmallVector<int64_t> begin(rank, 0), step(rank, 1), count(shape);
  auto s = llvm::to_vector(starts.getValues<APInt>());
  auto e = llvm::to_vector(ends.getValues<APInt>());
  auto ax = llvm::to_vector(axes.getValues<APInt>());
  auto st = llvm::to_vector(steps.getValues<APInt>());
  if (s.size() != ax.size() || e.size() != ax.size() || st.size() != ax.size())
    return {};
  for (size_t i = 0; i < ax.size(); ++i) {
    const int64_t a = normalizeAxis(ax[i].getSExtValue(), rank);
    if (a < 0 || a >= rank)
      return {};
    int64_t dim = shape[a], k = st[i].getSExtValue();
    if (k == 0)
      return {};
    count[a] = sliceExtent(dim, s[i].getSExtValue(), e[i].getSExtValue(), k,
                           begin[a]);
    step[a] = k;
  }
  if (ArrayRef<int64_t>(count) != getType().getShape())
    return {};
  SmallVector<int64_t> strides = stridesOf(shape);
  SmallVector<int64_t> linear;
  SmallVector<int64_t> idx(rank, 0);
  int64_t total = getType().getNumElements();
  for (int64_t n = 0; n < total; ++n) {
    int64_t src = 0;
    for (int64_t i = 0; i < rank; ++i)
      src += (begin[i] + idx[i] * step[i]) * strides[i];
    linear.push_back(src);
    for (int64_t i = rank - 1; i >= 0; --i) {
      if (++idx[i] < count[i])
        break;
      idx[i] = 0;
    }
  }
  return gatherElements(data, linear, getType());
}

OpFoldResult RangeOp::fold(FoldAdaptor adaptor) {
  DenseElementsAttr start = asDense(adaptor.getStart());
  DenseElementsAttr limit = asDense(adaptor.getLimit());
  DenseElementsAttr delta = asDense(adaptor.getDelta());
  if (!start || !limit || !delta || !foldable(getType()))
    return {};
  int64_t n = getType().getNumElements();
  if (isa<IntegerType>(getType().getElementType())) {
    int64_t s = (*start.getValues<APInt>().begin()).getSExtValue();
    int64_t d = (*delta.getValues<APInt>().begin()).getSExtValue();
    unsigned width = getType().getElementTypeBitWidth();
    SmallVector<APInt> out;
    for (int64_t i = 0; i < n; ++i)
      out.push_back(APInt(width, s + i * d, /*isSigned=*/true));
    return DenseElementsAttr::get(getType(), out);
  }
  double s = (*start.getValues<APFloat>().begin()).convertToDouble();
  double d = (*delta.getValues<APFloat>().begin()).convertToDouble();
  SmallVector<APFloat> out;
  for (int64_t i = 0; i < n; ++i) {
    APFloat f(s + i * d);
    bool lost;
    f.convert(cast<FloatType>(getType().getElementType()).getFloatSemantics(),
              APFloat::rmNearestTiesToEven, &lost);
    out.push_back(f);
  }
  return DenseElementsAttr::get(getType(), out);
}

OpFoldResult ConstantOfShapeOp::fold(FoldAdaptor) {
  if (!foldable(getType()))
    return {};
  auto typed = dyn_cast<TypedAttr>(getValue());
  if (!typed || typed.getType() != getType().getElementType())
    return {};
  return DenseElementsAttr::get(getType(), typed);
}
