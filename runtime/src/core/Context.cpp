//===- Context.cpp - The execution context of a compiled model ------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Runtime.h"

#include <limits>

namespace sparsec::rt {

Context::Context(const ModelDesc &desc, const WeightPack *weights, int threads)
    : desc(desc), weights(weights), pool(threads),
      slots(size_t(desc.numSlots > 0 ? desc.numSlots : 0)) {
  // Slots of a size known at compile time are allocated once, up front, so
  // that running the model never allocates for them.
  for (int i = 0; i < desc.numSlots && desc.slotBytes; ++i) {
    int64_t bytes = desc.slotBytes[i];
    if (bytes >= 0 && !slots[size_t(i)].ensure(size_t(bytes))) {
      fail("out of memory: cannot allocate " + std::to_string(bytes) +
           " bytes for slot " + std::to_string(i));
      return;
    }
  }
}

bool Context::allocate(int slot, Tensor &t, DType dtype, int rank,
                       const int64_t *shape) {
  if (slot < 0 || size_t(slot) >= slots.size())
    return fail("internal error: slot " + std::to_string(slot) +
                " out of range (the model has " + std::to_string(slots.size()) +
                ")");
  if (rank < 0 || rank > kMaxRank || (rank > 0 && !shape))
    return fail("internal error: invalid rank " + std::to_string(rank));
  Tensor result;
  result.dtype = dtype;
  result.rank = rank;
  // Byte count with overflow checks; a zero dim makes the tensor empty.
  uint64_t bytes = dtypeSize(dtype);
  bool empty = false;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] < 0)
      return fail("internal error: negative dimension " +
                  std::to_string(shape[i]));
    result.shape[i] = shape[i];
    empty |= shape[i] == 0;
  }
  if (empty) {
    bytes = 0;
  } else {
    for (int i = 0; i < rank; ++i) {
      if (bytes > std::numeric_limits<uint64_t>::max() / uint64_t(shape[i]))
        return fail("out of memory: tensor " + result.describe() +
                    " is too large");
      bytes *= uint64_t(shape[i]);
    }
  }
  if (bytes > std::numeric_limits<size_t>::max() ||
      !slots[size_t(slot)].ensure(size_t(bytes)))
    return fail("out of memory: cannot allocate " + std::to_string(bytes) +
                " bytes for " + result.describe() + " (slot " +
                std::to_string(slot) + ")");
  result.data = slots[size_t(slot)].data();
  t = result;
  return true;
}

bool Context::Backend::initCache(Context &ctx, int, const Tensor &, int64_t,
                                 int64_t, bool, Tensor &) {
  return ctx.fail("this backend has no device cache");
}
bool Context::Backend::appendCache(Context &ctx, int, const Tensor &, int64_t,
                                   int64_t) {
  return ctx.fail("this backend has no device cache");
}
bool Context::Backend::growCache(Context &ctx, int, int64_t, int64_t,
                                 Tensor &) {
  return ctx.fail("this backend has no device cache");
}

Tensor Context::weight(uint32_t index, DType dtype, int rank,
                       const int64_t *shape) const {
  Tensor t;
  t.dtype = dtype;
  t.rank = rank < 0 ? 0 : rank > kMaxRank ? kMaxRank : rank;
  for (int i = 0; i < t.rank && shape; ++i)
    t.shape[i] = shape[i];
  // The pack is mapped read-only; ops never write their inputs.
  if (weights)
    t.data = const_cast<void *>(weights->segment(index));
  return t;
}

bool Context::fail(const std::string &message) {
  if (error.empty())
    error = message.empty() ? "unknown error" : message;
  return false;
}

bool Context::failAt(const char *node) {
  if (error.empty())
    error = "unknown error";
  error += std::string(" (node '") + node + "')";
  return false;
}

} // namespace sparsec::rt
