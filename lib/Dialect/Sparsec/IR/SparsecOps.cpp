//===- SparsecOps.cpp - sparsec op verifiers and shape inference ---------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Dialect/Sparsec/IR/DimAnalysis.h"
#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

#include <cmath>

using namespace mlir;
using namespace sparsec;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static RankedTensorType rankedType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// Prints a dimension the way users read shapes: `?` for dynamic.
static std::string dimStr(int64_t d) {
  return ShapedType::isDynamic(d) ? std::string("?") : std::to_string(d);
}

/// Broadcasts shapes with numpy rules. Returns failure on a static mismatch.
static LogicalResult broadcastShapes(ArrayRef<ArrayRef<int64_t>> shapes,
                                     SmallVectorImpl<int64_t> &result) {
  result.clear();
  for (ArrayRef<int64_t> shape : shapes) {
    SmallVector<int64_t> next;
    if (!OpTrait::util::getBroadcastedShape(result, shape, next))
      return failure();
    result = std::move(next);
  }
  return success();
}

/// Reads a constant 1-D integer operand (a shape or axes vector).
std::optional<SmallVector<int64_t>> sparsec::getConstantInts(Value v) {
  DenseIntElementsAttr attr;
  if (!v || !matchPattern(v, m_Constant(&attr)))
    return std::nullopt;
  SmallVector<int64_t> values;
  for (const APInt &x : attr.getValues<APInt>())
    values.push_back(x.getSExtValue());
  return values;
}

/// The values of a 1-D integer shape vector where known: constants, and the
/// Shape -> Gather -> Unsqueeze -> Concat chains exporters build shapes
/// with. Unknown entries are kDynamic; nullopt when even the length is
/// unknown.
static std::optional<SmallVector<int64_t>> getPartialInts(Value v,
                                                          int depth = 0) {
  if (!v || depth > 16)
    return std::nullopt;
  if (auto values = getConstantInts(v))
    return values;
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || type.getRank() > 1 || !type.hasStaticShape())
    return std::nullopt;
  int64_t n = type.getRank() == 0 ? 1 : type.getDimSize(0);
  Operation *op = v.getDefiningOp();
  if (auto concat = dyn_cast_if_present<ConcatOp>(op)) {
    SmallVector<int64_t> out;
    for (Value in : concat.getInputs()) {
      auto part = getPartialInts(in, depth + 1);
      if (!part)
        return std::nullopt;
      out.append(*part);
    }
    return out;
  }
  if (isa_and_present<UnsqueezeOp, SqueezeOp, CastOp>(op))
    if (auto part = getPartialInts(op->getOperand(0), depth + 1))
      return part;
  if (auto shape = dyn_cast_if_present<ShapeOp>(op)) {
    auto in = rankedType(shape.getInput());
    int64_t rank = in.getRank();
    int64_t start = std::clamp<int64_t>(normalizeAxis(shape.getStart(), rank),
                                        0, rank);
    int64_t end = shape.getEnd()
                      ? std::clamp<int64_t>(
                            normalizeAxis(*shape.getEnd(), rank), start, rank)
                      : rank;
    return SmallVector<int64_t>(in.getShape().slice(start, end - start));
  }
  if (auto gather = dyn_cast_if_present<GatherOp>(op)) {
    auto data = getPartialInts(gather.getData(), depth + 1);
    auto idx = getConstantInts(gather.getIndices());
    if (data && idx) {
      SmallVector<int64_t> out;
      for (int64_t i : *idx) {
        if (i < 0)
          i += data->size();
        if (i < 0 || i >= static_cast<int64_t>(data->size()))
          return std::nullopt;
        out.push_back((*data)[i]);
      }
      return out;
    }
  }
  return SmallVector<int64_t>(n, ShapedType::kDynamic);
}

//===----------------------------------------------------------------------===//
// Constants and weights
//===----------------------------------------------------------------------===//

LogicalResult
WeightOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto global =
      symbolTable.lookupNearestSymbolFrom<GlobalOp>(*this, getNameAttr());
  if (!global)
    return emitOpError("references unknown weight '")
           << getName() << "'";
  if (global.getType() != getType())
    return emitOpError("result type ")
           << getType() << " does not match the declared weight type "
           << global.getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise shape inference
//===----------------------------------------------------------------------===//

static LogicalResult
inferBroadcast(std::optional<Location> loc, ValueRange operands,
               Type elementType,
               SmallVectorImpl<ShapedTypeComponents> &inferred) {
  SmallVector<ArrayRef<int64_t>> shapes;
  for (Value v : operands)
    shapes.push_back(rankedType(v).getShape());
  SmallVector<int64_t> shape;
  if (failed(broadcastShapes(shapes, shape)))
    return emitOptionalError(loc, "operand shapes are not broadcastable");
  inferred.emplace_back(shape, elementType);
  return success();
}

#define SPARSEC_BINARY_INFER(OP)                                               \
  LogicalResult OP::inferReturnTypeComponents(                                 \
      MLIRContext *, std::optional<Location> loc, OP::Adaptor adaptor,         \
      SmallVectorImpl<ShapedTypeComponents> &inferred) {                       \
    return inferBroadcast(loc, {adaptor.getLhs(), adaptor.getRhs()},           \
                          rankedType(adaptor.getLhs()).getElementType(),       \
                          inferred);                                           \
  }
SPARSEC_BINARY_INFER(AddOp)
SPARSEC_BINARY_INFER(SubOp)
SPARSEC_BINARY_INFER(MulOp)
SPARSEC_BINARY_INFER(DivOp)
SPARSEC_BINARY_INFER(PowOp)
SPARSEC_BINARY_INFER(MaxOp)
SPARSEC_BINARY_INFER(MinOp)
SPARSEC_BINARY_INFER(AndOp)
SPARSEC_BINARY_INFER(OrOp)
#undef SPARSEC_BINARY_INFER

LogicalResult CompareOp::inferReturnTypeComponents(
    MLIRContext *ctx, std::optional<Location> loc, CompareOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  return inferBroadcast(loc, {adaptor.getLhs(), adaptor.getRhs()},
                        IntegerType::get(ctx, 1), inferred);
}

