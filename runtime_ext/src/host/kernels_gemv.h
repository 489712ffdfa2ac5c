// A matrix-vector kernel for Gemm / MatMul with few rows and constant weights
// (kernels_gemv.cc). The matmul factories try it first and keep oneDNN's matmul when it
// declines.
#pragma once

#include <cstdint>
#include <memory>

#include "dnnl_util.h"
#include "kernel.h"

namespace ge {

// At most this many rows (M, with MatMul's batch dims folded in) take the panel kernel:
// measured against oneDNN's matmul (2 threads, K x N from 256x768 to 1024x1024) it was
// 11-17% faster at one row, -4..+27% at two, and 2-19% slower at three or four.
constexpr int64_t kMaxGemvRows = 2;
// Narrow layers (at most kMaxSkinnyColumns outputs, e.g. a classifier) take a dot-product
// form of it at any number of rows up to kMaxSkinnyRows: oneDNN's matmul is blocked for
// wide outputs (the MLP's last layer at batch 32, 32x1024x10, in the network: 14 us median
// on two threads, this 9.4-11).
constexpr int64_t kMaxSkinnyColumns = 24;
constexpr int64_t kMaxSkinnyRows = int64_t{1} << 20;

// y[rows, n] = act(a[rows, k] · B + bias + residual), all float32, a and y dense.
struct GemvSpec {
  const TensorInfo* a = nullptr;         // [rows, k] row-major
  const TensorInfo* b = nullptr;         // constant: [k, n], or [n, k] when b_transposed
  bool b_transposed = false;
  const TensorInfo* bias = nullptr;      // n elements, or nullptr
  const TensorInfo* residual = nullptr;  // same shape as y, or nullptr
  const TensorInfo* y = nullptr;
  int64_t rows = 0, k = 0, n = 0;
  // MatMul rows=1: an int64 count; only the first count * unit rows matter (many-row form)
  const TensorInfo* count = nullptr;
  int64_t unit = 1;
};

// The kernel, or nullptr when it does not apply (more rows, B not constant, an activation
// other than Relu / LeakyRelu / Clip, no AVX-512): the caller then builds the oneDNN one.
std::unique_ptr<Kernel> make_gemv(const KernelArgs& a, const GemvSpec& s, const Fusion& f);

}  // namespace ge
