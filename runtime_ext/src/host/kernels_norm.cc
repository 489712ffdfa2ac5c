// Softmax / LogSoftmax, LayerNormalization and BatchNormalization (inference) on oneDNN;
// Softmax along the innermost axis on softmax.h's rows where the CPU has AVX-512;
// RMSNormalization (oneDNN 3.2 has no RMS form) on rows of our own.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "copy.h"
#include "dnnl_util.h"
#include "kernels.h"
#include "softmax.h"

namespace ge {

namespace {

using dims = dnnl::memory::dims;

// Checks an optional trailing output is absent (LayerNorm Mean/InvStdDev, BatchNorm
// running statistics).
void only_first_output(const KernelArgs& a) {
  for (size_t i = 1; i < a.outputs.size(); ++i) {
    if (a.outputs[i]) invalid("only the first output is supported (output ", i, " is bound)");
  }
}

// Softmax (or LogSoftmax: `log`) along the innermost axis of a plain tensor: rows of
// softmax.h.
class SoftmaxRowsKernel : public Kernel {
 public:
  SoftmaxRowsKernel(const TensorInfo& x, const TensorInfo& y, bool log) : x_(&x), y_(&y), log_(log) {
    n_ = x.rank() ? x.shape.back() : 1;
    rows_ = n_ ? x.numel / n_ : 0;
  }
  Status run(ExecContext& ctx) override {
    softmax::rows(ctx.ptr<const float>(*x_), ctx.ptr<float>(*y_), rows_, n_, n_, omp_get_max_threads(), log_);
    return Status::Ok();
  }
  std::string impl() const override { return "rows avx512"; }

 private:
  const TensorInfo* x_;
  const TensorInfo* y_;
  bool log_;
  int64_t rows_ = 0, n_ = 0;
};

// Softmax (or LogSoftmax) along an axis that is not the innermost of a plain tensor:
// softmax.h's strided (oneDNN's primitive runs its reference loops there: a TCN's
// LogSoftmax over the channels of [1, 32, 40] took 68 us).
class SoftmaxStridedKernel : public Kernel {
 public:
  SoftmaxStridedKernel(const TensorInfo& x, const TensorInfo& y, int axis, bool log) : x_(&x), y_(&y), log_(log) {
    n_ = x.shape[static_cast<size_t>(axis)];
    inner_ = 1;
    for (size_t d = static_cast<size_t>(axis) + 1; d < x.shape.size(); ++d) inner_ *= x.shape[d];
    outer_ = n_ && inner_ ? x.numel / (n_ * inner_) : 0;
  }
  Status run(ExecContext& ctx) override {
    softmax::strided(ctx.ptr<const float>(*x_), ctx.ptr<float>(*y_), outer_, n_, inner_, omp_get_max_threads(), log_);
    return Status::Ok();
  }
  std::string impl() const override { return "strided avx512"; }

 private:
  const TensorInfo* x_;
  const TensorInfo* y_;
  bool log_;
  int64_t outer_ = 0, n_ = 0, inner_ = 1;
};

// One row of LayerNormalization: two passes as oneDNN's (the mean, then the mean square of
// the deviations), each summed in 16 float lanes (independent sums, so the compiler
// vectorises them without reordering a float sum), then y = (x - mean) * inv * g + b.
__attribute__((always_inline)) inline void ln_row_body(const float* x, const float* g, const float* b, float* y,
                                                       int64_t n, float eps) {
  constexpr int kLanes = 16;
  const int64_t body = n / kLanes * kLanes;
  float lane[kLanes] = {0};
  for (int64_t i = 0; i < body; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] += x[i + k];
  float sum = 0;
  for (int k = 0; k < kLanes; ++k) sum += lane[k];
  for (int64_t i = body; i < n; ++i) sum += x[i];
  const float mean = n ? sum / static_cast<float>(n) : 0.f;
  float sq[kLanes] = {0};
  for (int64_t i = 0; i < body; i += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const float d = x[i + k] - mean;
      sq[k] += d * d;
    }
  float ss = 0;
  for (int k = 0; k < kLanes; ++k) ss += sq[k];
  for (int64_t i = body; i < n; ++i) ss += (x[i] - mean) * (x[i] - mean);
  const float var = n ? ss / static_cast<float>(n) : 0.f;
  const float inv = 1.f / std::sqrt(var + eps);
  if (b) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * g[i] + b[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * g[i];
  }
}

void ln_rows_plain(const float* x, const float* g, const float* b, float* y, int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) ln_row_body(x + r * n, g, b, y + r * n, n, eps);
}

__attribute__((target("avx512f,avx512vl"))) void ln_rows_avx512(const float* x, const float* g, const float* b,
                                                                  float* y, int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) ln_row_body(x + r * n, g, b, y + r * n, n, eps);
}

