//===- Importer.cpp - ONNX protobuf to sparsec IR ------------------------===//
//
// Part of the sparsec project.
//
// The driver: parses the protobuf, runs ONNX shape inference, checks that
// every node has a handler (reporting all that do not at once), then
// imports nodes in order through the handler table. Weights become
// `sparsec.global` declarations; their bytes stay in the model file.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Frontend/ONNX/Importer.h"
#include "ImportContext.h"
#include "sparsec/Weights/WeightStore.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <exception>

using namespace mlir;
using namespace sparsec;
using namespace sparsec::onnx_import;

//===----------------------------------------------------------------------===//
// ImportContext
//===----------------------------------------------------------------------===//

Value ImportContext::operand(int i) const {
  if (i >= node->input_size() || node->input(i).empty())
    return {};
  return lookup(node->input(i));
}

std::optional<SmallVector<int64_t>> ImportContext::constantInts(int i) const {
  Value v = operand(i);
  DenseIntElementsAttr attr;
  if (!v || !matchPattern(v, m_Constant(&attr)))
    return std::nullopt;
  SmallVector<int64_t> out;
  for (const APInt &x : attr.getValues<APInt>())
    out.push_back(x.getSExtValue());
  return out;
}

std::optional<double> ImportContext::constantScalar(int i) const {
  Value v = operand(i);
  DenseElementsAttr attr;
  if (!v || !matchPattern(v, m_Constant(&attr)) || attr.getNumElements() != 1)
    return std::nullopt;
  if (isa<FloatType>(attr.getElementType()))
    return (*attr.getValues<APFloat>().begin()).convertToDouble();
  return static_cast<double>((*attr.getValues<APInt>().begin()).getSExtValue());
}

Type ImportContext::elementType(int32_t t) const {
  MLIRContext *ctx = builder.getContext();
  switch (t) {
  case onnx::TensorProto::FLOAT: return Float32Type::get(ctx);
  case onnx::TensorProto::DOUBLE: return Float64Type::get(ctx);
  case onnx::TensorProto::FLOAT16: return Float16Type::get(ctx);
  case onnx::TensorProto::BFLOAT16: return BFloat16Type::get(ctx);
  case onnx::TensorProto::INT64: return IntegerType::get(ctx, 64);
  case onnx::TensorProto::INT32: return IntegerType::get(ctx, 32);
  case onnx::TensorProto::INT16: return IntegerType::get(ctx, 16);
  case onnx::TensorProto::INT8: return IntegerType::get(ctx, 8);
  case onnx::TensorProto::UINT8:
    return IntegerType::get(ctx, 8, IntegerType::Unsigned);
  case onnx::TensorProto::UINT16:
    return IntegerType::get(ctx, 16, IntegerType::Unsigned);
  case onnx::TensorProto::UINT32:
    return IntegerType::get(ctx, 32, IntegerType::Unsigned);
  case onnx::TensorProto::UINT64:
    return IntegerType::get(ctx, 64, IntegerType::Unsigned);
  case onnx::TensorProto::BOOL: return IntegerType::get(ctx, 1);
  default: return {};
  }
}

Type ImportContext::tensorType(const onnx::TypeProto &type) const {
  if (!type.has_tensor_type())
    return {};
  const auto &tt = type.tensor_type();
  Type elt = elementType(tt.elem_type());
  if (!elt)
    return {};
  if (!tt.has_shape())
    return UnrankedTensorType::get(elt);
  SmallVector<int64_t> dims;
  int64_t elements = 1;
  for (const auto &d : tt.shape().dim()) {
    const bool known = d.has_dim_value() && d.dim_value() >= 0;
    dims.push_back(known ? d.dim_value() : ShapedType::kDynamic);
    // A shape past 2^48 elements (ONNX's inference computes them from
    // constants, e.g. ConstantOfShape), or with a size past it beside a
    // zero, is not taken as a type: the op's own inference, which rejects
    // it by name, decides instead.
    if (known && (d.dim_value() > kMaxStaticElements ||
                  !mulWithinStaticLimit(elements, d.dim_value())))
      return {};
  }
  return RankedTensorType::get(dims, elt);
}

Type ImportContext::resultType(int i) const {
  auto it = knownTypes.find(node->output(i));
  if (it != knownTypes.end())
    if (Type t = tensorType(*it->second))
      return t;
  // Unknown: an unranked placeholder the op's own inference replaces.
  return UnrankedTensorType::get(Float32Type::get(builder.getContext()));
}

