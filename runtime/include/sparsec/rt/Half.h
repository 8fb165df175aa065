//===- Half.h - IEEE binary16 conversions -----------------------*- C++ -*-===//
//
// Part of the sparsec project.
//
// Portable float <-> half (IEEE binary16) and float <-> bfloat16
// conversions, shared by the runtime kernels and the compiler's weight
// packer (fp16- and bf16-stored weights).
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RT_HALF_H
#define SPARSEC_RT_HALF_H

#include <cstdint>
#include <cstring>

namespace sparsec::rt {

inline float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13); // inf / NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else { // subnormal: normalise
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while (!(man & 0x400u));
    bits = sign | uint32_t(112 - e) << 23 | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// Round to nearest even; overflow gives infinity, NaN stays NaN.
inline uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) // inf or NaN (keep NaN quiet)
    return uint16_t(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  if (absx >= 0x477ff000u) // rounds to >= 65520: overflow
    return uint16_t(sign | 0x7c00u);
  if (absx < 0x38800000u) { // below the smallest normal half (2^-14)
    if (absx < 0x33000000u) // below half the smallest subnormal (2^-25)
      return sign;
    uint32_t e = absx >> 23;
    uint32_t man = (absx & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; // 14..24 bits dropped below the half ulp
    uint32_t half = man >> shift;
    uint32_t rest = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1u)))
      ++half;
    return uint16_t(sign | half);
  }
  uint32_t r = absx - 0x38000000u; // rebias 127 -> 15 (in place)
  uint32_t half = r >> 13;
  uint32_t rest = r & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
    ++half;
  return uint16_t(sign | half);
}

/// bfloat16 (the top 16 bits of a float32) as float32: exact.
inline float bfloat16ToFloat(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// Round to nearest even; overflow gives infinity, NaN stays NaN (quiet).
inline uint16_t floatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) // NaN: keep the sign, set quiet
    return uint16_t((x >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return uint16_t((x + rounding) >> 16);
}

} // namespace sparsec::rt

#endif // SPARSEC_RT_HALF_H
