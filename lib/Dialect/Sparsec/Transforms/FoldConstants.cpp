//===- FoldConstants.cpp - evaluate shape arithmetic ---------------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace sparsec {
#define GEN_PASS_DEF_FOLDCONSTANTSPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

LogicalResult sparsec::foldConstants(ModuleOp module) {
  RewritePatternSet empty(module.getContext());
  FrozenRewritePatternSet patterns(std::move(empty));
  // Folding makes shapes static, static shapes make more ops foldable:
  // iterate to a fixed point (bounded, each round shrinks the graph).
  for (int round = 0; round < 16; ++round) {
    int64_t refined = inferShapes(module);
    bool changed = false;
    if (failed(applyPatternsGreedily(module, patterns, GreedyRewriteConfig(),
                                     &changed)))
      return failure();
    if (!changed && refined == 0)
      break;
  }
  return success();
}

namespace {
struct FoldConstantsPass
    : public sparsec::impl::FoldConstantsPassBase<FoldConstantsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto countOps = [&] {
      int64_t n = 0;
      module.walk([&](Operation *) { ++n; });
      return n;
    };
    int64_t before = countOps();
    if (failed(foldConstants(module))) {
      module.emitError("constant folding did not converge");
      return signalPassFailure();
    }
    numFolded += before - countOps();
  }
};
} // namespace
