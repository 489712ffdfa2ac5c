// Transposes of 4-byte elements, AVX-512 (transpose.cc): the NCHW <-> NHWC conversions
// that TransData runs at the edges of a channels-last region.
//
// oneDNN's reorder between nchw and nhwc (jit:uni) took 130 us for a 64 x 56 x 56 float
// image here (the branchy graph at batch 1: 259 us of 13 ms for its two conversions).
#pragma once

#include <cstdint>

namespace ge::transpose {

// Needs AVX-512F (cpu_has_avx512() in device.h). Blocks: the caller's thread and, when the
// work is large, an OpenMP team of at most `threads`.
// For each of `batch` matrices: src [rows][cols] (row-major, 4-byte elements) is written
// transposed to dst [cols][rows]. Matrix b starts at src + b * rows * cols and at the same
// element offset in dst. src and dst must not overlap. NCHW -> NHWC is rows = C,
// cols = H * W; NHWC -> NCHW is rows = H * W, cols = C.
void batched_4byte(const void* src, void* dst, int64_t batch, int64_t rows, int64_t cols, int threads);

}  // namespace ge::transpose
