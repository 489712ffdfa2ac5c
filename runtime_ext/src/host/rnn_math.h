// The arithmetic the recurrent kernels share (kernels_rnn.cc, kernels_dq_lstm.cc): a small
// matrix product against weights packed once into 16-column panels, the gates' sigmoid and
// tanh over whole arrays, and the LSTM cell. Each comes compiled twice, plain and for
// AVX-512; `rnn_math(wide)` picks one set.
#pragma once

#include <cstdint>

namespace ge {

// Columns per panel (one zmm of float32).
constexpr int64_t kPanel = 16;

// Packs the rows [row0, row0 + n) of a row-major matrix m [*, k] (row j: output column j)
// into panels: out[(q * k + p) * 16 + l] = m[(row0 + 16 q + l) * k + p], zero past n.
// out holds panels_for(n) * k * 16 floats.
inline int64_t panels_for(int64_t n) { return (n + kPanel - 1) / kPanel; }
void pack_panels(const float* m, int64_t row0, int64_t n, int64_t k, float* out);

struct RnnMath {
  // c[i * ldc + 16 q + l] = sum_p a[i * lda + p] * panels[(q * k + p) * 16 + l] for i < m,
  // q < npanels: every row of a read against each panel once (the weights read once per
  // call, not once per row).
  void (*gemm)(const float* a, int64_t lda, int64_t m, int64_t k, const float* panels, int64_t npanels, float* c,
               int64_t ldc);
  // In place over n floats; absolute errors ~1e-7 (a libm-free exp: libm's does not
  // vectorise, and a per-element call was most of an LSTM step).
  void (*sigmoid)(float* v, int64_t n);
  void (*tanh)(float* v, int64_t n);
  const char* name;  // "avx512" or "plain"
};

const RnnMath& rnn_math(bool wide);

// One LSTM step of one row, over h hidden units (all of them, or a slice: every pointer then
// starts at the slice). g: the gates' pre-activations i, o, f, c (gate q at q * stride)
// without the peepholes (every product and bias already in); p: the peepholes Pi, Po, Pf
// (at 0, pstride, 2 pstride) or null; c: the cell state, updated in place; h_out: the new
// hidden state. g is clobbered; tmp holds h floats. clip <= 0: no clipping.
void lstm_cell(const RnnMath& m, float* g, int64_t stride, const float* p, int64_t pstride, float* c, float* h_out,
               float* tmp, int64_t h, float clip, bool input_forget);

}  // namespace ge
