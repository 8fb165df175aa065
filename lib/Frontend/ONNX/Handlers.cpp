//===- Handlers.cpp - one import handler per ONNX op ---------------------===//
//
// Part of the sparsec project.
//
// The table maps an ONNX op type to handlers keyed by the opset version they
// apply from. A handler reads operands and attributes through the
// ImportContext and binds each output. Attribute-vs-input changes across
// opsets (Reduce* axes in 18, Split num_outputs in 18) are handled inside
// the handler by looking at ctx.opset.
//
//===----------------------------------------------------------------------===//

#include "ImportContext.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace sparsec;
using namespace sparsec::onnx_import;

namespace {

/// Creates `OpTy` with the generic builder (results, operands, attributes).
template <typename OpTy>
Value make(ImportContext &c, Type result, ValueRange operands,
           ArrayRef<NamedAttribute> attrs = {}) {
  return OpTy::create(c.builder, c.loc, TypeRange{result}, operands, attrs)
      .getResult();
}

NamedAttribute named(ImportContext &c, StringRef name, Attribute a) {
  return c.builder.getNamedAttr(name, a);
}

LogicalResult requireOperands(ImportContext &c, int n) {
  for (int i = 0; i < n; ++i)
    if (!c.operand(i))
      return c.error() << c.node->op_type() << " needs input " << i;
  return success();
}

template <typename OpTy>
LogicalResult unary(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 1)))
    return failure();
  return c.setResult(0, make<OpTy>(c, c.resultType(0), {c.operand(0)}));
}

template <typename OpTy>
LogicalResult binary(ImportContext &c, const onnx::NodeProto &n) {
  if (n.input_size() != 2)
    return c.error() << n.op_type() << " with " << n.input_size()
                     << " inputs is not supported (2 expected)";
  if (failed(requireOperands(c, 2)))
    return failure();
  return c.setResult(
      0, make<OpTy>(c, c.resultType(0), {c.operand(0), c.operand(1)}));
}

template <ComparePredicate P, bool Swap = false>
LogicalResult compare(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 2)))
    return failure();
  Value a = c.operand(0), b = c.operand(1);
  if (Swap)
    std::swap(a, b);
  return c.setResult(
      0, make<CompareOp>(c, c.resultType(0), {a, b},
                         {named(c, "predicate",
                                ComparePredicateAttr::get(
                                    c.builder.getContext(), P))}));
}

LogicalResult forward(ImportContext &c, const onnx::NodeProto &n) {
  if (failed(requireOperands(c, 1)))
    return failure();
  return c.setResult(0, c.operand(0));
}

/// Inference Dropout is the identity; its optional mask output is all true.
LogicalResult importDropout(ImportContext &c, const onnx::NodeProto &n) {
  if (failed(requireOperands(c, 1)))
    return failure();
  if (c.operand(2)) {
    auto training = c.constantInts(2);
    if (!training || training->size() != 1)
      return c.error() << "Dropout training_mode must be a constant";
    if ((*training)[0] != 0)
      return c.error() << "Dropout in training mode is not supported";
  }
  if (failed(c.setResult(0, c.operand(0))))
    return failure();
  if (c.numResults() > 1 && !n.output(1).empty()) {
    auto xt = cast<RankedTensorType>(c.operand(0).getType());
    Value shape = make<ShapeOp>(
        c, RankedTensorType::get({xt.getRank()}, c.builder.getI64Type()),
        {c.operand(0)},
        {named(c, "start", c.builder.getI64IntegerAttr(0))});
    Value mask = make<ConstantOfShapeOp>(
        c, RankedTensorType::get(xt.getShape(), c.builder.getI1Type()),
        {shape}, {named(c, "value", c.builder.getBoolAttr(true))});
    return c.setResult(1, mask);
  }
  return success();
}

LogicalResult importConstant(ImportContext &c, const onnx::NodeProto &n) {
  MLIRContext *ctx = c.builder.getContext();
  for (const auto &a : n.attribute()) {
    if (a.name() == "value") {
      FailureOr<Value> v = c.importTensor(a.t(), n.output(0), false);
      return failed(v) ? failure() : c.setResult(0, *v);
    }
    if (a.name() == "value_float" || a.name() == "value_floats") {
      SmallVector<float> vals(a.floats().begin(), a.floats().end());
      if (a.name() == "value_float")
        vals = {a.f()};
      SmallVector<int64_t> shape;
      if (a.name() == "value_floats")
        shape.push_back(vals.size());
      auto type = RankedTensorType::get(shape, Float32Type::get(ctx));
      return c.setResult(0, ConstantOp::create(
                                c.builder, c.loc,
                                DenseElementsAttr::get(type, ArrayRef(vals))));
    }
    if (a.name() == "value_int" || a.name() == "value_ints") {
      SmallVector<int64_t> vals(a.ints().begin(), a.ints().end());
      if (a.name() == "value_int")
        vals = {a.i()};
      SmallVector<int64_t> shape;
      if (a.name() == "value_ints")
        shape.push_back(vals.size());
      auto type = RankedTensorType::get(shape, IntegerType::get(ctx, 64));
      return c.setResult(0, ConstantOp::create(
                                c.builder, c.loc,
                                DenseElementsAttr::get(type, ArrayRef(vals))));
    }
  }
  return c.error() << "Constant without a supported value attribute (value, "
                      "value_float(s), value_int(s))";
}

LogicalResult importCast(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 1)))
    return failure();
  Type elt = c.elementType(c.attrInt("to", 0));
  if (!elt)
    return c.error() << "Cast to unsupported data type " << c.attrInt("to", 0);
  Type t = c.resultType(0);
  if (!isa<RankedTensorType>(t))
    t = RankedTensorType::get(
        cast<RankedTensorType>(c.operand(0).getType()).getShape(), elt);
  return c.setResult(0, make<CastOp>(c, t, {c.operand(0)}));
}

LogicalResult importGelu(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 1)))
    return failure();
  SmallVector<NamedAttribute> attrs;
  std::string approx = c.attrString("approximate", "none");
  if (approx == "tanh")
    attrs.push_back(named(c, "tanh_approx", c.builder.getUnitAttr()));
  else if (approx != "none")
    return c.error() << "Gelu approximate='" << approx << "' is not supported";
  return c.setResult(0, make<GeluOp>(c, c.resultType(0), {c.operand(0)}, attrs));
}

