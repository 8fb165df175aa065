//===- Switches.h - the CUDA runtime's environment switches -----*- C++ -*-===//
//
// Part of the sparsec project.
//
// Parsing of the experiment switches a CUDA model reads at start-up
// (SPARSEC_CUDA_PDL, SPARSEC_CUDA_SPLIT, SPARSEC_CUDA_UP,
// SPARSEC_CUDA_PIT_MMA, SPARSEC_CUDA_PIT), where PIT's plan applies and
// the cut points of a step, in plain C++ so that
// the unit tests check them without a GPU (internal).
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RUNTIME_CUDA_SWITCHES_H
#define SPARSEC_RUNTIME_CUDA_SWITCHES_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace sparsec::rt::cuda {

/// Which kernels are programmatic dependent launches (docs/GPU.md): the
/// one-block norms and the decode attention (`small`), the dense decode
/// GEMVs (`gemv`), the sparse decode kernels (`sparse`); by default all.
struct EarlyKinds {
  bool small = true, gemv = true, sparse = true;
};

/// SPARSEC_CUDA_PDL: "0" none, "1" all, or kinds joined by ',' or '+'
/// (small, gemv, sparse). Names it does not know go to `unknown`.
inline EarlyKinds parseEarlyKinds(const std::string &value,
                                  std::vector<std::string> &unknown) {
  EarlyKinds k;
  k.small = k.gemv = k.sparse = value == "1";
  if (value == "0" || value == "1")
    return k;
  std::string v = value;
  std::replace(v.begin(), v.end(), '+', ',');
  std::stringstream list(v);
  for (std::string kind; std::getline(list, kind, ',');) {
    if (kind == "small")
      k.small = true;
    else if (kind == "gemv")
      k.gemv = true;
    else if (kind == "sparse")
      k.sparse = true;
    else
      unknown.push_back(kind);
  }
  return k;
}

/// SPARSEC_CUDA_UP: "row" (the up projections of 1-2 tokens take a whole
/// row a warp) or "split" (a block's warps share each row; the default).
/// False, with `rowPerWarp` untouched, for anything else.
inline bool parseUpKernel(const std::string &value, bool &rowPerWarp) {
  if (value != "row" && value != "split")
    return false;
  rowPerWarp = value == "row";
  return true;
}

/// SPARSEC_CUDA_KV_CACHE: "f16" (a KV cache the model also reads in
/// float16 is kept in float16 where the weights are fp16) or "f32" (every
/// cache float32, the default). False, with `half` untouched, for anything
/// else.
inline bool parseKvCache(const std::string &value, bool &half) {
  if (value != "f16" && value != "f32")
    return false;
  half = value == "f16";
  return true;
}

/// SPARSEC_CUDA_PIT_MMA: "wgmma" (PIT's 32-token default on Hopper's
/// warpgroup MMAs, the default) or "sync" (on mma.sync). False, with
/// `warpgroup` untouched, for anything else.
inline bool parsePitMma(const std::string &value, bool &warpgroup) {
  if (value != "wgmma" && value != "sync")
    return false;
  warpgroup = value == "wgmma";
  return true;
}

/// SPARSEC_CUDA_PIT_MMA from the environment, as pitWarpgroupMma reads it
/// (for model binaries, the tuner and the benchmarks alike): true with
/// `warpgroup` set where it holds a known value; false where it is unset,
/// or (with a warning on stderr) unknown.
inline bool pitMmaFromEnvironment(bool &warpgroup) {
  const char *p = std::getenv("SPARSEC_CUDA_PIT_MMA");
  if (!p)
    return false;
  if (parsePitMma(p, warpgroup))
    return true;
  std::fprintf(stderr,
               "sparsec: warning: SPARSEC_CUDA_PIT_MMA='%s' ignored (sync or "
               "wgmma)\n",
               p);
  return false;
}

