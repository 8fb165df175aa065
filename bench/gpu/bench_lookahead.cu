//===- bench_lookahead.cu - a predicted FFN whose set is known ahead -------===//
//
// Part of the sparsec project.
//
// A predicted decode layer runs its FFN as a chain of dependent kernels:
// the norm with the predictor's hidden vector, the selection with the up
// projection, the down projection. DejaVu's look-ahead predictor reads the
// attention block's input instead of the FFN's, so the selection can run on
// a branch beside the attention's GEMVs and the chain keeps only the norm
// and the two projections over a set that is complete before they launch
// (IndexView::ready: their early launches request their rows before their
// wait). This program measures what that is worth, before any compiler
// work, on layers shaped as OPT-6.7B's (d 4096, FFN 16384, fp16), rotating
// over 8 sets of weights (3.2 GB, so no layer finds its rows in the L2).
//
// Each layer: the q/k/v GEMV of the layer's input x, the out projection
// (with x as its residual; its input is q's slice, standing in for the
// attention), then the FFN:
//   inline    predictUp with the norm (today's default: the norm, the
//             hidden vector, the selection with the up rows), sparseDown;
//             also with the norm a kernel of its own, and without the
//             list (the selection's atomic; the down projection then scans
//             the segments), to see what those parts of the chain cost
//   ahead     predictIndex of x forked at the layer's start (two kernels on
//             a second stream), joined in front of the up projection
//             through a memset node; normRows, sparseUp over the list,
//             sparseDown
//   ready     ahead, the set marked ready: up (and down) request their
//             rows before their wait
//   dense     the dense build's FFN: normRows, gemvRows over the up rows
//             (ReLU), gemvRows over the down projection's [d, FFN] rows
//             (residual and bias): the peer. The ratios of whole layers,
//             dense over inline and dense over the chain with its set given
//             and ready, bound a predicted step's gain over dense at this
//             shape from above (the parts a step adds, the attention's
//             core, the LM head, are the same in both and lower it)
// and the same joined straight from the selection kernel, whose edge to an
// early launch is programmatic (the up kernel may start before the set is
// complete: reported, not failed). A graph of 64 layers is replayed 6
// times; the median of the last 5, divided by 64, is printed, microseconds
// a layer. Each predictor's threshold selects `density` of the neurons for
// its own input (computed here). Every variant's last FFN output is checked
// against the host's, computed in double from its set (relative error at
// most 1e-4), exit 1 otherwise.
//
//   sparsec-bench-lookahead [--density 0.1] [--rank 32] [--d 4096]
//                           [--ffn 16384]
//
//===----------------------------------------------------------------------===//

#include "GpuBench.h"
#include "sparsec/rt/cuda/DenseDecode.h"
#include "sparsec/rt/cuda/SparseDecode.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace sparsec::rt::cuda;
using namespace sparsec::bench;
using sparsec::rt::ops::Activation;

namespace {
constexpr int kLayers = 8, kGraphLayers = 64;

/// A one-warp kernel that waits for every kernel its launch depends on,
/// then lets its dependents launch: the join of the predictor's branch as
/// a programmatic edge. A kernel after it may read the set before its own
/// wait, since it cannot start before this kernel has passed its wait.
__global__ void gateKernel() {
  pdlWaitPrior();
  pdlLaunchDependents();
}

void launchGate(cudaStream_t s) { launchEarly(gateKernel, dim3(1), dim3(32), s); }

struct Layer {
  __half *qkv = nullptr, *out = nullptr, *up = nullptr, *down = nullptr,
         *downRows = nullptr, *p1 = nullptr, *p2 = nullptr;
  float *upBias = nullptr, *downBias = nullptr;
  float inlineThreshold = 0.0f, aheadThreshold = 0.0f;
};

} // namespace

