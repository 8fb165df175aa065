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
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"
#include "sparsec/Weights/WeightStore.h"
#include "sparsec/rt/Profile.h"
#include "sparsec/rt/Runtime.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <functional>
#include <thread>

using namespace mlir;
namespace cl = llvm::cl;

namespace {
cl::OptionCategory category("sparsec options");

cl::SubCommand importCmd("import",
                         "Import an ONNX model and print its sparsec IR");
cl::SubCommand compileCmd(
    "compile", "Compile an ONNX model into a standalone inference binary");
cl::SubCommand profileCmd(
    "profile", "Measure which neurons fire on calibration inputs (.sprof)");
cl::SubCommand tuneCmd(
    "tune", "Measure the kernels' latency table on this machine's GPU (the "
            "PIT cost model's input)");

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.onnx>"),
                               cl::sub(importCmd), cl::sub(compileCmd),
                               cl::sub(profileCmd), cl::cat(category));
cl::opt<std::string> calib(
    "calib",
    cl::desc("Calibration data: a text file (byte-level LMs: input_ids "
             "chunks) or a directory of NAME.npy files (one sub-directory "
             "per sample, or one sample)"),
    cl::value_desc("file|dir"), cl::sub(profileCmd), cl::cat(category));
cl::opt<int> seqLen("seq-len",
                    cl::desc("Tokens per calibration chunk of a text file"),
                    cl::init(128), cl::sub(profileCmd), cl::cat(category));
cl::opt<int> numSamples(
    "samples",
    cl::desc("(layer input, active mask) pairs kept per site for predictor "
             "training (default 4096; 0: none)"),
    cl::init(4096), cl::sub(profileCmd), cl::cat(category));
cl::opt<int> maxChunks("max-chunks",
                       cl::desc("Largest number of calibration runs"),
                       cl::init(64), cl::sub(profileCmd), cl::cat(category));
cl::opt<int> threads("threads", cl::desc("Threads of the profiling runs"),
                     cl::init(0), cl::sub(profileCmd), cl::cat(category));
cl::opt<std::string>
    outputFile("o",
               cl::desc("import: output file (default: stdout); compile: "
                        "output directory"),
               cl::value_desc("path"), cl::sub(importCmd), cl::sub(compileCmd),
               cl::sub(profileCmd), cl::sub(tuneCmd), cl::cat(category));
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
         cl::sub(importCmd), cl::sub(compileCmd), cl::sub(profileCmd),
         cl::cat(category));
cl::list<std::string> maxDims(
    "max-dims",
    cl::desc("Largest value the binary accepts for named dynamic dimensions, "
             "e.g. --max-dims=seq=1024 (default: unbounded)"),
    cl::value_desc("name=value,..."), cl::CommaSeparated, cl::sub(compileCmd),
    cl::cat(category));
cl::opt<std::string> profileFile(
    "profile", cl::desc("Activation profile (.sprof from sparsec profile)"),
    cl::value_desc("file.sprof"), cl::sub(compileCmd), cl::cat(category));
cl::opt<std::string> sparsityMode(
    "sparsity",
    cl::desc("How FFNs use activation sparsity: off (dense), exact (skip "
             "zero neurons in the down projection) or predicted (a trained "
             "predictor also selects the up projection's neurons); exact and "
             "predicted need --profile"),
    cl::value_desc("off|exact|predicted"), cl::init("off"), cl::sub(compileCmd),
    cl::cat(category));
cl::opt<double> targetRecall(
    "target-recall",
    cl::desc("Predicted mode: share of active neurons each predictor must "
             "find on held-out calibration samples (default 0.999)"),
    cl::init(0.999), cl::sub(compileCmd), cl::cat(category));
cl::list<int64_t> predictorRanks(
    "predictor-ranks",
    cl::desc("Predicted mode: the predictor ranks to train and choose from "
             "(default d/16, d/8, d/4, d/2; d/16, d/8 for layers wider than "
             "1024)"),
    cl::CommaSeparated, cl::value_desc("r,r,..."), cl::sub(compileCmd),
    cl::cat(category));
cl::opt<std::string> sparseWeights(
    "sparse-weights",
    cl::desc("Storage of the weights the sparse kernels read: f32, f16 or "
             "bf16 (half the memory traffic; fp32 accumulation)"),
    cl::value_desc("f32|f16|bf16"), cl::init("f32"), cl::sub(compileCmd),
    cl::cat(category));
cl::opt<bool> report(
    "report",
    cl::desc("Print the predictors' recall, precision and density on "
             "held-out samples"),
    cl::sub(compileCmd), cl::cat(category));
cl::opt<double> minZeroFraction(
    "min-zero-fraction",
    cl::desc("Keep an FFN dense when its measured zero fraction is lower"),
    cl::init(0.5), cl::sub(compileCmd), cl::cat(category));
cl::opt<std::string> target(
    "target",
    cl::desc("Code generation target: x86 (C++ with AVX2/AVX-512 kernels), "
             "cuda (CUDA C++ for sm_90, built with nvcc) or hybrid (cuda with "
             "each FFN's cold neurons on the CPU; needs --gpu-budget); tune: "
             "cuda"),
    cl::init("x86"), cl::sub(compileCmd), cl::sub(tuneCmd), cl::cat(category));
cl::opt<std::string> pitTable(
    "pit-table",
    cl::desc("CUDA/hybrid with --sparsity: the latency table (from sparsec "
             "tune --target cuda) the PIT micro-tile choice reads (default: "
             "the built-in H200 table)"),
    cl::value_desc("file.json"), cl::sub(compileCmd), cl::cat(category));
cl::opt<int64_t> pitTokens(
    "pit-tokens",
    cl::desc("CUDA/hybrid with --sparsity: tokens per batched call (prompt "
             "length) the PIT choice plans for (default 512)"),
    cl::init(512), cl::sub(compileCmd), cl::cat(category));
cl::opt<int64_t> pitTile(
    "pit-tile",
    cl::desc("CUDA/hybrid with --sparsity: use this PIT micro-tile (8, 16 or "
             "32 tokens) for every sparse down projection's batched calls, or "
             "0 for dense, instead of the cost model's choice"),
    cl::init(-1), cl::sub(compileCmd), cl::cat(category));