LogicalResult WhereOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location> loc, WhereOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  return inferBroadcast(
      loc, {adaptor.getCondition(), adaptor.getX(), adaptor.getY()},
      rankedType(adaptor.getX()).getElementType(), inferred);
}

LogicalResult WhereOp::verify() {
  Type xElt = getX().getType().getElementType();
  if (xElt != getY().getType().getElementType() ||
      xElt != getType().getElementType())
    return emitOpError("x, y and result must have the same element type");
  SmallVector<int64_t> shape;
  if (failed(broadcastShapes({getCondition().getType().getShape(),
                              getX().getType().getShape(),
                              getY().getType().getShape()},
                             shape)))
    return emitOpError("operand shapes are not broadcastable");
  return success();
}

//===----------------------------------------------------------------------===//
// MatMul / Linear
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location> loc, MatMulOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  auto lhs = rankedType(adaptor.getLhs());
  auto rhs = rankedType(adaptor.getRhs());
  ArrayRef<int64_t> a = lhs.getShape(), b = rhs.getShape();
  if (a.empty() || b.empty())
    return emitOptionalError(loc, "matmul operands must have rank >= 1");
  SmallVector<int64_t> batchA(a.begin(), a.end() - std::min<size_t>(2, a.size()));
  SmallVector<int64_t> batchB(b.begin(), b.end() - std::min<size_t>(2, b.size()));
  SmallVector<int64_t> shape;
  if (failed(broadcastShapes({batchA, batchB}, shape)))
    return emitOptionalError(loc, "matmul batch dimensions do not broadcast");
  if (a.size() >= 2)
    shape.push_back(a[a.size() - 2]);
  if (b.size() >= 2)
    shape.push_back(b.back());
  inferred.emplace_back(shape, lhs.getElementType());
  return success();
}

LogicalResult MatMulOp::verify() {
  ArrayRef<int64_t> a = getLhs().getType().getShape();
  ArrayRef<int64_t> b = getRhs().getType().getShape();
  if (a.empty() || b.empty())
    return emitOpError("operands must have rank >= 1");
  int64_t k1 = a.back();
  int64_t k2 = b.size() >= 2 ? b[b.size() - 2] : b[0];
  if (!compatibleDims(k1, k2))
    return emitOpError("contracting dimensions differ: ")
           << dimStr(k1) << " vs " << dimStr(k2);
  return success();
}

/// Shared contract of linear and sparse_linear: returns (K, N).
static LogicalResult verifyLinearLike(Operation *op, RankedTensorType input,
                                      RankedTensorType weight, Value bias,
                                      bool transposed, RankedTensorType result,
                                      int64_t &k, int64_t &n) {
  if (input.getRank() < 1)
    return op->emitOpError("input must have rank >= 1");
  if (weight.getRank() != 2)
    return op->emitOpError("weight must be 2-D, got rank ")
           << weight.getRank();
  k = transposed ? weight.getDimSize(1) : weight.getDimSize(0);
  n = transposed ? weight.getDimSize(0) : weight.getDimSize(1);
  if (!compatibleDims(input.getShape().back(), k))
    return op->emitOpError("input feature dimension ")
           << dimStr(input.getShape().back())
           << " does not match weight input dimension " << dimStr(k);
  if (result.getRank() != input.getRank())
    return op->emitOpError("result rank ")
           << result.getRank() << " differs from input rank "
           << input.getRank();
  if (!compatibleDims(result.getShape().back(), n))
    return op->emitOpError("result feature dimension ")
           << dimStr(result.getShape().back())
           << " does not match weight output dimension " << dimStr(n);
  for (int64_t i = 0, e = input.getRank() - 1; i < e; ++i)
    if (!compatibleDims(input.getDimSize(i), result.getDimSize(i)))
      return op->emitOpError("result dimension ")
             << i << " differs from input dimension";
  if (bias) {
    auto b = rankedType(bias);
    if (b.getRank() < 1 || !compatibleDims(b.getShape().back(), n) ||
        llvm::any_of(b.getShape().drop_back(),
                     [](int64_t d) { return d != 1; }))
      return op->emitOpError("bias must be [N] (or [1, N]) with N = ")
             << dimStr(n) << ", got " << b;
  }
  return success();
}

LogicalResult LinearOp::verify() {
  int64_t k, n;
  return verifyLinearLike(*this, getInput().getType(), getWeight().getType(),
                          getBias(), getTransposeWeight(), getType(), k, n);
}

LogicalResult LinearGroupOp::verify() {
  size_t n = getWeights().size();
  Value scale = getNormScale();
  if (n < (scale ? 1u : 2u))
    return emitOpError("needs at least ")
           << (scale ? "1 weight" : "2 weights (or a norm)") << ", got " << n;
  if (n > 4)
    return emitOpError("takes at most 4 weights (the CUDA kernel's limit), got ")
           << n;
  if (getInput().getType().getRank() < 1)
    return emitOpError("input must have rank >= 1");
  if (!scale && (getNormBias() || getNormEpsilon() || getNormRms()))
    return emitOpError("has norm attributes or a norm bias but no norm_scale");
  if (scale) {
    if (!getNormEpsilon())
      return emitOpError("needs norm_epsilon with a norm");
    if (getNormRms() && getNormBias())
      return emitOpError("an RMS norm takes no bias");
    int64_t k = getInput().getType().getShape().back();
    for (Value v : {scale, Value(getNormBias())}) {
      if (!v)
        continue;
      auto t = cast<RankedTensorType>(v.getType());
      if (t.getRank() != 1 || !compatibleDims(t.getDimSize(0), k))
        return emitOpError("norm scale and bias must be [K] with K = ")
               << dimStr(k) << ", got " << t;
    }
  }
  if (!getBiases().empty() && getBiases().size() != n)
    return emitOpError("has ")
           << getBiases().size() << " biases for " << n
           << " weights (one per weight, or none)";
  if (getResults().size() != n)
    return emitOpError("has ")
           << getResults().size() << " results for " << n << " weights";
  for (size_t i = 0; i < n; ++i) {
    int64_t k, m;
    if (failed(verifyLinearLike(
            *this, getInput().getType(),
            cast<RankedTensorType>(getWeights()[i].getType()),
            getBiases().empty() ? Value() : getBiases()[i],
            /*transposed=*/true,
            cast<RankedTensorType>(getResults()[i].getType()), k, m)))
      return failure();
  }
  return success();
}

