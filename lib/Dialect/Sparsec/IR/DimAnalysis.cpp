//===- DimAnalysis.cpp - which dynamic dims are provably equal ------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Dialect/Sparsec/IR/DimAnalysis.h"
#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"

#include "mlir/IR/Matchers.h"

#include <limits>

using namespace mlir;
using namespace sparsec;

namespace {
/// Bounds the chains followed (reshape and expand targets lead into the
/// shapes of other tensors, whose dims are followed in turn).
constexpr int kMaxDepth = 3;
constexpr int kMaxSteps = 64;

/// The static length of a 1-D (1 for a scalar) tensor.
std::optional<int64_t> vectorLength(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || t.getRank() > 1)
    return std::nullopt;
  if (t.getRank() == 0)
    return 1;
  if (t.isDynamicDim(0))
    return std::nullopt;
  return t.getDimSize(0);
}

/// ONNX Slice's clamped [start, end) of an axis of `size` (step 1).
std::pair<int64_t, int64_t> sliceBounds(int64_t start, int64_t end,
                                        int64_t size) {
  auto clamp = [&](int64_t x) {
    if (x < 0)
      x += size;
    return std::min(std::max<int64_t>(x, 0), size);
  };
  return {clamp(start), std::max(clamp(start), clamp(end))};
}

std::optional<SmallVector<ShapeEntry>> entriesOf(Value shape, int depth);
DimRef originOf(Value value, int64_t index, int depth);
bool sameDimAt(Value a, int64_t ia, Value b, int64_t ib, int depth);

std::optional<SmallVector<ShapeEntry>> entriesOf(Value shape, int depth) {
  std::optional<int64_t> n = vectorLength(shape);
  if (!n)
    return std::nullopt;
  SmallVector<ShapeEntry> unknown(static_cast<size_t>(*n));
  if (depth > kMaxDepth)
    return unknown;
  if (std::optional<SmallVector<int64_t>> c = getConstantInts(shape)) {
    SmallVector<ShapeEntry> out;
    for (int64_t x : *c)
      out.push_back({ShapeEntry::Constant, x, {}});
    return out;
  }
  Operation *op = shape.getDefiningOp();
  if (!op)
    return unknown;
  if (auto s = dyn_cast<ShapeOp>(op)) {
    auto t = cast<ShapedType>(s.getInput().getType());
    const int64_t rank = t.getRank();
    const int64_t start =
        std::clamp<int64_t>(normalizeAxis(s.getStart(), rank), 0, rank);
    const int64_t end =
        s.getEnd()
            ? std::clamp<int64_t>(normalizeAxis(*s.getEnd(), rank), 0, rank)
            : rank;
    SmallVector<ShapeEntry> out;
    for (int64_t k = start; k < end; ++k) {
      if (!t.isDynamicDim(k))
        out.push_back({ShapeEntry::Constant, t.getDimSize(k), {}});
      else
        out.push_back({ShapeEntry::Dim, 0, {s.getInput(), k}});
    }
    if (static_cast<int64_t>(out.size()) != *n)
      return unknown;
    return out;
  }
  if (isa<UnsqueezeOp, SqueezeOp>(op)) {
    std::optional<SmallVector<ShapeEntry>> in =
        entriesOf(op->getOperand(0), depth + 1);
    if (!in || static_cast<int64_t>(in->size()) != *n)
      return unknown;
    return in;
  }
  if (auto c = dyn_cast<ConcatOp>(op)) {
    SmallVector<ShapeEntry> out;
    for (Value in : c.getInputs()) {
      std::optional<SmallVector<ShapeEntry>> part = entriesOf(in, depth + 1);
      if (!part)
        return unknown;
      llvm::append_range(out, *part);
    }
    if (static_cast<int64_t>(out.size()) != *n)
      return unknown;
    return out;
  }
  if (auto g = dyn_cast<GatherOp>(op)) {
    std::optional<SmallVector<ShapeEntry>> data =
        entriesOf(g.getData(), depth + 1);
    std::optional<SmallVector<int64_t>> idx = getConstantInts(g.getIndices());
    if (!data || !idx || normalizeAxis(g.getAxis(), 1) != 0 ||
        static_cast<int64_t>(idx->size()) != *n)
      return unknown;
    const int64_t size = static_cast<int64_t>(data->size());
    SmallVector<ShapeEntry> out;
    for (int64_t i : *idx) {
      if (i < 0)
        i += size;
      if (i < 0 || i >= size)
        return unknown;
      out.push_back((*data)[static_cast<size_t>(i)]);
    }
    return out;
  }
  if (auto s = dyn_cast<SliceOp>(op)) {
    std::optional<SmallVector<ShapeEntry>> data =
        entriesOf(s.getData(), depth + 1);
    auto starts = getConstantInts(s.getStarts()),
         ends = getConstantInts(s.getEnds()),
         axes = getConstantInts(s.getAxes()),
         steps = getConstantInts(s.getSteps());
    if (!data || !starts || !ends || !axes || !steps || starts->size() != 1 ||
        ends->size() != 1 || axes->size() != 1 || steps->size() != 1 ||
        normalizeAxis((*axes)[0], 1) != 0 || (*steps)[0] != 1)
      return unknown;
    auto [lo, hi] = sliceBounds((*starts)[0], (*ends)[0],
                                static_cast<int64_t>(data->size()));
    if (hi - lo != *n)
      return unknown;
    return SmallVector<ShapeEntry>(data->begin() + lo, data->begin() + hi);
  }
  return unknown;
}

