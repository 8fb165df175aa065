//===- CppEmitter.cpp - sparsec IR to x86 C++ and CUDA C++ ---------------===//
//
// Part of the sparsec project.
//
// The generated code is straight-line: one runtime op call per sparsec op,
// in block order, each writing the memory slot the planner chose. Static
// dimensions appear as literals; dynamic ones are read from the tensors at
// run time, so one binary serves every batch and sequence length.
//
// For CUDA, each value is placed on the host or the device: weights and
// every op reading a device value run on the device (sparsec/rt/cuda/
// Ops.h); the rest (the integer shape and mask arithmetic of ONNX exports,
// Shape of device tensors) runs on the host with the x86 ops, and a host
// value a device op reads is uploaded once per step. Sparse FFNs pass index
// sets (`cuda::IndexSet`) from the predictor or the non-zero scan to the
// sparse kernels.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Target/Cpp/CppEmitter.h"
#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdio>
#include <cstdlib>

#include <cmath>

using namespace mlir;
using namespace sparsec;

namespace {

/// min(x, c) with a constant splat c >= 0: zero wherever x is.
bool isCap(Operation *op) {
  for (Value v : op->getOperands()) {
    DenseElementsAttr c;
    if (matchPattern(v, m_Constant(&c)) && c.isSplat() &&
        isa<FloatType>(c.getElementType()) &&
        c.getSplatValue<APFloat>().convertToDouble() >= 0)
      return true;
  }
  return false;
}

/// The runtime's DType of `elt`. bfloat16 is a weight storage only
/// (`--weights bf16`): model inputs, outputs, constants and casts of it are
/// not supported.
std::optional<StringRef> dtypeOf(Type elt, bool weight = false) {
  if (elt.isF32()) return StringRef("DType::f32");
  if (elt.isF64()) return StringRef("DType::f64");
  if (elt.isF16()) return StringRef("DType::f16");
  if (elt.isBF16() && weight)
    return StringRef("DType::bf16");
  if (auto i = dyn_cast<IntegerType>(elt)) {
    bool u = i.isUnsigned();
    switch (i.getWidth()) {
    case 1: return StringRef("DType::b1");
    case 8: return StringRef(u ? "DType::u8" : "DType::i8");
    case 16: return StringRef(u ? "DType::u16" : "DType::i16");
    case 32: return StringRef(u ? "DType::u32" : "DType::i32");
    case 64: return StringRef(u ? "DType::u64" : "DType::i64");
    default: break;
    }
  }
  return std::nullopt;
}

/// The C++ element type used for constant arrays.
std::optional<StringRef> cTypeOf(Type elt) {
  if (elt.isF32()) return StringRef("float");
  if (elt.isF64()) return StringRef("double");
  if (elt.isF16()) return StringRef("uint16_t"); // the IEEE half's bits
  if (auto i = dyn_cast<IntegerType>(elt)) {
    bool u = i.isUnsigned();
    switch (i.getWidth()) {
    case 1: return StringRef("uint8_t");
    case 8: return StringRef(u ? "uint8_t" : "int8_t");
    case 16: return StringRef(u ? "uint16_t" : "int16_t");
    case 32: return StringRef(u ? "uint32_t" : "int32_t");
    case 64: return StringRef(u ? "uint64_t" : "int64_t");
    default: break;
    }
  }
  return std::nullopt;
}

/// `s` as a C++ string literal. Control characters become three-digit octal
/// escapes: a hex escape would also take the hex digits after it.
std::string quoted(StringRef s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += llvm::formatv("\\{0}{1}{2}", (c >> 6) & 3, (c >> 3) & 7, c & 7)
                 .str();
      continue;
    }
    out += c;
  }
  return out + "\"";
}

/// `s` made safe for a `//` comment of the generated code: ONNX names are
/// the model's text, and a newline (or a backslash before one) would end
/// the comment and make the rest of the name code.
std::string commentText(StringRef s) {
  std::string out(s);
  for (char &c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\')
      c = '_';
  return out;
}

std::string floatLiteral(double v, bool isF32) {
  if (std::isnan(v))
    return isF32 ? "__builtin_nanf(\"\")" : "__builtin_nan(\"\")";
  if (std::isinf(v))
    return std::string(v < 0 ? "-" : "") +
           (isF32 ? "__builtin_inff()" : "__builtin_inf()");
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos)
    s += ".0";
  return isF32 ? s + "f" : s;
}

std::string joinInts(ArrayRef<int64_t> v) {
  std::string s;
  for (auto [i, x] : llvm::enumerate(v))
    s += (i ? ", " : "") + std::to_string(x);
  return s;
}

/// The op library's names (ops::Unary, ops::Binary) of elementwise ops.
std::optional<StringRef> unaryKind(Operation *op) {
  return llvm::TypeSwitch<Operation *, std::optional<StringRef>>(op)
      .Case([](ReluOp) { return StringRef("relu"); })
      .Case([](GeluOp g) {
        return StringRef(g.getTanhApprox() ? "gelu_tanh" : "gelu");
      })
      .Case([](SiluOp) { return StringRef("silu"); })
      .Case([](SigmoidOp) { return StringRef("sigmoid"); })
      .Case([](TanhOp) { return StringRef("tanh"); })
      .Case([](ExpOp) { return StringRef("exp"); })
      .Case([](LogOp) { return StringRef("log"); })
      .Case([](ErfOp) { return StringRef("erf"); })
      .Case([](SinOp) { return StringRef("sin"); })
      .Case([](CosOp) { return StringRef("cos"); })
      .Case([](SqrtOp) { return StringRef("sqrt"); })
      .Case([](ReciprocalOp) { return StringRef("reciprocal"); })
      .Case([](AbsOp) { return StringRef("abs"); })
      .Case([](NegOp) { return StringRef("neg"); })
      .Case([](NotOp) { return StringRef("logical_not"); })
      .Default([](Operation *) { return std::nullopt; });
}
std::optional<StringRef> binaryKind(Operation *op) {
  return llvm::TypeSwitch<Operation *, std::optional<StringRef>>(op)
      .Case([](AddOp) { return StringRef("add"); })
      .Case([](SubOp) { return StringRef("sub"); })
      .Case([](MulOp) { return StringRef("mul"); })
      .Case([](DivOp) { return StringRef("div"); })
      .Case([](PowOp) { return StringRef("pow"); })
      .Case([](MaxOp) { return StringRef("max"); })
      .Case([](MinOp) { return StringRef("min"); })
      .Case([](AndOp) { return StringRef("logical_and"); })
      .Case([](OrOp) { return StringRef("logical_or"); })
      .Default([](Operation *) { return std::nullopt; });
}

class Emitter {
public:
  Emitter(ModuleOp module, raw_ostream &os, const CppEmitterOptions &options)
      : module(module), os(os), options(options) {}

  LogicalResult emit();

private:
  // --- Values ---
  std::string name(Value v) {
    auto it = names.find(v);
    assert(it != names.end() && "value used before definition");
    return it->second;
  }
  std::string define(Value v) {
    std::string n = "v" + std::to_string(counter++);
    names[v] = n;
    return n;
  }
  /// The input a linear reads: `in`, or where the linear's only use is
  /// the function's result `i` and `in` is [B, n, D], a view of it that is
  /// only each row's last position when the caller asks for no more of
  /// that result (Context::lastPositionOutput: generate's logits), so that
  /// a prompt's LM head computes one position instead of n.
  std::string lastPositionInput(Value result, Value input,
                                const std::string &in) {
    if (!result.hasOneUse() ||
        cast<RankedTensorType>(input.getType()).getRank() != 3)
      return in;
    OpOperand &use = *result.getUses().begin();
    if (!isa<func::ReturnOp>(use.getOwner()))
      return in;
    std::string n = "v" + std::to_string(counter++);
    body << "  const Tensor " << n << " = lastPosition(ctx, " << in << ", "
         << use.getOperandNumber() << ");\n";
    return n;
  }
  /// `&vN` or `nullptr`.
  std::string ptr(Value v) { return v ? "&" + name(v) : "nullptr"; }
  /// The runtime's name of a fused epilogue ("ops::Activation::none" if
  /// there is none).
  static std::string activationArg(std::optional<Activation> act) {
    return "ops::Activation::" +
           (act ? stringifyActivation(*act).str() : std::string("none"));
  }
  int64_t slot(Operation *op, unsigned result = 0) {
    auto slots = op->getAttrOfType<DenseI64ArrayAttr>("sparsec.slots");
    return slots && result < slots.size() ? slots[result] : -1;
  }
  /// C++ expression for dim `i` of `v`: a literal when static.
  std::string dim(Value v, int64_t i) {
    auto t = cast<RankedTensorType>(v.getType());
    if (!t.isDynamicDim(i))
      return std::to_string(t.getDimSize(i));
    return name(v) + ".shape[" + std::to_string(i) + "]";
  }
  /// Emits `const int64_t <var>[] = {...}` (at least one element).
  std::string intArray(ArrayRef<int64_t> values) {
    std::string var = "a" + std::to_string(counter++);
    body << "  static const int64_t " << var << "[] = {"
         << (values.empty() ? "0" : joinInts(values)) << "};\n";
    return var;
  }
  std::string exprArray(ArrayRef<std::string> exprs) {
    std::string var = "a" + std::to_string(counter++);
    body << "  const int64_t " << var << "[] = {";
    for (auto [i, e] : llvm::enumerate(exprs))
      body << (i ? ", " : "") << e;
    if (exprs.empty())
      body << "0";
    body << "};\n";
    return var;
  }

  LogicalResult emitOp(Operation *op);
  LogicalResult emitDeviceOp(Operation *op);
  /// Convolutions, batch norms, pooling and reductions: the same calls on
  /// both targets (cuda:: on the device, `device`, ops:: on the host).
  LogicalResult emitConvLike(Operation *op, bool device);
  /// cuda::conv (`device`) or ops::conv for `c`, with batch norm `bn` (or
  /// null) applied with it, writing the norm's result then.
  LogicalResult emitConv(ConvOp c, BatchNormOp bn, bool device);
  /// Refuses a reduction the device kernels do not take: a non-float one,
  /// or one over axes that are not adjacent (as far as the shapes show).
  LogicalResult checkDeviceReduce(ReduceOp r);
  LogicalResult emitHostOp(Operation *op);
  LogicalResult emitAttention(AttentionOp a, bool device);
  /// Hybrid: starts the copy of each device result a CPU op reads.
  void copyForHost(Operation *op);
  /// The host view of device value `v`: a weight's view of the mapped
  /// pack, or the copy copyForHost started (waited for on first use).
  std::string hostName(Value v) {
    if (auto w = v.getDefiningOp<WeightOp>()) {
      auto it = hostWeights.find(v);
      if (it != hostWeights.end())
        return it->second;
      // Checked when the device view was emitted.
      std::string n = *weightView(w, "ctx.weight(");
      hostWeights[v] = n;
      return n;
    }
    auto it = hostCopies.find(v);
    assert(it != hostCopies.end() && "device value without a host copy");
    if (!it->second.waited) {
      body << "  if (!cuda::waitHost(ctx, " << it->second.site
           << ")) " << onFail << "\n";
      it->second.waited = true;
    }
    return it->second.name;
  }
  struct HostCopy {
    std::string name;
    unsigned site;
    bool waited = false;
  };
  DenseMap<Value, HostCopy> hostCopies;
  DenseMap<Value, std::string> hostWeights;
  unsigned hostCopySites = 0;
  /// What a failed runtime call of the op being emitted returns: the
  /// context's error with the op's ONNX node named (Context::failAt).
  std::string onFail = "return false;";
  LogicalResult emitConstant(ConstantOp op);
  LogicalResult emitCall(Operation *op, StringRef call, bool declare = true,
                         StringRef ns = "ops::");
  void emitDescription(func::FuncOp func);
  void placeValues(func::FuncOp func);