// A small LayerNormalization (a decoder's or a keyword spotter's rows of a few hundred
// floats) in a loop: oneDNN's call costs ~2-4 us, more than the work.
class SmallLayerNormKernel : public Kernel {
 public:
  SmallLayerNormKernel(const TensorInfo& x, const TensorInfo& scale, const TensorInfo* bias, const TensorInfo& y,
                       int64_t rows, int64_t n, float eps)
      : x_(&x), scale_(&scale), bias_(bias), y_(&y), rows_(rows), n_(n), eps_(eps),
        rows_fn_(cpu_has_avx512() ? ln_rows_avx512 : ln_rows_plain) {}
  Status run(ExecContext& ctx) override {
    rows_fn_(ctx.ptr<const float>(*x_), ctx.ptr<const float>(*scale_),
             bias_ ? ctx.ptr<const float>(*bias_) : nullptr, ctx.ptr<float>(*y_), rows_, n_, eps_);
    return Status::Ok();
  }
  std::string impl() const override { return cpu_has_avx512() ? "small rows avx512" : "small rows"; }

 private:
  const TensorInfo* x_;
  const TensorInfo* scale_;
  const TensorInfo* bias_;
  const TensorInfo* y_;
  int64_t rows_, n_;
  float eps_;
  void (*rows_fn_)(const float*, const float*, const float*, float*, int64_t, int64_t, float);
};

// One row of RMSNormalization: the mean square summed in 16 float lanes, then
// y = x * (1 / sqrt(ms + eps)) * g.
__attribute__((always_inline)) inline void rms_row_body(const float* x, const float* g, float* y, int64_t n,
                                                        float eps) {
  constexpr int kLanes = 16;
  const int64_t body = n / kLanes * kLanes;
  float sq[kLanes] = {0};
  for (int64_t i = 0; i < body; i += kLanes)
    for (int k = 0; k < kLanes; ++k) sq[k] += x[i + k] * x[i + k];
  float ss = 0;
  for (int k = 0; k < kLanes; ++k) ss += sq[k];
  for (int64_t i = body; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.f / std::sqrt((n ? ss / static_cast<float>(n) : 0.f) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * g[i];
}

void rms_rows_plain(const float* x, const float* g, float* y, int64_t rows, int64_t n, float eps, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < rows; ++r) rms_row_body(x + r * n, g, y + r * n, n, eps);
}

__attribute__((target("avx512f,avx512vl"))) void rms_rows_avx512(const float* x, const float* g, float* y,
                                                                   int64_t rows, int64_t n, float eps, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < rows; ++r) rms_row_body(x + r * n, g, y + r * n, n, eps);
}

// RMSNormalization over the trailing axes from `axis` (LLaMA's and T5's norm): one pass for
// the mean square and one for the output, rows split over the team when there is enough
// work. Its decomposed steps were a oneDNN reduction (51 us of a 1.5 us row set on
// hf_llama at batch 8) and four elementwise tasks.
class RmsNormKernel : public Kernel {
 public:
  RmsNormKernel(const TensorInfo& x, const TensorInfo& scale, const TensorInfo& y, int64_t rows, int64_t n,
                float eps)
      : x_(&x), scale_(&scale), y_(&y), rows_(rows), n_(n), eps_(eps),
        rows_fn_(cpu_has_avx512() ? rms_rows_avx512 : rms_rows_plain) {}
  Status run(ExecContext& ctx) override {
    const int threads = x_->numel <= kSmallOpElements ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), rows_));
    rows_fn_(ctx.ptr<const float>(*x_), ctx.ptr<const float>(*scale_), ctx.ptr<float>(*y_), rows_, n_, eps_,
             std::max(1, threads));
    return Status::Ok();
  }
  std::string impl() const override { return cpu_has_avx512() ? "rows avx512" : "rows"; }

 private:
  const TensorInfo* x_;
  const TensorInfo* scale_;
  const TensorInfo* y_;
  int64_t rows_, n_;
  float eps_;
  void (*rows_fn_)(const float*, const float*, float*, int64_t, int64_t, float, int);
};

}  // namespace

