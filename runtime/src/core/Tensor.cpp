//===- Tensor.cpp - Element types, tensor views and buffers ---------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Runtime.h"

#include <cstdlib>
#include <limits>
#include <utility>

namespace sparsec::rt {

size_t dtypeSize(DType t) {
  switch (t) {
  case DType::f64:
  case DType::i64:
  case DType::u64:
    return 8;
  case DType::f32:
  case DType::i32:
  case DType::u32:
    return 4;
  case DType::f16:
  case DType::bf16:
  case DType::i16:
  case DType::u16:
    return 2;
  case DType::i8:
  case DType::u8:
  case DType::b1:
    return 1;
  }
  return 1;
}

const char *dtypeName(DType t) {
  switch (t) {
  case DType::f32:
    return "float32";
  case DType::f64:
    return "float64";
  case DType::f16:
    return "float16";
  case DType::bf16:
    return "bfloat16";
  case DType::i64:
    return "int64";
  case DType::i32:
    return "int32";
  case DType::i16:
    return "int16";
  case DType::i8:
    return "int8";
  case DType::u8:
    return "uint8";
  case DType::u16:
    return "uint16";
  case DType::u32:
    return "uint32";
  case DType::u64:
    return "uint64";
  case DType::b1:
    return "bool";
  }
  return "unknown";
}

const char *dtypeDescr(DType t) {
  switch (t) {
  case DType::f32:
    return "<f4";
  case DType::f64:
    return "<f8";
  case DType::f16:
    return "<f2";
  case DType::i64:
    return "<i8";
  case DType::i32:
    return "<i4";
  case DType::i16:
    return "<i2";
  case DType::i8:
    return "|i1";
  case DType::u8:
    return "|u1";
  case DType::u16:
    return "<u2";
  case DType::u32:
    return "<u4";
  case DType::u64:
    return "<u8";
  case DType::b1:
    return "|b1";
  case DType::bf16: // numpy has no bfloat16: the raw 2-byte values
    return "<V2";
  }
  return "?";
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank && i < kMaxRank; ++i)
    n *= shape[i];
  return n;
}

std::string Tensor::describe() const {
  std::string s = dtypeName(dtype);
  s += '[';
  for (int i = 0; i < rank && i < kMaxRank; ++i) {
    if (i)
      s += ", ";
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

//===----------------------------------------------------------------------===//
// Buffer
//===----------------------------------------------------------------------===//

Buffer::Buffer(Buffer &&other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)) {}

Buffer &Buffer::operator=(Buffer &&other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

Buffer::~Buffer() { std::free(data_); }

bool Buffer::ensure(size_t bytes) {
  if (bytes <= capacity_ && data_)
    return true;
  // A buffer that grows again (a slot holding a KV cache's present, one
  // position longer each decode step) takes a quarter more, as the CUDA
  // runtime's do: a step then reallocates, copies into and faults in fresh
  // pages once in many steps instead of every step.
  size_t want = bytes;
  if (data_ && bytes <= std::numeric_limits<size_t>::max() - bytes / 4)
    want = bytes + bytes / 4;
  // Round up to the alignment so that kernels may read whole vectors at the
  // end; an empty request still yields a valid pointer.
  size_t rounded = (want + 63) & ~size_t(63);
  if (rounded < bytes)
    return false; // Overflow.
  if (rounded == 0)
    rounded = 64;
  void *p = nullptr;
  if (posix_memalign(&p, 64, rounded) != 0 || !p)
    return false;
  std::free(data_);
  data_ = p;
  capacity_ = rounded;
  return true;
}

} // namespace sparsec::rt
