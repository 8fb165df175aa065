//===- PitTest.cu - the PIT kernels against a CPU reference --------------===//
//
// Part of the sparsec project.
//
// x [M, K] with micro-tile sparsity (tile tokens x 1 neuron blocks zero or
// random), W [K, N] fp16 or bf16: pitSRead + pitMatmul against a
// double-precision product of the same rounded operands. Also checks the index
// sets: exactly the columns with a non-zero in each token block (and their
// values gathered), increasing in sorted mode, the same set in unsorted mode.
// Prints one line per case and "N passed, M failed"; exit 1 on a failure.
//
//===----------------------------------------------------------------------===//

#include "CudaTest.h"

#include "sparsec/rt/cuda/Pit.h"
#include "sparsec/rt/cuda/SparseDecode.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <utility>

using namespace sparsec::rt;
using namespace sparsec::rt::cuda;
using namespace sparsec::test;

namespace {

int passes = 0, failures = 0;
// " mma=wgmma" / " mma=sync" on the lines of 32-token cases at the default
// block shape, which run on both kinds of MMA where the GPU has both.
const char *mmaLabel = "";

struct Case {
  int M, K, N, tile;
  double density;   // fraction of non-zero micro-tiles
  bool sorted = true;
  bool halfX = false, halfY = false;
  bool bias = false, relu = false, residual = false;
  int columns = 0; // output columns per block (0: the kernel's choice)
  int stages = 0;  // pipeline depth (0: the default)
  bool early = false; // both kernels as programmatic dependent launches
  int sweep = 0;      // output blocks a block (> 1: a sweep, 0: the default's)
  // > 1: one workspace for a call of half the tokens and then `repeat`
  // calls, sorted and unsorted in turn (the last as `sorted`): what one
  // call leaves in the counts and the set must not reach the next.
  int repeat = 1;
  bool bf16 = false; // bfloat16 weights (and gathered x) instead of fp16
};

/// v's values in T (round to nearest even), as an upload takes them.
template <typename T> std::vector<T> rounded(const std::vector<float> &v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = fromFloat<T>(v[i]);
  return out;
}

/// The case with bfloat16 weights.
Case bf16(Case c) {
  c.bf16 = true;
  return c;
}

void runOnce(const Case &c) {
  // SPARSEC_PIT_TEST_ONLY="tile=T M=M K=K N=N" runs only the cases of that
  // shape (to rerun one under a debugger or compute-sanitizer).
  if (const char *only = std::getenv("SPARSEC_PIT_TEST_ONLY"); only && *only) {
    char shape[96];
    std::snprintf(shape, sizeof shape, "tile=%d M=%d K=%d N=%d", c.tile, c.M,
                  c.K, c.N);
    if (std::string(only) != shape)
      return;
  }
  std::mt19937 rng(uint32_t(c.M * 131 + c.K * 7 + c.N + c.tile * 1000 +
                            int(c.density * 100)));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), p(0.0f, 1.0f);
  // Operands as the kernels see them: x (fp32 or fp16 in) rounded to W's
  // type by SRead, W stored in it. bf16 x is kept at |x| >= 2^-10, where
  // fp16 holds every bf16 value: the fp16 inputs then round to the same.
  auto roundW = [&](float v) {
    return c.bf16 ? toFloat(fromFloat<__nv_bfloat16>(v))
                  : toFloat(fromFloat<__half>(v));
  };
  auto roundX = [&](float v) {
    if (c.bf16 && std::fabs(v) < 0x1p-10f)
      v = std::copysign(0x1p-10f, v);
    return roundW(v);
  };
  const int blocks = int(pitBlocks(c.M, c.tile));
  // Micro-tile pattern: active[b][k]; inside an active tile, single
  // entries may still be zero (as ReLU outputs are).
  std::vector<uint8_t> active(size_t(blocks) * c.K);
  for (auto &a : active)
    a = p(rng) < c.density;
  std::vector<float> x(size_t(c.M) * c.K, 0.0f);
  for (int m = 0; m < c.M; ++m)
    for (int k = 0; k < c.K; ++k)
      if (active[size_t(m / c.tile) * c.K + k] && p(rng) < 0.7f)
        x[size_t(m) * c.K + k] = roundX(u(rng));
  std::vector<float> wf(size_t(c.K) * c.N);
  for (auto &v : wf)
    v = roundW(u(rng) * 0.25f);
  std::vector<float> bias(c.N), res(size_t(c.M) * c.N);
  for (auto &v : bias)
    v = u(rng);
  for (auto &v : res)
    v = u(rng);