  bool cuda() const { return options.target == EmitTarget::cuda; }
  StringRef backend() const { return cuda() ? "CUDA" : "x86"; }
  /// The device tensor for `v`: its own name when it lives on the device,
  /// else an upload of the host value (emitted once per value).
  std::string dv(Value v) {
    if (onDevice.contains(v))
      return name(v);
    auto it = uploaded.find(v);
    if (it != uploaded.end())
      return it->second;
    std::string u = "u" + std::to_string(counter++);
    body << "  Tensor " << u << ";\n  if (!cuda::upload(ctx, " << name(v)
         << ", " << uploadSites++ << ", " << u << ")) " << onFail << "\n";
    uploaded[v] = u;
    return u;
  }
  std::string dptr(Value v) { return v ? "&" + dv(v) : "nullptr"; }
  /// Emits `const Tensor vN = <call>segment, dtype, rank, shape);` for weight
  /// `w` (`ctx.weight(`: the mapped pack; `cuda::weight(ctx, `: its device
  /// copy) and returns vN.
  FailureOr<std::string> weightView(WeightOp w, StringRef call) {
    auto it = segmentOf.find(w.getName());
    if (it == segmentOf.end())
      return w.emitError("unknown weight");
    auto type = cast<RankedTensorType>(w.getType());
    auto dty = dtypeOf(type.getElementType(), /*weight=*/true);
    if (!dty)
      return w.emitError("weight element type ")
             << type.getElementType() << " is not supported by the "
             << backend() << " backend";
    std::string arr = intArray(type.getShape());
    std::string n = "v" + std::to_string(counter++);
    body << "  const Tensor " << n << " = " << call << it->second << ", "
         << *dty << ", " << type.getRank() << ", " << arr << ");\n";
    return n;
  }

  DenseSet<Value> onDevice;
  /// Residual adds folded into the producing device linear (emitted there).
  DenseSet<Operation *> fusedAdds;
  /// Convolutions computed with the batch norm that is their only user (in
  /// the epilogue on the device, folded into the weights on x86), emitted at
  /// the norm (whose parameters may be defined after the convolution), by
  /// norm.
  DenseMap<Operation *, ConvOp> normedConvs;
  /// The batch norm computed with `c`, or null: the convolution's only user,
  /// no activation between them (BatchNormOp::getFoldableConv, for which
  /// sparsec-plan-memory keeps the convolution's input live until the
  /// norm), and the norm's slot not one the convolution reads (a plan made
  /// otherwise, as in hand-written IR).
  BatchNormOp foldedNorm(ConvOp c) {
    if (!c.getResult().hasOneUse())
      return nullptr;
    auto bn = dyn_cast<BatchNormOp>(*c.getResult().getUsers().begin());
    if (!bn || bn.getFoldableConv() != c ||
        (cuda() && (placedOnCpu(bn) || !onDevice.contains(bn.getResult()))))
      return nullptr;
    int64_t out = slot(bn);
    if (out < 0 || mayUseSlot(c.getInput(), out))
      return nullptr;
    return bn;
  }
  /// Whether `v`'s memory may be slot `s`: its own slot, or, through
  /// reshapes and transposes (views at run time), a source's.
  bool mayUseSlot(Value v, int64_t s) {
    while (auto res = dyn_cast<OpResult>(v)) {
      Operation *def = res.getOwner();
      if (slot(def, res.getResultNumber()) == s)
        return true;
      if (!isa<ReshapeOp, UnsqueezeOp, SqueezeOp, FlattenOp, TransposeOp>(def))
        return false;
      v = def->getOperand(0);
    }
    return false;
  }
  /// `compare <predicate>, %x, 0` on a float32 device value x, with 0 a
  /// constant: the mask a gated MLP's up projection computes under
  /// (sparsec-sparsify-ffn), which the CUDA backend builds as gateMask.
  bool isGateCompare(CompareOp c, ComparePredicate predicate) {
    DenseElementsAttr zero;
    auto type = dyn_cast<RankedTensorType>(c.getLhs().getType());
    return cuda() && c.getPredicate() == predicate && type &&
           type.getElementType().isF32() && onDevice.contains(c.getLhs()) &&
           !onDevice.contains(c.getRhs()) &&
           matchPattern(c.getRhs(), m_Constant(&zero)) && zero.isSplat() &&
           zero.getSplatValue<APFloat>().isZero();
  }
  /// `compare eq, %x, 0` whose only user is `not`: emitted as the not's
  /// gateMask (x != 0).
  bool isNegatedGateCompare(CompareOp c) {
    return isGateCompare(c, ComparePredicate::eq) && c->hasOneUse() &&
           isa<NotOp>(*c->getUsers().begin());
  }
  /// A gated MLP's up projection `up` (over a gate mask emitted as
  /// gateMask) whose only user is the product with the gate, whose only
  /// user is a device down projection (input side), the three launched in
  /// a row: emitted as one cuda::gatedFfn at the down projection's place.
  /// The product's op, or null.
  MulOp gatedProduct(SparseLinearOp up) {
    if (!cuda() || placedOnCpu(up) || up.getSparseDim() != SparseDim::output ||
        !up.getTransposeWeight() || !up.getActive() || up.getActivation() ||
        !indexOf.count(up.getActive()) || !up.getResult().hasOneUse())
      return nullptr;
    Operation *maskOp = up.getActive().getDefiningOp();
    CompareOp compare;
    if (auto n = dyn_cast_or_null<NotOp>(maskOp))
      compare = n.getInput().getDefiningOp<CompareOp>();
    else
      compare = dyn_cast_or_null<CompareOp>(maskOp);
    if (!compare)
      return nullptr;
    auto mul = dyn_cast<MulOp>(*up.getResult().getUsers().begin());
    if (!mul || mul->getBlock() != up->getBlock() || placedOnCpu(mul) ||
        otherOperand(mul, up.getResult()) != compare.getLhs() ||
        mul.getType() != up.getType() || !mul.getResult().hasOneUse() ||
        nextLaunching(up) != mul.getOperation())
      return nullptr;
    auto down = dyn_cast<SparseLinearOp>(*mul.getResult().getUsers().begin());
    if (!down || down->getBlock() != mul->getBlock() || placedOnCpu(down) ||
        down.getSparseDim() != SparseDim::input || down.getActive() ||
        down.getTransposeWeight() || down.getInput() != mul.getResult() ||
        nextLaunching(mul) != down.getOperation())
      return nullptr;
    return mul;
  }
  /// Gated MLPs emitted at their down projection (cuda::gatedFfn): down
  /// projection -> (up projection, product).
  DenseMap<Operation *, std::pair<SparseLinearOp, MulOp>> gatedFfns;
  DenseSet<Operation *> gatedParts;
  /// The add that can take `l`'s output as a residual epilogue: `l` is a
  /// device linear over a neuron-major weight with no activation, or the
  /// input side of a device sparse_linear; its only user is `add(l, r)` of
  /// the same type, `r` is a device value computed before `l`, and the
  /// add's slot is not memory `l` reads its input from (the GEMV writes the
  /// sum while other blocks still read the input, and the sparse kernels
  /// write the sum's base while reading theirs; sharing r's slot is fine,
  /// each element is read before it is written).
  /// The operand of binary op `op` (an add, a product) other than `v`.
  static Value otherOperand(Operation *op, Value v) {
    return op->getOperand(0) == v ? op->getOperand(1) : op->getOperand(0);
  }
  AddOp residualAdd(Operation *l) {
    if (!cuda() || placedOnCpu(l) || !l->getResult(0).hasOneUse())
      return nullptr;
    if (auto lin = dyn_cast<LinearOp>(l)) {
      if (!lin.getTransposeWeight() || lin.getActivation())
        return nullptr;
    } else if (auto sp = dyn_cast<SparseLinearOp>(l)) {
      if (sp.getSparseDim() != SparseDim::input || sp.getActive() ||
          sp.getTransposeWeight())
        return nullptr;
    } else {
      return nullptr;
    }
    Value result = l->getResult(0);
    auto add = dyn_cast<AddOp>(*result.getUsers().begin());
    if (!add || add->getBlock() != l->getBlock() || placedOnCpu(add))
      return nullptr;
    Value r = otherOperand(add, result);
    if (r == result || r.getType() != result.getType() ||
        add.getResult().getType() != r.getType() || !onDevice.contains(r) ||
        !onDevice.contains(add.getResult()))
      return nullptr;
    if (Operation *def = r.getDefiningOp())
      if (def->getBlock() != l->getBlock() || !def->isBeforeInBlock(l))
        return nullptr;
    int64_t out = slot(add);
    if (out < 0 || mayUseSlot(l->getOperand(0), out))
      return nullptr;
    return add;
  }
  /// The down projection that `up` (the output side of a device
  /// sparse_linear over a predicted set) fuses with into one
  /// cuda::sparseFfn: `up`'s only user, the input side of a device
  /// sparse_linear, and the next op that launches anything (weights may come
  /// between). The call runs at the down projection's place, so nothing may
  /// run in between; the up kernel writes the result's base, so the
  /// result's slot (the residual add's, when one is folded) must not be
  /// memory the up projection reads.
  /// The op after `op` that launches anything: weight views emit no call.
  static Operation *nextLaunching(Operation *op) {
    Operation *next = op->getNextNode();
    while (next && isa<WeightOp>(next))
      next = next->getNextNode();
    return next;
  }
  /// `indexPending`: up's active mask is a predictor's that is not emitted
  /// yet (its index is registered when it is).
  SparseLinearOp fusedDown(SparseLinearOp up, bool indexPending = false) {
    if (!cuda() || placedOnCpu(up) || up.getSparseDim() != SparseDim::output ||
        !up.getTransposeWeight() || !up.getActive() ||
        (!indexPending && !indexOf.count(up.getActive())) ||
        !up.getResult().hasOneUse())
      return nullptr;
    auto down = dyn_cast<SparseLinearOp>(*up.getResult().getUsers().begin());
    if (!down || down->getBlock() != up->getBlock() || placedOnCpu(down) ||
        down.getSparseDim() != SparseDim::input || down.getActive() ||
        down.getTransposeWeight() || down.getInput() != up.getResult())
      return nullptr;
    Operation *next = nextLaunching(up);
    if (next != down.getOperation())
      return nullptr;
    AddOp add = residualAdd(down);
    int64_t out = add ? slot(add) : slot(down);
    if (out < 0 || mayUseSlot(up.getInput(), out))
      return nullptr;
    return down;
  }
  /// The up projection that predictor `p` is emitted with (one
  /// cuda::predictFfn at the down projection's place): p's mask has one
  /// user, an up projection over p's own input that fuses with its down
  /// projection (fusedDown), and only weights come between p and it, so
  /// nothing runs between the predictor's place and the FFN's. p's index
  /// must be registered (indexOf) before this is asked.
  SparseLinearOp fusedPredictUp(PredictOp p, bool indexPending = false) {
    if (!cuda() || placedOnCpu(p) || !p.getResult().hasOneUse())
      return nullptr;
    auto up = dyn_cast<SparseLinearOp>(*p.getResult().getUsers().begin());
    if (!up || up->getBlock() != p->getBlock() || up.getActive() != p.getResult() ||
        up.getInput() != p.getInput())
      return nullptr;
    Operation *next = nextLaunching(p);
    if (next != up.getOperation() || !fusedDown(up, indexPending))
      return nullptr;
    return up;
  }
  /// The predictor that the layer or RMS norm `norm` is emitted with (one
  /// cuda::predictFfnNorm at the FFN's place, whose decode kernels
  /// normalise x in the predictor's first kernel): the norm's result is
  /// read by exactly a predictor emitted with its FFN (fusedPredictUp) and
  /// that FFN's up projection, and only weights come between the norm and
  /// the predictor. (The FFN's result may take the norm input's slot: the
  /// kernel that writes its base runs after the one that normalises.)
  PredictOp fusedNormPredict(Operation *norm) {
    if (!cuda() || placedOnCpu(norm) || norm->getNumResults() != 1)
      return nullptr;
    Value r = norm->getResult(0);
    PredictOp p;
    for (Operation *user : r.getUsers())
      if (auto q = dyn_cast<PredictOp>(user)) {
        if (p && q != p)
          return nullptr;
        p = q;
      }
    if (!p || p.getInput() != r || p->getBlock() != norm->getBlock())
      return nullptr;
    Operation *next = nextLaunching(norm);
    if (next != p.getOperation())
      return nullptr;
    SparseLinearOp up = fusedPredictUp(p, /*indexPending=*/true);
    if (!up)
      return nullptr;
    for (OpOperand &use : r.getUses())
      if (use.getOwner() != p.getOperation() && use.getOwner() != up.getOperation())
        return nullptr;
    return p;
  }
  /// The norm arguments of a predictor emitted with its norm (cuda::
  /// predictFfnNorm), by predictor: "in, scale, bias, axis, epsilon, rms,
  /// slot, x".
  DenseMap<Operation *, std::string> fusedNorms;
  /// Holds back norm `op` (arguments `args`, all but its slot and result)
  /// for the predicted FFN it is emitted with, if fusedNormPredict finds
  /// one; false otherwise (nothing emitted).
  bool deferNorm(Operation *op, const std::string &args) {
    PredictOp p = fusedNormPredict(op);
    if (!p)
      return false;
    std::string v = define(op->getResult(0));
    body << "  Tensor " << v << ";\n  // (normalised with the FFN below)\n";
    fusedNorms[p.getOperation()] =
        args + ", " + std::to_string(slot(op)) + ", " + v;
    return true;
  }
  /// The arguments of a predictor emitted with its FFN, by up projection:
  /// "x, w1, w2, bias, threshold, site, slot, mask, index".
  DenseMap<Operation *, std::string> fusedPredicts;
  /// Up projections whose sparse_linear is emitted with their down
  /// projection (fusedDown), by the down projection.
  DenseMap<Operation *, SparseLinearOp> fusedUps;
  DenseMap<Value, std::string> uploaded, indexOf;
  unsigned uploadSites = 0, indexSites = 0;