LogicalResult LinearOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location>, LinearOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  auto input = rankedType(adaptor.getInput());
  auto weight = rankedType(adaptor.getWeight());
  SmallVector<int64_t> shape(input.getShape());
  if (!shape.empty() && weight.getRank() == 2)
    shape.back() = weight.getDimSize(adaptor.getTransposeWeight() ? 0 : 1);
  inferred.emplace_back(shape, input.getElementType());
  return success();
}

LogicalResult SparseLinearOp::verify() {
  int64_t k, n;
  if (failed(verifyLinearLike(*this, getInput().getType(),
                              getWeight().getType(), getBias(),
                              getTransposeWeight(), getType(), k, n)))
    return failure();
  if (Value active = getActive()) {
    int64_t expected = getSparseDim() == SparseDim::output ? n : k;
    int64_t got = rankedType(active).getShape().empty()
                      ? 1
                      : rankedType(active).getShape().back();
    if (!compatibleDims(expected, got))
      return emitOpError("active mask covers ")
             << dimStr(got) << " neurons but the "
             << stringifySparseDim(getSparseDim()) << " side has "
             << dimStr(expected);
  } else if (getMode() == SparseMode::predicted) {
    return emitOpError("predicted mode needs an active mask operand");
  }
  if (auto act = getActivation()) {
    if (getSparseDim() != SparseDim::output)
      return emitOpError("an activation epilogue needs sparse_dim = output");
    if (*act == Activation::sigmoid)
      return emitOpError("the activation epilogue must map 0 to 0 (the "
                         "neurons not computed stay 0)");
  }
  if (auto tile = getPitTile()) {
    if (getSparseDim() != SparseDim::input)
      return emitOpError("pit_tile needs sparse_dim = input");
    if (*tile != 0 && *tile != 8 && *tile != 16 && *tile != 32)
      return emitOpError("pit_tile must be 0 (dense), 8, 16 or 32, got ")
             << *tile;
  }
  if (auto columns = getPitColumns()) {
    if (getPitTile().value_or(0) == 0)
      return emitOpError("pit_columns needs a PIT tile (pit_tile 8, 16 or 32)");
    if (*columns != 128 && *columns != 256)
      return emitOpError("pit_columns must be 128 or 256, got ") << *columns;
  }
  return success();
}

LogicalResult PredictOp::verify() {
  auto in = getInput().getType();
  auto w1 = getW1().getType();
  auto w2 = getW2().getType();
  if (w1.getRank() != 2 || w2.getRank() != 2)
    return emitOpError("predictor weights must be 2-D");
  if (!compatibleDims(in.getShape().back(), w1.getDimSize(0)) ||
      !compatibleDims(w1.getDimSize(1), w2.getDimSize(0)))
    return emitOpError("predictor shapes do not chain: input ")
           << in << ", w1 " << w1 << ", w2 " << w2;
  if (getMask().getType().getRank() < 1 ||
      !compatibleDims(getMask().getType().getShape().back(),
                      w2.getDimSize(1)))
    return emitOpError("mask must cover the ")
           << dimStr(w2.getDimSize(1)) << " neurons of w2";
  if (getBias() && (rankedType(getBias()).getRank() != 1 ||
                    !compatibleDims(rankedType(getBias()).getDimSize(0),
                                    w2.getDimSize(1))))
    return emitOpError("bias must be 1-D over the ")
           << dimStr(w2.getDimSize(1)) << " neurons of w2";
  if (!std::isfinite(getThreshold().convertToFloat()))
    return emitOpError("threshold must be finite");
  return success();
}

LogicalResult ProfileCountOp::verify() {
  if (!getLayerInput())
    return success();
  auto in = getInput().getType();
  auto layer = cast<RankedTensorType>(getLayerInput().getType());
  if (layer.getRank() != in.getRank())
    return emitOpError("layer_input ")
           << layer << " must have the rank of the activation " << in;
  for (int64_t i = 0; i + 1 < in.getRank(); ++i)
    if (!compatibleDims(layer.getDimSize(i), in.getDimSize(i)))
      return emitOpError("layer_input ")
             << layer << " and the activation " << in
             << " disagree on the number of tokens";
  return success();
}

/// `axis` (negative counts from the end) checked against `rank`, reported
/// on `op` as written when out of range; `inclusive` also allows rank itself
/// (Flatten). Returns the normalized axis.
static FailureOr<int64_t> verifiedAxis(Operation *op, int64_t axis,
                                       int64_t rank, bool inclusive = false) {
  const int64_t n = normalizeAxis(axis, rank);
  if (n < 0 || n > rank || (n == rank && !inclusive)) {
    op->emitOpError("axis ") << axis << " out of range for rank " << rank;
    return failure();
  }
  return n;
}

//===----------------------------------------------------------------------===//
// Normalisation, softmax, attention, embedding, conv
//===----------------------------------------------------------------------===//

LogicalResult LayerNormOp::verify() {
  auto in = getInput().getType();
  FailureOr<int64_t> verified =
      verifiedAxis(*this, static_cast<int64_t>(getAxis()), in.getRank());
  if (failed(verified))
    return failure();
  const int64_t axis = *verified;
  ArrayRef<int64_t> normalized = in.getShape().drop_front(axis);
  auto checkParam = [&](Value v, StringRef what) -> LogicalResult {
    ArrayRef<int64_t> s = rankedType(v).getShape();
    // Compared only when every size is known (a dynamic size's marker
    // would overflow the product).
    if (llvm::any_of(s, ShapedType::isDynamic) ||
        llvm::any_of(normalized, ShapedType::isDynamic))
      return success();
    int64_t numel = ShapedType::getNumElements(s);
    int64_t expected = ShapedType::getNumElements(normalized);
    if (numel != expected)
      return emitOpError() << what << " has " << numel
                           << " elements but the normalized shape has "
                           << expected;
    return success();
  };
  if (failed(checkParam(getScale(), "scale")))
    return failure();
  if (getBias() && failed(checkParam(getBias(), "bias")))
    return failure();
  return success();
}