  // Reference: each output the bias plus x's products in k order, in
  // double. The loops run over k outside n, over W's rows as stored, and
  // skip x's zeros (which add nothing), so the larger cases cost seconds
  // less; the sums are the same.
  std::vector<double> ref(size_t(c.M) * c.N);
  for (int m = 0; m < c.M; ++m) {
    double *r = ref.data() + size_t(m) * c.N;
    for (int n = 0; n < c.N; ++n)
      r[n] = c.bias ? bias[n] : 0.0;
    for (int k = 0; k < c.K; ++k) {
      const double xv = x[size_t(m) * c.K + k];
      if (xv == 0.0)
        continue;
      const float *wr = wf.data() + size_t(k) * c.N;
      for (int n = 0; n < c.N; ++n)
        r[n] += xv * wr[n];
    }
    for (int n = 0; n < c.N; ++n) {
      if (c.relu && r[n] < 0)
        r[n] = 0;
      if (c.residual)
        r[n] += res[size_t(m) * c.N + n];
    }
  }

  PitWorkspace ws;
  CHECK_CUDA(cudaMalloc(&ws.idx, pitIdxBytes(c.M, c.K, c.tile)));
  CHECK_CUDA(cudaMalloc(&ws.count, pitCountBytes(c.M, c.tile)));
  CHECK_CUDA(cudaMalloc(&ws.xg, pitGatherBytes(c.M, c.K, c.tile)));
  float *dx = nullptr;
  __half *dxh = nullptr;
  if (c.halfX) {
    dxh = upload(rounded<__half>(x));
  } else {
    dx = upload(x);
  }
  // W in its type (the values are exact in it).
  __half *dw = c.bf16 ? nullptr : upload(rounded<__half>(wf));
  __nv_bfloat16 *dwb = c.bf16 ? upload(rounded<__nv_bfloat16>(wf)) : nullptr;
  float *db = upload(bias), *dres = upload(res);
  float *dy = nullptr;
  __half *dyh = nullptr;
  size_t ysize = size_t(c.M) * c.N;
  CHECK_CUDA(cudaMalloc(&dy, sizeof(float) * ysize));
  CHECK_CUDA(cudaMalloc(&dyh, sizeof(__half) * ysize));
  // Early launches on a stream of their own. It does not wait for the
  // uploads above (a copy from pageable memory may return before it lands,
  // and a non-blocking stream is not ordered after it): synchronise first.
  // Then something for the early launches to overlap and wait for.
  cudaStream_t s = nullptr;
  if (c.early) {
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK_CUDA(cudaMemsetAsync(ws.count, 0xff, pitCountBytes(c.M, c.tile), s));
    CHECK_CUDA(cudaMemsetAsync(ws.idx, 0xff, pitIdxBytes(c.M, c.K, c.tile), s));
  }
  const float *b = c.bias ? db : nullptr;
  const float *r = c.residual ? dres : nullptr;
  ops::Activation act = c.relu ? ops::Activation::relu : ops::Activation::none;
  // SRead into W's type (E), from fp32 or fp16 x.
  auto sread = [&](int64_t M, bool sorted) {
    if (c.bf16)
      return c.halfX ? pitSRead<__nv_bfloat16>(dxh, M, c.K, c.tile, sorted, ws,
                                               s, c.early)
                     : pitSRead<__nv_bfloat16>(dx, M, c.K, c.tile, sorted, ws,
                                               s, c.early);
    return c.halfX ? pitSRead(dxh, M, c.K, c.tile, sorted, ws, s, c.early)
                   : pitSRead(dx, M, c.K, c.tile, sorted, ws, s, c.early);
  };
  auto matmul = [&](const auto *w) {
    return c.halfY ? pitMatmul(ws, c.M, c.K, w, c.N, c.tile, b, act, r, dyh, s,
                               c.columns, c.stages, c.early, c.sweep)
                   : pitMatmul(ws, c.M, c.K, w, c.N, c.tile, b, act, r, dy, s,
                               c.columns, c.stages, c.early, c.sweep);
  };
  if (c.repeat > 1) // a call of fewer tokens on the same workspace first
    CHECK_CUDA(sread(c.M / 2, !c.sorted));
  for (int call = 0; call < c.repeat; ++call) {
    const bool sorted = (c.repeat - 1 - call) % 2 ? !c.sorted : c.sorted;
    CHECK_CUDA(sread(c.M, sorted));
    CHECK_CUDA(c.bf16 ? matmul(dwb) : matmul(dw));
  }
  CHECK_CUDA(cudaDeviceSynchronize());