/// Max/Min/Sum/Mean take any number of inputs: a chain of binary ops. The
/// last op gets `last` as its type (the node's), or its inferred one when
/// `last` is null.
template <typename OpTy>
FailureOr<Value> chain(ImportContext &c, const onnx::NodeProto &n, Type last) {
  if (n.input_size() < 1 || !c.operand(0))
    return c.error() << n.op_type() << " needs at least one input";
  Value acc = c.operand(0);
  for (int i = 1; i < n.input_size(); ++i) {
    if (!c.operand(i))
      return c.error() << n.op_type() << " input " << i << " is empty";
    bool isLast = last && i == n.input_size() - 1;
    Type t = isLast ? last
                    : UnrankedTensorType::get(
                          cast<ShapedType>(acc.getType()).getElementType());
    acc = make<OpTy>(c, t, {acc, c.operand(i)});
    if (!isLast) {
      // Intermediate results get their type from the op's own inference.
      SmallVector<ShapedTypeComponents> comps;
      Operation *op = acc.getDefiningOp();
      if (failed(cast<InferShapedTypeOpInterface>(op)
                     .inferReturnTypeComponents(
                         c.builder.getContext(), c.loc, op->getOperands(),
                         op->getAttrDictionary(), op->getPropertiesStorage(),
                         op->getRegions(), comps)))
        return c.error() << "inputs do not broadcast";
      acc.setType(RankedTensorType::get(comps[0].getDims(),
                                        comps[0].getElementType()));
    }
  }
  return acc;
}

template <typename OpTy>
LogicalResult variadic(ImportContext &c, const onnx::NodeProto &n) {
  FailureOr<Value> v = chain<OpTy>(c, n, c.resultType(0));
  return failed(v) ? failure() : c.setResult(0, *v);
}

LogicalResult importWhere(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 3)))
    return failure();
  return c.setResult(0, make<WhereOp>(c, c.resultType(0),
                                      {c.operand(0), c.operand(1),
                                       c.operand(2)}));
}

LogicalResult importMatMul(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 2)))
    return failure();
  for (int i = 0; i < 2; ++i)
    if (!isa<FloatType>(
            cast<RankedTensorType>(c.operand(i).getType()).getElementType()))
      return c.error() << "MatMul on integer tensors is not supported (input "
                       << i << " is " << c.operand(i).getType() << ")";
  return c.setResult(
      0, make<MatMulOp>(c, c.resultType(0), {c.operand(0), c.operand(1)}));
}

/// A scalar f32-typed constant matching `like`'s element type.
Value scalarLike(ImportContext &c, Value like, double v) {
  auto elt = cast<FloatType>(cast<RankedTensorType>(like.getType())
                                 .getElementType());
  auto type = RankedTensorType::get({}, elt);
  return ConstantOp::create(
      c.builder, c.loc,
      DenseElementsAttr::get(type, c.builder.getFloatAttr(elt, v)));
}

/// Mean: the sum of the inputs over their count.
LogicalResult importMean(ImportContext &c, const onnx::NodeProto &n) {
  FailureOr<Value> sum = chain<AddOp>(c, n, Type());
  if (failed(sum))
    return failure();
  auto t = dyn_cast<RankedTensorType>(sum->getType());
  if (!t || !isa<FloatType>(t.getElementType()))
    return c.error() << "Mean on non-floating-point tensors is not supported";
  if (n.input_size() == 1)
    return c.setResult(0, *sum);
  return c.setResult(0,
                     make<DivOp>(c, c.resultType(0),
                                 {*sum, scalarLike(c, *sum, n.input_size())}));
}

//===----------------------------------------------------------------------===//
// Activations spelled with the elementwise ops
//===----------------------------------------------------------------------===//

/// The node's input 0, which must be a floating-point tensor.
FailureOr<Value> floatInput(ImportContext &c) {
  if (failed(requireOperands(c, 1)))
    return failure();
  Value x = c.operand(0);
  auto xt = dyn_cast<RankedTensorType>(x.getType());
  if (!xt || !isa<FloatType>(xt.getElementType()))
    return c.error() << c.node->op_type()
                     << " on non-floating-point tensors is not supported";
  return x;
}

/// compare(a, b) as an i1 tensor of a's shape.
Value compareTo(ImportContext &c, ComparePredicate p, Value a, Value b) {
  auto at = cast<RankedTensorType>(a.getType());
  return make<CompareOp>(
      c, RankedTensorType::get(at.getShape(), c.builder.getI1Type()), {a, b},
      {named(c, "predicate",
             ComparePredicateAttr::get(c.builder.getContext(), p))});
}

/// `other` where `x p 0` (x < 0 by default), x elsewhere.
Value whereNegative(ImportContext &c, Value x, Value other,
                    ComparePredicate p = ComparePredicate::lt) {
  Value neg = compareTo(c, p, x, scalarLike(c, x, 0.0));
  return make<WhereOp>(c, x.getType(), {neg, other, x});
}

/// min(max(x, lo), hi) with scalar bounds.
Value clamp(ImportContext &c, Value x, double lo, double hi) {
  Value y = make<MinOp>(c, x.getType(), {x, scalarLike(c, x, hi)});
  return make<MaxOp>(c, x.getType(), {y, scalarLike(c, x, lo)});
}

/// Clip: max(x, min), then min(., max); both bounds optional scalars. A
/// lower bound of constant 0 on a float tensor is a ReLU, so that the
/// sparsity passes see ReLU6-style activations' zeros.
LogicalResult importClip(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 1)))
    return failure();
  Value x = c.operand(0), lo = c.operand(1), hi = c.operand(2);
  auto xt = cast<RankedTensorType>(x.getType());
  for (Value bound : {lo, hi}) {
    auto bt = bound ? dyn_cast<RankedTensorType>(bound.getType()) : nullptr;
    if (bound && (!bt || !bt.hasStaticShape() || bt.getNumElements() != 1))
      return c.error() << "Clip bounds must be scalars";
  }
  Value y = x;
  std::optional<double> low = c.constantScalar(1);
  if (lo && low && *low == 0.0 && isa<FloatType>(xt.getElementType()))
    y = make<ReluOp>(c, xt, {y});
  else if (lo)
    y = make<MaxOp>(c, xt, {y, lo});
  if (hi)
    y = make<MinOp>(c, xt, {y, hi});
  return c.setResult(0, y);
}

