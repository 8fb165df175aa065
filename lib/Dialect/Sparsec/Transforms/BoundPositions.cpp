//===- BoundPositions.cpp - the longest sequence position tables hold -----===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//
//
// A decoder's position ids are integer arithmetic on the attention mask and
// the input shapes. The pass cuts that arithmetic out of the model (the
// backward slice of every computed lookup id), then, for a sequence length
// S, pins the input shapes, folds the shape arithmetic and evaluates what is
// left with intervals: the mask's values lie in [0, 1]. The largest S whose
// ids stay inside every table is found by bisection (the ids grow with S).
//
//===----------------------------------------------------------------------===//

#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <optional>

namespace sparsec {
#define GEN_PASS_DEF_BOUNDPOSITIONSPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {

/// The values a tensor's elements may take; `known` false: any.
struct Interval {
  bool known = false;
  double lo = 0, hi = 0;

  static Interval of(double lo, double hi) {
    // Beyond 2^62 the arithmetic is no longer exact enough to bound ids.
    constexpr double kLimit = 4.6e18;
    if (!(lo >= -kLimit && hi <= kLimit && lo <= hi))
      return {};
    return {true, lo, hi};
  }
  static Interval boolean() { return of(0, 1); }
};

Interval hull(Interval a, Interval b) {
  if (!a.known || !b.known)
    return {};
  return Interval::of(std::min(a.lo, b.lo), std::max(a.hi, b.hi));
}

bool isInteger(Type t) {
  auto shaped = dyn_cast<ShapedType>(t);
  return shaped && isa<IntegerType>(shaped.getElementType());
}

/// Integer results round their real bounds outwards (division, casts).
Interval rounded(Interval v, Type resultType) {
  if (!v.known || !isInteger(resultType))
    return v;
  return Interval::of(std::floor(v.lo), std::ceil(v.hi));
}

Interval product(Interval a, Interval b) {
  if (!a.known || !b.known)
    return {};
  double c[] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
  return Interval::of(*std::min_element(c, c + 4), *std::max_element(c, c + 4));
}

Interval constantInterval(Attribute attr) {
  auto elements = dyn_cast<DenseElementsAttr>(attr);
  if (!elements || elements.getNumElements() == 0)
    return {};
  Type elt = elements.getElementType();
  double lo = INFINITY, hi = -INFINITY;
  auto add = [&](double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  };
  if (elt.isInteger(1)) {
    for (bool v : elements.getValues<bool>())
      add(v ? 1 : 0);
  } else if (auto it = dyn_cast<IntegerType>(elt)) {
    for (const APInt &v : elements.getValues<APInt>())
      add(it.isUnsigned() ? double(v.getZExtValue()) : double(v.getSExtValue()));
  } else if (isa<FloatType>(elt)) {
    for (const APFloat &v : elements.getValues<APFloat>())
      add(v.convertToDouble());
  } else {
    return {};
  }
  return Interval::of(lo, hi);
}

/// Interval of one op's results from its operands' (`get`).
template <typename Get>
SmallVector<Interval> evaluateOp(Operation *op, Get get) {
  Type type = op->getNumResults() ? op->getResult(0).getType() : Type();
  auto one = [&](Interval v) { return SmallVector<Interval>{v}; };
  auto sameAsFirst = [&]() {
    return SmallVector<Interval>(op->getNumResults(), get(op->getOperand(0)));
  };
  if (auto c = dyn_cast<ConstantOp>(op))
    return one(constantInterval(c.getValue()));
  if (auto c = dyn_cast<ConstantOfShapeOp>(op))
    return one(constantInterval(c.getValue()));
  if (isa<CompareOp, AndOp, OrOp, NotOp>(op))
    return one(Interval::boolean());
  if (isa<SliceOp, GatherOp, ReshapeOp, UnsqueezeOp, SqueezeOp, FlattenOp,
          ExpandOp, TransposeOp, SplitOp>(op))
    return sameAsFirst();
  if (auto cast = dyn_cast<CastOp>(op)) {
    if (cast.getType().getElementType().isInteger(1))
      return one(Interval::boolean());
    return one(rounded(get(cast.getInput()), cast.getType()));
  }
  if (auto add = dyn_cast<AddOp>(op)) {
    Interval a = get(add.getLhs()), b = get(add.getRhs());
    return one(a.known && b.known ? Interval::of(a.lo + b.lo, a.hi + b.hi)
                                  : Interval());
  }
  if (auto sub = dyn_cast<SubOp>(op)) {
    Interval a = get(sub.getLhs()), b = get(sub.getRhs());
    return one(a.known && b.known ? Interval::of(a.lo - b.hi, a.hi - b.lo)
                                  : Interval());
  }
  if (auto mul = dyn_cast<MulOp>(op))
    return one(product(get(mul.getLhs()), get(mul.getRhs())));
  if (auto div = dyn_cast<DivOp>(op)) {
    Interval a = get(div.getLhs()), b = get(div.getRhs());
    if (!a.known || !b.known || (b.lo <= 0 && b.hi >= 0))
      return one({});
    return one(rounded(product(a, Interval::of(1 / b.hi, 1 / b.lo)), type));
  }
  if (auto mx = dyn_cast<MaxOp>(op)) {
    Interval a = get(mx.getLhs()), b = get(mx.getRhs());
    return one(a.known && b.known
                   ? Interval::of(std::max(a.lo, b.lo), std::max(a.hi, b.hi))
                   : Interval());
  }
  if (auto mn = dyn_cast<MinOp>(op)) {
    Interval a = get(mn.getLhs()), b = get(mn.getRhs());
    return one(a.known && b.known
                   ? Interval::of(std::min(a.lo, b.lo), std::min(a.hi, b.hi))
                   : Interval());
  }
  if (isa<NegOp>(op)) {
    Interval a = get(op->getOperand(0));
    return one(a.known ? Interval::of(-a.hi, -a.lo) : Interval());
  }
  if (isa<AbsOp>(op)) {
    Interval a = get(op->getOperand(0));
    if (!a.known || a.lo >= 0)
      return one(a);
    if (a.hi <= 0)
      return one(Interval::of(-a.hi, -a.lo));
    return one(Interval::of(0, std::max(-a.lo, a.hi)));
  }
  if (isa<ReluOp>(op)) {
    Interval a = get(op->getOperand(0));
    return one(a.known ? Interval::of(std::max(0.0, a.lo), std::max(0.0, a.hi))
                       : Interval());
  }
  if (auto where = dyn_cast<WhereOp>(op))
    return one(hull(get(where.getX()), get(where.getY())));
  if (auto concat = dyn_cast<ConcatOp>(op)) {
    Interval all = get(op->getOperand(0));
    for (Value v : op->getOperands().drop_front())
      all = hull(all, get(v));
    return one(all);
  }
  if (auto trilu = dyn_cast<TriluOp>(op))
    return one(hull(get(trilu.getInput()), Interval::of(0, 0)));
  if (auto cumsum = dyn_cast<CumSumOp>(op)) {
    auto in = dyn_cast<RankedTensorType>(cumsum.getInput().getType());
    Interval a = get(cumsum.getInput());
    if (!a.known || !in)
      return one({});
    const int64_t axis = normalizeAxis(cumsum.getAxis(), in.getRank());
    if (axis < 0 || axis >= in.getRank() || in.isDynamicDim(axis))
      return one({});
    // Each element sums k of the inputs, k in [1, n] ([0, n - 1] exclusive).
    const double n = double(in.getDimSize(axis));
    const double kMin = cumsum.getExclusive() ? 0 : 1;
    const double kMax = cumsum.getExclusive() ? n - 1 : n;
    return one(Interval::of(std::min(kMin * a.lo, kMax * a.lo),
                            std::max(kMin * a.hi, kMax * a.hi)));
  }
  if (auto reduce = dyn_cast<ReduceOp>(op)) {
    Interval a = get(reduce.getInput());
    if (reduce.getKind() != ReduceKind::sum)
      return one(a);
    auto in = dyn_cast<RankedTensorType>(reduce.getInput().getType());
    auto out = dyn_cast<RankedTensorType>(reduce.getType());
    if (!a.known || !in || !out || !in.hasStaticShape() ||
        !out.hasStaticShape() || out.getNumElements() == 0)
      return one({});
    const double n = double(in.getNumElements() / out.getNumElements());
    return one(Interval::of(n * a.lo, n * a.hi));
  }
  if (auto range = dyn_cast<RangeOp>(op)) {
    Interval start = get(range.getStart()), limit = get(range.getLimit()),
             delta = get(range.getDelta());
    if (!start.known || !limit.known || !delta.known)
      return one({});
    // Integer ranges stop one below their limit; real ones just below it.
    const double step = isInteger(range.getType()) ? 1 : 0;
    if (delta.lo > 0)
      return one(Interval::of(start.lo, std::max(start.lo, limit.hi - step)));
    if (delta.hi < 0)
      return one(Interval::of(std::min(start.hi, limit.lo + step), start.hi));
    return one({});
  }
  return SmallVector<Interval>(op->getNumResults(), Interval());
}

/// A computed lookup id: the probe's return operand `index`.
struct Lookup {
  Location loc;
  int64_t rows;
  std::string table;
};

/// The roles of the decoder's named input dimensions.
struct Roles {
  std::string batch, seq, total, past;
};

func::FuncOp modelFunction(ModuleOp module) {
  func::FuncOp first;
  for (auto f : module.getOps<func::FuncOp>()) {
    if (f.isDeclaration())
      continue;
    if (f.getSymName() == "main")
      return f;
    if (!first)
      first = f;
  }
  return first;
}

std::string dimName(func::FuncOp f, unsigned arg, int64_t axis) {
  auto names = f.getArgAttrOfType<ArrayAttr>(arg, "sparsec.dims");
  auto type = dyn_cast<RankedTensorType>(f.getArgument(arg).getType());
  if (!names || !type || axis >= int64_t(names.size()) ||
      axis >= type.getRank() || !type.isDynamicDim(axis))
    return "";
  auto s = dyn_cast<StringAttr>(names[axis]);
  return s ? s.getValue().str() : "";
}

std::string argName(func::FuncOp f, unsigned arg) {
  auto n = f.getArgAttrOfType<StringAttr>(arg, "sparsec.name");
  return n ? n.getValue().str() : "";
}

class Prober {
public:
  Prober(ModuleOp probe, Roles roles, bool hasPast)
      : probe(probe), roles(std::move(roles)), hasPast(hasPast) {}

