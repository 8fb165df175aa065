//===- DeriveKVCache.cpp - incremental decoding for no-cache exports ------===//
//
// Part of the sparsec project.
//
// See the pass description (Passes.td) and docs/Decoding.md.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <optional>

namespace sparsec {
#define GEN_PASS_DEF_DERIVEKVCACHEPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {

/// Whether `v` is computed (transitively) from block argument `arg`.
bool dependsOn(Value v, BlockArgument arg) {
  llvm::SetVector<Value> work;
  work.insert(v);
  for (size_t i = 0; i < work.size(); ++i) {
    Value cur = work[i];
    if (cur == arg)
      return true;
    if (Operation *def = cur.getDefiningOp())
      for (Value operand : def->getOperands())
        work.insert(operand);
  }
  return false;
}

/// `range(start, limit, 1)` unsqueezed at `axis` ([n, 1] rows or [1, n]
/// columns of the positions start..limit-1); the range, or null.
RangeOp unsqueezedRange(Value v, int64_t axis) {
  auto u = v.getDefiningOp<UnsqueezeOp>();
  if (!u || u.getAxes().size() != 1 || u.getAxes()[0] != axis)
    return nullptr;
  auto r = u.getInput().getDefiningOp<RangeOp>();
  if (!r || scalarValue(r.getDelta()) != 1.0)
    return nullptr;
  return r;
}

/// A causal mask computed from the token count alone, as LLaMA-style
/// exports without an attention_mask build it: where(cols > rows, -big, 0)
/// (or rows < cols), rows and cols the same positions 0..seq-1, -big at
/// most -1e4. With past tokens it would cover only the new ones; the
/// attention's `causal` flag is the same mask, offset for the past.
bool isCausalMask(Value mask) {
  auto where = mask.getDefiningOp<WhereOp>();
  if (!where)
    return false;
  std::optional<double> masked = scalarValue(where.getX()), kept = scalarValue(where.getY());
  auto cond = where.getCondition().getDefiningOp<CompareOp>();
  if (!masked || !kept || *masked > -1e4 || *kept != 0.0 || !cond)
    return false;
  Value cols = cond.getLhs(), rows = cond.getRhs();
  if (cond.getPredicate() == ComparePredicate::lt)
    std::swap(cols, rows);
  else if (cond.getPredicate() != ComparePredicate::gt)
    return false;
  RangeOp c = unsqueezedRange(cols, 0), r = unsqueezedRange(rows, 1);
  return c && r && c.getLimit() == r.getLimit() &&
         (c.getStart() == r.getStart() ||
          (scalarValue(c.getStart()) && scalarValue(c.getStart()) == scalarValue(r.getStart())));
}

struct DeriveKVCachePass
    : public sparsec::impl::DeriveKVCachePassBase<DeriveKVCachePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    for (func::FuncOp func : module.getOps<func::FuncOp>())
      if (failed(derive(func, ctx)))
        return signalPassFailure();
  }

  LogicalResult derive(func::FuncOp func, MLIRContext *ctx) {
    // The decoder's token, mask and position inputs, by their ONNX names.
    // Optimum exports take attention_mask (positions derived from it);
    // LLaMA-style ones may take only position_ids, with causal attention.
    BlockArgument ids, mask, positions;
    for (BlockArgument arg : func.getArguments()) {
      auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "sparsec.name");
      if (name && name.getValue() == "input_ids")
        ids = arg;
      else if (name && name.getValue() == "attention_mask")
        mask = arg;
      else if (name && name.getValue() == "position_ids")
        positions = arg;
      else if (name && name.getValue().starts_with("past_key_values."))
        return func.emitError("the model already takes a KV cache ('")
               << name.getValue() << "')";
    }
    if (!ids || (!mask && !positions))
      return func.emitError("deriving a KV cache needs a decoder with an "
                            "input_ids input and an attention_mask or "
                            "position_ids input");
    SmallVector<AttentionOp> attentions;
    func.walk([&](AttentionOp a) { attentions.push_back(a); });
    // Attentions whose mask is a plain causal one: they become causal.
    llvm::SmallPtrSet<Operation *, 8> toCausal;
    if (attentions.empty())
      return func.emitError("no attention to give a KV cache (was the model "
                            "raised?)");
    for (AttentionOp a : attentions) {
      if (a.getPastKey())
        return a.emitError("this attention already has a KV cache");
      if (!a.getMask() && !a.getCausal())
        return a.emitError("an unmasked, non-causal attention is not a "
                           "causal decoder's: no KV cache can be derived");
      if (a.getMask() && (!mask || !dependsOn(a.getMask(), mask))) {
        if (isCausalMask(a.getMask())) {
          toCausal.insert(a);
          continue;
        }
        return a.emitError("the attention mask does not depend on "
                           "attention_mask: it would not cover past tokens");
      }
    }
    // Positions must follow the absolute positions: position embeddings
    // and rotary angles come from attention_mask or position_ids.
    auto absolute = [&](Value v) {
      return (mask && dependsOn(v, mask)) || (positions && dependsOn(v, positions));
    };
    WalkResult walk = func.walk([&](Operation *op) {
      if (auto e = dyn_cast<EmbeddingOp>(op);
          e && e.getIds() != ids && !absolute(e.getIds())) {
        e.emitError("these embedding ids (positions?) do not depend on "
                    "attention_mask or position_ids: with a KV cache they "
                    "would restart at 0");
        return WalkResult::interrupt();
      }
      if (isa<SinOp, CosOp>(op) && !absolute(op->getOperand(0))) {
        op->emitError("these rotary angles do not depend on attention_mask "
                      "or position_ids: with a KV cache they would restart "
                      "at 0");
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();

    // Past inputs, present outputs, in the Optimum naming.
    Builder b(ctx);
    auto dims = [&](StringRef seq) {
      return b.getArrayAttr({b.getStringAttr("batch"), b.getStringAttr(""),
                             b.getStringAttr(seq), b.getStringAttr("")});
    };
    // [batch, H, past_seq, D] whatever the new keys' layout.
    auto cacheType = [](AttentionOp a, Value v) {
      auto t = cast<RankedTensorType>(v.getType());
      return RankedTensorType::get({ShapedType::kDynamic,
                                    t.getDimSize(a.getTokenMajor() ? 2 : 1),
                                    ShapedType::kDynamic, t.getDimSize(3)},
                                   t.getElementType());
    };
    func::ReturnOp ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    SmallVector<Value> presents;
    for (auto [i, a] : llvm::enumerate(attentions)) {
      std::string prefix = "past_key_values." + std::to_string(i) + ".";
      unsigned at = func.getNumArguments();
      RankedTensorType kType = cacheType(a, a.getKey()),
                       vType = cacheType(a, a.getValue());
      auto attrs = [&](StringRef kind) {
        return b.getDictionaryAttr(
            {b.getNamedAttr("sparsec.name", b.getStringAttr(prefix + kind.str())),
             b.getNamedAttr("sparsec.dims", dims("past_seq"))});
      };
      if (failed(func.insertArgument(at, kType, attrs("key"), a.getLoc())) ||
          failed(func.insertArgument(at + 1, vType, attrs("value"), a.getLoc())))
        return func.emitError("cannot add the cache inputs");
      OpBuilder ob(a);
      const bool causal = toCausal.contains(a);
      auto cached = AttentionOp::create(
          ob, a.getLoc(), a.getResult().getType(), kType, vType, a.getQuery(),
          a.getKey(), a.getValue(), causal ? Value() : a.getMask(),
          func.getArgument(at), func.getArgument(at + 1), a.getScaleAttr(),
          causal ? UnitAttr::get(ctx) : a.getCausalAttr(),
          a.getTokenMajorAttr());
      a.getResult().replaceAllUsesWith(cached.getResult());
      a->erase();
      presents.push_back(cached.getPresentKey());
      presents.push_back(cached.getPresentValue());
      ++numCached;
    }
    for (auto [j, v] : llvm::enumerate(presents)) {
      std::string name = "present." + std::to_string(j / 2) +
                         (j % 2 ? ".value" : ".key");
      unsigned at = func.getNumResults();
      if (failed(func.insertResult(
              at, v.getType(),
              b.getDictionaryAttr(
                  {b.getNamedAttr("sparsec.name", b.getStringAttr(name)),
                   b.getNamedAttr("sparsec.dims", dims("past_seq + seq"))}))))
        return func.emitError("cannot add the cache outputs");
      ret->insertOperands(ret->getNumOperands(), v);
    }
    return success();
  }
};
} // namespace