LogicalResult ImportContext::setResult(int i, Value v) {
  if (i >= node->output_size())
    return success();
  if (auto given = dyn_cast<RankedTensorType>(v.getType())) {
    // A type ONNX's inference gave (or the file declared) must agree with
    // the op's own inference where both know a size: Debian's libonnx
    // wraps a Concat's size past 2^32, and a file's value_info is taken as
    // it is where ONNX cannot infer.
    Operation *op = v.getDefiningOp();
    auto infer = op ? dyn_cast<InferShapedTypeOpInterface>(op) : nullptr;
    SmallVector<ShapedTypeComponents> comps;
    const unsigned r = op ? cast<OpResult>(v).getResultNumber() : 0;
    if (infer &&
        succeeded(infer.inferReturnTypeComponents(
            builder.getContext(), std::nullopt, op->getOperands(),
            op->getAttrDictionary(), op->getPropertiesStorage(),
            op->getRegions(), comps)) &&
        comps.size() > r && comps[r].hasRank()) {
      ArrayRef<int64_t> own = comps[r].getDims();
      bool agree = own.size() == static_cast<size_t>(given.getRank());
      for (size_t d = 0; agree && d < own.size(); ++d)
        agree = ShapedType::isDynamic(own[d]) || given.isDynamicDim(d) ||
                own[d] == given.getDimSize(d);
      if (!agree) {
        std::string ownStr;
        for (int64_t d : own)
          ownStr += (ownStr.empty() ? "" : "x") +
                    (ShapedType::isDynamic(d) ? std::string("?")
                                              : std::to_string(d));
        return error() << "output '" << node->output(i) << "' is declared or "
                       << "inferred by ONNX as " << given
                       << ", but its inputs make its shape " << ownStr;
      }
    }
  } else {
    Operation *op = v.getDefiningOp();
    SmallVector<ShapedTypeComponents> comps;
    auto infer = op ? dyn_cast<InferShapedTypeOpInterface>(op) : nullptr;
    if (infer &&
        succeeded(infer.inferReturnTypeComponents(
            builder.getContext(), loc, op->getOperands(),
            op->getAttrDictionary(), op->getPropertiesStorage(),
            op->getRegions(), comps)) &&
        comps.size() > static_cast<size_t>(cast<OpResult>(v).getResultNumber()) &&
        comps[cast<OpResult>(v).getResultNumber()].hasRank()) {
      const ShapedTypeComponents &c =
          comps[cast<OpResult>(v).getResultNumber()];
      Type elt = c.getElementType() ? c.getElementType()
                                    : cast<ShapedType>(v.getType())
                                          .getElementType();
      v.setType(RankedTensorType::get(c.getDims(), elt));
    } else if (op && op->getNumOperands() > 0 &&
               (op->hasTrait<OpTrait::SameOperandsAndResultType>() ||
                isa<LayerNormOp, RmsNormOp, BatchNormOp>(op))) {
      v.setType(op->getOperand(0).getType());
    } else {
      return error() << "cannot infer the shape of '" << node->output(i)
                     << "' (" << node->op_type() << ")";
    }
  }
  if (!node->output(i).empty())
    bind(node->output(i), v);
  return success();
}

const onnx::AttributeProto *ImportContext::attr(StringRef name) const {
  for (const auto &a : node->attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

int64_t ImportContext::attrInt(StringRef name, int64_t dflt) const {
  const auto *a = attr(name);
  return a ? a->i() : dflt;
}

float ImportContext::attrFloat(StringRef name, float dflt) const {
  const auto *a = attr(name);
  return a ? a->f() : dflt;
}

std::string ImportContext::attrString(StringRef name, StringRef dflt) const {
  const auto *a = attr(name);
  return a ? a->s() : dflt.str();
}

SmallVector<int64_t> ImportContext::attrInts(StringRef name) const {
  SmallVector<int64_t> out;
  if (const auto *a = attr(name))
    out.append(a->ints().begin(), a->ints().end());
  return out;
}

Value ImportContext::i64Constant(ArrayRef<int64_t> values) {
  auto type = RankedTensorType::get({static_cast<int64_t>(values.size())},
                                    builder.getI64Type());
  return ConstantOp::create(builder, loc,
                            DenseIntElementsAttr::get(type, values));
}

namespace {
/// Reads element `i` of a typed or raw tensor payload.
template <typename T>
bool readRaw(const std::string &raw, int64_t i, T &out) {
  if (static_cast<size_t>((i + 1) * sizeof(T)) > raw.size())
    return false;
  std::memcpy(&out, raw.data() + i * sizeof(T), sizeof(T));
  return true;
}
} // namespace

FailureOr<DenseElementsAttr>
ImportContext::tensorToAttr(const onnx::TensorProto &t) {
  Type elt = elementType(t.data_type());
  if (!elt)
    return error() << "tensor '" << t.name() << "' has unsupported data type "
                   << t.data_type();
  SmallVector<int64_t> dims(t.dims().begin(), t.dims().end());
  int64_t numel = 1;
  for (int64_t d : dims) {
    if (d < 0)
      return error() << "tensor '" << t.name() << "' has a negative dimension";
    numel *= d;
  }
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return error() << "tensor '" << t.name()
                   << "' stores its data externally; only weights may";
  auto type = RankedTensorType::get(dims, elt);
  const std::string &raw = t.raw_data();
  bool hasRaw = t.has_raw_data();
  auto bad = [&]() -> FailureOr<DenseElementsAttr> {
    return error() << "tensor '" << t.name() << "' holds fewer values than "
                   << "its shape needs (" << numel << ")";
  };
  if (auto ft = dyn_cast<FloatType>(elt)) {
    SmallVector<APFloat> vals;
    for (int64_t i = 0; i < numel; ++i) {
      if (ft.isF32()) {
        float f;
        if (hasRaw ? !readRaw(raw, i, f) : i >= t.float_data_size())
          return bad();
        vals.push_back(APFloat(hasRaw ? f : t.float_data(i)));
      } else if (ft.isF64()) {
        double d;
        if (hasRaw ? !readRaw(raw, i, d) : i >= t.double_data_size())
          return bad();
        vals.push_back(APFloat(hasRaw ? d : t.double_data(i)));
      } else {
        uint16_t bits;
        if (hasRaw ? !readRaw(raw, i, bits) : i >= t.int32_data_size())
          return bad();
        if (!hasRaw)
          bits = static_cast<uint16_t>(t.int32_data(i));
        vals.push_back(APFloat(ft.getFloatSemantics(), APInt(16, bits)));
      }
    }
    return DenseElementsAttr::get(type, vals);
  }
  auto it = cast<IntegerType>(elt);
  unsigned width = it.getWidth();
  SmallVector<APInt> vals;
  for (int64_t i = 0; i < numel; ++i) {
    int64_t v = 0;
    if (width == 64) {
      if (hasRaw ? !readRaw(raw, i, v) : i >= t.int64_data_size())
        return bad();
      if (!hasRaw)
        v = t.int64_data(i);
    } else if (hasRaw) {
      bool ok = true;
      if (width == 32) {
        int32_t x;
        ok = readRaw(raw, i, x);
        v = x;
      } else if (width == 16) {
        int16_t x;
        ok = readRaw(raw, i, x);
        v = x;
      } else {
        uint8_t x;
        ok = readRaw(raw, i, x);
        v = (width == 8 && it.isSignless()) ? static_cast<int8_t>(x) : x;
      }
      if (!ok)
        return bad();
    } else {
      if (i >= t.int32_data_size())
        return bad();
      v = t.int32_data(i);
    }
    if (width == 1)
      v = v != 0;
    vals.push_back(APInt(width, static_cast<uint64_t>(v), it.isSignless()));
  }
  return DenseElementsAttr::get(type, vals);
}

FailureOr<Value> ImportContext::importTensor(const onnx::TensorProto &t,
                                             StringRef name,
                                             bool isInitializer) {
  Type elt = elementType(t.data_type());
  if (!elt)
    return error() << "tensor '" << name << "' has unsupported data type "
                   << t.data_type();
  SmallVector<int64_t> dims(t.dims().begin(), t.dims().end());
  int64_t numel = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && numel > (int64_t(1) << 40) / d))
      return error() << "tensor '" << name << "' has an invalid shape";
    numel *= d;
  }
  auto type = RankedTensorType::get(dims, elt);
  bool inlineIt = dims.empty() || (isa<IntegerType>(elt) &&
                                   numel <= inlineLimit) ||
                  (!isInitializer && numel <= 16);
  if (inlineIt) {
    FailureOr<DenseElementsAttr> attr = tensorToAttr(t);
    if (failed(attr))
      return failure();
    return ConstantOp::create(builder, loc, *attr).getResult();
  }
  // A weight: declare it once at module level, reference it by symbol.
  std::string symName = name.str();
  if (!module.lookupSymbol(symName)) {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(module.getBody(), module.getBody()->begin());
    // Keep declarations in import order: insert after the last global.
    for (Operation &op : *module.getBody())
      if (isa<GlobalOp>(op))
        builder.setInsertionPointAfter(&op);
    GlobalOp::create(builder, loc, builder.getStringAttr(symName),
                     TypeAttr::get(type), builder.getStringAttr(name),
                     /*transforms=*/nullptr, /*value=*/nullptr,
                     /*permutation=*/nullptr);
  }
  return WeightOp::create(builder, loc, type,
                          FlatSymbolRefAttr::get(builder.getContext(), symName))
      .getResult();
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

