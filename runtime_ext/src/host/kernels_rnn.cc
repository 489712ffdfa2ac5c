// RNN, GRU and LSTM (ONNX semantics), float32, with their default activations (Tanh; Sigmoid
// and Tanh; Sigmoid, Tanh and Tanh: the compiler sends other activations to the host).
//
// Inputs X, W, R, and optionally B, sequence_lens (int32), initial_h, initial_c and P (LSTM
// peepholes); outputs Y and optionally Y_h, Y_c. Attributes: direction (forward, reverse,
// bidirectional), layout (0: X [seq, batch, in]; 1: [batch, seq, in]), clip (> 0: gate
// pre-activations are clipped to [-clip, clip]), input_forget (LSTM), linear_before_reset
// (GRU).
//
// Jobs run in parallel: the directions, and where the lane has more threads than directions
// the batch's rows in groups. Each job first projects its rows' input for every step, X W^T
// + Wb, then steps its recurrence with one small product H [rows, hidden] x R^T per step for
// all its rows (rnn_math.h; W and R packed into panels once, at load when constant), so R
// is read once per step, not once per row. Each row steps at its own position (a reversed
// row starts at its own last step) and stops where its sequence ends (its Y rows stay 0).
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "buffer.h"
#include "dnnl_util.h"
#include "kernels.h"
#include "rnn_math.h"

namespace ge {

namespace {

enum class Cell { kRnn, kGru, kLstm };

class RnnKernel : public Kernel {
 public:
  explicit RnnKernel(const KernelArgs& a) : m_(&rnn_math(cpu_has_avx512())) {
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
    const int64_t gh = mul_checked(gates_, hidden_);
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

    // Each gate's block of R^T padded to whole panels, so that a gate's products start on
    // a panel (GRU's candidate is a product of its own).
    hp_ = mul_checked(panels_for(hidden_), kPanel);
    ldg_ = mul_checked(gates_, hp_);
    r_floats_ = mul_checked(mul_checked(dirs_, ldg_), hidden_);
    w_floats_ = mul_checked(mul_checked(dirs_, ldg_), in_);
    if (r_->constant()) {
      packed_r_ = std::make_shared<AlignedBuffer>(bytes_of(r_floats_), false);
      pack_gates(r_->const_ptr<float>(), hidden_, reinterpret_cast<float*>(packed_r_->data()));
    }
    if (w_->constant()) {
      packed_w_ = std::make_shared<AlignedBuffer>(bytes_of(w_floats_), false);
      pack_gates(w_->const_ptr<float>(), in_, reinterpret_cast<float*>(packed_w_->data()));
    }
    // Scratch: the projection for every step and direction (its gates padded as the
    // products'), W and R packed (when not constant), and per (direction, row) the state h,
    // c, GRU's r * h, a temporary and the products (gates_ * hp_).
    xw_at_ = plan_.add(bytes_of(mul_checked(mul_checked(mul_checked(seq_, batch_), ldg_), dirs_)));
    if (!packed_r_) packed_r_at_ = plan_.add(bytes_of(r_floats_));
    if (!packed_w_) packed_w_at_ = plan_.add(bytes_of(w_floats_));
    row_floats_ = add_checked(mul_checked(gates_, hp_), mul_checked(4, hidden_));
    rows_at_ = plan_.add(bytes_of(mul_checked(mul_checked(dirs_, batch_), row_floats_)));
  }

  size_t workspace_bytes() const override { return plan_.total(); }
  std::string impl() const override { return std::string("rnn panels ") + m_->name; }

