//===- InsertPredictors.cpp - DejaVu predictors for sparse FFNs ----------===//
//
// Part of the sparsec project.
//
// For every FFN up projection `relu(linear(x, W, b))` whose site has
// (layer input, active mask) samples in the profile, trains a low-rank
// predictor (sparsec/Training/PredictorTraining.h), keeps the cheapest
// rank that reaches the target recall and, when it beats exact mode,
// rewrites
//   %h = sparsec.linear %x, %W, %b
// into
//   %m = sparsec.predict %x, %w1, %w2, %pb            (trained globals)
//   %h = sparsec.sparse_linear %x, %W, %b active %m {sparse_dim = output,
//                                                    mode = predicted}
// The predictor's quality on held-out samples is kept on the predict op as
// `sparsec.predictor` (rank, recall, precision, density, actual_density).
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Training/PredictorTraining.h"
#include "SparsitySites.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"
#include "sparsec/Weights/WeightStore.h"
#include "sparsec/rt/Profile.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace sparsec {
#define GEN_PASS_DEF_INSERTPREDICTORSPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
/// Float data of a weight: inline (`value`) or from the model's weight
/// store. Fails with a message.
LogicalResult loadWeight(Value v, SymbolTable &symbols,
                         std::unique_ptr<WeightStore> &store, ModuleOp module,
                         std::vector<float> &out, std::string &error) {
  auto weight = defOp<WeightOp>(v);
  if (!weight) {
    error = "its weight is computed at run time, not a model weight";
    return failure();
  }
  auto global = symbols.lookup<GlobalOp>(weight.getName());
  auto type = cast<RankedTensorType>(global.getType());
  // A half-precision export's weights are read as float32: kept float16
  // for a linear, or widened when packed (sparsec-widen-half).
  auto transforms = global.getTransforms();
  const bool widenOnly =
      transforms && transforms->size() == 1 &&
      cast<StringAttr>((*transforms)[0]).getValue() == "widen";
  if (!(type.getElementType().isF32() || type.getElementType().isF16()) ||
      (transforms && !widenOnly)) {
    error = "its weight '" + global.getSymName().str() +
            "' is not a plain float32 or float16 tensor";
    return failure();
  }
  size_t count = size_t(type.getNumElements());
  if (auto value = global.getValueAttr()) {
    if (auto dense = dyn_cast<DenseElementsAttr>(value)) {
      out.clear();
      for (APFloat x : dense.getValues<APFloat>())
        out.push_back(float(x.convertToDouble()));
    } else if (auto res = dyn_cast<DenseF32ResourceElementsAttr>(value)) {
      auto data = res.tryGetAsArrayRef();
      if (!data) {
        error = "the data of '" + global.getSymName().str() + "' is missing";
        return failure();
      }
      out.assign(data->begin(), data->end());
    }
    if (out.size() != count) {
      error = "the data of '" + global.getSymName().str() +
              "' does not match its type";
      return failure();
    }
    return success();
  }
  if (!store) {
    auto source = module->getAttrOfType<StringAttr>("sparsec.source");
    if (!source) {
      error = "the module names no model file (sparsec.source) to read "
              "weights from";
      return failure();
    }
    store = WeightStore::open(source.getValue().str(), error);
    if (!store) {
      error = "cannot read the model's weights: " + error;
      return failure();
    }
  }
  const TensorView *view = store->get(global.getSource().str(), error);
  // float32, or a half-precision export's weight widened (sparsec-widen-half).
  if (!view || !WeightStore::readFloat32(*view, out) ||
      out.size() != count) {
    error = "weight '" + global.getSource().str() +
            "' is missing or not float32, float16 or bfloat16 in " +
            store->path();
    return failure();
  }
  return success();
}

std::string symbolSafe(StringRef s) {
  std::string out;
  for (char c : s)
    out += llvm::isAlnum(static_cast<unsigned char>(c)) ? c : '_';
  while (!out.empty() && out.front() == '_')
    out.erase(out.begin());
  return out.empty() ? "site" : out;
}

