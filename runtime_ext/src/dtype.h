// Element types of tensors, their names (numpy's spelling) and sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

namespace ge {

enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kInt64,
  kInt32,
  kInt16,
  kInt8,
  kUInt8,
  kBool,  // one byte, 0 or 1
};

// Parses a numpy dtype name ("float32", "int64", "bool", ...). Returns false if unknown.
bool parse_dtype(const std::string& name, DType* out);

// The numpy name of `t`; never null.
const char* dtype_name(DType t);

// Bytes per element.
size_t dtype_size(DType t);

// IEEE half <-> float, round to nearest even; NaN and infinities are preserved.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

// Calls f(T{}) with T the C++ type of an arithmetic dtype (float32 float64 int64 int32)
// and returns true; false (f not called) for any other dtype.
template <class F>
bool with_arith_type(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: f(float{}); return true;
    case DType::kFloat64: f(double{}); return true;
    case DType::kInt64: f(int64_t{}); return true;
    case DType::kInt32: f(int32_t{}); return true;
    default: return false;
  }
}

// Float -> integer conversion without undefined behaviour: NaN gives 0, out-of-range
// values saturate.
template <class T>
T float_to_int(double v) {
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::lowest());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (v != v) return 0;
  if (v <= lo) return std::numeric_limits<T>::lowest();
  if (v >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

}  // namespace ge
