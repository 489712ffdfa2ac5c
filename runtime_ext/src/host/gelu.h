// GELU in its exact (erf) form, AVX-512 (gelu.cc).
//
// oneDNN's gelu_erf (as a matmul post-op or an eltwise primitive) spends ~27 cycles per 16
// floats here (bert_mini's fc1, one core: 2611 us with it, 2350 us without, for 512 x 1024
// outputs); this spends ~15 (0.24 ns a float in L2) and is more accurate (largest error
// over [-12, 12] in steps of 1e-5: 3.4e-7 vs oneDNN's 1.2e-6, against float64).
#pragma once

#include <cstdint>

namespace ge::gelu {

// Needs AVX-512F (cpu_has_avx512() in device.h).
// y[i] = x[i] * Phi(x[i]) = 0.5 x[i] (1 + erf(x[i] / sqrt 2)) for i in [0, n); x == y
// computes in place. NaN gives NaN, +inf gives +inf. Runs an OpenMP team of at most
// `threads` when n is large.
void erf_form(const float* x, float* y, int64_t n, int threads);

}  // namespace ge::gelu
