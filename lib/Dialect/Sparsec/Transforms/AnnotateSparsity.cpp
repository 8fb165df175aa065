//===- AnnotateSparsity.cpp - measured sparsity onto activation ops ------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "SparsitySites.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"
#include "sparsec/rt/Profile.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <functional>

namespace sparsec {
#define GEN_PASS_DEF_ANNOTATESPARSITYPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
struct AnnotateSparsityPass
    : public sparsec::impl::AnnotateSparsityPassBase<AnnotateSparsityPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    rt::Profile prof;
    if (failed(loadProfileFor(module, getArgument(), profile, prof)))
      return signalPassFailure();
    int64_t index = 0;
    WalkResult result = module.walk([&](Operation *op) {
      if (!isSparsitySite(op))
        return WalkResult::advance();
      std::string name = siteName(op, index++);
      const rt::ProfileSite *site = prof.find(name);
      if (!site) {
        op->emitError("activation site '")
            << name << "' is not in profile '" << profile << "'";
        return WalkResult::interrupt();
      }
      auto type = cast<RankedTensorType>(op->getResult(0).getType());
      int64_t neurons = type.getShape().back();
      if (!ShapedType::isDynamic(neurons) && neurons != site->neurons) {
        op->emitError("profile site '")
            << name << "' has " << site->neurons << " neurons, the model "
            << neurons;
        return WalkResult::interrupt();
      }
      op->setAttr("sparsity", statistics(*site));
      ++numAnnotated;
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }

  ActSparsityAttr statistics(const rt::ProfileSite &site) {
    std::vector<uint64_t> counts = site.counts;
    double active = 0;
    for (uint64_t c : counts)
      active += static_cast<double>(c);
    double total = static_cast<double>(site.tokens) * site.neurons;
    double zeroFraction = total > 0 ? 1.0 - active / total : 0.0;
    std::sort(counts.begin(), counts.end(), std::greater<uint64_t>());
    size_t top = std::max<size_t>(1, (counts.size() * 20 + 99) / 100);
    double topActive = 0;
    for (size_t i = 0; i < top && i < counts.size(); ++i)
      topActive += static_cast<double>(counts[i]);
    double topShare = active > 0 ? topActive / active : 0.0;
    return ActSparsityAttr::get(
        &getContext(), llvm::APFloat(std::clamp(zeroFraction, 0.0, 1.0)),
        Granularity::neuron, SparsitySource::profile, site.tokens,
        llvm::APFloat(std::clamp(topShare, 0.0, 1.0)));
  }
};
} // namespace
