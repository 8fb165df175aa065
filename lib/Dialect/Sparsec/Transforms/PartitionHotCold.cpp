//===- PartitionHotCold.cpp - GPU/CPU neuron placement under a budget -----===//
//
// Part of the sparsec project.
//
// See the pass description (Passes.td) and docs/HotCold.md.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "SparsitySites.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"
#include "sparsec/Placement/HotColdSolver.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/Support/Format.h"

#include <numeric>

namespace sparsec {
#define GEN_PASS_DEF_PARTITIONHOTCOLDPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {

/// One FFN (SparsitySites.h's FfnRegion: plain, gated or squared) and the
/// operands indexed by its neurons.
struct Ffn {
  FfnRegion region;
  std::string site;
  int64_t neurons = 0, outputDim = 0;
  /// Input elements of one neuron's rows over all its projections (one up
  /// row; a gated MLP's gate and up rows).
  int64_t inputRow = 0;
  /// (operand, permute rows?) of every weight indexed by the neurons.
  SmallVector<std::pair<OpOperand *, bool>> indexed;
  /// The projections' and the down projection's weights and the
  /// projections' biases: what placement moves between devices.
  SmallVector<OpOperand *> placed;
  int64_t biases = 0; // how many of `placed` are biases
  std::vector<int64_t> order; // hot-first: new neuron i = old order[i]
  std::vector<double> freq;   // per new neuron: active per token
};

int64_t elements(Type t) {
  auto r = dyn_cast<RankedTensorType>(t);
  return r && r.hasStaticShape() ? r.getNumElements() : 0;
}

struct PartitionHotColdPass
    : public sparsec::impl::PartitionHotColdPassBase<PartitionHotColdPass> {
  using Base::Base;

  /// Bytes a weight takes on the GPU: matrices at weight-bytes per element,
  /// vectors (biases, norm scales) in float32.
  int64_t gpuBytes(Type t) const {
    auto r = cast<RankedTensorType>(t);
    return elements(t) * (r.getRank() >= 2 ? weightBytes : 4);
  }

  /// The FFN around activation site `act`, or failure with a reason.
  FailureOr<Ffn> match(Operation *act, std::string &why) {
    std::optional<FfnRegion> region = matchFfnRegion(act, why);
    if (!region)
      return failure();
    Ffn f;
    f.region = *region;
    f.neurons = region->neurons;
    Operation *down = region->down;
    auto downW = cast<RankedTensorType>(down->getOperand(1).getType());
    const bool downT = down->hasAttr("transpose_weight");
    if (!downW.hasStaticShape()) {
      why = "its weights have dynamic shapes";
      return failure();
    }
    f.outputDim = downW.getDimSize(downT ? 0 : 1);
    for (Operation *p : region->projections) {
      auto w = cast<RankedTensorType>(p->getOperand(1).getType());
      const bool t = p->hasAttr("transpose_weight");
      if (!w.hasStaticShape() || w.getDimSize(t ? 0 : 1) != f.neurons) {
        why = "its projections' weights are not [input, neurons] matrices of "
              "static shape";
        return failure();
      }
      f.inputRow += w.getDimSize(t ? 1 : 0);
      OpOperand *weight = &p->getOpOperand(1);
      f.indexed.push_back({weight, /*rows=*/t});
      f.placed.push_back(weight);
      OpOperand *b = biasOperand(p);
      if (!b)
        continue;
      if (!defOp<WeightOp>(b->get())) {
        why = "its up bias is not a model weight";
        return failure();
      }
      f.indexed.push_back({b, true});
      f.placed.push_back(b);
      ++f.biases;
    }
    OpOperand *downWeight = &down->getOpOperand(1);
    f.indexed.push_back({downWeight, /*rows=*/!downT});
    f.placed.push_back(downWeight);
    // A predictor selecting the first projection's neurons: its second
    // matrix and bias are indexed by the same neurons (it stays on the GPU).
    if (auto s = dyn_cast<SparseLinearOp>(region->projections.front());
        s && s.getActive()) {
      if (auto p = defOp<PredictOp>(s.getActive())) {
        auto weightOperand = [&](unsigned i) -> OpOperand * {
          if (i >= p->getNumOperands() || !defOp<WeightOp>(p->getOperand(i)))
            return nullptr;
          return &p->getOpOperand(i);
        };
        OpOperand *w2 = weightOperand(2);
        if (!w2) {
          why = "its predictor's weights are not weights";
          return failure();
        }
        f.indexed.push_back({w2, /*rows=*/false});
        if (p.getBias()) {
          OpOperand *pb = weightOperand(3);
          if (!pb) {
            why = "its predictor's bias is not a weight";
            return failure();
          }
          f.indexed.push_back({pb, true});
        }
      }
    }
    return f;
  }

  /// Replaces `operand`'s weight by a derived global with the hot-first
  /// permutation of its rows or columns appended to its transforms.
  void permute(OpOperand &operand, bool rows, ArrayRef<int64_t> order,
               SymbolTable &symbols) {
    auto ref = defOp<WeightOp>(operand.get());
    auto global = symbols.lookup<GlobalOp>(ref.getName());
    SmallVector<StringRef> transforms;
    if (auto old = global.getTransforms())
      for (Attribute a : *old)
        transforms.push_back(cast<StringAttr>(a).getValue());
    transforms.push_back(rows ? "permute_rows" : "permute_cols");
    OpBuilder gb(global);
    gb.setInsertionPointAfter(global);
    auto hot = GlobalOp::create(
        gb, global.getLoc(), gb.getStringAttr((global.getSymName() + ".hot").str()),
        global.getTypeAttr(), global.getSourceAttr(), gb.getStrArrayAttr(transforms),
        global.getValueAttr(), gb.getDenseI64ArrayAttr(order));
    symbols.insert(hot); // renames on a clash
    OpBuilder b(operand.getOwner());
    operand.set(WeightOp::create(b, ref.getLoc(), ref.getType(),
                                 FlatSymbolRefAttr::get(hot.getSymNameAttr()))
                    .getResult());
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (gpuBudget <= 0) {
      module.emitError("sparsec-partition-hot-cold needs gpu-budget=<bytes> > 0");
      return signalPassFailure();
    }
    if (groupSize <= 0 || (weightBytes != 2 && weightBytes != 4) || maxSeqLen <= 0 ||
        workspaceBytes < 0 || !(cpuBandwidth > 0) || !(syncUs >= 0)) {
      module.emitError("sparsec-partition-hot-cold: group-size, max-seq-len and "
                       "cpu-bandwidth must be positive, weight-bytes 2 or 4, "
                       "workspace-bytes and sync-us non-negative");
      return signalPassFailure();
    }
    rt::Profile prof;
    if (failed(loadProfileFor(module, getArgument(), profile, prof)))
      return signalPassFailure();

    // The FFNs, with their neurons ordered hot-first.
    std::vector<Ffn> ffns;
    int64_t index = 0;
    bool failedSite = false;
    module.walk([&](Operation *op) {
      if (!isSparsitySite(op))
        return;
      std::string name = siteName(op, index++);
      std::string why;
      FailureOr<Ffn> f = match(op, why);
      if (failed(f)) {
        op->emitRemark("FFN at '") << name << "' stays on the GPU: " << why;
        return;
      }
      const rt::ProfileSite *site = prof.find(name);
      if (!site || site->neurons != f->neurons || site->tokens <= 0) {
        op->emitError("activation site '")
            << name << "' has no usable counts in profile '" << profile << "'";
        failedSite = true;
        return;
      }
      f->site = name;
      f->order.resize(size_t(f->neurons));
      std::iota(f->order.begin(), f->order.end(), 0);
      std::stable_sort(f->order.begin(), f->order.end(), [&](int64_t a, int64_t b) {
        return site->counts[size_t(a)] > site->counts[size_t(b)];
      });
      for (int64_t n : f->order)
        f->freq.push_back(double(site->counts[size_t(n)]) / double(site->tokens));
      ffns.push_back(std::move(*f));
    });
    if (failedSite)
      return signalPassFailure();

    // What must live on the GPU: every weight but the placed FFN parts, the
    // KV caches and the workspace.
    SymbolTable symbols(module);
    DenseSet<Operation *> placedWeights;
    for (const Ffn &f : ffns)
      for (OpOperand *o : f.placed)
        placedWeights.insert(o->get().getDefiningOp());
    int64_t weightsAlways = 0, predictorBytes = 0, placedBytes = 0;
    DenseSet<StringRef> counted;
    module.walk([&](WeightOp w) {
      if (placedWeights.contains(w)) {
        placedBytes += gpuBytes(w.getType());
        return;
      }
      if (!counted.insert(w.getName()).second)
        return;
      auto global = symbols.lookup<GlobalOp>(w.getName());
      int64_t b = gpuBytes(w.getType());
      weightsAlways += b;
      if (global && global.getValueAttr())
        predictorBytes += b;
    });
    const int64_t kvBytes = kvCacheBytes(module, maxSeqLen);
    const int64_t always = weightsAlways + kvBytes + workspaceBytes;
    if (gpuBudget < always) {
      module.emitError("GPU budget of ")
          << int64_t(gpuBudget) << " bytes is below the " << always
          << " bytes that must live on the GPU: weights outside the FFNs "
          << weightsAlways - predictorBytes << ", predictors " << predictorBytes
          << ", KV cache " << kvBytes << " (" << int64_t(maxSeqLen)
          << " tokens), workspace " << int64_t(workspaceBytes)
          << "; give at least gpu-budget=" << always;
      return signalPassFailure();
    }

    // The placement problem.
    placement::Problem problem;
    problem.budget = gpuBudget - always;
    for (const Ffn &f : ffns) {
      placement::Layer layer;
      const int64_t perNeuron =
          weightBytes * (f.inputRow + f.outputDim) + 4 * f.biases;
      const int64_t groups = (f.neurons + groupSize - 1) / groupSize;
      layer.bytes.push_back(0);
      for (int64_t g = 0; g < groups; ++g) {
        int64_t lo = g * groupSize, hi = std::min(f.neurons, lo + groupSize);
        double mass = 0;
        for (int64_t n = lo; n < hi; ++n)
          mass += f.freq[size_t(n)];
        layer.groupMass.push_back(mass);
        layer.bytes.push_back(hi * perNeuron);
      }
      // A split layer must save the CPU at least sync-us of row reads
      // (rows of weight-bytes elements, as the CPU reads them since fp16
      // weights are fp16 on both devices, at cpu-bandwidth GB/s).
      const double threshold = syncUs * 1e-6 * cpuBandwidth * 1e9 /
                               double(weightBytes * (f.inputRow + f.outputDim));
      double prefix = 0;
      layer.minGroups = groups; // no worthwhile split
      for (int64_t g = 0; g < groups; ++g) {
        prefix += layer.groupMass[size_t(g)];
        if (prefix >= threshold) {
          layer.minGroups = g + 1;
          break;
        }
      }
      problem.layers.push_back(std::move(layer));
    }
    placement::Solution solution;
    double optimum = 0;
    std::string error;
    if (!placement::solve(problem, solution, error)) {
      module.emitError("hot/cold placement: ") << error;
      return signalPassFailure();
    }
    optimum = solution.objective;
    if (mode == "layers") {
      // The layer-offload baseline: whole FFNs on the GPU in model order
      // while they fit, the rest on the CPU.
      int64_t left = problem.budget;
      bool full = false;
      solution.objective = 0;
      solution.usedBytes = 0;
      for (size_t l = 0; l < problem.layers.size(); ++l) {
        const placement::Layer &layer = problem.layers[l];
        int64_t G = int64_t(layer.groupMass.size());
        full = full || layer.bytes.back() > left;
        solution.gpuGroups[l] = full ? 0 : G;
        if (!full) {
          left -= layer.bytes.back();
          solution.usedBytes += layer.bytes.back();
          for (double m : layer.groupMass)
            solution.objective += m;
        }
      }
    } else if (mode != "neurons") {
      module.emitError("sparsec-partition-hot-cold: mode must be neurons or "
                       "layers, got '")
          << mode << "'";
      return signalPassFailure();
    }

    // Hot-first weights and the placement attributes.
    MLIRContext *ctx = &getContext();
    int64_t split = 0, onGpu = 0, onCpu = 0;
    for (auto [i, f] : llvm::enumerate(ffns)) {
      const int64_t gpuNeurons =
          std::min(f.neurons, solution.gpuGroups[i] * groupSize);
      for (auto [operand, rows] : f.indexed)
        permute(*operand, rows, f.order, symbols);
      auto placementAttr = PlacementAttr::get(ctx, gpuNeurons, f.neurons, groupSize);
      f.region.act->setAttr("placement", placementAttr);
      SmallVector<Operation *> linears(f.region.projections.begin(),
                                       f.region.projections.end());
      linears.push_back(f.region.down);
      for (Operation *op : linears)
        if (auto s = dyn_cast<SparseLinearOp>(op))
          s.setPlacementAttr(placementAttr);
      ++numLayers;
      ++(gpuNeurons == 0 ? onCpu : gpuNeurons == f.neurons ? onGpu : split);
    }
    // Globals the permuted copies replaced.
    eraseUnusedWeights(module);

    numSplit += split;
    numGpu += onGpu;
    numCpu += onCpu;
    Builder b(ctx);
    module->setAttr(
        "sparsec.hot_cold",
        b.getDictionaryAttr({
            b.getNamedAttr("gpu_budget", b.getI64IntegerAttr(gpuBudget)),
            b.getNamedAttr("always_gpu_bytes", b.getI64IntegerAttr(always)),
            b.getNamedAttr("ffn_gpu_bytes", b.getI64IntegerAttr(solution.usedBytes)),
            b.getNamedAttr("ffn_bytes", b.getI64IntegerAttr(placedBytes)),
            b.getNamedAttr("objective", b.getF64FloatAttr(solution.objective)),
            b.getNamedAttr("bound", b.getF64FloatAttr(solution.bound)),
            b.getNamedAttr("total_mass", b.getF64FloatAttr(solution.totalMass)),
            b.getNamedAttr("solve_ms", b.getF64FloatAttr(solution.seconds * 1e3)),
        }));
    std::string message;
    llvm::raw_string_ostream(message) << llvm::format(
        "%s placement: the GPU serves %.3f of %.3f active neurons per "
        "token (%.1f %%), LP bound %.3f (gap %.3f); %lld FFNs split, %lld on "
        "the GPU, %lld on the CPU; FFN bytes on the GPU %lld of %lld "
        "available (%lld always there); solved exactly in %.2f ms (%lld DP "
        "states)",
        mode == "layers" ? "layer-offload" : "hot/cold", solution.objective, solution.totalMass,
        solution.totalMass > 0 ? 100.0 * solution.objective / solution.totalMass : 0.0,
        solution.bound, solution.bound - solution.objective,
        (long long)split, (long long)onGpu, (long long)onCpu,
        (long long)solution.usedBytes,
        (long long)problem.budget, (long long)always, solution.seconds * 1e3,
        (long long)solution.states);
    if (mode == "layers")
      message += llvm::formatv(" (the hot/cold optimum serves {0:f3})", optimum).str();
    module.emitRemark(message);
  }
};
} // namespace
