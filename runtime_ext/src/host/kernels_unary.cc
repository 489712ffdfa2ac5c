// Elementwise unary ops. Most map onto oneDNN eltwise (vectorised exp/tanh/erf
// approximations); Erf, Floor, Ceil, Sin, Cos (trig.h), Identity and a Clip with run-time
// bounds are plain loops, and so are small Neg, Abs, Sqrt, Relu and LeakyRelu (oneDNN's call costs ~2 us,
// more than the work below kSmallOpElements).
#include <immintrin.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "dnnl_util.h"
#include "gelu.h"
#include "kernels.h"
#include "trig.h"

namespace ge {

namespace {

class EltwiseKernel : public PrimitiveKernel {
 public:
  EltwiseKernel(const KernelArgs& a, dnnl::algorithm alg, float alpha, float beta) : PrimitiveKernel(*a.device) {
    const TensorInfo& x = a.in(0);
    const TensorInfo& y = a.out(0);
    // Elementwise: the same bytes in any format (input and output share one, no padding),
    // so oneDNN sees a flat vector.
    dnnl::memory::desc md = plain_md(Shape{x.numel});
    dnnl::eltwise_forward::primitive_desc pd(host_engine(dev_), dnnl::prop_kind::forward_inference, alg, md, md,
                                             alpha, beta, make_attr());
    prim_ = Prim(pd);
    prim_.arg(DNNL_ARG_SRC, md, Ref::of(x));
    prim_.arg(DNNL_ARG_DST, md, Ref::of(y));
    Prim::share_scratchpad(&plan_, {&prim_});
  }

};

// Gelu (erf form) by gelu.h, where the CPU has AVX-512.
class GeluKernel : public Kernel {
 public:
  explicit GeluKernel(const KernelArgs& a) : x_(&a.in(0)), y_(&a.out(0)) {}
  Status run(ExecContext& ctx) override {
    gelu::erf_form(ctx.ptr<const float>(*x_), ctx.ptr<float>(*y_), x_->numel, omp_get_max_threads());
    return Status::Ok();
  }
  std::string impl() const override { return "gelu avx512"; }

 private:
  const TensorInfo* x_;
  const TensorInfo* y_;
};

enum class LoopOp { kErf, kFloor, kCeil, kNeg, kAbs, kSqrt, kRelu, kSin, kCos };

// Elements below which Sin/Cos run on one thread.
constexpr int64_t kTrigParallel = 16384;

class LoopKernel : public Kernel {
 public:
  LoopKernel(const KernelArgs& a, LoopOp op, float alpha = 0.f) : x_(&a.in(0)), y_(&a.out(0)), op_(op), alpha_(alpha) {}
  Status run(ExecContext& ctx) override {
    const float* x = ctx.ptr<const float>(*x_);
    float* y = ctx.ptr<float>(*y_);
    const int64_t n = x_->numel;
    switch (op_) {
      case LoopOp::kErf:
#pragma omp parallel for schedule(static) if (n >= 16384)
        for (int64_t i = 0; i < n; ++i) y[i] = std::erf(x[i]);
        break;
      case LoopOp::kFloor:
        for (int64_t i = 0; i < n; ++i) y[i] = std::floor(x[i]);
        break;
      case LoopOp::kSin:
      case LoopOp::kCos: {
        const bool cosine = op_ == LoopOp::kCos;
        const int64_t parts = n >= kTrigParallel ? omp_get_max_threads() : 1;
#pragma omp parallel for schedule(static) if (parts > 1)
        for (int64_t p = 0; p < parts; ++p) {
          const int64_t lo = n * p / parts, hi = n * (p + 1) / parts;
          trig::sin_cos(x + lo, y + lo, hi - lo, cosine);
        }
        break;
      }
      case LoopOp::kCeil:
        for (int64_t i = 0; i < n; ++i) y[i] = std::ceil(x[i]);
        break;
      case LoopOp::kNeg:
        for (int64_t i = 0; i < n; ++i) y[i] = -x[i];
        break;
      case LoopOp::kAbs:
        for (int64_t i = 0; i < n; ++i) y[i] = std::fabs(x[i]);
        break;
      case LoopOp::kSqrt:
        for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]);
        break;
      case LoopOp::kRelu:  // what oneDNN's relu gives: max(x, 0) (NaN and -inf -> 0) when
        // alpha is 0, else x > 0 ? x : alpha x
        if (alpha_ == 0.f) {
          for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
        } else {
          for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : x[i] * alpha_;
        }
        break;
    }
    return Status::Ok();
  }

 private:
  const TensorInfo* x_;
  const TensorInfo* y_;
  LoopOp op_;
  float alpha_;
};