  ModuleOp module;
  raw_ostream &os;
  const CppEmitterOptions &options;
  std::string bodyStorage, constStorage;
  llvm::raw_string_ostream body{bodyStorage};
  llvm::raw_string_ostream consts{constStorage};
  DenseMap<Value, std::string> names;
  llvm::StringMap<unsigned> segmentOf;
  unsigned counter = 0;
};

LogicalResult Emitter::emitConstant(ConstantOp op) {
  auto attr = dyn_cast<DenseElementsAttr>(op.getValue());
  auto type = cast<RankedTensorType>(op.getType());
  auto cty = cTypeOf(type.getElementType());
  auto dty = dtypeOf(type.getElementType());
  if (!attr || !cty || !dty)
    return op.emitError("a constant of type ")
           << type << " is not supported by the " << backend() << " backend";
  std::string data = "c" + std::to_string(counter++);
  consts << "alignas(64) const " << *cty << " " << data << "[] = {";
  int64_t n = 0;
  bool isF32 = type.getElementType().isF32();
  auto sep = [&] { consts << (n++ % 16 ? ", " : (n > 1 ? ",\n    " : "")); };
  if (type.getElementType().isF16()) {
    for (APFloat v : attr.getValues<APFloat>()) {
      sep();
      consts << llvm::formatv("{0:x4}",
                              v.bitcastToAPInt().getZExtValue())
                    .str();
    }
  } else if (isa<FloatType>(type.getElementType())) {
    for (APFloat v : attr.getValues<APFloat>()) {
      sep();
      consts << floatLiteral(v.convertToDouble(), isF32);
    }
  } else {
    auto it = cast<IntegerType>(type.getElementType());
    for (const APInt &v : attr.getValues<APInt>()) {
      sep();
      if (it.getWidth() == 1 || it.isUnsigned())
        consts << v.getZExtValue() << (it.getWidth() == 64 ? "ULL" : "");
      else if (it.getWidth() == 64 && v.getSExtValue() == INT64_MIN)
        consts << "INT64_MIN";
      else
        consts << v.getSExtValue() << (it.getWidth() == 64 ? "LL" : "");
    }
  }
  if (n == 0)
    consts << "0";
  consts << "};\n";
  std::string v = define(op.getResult());
  body << "  Tensor " << v << "{const_cast<" << *cty << " *>(" << data
       << "), " << *dty << ", " << type.getRank() << ", {"
       << joinInts(type.getShape()) << "}};\n";
  return success();
}

/// Emits `Tensor vN; if (!<ns><call>, slot, vN)) return false;`.
LogicalResult Emitter::emitCall(Operation *op, StringRef call, bool declare,
                                StringRef ns) {
  std::string v = declare ? define(op->getResult(0)) : name(op->getResult(0));
  if (declare)
    body << "  Tensor " << v << ";\n";
  body << "  if (!" << ns << call << ", " << slot(op) << ", " << v
       << ")) " << onFail << "\n";
  return success();
}

/// The runtimes' matrix products, convolutions, attention and sparsity ops
/// compute in float32 (a linear's weight may be stored in float16).
/// sparsec-widen-half casts around the first five; what is left in half
/// precision (the sparsity passes' ops on a float16 model) would compile to
/// calls that could only fail, so it is refused here, naming the node.
static LogicalResult checkComputeTypes(Operation *op) {
  if (!isa<LinearOp, LinearGroupOp, MatMulOp, ConvOp, AttentionOp,
           SparseLinearOp, PredictOp, ProfileCountOp>(op))
    return success();
  for (Value v : op->getOperands()) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type || !isa<FloatType>(type.getElementType()) ||
        type.getElementType().isF32() || v.getDefiningOp<WeightOp>())
      continue;
    Type elt = type.getElementType();
    std::string eltName = elt.isF16()    ? "float16"
                          : elt.isBF16() ? "bfloat16"
                          : elt.isF64()  ? "float64"
                                         : "this float type";
    auto loc = dyn_cast<NameLoc>(op->getLoc());
    return op->emitError()
           << (loc ? "node '" + loc.getName().str() + "' (" : std::string("("))
           << op->getName().stripDialect() << "): " << eltName
           << " input is not supported: the runtime computes it in float32 "
              "(export the model in float32; --weights f16 keeps the weights "
              "in half precision)";
  }
  return success();
}

LogicalResult Emitter::emitOp(Operation *op) {
  if (failed(checkComputeTypes(op)))
    return failure();
  // The ONNX node name, for readers of the generated code and in the
  // message of a call that fails.
  onFail = "return false;";
  if (auto loc = dyn_cast<NameLoc>(op->getLoc())) {
    body << "  // " << commentText(loc.getName().getValue()) << "\n";
    onFail = "return ctx.failAt(" + quoted(loc.getName().getValue()) + ");";
  }
  if (fusedAdds.contains(op)) {
    body << "  // (computed by the linear above)\n";
    return success();
  }
  // The reshape family is shared below (the copy runs where its input is).
  bool deviceOp = cuda() && llvm::any_of(op->getResults(), [&](Value r) {
                   return onDevice.contains(r);
                 });
  if (deviceOp && !isa<ReshapeOp, UnsqueezeOp, SqueezeOp, FlattenOp>(op))
    return emitDeviceOp(op);
  if (cuda() && placedOnCpu(op)) {
    // A CPU part of a hybrid FFN: its device operands are read from their
    // host copies (waited for here), weights through host views.
    SmallVector<std::pair<Value, std::string>> saved;
    for (Value v : op->getOperands()) {
      if (!onDevice.contains(v) ||
          llvm::any_of(saved, [&](auto &p) { return p.first == v; }))
        continue;
      saved.push_back({v, names[v]});
      names[v] = hostName(v);
    }
    LogicalResult result = emitHostOp(op);
    for (auto &[v, n] : saved)
      names[v] = n;
    return result;
  }
  return emitHostOp(op);
}

