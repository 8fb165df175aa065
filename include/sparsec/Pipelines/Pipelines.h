//===- Pipelines.h - the named phase pipelines ------------------*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_PIPELINES_PIPELINES_H
#define SPARSEC_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "llvm/ADT/StringRef.h"

#include <optional>

namespace sparsec {

/// The compilation phases, in order. `--compile-to=<phase>` stops after one.
enum class Phase { Import, Raise, Schedule, Emit, Build };

std::optional<Phase> parsePhase(llvm::StringRef name);
llvm::StringRef phaseName(Phase phase);

struct RaisePipelineOptions
    : public mlir::PassPipelineOptions<RaisePipelineOptions> {
  ListOption<std::string> dims{
      *this, "dims",
      llvm::cl::desc("Pin named input dimensions (name=value) before folding")};
  Option<bool> widenAll{
      *this, "widen-all",
      llvm::cl::desc("A half-precision export becomes float32 throughout "
                     "(sparsec-widen-half all=1: the CUDA target and the "
                     "sparsity passes); otherwise only its products and "
                     "attention run in float32"),
      llvm::cl::init(false)};
  Option<bool> fuseRotary{
      *this, "fuse-rotary",
      llvm::cl::desc("Raise rotate-half rotary embeddings to sparsec.rotary "
                     "(sparsec-fuse-rotary)"),
      llvm::cl::init(true)};
};

/// raise: shape inference and folding of the shape arithmetic, then the
/// fusion pattern sets (embedding, layer_norm, gelu, rotary, linear,
/// attention).
void buildRaisePipeline(mlir::OpPassManager &pm,
                        const RaisePipelineOptions &options);

/// schedule: weight layout ([K, N], or [N, K] for device linears), activation epilogues fused into linears,
/// liveness-based memory slots.
struct SchedulePipelineOptions
    : public mlir::PassPipelineOptions<SchedulePipelineOptions> {
  Option<std::string> sparseWeights{
      *this, "sparse-weights",
      llvm::cl::desc("Storage of sparse-kernel weights: f32 or f16"),
      llvm::cl::init("f32")};
  Option<bool> hybrid{
      *this, "hybrid",
      llvm::cl::desc("Split placed FFNs into GPU and CPU parts (hybrid target)"),
      llvm::cl::init(false)};
  Option<std::string> denseWeights{
      *this, "dense-weights",
      llvm::cl::desc("Storage of linear weights: f32 or f16 (CUDA target)"),
      llvm::cl::init("f32")};
  Option<std::string> convWeights{
      *this, "conv-weights",
      llvm::cl::desc("Storage of convolution weights: f32 or f16 (CUDA "
                     "target)"),
      llvm::cl::init("f32")};
  Option<std::string> denseLayout{
      *this, "dense-layout",
      llvm::cl::desc("Layout of device linear weights: kn or nk (CUDA target)"),
      llvm::cl::init("kn")};
  Option<bool> groupLinears{
      *this, "group-linears",
      llvm::cl::desc("Group sibling linears (q, k, v) into one linear_group "
                     "(CUDA and hybrid targets)"),
      llvm::cl::init(false)};
  Option<bool> foldNorms{
      *this, "fold-norms",
      llvm::cl::desc("With group-linears: fold layer / RMS norms that only "
                     "feed linears into the groups (CUDA target)"),
      llvm::cl::init(false)};
  Option<bool> foldHeadTransposes{
      *this, "fold-head-transposes",
      llvm::cl::desc("Fold the head transposes around each attention into "
                     "its layout (sparsec-fold-head-transposes)"),
      llvm::cl::init(true)};
};

void buildSchedulePipeline(mlir::OpPassManager &pm,
                           const SchedulePipelineOptions &options = {});

/// Registers `sparsec-raise-pipeline` (and future phase pipelines) so that
/// `sparsec-opt --<pipeline>` reproduces exactly what the driver runs.
void registerSparsecPipelines();

} // namespace sparsec

#endif // SPARSEC_PIPELINES_PIPELINES_H