/// LeakyRelu: x < 0 ? alpha x : x.
LogicalResult importLeakyRelu(ImportContext &c, const onnx::NodeProto &) {
  FailureOr<Value> x = floatInput(c);
  if (failed(x))
    return failure();
  Value scaled = make<MulOp>(
      c, x->getType(), {*x, scalarLike(c, *x, c.attrFloat("alpha", 0.01f))});
  return c.setResult(0, whereNegative(c, *x, scaled));
}

/// PRelu: x < 0 ? slope x : x, the slope broadcast to x's shape.
LogicalResult importPRelu(ImportContext &c, const onnx::NodeProto &) {
  FailureOr<Value> x = floatInput(c);
  if (failed(x) || failed(requireOperands(c, 2)))
    return failure();
  Value scaled = make<MulOp>(c, x->getType(), {*x, c.operand(1)});
  return c.setResult(0, whereNegative(c, *x, scaled));
}

/// Elu: x < 0 ? alpha (e^x - 1) : x.
LogicalResult importElu(ImportContext &c, const onnx::NodeProto &) {
  FailureOr<Value> x = floatInput(c);
  if (failed(x))
    return failure();
  Type t = x->getType();
  Value em1 =
      make<SubOp>(c, t, {make<ExpOp>(c, t, {*x}), scalarLike(c, *x, 1.0)});
  Value neg =
      make<MulOp>(c, t, {em1, scalarLike(c, *x, c.attrFloat("alpha", 1.0f))});
  return c.setResult(0, whereNegative(c, *x, neg));
}

/// Selu: gamma (x <= 0 ? alpha e^x - alpha : x).
LogicalResult importSelu(ImportContext &c, const onnx::NodeProto &) {
  FailureOr<Value> x = floatInput(c);
  if (failed(x))
    return failure();
  Type t = x->getType();
  float alpha = c.attrFloat("alpha", 1.67326319217681884765625f);
  float gamma = c.attrFloat("gamma", 1.05070102214813232421875f);
  Value neg = make<SubOp>(
      c, t,
      {make<MulOp>(c, t, {make<ExpOp>(c, t, {*x}), scalarLike(c, *x, alpha)}),
       scalarLike(c, *x, alpha)});
  Value y = whereNegative(c, *x, neg, ComparePredicate::le);
  return c.setResult(0, make<MulOp>(c, t, {y, scalarLike(c, *x, gamma)}));
}

/// Celu: max(0, x) + min(0, alpha (e^(x / alpha) - 1)).
LogicalResult importCelu(ImportContext &c, const onnx::NodeProto &) {
  FailureOr<Value> x = floatInput(c);
  if (failed(x))
    return failure();
  Type t = x->getType();
  float alpha = c.attrFloat("alpha", 1.0f);
  if (alpha == 0.0f)
    return c.error() << "Celu alpha must not be 0";
  Value e =
      make<ExpOp>(c, t, {make<DivOp>(c, t, {*x, scalarLike(c, *x, alpha)})});
  Value neg = make<MulOp>(c, t,
                          {make<SubOp>(c, t, {e, scalarLike(c, *x, 1.0)}),
                           scalarLike(c, *x, alpha)});
  Value zero = scalarLike(c, *x, 0.0);
  return c.setResult(
      0, make<AddOp>(
             c, t, {make<ReluOp>(c, t, {*x}), make<MinOp>(c, t, {neg, zero})}));
}

/// ThresholdedRelu: x > alpha ? x : 0.
LogicalResult importThresholdedRelu(ImportContext &c, const onnx::NodeProto &) {
  FailureOr<Value> x = floatInput(c);
  if (failed(x))
    return failure();
  Value above = compareTo(c, ComparePredicate::gt, *x,
                          scalarLike(c, *x, c.attrFloat("alpha", 1.0f)));
  return c.setResult(
      0, make<WhereOp>(c, x->getType(), {above, *x, scalarLike(c, *x, 0.0)}));
}

/// HardSigmoid: max(0, min(1, alpha x + beta)).
LogicalResult importHardSigmoid(ImportContext &c, const onnx::NodeProto &) {
  FailureOr<Value> x = floatInput(c);
  if (failed(x))
    return failure();
  Type t = x->getType();
  Value lin = make<AddOp>(
      c, t,
      {make<MulOp>(c, t, {*x, scalarLike(c, *x, c.attrFloat("alpha", 0.2f))}),
       scalarLike(c, *x, c.attrFloat("beta", 0.5f))});
  return c.setResult(0, clamp(c, lin, 0.0, 1.0));
}

/// HardSwish: x max(0, min(1, x / 6 + 1 / 2)).
LogicalResult importHardSwish(ImportContext &c, const onnx::NodeProto &) {
  FailureOr<Value> x = floatInput(c);
  if (failed(x))
    return failure();
  Type t = x->getType();
  Value lin =
      make<AddOp>(c, t,
                  {make<MulOp>(c, t, {*x, scalarLike(c, *x, 1.0 / 6.0)}),
                   scalarLike(c, *x, 0.5)});
  return c.setResult(0, make<MulOp>(c, t, {*x, clamp(c, lin, 0.0, 1.0)}));
}

/// Softplus: max(x, 0) + log(1 + e^-|x|), which is log(1 + e^x) without
/// overflowing for large x.
LogicalResult importSoftplus(ImportContext &c, const onnx::NodeProto &) {
  FailureOr<Value> x = floatInput(c);
  if (failed(x))
    return failure();
  Type t = x->getType();
  Value e = make<ExpOp>(c, t, {make<NegOp>(c, t, {make<AbsOp>(c, t, {*x})})});
  Value l = make<LogOp>(c, t, {make<AddOp>(c, t, {e, scalarLike(c, *x, 1.0)})});
  return c.setResult(0, make<AddOp>(c, t, {make<ReluOp>(c, t, {*x}), l}));
}

/// Softsign: x / (1 + |x|).
LogicalResult importSoftsign(ImportContext &c, const onnx::NodeProto &) {
  FailureOr<Value> x = floatInput(c);
  if (failed(x))
    return failure();
  Type t = x->getType();
  Value d =
      make<AddOp>(c, t, {make<AbsOp>(c, t, {*x}), scalarLike(c, *x, 1.0)});
  return c.setResult(0, make<DivOp>(c, t, {*x, d}));
}