  /// The ids' intervals for a prompt of `s` tokens (`decode`: one token
  /// after s - 1 cached ones); nullopt when the probe did not evaluate.
  std::optional<SmallVector<Interval>> run(int64_t s, bool decode) {
    llvm::StringMap<int64_t> pins;
    auto pin = [&](const std::string &name, int64_t v) -> bool {
      if (name.empty())
        return true;
      auto [it, inserted] = pins.try_emplace(name, v);
      return inserted || it->second == v; // one name, two roles: consistent?
    };
    const int64_t seq = decode ? 1 : s, past = decode ? s - 1 : 0;
    if (!pin(roles.batch, 1) || !pin(roles.seq, seq) || !pin(roles.total, s) ||
        !pin(roles.past, past))
      return std::nullopt;
    OwningOpRef<ModuleOp> m = probe.clone();
    func::FuncOp f = modelFunction(*m);
    pinDims(f, pins);
    if (failed(foldConstants(*m)))
      return std::nullopt;
    DenseMap<Value, Interval> values;
    for (unsigned i = 0; i < f.getNumArguments(); ++i) {
      Value arg = f.getArgument(i);
      auto type = cast<ShapedType>(arg.getType());
      if (argName(f, i) == "attention_mask" || type.getElementType().isInteger(1))
        values[arg] = Interval::boolean();
    }
    auto get = [&](Value v) {
      auto it = values.find(v);
      return it == values.end() ? Interval() : it->second;
    };
    SmallVector<Interval> ids;
    for (Operation &op : f.getBody().front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (Value v : ret.getOperands())
          ids.push_back(get(v));
        break;
      }
      for (auto [r, v] : llvm::zip(op.getResults(), evaluateOp(&op, get)))
        values[r] = v;
    }
    return ids;
  }