LogicalResult RmsNormOp::verify() {
  auto s = getScale().getType();
  if (s.getRank() != 1 ||
      !compatibleDims(s.getDimSize(0), getInput().getType().getShape().back()))
    return emitOpError("scale must be 1-D over the last input dimension");
  return success();
}

LogicalResult RotaryOp::verify() {
  auto x = getInput().getType(), c = getCos().getType();
  if (x.getElementType() != c.getElementType())
    return emitOpError("cos and sin must have the input's element type");
  if (x.getRank() < 1)
    return emitOpError("input must have rank >= 1");
  int64_t d = x.getShape().back();
  if (!ShapedType::isDynamic(d) && d % 2 != 0)
    return emitOpError("the last dimension (") << d << ") must be even";
  SmallVector<int64_t> shape;
  if (c.getRank() > x.getRank() ||
      failed(broadcastShapes({x.getShape(), c.getShape()}, shape)) ||
      !llvm::all_of(llvm::zip_equal(shape, x.getShape()), [](auto p) {
        return compatibleDims(std::get<0>(p), std::get<1>(p));
      }))
    return emitOpError("cos and sin ")
           << c << " must broadcast to the input " << x;
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return verifiedAxis(*this, static_cast<int64_t>(getAxis()),
                      getType().getRank());
}

LogicalResult CumSumOp::verify() {
  return verifiedAxis(*this, static_cast<int64_t>(getAxis()),
                      getInput().getType().getRank());
}

/// Flatten's axis may also be the rank itself (everything in the outer dim).
LogicalResult FlattenOp::verify() {
  return verifiedAxis(*this, static_cast<int64_t>(getAxis()),
                      getInput().getType().getRank(), /*inclusive=*/true);
}

LogicalResult AttentionOp::verify() {
  auto q = getQuery().getType(), k = getKey().getType(),
       v = getValue().getType();
  // Where the heads and the sequence lie in query, key, value and result.
  const bool tokenMajor = getTokenMajor();
  const unsigned hd = tokenMajor ? 2 : 1, sd = tokenMajor ? 1 : 2;
  const char *layout = tokenMajor ? "[B, S, H, D]" : "[B, H, S, D]";
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
    return emitOpError("query, key and value must be ") << layout;
  if (!compatibleDims(q.getDimSize(3), k.getDimSize(3)))
    return emitOpError("query and key head sizes differ: ")
           << dimStr(q.getDimSize(3)) << " vs " << dimStr(k.getDimSize(3));
  if (!compatibleDims(k.getDimSize(sd), v.getDimSize(sd)))
    return emitOpError("key and value sequence lengths differ");
  if (!compatibleDims(q.getDimSize(0), k.getDimSize(0)) ||
      !compatibleDims(q.getDimSize(0), v.getDimSize(0)) ||
      !compatibleDims(k.getDimSize(hd), v.getDimSize(hd)))
    return emitOpError("query, key and value disagree on batch or heads");
  // Grouped-query attention: each key/value head serves a group of query
  // heads.
  const int64_t hq = q.getDimSize(hd), hk = k.getDimSize(hd);
  if (!ShapedType::isDynamic(hq) && !ShapedType::isDynamic(hk) &&
      (hk == 0 || hq % hk != 0))
    return emitOpError("query heads (")
           << hq << ") must be a multiple of the key and value heads (" << hk
           << ")";
  bool hasPast = static_cast<bool>(getPastKey());
  if (hasPast != static_cast<bool>(getPastValue()))
    return emitOpError("past_key and past_value must be given together");
  if (hasPast != static_cast<bool>(getPresentKey()) ||
      hasPast != static_cast<bool>(getPresentValue()))
    return emitOpError(
        "present_key/present_value results exist exactly when past is given");
  if (hasPast) {
    // The cache is [B, H, P, D] in either layout.
    auto cacheMatches = [&](Type t, RankedTensorType cur) {
      auto c = dyn_cast<RankedTensorType>(t);
      return c && c.getRank() == 4 &&
             compatibleDims(c.getDimSize(0), cur.getDimSize(0)) &&
             compatibleDims(c.getDimSize(1), cur.getDimSize(hd)) &&
             compatibleDims(c.getDimSize(3), cur.getDimSize(3));
    };
    if (!cacheMatches(getPastKey().getType(), k) ||
        !cacheMatches(getPastValue().getType(), v) ||
        !cacheMatches(getPresentKey().getType(), k) ||
        !cacheMatches(getPresentValue().getType(), v))
      return emitOpError("past and present keys and values must be [B, H, P, "
                         "D] with the new keys' batch, heads and head size");
  }
  if (Value mask = getMask())
    if (rankedType(mask).getRank() > 4)
      return emitOpError("mask must broadcast to [B, H, Sq, Sk]");
  auto r = getResult().getType();
  if (r.getRank() != 4 || !compatibleDims(r.getDimSize(0), q.getDimSize(0)) ||
      !compatibleDims(r.getDimSize(hd), q.getDimSize(hd)) ||
      !compatibleDims(r.getDimSize(sd), q.getDimSize(sd)) ||
      !compatibleDims(r.getDimSize(3), v.getDimSize(3)))
    return emitOpError("result must be ")
           << (tokenMajor ? "[B, Sq, H, Dv]" : "[B, H, Sq, Dv]");
  return success();
}

LogicalResult EmbeddingOp::verify() {
  auto table = getTable().getType();
  if (table.getRank() != 2)
    return emitOpError("table must be 2-D [vocab, dim]");
  if (getType().getRank() != getIds().getType().getRank() + 1 ||
      !compatibleDims(getType().getShape().back(), table.getDimSize(1)))
    return emitOpError("result must be ids shape + [")
           << dimStr(table.getDimSize(1)) << "]";
  if (!getTable2() != !getIds2())
    return emitOpError("a second lookup needs both its table and its ids");
  if (getTable2()) {
    auto table2 = getTable2().getType();
    auto ids = getIds().getType(), ids2 = getIds2().getType();
    if (table2.getRank() != 2 ||
        !compatibleDims(table2.getDimSize(1), table.getDimSize(1)))
      return emitOpError("second table must be 2-D [vocab, ")
             << dimStr(table.getDimSize(1)) << "]";
    if (table2.getElementType() != table.getElementType())
      return emitOpError("tables must have one element type");
    if (failed(verifyCompatibleShape(ids.getShape(), ids2.getShape())))
      return emitOpError("second ids must have the ids' shape");
  }
  return success();
}