/// Gemm: Y = alpha * A' . B' + beta * C. The common case (alpha = beta = 1,
/// A not transposed, C absent or [N]) is one linear; the rest is a linear
/// followed by the elementwise ops that express the general form.
LogicalResult importGemm(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 2)))
    return failure();
  float alpha = c.attrFloat("alpha", 1.0f), beta = c.attrFloat("beta", 1.0f);
  Value a = c.operand(0), b = c.operand(1), bias = c.operand(2);
  auto aType = cast<RankedTensorType>(a.getType());
  auto bType = cast<RankedTensorType>(b.getType());
  if (aType.getRank() != 2 || bType.getRank() != 2)
    return c.error() << "Gemm inputs A and B must be 2-D";
  if (!isa<FloatType>(aType.getElementType()))
    return c.error() << "Gemm on integer tensors is not supported";
  if (c.attrInt("transA", 0)) {
    auto t = RankedTensorType::get({aType.getDimSize(1), aType.getDimSize(0)},
                                   aType.getElementType());
    a = make<TransposeOp>(c, t, {a},
                          {named(c, "permutation",
                                 c.builder.getDenseI64ArrayAttr({1, 0}))});
  }
  bool transB = c.attrInt("transB", 0) != 0;
  int64_t n = bType.getDimSize(transB ? 0 : 1);
  auto yType = RankedTensorType::get(
      {cast<RankedTensorType>(a.getType()).getDimSize(0), n},
      aType.getElementType());
  bool biasInLinear = false;
  if (bias && alpha == 1.0f && beta == 1.0f) {
    auto bt = cast<RankedTensorType>(bias.getType());
    biasInLinear = bt.getRank() >= 1 && bt.getShape().back() == n &&
                   llvm::all_of(bt.getShape().drop_back(),
                                [](int64_t d) { return d == 1; });
  }
  SmallVector<Value> operands{a, b};
  if (biasInLinear)
    operands.push_back(bias);
  SmallVector<NamedAttribute> attrs;
  if (transB)
    attrs.push_back(named(c, "transpose_weight", c.builder.getUnitAttr()));
  Value y = make<LinearOp>(c, yType, operands, attrs);
  if (alpha != 1.0f)
    y = make<MulOp>(c, yType, {y, scalarLike(c, y, alpha)});
  if (bias && !biasInLinear) {
    if (beta != 1.0f)
      bias = make<MulOp>(c, bias.getType(), {bias, scalarLike(c, bias, beta)});
    y = make<AddOp>(c, yType, {y, bias});
  }
  return c.setResult(0, y);
}

LogicalResult importLayerNorm(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 2)))
    return failure();
  SmallVector<Value> operands{c.operand(0), c.operand(1)};
  if (Value bias = c.operand(2))
    operands.push_back(bias);
  int64_t axis = c.attrInt("axis", -1);
  float eps = c.attrFloat("epsilon", 1e-5f);
  if (failed(c.setResult(
          0, make<LayerNormOp>(
                 c, c.resultType(0), operands,
                 {named(c, "axis", c.builder.getI64IntegerAttr(axis)),
                  named(c, "epsilon", c.builder.getF32FloatAttr(eps))}))))
    return failure();
  // The optional Mean and InvStdDev outputs, when a graph uses them, are
  // computed separately (reductions over the normalized axes, keepdims).
  bool wantMean = c.numResults() > 1 && !c.node->output(1).empty();
  bool wantInv = c.numResults() > 2 && !c.node->output(2).empty();
  if (!wantMean && !wantInv)
    return success();
  Value x = c.operand(0);
  auto xt = cast<RankedTensorType>(x.getType());
  int64_t rank = xt.getRank();
  axis = normalizeAxis(axis, rank); // in range: the layer_norm op verified it
  SmallVector<int64_t> axes, statShape(xt.getShape());
  for (int64_t i = axis; i < rank; ++i) {
    axes.push_back(i);
    statShape[i] = 1;
  }
  auto statType = RankedTensorType::get(statShape, xt.getElementType());
  auto reduceMean = [&](Value v) {
    return make<ReduceOp>(
        c, statType, {v},
        {named(c, "kind",
               ReduceKindAttr::get(c.builder.getContext(), ReduceKind::mean)),
         named(c, "axes", c.builder.getDenseI64ArrayAttr(axes)),
         named(c, "keepdims", c.builder.getBoolAttr(true))});
  };
  Value mean = reduceMean(x);
  if (wantMean && failed(c.setResult(1, mean)))
    return failure();
  if (wantInv) {
    Value d = make<SubOp>(c, xt, {x, mean});
    Value var = reduceMean(make<MulOp>(c, xt, {d, d}));
    Value inv = make<ReciprocalOp>(
        c, statType,
        {make<SqrtOp>(c, statType,
                      {make<AddOp>(c, statType, {var, scalarLike(c, x, eps)})})});
    if (failed(c.setResult(2, inv)))
      return failure();
  }
  return success();
}

LogicalResult importSoftmax(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 1)))
    return failure();
  return c.setResult(
      0, make<SoftmaxOp>(c, c.resultType(0), {c.operand(0)},
                         {named(c, "axis", c.builder.getI64IntegerAttr(
                                               c.attrInt("axis", -1)))}));
}

LogicalResult importGather(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 2)))
    return failure();
  return c.setResult(
      0, make<GatherOp>(c, c.resultType(0), {c.operand(0), c.operand(1)},
                        {named(c, "axis", c.builder.getI64IntegerAttr(
                                              c.attrInt("axis", 0)))}));
}

LogicalResult importReshape(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 2)))
    return failure();
  SmallVector<NamedAttribute> attrs;
  if (c.attrInt("allowzero", 0))
    attrs.push_back(named(c, "allowzero", c.builder.getUnitAttr()));
  return c.setResult(0, make<ReshapeOp>(c, c.resultType(0),
                                        {c.operand(0), c.operand(1)}, attrs));
}

LogicalResult importTranspose(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 1)))
    return failure();
  SmallVector<int64_t> perm = c.attrInts("perm");
  if (perm.empty()) {
    int64_t rank = cast<RankedTensorType>(c.operand(0).getType()).getRank();
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  }
  return c.setResult(
      0, make<TransposeOp>(c, c.resultType(0), {c.operand(0)},
                           {named(c, "permutation",
                                  c.builder.getDenseI64ArrayAttr(perm))}));
}

