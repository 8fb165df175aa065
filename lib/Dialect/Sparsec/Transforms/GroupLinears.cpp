//===- GroupLinears.cpp - sibling linears into one linear_group -----------===//
//
// Part of the sparsec project.
//
// Linears that read the same input with neuron-major weights (after
// sparsec-weight-layout dense-layout=nk) become one sparsec.linear_group:
// the q, k and v projections of an attention block are the usual case. A
// decode step then streams their weights in one launch. Left alone: a
// linear whose only user is an add (the CUDA emitter folds that add into
// the linear's epilogue as a residual), a hybrid FFN's CPU part, and
// linears with annotations the sparsity passes own.
//
// Then (fold-norms) a layer_norm or rms_norm over the last dimension whose
// every user is such a group or groupable linear (or a shape, which then
// reads the norm's input) is folded into them: each
// becomes a linear_group with the norm's scale, bias and epsilon, and the
// norm's own kernel (and its result's memory) disappears.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

namespace sparsec {
#define GEN_PASS_DEF_GROUPLINEARSPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
/// The most weights one group takes (the CUDA kernel's limit).
constexpr size_t kMaxGroup = 4;

/// `v` is null or made by an operand-free op in `block` (a sparsec.weight),
/// which can move up to a new user.
bool movable(Value v, Block *block) {
  if (!v)
    return true;
  Operation *def = v.getDefiningOp();
  return def && def->getNumOperands() == 0 && def->getNumRegions() == 0 &&
         def->getBlock() == block;
}

/// Moves the definition of `v` (if any) before `op` when it comes after.
void hoist(Value v, Operation *op) {
  if (Operation *def = v ? v.getDefiningOp() : nullptr)
    if (op->isBeforeInBlock(def))
      def->moveBefore(op);
}

bool groupable(LinearOp l) {
  if (!l.getTransposeWeight() || l->hasAttr("sparsity") ||
      l->hasAttr(kDeviceAttrName))
    return false;
  if (!movable(l.getWeight(), l->getBlock()) ||
      !movable(l.getBias(), l->getBlock()))
    return false;
  Value r = l.getResult();
  if (r.hasOneUse() && isa<AddOp>(*r.getUsers().begin()))
    return false; // a residual-add epilogue candidate
  return true;
}

/// The norm a group would take: scale, bias (null for none), epsilon, RMS.
struct Norm {
  Value scale, bias;
  FloatAttr epsilon;
  bool rms = false;
};

LinearGroupOp createGroup(OpBuilder &b, Location loc, TypeRange types,
                          Value input, const Norm *norm, ValueRange weights,
                          ValueRange biases, ActivationAttr act) {
  return LinearGroupOp::create(b, loc, types, input,
                               norm ? norm->scale : Value(),
                               norm ? norm->bias : Value(), weights, biases,
                               norm ? norm->epsilon : FloatAttr(),
                               norm && norm->rms, act);
}

struct GroupLinearsPass
    : sparsec::impl::GroupLinearsPassBase<GroupLinearsPass> {
  using GroupLinearsPassBase::GroupLinearsPassBase;

  void runOnOperation() override {
    getOperation().walk([&](func::FuncOp func) {
      for (Block &block : func.getBody()) {
        groupBlock(block);
        if (foldNorms)
          foldBlockNorms(block);
      }
    });
  }

  void groupBlock(Block &block) {
    // Candidates by (input, weight dtype, bias or not, activation), in
    // block order.
    using Key = std::tuple<Value, Type, int, Attribute>;
    llvm::MapVector<Key, SmallVector<LinearOp>> groups;
    for (Operation &op : block)
      if (auto l = dyn_cast<LinearOp>(op); l && groupable(l))
        groups[{l.getInput(),
                cast<RankedTensorType>(l.getWeight().getType()).getElementType(),
                l.getBias() ? 1 : 0, l.getActivationAttr()}]
            .push_back(l);
    for (auto &entry : groups) {
      ArrayRef<LinearOp> all = entry.second;
      for (size_t i = 0; i + 1 < all.size(); i += kMaxGroup)
        build(all.slice(i, std::min(kMaxGroup, all.size() - i)));
    }
  }

  void build(ArrayRef<LinearOp> members) {
    if (members.size() < 2)
      return;
    LinearOp first = members.front();
    SmallVector<Value> weights, biases;
    SmallVector<Type> types;
    for (LinearOp l : members) {
      hoist(l.getWeight(), first);
      hoist(l.getBias(), first);
      weights.push_back(l.getWeight());
      if (l.getBias())
        biases.push_back(l.getBias());
      types.push_back(l.getResult().getType());
    }
    OpBuilder b(first);
    LinearGroupOp group =
        createGroup(b, first.getLoc(), types, first.getInput(), nullptr,
                    weights, biases, first.getActivationAttr());
    for (size_t i = 0; i < members.size(); ++i) {
      LinearOp l = members[i];
      l.getResult().replaceAllUsesWith(group.getResult(unsigned(i)));
      l.erase();
    }
    ++numGroups;
    numLinears += members.size();
  }

  /// The norm of `op` (a layer_norm or rms_norm over the last dimension
  /// with movable parameters), or nothing.
  static std::optional<Norm> normOf(Operation *op) {
    Norm n;
    if (auto ln = dyn_cast<LayerNormOp>(op)) {
      int64_t rank = ln.getInput().getType().getRank();
      const int64_t axis = static_cast<int64_t>(ln.getAxis()); // I64Attr
      if (axis != -1 && axis != rank - 1)
        return std::nullopt;
      n.scale = ln.getScale();
      n.bias = ln.getBias();
      n.epsilon = ln.getEpsilonAttr();
    } else if (auto rms = dyn_cast<RmsNormOp>(op)) {
      n.scale = rms.getScale();
      n.epsilon = rms.getEpsilonAttr();
      n.rms = true;
    } else {
      return std::nullopt;
    }
    for (Value v : {n.scale, n.bias}) {
      if (v && (!movable(v, op->getBlock()) ||
                cast<RankedTensorType>(v.getType()).getRank() != 1))
        return std::nullopt;
    }
    return n;
  }

  void foldBlockNorms(Block &block) {
    SmallVector<Operation *> norms;
    for (Operation &op : block)
      if (isa<LayerNormOp, RmsNormOp>(op))
        norms.push_back(&op);
    for (Operation *op : norms) {
      std::optional<Norm> norm = normOf(op);
      Value out = op->getResult(0);
      if (!norm || out.use_empty())
        continue;
      bool all = llvm::all_of(out.getUsers(), [&](Operation *u) {
        if (isa<ShapeOp>(u))
          return true; // reads only the dims, which the input has too
        if (auto g = dyn_cast<LinearGroupOp>(u))
          return g.getInput() == out && !g.getNormScale();
        auto l = dyn_cast<LinearOp>(u);
        return l && l.getInput() == out && groupable(l);
      });
      if (!all)
        continue;
      Value input = op->getOperand(0);
      SmallVector<Operation *> users(out.getUsers());
      for (Operation *u : users) {
        if (isa<ShapeOp>(u)) {
          u->replaceUsesOfWith(out, input);
          continue;
        }
        OpBuilder b(u);
        hoist(norm->scale, u);
        hoist(norm->bias, u);
        LinearGroupOp folded;
        if (auto g = dyn_cast<LinearGroupOp>(u)) {
          folded = createGroup(b, g.getLoc(), g.getResultTypes(), input,
                               &*norm, g.getWeights(), g.getBiases(),
                               g.getActivationAttr());
        } else {
          auto l = cast<LinearOp>(u);
          SmallVector<Value> biases;
          if (l.getBias())
            biases.push_back(l.getBias());
          folded = createGroup(b, l.getLoc(), l.getResult().getType(), input,
                               &*norm, ValueRange{l.getWeight()}, biases,
                               l.getActivationAttr());
        }
        u->replaceAllUsesWith(folded.getResults());
        u->erase();
      }
      op->erase();
      ++numNorms;
    }
  }
};
} // namespace