/// Ops on the host: the x86 op library.
LogicalResult Emitter::emitHostOp(Operation *op) {
  // The reshape family copies where its input lives (a view of a device
  // value is a device op).
  const bool deviceOp = cuda() && llvm::any_of(op->getResults(), [&](Value r) {
                          return onDevice.contains(r);
                        });
  if (cuda() && isa<ProfileCountOp>(op))
    return op->emitError("profiling builds target x86 (compile the profiling "
                         "binary with --target x86)");

  auto unaryCall = [&](StringRef kind) {
    return emitCall(op, "unary(ctx, ops::Unary::" + kind.str() + ", " +
                            name(op->getOperand(0)));
  };
  auto binaryCall = [&](StringRef kind) {
    return emitCall(op, "binary(ctx, ops::Binary::" + kind.str() + ", " +
                            name(op->getOperand(0)) + ", " +
                            name(op->getOperand(1)));
  };
  auto reshapeToType = [&](Value in, Value result,
                           SmallVector<std::string> dims) -> LogicalResult {
    std::string arr = exprArray(dims);
    return emitCall(result.getDefiningOp(),
                    "reshapeTo(ctx, " + (deviceOp ? dv(in) : name(in)) + ", " +
                        std::to_string(dims.size()) + ", " + arr,
                    /*declare=*/true, deviceOp ? "cuda::" : "ops::");
  };
  if (std::optional<StringRef> kind = unaryKind(op))
    return unaryCall(*kind);
  if (std::optional<StringRef> kind = binaryKind(op))
    return binaryCall(*kind);

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](WeightOp w) -> LogicalResult {
        FailureOr<std::string> view = weightView(w, "ctx.weight(");
        if (failed(view))
          return failure();
        names[w.getResult()] = *view;
        return success();
      })
      .Case([&](ConstantOp c) { return emitConstant(c); })
      .Case([&](CompareOp c) {
        return emitCall(op, "compare(ctx, ops::Compare::" +
                                stringifyComparePredicate(c.getPredicate()).str() +
                                ", " + name(c.getLhs()) + ", " +
                                name(c.getRhs()));
      })
      .Case([&](WhereOp w) {
        return emitCall(op, "where(ctx, " + name(w.getCondition()) + ", " +
                                name(w.getX()) + ", " + name(w.getY()));
      })
      .Case([&](CastOp c) -> LogicalResult {
        auto dty = dtypeOf(c.getType().getElementType());
        if (!dty)
          return c.emitError("cast to ")
                 << c.getType().getElementType()
                 << " is not supported by the " << backend() << " backend";
        return emitCall(op, "cast(ctx, " + name(c.getInput()) + ", " +
                                dty->str());
      })
      .Case([&](LinearOp l) -> LogicalResult {
        if (l.getTransposeWeight())
          return l.emitError("linear with transpose_weight reached the "
                             "emitter; run sparsec-weight-layout first");
        const std::string in =
            lastPositionInput(l.getResult(), l.getInput(), name(l.getInput()));
        return emitCall(op, "linear(ctx, " + in + ", " + name(l.getWeight()) +
                                ", " + ptr(l.getBias()) + ", " +
                                activationArg(l.getActivation()));
      })
      .Case([&](MatMulOp m) {
        return emitCall(op, "matmul(ctx, " + name(m.getLhs()) + ", " +
                                name(m.getRhs()));
      })
      .Case([&](LayerNormOp l) {
        return emitCall(
            op, "layerNorm(ctx, " + name(l.getInput()) + ", " +
                    name(l.getScale()) + ", " + ptr(l.getBias()) + ", " +
                    std::to_string(static_cast<int64_t>(l.getAxis())) + ", " +
                    floatLiteral(l.getEpsilon().convertToFloat(), true));
      })
      .Case([&](RmsNormOp l) {
        return emitCall(
            op, "rmsNorm(ctx, " + name(l.getInput()) + ", " +
                    name(l.getScale()) + ", " +
                    floatLiteral(l.getEpsilon().convertToFloat(), true));
      })
      .Case([&](RotaryOp r) {
        return emitCall(op, "rotary(ctx, " + name(r.getInput()) + ", " +
                                name(r.getCos()) + ", " + name(r.getSin()));
      })
      .Case([&](SoftmaxOp s) {
        return emitCall(op, "softmax(ctx, " + name(s.getInput()) + ", " +
                                std::to_string(static_cast<int64_t>(s.getAxis())));
      })
      .Case([&](AttentionOp a) { return emitAttention(a, /*device=*/false); })
      .Case([&](EmbeddingOp e) {
        std::string second;
        if (e.getTable2())
          second = ", " + name(e.getTable2()) + ", " + name(e.getIds2());
        return emitCall(op, "embedding(ctx, " + name(e.getTable()) + ", " +
                                name(e.getIds()) + second);
      })
      .Case<ConvOp, BatchNormOp, PoolOp, ReduceOp>(
          [&](Operation *o) { return emitConvLike(o, /*device=*/false); })
      .Case([&](CumSumOp c) {
        return emitCall(op, "cumsum(ctx, " + name(c.getInput()) + ", " +
                                std::to_string(static_cast<int64_t>(c.getAxis())) + ", " +
                                (c.getExclusive() ? "true" : "false") + ", " +
                                (c.getReverse() ? "true" : "false"));
      })
      .Case([&](TriluOp t) {
        return emitCall(op, "trilu(ctx, " + name(t.getInput()) + ", " +
                                (t.getUpper() ? "true" : "false") + ", " +
                                std::to_string(static_cast<int64_t>(t.getK())));
      })
      .Case([&](ShapeOp s) {
        return emitCall(op, "shape(ctx, " + name(s.getInput()) + ", " +
                                std::to_string(static_cast<int64_t>(s.getStart())) + ", " +
                                (s.getEnd() ? std::to_string(static_cast<int64_t>(*s.getEnd()))
                                            : std::string("INT64_MAX")));
      })
      .Case([&](GatherOp g) {
        return emitCall(op, "gather(ctx, " + name(g.getData()) + ", " +
                                name(g.getIndices()) + ", " +
                                std::to_string(static_cast<int64_t>(g.getAxis())));
      })
      .Case([&](ReshapeOp r) -> LogicalResult {
        if (r.getType().hasStaticShape()) {
          SmallVector<std::string> dims;
          for (int64_t d : r.getType().getShape())
            dims.push_back(std::to_string(d));
          return reshapeToType(r.getInput(), r.getResult(), dims);
        }
        if (deviceOp && onDevice.contains(r.getShape()))
          return r.emitError("the CUDA backend needs reshape's target shape "
                             "on the host");
        return emitCall(op,
                        "reshape(ctx, " +
                            (deviceOp ? dv(r.getInput()) : name(r.getInput())) +
                            ", " + name(r.getShape()) + ", " +
                            (r.getAllowzero() ? "true" : "false"),
                        /*declare=*/true, deviceOp ? "cuda::" : "ops::");
      })
      .Case([&](UnsqueezeOp u) -> LogicalResult {
        SmallVector<std::string> dims;
        auto rt = u.getType();
        SmallVector<int64_t> axes;
        for (int64_t a : u.getAxes())
          axes.push_back(a < 0 ? a + rt.getRank() : a);
        int64_t src = 0;
        for (int64_t i = 0; i < rt.getRank(); ++i)
          dims.push_back(llvm::is_contained(axes, i) ? std::string("1")
                                                     : dim(u.getInput(), src++));
        return reshapeToType(u.getInput(), u.getResult(), dims);
      })
      .Case([&](SqueezeOp s) -> LogicalResult {
        SmallVector<std::string> dims;
        auto it = s.getInput().getType();
        SmallVector<int64_t> axes;
        for (int64_t a : s.getAxes())
          axes.push_back(a < 0 ? a + it.getRank() : a);
        for (int64_t i = 0; i < it.getRank(); ++i)
          if (!llvm::is_contained(axes, i))
            dims.push_back(dim(s.getInput(), i));
        return reshapeToType(s.getInput(), s.getResult(), dims);
      })
      .Case([&](FlattenOp f) -> LogicalResult {
        auto it = f.getInput().getType();
        const int64_t axis = normalizeAxis(f.getAxis(), it.getRank());
        std::string outer = "1", inner = "1";
        for (int64_t i = 0; i < it.getRank(); ++i)
          (i < axis ? outer : inner) += " * " + dim(f.getInput(), i);
        return reshapeToType(f.getInput(), f.getResult(), {outer, inner});
      })
      .Case([&](TransposeOp t) {
        std::string perm = intArray(t.getPermutation());
        return emitCall(op, "transpose(ctx, " + name(t.getInput()) + ", " + perm);
      })
      .Case([&](ConcatOp c) {
        std::string arr = "p" + std::to_string(counter++);
        body << "  const Tensor *" << arr << "[] = {";
        for (auto [i, v] : llvm::enumerate(c.getInputs()))
          body << (i ? ", " : "") << "&" << name(v);
        body << "};\n";
        return emitCall(op, "concat(ctx, " + std::to_string(c.getInputs().size()) +
                                ", " + arr + ", " + std::to_string(static_cast<int64_t>(c.getAxis())));
      })
      .Case([&](SliceOp s) {
        return emitCall(op, "slice(ctx, " + name(s.getData()) + ", " +
                                name(s.getStarts()) + ", " + name(s.getEnds()) +
                                ", " + name(s.getAxes()) + ", " +
                                name(s.getSteps()));
      })
      .Case([&](SplitOp s) -> LogicalResult {
        std::string sizes = intArray(s.getSizes());
        SmallVector<int64_t> slots;
        std::string outs = "o" + std::to_string(counter++);
        body << "  Tensor " << outs << "[" << s.getNumResults() << "];\n";
        for (auto [i, r] : llvm::enumerate(s.getResults())) {
          slots.push_back(slot(op, i));
          names[r] = outs + "[" + std::to_string(i) + "]";
        }
        std::string slotVar = "s" + std::to_string(counter++);
        body << "  static const int " << slotVar << "[] = {" << joinInts(slots)
             << "};\n";
        body << "  if (!ops::split(ctx, " << name(s.getInput()) << ", "
             << static_cast<int64_t>(s.getAxis()) << ", " << s.getNumResults() << ", " << sizes
             << ", " << slotVar << ", " << outs << ")) " << onFail << "\n";
        return success();
      })
      .Case([&](ExpandOp e) {
        return emitCall(op, "expand(ctx, " + name(e.getInput()) + ", " +
                                name(e.getShape()));
      })
      .Case([&](RangeOp r) {
        return emitCall(op, "range(ctx, " + name(r.getStart()) + ", " +
                                name(r.getLimit()) + ", " + name(r.getDelta()));
      })
      .Case([&](ConstantOfShapeOp c) -> LogicalResult {
        auto typed = cast<TypedAttr>(c.getValue());
        auto scalarType = RankedTensorType::get({}, typed.getType());
        OpBuilder b(c);
        auto scalar = ConstantOp::create(
            b, c.getLoc(), DenseElementsAttr::get(scalarType, typed));
        if (failed(emitConstant(scalar)))
          return failure();
        std::string v = name(scalar.getResult());
        scalar->erase();
        return emitCall(op, "constantOfShape(ctx, " + name(c.getShape()) +
                                ", " + v);
      })
      .Case([&](SparseLinearOp s) -> LogicalResult {
        if (s.getSparseDim() == SparseDim::output) {
          if (!s.getTransposeWeight())
            return s.emitError("the output side of sparse_linear needs a "
                               "neuron-major ([N, K]) weight: run "
                               "sparsec-weight-layout first");
          if (!s.getActive())
            return s.emitError("the output side of sparse_linear needs an "
                               "active mask");
          return emitCall(op, "sparseLinearOutput(ctx, " +
                                  name(s.getInput()) + ", " +
                                  name(s.getWeight()) + ", " +
                                  ptr(s.getBias()) + ", " +
                                  name(s.getActive()) + ", " +
                                  activationArg(s.getActivation()));
        }
        if (s.getActive() || s.getTransposeWeight())
          return s.emitError("the input side of sparse_linear takes its "
                             "active neurons from the input's zeros and a "
                             "[K, N] weight (run sparsec-weight-layout)");
        return emitCall(op, "sparseLinearInput(ctx, " + name(s.getInput()) +
                                ", " + name(s.getWeight()) + ", " +
                                ptr(s.getBias()));
      })
      .Case([&](PredictOp p) -> LogicalResult {
        return emitCall(op, "predict(ctx, " + name(p.getInput()) + ", " +
                                name(p.getW1()) + ", " + name(p.getW2()) +
                                ", " + ptr(p.getBias()) + ", " +
                                llvm::formatv("{0:e}f", p.getThreshold()
                                                            .convertToFloat())
                                    .str());
      })
      .Case([&](ProfileCountOp p) -> LogicalResult {
        body << "  if (!ops::profileCount(ctx, " << name(p.getInput()) << ", "
             << static_cast<int64_t>(p.getIndex()) << ", "
             << ptr(p.getLayerInput()) << ")) " << onFail << "\n";
        return success();
      })
      .Default([&](Operation *other) {
        return other->emitError("the ") << backend() << " backend does not support '"
               << other->getName() << "' yet";
      });
}

