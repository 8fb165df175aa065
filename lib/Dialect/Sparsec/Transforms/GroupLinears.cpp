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

bool groupable(LinearOp l) {
  if (!l.getTransposeWeight() || l->hasAttr("sparsity") ||
      l->hasAttr("sparsec.device"))
    return false;
  // Weights and biases must be operand-free ops (sparsec.weight) so that
  // they can move to the group's position.
  for (Value v : {l.getWeight(), l.getBias()}) {
    if (!v)
      continue;
    Operation *def = v.getDefiningOp();
    if (!def || def->getNumOperands() != 0 || def->getNumRegions() != 0 ||
        def->getBlock() != l->getBlock())
      return false;
  }
  Value r = l.getResult();
  if (r.hasOneUse() && isa<AddOp>(*r.getUsers().begin()))
    return false; // a residual-add epilogue candidate
  return true;
}

struct GroupLinearsPass
    : sparsec::impl::GroupLinearsPassBase<GroupLinearsPass> {
  void runOnOperation() override {
    getOperation().walk([&](func::FuncOp func) {
      for (Block &block : func.getBody())
        groupBlock(block);
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
      for (Value v : {l.getWeight(), l.getBias()})
        if (v && first->isBeforeInBlock(v.getDefiningOp()))
          v.getDefiningOp()->moveBefore(first);
      weights.push_back(l.getWeight());
      if (l.getBias())
        biases.push_back(l.getBias());
      types.push_back(l.getResult().getType());
    }
    OpBuilder b(first);
    auto group = LinearGroupOp::create(b, first.getLoc(), types,
                                       first.getInput(), weights, biases,
                                       first.getActivationAttr());
    for (size_t i = 0; i < members.size(); ++i) {
      LinearOp l = members[i];
      l.getResult().replaceAllUsesWith(group.getResult(unsigned(i)));
      l.erase();
    }
    ++numGroups;
    numLinears += members.size();
  }
};
} // namespace
