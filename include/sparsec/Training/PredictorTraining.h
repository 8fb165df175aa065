//===- PredictorTraining.h - low-rank activation predictors -----*- C++ -*-===//
//
// Part of the sparsec project.
//
// Trains the DejaVu-style predictor of an FFN's active neurons from profile
// samples: given sampled layer inputs X ([m, d]), their active masks and the
// up projection (W [d, n], b [n]) whose ReLU produced them, find
//   mask ~= (x . w1) . w2 + bias > 0,   w1 [d, r], w2 [r, n], bias [n].
//
// The classifier is the best rank-r approximation of the pre-activation on
// the data: z = x W projected onto the top-r right singular vectors of
// X W (computed in d-space through L^T W, where L L^T = S = X^T X / m is a
// Cholesky factorisation), with a per-neuron margin k * sigma_j, sigma_j being the
// standard deviation of neuron j's approximation error. The margin k is set
// on a calibration split so the predictor reaches the target recall; rank,
// recall, precision and density are reported on a test split that neither
// fitting nor calibration saw. Wide layers (d > exactBasisLimit) find the
// top directions by a randomised subspace iteration instead of a full
// eigendecomposition. Everything is deterministic (fixed splits, a fixed
// seed for the randomised basis).
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_TRAINING_PREDICTORTRAINING_H
#define SPARSEC_TRAINING_PREDICTORTRAINING_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sparsec {

struct PredictorProblem {
  int64_t samples = 0, d = 0, n = 0;
  const float *inputs = nullptr;       ///< [samples, d]
  /// Whether neuron `j` was active for sample `i`.
  std::function<bool(int64_t i, int64_t j)> active;
  std::vector<float> weight;           ///< [d, n], k-major
  std::vector<float> bias;             ///< [n] or empty
};

struct PredictorOptions {
  double targetRecall = 0.999;
  /// Ranks tried (values >= d are skipped); empty: d/16, d/8, d/4, d/2,
  /// or d/16, d/8 above exactBasisLimit.
  std::vector<int64_t> ranks;
  /// Layer widths up to this get the exact eigendecomposition of the
  /// d x d Gram matrix (O(d^3)); wider ones a randomised subspace iteration
  /// for the top directions only (O(d n r), fixed seed).
  int64_t exactBasisLimit = 1024;
};

/// One trained candidate, with its quality on the test split.
struct Predictor {
  int64_t rank = 0;
  std::vector<float> w1, w2, bias; ///< [d, r], [r, n], [n]
  double recall = 0, precision = 0, density = 0; ///< test split
  double calibrationDensity = 0;
  double actualDensity = 0; ///< share of active (token, neuron) pairs, test
  /// Multiply-adds per token: predictor + up projection over the predicted
  /// neurons + down projection over them (calibration density).
  double cost = 0;
};

/// Trains one predictor per rank. Fails (with a message) when there are too
/// few samples or no active neuron to calibrate on.
bool trainPredictors(const PredictorProblem &problem,
                     const PredictorOptions &options,
                     std::vector<Predictor> &out, std::string &error);

} // namespace sparsec

#endif // SPARSEC_TRAINING_PREDICTORTRAINING_H
