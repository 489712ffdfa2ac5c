// TensorInfo: where one tensor of a loaded model lives, how its bytes are ordered and
// what it holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dtype.h"

namespace ge {

using Shape = std::vector<int64_t>;

enum class Region {
  kArena,   // activations: rewritten by every run, one arena per model instance
  kWeight,  // constants: written once at load, read-only afterwards, shared by instances
  kVariable,  // a session's variable (variable.h): bound at load, read and written in
              // place by runs, shared by instances and by every model that binds it
};

// How a tensor's bytes are ordered. The shape is always the logical (NCHW) one.
//   kPlain    dense row-major ("nchw" for 4-D, whatever the rank)
//   kNhwc     channels last: N,H,W,C for rank 4 (N,W,C for 3, N,D,H,W,C for 5)
//   kNChw8c   oneDNN blocked: N, C/8, H, W, 8c (rank 4)
//   kNChw16c  oneDNN blocked: N, C/16, H, W, 16c (rank 4)
// A blocked tensor whose C is not a multiple of the block is padded: its last block holds
// zeros in the channels past C (every producer keeps them zero: oneDNN's convolutions and
// reorders do), and it takes storage_numel() elements. Only Conv and TransData take padded
// tensors (layout.h, format_violation).
// Either given by the spec (the compiler's layout assignment) or, when the spec gives
// none, chosen by the runtime for tensors only it sees (layout.h).
enum class Format : uint8_t { kPlain, kNhwc, kNChw8c, kNChw16c };

// Parses "nchw" | "nhwc" | "nChw8c" | "nChw16c". False if unknown.
bool parse_format(const std::string& name, Format* out);
const char* format_name(Format f);
// Empty if `f` can describe a tensor of `shape`, else why not.
std::string format_error(Format f, const std::vector<int64_t>& shape);
// Elements a tensor of `shape` stored in `f` takes, padding included (the shape's product
// for every unpadded format). Dims must be >= 0.
int64_t storage_numel(Format f, const std::vector<int64_t>& shape);
// True when `f` pads a tensor of `shape` (a blocked format, C not a multiple of the block).
bool format_padded(Format f, const std::vector<int64_t>& shape);
// A shape's axes in the order `f` stores them (ranks 3 to 5; others and plain as they are):
// NHWC moves C last, a blocked format splits it into C / block after N and the block last
// (for an unpadded shape).
std::vector<int64_t> stored_shape(const std::vector<int64_t>& s, Format f);

// Binding slots: the base pointer a tensor's address is relative to during a run.
// Slot 0 is the instance's arena, slots 1 .. kMaxWeightSegments the weight region's
// segments; slots from kFirstIoSlot on are caller buffers bound for one run (zero-copy
// inputs, outputs written in place; io_plan.h), then one slot per variable the model binds
// (after the I/O slots: Model::variable_slot_).
constexpr uint32_t kArenaSlot = 0;
constexpr uint32_t kWeightSlot = 1;  // the first weight segment
constexpr uint32_t kMaxWeightSegments = 8;
constexpr uint32_t kFirstIoSlot = kWeightSlot + kMaxWeightSegments;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;  // [] is a scalar (one element)
  Region region = Region::kArena;
  Format format = Format::kPlain;
  size_t offset = 0;  // in its region
  size_t nbytes = 0;
  int64_t numel = 1;
  // Run-time address: bases[slot] + slot_offset (ExecContext::ptr).
  uint32_t slot = kArenaSlot;
  size_t slot_offset = 0;
  // The bytes of a weight tensor (the region never moves), for load-time reads of
  // constants. Null for arena tensors: their address depends on the instance and run.
  const uint8_t* data = nullptr;

  bool constant() const { return region == Region::kWeight; }
  bool plain() const { return format == Format::kPlain; }
  bool channels_last() const { return format == Format::kNhwc; }
  bool padded() const { return format_padded(format, shape); }
  int rank() const { return static_cast<int>(shape.size()); }
  template <class T>
  const T* const_ptr() const {
    return reinterpret_cast<const T*>(data);
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
