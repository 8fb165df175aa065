//===- HotColdSolver.cpp - exact GPU/CPU neuron placement -----------------===//
//
// Part of the sparsec project.
//
// See HotColdSolver.h; the optimality argument is in docs/HotCold.md.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Placement/HotColdSolver.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

namespace sparsec::placement {
namespace {

/// The allowed k of a layer: 0, min..G-1 (when min < G), and G.
std::vector<int64_t> choices(const Layer &l) {
  const int64_t G = int64_t(l.groupMass.size());
  std::vector<int64_t> ks{0};
  for (int64_t k = std::max<int64_t>(1, l.minGroups); k < G; ++k)
    ks.push_back(k);
  if (G > 0)
    ks.push_back(G);
  return ks;
}

std::vector<double> prefixMass(const Layer &l) {
  std::vector<double> v(l.groupMass.size() + 1, 0.0);
  for (size_t i = 0; i < l.groupMass.size(); ++i)
    v[i + 1] = v[i] + l.groupMass[i];
  return v;
}

bool validate(const Problem &p, std::string &error) {
  if (p.budget < 0) {
    error = "negative budget";
    return false;
  }
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const Layer &l = p.layers[i];
    const size_t G = l.groupMass.size();
    if (l.bytes.size() != G + 1 || l.bytes[0] != 0) {
      error = "layer " + std::to_string(i) + ": bytes must have G + 1 entries "
              "starting at 0";
      return false;
    }
    for (size_t k = 0; k < G; ++k) {
      if (l.bytes[k + 1] < l.bytes[k] || !(l.groupMass[k] >= 0) ||
          (k > 0 && l.groupMass[k] > l.groupMass[k - 1] * (1 + 1e-12) + 1e-300)) {
        error = "layer " + std::to_string(i) +
                ": group masses must be non-negative and hot-first, bytes "
                "non-decreasing";
        return false;
      }
    }
  }
  return true;
}

/// Upper bound: the LP relaxation without the split constraint, i.e. the
/// fractional knapsack over all groups (each layer's groups in hot-first
/// order, so the greedy by mass per byte respects the prefix structure).
double lpBound(const Problem &p) {
  struct Item {
    double mass;
    double bytes;
  };
  std::vector<Item> items;
  double free = 0; // mass of zero-byte groups
  for (const Layer &l : p.layers)
    for (size_t k = 0; k < l.groupMass.size(); ++k) {
      double b = double(l.bytes[k + 1] - l.bytes[k]);
      if (b <= 0)
        free += l.groupMass[k];
      else
        items.push_back({l.groupMass[k], b});
    }
  std::sort(items.begin(), items.end(), [](const Item &a, const Item &b) {
    return a.mass * b.bytes > b.mass * a.bytes;
  });
  double left = double(p.budget), value = free;
  for (const Item &it : items) {
    if (left <= 0)
      break;
    double take = std::min(1.0, left / it.bytes);
    value += take * it.mass;
    left -= take * it.bytes;
  }
  return value;
}
} // namespace

bool solve(const Problem &p, Solution &s, std::string &error,
           int64_t maxStates) {
  auto start = std::chrono::steady_clock::now();
  s = Solution{};
  if (!validate(p, error))
    return false;
  const size_t L = p.layers.size();
  std::vector<std::vector<int64_t>> ks(L);
  std::vector<std::vector<double>> value(L);
  // The cost unit: gcd of every allowed option's bytes (and so every sum).
  int64_t unit = 0, maxTotal = 0;
  for (size_t l = 0; l < L; ++l) {
    ks[l] = choices(p.layers[l]);
    value[l] = prefixMass(p.layers[l]);
    s.totalMass += value[l].back();
    int64_t most = 0;
    for (int64_t k : ks[l]) {
      unit = std::gcd(unit, p.layers[l].bytes[size_t(k)]);
      most = std::max(most, p.layers[l].bytes[size_t(k)]);
    }
    maxTotal += most;
  }
  if (unit == 0)
    unit = 1; // every option is free
  // Costs beyond what all layers together can use never matter.
  const int64_t U = std::min(p.budget, maxTotal) / unit;
  int64_t cells = 0;
  for (size_t l = 0; l < L; ++l)
    cells += (U + 1) * int64_t(ks[l].size());
  if (cells > maxStates) {
    error = "the placement needs " + std::to_string(cells) +
            " DP states (cost unit " + std::to_string(unit) +
            " bytes); choose a group size that divides every FFN width";
    return false;
  }
  // best[u]: the largest mass of layers so far with total cost exactly u
  // units; pick[l][u]: the k of layer l on that optimum.
  const double none = -std::numeric_limits<double>::infinity();
  std::vector<double> best(size_t(U + 1), none), next(size_t(U + 1));
  std::vector<std::vector<int32_t>> pick(L, std::vector<int32_t>(size_t(U + 1), -1));
  best[0] = 0;
  for (size_t l = 0; l < L; ++l) {
    std::fill(next.begin(), next.end(), none);
    for (int64_t k : ks[l]) {
      const int64_t w = p.layers[l].bytes[size_t(k)] / unit;
      const double v = value[l][size_t(k)];
      for (int64_t u = 0; u + w <= U; ++u) {
        ++s.states;
        if (best[size_t(u)] == none)
          continue;
        double cand = best[size_t(u)] + v;
        if (cand > next[size_t(u + w)]) {
          next[size_t(u + w)] = cand;
          pick[l][size_t(u + w)] = int32_t(k);
        }
      }
    }
    best.swap(next);
  }
  int64_t at = 0;
  for (int64_t u = 0; u <= U; ++u)
    if (best[size_t(u)] > best[size_t(at)])
      at = u;
  s.gpuGroups.assign(L, 0);
  for (size_t l = L; l-- > 0;) {
    int64_t k = pick[l][size_t(at)];
    s.gpuGroups[l] = k;
    at -= p.layers[l].bytes[size_t(k)] / unit;
  }
  for (size_t l = 0; l < L; ++l) {
    s.objective += value[l][size_t(s.gpuGroups[l])];
    s.usedBytes += p.layers[l].bytes[size_t(s.gpuGroups[l])];
  }
  s.feasible = true;
  s.unitBytes = unit;
  s.bound = std::max(lpBound(p), s.objective);
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                            start).count();
  return true;
}

Solution solveExhaustive(const Problem &p) {
  Solution best;
  const size_t L = p.layers.size();
  std::vector<std::vector<int64_t>> ks(L);
  std::vector<std::vector<double>> value(L);
  for (size_t l = 0; l < L; ++l) {
    ks[l] = choices(p.layers[l]);
    value[l] = prefixMass(p.layers[l]);
    best.totalMass += value[l].back();
  }
  std::vector<size_t> idx(L, 0);
  best.objective = -1;
  while (true) {
    int64_t bytes = 0;
    double mass = 0;
    for (size_t l = 0; l < L; ++l) {
      bytes += p.layers[l].bytes[size_t(ks[l][idx[l]])];
      mass += value[l][size_t(ks[l][idx[l]])];
    }
    if (bytes <= p.budget && mass > best.objective) {
      best.objective = mass;
      best.usedBytes = bytes;
      best.gpuGroups.assign(L, 0);
      for (size_t l = 0; l < L; ++l)
        best.gpuGroups[l] = ks[l][idx[l]];
      best.feasible = true;
    }
    size_t l = 0;
    while (l < L && ++idx[l] == ks[l].size())
      idx[l++] = 0;
    if (l == L)
      break;
  }
  return best;
}

} // namespace sparsec::placement