LogicalResult importConcat(ImportContext &c, const onnx::NodeProto &n) {
  SmallVector<Value> inputs;
  for (int i = 0; i < n.input_size(); ++i)
    if (Value v = c.operand(i))
      inputs.push_back(v);
  if (inputs.empty())
    return c.error() << "Concat needs at least one input";
  return c.setResult(
      0, make<ConcatOp>(c, c.resultType(0), inputs,
                        {named(c, "axis", c.builder.getI64IntegerAttr(
                                              c.attrInt("axis", 0)))}));
}

LogicalResult importSlice(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 3)))
    return failure();
  Value starts = c.operand(1), ends = c.operand(2);
  auto startsType = cast<RankedTensorType>(starts.getType());
  if (startsType.getRank() != 1 || startsType.isDynamicDim(0))
    return c.error() << "Slice starts must be a 1-D tensor of known length";
  int64_t n = startsType.getDimSize(0);
  Value axes = c.operand(3), steps = c.operand(4);
  if (!axes) {
    SmallVector<int64_t> a;
    for (int64_t i = 0; i < n; ++i)
      a.push_back(i);
    axes = c.i64Constant(a);
  }
  if (!steps)
    steps = c.i64Constant(SmallVector<int64_t>(n, 1));
  return c.setResult(0, make<SliceOp>(c, c.resultType(0),
                                      {c.operand(0), starts, ends, axes,
                                       steps}));
}

LogicalResult importSplit(ImportContext &c, const onnx::NodeProto &n) {
  if (failed(requireOperands(c, 1)))
    return failure();
  auto in = cast<RankedTensorType>(c.operand(0).getType());
  const int64_t axis = normalizeAxis(c.attrInt("axis", 0), in.getRank());
  if (axis < 0 || axis >= in.getRank())
    return c.error() << "Split axis out of range";
  SmallVector<int64_t> sizes;
  if (n.input_size() > 1 && c.operand(1)) {
    auto s = c.constantInts(1);
    if (!s)
      return c.error() << "Split sizes must be constant";
    sizes = *s;
  } else if (c.attr("split")) {
    sizes = c.attrInts("split");
  } else {
    int64_t parts = c.opset >= 18 ? c.attrInt("num_outputs", n.output_size())
                                  : n.output_size();
    if (in.isDynamicDim(axis) || parts <= 0)
      return c.error() << "Split of a dynamic dimension needs explicit sizes";
    int64_t dim = in.getDimSize(axis), chunk = (dim + parts - 1) / parts;
    for (int64_t i = 0; i < parts; ++i)
      sizes.push_back(std::min(chunk, dim - i * chunk));
  }
  if (static_cast<int>(sizes.size()) != n.output_size())
    return c.error() << "Split has " << n.output_size() << " outputs but "
                     << sizes.size() << " sizes";
  // The sizes become the results' types, which later inference adds up
  // (found by the importer fuzzer: sizes near 2^62 overflowed Concat's).
  int64_t total = 0;
  for (int64_t size : sizes) {
    if (size < 0 || size > kMaxStaticElements)
      return c.error() << "Split size " << size << " is out of range";
    if (size > kMaxStaticElements - total)
      return c.error() << "Split sizes add up to more than 2^48";
    total += size;
  }
  if (!in.isDynamicDim(axis) && total != in.getDimSize(axis))
    return c.error() << "Split sizes add up to " << total
                     << " but the split dimension is " << in.getDimSize(axis);
  SmallVector<Type> types;
  for (int i = 0; i < n.output_size(); ++i) {
    SmallVector<int64_t> shape(in.getShape());
    shape[axis] = sizes[i];
    if (!staticSizesWithinLimit(shape))
      return c.error() << "Split output " << i << " would have more than 2^48 "
                       << "elements (size " << sizes[i] << ")";
    Type t = c.resultType(i);
    if (!isa<RankedTensorType>(t))
      t = RankedTensorType::get(shape, in.getElementType());
    types.push_back(t);
  }
  auto op = SplitOp::create(
      c.builder, c.loc, types, ValueRange{c.operand(0)},
      {named(c, "axis", c.builder.getI64IntegerAttr(axis)),
       named(c, "sizes", c.builder.getDenseI64ArrayAttr(sizes))});
  for (int i = 0; i < n.output_size(); ++i)
    if (failed(c.setResult(i, op.getResult(i))))
      return failure();
  return success();
}

/// Axes from the input (opset >= 13 for (Un)Squeeze) or the attribute.
FailureOr<SmallVector<int64_t>> axesOf(ImportContext &c, int inputIndex,
                                       bool inputForm) {
  if (inputForm) {
    if (!c.operand(inputIndex))
      return SmallVector<int64_t>();
    auto axes = c.constantInts(inputIndex);
    if (!axes)
      return c.error() << c.node->op_type() << " axes must be constant";
    return *axes;
  }
  return c.attrInts("axes");
}

LogicalResult importUnsqueeze(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 2)))
    return failure();
  auto axes = axesOf(c, 1, true);
  if (failed(axes))
    return failure();
  return c.setResult(
      0, make<UnsqueezeOp>(c, c.resultType(0), {c.operand(0)},
                           {named(c, "axes",
                                  c.builder.getDenseI64ArrayAttr(*axes))}));
}

LogicalResult importSqueeze(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 1)))
    return failure();
  auto axes = axesOf(c, 1, true);
  if (failed(axes))
    return failure();
  auto in = cast<RankedTensorType>(c.operand(0).getType());
  if (axes->empty()) {
    for (int64_t i = 0; i < in.getRank(); ++i) {
      if (in.isDynamicDim(i))
        return c.error() << "Squeeze without axes needs a static shape";
      if (in.getDimSize(i) == 1)
        axes->push_back(i);
    }
  }
  return c.setResult(
      0, make<SqueezeOp>(c, c.resultType(0), {c.operand(0)},
                         {named(c, "axes",
                                c.builder.getDenseI64ArrayAttr(*axes))}));
}

