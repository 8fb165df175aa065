//===- LtGemm.cu - GEMMs with fused epilogues through cuBLASLt -----------===//
//
// Part of the sparsec project.
//
// See sparsec/rt/cuda/LtGemm.h. The row-major product y = x . op(W) is
// cuBLAS's column-major y^T [N, M] = op(W)^T [N, K] . x^T [K, M], as the
// runtime's cublasGemmEx calls pose it: A is W, B is x, C and D are y, and
// the bias runs along D's rows (y's columns).
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/LtGemm.h"

#include <algorithm>

namespace sparsec::rt::cuda {
namespace {

/// The alignment a pointer gives (its lowest set bit), at most 256 bytes:
/// what cuBLASLt's heuristic is told to assume.
unsigned alignmentOf(const void *p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return a == 0 ? 256u : unsigned(std::min<uintptr_t>(a & (~a + 1), 256));
}

} // namespace

bool ltFuses(const float *bias, ops::Activation act, const float *residual) {
  if (act == ops::Activation::relu)
    return residual == nullptr;
  return act == ops::Activation::none && (bias || residual);
}

void LtGemm::destroy(Plan &p) {
  if (p.desc)
    cublasLtMatmulDescDestroy(p.desc);
  for (cublasLtMatrixLayout_t l : {p.a, p.b, p.c})
    if (l)
      cublasLtMatrixLayoutDestroy(l);
  p = Plan{};
}

void LtGemm::evict() {
  auto oldest = planCache.begin();
  for (auto it = planCache.begin(); it != planCache.end(); ++it)
    if (it->second.lastUse < oldest->second.lastUse)
      oldest = it;
  if (oldest == planCache.end())
    return;
  // The descriptors are host objects: a launch queued with them has
  // already taken what it needs.
  destroy(oldest->second);
  planCache.erase(oldest);
}

LtGemm::~LtGemm() {
  for (auto &entry : planCache)
    destroy(entry.second);
  if (handle)
    cublasLtDestroy(handle);
}

cublasStatus_t LtGemm::plan(const Key &key, Plan &p, const float *bias) {
  const auto [M, K, N, type, transposed, epilogue, alignX, alignW, alignY,
              alignResidual, alignBias, workspaceBytes] = key;
  (void)alignBias; // (the bias pointer gives its own)
  const auto dataType = cudaDataType_t(type);
  cublasStatus_t s =
      cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void *value,
                 size_t bytes) {
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmulDescSetAttribute(p.desc, attr, value, bytes);
  };
  const cublasOperation_t opA = transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                          opB = CUBLAS_OP_N;
  const uint32_t epi = uint32_t(epilogue);
  set(CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA);
  set(CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB);
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (bias) {
    const int32_t biasType = CUDA_R_32F;
    set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &biasType, sizeof biasType);
    set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  }
  auto layout = [&](cublasLtMatrixLayout_t &l, cudaDataType_t t, int64_t rows,
                    int64_t cols, int64_t ld) {
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatrixLayoutCreate(&l, t, uint64_t(rows), uint64_t(cols), ld);
  };
  // A: op(W)^T's operand as stored, column-major: W [K, N] row-major is
  // [N, K] with leading dimension N; transposed ([N, K]) it is [K, N].
  layout(p.a, dataType, transposed ? K : N, transposed ? N : K,
         transposed ? K : N);
  layout(p.b, dataType, K, M, K);
  layout(p.c, CUDA_R_32F, N, M, N);
  if (s != CUBLAS_STATUS_SUCCESS)
    return s;
  cublasLtMatmulPreference_t pref = nullptr;
  s = cublasLtMatmulPreferenceCreate(&pref);
  auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attr, const void *v,
                    size_t bytes) {
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatmulPreferenceSetAttribute(pref, attr, v, bytes);
  };
  const uint64_t room = workspaceBytes;
  prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &room, sizeof room);
  const uint32_t aligns[4] = {alignW, alignX,
                              alignResidual ? alignResidual : alignY, alignY};
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aligns[0], 4);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &aligns[1], 4);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &aligns[2], 4);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &aligns[3], 4);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.c, p.c, pref,
                                       1, &result, &found);
  if (pref)
    cublasLtMatmulPreferenceDestroy(pref);
  if (s == CUBLAS_STATUS_SUCCESS && found > 0 &&
      result.state == CUBLAS_STATUS_SUCCESS) {
    p.algo = result.algo;
    p.usable = true;
  }
  return s;
}

cublasStatus_t LtGemm::matmul(cudaStream_t stream, const void *x, const void *w,
                              cudaDataType_t type, bool transposed, int64_t M,
                              int64_t K, int64_t N, const float *bias,
                              ops::Activation act, const float *residual,
                              float *y, void *workspace,
                              size_t workspaceBytes) {
  if (!ltFuses(bias, act, residual) || M <= 0 || K <= 0 || N <= 0)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!handle) {
    const cublasStatus_t s = cublasLtCreate(&handle);
    if (s != CUBLAS_STATUS_SUCCESS) {
      handle = nullptr;
      return s;
    }
  }
  const bool relu = act == ops::Activation::relu;
  const cublasLtEpilogue_t epilogue =
      bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
           : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  const Key key{M,
                K,
                N,
                int(type),
                transposed,
                int(epilogue),
                alignmentOf(x),
                alignmentOf(w),
                alignmentOf(y),
                residual ? alignmentOf(residual) : 0u,
                alignmentOf(bias),
                workspace ? workspaceBytes : 0};
  auto it = planCache.find(key);
  if (it == planCache.end()) {
    if (planCache.size() >= kMaxPlans)
      evict();
    ++made;
    Plan p;
    const cublasStatus_t s = plan(key, p, bias);
    it = planCache.emplace(key, p).first;
    if (s != CUBLAS_STATUS_SUCCESS)
      it->second.usable = false;
  }
  Plan &p = it->second;
  p.lastUse = ++uses;
  if (!p.usable)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (bias) {
    const cublasStatus_t s = cublasLtMatmulDescSetAttribute(
        p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (s != CUBLAS_STATUS_SUCCESS)
      return s;
  }
  // D = y; C = the residual (beta 1), or y, not read (beta 0).
  const float one = 1.0f, zero = 0.0f;
  return cublasLtMatmul(handle, p.desc, &one, w, p.a, x, p.b,
                        residual ? &one : &zero, residual ? residual : y, p.c,
                        y, p.c, &p.algo, workspace,
                        workspace ? workspaceBytes : 0, stream);
}

} // namespace sparsec::rt::cuda
