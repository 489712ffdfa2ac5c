// graphengine.GroupNorm: group normalization, its per-channel affine and an activation, in one
// kernel that reads and writes the tensor's stored format (plain N, C, spatial...; NHWC; the
// unpadded blocked nChw8c / nChw16c), so a GroupNorm between convolutions stays in their
// region. The compiler's fusion row (engine/optimize/fusion/group_norm.py) makes it from the
// canonical Reshape [N, G, rest] -> LayerNormalization -> Reshape back -> Mul -> Add [-> act]
// that GroupNormalization / InstanceNormalization and torch's GroupNorm export become; the
// Reshapes forced the plain layout (two TransData a GroupNorm in an NHWC region) and the
// affine and activation ran as tasks of their own.
//
// Per sample: pass 1 sums each channel's deviations d = x - x0 from the channel's first
// element x0 and their squares over the spatial positions (float partial sums of at most
// kChunk positions, added into double accumulators). The shift keeps the sums at the
// data's spread, not its mean: E[x^2] - mean^2 of unshifted float sums cancels to noise
// when the mean is large against the spread (mean 1000, spread 1 gave errors of 2). Each
// channel's mean and sum of squared deviations follow from its shifted sums; the group's
// combine them (Chan's pairwise formula over channels of equal count), then
// 1 / sqrt(var + eps); pass 2 writes y = act(x * a[c] + b[c]), a = gamma[c] * rstd,
// b = beta[c] - mean * a.
//
// The stored bytes are viewed as x[n][o][s][i]: plain O = C, I = 1 (channel o); NHWC O = 1,
// I = C (channel i); blocked O = C / b, I = b (channel o * b + i). Both passes run over work
// items (n, o, spatial chunk k), enough of them to occupy the team at batch 1 too.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "device.h"
#include "gelu.h"
#include "kernels.h"

namespace ge {

namespace {

constexpr int64_t kChunk = 256;  // positions summed in float before a double accumulator

enum class Act { kNone, kRelu, kLeakyRelu, kClip, kSigmoid, kTanh, kGelu, kGeluTanh, kSwish, kHardSwish };

Act parse_act(const std::string& s) {
  static const std::pair<const char*, Act> names[] = {
      {"", Act::kNone},         {"Relu", Act::kRelu},         {"LeakyRelu", Act::kLeakyRelu},
      {"Clip", Act::kClip},     {"Sigmoid", Act::kSigmoid},   {"Tanh", Act::kTanh},
      {"Gelu", Act::kGelu},     {"GeluTanh", Act::kGeluTanh}, {"Swish", Act::kSwish},
      {"HardSwish", Act::kHardSwish}};
  for (const auto& [name, act] : names) {
    if (s == name) return act;
  }
  invalid("GroupNorm's activation '", s, "' is not one it applies");
}

// The transcendental activations over a run of floats, 16 at a time (the tail through a
// 16-float copy), with the elementwise regions' vector math (vector_math.inc). std::exp and
// std::tanh in a `simd` loop stayed a libm call an element (errno): an InstanceNorm + SiLU over
// [4, 16, 64, 64] NHWC (a U-Net's) took 1.2 ms on one thread, 0.24 ms after.
typedef float V16 __attribute__((vector_size(64)));
typedef int32_t I16 __attribute__((vector_size(64)));
typedef float V16u __attribute__((vector_size(64), aligned(4), may_alias));

#define GE_INLINE __attribute__((always_inline)) inline

namespace plain {
#include "vector_math.inc"
#include "group_norm_act.inc"
}  // namespace plain

#pragma GCC push_options
#pragma GCC target("avx512f,fma")
namespace wide {
#include "vector_math.inc"
#include "group_norm_act.inc"
}  // namespace wide
#pragma GCC pop_options

void activate_plain(Act act, float alpha, float* v, int64_t len) { plain::activate_body(act, alpha, v, len); }
__attribute__((target("avx512f,fma"))) void activate_avx512(Act act, float alpha, float* v, int64_t len) {
  wide::activate_body(act, alpha, v, len);
}

class GroupNormKernel : public Kernel {
 public:
  GroupNormKernel(const TensorInfo& x, const TensorInfo& y, std::vector<float> gamma, std::vector<float> beta,
                  int64_t groups, float eps, Act act, float alpha, float beta_act)
      : x_(&x), y_(&y), gamma_(std::move(gamma)), beta_(std::move(beta)), groups_(groups), eps_(eps), act_(act),
        alpha_(alpha), beta_act_(beta_act) {
    n_ = x.shape[0];
    c_ = x.shape[1];
    s_ = 1;
    for (int i = 2; i < x.rank(); ++i) s_ *= x.shape[i];
    switch (x.format) {
      case Format::kPlain: o_ = c_, i_ = 1; break;
      case Format::kNhwc: o_ = 1, i_ = c_; break;
      case Format::kNChw8c: o_ = c_ / 8, i_ = 8; break;
      case Format::kNChw16c: o_ = c_ / 16, i_ = 16; break;
    }
    // Spatial chunks: at least ~4 work items a thread over the whole tensor, each at least
    // kChunk positions (or the whole plane).
    const int64_t want = 4 * std::max(1, omp_get_max_threads());
    k_ = std::clamp<int64_t>((want + n_ * o_ - 1) / (n_ * o_), 1, std::max<int64_t>(1, s_ / kChunk));
    per_k_ = (s_ + k_ - 1) / k_;
    k_ = (s_ + per_k_ - 1) / per_k_;
  }