  /// Whether every lookup of `counted` stays in its table at length s; the
  /// first that does not is `*failing`.
  bool fits(int64_t s, ArrayRef<Lookup> lookups, ArrayRef<bool> counted,
            int *failing) {
    for (bool decode : {false, true}) {
      if (decode && (!hasPast || s < 2))
        continue;
      auto ids = run(s, decode);
      if (!ids)
        continue;
      for (auto [i, lookup] : llvm::enumerate(lookups)) {
        const Interval &v = (*ids)[i];
        if (!counted[i] || !v.known)
          continue;
        if (v.lo < -double(lookup.rows) || v.hi > double(lookup.rows) - 1) {
          *failing = int(i);
          return false;
        }
      }
    }
    return true;
  }

private:
  ModuleOp probe;
  Roles roles;
  bool hasPast;
};

struct BoundPositionsPass
    : public sparsec::impl::BoundPositionsPassBase<BoundPositionsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    module->removeAttr("sparsec.positions");
    func::FuncOp model = modelFunction(module);
    if (!model)
      return;
    // The decoder's dimension roles, as generate feeds them.
    Roles roles;
    bool hasPast = false;
    for (unsigned i = 0; i < model.getNumArguments(); ++i) {
      std::string name = argName(model, i);
      if (name == "input_ids") {
        roles.batch = dimName(model, i, 0);
        roles.seq = dimName(model, i, 1);
      } else if (name == "attention_mask") {
        roles.total = dimName(model, i, 1);
      } else if (llvm::StringRef(name).starts_with("past_key_values.")) {
        hasPast = true;
        if (roles.past.empty())
          roles.past = dimName(model, i, 2);
      }
    }
    if (roles.seq.empty())
      return; // not a decoder whose sequence grows
    if (roles.total.empty())
      roles.total = roles.seq;

    // The probe: the model cut down to the computed ids of its lookups.
    OwningOpRef<ModuleOp> probe = module.clone();
    func::FuncOp f = modelFunction(*probe);
    for (auto other : llvm::to_vector(probe->getOps<func::FuncOp>()))
      if (other != f)
        other.erase();
    SmallVector<Value> ids;
    SmallVector<Lookup> lookups;
    f.walk([&](EmbeddingOp e) {
      auto consider = [&](Value table, Value id) {
        auto type = table ? dyn_cast<RankedTensorType>(table.getType())
                          : RankedTensorType();
        if (!id || isa<BlockArgument>(id) || !type || type.isDynamicDim(0))
          return;
        std::string name = "a table";
        if (auto w = table.getDefiningOp<WeightOp>()) {
          name = w.getName().str();
          if (auto g = SymbolTable::lookupNearestSymbolFrom<GlobalOp>(
                  w, w.getNameAttr());
              g && !g.getSource().empty())
            name = g.getSource().str();
        }
        ids.push_back(id);
        lookups.push_back({e.getLoc(), type.getDimSize(0), name});
      };
      consider(e.getTable(), e.getIds());
      consider(e.getTable2(), e.getIds2());
    });
    if (ids.empty())
      return;
    Operation *ret = f.getBody().back().getTerminator();
    OpBuilder b(ret);
    func::ReturnOp::create(b, ret->getLoc(), ids);
    ret->erase();
    f.setFunctionType(FunctionType::get(f.getContext(),
                                        f.getFunctionType().getInputs(),
                                        ValueRange(ids).getTypes()));
    f.removeResAttrsAttr();
    for (Operation &op :
         llvm::make_early_inc_range(llvm::reverse(f.getBody().front())))
      if (isOpTriviallyDead(&op))
        op.erase();
    llvm::StringSet<> used;
    f.walk([&](WeightOp w) { used.insert(w.getName()); });
    for (auto g : llvm::to_vector(probe->getOps<GlobalOp>()))
      if (!used.contains(g.getSymName()))
        g.erase();

    int64_t limit = 0;
    int bounding = -1;
    {
      // Probes that go wrong (contradictory pins) only bound less.
      ScopedDiagnosticHandler quiet(&getContext(),
                                    [](Diagnostic &) { return success(); });
      std::tie(limit, bounding) = bound(Prober(*probe, roles, hasPast), lookups);
    }
    if (limit <= 0)
      return;
    const Lookup &l = lookups[size_t(bounding)];
    Builder builder(&getContext());
    module->setAttr(
        "sparsec.positions",
        builder.getDictionaryAttr(
            {builder.getNamedAttr("limit", builder.getI64IntegerAttr(limit)),
             builder.getNamedAttr("rows", builder.getI64IntegerAttr(l.rows)),
             builder.getNamedAttr("table", builder.getStringAttr(l.table))}));
    InFlightDiagnostic remark =
        emitRemark(l.loc) << "sequences of up to " << limit
                          << " tokens: longer ones index past the " << l.rows
                          << " rows of '" << l.table << "'";
    if (auto name = dyn_cast<NameLoc>(l.loc))
      remark << " (node '" << name.getName().getValue() << "')";
  }

  /// The largest length at which the lookups the intervals bound stay in
  /// their tables, and the lookup that leaves first; 0 for no bound.
  static std::pair<int64_t, int> bound(Prober prober,
                                       ArrayRef<Lookup> lookups) {
    // The lookups bounded at one token are the position lookups.
    SmallVector<bool> counted(lookups.size(), false);
    bool any = false;
    if (auto first = prober.run(1, false))
      for (auto [i, v] : llvm::enumerate(*first))
        any |= counted[i] = v.known;
    int failing = -1;
    if (!any || !prober.fits(1, lookups, counted, &failing))
      return {0, -1}; // nothing bounded, or out of its table at one token
    constexpr int64_t kCap = int64_t(1) << 24;
    if (prober.fits(kCap, lookups, counted, &failing))
      return {0, -1}; // no bound below the cap
    int64_t lo = 1, hi = kCap; // fits(lo), not fits(hi)
    int bounding = failing;
    while (hi - lo > 1) {
      int64_t mid = lo + (hi - lo) / 2;
      if (prober.fits(mid, lookups, counted, &failing)) {
        lo = mid;
      } else {
        hi = mid;
        bounding = failing;
      }
    }
    return {lo, bounding};
  }
};
} // namespace
