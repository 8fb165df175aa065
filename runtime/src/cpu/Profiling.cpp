//===- Profiling.cpp - activation counters of profiling builds -----------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Ops.h"

#include <string>

namespace sparsec::rt::ops {

bool profileCount(Context &ctx, const Tensor &x, int site) {
  if (site < 0 || site >= ctx.desc.numProfileSites)
    return ctx.fail("profile_count: site " + std::to_string(site) +
                    " is not a profile site of this model");
  if (x.dtype != DType::f32 || x.rank < 1)
    return ctx.fail("profile_count: expected a float32 tensor, got " +
                    x.describe());
  int64_t neurons = x.shape[x.rank - 1];
  if (ctx.profileCounts.size() < size_t(ctx.desc.numProfileSites)) {
    ctx.profileCounts.resize(ctx.desc.numProfileSites);
    ctx.profileTokens.resize(ctx.desc.numProfileSites, 0);
  }
  std::vector<uint64_t> &counts = ctx.profileCounts[size_t(site)];
  if (counts.empty())
    counts.assign(size_t(neurons), 0);
  if (int64_t(counts.size()) != neurons)
    return ctx.fail("profile_count: site " + std::to_string(site) + " has " +
                    std::to_string(counts.size()) + " neurons, got " +
                    x.describe());
  int64_t rows = neurons ? x.numel() / neurons : 0;
  const float *p = x.as<float>();
  uint64_t *c = counts.data();
  for (int64_t r = 0; r < rows; ++r, p += neurons)
    for (int64_t n = 0; n < neurons; ++n)
      c[n] += p[n] != 0.0f;
  ctx.profileTokens[size_t(site)] += rows;
  return true;
}

} // namespace sparsec::rt::ops
