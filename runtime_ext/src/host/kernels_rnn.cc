// RNN, GRU and LSTM (ONNX semantics), float32, with their default activations (Tanh; Sigmoid
// and Tanh; Sigmoid, Tanh and Tanh: the compiler sends other activations to the host).
//
// Inputs X, W, R, and optionally B, sequence_lens (int32), initial_h, initial_c and P (LSTM
// peepholes); outputs Y and optionally Y_h, Y_c. Attributes: direction (forward, reverse,
// bidirectional), layout (0: X [seq, batch, in]; 1: [batch, seq, in]), clip (> 0: gate
// pre-activations are clipped to [-clip, clip]), input_forget (LSTM), linear_before_reset
// (GRU).
//
// The input's projection X W^T + Wb for every step and direction first (one pass over X),
// then the recurrences, one per (direction, row), in parallel: each row at its own position
// (a reversed row starts at its own last step), stopping where its sequence ends (its Y rows
// stay 0). A host step loop
// in numpy took 3-55 ms on the zoo's recurrent models where ONNX Runtime took 0.1-8.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <omp.h>

#include "kernels.h"

namespace ge {

namespace {

enum class Cell { kRnn, kGru, kLstm };

// y[j] = b[j] + sum_k x[k] * m[j * n + k] for j < rows: a row-major matrix times a vector,
// each dot product in sixteen partial sums (independent lanes the compiler vectorises:
// one zmm register where the CPU has AVX-512, below).
__attribute__((always_inline)) inline void matvec_body(const float* m, const float* x, const float* b, int64_t rows,
                                                       int64_t n, float* y) {
  for (int64_t j = 0; j < rows; ++j) {
    const float* row = m + j * n;
    float part[16] = {};
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
      for (int l = 0; l < 16; ++l) part[l] += row[k + l] * x[k + l];
    }
    float acc = 0.f;
    for (; k < n; ++k) acc += row[k] * x[k];
    for (int l = 0; l < 16; ++l) acc += part[l];
    y[j] = acc + (b ? b[j] : 0.f);
  }
}

void matvec_plain(const float* m, const float* x, const float* b, int64_t rows, int64_t n, float* y) {
  matvec_body(m, x, b, rows, n, y);
}

__attribute__((target("avx512f,fma"))) void matvec_avx512(const float* m, const float* x, const float* b,
                                                          int64_t rows, int64_t n, float* y) {
  matvec_body(m, x, b, rows, n, y);
}

using Matvec = void (*)(const float*, const float*, const float*, int64_t, int64_t, float*);

// exp(v) for a whole array without libm calls (which do not vectorise): 2^n * p(r) with
// v = n ln2 + r, |r| <= ln2 / 2, p a degree-6 Taylor polynomial (relative error < 2e-7),
// the argument clamped to [-87, 88] (NaN comes out as a number; gates never see one from
// finite weights). Then sigmoid = 1 / (1 + exp(-v)) and tanh = (1 - e) / (1 + e) * sign,
// e = exp(-2|v|): absolute errors ~1e-7.
__attribute__((always_inline)) inline float exp_body(float v) {
  v = std::min(std::max(v, -87.f), 88.f);
  const float t = v * 1.44269504f;
  const float n = (t + 12582912.f) - 12582912.f;  // round to nearest (the default mode)
  const float r = v - n * 0.693145752f - n * 1.42860677e-6f;
  float p = 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

__attribute__((always_inline)) inline void sigmoid_body(float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) v[i] = 1.f / (1.f + exp_body(-v[i]));
}

__attribute__((always_inline)) inline void tanh_body(float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float e = exp_body(-2.f * std::fabs(v[i]));
    const float t = (1.f - e) / (1.f + e);
    v[i] = v[i] < 0.f ? -t : t;
  }
}

void sigmoid_plain(float* v, int64_t n) { sigmoid_body(v, n); }
void tanh_plain(float* v, int64_t n) { tanh_body(v, n); }
__attribute__((target("avx512f,fma"))) void sigmoid_avx512(float* v, int64_t n) { sigmoid_body(v, n); }
__attribute__((target("avx512f,fma"))) void tanh_avx512(float* v, int64_t n) { tanh_body(v, n); }

using Activation = void (*)(float*, int64_t);

