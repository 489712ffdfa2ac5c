// Dynamic uint8 quantization of a float32 array, ONNX Runtime's arithmetic (kernels_quant.cc):
// shared by DynamicQuantizeLinear and the quantized LSTM's on-the-fly operands.
#pragma once

#include <cstdint>

namespace ge {

struct U8Params {
  float scale = 1.f;
  float zero_point = 0.f;  // an integer in [0, 255]
};

// The range of x[0, n) widened to hold 0 (a NaN anywhere makes it [0, 0]), scale = (hi - lo)
// / 255 in float32 (1 when hi == lo), zero point = saturate(rint((0 - lo) / scale)).
U8Params u8_params(const float* x, int64_t n, bool wide);
// y[i] = saturate(rint(x[i] / scale) + zero point), rint ties to even, NaN -> 0.
void u8_quantize(const float* x, int64_t n, U8Params p, uint8_t* y, bool wide);

}  // namespace ge