  // Index sets.
  bool idxOk = true;
  const int64_t cap = pitCapacity(c.K);
  auto idx = download(ws.idx, size_t(blocks) * cap);
  auto count = download(ws.count, blocks);
  auto xg = download(static_cast<const uint16_t *>(ws.xg),
                     size_t(blocks) * cap * c.tile);
  auto gathered = [&](uint16_t bits) {
    const uint16_t h[1] = {bits};
    return c.bf16
               ? __bfloat162float(*reinterpret_cast<const __nv_bfloat16 *>(h))
               : __half2float(*reinterpret_cast<const __half *>(h));
  };
  for (int bl = 0; bl < blocks && idxOk; ++bl) {
    std::set<int> want;
    for (int k = 0; k < c.K; ++k)
      for (int t = 0; t < c.tile && bl * c.tile + t < c.M; ++t)
        if (x[size_t(bl * c.tile + t) * c.K + k] != 0.0f) {
          want.insert(k);
          break;
        }
    int n = count[bl];
    if (n != int(want.size()))
      idxOk = false;
    std::set<int> got;
    for (int j = 0; j < n && idxOk; ++j) {
      int k = idx[size_t(bl) * cap + j];
      for (int t = 0; t < c.tile; ++t) {
        float g = gathered(xg[(size_t(bl) * cap + j) * c.tile + t]);
        int m = bl * c.tile + t;
        float e = m < c.M && k >= 0 && k < c.K ? x[size_t(m) * c.K + k] : 0.0f;
        if (g != e)
          idxOk = false;
      }
      got.insert(k);
      if (c.sorted && j > 0 && idx[size_t(bl) * cap + j - 1] >= k)
        idxOk = false;
    }
    if (got != want)
      idxOk = false;
  }

  double maxRef = 0, maxDiff = 0;
  auto y = download(dy, ysize);
  auto yh = download(dyh, ysize);
  auto got = [&](size_t i) {
    return c.halfY ? double(__half2float(yh[i])) : double(y[i]);
  };
  for (size_t i = 0; i < ysize; ++i) {
    maxRef = std::max(maxRef, std::fabs(ref[i]));
    maxDiff = worse(maxDiff, std::fabs(got(i) - ref[i]));
  }
  const double scale = std::max(maxRef, 1e-12);
  double err = maxDiff / scale;
  // fp32 accumulation of exact products (fp16 or bf16 operands); fp16
  // outputs round to 2^-11.
  double tol = c.halfY ? 2e-3 : 1e-4;
  bool ok = idxOk && err <= tol;
  // Where the wrong outputs are (printed after the result line when any
  // is): how many, the first, and the rows and columns they span.
  size_t wrong = 0, first = 0;
  int rowLo = c.M, rowHi = -1, colLo = c.N, colHi = -1;
  for (size_t i = 0; i < ysize && err > tol; ++i) {
    if (!(std::fabs(got(i) - ref[i]) <= tol * scale)) {
      if (!wrong++)
        first = i;
      const int m = int(i / c.N), n = int(i % c.N);
      rowLo = std::min(rowLo, m), rowHi = std::max(rowHi, m);
      colLo = std::min(colLo, n), colHi = std::max(colHi, n);
    }
  }
  std::printf(
      "%s pit tile=%d M=%d K=%d N=%d density=%.2f sorted=%d w=%s x=%s y=%s "
      "bias=%d relu=%d residual=%d columns=%d stages=%d early=%d sweep=%d "
      "index=%s "
      "max rel err %.2e%s%s\n",
      ok ? "PASS" : "FAIL", c.tile, c.M, c.K, c.N, c.density, c.sorted,
      c.bf16 ? "bf16" : "f16", c.halfX ? "f16" : "f32", c.halfY ? "f16" : "f32",
      c.bias, c.relu, c.residual, c.columns, c.stages, c.early, c.sweep,
      idxOk ? "ok" : "wrong", err, c.repeat > 1 ? " (calls in turn)" : "",
      mmaLabel);
  if (wrong)
    std::printf("  %zu of %zu outputs off; first: row %d column %d, %g "
                "against %g; rows %d-%d, columns %d-%d\n",
                wrong, ysize, int(first / c.N), int(first % c.N),
                got(first), ref[first], rowLo, rowHi, colLo, colHi);
  (ok ? passes : failures)++;
  if (s)
    cudaStreamDestroy(s);
  cudaFree(ws.idx);
  cudaFree(ws.count);
  cudaFree(ws.xg);
  cudaFree(dx);
  cudaFree(dxh);
  cudaFree(dw);
  cudaFree(dwb);
  cudaFree(db);
  cudaFree(dres);
  cudaFree(dy);
  cudaFree(dyh);
}

