// Row softmax (see softmax.h).
#include "softmax.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace ge::softmax {

#pragma GCC push_options
#pragma GCC target("avx512f,fma")

namespace {

constexpr int64_t kLanes = 16;
// Elements below which a call runs on one thread (a fork costs more than the work).
constexpr int64_t kParallelElements = 8192;

// exp(t) for t <= 0 (or NaN, which passes through): t = n ln2 + r with |r| <= ln2 / 2 (ln2
// in two parts, so r is exact), exp(r) by a degree-7 polynomial (Cephes' expf
// coefficients), times 2^n. Below ln(FLT_MIN) the result is 0.
inline __m512 exp_nonpositive(__m512 t) {
  const __m512 lo = _mm512_set1_ps(-87.33654f);
  const __mmask16 tiny = _mm512_cmp_ps_mask(t, lo, _CMP_LT_OQ);
  t = _mm512_max_ps(lo, t);  // a NaN t stays (max returns its second operand then)
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), t);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 e = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~tiny), _mm512_scalef_ps(e, n));
}

// ln of each lane of v (a softmax's sums: one per row or column, so scalar is cheap).
inline __m512 log_lanes(__m512 v) {
  alignas(64) float a[kLanes];
  _mm512_store_ps(a, v);
  for (float& f : a) f = std::log(f);
  return _mm512_load_ps(a);
}

// One row of n: max, then exp(x - max) into y with its sum, then y / sum (`log`: y = x -
// max - ln(sum), LogSoftmax). The row (n * 4 bytes) stays in L1 between the passes.
void row(const float* x, float* y, int64_t n, bool log) {
  const int64_t whole = n / kLanes * kLanes;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - whole)) - 1);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = neg_inf, m1 = neg_inf;
  int64_t i = 0;
  for (; i + 2 * kLanes <= whole; i += 2 * kLanes) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + kLanes));
  }
  if (i < whole) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
  if (tail) m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(neg_inf, tail, x + whole));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(m0, m1)));
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  for (i = 0; i + 2 * kLanes <= whole; i += 2 * kLanes) {
    const __m512 e0 = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
    const __m512 e1 = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + i + kLanes), m));
    _mm512_storeu_ps(y + i, e0);
    _mm512_storeu_ps(y + i + kLanes, e1);
    s0 = _mm512_add_ps(s0, e0);
    s1 = _mm512_add_ps(s1, e1);
  }
  if (i < whole) {
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
    _mm512_storeu_ps(y + i, e);
    s0 = _mm512_add_ps(s0, e);
  }
  if (tail) {
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + whole), m));
    _mm512_mask_storeu_ps(y + whole, tail, e);
    s1 = _mm512_add_ps(s1, _mm512_maskz_mov_ps(tail, e));
  }
  const float sum = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
  if (log) {  // x - (max + ln(sum)), from x (y may be x itself: each element read before written)
    const __m512 shift = _mm512_add_ps(m, _mm512_set1_ps(std::log(sum)));
    for (i = 0; i < whole; i += kLanes) _mm512_storeu_ps(y + i, _mm512_sub_ps(_mm512_loadu_ps(x + i), shift));
    if (tail) _mm512_mask_storeu_ps(y + whole, tail, _mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + whole), shift));
    return;
  }
  const __m512 inv = _mm512_set1_ps(1.f / sum);
  for (i = 0; i < whole; i += kLanes) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), inv));
  if (tail) _mm512_mask_storeu_ps(y + whole, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, y + whole), inv));
}

// Softmax along an axis of n with `inner` contiguous floats after it, for the `width`
// (<= kLanes) columns starting at c of one outer slice: the columns are the vector lanes,
// the axis is walked with stride `inner` (three passes over n vectors; the 16 columns of n
// rows stay in L1 for the n of a softmax).
void columns(const float* x, float* y, int64_t n, int64_t inner, int64_t width, bool log) {
  const __mmask16 mask = static_cast<__mmask16>(width >= kLanes ? 0xFFFF : (1u << width) - 1);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m = neg_inf;
  for (int64_t j = 0; j < n; ++j) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(neg_inf, mask, x + j * inner));
  __m512 s = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + j * inner), m));
    _mm512_mask_storeu_ps(y + j * inner, mask, e);
    s = _mm512_add_ps(s, e);
  }
  if (log) {
    const __m512 shift = _mm512_add_ps(m, log_lanes(_mm512_mask_mov_ps(_mm512_set1_ps(1.f), mask, s)));
    for (int64_t j = 0; j < n; ++j) {
      _mm512_mask_storeu_ps(y + j * inner, mask, _mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + j * inner), shift));
    }
    return;
  }
  const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.f), s);
  for (int64_t j = 0; j < n; ++j) {
    _mm512_mask_storeu_ps(y + j * inner, mask, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, y + j * inner), inv));
  }
}

}  // namespace

void strided(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, int threads, bool log) {
  if (outer <= 0 || n <= 0 || inner <= 0) return;
  const int64_t blocks = (inner + kLanes - 1) / kLanes;  // per outer slice
  const int64_t tasks = outer * blocks;
  auto one = [&](int64_t k) {
    const int64_t o = k / blocks, c = (k % blocks) * kLanes;
    const int64_t at = o * n * inner + c;
    columns(x + at, y + at, n, inner, std::min(kLanes, inner - c), log);
  };
  const int64_t by_work = std::max<int64_t>(1, outer * n * inner / kParallelElements);
  const int nt = static_cast<int>(std::min<int64_t>({static_cast<int64_t>(std::max(1, threads)), tasks, by_work}));
  if (nt == 1) {
    for (int64_t k = 0; k < tasks; ++k) one(k);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    for (int64_t k = tasks * t / team; k < tasks * (t + 1) / team; ++k) one(k);
  }
}

void rows(const float* x, float* y, int64_t rows, int64_t n, int64_t stride, int threads, bool log) {
  if (rows <= 0 || n <= 0) return;
  const int64_t by_work = std::max<int64_t>(1, rows * n / kParallelElements);
  const int nt = static_cast<int>(std::min<int64_t>({static_cast<int64_t>(std::max(1, threads)), rows, by_work}));
  if (nt == 1) {
    for (int64_t r = 0; r < rows; ++r) row(x + r * stride, y + r * stride, n, log);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    for (int64_t r = rows * t / team; r < rows * (t + 1) / team; ++r) row(x + r * stride, y + r * stride, n, log);
  }
}

#pragma GCC pop_options

}  // namespace ge::softmax