int main(int argc, char **argv) {
  int d = 4096, f = 16384, rank = 32;
  double density = 0.1;
  if (!Options("sparsec-bench-lookahead")
           .add("--density", density)
           .add("--rank", rank)
           .add("--d", d)
           .add("--ffn", f)
           .parse(argc, argv))
    return 1;
  if (d < 2048 || d % 2048 != 0 || d > 8192 || f < 256 || rank < 1 ||
      !(density > 0 && density <= 1) || !predictUpNormFits(1, d, rank)) {
    std::fprintf(stderr, "error: bad arguments: d a multiple of 2048 up to 8192 (the "
                         "split up kernel), a rank and d predictUp takes with a norm\n");
    return 1;
  }
  cudaDeviceProp prop;
  cublasHandle_t blas;
  cusparseHandle_t sparse;
  setUp(prop, blas, sparse);
  std::printf("%s, L2 %.0f MB; d %d, FFN %d, rank %d, density %.3f, fp16, one token\n\n",
              prop.name, prop.l2CacheSize / 1e6, d, f, rank, density);

  // The layer's input, the same for every layer (the bench measures time,
  // not a model).
  std::vector<float> x(d);
  for (int i = 0; i < d; ++i)
    x[i] = float((i * 7919) % 2001 - 1000) / 1000.0f;
  float *dX = upload(x);
  std::vector<float> ones(d, 1.0f), zeros(d, 0.0f);
  float *dScale = upload(ones), *dShift = upload(zeros);
  float *dQ = alloc<float>(3 * size_t(d)), *dR = alloc<float>(d),
        *dXn = alloc<float>(d), *dH = alloc<float>(f), *dY = alloc<float>(d);
  const float eps = 1e-5f;

  std::vector<Layer> layers(kLayers);
  for (int l = 0; l < kLayers; ++l) {
    Layer &L = layers[l];
    const uint32_t s = uint32_t(l) * 16;
    L.qkv = filledHalf(size_t(3) * d * d, s + 1, 0.03f);
    L.out = filledHalf(size_t(d) * d, s + 2, 0.03f);
    L.up = filledHalf(size_t(f) * d, s + 3, 0.03f);
    L.down = filledHalf(size_t(f) * d, s + 4, 0.03f);
    L.downRows = filledHalf(size_t(d) * f, s + 7, 0.03f); // [d, f]: dense's layout
    L.p1 = filledHalf(size_t(d) * rank, s + 5, 0.03f);
    L.p2 = filledHalf(size_t(rank) * f, s + 6, 0.03f);
    std::vector<float> b(f);
    for (int j = 0; j < f; ++j)
      b[j] = float((j * 31 + l) % 17 - 8) / 64.0f;
    L.upBias = upload(b);
    L.downBias = upload(std::vector<float>(b.begin(), b.begin() + d));
    // The FFN's input as the layer computes it: q/k/v, out (+ x), norm.
    CHECK_CUDA(gemvRows<__half>(dX, 1, L.qkv, d, 3 * d, nullptr, Activation::none,
                                nullptr, dQ, stream));
    CHECK_CUDA(gemvRows<__half>(dQ, 1, L.out, d, d, nullptr, Activation::none, dX,
                                dR, stream));
    CHECK_CUDA(normRows(dR, 1, d, dScale, dShift, eps, false, dXn, stream));
    const std::vector<float> xn = download(dXn, d);
    L.inlineThreshold =
        quantileThreshold(predictorLogits(xn, L.p1, L.p2, d, rank, f), density);
    L.aheadThreshold =
        quantileThreshold(predictorLogits(x, L.p1, L.p2, d, rank, f), density);
  }
  const size_t sf = predictScratchFloats(1, d, rank);
  float *scratchInline = alloc<float>(sf), *scratchAhead = alloc<float>(sf);
  CHECK_CUDA(cudaMemset(scratchInline, 0, sizeof(float) * sf));
  CHECK_CUDA(cudaMemset(scratchAhead, 0, sizeof(float) * sf));
  auto makeSet = [&] {
    IndexView ix;
    ix.neurons = f;
    ix.idx = alloc<int32_t>(size_t(indexSegments(f)) * kSegment);
    ix.cnt = alloc<int32_t>(indexSegments(f));
    ix.list = alloc<int32_t>(f);
    ix.count = alloc<int32_t>(1);
    return ix;
  };
  const IndexView ixInline = makeSet(), ixAhead = makeSet();

  cudaStream_t side;
  CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CHECK_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

  // Where the predictor's branch joins the layer: in front of the up
  // projection, of the norm or of the out projection. The kernel after the
  // join is launched normally (its launch waits for the branch in full).
  enum class Join { up, norm, out, gateNorm, gateUp };
  auto attention = [&](const Layer &L, bool joinHere) {
    CHECK_CUDA(gemvRows<__half>(dX, 1, L.qkv, d, 3 * d, nullptr, Activation::none,
                                nullptr, dQ, stream, true));
    if (joinHere)
      CHECK_CUDA(cudaStreamWaitEvent(stream, join, 0));
    CHECK_CUDA(gemvRows<__half>(dQ, 1, L.out, d, d, nullptr, Activation::none, dX,
                                dR, stream, !joinHere));
  };
  // fusedNorm: the norm in predictUp's hidden-vector kernel (else a
  // normRows kernel first); listed: the selection also writes the set as
  // one list, which the down projection reads (else it scans the segments).
  auto ffnInline = [&](const Layer &L, bool fusedNorm, bool listed) {
    FfnNorm norm;
    norm.x = dR;
    norm.scale = dScale;
    norm.bias = dShift;
    norm.epsilon = eps;
    IndexView ix = ixInline;
    if (!listed)
      ix.list = ix.count = nullptr;
    if (!fusedNorm)
      CHECK_CUDA(normRows(dR, 1, d, dScale, dShift, eps, false, dXn, stream, true));
    CHECK_CUDA(predictUp<__half>(dXn, 1, L.p1, d, rank, L.p2, f, nullptr,
                                 L.inlineThreshold, scratchInline, ix, nullptr, 0, L.up,
                                 L.upBias, true, dH, f, RowsInit{dY, L.downBias, dR, 1, d},
                                 stream, true, fusedNorm ? &norm : nullptr));
    CHECK_CUDA(sparseDown<__half>(dH, 1, f, L.down, d, ix, dY, stream, 0, nullptr, true));
  };
  // The selection on the side stream, from the layer's input. Join
  // through a memset node (one int on the side stream after the
  // selection): an edge from a memset cannot be programmatic, so the up
  // kernel's early launch waits for the whole branch, not only for the
  // selection kernel's trigger.
  int *dJoinWord = alloc<int>(1);
  auto forkPredictor = [&](const Layer &L, bool memsetJoin) {
    CHECK_CUDA(cudaEventRecord(fork, stream));
    CHECK_CUDA(cudaStreamWaitEvent(side, fork, 0));
    CHECK_CUDA(predictIndex<__half>(dX, 1, L.p1, d, rank, L.p2, f, nullptr,
                                    L.aheadThreshold, scratchAhead, ixAhead, nullptr, 0,
                                    side, false));
    if (memsetJoin)
      CHECK_CUDA(cudaMemsetAsync(dJoinWord, 0, sizeof(int), side));
    CHECK_CUDA(cudaEventRecord(join, side));
  };
  auto ffnAhead = [&](const Layer &L, bool upReady, bool downReady, bool joined,
                      Join at, bool early) {
    const bool joinNorm = joined && at == Join::norm;
    // The join in front of the next kernel where `at` puts it there: an
    // event wait, then (gates) the gate kernel, which also runs without a
    // branch to show its own cost.
    auto joinBefore = [&](Join wait, Join gate) {
      if (joined && (at == wait || at == gate))
        CHECK_CUDA(cudaStreamWaitEvent(stream, join, 0));
      if (at == gate)
        launchGate(stream);
    };
    joinBefore(Join::norm, Join::gateNorm);
    CHECK_CUDA(normRows(dR, 1, d, dScale, dShift, eps, false, dXn, stream, !joinNorm));
    joinBefore(Join::up, Join::gateUp);
    IndexView up = ixAhead, down = ixAhead;
    up.ready = upReady;
    down.ready = downReady;
    CHECK_CUDA(sparseUp<__half>(dXn, 1, L.up, d, L.upBias, up, true, dH, f,
                                RowsInit{dY, L.downBias, dR, 1, d}, stream, nullptr,
                                nullptr, early));
    CHECK_CUDA(sparseDown<__half>(dH, 1, f, L.down, d, down, dY, stream, 0, nullptr,
                                  early));
  };

  // The dense build's FFN (the peer).
  auto ffnDense = [&](const Layer &L) {
    CHECK_CUDA(normRows(dR, 1, d, dScale, dShift, eps, false, dXn, stream, true));
    CHECK_CUDA(gemvRows<__half>(dXn, 1, L.up, d, f, L.upBias, Activation::relu, nullptr,
                                dH, stream, true));
    CHECK_CUDA(gemvRows<__half>(dH, 1, L.downRows, f, d, L.downBias, Activation::none,
                                dR, dY, stream, true));
  };

  enum class Ffn { none, inline_, inlineNorm, inlineNoList, ahead, aheadNoBranch,
                   branchOnly, dense };
  auto isInline = [](Ffn f) {
    return f == Ffn::inline_ || f == Ffn::inlineNorm || f == Ffn::inlineNoList;
  };
  struct Variant {
    const char *name;
    Ffn ffn;
    bool upReady = false, downReady = false, early = true, memsetJoin = true;
    int upCap = 0; // the up kernel's blocks an SM (0: as many as fit)
    Join at = Join::up;
  };
  // A graph of kGraphLayers layers of `v`; returns the median us a layer
  // (negative where the graph could not be made).
  auto timeGraph = [&](const Variant &v) {
    setUpKernel(UpKernel::kAuto, v.upCap);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kGraphLayers; ++i) {
      const Layer &L = layers[i % kLayers];
      if (v.ffn == Ffn::branchOnly) {
        CHECK_CUDA(predictIndex<__half>(dX, 1, L.p1, d, rank, L.p2, f, nullptr,
                                        L.aheadThreshold, scratchAhead, ixAhead, nullptr,
                                        0, stream, true));
        continue;
      }
      if (v.ffn == Ffn::ahead)
        forkPredictor(L, v.memsetJoin);
      attention(L, v.ffn == Ffn::ahead && v.at == Join::out);
      if (isInline(v.ffn))
        ffnInline(L, v.ffn != Ffn::inlineNorm, v.ffn != Ffn::inlineNoList);
      else if (v.ffn == Ffn::ahead || v.ffn == Ffn::aheadNoBranch)
        ffnAhead(L, v.upReady, v.downReady, v.ffn == Ffn::ahead, v.at, v.early);
      else if (v.ffn == Ffn::dense)
        ffnDense(L);
    }
    cudaError_t e = cudaStreamEndCapture(stream, &graph);
    if (e == cudaSuccess)
      e = cudaGraphInstantiate(&exec, graph, 0);
    setUpKernel(UpKernel::kAuto, 0);
    if (e != cudaSuccess) {
      std::fprintf(stderr, "%s: graph not made: %s\n", v.name, cudaGetErrorString(e));
      cudaGetLastError();
      if (graph)
        cudaGraphDestroy(graph);
      return -1.0;
    }
    const double us = replayUs(exec, kGraphLayers);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return us;
  };

  // The last layer's FFN output from its set, computed here in double
  // from the FFN's input and residual the GPU computed: y = b2 + r +
  // sum over the set of relu(xn . up[j] + b1[j]) down[j].
  const Layer &last = layers[(kGraphLayers - 1) % kLayers];
  const std::vector<__half> upW = download(last.up, size_t(f) * d),
                            downW = download(last.down, size_t(f) * d);
  const std::vector<float> b1 = download(last.upBias, f), b2 = download(last.downBias, d);
  // A set as the GPU left it: its list, or (none written) its segments.
  auto setOf = [&](const IndexView &ix) {
    std::vector<int32_t> list;
    if (ix.list && ix.count)
      return download(ix.list, size_t(download(ix.count, 1)[0]));
    const int segments = indexSegments(f);
    const std::vector<int32_t> cnt = download(ix.cnt, size_t(segments)),
                               idx = download(ix.idx, size_t(segments) * kSegment);
    for (int sg = 0; sg < segments; ++sg)
      for (int k = 0; k < cnt[sg]; ++k)
        list.push_back(idx[size_t(sg) * kSegment + k]);
    return list;
  };
  auto reference = [&](const IndexView &ix) {
    const std::vector<int32_t> list = setOf(ix);
    const std::vector<float> xn = download(dXn, d), r = download(dR, d);
    std::vector<double> y(d);
    for (int c = 0; c < d; ++c)
      y[c] = double(b2[c]) + r[c];
    for (int j : list) {
      double h = b1[j];
      for (int c = 0; c < d; ++c)
        h += double(xn[c]) * __half2float(upW[size_t(j) * d + c]);
      if (h <= 0)
        continue;
      for (int c = 0; c < d; ++c)
        y[c] += h * __half2float(downW[size_t(j) * d + c]);
    }
    return std::vector<float>(y.begin(), y.end());
  };
  // The dense FFN's output, in double.
  auto referenceDense = [&] {
    const std::vector<__half> rows = download(last.downRows, size_t(d) * f);
    const std::vector<float> xn = download(dXn, d), r = download(dR, d);
    std::vector<double> h(f);
    for (int j = 0; j < f; ++j) {
      double a = b1[j];
      for (int c = 0; c < d; ++c)
        a += double(xn[c]) * __half2float(upW[size_t(j) * d + c]);
      h[j] = a > 0 ? a : 0;
    }
    std::vector<float> y(d);
    for (int c = 0; c < d; ++c) {
      double a = double(b2[c]) + r[c];
      for (int j = 0; j < f; ++j)
        a += h[j] * __half2float(rows[size_t(c) * f + j]);
      y[c] = float(a);
    }
    return y;
  };

  const Variant variants[] = {
      {"attention GEMVs alone (q/k/v, out)", Ffn::none},
      {"dense: normRows, gemvRows up and down (the dense build's FFN)", Ffn::dense},
      {"predictor branch alone (predictIndex)", Ffn::branchOnly},
      {"inline: predictUp with the norm, sparseDown", Ffn::inline_},
      {"inline, the norm a kernel of its own", Ffn::inlineNorm},
      {"inline, no list (the down projection scans the segments)", Ffn::inlineNoList},
      {"ahead: predictIndex forked; norm, sparseUp, sparseDown, not early", Ffn::ahead,
       false, false, false},
      {"ahead, early", Ffn::ahead},
      {"ahead, early, joined from the selection kernel", Ffn::ahead, false, false, true,
       false},
      {"ahead, up ready", Ffn::ahead, true},
      {"ahead, up and down ready", Ffn::ahead, true, true},
      {"ahead, both ready, joined from the selection kernel", Ffn::ahead, true, true, true,
       false},
      {"ahead, both ready, up at most 1 block an SM", Ffn::ahead, true, true, true, true, 1},
      {"ahead, both ready, up at most 2 blocks an SM", Ffn::ahead, true, true, true, true, 2},
      {"ahead, both ready, up at most 3 blocks an SM", Ffn::ahead, true, true, true, true, 3},
      {"ahead, both ready, up at most 4 blocks an SM", Ffn::ahead, true, true, true, true, 4},
      {"both ready, no predictor (the last selection's set)", Ffn::aheadNoBranch, true,
       true, true, true, 2},
      {"ahead, joined at the norm", Ffn::ahead, false, false, true, true, 0, Join::norm},
      {"ahead, both ready, joined at the norm", Ffn::ahead, true, true, true, true, 0,
       Join::norm},
      {"ahead, both ready, joined at the norm, up at most 2 blocks an SM", Ffn::ahead,
       true, true, true, true, 2, Join::norm},
      {"ahead, both ready, joined at the out projection", Ffn::ahead, true, true, true,
       true, 0, Join::out},
      {"ahead, both ready, joined at the out projection, up at most 2 blocks an SM",
       Ffn::ahead, true, true, true, true, 2, Join::out},
      {"both ready, no predictor, up at most 4 blocks an SM", Ffn::aheadNoBranch, true,
       true, true, true, 4},
      {"both ready, no predictor, up as many as fit", Ffn::aheadNoBranch, true, true, true,
       true, 0},
      {"no predictor, not ready", Ffn::aheadNoBranch, false, false, true, true, 0},
      {"ahead, both ready, joined by a gate kernel in front of the norm", Ffn::ahead, true,
       true, true, false, 0, Join::gateNorm},
      {"ahead, both ready, joined by a gate kernel in front of the up projection",
       Ffn::ahead, true, true, true, false, 0, Join::gateUp},
      {"ahead, not ready, joined by a gate kernel in front of the norm", Ffn::ahead, false,
       false, true, false, 0, Join::gateNorm},
      {"both ready, no predictor, a gate kernel in front of the norm", Ffn::aheadNoBranch,
       true, true, true, false, 0, Join::gateNorm},
  };
  double attn = 0, denseUs = 0, inlineUs = 0, givenUs = 0;
  bool ok = true;
  std::printf("| layer | us a layer | FFN (layer - attention) | selected | y against the "
              "host |\n|---|---:|---:|---:|---:|\n");
  for (const Variant &v : variants) {
    const double us = timeGraph(v);
    if (v.ffn == Ffn::none)
      attn = us;
    if (v.ffn == Ffn::none || v.ffn == Ffn::branchOnly) {
      std::printf("| %s | %.2f | | | |\n", v.name, us);
      continue;
    }
    if (v.ffn == Ffn::dense) {
      denseUs = us;
      const double err = us < 0 ? 0.0 : relErr(download(dY, d), referenceDense());
      ok &= err <= 1e-4;
      std::printf("| %s | %.2f | %.2f | %d | %.1e%s |\n", v.name, us, us - attn, f, err,
                  err > 1e-4 ? " MISMATCH" : "");
      continue;
    }
    if (v.ffn == Ffn::inline_)
      inlineUs = us;
    if (v.ffn == Ffn::aheadNoBranch && v.upReady && v.upCap == 2)
      givenUs = us;
    IndexView ix = isInline(v.ffn) ? ixInline : ixAhead;
    if (v.ffn == Ffn::inlineNoList)
      ix.list = ix.count = nullptr;
    const double err = us < 0 ? 0.0 : relErr(download(dY, d), reference(ix));
    // The variants whose set is complete before its readers launch must
    // agree with the host; one joined from the selection kernel may not
    // (that is what it shows), and is reported, not failed.
    const bool mustAgree =
        !(v.ffn == Ffn::ahead && !v.memsetJoin && v.early && v.at == Join::up);
    if (mustAgree && err > 1e-4)
      ok = false;
    std::printf("| %s | %.2f | %.2f | %d | %.1e%s |\n", v.name, us, us - attn,
                int(setOf(ix).size()), err,
                err > 1e-4 ? (mustAgree ? " MISMATCH" : " (race)") : "");
  }
  if (denseUs > 0 && inlineUs > 0 && givenUs > 0)
    std::printf("\nwhole layers, dense over predicted: %.2fx inline (today's chain), "
                "%.2fx with the set given and ready (no predictor at all)\n",
                denseUs / inlineUs, denseUs / givenUs);
  std::printf("\n%s\n", ok ? "every variant's y agrees with the host (1e-4)"
                           : "MISMATCH: a variant's y differs from the host's");
  return ok ? 0 : 1;
}
