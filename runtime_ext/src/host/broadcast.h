// Numpy-style broadcasting of up to three inputs to an output shape, collapsed to the
// fewest dimensions, iterated row by row (the last dimension is a "row") in parallel.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tensor.h"

namespace ge {

constexpr int kMaxBroadcastInputs = 3;
constexpr int kMaxBroadcastRank = 12;

struct BroadcastPlan {
  int n_inputs = 0;
  int rank = 1;  // after collapsing; >= 1
  int64_t dims[kMaxBroadcastRank] = {1};
  // strides[k][d]: element stride of input k along collapsed dim d (0 = broadcast).
  int64_t strides[kMaxBroadcastInputs][kMaxBroadcastRank] = {};
  int64_t numel = 1;

  int64_t inner() const { return dims[rank - 1]; }
  int64_t rows() const { return numel == 0 ? 0 : numel / inner(); }
};

// numpy's broadcast of `a` and `b`; false if they are incompatible.
bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out);

// Plans the broadcast of `inputs` to `out`. Throws Error(InvalidArgument) if an input
// cannot broadcast to `out` (rank larger, or a dim neither 1 nor equal) or the rank is
// above kMaxBroadcastRank. `names` label the inputs in messages.
BroadcastPlan plan_broadcast(const Shape& out, const std::vector<const Shape*>& inputs,
                             const std::vector<const char*>& names);

// The plan of a two-input op whose inputs `a` and `b` broadcast to its output `y`. Throws
// Error(InvalidArgument) when they do not broadcast or `y` has another shape.
BroadcastPlan plan_binary(const TensorInfo& a, const TensorInfo& b, const TensorInfo& y);

// One row of a binary elementwise op: o[i] = f(a[i * sa], b[i * sb]) for i < n, strides in
// elements (0 = broadcast). The contiguous and scalar cases are spelled out so that the
// compiler vectorises them.
template <class O, class T, class F>
inline void binary_row(O* o, const T* a, int64_t sa, const T* b, int64_t sb, int64_t n, F f) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i * sa], b[i * sb]);
  }
}

// Calls fn(const int64_t* in_offsets, int64_t out_offset, int64_t len, const int64_t*
// in_inner_strides) over every row segment of the plan, splitting rows into chunks and
// running them on the calling thread's OpenMP team when the work is large enough.
// Blocks until done. `fn` must be safe to call concurrently for disjoint segments.
template <class Fn>
void for_each_segment(const BroadcastPlan& p, Fn fn) {
  const int64_t inner = p.inner();
  const int64_t rows = p.rows();
  if (rows == 0) return;
  const int last = p.rank - 1;
  int64_t inner_strides[kMaxBroadcastInputs];
  for (int k = 0; k < p.n_inputs; ++k) inner_strides[k] = p.strides[k][last];

  // Split rows into chunks of about kChunk elements so that small outer counts still
  // spread over threads.
  constexpr int64_t kChunk = 16384;
  const int64_t splits = std::max<int64_t>(1, std::min<int64_t>(inner / kChunk, 64));
  const int64_t seg_len = (inner + splits - 1) / splits;
  const int64_t total = rows * splits;
  const bool parallel = p.numel >= 32768 && omp_get_max_threads() > 1;

  if (splits == 1) {
    // Whole rows: each thread walks its block of rows with an odometer over the outer dims
    // (a division per dim per row cost more than a short row's work: Mamba's [128, 1, 16] x
    // [128, 32, 1] outer products, 4096 rows of 16, ~48 us on two threads).
    auto rows_from = [&](int64_t r0, int64_t r1) {
      if (r0 >= r1) return;
      int64_t idx[kMaxBroadcastRank] = {};
      int64_t off[kMaxBroadcastInputs] = {};
      int64_t rem = r0;
      for (int d = last - 1; d >= 0; --d) {
        idx[d] = rem % p.dims[d];
        rem /= p.dims[d];
        for (int k = 0; k < p.n_inputs; ++k) off[k] += idx[d] * p.strides[k][d];
      }
      for (int64_t row = r0; row < r1; ++row) {
        fn(off, row * inner, inner, inner_strides);
        for (int d = last - 1; d >= 0; --d) {
          if (++idx[d] < p.dims[d]) {
            for (int k = 0; k < p.n_inputs; ++k) off[k] += p.strides[k][d];
            break;
          }
          idx[d] = 0;
          for (int k = 0; k < p.n_inputs; ++k) off[k] -= (p.dims[d] - 1) * p.strides[k][d];
        }
      }
    };
    if (parallel) {
#pragma omp parallel
      {
        const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
        const int64_t per = (rows + n - 1) / n;
        rows_from(t * per, std::min(rows, (t + 1) * per));
      }
    } else {
      rows_from(0, rows);
    }
    return;
  }

  auto body = [&](int64_t task) {
    int64_t row = task / splits;
    int64_t part = task % splits;
    int64_t off[kMaxBroadcastInputs] = {};
    int64_t rem = row;
    for (int d = last - 1; d >= 0; --d) {
      int64_t i = rem % p.dims[d];
      rem /= p.dims[d];
      for (int k = 0; k < p.n_inputs; ++k) off[k] += i * p.strides[k][d];
    }
    int64_t begin = part * seg_len;
    int64_t len = std::min(inner, begin + seg_len) - begin;
    if (len <= 0) return;
    for (int k = 0; k < p.n_inputs; ++k) off[k] += begin * inner_strides[k];
    fn(off, row * inner + begin, len, inner_strides);
  };
  if (parallel) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < total; ++t) body(t);
  } else {
    for (int64_t t = 0; t < total; ++t) body(t);
  }
}

}  // namespace ge