class RnnKernel : public Kernel {
 public:
  explicit RnnKernel(const KernelArgs& a) {
    const bool wide = cpu_has_avx512();
    mv_ = wide ? matvec_avx512 : matvec_plain;
    sigmoid_ = wide ? sigmoid_avx512 : sigmoid_plain;
    tanh_ = wide ? tanh_avx512 : tanh_plain;
    cell_ = a.op == "LSTM" ? Cell::kLstm : a.op == "GRU" ? Cell::kGru : Cell::kRnn;
    gates_ = cell_ == Cell::kLstm ? 4 : cell_ == Cell::kGru ? 3 : 1;
    const bool lstm = cell_ == Cell::kLstm;
    a.expect_inputs(3, lstm ? 8 : 6);
    a.expect_outputs(1, lstm ? 3 : 2);
    x_ = &a.in(0);
    w_ = &a.in(1);
    r_ = &a.in(2);
    b_ = a.opt_in(3);
    lens_ = a.opt_in(4);
    h0_ = a.opt_in(5);
    c0_ = lstm ? a.opt_in(6) : nullptr;
    p_ = lstm ? a.opt_in(7) : nullptr;
    y_ = &a.out(0);
    yh_ = a.outputs.size() > 1 ? &a.out(1) : nullptr;
    yc_ = a.outputs.size() > 2 ? &a.out(2) : nullptr;
    for (const TensorInfo* t : {x_, w_, r_, b_, h0_, c0_, p_, y_, yh_, yc_}) {
      if (t) a.expect_dtype(*t, DType::kFloat32, t->name.c_str());
    }
    if (lens_) a.expect_dtype(*lens_, DType::kInt32, "sequence_lens");
    const std::string dir = a.attr_str("direction", "forward");
    if (dir != "forward" && dir != "reverse" && dir != "bidirectional") invalid("unknown direction '", dir, "'");
    reverse_only_ = dir == "reverse";
    dirs_ = dir == "bidirectional" ? 2 : 1;
    layout_ = a.attr_int("layout", 0);
    if (layout_ != 0 && layout_ != 1) invalid("layout must be 0 or 1, got ", layout_);
    clip_ = a.has_attr("clip") ? static_cast<float>(a.attr_float("clip", 0.0)) : 0.f;
    if (a.has_attr("clip") && !(clip_ > 0.f)) invalid("clip must be positive, got ", clip_);
    input_forget_ = lstm && a.attr_int("input_forget", 0) != 0;
    linear_before_reset_ = cell_ == Cell::kGru && a.attr_int("linear_before_reset", 0) != 0;

    if (x_->rank() != 3) invalid("X must be 3-D, got ", shape_str(x_->shape));
    seq_ = x_->shape[layout_ ? 1 : 0];
    batch_ = x_->shape[layout_ ? 0 : 1];
    in_ = x_->shape[2];
    if (r_->rank() != 3) invalid("R must be 3-D, got ", shape_str(r_->shape));
    hidden_ = r_->shape[2];
    const int64_t gh = gates_ * hidden_;
    auto expect = [](const TensorInfo* t, const Shape& want, const char* what) {
      if (t && t->shape != want) invalid(what, " is ", shape_str(t->shape), ", expected ", shape_str(want));
    };
    expect(w_, {dirs_, gh, in_}, "W");
    expect(r_, {dirs_, gh, hidden_}, "R");
    expect(b_, {dirs_, 2 * gh}, "B");
    expect(lens_, {batch_}, "sequence_lens");
    const Shape state = layout_ ? Shape{batch_, dirs_, hidden_} : Shape{dirs_, batch_, hidden_};
    expect(h0_, state, "initial_h");
    expect(c0_, state, "initial_c");
    expect(p_, {dirs_, 3 * hidden_}, "P");
    expect(y_, layout_ ? Shape{batch_, seq_, dirs_, hidden_} : Shape{seq_, dirs_, batch_, hidden_}, "Y");
    expect(yh_, state, "Y_h");
    expect(yc_, state, "Y_c");
    // Scratch: the projection of every step, the gates of one row, and h, c per row.
    // Scratch: the projection of every step for every direction, and per (direction, row):
    // its gates, a temporary and h, c, the new h (the recurrences run in parallel).
    xw_floats_ = mul_checked(mul_checked(mul_checked(seq_, batch_), gh), dirs_);
    row_floats_ = add_checked(2 * gh, 3 * hidden_);
    work_ = add_checked(xw_floats_, mul_checked(mul_checked(dirs_, batch_), row_floats_));
  }

  size_t workspace_bytes() const override { return static_cast<size_t>(work_) * sizeof(float); }
  std::string impl() const override { return "rnn loop"; }