namespace {
class Importer {
public:
  Importer(MLIRContext &context, const ImportOptions &options)
      : context(context), options(options) {}

  OwningOpRef<ModuleOp> run(onnx::ModelProto &model, StringRef sourceName);

private:
  LogicalResult checkSupported(const onnx::GraphProto &graph, int64_t opset,
                               Location fileLoc);
  MLIRContext &context;
  const ImportOptions &options;
};
} // namespace

static Location nodeLocation(MLIRContext &ctx, const onnx::NodeProto &node,
                             int index, Location fileLoc) {
  std::string name = node.name().empty()
                         ? node.op_type() + "_" + std::to_string(index)
                         : node.name();
  return NameLoc::get(StringAttr::get(&ctx, name), fileLoc);
}

/// Attribute values (and output counts) ONNX's own shape inference divides
/// by or indexes with: checked before it runs, since libonnx crashes on them
/// (found by fuzzing: a Conv with strides 0 is a division by zero in its
/// inference).
/// Conv and the pools: libonnx infers them all with convPoolShapeInference.
static bool isSpatialOp(const onnx::NodeProto &n) {
  static const llvm::StringSet<> ops = {"Conv", "ConvTranspose", "MaxPool",
                                        "AveragePool", "LpPool"};
  return ops.contains(n.op_type());
}

static std::optional<std::string> invalidInferenceAttrs(const onnx::NodeProto &node) {
  if (node.op_type() == "Split") {
    // Its inference divides the dim by the output count (found by
    // fuzzing: a Split with no outputs is a division by zero).
    if (node.output_size() == 0)
      return std::string("a Split needs at least one output");
    for (const auto &a : node.attribute())
      if (a.name() == "num_outputs" && a.i() <= 0)
        return "num_outputs must be positive, got " + std::to_string(a.i());
    return std::nullopt;
  }
  if (!isSpatialOp(node))
    return std::nullopt;
  for (const auto &a : node.attribute()) {
    bool positive = a.name() == "strides" || a.name() == "dilations" ||
                    a.name() == "kernel_shape";
    if (positive)
      for (int64_t v : a.ints())
        if (v <= 0)
          return a.name() + " must be positive, got " + std::to_string(v);
    if (a.name() == "pads")
      for (int64_t v : a.ints())
        if (v < 0)
          return "pads must be non-negative, got " + std::to_string(v);
    if (a.name() == "group" && a.i() <= 0)
      return "group must be positive, got " + std::to_string(a.i());
  }
  return std::nullopt;
}