// LeakyRelu (alpha != 0): x > 0 ? x : alpha * x by 16 lanes. GCC keeps LoopKernel's plain
// loop of it scalar (the product is guarded by the compare, and it may not make a product
// the source does not ask for, which could raise a floating-point flag): 6.3 us for 7.7K
// elements, 0.7 here. NaN fails the compare and gives alpha * NaN = NaN, as the loop does.
// A class of its own: with the same code inside LoopKernel::run its Relu and Neg loops
// measured slower (0.6-0.7 -> 1.1 us, one A/B on a noisy machine).
__attribute__((target("avx512f"))) inline __m512 leaky_relu16(__m512 v, __m512 a) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), _mm512_mul_ps(v, a), v);
}

__attribute__((target("avx512f"))) void leaky_relu_avx512(const float* x, float* y, int64_t n, float alpha) {
  const __m512 a = _mm512_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, leaky_relu16(_mm512_loadu_ps(x + i), a));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, leaky_relu16(_mm512_maskz_loadu_ps(m, x + i), a));
  }
}

class LeakyReluKernel : public Kernel {
 public:
  LeakyReluKernel(const KernelArgs& a, float alpha) : x_(&a.in(0)), y_(&a.out(0)), alpha_(alpha) {}
  Status run(ExecContext& ctx) override {
    leaky_relu_avx512(ctx.ptr<const float>(*x_), ctx.ptr<float>(*y_), x_->numel, alpha_);
    return Status::Ok();
  }
  std::string impl() const override { return "leaky relu avx512"; }

 private:
  const TensorInfo* x_;
  const TensorInfo* y_;
  float alpha_;
};

class IdentityKernel : public Kernel {
 public:
  explicit IdentityKernel(const KernelArgs& a) : x_(&a.in(0)), y_(&a.out(0)) {}
  Status run(ExecContext& ctx) override {
    const uint8_t* x = ctx.ptr(*x_);
    uint8_t* y = ctx.ptr(*y_);
    if (x != y) std::memmove(y, x, x_->nbytes);
    return Status::Ok();
  }

 private:
  const TensorInfo* x_;
  const TensorInfo* y_;
};

// Clip with a bound the graph computes (oww_melspec's floor: the spectrogram's max less
// 80 dB), read from input 1 (min) or 2 (max) at each run; a constant one is an attribute.
// numpy's maximum then minimum, like the reference: a NaN in x or in a bound gives NaN,
// and min > max gives max.
class RunTimeClipKernel : public Kernel {
 public:
  explicit RunTimeClipKernel(const KernelArgs& a) : x_(&a.in(0)), y_(&a.out(0)), lo_(a.opt_in(1)), hi_(a.opt_in(2)) {
    const double inf = std::numeric_limits<float>::infinity();
    lo_attr_ = static_cast<float>(a.attr_float("min", -inf));
    hi_attr_ = static_cast<float>(a.attr_float("max", inf));
    for (const TensorInfo* b : {lo_, hi_}) {
      if (!b) continue;
      a.expect_dtype(*b, DType::kFloat32, b == lo_ ? "input min" : "input max");
      if (b->numel != 1) invalid(b == lo_ ? "min " : "max ", shape_str(b->shape), " must have one element");
    }
  }
  Status run(ExecContext& ctx) override {
    const float lo = lo_ ? *ctx.ptr<const float>(*lo_) : lo_attr_;
    const float hi = hi_ ? *ctx.ptr<const float>(*hi_) : hi_attr_;
    const float* x = ctx.ptr<const float>(*x_);
    float* y = ctx.ptr<float>(*y_);
    for (int64_t i = 0; i < x_->numel; ++i) {
      float v = x[i];
      v = (v >= lo || v != v) ? v : lo;
      y[i] = (v <= hi || v != v) ? v : hi;
    }
    return Status::Ok();
  }

 private:
  const TensorInfo *x_, *y_, *lo_, *hi_;
  float lo_attr_ = 0.f, hi_attr_ = 0.f;
};

// Clip's bounds: attrs min/max, or (opset >= 11) constant inputs 1 and 2.
void clip_bounds(const KernelArgs& a, float* lo, float* hi) {
  const float inf = std::numeric_limits<float>::infinity();
  *lo = static_cast<float>(a.attr_float("min", -inf));
  *hi = static_cast<float>(a.attr_float("max", inf));
  if (a.opt_in(1)) *lo = static_cast<float>(a.const_float(1));
  if (a.opt_in(2)) *hi = static_cast<float>(a.const_float(2));
}

}  // namespace