LogicalResult EmbeddingOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location>, EmbeddingOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  auto table = rankedType(adaptor.getTable());
  SmallVector<int64_t> shape(rankedType(adaptor.getIds()).getShape());
  shape.push_back(table.getRank() == 2 ? table.getDimSize(1)
                                       : ShapedType::kDynamic);
  inferred.emplace_back(shape, table.getElementType());
  return success();
}

ConvOp BatchNormOp::getFoldableConv() {
  auto conv = getInput().getDefiningOp<ConvOp>();
  if (!conv || conv.getActivation() || !conv->hasOneUse() ||
      conv->getBlock() != getOperation()->getBlock() ||
      conv.getResult().getType() != getResult().getType())
    return nullptr;
  return conv;
}

LogicalResult ConvOp::verify() {
  auto in = getInput().getType();
  auto w = getWeight().getType();
  int64_t spatial = in.getRank() - 2;
  if (spatial < 1 || w.getRank() != in.getRank())
    return emitOpError("input and weight must be [N, C, spatial...] with "
                       "the same rank");
  if (static_cast<int64_t>(getStrides().size()) != spatial ||
      static_cast<int64_t>(getDilations().size()) != spatial ||
      static_cast<int64_t>(getPads().size()) != 2 * spatial)
    return emitOpError("strides/dilations need ")
           << spatial << " values and pads " << 2 * spatial;
  if (getGroup() < 1)
    return emitOpError("group must be >= 1");
  if (!compatibleDims(in.getDimSize(1), w.getDimSize(1) * getGroup()))
    return emitOpError("input channels ")
           << dimStr(in.getDimSize(1)) << " != weight channels "
           << w.getDimSize(1) << " x group " << getGroup();
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

/// Normalizes and validates a list of axes; returns failure with a message.
static LogicalResult normalizeAxes(Operation *op, ArrayRef<int64_t> axes,
                                   int64_t rank,
                                   SmallVectorImpl<int64_t> &out) {
  llvm::SmallSet<int64_t, 8> seen;
  for (int64_t a : axes) {
    int64_t n = normalizeAxis(a, rank);
    if (n < 0 || n >= rank)
      return op ? op->emitOpError("axis ") << a << " out of range for rank "
                                           << rank
                : failure();
    if (!seen.insert(n).second)
      return op ? op->emitOpError("axis ") << a << " repeated" : failure();
    out.push_back(n);
  }
  llvm::sort(out);
  return success();
}

LogicalResult ReduceOp::verify() {
  SmallVector<int64_t> axes;
  return normalizeAxes(*this, getAxes(), getInput().getType().getRank(), axes);
}

LogicalResult ReduceOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location> loc, ReduceOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  auto in = rankedType(adaptor.getInput());
  SmallVector<int64_t> axes;
  if (failed(normalizeAxes(nullptr, adaptor.getAxes(), in.getRank(), axes)))
    return emitOptionalError(loc, "invalid reduction axes");
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < in.getRank(); ++i) {
    bool reduced = llvm::is_contained(axes, i) || axes.empty();
    if (!reduced)
      shape.push_back(in.getDimSize(i));
    else if (adaptor.getKeepdims())
      shape.push_back(1);
  }
  inferred.emplace_back(shape, in.getElementType());
  return success();
}

//===----------------------------------------------------------------------===//
// Shape and data movement
//===----------------------------------------------------------------------===//

LogicalResult GatherOp::verify() {
  int64_t rank = getData().getType().getRank();
  if (failed(verifiedAxis(*this, static_cast<int64_t>(getAxis()), rank)))
    return failure();
  if (getType().getRank() != rank - 1 + getIndices().getType().getRank())
    return emitOpError("result rank must be data rank - 1 + indices rank");
  return success();
}

LogicalResult GatherOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location> loc, GatherOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  auto data = rankedType(adaptor.getData());
  auto idx = rankedType(adaptor.getIndices());
  int64_t axis = normalizeAxis(adaptor.getAxis(), data.getRank());
  if (axis < 0 || axis >= data.getRank())
    return emitOptionalError(loc, "gather axis out of range");
  SmallVector<int64_t> shape(data.getShape().take_front(axis));
  llvm::append_range(shape, idx.getShape());
  llvm::append_range(shape, data.getShape().drop_front(axis + 1));
  inferred.emplace_back(shape, data.getElementType());
  return success();
}

LogicalResult ReshapeOp::verify() {
  auto shape = getShape().getType();
  if (shape.getRank() != 1)
    return emitOpError("shape operand must be 1-D");
  if (!shape.isDynamicDim(0) && shape.getDimSize(0) != getType().getRank())
    return emitOpError("shape operand has ")
           << shape.getDimSize(0) << " entries but the result has rank "
           << getType().getRank();
  auto in = getInput().getType();
  if (in.hasStaticShape() && getType().hasStaticShape() &&
      in.getNumElements() != getType().getNumElements())
    return emitOpError("cannot reshape ")
           << in.getNumElements() << " elements into "
           << getType().getNumElements();
  return success();
}