  Status run(ExecContext& ctx) override {
    const int32_t* lens = lens_ ? ctx.ptr<const int32_t>(*lens_) : nullptr;
    for (int64_t bi = 0; bi < batch_; ++bi) {
      if (lens && (lens[bi] < 0 || lens[bi] > seq_)) {
        return Status::InvalidArgument(cat("sequence_lens[", bi, "] = ", lens[bi], " is outside [0, ", seq_, "]"));
      }
    }
    float* y = ctx.ptr<float>(*y_);
    std::fill(y, y + y_->numel, 0.f);
    float* xw = reinterpret_cast<float*>(ctx.workspace + xw_at_);
    const float* panels = packed(ctx, packed_r_, packed_r_at_, *r_, hidden_);
    const float* wpanels = packed(ctx, packed_w_, packed_w_at_, *w_, in_);
    // Jobs: each direction's rows in `groups` groups. A group's rows share one product per
    // step; more groups than directions only when the lane has threads to spare (then each
    // reads R once per step on its own core rather than waiting at a barrier every step).
    const int threads = omp_get_max_threads();
    const int64_t groups = std::min<int64_t>(batch_, std::max<int64_t>(1, threads / dirs_));
    const int64_t jobs = dirs_ * groups;
    float* rows = reinterpret_cast<float*>(ctx.workspace + rows_at_);
    auto job = [&](int64_t j) {
      const int64_t d = j / groups, g = j % groups;
      const int64_t b0 = batch_ * g / groups, b1 = batch_ * (g + 1) / groups;
      project_rows(ctx, d, b0, b1 - b0, wpanels, xw);
      recur(ctx, d, b0, b1 - b0, lens, y, xw, panels, rows + d * batch_ * row_floats_);
    };
    if (jobs > 1 && threads > 1) {
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < jobs; ++j) job(j);
    } else {
      for (int64_t j = 0; j < jobs; ++j) job(j);
    }
    return Status::Ok();
  }

 private:
  static size_t bytes_of(int64_t floats) { return static_cast<size_t>(floats) * sizeof(float); }

  // W or R [dirs, gates * hidden, k] into panels: per direction, gate after gate, each
  // gate's hidden outputs padded to hp_.
  void pack_gates(const float* m, int64_t k, float* out) const {
    const int64_t h = hidden_;
    for (int64_t d = 0; d < dirs_; ++d) {
      for (int64_t g = 0; g < gates_; ++g) {
        pack_panels(m + d * gates_ * h * k, g * h, h, k, out + (d * gates_ + g) * hp_ * k);
      }
    }
  }

  // The panels of a constant weight (packed at load), or packed into the workspace now.
  const float* packed(ExecContext& ctx, const std::shared_ptr<AlignedBuffer>& at_load, size_t at, const TensorInfo& t,
                      int64_t k) const {
    if (at_load) return reinterpret_cast<const float*>(at_load->data());
    float* to = reinterpret_cast<float*>(ctx.workspace + at);
    pack_gates(ctx.ptr<const float>(t), k, to);
    return to;
  }

  // xw's rows of batch rows [b0, b0 + nb) in direction d: X W^T + Wb for every step, on the
  // job's own thread (no fork and join of a GEMM of its own before the recurrences).
  void project_rows(ExecContext& ctx, int64_t d, int64_t b0, int64_t nb, const float* wpanels, float* xw) const {
    const float* x = ctx.ptr<const float>(*x_);
    const float* wd = wpanels + d * ldg_ * in_;
    float* out = xw + d * seq_ * batch_ * ldg_;
    const int64_t np = ldg_ / kPanel;
    if (layout_ == 0 && nb == batch_) {
      m_->gemm(x, in_, seq_ * batch_, in_, wd, np, out, ldg_);
    } else if (layout_ == 0) {
      for (int64_t t = 0; t < seq_; ++t) {
        const int64_t r = x_row(t, b0);
        m_->gemm(x + r * in_, in_, nb, in_, wd, np, out + r * ldg_, ldg_);
      }
    } else {
      for (int64_t b = b0; b < b0 + nb; ++b) {
        const int64_t r = x_row(0, b);
        m_->gemm(x + r * in_, in_, seq_, in_, wd, np, out + r * ldg_, ldg_);
      }
    }
    if (!b_) return;
    const float* wb = ctx.ptr<const float>(*b_) + d * 2 * gates_ * hidden_;
    for (int64_t t = 0; t < seq_; ++t) {
      for (int64_t b = b0; b < b0 + nb; ++b) {
        float* o = out + x_row(t, b) * ldg_;
        for (int64_t q = 0; q < gates_; ++q) {
          for (int64_t j = 0; j < hidden_; ++j) o[q * hp_ + j] += wb[q * hidden_ + j];
        }
      }
    }
  }