/// attention has three results (output, present K and V).
LogicalResult Emitter::emitAttention(AttentionOp a, bool device) {
  // Operands first: an upload is a statement of its own.
  auto arg = [&](Value v) { return device ? dv(v) : name(v); };
  auto argPtr = [&](Value v) { return device ? dptr(v) : ptr(v); };
  std::string q = arg(a.getQuery()), k = arg(a.getKey()), v = arg(a.getValue());
  std::string mask = argPtr(a.getMask()), pastK = argPtr(a.getPastKey()),
              pastV = argPtr(a.getPastValue());
  std::string out = define(a.getResult());
  body << "  Tensor " << out << ";\n";
  std::string pk = "nullptr", pv = "nullptr";
  if (a.getPresentKey()) {
    pk = define(a.getPresentKey());
    pv = define(a.getPresentValue());
    body << "  Tensor " << pk << ", " << pv << ";\n";
    pk = "&" + pk;
    pv = "&" + pv;
  }
  Operation *op = a.getOperation();
  body << "  if (!" << (device ? "cuda::" : "ops::") << "attention(ctx, " << q
       << ", " << k << ", " << v << ", " << mask << ", " << pastK << ", "
       << pastV << ", " << floatLiteral(a.getScale().convertToFloat(), true)
       << ", " << (a.getCausal() ? "true" : "false") << ", ops::HeadLayout::"
       << (a.getTokenMajor() ? "tokenMajor" : "headMajor") << ", "
       << slot(op, 0) << ", " << out << ", " << slot(op, 1) << ", " << pk
       << ", " << slot(op, 2) << ", " << pv << ")) " << onFail << "\n";
  return success();
}

LogicalResult Emitter::emitConvLike(Operation *op, bool device) {
  auto tensor = [&](Value v) { return device ? dv(v) : name(v); };
  auto call = [&](const std::string &c) {
    return emitCall(op, c, /*declare=*/true, device ? "cuda::" : "ops::");
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ConvOp c) -> LogicalResult {
        if (BatchNormOp bn = foldedNorm(c)) {
          normedConvs[bn] = c;
          body << "  // (computed with the batch norm below)\n";
          return success();
        }
        return emitConv(c, nullptr, device);
      })
      .Case([&](BatchNormOp b) {
        auto it = normedConvs.find(b);
        if (it != normedConvs.end())
          return emitConv(it->second, b, device);
        std::string x = tensor(b.getInput()), scale = tensor(b.getScale()),
                    bias = tensor(b.getBias()), mean = tensor(b.getMean()),
                    var = tensor(b.getVariance());
        return call("batchNorm(ctx, " + x + ", " + scale + ", " + bias + ", " +
                    mean + ", " + var + ", " +
                    floatLiteral(b.getEpsilon().convertToFloat(), true) + ", " +
                    activationArg(b.getActivation()));
      })
      .Case([&](PoolOp p) {
        bool global = p.getKernel().empty();
        std::string x = tensor(p.getInput());
        std::string k = global ? "nullptr" : intArray(p.getKernel());
        std::string st = global ? "nullptr" : intArray(p.getStrides());
        std::string pd = global ? "nullptr" : intArray(p.getPads());
        return call(
            "pool(ctx, ops::Pool::" + stringifyPoolKind(p.getKind()).str() +
            ", " + x + ", " + k + ", " + st + ", " + pd + ", " +
            (p.getCountIncludePad() ? "true" : "false"));
      })
      .Case([&](ReduceOp r) -> LogicalResult {
        if (device && failed(checkDeviceReduce(r)))
          return failure();
        std::string x = tensor(r.getInput()), axes = intArray(r.getAxes());
        return call("reduce(ctx, ops::Reduce::" +
                    stringifyReduceKind(r.getKind()).str() + ", " + x + ", " +
                    std::to_string(r.getAxes().size()) + ", " + axes + ", " +
                    (r.getKeepdims() ? "true" : "false"));
      });
}

LogicalResult Emitter::checkDeviceReduce(ReduceOp r) {
  if (!isa<FloatType>(
          cast<ShapedType>(r.getInput().getType()).getElementType()))
    return r.emitError("the CUDA backend reduces float tensors only");
  // The device kernels reduce one block of adjacent axes (size-1 dims
  // aside); what the shapes show here is refused at compile time.
  auto type = cast<RankedTensorType>(r.getInput().getType());
  SmallVector<bool> reduced(type.getRank(), r.getAxes().empty());
  for (int64_t a : r.getAxes())
    reduced[a < 0 ? a + type.getRank() : a] = true;
  int phase = 0;
  for (auto [i, dim] : llvm::enumerate(type.getShape())) {
    if (dim == 1)
      continue;
    if (ShapedType::isDynamic(dim))
      break;
    if (reduced[i] && phase == 2)
      return r.emitError("the CUDA backend reduces over one block of "
                         "adjacent axes, not the axes [")
             << llvm::join(llvm::map_range(
                               r.getAxes(),
                               [](int64_t a) { return std::to_string(a); }),
                           ", ")
             << "] of " << type;
    phase = reduced[i] ? 1 : phase == 0 ? 0 : 2;
  }
  return success();
}

LogicalResult Emitter::emitConv(ConvOp c, BatchNormOp bn, bool device) {
  auto tensor = [&](Value v) { return device ? dv(v) : name(v); };
  // Operands and attribute arrays first, in order (each may emit a
  // statement of its own).
  std::string x = tensor(c.getInput()), w = tensor(c.getWeight()),
              b = c.getBias() ? "&" + tensor(c.getBias()) : "nullptr",
              st = intArray(c.getStrides()), pd = intArray(c.getPads()),
              dl = intArray(c.getDilations());
  std::string args = x + ", " + w + ", " + b + ", " + st + ", " + pd + ", " +
                     dl + ", " +
                     std::to_string(static_cast<int64_t>(c.getGroup())) + ", ";
  StringRef ns = device ? "cuda::" : "ops::";
  if (!bn)
    return emitCall(
        c, "conv(ctx, " + args + "nullptr, " + activationArg(c.getActivation()),
        /*declare=*/true, ns);
  std::string scale = tensor(bn.getScale()), bias = tensor(bn.getBias()),
              mean = tensor(bn.getMean()), var = tensor(bn.getVariance());
  std::string norm = "cn" + std::to_string(counter++);
  body << "  const ops::ConvNorm " << norm << "{&" << scale << ", &" << bias
       << ", &" << mean << ", &" << var << ", "
       << floatLiteral(bn.getEpsilon().convertToFloat(), true) << "};\n";
  return emitCall(bn,
                  "conv(ctx, " + args + "&" + norm + ", " +
                      activationArg(bn.getActivation()),
                  /*declare=*/true, ns);
}

