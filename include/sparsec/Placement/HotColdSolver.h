//===- HotColdSolver.h - exact GPU/CPU neuron placement ---------*- C++ -*-===//
//
// Part of the sparsec project.
//
// The optimisation behind sparsec-partition-hot-cold (docs/HotCold.md): per
// FFN layer l, choose how many of its neuron groups (sorted hot-first, so
// the GPU part is always a prefix) live on the GPU, k_l, maximising the
// activation mass the GPU serves, sum_l value_l(k_l), subject to
// sum_l bytes_l(k_l) <= budget and k_l in {0} U [min_l, G_l] (a split layer
// must be worth its synchronisation; all or nothing always is).
//
// Solved exactly by dynamic programming over the budget in units of the
// greatest common divisor of all option costs (every cost is an exact
// multiple, so no rounding). Plain C++: no MLIR dependency.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_PLACEMENT_HOTCOLDSOLVER_H
#define SPARSEC_PLACEMENT_HOTCOLDSOLVER_H

#include <cstdint>
#include <string>
#include <vector>

namespace sparsec::placement {

struct Layer {
  /// Mass of each group in hot-first order (non-increasing): the expected
  /// number of its neurons active per token.
  std::vector<double> groupMass;
  /// bytes[k]: GPU bytes of the first k groups (size G + 1, bytes[0] = 0,
  /// non-decreasing).
  std::vector<int64_t> bytes;
  /// Smallest k of a split layer (0 < k < G); k = 0 and k = G are always
  /// allowed. minGroups > G - 1 forbids splitting.
  int64_t minGroups = 1;
};

struct Problem {
  std::vector<Layer> layers;
  int64_t budget = 0; // bytes available for FFN groups
};

struct Solution {
  bool feasible = false;
  std::vector<int64_t> gpuGroups; // k_l per layer
  double objective = 0;           // GPU-served mass of the choice
  double bound = 0;               // LP relaxation bound (>= objective)
  double totalMass = 0;           // all layers' mass
  int64_t usedBytes = 0;
  int64_t unitBytes = 0;          // the DP's cost unit
  int64_t states = 0;             // DP cells evaluated
  double seconds = 0;
};

/// Solves `problem` exactly. Fails (returns false with `error`) on
/// malformed input, or when the DP would need more than `maxStates` cells
/// (costs without a usable common unit).
bool solve(const Problem &problem, Solution &solution, std::string &error,
           int64_t maxStates = int64_t(1) << 27);

/// Exhaustive search over every allowed k vector (tests; tiny problems).
Solution solveExhaustive(const Problem &problem);

} // namespace sparsec::placement

#endif // SPARSEC_PLACEMENT_HOTCOLDSOLVER_H