std::unique_ptr<Kernel> make_rms_norm(const KernelArgs& a) {
  a.expect_inputs(2, 2);
  a.expect_outputs(1, 1);
  const TensorInfo& x = a.in(0);
  const TensorInfo& scale = a.in(1);
  const TensorInfo& y = a.out(0);
  for (const TensorInfo* t : {&x, &scale, &y}) a.expect_dtype(*t, DType::kFloat32, "tensor");
  if (x.shape != y.shape) invalid("output shape ", shape_str(y.shape), " does not match input ", shape_str(x.shape));
  if (x.rank() < 1) invalid("input X must have rank >= 1");
  const int axis = normalize_axis(a.attr_int("axis", -1), x.rank());
  const float eps = static_cast<float>(a.attr_float("epsilon", 1e-5));
  if (!(eps >= 0.f) || !std::isfinite(eps)) invalid("epsilon must be finite and >= 0, got ", eps);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < x.rank(); ++i) (i < axis ? outer : inner) *= x.shape[i];
  if (scale.numel != inner) {
    invalid("Scale shape ", shape_str(scale.shape), " does not match normalized shape ",
            shape_str(Shape(x.shape.begin() + axis, x.shape.end())));
  }
  return std::make_unique<RmsNormKernel>(x, scale, y, outer, inner, eps);
}

std::unique_ptr<Kernel> make_softmax(const KernelArgs& a) {
  a.expect_inputs(1, 1);
  a.expect_outputs(1, 1);
  const TensorInfo& x = a.in(0);
  const TensorInfo& y = a.out(0);
  a.expect_dtype(x, DType::kFloat32, "input X");
  a.expect_dtype(y, DType::kFloat32, "output Y");
  if (x.shape != y.shape) invalid("output shape ", shape_str(y.shape), " does not match input ", shape_str(x.shape));
  const int rank = std::max(1, x.rank());
  const int axis = normalize_axis(a.attr_int("axis", -1), rank);
  const bool log = a.op == "LogSoftmax";
  if (x.plain() && y.plain() && cpu_has_avx512()) {
    if (axis == rank - 1) return std::make_unique<SoftmaxRowsKernel>(x, y, log);
    if (x.rank() > axis + 1) return std::make_unique<SoftmaxStridedKernel>(x, y, axis, log);
  }
  auto k = std::make_unique<PrimitiveKernel>(*a.device);
  dnnl::memory::desc md = plain_md(x.shape);
  dnnl::algorithm alg = a.op == "LogSoftmax" ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
  dnnl::softmax_forward::primitive_desc pd(host_engine(*a.device), dnnl::prop_kind::forward_inference, alg, md, md,
                                           axis, make_attr());
  k->prim_ = Prim(pd);
  k->prim_.arg(DNNL_ARG_SRC, md, Ref::of(x));
  k->prim_.arg(DNNL_ARG_DST, md, Ref::of(y));
  Prim::share_scratchpad(&k->plan_, {&k->prim_});
  return k;
}

std::unique_ptr<Kernel> make_layer_norm(const KernelArgs& a) {
  a.expect_inputs(2, 3);
  a.expect_outputs(1, 3);
  only_first_output(a);
  const TensorInfo& x = a.in(0);
  const TensorInfo& scale = a.in(1);
  const TensorInfo* bias = a.opt_in(2);
  const TensorInfo& y = a.out(0);
  for (const TensorInfo* t : {&x, &scale, bias, &y}) {
    if (t) a.expect_dtype(*t, DType::kFloat32, "tensor");
  }
  if (x.shape != y.shape) invalid("output shape ", shape_str(y.shape), " does not match input ", shape_str(x.shape));
  if (x.rank() < 1) invalid("input X must have rank >= 1");
  const int axis = normalize_axis(a.attr_int("axis", -1), x.rank());
  const float eps = static_cast<float>(a.attr_float("epsilon", 1e-5));
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < x.rank(); ++i) (i < axis ? outer : inner) *= x.shape[i];
  const Shape norm_shape(x.shape.begin() + axis, x.shape.end());
  if (scale.numel != inner) {
    invalid("Scale shape ", shape_str(scale.shape), " does not match normalized shape ", shape_str(norm_shape));
  }
  if (bias && bias->numel != inner) {
    invalid("B shape ", shape_str(bias->shape), " does not match normalized shape ", shape_str(norm_shape));
  }
  // three passes over the data on one thread: a third of the elementwise loops' budget
  if (x.numel <= kSmallOpElements / 4) {
    return std::make_unique<SmallLayerNormKernel>(x, scale, bias, y, outer, inner, eps);
  }
  auto k = std::make_unique<PrimitiveKernel>(*a.device);
  dnnl::memory::desc md(dims{outer, inner}, dt::f32, tag::ab);
  dnnl::memory::desc cmd(dims{inner}, dt::f32, tag::a);
  auto flags = dnnl::normalization_flags::use_scale;
  if (bias) flags = flags | dnnl::normalization_flags::use_shift;
  dnnl::layer_normalization_forward::primitive_desc pd(host_engine(*a.device), dnnl::prop_kind::forward_inference,
                                                       md, md, eps, flags, make_attr());
  k->prim_ = Prim(pd);
  k->prim_.arg(DNNL_ARG_SRC, md, Ref::of(x));
  k->prim_.arg(DNNL_ARG_DST, md, Ref::of(y));
  k->prim_.arg(DNNL_ARG_SCALE, cmd, Ref::of(scale));
  if (bias) k->prim_.arg(DNNL_ARG_SHIFT, cmd, Ref::of(*bias));
  Prim::share_scratchpad(&k->plan_, {&k->prim_});
  return k;
}