/// Device ops of the CUDA target (see the file comment).
LogicalResult Emitter::emitDeviceOp(Operation *op) {
  auto call = [&](const std::string &c) {
    return emitCall(op, c, /*declare=*/true, "cuda::");
  };
  auto unaryCall = [&](StringRef kind) {
    return call("unary(ctx, ops::Unary::" + kind.str() + ", " +
                dv(op->getOperand(0)));
  };
  auto binaryCall = [&](StringRef kind) {
    return call("binary(ctx, ops::Binary::" + kind.str() + ", " +
                dv(op->getOperand(0)) + ", " + dv(op->getOperand(1)));
  };
  auto hostOperand = [&](Value v, StringRef what) -> FailureOr<std::string> {
    if (onDevice.contains(v))
      return op->emitError("the CUDA backend needs ")
             << what << " on the host, but it is computed on the device";
    return name(v);
  };
  auto newIndex = [&]() {
    std::string ix = "ix" + std::to_string(counter++);
    body << "  cuda::IndexSet " << ix << ";\n";
    return ix;
  };
  // Logical ops work on booleans, which live on the host.
  std::optional<StringRef> kind = unaryKind(op);
  if (kind && !kind->starts_with("logical_"))
    return unaryCall(*kind);
  kind = binaryKind(op);
  if (kind && !kind->starts_with("logical_") && gatedParts.contains(op)) {
    std::string v = define(op->getResult(0));
    body << "  Tensor " << v << ";\n  // (computed with the gated MLP's down "
            "projection below)\n";
    return success();
  }
  if (kind && !kind->starts_with("logical_")) {
    if (failed(binaryCall(*kind)))
      return failure();
    // A product's non-zeros are among a factor's: where that factor is an
    // output-side sparse_linear (a gated MLP's up projection, a squared
    // activation's), the down projection after the product reads the
    // factor's set instead of scanning the product. Of a gated MLP's two,
    // the up projection's (the gate's non-zeros) is the smaller. The same
    // holds for a cap, min(x, c) with a constant c >= 0 (a capped ReLU).
    if (isa<MulOp>(op) || (isa<MinOp>(op) && isCap(op))) {
      std::optional<std::string> set;
      for (Value factor : op->getOperands()) {
        auto it = indexOf.find(factor);
        auto sparse = factor.getDefiningOp<SparseLinearOp>();
        if (it == indexOf.end() || !sparse ||
            factor.getType() != op->getResult(0).getType())
          continue;
        Operation *mask = sparse.getActive() ? sparse.getActive().getDefiningOp()
                                             : nullptr;
        if (!set || isa_and_nonnull<CompareOp, NotOp>(mask))
          set = it->second;
      }
      if (set)
        indexOf[op->getResult(0)] = *set;
    }
    return success();
  }
  auto gateMask = [&](Value x, bool positive) {
    std::string in = dv(x);
    std::string ix = newIndex();
    std::string v = define(op->getResult(0));
    body << "  Tensor " << v << ";\n  if (!cuda::gateMask(ctx, " << in << ", "
         << (positive ? "true" : "false") << ", " << indexSites++ << ", "
         << slot(op) << ", " << v << ", " << ix << ")) " << onFail << "\n";
    indexOf[op->getResult(0)] = ix;
    return success();
  };

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](WeightOp w) -> LogicalResult {
        FailureOr<std::string> view = weightView(w, "cuda::weight(ctx, ");
        if (failed(view))
          return failure();
        names[w.getResult()] = *view;
        return success();
      })
      .Case([&](CompareOp c) -> LogicalResult {
        // Only a gated MLP's mask: `gate > 0`, or `!(gate == 0)` (below).
        if (isGateCompare(c, ComparePredicate::gt))
          return gateMask(c.getLhs(), /*positive=*/true);
        if (isNegatedGateCompare(c)) {
          body << "  // (the gate mask below)\n";
          return success();
        }
        // Any other float compare: a device bool tensor (for `where`).
        if (!cast<ShapedType>(c.getLhs().getType()).getElementType().isF32() ||
            !cast<ShapedType>(c.getRhs().getType()).getElementType().isF32())
          return c.emitError("the CUDA backend compares float32 values on the "
                             "device only");
        std::string lhs = dv(c.getLhs()), rhs = dv(c.getRhs());
        return call("compare(ctx, ops::Compare::" +
                    stringifyComparePredicate(c.getPredicate()).str() + ", " +
                    lhs + ", " + rhs);
      })
      .Case([&](NotOp n) -> LogicalResult {
        auto c = n.getInput().getDefiningOp<CompareOp>();
        if (c && isNegatedGateCompare(c))
          return gateMask(c.getLhs(), /*positive=*/false);
        return n.emitError("the CUDA backend does not support 'sparsec.not' "
                           "on device values yet");
      })
      .Case([&](WhereOp w) {
        return call("where(ctx, " + dv(w.getCondition()) + ", " + dv(w.getX()) +
                    ", " + dv(w.getY()));
      })
      .Case([&](LinearOp l) -> LogicalResult {
        const std::string in =
            lastPositionInput(l.getResult(), l.getInput(), dv(l.getInput()));
        if (!l.getTransposeWeight())
          return call("linear(ctx, " + in + ", " + dv(l.getWeight()) + ", " +
                      dptr(l.getBias()) + ", " +
                      activationArg(l.getActivation()));
        // Neuron-major weights (dense-layout=nk) take the row GEMV; a
        // following residual add becomes its epilogue, writing the add's
        // result into the add's slot.
        std::string head = "linearNK(ctx, " + in + ", " + dv(l.getWeight()) +
                           ", " + dptr(l.getBias()) + ", " +
                           activationArg(l.getActivation()) + ", ";
        AddOp add = residualAdd(l);
        if (!add)
          return call(head + "nullptr");
        Value r = otherOperand(add, l.getResult());
        fusedAdds.insert(add);
        std::string v = define(add.getResult());
        body << "  Tensor " << v << ";\n  if (!cuda::" << head << "&" << dv(r)
             << ", " << slot(add) << ", " << v << ")) " << onFail << "\n";
        return success();
      })
      .Case([&](LinearGroupOp g) -> LogicalResult {
        // Like split: the results are one array of tensors, their slots one
        // static array. Operands first (an upload is a statement of its
        // own); a folded norm's scale and bias (or nullptr) and epsilon
        // come after the input.
        std::string x = dv(g.getInput());
        std::string normScale = dptr(g.getNormScale()),
                    normBias = dptr(g.getNormBias());
        std::string eps = floatLiteral(
            g.getNormEpsilon() ? g.getNormEpsilon()->convertToFloat() : 0.0f,
            true);
        SmallVector<std::string> ws, bs;
        for (Value w : g.getWeights())
          ws.push_back("&" + dv(w));
        for (Value b : g.getBiases())
          bs.push_back("&" + dv(b));
        std::string id = std::to_string(counter++);
        SmallVector<int64_t> slots;
        for (auto [i, r] : llvm::enumerate(g.getResults())) {
          slots.push_back(slot(g, unsigned(i)));
          names[r] = "go" + id + "[" + std::to_string(i) + "]";
        }
        body << "  Tensor go" << id << "[" << ws.size() << "];\n";
        body << "  const Tensor *gw" << id << "[] = {" << llvm::join(ws, ", ")
             << "};\n";
        if (!bs.empty())
          body << "  const Tensor *gb" << id << "[] = {" << llvm::join(bs, ", ")
               << "};\n";
        body << "  static const int gs" << id << "[] = {" << joinInts(slots)
             << "};\n";
        body << "  if (!cuda::linearGroupNK(ctx, " << x << ", " << normScale
             << ", " << normBias << ", " << eps << ", "
             << (g.getNormRms() ? "true" : "false") << ", " << ws.size()
             << ", gw" << id << ", " << (bs.empty() ? "nullptr" : "gb" + id)
             << ", " << activationArg(g.getActivation()) << ", gs" << id
             << ", go" << id << ")) " << onFail << "\n";
        return success();
      })
      .Case([&](MatMulOp m) {
        return call("matmul(ctx, " + dv(m.getLhs()) + ", " + dv(m.getRhs()));
      })
      .Case([&](LayerNormOp l) -> LogicalResult {
        std::string args =
            dv(l.getInput()) + ", " + dv(l.getScale()) + ", " +
            dptr(l.getBias()) + ", " +
            std::to_string(static_cast<int64_t>(l.getAxis())) + ", " +
            floatLiteral(l.getEpsilon().convertToFloat(), true);
        // Or emitted with the predicted FFN (cuda::predictFfnNorm).
        if (deferNorm(op, args + ", false"))
          return success();
        return call("layerNorm(ctx, " + args);
      })
      .Case([&](RmsNormOp l) -> LogicalResult {
        if (deferNorm(op, dv(l.getInput()) + ", " + dv(l.getScale()) +
                              ", nullptr, -1, " +
                              floatLiteral(l.getEpsilon().convertToFloat(), true) +
                              ", true"))
          return success();
        return call("rmsNorm(ctx, " + dv(l.getInput()) + ", " +
                    dv(l.getScale()) + ", " +
                    floatLiteral(l.getEpsilon().convertToFloat(), true));
      })
      .Case([&](RotaryOp r) {
        return call("rotary(ctx, " + dv(r.getInput()) + ", " + dv(r.getCos()) +
                    ", " + dv(r.getSin()));
      })
      .Case([&](SoftmaxOp s) {
        return call("softmax(ctx, " + dv(s.getInput()) + ", " +
                    std::to_string(static_cast<int64_t>(s.getAxis())));
      })
      .Case([&](AttentionOp a) { return emitAttention(a, /*device=*/true); })
      .Case<ConvOp, BatchNormOp, PoolOp, ReduceOp>(
          [&](Operation *o) { return emitConvLike(o, /*device=*/true); })
      .Case([&](EmbeddingOp e) -> LogicalResult {
        // A lookup's arguments: table, host ids, their upload site.
        auto lookup = [&](Value table, Value ids) -> FailureOr<std::string> {
          auto hostIds = hostOperand(ids, "embedding ids");
          if (failed(hostIds))
            return failure();
          return dv(table) + ", " + *hostIds + ", " +
                 std::to_string(uploadSites++);
        };
        auto args = lookup(e.getTable(), e.getIds());
        if (failed(args))
          return failure();
        if (e.getTable2()) {
          auto second = lookup(e.getTable2(), e.getIds2());
          if (failed(second))
            return failure();
          *args += ", " + *second;
        }
        return call("embedding(ctx, " + *args);
      })
      .Case([&](TransposeOp t) {
        std::string perm = intArray(t.getPermutation());
        return call("transpose(ctx, " + dv(t.getInput()) + ", " + perm);
      })
      .Case([&](ConcatOp c) {
        SmallVector<std::string> inputs;
        for (Value v : c.getInputs())
          inputs.push_back(dv(v));
        std::string arr = "p" + std::to_string(counter++);
        body << "  const Tensor *" << arr << "[] = {";
        for (auto [i, v] : llvm::enumerate(inputs))
          body << (i ? ", " : "") << "&" << v;
        body << "};\n";
        return call("concat(ctx, " + std::to_string(c.getInputs().size()) +
                    ", " + arr + ", " +
                    std::to_string(static_cast<int64_t>(c.getAxis())));
      })
      .Case([&](ExpandOp e) -> LogicalResult {
        auto shape = hostOperand(e.getShape(), "expand's shape");
        if (failed(shape))
          return failure();
        return call("expand(ctx, " + dv(e.getInput()) + ", " + *shape);
      })
      .Case([&](SliceOp s) -> LogicalResult {
        SmallVector<std::string> params;
        // (Named arrays: a ValueRange over a braced list in the loop header
        // would point into a temporary that is gone by the first use.)
        const Value operands[] = {s.getStarts(), s.getEnds(), s.getAxes(),
                                  s.getSteps()};
        const StringRef whats[] = {"slice starts", "slice ends", "slice axes",
                                   "slice steps"};
        for (auto [v, what] : llvm::zip(operands, whats)) {
          auto p = hostOperand(v, what);
          if (failed(p))
            return failure();
          params.push_back(*p);
        }
        return call("slice(ctx, " + dv(s.getData()) + ", " + params[0] + ", " +
                    params[1] + ", " + params[2] + ", " + params[3]);
      })
      .Case([&](PredictOp p) -> LogicalResult {
        // Operands first: an upload is a statement of its own.
        std::string x = dv(p.getInput()), w1 = dv(p.getW1()),
                    w2 = dv(p.getW2()), bias = dptr(p.getBias());
        std::string ix = newIndex();
        std::string v = define(p.getResult());
        body << "  Tensor " << v << ";\n";
        indexOf[p.getResult()] = ix;
        const std::string rest =
            w1 + ", " + w2 + ", " + bias + ", " +
            llvm::formatv("{0:e}f", p.getThreshold().convertToFloat()).str() +
            ", " + std::to_string(indexSites++) + ", " +
            std::to_string(slot(op)) + ", " + v + ", " + ix;
        if (SparseLinearOp up = fusedPredictUp(p)) {
          // Emitted with the FFN (cuda::predictFfn, or predictFfnNorm with
          // the norm before it).
          auto norm = fusedNorms.find(op);
          fusedPredicts[up.getOperation()] =
              (norm != fusedNorms.end() ? norm->second : x) + ", " + rest;
          body << "  // (predicted with the FFN below)\n";
          return success();
        }
        if (fusedNorms.count(op))
          return p.emitError("internal error: the norm before this predictor "
                             "was left to its FFN, which does not take it");
        body << "  if (!cuda::predict(ctx, " << x << ", " << rest
             << ")) " << onFail << "\n";
        return success();
      })
      .Case([&](SparseLinearOp s) -> LogicalResult {
        if (s.getSparseDim() == SparseDim::output) {
          if (!s.getTransposeWeight() || !s.getActive())
            return s.emitError("the output side of sparse_linear needs a "
                               "neuron-major weight and an active mask (run "
                               "sparsec-weight-layout first)");
          if (MulOp product = gatedProduct(s)) {
            // Emitted with the product and the down projection
            // (cuda::gatedFfn).
            Operation *down = *product.getResult().getUsers().begin();
            gatedFfns[down] = {s, product};
            gatedParts.insert(product);
            std::string v = define(s.getResult());
            body << "  Tensor " << v << ";\n  // (computed with the gated MLP's "
                    "down projection below)\n";
            return success();
          }
          if (SparseLinearOp down = fusedDown(s)) {
            // Emitted with the down projection (cuda::sparseFfn).
            fusedUps[down.getOperation()] = s;
            std::string v = define(s.getResult());
            body << "  Tensor " << v << ";\n  // (computed with the down "
                    "projection below)\n";
            return success();
          }
          auto it = indexOf.find(s.getActive());
          std::string ix = it != indexOf.end() ? it->second
                                               : std::string("cuda::IndexSet{}");
          std::string x = dv(s.getInput()), w = dv(s.getWeight()),
                      bias = dptr(s.getBias()), active = dv(s.getActive());
          std::string outIx = newIndex();
          std::string v = define(s.getResult());
          body << "  Tensor " << v << ";\n";
          body << "  if (!cuda::sparseLinearOutput(ctx, " << x << ", " << w
               << ", " << bias << ", " << active << ", " << ix << ", "
               << activationArg(s.getActivation()) << ", " << slot(op) << ", "
               << v << ", " << outIx << ")) " << onFail << "\n";
          indexOf[s.getResult()] = outIx;
          return success();
        }
        if (s.getActive() || s.getTransposeWeight())
          return s.emitError("the input side of sparse_linear takes its "
                             "active neurons from the input's zeros and a "
                             "[K, N] weight (run sparsec-weight-layout)");
        // Batched calls (above a decode batch): PIT micro-tiles of
        // pit_tile tokens with pit_columns output columns a block (0: the
        // runtime's default), or the dense kernel (tile 0).
        std::string pitPlan =
            "cuda::PitPlan{" + std::to_string(s.getPitTile().value_or(0)) +
            ", " + std::to_string(s.getPitColumns().value_or(0)) + "}";
        // A following residual add is folded in; the call writes the add's
        // result into the add's slot.
        AddOp add = residualAdd(op);
        std::string residual = "nullptr";
        if (add)
          residual = "&" + dv(otherOperand(add, s.getResult()));
        auto finish = [&](const std::string &head,
                          const std::string &tail) -> LogicalResult {
          Value result = add ? add.getResult() : s.getResult();
          int64_t outSlot = add ? slot(add) : slot(op);
          if (add)
            fusedAdds.insert(add);
          std::string v = define(result);
          body << "  Tensor " << v << ";\n  if (!cuda::" << head << residual
               << ", " << outSlot << ", " << v << tail << ")) " << onFail << "\n";
          return success();
        };
        auto gated = gatedFfns.find(op);
        if (gated != gatedFfns.end()) {
          auto [up, product] = gated->second;
          Value gate = otherOperand(product, up.getResult());
          return finish("gatedFfn(ctx, " + dv(up.getInput()) + ", " + dv(gate) +
                            ", " + dv(up.getActive()) + ", " +
                            indexOf.find(up.getActive())->second + ", " +
                            dv(up.getWeight()) + ", " + dptr(up.getBias()) + ", " +
                            std::to_string(slot(up)) + ", " + name(up.getResult()) +
                            ", " + std::to_string(slot(product)) + ", " +
                            name(product.getResult()) + ", " + dv(s.getWeight()) +
                            ", " + dptr(s.getBias()) + ", " + pitPlan + ", ",
                        "");
        }
        auto fused = fusedUps.find(op);
        if (fused != fusedUps.end()) {
          SparseLinearOp up = fused->second;
          std::string ix = indexOf.find(up.getActive())->second;
          std::string x = dv(up.getInput()), wu = dv(up.getWeight()),
                      bu = dptr(up.getBias()), active = dv(up.getActive());
          std::string wd = dv(s.getWeight()), bd = dptr(s.getBias());
          auto pred = fusedPredicts.find(up.getOperation());
          if (pred != fusedPredicts.end())
            return finish(std::string(fusedNorms.count(
                                          up.getActive().getDefiningOp())
                                          ? "predictFfnNorm(ctx, "
                                          : "predictFfn(ctx, ") +
                              pred->second + ", " + wu + ", " +
                              bu + ", " + activationArg(up.getActivation()) +
                              ", " + std::to_string(slot(up)) + ", " + wd +
                              ", " + bd + ", " + pitPlan + ", ",
                          ", " + name(up.getResult()));
          return finish("sparseFfn(ctx, " + x + ", " + wu + ", " + bu + ", " +
                        active + ", " + ix + ", " +
                        activationArg(up.getActivation()) + ", " +
                        std::to_string(slot(up)) + ", " + wd + ", " + bd +
                        ", " + pitPlan + ", ",
                        ", " + name(up.getResult()));
        }
        std::string x = dv(s.getInput());
        std::string ix;
        auto it = indexOf.find(s.getInput());
        if (it != indexOf.end()) {
          ix = it->second;
        } else {
          ix = newIndex();
          body << "  if (!cuda::nonzeroIndex(ctx, " << x << ", "
               << indexSites++ << ", " << ix << ")) " << onFail << "\n";
        }
        return finish("sparseLinearInput(ctx, " + x + ", " + dv(s.getWeight()) +
                      ", " + dptr(s.getBias()) + ", " + ix + ", " + pitPlan +
                      ", ",
                      "");
      })
      .Default([&](Operation *other) {
        auto half = [](Type t) {
          auto e = cast<ShapedType>(t).getElementType();
          return e.isF16() || e.isBF16();
        };
        if (isa<CastOp>(other) && (half(other->getOperand(0).getType()) ||
                                   half(other->getResult(0).getType()))) {
          auto loc = dyn_cast<NameLoc>(other->getLoc());
          return other->emitError()
                 << (loc ? "node '" + loc.getName().str() + "': " : "")
                 << "the CUDA backend keeps activations in float32: a "
                    "half-precision model must be widened whole first "
                    "(sparsec-widen-half all=1, which sparsec compile runs "
                    "for this target)";
        }
        auto loc = dyn_cast<NameLoc>(other->getLoc());
        return other->emitError()
               << (loc ? "node '" + loc.getName().str() + "': " : "")
               << "the CUDA backend does not support '" << other->getName()
               << "' on device values yet";
      });
}

