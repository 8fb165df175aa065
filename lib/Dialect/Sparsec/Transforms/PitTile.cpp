//===- PitTile.cpp - PIT micro-tile choice for batched sparse linears ----===//
//
// Part of the sparsec project.
//
// See the pass description in Passes.td. The latency table format (written
// by `sparsec tune --target cuda`, docs/GPU.md):
//
//   {"format": "sparsec-pit-table", "version": 1, "device": "...",
//    "m": 4096, "k": 4096, "n": 4096,
//    "dense": {"convert_us": ..., "gemm_us": ...},
//    "pit": [{"tile": 32, "columns": 128, "density": 0.1,
//             "sread_us": ..., "matmul_us": ...},
//            ...]}
//
// `columns` (128 or 256; absent: 128, tables written before it) is the
// output columns a block computes; each (tile, columns) pair is a series of
// its own, and the pass picks among all of them.
//
// Times are for the table's m x k x n problem with fp32 activations (what
// the runtime runs); the gather/convert parts scale with m * k, the
// products with m * k * n.
//
//===----------------------------------------------------------------------===//

#include "SparsitySites.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <numeric>
#include <functional>
#include <map>

namespace sparsec {
#define GEN_PASS_DEF_PITTILEPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {

/// The H200 table measured with `sparsec tune --target cuda` (built in).
const char *const kBuiltinTable =
#include "PitH200Table.inc"
    ;

struct PitPoint {
  double density, sreadUs, matmulUs;
};
struct PitTable {
  std::string device;
  double m = 0, k = 0, n = 0;
  double convertUs = 0, gemmUs = 0;
  /// Measured points by (tile, columns), density-sorted.
  std::map<std::pair<int64_t, int64_t>, std::vector<PitPoint>> series;

  /// Estimated microseconds of (`tile`, `columns`) at `density` for
  /// tokens x K x N.
  double pit(int64_t tile, int64_t columns, double density, double tokens,
             double K, double N) const {
    const std::vector<PitPoint> &pts = series.at({tile, columns});
    PitPoint at = pts.front();
    if (density >= pts.back().density) {
      at = pts.back();
    } else if (density > pts.front().density) {
      for (size_t i = 1; i < pts.size(); ++i)
        if (density <= pts[i].density) {
          const PitPoint &a = pts[i - 1], &b = pts[i];
          double f = (density - a.density) / (b.density - a.density);
          at = {density, a.sreadUs + f * (b.sreadUs - a.sreadUs),
                a.matmulUs + f * (b.matmulUs - a.matmulUs)};
          break;
        }
    }
    return at.sreadUs * (tokens * K) / (m * k) +
           at.matmulUs * (tokens * K * N) / (m * k * n);
  }
  double dense(double tokens, double K, double N) const {
    return convertUs * (tokens * K) / (m * k) +
           gemmUs * (tokens * K * N) / (m * k * n);
  }
};

/// Parses a latency table; an error message names what is wrong.
LogicalResult parseTable(llvm::StringRef text, PitTable &t, std::string &why) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed) {
    why = "not JSON: " + llvm::toString(parsed.takeError());
    return failure();
  }
  const llvm::json::Object *o = parsed->getAsObject();
  if (!o || o->getString("format") != "sparsec-pit-table" ||
      o->getInteger("version") != 1) {
    why = "not a sparsec PIT table (format sparsec-pit-table, version 1)";
    return failure();
  }
  if (auto d = o->getString("device"))
    t.device = d->str();
  auto num = [&](const llvm::json::Object *obj, llvm::StringRef key,
                 double &out) {
    std::optional<double> v = obj ? obj->getNumber(key) : std::nullopt;
    if (!v || !std::isfinite(*v) || *v < 0) {
      why = ("missing or invalid '" + key + "'").str();
      return false;
    }
    out = *v;
    return true;
  };
  if (!num(o, "m", t.m) || !num(o, "k", t.k) || !num(o, "n", t.n) ||
      !num(o->getObject("dense"), "convert_us", t.convertUs) ||
      !num(o->getObject("dense"), "gemm_us", t.gemmUs))
    return failure();
  if (t.m <= 0 || t.k <= 0 || t.n <= 0) {
    why = "m, k and n must be positive";
    return failure();
  }
  const llvm::json::Array *pts = o->getArray("pit");
  if (!pts) {
    why = "missing 'pit' measurements";
    return failure();
  }
  for (const llvm::json::Value &v : *pts) {
    const llvm::json::Object *e = v.getAsObject();
    std::optional<int64_t> tile = e ? e->getInteger("tile") : std::nullopt;
    PitPoint p;
    if (!tile || (*tile != 8 && *tile != 16 && *tile != 32)) {
      why = "a 'pit' entry without a tile of 8, 16 or 32";
      return failure();
    }
    int64_t columns = 128;
    if (e->get("columns")) {
      std::optional<int64_t> c = e->getInteger("columns");
      if (!c || (*c != 128 && *c != 256)) {
        why = "a 'pit' entry's 'columns' must be 128 or 256";
        return failure();
      }
      columns = *c;
    }
    if (!num(e, "density", p.density) || !num(e, "sread_us", p.sreadUs) ||
        !num(e, "matmul_us", p.matmulUs))
      return failure();
    t.series[{*tile, columns}].push_back(p);
  }
  if (t.series.empty()) {
    why = "no 'pit' measurements";
    return failure();
  }
  for (auto &[key, v] : t.series)
    llvm::sort(v, [](const PitPoint &a, const PitPoint &b) {
      return a.density < b.density;
    });
  return success();
}

