//===- sparsec.cpp - the sparsec compiler driver -------------------------===//
//
// Part of the sparsec project.
//
//   sparsec import  model.onnx [-o model.mlir] [--compile-to=import|raise]
//   sparsec compile model.onnx --target x86 -o out/ [--compile-to=<phase>]
//
// Every phase can be stopped at with --compile-to=<phase>.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"
#include "sparsec/Frontend/ONNX/Importer.h"
#include "sparsec/Pipelines/Pipelines.h"
#include "sparsec/Target/Cpp/CppEmitter.h"
#include "sparsec/Target/Cpp/PackWeights.h"
#include "sparsec/Weights/WeightStore.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
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
cl::SubCommand compileCmd(
    "compile", "Compile an ONNX model into a standalone inference binary");

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.onnx>"),
                               cl::sub(importCmd), cl::sub(compileCmd),
                               cl::cat(category));
cl::opt<std::string>
    outputFile("o",
               cl::desc("import: output file (default: stdout); compile: "
                        "output directory"),
               cl::value_desc("path"), cl::sub(importCmd), cl::sub(compileCmd),
               cl::cat(category));
cl::opt<std::string> compileTo(
    "compile-to",
    cl::desc("Stop after this phase: import, raise, schedule, emit (sources "
             "and weights) or build (the default for compile; raise for "
             "import)"),
    cl::value_desc("phase"), cl::sub(importCmd), cl::sub(compileCmd),
    cl::cat(category));
cl::list<std::string>
    dims("dims",
         cl::desc("Pin named input dimensions, e.g. --dims=batch=1,seq=71"),
         cl::value_desc("name=value,..."), cl::CommaSeparated,
         cl::sub(importCmd), cl::sub(compileCmd), cl::cat(category));
cl::list<std::string> maxDims(
    "max-dims",
    cl::desc("Largest value the binary accepts for named dynamic dimensions, "
             "e.g. --max-dims=seq=1024 (default: unbounded)"),
    cl::value_desc("name=value,..."), cl::CommaSeparated, cl::sub(compileCmd),
    cl::cat(category));
cl::opt<std::string> target("target",
                            cl::desc("Code generation target: x86"),
                            cl::init("x86"), cl::sub(compileCmd),
                            cl::cat(category));
cl::opt<bool> listOps("list-ops",
                      cl::desc("Print the supported ONNX op types and exit"),
                      cl::sub(importCmd), cl::cat(category));
cl::opt<bool> verbose("v", cl::desc("Print each phase and its time to stderr"),
                      cl::sub(importCmd), cl::cat(category));
cl::opt<bool> quiet("q", cl::desc("Do not print progress"),
                    cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> noShapeInference(
    "no-onnx-shape-inference",
    cl::desc("Do not run ONNX shape inference before importing"),
    cl::sub(importCmd), cl::sub(compileCmd), cl::cat(category));

bool showProgress() { return compileCmd ? !quiet : verbose; }

class PhaseTimer {
public:
  explicit PhaseTimer(llvm::StringRef name)
      : name(name.str()), start(std::chrono::steady_clock::now()) {}
  ~PhaseTimer() {
    if (!showProgress())
      return;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                             start)
                   .count();
    llvm::errs() << "[sparsec] " << llvm::left_justify(name, 9)
                 << llvm::format("%8.3f s", s);
    if (!detail.empty())
      llvm::errs() << "  " << detail;
    llvm::errs() << "\n";
  }
  std::string detail;

private:
  std::string name;
  std::chrono::steady_clock::time_point start;
};

llvm::WithColor error() { return llvm::WithColor::error(llvm::errs(), "sparsec"); }

