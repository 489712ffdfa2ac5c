#include "rnn_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ge {

namespace {

// 16 floats: one zmm where the function is compiled for AVX-512, several narrower registers
// otherwise. The unaligned, aliasing twin is the one memory goes through.
typedef float V16 __attribute__((vector_size(64)));
typedef float V16u __attribute__((vector_size(64), aligned(4), may_alias));

// An M x (16 NV) block of the product, its accumulators in registers for the whole k loop:
// each step loads NV vectors of the panels and broadcasts M values of a, so the weights are
// read once for all M rows.
template <int M, int NV>
__attribute__((always_inline)) inline void tile(const float* a, int64_t lda, int64_t k, const float* panels,
                                                float* c, int64_t ldc) {
  V16 acc[M][NV];
  for (int i = 0; i < M; ++i) {
    for (int v = 0; v < NV; ++v) acc[i][v] = V16{};
  }
  for (int64_t p = 0; p < k; ++p) {
    V16 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = *reinterpret_cast<const V16u*>(panels + (v * k + p) * kPanel);
    for (int i = 0; i < M; ++i) {
      const float s = a[i * lda + p];
      for (int v = 0; v < NV; ++v) acc[i][v] += s * bv[v];
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int v = 0; v < NV; ++v) *reinterpret_cast<V16u*>(c + i * ldc + v * kPanel) = acc[i][v];
  }
}

// M rows against every panel. Panels per tile: as many as keep M * NV accumulators within
// 16 zmm (and at least 8 independent chains at one row, where the FMA latency would
// otherwise bind); the last panels in tiles of 4, 2, 1.
template <int M>
__attribute__((always_inline)) inline void rows(const float* a, int64_t lda, int64_t k, const float* panels,
                                                int64_t npanels, float* c, int64_t ldc) {
  constexpr int NV = M == 1 ? 8 : M <= 4 ? 4 : 2;
  const int64_t step = k * kPanel;
  int64_t q = 0;
  for (; q + NV <= npanels; q += NV) tile<M, NV>(a, lda, k, panels + q * step, c + q * kPanel, ldc);
  if (NV > 4 && q + 4 <= npanels) {
    tile<M, 4>(a, lda, k, panels + q * step, c + q * kPanel, ldc);
    q += 4;
  }
  if (NV > 2 && q + 2 <= npanels) {
    tile<M, 2>(a, lda, k, panels + q * step, c + q * kPanel, ldc);
    q += 2;
  }
  if (q < npanels) tile<M, 1>(a, lda, k, panels + q * step, c + q * kPanel, ldc);
}

__attribute__((always_inline)) inline void gemm_body(const float* a, int64_t lda, int64_t m, int64_t k,
                                                     const float* panels, int64_t npanels, float* c, int64_t ldc) {
  int64_t i = 0;
  for (; i + 8 <= m; i += 8) rows<8>(a + i * lda, lda, k, panels, npanels, c + i * ldc, ldc);
  a += i * lda;
  c += i * ldc;
  switch (m - i) {
    case 1: rows<1>(a, lda, k, panels, npanels, c, ldc); break;
    case 2: rows<2>(a, lda, k, panels, npanels, c, ldc); break;
    case 3: rows<3>(a, lda, k, panels, npanels, c, ldc); break;
    case 4: rows<4>(a, lda, k, panels, npanels, c, ldc); break;
    case 5: rows<5>(a, lda, k, panels, npanels, c, ldc); break;
    case 6: rows<6>(a, lda, k, panels, npanels, c, ldc); break;
    case 7: rows<7>(a, lda, k, panels, npanels, c, ldc); break;
    default: break;
  }
}

// exp(v) for a whole array: 2^n * p(r) with v = n ln2 + r, |r| <= ln2 / 2, p a degree-6
// Taylor polynomial (relative error < 2e-7), the argument clamped to [-87, 88] (NaN comes
// out as a number; gates never see one from finite weights). Then sigmoid = 1 / (1 +
// exp(-v)) and tanh = (1 - e) / (1 + e) * sign, e = exp(-2|v|): absolute errors ~1e-7.
__attribute__((always_inline)) inline float exp_body(float v) {
  v = std::min(std::max(v, -87.f), 88.f);
  const float t = v * 1.44269504f;
  const float n = (t + 12582912.f) - 12582912.f;  // round to nearest (the default mode)
  const float r = v - n * 0.693145752f - n * 1.42860677e-6f;
  float p = 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

__attribute__((always_inline)) inline void sigmoid_body(float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) v[i] = 1.f / (1.f + exp_body(-v[i]));
}

__attribute__((always_inline)) inline void tanh_body(float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float e = exp_body(-2.f * std::fabs(v[i]));
    const float t = (1.f - e) / (1.f + e);
    v[i] = v[i] < 0.f ? -t : t;
  }
}