std::unique_ptr<Kernel> make_unary(const KernelArgs& a) {
  const std::string& op = a.op;
  a.expect_inputs(1, op == "Clip" ? 3 : 1);
  a.expect_outputs(1, 1);
  const TensorInfo& x = a.in(0);
  const TensorInfo& y = a.out(0);
  if (x.shape != y.shape) {
    invalid("output shape ", shape_str(y.shape), " does not match input ", shape_str(x.shape));
  }
  if (op == "Identity") {
    if (x.dtype != y.dtype) invalid("output dtype ", dtype_name(y.dtype), " differs from input ", dtype_name(x.dtype));
    return std::make_unique<IdentityKernel>(a);
  }
  a.expect_dtype(x, DType::kFloat32, "input X");
  a.expect_dtype(y, DType::kFloat32, "output Y");
  if (op == "Erf") return std::make_unique<LoopKernel>(a, LoopOp::kErf);
  if (op == "Floor") return std::make_unique<LoopKernel>(a, LoopOp::kFloor);
  if (op == "Ceil") return std::make_unique<LoopKernel>(a, LoopOp::kCeil);
  if (op == "Sin") return std::make_unique<LoopKernel>(a, LoopOp::kSin);
  if (op == "Cos") return std::make_unique<LoopKernel>(a, LoopOp::kCos);
  // Small ones that IEEE arithmetic defines exactly (NaN in, NaN out, as oneDNN's).
  if (x.numel <= kSmallOpElements) {
    if (op == "Neg") return std::make_unique<LoopKernel>(a, LoopOp::kNeg);
    if (op == "Abs") return std::make_unique<LoopKernel>(a, LoopOp::kAbs);
    if (op == "Sqrt") return std::make_unique<LoopKernel>(a, LoopOp::kSqrt);
    if (op == "Relu") return std::make_unique<LoopKernel>(a, LoopOp::kRelu);
    if (op == "LeakyRelu") {
      const float alpha = static_cast<float>(a.attr_float("alpha", 0.01));
      if (alpha != 0.f && cpu_has_avx512()) return std::make_unique<LeakyReluKernel>(a, alpha);
      return std::make_unique<LoopKernel>(a, LoopOp::kRelu, alpha);
    }
  }

  using alg = dnnl::algorithm;
  alg f = alg::undef;
  float alpha = 0.f, beta = 0.f;
  if (op == "Relu") {
    f = alg::eltwise_relu;
  } else if (op == "LeakyRelu") {
    f = alg::eltwise_relu;
    alpha = static_cast<float>(a.attr_float("alpha", 0.01));
  } else if (op == "Sigmoid") {
    f = alg::eltwise_logistic;
  } else if (op == "Tanh") {
    f = alg::eltwise_tanh;
  } else if (op == "Exp") {
    f = alg::eltwise_exp;
  } else if (op == "Log") {
    f = alg::eltwise_log;
  } else if (op == "Sqrt") {
    f = alg::eltwise_sqrt;
  } else if (op == "Abs") {
    f = alg::eltwise_abs;
  } else if (op == "Neg") {
    f = alg::eltwise_linear;
    alpha = -1.f;
  } else if (op == "Gelu") {
    std::string approx = a.attr_str("approximate", "none");
    if (approx == "none") {
      if (cpu_has_avx512()) return std::make_unique<GeluKernel>(a);
      f = alg::eltwise_gelu_erf;
    } else if (approx == "tanh") {
      f = alg::eltwise_gelu_tanh;
    } else {
      invalid("unknown approximate '", approx, "'");
    }
  } else if (op == "Clip") {
    for (size_t i : {1, 2}) {
      if (a.opt_in(i) && !a.opt_in(i)->constant()) return std::make_unique<RunTimeClipKernel>(a);
    }
    f = alg::eltwise_clip_v2;
    clip_bounds(a, &alpha, &beta);
  } else if (op == "HardSigmoid") {
    f = alg::eltwise_hardsigmoid;
    alpha = static_cast<float>(a.attr_float("alpha", 0.2));
    beta = static_cast<float>(a.attr_float("beta", 0.5));
  } else if (op == "Elu") {  // x > 0 ? x : alpha * (exp(x) - 1)
    f = alg::eltwise_elu;
    alpha = static_cast<float>(a.attr_float("alpha", 1.0));
  } else if (op == "Swish") {  // x * sigmoid(alpha * x)
    f = alg::eltwise_swish;
    alpha = static_cast<float>(a.attr_float("alpha", 1.0));
  } else if (op == "HardSwish") {
    f = alg::eltwise_hardswish;
    alpha = 1.f / 6.f;
    beta = 0.5f;
  } else if (op == "Softplus") {
    f = alg::eltwise_soft_relu;
    alpha = 1.f;
  } else if (op == "Reciprocal") {
    f = alg::eltwise_pow;
    alpha = 1.f;
    beta = -1.f;
  } else {
    invalid("not a unary op");
  }
  return std::make_unique<EltwiseKernel>(a, f, alpha, beta);
}

}  // namespace ge
