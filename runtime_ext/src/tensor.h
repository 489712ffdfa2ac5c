// TensorInfo: where one tensor of a loaded model lives and what it holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dtype.h"

namespace ge {

using Shape = std::vector<int64_t>;

enum class Region {
  kArena,   // activations: rewritten by every run
  kWeight,  // constants: written once at load, read-only afterwards
};

// How a 4-D activation's bytes are ordered. The shape is always the logical NCHW one;
// channels-last tensors are stored N,H,W,C. Chosen by the runtime (layout.h), never by
// the spec, and only for tensors that no one outside the runtime sees.
enum class Layout : uint8_t { kPlain, kChannelsLast };

struct TensorInfo {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;  // [] is a scalar (one element)
  Region region = Region::kArena;
  Layout layout = Layout::kPlain;
  size_t offset = 0;
  size_t nbytes = 0;
  int64_t numel = 1;
  // Region base + offset, resolved at load. Regions never move, so kernels may keep it.
  // Borrowed: the Model owns the memory.
  uint8_t* data = nullptr;

  bool constant() const { return region == Region::kWeight; }
  bool channels_last() const { return layout == Layout::kChannelsLast; }
  int rank() const { return static_cast<int>(shape.size()); }
  template <class T>
  T* ptr() const {
    return reinterpret_cast<T*>(data);
  }
};

// Product of the dims (1 for a scalar). Callers validate dims are >= 0 first.
inline int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// "[1,3,224,224]"
std::string shape_str(const Shape& s);

// "float32[1,3,224,224]"
std::string type_str(DType t, const Shape& s);

// Dense row-major strides in elements.
Shape dense_strides(const Shape& s);

}  // namespace ge
