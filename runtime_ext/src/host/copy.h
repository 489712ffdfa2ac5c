// Byte-level data movement shared by the layout kernels (Transpose, Slice, Expand, Pad,
// Concat, Gather). Element size is all they need to know about the dtype.
#pragma once

#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor.h"

namespace ge {

// Copies the strided view of `src` described by `dims` (the view's shape) and
// `src_strides` (element strides, may be 0 or negative) into dense row-major `dst`.
// `elem` is the element size (1, 2, 4 or 8). Blocks; parallel on the calling thread's
// OpenMP team when large. The view must stay inside `src`'s tensor (callers check).
void strided_copy(uint8_t* dst, const uint8_t* src, const Shape& dims, const Shape& src_strides,
                  size_t elem);

// Like strided_copy, but the destination is strided too (element strides `dst_strides`).
void strided_copy2(uint8_t* dst, const Shape& dst_strides, const uint8_t* src,
                   const Shape& src_strides, const Shape& dims, size_t elem);

// Calls body(i) for every i in [0, n): split over the calling thread's OpenMP team when
// there are several rows and `bytes` (what the loop moves) pays for waking it (256 KiB),
// else on the calling thread. Blocks; `body` must be safe for distinct i at once.
template <class F>
void for_rows(int64_t n, int64_t bytes, F body) {
  if (n > 1 && bytes >= (int64_t{1} << 18) && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) body(i);
  } else {
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}

// Fills `n` elements of `elem` bytes at dst with the element at `value`.
void fill_elements(uint8_t* dst, int64_t n, const void* value, size_t elem);

// The dims of a tensor's bytes as stored (plain as they are; nhwc with C last; nChw<b>c as
// [N, C/b, H, W, b]) and, in *axis_of, the stored axis of each logical one: Concat and
// Split join and cut the bytes as stored (kernels_layout.cc).
Shape physical_dims(const TensorInfo& t, std::vector<int>* axis_of);

}  // namespace ge