  Status run(ExecContext& ctx) override {
    const float* x = ctx.ptr<const float>(*x_);
    const int32_t* lens = lens_ ? ctx.ptr<const int32_t>(*lens_) : nullptr;
    for (int64_t bi = 0; bi < batch_; ++bi) {
      if (lens && (lens[bi] < 0 || lens[bi] > seq_)) {
        return Status::InvalidArgument(cat("sequence_lens[", bi, "] = ", lens[bi], " is outside [0, ", seq_, "]"));
      }
    }
    float* y = ctx.ptr<float>(*y_);
    std::fill(y, y + y_->numel, 0.f);
    float* ws = reinterpret_cast<float*>(ctx.workspace);
    const int64_t gh = gates_ * hidden_;
    for (int64_t d = 0; d < dirs_; ++d) {
      const float* w = ctx.ptr<const float>(*w_) + d * gh * in_;
      const float* wb = b_ ? ctx.ptr<const float>(*b_) + d * 2 * gh : nullptr;
      float* xw = ws + d * seq_ * batch_ * gh;
      for (int64_t t = 0; t < seq_; ++t) {
        for (int64_t b = 0; b < batch_; ++b) mv_(w, x_row(x, t, b), wb, gh, in_, xw + (t * batch_ + b) * gh);
      }
    }
    // Each (direction, row) recurrence is independent of the others: the lane's threads
    // share them (the two directions of one sequence too).
    const int64_t jobs = dirs_ * batch_;
    float* rows = ws + xw_floats_;
    if (jobs > 1 && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < jobs; ++j) recur(ctx, j / batch_, j % batch_, lens, y, ws, rows + j * row_floats_);
    } else {
      for (int64_t j = 0; j < jobs; ++j) recur(ctx, j / batch_, j % batch_, lens, y, ws, rows + j * row_floats_);
    }
    return Status::Ok();
  }

 private:
  // Element (t, b) of X, and the offsets of Y's and a state's rows, by layout.
  const float* x_row(const float* x, int64_t t, int64_t b) const {
    return x + (layout_ ? b * seq_ + t : t * batch_ + b) * in_;
  }
  int64_t y_row(int64_t t, int64_t d, int64_t b) const {
    return (layout_ ? (b * seq_ + t) * dirs_ + d : (t * dirs_ + d) * batch_ + b) * hidden_;
  }
  int64_t state_row(int64_t d, int64_t b) const { return (layout_ ? b * dirs_ + d : d * batch_ + b) * hidden_; }

  float clip(float v) const { return clip_ > 0.f ? std::min(std::max(v, -clip_), clip_) : v; }

  // The recurrence of row b in direction d; `scratch` is its own (row_floats_).
  void recur(ExecContext& ctx, int64_t d, int64_t b, const int32_t* lens, float* y, const float* ws,
             float* scratch) const {
    const int64_t h = hidden_, gh = gates_ * hidden_;
    const float* r = ctx.ptr<const float>(*r_) + d * gh * h;
    const float* rb = b_ ? ctx.ptr<const float>(*b_) + d * 2 * gh + gh : nullptr;
    const float* p = p_ ? ctx.ptr<const float>(*p_) + d * 3 * h : nullptr;
    const float* xw = ws + d * seq_ * batch_ * gh;
    float* g = scratch;   // the recurrent product, gh
    float* tmp = g + gh;  // GRU's candidate, LSTM's tanh(c), gh
    float* hb = tmp + gh;
    float* cb = hb + h;
    float* hn = cb + h;
    const int64_t s = state_row(d, b);
    if (h0_) {
      std::memcpy(hb, ctx.ptr<const float>(*h0_) + s, static_cast<size_t>(h) * sizeof(float));
    } else {
      std::fill(hb, hb + h, 0.f);
    }
    if (c0_) {
      std::memcpy(cb, ctx.ptr<const float>(*c0_) + s, static_cast<size_t>(h) * sizeof(float));
    } else {
      std::fill(cb, cb + h, 0.f);
    }
    const bool reverse = reverse_only_ || d == 1;
    const int64_t n = lens ? lens[b] : seq_;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t t = reverse ? n - 1 - k : k;
      step(xw + (t * batch_ + b) * gh, r, rb, p, hb, cb, g, tmp, hn);
      std::memcpy(hb, hn, static_cast<size_t>(h) * sizeof(float));
      std::memcpy(y + y_row(t, d, b), hn, static_cast<size_t>(h) * sizeof(float));
    }
    // A row whose sequence is empty has no last output: 0 (ONNX Runtime's answer).
    if (n == 0) {
      std::fill(hb, hb + h, 0.f);
      std::fill(cb, cb + h, 0.f);
    }
    if (yh_) std::memcpy(ctx.ptr<float>(*yh_) + s, hb, static_cast<size_t>(h) * sizeof(float));
    if (yc_) std::memcpy(ctx.ptr<float>(*yc_) + s, cb, static_cast<size_t>(h) * sizeof(float));
  }

  // One step of one row: xg the input's projection (with Wb), hb / cb the state (cb updated
  // in place), hn the new h. The gates' pre-activations are formed first, then each
  // activation runs over a whole gate at once (vectorised).
  void step(const float* xg, const float* r, const float* rb, const float* p, const float* hb, float* cb, float* g,
            float* tmp, float* hn) const {
    const int64_t h = hidden_;
    if (cell_ == Cell::kRnn) {
      mv_(r, hb, rb, h, h, g);
      for (int64_t j = 0; j < h; ++j) hn[j] = clip(xg[j] + g[j]);
      tanh_(hn, h);
      return;
    }
    if (cell_ == Cell::kGru) {
      // gates z, r, h: z and r from the full products; the candidate's recurrent product
      // before (linear_before_reset) or after the reset gate.
      mv_(r, hb, rb, 2 * h, h, g);
      for (int64_t j = 0; j < 2 * h; ++j) g[j] = clip(xg[j] + g[j]);
      sigmoid_(g, 2 * h);
      const float* z = g;
      const float* rg = g + h;
      const float* rh = r + 2 * h * h;
      const float* rbh = rb ? rb + 2 * h : nullptr;
      if (linear_before_reset_) {
        mv_(rh, hb, rbh, h, h, tmp);
        for (int64_t j = 0; j < h; ++j) tmp[j] = clip(xg[2 * h + j] + rg[j] * tmp[j]);
      } else {
        for (int64_t j = 0; j < h; ++j) hn[j] = rg[j] * hb[j];
        mv_(rh, hn, rbh, h, h, tmp);
        for (int64_t j = 0; j < h; ++j) tmp[j] = clip(xg[2 * h + j] + tmp[j]);
      }
      tanh_(tmp, h);
      for (int64_t j = 0; j < h; ++j) hn[j] = (1.f - z[j]) * tmp[j] + z[j] * hb[j];
      return;
    }
    // LSTM: gates i, o, f, c in g; peepholes P = [Pi, Po, Pf].
    mv_(r, hb, rb, 4 * h, h, g);
    float* gi = g;
    float* go = g + h;
    float* gf = g + 2 * h;
    float* gc = g + 3 * h;
    for (int64_t j = 0; j < h; ++j) {
      const float c = cb[j];
      gi[j] = clip(xg[j] + gi[j] + (p ? p[j] * c : 0.f));
      gf[j] = clip(xg[2 * h + j] + gf[j] + (p ? p[2 * h + j] * c : 0.f));
      gc[j] = clip(xg[3 * h + j] + gc[j]);
    }
    sigmoid_(gi, h);
    if (input_forget_) {
      for (int64_t j = 0; j < h; ++j) gf[j] = 1.f - gi[j];
    } else {
      sigmoid_(gf, h);
    }
    tanh_(gc, h);
    for (int64_t j = 0; j < h; ++j) {
      const float cn = gf[j] * cb[j] + gi[j] * gc[j];
      cb[j] = cn;
      go[j] = clip(xg[h + j] + go[j] + (p ? p[h + j] * cn : 0.f));
      tmp[j] = cn;
    }
    sigmoid_(go, h);
    tanh_(tmp, h);
    for (int64_t j = 0; j < h; ++j) hn[j] = go[j] * tmp[j];
  }

  Cell cell_;
  Matvec mv_ = matvec_plain;
  Activation sigmoid_ = sigmoid_plain, tanh_ = tanh_plain;
  int64_t gates_ = 1, dirs_ = 1, layout_ = 0, seq_ = 0, batch_ = 0, in_ = 0, hidden_ = 0;
  bool reverse_only_ = false, input_forget_ = false, linear_before_reset_ = false;
  float clip_ = 0.f;
  int64_t xw_floats_ = 0, row_floats_ = 0, work_ = 0;
  const TensorInfo *x_, *w_, *r_, *b_, *lens_, *h0_, *c0_, *p_, *y_, *yh_, *yc_;
};

}  // namespace

std::unique_ptr<Kernel> make_rnn(const KernelArgs& a) { return std::make_unique<RnnKernel>(a); }

}  // namespace ge