namespace {

// Inference BatchNormalization with constant parameters: y = x * a[c] + b[c] (then the fused
// Relu), a and b folded at load. oneDNN's batch normalization costs a call's setup and, on
// NHWC with channels not a multiple of 16, runs its AVX2 or SSE4.1 code: DenseNet's
// normalizations of 20-44 channels after each Concat took 250-490 us each at batch 8 under
// load, ~4 ns per element; this loop is one multiply-add per element, vectorized along the
// stored channels (NHWC, blocked) or along the plane (NCHW).
class ChannelAffineKernel : public Kernel {
 public:
  ChannelAffineKernel(const TensorInfo& x, const TensorInfo& y, std::vector<float> scale, std::vector<float> shift,
                      bool relu)
      : x_(&x), y_(&y), a_(std::move(scale)), b_(std::move(shift)), relu_(relu) {
    const int64_t C = x.shape[1];
    int64_t spatial = 1;
    for (int i = 2; i < x.rank(); ++i) spatial *= x.shape[i];
    switch (x.format) {
      case Format::kPlain:  // rows: (n, c) planes of `spatial`; [N, C] (BatchNorm1d): rows of C
        if (spatial == 1) {
          rows_ = x.shape[0], len_ = C, block_ = C;
        } else {
          rows_ = x.shape[0] * C, len_ = spatial, block_ = 1;
        }
        break;
      case Format::kNhwc:  // rows: pixels of C
        rows_ = x.shape[0] * spatial, len_ = C, block_ = C;
        break;
      case Format::kNChw8c:
      case Format::kNChw16c: {  // rows: (n, channel block) of spatial * b
        const int64_t b = x.format == Format::kNChw8c ? 8 : 16;
        rows_ = x.shape[0] * (C / b), len_ = spatial * b, block_ = b;
        break;
      }
    }
  }

  Status run(ExecContext& ctx) override {
    const float* x = ctx.ptr<const float>(*x_);
    float* y = ctx.ptr<float>(*y_);
    const int64_t C = x_->shape[1];
    for_rows(rows_, static_cast<int64_t>(y_->nbytes), [&](int64_t r) {
      const float* in = x + r * len_;
      float* out = y + r * len_;
      if (block_ == 1) {  // one channel per row
        const int64_t c = r % C;
        row(in, out, len_, a_[c], b_[c]);
      } else {  // rows of whole channel groups: channel = first + (i % block)
        const int64_t first = block_ == C ? 0 : (r % (C / block_)) * block_;
        for (int64_t i = 0; i < len_; i += block_) pixels(in + i, out + i, a_.data() + first, b_.data() + first);
      }
    });
    return Status::Ok();
  }
  std::string impl() const override {
    // a plain [N, C] read a row of channels at a time (an element a row took 0.7 ns each:
    // 135 us for LeViT's [1568, 128] normalizations at batch 8)
    return x_->format == Format::kPlain && block_ > 1 ? "channel affine loop, rows of channels" : "channel affine loop";
  }

 private:
  void row(const float* in, float* out, int64_t n, float a, float b) const {
    if (relu_) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = std::max(in[i] * a + b, 0.f);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] * a + b;
    }
  }
  void pixels(const float* in, float* out, const float* a, const float* b) const {
    if (relu_) {
#pragma omp simd
      for (int64_t j = 0; j < block_; ++j) out[j] = std::max(in[j] * a[j] + b[j], 0.f);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < block_; ++j) out[j] = in[j] * a[j] + b[j];
    }
  }

  const TensorInfo* x_;
  const TensorInfo* y_;
  std::vector<float> a_, b_;
  bool relu_;
  int64_t rows_ = 0, len_ = 0, block_ = 1;
};

}  // namespace

