//===- Pipelines.cpp - the named phase pipelines -------------------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Pipelines/Pipelines.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace sparsec;

std::optional<Phase> sparsec::parsePhase(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<Phase>>(name)
      .Case("import", Phase::Import)
      .Case("raise", Phase::Raise)
      .Case("schedule", Phase::Schedule)
      .Case("emit", Phase::Emit)
      .Case("build", Phase::Build)
      .Default(std::nullopt);
}

llvm::StringRef sparsec::phaseName(Phase phase) {
  switch (phase) {
  case Phase::Import:
    return "import";
  case Phase::Raise:
    return "raise";
  case Phase::Schedule:
    return "schedule";
  case Phase::Emit:
    return "emit";
  case Phase::Build:
    return "build";
  }
  return "unknown";
}

void sparsec::buildRaisePipeline(OpPassManager &pm,
                                 const RaisePipelineOptions &options) {
  InferShapesPassOptions inferOptions;
  inferOptions.dims.assign(options.dims.begin(), options.dims.end());
  pm.addPass(createInferShapesPass(inferOptions));
  pm.addPass(createFoldConstantsPass());
  pm.addPass(createRaiseEmbeddingPass());
  pm.addPass(createGatherToSlicePass());
  pm.addPass(createFuseLayerNormPass());
  pm.addPass(createFuseGeluPass());
  if (options.fuseRotary)
    pm.addPass(createFuseRotaryPass());
  pm.addPass(createFuseLinearPass());
  pm.addPass(createFuseAttentionPass());
  pm.addPass(createGroupKVHeadsPass());
  WidenHalfPassOptions widen;
  widen.all = options.widenAll;
  pm.addPass(createWidenHalfPass(widen));
  pm.addPass(createFoldConstantsPass());
  pm.addPass(createCSEPass());
}

void sparsec::buildSchedulePipeline(OpPassManager &pm,
                                    const SchedulePipelineOptions &options) {
  // First: the fused lookups of the passes below carry the same ids.
  pm.addPass(createBoundPositionsPass());
  if (options.hybrid)
    pm.addPass(createSplitHotColdPass());
  WeightLayoutPassOptions layout;
  layout.sparseWeights = options.sparseWeights;
  layout.denseWeights = options.denseWeights;
  layout.convWeights = options.convWeights;
  layout.denseLayout = options.denseLayout;
  pm.addPass(createWeightLayoutPass(layout));
  pm.addPass(createFuseEpiloguePass());
  pm.addPass(createFuseEmbeddingSumPass());
  if (options.foldHeadTransposes)
    pm.addPass(createFoldHeadTransposesPass());
  if (options.groupLinears) {
    GroupLinearsPassOptions group;
    group.foldNorms = options.foldNorms;
    pm.addPass(createGroupLinearsPass(group));
  }
  pm.addPass(createCSEPass());
  pm.addPass(createPlanMemoryPass());
}

void sparsec::registerSparsecPipelines() {
  PassPipelineRegistration<RaisePipelineOptions>(
      "sparsec-raise-pipeline",
      "Shape inference, shape-arithmetic folding and layer fusion (the raise "
      "phase)",
      buildRaisePipeline);
  PassPipelineRegistration<SchedulePipelineOptions>(
      "sparsec-schedule-pipeline",
      "Weight layout, epilogue fusion and memory planning (the schedule "
      "phase)",
      buildSchedulePipeline);
}