struct PitTilePass : public sparsec::impl::PitTilePassBase<PitTilePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    if (forceTile != -1 && forceTile != 0 && forceTile != 8 &&
        forceTile != 16 && forceTile != 32) {
      module.emitError("sparsec-pit-tile: force-tile must be -1, 0, 8, 16 or "
                       "32, got ")
          << forceTile.getValue();
      return signalPassFailure();
    }
    if (forceColumns != 0 && forceColumns != 128 && forceColumns != 256) {
      module.emitError("sparsec-pit-tile: force-columns must be 0, 128 or "
                       "256, got ")
          << forceColumns.getValue();
      return signalPassFailure();
    }
    if (tokens <= 0 || margin <= 0) {
      module.emitError("sparsec-pit-tile: tokens and margin must be positive");
      return signalPassFailure();
    }
    auto isCandidate = [](SparseLinearOp s) {
      return s.getSparseDim() == SparseDim::input && !placedOnCpu(s);
    };
    // Records the choice (tile 0: dense; columns 0: the runtime's
    // default, no attribute) and counts it.
    auto choose = [&](SparseLinearOp s, int64_t tile, int64_t columns) {
      auto i64 = IntegerType::get(ctx, 64);
      s.setPitTileAttr(IntegerAttr::get(i64, tile));
      if (tile && columns)
        s.setPitColumnsAttr(IntegerAttr::get(i64, columns));
      ++(tile ? numPit : numDense);
    };
    if (forceTile >= 0) {
      module.walk([&](SparseLinearOp s) {
        if (isCandidate(s))
          choose(s, forceTile, forceColumns);
      });
      return;
    }

    PitTable lat;
    std::string why;
    std::string source =
        table.empty() ? std::string("built-in H200 table") : table.getValue();
    std::unique_ptr<llvm::MemoryBuffer> buffer;
    llvm::StringRef text = kBuiltinTable;
    if (!table.empty()) {
      auto file = llvm::MemoryBuffer::getFile(table.getValue());
      if (!file) {
        module.emitError("cannot read PIT latency table '")
            << table.getValue() << "': " << file.getError().message();
        return signalPassFailure();
      }
      buffer = std::move(*file);
      text = buffer->getBuffer();
    }
    if (failed(parseTable(text, lat, why))) {
      module.emitError("PIT latency table '") << source << "': " << why;
      return signalPassFailure();
    }
    if (forceColumns && llvm::none_of(lat.series, [&](const auto &entry) {
          return entry.first.second == forceColumns;
        })) {
      module.emitError("PIT latency table '")
          << source << "' has no measurements at " << forceColumns.getValue()
          << " columns (force-columns)";
      return signalPassFailure();
    }
    rt::Profile prof;
    if (failed(loadProfileFor(module, getArgument(), profile, prof)))
      return signalPassFailure();

    // Sites in walk order, as the profile names them.
    llvm::DenseMap<Operation *, std::string> siteNames;
    int64_t index = 0;
    module.walk([&](Operation *op) {
      if (isSparsitySite(op))
        siteNames[op] = siteName(op, index++);
    });
    module.walk([&](SparseLinearOp s) {
      if (!isCandidate(s))
        return;
      // The site before the input: the activation itself, or the one a
      // product, square or cap reads (a gated MLP's gate, a squared or
      // capped activation), whose zeros it keeps.
      Operation *act = s.getInput().getDefiningOp();
      if (act && isa<MulOp, PowOp, MinOp>(act) && !siteNames.count(act))
        for (Value operand : act->getOperands())
          if (Operation *def = operand.getDefiningOp();
              def && siteNames.count(def)) {
            act = def;
            break;
          }
      auto it = act ? siteNames.find(act) : siteNames.end();
      const rt::ProfileSite *site =
          it != siteNames.end() ? prof.find(it->second) : nullptr;
      auto inType = cast<RankedTensorType>(s.getInput().getType());
      auto outType = cast<RankedTensorType>(s.getType());
      int64_t K = inType.getShape().back(), N = outType.getShape().back();
      if (!site || site->tokens <= 0 || site->neurons != K ||
          ShapedType::isDynamic(N)) {
        s.emitRemark("PIT: no profile counts for this input (or a dynamic "
                     "size); batched calls stay dense");
        choose(s, 0, 0);
        return;
      }
      // The neurons the batched call computes: all, or for a hybrid build's
      // GPU part (after sparsec-partition-hot-cold) the layer's G most
      // frequent ones.
      std::vector<int64_t> neurons(static_cast<size_t>(K));
      std::iota(neurons.begin(), neurons.end(), int64_t(0));
      std::string part;
      if (auto place = act->getAttrOfType<PlacementAttr>("placement")) {
        int64_t G = place.getGpuNeurons();
        if (G <= 0) {
          choose(s, 0, 0);
          return; // the whole FFN runs on the CPU
        }
        std::stable_sort(neurons.begin(), neurons.end(),
                         [&](int64_t a, int64_t b) {
                           return site->counts[size_t(a)] >
                                  site->counts[size_t(b)];
                         });
        neurons.resize(size_t(std::min<int64_t>(G, K)));
        K = int64_t(neurons.size());
        part = ", GPU part of " + std::to_string(K) + " neurons";
      }
      double denseUs = lat.dense(double(tokens), double(K), double(N));
      int64_t best = 0, bestColumns = 0;
      double bestUs = denseUs * margin;
      std::string detail;
      llvm::raw_string_ostream os(detail);
      for (int64_t tile : {32, 16, 8}) {
        // Measured on consecutive tokens when the profile has tile counts;
        // otherwise estimated as if tokens were independent.
        double density = site->measuredTileDensity(tile, neurons);
        const bool measured = density >= 0;
        if (!measured)
          density = site->estimatedTileDensity(tile, neurons);
        for (int64_t columns : {128, 256}) {
          if (!lat.series.count({tile, columns}) ||
              (forceColumns && columns != forceColumns))
            continue;
          double us = lat.pit(tile, columns, density, double(tokens), double(K),
                              double(N));
          os << llvm::format("%s%lld x 1%s: density %.3f %s, %.1f us",
                             detail.empty() ? "" : "; ", (long long)tile,
                             columns == 128 ? "" : ", 256 columns", density,
                             measured ? "measured" : "estimated", us);
          if (us < bestUs) {
            bestUs = us;
            best = tile;
            // 128 is the runtime's default: no attribute unless forced.
            bestColumns = columns == 128 ? forceColumns.getValue() : columns;
          }
        }
      }
      choose(s, best, bestColumns);
      std::string head;
      llvm::raw_string_ostream(head)
          << llvm::format("PIT at %lld tokens (%s%s): dense %.1f us; ",
                          (long long)tokens.getValue(), it->second.c_str(),
                          part.c_str(), denseUs);
      s.emitRemark() << head << detail << " -> "
                     << (best ? std::to_string(best) + " x 1 tiles" +
                                    (bestColumns == 256 ? ", 256 columns" : "")
                              : std::string("dense"));
    });
  }
};

} // namespace