/// A case; 32-token tiles at the default pipeline (no stages or sweep
/// asked for; 128 or 256 columns) twice where Hopper's warpgroup MMAs are
/// available: on them (one or two warpgroups a block) and on mma.sync.
void run(const Case &c) {
  if (c.tile != 32 || c.stages || c.sweep || !pitWarpgroupMmaAvailable()) {
    runOnce(c);
    return;
  }
  const bool was = pitWarpgroupMma();
  setPitWarpgroupMma(true);
  mmaLabel = " mma=wgmma";
  runOnce(c);
  setPitWarpgroupMma(false);
  mmaLabel = " mma=sync";
  runOnce(c);
  setPitWarpgroupMma(was);
  mmaLabel = "";
}

} // namespace

int main() {
  // Every tile, both orders, ragged M / K / N, the epilogue options.
  for (int tile : {8, 16, 32}) {
    run({64, 256, 128, tile, 0.3});
    run({70, 300, 200, tile, 0.1, /*sorted=*/false});
    run({33, 1000, 264, tile, 0.05, true, false, false, true, true, true});
    run({128, 512, 384, tile, 1.0, true, true, true, true, false, false});
  }
  // Empty blocks (bias only), a single token, fp16 x in unsorted mode.
  run({40, 200, 136, 32, 0.0, true, false, false, true, false, false});
  run({1, 64, 8, 8, 0.5});
  run({96, 4096, 256, 32, 0.1, false, true, false, false, true, false});
  // 256-column blocks, ragged N, every tile.
  for (int tile : {8, 16, 32})
    run({72, 700, 392, tile, 0.2, tile != 16, false, false, true, true, true, 256});
  // Two warpgroups a block (256 columns at the default pipeline, 32-token
  // tiles): fp16 x and y with a bias and launched early, ragged M and N; a
  // long set, fp32 y with the residual; a set of one chunk.
  run({100, 1500, 776, 32, 0.3, false, true, true, true, true, false, 256, 0,
       true});
  run({256, 4096, 1024, 32, 0.5, true, false, false, false, false, true, 256});
  run({64, 4096, 512, 32, 0.01, false, false, true, true, false, false, 256});
  // Larger, with the residual aliasing nothing.
  run({512, 2048, 1024, 32, 0.1, true, false, false, true, false, true, 128});
  run({512, 2048, 1024, 16, 0.02, false, true, true, false, false, false, 256});
  // K odd: the unsorted SRead's one-column-a-thread path (the others load
  // 8 bytes a thread and row: 2 fp32 or 4 fp16 columns); K = 202 in fp32
  // takes the 2-column loads.
  run({70, 203, 136, 32, 0.3, false});
  run({40, 202, 64, 8, 0.4, false, false, false, true, true, false});
  run({48, 333, 128, 16, 0.2, false, true, true, true, false, false});
  // Larger K at both loaders (fp16 4 columns a thread; K odd, one).
  run({512, 4096, 256, 32, 0.05, false, true, false, true, false, true});
  run({256, 4095, 264, 8, 0.1, false, false, true, false, true, false});
  // Shallower pipelines (3 and 2 stages): sets of one chunk, of several,
  // and empty ones, both block widths.
  for (int stages : {2, 3})
    for (int tile : {8, 16, 32}) {
      run({96, 700, 392, tile, 0.3, tile != 8, true, false, true, true, true, 128,
           stages});
      run({64, 1000, 256, tile, 0.02, false, false, true, false, false, false, 256,
           stages});
    }
  // Programmatic dependent launches: each kernel waits for the one before
  // (the sets were just filled with garbage), sorted and unsorted sets,
  // every tile; and the sorted SRead's passes over K > 2048 fp32 columns
  // (512 threads x 2) and K > 512 odd (one column a thread).
  for (int tile : {8, 16, 32}) {
    run({200, 3000, 392, tile, 0.1, true, tile == 16, tile != 8, true, true, true,
         128, 0, true});
    run({96, 1001, 136, tile, 0.3, tile != 32, false, false, false, false, false,
         256, 2, true});
  }
  run({64, 5000, 64, 32, 0.02, true, false, true, true, false, false});
  run({64, 1203, 64, 16, 0.5, true, false, false, false, false, false});
  // 2 stages with sets of at most 2 chunks (copied at once, one wait)
  // and of just over (the pipeline, its third chunk's rows read with the
  // count): exactly 64 and 65 entries (K = 64, 65, every tile dense), 1-2
  // chunks a block at random, launched early.
  run({64, 64, 128, 32, 1.0, true, false, false, true, true, true, 128, 2});
  run({64, 65, 136, 8, 1.0, false, true, true, false, false, true, 128, 2});
  run({96, 2000, 256, 16, 0.02, true, false, true, true, false, false, 128, 2,
       true});
  // Sweeps (a block computes 2-8 output blocks in turn): every tile, sets
  // of 0, 1, 2 and many chunks (x kept in shared memory for the short
  // ones), ragged N (a last sweep short of output blocks, a last block
  // short of columns), more blocks asked for than N has, the epilogue
  // options, fp16 and fp32 in and out, launched early, exactly 64 and 65
  // entries.
  for (int tile : {8, 16, 32}) {
    run({96, 1000, 392, tile, 0.02, tile != 16, tile == 8, tile != 32, true, true,
         true, 0, 0, false, 3});
    run({70, 2000, 520, tile, 0.03, true, tile == 32, false, true, false, false,
         128, 2, false, 2});
    run({64, 700, 392, tile, 0.3, false, false, true, false, true, true, 0, 0,
         false, 4});
    run({40, 300, 200, tile, 0.0, true, false, false, true, false, false, 0, 0,
         false, 8});
    run({200, 3000, 648, tile, 0.01, tile == 16, tile == 8, tile == 32, true,
         true, true, 128, 0, true, 4});
  }
  run({64, 64, 264, 32, 1.0, true, false, false, true, true, true, 0, 0, false, 2});
  run({64, 65, 264, 8, 1.0, false, true, true, false, false, true, 0, 0, true, 3});
  run({512, 4096, 1024, 32, 0.01, false, true, true, false, false, false, 0, 0,
       false, 8});
  // fp16 outputs without a residual: at 8- and 16-token tiles the
  // epilogue from the accumulators through stmatrix (each warp finishing
  // its own columns, no block barrier), at 32 the block's: bias and ReLU,
  // ragged M and N, sweeps over short and long sets, the plain kernel at
  // 256 columns and 3 stages and at 2 stages, launched early.
  for (int tile : {8, 16, 32}) {
    run({70, 1000, 392, tile, 0.02, false, true, true, true, true, false, 0, 0,
         false, 3});
    run({70, 700, 520, tile, 0.3, false, false, true, true, true, false, 0, 0,
         true, 4});
    run({40, 700, 392, tile, 0.3, true, true, true, true, false, false, 256, 3});
    run({33, 2000, 136, tile, 0.05, false, false, true, false, true, false, 128,
         2, true});
  }
  // The default's sweep: the largest that leaves 6 blocks an SM, 4 / 8 / 2
  // at most for 32- / 16- / 8-token tiles; then two defaults that sweep on
  // this GPU (2 output blocks a block at 8-token tiles, 8 at 16).
  {
    const int got[] = {pitSweepTiles(4096, 4096, 32, 132),
                       pitSweepTiles(4096, 4096, 16, 132),
                       pitSweepTiles(4096, 4096, 8, 132),
                       pitSweepTiles(2048, 4096, 32, 132),
                       pitSweepTiles(512, 4096, 32, 132),
                       pitSweepTiles(4096, 8, 16, 132)};
    const int want[] = {4, 8, 2, 2, 1, 1};
    bool ok = std::equal(std::begin(got), std::end(got), std::begin(want));
    std::printf("%s pit default sweeps %d %d %d %d %d %d\n", ok ? "PASS" : "FAIL",
                got[0], got[1], got[2], got[3], got[4], got[5]);
    (ok ? passes : failures)++;
  }
  {
    const int sms = multiprocessorCount();
    const bool sweeps8 = pitSweepTiles(2048, 4096, 8, sms) == 2,
               sweeps16 = pitSweepTiles(4096, 4096, 16, sms) > 1;
    std::printf("%s pit default sweeps on this GPU (%d SMs): %d at 8 tokens, "
                "%d at 16\n", sweeps8 && sweeps16 ? "PASS" : "FAIL", sms,
                pitSweepTiles(2048, 4096, 8, sms),
                pitSweepTiles(4096, 4096, 16, sms));
    (sweeps8 && sweeps16 ? passes : failures)++;
  }
  run({2048, 64, 4096, 8, 0.3, true, true, true, true, true, false});
  run({4096, 48, 4096, 16, 0.5, false, false, true, false, false, true, 0, 0,
       true});
  // A sweep needs 128 columns and 2 stages: anything else is refused.
  {
    PitWorkspace ws{};
    int refused = 0;
    __half *y = nullptr;
    for (auto [columns, stages] : {std::pair{256, 0}, std::pair{0, 3}})
      refused += pitMatmul<__half>(ws, 32, 64, reinterpret_cast<const __half *>(
                                                   uintptr_t(256)),
                                   128, 32, nullptr, ops::Activation::none,
                                   nullptr, y, nullptr, columns, stages, false,
                                   2) == cudaErrorInvalidValue;
    bool ok = refused == 2;
    std::printf("%s pit sweep refuses 256 columns and 3 stages\n",
                ok ? "PASS" : "FAIL");
    (ok ? passes : failures)++;
  }
  // Calls in turn on one workspace: a call of half the tokens, then 3 or
  // 4 calls, sorted and unsorted alternating; every tile, normal and early
  // launches.
  for (int tile : {8, 16, 32}) {
    run({100, 700, 136, tile, 0.2, tile != 16, false, false, true, false, false, 0, 0,
         false, 0, 3});
    run({200, 1001, 264, tile, 0.1, tile == 16, true, true, false, true, false, 0, 0,
         true, 0, 4});
  }
  // Longer sets in turn, launched early (32-token tiles: 13 chunks a set).
  run({512, 4096, 1024, 32, 0.1, false, true, true, false, true, false, 0, 0, true,
       0, 4});
  // The warpgroup-MMA default (twice, as above): long sets (13 and 26
  // chunks) with every epilogue option, fp16 and fp32 out, ragged M and N,
  // launched early; sets of exactly 32, 64 and 65 entries (one chunk, the
  // short 2-chunk form, the pipeline's third chunk).
  run({100, 4096, 392, 32, 0.1, true, true, false, true, true, true, 0, 0, true});
  run({64, 8192, 136, 32, 0.1, false, false, true, true, false, false, 128, 0, true});
  for (int k : {32, 64, 65})
    run({33, k, 200, 32, 1.0, true, false, true, true, true, k == 64});
  // bfloat16 weights: every tile, both SRead orders and loaders (K even
  // and odd), fp32 and fp16 x and y, the epilogue options, 256 columns
  // (two warpgroups at 32 tokens), 2 and 3 stages, sweeps over short and
  // long sets, fp16 outputs from the accumulators (8 and 16 tokens),
  // launched early, calls in turn, long sets on the warpgroup default.
  for (int tile : {8, 16, 32}) {
    run(bf16({64, 256, 128, tile, 0.3}));
    run(bf16({70, 301, 200, tile, 0.1, false, true, false, true, true, true}));
    run(bf16({72, 700, 392, tile, 0.2, tile != 16, false, true, true, false,
              true, 256}));
    run(bf16({96, 700, 392, tile, 0.3, tile != 8, true, false, true, true, true,
              128, 3}));
    run(bf16({96, 1000, 392, tile, 0.02, tile != 16, tile == 8, tile != 32,
              true, true, true, 0, 0, false, 3}));
    run(bf16({64, 700, 392, tile, 0.3, false, false, true, false, true, true, 0,
              0, true, 4}));
    run(bf16({70, 1000, 392, tile, 0.02, false, true, true, true, true, false,
              0, 0, false, 3}));
    run(bf16({200, 1001, 264, tile, 0.1, tile == 16, true, true, false, true,
              false, 0, 0, true, 0, 4}));
  }
  run(bf16({100, 4096, 392, 32, 0.1, true, true, false, true, true, true, 0, 0,
            true}));
  run(bf16(
      {256, 4096, 1024, 32, 0.5, true, false, false, false, false, true, 256}));
  run(bf16({512, 2048, 1024, 16, 0.02, false, true, true, false, false, false,
            256}));
  std::printf("pit warpgroup MMAs: %s\n",
              pitWarpgroupMmaAvailable() ? "tested (compute capability 9.0)"
                                         : "not available on this GPU");
  std::printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