std::unique_ptr<Kernel> make_batch_norm(const KernelArgs& a) {
  a.expect_inputs(5, 5);
  a.expect_outputs(1, 3);
  only_first_output(a);
  if (a.attr_int("training_mode", 0) != 0) invalid("training_mode is not supported");
  const TensorInfo& x = a.in(0);
  const TensorInfo& y = a.out(0);
  a.expect_dtype(x, DType::kFloat32, "input X");
  a.expect_dtype(y, DType::kFloat32, "output Y");
  if (x.shape != y.shape) invalid("output shape ", shape_str(y.shape), " does not match input ", shape_str(x.shape));
  if (x.rank() < 2) invalid("input X must be N,C,... of rank >= 2, got ", shape_str(x.shape));
  const int64_t C = x.shape[1];
  const char* names[] = {"", "scale", "B", "input_mean", "input_var"};
  for (size_t i = 1; i < 5; ++i) {
    const TensorInfo& t = a.in(i);
    a.expect_dtype(t, DType::kFloat32, names[i]);
    if (t.shape != Shape{C}) invalid(names[i], " shape ", shape_str(t.shape), " must be [", C, "]");
  }
  const float eps = static_cast<float>(a.attr_float("epsilon", 1e-5));
  const std::string act = a.attr_str("activation", "");
  if (!act.empty() && act != "Relu") invalid("BatchNormalization fuses only a Relu, got activation '", act, "'");
  if (a.in(1).constant() && a.in(2).constant() && a.in(3).constant() && a.in(4).constant() &&
      x.format == y.format && !x.padded()) {
    std::vector<float> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
    const auto* s = reinterpret_cast<const float*>(a.in(1).data);
    const auto* b = reinterpret_cast<const float*>(a.in(2).data);
    const auto* m = reinterpret_cast<const float*>(a.in(3).data);
    const auto* v = reinterpret_cast<const float*>(a.in(4).data);
    for (int64_t c = 0; c < C; ++c) {  // in float, as oneDNN computes it
      scale[c] = s[c] / std::sqrt(v[c] + eps);
      shift[c] = b[c] - m[c] * scale[c];
    }
    return std::make_unique<ChannelAffineKernel>(x, y, std::move(scale), std::move(shift), act == "Relu");
  }
  int64_t spatial = 1;
  for (int i = 2; i < x.rank(); ++i) spatial *= x.shape[i];
  // N, C, collapsed spatial: the same bytes as any NC... layout.
  dims d = {x.shape[0], C, spatial};
  dnnl::memory::desc md;
  if (x.plain() || x.channels_last()) {
    md = dnnl::memory::desc(d, dt::f32, x.channels_last() ? tag::nwc : tag::ncw);
  } else {  // blocked: oneDNN takes it as stored
    md = tensor_md(x);
  }
  dnnl::memory::desc cmd(dims{C}, dt::f32, tag::a);
  auto k = std::make_unique<PrimitiveKernel>(*a.device);
  auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
               dnnl::normalization_flags::use_shift;
  // A fused Relu (the compiler's `activation` epilogue: a pre-activation network's
  // BatchNormalization -> Relu, DenseNet's after every Concat) in the same pass over the data.
  if (act == "Relu") flags |= dnnl::normalization_flags::fuse_norm_relu;
  dnnl::batch_normalization_forward::primitive_desc pd(host_engine(*a.device), dnnl::prop_kind::forward_inference,
                                                       md, md, eps, flags, make_attr());
  k->prim_ = Prim(pd);
  k->prim_.arg(DNNL_ARG_SRC, md, Ref::of(x));
  k->prim_.arg(DNNL_ARG_DST, md, Ref::of(y));
  k->prim_.arg(DNNL_ARG_SCALE, cmd, Ref::of(a.in(1)));
  k->prim_.arg(DNNL_ARG_SHIFT, cmd, Ref::of(a.in(2)));
  k->prim_.arg(DNNL_ARG_MEAN, cmd, Ref::of(a.in(3)));
  k->prim_.arg(DNNL_ARG_VARIANCE, cmd, Ref::of(a.in(4)));
  Prim::share_scratchpad(&k->plan_, {&k->prim_});
  return k;
}

}  // namespace ge
