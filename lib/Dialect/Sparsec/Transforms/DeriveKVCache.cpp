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
    // The decoder's token and mask inputs, by their ONNX names.
    BlockArgument ids, mask;
    for (BlockArgument arg : func.getArguments()) {
      auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "sparsec.name");
      if (name && name.getValue() == "input_ids")
        ids = arg;
      else if (name && name.getValue() == "attention_mask")
        mask = arg;
      else if (name && name.getValue().starts_with("past_key_values."))
        return func.emitError("the model already takes a KV cache ('")
               << name.getValue() << "')";
    }
    if (!ids || !mask)
      return func.emitError("deriving a KV cache needs a decoder with "
                            "input_ids and attention_mask inputs");
    SmallVector<AttentionOp> attentions;
    func.walk([&](AttentionOp a) { attentions.push_back(a); });
    if (attentions.empty())
      return func.emitError("no attention to give a KV cache (was the model "
                            "raised?)");
    for (AttentionOp a : attentions) {
      if (a.getPastKey())
        return a.emitError("this attention already has a KV cache");
      if (!a.getMask() && !a.getCausal())
        return a.emitError("an unmasked, non-causal attention is not a "
                           "causal decoder's: no KV cache can be derived");
      if (a.getMask() && !dependsOn(a.getMask(), mask))
        return a.emitError("the attention mask does not depend on "
                           "attention_mask: it would not cover past tokens");
    }
    // Position embeddings must follow the absolute positions.
    WalkResult positions = func.walk([&](EmbeddingOp e) {
      if (e.getIds() == ids)
        return WalkResult::advance();
      if (!dependsOn(e.getIds(), mask)) {
        e.emitError("these embedding ids (positions?) do not depend on "
                    "attention_mask: with a KV cache they would restart at 0");
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    if (positions.wasInterrupted())
      return failure();

    // Past inputs, present outputs, in the Optimum naming.
    Builder b(ctx);
    auto dims = [&](StringRef seq) {
      return b.getArrayAttr({b.getStringAttr("batch"), b.getStringAttr(""),
                             b.getStringAttr(seq), b.getStringAttr("")});
    };
    auto cacheType = [](Value v) {
      auto t = cast<RankedTensorType>(v.getType());
      return RankedTensorType::get({ShapedType::kDynamic, t.getDimSize(1),
                                    ShapedType::kDynamic, t.getDimSize(3)},
                                   t.getElementType());
    };
    func::ReturnOp ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    SmallVector<Value> presents;
    for (auto [i, a] : llvm::enumerate(attentions)) {
      std::string prefix = "past_key_values." + std::to_string(i) + ".";
      unsigned at = func.getNumArguments();
      RankedTensorType kType = cacheType(a.getKey()), vType = cacheType(a.getValue());
      auto attrs = [&](StringRef kind) {
        return b.getDictionaryAttr(
            {b.getNamedAttr("sparsec.name", b.getStringAttr(prefix + kind.str())),
             b.getNamedAttr("sparsec.dims", dims("past_seq"))});
      };
      if (failed(func.insertArgument(at, kType, attrs("key"), a.getLoc())) ||
          failed(func.insertArgument(at + 1, vType, attrs("value"), a.getLoc())))
        return func.emitError("cannot add the cache inputs");
      OpBuilder ob(a);
      auto cached = AttentionOp::create(
          ob, a.getLoc(), a.getResult().getType(), kType, vType, a.getQuery(),
          a.getKey(), a.getValue(), a.getMask(), func.getArgument(at),
          func.getArgument(at + 1), a.getScaleAttr(), a.getCausalAttr());
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
                  {b.getNamedAttr("sparsec.name", b.getStringAttr(name))}))))
        return func.emitError("cannot add the cache outputs");
      ret->insertOperands(ret->getNumOperands(), v);
    }
    return success();
  }
};
} // namespace