void gemm_plain(const float* a, int64_t lda, int64_t m, int64_t k, const float* panels, int64_t npanels, float* c,
                int64_t ldc) {
  gemm_body(a, lda, m, k, panels, npanels, c, ldc);
}
void sigmoid_plain(float* v, int64_t n) { sigmoid_body(v, n); }
void tanh_plain(float* v, int64_t n) { tanh_body(v, n); }

__attribute__((target("avx512f,fma"))) void gemm_avx512(const float* a, int64_t lda, int64_t m, int64_t k,
                                                        const float* panels, int64_t npanels, float* c,
                                                        int64_t ldc) {
  gemm_body(a, lda, m, k, panels, npanels, c, ldc);
}
__attribute__((target("avx512f,fma"))) void sigmoid_avx512(float* v, int64_t n) { sigmoid_body(v, n); }
__attribute__((target("avx512f,fma"))) void tanh_avx512(float* v, int64_t n) { tanh_body(v, n); }

const RnnMath kPlain{gemm_plain, sigmoid_plain, tanh_plain, "plain"};
const RnnMath kAvx512{gemm_avx512, sigmoid_avx512, tanh_avx512, "avx512"};

}  // namespace

void pack_panels(const float* m, int64_t row0, int64_t n, int64_t k, float* out) {
  const int64_t np = panels_for(n);
  for (int64_t q = 0; q < np; ++q) {
    float* panel = out + q * k * kPanel;
    for (int64_t l = 0; l < kPanel; ++l) {
      const int64_t j = q * kPanel + l;
      const float* row = j < n ? m + (row0 + j) * k : nullptr;
      for (int64_t p = 0; p < k; ++p) panel[p * kPanel + l] = row ? row[p] : 0.f;
    }
  }
}

const RnnMath& rnn_math(bool wide) { return wide ? kAvx512 : kPlain; }

void lstm_cell(const RnnMath& m, float* g, int64_t stride, const float* p, int64_t pstride, float* c, float* h_out,
               float* tmp, int64_t h, float clip, bool input_forget) {
  auto cl = [clip](float v) { return clip > 0.f ? std::min(std::max(v, -clip), clip) : v; };
  float* gi = g;
  float* go = g + stride;
  float* gf = g + 2 * stride;
  float* gc = g + 3 * stride;
  for (int64_t j = 0; j < h; ++j) {
    gi[j] = cl(gi[j] + (p ? p[j] * c[j] : 0.f));
    gf[j] = cl(gf[j] + (p ? p[2 * pstride + j] * c[j] : 0.f));
    gc[j] = cl(gc[j]);
  }
  m.sigmoid(gi, h);
  if (input_forget) {
    for (int64_t j = 0; j < h; ++j) gf[j] = 1.f - gi[j];
  } else {
    m.sigmoid(gf, h);
  }
  m.tanh(gc, h);
  for (int64_t j = 0; j < h; ++j) {
    const float cn = gf[j] * c[j] + gi[j] * gc[j];
    c[j] = cn;
    go[j] = cl(go[j] + (p ? p[pstride + j] * cn : 0.f));
    tmp[j] = cn;
  }
  m.sigmoid(go, h);
  m.tanh(tmp, h);
  for (int64_t j = 0; j < h; ++j) h_out[j] = go[j] * tmp[j];
}

}  // namespace ge