void Emitter::placeValues(func::FuncOp func) {
  // A value lives on the device iff it is a weight or computed from a
  // device value (Shape only reads dims, which the host always has), except
  // for the ops of a hybrid FFN's CPU part (`sparsec.device = "cpu"`) and
  // the weights only they read.
  for (Operation &op : func.getBody().front()) {
    if (isa<func::ReturnOp, ShapeOp>(op) || placedOnCpu(&op))
      continue;
    bool device = isa<WeightOp>(op)
                      ? llvm::any_of(op.getUsers(),
                                     [](Operation *u) { return !placedOnCpu(u); })
                      : llvm::any_of(op.getOperands(), [&](Value v) {
                          return onDevice.contains(v);
                        });
    if (device)
      for (Value r : op.getResults())
        onDevice.insert(r);
  }
}

void Emitter::copyForHost(Operation *op) {
  for (Value r : op->getResults()) {
    if (!onDevice.contains(r) || isa<WeightOp>(op) ||
        llvm::none_of(r.getUsers(), [](Operation *u) { return placedOnCpu(u); }))
      continue;
    HostCopy copy{"h" + std::to_string(counter++), hostCopySites++};
    body << "  Tensor " << copy.name << ";\n  if (!cuda::toHost(ctx, "
         << name(r) << ", " << copy.site << ", " << copy.name
         << ")) " << onFail << "\n";
    hostCopies[r] = copy;
  }
}