/// The size of a reshape's -1 (entry `inferIdx` of `target`) where the
/// input's dynamic dims cancel: each other target entry is a constant, a
/// copy of the input's dim (ONNX's 0) or a dim provably equal to one of the
/// input's (DimAnalysis.h), and the input's dims left over are static.
/// `flatten(2, 3)` of [batch, seq, G, R, D] exports as a reshape to
/// [batch, seq, -1, D] with batch and seq read from the input's shape:
/// the -1 is G * R whatever batch and seq are.
static std::optional<int64_t> inferredDim(Value input, Value target,
                                          bool allowzero, int64_t inferIdx) {
  std::optional<SmallVector<ShapeEntry>> entries = shapeEntries(target);
  auto in = rankedType(input);
  if (!entries)
    return std::nullopt;
  SmallVector<bool> used(in.getRank(), false);
  int64_t divisor = 1;
  for (auto [i, e] : llvm::enumerate(*entries)) {
    const int64_t d = static_cast<int64_t>(i);
    if (d == inferIdx)
      continue;
    if (e.kind == ShapeEntry::Constant && e.constant == 0 && !allowzero) {
      if (d >= in.getRank() || used[d])
        return std::nullopt;
      used[d] = true;
      continue;
    }
    if (e.kind == ShapeEntry::Constant && e.constant > 0) {
      divisor *= e.constant;
      continue;
    }
    if (e.kind != ShapeEntry::Dim)
      return std::nullopt;
    int64_t match = -1;
    for (int64_t j = 0; j < in.getRank() && match < 0; ++j)
      if (!used[j] && in.isDynamicDim(j) &&
          sameDim(e.dim.value, e.dim.index, input, j))
        match = j;
    if (match < 0)
      return std::nullopt;
    used[match] = true;
  }
  int64_t rest = 1;
  for (int64_t j = 0; j < in.getRank(); ++j) {
    if (used[j])
      continue;
    if (in.isDynamicDim(j) || !mulWithinStaticLimit(rest, in.getDimSize(j)))
      return std::nullopt;
  }
  if (divisor <= 0 || rest % divisor != 0)
    return std::nullopt;
  return rest / divisor;
}

LogicalResult ReshapeOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location> loc, ReshapeOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  auto in = rankedType(adaptor.getInput());
  auto target = getPartialInts(adaptor.getShape());
  if (!target) {
    auto st = rankedType(adaptor.getShape());
    if (st.getRank() != 1 || st.isDynamicDim(0))
      return failure();
    inferred.emplace_back(
        SmallVector<int64_t>(st.getDimSize(0), ShapedType::kDynamic),
        in.getElementType());
    return success();
  }
  // Known target sizes must make a valid, addressable tensor, as for
  // ConstantOfShape: a size below -1, a second -1 or more than 2^48
  // elements is an error (an overflowing product made a type whose byte
  // size wrapped negative in the planner).
  SmallVector<int64_t> shape;
  int64_t inferIdx = -1, known = 1, elements = 1;
  for (auto [i, d] : llvm::enumerate(*target)) {
    if (ShapedType::isDynamic(d)) {
      shape.push_back(d);
      known = -1;
      continue;
    }
    if (d < -1)
      return emitOptionalError(loc, "Reshape: invalid target dimension ", d,
                               " (sizes are >= 0, or -1 for one inferred)");
    if (d == 0 && !adaptor.getAllowzero())
      d = i < static_cast<size_t>(in.getRank()) ? in.getDimSize(i)
                                                : ShapedType::kDynamic;
    if (d == -1) {
      if (inferIdx >= 0)
        return emitOptionalError(loc,
                                 "Reshape: more than one -1 in the target shape");
      inferIdx = i;
      shape.push_back(ShapedType::kDynamic);
      continue;
    }
    shape.push_back(d);
    if (ShapedType::isDynamic(d)) {
      known = -1;
      continue;
    }
    if (!mulWithinStaticLimit(elements, d)) {
      std::string dims;
      for (int64_t t : *target)
        dims += (dims.empty() ? "" : ", ") + dimStr(t);
      return emitOptionalError(loc, "Reshape: target shape [", dims,
                               "] has more than 2^48 elements");
    }
    if (known > 0)
      known *= d;
  }
  if (inferIdx >= 0 && in.hasStaticShape() && known > 0 &&
      in.getNumElements() % known == 0)
    shape[inferIdx] = in.getNumElements() / known;
  if (inferIdx >= 0 && ShapedType::isDynamic(shape[inferIdx]))
    if (std::optional<int64_t> v =
            inferredDim(adaptor.getInput(), adaptor.getShape(),
                        adaptor.getAllowzero(), inferIdx))
      shape[inferIdx] = *v;
  inferred.emplace_back(shape, in.getElementType());
  return success();
}

LogicalResult TransposeOp::verify() {
  int64_t rank = getInput().getType().getRank();
  ArrayRef<int64_t> perm = getPermutation();
  if (static_cast<int64_t>(perm.size()) != rank)
    return emitOpError("permutation has ")
           << perm.size() << " entries for rank " << rank;
  SmallVector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return emitOpError("permutation is not a permutation of [0, ")
             << rank << ")";
    seen[p] = true;
  }
  for (int64_t i = 0; i < rank; ++i)
    if (!compatibleDims(getType().getDimSize(i),
                        getInput().getType().getDimSize(perm[i])))
      return emitOpError("result dimension ") << i << " does not match";
  return success();
}

LogicalResult TransposeOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location>, TransposeOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  auto in = rankedType(adaptor.getInput());
  SmallVector<int64_t> shape;
  for (int64_t p : adaptor.getPermutation()) {
    if (p < 0 || p >= in.getRank())
      return failure();
    shape.push_back(in.getDimSize(p));
  }
  inferred.emplace_back(shape, in.getElementType());
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one input");
  int64_t rank = getType().getRank();
  FailureOr<int64_t> verified =
      verifiedAxis(*this, static_cast<int64_t>(getAxis()), rank);
  if (failed(verified))
    return failure();
  const int64_t axis = *verified;
  // The inputs' sizes along the axis, summed while all are known (a type
  // ONNX's inference gave the result is checked against them: it wrapped
  // sums past 2^32).
  std::optional<int64_t> total = 0;
  for (Value v : getInputs()) {
    auto t = rankedType(v);
    if (t.getRank() != rank)
      return emitOpError("all inputs must have rank ") << rank;
    for (int64_t i = 0; i < rank; ++i)
      if (i != axis && !compatibleDims(t.getDimSize(i), getType().getDimSize(i)))
        return emitOpError("input dimension ")
               << i << " (" << dimStr(t.getDimSize(i))
               << ") differs from the result's ("
               << dimStr(getType().getDimSize(i)) << ")";
    if (!total || t.isDynamicDim(axis))
      total.reset();
    else if (t.getDimSize(axis) > kMaxStaticElements - *total)
      return emitOpError("inputs' sizes along axis ")
             << axis << " add up to more than 2^48";
    else
      *total += t.getDimSize(axis);
  }
  if (total && !getType().isDynamicDim(axis) &&
      *total != getType().getDimSize(axis))
    return emitOpError("inputs' sizes along axis ")
           << axis << " add up to " << *total << " but the result's is "
           << getType().getDimSize(axis);
  return success();
}