LogicalResult importReduce(ImportContext &c, const onnx::NodeProto &n) {
  if (failed(requireOperands(c, 1)))
    return failure();
  ReduceKind kind = StringSwitch<ReduceKind>(n.op_type())
                        .Case("ReduceSum", ReduceKind::sum)
                        .Case("ReduceMean", ReduceKind::mean)
                        .Case("ReduceMax", ReduceKind::max)
                        .Default(ReduceKind::min);
  // ReduceSum took axes as an input from opset 13, the others from 18.
  bool inputForm = kind == ReduceKind::sum || c.opset >= 18;
  auto axes = axesOf(c, 1, inputForm);
  if (failed(axes))
    return failure();
  if (axes->empty() && c.attrInt("noop_with_empty_axes", 0))
    return c.setResult(0, c.operand(0));
  return c.setResult(
      0, make<ReduceOp>(
             c, c.resultType(0), {c.operand(0)},
             {named(c, "kind",
                    ReduceKindAttr::get(c.builder.getContext(), kind)),
              named(c, "axes", c.builder.getDenseI64ArrayAttr(*axes)),
              named(c, "keepdims",
                    c.builder.getBoolAttr(c.attrInt("keepdims", 1) != 0))}));
}

LogicalResult importFlatten(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 1)))
    return failure();
  return c.setResult(
      0, make<FlattenOp>(c, c.resultType(0), {c.operand(0)},
                         {named(c, "axis", c.builder.getI64IntegerAttr(
                                               c.attrInt("axis", 1)))}));
}

LogicalResult importExpand(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 2)))
    return failure();
  return c.setResult(
      0, make<ExpandOp>(c, c.resultType(0), {c.operand(0), c.operand(1)}));
}

LogicalResult importShape(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 1)))
    return failure();
  SmallVector<NamedAttribute> attrs{
      named(c, "start", c.builder.getI64IntegerAttr(c.attrInt("start", 0)))};
  if (c.attr("end"))
    attrs.push_back(
        named(c, "end", c.builder.getI64IntegerAttr(c.attrInt("end", 0))));
  return c.setResult(0,
                     make<ShapeOp>(c, c.resultType(0), {c.operand(0)}, attrs));
}

LogicalResult importRange(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 3)))
    return failure();
  return c.setResult(0, make<RangeOp>(c, c.resultType(0),
                                      {c.operand(0), c.operand(1),
                                       c.operand(2)}));
}

LogicalResult importCumSum(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 2)))
    return failure();
  auto axis = c.constantInts(1);
  if (!axis || axis->size() != 1)
    return c.error() << "CumSum axis must be a constant scalar";
  SmallVector<NamedAttribute> attrs{
      named(c, "axis", c.builder.getI64IntegerAttr((*axis)[0]))};
  if (c.attrInt("exclusive", 0))
    attrs.push_back(named(c, "exclusive", c.builder.getUnitAttr()));
  if (c.attrInt("reverse", 0))
    attrs.push_back(named(c, "reverse", c.builder.getUnitAttr()));
  return c.setResult(0,
                     make<CumSumOp>(c, c.resultType(0), {c.operand(0)}, attrs));
}

LogicalResult importConstantOfShape(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 1)))
    return failure();
  Attribute value = c.builder.getF32FloatAttr(0.0f);
  if (const auto *a = c.attr("value")) {
    FailureOr<DenseElementsAttr> v = c.tensorToAttr(a->t());
    if (failed(v) || v->getNumElements() != 1)
      return c.error() << "ConstantOfShape value must hold one element";
    value = *v->value_begin<Attribute>();
  }
  return c.setResult(0, make<ConstantOfShapeOp>(
                            c, c.resultType(0), {c.operand(0)},
                            {named(c, "value", value)}));
}

LogicalResult importTrilu(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 1)))
    return failure();
  int64_t k = 0;
  if (c.operand(1)) {
    auto kv = c.constantInts(1);
    if (!kv || kv->size() != 1)
      return c.error() << "Trilu k must be a constant scalar";
    k = (*kv)[0];
  }
  return c.setResult(
      0, make<TriluOp>(c, c.resultType(0), {c.operand(0)},
                       {named(c, "upper", c.builder.getBoolAttr(
                                              c.attrInt("upper", 1) != 0)),
                        named(c, "k", c.builder.getI64IntegerAttr(k))}));
}

/// Pad (constant, edge, reflect): along each padded axis, a gather
/// of x by a constant index vector (the source row of every output row;
/// negative pads crop), and in constant mode a where() that puts the value
/// in the rows outside x. The pads must be a constant and the padded axes
/// static. (Pad-18's axes and Pad-19's wrap mode are left out: Debian's
/// libonnx cannot infer those opsets' Pad, so no such model imports.)
LogicalResult importPad(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 1)))
    return failure();
  Value x = c.operand(0);
  auto xt = cast<RankedTensorType>(x.getType());
  const int64_t rank = xt.getRank();
  std::string mode = c.attrString("mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect")
    return c.error() << "Pad mode '" << mode
                     << "' is not supported (constant, edge, reflect)";
  std::optional<SmallVector<int64_t>> pads;
  if (c.operand(1))
    pads = c.constantInts(1);
  if (!pads)
    return c.error() << "Pad pads must be a constant";
  if (c.operand(3))
    return c.error() << "Pad with axes (opset 18) is not supported";
  const int64_t n = rank;
  if (int64_t(pads->size()) != 2 * n)
    return c.error() << "Pad needs " << 2 * n << " pads (2 per axis), got "
                     << pads->size();
  Value cval = c.operand(2);
  if (cval) {
    auto ct = dyn_cast<RankedTensorType>(cval.getType());
    if (!ct || !ct.hasStaticShape() || ct.getNumElements() != 1)
      return c.error() << "Pad constant_value must be a scalar";
  } else {
    auto zero = RankedTensorType::get({}, xt.getElementType());
    cval = ConstantOp::create(
        c.builder, c.loc,
        DenseElementsAttr::get(zero,
                               c.builder.getZeroAttr(xt.getElementType())));
  }
  Value y = x;
  SmallVector<int64_t> shape(xt.getShape());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t axis = i, before = (*pads)[i], after = (*pads)[n + i];
    if (before == 0 && after == 0)
      continue;
    const int64_t size = shape[axis];
    if (ShapedType::isDynamic(size))
      return c.error() << "Pad along dimension " << axis
                       << " needs its size to be static";
    const int64_t length = size + before + after;
    if (size == 0)
      return c.error() << "Pad of an empty dimension (" << axis
                       << ") is not supported";
    if (length < 0)
      return c.error() << "Pad of " << before << " and " << after
                       << " along dimension " << axis << " of size " << size
                       << " leaves fewer than 0 rows";
    SmallVector<int64_t> index(length);
    SmallVector<bool> inside(length);
    for (int64_t j = 0; j < length; ++j) {
      int64_t src = j - before;
      inside[j] = src >= 0 && src < size;
      if (mode == "reflect" && size > 1) {
        int64_t period = 2 * (size - 1);
        src = ((src % period) + period) % period;
        src = src < size ? src : period - src;
      } else {
        src = std::clamp<int64_t>(src, 0, size - 1);
      }
      index[j] = src;
    }
    shape[axis] = length;
    auto padded = RankedTensorType::get(shape, xt.getElementType());
    y = make<GatherOp>(c, padded, {y, c.i64Constant(index)},
                       {named(c, "axis", c.builder.getI64IntegerAttr(axis))});
    if (mode == "constant" && llvm::is_contained(inside, false)) {
      SmallVector<int64_t> maskShape(rank, 1);
      maskShape[axis] = length;
      auto maskType = RankedTensorType::get(maskShape, c.builder.getI1Type());
      Value mask = ConstantOp::create(
          c.builder, c.loc, DenseElementsAttr::get(maskType, ArrayRef(inside)));
      y = make<WhereOp>(c, padded, {mask, y, cval});
    }
  }
  return c.setResult(0, y);
}

