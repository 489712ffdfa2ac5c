#include "qgemm_u8s8.h"

#include <immintrin.h>

#include <cstring>

#include "device.h"
#include "rnn_math.h"

namespace ge {

namespace {

constexpr int64_t kGroup = 4;                    // k per 32-bit lane
constexpr int64_t kPanelBytes = kPanel * kGroup;  // one group of one panel: 64 bytes

int64_t groups_for(int64_t k) { return (k + kGroup - 1) / kGroup; }

// An M x (16 NV) block in zmm accumulators for the whole k loop: each group of 4 k loads NV
// panel vectors and broadcasts 4 bytes of each row of a.
template <int M, int NV>
__attribute__((target("avx512f,avx512vnni"), always_inline)) inline void tile(const uint8_t* a, int64_t lda,
                                                                              int64_t groups, const int8_t* panels,
                                                                              int32_t* c, int64_t ldc) {
  __m512i acc[M][NV];
  for (int i = 0; i < M; ++i) {
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_si512();
  }
  for (int64_t p = 0; p < groups; ++p) {
    __m512i b[NV];
    for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_si512(panels + (v * groups + p) * kPanelBytes);
    for (int i = 0; i < M; ++i) {
      int32_t four;
      std::memcpy(&four, a + i * lda + p * kGroup, sizeof four);
      const __m512i av = _mm512_set1_epi32(four);
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], av, b[v]);
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int v = 0; v < NV; ++v) _mm512_storeu_si512(c + i * ldc + v * kPanel, acc[i][v]);
  }
}

// Panels per tile as in rnn_math.cc: M * NV accumulators within 16 zmm, at least 8 at one row.
template <int M>
__attribute__((target("avx512f,avx512vnni"), always_inline)) inline void rows(const uint8_t* a, int64_t lda,
                                                                              int64_t groups, const int8_t* panels,
                                                                              int64_t npanels, int32_t* c,
                                                                              int64_t ldc) {
  constexpr int NV = M == 1 ? 8 : M <= 4 ? 4 : 2;
  const int64_t step = groups * kPanelBytes;
  int64_t q = 0;
  for (; q + NV <= npanels; q += NV) tile<M, NV>(a, lda, groups, panels + q * step, c + q * kPanel, ldc);
  if (NV > 4 && q + 4 <= npanels) {
    tile<M, 4>(a, lda, groups, panels + q * step, c + q * kPanel, ldc);
    q += 4;
  }
  if (NV > 2 && q + 2 <= npanels) {
    tile<M, 2>(a, lda, groups, panels + q * step, c + q * kPanel, ldc);
    q += 2;
  }
  if (q < npanels) tile<M, 1>(a, lda, groups, panels + q * step, c + q * kPanel, ldc);
}

__attribute__((target("avx512f,avx512vnni"))) void gemm_vnni(const uint8_t* a, int64_t lda, int64_t m, int64_t k,
                                                             const int8_t* panels, int64_t npanels, int32_t* c,
                                                             int64_t ldc) {
  const int64_t groups = groups_for(k);
  int64_t i = 0;
  for (; i + 8 <= m; i += 8) rows<8>(a + i * lda, lda, groups, panels, npanels, c + i * ldc, ldc);
  a += i * lda;
  c += i * ldc;
  switch (m - i) {
    case 1: rows<1>(a, lda, groups, panels, npanels, c, ldc); break;
    case 2: rows<2>(a, lda, groups, panels, npanels, c, ldc); break;
    case 3: rows<3>(a, lda, groups, panels, npanels, c, ldc); break;
    case 4: rows<4>(a, lda, groups, panels, npanels, c, ldc); break;
    case 5: rows<5>(a, lda, groups, panels, npanels, c, ldc); break;
    case 6: rows<6>(a, lda, groups, panels, npanels, c, ldc); break;
    case 7: rows<7>(a, lda, groups, panels, npanels, c, ldc); break;
    default: break;
  }
}

void gemm_plain(const uint8_t* a, int64_t lda, int64_t m, int64_t k, const int8_t* panels, int64_t npanels,
                int32_t* c, int64_t ldc) {
  const int64_t groups = groups_for(k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t q = 0; q < npanels; ++q) {
      int32_t acc[kPanel] = {};
      const int8_t* panel = panels + q * groups * kPanelBytes;
      for (int64_t p = 0; p < groups; ++p) {
        const uint8_t* four = a + i * lda + p * kGroup;
        const int8_t* w = panel + p * kPanelBytes;
        for (int64_t l = 0; l < kPanel; ++l) {
          for (int64_t e = 0; e < kGroup; ++e) acc[l] += int32_t{four[e]} * int32_t{w[l * kGroup + e]};
        }
      }
      std::memcpy(c + i * ldc + q * kPanel, acc, sizeof acc);
    }
  }
}

const QGemm kVnni{gemm_vnni, "vnni"};
const QGemm kPlainQ{gemm_plain, "plain"};

}  // namespace

int64_t qpanel_bytes(int64_t k, int64_t n) { return panels_for(n) * groups_for(k) * kPanelBytes; }

void pack_qpanels(const int8_t* w, int64_t ldw, int64_t k, int64_t n, int8_t* out) {
  const int64_t groups = groups_for(k), np = panels_for(n);
  for (int64_t q = 0; q < np; ++q) {
    for (int64_t p = 0; p < groups; ++p) {
      int8_t* o = out + (q * groups + p) * kPanelBytes;
      for (int64_t l = 0; l < kPanel; ++l) {
        for (int64_t e = 0; e < kGroup; ++e) {
          const int64_t j = q * kPanel + l, r = p * kGroup + e;
          o[l * kGroup + e] = j < n && r < k ? w[r * ldw + j] : 0;
        }
      }
    }
  }
}

const QGemm& qgemm_u8s8() {
  static const bool vnni = __builtin_cpu_supports("avx512vnni");
  return vnni && cpu_has_avx512() ? kVnni : kPlainQ;
}

}  // namespace ge