LogicalResult ConcatOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location> loc, ConcatOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  if (adaptor.getInputs().empty())
    return failure();
  auto first = rankedType(adaptor.getInputs().front());
  int64_t rank = first.getRank();
  int64_t axis = normalizeAxis(adaptor.getAxis(), rank);
  if (axis < 0 || axis >= rank)
    return emitOptionalError(loc, "concat axis out of range");
  SmallVector<int64_t> shape(first.getShape());
  shape[axis] = 0;
  for (Value v : adaptor.getInputs()) {
    auto t = rankedType(v);
    if (t.getRank() != rank)
      return failure();
    for (int64_t i = 0; i < rank; ++i) {
      if (i == axis) {
        if (ShapedType::isDynamic(shape[i]) || t.isDynamicDim(i)) {
          shape[i] = ShapedType::kDynamic;
        } else {
          if (t.getDimSize(i) > kMaxStaticElements - shape[i])
            return emitOptionalError(loc, "concat: the result's dimension ",
                                     axis, " passes 2^48");
          shape[i] += t.getDimSize(i);
        }
      } else if (ShapedType::isDynamic(shape[i])) {
        shape[i] = t.getDimSize(i);
      }
    }
  }
  inferred.emplace_back(shape, first.getElementType());
  return success();
}

LogicalResult SplitOp::verify() {
  auto in = getInput().getType();
  int64_t axis = normalizeAxis(getAxis(), in.getRank());
  if (axis < 0 || axis >= in.getRank())
    return emitOpError("axis out of range");
  if (getSizes().size() != getNumResults())
    return emitOpError("has ") << getNumResults() << " results but "
                               << getSizes().size() << " sizes";
  int64_t sum = 0;
  for (int64_t s : getSizes()) {
    if (s < 0 || s > kMaxStaticElements - sum)
      return emitOpError("size ")
             << s << " is negative or makes the sizes add up past 2^48";
    sum += s;
  }
  if (!in.isDynamicDim(axis) && sum != in.getDimSize(axis))
    return emitOpError("sizes add up to ")
           << sum << " but the split dimension is " << in.getDimSize(axis);
  return success();
}

LogicalResult SplitOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location> loc, SplitOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  auto in = rankedType(adaptor.getInput());
  int64_t axis = normalizeAxis(adaptor.getAxis(), in.getRank());
  if (axis < 0 || axis >= in.getRank())
    return failure();
  for (int64_t size : adaptor.getSizes()) {
    if (size < 0 || size > kMaxStaticElements)
      return emitOptionalError(loc, "split: size ", size, " is out of range");
    SmallVector<int64_t> shape(in.getShape());
    shape[axis] = size;
    if (!staticSizesWithinLimit(shape))
      return emitOptionalError(loc, "split: a result of size ", size,
                               " would have more than 2^48 elements");
    inferred.emplace_back(shape, in.getElementType());
  }
  return success();
}

static LogicalResult unsqueezeShape(ArrayRef<int64_t> in,
                                    ArrayRef<int64_t> axes,
                                    SmallVectorImpl<int64_t> &out) {
  int64_t rank = in.size() + axes.size();
  SmallVector<int64_t> norm;
  if (failed(normalizeAxes(nullptr, axes, rank, norm)))
    return failure();
  auto it = in.begin();
  for (int64_t i = 0; i < rank; ++i)
    out.push_back(llvm::is_contained(norm, i) ? 1 : *it++);
  return success();
}

LogicalResult UnsqueezeOp::verify() {
  SmallVector<int64_t> shape;
  if (failed(unsqueezeShape(getInput().getType().getShape(), getAxes(),
                            shape)))
    return emitOpError("invalid axes for rank ")
           << getInput().getType().getRank() + getAxes().size();
  if (static_cast<int64_t>(shape.size()) != getType().getRank())
    return emitOpError("result rank must be input rank + number of axes");
  return success();
}

LogicalResult UnsqueezeOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location>, UnsqueezeOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  auto in = rankedType(adaptor.getInput());
  SmallVector<int64_t> shape;
  if (failed(unsqueezeShape(in.getShape(), adaptor.getAxes(), shape)))
    return failure();
  inferred.emplace_back(shape, in.getElementType());
  return success();
}

LogicalResult SqueezeOp::verify() {
  auto in = getInput().getType();
  SmallVector<int64_t> axes;
  if (failed(normalizeAxes(*this, getAxes(), in.getRank(), axes)))
    return failure();
  for (int64_t a : axes)
    if (!in.isDynamicDim(a) && in.getDimSize(a) != 1)
      return emitOpError("cannot squeeze dimension ")
             << a << " of size " << in.getDimSize(a);
  if (getType().getRank() != in.getRank() - static_cast<int64_t>(axes.size()))
    return emitOpError("result rank must be input rank - number of axes");
  return success();
}

LogicalResult SqueezeOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location>, SqueezeOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  auto in = rankedType(adaptor.getInput());
  SmallVector<int64_t> axes;
  if (failed(normalizeAxes(nullptr, adaptor.getAxes(), in.getRank(), axes)))
    return failure();
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < in.getRank(); ++i)
    if (!llvm::is_contained(axes, i))
      shape.push_back(in.getDimSize(i));
  inferred.emplace_back(shape, in.getElementType());
  return success();
}

LogicalResult FlattenOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location>, FlattenOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  auto in = rankedType(adaptor.getInput());
  int64_t axis = normalizeAxis(adaptor.getAxis(), in.getRank());
  if (axis < 0 || axis > in.getRank())
    return failure();
  auto product = [](ArrayRef<int64_t> dims) {
    int64_t p = 1;
    for (int64_t d : dims) {
      if (ShapedType::isDynamic(d))
        return ShapedType::kDynamic;
      p *= d;
    }
    return p;
  };
  inferred.emplace_back(
      SmallVector<int64_t>{product(in.getShape().take_front(axis)),
                           product(in.getShape().drop_front(axis))},
      in.getElementType());
  return success();
}