void Emitter::emitDescription(func::FuncOp func) {
  // CUDA: an input whose values only device embeddings read (its other
  // users, Shape, read dims only) may be passed in device memory.
  // The table an embedding's use of a value as (first or second) ids
  // indexes; null for any other use.
  auto lookupTable = [](OpOperand &use) -> Value {
    auto e = dyn_cast<EmbeddingOp>(use.getOwner());
    if (!e)
      return Value();
    if (&use == &e.getIdsMutable())
      return e.getTable();
    if (e.getIds2() && &use == &e.getIds2Mutable()[0])
      return e.getTable2();
    return Value();
  };
  auto deviceValues = [&](unsigned i) {
    if (!cuda())
      return false;
    Value arg = func.getArgument(i);
    return !arg.use_empty() &&
           llvm::all_of(arg.getUses(), [&](OpOperand &use) {
             Operation *u = use.getOwner();
             return isa<ShapeOp>(u) || (lookupTable(use) && !placedOnCpu(u));
           });
  };
  // CUDA: a float32 input that only device attention ops read, as their
  // past keys or values (Shape reads dims only), which read float16 too:
  // the runtime may keep a KV cache passed as it in 16 bits.
  auto attentionPast = [&](unsigned i) {
    if (!cuda())
      return false;
    Value arg = func.getArgument(i);
    auto type = cast<RankedTensorType>(arg.getType());
    return type.getElementType().isF32() && !arg.use_empty() &&
           llvm::all_of(arg.getUses(), [&](OpOperand &use) {
             Operation *u = use.getOwner();
             if (isa<ShapeOp>(u))
               return true;
             auto a = dyn_cast<AttentionOp>(u);
             if (!a || placedOnCpu(u))
               return false;
             auto is = [&](MutableOperandRange r) {
               return !r.empty() && &r[0] == &use;
             };
             return is(a.getPastKeyMutable()) || is(a.getPastValueMutable());
           });
  };
  // Its values must be below every table's rows: the smallest (0 where
  // a table's rows are not static).
  auto valueLimit = [&](unsigned i) -> int64_t {
    int64_t limit = -1;
    for (OpOperand &use : func.getArgument(i).getUses())
      if (Value table = lookupTable(use)) {
        auto type = cast<RankedTensorType>(table.getType());
        const int64_t rows = type.isDynamicDim(0) ? 0 : type.getDimSize(0);
        limit = limit < 0 ? rows : std::min(limit, rows);
      }
    return std::max<int64_t>(limit, 0);
  };
  // flagOf(i): deviceValues; pastOf(i): attentionPast.
  auto io = [&](StringRef var, TypeRange types, bool inputs, auto nameOf,
                auto dimNamesOf, auto flagOf, auto pastOf) {
    os << "const IODesc " << var << "[] = {\n";
    for (auto [i, t] : llvm::enumerate(types)) {
      auto type = cast<RankedTensorType>(t);
      ArrayAttr dimNames = dimNamesOf(i);
      SmallVector<std::string> dims, dn, maxes;
      for (int64_t d = 0; d < type.getRank(); ++d) {
        std::string dname =
            dimNames && d < static_cast<int64_t>(dimNames.size())
                ? cast<StringAttr>(dimNames[d]).getValue().str()
                : "";
        if (type.isDynamicDim(d) && dname.empty() && inputs)
          dname = "dim" + std::to_string(d);
        dims.push_back(std::to_string(
            type.isDynamicDim(d) ? -1 : type.getDimSize(d)));
        dn.push_back(quoted(dname));
        auto it = options.maxDims.find(dname);
        maxes.push_back(
            !type.isDynamicDim(d) ? std::to_string(type.getDimSize(d))
            : inputs && it != options.maxDims.end() ? std::to_string(it->second)
                                                    : "-1");
      }
      auto join = [](ArrayRef<std::string> v) {
        std::string s;
        for (auto [k, x] : llvm::enumerate(v))
          s += (k ? ", " : "") + x;
        return s.empty() ? std::string("0") : s;
      };
      os << "    {" << quoted(nameOf(i)) << ", "
         << *dtypeOf(type.getElementType()) << ", " << type.getRank() << ", {"
         << join(dims) << "}, {" << (dn.empty() ? "nullptr" : join(dn))
         << "}, {" << join(maxes) << "}"
         << (flagOf(i) ? ", true, " + std::to_string(valueLimit(i)) : "")
         << (pastOf(i) ? std::string(flagOf(i) ? "" : ", false, 0") + ", true"
                       : "")
         << "},\n";
    }
    os << "};\n";
  };
  io(
      "kInputs", func.getArgumentTypes(), /*inputs=*/true,
      [&](unsigned i) {
        auto n = func.getArgAttrOfType<StringAttr>(i, "sparsec.name");
        return n ? n.getValue().str() : "input" + std::to_string(i);
      },
      [&](unsigned i) {
        return func.getArgAttrOfType<ArrayAttr>(i, "sparsec.dims");
      },
      deviceValues, attentionPast);
  // Output dims: the export's names (`model info` shows them; the runtime
  // binds and bounds only the inputs'), unnamed ones shown as "?".
  io(
      "kOutputs", func.getResultTypes(), /*inputs=*/false,
      [&](unsigned i) {
        auto n = func.getResultAttrOfType<StringAttr>(i, "sparsec.name");
        return n ? n.getValue().str() : "output" + std::to_string(i);
      },
      [&](unsigned i) {
        return func.getResultAttrOfType<ArrayAttr>(i, "sparsec.dims");
      },
      [](unsigned) { return false; }, [](unsigned) { return false; });

  auto slotBytes = module->getAttrOfType<DenseI64ArrayAttr>("sparsec.slot_bytes");
  ArrayRef<int64_t> sizes = slotBytes ? slotBytes.asArrayRef() : ArrayRef<int64_t>();
  os << "const int64_t kSlotBytes[] = {" << (sizes.empty() ? "0" : joinInts(sizes))
     << "};\n\n";
  auto sites = module->getAttrOfType<ArrayAttr>("sparsec.profile_sites");
  if (sites) {
    os << "const char *const kProfileSites[] = {";
    for (auto [i, s] : llvm::enumerate(sites))
      os << (i ? ", " : "") << quoted(cast<StringAttr>(s).getValue());
    os << "};\n";
  }
  uint64_t modelHash = 0;
  if (auto hash = module->getAttrOfType<StringAttr>("sparsec.model_hash"))
    modelHash = std::strtoull(hash.getValue().str().c_str(), nullptr, 16);
  auto source = module->getAttrOfType<StringAttr>("sparsec.source");
  os << "const ModelDesc kModel = {\n"
     << "    " << quoted(source ? source.getValue() : "model") << ",\n"
     << "    " << func.getNumArguments() << ", kInputs, "
     << func.getNumResults() << ", kOutputs,\n"
     << "    " << quoted(options.weightsFile) << ", " << segmentOf.size()
     << ", 0x" << llvm::format_hex_no_prefix(options.weightsChecksum, 16)
     << "ULL,\n"
     << "    " << sizes.size() << ", kSlotBytes, run,\n"
     << "    " << (sites ? sites.size() : 0) << ", "
     << (sites ? "kProfileSites" : "nullptr") << ", 0x"
     << llvm::format_hex_no_prefix(modelHash, 16) << "ULL";
  if (auto positions = module->getAttrOfType<DictionaryAttr>("sparsec.positions")) {
    auto limit = positions.getAs<IntegerAttr>("limit");
    auto rows = positions.getAs<IntegerAttr>("rows");
    auto table = positions.getAs<StringAttr>("table");
    if (limit && rows && table)
      os << ",\n    " << limit.getInt() << ", " << quoted(table.getValue())
         << ", " << rows.getInt();
  }
  os << "};\n";
}

LogicalResult Emitter::emit() {
  auto funcs = llvm::to_vector(module.getOps<func::FuncOp>());
  if (funcs.size() != 1)
    return module.emitError("expected exactly one function to emit, found ")
           << funcs.size();
  func::FuncOp func = funcs.front();
  if (!func.getBody().hasOneBlock())
    return func.emitError("expected a single-block function");
  for (GlobalOp g : module.getOps<GlobalOp>())
    segmentOf[g.getSymName()] = segmentOf.size();

  if (cuda())
    placeValues(func);
  for (auto [i, arg] : llvm::enumerate(func.getArguments())) {
    if (!dtypeOf(cast<RankedTensorType>(arg.getType()).getElementType()))
      return func.emitError("input element type ")
             << cast<RankedTensorType>(arg.getType()).getElementType()
             << " is not supported by the " << backend() << " backend";
    names[arg] = "in[" + std::to_string(i) + "]";
  }
  for (Operation &op : func.getBody().front()) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      onFail = "return false;";
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        if (onDevice.contains(v))
          body << "  if (!cuda::download(ctx, " << name(v) << ", " << i
               << ", out[" << i << "])) " << onFail << "\n";
        else
          body << "  out[" << i << "] = " << name(v) << ";\n";
      }
      continue;
    }
    if (!op.getResults().empty() && !isa<WeightOp, ConstantOp>(op) &&
        !op.hasAttr("sparsec.slots"))
      return op.emitError("has no memory slot: run sparsec-plan-memory first");
    if (failed(emitOp(&op)))
      return failure();
    if (cuda())
      copyForHost(&op);
  }

  auto source = module->getAttrOfType<StringAttr>("sparsec.source");
  os << "// Generated by sparsec from "
     << commentText(source ? source.getValue() : StringRef("<unknown>"))
     << ". Do not edit.\n"
     << "// One runtime op call per sparsec op, in execution order; tensors\n"
     << "// live in the memory slots chosen by sparsec-plan-memory.\n";
  if (cuda())
    os << "// CUDA: ops on weights and device values run on the device\n"
       << "// (cuda::), shape arithmetic on the host (ops::); `step` runs\n"
       << "// through cuda::runStep (uploads, CUDA graphs, downloads).\n";
  os << "#include \"sparsec/rt/Ops.h\"\n"
     << "#include \"sparsec/rt/Runtime.h\"\n";
  if (cuda())
    os << "#include \"sparsec/rt/cuda/Ops.h\"\n";
  os << "\n#include <cstdint>\n\n"
     << "using namespace sparsec::rt;\n\n"
     << "namespace {\n\n"
     << consts.str() << "\n"
     << "bool " << (cuda() ? "step" : "run")
     << "(Context &ctx, const Tensor *in, Tensor *out) {\n"
     << body.str() << "  return true;\n}\n\n";
  if (cuda())
    os << "bool run(Context &ctx, const Tensor *in, Tensor *out) {\n"
       << "  return cuda::runStep(ctx, in, out, step);\n}\n\n";
  emitDescription(func);
  os << "\n} // namespace\n\n"
     << "int main(int argc, char **argv) { return modelMain(argc, argv, kModel); }\n";
  return success();
}

} // namespace

LogicalResult sparsec::translateToCpp(ModuleOp module, raw_ostream &os,
                                      const CppEmitterOptions &options) {
  return Emitter(module, os, options).emit();
}

void sparsec::registerToCppTranslation() {
  static llvm::cl::opt<std::string> weightsFile(
      "sparsec-weights-file", llvm::cl::desc("Weight pack file name"),
      llvm::cl::init("model.weights"));
  auto registerTarget = [](StringRef name, StringRef description,
                           EmitTarget target) {
    TranslateFromMLIRRegistration reg(
        name, description,
        [target](Operation *op, raw_ostream &os) -> LogicalResult {
          auto module = dyn_cast<ModuleOp>(op);
          if (!module)
            return op->emitError("expected a module");
          CppEmitterOptions options;
          options.target = target;
          options.weightsFile = weightsFile;
          return translateToCpp(module, os, options);
        },
        [](DialectRegistry &registry) {
          registry.insert<SparsecDialect, func::FuncDialect>();
        });
  };
  registerTarget("sparsec-to-cpp", "Emit x86 C++ for a scheduled sparsec module",
                 EmitTarget::x86);
  registerTarget("sparsec-to-cuda",
                 "Emit CUDA C++ for a scheduled sparsec module",
                 EmitTarget::cuda);
}
