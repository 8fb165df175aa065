//===- bench_pit.cu - PIT micro-tiled matmul vs cuBLAS and cuSPARSE ------===//
//
// Part of the sparsec project.
//
// y [M, N] = x [M, K] . W [K, N], fp16 in and out, fp32 accumulation, where
// x has micro-tile sparsity: blocks of `tile` tokens x 1 column are either
// all zero or dense, a `sparsity` fraction of them zero, placed at random.
// Peers measured in the same run:
//   cuBLAS dense     cublasGemmEx (fp16, fp32 compute), the dense build
//   cuSPARSE CSR     x as CSR (its non-zeros) times W, cusparseSpMM
//   cuSPARSE BSR     x as BSR with tile x 1 blocks (or, when cuSPARSE
//                    rejects those, tile x tile blocks covering the
//                    non-zeros), cusparseSpMM
// and sparsec's PIT kernels (runtime/src/cuda/Pit.cu):
//   sread            index construction + gather (the default, unsorted:
//                    warps append with atomics after a memset of the counts)
//   sread sorted     the same by one block per token block and a prefix
//                    sum (sorted sets, no memset)
//   matmul default   pitMatmul's own choice of block, pipeline and sweep
//                    (columns, stages and sweep 0), what the runtime runs
//   matmul 128/256   the micro-tiled tensor-core product given the index,
//                    128 output columns per block (4-stage pipeline), or
//                    256 at pitMatmul's default pipeline (two warpgroups a
//                    block on Hopper's warpgroup MMAs at 32-token tiles;
//                    else 4 stages)
//   128, 3/2 stages  128 columns with a shallower pipeline (less shared
//                    memory, more blocks an SM)
//   sweep 2/4/8      128 columns, 2 stages, each block computing that many
//                    output blocks of its token block in turn
//   total            sread + the fastest matmul, what a model pays per call
//   total, early     sread sorted + the fastest matmul, both launched as
//                    programmatic dependent launches (each launch overlaps
//                    the kernel before it)
// Times are medians over replays of a CUDA graph of repeated calls (the
// operands stay in L2 as far as they fit, for every peer alike). Results
// are checked against cuBLAS; exit 1 when one is off.
//
//   sparsec-bench-pit [--m 4096] [--k 4096] [--n 4096] [--tile 32]
//                     [--sparsity 0,50,90,95,99] [--y f16|f32]
//                     [--epilogue none|bias-residual]
//
// --y f32: PIT's outputs in fp32, as the runtime's sparse_linear calls
// write them (the peers keep fp16 outputs).
// --epilogue bias-residual: PIT adds a bias and an fp32 residual as a
// model's down projection does (y = x . W + bias + residual; checked
// against cuBLAS's product plus both on the host); the peers compute the
// product alone.
//
//===----------------------------------------------------------------------===//

#include "GpuBench.h"
#include "sparsec/rt/cuda/Pit.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cusparse.h>

#include <cstring>
#include <string>

using namespace sparsec::rt;
using namespace sparsec::rt::cuda;
using namespace sparsec::bench;

namespace {

std::string ratio(double a, double b) {
  return a < 0 || b < 0 ? "n/a" : cell(a / b, "%.2fx");
}

/// cusparseSpMM over an already created sparse descriptor; -1 when
/// cuSPARSE rejects the combination.
double timeSpMM(cusparseHandle_t sp, cusparseSpMatDescr_t a, __half *w,
                __half *y, int64_t K, int64_t N, int64_t M,
                cusparseSpMMAlg_t alg, std::vector<float> &out) {
  cusparseDnMatDescr_t bm, cm;
  float one = 1.0f, zero = 0.0f;
  if (cusparseCreateDnMat(&bm, K, N, N, w, CUDA_R_16F, CUSPARSE_ORDER_ROW) !=
          CUSPARSE_STATUS_SUCCESS ||
      cusparseCreateDnMat(&cm, M, N, N, y, CUDA_R_16F, CUSPARSE_ORDER_ROW) !=
          CUSPARSE_STATUS_SUCCESS)
    return -1;
  size_t bytes = 0;
  double us = -1;
  const auto op = CUSPARSE_OPERATION_NON_TRANSPOSE;
  if (cusparseSpMM_bufferSize(sp, op, op, &one, a, bm, &zero, cm, CUDA_R_32F,
                              alg, &bytes) == CUSPARSE_STATUS_SUCCESS) {
    void *buffer = alloc<char>(bytes);
    cusparseSpMM_preprocess(sp, op, op, &one, a, bm, &zero, cm, CUDA_R_32F, alg,
                            buffer);
    auto call = [&] {
      return cusparseSpMM(sp, op, op, &one, a, bm, &zero, cm, CUDA_R_32F, alg,
                          buffer) == CUSPARSE_STATUS_SUCCESS;
    };
    if (call()) {
      // Slow calls (milliseconds) are timed once after the warm-up call;
      // fast ones like every other peer.
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      cudaEventRecord(e0, stream);
      call();
      cudaEventRecord(e1, stream);
      CHECK_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      us = ms * 1000.0;
      if (us < 1000) {
        bool g;
        us = timeUs([&] { call(); }, g, 10);
      }
      out = toFloats(download(y, size_t(M * N)));
    }
    cudaFree(buffer);
  }
  cudaGetLastError();
  cusparseDestroyDnMat(bm);
  cusparseDestroyDnMat(cm);
  return us;
}

} // namespace