/// Checks that every declared weight resolves in the memory-mapped weight
/// store with the declared shape and byte size, so a model whose weight
/// data is missing or corrupt is rejected at import, not at run time.
LogicalResult checkWeights(ModuleOp module, const sparsec::WeightStore &store) {
  WalkResult result = module.walk([&](sparsec::GlobalOp global) {
    std::string err;
    const sparsec::TensorView *view = store.get(global.getSource(), err);
    if (!view) {
      emitError(global.getLoc(), "weight '")
          << global.getSource() << "': " << err;
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

/// import + weight check + (optionally) raise. Null on failure.
OwningOpRef<ModuleOp> importAndRaise(MLIRContext &context, sparsec::Phase stop,
                                     std::unique_ptr<sparsec::WeightStore> &store) {
  sparsec::ImportOptions options;
  options.onnxShapeInference = !noShapeInference;
  OwningOpRef<ModuleOp> module;
  {
    PhaseTimer timer("import");
    module = sparsec::importONNXFile(context, inputFile, options);
    if (!module)
      return nullptr;
    std::string err;
    store = sparsec::WeightStore::open(inputFile, err);
    if (!store) {
      emitError(module->getLoc(), "weight store: ") << err;
      return nullptr;
    }
    if (failed(checkWeights(*module, *store)))
      return nullptr;
    int64_t n = 0;
    module->walk([&](Operation *) { ++n; });
    timer.detail = std::to_string(n) + " ops";
  }
  if (stop >= sparsec::Phase::Raise) {
    PhaseTimer timer("raise");
    PassManager pm(&context);
    sparsec::RaisePipelineOptions raiseOptions;
    raiseOptions.dims = llvm::ArrayRef<std::string>(dims);
    sparsec::buildRaisePipeline(pm, raiseOptions);
    if (failed(pm.run(*module)))
      return nullptr;
    int64_t n = 0;
    module->walk([&](Operation *) { ++n; });
    timer.detail = std::to_string(n) + " ops";
  }
  return module;
}

LogicalResult writeModule(ModuleOp module, llvm::StringRef path) {
  std::string err;
  auto output = openOutputFile(path, &err);
  if (!output) {
    error() << err << "\n";
    return failure();
  }
  module.print(output->os());
  output->os() << "\n";
  output->keep();
  return success();
}

int runImport(MLIRContext &context) {
  if (listOps) {
    for (const std::string &op : sparsec::supportedONNXOps())
      llvm::outs() << op << "\n";
    return 0;
  }
  if (inputFile.empty()) {
    error() << "import needs a model: sparsec import <model.onnx>\n";
    return 1;
  }
  std::string phase = compileTo.empty() ? "raise" : compileTo.getValue();
  std::optional<sparsec::Phase> stop = sparsec::parsePhase(phase);
  if (!stop || *stop > sparsec::Phase::Raise) {
    error() << "unknown phase '" << phase
            << "' for --compile-to (expected import or raise)\n";
    return 1;
  }
  std::unique_ptr<sparsec::WeightStore> store;
  OwningOpRef<ModuleOp> module = importAndRaise(context, *stop, store);
  if (!module)
    return 1;
  return failed(writeModule(*module, outputFile.empty() ? std::string("-")
                                                       : outputFile.getValue()))
             ? 1
             : 0;
}

/// Parses name=value pairs.
bool parseDimList(llvm::ArrayRef<std::string> list, llvm::StringRef flag,
                  llvm::StringMap<int64_t> &out) {
  for (const std::string &entry : list) {
    auto [name, value] = llvm::StringRef(entry).split('=');
    int64_t v;
    if (name.empty() || value.getAsInteger(10, v) || v <= 0) {
      error() << "invalid " << flag << " entry '" << entry
              << "': expected name=positive-integer\n";
      return false;
    }
    out[name] = v;
  }
  return true;
}

int runCompile(MLIRContext &context) {
  if (inputFile.empty()) {
    error() << "compile needs a model: sparsec compile <model.onnx> -o <dir>\n";
    return 1;
  }
  if (target != "x86") {
    error() << "target '" << target
            << "' is not available yet; supported targets: x86\n";
    return 1;
  }
  if (outputFile.empty()) {
    error() << "compile needs an output directory: -o <dir>\n";
    return 1;
  }
  std::string phase = compileTo.empty() ? "build" : compileTo.getValue();
  std::optional<sparsec::Phase> stop = sparsec::parsePhase(phase);
  if (!stop) {
    error() << "unknown phase '" << phase
            << "' for --compile-to (expected import, raise, schedule, emit or "
               "build)\n";
    return 1;
  }
  llvm::StringMap<int64_t> maxDimMap, pinned;
  if (!parseDimList(maxDims, "--max-dims", maxDimMap) ||
      !parseDimList(dims, "--dims", pinned))
    return 1;
  if (std::error_code ec = llvm::sys::fs::create_directories(outputFile)) {
    error() << "cannot create output directory '" << outputFile
            << "': " << ec.message() << "\n";
    return 1;
  }
  auto outPath = [&](llvm::StringRef name) {
    llvm::SmallString<256> p(outputFile);
    llvm::sys::path::append(p, name);
    return std::string(p);
  };

  std::unique_ptr<sparsec::WeightStore> store;
  OwningOpRef<ModuleOp> module = importAndRaise(context, *stop, store);
  if (!module)
    return 1;
  if (*stop <= sparsec::Phase::Raise) {
    std::string path = outPath("model." + phase + ".mlir");
    if (failed(writeModule(*module, path)))
      return 1;
    llvm::errs() << "[sparsec] wrote " << path << "\n";
    return 0;
  }
  {
    PhaseTimer timer("schedule");
    PassManager pm(&context);
    sparsec::buildSchedulePipeline(pm);
    if (failed(pm.run(*module)))
      return 1;
    auto slots = (*module)->getAttrOfType<DenseI64ArrayAttr>("sparsec.slot_bytes");
    int64_t staticBytes = 0, dynamic = 0;
    for (int64_t b : slots.asArrayRef())
      b < 0 ? ++dynamic : staticBytes += b;
    timer.detail = std::to_string(slots.size()) + " memory slots (" +
                   std::to_string(staticBytes) + " bytes static, " +
                   std::to_string(dynamic) + " sized at run time)";
  }
  if (*stop == sparsec::Phase::Schedule) {
    std::string path = outPath("model.schedule.mlir");
    if (failed(writeModule(*module, path)))
      return 1;
    llvm::errs() << "[sparsec] wrote " << path << "\n";
    return 0;
  }

  std::string cppPath = outPath("model.cpp");
  {
    PhaseTimer timer("emit");
    uint64_t checksum = 0, bytes = 0;
    if (failed(sparsec::packWeights(*module, *store, outPath("model.weights"),
                                    outPath("model.manifest.json"), checksum,
                                    bytes)))
      return 1;
    sparsec::CppEmitterOptions options;
    options.weightsChecksum = checksum;
    for (const auto &e : maxDimMap)
      options.maxDims[e.getKey()] = e.getValue();
    // Pinned dims are also the largest accepted values.
    for (const auto &e : pinned)
      options.maxDims[e.getKey()] = e.getValue();
    std::string err;
    auto out = openOutputFile(cppPath, &err);
    if (!out) {
      error() << err << "\n";
      return 1;
    }
    if (failed(sparsec::translateToCpp(*module, out->os(), options)))
      return 1;
    out->keep();
    timer.detail = "model.cpp, model.weights (" + std::to_string(bytes) +
                   " bytes), model.manifest.json";
  }
  if (*stop == sparsec::Phase::Emit)
    return 0;

  {
    PhaseTimer timer("build");
    const char *env = std::getenv("SPARSEC_CXX");
    auto cxx = llvm::sys::findProgramByName(env ? env : "c++");
    if (!cxx) {
      error() << "no C++ compiler found (looked for '" << (env ? env : "c++")
              << "'; set SPARSEC_CXX)\n";
      return 1;
    }
    std::string binary = outPath("model");
    llvm::SmallVector<llvm::StringRef> args{
        *cxx, "-std=c++17", "-O2", "-I", SPARSEC_RUNTIME_INCLUDE_DIR,
        cppPath, SPARSEC_RUNTIME_LIBRARY, "-lpthread", "-o", binary};
    std::string err;
    int rc = llvm::sys::ExecuteAndWait(*cxx, args, std::nullopt, {}, 0, 0, &err);
    if (rc != 0) {
      error() << "building " << binary << " failed"
              << (err.empty() ? "" : ": " + err) << " (compiler exit " << rc
              << ")\n";
      return 1;
    }
    timer.detail = binary;
  }
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::HideUnrelatedOptions(category, importCmd);
  cl::HideUnrelatedOptions(category, compileCmd);
  cl::ParseCommandLineOptions(
      argc, argv,
      "sparsec: ahead-of-time compiler for activation-sparse ONNX models\n\n"
      "  sparsec import  model.onnx [-o model.mlir] [--compile-to=import|raise]\n"
      "  sparsec compile model.onnx --target x86 -o out/ "
      "[--compile-to=<phase>]\n");

  MLIRContext context;
  context.loadDialect<sparsec::SparsecDialect, func::FuncDialect>();
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagHandler(sourceMgr, &context);

  if (importCmd)
    return runImport(context);
  if (compileCmd)
    return runCompile(context);
  error() << "expected a subcommand: import or compile (run 'sparsec --help')\n";
  return 1;
}
