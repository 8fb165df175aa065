//===- LtGemm.h - GEMMs with fused epilogues through cuBLASLt ---*- C++ -*-===//
//
// Part of the sparsec project.
//
// The batched (prompt) linears' GEMMs with their bias and ReLU computed
// inside the GEMM by cuBLASLt's epilogues, instead of by a separate kernel
// that reads and writes the whole output again. Plans (descriptors and the
// heuristic's algorithm) are made once per problem and kept.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RT_CUDA_LTGEMM_H
#define SPARSEC_RT_CUDA_LTGEMM_H

#include "sparsec/rt/Ops.h"

#include <cstddef>
#include <cstdint>
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <map>
#include <tuple>

namespace sparsec::rt::cuda {

/// Whether LtGemm computes this epilogue inside the GEMM: a residual added
/// (read from its own buffer), a bias, ReLU, or bias and ReLU (bias first),
/// each in fp32 on the fp32 accumulators, as the runtime's separate
/// epilogue kernel does. GELU and the other activations keep that kernel
/// (cuBLASLt's GELU is not the exact erf form); so does a residual with an
/// activation.
bool ltFuses(const float *bias, ops::Activation act, const float *residual);

/// cuBLASLt GEMMs with fused epilogues. Not thread-safe (one per device
/// stream owner).
class LtGemm {
public:
  LtGemm() = default;
  LtGemm(const LtGemm &) = delete;
  LtGemm &operator=(const LtGemm &) = delete;
  ~LtGemm();

  /// Row-major y [M, N] (fp32) = act(x [M, K] . op(W) + bias) + residual,
  /// W [K, N] or, `transposed`, [N, K]; x and W of `type` (CUDA_R_32F, or
  /// CUDA_R_16F / CUDA_R_16BF with fp32 accumulation), bias fp32 [N] or
  /// null, residual fp32 [M, N] or null (read in place: it may be y, and
  /// need not be copied there first). `workspace` (device memory,
  /// stream-ordered: it may be the cuBLAS handle's) bounds the algorithms
  /// considered. CUBLAS_STATUS_NOT_SUPPORTED, with nothing launched, where
  /// ltFuses says no or cuBLASLt has no algorithm for the problem: the caller
  /// then runs its unfused path.
  cublasStatus_t matmul(cudaStream_t stream, const void *x, const void *w,
                        cudaDataType_t type, bool transposed, int64_t M,
                        int64_t K, int64_t N, const float *bias,
                        ops::Activation act, const float *residual, float *y,
                        void *workspace, size_t workspaceBytes);

  /// Plans held now (one per distinct problem and pointer alignment, at
  /// most kMaxPlans).
  size_t plans() const { return planCache.size(); }
  /// Plans made so far, evicted ones included.
  size_t plansMade() const { return made; }
  /// The plans kept at once: a process serving prompts of many lengths
  /// makes one per length and problem, so the least recently used is
  /// destroyed past this many.
  static constexpr size_t kMaxPlans = 256;

private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr; // c: C, D
    cublasLtMatmulAlgo_t algo{};
    bool usable = false; // the heuristic found an algorithm
    uint64_t lastUse = 0; // the use counter when last looked up
  };
  // M, K, N, type, transposed, epilogue, the alignments of x, W, y, the
  // residual (0: none) and the bias, workspace bytes.
  using Key = std::tuple<int64_t, int64_t, int64_t, int, bool, int, unsigned,
                         unsigned, unsigned, unsigned, unsigned, size_t>;
  cublasStatus_t plan(const Key &key, Plan &p, const float *bias);
  static void destroy(Plan &p);
  /// Destroys the least recently used plan.
  void evict();

  cublasLtHandle_t handle = nullptr;
  std::map<Key, Plan> planCache;
  uint64_t uses = 0; // lookups so far
  size_t made = 0;
};

} // namespace sparsec::rt::cuda

#endif // SPARSEC_RT_CUDA_LTGEMM_H
