//===- Argmax.h - the greedy pick over a row of logits ----------*- C++ -*-===//
//
// Part of the sparsec project.
//
// The index of a row's largest value, as std::max_element finds it (the
// first of equal maxima; a NaN is never larger, a NaN first element wins),
// written so that the compiler vectorises the scan: `generate` picks each
// greedy token from a vocabulary-wide row (50272 floats for OPT) between
// two decode steps, where std::max_element's dependent compare-and-branch
// took tens of microseconds a token (internal).
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RUNTIME_CORE_ARGMAX_H
#define SPARSEC_RUNTIME_CORE_ARGMAX_H

#include <cstdint>

namespace sparsec::rt::cli {

inline int64_t argmaxFirst(const float *x, int64_t n) {
  if (n <= 0)
    return 0;
  // The largest value in 16 independent lanes (a NaN is skipped by `>`,
  // and a NaN x[0] stays in every lane), then the first index holding it.
  constexpr int kLanes = 16;
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l)
    lane[l] = x[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l)
      lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
  float best = lane[0];
  for (int l = 1; l < kLanes; ++l)
    best = lane[l] > best ? lane[l] : best;
  for (; i < n; ++i)
    best = x[i] > best ? x[i] : best;
  if (best != best) // x[0] is NaN: std::max_element keeps it
    return 0;
  for (int64_t j = 0; j < n; ++j)
    if (x[j] == best)
      return j;
  return 0;
}

} // namespace sparsec::rt::cli

#endif // SPARSEC_RUNTIME_CORE_ARGMAX_H
