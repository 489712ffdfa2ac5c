// Sin and Cos (see trig.h).
//
// x = k pi/2 + r with k = round(x 2/pi) and |r| <= pi/4 (+ rounding), r computed in double
// from the float input exactly enough: pi/2 is split in two doubles (hi with 33 bits, so
// k * hi is exact for |k| < 2^20; lo the rest), so the reduction's error is ~|k| 2^-86
// below 2^30. sin r and cos r are their Taylor series to r^15 / r^16 (truncation below 1e-16
// on [-pi/4, pi/4]); the quadrant k mod 4 picks sin, cos, -sin or -cos.
#include "trig.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>

namespace ge::trig {

namespace {

void sin_cos_portable(const float* x, float* y, int64_t n, bool cosine) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(cosine ? std::cos(v) : std::sin(v));
  }
}

}  // namespace

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,fma")
// GCC 12 warns of uninitialized upper lanes inside its own conversion intrinsics at -O2
// -Wall (a false positive: every lane used is loaded or masked).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

constexpr double kTwoOverPi = 0.63661977236758134308;
constexpr double kPiOver2Hi = 1.5707963267341256142;  // 33 significant bits
constexpr double kPiOver2Lo = 6.0771005065061922e-11;  // pi/2 - kPiOver2Hi
constexpr float kTiny = 2.44140625e-4f;  // 2^-12: x - x³/6 rounds to x in float32 below it
constexpr float kLimit = 1073741824.f;  // 2^30: past it (and for inf, NaN) the libm call

// The Taylor coefficients, highest first: sin r = r + r z P(z), cos r = 1 + z Q(z), z = r².
constexpr double kSin[7] = {-7.6471637318198164759e-13, 1.6059043836821614599e-10,
                            -2.5052108385441718775e-08, 2.7557319223985890653e-06,
                            -1.9841269841269841270e-04, 8.3333333333333333333e-03,
                            -1.6666666666666666667e-01};
constexpr double kCos[8] = {4.7794773323873852974e-14,  -1.1470745597729724714e-11,
                            2.0876756987868098979e-09,  -2.7557319223985890653e-07,
                            2.4801587301587301587e-05,  -1.3888888888888888889e-03,
                            4.1666666666666666667e-02,  -0.5};

// Eight lanes: sin (or cos, `shift` 1) of x.
inline __m512d lanes(__m512d x, __m512i shift) {
  const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(kTwoOverPi)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kPiOver2Hi), x);
  r = _mm512_fnmadd_pd(k, _mm512_set1_pd(kPiOver2Lo), r);
  const __m512i q = _mm512_add_epi64(_mm512_cvtpd_epi64(k), shift);
  const __m512d z = _mm512_mul_pd(r, r);
  __m512d p = _mm512_set1_pd(kSin[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_pd(p, z, _mm512_set1_pd(kSin[i]));
  const __m512d sn = _mm512_fmadd_pd(_mm512_mul_pd(r, z), p, r);
  __m512d c = _mm512_set1_pd(kCos[0]);
  for (int i = 1; i < 8; ++i) c = _mm512_fmadd_pd(c, z, _mm512_set1_pd(kCos[i]));
  const __m512d cs = _mm512_fmadd_pd(z, c, _mm512_set1_pd(1.0));
  const __m512d v = _mm512_mask_blend_pd(_mm512_test_epi64_mask(q, _mm512_set1_epi64(1)), sn, cs);
  return _mm512_mask_sub_pd(v, _mm512_test_epi64_mask(q, _mm512_set1_epi64(2)), _mm512_setzero_pd(), v);
}

// n <= 16 floats of x into y. Lanes at or past the limit (and NaNs, infinities) take the
// libm call in double.
inline void sixteen(const float* x, float* y, int64_t n, __m512i shift, bool cosine) {
  const __mmask16 m = n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
  const __m512 v = _mm512_maskz_loadu_ps(m, x);
  const __m512d lo = lanes(_mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 0)), shift);
  const __m512d hi = lanes(_mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)), shift);
  __m512 out = _mm512_insertf32x8(_mm512_zextps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
  const __m512 a = _mm512_abs_ps(v);
  if (!cosine) {  // sin x = x in float32 below 2^-12 (and keeps -0's sign)
    out = _mm512_mask_mov_ps(out, _mm512_cmp_ps_mask(a, _mm512_set1_ps(kTiny), _CMP_LT_OQ), v);
  }
  const __mmask16 held = _mm512_cmp_ps_mask(a, _mm512_set1_ps(kLimit), _CMP_LT_OQ);
  if ((held & m) != m) {
    alignas(64) float in[16], res[16];
    _mm512_store_ps(in, v);
    _mm512_store_ps(res, out);
    for (int i = 0; i < 16; ++i) {
      if (!((held >> i) & 1)) res[i] = static_cast<float>(cosine ? std::cos(double(in[i])) : std::sin(double(in[i])));
    }
    out = _mm512_load_ps(res);
  }
  _mm512_mask_storeu_ps(y, m, out);
}

void sin_cos_avx512(const float* x, float* y, int64_t n, bool cosine) {
  const __m512i shift = _mm512_set1_epi64(cosine ? 1 : 0);
  for (int64_t i = 0; i < n; i += 16) sixteen(x + i, y + i, n - i, shift, cosine);
}

}  // namespace
#pragma GCC diagnostic pop
#pragma GCC pop_options

void sin_cos(const float* x, float* y, int64_t n, bool cosine) {
  static const bool vector = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  (vector ? sin_cos_avx512 : sin_cos_portable)(x, y, n, cosine);
}

}  // namespace ge::trig