/// Spatial attributes shared by Conv and pooling, with ONNX defaults, for
/// input `x` [N, C, spatial...] and a window of `kernel` sizes. auto_pad
/// SAME_UPPER / SAME_LOWER become explicit pads: the output keeps
/// ceil(in / stride) positions, and the odd pad goes at the end (UPPER) or
/// the beginning (LOWER); they need static spatial sizes.
LogicalResult spatialAttrs(ImportContext &c, RankedTensorType x,
                           ArrayRef<int64_t> kernel,
                           SmallVectorImpl<int64_t> &strides,
                           SmallVectorImpl<int64_t> &pads,
                           SmallVectorImpl<int64_t> &dilations) {
  const int64_t spatial = x.getRank() - 2;
  std::string autoPad = c.attrString("auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "VALID" && autoPad != "SAME_UPPER" &&
      autoPad != "SAME_LOWER")
    return c.error() << c.node->op_type() << " auto_pad=" << autoPad
                     << " is not a valid value (NOTSET, VALID, SAME_UPPER, "
                        "SAME_LOWER)";
  strides.assign(c.attrInts("strides"));
  pads.assign(c.attrInts("pads"));
  dilations.assign(c.attrInts("dilations"));
  if (strides.empty())
    strides.assign(spatial, 1);
  if (dilations.empty())
    dilations.assign(spatial, 1);
  if (autoPad != "NOTSET") {
    if (llvm::any_of(pads, [](int64_t p) { return p != 0; }))
      return c.error() << c.node->op_type()
                       << " has both pads and auto_pad=" << autoPad;
    pads.clear();
  }
  if (pads.empty())
    pads.assign(2 * spatial, 0);
  if (!StringRef(autoPad).starts_with("SAME"))
    return success();
  if (int64_t(strides.size()) != spatial ||
      int64_t(dilations.size()) != spatial || int64_t(kernel.size()) != spatial)
    return c.error() << c.node->op_type() << " needs " << spatial
                     << " strides, dilations and kernel sizes";
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t in = x.getDimSize(2 + i);
    if (ShapedType::isDynamic(in) || ShapedType::isDynamic(kernel[i]))
      return c.error() << c.node->op_type() << " auto_pad=" << autoPad
                       << " needs static spatial sizes (input dimension "
                       << 2 + i << " is dynamic)";
    if (strides[i] <= 0 || dilations[i] <= 0 || kernel[i] <= 0)
      return c.error() << c.node->op_type()
                       << " strides, dilations and kernel sizes must be "
                          "positive";
    int64_t out = (in + strides[i] - 1) / strides[i];
    int64_t window = (kernel[i] - 1) * dilations[i] + 1;
    int64_t total = std::max<int64_t>(0, (out - 1) * strides[i] + window - in);
    int64_t small = total / 2;
    pads[i] = autoPad == "SAME_UPPER" ? small : total - small;
    pads[spatial + i] = total - pads[i];
  }
  return success();
}

LogicalResult importConv(ImportContext &c, const onnx::NodeProto &) {
  if (failed(requireOperands(c, 2)))
    return failure();
  auto xt = cast<RankedTensorType>(c.operand(0).getType());
  auto wt = cast<RankedTensorType>(c.operand(1).getType());
  SmallVector<int64_t> kernel(c.attrInts("kernel_shape"));
  if (kernel.empty() && wt.getRank() >= 2)
    kernel.assign(wt.getShape().drop_front(2).begin(), wt.getShape().end());
  SmallVector<int64_t> strides, pads, dilations;
  if (failed(spatialAttrs(c, xt, kernel, strides, pads, dilations)))
    return failure();
  SmallVector<Value> operands{c.operand(0), c.operand(1)};
  if (Value b = c.operand(2))
    operands.push_back(b);
  return c.setResult(
      0, make<ConvOp>(
             c, c.resultType(0), operands,
             {named(c, "strides", c.builder.getDenseI64ArrayAttr(strides)),
              named(c, "pads", c.builder.getDenseI64ArrayAttr(pads)),
              named(c, "dilations", c.builder.getDenseI64ArrayAttr(dilations)),
              named(c, "group",
                    c.builder.getI64IntegerAttr(c.attrInt("group", 1)))}));
}