  Status run(ExecContext& ctx) override {
    const float* x = ctx.ptr<const float>(*x_);
    float* y = ctx.ptr<float>(*y_);
    const int threads = omp_get_max_threads();
    const bool team = threads > 1 && n_ * c_ * s_ * 4 >= (int64_t{1} << 16);
    const int64_t per_sample = o_ * k_;  // work items of one sample
    // Whole samples a thread when they share out evenly: no barrier inside the run (each
    // barrier costs a time slice when the cores are oversubscribed).
    if (!team || n_ % threads == 0 || n_ >= 4 * threads) {
#pragma omp parallel for schedule(static) if (team)
      for (int64_t n = 0; n < n_; ++n) {
        std::vector<double> partial(static_cast<size_t>(per_sample * 2 * i_));
        std::vector<float> a(static_cast<size_t>(c_)), b(static_cast<size_t>(c_));
        for (int64_t j = 0; j < per_sample; ++j) sums(x, n * per_sample + j, partial.data() + j * 2 * i_);
        coefficients(x, n, partial.data(), a.data(), b.data());
        for (int64_t j = 0; j < per_sample; ++j) apply(x, y, n * per_sample + j, a.data(), b.data());
      }
      return Status::Ok();
    }
    // Fewer samples than threads (batch 1): the team shares each sample's positions, and
    // every thread derives the coefficients from the shared sums itself.
    const int64_t items = n_ * per_sample;
    std::vector<double> partial(static_cast<size_t>(items * 2 * i_));
#pragma omp parallel
    {
#pragma omp for schedule(static)
      for (int64_t it = 0; it < items; ++it) sums(x, it, partial.data() + it * 2 * i_);
      std::vector<float> a(static_cast<size_t>(n_ * c_)), b(static_cast<size_t>(n_ * c_));
      for (int64_t n = 0; n < n_; ++n) {
        coefficients(x, n, partial.data() + n * per_sample * 2 * i_, a.data() + n * c_, b.data() + n * c_);
      }
#pragma omp for schedule(static) nowait
      for (int64_t it = 0; it < items; ++it) {
        const int64_t n = it / per_sample;
        apply(x, y, it, a.data() + n * c_, b.data() + n * c_);
      }
    }
    return Status::Ok();
  }

  std::string impl() const override { return "group norm loop"; }

 private:
  // The rows of work item `it`: (n, o) and its positions [s0, s1).
  void span(int64_t it, int64_t* no, int64_t* s0, int64_t* s1) const {
    *no = it / k_;
    *s0 = (it % k_) * per_k_;
    *s1 = std::min(s_, *s0 + per_k_);
  }