/// The normalized constant axes of a slice, or nothing.
std::optional<SmallVector<int64_t>> slicedAxes(SliceOp s) {
  std::optional<SmallVector<int64_t>> axes = getConstantInts(s.getAxes());
  if (!axes)
    return std::nullopt;
  const int64_t rank = cast<ShapedType>(s.getData().getType()).getRank();
  for (int64_t &a : *axes)
    a = normalizeAxis(a, rank);
  return axes;
}

DimRef originOf(Value value, int64_t index, int depth) {
  for (int step = 0; step < kMaxSteps; ++step) {
    Operation *op = value.getDefiningOp();
    if (!op)
      break;
    if (auto t = dyn_cast<TransposeOp>(op)) {
      ArrayRef<int64_t> perm = t.getPermutation();
      if (index >= static_cast<int64_t>(perm.size()))
        break;
      index = perm[static_cast<size_t>(index)];
      value = t.getInput();
      continue;
    }
    if (auto s = dyn_cast<SliceOp>(op)) {
      std::optional<SmallVector<int64_t>> axes = slicedAxes(s);
      if (!axes || llvm::is_contained(*axes, index))
        break;
      value = s.getData();
      continue;
    }
    if (auto r = dyn_cast<ReshapeOp>(op)) {
      std::optional<SmallVector<ShapeEntry>> e = entriesOf(r.getShape(), depth);
      if (!e || index >= static_cast<int64_t>(e->size()))
        break;
      const ShapeEntry &entry = (*e)[static_cast<size_t>(index)];
      if (entry.kind == ShapeEntry::Constant && entry.constant == 0 &&
          !r.getAllowzero() &&
          index < cast<ShapedType>(r.getInput().getType()).getRank()) {
        value = r.getInput(); // ONNX's 0: the input's dim at that index
        continue;
      }
      if (entry.kind == ShapeEntry::Dim) {
        value = entry.dim.value;
        index = entry.dim.index;
        continue;
      }
      break;
    }
    if (auto e = dyn_cast<ExpandOp>(op)) {
      // Numpy broadcasting aligns the input's dims to the right.
      const int64_t off = cast<ShapedType>(e.getType()).getRank() -
                          cast<ShapedType>(e.getInput().getType()).getRank();
      std::optional<SmallVector<ShapeEntry>> entries =
          entriesOf(e.getShape(), depth);
      if (index < off || !entries ||
          index >= static_cast<int64_t>(entries->size()))
        break;
      const ShapeEntry &entry = (*entries)[static_cast<size_t>(index)];
      const bool keeps =
          (entry.kind == ShapeEntry::Constant && entry.constant == 1) ||
          (entry.kind == ShapeEntry::Dim && depth < kMaxDepth &&
           sameDimAt(entry.dim.value, entry.dim.index, e.getInput(),
                     index - off, depth + 1));
      if (!keeps)
        break;
      value = e.getInput();
      index -= off;
      continue;
    }
    if (auto sq = dyn_cast<SqueezeOp>(op)) {
      const int64_t rank = cast<ShapedType>(sq.getInput().getType()).getRank();
      SmallVector<int64_t> axes;
      for (int64_t a : sq.getAxes())
        axes.push_back(normalizeAxis(a, rank));
      int64_t in = 0, seen = 0;
      for (; in < rank; ++in) {
        if (llvm::is_contained(axes, in))
          continue;
        if (seen++ == index)
          break;
      }
      if (axes.empty() || in >= rank)
        break; // (squeeze of every unit dim: the kept ones are not known)
      value = sq.getInput();
      index = in;
      continue;
    }
    if (auto un = dyn_cast<UnsqueezeOp>(op)) {
      const int64_t rank = cast<ShapedType>(un.getType()).getRank();
      SmallVector<int64_t> axes;
      for (int64_t a : un.getAxes())
        axes.push_back(normalizeAxis(a, rank));
      if (llvm::is_contained(axes, index))
        break;
      index -= llvm::count_if(axes, [&](int64_t a) { return a < index; });
      value = un.getInput();
      continue;
    }
    if (auto l = dyn_cast<LinearOp>(op)) {
      if (index >= cast<ShapedType>(l.getType()).getRank() - 1)
        break;
      value = l.getInput();
      continue;
    }
    if (isa<RotaryOp, LayerNormOp, RmsNormOp, ReluOp>(op)) {
      value = op->getOperand(0);
      continue;
    }
    break;
  }
  return {value, index};
}

bool sameDimAt(Value a, int64_t ia, Value b, int64_t ib, int depth) {
  auto ta = cast<ShapedType>(a.getType()), tb = cast<ShapedType>(b.getType());
  if (ia < 0 || ib < 0 || ia >= ta.getRank() || ib >= tb.getRank())
    return false;
  if (!ta.isDynamicDim(ia) && !tb.isDynamicDim(ib))
    return ta.getDimSize(ia) == tb.getDimSize(ib);
  return originOf(a, ia, depth) == originOf(b, ib, depth);
}
} // namespace

std::optional<SmallVector<ShapeEntry>> sparsec::shapeEntries(Value shape) {
  return entriesOf(shape, 0);
}

DimRef sparsec::dimOrigin(Value value, int64_t index) {
  return originOf(value, index, 0);
}

bool sparsec::sameDim(Value a, int64_t ia, Value b, int64_t ib) {
  return sameDimAt(a, ia, b, ib, 0);
}