/// Where a down projection's PIT plan applies (SPARSEC_CUDA_PIT): `fill`
/// (the default) where its grid fills the GPU (pitFillsGpu), `always`
/// wherever the compiler planned it, `never` nowhere.
enum class PitUse { fill, always, never };

/// SPARSEC_CUDA_PIT: "fill", "always" or "0". False, with `use` untouched,
/// for anything else.
inline bool parsePitUse(const std::string &value, PitUse &use) {
  if (value == "fill")
    use = PitUse::fill;
  else if (value == "always")
    use = PitUse::always;
  else if (value == "0")
    use = PitUse::never;
  else
    return false;
  return true;
}

/// Whether PIT's grid for M rows in token blocks of `tile` and N outputs in
/// blocks of `columns` (0: 128) holds at least one block per SM. Each
/// block streams its token block's rows of W through one SM; with fewer
/// blocks than SMs PIT cannot reach the bandwidth cuBLAS reaches reading
/// W once (on an H100, K 16384 and N 4096 at 16 rows: 3.2x slower than
/// cuBLAS at 50 % micro-tile sparsity, 6.3x on a dense input; docs/GPU.md,
/// "PIT on short inputs"). A short prompt or a decode batch above 8 tokens
/// gives such grids.
inline bool pitFillsGpu(int64_t M, int64_t N, int tile, int columns,
                        int multiprocessors) {
  if (M <= 0 || N <= 0 || tile <= 0)
    return false;
  const int64_t width = columns > 0 ? columns : 128;
  return (M + tile - 1) / tile * ((N + width - 1) / width) >=
         std::max(1, multiprocessors);
}

/// The cut divisors of a long step by default: before allocation n/32 and
/// n/4 of n.
inline std::vector<int> defaultSplitDivisors() { return {32, 4}; }

/// SPARSEC_CUDA_SPLIT: "0" no cuts, "1" the default, or decreasing
/// divisors above 1 ("128,16,4"). False, with `divisors` untouched, for
/// anything else.
inline bool parseSplitDivisors(const std::string &value,
                               std::vector<int> &divisors) {
  std::vector<int> div;
  if (!value.empty() && value.back() == ',')
    return false; // getline would drop the empty last piece
  std::stringstream list(value);
  for (std::string v; std::getline(list, v, ',');) {
    char *end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || !end || *end || n < 0 || n > 4096 ||
        (!div.empty() && (n <= 1 || n >= div.back())))
      return false;
    div.push_back(int(n));
  }
  if (div.size() == 1 && div[0] <= 1) {
    divisors = div[0] == 0 ? std::vector<int>{} : defaultSplitDivisors();
    return true;
  }
  if (div.empty() || div.back() <= 1)
    return false;
  divisors = div;
  return true;
}

/// Steps of at least this many allocations are cut.
constexpr size_t kSplitMinAllocs = 48;

/// Where a capture cuts a step that allocated `n` times when run eagerly:
/// before allocation n / d for each divisor d (at least 2, increasing).
inline std::vector<size_t> splitPoints(size_t n,
                                       const std::vector<int> &divisors) {
  std::vector<size_t> at;
  if (n < kSplitMinAllocs)
    return at;
  for (int div : divisors) {
    const size_t p = std::max<size_t>(2, n / size_t(div));
    if (at.empty() || p > at.back())
      at.push_back(p);
  }
  return at;
}

/// The cuts of a step captured now: none for a step launched ahead unless
/// SPARSEC_CUDA_SPLIT was set (`divisorsSet`), which the host walks while
/// the GPU still runs the step before; splitPoints otherwise.
inline std::vector<size_t> stepCuts(size_t n, const std::vector<int> &divisors,
                                    bool launchedAhead, bool divisorsSet) {
  if (launchedAhead && !divisorsSet)
    return {};
  return splitPoints(n, divisors);
}

} // namespace sparsec::rt::cuda

#endif // SPARSEC_RUNTIME_CUDA_SWITCHES_H