struct InsertPredictorsPass
    : public sparsec::impl::InsertPredictorsPassBase<InsertPredictorsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!(targetRecall > 0.0 && targetRecall <= 1.0)) {
      module.emitError("target-recall must be in (0, 1], got ") << targetRecall;
      return signalPassFailure();
    }
    rt::Profile prof;
    std::string error;
    if (failed(loadProfileFor(module, getArgument(), profile, prof)))
      return signalPassFailure();
    SymbolTable symbols(module);
    std::unique_ptr<WeightStore> store;
    SmallVector<std::pair<Operation *, std::string>> sites;
    int64_t index = 0;
    module.walk([&](Operation *op) {
      if (isSparsitySite(op))
        sites.push_back({op, siteName(op, index++)});
    });
    std::string weightNote;
    double weight = rowWeight(module, sites, weightNote);
    if (weight < 0)
      return signalPassFailure();
    for (auto &[act, name] : sites) {
      auto up = act->getOperand(0).getDefiningOp<LinearOp>();
      auto remarkSkip = [&](const Twine &why) {
        act->emitRemark("no predictor for '") << name << "': " << why;
        ++numSkipped;
      };
      if (!up || up.getActivation() || !up->hasOneUse()) {
        remarkSkip("its input is not the result of a single-use linear");
        continue;
      }
      // A gated MLP: the predicted set drives the gate projection, the
      // actual gate the up projection (sparsec-sparsify-ffn).
      std::optional<GatedMlp> mlp = matchGatedMlp(act);
      if (mlp && !compound) {
        remarkSkip("it gates a gated MLP, which the target does not take "
                   "yet");
        continue;
      }
      if (matchZeroKeeping(act) && !compound) {
        remarkSkip(zeroKeepingKind(act) == "capped activation"
                       ? "it is capped before its down projection, which the "
                         "target does not take yet"
                       : "it is squared before its down projection, which the "
                         "target does not take yet");
        continue;
      }
      const rt::ProfileSite *site = prof.find(name);
      if (!site || site->samples == 0) {
        remarkSkip("the profile has no samples for it (profile with "
                   "--samples)");
        continue;
      }
      auto inType = up.getInput().getType();
      int64_t d = inType.getShape().back();
      int64_t n = up.getType().getShape().back();
      if (ShapedType::isDynamic(d) || ShapedType::isDynamic(n) ||
          site->inputDim != d || site->neurons != n) {
        act->emitError("profile site '")
            << name << "' samples " << site->inputDim << " -> "
            << site->neurons << " neurons, the model " << d << " -> " << n;
        return signalPassFailure();
      }
      PredictorProblem problem;
      problem.samples = site->samples;
      problem.d = d;
      problem.n = n;
      problem.inputs = site->sampleInputs.data();
      problem.active = [site](int64_t i, int64_t j) {
        return site->sampleActive(i, j);
      };
      std::vector<float> raw;
      if (failed(loadWeight(up.getWeight(), symbols, store, module, raw,
                            error)) ||
          (up.getBias() && failed(loadWeight(up.getBias(), symbols, store,
                                             module, problem.bias, error)))) {
        remarkSkip(error);
        continue;
      }
      if (up.getTransposeWeight()) { // [n, d] -> [d, n]
        problem.weight.resize(raw.size());
        for (int64_t j = 0; j < n; ++j)
          for (int64_t i = 0; i < d; ++i)
            problem.weight[size_t(i * n + j)] = raw[size_t(j * d + i)];
      } else {
        problem.weight = std::move(raw);
      }
      if (problem.bias.size() != 0 && int64_t(problem.bias.size()) != n) {
        remarkSkip("its bias is not one value per neuron");
        continue;
      }
      PredictorOptions options;
      options.targetRecall = targetRecall;
      options.ranks.assign(ranks.begin(), ranks.end());
      std::vector<Predictor> candidates;
      auto trainStart = std::chrono::steady_clock::now();
      if (!trainPredictors(problem, options, candidates, error)) {
        act->emitError("cannot train a predictor for '")
            << name << "': " << error;
        return signalPassFailure();
      }
      // Exact mode: dense up projection (the gate in a gated MLP), down
      // projection over the actual active neurons (and so the up
      // projection of a gated MLP, in either mode).
      double active = 0;
      for (uint64_t c : site->counts)
        active += double(c);
      double actualDensity =
          site->tokens > 0 ? active / (double(site->tokens) * double(n)) : 1.0;
      double gatedRows =
          mlp ? double(d) * double(n) * actualDensity : 0.0;
      // Row reads weighted by where they run (1 on the GPU); the predictor
      // itself always runs on the GPU.
      auto cost = [&](const Predictor &p) {
        double own = double(p.rank) * double(d + n);
        return own + weight * (p.cost - own + gatedRows);
      };
      const Predictor *best = &candidates.front();
      for (const Predictor &p : candidates)
        if (cost(p) < cost(*best))
          best = &p;
      double exactCost =
          weight * (double(d) * double(n) * (1.0 + actualDensity) + gatedRows);
      if (cost(*best) >= exactCost) {
        remarkSkip(llvm::formatv("the best predictor (rank {0}, density "
                                 "{1:f3}) costs {2:f0} multiply-adds per "
                                 "token, exact mode {3:f0}{4}",
                                 best->rank, best->calibrationDensity,
                                 cost(*best), exactCost, weightNote)
                       .str());
        continue;
      }
      insert(up, *best, name, symbols);
      ++numInserted;
      // One line per FFN: progress through a long compile, and the result.
      act->emitRemark("predictor for '")
          << name << "': rank " << best->rank << ", held-out recall "
          << llvm::formatv("{0:f2}", 100.0 * best->recall)
          << " %, predicted density "
          << llvm::formatv("{0:f1}", 100.0 * best->density) << " % (actual "
          << llvm::formatv("{0:f1}", 100.0 * best->actualDensity)
          << " %)" << weightNote << ", trained in "
          << llvm::formatv("{0:f1}", std::chrono::duration<double>(
                                         std::chrono::steady_clock::now() -
                                         trainStart)
                                         .count())
          << " s";
    }
  }

  /// The weight of a row read: 1 when everything is on the GPU; for the
  /// hybrid target, (1 - s) + s * cpu-cost, where s is the share of the FFN
  /// weights that does not fit the budget (the rest of the model must live
  /// on the GPU, so what is over the budget comes out of the FFNs). -1 on
  /// bad options. `note` says so in the remarks (empty when the weight is 1).
  double rowWeight(ModuleOp module,
                   ArrayRef<std::pair<Operation *, std::string>> sites,
                   std::string &note) {
    if (gpuBudget <= 0)
      return 1.0;
    if ((weightBytes != 2 && weightBytes != 4) || !(cpuCost >= 1.0) ||
        maxSeqLen <= 0 || workspaceBytes < 0) {
      module.emitError("sparsec-insert-predictors: weight-bytes must be 2 or "
                       "4, cpu-cost at least 1, max-seq-len positive and "
                       "workspace-bytes non-negative");
      return -1.0;
    }
    double total = 0, ffn = 0;
    module.walk([&](GlobalOp g) {
      auto type = dyn_cast<ShapedType>(g.getType());
      if (type && type.hasStaticShape())
        total += double(type.getNumElements());
    });
    for (auto &site : sites)
      if (auto up = site.first->getOperand(0).getDefiningOp<LinearOp>()) {
        auto w = cast<ShapedType>(up.getWeight().getType());
        if (w.hasStaticShape())
          // Up and down projections (and a gated MLP's gate).
          ffn += (matchGatedMlp(site.first) ? 3.0 : 2.0) *
                 double(w.getNumElements());
      }
    // What must live on the GPU besides the weights (as the placement
    // counts it): the KV caches and the workspace.
    total = total * double(weightBytes) +
            double(kvCacheBytes(module, maxSeqLen)) + double(workspaceBytes);
    ffn *= double(weightBytes);
    double share =
        ffn > 0 ? std::clamp((total - double(gpuBudget)) / ffn, 0.0, 1.0) : 0;
    double weight = (1.0 - share) + share * cpuCost;
    note = llvm::formatv(" (hybrid: {0:f0} % of the FFN rows on the CPU, "
                         "each read weighted {1:f1})",
                         100.0 * share, double(cpuCost))
               .str();
    return weight;
  }

  void insert(LinearOp up, const Predictor &p, const std::string &site,
              SymbolTable &symbols) {
    std::string base = symbolSafe(site);
    MLIRContext *ctx = &getContext();
    ModuleOp module = getOperation();
    int64_t d = up.getInput().getType().getShape().back();
    int64_t n = up.getType().getShape().back();
    auto f32 = Float32Type::get(ctx);
    auto makeGlobal = [&](StringRef suffix, ArrayRef<int64_t> shape,
                          const std::vector<float> &data) {
      OpBuilder b(ctx);
      b.setInsertionPointToStart(module.getBody());
      for (Operation &op : *module.getBody())
        if (isa<GlobalOp>(op))
          b.setInsertionPointAfter(&op);
      auto type = RankedTensorType::get(shape, f32);
      std::string symName = "predictor_" + base + "_" + suffix.str();
      auto value = DenseF32ResourceElementsAttr::get(
          type, symName,
          HeapAsmResourceBlob::allocateAndCopyInferAlign(ArrayRef<float>(data)));
      auto global = GlobalOp::create(b, up.getLoc(), b.getStringAttr(symName),
                                     TypeAttr::get(type), b.getStringAttr(""),
                                     /*transforms=*/nullptr, cast<ElementsAttr>(value),
                                     /*permutation=*/nullptr);
      symbols.insert(global); // renames on a clash
      OpBuilder ub(up);
      return WeightOp::create(ub, up.getLoc(), type,
                              FlatSymbolRefAttr::get(global.getSymNameAttr()))
          .getResult();
    };
    Value w1 = makeGlobal("w1", {d, p.rank}, p.w1);
    Value w2 = makeGlobal("w2", {p.rank, n}, p.w2);
    Value bias = makeGlobal("bias", {n}, p.bias);
    OpBuilder b(up);
    auto inShape = up.getInput().getType().getShape();
    SmallVector<int64_t> maskShape(inShape.begin(), inShape.end());
    maskShape.back() = n;
    auto predict = PredictOp::create(
        b, up.getLoc(), RankedTensorType::get(maskShape, b.getI1Type()),
        up.getInput(), w1, w2, bias, b.getF32FloatAttr(0.0f),
        /*lookahead=*/nullptr);
    predict->setAttr(
        "sparsec.predictor",
        b.getDictionaryAttr({
            b.getNamedAttr("site", b.getStringAttr(site)),
            b.getNamedAttr("rank", b.getI64IntegerAttr(p.rank)),
            b.getNamedAttr("recall", b.getF64FloatAttr(p.recall)),
            b.getNamedAttr("precision", b.getF64FloatAttr(p.precision)),
            b.getNamedAttr("density", b.getF64FloatAttr(p.density)),
            b.getNamedAttr("actual_density",
                           b.getF64FloatAttr(p.actualDensity)),
        }));
    auto sparse = SparseLinearOp::create(
        b, up.getLoc(), up.getType(), up.getInput(), up.getWeight(),
        up.getBias(), predict.getMask(),
        SparseDimAttr::get(ctx, SparseDim::output),
        SparseModeAttr::get(ctx, SparseMode::predicted),
        GranularityAttr::get(ctx, Granularity::neuron),
        up.getTransposeWeightAttr(), /*placement=*/nullptr,
        /*activation=*/nullptr, /*pit_tile=*/nullptr,
        /*pit_columns=*/nullptr);
    up.replaceAllUsesWith(sparse.getResult());
    up.erase();
  }
};
} // namespace
