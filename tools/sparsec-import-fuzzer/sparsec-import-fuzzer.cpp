//===- sparsec-import-fuzzer.cpp - libFuzzer target for the importer ------===//
//
// Part of the sparsec project.
//
// Feeds arbitrary bytes to the ONNX importer (protobuf parsing, ONNX shape
// inference, the node handlers, the verifier), runs the raise pipeline on
// whatever imports and then what `sparsec compile` runs after it (the KV
// cache derivation, exact sparsity, the schedule pipeline for the x86 or
// the CUDA target, the C++/CUDA emitter into a null stream; which of them
// is picked from the input's last byte), and scans the same bytes with
// the weight store. Any crash, sanitizer report or uncaught exception is a
// bug: bad input must only ever produce diagnostics.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"
#include "sparsec/Frontend/ONNX/Importer.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"
#include "sparsec/Pipelines/Pipelines.h"
#include "sparsec/Target/Cpp/CppEmitter.h"
#include "sparsec/Weights/WeightStore.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>
#include <memory>

using namespace mlir;

namespace {
/// Uniqued attributes and types are never freed; a fresh context every so
/// often keeps long runs within libFuzzer's memory limit.
std::unique_ptr<MLIRContext> context;
int runsOnContext = 0;

MLIRContext &getContext() {
  if (!context || ++runsOnContext > 2000) {
    context = std::make_unique<MLIRContext>();
    context->loadDialect<sparsec::SparsecDialect, func::FuncDialect>();
    context->printOpOnDiagnostic(false);
    runsOnContext = 0;
  }
  return *context;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  MLIRContext &ctx = getContext();
  ScopedDiagnosticHandler silence(&ctx, [](Diagnostic &) { return success(); });
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  sparsec::ImportOptions options;
  if (OwningOpRef<ModuleOp> module =
          sparsec::importONNXBuffer(ctx, bytes, "fuzz.onnx", options)) {
    PassManager pm(&ctx);
    sparsec::buildRaisePipeline(pm, sparsec::RaisePipelineOptions());
    if (succeeded(pm.run(*module))) {
      // The rest of `sparsec compile`, as its flags would set it up.
      const uint8_t pick = size ? data[size - 1] : 0;
      const bool cuda = pick & 1, kvCache = pick & 2, exact = pick & 4;
      PassManager later(&ctx);
      if (kvCache)
        later.addPass(sparsec::createDeriveKVCachePass());
      if (exact)
        later.addPass(sparsec::createSparsifyFFNPass());
      sparsec::SchedulePipelineOptions schedule;
      schedule.denseLayout = cuda ? "nk" : "kn";
      schedule.groupLinears = cuda;
      schedule.foldNorms = cuda && (pick & 8);
      schedule.denseWeights = cuda && (pick & 16) ? "f16" : "f32";
      schedule.sparseWeights = schedule.denseWeights.getValue();
      schedule.convWeights = schedule.denseWeights.getValue();
      sparsec::buildSchedulePipeline(later, schedule);
      if (succeeded(later.run(*module))) {
        sparsec::CppEmitterOptions emit;
        emit.target = cuda ? sparsec::EmitTarget::cuda : sparsec::EmitTarget::x86;
        (void)sparsec::translateToCpp(*module, llvm::nulls(), emit);
      }
    }
  }
  std::string error;
  (void)sparsec::WeightStore::openBuffer(data, size, error);
  return 0;
}