  void sums(const float* x, int64_t it, double* out) const {
    int64_t no, s0, s1;
    span(it, &no, &s0, &s1);
    double* sum = out;
    double* sq = out + i_;
    std::fill(out, out + 2 * i_, 0.0);
    const float* shift = x + no * s_ * i_;  // each channel's first element in this sample
    std::vector<float> fs(static_cast<size_t>(i_)), fq(static_cast<size_t>(i_));
    for (int64_t c0 = s0; c0 < s1; c0 += kChunk) {
      const int64_t c1 = std::min(s1, c0 + kChunk);
      const float* row = x + (no * s_ + c0) * i_;
      if (i_ == 1) {
        const float k = shift[0];
        float s = 0.f, q = 0.f;
#pragma omp simd reduction(+ : s, q)
        for (int64_t p = 0; p < c1 - c0; ++p) {
          const float d = row[p] - k;
          s += d, q += d * d;
        }
        sum[0] += s, sq[0] += q;
        continue;
      }
      std::fill(fs.begin(), fs.end(), 0.f);
      std::fill(fq.begin(), fq.end(), 0.f);
      float* ps = fs.data();
      float* pq = fq.data();
      for (int64_t p = 0; p < c1 - c0; ++p) {
        const float* v = row + p * i_;
#pragma omp simd
        for (int64_t i = 0; i < i_; ++i) {
          const float d = v[i] - shift[i];
          ps[i] += d, pq[i] += d * d;
        }
      }
      for (int64_t i = 0; i < i_; ++i) sum[i] += ps[i], sq[i] += pq[i];
    }
  }

  // Sample n's a and b per channel from its items' partial sums (shifted by each channel's
  // first element in the sample, read again from x).
  void coefficients(const float* x, int64_t n, const double* partial, float* a, float* b) const {
    const int64_t per_group = c_ / groups_;
    const double plane = static_cast<double>(s_);
    std::vector<double> sum(static_cast<size_t>(c_), 0.0), sq(static_cast<size_t>(c_), 0.0);
    for (int64_t o = 0; o < o_; ++o) {
      for (int64_t k = 0; k < k_; ++k) {
        const double* p = partial + (o * k_ + k) * 2 * i_;
        for (int64_t i = 0; i < i_; ++i) {
          const int64_t c = i_ == c_ ? i : o * i_ + i;
          sum[c] += p[i];
          sq[c] += p[i_ + i];
        }
      }
    }
    // Per channel: mean = x0 + sum / plane, and its squared deviations from that mean
    // m2 = sq - sum^2 / plane (kept in sq).
    for (int64_t c = 0; c < c_; ++c) {
      const float x0 = x[((n * o_ + c / i_) * s_) * i_ + c % i_];
      const double m = sum[c] / plane;
      sq[c] = std::max(sq[c] - sum[c] * m, 0.0);
      sum[c] = static_cast<double>(x0) + m;
    }
    for (int64_t g = 0; g < groups_; ++g) {
      double mean = 0.0;
      for (int64_t c = g * per_group; c < (g + 1) * per_group; ++c) mean += sum[c];
      mean /= static_cast<double>(per_group);
      double m2 = 0.0;  // the group's: its channels' own plus their means' spread
      for (int64_t c = g * per_group; c < (g + 1) * per_group; ++c) {
        m2 += sq[c] + plane * (sum[c] - mean) * (sum[c] - mean);
      }
      const double var = m2 / (plane * static_cast<double>(per_group));
      const double rstd = 1.0 / std::sqrt(var + static_cast<double>(eps_));
      for (int64_t c = g * per_group; c < (g + 1) * per_group; ++c) {
        const double scale = gamma_[c] * rstd;
        a[c] = static_cast<float>(scale);
        b[c] = static_cast<float>(beta_[c] - mean * scale);
      }
    }
  }

  // a and b: the item's sample's coefficients per channel.
  void apply(const float* x, float* y, int64_t it, const float* a, const float* b) const {
    int64_t no, s0, s1;
    span(it, &no, &s0, &s1);
    const int64_t o = no % o_;
    const float* an = a + (i_ == c_ ? 0 : o * i_);
    const float* bn = b + (i_ == c_ ? 0 : o * i_);
    const float* in = x + (no * s_ + s0) * i_;
    float* out = y + (no * s_ + s0) * i_;
    const int64_t len = (s1 - s0) * i_;
    if (i_ == 1) {
      affine_row(in, out, len, an[0], bn[0]);
    } else {
      for (int64_t p = 0; p < len; p += i_) affine_pixel(in + p, out + p, an, bn);
    }
    finish(out, len);
  }

  void affine_row(const float* in, float* out, int64_t len, float a, float b) const {
    const float lo = act_ == Act::kRelu ? 0.f : act_ == Act::kClip ? alpha_ : -INFINITY;
    const float hi = act_ == Act::kClip ? beta_act_ : INFINITY;
    if (act_ == Act::kLeakyRelu) {
#pragma omp simd
      for (int64_t p = 0; p < len; ++p) {
        const float v = in[p] * a + b;
        out[p] = v < 0.f ? v * alpha_ : v;
      }
      return;
    }
#pragma omp simd
    for (int64_t p = 0; p < len; ++p) out[p] = std::min(std::max(in[p] * a + b, lo), hi);
  }

