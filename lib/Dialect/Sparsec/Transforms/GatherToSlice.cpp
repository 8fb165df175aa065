//===- GatherToSlice.cpp - gathers of a constant index run -> slice -------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//
//
// Exporters write `x[..., [i], :]` and `x[..., i, :]` as a Gather of constant
// indices: Falcon's fused q/k/v projection picks its one key head and one
// value head so. Gathering a run of consecutive indices is a slice (and, for
// a scalar index, a squeeze of the sliced axis), which both runtimes and the
// later passes know: the CUDA backend has no device gather. Gathers of
// integer tensors (shape arithmetic) are left alone.
//
//===----------------------------------------------------------------------===//

#include "MatchUtils.h"
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <limits>

namespace sparsec {
#define GEN_PASS_DEF_GATHERTOSLICEPASS
#include "sparsec/Dialect/Sparsec/Transforms/Passes.h.inc"
} // namespace sparsec

using namespace mlir;
using namespace sparsec;

namespace {
/// The [start, end) bounds of a slice selecting `ids` (consecutive, in
/// order) from an axis of `size` (ShapedType::kDynamic when unknown), or
/// nothing when they are not such a run or cannot be bounded without the
/// size. Negative indices count from the end, as Gather's do.
std::optional<std::pair<int64_t, int64_t>> runBounds(ArrayRef<int64_t> ids,
                                                     int64_t size) {
  if (ids.empty())
    return std::nullopt;
  SmallVector<int64_t> norm(ids);
  if (!ShapedType::isDynamic(size)) {
    for (int64_t &id : norm) {
      if (id < -size || id >= size)
        return std::nullopt; // out of range: the runtime's check reports it
      if (id < 0)
        id += size;
    }
  } else {
    // Without the size, indices of one sign only.
    const bool negative = norm.front() < 0;
    if (llvm::any_of(norm, [&](int64_t id) { return (id < 0) != negative; }))
      return std::nullopt;
  }
  for (size_t i = 1; i < norm.size(); ++i)
    if (norm[i] != norm[i - 1] + 1)
      return std::nullopt;
  int64_t end = norm.back() + 1;
  if (end == 0) // a run ending at -1 (size unknown): up to the end
    end = std::numeric_limits<int64_t>::max();
  return std::make_pair(norm.front(), end);
}

struct GatherRunToSlice : OpRewritePattern<GatherOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GatherOp op,
                                PatternRewriter &rewriter) const override {
    DenseElementsAttr idx;
    if (!matchPattern(op.getIndices(), m_Constant(&idx)))
      return rewriter.notifyMatchFailure(op, "indices are not a constant");
    auto indicesType = cast<RankedTensorType>(op.getIndices().getType());
    if (indicesType.getRank() > 1)
      return rewriter.notifyMatchFailure(op, "indices of rank above 1");
    auto dataType = cast<RankedTensorType>(op.getData().getType());
    // Integer gathers are shape arithmetic, which the host evaluates and
    // the position and cache passes read as gathers.
    if (!isa<FloatType>(dataType.getElementType()))
      return rewriter.notifyMatchFailure(op, "not a float tensor");
    const int64_t rank = dataType.getRank();
    const int64_t axis = normalizeAxis(op.getAxis(), rank);
    if (axis < 0 || axis >= rank)
      return rewriter.notifyMatchFailure(op, "axis out of range");
    SmallVector<int64_t> ids;
    for (const APInt &v : idx.getValues<APInt>())
      ids.push_back(v.getSExtValue());
    auto bounds = runBounds(ids, dataType.getDimSize(axis));
    if (!bounds)
      return rewriter.notifyMatchFailure(op,
                                         "not a run of consecutive indices");

    Location loc = op.getLoc();
    auto vec = [&](int64_t v) -> Value {
      auto type = RankedTensorType::get({1}, rewriter.getI64Type());
      return ConstantOp::create(rewriter, loc,
                                DenseElementsAttr::get(type, ArrayRef(v)));
    };
    // The slice keeps the axis, with the run's length.
    auto resultType = cast<RankedTensorType>(op.getType());
    SmallVector<int64_t> sliced(dataType.getShape());
    sliced[axis] = static_cast<int64_t>(ids.size());
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis) {
        // The gather's result type may know dims the data's does not.
        int64_t r = indicesType.getRank() == 0 ? (d < axis ? d : d - 1) : d;
        if (ShapedType::isDynamic(sliced[d]))
          sliced[d] = resultType.getDimSize(r);
      }
    auto slicedType =
        RankedTensorType::get(sliced, resultType.getElementType());
    Value slice = SliceOp::create(rewriter, loc, slicedType, op.getData(),
                                  vec(bounds->first), vec(bounds->second),
                                  vec(axis), vec(1));
    if (indicesType.getRank() == 1) {
      rewriter.replaceOp(op, slice);
      return success();
    }
    rewriter.replaceOpWithNewOp<SqueezeOp>(op, resultType, slice,
                                           rewriter.getDenseI64ArrayAttr(axis));
    return success();
  }
};

struct GatherToSlicePass
    : public sparsec::impl::GatherToSlicePassBase<GatherToSlicePass> {
  using Base::Base;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<GatherRunToSlice>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};
} // namespace
