// Sin and Cos of float32 arrays (trig.cc): the argument reduced by pi/2 and two polynomials
// in float64, vectorised for AVX-512, so the result is the float32 rounding of a value within
// ~1e-14 of the true one (numpy's float32 sin/cos agree to 1 ulp). |x| >= 2^30, infinities
// and NaNs take std::sin / std::cos in double.
#pragma once

#include <cstdint>

namespace ge::trig {

// y[i] = sin(x[i]) (or cos) for i in [0, n); x == y computes in place. The vector code where
// the CPU has AVX-512F and DQ (asked once), else the libm loop in double.
void sin_cos(const float* x, float* y, int64_t n, bool cosine);

}  // namespace ge::trig