  void affine_pixel(const float* in, float* out, const float* a, const float* b) const {
    const float lo = act_ == Act::kRelu ? 0.f : act_ == Act::kClip ? alpha_ : -INFINITY;
    const float hi = act_ == Act::kClip ? beta_act_ : INFINITY;
    if (act_ == Act::kLeakyRelu) {
#pragma omp simd
      for (int64_t i = 0; i < i_; ++i) {
        const float v = in[i] * a[i] + b[i];
        out[i] = v < 0.f ? v * alpha_ : v;
      }
      return;
    }
#pragma omp simd
    for (int64_t i = 0; i < i_; ++i) out[i] = std::min(std::max(in[i] * a[i] + b[i], lo), hi);
  }

  // The activations that are no clamp, over a just written (cache-warm) run of outputs, in
  // 16-float vectors (plain or AVX-512 code by the CPU).
  void finish(float* v, int64_t len) const {
    switch (act_) {
      case Act::kSigmoid:
      case Act::kTanh:
      case Act::kSwish:
      case Act::kGeluTanh:
      case Act::kHardSwish:
        if (cpu_has_avx512()) {
          activate_avx512(act_, alpha_, v, len);
        } else {
          activate_plain(act_, alpha_, v, len);
        }
        break;
      case Act::kGelu:
        if (cpu_has_avx512()) {
          gelu::erf_form(v, v, len, 1);
        } else {
          for (int64_t p = 0; p < len; ++p) v[p] = 0.5f * v[p] * (1.f + std::erf(v[p] * 0.70710678f));
        }
        break;
      default:
        break;
    }
  }

  const TensorInfo* x_;
  const TensorInfo* y_;
  std::vector<float> gamma_, beta_;
  int64_t groups_;
  float eps_;
  Act act_;
  float alpha_, beta_act_;
  int64_t n_ = 0, c_ = 0, s_ = 0, o_ = 0, i_ = 1, k_ = 1, per_k_ = 1;
};

}  // namespace

std::unique_ptr<Kernel> make_group_norm(const KernelArgs& a) {
  a.expect_inputs(3, 3);
  a.expect_outputs(1, 1);
  const TensorInfo& x = a.in(0);
  const TensorInfo& y = a.out(0);
  a.expect_dtype(x, DType::kFloat32, "input X");
  a.expect_dtype(y, DType::kFloat32, "output Y");
  if (x.rank() < 3) invalid("input X must be N, C, spatial... of rank >= 3, got ", shape_str(x.shape));
  if (x.shape != y.shape) invalid("output shape ", shape_str(y.shape), " does not match input ", shape_str(x.shape));
  if (x.format != y.format) invalid("input and output formats differ (", format_name(x.format), ", ", format_name(y.format), ")");
  if (x.padded()) invalid("input X is stored padded (", format_name(x.format), ", ", x.shape[1], " channels)");
  const int64_t C = x.shape[1];
  const int64_t groups = a.attr_int("num_groups", 0);
  if (groups < 1 || groups > C || C % groups != 0) {
    invalid("num_groups ", groups, " must divide the ", C, " channels");
  }
  const char* names[] = {"", "scale", "bias"};
  std::vector<float> params[3];
  for (size_t i = 1; i < 3; ++i) {
    const TensorInfo& t = a.in(i);
    a.expect_dtype(t, DType::kFloat32, names[i]);
    if (t.shape != Shape{C}) invalid(names[i], " shape ", shape_str(t.shape), " must be [", C, "]");
    if (!t.constant()) invalid(names[i], " must be a constant");
    const auto* p = reinterpret_cast<const float*>(t.data);
    params[i].assign(p, p + C);
  }
  const double eps = a.attr_float("epsilon", 1e-5);
  if (!(eps >= 0.0) || !std::isfinite(eps)) invalid("epsilon ", eps, " must be a finite number >= 0");
  const Act act = parse_act(a.attr_str("activation", ""));
  const float alpha = static_cast<float>(a.attr_float("activation_alpha", act == Act::kLeakyRelu ? 0.01
                                                                          : act == Act::kClip    ? -INFINITY
                                                                                                 : 1.0));
  const float beta = static_cast<float>(a.attr_float("activation_beta", INFINITY));
  return std::make_unique<GroupNormKernel>(x, y, std::move(params[1]), std::move(params[2]), groups,
                                           static_cast<float>(eps), act, alpha, beta);
}

}  // namespace ge
