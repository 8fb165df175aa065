//===- Profiling.cpp - activation counters of profiling builds -----------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Ops.h"

#include <algorithm>
#include <string>

namespace sparsec::rt::ops {

namespace {
/// Adds one call's tile counts: the full blocks of 8, 16 and 32 consecutive
/// rows of x [rows, neurons] from row 0, as the PIT kernels tile a batched
/// input. A shorter tail is left out: calls shorter than a tile would
/// otherwise make its density look lower than a full tile's.
void countTiles(Context::Tiles &t, const float *x, int64_t rows,
                int64_t neurons) {
  if (t.counts.empty())
    t.counts.assign(3 * size_t(neurons), 0);
  std::vector<uint8_t> active(static_cast<size_t>(neurons));
  for (int i = 0; i < 3; ++i) {
    const int64_t size = Context::kProfileTileRows[i];
    uint64_t *c = t.counts.data() + size_t(i) * size_t(neurons);
    for (int64_t r0 = 0; r0 + size <= rows; r0 += size) {
      std::fill(active.begin(), active.end(), uint8_t(0));
      for (int64_t r = r0; r < r0 + size; ++r) {
        const float *row = x + r * neurons;
        for (int64_t n = 0; n < neurons; ++n)
          active[size_t(n)] |= row[n] != 0.0f;
      }
      for (int64_t n = 0; n < neurons; ++n)
        c[n] += active[size_t(n)];
      ++t.blocks[i];
    }
  }
}
} // namespace

bool profileCount(Context &ctx, const Tensor &x, int site,
                  const Tensor *layerInput) {
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
    ctx.profileSamples.resize(ctx.desc.numProfileSites);
    ctx.profileTiles.resize(ctx.desc.numProfileSites);
  }
  std::vector<uint64_t> &counts = ctx.profileCounts[size_t(site)];
  if (counts.empty())
    counts.assign(size_t(neurons), 0);
  if (int64_t(counts.size()) != neurons)
    return ctx.fail("profile_count: site " + std::to_string(site) + " has " +
                    std::to_string(counts.size()) + " neurons, got " +
                    x.describe());
  int64_t rows = neurons ? x.numel() / neurons : 0;
  if (layerInput && ctx.profileMaxSamples > 0 && rows > 0) {
    const Tensor &in = *layerInput;
    int64_t dim = in.rank ? in.shape[in.rank - 1] : 0;
    if (in.dtype != DType::f32 || dim <= 0 || in.numel() != rows * dim)
      return ctx.fail("profile_count: layer input " + in.describe() +
                      " does not have one row per token of " + x.describe());
    Context::Samples &s = ctx.profileSamples[size_t(site)];
    if (s.count == 0)
      s.inputDim = dim;
    if (s.inputDim != dim)
      return ctx.fail("profile_count: layer input width changed to " +
                      std::to_string(dim));
    const int64_t maskBytes = (neurons + 7) / 8;
    const int64_t every = std::max<int64_t>(1, ctx.profileSampleEvery);
    const int64_t seen = ctx.profileTokens[size_t(site)];
    // Token t (counted over all runs) is sampled when t % every == 0.
    for (int64_t r = (every - seen % every) % every;
         r < rows && s.count < ctx.profileMaxSamples; r += every) {
      const float *row = in.as<float>() + r * dim;
      s.inputs.insert(s.inputs.end(), row, row + dim);
      size_t base = s.masks.size();
      s.masks.resize(base + size_t(maskBytes), 0);
      const float *act = x.as<float>() + r * neurons;
      for (int64_t n = 0; n < neurons; ++n)
        if (act[n] != 0.0f)
          s.masks[base + size_t(n / 8)] |= uint8_t(1u << (n % 8));
      ++s.count;
    }
  }
  const float *p = x.as<float>();
  uint64_t *c = counts.data();
  for (int64_t r = 0; r < rows; ++r, p += neurons)
    for (int64_t n = 0; n < neurons; ++n)
      c[n] += p[n] != 0.0f;
  ctx.profileTokens[size_t(site)] += rows;
  countTiles(ctx.profileTiles[size_t(site)], x.as<float>(), rows, neurons);
  return true;
}

} // namespace sparsec::rt::ops