int sparsec::onnxDataTypeOf(Type t) {
  if (t.isF32()) return 1;
  if (t.isF64()) return 11;
  if (t.isF16()) return 10;
  if (t.isBF16()) return 16;
  if (auto i = dyn_cast<IntegerType>(t)) {
    bool u = i.isUnsigned();
    switch (i.getWidth()) {
    case 1: return 9;
    case 8: return u ? 2 : 3;
    case 16: return u ? 4 : 5;
    case 32: return u ? 12 : 6;
    case 64: return u ? 13 : 7;
    }
  }
  return -1;
}

int64_t sparsec::sliceExtent(int64_t dim, int64_t start, int64_t end,
                             int64_t step, int64_t &begin) {
  assert(step != 0 && "slice step must be non-zero");
  if (start < 0)
    start += dim;
  if (end < 0)
    end += dim;
  if (step > 0) {
    begin = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    return std::max<int64_t>(0, (end - begin + step - 1) / step);
  }
  begin = std::clamp<int64_t>(start, 0, dim - 1);
  end = std::clamp<int64_t>(end, -1, dim - 1);
  return std::max<int64_t>(0, (begin - end - step - 1) / (-step));
}

LogicalResult SliceOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location>, SliceOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  auto data = rankedType(adaptor.getData());
  int64_t rank = data.getRank();
  SmallVector<int64_t> shape(data.getShape());
  auto axes = getConstantInts(adaptor.getAxes());
  auto starts = getConstantInts(adaptor.getStarts());
  auto ends = getConstantInts(adaptor.getEnds());
  auto steps = getConstantInts(adaptor.getSteps());
  if (!axes) {
    // Any axis may be sliced: only the rank is known.
    inferred.emplace_back(SmallVector<int64_t>(rank, ShapedType::kDynamic),
                          data.getElementType());
    return success();
  }
  for (auto [i, a] : llvm::enumerate(*axes)) {
    int64_t axis = normalizeAxis(a, rank);
    if (axis < 0 || axis >= rank)
      return failure();
    int64_t dim = data.getDimSize(axis);
    if (!starts || !ends || !steps || ShapedType::isDynamic(dim) ||
        starts->size() != axes->size() || ends->size() != axes->size() ||
        steps->size() != axes->size() || (*steps)[i] == 0) {
      shape[axis] = ShapedType::kDynamic;
      continue;
    }
    int64_t begin;
    shape[axis] =
        sliceExtent(dim, (*starts)[i], (*ends)[i], (*steps)[i], begin);
  }
  inferred.emplace_back(shape, data.getElementType());
  return success();
}

LogicalResult ExpandOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location>, ExpandOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  auto in = rankedType(adaptor.getInput());
  auto shapeType = rankedType(adaptor.getShape());
  if (shapeType.getRank() != 1 || shapeType.isDynamicDim(0))
    return failure();
  SmallVector<int64_t> target(shapeType.getDimSize(0), ShapedType::kDynamic);
  if (auto values = getPartialInts(adaptor.getShape()))
    if (values->size() == target.size())
      target.assign(values->begin(), values->end());
  SmallVector<int64_t> shape;
  if (failed(broadcastShapes({in.getShape(), target}, shape)))
    return failure();
  inferred.emplace_back(shape, in.getElementType());
  return success();
}

LogicalResult RangeOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location>, RangeOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  Type elt = rankedType(adaptor.getStart()).getElementType();
  int64_t n = ShapedType::kDynamic;
  DenseElementsAttr s, l, d;
  if (matchPattern(adaptor.getStart(), m_Constant(&s)) &&
      matchPattern(adaptor.getLimit(), m_Constant(&l)) &&
      matchPattern(adaptor.getDelta(), m_Constant(&d)) &&
      s.getNumElements() == 1 && l.getNumElements() == 1 &&
      d.getNumElements() == 1) {
    auto scalar = [](DenseElementsAttr a) {
      return isa<FloatType>(a.getElementType())
                 ? (*a.getValues<APFloat>().begin()).convertToDouble()
                 : static_cast<double>(
                       (*a.getValues<APInt>().begin()).getSExtValue());
    };
    double start = scalar(s), limit = scalar(l), delta = scalar(d);
    if (delta != 0.0)
      n = std::max<int64_t>(
          0, static_cast<int64_t>(std::ceil((limit - start) / delta)));
  }
  inferred.emplace_back(SmallVector<int64_t>{n}, elt);
  return success();
}

LogicalResult ConstantOfShapeOp::inferReturnTypeComponents(
    MLIRContext *, std::optional<Location> loc,
    ConstantOfShapeOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  auto typed = dyn_cast<TypedAttr>(adaptor.getValue());
  auto shapeType = rankedType(adaptor.getShape());
  if (!typed || shapeType.getRank() != 1 || shapeType.isDynamicDim(0))
    return failure();
  SmallVector<int64_t> shape(shapeType.getDimSize(0), ShapedType::kDynamic);
  if (auto values = getPartialInts(adaptor.getShape()))
    if (values->size() == shape.size())
      shape.assign(values->begin(), values->end());
  // Known sizes must make a valid, addressable tensor (a negative size made
  // an invalid type that later stages looped on).
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (ShapedType::isDynamic(d))
      continue;
    if (d < 0)
      return emitOptionalError(loc, "ConstantOfShape: negative dimension ", d);
    if (!mulWithinStaticLimit(elements, d))
      return emitOptionalError(loc, "ConstantOfShape: shape [",
                               llvm::make_range(shape.begin(), shape.end()),
                               "] has more than 2^48 elements");
  }
  inferred.emplace_back(shape, typed.getType());
  return success();
}

LogicalResult ShapeOp::inferReturnTypeComponents(
    MLIRContext *ctx, std::optional<Location>, ShapeOp::Adaptor adaptor,
    SmallVectorImpl<ShapedTypeComponents> &inferred) {
  int64_t rank = rankedType(adaptor.getInput()).getRank();
  int64_t start = normalizeAxis(adaptor.getStart(), rank);
  int64_t end = adaptor.getEnd() ? normalizeAxis(*adaptor.getEnd(), rank) : rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  inferred.emplace_back(SmallVector<int64_t>{end - start},
                        IntegerType::get(ctx, 64));
  return success();
}

#define GET_OP_CLASSES
#include "sparsec/Dialect/Sparsec/IR/SparsecOps.cpp.inc"