/// Ops whose libonnx 1.12 inference indexes an input by another's rank or
/// an attribute without a range check, crashing on a model that disagrees:
/// LayerNormalization writes Mean / InvStdDev from dim `axis` on (a
/// negative axis below -rank), and Conv / pools read as many input dims as
/// the weight has spatial dims or `kernel_shape` has entries (found by
/// fuzzing: a rank-4 weight over a rank-3 input). The ranks are learnt
/// first by an inference over the model with those nodes made harmless
/// (LayerNormalization keeping only Y; Conv and pools as Identity of their
/// input, which keeps the rank), then checked. The model is changed in place
/// and put back (nodes, value_info, graph outputs) rather than copied,
/// since a copy would duplicate every initializer's data.
static bool convLike(const onnx::NodeProto &n) {
  return isSpatialOp(n) && n.input_size() >= 1;
}

static LogicalResult checkRanksForInference(MLIRContext &context,
                                            onnx::ModelProto &model,
                                            Location fileLoc) {
  auto withStats = [](const onnx::NodeProto &n) {
    return n.op_type() == "LayerNormalization" && n.output_size() > 1;
  };
  if (llvm::none_of(model.graph().node(), [&](const onnx::NodeProto &n) {
        return withStats(n) || convLike(n);
      }))
    return success();
  onnx::GraphProto &g = *model.mutable_graph();
  const auto valueInfo = g.value_info();
  const auto graphOutputs = g.output();
  std::vector<std::pair<int, onnx::NodeProto>> saved;
  for (auto [index, n] : llvm::enumerate(*g.mutable_node())) {
    if (withStats(n)) {
      saved.emplace_back(int(index), n);
      while (n.output_size() > 1)
        n.mutable_output()->RemoveLast();
    } else if (convLike(n)) {
      saved.emplace_back(int(index), n);
      n.set_op_type("Identity");
      while (n.input_size() > 1)
        n.mutable_input()->RemoveLast();
      n.clear_attribute();
    }
  }
  try {
    onnx::ShapeInferenceOptions opts(/*check_type=*/false, /*strict_mode=*/0,
                                     /*data_prop=*/true);
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                       opts);
  } catch (const std::exception &) {
    // What could be inferred is kept; the real pass reports the error.
  }
  llvm::StringMap<int64_t> ranks;
  auto note = [&](const onnx::ValueInfoProto &vi) {
    if (vi.type().has_tensor_type() && vi.type().tensor_type().has_shape())
      ranks[vi.name()] = vi.type().tensor_type().shape().dim_size();
  };
  for (const auto &vi : g.input())
    note(vi);
  for (const auto &vi : g.value_info())
    note(vi);
  for (const auto &init : g.initializer())
    ranks[init.name()] = init.dims_size();
  // Put the model back as it came, for the real (strict) inference.
  for (auto &[index, node] : saved)
    *g.mutable_node(index) = node;
  *g.mutable_value_info() = valueInfo;
  *g.mutable_output() = graphOutputs;
  auto rankOf = [&](const std::string &name) -> int64_t {
    auto it = ranks.find(name);
    return it == ranks.end() ? -1 : it->second;
  };
  bool bad = false;
  for (auto [index, node] : llvm::enumerate(g.node())) {
    auto report = [&]() -> InFlightDiagnostic {
      bad = true;
      return emitError(nodeLocation(context, node, int(index), fileLoc))
             << "node '" << node.name() << "' (" << node.op_type() << "): ";
    };
    if (withStats(node) && node.input_size() >= 1) {
      const int64_t rank = rankOf(node.input(0));
      if (rank < 0)
        continue; // unknown rank: ONNX's inference skips the node
      int64_t axis = -1;
      for (const auto &a : node.attribute())
        if (a.name() == "axis")
          axis = a.i();
      if (axis < -rank || axis >= rank)
        report() << "axis " << axis << " out of range for rank " << rank;
      continue;
    }
    if (!convLike(node))
      continue;
    const int64_t x = rankOf(node.input(0));
    const bool weighted = node.op_type().rfind("Conv", 0) == 0;
    const int64_t w = weighted && node.input_size() >= 2
                          ? rankOf(node.input(1))
                          : -1;
    if (x >= 0 && x < 3) {
      report() << "input '" << node.input(0) << "' has rank " << x
               << "; at least 3 (batch, channels, a spatial dim) is needed";
      continue;
    }
    if (w >= 0 && x >= 0 && w != x) {
      report() << "input '" << node.input(0) << "' has rank " << x
               << " but weight '" << node.input(1) << "' has rank " << w;
      continue;
    }
    const int64_t spatial = x >= 0 ? x - 2 : (w >= 0 ? w - 2 : -1);
    for (const auto &a : node.attribute())
      if (a.name() == "kernel_shape" && spatial >= 0 &&
          a.ints_size() != spatial)
        report() << "kernel_shape has " << a.ints_size() << " entries for "
                 << spatial << " spatial dims";
  }
  return failure(bad);
}

/// Whether the errors of ONNX's strict inference (`message` lists them,
/// each with its "(op_type:...") are libonnx 1.12's refusal of an uneven
/// opset-18 Split and, downstream of it, nodes that found no type for an
/// input (the Split's outputs it left untyped).
static bool onlyUnevenSplits(StringRef message, int64_t opset) {
  if (opset < 18)
    return false;
  size_t nodes = message.count("(op_type:");
  size_t splits = message.count("not evenly splittable");
  return splits > 0 && message.count("(op_type:Split,") >= splits &&
         splits + message.count("expected to have type but instead is null") ==
             nodes;
}