cl::opt<int64_t> pitColumns(
    "pit-columns",
    cl::desc("CUDA/hybrid with --sparsity: output columns a PIT block "
             "computes (128 or 256) for every sparse down projection given a "
             "PIT tile, instead of the cost model's choice"),
    cl::init(0), cl::sub(compileCmd), cl::cat(category));
cl::opt<int64_t> tuneM("m", cl::desc("tune: tokens of the measured problem"),
                       cl::init(4096), cl::sub(tuneCmd), cl::cat(category));
cl::opt<int64_t> tuneK("k", cl::desc("tune: input neurons of the measured problem"),
                       cl::init(4096), cl::sub(tuneCmd), cl::cat(category));
cl::opt<int64_t> tuneN("n", cl::desc("tune: outputs of the measured problem"),
                       cl::init(4096), cl::sub(tuneCmd), cl::cat(category));
cl::opt<std::string> gpuBudget(
    "gpu-budget",
    cl::desc("GPU memory granted to the model (bytes, or with a K/M/G "
             "suffix): place each FFN's hot neurons on the GPU and the rest "
             "on the CPU (sparsec-partition-hot-cold; needs --profile)"),
    cl::value_desc("bytes"), cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> kvCache(
    "kv-cache",
    cl::desc("Decoder exported without a KV cache: derive incremental "
             "decoding (past_key_values.* inputs, present.* outputs; "
             "sparsec-derive-kv-cache)"),
    cl::sub(compileCmd), cl::cat(category));
cl::opt<std::string> placementMode(
    "placement",
    cl::desc("With --gpu-budget: neurons (exact hot/cold placement, the "
             "default) or layers (the layer-offload baseline: whole FFNs on "
             "the GPU in model order while they fit)"),
    cl::init("neurons"), cl::sub(compileCmd), cl::cat(category));
cl::opt<int64_t> groupSize(
    "group-size",
    cl::desc("With --gpu-budget: neurons per placement group (a layer's GPU "
             "part is a whole number of groups; default 64)"),
    cl::init(64), cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> splitOnCpu(
    "split-on-cpu",
    cl::desc("x86 with --gpu-budget: split each placed FFN into its GPU and "
             "CPU parts as --target hybrid does, and run both parts on the "
             "CPU (checks a placement's results without a GPU)"),
    cl::init(false), cl::sub(compileCmd), cl::cat(category));
cl::opt<double> syncUs(
    "sync-us",
    cl::desc("Machine description for --gpu-budget: microseconds a layer "
             "split between GPU and CPU costs in synchronisation"),
    cl::init(20.0), cl::sub(compileCmd), cl::cat(category));
cl::opt<double> cpuBandwidth(
    "cpu-bandwidth",
    cl::desc("Machine description for --gpu-budget: GB/s the CPU reads "
             "cold weight rows at"),
    cl::init(20.0), cl::sub(compileCmd), cl::cat(category));
cl::opt<double> gpuBandwidth(
    "gpu-bandwidth",
    cl::desc("Machine description for --gpu-budget: GB/s the GPU reads "
             "weight rows at (with --cpu-bandwidth, how much more a row read "
             "on the CPU costs when deciding where a predictor pays)"),
    cl::init(3000.0), cl::sub(compileCmd), cl::cat(category));
cl::opt<std::string> weightsType(
    "weights",
    cl::desc("Storage of every linear, sparse and predictor weight (and, "
             "with --target cuda, convolution weight), f32, f16 or bf16 "
             "(fp32 accumulation; on x86 converted as loaded; on CUDA the "
             "batched GEMMs and convolutions round their activation operand "
             "to the same 16-bit type too). For "
             "profile: the linear weights of the profiling build (16 bits "
             "halve its weight pack, which large models then read from memory "
             "instead of disk)"),
    cl::value_desc("f32|f16|bf16"), cl::init("f32"), cl::sub(compileCmd),
    cl::sub(profileCmd), cl::cat(category));
/// The storage of the sparse and predictor weights: --weights unless it is
/// f32, then --sparse-weights.
std::string sparseStorage() {
  return weightsType != "f32" ? weightsType.getValue()
                              : sparseWeights.getValue();
}

cl::opt<bool> foldNorms(
    "fold-norms",
    cl::desc("CUDA target: fold each layer / RMS norm that only feeds "
             "linears into their decode GEMVs (sparsec-group-linears "
             "fold-norms; no norm kernel in a decode step)"),
    cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> foldHeadTransposes(
    "fold-head-transposes",
    cl::desc("Fold the transposes into and out of each attention's heads "
             "into the attention's layout (sparsec-fold-head-transposes; "
             "=false keeps them as copies)"),
    cl::init(true), cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> fuseRotary(
    "fuse-rotary",
    cl::desc("Compute each rotate-half rotary embedding as one op "
             "(sparsec-fuse-rotary; =false keeps the slices, products and "
             "sum)"),
    cl::init(true), cl::sub(importCmd), cl::sub(compileCmd), cl::cat(category));
cl::opt<bool> listOps("list-ops",
                      cl::desc("Print the supported ONNX op types and exit"),
                      cl::sub(importCmd), cl::cat(category));
cl::opt<bool> verbose("v", cl::desc("Print each phase and its time to stderr"),
                      cl::sub(importCmd), cl::cat(category));
cl::opt<bool> quiet("q", cl::desc("Do not print progress"),
                    cl::sub(compileCmd), cl::sub(profileCmd), cl::cat(category));
cl::opt<bool> noShapeInference(
    "no-onnx-shape-inference",
    cl::desc("Do not run ONNX shape inference before importing"),
    cl::sub(importCmd), cl::sub(compileCmd), cl::sub(profileCmd),
    cl::cat(category));

bool showProgress() {
  return (compileCmd || profileCmd) ? !quiet : tuneCmd ? true : verbose;
}

/// Errors reported so far (error() and MLIR's error diagnostics).
int errorCount = 0;

class PhaseTimer {
public:
  explicit PhaseTimer(llvm::StringRef name)
      : name(name.str()), start(std::chrono::steady_clock::now()),
        errorsBefore(errorCount) {}
  ~PhaseTimer() {
    // A phase that reported an error has no result to time.
    if (!showProgress() || errorCount != errorsBefore)
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
  int errorsBefore;
};

llvm::WithColor error() {
  ++errorCount;
  return llvm::WithColor::error(llvm::errs(), "sparsec");
}

/// Checks that every declared weight resolves in the memory-mapped weight
/// store with the declared shape and byte size, so a model whose weight
/// data is missing or corrupt is rejected at import, not at run time.
LogicalResult checkWeights(ModuleOp module, const sparsec::WeightStore &store) {
  WalkResult result = module.walk([&](sparsec::GlobalOp global) {
    if (global.getValueAttr())
      return WalkResult::advance(); // data in the IR (compiler-made)
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
                                     std::unique_ptr<sparsec::WeightStore> &store,
                                     bool widenAll = false) {
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
    raiseOptions.widenAll = widenAll;
    raiseOptions.fuseRotary = fuseRotary;
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

/// Fails naming the first entry of `list` (name=value) whose name no input
/// dimension of the module carries: a misspelt name would bound nothing.
LogicalResult checkDimNames(ModuleOp module, llvm::ArrayRef<std::string> list,
                            llvm::StringRef flag) {
  std::string unknown = sparsec::unknownDimName(module, list);
  if (unknown.empty())
    return success();
  error() << "invalid " << flag << " entry " << unknown << "\n";
  return failure();
}

/// Builds a `--target cuda` model with nvcc (sm_90 SASS + PTX) against the
/// host and CUDA runtime libraries.
LogicalResult buildCuda(const std::string &source, const std::string &binary,
                        PhaseTimer &timer) {
#ifdef SPARSEC_RUNTIME_CUDA_LIBRARY
  const char *env = std::getenv("SPARSEC_NVCC");
  std::string nvcc = env ? env : SPARSEC_NVCC;
  if (!llvm::sys::fs::can_execute(nvcc)) {
    auto found = llvm::sys::findProgramByName("nvcc");
    if (!found) {
      error() << "nvcc not found (looked for '" << nvcc
              << "' and on PATH; set SPARSEC_NVCC, or stop at "
                 "--compile-to=emit and build model.cu elsewhere)\n";
      return failure();
    }
    nvcc = *found;
  }
  llvm::SmallVector<llvm::StringRef> args{
      nvcc,
      "-std=c++17",
      "-O3",
      "-gencode=arch=compute_90,code=sm_90",
      "-gencode=arch=compute_90,code=compute_90",
      "-I",
      SPARSEC_RUNTIME_INCLUDE_DIR,
      source,
      SPARSEC_RUNTIME_CUDA_LIBRARY,
      SPARSEC_RUNTIME_LIBRARY,
      "-lcublas",
      "-lcublasLt",
      "-lpthread",
      "-o",
      binary};
  std::string err;
  int rc = llvm::sys::ExecuteAndWait(nvcc, args, std::nullopt, {}, 0, 0, &err);
  if (rc != 0) {
    error() << "building " << binary << " with nvcc failed"
            << (err.empty() ? "" : ": " + err) << " (exit " << rc << ")\n";
    return failure();
  }
  timer.detail = binary;
  return success();
#else
  (void)source;
  (void)binary;
  (void)timer;
  error() << "this sparsec was built without the CUDA runtime (nvcc was not "
             "found when it was configured): stop at --compile-to=emit and "
             "build model.cu where CUDA is installed\n";
  return failure();
#endif
}

/// The emit and build phases: weight pack, manifest and C++ into `outDir`,
/// then (unless `stopAfterEmit`) the binary `outDir/model`.
LogicalResult emitAndBuild(ModuleOp module, const sparsec::WeightStore &store,
                           llvm::StringRef outDir,
                           const llvm::StringMap<int64_t> &maxDimMap,
                           bool stopAfterEmit) {
  auto outPath = [&](llvm::StringRef name) {
    llvm::SmallString<256> p(outDir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  };
  const bool cuda = target == "cuda" || target == "hybrid";
  std::string cppPath = outPath(cuda ? "model.cu" : "model.cpp");
  {
    PhaseTimer timer("emit");
    uint64_t checksum = 0, bytes = 0;
    if (failed(sparsec::packWeights(module, store, outPath("model.weights"),
                                    outPath("model.manifest.json"), checksum,
                                    bytes)))
      return failure();
    sparsec::CppEmitterOptions options;
    options.target = cuda ? sparsec::EmitTarget::cuda : sparsec::EmitTarget::x86;
    options.weightsChecksum = checksum;
    for (const auto &e : maxDimMap)
      options.maxDims[e.getKey()] = e.getValue();
    std::string err;
    auto out = openOutputFile(cppPath, &err);
    if (!out) {
      error() << err << "\n";
      return failure();
    }
    if (failed(sparsec::translateToCpp(module, out->os(), options)))
      return failure();
    out->keep();
    timer.detail = std::string(cuda ? "model.cu" : "model.cpp") +
                   ", model.weights (" + std::to_string(bytes) +
                   " bytes), model.manifest.json";
  }
  if (stopAfterEmit)
    return success();

  PhaseTimer timer("build");
  std::string binary = outPath("model");
  if (cuda)
    return buildCuda(cppPath, binary, timer);
  const char *env = std::getenv("SPARSEC_CXX");
  auto cxx = llvm::sys::findProgramByName(env ? env : "c++");
  if (!cxx) {
    error() << "no C++ compiler found (looked for '" << (env ? env : "c++")
            << "'; set SPARSEC_CXX)\n";
    return failure();
  }
  llvm::SmallVector<llvm::StringRef> args{
      *cxx, "-std=c++17", "-O2", "-I", SPARSEC_RUNTIME_INCLUDE_DIR,
      cppPath, SPARSEC_RUNTIME_LIBRARY, "-lpthread", "-o", binary};
  std::string err;
  int rc = llvm::sys::ExecuteAndWait(*cxx, args, std::nullopt, {}, 0, 0, &err);
  if (rc != 0) {
    error() << "building " << binary << " failed"
            << (err.empty() ? "" : ": " + err) << " (compiler exit " << rc
            << ")\n";
    return failure();
  }
  timer.detail = binary;
  return success();
}

void printPredictorReport(ModuleOp module);

int runCompile(MLIRContext &context) {
  if (inputFile.empty()) {
    error() << "compile needs a model: sparsec compile <model.onnx> -o <dir>\n";
    return 1;
  }
  if (target != "x86" && target != "cuda" && target != "hybrid") {
    error() << "unknown target '" << target
            << "' (supported targets: x86, cuda, hybrid)\n";
    return 1;
  }
  // -1, the default, stands for the cost model's choice; it is not a value
  // to give.
  if (pitTile.getNumOccurrences() &&
      !llvm::is_contained({0, 8, 16, 32}, pitTile.getValue())) {
    error() << "--pit-tile must be 0 (dense), 8, 16 or 32, got " << pitTile
            << "\n";
    return 1;
  }
  if (pitColumns.getNumOccurrences() &&
      !llvm::is_contained({128, 256}, pitColumns.getValue())) {
    error() << "--pit-columns must be 128 or 256, got " << pitColumns << "\n";
    return 1;
  }
  if (pitTokens <= 0) {
    error() << "--pit-tokens must be positive, got " << pitTokens << "\n";
    return 1;
  }
  if ((!pitTable.empty() || pitTile.getNumOccurrences() ||
       pitColumns.getNumOccurrences()) &&
      (sparsityMode == "off" || target == "x86")) {
    error() << "--pit-table, --pit-tile and --pit-columns apply to --target "
               "cuda or hybrid with --sparsity exact or predicted\n";
    return 1;
  }
  if ((!pitTable.empty() || pitTile > 0 || pitColumns.getNumOccurrences()) &&
      sparseStorage() == "f32") {
    error() << "--pit-table, --pit-tile and --pit-columns need 16-bit sparse "
               "weights (--weights f16|bf16 or --sparse-weights f16|bf16; "
               "the sparse weights are f32 here): the PIT kernels are "
               "fp16/bf16 tensor-core code\n";
    return 1;
  }
  if (!(minZeroFraction >= 0.0 && minZeroFraction <= 1.0)) {
    error() << "--min-zero-fraction must be between 0 and 1, got "
            << llvm::format("%g", minZeroFraction.getValue()) << "\n";
    return 1;
  }
  if (target == "hybrid" && gpuBudget.empty()) {
    error() << "--target hybrid needs --gpu-budget <bytes> (and --profile): "
               "the budget decides which neurons live on the GPU\n";
    return 1;
  }
  if (groupSize <= 0) {
    error() << "--group-size must be a positive number of neurons, got "
            << groupSize << "\n";
    return 1;
  }
  if (splitOnCpu && (target != "x86" || gpuBudget.empty())) {
    error() << "--split-on-cpu applies to --target x86 with --gpu-budget "
               "(and --profile)\n";
    return 1;
  }
  if (placementMode != "neurons" && placementMode != "layers") {
    error() << "unknown --placement '" << placementMode
            << "' (expected neurons or layers)\n";
    return 1;
  }
  if (weightsType != "f32" && weightsType != "f16" && weightsType != "bf16") {
    error() << "unknown --weights '" << weightsType
            << "' (expected f32, f16 or bf16)\n";
    return 1;
  }
  if (foldNorms && target != "cuda") {
    error() << "--fold-norms needs --target cuda (the target is '" << target
            << "')\n";
    return 1;
  }
  if (outputFile.empty()) {
    error() << "compile needs an output directory: -o <dir>\n";
    return 1;
  }
  if (sparsityMode != "off" && sparsityMode != "exact" &&
      sparsityMode != "predicted") {
    error() << "unknown --sparsity mode '" << sparsityMode
            << "' (expected off, exact or predicted)\n";
    return 1;
  }
  if (sparsityMode != "off" && profileFile.empty()) {
    error() << "--sparsity=" << sparsityMode
            << " needs --profile <model.sprof> (from sparsec profile): FFNs "
               "are made sparse where the measured sparsity pays off\n";
    return 1;
  }
  if (sparseWeights != "f32" && sparseWeights != "f16" &&
      sparseWeights != "bf16") {
    error() << "unknown --sparse-weights '" << sparseWeights
            << "' (expected f32, f16 or bf16)\n";
    return 1;
  }
  for (int64_t r : predictorRanks)
    if (r <= 0) {
      error() << "--predictor-ranks must be positive, got " << r << "\n";
      return 1;
    }
  if (!predictorRanks.empty() && sparsityMode != "predicted") {
    error() << "--predictor-ranks needs --sparsity predicted\n";
    return 1;
  }
  if (!(targetRecall > 0.0 && targetRecall <= 1.0)) {
    error() << "--target-recall must be in (0, 1], got " << targetRecall
            << "\n";
    return 1;
  }
  if (!(syncUs >= 0)) {
    error() << "--sync-us must be 0 or more, got " << syncUs << "\n";
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

  // A half-precision export is float32 throughout where the CUDA backend
  // (float32 activations) or the sparsity passes (ReLUs feeding linears
  // directly, as the profile saw them) read it.
  const bool widenAll = target != "x86" || sparsityMode != "off" ||
                        !profileFile.empty();
  std::unique_ptr<sparsec::WeightStore> store;
  OwningOpRef<ModuleOp> module = importAndRaise(context, *stop, store, widenAll);
  if (!module)
    return 1;
  if (kvCache && *stop >= sparsec::Phase::Raise) {
    PhaseTimer timer("kv-cache");
    PassManager pm(&context);
    pm.addPass(sparsec::createDeriveKVCachePass());
    if (failed(pm.run(*module)))
      return 1;
    int64_t layers = 0;
    module->walk([&](sparsec::AttentionOp) { ++layers; });
    timer.detail = std::to_string(layers) + " attentions read a KV cache";
  }
  // After the derivation, whose cache inputs add past_seq.
  if (failed(checkDimNames(*module, maxDims, "--max-dims")))
    return 1;
  int64_t budgetBytes = 0;
  if (!gpuBudget.empty()) {
    llvm::StringRef text = gpuBudget;
    int64_t scale = 1;
    if (text.consume_back_insensitive("g") || text.consume_back_insensitive("gib"))
      scale = int64_t(1) << 30;
    else if (text.consume_back_insensitive("m") || text.consume_back_insensitive("mib"))
      scale = int64_t(1) << 20;
    else if (text.consume_back_insensitive("k") || text.consume_back_insensitive("kib"))
      scale = int64_t(1) << 10;
    uint64_t value = 0;
    if (text.getAsInteger(10, value) || value == 0 ||
        value > uint64_t(INT64_MAX) / uint64_t(scale)) {
      error() << "--gpu-budget expects a positive byte count such as "
                 "8589934592 or 8G, got '"
              << gpuBudget << "'\n";
      return 1;
    }
    budgetBytes = int64_t(value) * scale;
    if (!(gpuBandwidth > 0) || !(cpuBandwidth > 0)) {
      error() << "--gpu-bandwidth and --cpu-bandwidth must be positive GB/s\n";
      return 1;
    }
    if (profileFile.empty()) {
      error() << "--gpu-budget needs --profile <model.sprof>: neurons are "
                 "placed by their measured activation frequency\n";
      return 1;
    }
  }
  if (*stop >= sparsec::Phase::Raise &&
      (!profileFile.empty() || sparsityMode != "off")) {
    PhaseTimer timer("sparsify");
    PassManager pm(&context);
    const int64_t weightBytes = weightsType == "f32" ? 4 : 2; // on the GPU
    if (!profileFile.empty()) {
      sparsec::AnnotateSparsityPassOptions annotate;
      annotate.profile = profileFile;
      pm.addPass(sparsec::createAnnotateSparsityPass(annotate));
    }
    if (sparsityMode == "predicted") {
      sparsec::InsertPredictorsPassOptions predictors;
      predictors.profile = profileFile;
      predictors.targetRecall = targetRecall;
      predictors.ranks.assign(predictorRanks.begin(), predictorRanks.end());
      if (budgetBytes > 0 && (target == "hybrid" || splitOnCpu)) { // CPU rows cost more
        predictors.gpuBudget = budgetBytes;
        predictors.weightBytes = weightBytes;
        predictors.cpuCost = std::max(1.0, gpuBandwidth / cpuBandwidth);
      }
      pm.addPass(sparsec::createInsertPredictorsPass(predictors));
    }
    if (sparsityMode != "off") {
      sparsec::SparsifyFFNPassOptions sparsify;
      sparsify.minZeroFraction = minZeroFraction;
      pm.addPass(sparsec::createSparsifyFFNPass(sparsify));
    }
    if (budgetBytes > 0) {
      sparsec::PartitionHotColdPassOptions partition;
      partition.profile = profileFile;
      partition.gpuBudget = budgetBytes;
      partition.weightBytes = weightBytes;
      partition.mode = placementMode.getValue();
      partition.groupSize = groupSize;
      partition.syncUs = syncUs;
      partition.cpuBandwidth = cpuBandwidth;
      pm.addPass(sparsec::createPartitionHotColdPass(partition));
    }
    // After the placement: a hybrid FFN's GPU part is what PIT would run.
    // The PIT kernels are fp16/bf16 tensor-core code: fp32 sparse weights
    // keep the dense GEMM for batched calls.
    if (sparsityMode != "off" && (target == "cuda" || target == "hybrid") &&
        sparseStorage() != "f32") {
      sparsec::PitTilePassOptions pit;
      pit.profile = profileFile;
      pit.table = pitTable;
      pit.tokens = pitTokens;
      pit.forceTile = pitTile;
      pit.forceColumns = pitColumns;
      pm.addPass(sparsec::createPitTilePass(pit));
    }
    if (failed(pm.run(*module)))
      return 1;
    int64_t sparse = 0, sites = 0, predictors = 0;
    module->walk([&](Operation *op) {
      sparse += isa<sparsec::SparseLinearOp>(op);
      predictors += isa<sparsec::PredictOp>(op);
      sites += op->hasAttr("sparsity");
    });
    timer.detail = std::to_string(sites) + " annotated sites, " +
                   std::to_string(sparse) + " sparse linears";
    if (sparsityMode == "predicted")
      timer.detail += ", " + std::to_string(predictors) + " predictors";
  }
  if (report)
    printPredictorReport(*module);
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
    sparsec::SchedulePipelineOptions scheduleOptions;
    scheduleOptions.sparseWeights = sparseStorage();
    scheduleOptions.denseWeights = weightsType.getValue();
    // The device convolutions take 16-bit weights; the x86 ones (the
    // hybrid target's included) compute in float32.
    scheduleOptions.convWeights =
        target == "cuda" ? weightsType.getValue() : std::string("f32");
    scheduleOptions.hybrid = target == "hybrid" || splitOnCpu;
    scheduleOptions.denseLayout =
        target == "cuda" || target == "hybrid" ? "nk" : "kn";
    scheduleOptions.groupLinears = target == "cuda" || target == "hybrid";
    scheduleOptions.foldNorms = foldNorms && target == "cuda";
    scheduleOptions.foldHeadTransposes = foldHeadTransposes;
    sparsec::buildSchedulePipeline(pm, scheduleOptions);
    if (failed(pm.run(*module)))
      return 1;
    auto slots = (*module)->getAttrOfType<DenseI64ArrayAttr>("sparsec.slot_bytes");
    int64_t staticBytes = 0, dynamic = 0;
    for (int64_t b : slots.asArrayRef())
      b < 0 ? ++dynamic : staticBytes += b;
    timer.detail = std::to_string(slots.size()) + " memory slots (" +
                   std::to_string(staticBytes) + " bytes static, " +
                   std::to_string(dynamic) + " sized at run time)";
    int64_t groups = 0, grouped = 0;
    module->walk([&](sparsec::LinearGroupOp g) {
      ++groups;
      grouped += int64_t(g.getWeights().size());
    });
    if (groups > 0)
      timer.detail += ", " + std::to_string(grouped) + " linears in " +
                      std::to_string(groups) + " groups";
  }
  if (*stop == sparsec::Phase::Schedule) {
    std::string path = outPath("model.schedule.mlir");
    if (failed(writeModule(*module, path)))
      return 1;
    llvm::errs() << "[sparsec] wrote " << path << "\n";
    return 0;
  }

  // Pinned dims are also the largest accepted values.
  for (const auto &e : pinned)
    maxDimMap[e.getKey()] = e.getValue();
  return failed(emitAndBuild(*module, *store, outputFile, maxDimMap,
                             *stop == sparsec::Phase::Emit))
             ? 1
             : 0;
}

/// The predictors' quality on held-out profile samples, one row per FFN.
void printPredictorReport(ModuleOp module) {
  llvm::outs() << llvm::format("%-28s %6s %8s %9s %9s %8s\n", "predictor",
                               "rank", "recall", "precision", "predicted",
                               "actual");
  int64_t rows = 0;
  module.walk([&](sparsec::PredictOp op) {
    auto stats = op->getAttrOfType<DictionaryAttr>("sparsec.predictor");
    if (!stats)
      return;
    auto f = [&](llvm::StringRef key) {
      auto a = stats.getAs<FloatAttr>(key);
      return a ? a.getValueAsDouble() : 0.0;
    };
    auto rank = stats.getAs<IntegerAttr>("rank");
    auto siteAttr = stats.getAs<StringAttr>("site");
    std::string site = siteAttr ? siteAttr.getValue().str() : "?";
    llvm::outs() << llvm::format(
        "%-28s %6lld %7.2f%% %8.2f%% %8.2f%% %7.2f%%\n", site.c_str(),
        (long long)(rank ? rank.getInt() : 0), 100 * f("recall"),
        100 * f("precision"), 100 * f("density"), 100 * f("actual_density"));
    ++rows;
  });
  if (rows == 0)
    llvm::outs() << "(no predictors: compile with --sparsity=predicted)\n";
  else
    llvm::outs() << "recall, precision and densities on the last 15 % of the "
                    "profile's samples (not used for training)\n";
}

/// Writes `a` (int64, row-major `shape`) as a .npy file.
bool saveInt64(const std::string &path, std::vector<int64_t> &data,
               std::initializer_list<int64_t> shape) {
  sparsec::rt::Tensor t;
  t.data = data.data();
  t.dtype = sparsec::rt::DType::i64;
  t.rank = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t v : shape)
    t.shape[d++] = v;
  std::string err;
  if (!sparsec::rt::writeNpy(path, t, err)) {
    error() << err << "\n";
    return false;
  }
  return true;
}

std::string fileSafe(llvm::StringRef name) {
  std::string out;
  for (char c : name)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  return out;
}

/// Writes the calibration runs as an input list for `model profile`;
/// `tokensPerRun` is the chunk length for text, 0 when unknown.
LogicalResult prepareCalibration(func::FuncOp func, llvm::StringRef workDir,
                                 std::string &listPath, int64_t &runs,
                                 int64_t &tokensPerRun) {
  SmallVector<std::string> names;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto n = func.getArgAttrOfType<StringAttr>(i, "sparsec.name");
    names.push_back(n ? n.getValue().str() : "");
  }
  listPath = (workDir + "/calibration.list").str();
  std::error_code ec;
  llvm::raw_fd_ostream list(listPath, ec);
  if (ec) {
    error() << "cannot write '" << listPath << "': " << ec.message() << "\n";
    return failure();
  }
  runs = 0;
  if (!llvm::sys::fs::is_directory(calib)) {
    // Text: byte-level LM inputs, one chunk of --seq-len bytes per run.
    auto buffer = llvm::MemoryBuffer::getFile(calib);
    if (!buffer) {
      error() << "cannot read calibration file '" << calib
              << "': " << buffer.getError().message() << "\n";
      return failure();
    }
    bool hasIds = llvm::is_contained(names, "input_ids");
    // KV-cache exports: each chunk is a prefill with an empty cache.
    std::string emptyPast;
    for (auto [i, n] : llvm::enumerate(names)) {
      if (n == "input_ids" || n == "attention_mask" || n == "position_ids")
        continue;
      auto type = dyn_cast<RankedTensorType>(func.getArgumentTypes()[i]);
      if (llvm::StringRef(n).starts_with("past_key_values.") && type &&
          type.getRank() == 4 && type.getElementType().isF32() &&
          !type.isDynamicDim(1) && !type.isDynamicDim(3)) {
        std::string path = (workDir + "/empty_" + fileSafe(n) + ".npy").str();
        float dummy = 0.0f;
        sparsec::rt::Tensor t;
        t.data = &dummy;
        t.dtype = sparsec::rt::DType::f32;
        t.rank = 4;
        t.shape[0] = 1;
        t.shape[1] = type.getDimSize(1);
        t.shape[2] = 0;
        t.shape[3] = type.getDimSize(3);
        std::string err;
        if (!sparsec::rt::writeNpy(path, t, err)) {
          error() << err << "\n";
          return failure();
        }
        emptyPast += " " + n + "=" + path;
        continue;
      }
      error() << "text calibration needs a byte-level LM whose inputs are "
                 "input_ids (and attention_mask, position_ids, "
                 "past_key_values.*); this "
                 "model also takes '"
              << n << "': give a directory of .npy inputs instead\n";
      return failure();
    }
    if (!hasIds) {
      error() << "text calibration needs a model with an input_ids input\n";
      return failure();
    }
    llvm::StringRef text = (*buffer)->getBuffer();
    int64_t len = seqLen;
    tokensPerRun = len;
    for (int64_t off = 0; off + len <= static_cast<int64_t>(text.size()) &&
                          runs < maxChunks;
         off += len, ++runs) {
      std::vector<int64_t> ids(len), mask(len, 1), positions(len);
      for (int64_t k = 0; k < len; ++k) {
        ids[k] = static_cast<unsigned char>(text[off + k]);
        positions[k] = k; // each chunk starts a sequence
      }
      std::string base = (workDir + "/run" + llvm::Twine(runs)).str();
      if (!saveInt64(base + "_ids.npy", ids, {1, len}) ||
          !saveInt64(base + "_mask.npy", mask, {1, len}))
        return failure();
      list << "input_ids=" << base << "_ids.npy";
      if (llvm::is_contained(names, "attention_mask"))
        list << " attention_mask=" << base << "_mask.npy";
      if (llvm::is_contained(names, "position_ids")) {
        if (runs == 0 && !saveInt64((workDir + "/positions.npy").str(), positions,
                                    {1, len}))
          return failure();
        list << " position_ids=" << workDir << "/positions.npy";
      }
      list << emptyPast << "\n";
    }
    if (runs == 0) {
      error() << "calibration file '" << calib << "' is shorter than one "
              << len << "-byte chunk\n";
      return failure();
    }
    return success();
  }
  // A directory: one sample per sub-directory, or the directory itself.
  SmallVector<std::string> samples;
  for (llvm::sys::fs::directory_iterator it(calib, ec), end; it != end && !ec;
       it.increment(ec))
    if (llvm::sys::fs::is_directory(it->path()))
      samples.push_back(it->path());
  llvm::sort(samples);
  if (samples.empty())
    samples.push_back(calib);
  for (const std::string &dir : samples) {
    if (runs >= maxChunks)
      break;
    for (const std::string &n : names) {
      std::string path = dir + "/" + fileSafe(n) + ".npy";
      if (!llvm::sys::fs::exists(path)) {
        error() << "calibration sample '" << dir << "' has no " << fileSafe(n)
                << ".npy for input '" << n << "'\n";
        return failure();
      }
      list << n << "=" << path << " ";
    }
    list << "\n";
    ++runs;
  }
  return success();
}

/// An SVG plot of each site's neurons sorted by activation frequency.
void writePlot(const sparsec::rt::Profile &profile, llvm::StringRef path) {
  std::error_code ec;
  llvm::raw_fd_ostream svg(path, ec);
  if (ec)
    return;
  const int w = 640, h = 360, left = 50, bottom = 30;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w
      << "' height='" << h << "' font-family='sans-serif' font-size='11'>\n"
      << "<rect width='100%' height='100%' fill='white'/>\n"
      << "<text x='" << left << "' y='14'>neurons sorted by activation "
         "frequency, per site</text>\n"
      << "<line x1='" << left << "' y1='" << h - bottom << "' x2='" << w - 10
      << "' y2='" << h - bottom << "' stroke='black'/>\n"
      << "<line x1='" << left << "' y1='20' x2='" << left << "' y2='"
      << h - bottom << "' stroke='black'/>\n"
      << "<text x='" << left << "' y='" << h - 8 << "'>0</text><text x='"
      << w - 60 << "' y='" << h - 8 << "'>neuron rank</text>\n"
      << "<text x='4' y='24'>1.0</text><text x='4' y='" << h - bottom
      << "'>0.0</text>\n";
  static const char *colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                 "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  for (auto [i, site] : llvm::enumerate(profile.sites)) {
    std::vector<uint64_t> c = site.counts;
    std::sort(c.begin(), c.end(), std::greater<uint64_t>());
    svg << "<polyline fill='none' stroke='" << colors[i % 8] << "' points='";
    size_t n = c.size(), step = std::max<size_t>(1, n / 400);
    for (size_t k = 0; k < n; k += step) {
      double x = left + (w - 10 - left) * double(k) / std::max<size_t>(1, n - 1);
      double f = site.tokens ? double(c[k]) / double(site.tokens) : 0.0;
      double y = (h - bottom) - (h - bottom - 20) * f;
      svg << llvm::format("%.1f,%.1f ", x, y);
    }
    svg << "'/>\n<text x='" << w - 200 << "' y='" << 30 + 14 * i
        << "' fill='" << colors[i % 8] << "'>" << site.name << "</text>\n";
  }
  svg << "</svg>\n";
}

int runProfile(MLIRContext &context) {
  if (inputFile.empty() || calib.empty() || outputFile.empty()) {
    error() << "usage: sparsec profile <model.onnx> --calib <file|dir> -o "
               "<model.sprof>\n";
    return 1;
  }
  if (weightsType != "f32" && weightsType != "f16" && weightsType != "bf16") {
    error() << "unknown --weights '" << weightsType
            << "' (expected f32, f16 or bf16)\n";
    return 1;
  }
  if (seqLen < 1 || maxChunks < 1 || threads < 0 || numSamples < 0) {
    error() << (seqLen < 1     ? "--seq-len must be at least 1, got " + std::to_string(seqLen)
                : maxChunks < 1 ? "--max-chunks must be at least 1, got " +
                                      std::to_string(maxChunks)
                : threads < 0   ? "--threads must be 0 (all cores) or more, got " +
                                    std::to_string(threads)
                                : "--samples must be 0 (none) or more, got " +
                                      std::to_string(numSamples))
            << "\n";
    return 1;
  }
  std::unique_ptr<sparsec::WeightStore> store;
  OwningOpRef<ModuleOp> module = importAndRaise(
      context, sparsec::Phase::Raise, store, /*widenAll=*/true);
  if (!module)
    return 1;
  {
    PhaseTimer timer("instrument");
    PassManager pm(&context);
    pm.addPass(sparsec::createInstrumentSparsityPass());
    sparsec::SchedulePipelineOptions scheduleOptions;
    scheduleOptions.denseWeights = weightsType.getValue();
    sparsec::buildSchedulePipeline(pm, scheduleOptions);
    if (failed(pm.run(*module)))
      return 1;
    auto sites = (*module)->getAttrOfType<ArrayAttr>("sparsec.profile_sites");
    if (!sites || sites.empty()) {
      error() << "the model has no ReLU-family activation feeding a linear "
                 "layer (directly or as the gate of a gated MLP): nothing to "
                 "profile\n";
      return 1;
    }
    timer.detail = std::to_string(sites.size()) + " sites";
  }
  std::string workDir = outputFile + ".build";
  if (std::error_code ec = llvm::sys::fs::create_directories(workDir)) {
    error() << "cannot create '" << workDir << "': " << ec.message() << "\n";
    return 1;
  }
  if (failed(emitAndBuild(*module, *store, workDir, {}, false)))
    return 1;
  auto funcs = llvm::to_vector(module->getOps<func::FuncOp>());
  std::string listPath;
  int64_t runs = 0, tokensPerRun = 0;
  if (failed(prepareCalibration(funcs.front(), workDir, listPath, runs,
                                tokensPerRun)))
    return 1;
  {
    PhaseTimer timer("run");
    std::string binary = workDir + "/model";
    std::string threadArg = std::to_string(
        threads > 0 ? threads.getValue()
                    : std::max(1u, std::thread::hardware_concurrency()));
    llvm::SmallVector<llvm::StringRef> args{binary, "profile", "--input-list",
                                            listPath, "-o", outputFile,
                                            "--threads", threadArg};
    // Spread the (layer input, mask) samples over all calibration tokens.
    int64_t tokens = runs * tokensPerRun;
    std::string samplesArg = std::to_string(std::max(0, numSamples.getValue()));
    std::string everyArg = std::to_string(
        numSamples > 0 && tokens > 0 ? std::max<int64_t>(1, tokens / numSamples)
                                     : 1);
    args.append({"--samples", samplesArg, "--sample-every", everyArg});
    if (quiet)
      args.push_back("--quiet");
    std::string err;
    int rc = llvm::sys::ExecuteAndWait(binary, args, std::nullopt, {}, 0, 0, &err);
    if (rc != 0) {
      error() << "the profiling run failed" << (err.empty() ? "" : ": " + err)
              << "\n";
      return 1;
    }
    timer.detail = std::to_string(runs) + " calibration runs";
  }
  sparsec::rt::Profile profile;
  std::string err;
  if (!sparsec::rt::readProfile(outputFile, profile, err)) {
    error() << err << "\n";
    return 1;
  }
  std::string plot = outputFile + ".svg";
  writePlot(profile, plot);
  // tile32: the share of 32-token x 1-neuron PIT tiles with a non-zero,
  // measured on consecutive tokens; est32: the same if tokens were
  // independent (what the per-neuron counts alone would suggest).
  llvm::outs() << llvm::format("%-28s %8s %9s %8s %9s %6s %8s %9s %8s\n",
                               "site", "neurons", "tokens", "zero %",
                               "top20 %", "dead", "samples", "tile32 %",
                               "est32 %");
  for (const sparsec::rt::ProfileSite &site : profile.sites) {
    double active = 0;
    int64_t dead = 0;
    std::vector<uint64_t> c = site.counts;
    for (uint64_t v : c) {
      active += double(v);
      dead += v == 0;
    }
    std::sort(c.begin(), c.end(), std::greater<uint64_t>());
    size_t top = std::max<size_t>(1, (c.size() * 20 + 99) / 100);
    double topActive = 0;
    for (size_t k = 0; k < top && k < c.size(); ++k)
      topActive += double(c[k]);
    double total = double(site.tokens) * double(site.neurons);
    const double tile32 = site.measuredTileDensity(32);
    const double est32 = site.estimatedTileDensity(32);
    std::string measured =
        tile32 < 0 ? std::string("-")
                   : llvm::formatv("{0:F1}%", 100.0 * tile32).str();
    llvm::outs() << llvm::format(
        "%-28s %8lld %9lld %7.1f%% %8.1f%% %6lld %8lld %9s %7.1f%%\n",
        site.name.c_str(), (long long)site.neurons, (long long)site.tokens,
        total > 0 ? 100.0 * (1.0 - active / total) : 0.0,
        active > 0 ? 100.0 * topActive / active : 0.0, (long long)dead,
        (long long)site.samples, measured.c_str(), 100.0 * est32);
  }
  llvm::outs() << "wrote " << outputFile << " and " << plot << "\n";
  return 0;
}
} // namespace

/// `sparsec tune --target cuda -o table.json`: builds a small program
/// against the CUDA runtime (its pitTune) with nvcc, runs it on this
/// machine's GPU and leaves the table at the output path.
int runTune() {
  if (target != "cuda") {
    error() << "tune measures the CUDA kernels: pass --target cuda\n";
    return 1;
  }
  if (outputFile.empty()) {
    error() << "tune needs an output file: sparsec tune --target cuda -o "
               "table.json\n";
    return 1;
  }
  if (tuneM <= 0 || tuneK <= 0 || tuneN <= 0 || tuneN % 8) {
    error() << "tune: --m, --k and --n must be positive and --n a multiple "
               "of 8\n";
    return 1;
  }
#ifndef SPARSEC_TUNE_MAIN
  error() << "this sparsec was built without the CUDA runtime: tune needs it\n";
  return 1;
#else
  llvm::SmallString<128> dir;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("sparsec-tune", dir)) {
    error() << "cannot create a temporary directory: " << ec.message() << "\n";
    return 1;
  }
  std::string source = SPARSEC_TUNE_MAIN, binary = (dir + "/tune").str();
  int rc;
  {
    PhaseTimer timer("build tuner");
    if (failed(buildCuda(source, binary, timer))) {
      llvm::sys::fs::remove_directories(dir);
      return 1;
    }
  }
  {
    PhaseTimer timer("measure");
    std::string m = std::to_string(tuneM), k = std::to_string(tuneK),
                n = std::to_string(tuneN);
    llvm::SmallVector<llvm::StringRef> args{binary, outputFile, m, k, n};
    std::string err;
    rc = llvm::sys::ExecuteAndWait(binary, args, std::nullopt, {}, 0, 0, &err);
    if (rc != 0)
      error() << "the tuner failed" << (err.empty() ? "" : ": " + err)
              << " (exit " << rc << "; it needs a CUDA GPU)\n";
    timer.detail = outputFile;
  }
  llvm::sys::fs::remove_directories(dir);
  if (rc != 0)
    return 1;
  llvm::errs() << "[sparsec] wrote " << outputFile
               << " (use it with sparsec compile --pit-table)\n";
  return 0;
#endif
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // --mlir-print-debuginfo and friends: keeps ONNX node names (locations)
  // in printed IR, so profile sites survive a round trip through text.
  mlir::registerAsmPrinterCLOptions();
  cl::HideUnrelatedOptions(category);
  cl::HideUnrelatedOptions(category, importCmd);
  cl::HideUnrelatedOptions(category, compileCmd);
  cl::HideUnrelatedOptions(category, profileCmd);
  cl::HideUnrelatedOptions(category, tuneCmd);
  cl::ParseCommandLineOptions(
      argc, argv,
      "sparsec: ahead-of-time compiler for activation-sparse ONNX models\n\n"
      "  sparsec import  model.onnx [-o model.mlir] [--compile-to=import|raise]\n"
      "  sparsec compile model.onnx --target x86 -o out/ "
      "[--compile-to=<phase>]\n"
      "  sparsec tune --target cuda -o table.json\n");

  MLIRContext context;
  context.loadDialect<sparsec::SparsecDialect, func::FuncDialect>();
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagHandler(sourceMgr, &context);
  // Counts errors, then lets the handler above print them.
  context.getDiagEngine().registerHandler([](Diagnostic &diag) {
    if (diag.getSeverity() == DiagnosticSeverity::Error)
      ++errorCount;
    return failure();
  });

  if (importCmd)
    return runImport(context);
  if (compileCmd)
    return runCompile(context);
  if (profileCmd)
    return runProfile(context);
  if (tuneCmd)
    return runTune();
  error() << "expected a subcommand: import, compile, profile or tune (run "
             "'sparsec --help')\n";
  return 1;
}
