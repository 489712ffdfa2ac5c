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
//
// Where one direction's R is too big for a core's L2 but a share of it is not (a hidden size
// of 320 to ~576 with 2 threads and L2 of 2 MiB), the threads instead split each direction's
// hidden units and go through the directions one after the other: each keeps its share of R
// in its own L2 across the steps instead of streaming all of R from L3 at every step (a
// bidirectional LSTM of 512 hidden units, 20 steps: 1.6 ms against 2.9 ms for the products
// alone), at two barriers per step.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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

  // Whether `threads` split each direction's hidden units (above): one direction's R does not
  // fit half of a core's L2, and a thread's share of it fits 1.5 L2s (beyond that the share
  // streams from L3 as well, and the barriers cost more than the smaller stream saves).
  bool split_columns(int threads) const {
    if (threads < 2 || hp_ / kPanel < threads) return false;
    const double r_dir = static_cast<double>(bytes_of(gates_ * hp_)) * static_cast<double>(hidden_);
    const double l2 = l2_bytes();
    return r_dir > l2 / 2 && r_dir / threads <= 1.5 * l2;
  }
  std::string impl() const override {
    return std::string("rnn panels ") + m_->name + (split_ran_.load() ? ", hidden units split over threads" : "");
  }

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
    if (split_columns(threads)) {
      split_ran_.store(true);
#pragma omp parallel num_threads(threads)
      {
        // Each thread its hidden units' panels of every gate, for the projection as for the
        // recurrence: a thread reads only the columns of xw it wrote (no barrier between).
        const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num(), hpan = hp_ / kPanel;
        const Slice share{hpan * t / nt, hpan * (t + 1) / nt, nt > 1};
        for (int64_t d = 0; d < dirs_; ++d) project_rows(ctx, d, 0, batch_, wpanels, xw, share);
        for (int64_t d = 0; d < dirs_; ++d) {
          recur(ctx, d, 0, batch_, lens, y, xw, panels, rows + d * batch_ * row_floats_, share);
        }
      }
      return Status::Ok();
    }
    auto job = [&](int64_t j) {
      const int64_t d = j / groups, g = j % groups;
      const int64_t b0 = batch_ * g / groups, b1 = batch_ * (g + 1) / groups;
      const Slice all{0, hp_ / kPanel, false};
      project_rows(ctx, d, b0, b1 - b0, wpanels, xw, all);
      recur(ctx, d, b0, b1 - b0, lens, y, xw, panels, rows + d * batch_ * row_floats_, all);
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

  // A core's L2 in bytes, as the C library reads it (1 MiB where it cannot).
  static double l2_bytes() {
    static const double bytes = [] {
      const long b = sysconf(_SC_LEVEL2_CACHE_SIZE);
      return b > 0 ? static_cast<double>(b) : static_cast<double>(1 << 20);
    }();
    return bytes;
  }

  // The hidden units a thread computes, as panels [p0, p1) of each gate (all of them: [0,
  // hp_ / 16)); `team`: other threads compute the others' at the same time (the recurrence
  // then waits for them at every step).
  struct Slice {
    int64_t p0, p1;
    bool team;
    int64_t j0() const { return p0 * kPanel; }
    int64_t len(int64_t hidden) const { return std::min(p1 * kPanel, hidden) - p0 * kPanel; }
  };

  static void sync(const Slice& s) {
    if (s.team) {
#pragma omp barrier
    }
  }

  // a [m, k] times gates [g0, g1)'s panels of the slice (`panels`: per gate hp_ / 16 panels of
  // k rows) into out's columns (gate q's at q * hp_), rows ldo apart.
  void gate_gemm(const float* a, int64_t lda, int64_t m, int64_t k, const float* panels, int64_t g0, int64_t g1,
                 const Slice& s, float* out, int64_t ldo) const {
    const int64_t hpan = hp_ / kPanel;
    if (s.p0 == 0 && s.p1 == hpan) {  // the gates' panels are contiguous: one call
      m_->gemm(a, lda, m, k, panels + g0 * hp_ * k, (g1 - g0) * hpan, out + g0 * hp_, ldo);
      return;
    }
    for (int64_t q = g0; q < g1; ++q) {
      m_->gemm(a, lda, m, k, panels + (q * hpan + s.p0) * k * kPanel, s.p1 - s.p0, out + q * hp_ + s.j0(), ldo);
    }
  }

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

  // xw's rows of batch rows [b0, b0 + nb) in direction d, the slice's columns: X W^T + Wb for
  // every step, on the job's own thread (no fork and join of a GEMM of its own before the
  // recurrences).
  void project_rows(ExecContext& ctx, int64_t d, int64_t b0, int64_t nb, const float* wpanels, float* xw,
                    const Slice& s) const {
    const float* x = ctx.ptr<const float>(*x_);
    const float* wd = wpanels + d * ldg_ * in_;
    float* out = xw + d * seq_ * batch_ * ldg_;
    if (layout_ == 0 && nb == batch_) {
      gate_gemm(x, in_, seq_ * batch_, in_, wd, 0, gates_, s, out, ldg_);
    } else if (layout_ == 0) {
      for (int64_t t = 0; t < seq_; ++t) {
        const int64_t r = x_row(t, b0);
        gate_gemm(x + r * in_, in_, nb, in_, wd, 0, gates_, s, out + r * ldg_, ldg_);
      }
    } else {
      for (int64_t b = b0; b < b0 + nb; ++b) {
        const int64_t r = x_row(0, b);
        gate_gemm(x + r * in_, in_, seq_, in_, wd, 0, gates_, s, out + r * ldg_, ldg_);
      }
    }
    if (!b_) return;
    const float* wb = ctx.ptr<const float>(*b_) + d * 2 * gates_ * hidden_;
    const int64_t j0 = s.j0(), j1 = j0 + s.len(hidden_);
    for (int64_t t = 0; t < seq_; ++t) {
      for (int64_t b = b0; b < b0 + nb; ++b) {
        float* o = out + x_row(t, b) * ldg_;
        for (int64_t q = 0; q < gates_; ++q) {
          for (int64_t j = j0; j < j1; ++j) o[q * hp_ + j] += wb[q * hidden_ + j];
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

  // The recurrence of rows [b0, b0 + nb) in direction d, the slice's hidden units. `scratch`
  // is the direction's per-row scratch (row_floats_ per batch row, laid out as arrays over
  // the batch). With a team, every step's products read the whole previous h: the threads
  // wait for each other before changing their part of it and after.
  void recur(ExecContext& ctx, int64_t d, int64_t b0, int64_t nb, const int32_t* lens, float* y, const float* xw,
             const float* panels, float* scratch, const Slice& sl) const {
    const int64_t h = hidden_, gh = gates_ * h, ldg = gates_ * hp_;
    const int64_t j0 = sl.j0(), n = sl.len(h);
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
      const int64_t b = b0 + i, s = state_row(d, b) + j0;
      float* hi = hs + i * h + j0;
      float* ci = cs + i * h + j0;
      if (h0_) {
        std::memcpy(hi, ctx.ptr<const float>(*h0_) + s, bytes_of(n));
      } else {
        std::fill(hi, hi + n, 0.f);
      }
      if (c0_) {
        std::memcpy(ci, ctx.ptr<const float>(*c0_) + s, bytes_of(n));
      } else {
        std::fill(ci, ci + n, 0.f);
      }
      std::fill(rh + i * h + j0, rh + i * h + j0 + n, 0.f);
      steps = std::max<int64_t>(steps, lens ? lens[b] : seq_);
    }
    sync(sl);
    const bool reverse = reverse_only_ || d == 1;
    const bool gru_after = cell_ == Cell::kGru && !linear_before_reset_;
    const float* rbj = rb ? rb + j0 : nullptr;
    const float* pj = p ? p + j0 : nullptr;
    for (int64_t k = 0; k < steps; ++k) {
      // GRU with the reset gate applied before its product: z and r first, the
      // candidate's product from r * h after.
      gate_gemm(hs, h, nb, h, rd, 0, gru_after ? 2 : gates_, sl, gs, ldg);
      sync(sl);  // every product has read h: each thread may now change its part
      if (gru_after) {
        for (int64_t i = 0; i < nb; ++i) {
          const int64_t b = b0 + i, len = lens ? lens[b] : seq_;
          if (k >= len) continue;
          const int64_t t = reverse ? len - 1 - k : k;
          float* zr = gs + i * ldg + j0;
          const float* xg = xwd + x_row(t, b) * ldg + j0;
          for (int64_t j = 0; j < n; ++j) {
            zr[j] = clip(xg[j] + zr[j] + (rbj ? rbj[j] : 0.f));
            zr[hp_ + j] = clip(xg[hp_ + j] + zr[hp_ + j] + (rbj ? rbj[h + j] : 0.f));
          }
          m_->sigmoid(zr, n);
          m_->sigmoid(zr + hp_, n);
          for (int64_t j = 0; j < n; ++j) rh[i * h + j0 + j] = zr[hp_ + j] * hs[i * h + j0 + j];
        }
        sync(sl);  // r * h whole
        gate_gemm(rh, h, nb, h, rd, 2, 3, sl, gs, ldg);
      }
      for (int64_t i = 0; i < nb; ++i) {
        const int64_t b = b0 + i, len = lens ? lens[b] : seq_;
        if (k >= len) continue;
        const int64_t t = reverse ? len - 1 - k : k;
        step(xwd + x_row(t, b) * ldg + j0, gs + i * ldg + j0, rbj, pj, hs + i * h + j0, cs + i * h + j0,
             tmp + i * h + j0, n);
        std::memcpy(y + y_row(t, d, b) + j0, hs + i * h + j0, bytes_of(n));
      }
      sync(sl);  // the new h whole before the next step's products
    }
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t b = b0 + i, s = state_row(d, b) + j0;
      float* hi = hs + i * h + j0;
      float* ci = cs + i * h + j0;
      // A row whose sequence is empty has no last output: 0 (ONNX Runtime's answer).
      if ((lens ? lens[b] : seq_) == 0) {
        std::fill(hi, hi + n, 0.f);
        std::fill(ci, ci + n, 0.f);
      }
      if (yh_) std::memcpy(ctx.ptr<float>(*yh_) + s, hi, bytes_of(n));
      if (yc_) std::memcpy(ctx.ptr<float>(*yc_) + s, ci, bytes_of(n));
    }
  }

  // One step of one row after its products, over n hidden units (all, or a slice: every
  // pointer then starts at the slice): xg the input's projection (with Wb) and g the products
  // of the previous h, gate q of both at q * hp_ (GRU's z and r already activated when the
  // reset comes first), rb and p the recurrent bias and peepholes (gate q at q * hidden_),
  // hb / cb the state, updated in place; tmp n floats.
  void step(const float* xg, float* g, const float* rb, const float* p, float* hb, float* cb, float* tmp,
            int64_t n) const {
    const int64_t h = hidden_;
    if (cell_ == Cell::kRnn) {
      for (int64_t j = 0; j < n; ++j) hb[j] = clip(xg[j] + g[j] + (rb ? rb[j] : 0.f));
      m_->tanh(hb, n);
      return;
    }
    if (cell_ == Cell::kGru) {
      float* z = g;
      float* rg = g + hp_;
      float* cand = g + 2 * hp_;
      if (linear_before_reset_) {
        for (int64_t j = 0; j < n; ++j) {
          z[j] = clip(xg[j] + z[j] + (rb ? rb[j] : 0.f));
          rg[j] = clip(xg[hp_ + j] + rg[j] + (rb ? rb[h + j] : 0.f));
        }
        m_->sigmoid(z, n);
        m_->sigmoid(rg, n);
        for (int64_t j = 0; j < n; ++j) {
          cand[j] = clip(xg[2 * hp_ + j] + rg[j] * (cand[j] + (rb ? rb[2 * h + j] : 0.f)));
        }
      } else {
        for (int64_t j = 0; j < n; ++j) cand[j] = clip(xg[2 * hp_ + j] + cand[j] + (rb ? rb[2 * h + j] : 0.f));
      }
      m_->tanh(cand, n);
      for (int64_t j = 0; j < n; ++j) hb[j] = (1.f - z[j]) * cand[j] + z[j] * hb[j];
      return;
    }
    // LSTM: gates i, o, f, c at q * hp_ in g.
    for (int64_t q = 0; q < 4; ++q) {
      float* gq = g + q * hp_;
      for (int64_t j = 0; j < n; ++j) gq[j] = xg[q * hp_ + j] + gq[j] + (rb ? rb[q * h + j] : 0.f);
    }
    lstm_cell(*m_, g, hp_, p, h, cb, hb, tmp, n, clip_, input_forget_);
  }

  const RnnMath* m_;
  Cell cell_;
  int64_t gates_ = 1, dirs_ = 1, layout_ = 0, seq_ = 0, batch_ = 0, in_ = 0, hidden_ = 0, hp_ = 0;
  bool reverse_only_ = false, input_forget_ = false, linear_before_reset_ = false;
  float clip_ = 0.f;
  std::shared_ptr<AlignedBuffer> packed_r_, packed_w_;  // R, W in panels, when constant
  mutable std::atomic<bool> split_ran_{false};  // a run split the hidden units (impl() says so)
  WorkspacePlan plan_;
  size_t xw_at_ = 0, packed_r_at_ = 0, packed_w_at_ = 0, rows_at_ = 0;
  int64_t ldg_ = 0, r_floats_ = 0, w_floats_ = 0, row_floats_ = 0;
  const TensorInfo *x_, *w_, *r_, *b_, *lens_, *h0_, *c0_, *p_, *y_, *yh_, *yc_;
};

}  // namespace

std::unique_ptr<Kernel> make_rnn(const KernelArgs& a) { return std::make_unique<RnnKernel>(a); }

}  // namespace ge