/// Verifies the ops a node's handler created (`begin` to `end`), reporting a
/// failure as the node's error: an operand type an op does not take (an
/// int32 Relu, say) names the node and its ONNX op instead of the dialect
/// op's verifier alone.
static LogicalResult verifyNodeOps(const onnx::NodeProto &node, Location loc,
                                   Block::iterator begin, Block::iterator end) {
  for (Operation &op : llvm::make_range(begin, end)) {
    std::string message;
    Location where = loc;
    LogicalResult ok = verifyQuietly(&op, /*recursive=*/false, message, where);
    if (failed(ok)) {
      emitError(loc) << "node '" << node.name() << "' (" << node.op_type()
                     << "): " << message;
      return failure();
    }
  }
  return success();
}

/// An element type as ONNX names it ("float32", "int64", "bool", ...).
static std::string onnxElementName(Type t) {
  int code = onnxDataTypeOf(t);
  if (code >= 0)
    return WeightStore::dataTypeName(code);
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

/// Checks that the inputs a node's ONNX schema binds to one type parameter
/// (MatMul's two inputs share T, say) have one element type: a model whose
/// float32 activations meet a float64 weight is invalid ONNX, and an error
/// here names the node rather than a kernel failing at run time. `valueOf`
/// gives an input's imported value. Ops without a schema (other domains)
/// and heterogeneous variadic inputs are not checked.
static LogicalResult
checkSharedTypes(const onnx::NodeProto &node, int64_t opset, Location loc,
                 llvm::function_ref<Value(const std::string &)> valueOf) {
  const onnx::OpSchema *schema = onnx::OpSchemaRegistry::Schema(
      node.op_type(), int(opset), node.domain());
  if (!schema || schema->inputs().empty())
    return success();
  const auto &formals = schema->inputs();
  llvm::StringSet<> params; // the schema's type parameters (T, T1, ...)
  for (const auto &c : schema->typeConstraintParams())
    params.insert(c.type_param_str);
  llvm::StringMap<std::pair<int, Type>> seen; // type parameter -> first input
  for (int i = 0; i < node.input_size(); ++i) {
    if (node.input(i).empty())
      continue;
    size_t f = std::min<size_t>(size_t(i), formals.size() - 1);
    const onnx::OpSchema::FormalParameter &formal = formals[f];
    if (size_t(i) >= formals.size() &&
        (formal.GetOption() != onnx::OpSchema::Variadic ||
         !formal.GetIsHomogeneous()))
      continue;
    const std::string &param = formal.GetTypeStr();
    if (!params.contains(param))
      continue; // a fixed type, not a parameter
    Value v = valueOf(node.input(i));
    auto type = v ? dyn_cast<ShapedType>(v.getType()) : ShapedType();
    if (!type)
      continue;
    auto [it, inserted] =
        seen.try_emplace(param, std::make_pair(i, type.getElementType()));
    if (inserted || it->second.second == type.getElementType())
      continue;
    return emitError(loc) << "node '" << node.name() << "' ("
                          << node.op_type() << "): inputs '"
                          << node.input(it->second.first) << "' and '"
                          << node.input(i) << "' must have one element type ("
                          << param << " in the ONNX schema), got "
                          << onnxElementName(it->second.second) << " and "
                          << onnxElementName(type.getElementType());
  }
  return success();
}

LogicalResult Importer::checkSupported(const onnx::GraphProto &graph,
                                       int64_t opset, Location fileLoc) {
  const auto &table = getHandlerTable();
  SmallVector<std::string> problems;
  bool invalid = false;
  for (auto [index, node] : llvm::enumerate(graph.node())) {
    Location loc = nodeLocation(context, node, index, fileLoc);
    const std::string &domain = node.domain();
    if (!domain.empty() && domain != "ai.onnx") {
      emitError(loc) << "node '" << node.name() << "': unsupported op '"
                     << domain << "." << node.op_type()
                     << "': only the default ONNX domain is supported";
      problems.push_back(node.op_type());
      continue;
    }
    if (isControlFlowOp(node.op_type())) {
      emitError(loc) << "node '" << node.name() << "': unsupported op '"
                     << node.op_type()
                     << "': control flow and recurrent ops are not supported;"
                        " sparsec compiles static dataflow graphs";
      problems.push_back(node.op_type());
      continue;
    }
    if (std::optional<std::string> bad = invalidInferenceAttrs(node)) {
      emitError(loc) << "node '" << node.name() << "' (" << node.op_type()
                     << "): " << *bad;
      invalid = true;
      continue;
    }
    auto it = table.find(node.op_type());
    if (it == table.end() || it->second.front().sinceVersion > opset) {
      emitError(loc) << "node '" << node.name() << "': unsupported op '"
                     << node.op_type() << "'"
                     << (it != table.end() ? " at this opset" : "");
      problems.push_back(node.op_type());
    }
  }
  if (problems.empty())
    return failure(invalid);
  llvm::StringSet<> kinds;
  for (const std::string &p : problems)
    kinds.insert(p);
  auto diag = emitError(fileLoc)
              << problems.size() << " unsupported node"
              << (problems.size() == 1 ? "" : "s") << " (op types:";
  SmallVector<StringRef> sorted;
  for (const auto &k : kinds)
    sorted.push_back(k.getKey());
  llvm::sort(sorted);
  for (StringRef k : sorted)
    diag << " " << k;
  diag << ")";
  return failure();
}

OwningOpRef<ModuleOp> Importer::run(onnx::ModelProto &model,
                                    StringRef sourceName) {
  Location fileLoc = FileLineColLoc::get(&context, sourceName, 0, 0);
  if (!model.has_graph()) {
    emitError(fileLoc) << "'" << sourceName
                       << "' is not an ONNX model: it has no graph";
    return nullptr;
  }
  int64_t opset = -1;
  for (const auto &imp : model.opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx")
      opset = imp.version();
  if (opset < kMinOpset || opset > kMaxOpset) {
    emitError(fileLoc) << "ONNX opset " << opset
                       << " is not supported (supported: " << kMinOpset << "-"
                       << kMaxOpset << "); re-export the model with an opset "
                       << "from " << kMinOpset << " to " << kMaxOpset;
    return nullptr;
  }
  onnx::GraphProto &graph = *model.mutable_graph();
  if (failed(checkSupported(graph, opset, fileLoc)))
    return nullptr;
  // Errors ONNX's inference would crash on are reported before it runs
  // (all found by the importer fuzzer: its inference dereferenced a
  // missing type): a graph input without a tensor type of known rank and
  // element type, a node input that nothing before the node defines, and a
  // name defined twice (a graph input declared twice: the inference took
  // the second declaration, and its Conv inference dereferenced null on the
  // wrong rank; node outputs are held to the same single assignment).
  {
    llvm::StringSet<> defined;
    llvm::StringMap<const onnx::TensorProto *> inits;
    for (const auto &init : graph.initializer())
      inits[init.name()] = &init;
    for (const auto &in : graph.input()) {
      if (inits.count(in.name()))
        continue;
      if (!defined.insert(in.name()).second) {
        emitError(fileLoc) << "graph input '" << in.name()
                           << "' is declared twice";
        return nullptr;
      }
      const onnx::TypeProto &t = in.type();
      if (!t.has_tensor_type() || !t.tensor_type().has_elem_type() ||
          t.tensor_type().elem_type() == onnx::TensorProto::UNDEFINED ||
          !t.tensor_type().has_shape()) {
        emitError(fileLoc) << "graph input '" << in.name()
                           << "' must be a tensor of known rank and a "
                              "supported element type";
        return nullptr;
      }
    }
    for (const auto &init : graph.initializer())
      defined.insert(init.name());
    // Declarations (value_info, graph outputs) of graph inputs and
    // initializers must agree with their own types: ONNX's inference takes
    // a graph output's declared type over the input's, and its
    // LayerNormalization inference crashed on a rank-0 one (found by the
    // importer fuzzer).
    {
      llvm::StringMap<const onnx::TypeProto *> inputTypes;
      for (const auto &in : graph.input())
        if (!inits.count(in.name()))
          inputTypes[in.name()] = &in.type();
      auto check = [&](const onnx::ValueInfoProto &vi,
                       const char *what) -> bool {
        if (!vi.type().has_tensor_type())
          return true;
        const auto &declared = vi.type().tensor_type();
        int32_t elem = 0;
        SmallVector<int64_t> dims; // -1: unknown
        bool ranked = false;
        const char *kind = nullptr;
        if (auto it = inputTypes.find(vi.name()); it != inputTypes.end()) {
          if (vi.type().SerializeAsString() == it->second->SerializeAsString())
            return true;
          const auto &own = it->second->tensor_type();
          elem = own.elem_type();
          ranked = own.has_shape();
          for (const auto &d : own.shape().dim())
            dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
          kind = "graph input";
        } else if (auto it = inits.find(vi.name()); it != inits.end()) {
          elem = it->second->data_type();
          ranked = true;
          dims.assign(it->second->dims().begin(), it->second->dims().end());
          kind = "initializer";
        } else {
          return true;
        }
        bool agree = !declared.has_elem_type() || declared.elem_type() == 0 ||
                     elem == 0 || declared.elem_type() == elem;
        if (agree && ranked && declared.has_shape()) {
          agree = declared.shape().dim_size() == static_cast<int>(dims.size());
          for (int i = 0; agree && i < declared.shape().dim_size(); ++i) {
            const auto &d = declared.shape().dim(i);
            agree = !d.has_dim_value() || dims[i] < 0 ||
                    d.dim_value() == dims[i];
          }
        }
        if (!agree)
          emitError(fileLoc) << what << " '" << vi.name()
                             << "' declares a type that differs from "
                             << kind << " '" << vi.name() << "'";
        return agree;
      };
      for (const auto &vi : graph.value_info())
        if (!check(vi, "value_info"))
          return nullptr;
      for (const auto &vi : graph.output())
        if (!check(vi, "graph output"))
          return nullptr;
    }
    // Initializers ONNX's data propagation parses: a known element type
    // and raw bytes that match the shape (a short raw_data was read past
    // its end, found by the importer fuzzer).
    for (const auto &init : graph.initializer()) {
      if (init.data_location() == onnx::TensorProto::EXTERNAL ||
          !init.has_raw_data())
        continue;
      int64_t width =
          static_cast<int64_t>(WeightStore::elementSize(init.data_type()));
      if (width == 0) {
        emitError(fileLoc) << "initializer '" << init.name()
                           << "' has an unsupported data type ("
                           << init.data_type() << ")";
        return nullptr;
      }
      int64_t elements = 1;
      bool valid = true;
      for (int64_t d : init.dims()) {
        if (d < 0 || !mulWithinStaticLimit(elements, d)) {
          valid = false;
          break;
        }
      }
      if (!valid || static_cast<int64_t>(init.raw_data().size()) !=
                        elements * width) {
        std::string dims;
        for (int64_t d : init.dims())
          dims += (dims.empty() ? "" : ", ") + std::to_string(d);
        auto diag = emitError(fileLoc)
                    << "initializer '" << init.name() << "' has "
                    << init.raw_data().size() << " bytes of data for shape ["
                    << dims << "]";
        if (valid)
          diag << ", which needs " << elements * width;
        return nullptr;
      }
    }
    for (auto [index, node] : llvm::enumerate(graph.node())) {
      for (const std::string &in : node.input())
        if (!in.empty() && !defined.contains(in)) {
          emitError(nodeLocation(context, node, index, fileLoc))
              << "input '" << in << "' of node '" << node.name() << "' ("
              << node.op_type() << ") is not defined before it is used";
          return nullptr;
        }
      for (const std::string &out : node.output())
        if (!out.empty() && !defined.insert(out).second) {
          emitError(nodeLocation(context, node, index, fileLoc))
              << "output '" << out << "' of node '" << node.name() << "' ("
              << node.op_type()
              << ") is already defined (by a graph input, an initializer or "
                 "an earlier output): ONNX values are assigned once";
          return nullptr;
        }
    }
  }

  if (options.onnxShapeInference) {
    if (failed(checkRanksForInference(context, model, fileLoc)))
      return nullptr;
    // ONNX reports inconsistent shapes by throwing; keep the message.
    auto infer = [&](int strict, bool dataProp = true) {
      onnx::ShapeInferenceOptions opts(/*check_type=*/false, strict, dataProp);
      onnx::shape_inference::InferShapes(model,
                                         onnx::OpSchemaRegistry::Instance(),
                                         opts);
    };
    // libonnx 1.12's data propagation through Shape dereferences the type
    // of an input whose own inference failed (a Slice, Gather, Transpose,
    // Concat or Unsqueeze given an axis out of range, read by a Shape): a
    // crash before the aggregated error is thrown. A strict pass without
    // data propagation reports those errors first; the model's value infos
    // are put back after it.
    {
      onnx::GraphProto &g = *model.mutable_graph();
      const auto valueInfo = g.value_info();
      const auto graphOutputs = g.output();
      try {
        infer(/*strict=*/1, /*dataProp=*/false);
      } catch (const std::exception &e) {
        StringRef message = StringRef(e.what()).trim();
        if (!onlyUnevenSplits(message, opset)) {
          emitError(fileLoc)
              << "inconsistent shapes in '" << sourceName << "': " << message;
          return nullptr;
        }
      }
      *g.mutable_value_info() = valueInfo;
      *g.mutable_output() = graphOutputs;
    }
    try {
      infer(/*strict=*/1);
    } catch (const std::exception &e) {
      StringRef message = StringRef(e.what()).trim();
      if (!onlyUnevenSplits(message, opset)) {
        emitError(fileLoc) << "inconsistent shapes in '" << sourceName
                           << "': " << message;
        return nullptr;
      }
      // Split-18's inference in libonnx 1.12 (Debian 12) refuses the
      // uneven split the standard allows (the last part smaller). Nothing
      // else failed: inferred again without strictness, the Split's own
      // inference gives its results' shapes.
      try {
        infer(/*strict=*/0);
      } catch (const std::exception &again) {
        emitError(fileLoc) << "inconsistent shapes in '" << sourceName
                           << "': " << StringRef(again.what()).trim();
        return nullptr;
      }
    }
  }

  OpBuilder builder(&context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  (*module)->setAttr("sparsec.source", builder.getStringAttr(sourceName));
  (*module)->setAttr("sparsec.opset", builder.getI64IntegerAttr(opset));
  ImportContext ctx(builder, *module, opset, options.inlineConstantLimit);
  for (const auto &vi : graph.value_info())
    ctx.knownTypes[vi.name()] = &vi.type();
  for (const auto &vi : graph.output())
    ctx.knownTypes[vi.name()] = &vi.type();

  llvm::StringMap<const onnx::TensorProto *> initializers;
  for (const auto &init : graph.initializer())
    initializers[init.name()] = &init;

  // Function signature: graph inputs that are not initializers.
  SmallVector<Type> argTypes;
  SmallVector<const onnx::ValueInfoProto *> args;
  for (const auto &in : graph.input()) {
    if (initializers.count(in.name()))
      continue;
    Type t = ctx.tensorType(in.type());
    if (!t || !isa<RankedTensorType>(t)) {
      emitError(fileLoc) << "graph input '" << in.name()
                         << "' must be a tensor of known rank and a supported "
                            "element type";
      return nullptr;
    }
    argTypes.push_back(t);
    args.push_back(&in);
  }
  SmallVector<Type> resultTypes;
  for (const auto &out : graph.output()) {
    Type t = ctx.tensorType(out.type());
    resultTypes.push_back(t ? t : Type());
  }

  builder.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(builder, fileLoc, "main",
                                   builder.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  for (auto [i, in] : llvm::enumerate(args)) {
    SmallVector<Attribute> dimNames;
    for (const auto &d : in->type().tensor_type().shape().dim())
      dimNames.push_back(builder.getStringAttr(d.dim_param()));
    func.setArgAttr(i, "sparsec.name", builder.getStringAttr(in->name()));
    func.setArgAttr(i, "sparsec.dims", builder.getArrayAttr(dimNames));
    ctx.bind(in->name(), entry->getArgument(i));
  }
  builder.setInsertionPointToStart(entry);

  // Binds a name to its value, importing initializers on first use.
  auto resolve = [&](const std::string &name, Location loc) -> Value {
    if (Value v = ctx.lookup(name))
      return v;
    auto it = initializers.find(name);
    if (it == initializers.end())
      return {};
    ctx.loc = loc;
    ctx.node = nullptr;
    FailureOr<Value> v = ctx.importTensor(*it->second, name, true);
    if (failed(v))
      return {};
    ctx.bind(name, *v);
    return *v;
  };

  const auto &table = getHandlerTable();
  bool failedAny = false;
  // Outputs a handler left unbound (e.g. LayerNormalization's Mean): an
  // error only if something uses them.
  llvm::StringMap<std::string> unboundOutputs;
  for (auto [index, node] : llvm::enumerate(graph.node())) {
    Location loc = nodeLocation(context, node, index, fileLoc);
    bool missing = false;
    for (const std::string &in : node.input()) {
      if (in.empty() || resolve(in, loc))
        continue;
      // Names nothing defines were reported before ONNX's inference, so
      // this is an output a handler left unbound or an initializer whose
      // import has reported its own error.
      auto unbound = unboundOutputs.find(in);
      if (unbound != unboundOutputs.end())
        emitError(loc) << "uses '" << in << "', an output of "
                       << unbound->second
                       << " that the importer does not support";
      missing = true;
    }
    if (missing ||
        failed(checkSharedTypes(node, opset, loc, [&](const std::string &n) {
          return ctx.lookup(n);
        }))) {
      failedAny = true;
      break;
    }
    // The newest handler version not newer than the model's opset.
    const NodeHandler *handler = nullptr;
    for (const HandlerEntry &e : table.find(node.op_type())->second)
      if (e.sinceVersion <= opset)
        handler = &e.handler;
    ctx.node = &node;
    ctx.loc = loc;
    Block *body = builder.getInsertionBlock();
    Operation *last = body->empty() ? nullptr : &body->back();
    if (failed((*handler)(ctx, node)) ||
        failed(verifyNodeOps(node, loc,
                             last ? std::next(last->getIterator())
                                  : body->begin(),
                             body->end()))) {
      failedAny = true;
      break;
    }
    for (int i = 0; i < node.output_size(); ++i)
      if (!node.output(i).empty() && !ctx.lookup(node.output(i)))
        unboundOutputs[node.output(i)] =
            node.op_type() + " node '" + node.name() + "'";
  }
  if (failedAny)
    return nullptr;

  SmallVector<Value> results;
  SmallVector<Type> finalTypes;
  for (const auto &out : graph.output()) {
    Value v = resolve(out.name(), fileLoc);
    if (!v) {
      auto unbound = unboundOutputs.find(out.name());
      emitError(fileLoc) << "graph output '" << out.name() << "' "
                         << (unbound != unboundOutputs.end()
                                 ? "is an output of " + unbound->second +
                                       " that the importer does not support"
                                 : std::string("is never produced"));
      return nullptr;
    }
    results.push_back(v);
    finalTypes.push_back(v.getType());
  }
  func::ReturnOp::create(builder, fileLoc, results);
  func.setFunctionType(builder.getFunctionType(argTypes, finalTypes));
  for (auto [i, out] : llvm::enumerate(graph.output())) {
    func.setResultAttr(i, "sparsec.name", builder.getStringAttr(out.name()));
    // The export's names of its output dims (`model info` shows them),
    // where it gives a shape of the result's rank.
    const auto &tensor = out.type().tensor_type();
    auto type = dyn_cast<RankedTensorType>(finalTypes[i]);
    if (!tensor.has_shape() || !type ||
        tensor.shape().dim_size() != type.getRank())
      continue;
    SmallVector<Attribute> dimNames;
    for (const auto &d : tensor.shape().dim())
      dimNames.push_back(builder.getStringAttr(d.dim_param()));
    func.setResultAttr(i, "sparsec.dims", builder.getArrayAttr(dimNames));
  }

  if (failed(mlir::verify(*module)))
    return nullptr;
  return module;
}

OwningOpRef<ModuleOp> sparsec::importONNXBuffer(MLIRContext &context,
                                                StringRef bytes,
                                                StringRef sourceName,
                                                const ImportOptions &options) {
  context.loadDialect<SparsecDialect, func::FuncDialect>();
  onnx::ModelProto model;
  if (bytes.size() > static_cast<size_t>(INT32_MAX) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    emitError(FileLineColLoc::get(&context, sourceName, 0, 0))
        << "'" << sourceName
        << "' is not a valid ONNX model (protobuf parsing failed: the file "
           "is truncated, corrupt or not ONNX)";
    return nullptr;
  }
  Importer importer(context, options);
  OwningOpRef<ModuleOp> module = importer.run(model, sourceName);
  if (module) {
    // Identifies the model for profiles recorded from it. Large files are
    // hashed by size and their first and last 64 MiB.
    constexpr size_t kPart = size_t(64) << 20;
    uint64_t hash;
    if (bytes.size() <= 2 * kPart) {
      hash = fnv1a64(bytes.data(), bytes.size());
    } else {
      uint64_t parts[3] = {fnv1a64(bytes.data(), kPart),
                           fnv1a64(bytes.data() + bytes.size() - kPart, kPart),
                           bytes.size()};
      hash = fnv1a64(parts, sizeof(parts));
    }
    (*module)->setAttr("sparsec.model_hash",
                       StringAttr::get(&context,
                                       llvm::formatv("{0:x16}", hash).str()));
  }
  return module;
}

OwningOpRef<ModuleOp> sparsec::importONNXFile(MLIRContext &context,
                                              StringRef path,
                                              const ImportOptions &options) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    emitError(FileLineColLoc::get(&context, path, 0, 0))
        << "cannot open '" << path << "': " << buffer.getError().message();
    return nullptr;
  }
  return importONNXBuffer(context, (*buffer)->getBuffer(), path, options);
}

std::vector<std::string> sparsec::supportedONNXOps() {
  std::vector<std::string> ops;
  for (const auto &e : getHandlerTable())
    ops.push_back(e.getKey().str());
  llvm::sort(ops);
  return ops;
}
