//===- sparsec.cpp - the sparsec compiler driver -------------------------===//
//
// Part of the sparsec project.
//
// `sparsec import model.onnx` imports and raises a model and prints the IR.
// Each phase can be stopped at with --compile-to=<phase>.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"
#include "sparsec/Frontend/ONNX/Importer.h"
#include "sparsec/Pipelines/Pipelines.h"
#include "sparsec/Weights/WeightStore.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <chrono>

using namespace mlir;
namespace cl = llvm::cl;

namespace {
cl::OptionCategory category("sparsec options");

cl::SubCommand importCmd("import",
                         "Import an ONNX model and print its sparsec IR");

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.onnx>"),
                               cl::sub(importCmd), cl::cat(category));
cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"),
                                cl::sub(importCmd), cl::cat(category));
cl::opt<std::string>
    compileTo("compile-to",
              cl::desc("Stop after this phase: import (one op per ONNX node) "
                       "or raise (fused layers; the default)"),
              cl::value_desc("phase"), cl::init("raise"), cl::sub(importCmd),
              cl::cat(category));
cl::list<std::string>
    dims("dims",
         cl::desc("Pin named input dimensions, e.g. --dims=batch=1,seq=71"),
         cl::value_desc("name=value,..."), cl::CommaSeparated,
         cl::sub(importCmd), cl::cat(category));
cl::opt<bool> listOps("list-ops",
                      cl::desc("Print the supported ONNX op types and exit"),
                      cl::sub(importCmd), cl::cat(category));
cl::opt<bool> verbose("v", cl::desc("Print each phase and its time to stderr"),
                      cl::sub(importCmd), cl::cat(category));
cl::opt<bool> noShapeInference(
    "no-onnx-shape-inference",
    cl::desc("Do not run ONNX shape inference before importing"),
    cl::sub(importCmd), cl::cat(category));

/// Checks that every declared weight resolves in the memory-mapped weight
/// store with the declared shape and element size, so a model whose weight
/// data is missing or corrupt is rejected at import, not at run time.
LogicalResult checkWeights(ModuleOp module, llvm::StringRef path) {
  std::string error;
  std::unique_ptr<sparsec::WeightStore> store =
      sparsec::WeightStore::open(path.str(), error);
  if (!store)
    return emitError(module.getLoc(), "weight store: ") << error;
  WalkResult result = module.walk([&](sparsec::GlobalOp global) {
    const sparsec::TensorView *view = store->get(global.getSource(), error);
    if (!view) {
      emitError(global.getLoc(), "weight '") << global.getSource() << "': " << error;
      return WalkResult::interrupt();
    }
    auto type = cast<RankedTensorType>(global.getType());
    unsigned bits = type.getElementTypeBitWidth();
    size_t bytes = type.getNumElements() * std::max<size_t>(1, bits / 8);
    if (llvm::ArrayRef<int64_t>(view->dims) != type.getShape() ||
        view->numBytes != bytes) {
      emitError(global.getLoc(), "weight '")
          << global.getSource() << "' in the model file does not match its "
          << "declared type " << type;
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

class PhaseTimer {
public:
  explicit PhaseTimer(llvm::StringRef name)
      : name(name.str()), start(std::chrono::steady_clock::now()) {
    if (verbose)
      llvm::errs() << "[sparsec] " << name << " ...\n";
  }
  ~PhaseTimer() {
    if (!verbose)
      return;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                             start)
                   .count();
    llvm::errs() << "[sparsec] " << name << " done in "
                 << llvm::format("%.3f", s) << " s\n";
  }

private:
  std::string name;
  std::chrono::steady_clock::time_point start;
};

int runImport(MLIRContext &context) {
  if (listOps) {
    for (const std::string &op : sparsec::supportedONNXOps())
      llvm::outs() << op << "\n";
    return 0;
  }
  if (inputFile.empty()) {
    llvm::WithColor::error(llvm::errs(), "sparsec")
        << "import needs a model: sparsec import <model.onnx>\n";
    return 1;
  }
  std::optional<sparsec::Phase> stopAfter = sparsec::parsePhase(compileTo);
  if (!stopAfter) {
    llvm::WithColor::error(llvm::errs(), "sparsec")
        << "unknown phase '" << compileTo
        << "' for --compile-to (expected import or raise)\n";
    return 1;
  }

  sparsec::ImportOptions options;
  options.onnxShapeInference = !noShapeInference;
  OwningOpRef<ModuleOp> module;
  {
    PhaseTimer timer("import");
    module = sparsec::importONNXFile(context, inputFile, options);
  }
  if (!module)
    return 1;
  {
    PhaseTimer timer("check weights");
    if (failed(checkWeights(*module, inputFile)))
      return 1;
  }

  if (*stopAfter >= sparsec::Phase::Raise) {
    PhaseTimer timer("raise");
    PassManager pm(&context);
    sparsec::RaisePipelineOptions raiseOptions;
    raiseOptions.dims = llvm::ArrayRef<std::string>(dims);
    sparsec::buildRaisePipeline(pm, raiseOptions);
    if (failed(pm.run(*module)))
      return 1;
  }

  std::string error;
  auto output = openOutputFile(outputFile, &error);
  if (!output) {
    llvm::WithColor::error(llvm::errs(), "sparsec") << error << "\n";
    return 1;
  }
  module->print(output->os());
  output->os() << "\n";
  output->keep();
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::HideUnrelatedOptions(category, importCmd);
  cl::ParseCommandLineOptions(
      argc, argv,
      "sparsec: ahead-of-time compiler for activation-sparse ONNX models\n\n"
      "  sparsec import model.onnx [-o model.mlir] [--compile-to=import|raise]"
      "\n");

  MLIRContext context;
  context.loadDialect<sparsec::SparsecDialect, func::FuncDialect>();
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagHandler(sourceMgr, &context);

  if (importCmd)
    return runImport(context);
  llvm::WithColor::error(llvm::errs(), "sparsec")
      << "expected a subcommand: import (run 'sparsec --help')\n";
  return 1;
}
