// Softmax over the rows of a dense float32 matrix, or along any axis of a dense tensor,
// AVX-512 (softmax.cc).
//
// oneDNN's softmax primitive took 31-35 us for the 512 rows of 128 of one bert_mini
// attention layer on this machine's two cores (~2 G elements/s); this takes 12 us: each row
// is read from memory once and its three passes (max; exp and sum; scale) run in L1.
#pragma once

#include <cstdint>

namespace ge::softmax {

// Needs AVX-512F (cpu_has_avx512() in device.h).
// y[r, :] = softmax(x[r, :]) for rows [0, rows), each `n` floats, rows `stride` floats
// apart in both x and y (x == y: in place). Runs an OpenMP team of at most `threads`. A
// row holding a NaN gives NaN; exp of what is below ~-87.3 after subtracting the row's
// max is 0. `log`: LogSoftmax, y = x - max - ln(sum of exp(x - max)).
void rows(const float* x, float* y, int64_t rows, int64_t n, int64_t stride, int threads, bool log = false);

// Needs AVX-512F. Softmax along an axis that is not the innermost: x and y are
// [outer, n, inner] dense (inner > 1 floats after the axis), the softmax runs over n for
// each (outer, inner) position, vectorized across inner. oneDNN's primitive fell back to its
// reference implementation for these (a detector's DFL softmax over [1, 4, 16, 8400] along
// 16: 20 ms of a 44 ms run). Same NaN and underflow behaviour as rows().
void strided(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, int threads, bool log = false);

}  // namespace ge::softmax
