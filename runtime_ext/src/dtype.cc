#include "dtype.h"

#include <cstring>

namespace ge {

namespace {
struct Entry {
  DType type;
  const char* name;
  size_t size;
};
constexpr Entry kTypes[] = {
    {DType::kFloat32, "float32", 4}, {DType::kFloat64, "float64", 8},
    {DType::kFloat16, "float16", 2}, {DType::kInt64, "int64", 8},
    {DType::kInt32, "int32", 4},     {DType::kInt16, "int16", 2},
    {DType::kInt8, "int8", 1},       {DType::kUInt8, "uint8", 1},
    {DType::kBool, "bool", 1},
};
}  // namespace

bool parse_dtype(const std::string& name, DType* out) {
  for (const Entry& e : kTypes) {
    if (name == e.name) {
      *out = e.type;
      return true;
    }
  }
  return false;
}

const char* dtype_name(DType t) { return kTypes[static_cast<int>(t)].name; }

size_t dtype_size(DType t) { return kTypes[static_cast<int>(t)].size; }

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {  // inf / nan
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {  // normal
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {  // zero
    bits = sign;
  } else {  // subnormal: renormalise
    int e = -1;
    do {
      man <<= 1;
      ++e;
    } while ((man & 0x400u) == 0);
    bits = sign | static_cast<uint32_t>(112 - e) << 23 | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf / nan (keep nan quiet)
    return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow
  if (abs < 0x38800000u) {                          // result is subnormal or zero
    if (abs < 0x33000000u) return sign;             // < 2^-25 rounds to zero
    uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14..24
    uint32_t half = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t h = ((abs - 0x38000000u) >> 13);  // rebias exponent 127 -> 15
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

}  // namespace ge