LogicalResult importPool(ImportContext &c, const onnx::NodeProto &n) {
  if (failed(requireOperands(c, 1)))
    return failure();
  bool global = StringRef(n.op_type()).starts_with("Global");
  PoolKind kind = StringRef(n.op_type()).contains("Max") ? PoolKind::max
                                                          : PoolKind::avg;
  auto xt = cast<RankedTensorType>(c.operand(0).getType());
  int64_t spatial = xt.getRank() - 2;
  SmallVector<int64_t> kernel, strides, pads, dilations;
  if (!global) {
    kernel.assign(c.attrInts("kernel_shape"));
    if (static_cast<int64_t>(kernel.size()) != spatial)
      return c.error() << n.op_type() << " needs kernel_shape with " << spatial
                       << " values";
    if (c.attrInt("ceil_mode", 0))
      return c.error() << n.op_type() << " ceil_mode=1 is not supported";
    if (failed(spatialAttrs(c, xt, kernel, strides, pads, dilations)))
      return failure();
    if (llvm::any_of(dilations, [](int64_t d) { return d != 1; }))
      return c.error() << n.op_type() << " with dilations is not supported";
  }
  SmallVector<NamedAttribute> attrs{
      named(c, "kind", PoolKindAttr::get(c.builder.getContext(), kind)),
      named(c, "kernel", c.builder.getDenseI64ArrayAttr(kernel)),
      named(c, "strides", c.builder.getDenseI64ArrayAttr(strides)),
      named(c, "pads", c.builder.getDenseI64ArrayAttr(pads))};
  if (c.attrInt("count_include_pad", 0))
    attrs.push_back(named(c, "count_include_pad", c.builder.getUnitAttr()));
  return c.setResult(0,
                     make<PoolOp>(c, c.resultType(0), {c.operand(0)}, attrs));
}

LogicalResult importBatchNorm(ImportContext &c, const onnx::NodeProto &n) {
  if (failed(requireOperands(c, 5)))
    return failure();
  if (c.attrInt("training_mode", 0))
    return c.error() << "BatchNormalization in training mode is not supported";
  return c.setResult(
      0, make<BatchNormOp>(c, c.resultType(0),
                           {c.operand(0), c.operand(1), c.operand(2),
                            c.operand(3), c.operand(4)},
                           {named(c, "epsilon",
                                  c.builder.getF32FloatAttr(
                                      c.attrFloat("epsilon", 1e-5f)))}));
}

} // namespace

bool sparsec::onnx_import::isControlFlowOp(StringRef opType) {
  return llvm::is_contained({"If", "Loop", "Scan", "LSTM", "GRU", "RNN",
                             "SequenceMap"},
                            opType);
}

const llvm::StringMap<std::vector<HandlerEntry>> &
sparsec::onnx_import::getHandlerTable() {
  static const llvm::StringMap<std::vector<HandlerEntry>> table = [] {
    llvm::StringMap<std::vector<HandlerEntry>> t;
    auto add = [&](StringRef op, int64_t since, NodeHandler h) {
      t[op].push_back({since, std::move(h)});
    };
    // Elementwise.
    add("Relu", 13, unary<ReluOp>);
    add("Sigmoid", 13, unary<SigmoidOp>);
    add("Tanh", 13, unary<TanhOp>);
    add("Exp", 13, unary<ExpOp>);
    add("Log", 13, unary<LogOp>);
    add("Erf", 13, unary<ErfOp>);
    add("Sin", 7, unary<SinOp>);
    add("Cos", 7, unary<CosOp>);
    add("Sqrt", 13, unary<SqrtOp>);
    add("Reciprocal", 13, unary<ReciprocalOp>);
    add("Abs", 13, unary<AbsOp>);
    add("Neg", 13, unary<NegOp>);
    add("Not", 13, unary<NotOp>);
    add("Gelu", 20, importGelu);
    add("Clip", 13, importClip);
    add("LeakyRelu", 13, importLeakyRelu);
    add("PRelu", 13, importPRelu);
    add("Elu", 13, importElu);
    add("Selu", 13, importSelu);
    add("Celu", 13, importCelu);
    add("ThresholdedRelu", 13, importThresholdedRelu);
    add("HardSigmoid", 13, importHardSigmoid);
    add("HardSwish", 14, importHardSwish);
    add("Softplus", 13, importSoftplus);
    add("Softsign", 13, importSoftsign);
    add("Identity", 13, forward);
    add("Dropout", 13, importDropout);
    add("Cast", 13, importCast);
    add("Add", 13, binary<AddOp>);
    add("Sub", 13, binary<SubOp>);
    add("Mul", 13, binary<MulOp>);
    add("Div", 13, binary<DivOp>);
    add("Pow", 13, binary<PowOp>);
    add("Max", 13, variadic<MaxOp>);
    add("Min", 13, variadic<MinOp>);
    add("Sum", 13, variadic<AddOp>);
    add("Mean", 13, importMean);
    add("And", 13, binary<AndOp>);
    add("Or", 13, binary<OrOp>);
    add("Equal", 13, compare<ComparePredicate::eq>);
    add("Less", 13, compare<ComparePredicate::lt>);
    add("LessOrEqual", 13, compare<ComparePredicate::le>);
    add("Greater", 13, compare<ComparePredicate::gt>);
    add("GreaterOrEqual", 13, compare<ComparePredicate::ge>);
    add("Where", 13, importWhere);
    // Layers.
    add("MatMul", 13, importMatMul);
    add("Gemm", 13, importGemm);
    add("LayerNormalization", 17, importLayerNorm);
    add("Softmax", 13, importSoftmax);
    add("Conv", 13, importConv);
    add("BatchNormalization", 13, importBatchNorm);
    add("MaxPool", 13, importPool);
    add("AveragePool", 13, importPool);
    add("GlobalAveragePool", 13, importPool);
    add("GlobalMaxPool", 13, importPool);
    add("ReduceMean", 13, importReduce);
    add("ReduceSum", 13, importReduce);
    add("ReduceMax", 13, importReduce);
    add("ReduceMin", 13, importReduce);
    add("CumSum", 13, importCumSum);
    add("Trilu", 14, importTrilu);
    // Shapes and data movement.
    add("Constant", 13, importConstant);
    add("ConstantOfShape", 13, importConstantOfShape);
    add("Shape", 13, importShape);
    add("Gather", 13, importGather);
    add("Reshape", 13, importReshape);
    add("Transpose", 13, importTranspose);
    add("Concat", 13, importConcat);
    add("Slice", 13, importSlice);
    add("Split", 13, importSplit);
    add("Squeeze", 13, importSqueeze);
    add("Unsqueeze", 13, importUnsqueeze);
    add("Flatten", 13, importFlatten);
    add("Expand", 13, importExpand);
    add("Pad", 13, importPad);
    add("Range", 13, importRange);
    return t;
  }();
  return table;
}