int main(int argc, char **argv) {
  int64_t M = 4096, K = 4096, N = 4096;
  int tile = 32;
  std::string y = "f16", epilogue = "none";
  std::vector<double> sparsities = {0, 50, 90, 95, 99};
  if (!Options("sparsec-bench-pit")
           .add("--m", M)
           .add("--k", K)
           .add("--n", N)
           .add("--tile", tile)
           .add("--y", y)
           .add("--epilogue", epilogue)
           .add("--sparsity", sparsities)
           .parse(argc, argv))
    return 1;
  if (y != "f16" && y != "f32") {
    std::fprintf(stderr, "error: --y takes f16 or f32, not '%s'\n", y.c_str());
    return 1;
  }
  const bool y32 = y == "f32";
  if (epilogue != "none" && epilogue != "bias-residual") {
    std::fprintf(stderr,
                 "error: --epilogue takes none or bias-residual, not '%s'\n",
                 epilogue.c_str());
    return 1;
  }
  const bool withEpilogue = epilogue == "bias-residual";
  if (!percentages(sparsities))
    return 1;
  if (M < 1 || K < 1 || N < 1 || !pitTileSupported(tile) || N % 8) {
    std::fprintf(stderr, "error: need positive sizes, N a multiple of 8 and "
                         "--tile 8, 16 or 32\n");
    return 1;
  }
  cudaDeviceProp prop;
  cublasHandle_t blas;
  cusparseHandle_t sp;
  setUp(prop, blas, sp);
  // As in a model binary, SPARSEC_CUDA_PIT_MMA=sync puts the 32-token
  // default on mma.sync (pitWarpgroupMma reads it; docs/GPU.md, "Runtime
  // switches").

  PitProblem problem;
  __half *dW = upload(problem.weights(K, N));
  __half *dY = alloc<__half>(size_t(M * N)), *dYRef = alloc<__half>(size_t(M * N));
  float *dYf = y32 ? alloc<float>(size_t(M * N)) : nullptr;
  const int64_t blocks = pitBlocks(M, tile);
  const PitWorkspace ws = allocPitWorkspace(M, K, tile);
  // PIT's product into dY or, with --y f32, dYf; what it wrote as floats,
  // and the output cleared.
  // --epilogue bias-residual: PitProblem's bias and residual.
  std::vector<float> bias, residual;
  float *dBias = nullptr, *dRes = nullptr;
  if (withEpilogue) {
    problem.epilogue(M, N, bias, residual);
    dBias = upload(bias);
    dRes = upload(residual);
  }
  auto pitMatmulTo = [&](int columns, int stages, bool early, int sweep) {
    return dYf ? pitMatmul(ws, M, K, dW, N, tile, dBias, ops::Activation::none,
                           dRes, dYf, stream, columns, stages, early, sweep)
               : pitMatmul(ws, M, K, dW, N, tile, dBias, ops::Activation::none,
                           dRes, dY, stream, columns, stages, early, sweep);
  };
  auto pitOutput = [&] {
    std::vector<float> out =
        dYf ? download(dYf, size_t(M * N)) : toFloats(download(dY, size_t(M * N)));
    CHECK_CUDA(dYf ? cudaMemset(dYf, 0, sizeof(float) * size_t(M * N))
                   : cudaMemset(dY, 0, sizeof(__half) * size_t(M * N)));
    return out;
  };

  std::printf("GPU: %s, %d SMs, %.0f MB L2\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize / 1e6);
  std::printf("y = x . W, M=%lld K=%lld N=%lld, fp16 in/out, fp32 accumulation; "
              "x sparse in %d x 1 micro-tiles; microseconds per call%s\n\n",
              (long long)M, (long long)K, (long long)N, tile,
              y32 ? "; PIT's outputs fp32" : "");
  std::printf("pitMatmul's default here: %s\n\n",
              tile == 32 && pitWarpgroupMma()
                  ? "warpgroup MMAs, 2 stages, no sweep (SPARSEC_CUDA_PIT_MMA=sync: mma.sync)"
                  : ("mma.sync, " +
                     std::to_string(pitSweepTiles(M, N, tile, prop.multiProcessorCount)) +
                     " output blocks a block (1: no sweep; the sweep columns are its "
                     "candidates)")
                        .c_str());
  std::printf("| sparsity | cuBLAS dense | cuSPARSE CSR | cuSPARSE BSR | PIT sread | sread sorted | "
              "PIT matmul default | PIT matmul 128 | PIT matmul 256 | 128, 3 stages | 128, 2 stages | "
              "sweep 2 | sweep 4 | sweep 8 | "
              "PIT total | total, early | vs cuBLAS | vs best cuSPARSE | PIT TFLOP/s | err |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
              "---:|---:|---:|---:|\n");
  bool ok = true;
  std::string bsrNote;
  bool squareOnly = false; // cuSPARSE rejected tile x 1 blocks once
  for (double sparsity : sparsities) {
    std::vector<uint8_t> active;
    const std::vector<__half> x = problem.input(M, K, tile, sparsity, active);
    __half *dX = upload(x);

    bool g;
    auto dense = [&] { denseGemm(blas, M, N, K, dW, dX, dYRef); };
    double denseUs = timeUs(dense, g, 10);
    dense();
    std::vector<float> ref = toFloats(download(dYRef, size_t(M * N)));
    // What PIT's outputs are checked against: the product, plus the bias
    // and the residual where PIT adds them.
    std::vector<float> refPit = ref;
    if (withEpilogue)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n)
          refPit[size_t(m * N + n)] += bias[size_t(n)] + residual[size_t(m * N + n)];

    // cuSPARSE CSR.
    std::vector<int32_t> rowPtr(size_t(M + 1), 0), cols;
    std::vector<__half> vals;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t k = 0; k < K; ++k)
        if (__half2float(x[size_t(m * K + k)]) != 0.0f) {
          cols.push_back(int32_t(k));
          vals.push_back(x[size_t(m * K + k)]);
        }
      rowPtr[size_t(m + 1)] = int32_t(cols.size());
    }
    int32_t *dRowPtr = upload(rowPtr), *dCols = upload(cols);
    __half *dVals = upload(vals);
    double csrUs = -1;
    std::vector<float> csrOut;
    {
      cusparseSpMatDescr_t a;
      if (cusparseCreateCsr(&a, M, K, int64_t(cols.size()), dRowPtr, dCols, dVals,
                            CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                            CUSPARSE_INDEX_BASE_ZERO,
                            CUDA_R_16F) == CUSPARSE_STATUS_SUCCESS) {
        for (auto alg : {CUSPARSE_SPMM_CSR_ALG2, CUSPARSE_SPMM_CSR_ALG1,
                         CUSPARSE_SPMM_CSR_ALG3}) {
          std::vector<float> out;
          double us = timeSpMM(sp, a, dW, dY, K, N, M, alg, out);
          if (us >= 0 && (csrUs < 0 || us < csrUs)) {
            csrUs = us;
            csrOut = out;
          }
        }
        cusparseDestroySpMat(a);
      }
    }
    cudaFree(dRowPtr);
    cudaFree(dCols);
    cudaFree(dVals);

    // cuSPARSE BSR: tile x 1 blocks first, tile x tile if rejected.
    double bsrUs = -1;
    std::vector<float> bsrOut;
    for (int64_t cb : {int64_t(1), int64_t(tile)}) {
      if (K % cb || M % tile || (cb == 1 && squareOnly))
        continue;
      const int64_t brows = M / tile, bcols = K / cb;
      std::vector<int32_t> bRowPtr(size_t(brows + 1), 0), bCols;
      std::vector<__half> bVals;
      for (int64_t br = 0; br < brows; ++br) {
        for (int64_t bc = 0; bc < bcols; ++bc) {
          bool any = false;
          for (int64_t r = 0; r < tile && !any; ++r)
            for (int64_t c = 0; c < cb && !any; ++c)
              any = __half2float(x[size_t((br * tile + r) * K + bc * cb + c)]) != 0.0f;
          if (!any)
            continue;
          bCols.push_back(int32_t(bc));
          for (int64_t r = 0; r < tile; ++r) // row-major blocks
            for (int64_t c = 0; c < cb; ++c)
              bVals.push_back(x[size_t((br * tile + r) * K + bc * cb + c)]);
        }
        bRowPtr[size_t(br + 1)] = int32_t(bCols.size());
      }
      int32_t *dBR = upload(bRowPtr), *dBC = upload(bCols);
      __half *dBV = upload(bVals);
      cusparseSpMatDescr_t a;
      if (cusparseCreateBsr(&a, brows, bcols, int64_t(bCols.size()), tile, cb, dBR,
                            dBC, dBV, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                            CUSPARSE_INDEX_BASE_ZERO, CUDA_R_16F,
                            CUSPARSE_ORDER_ROW) == CUSPARSE_STATUS_SUCCESS) {
        bsrUs = timeSpMM(sp, a, dW, dY, K, N, M, CUSPARSE_SPMM_BSR_ALG1, bsrOut);
        cusparseDestroySpMat(a);
      } else if (cb == 1) {
        squareOnly = true;
      }
      cudaGetLastError();
      cudaFree(dBR);
      cudaFree(dBC);
      cudaFree(dBV);
      if (bsrUs >= 0) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%d x %lld", tile, (long long)cb);
        bsrNote = buf;
        break;
      }
    }

    // sparsec PIT (the default unsorted SRead; both block widths).
    double sortedUs = timeUs([&] { pitSRead(dX, M, K, tile, true, ws, stream); }, g, 20);
    double sreadUs = timeUs([&] { pitSRead(dX, M, K, tile, false, ws, stream); }, g, 20);
    CHECK_CUDA(pitSRead(dX, M, K, tile, false, ws, stream));
    // pitMatmul's default (its own block, pipeline and sweep, as the
    // runtime calls it), then block widths and pipeline depths: 128
    // columns with 4 stages, 256 at the default pipeline (two warpgroups a
    // block on Hopper at 32-token tiles), 128 columns with 3 and 2 stages (more
    // blocks an SM), then sweeps of 2, 4 and 8 output blocks a block (128
    // columns, 2 stages). Every variant's result is checked.
    constexpr int kVariants = 8;
    double matmulUs[kVariants];
    const int widths[kVariants] = {0, 128, 256, 128, 128, 128, 128, 128},
              stages[kVariants] = {0, 4, 0, 3, 2, 2, 2, 2},
              sweeps[kVariants] = {0, 0, 0, 0, 0, 2, 4, 8};
    double err = 0;
    for (int i = 0; i < kVariants; ++i) {
      matmulUs[i] = timeUs([&] {
        pitMatmulTo(widths[i], stages[i], false, sweeps[i]);
      }, g, 20);
      CHECK_CUDA(cudaGetLastError());
      err = std::max(err, relErr(pitOutput(), refPit));
    }
    int best = 0;
    for (int i = 1; i < kVariants; ++i)
      if (matmulUs[i] < matmulUs[best])
        best = i;
    double totalUs = timeUs([&] {
      pitSRead(dX, M, K, tile, false, ws, stream);
      pitMatmulTo(widths[best], stages[best], false, sweeps[best]);
    }, g, 20);
    CHECK_CUDA(cudaGetLastError());
    err = std::max(err, relErr(pitOutput(), refPit));
    double earlyUs = timeUs([&] {
      pitSRead(dX, M, K, tile, true, ws, stream, true);
      pitMatmulTo(widths[best], stages[best], true, sweeps[best]);
    }, g, 20);
    CHECK_CUDA(cudaGetLastError());
    err = std::max(err, relErr(pitOutput(), refPit));
    const double pitUs = std::min(totalUs, earlyUs);
    double errCsr = csrOut.empty() ? 0 : relErr(csrOut, ref);
    double errBsr = bsrOut.empty() ? 0 : relErr(bsrOut, ref);
    ok &= err < 5e-3 && errCsr < 5e-3 && errBsr < 5e-3;
    double bestSparse = csrUs < 0 ? bsrUs : (bsrUs < 0 ? csrUs : std::min(csrUs, bsrUs));
    double usefulFlops = 2.0 * double(M) * N * K * (1.0 - sparsity / 100.0);
    std::printf("| %.0f %% | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | "
                "%s | %s | %s | %.0f | %.1e |\n",
                sparsity, cell(denseUs).c_str(), cell(csrUs).c_str(),
                cell(bsrUs).c_str(), cell(sreadUs).c_str(), cell(sortedUs).c_str(),
                cell(matmulUs[0]).c_str(), cell(matmulUs[1]).c_str(),
                cell(matmulUs[2]).c_str(), cell(matmulUs[3]).c_str(),
                cell(matmulUs[4]).c_str(), cell(matmulUs[5]).c_str(),
                cell(matmulUs[6]).c_str(), cell(matmulUs[7]).c_str(),
                cell(totalUs).c_str(), cell(earlyUs).c_str(),
                ratio(denseUs, pitUs).c_str(), ratio(bestSparse, pitUs).c_str(),
                usefulFlops / (pitUs * 1e6),
                std::max(err, std::max(errCsr, errBsr)));
    std::fflush(stdout);
    cudaFree(dX);
  }
  std::printf("\nBSR blocks: %s. Ratios are peer time / the faster PIT total "
              "(> 1: PIT faster).\n", bsrNote.empty() ? "rejected by cuSPARSE" : bsrNote.c_str());
  return ok ? 0 : 1;
}
