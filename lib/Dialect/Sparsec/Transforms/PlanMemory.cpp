//===- PlanMemory.cpp - liveness-based slot assignment -------------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

namespace sparsec {
#define GEN_PASS_DEF_PLANMEMORYPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
/// Bytes of a tensor type, or -1 when a dimension is dynamic. Booleans take
/// one byte per element.
int64_t bytesOf(Type type) {
  auto t = cast<RankedTensorType>(type);
  if (!t.hasStaticShape())
    return -1;
  unsigned bits = t.getElementTypeBitWidth();
  return t.getNumElements() * std::max<int64_t>(1, (bits + 7) / 8);
}

/// Values that need no slot: views of weights, constants and arguments.
bool needsSlot(Value v) {
  Operation *def = v.getDefiningOp();
  return def && !isa<WeightOp, ConstantOp>(def);
}

struct Slot {
  int64_t bytes = 0;   // largest static size placed so far
  bool dynamic = false; // some value in it has a dynamic size
};

struct PlanMemoryPass
    : public sparsec::impl::PlanMemoryPassBase<PlanMemoryPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<Slot> slots;
    getOperation().walk([&](func::FuncOp func) { plan(func, slots); });
    SmallVector<int64_t> sizes;
    for (const Slot &s : slots) {
      sizes.push_back(s.dynamic ? -1 : s.bytes);
      if (!s.dynamic)
        staticBytes += s.bytes;
    }
    numSlots = slots.size();
    getOperation()->setAttr("sparsec.slot_bytes",
                            Builder(&getContext()).getDenseI64ArrayAttr(sizes));
  }

  void plan(func::FuncOp func, SmallVectorImpl<Slot> &slots) {
    Block &body = func.getBody().front();
    // Last use position of every value, in block order; results of the
    // function stay live to the end.
    DenseMap<Operation *, int64_t> position;
    int64_t pos = 0;
    for (Operation &op : body)
      position[&op] = pos++;
    DenseMap<Value, int64_t> lastUse;
    for (Operation &op : body)
      for (Value operand : op.getOperands())
        lastUse[operand] = position[&op];
    Operation *ret = body.getTerminator();
    for (Value v : ret->getOperands())
      lastUse[v] = pos;
    // A batch norm computed with the convolution it follows (see
    // BatchNormOp::getFoldableConv) writes its result while the
    // convolution reads its input: the input stays live until the norm.
    for (Operation &op : body)
      if (auto bn = dyn_cast<BatchNormOp>(op))
        if (ConvOp conv = bn.getFoldableConv()) {
          int64_t &end = lastUse[conv.getInput()];
          end = std::max(end, position[&op]);
        }
    // A reshape's result is a view of its input, and so is a transpose's
    // when only unit dims move (decided at run time, e.g. the head
    // transposes of a decode step): the input stays live while the result
    // (or a view of it) is. Reverse order carries chains of such views.
    for (Operation &op : llvm::reverse(body)) {
      if (!isa<ReshapeOp, UnsqueezeOp, SqueezeOp, FlattenOp, TransposeOp>(op))
        continue;
      auto it = lastUse.find(op.getResult(0));
      if (it == lastUse.end())
        continue;
      int64_t &in = lastUse[op.getOperand(0)];
      in = std::max(in, it->second);
    }

    // The FFNs the CUDA backend computes in one call, whose kernels write
    // the down projection's base while earlier values are still read: those
    // stay live until the down projection, and through a residual add after
    // it (which the backend folds into the down projection), so that
    // neither result takes their memory.
    for (Operation &op : body) {
      auto down = dyn_cast<SparseLinearOp>(op);
      if (!down || down.getSparseDim() != SparseDim::input)
        continue;
      int64_t until = position[&op];
      if (down->hasOneUse() && isa<AddOp>(*down->getUsers().begin()))
        until = std::max(until, position[*down->getUsers().begin()]);
      auto keepLive = [&](std::initializer_list<Value> values) {
        for (Value v : values) {
          int64_t &end = lastUse[v];
          end = std::max(end, until);
        }
      };
      // A sparse FFN, down(up(x)), the up projection output-sparse over an
      // active set (the emitter's fusedDown, with the predictor too): x and
      // the up projection's result.
      if (auto up = down.getInput().getDefiningOp<SparseLinearOp>()) {
        if (!down.getActive() && up.getSparseDim() == SparseDim::output &&
            up.getActive() && up->hasOneUse())
          keepLive({up.getInput(), up.getResult()});
        continue;
      }
      // A gated MLP, down(gate * up), the up projection output-sparse over
      // a mask of the gate (cuda::gatedFfn): the up projection's input and
      // mask, the gate, the up projection and the product.
      auto mul = down.getInput().getDefiningOp<MulOp>();
      if (!mul)
        continue;
      for (Value factor : mul->getOperands()) {
        // The up projection: output-sparse over the gate's mask,
        // compare(gate, 0) or its negation. (A predicted gate projection is
        // output-sparse too, over the predictor's mask.)
        auto up = factor.getDefiningOp<SparseLinearOp>();
        if (!up || up.getSparseDim() != SparseDim::output || !up.getActive())
          continue;
        Value gate = mul.getLhs() == factor ? mul.getRhs() : mul.getLhs();
        Value mask = up.getActive();
        if (auto negated = mask.getDefiningOp<NotOp>())
          mask = negated.getInput();
        auto compare = mask.getDefiningOp<CompareOp>();
        if (!compare || compare.getLhs() != gate)
          continue;
        keepLive(
            {gate, factor, up.getInput(), up.getActive(), mul.getResult()});
        break;
      }
    }

    // Slots whose live range ends at each position, freed after the op
    // (a stale entry, for a slot whose range was extended, is skipped).
    DenseMap<int64_t, SmallVector<int64_t>> endsAt;
    DenseMap<int64_t, int64_t> slotEnd;
    DenseMap<Value, int64_t> slotOf;
    SmallVector<int64_t> freeSlots;
    Builder b(&getContext());
    auto endOf = [&](Value v, Operation *op) {
      auto it = lastUse.find(v);
      // An unused result frees its slot right after the op.
      return it == lastUse.end() ? position[op] : it->second;
    };
    for (Operation &op : body) {
      if (&op == ret)
        break;
      SmallVector<int64_t> assigned;
      // Reshapes are views: the result shares its input's slot (the
      // runtimes skip the copy), which stays live until both are dead.
      if (isa<ReshapeOp, UnsqueezeOp, SqueezeOp, FlattenOp>(op) &&
          slotOf.count(op.getOperand(0))) {
        int64_t shared = slotOf[op.getOperand(0)];
        Value result = op.getResult(0);
        slotOf[result] = shared;
        int64_t end = std::max(slotEnd[shared], endOf(result, &op));
        slotEnd[shared] = end;
        endsAt[end].push_back(shared);
        op.setAttr("sparsec.slots", b.getDenseI64ArrayAttr({shared}));
        ++numViews;
        continue;
      }
      for (Value result : op.getResults()) {
        if (!needsSlot(result)) {
          assigned.push_back(-1);
          continue;
        }
        // Types past 2^48 elements are rejected where they are made (the
        // importer, shape inference); one that slipped through is reported
        // here rather than sized with an overflowing product.
        auto type = cast<RankedTensorType>(result.getType());
        if (!staticSizesWithinLimit(type.getShape())) {
          op.emitOpError("result ")
              << cast<OpResult>(result).getResultNumber() << " of type " << type
              << " is too large: its non-zero sizes multiply to more than 2^48";
          signalPassFailure();
          return;
        }
        int64_t bytes = bytesOf(type);
        int64_t chosen = pickSlot(freeSlots, slots, bytes);
        if (chosen < 0) {
          chosen = slots.size();
          slots.push_back(Slot());
        } else {
          freeSlots.erase(llvm::find(freeSlots, chosen));
        }
        Slot &slot = slots[chosen];
        if (bytes < 0)
          slot.dynamic = true;
        else
          slot.bytes = std::max(slot.bytes, bytes);
        slotOf[result] = chosen;
        assigned.push_back(chosen);
        ++numValues;
        int64_t end = endOf(result, &op);
        slotEnd[chosen] = end;
        endsAt[end].push_back(chosen);
      }
      if (!op.getResults().empty())
        op.setAttr("sparsec.slots", b.getDenseI64ArrayAttr(assigned));
      // Slots whose values all had their last use at this op become free
      // after it; an op never writes a slot it is still reading.
      for (int64_t dead : endsAt.lookup(position[&op]))
        if (slotEnd[dead] == position[&op] && !llvm::is_contained(freeSlots, dead))
          freeSlots.push_back(dead);
    }
  }

  /// Best fit among free slots: the smallest static slot that holds
  /// `bytes`, else the largest one (it grows); dynamic values prefer
  /// dynamic slots. -1 when none is free.
  static int64_t pickSlot(ArrayRef<int64_t> freeSlots, ArrayRef<Slot> slots,
                          int64_t bytes) {
    int64_t best = -1;
    for (int64_t s : freeSlots) {
      const Slot &slot = slots[s];
      if (best < 0) {
        best = s;
        continue;
      }
      const Slot &cur = slots[best];
      if (bytes < 0) {
        if (slot.dynamic && !cur.dynamic)
          best = s;
        continue;
      }
      bool fits = !slot.dynamic && slot.bytes >= bytes;
      bool curFits = !cur.dynamic && cur.bytes >= bytes;
      if (fits && (!curFits || slot.bytes < cur.bytes))
        best = s;
      else if (!fits && !curFits && !slot.dynamic && slot.bytes > cur.bytes)
        best = s;
    }
    return best;
  }
};
} // namespace
