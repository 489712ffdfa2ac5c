// GELU, erf form (see gelu.h).
//
// GELU(x) = 0.5 x + |x| q(|x|) with q(a) = 0.5 erf(a / sqrt 2): x Phi(x) written so that the
// sign of x needs no branch (x Phi(x) = 0.5 x + x * 0.5 erf(x / sqrt 2), and x erf(x / sqrt 2)
// = |x| erf(|x| / sqrt 2)). q is a degree-5 polynomial on each of 16 pieces of |x| in
// [0, 5.6) (width 0.35); the piece's coefficients are picked per lane by a permute from
// six registers; past 5.6, q is 0.5 exactly (so large negative x give 0, not rounding
// noise times x). The table comes from runtime_ext/tools/gelu_coefficients.py (a float64
// least-squares fit; |q - 0.5 erf| <= 3.1e-8 in float32).
#include "gelu.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

namespace ge::gelu {

#pragma GCC push_options
#pragma GCC target("avx512f,fma")

namespace {

constexpr float kWidth = 0.35f;
constexpr float kEnd = 5.6f;  // 16 pieces of kWidth
// Elements below which a call runs on one thread (a fork costs more than the work).
constexpr int64_t kParallelElements = 32768;

// kQ[d][i]: coefficient of u^d on piece i, u = |x| / kWidth - i.
alignas(64) const float kQ[6][16] = {
    {1.165946228e-09f, 1.368306577e-01f, 2.580363452e-01f, 3.531409502e-01f, 4.192433357e-01f, 4.599408507e-01f, 4.821355641e-01f, 4.928571880e-01f, 4.974448681e-01f, 4.991836548e-01f, 4.997673631e-01f, 4.999409318e-01f, 4.999866486e-01f, 4.999973178e-01f, 4.999995232e-01f, 4.999999106e-01f},
    {1.396297216e-01f, 1.313339174e-01f, 1.092887074e-01f, 8.045869321e-02f, 5.240466818e-02f, 3.019715101e-02f, 1.539432164e-02f, 6.943095475e-03f, 2.770402934e-03f, 9.779778775e-04f, 3.054291592e-04f, 8.438904479e-05f, 2.062787826e-05f, 4.460819582e-06f, 8.534242966e-07f, 1.444455506e-07f},
    {9.170359476e-07f, -8.041914552e-03f, -1.338585187e-02f, -1.478364784e-02f, -1.283975877e-02f, -9.248895571e-03f, -5.658133421e-03f, -2.977098338e-03f, -1.357442583e-03f, -5.389713915e-04f, -1.869661355e-04f, -5.679845344e-05f, -1.513702955e-05f, -3.543620551e-06f, -7.294575539e-07f, -1.321448906e-07f},
    {-2.854452003e-03f, -2.362668049e-03f, -1.146767754e-03f, 1.654389634e-04f, 1.029702369e-03f, 1.276038238e-03f, 1.074988395e-03f, 7.102670497e-04f, 3.866658371e-04f, 1.775377168e-04f, 6.965790817e-05f, 2.354590833e-05f, 6.894414582e-06f, 1.755465519e-06f, 3.897929446e-07f, 7.564153748e-08f},
    {6.324596598e-06f, 2.547919867e-04f, 3.603408404e-04f, 2.926138986e-04f, 1.317094429e-04f, -1.448260173e-05f, -8.782824443e-05f, -9.360820695e-05f, -6.672224117e-05f, -3.690824815e-05f, -1.668682853e-05f, -6.321787623e-06f, -2.035560328e-06f, -5.620917705e-07f, -1.339258375e-07f, -2.765405505e-08f},
    {4.814531349e-05f, 2.156429036e-05f, -1.182956385e-05f, -3.070374078e-05f, -2.881939145e-05f, -1.507495472e-05f, -1.738322908e-06f, 5.024687653e-06f, 5.874177532e-06f, 4.087234629e-06f, 2.136072681e-06f, 8.984484907e-07f, 3.137474494e-07f, 9.253879796e-08f, 2.329952764e-08f, 5.043792939e-09f},
};

struct Table {
  __m512 c[6];
  Table() {
    for (int d = 0; d < 6; ++d) c[d] = _mm512_load_ps(kQ[d]);
  }
};

inline __m512 gelu16(__m512 x, const Table& t) {
  const __m512 a = _mm512_abs_ps(x);
  // NaN: min() returns its second operand, so the piece is the last; the NaN comes back
  // through a below.
  const __m512 f = _mm512_mul_ps(_mm512_min_ps(a, _mm512_set1_ps(kEnd * 0.99999f)), _mm512_set1_ps(1.f / kWidth));
  const __m512 fi = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512i piece = _mm512_cvttps_epi32(fi);
  const __m512 u = _mm512_sub_ps(f, fi);
  __m512 q = _mm512_permutexvar_ps(piece, t.c[5]);
  for (int d = 4; d >= 0; --d) q = _mm512_fmadd_ps(q, u, _mm512_permutexvar_ps(piece, t.c[d]));
  q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(a, _mm512_set1_ps(kEnd), _CMP_GE_OQ), _mm512_set1_ps(0.5f));
  return _mm512_fmadd_ps(a, q, _mm512_mul_ps(x, _mm512_set1_ps(0.5f)));
}

void span(const float* x, float* y, int64_t n) {
  const Table t;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = gelu16(_mm512_loadu_ps(x + i), t);
    const __m512 b = gelu16(_mm512_loadu_ps(x + i + 16), t);
    _mm512_storeu_ps(y + i, a);
    _mm512_storeu_ps(y + i + 16, b);
  }
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(x + i), t));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i), t));
  }
}

}  // namespace

void erf_form(const float* x, float* y, int64_t n, int threads) {
  if (n <= 0) return;
  const int64_t by_work = std::max<int64_t>(1, n / kParallelElements);
  const int nt = static_cast<int>(std::min<int64_t>(std::max(1, threads), by_work));
  if (nt == 1) return span(x, y, n);
#pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_thread_num(), team = omp_get_num_threads();
    // 16-float aligned split points: every thread but the last runs whole vectors.
    const int64_t lo = n * t / team / 16 * 16, hi = t + 1 == team ? n : n * (t + 1) / team / 16 * 16;
    span(x + lo, y + lo, hi - lo);
  }
}

#pragma GCC pop_options

}  // namespace ge::gelu