  // X's (and xw's) row of step t, batch row b; the offsets of Y's and a state's rows.
  int64_t x_row(int64_t t, int64_t b) const { return layout_ ? b * seq_ + t : t * batch_ + b; }
  int64_t y_row(int64_t t, int64_t d, int64_t b) const {
    return (layout_ ? (b * seq_ + t) * dirs_ + d : (t * dirs_ + d) * batch_ + b) * hidden_;
  }
  int64_t state_row(int64_t d, int64_t b) const { return (layout_ ? b * dirs_ + d : d * batch_ + b) * hidden_; }

  float clip(float v) const { return clip_ > 0.f ? std::min(std::max(v, -clip_), clip_) : v; }

  // The recurrence of rows [b0, b0 + nb) in direction d. `scratch` is the direction's
  // per-row scratch (row_floats_ per batch row, laid out as arrays over the batch).
  void recur(ExecContext& ctx, int64_t d, int64_t b0, int64_t nb, const int32_t* lens, float* y, const float* xw,
             const float* panels, float* scratch) const {
    const int64_t h = hidden_, gh = gates_ * h, ldg = gates_ * hp_;
    const float* rd = panels + d * gates_ * hp_ * h;
    const float* rb = b_ ? ctx.ptr<const float>(*b_) + d * 2 * gh + gh : nullptr;
    const float* p = p_ ? ctx.ptr<const float>(*p_) + d * 3 * h : nullptr;
    const float* xwd = xw + d * seq_ * batch_ * ldg;
    float* hs = scratch + b0 * h;                     // [nb, h]: the products' left operand
    float* cs = scratch + batch_ * h + b0 * h;        // [nb, h]
    float* rh = scratch + 2 * batch_ * h + b0 * h;    // [nb, h]: GRU's r * h
    float* tmp = scratch + 3 * batch_ * h + b0 * h;   // [nb, h]
    float* gs = scratch + 4 * batch_ * h + b0 * ldg;  // [nb, ldg]: the products
    int64_t steps = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t b = b0 + i, s = state_row(d, b);
      if (h0_) {
        std::memcpy(hs + i * h, ctx.ptr<const float>(*h0_) + s, bytes_of(h));
      } else {
        std::fill(hs + i * h, hs + (i + 1) * h, 0.f);
      }
      if (c0_) {
        std::memcpy(cs + i * h, ctx.ptr<const float>(*c0_) + s, bytes_of(h));
      } else {
        std::fill(cs + i * h, cs + (i + 1) * h, 0.f);
      }
      std::fill(rh + i * h, rh + (i + 1) * h, 0.f);
      steps = std::max<int64_t>(steps, lens ? lens[b] : seq_);
    }
    const bool reverse = reverse_only_ || d == 1;
    const bool gru_after = cell_ == Cell::kGru && !linear_before_reset_;
    for (int64_t k = 0; k < steps; ++k) {
      // GRU with the reset gate applied before its product: z and r first, the
      // candidate's product from r * h after.
      m_->gemm(hs, h, nb, h, rd, (gru_after ? 2 : gates_) * hp_ / kPanel, gs, ldg);
      if (gru_after) {
        for (int64_t i = 0; i < nb; ++i) {
          const int64_t b = b0 + i, n = lens ? lens[b] : seq_;
          if (k >= n) continue;
          const int64_t t = reverse ? n - 1 - k : k;
          float* zr = gs + i * ldg;
          const float* xg = xwd + x_row(t, b) * ldg;
          for (int64_t j = 0; j < h; ++j) {
            zr[j] = clip(xg[j] + zr[j] + (rb ? rb[j] : 0.f));
            zr[hp_ + j] = clip(xg[hp_ + j] + zr[hp_ + j] + (rb ? rb[h + j] : 0.f));
          }
          m_->sigmoid(zr, h);
          m_->sigmoid(zr + hp_, h);
          for (int64_t j = 0; j < h; ++j) rh[i * h + j] = zr[hp_ + j] * hs[i * h + j];
        }
        m_->gemm(rh, h, nb, h, rd + 2 * hp_ * h, hp_ / kPanel, gs + 2 * hp_, ldg);
      }
      for (int64_t i = 0; i < nb; ++i) {
        const int64_t b = b0 + i, n = lens ? lens[b] : seq_;
        if (k >= n) continue;
        const int64_t t = reverse ? n - 1 - k : k;
        step(xwd + x_row(t, b) * ldg, gs + i * ldg, rb, p, hs + i * h, cs + i * h, tmp + i * h);
        std::memcpy(y + y_row(t, d, b), hs + i * h, bytes_of(h));
      }
    }
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t b = b0 + i, s = state_row(d, b);
      // A row whose sequence is empty has no last output: 0 (ONNX Runtime's answer).
      if ((lens ? lens[b] : seq_) == 0) {
        std::fill(hs + i * h, hs + (i + 1) * h, 0.f);
        std::fill(cs + i * h, cs + (i + 1) * h, 0.f);
      }
      if (yh_) std::memcpy(ctx.ptr<float>(*yh_) + s, hs + i * h, bytes_of(h));
      if (yc_) std::memcpy(ctx.ptr<float>(*yc_) + s, cs + i * h, bytes_of(h));
    }
  }

  // One step of one row after its products: xg the input's projection (with Wb) and g the
  // products of the previous h, gate q of both at q * hp_ (GRU's z and r already activated when
  // the reset comes first), hb / cb the state, updated in place; tmp h floats.
  void step(const float* xg, float* g, const float* rb, const float* p, float* hb, float* cb, float* tmp) const {
    const int64_t h = hidden_;
    if (cell_ == Cell::kRnn) {
      for (int64_t j = 0; j < h; ++j) hb[j] = clip(xg[j] + g[j] + (rb ? rb[j] : 0.f));
      m_->tanh(hb, h);
      return;
    }
    if (cell_ == Cell::kGru) {
      float* z = g;
      float* rg = g + hp_;
      float* cand = g + 2 * hp_;
      if (linear_before_reset_) {
        for (int64_t j = 0; j < h; ++j) {
          z[j] = clip(xg[j] + z[j] + (rb ? rb[j] : 0.f));
          rg[j] = clip(xg[hp_ + j] + rg[j] + (rb ? rb[h + j] : 0.f));
        }
        m_->sigmoid(z, h);
        m_->sigmoid(rg, h);
        for (int64_t j = 0; j < h; ++j) {
          cand[j] = clip(xg[2 * hp_ + j] + rg[j] * (cand[j] + (rb ? rb[2 * h + j] : 0.f)));
        }
      } else {
        for (int64_t j = 0; j < h; ++j) cand[j] = clip(xg[2 * hp_ + j] + cand[j] + (rb ? rb[2 * h + j] : 0.f));
      }
      m_->tanh(cand, h);
      for (int64_t j = 0; j < h; ++j) hb[j] = (1.f - z[j]) * cand[j] + z[j] * hb[j];
      return;
    }
    // LSTM: gates i, o, f, c at q * hp_ in g.
    for (int64_t q = 0; q < 4; ++q) {
      float* gq = g + q * hp_;
      for (int64_t j = 0; j < h; ++j) gq[j] = xg[q * hp_ + j] + gq[j] + (rb ? rb[q * h + j] : 0.f);
    }
    lstm_cell(*m_, g, hp_, p, cb, hb, tmp, h, clip_, input_forget_);
  }

  const RnnMath* m_;
  Cell cell_;
  int64_t gates_ = 1, dirs_ = 1, layout_ = 0, seq_ = 0, batch_ = 0, in_ = 0, hidden_ = 0, hp_ = 0;
  bool reverse_only_ = false, input_forget_ = false, linear_before_reset_ = false;
  float clip_ = 0.f;
  std::shared_ptr<AlignedBuffer> packed_r_, packed_w_;  // R, W in panels, when constant
  WorkspacePlan plan_;
  size_t xw_at_ = 0, packed_r_at_ = 0, packed_w_at_ = 0, rows_at_ = 0;
  int64_t ldg_ = 0, r_floats_ = 0, w_floats_ = 0, row_floats_ = 0;
  const TensorInfo *x_, *w_, *r_, *b_, *lens_, *h0_, *c0_, *p_, *y_, *yh_, *yc_;
};

}  // namespace

std::unique_ptr<Kernel> make_rnn(const KernelArgs& a) { return std::make_unique<RnnKernel>(a); }

}  // namespace ge
