// Products of uint8 activations with int8 weights summed exactly in int32, the weights
// packed once into 16-column panels of 4-deep groups (the layout AVX-512 VNNI's vpdpbusd
// reads: 16 columns x 4 consecutive k in one 64-byte vector). Used by the quantized LSTM
// (kernels_dq_lstm.cc); the zero points are the caller's (sums of a row and of a column).
#pragma once

#include <cstdint>
#include <vector>

namespace ge {

// Bytes of the panels of a [k, n] weight: panels_for(n) panels of (k rounded up to 4) x 16.
int64_t qpanel_bytes(int64_t k, int64_t n);
// w [k, n] row-major (output column j: w[p * ldw + j]) into panels; zero past k and n.
void pack_qpanels(const int8_t* w, int64_t ldw, int64_t k, int64_t n, int8_t* out);

struct QGemm {
  // c[i * ldc + 16 q + l] = sum_{p < k} a[i * lda + p] * w[p, 16 q + l] in int32, i < m,
  // q < npanels. a's rows hold k rounded up to 4 bytes (what lies past k is multiplied by
  // the panels' zeros). Exact: |sum| <= k * 255 * 128, which the caller keeps below 2^31.
  void (*gemm)(const uint8_t* a, int64_t lda, int64_t m, int64_t k, const int8_t* panels, int64_t npanels,
               int32_t* c, int64_t ldc);
  const char* name;  // "vnni" or "plain"
};

// vpdpbusd where the CPU has AVX-512 VNNI and AVX-512 is allowed (cpu_has_avx512), else
// plain loops with the same sums.
const QGemm& qgemm_u8s8();

}  // namespace ge
