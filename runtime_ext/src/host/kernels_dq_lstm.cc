// com.microsoft.DynamicQuantizeLSTM: an LSTM (default activations) whose weights W [dirs, in,
// 4 hidden] and R [dirs, hidden, 4 hidden] are int8 with a scale and zero point per direction
// or per output column, and whose products quantize their left operand to uint8 on the fly,
// ONNX Runtime's arithmetic as engine/ops/contrib_ms.py implements it:
//   - X of every step together (one range over the whole input), one product per direction;
//   - the hidden state per step and per sequence of the batch (each row its own range);
//   - each product's sums exact in int32 (qgemm_u8s8.h), then float(sum) * (a_scale *
//     w_scale[column]); the gates' pre-activations (X product + R product) + (Wb + Rb),
//     clipped, then the peepholes and the LSTM cell of the float kernel (rnn_math.h).
// Rows of a direction share each step's product (every row still has its own scale and zero
// point: they enter after the integer sums); the directions, and the rows in groups on spare
// threads, run in parallel.
// sequence_lens shorter than the sequence are refused at run time, as the reference does.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "buffer.h"
#include "dnnl_util.h"
#include "kernels.h"
#include "qgemm_u8s8.h"
#include "quant_u8.h"
#include "rnn_math.h"

namespace ge {

namespace {

// Direction d's packed weight [k, 4 hidden] with the zero points and column sums the
// products' corrections need and the scales of their float results.
struct QWeight {
  std::shared_ptr<AlignedBuffer> panels;  // [dirs] x qpanel_bytes(k, n)
  std::vector<int32_t> zero, colsum;      // [dirs, n]
  std::vector<float> scale;               // [dirs, n]
  int64_t k = 0, n = 0, bytes = 0;

  void load(const KernelArgs& a, int64_t dirs, size_t wi, size_t si, size_t zi, const char* what) {
    const TensorInfo& w = a.in(wi);
    const TensorInfo& s = a.in(si);
    const TensorInfo& z = a.in(zi);
    a.expect_dtype(w, DType::kInt8, what);
    a.expect_dtype(s, DType::kFloat32, "a weight scale");
    a.expect_dtype(z, DType::kInt8, "a weight zero point");
    if (!w.constant() || !s.constant() || !z.constant()) invalid(what, ", its scale and zero point must be constants");
    if (w.rank() != 3 || w.shape[0] != dirs) invalid(what, " is ", shape_str(w.shape), ", expected [", dirs, ", k, n]");
    k = w.shape[1];
    n = w.shape[2];
    // int32 sums stay exact: |sum (a - za)(w - zw)| <= k * 255 * 255.
    if (k > 32768) invalid(what, " has ", k, " rows; at most 32768 keep the int32 sums exact");
    for (const TensorInfo* t : {&s, &z}) {
      if (t->numel != dirs && t->numel != dirs * n) {
        invalid(t->name, " has ", t->numel, " values; expected ", dirs, " or ", dirs * n);
      }
    }
    bytes = qpanel_bytes(k, n);
    panels = std::make_shared<AlignedBuffer>(static_cast<size_t>(mul_checked(dirs, bytes)), false);
    zero.resize(dirs * n);
    colsum.resize(dirs * n);
    scale.resize(dirs * n);
    const int8_t* wd = w.const_ptr<int8_t>();
    for (int64_t d = 0; d < dirs; ++d) {
      pack_qpanels(wd + d * k * n, n, k, n, reinterpret_cast<int8_t*>(panels->data()) + d * bytes);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t at = s.numel == dirs ? d : d * n + j;
        zero[d * n + j] = z.const_ptr<int8_t>()[at];
        scale[d * n + j] = s.const_ptr<float>()[at];
        int32_t sum = 0;
        for (int64_t p = 0; p < k; ++p) sum += wd[(d * k + p) * n + j];
        colsum[d * n + j] = sum;
      }
    }
  }

  const int8_t* of(int64_t d) const { return reinterpret_cast<const int8_t*>(panels->data()) + d * bytes; }

  // out[j] (+)= float(sum_p (a_p - za)(w_pj - zw_j)) * (a_scale * w_scale_j) from the raw
  // sums acc = sum_p a_p w_pj and asum = sum_p a_p.
  void finish(int64_t d, const int32_t* acc, int32_t asum, U8Params ap, bool add, float* out) const {
    const int32_t za = static_cast<int32_t>(ap.zero_point);
    const int32_t* zw = zero.data() + d * n;
    const int32_t* cs = colsum.data() + d * n;
    const float* ws = scale.data() + d * n;
    for (int64_t j = 0; j < n; ++j) {
      const int32_t exact = acc[j] - zw[j] * asum - za * cs[j] + static_cast<int32_t>(k) * za * zw[j];
      const float v = static_cast<float>(exact) * (ap.scale * ws[j]);
      out[j] = add ? out[j] + v : v;
    }
  }
};

int64_t round4(int64_t k) { return (k + 3) / 4 * 4; }

class DqLstmKernel : public Kernel {
 public:
  explicit DqLstmKernel(const KernelArgs& a) : wide_(cpu_has_avx512()), m_(&rnn_math(wide_)), q_(&qgemm_u8s8()) {
    a.expect_inputs(12, 12);
    a.expect_outputs(1, 3);
    x_ = &a.in(0);
    b_ = a.opt_in(3);
    lens_ = a.opt_in(4);
    h0_ = a.opt_in(5);
    c0_ = a.opt_in(6);
    p_ = a.opt_in(7);
    y_ = &a.out(0);
    yh_ = a.outputs.size() > 1 ? &a.out(1) : nullptr;
    yc_ = a.outputs.size() > 2 ? &a.out(2) : nullptr;
    for (const TensorInfo* t : {x_, b_, h0_, c0_, p_, y_, yh_, yc_}) {
      if (t) a.expect_dtype(*t, DType::kFloat32, t->name.c_str());
    }
    if (lens_) a.expect_dtype(*lens_, DType::kInt32, "sequence_lens");
    const std::string dir = a.attr_str("direction", "forward");
    if (dir != "forward" && dir != "reverse" && dir != "bidirectional") invalid("unknown direction '", dir, "'");
    reverse_only_ = dir == "reverse";
    dirs_ = dir == "bidirectional" ? 2 : 1;
    clip_ = a.has_attr("clip") ? static_cast<float>(a.attr_float("clip", 0.0)) : 0.f;
    if (a.has_attr("clip") && !(clip_ > 0.f)) invalid("clip must be positive, got ", clip_);
    input_forget_ = a.attr_int("input_forget", 0) != 0;
    if (x_->rank() != 3) invalid("X must be 3-D, got ", shape_str(x_->shape));
    seq_ = x_->shape[0];
    batch_ = x_->shape[1];
    in_ = x_->shape[2];
    w_.load(a, dirs_, 1, 8, 9, "W");
    r_.load(a, dirs_, 2, 10, 11, "R");
    hidden_ = r_.k;
    const int64_t gh = mul_checked(4, hidden_);
    if (w_.k != in_ || w_.n != gh || r_.n != gh) {
      invalid("W ", w_.k, "x", w_.n, " and R ", r_.k, "x", r_.n, " do not fit X's ", in_, " inputs and ",
              hidden_, " hidden");
    }
    auto expect = [](const TensorInfo* t, const Shape& want, const char* what) {
      if (t && t->shape != want) invalid(what, " is ", shape_str(t->shape), ", expected ", shape_str(want));
    };
    const Shape state{dirs_, batch_, hidden_};
    expect(b_, {dirs_, 2 * gh}, "B");
    expect(lens_, {batch_}, "sequence_lens");
    expect(h0_, state, "initial_h");
    expect(c0_, state, "initial_c");
    expect(p_, {dirs_, 3 * hidden_}, "P");
    expect(y_, {seq_, dirs_, batch_, hidden_}, "Y");
    expect(yh_, state, "Y_h");
    expect(yc_, state, "Y_c");
    ldc_ = mul_checked(panels_for(gh), kPanel);
    const int64_t rows = mul_checked(seq_, batch_), db = mul_checked(dirs_, batch_);
    auto floats = [](int64_t n) { return static_cast<size_t>(n) * sizeof(float); };
    qx_at_ = plan_.add(static_cast<size_t>(mul_checked(rows, round4(in_))));
    qsum_at_ = plan_.add(floats(rows));
    xw_at_ = plan_.add(floats(mul_checked(mul_checked(dirs_, rows), gh)));
    acc_at_ = plan_.add(floats(mul_checked(std::max(rows, db), ldc_)));  // int32 sums
    bias_at_ = plan_.add(floats(mul_checked(dirs_, gh)));
    // per (direction, row): h, c, tmp, the gates, the quantized h
    row_floats_ = add_checked(mul_checked(3, hidden_), gh);
    rows_at_ = plan_.add(floats(mul_checked(db, row_floats_)));
    qh_at_ = plan_.add(static_cast<size_t>(mul_checked(db, round4(hidden_))));
  }

  size_t workspace_bytes() const override { return plan_.total(); }
  std::string impl() const override { return std::string("dq-lstm ") + q_->name; }

  Status run(ExecContext& ctx) override {
    if (lens_) {
      const int32_t* lens = ctx.ptr<const int32_t>(*lens_);
      for (int64_t b = 0; b < batch_; ++b) {
        if (lens[b] != seq_) {
          return Status::InvalidArgument(cat("sequence_lens[", b, "] = ", lens[b], ": DynamicQuantizeLSTM runs ",
                                             "whole sequences (", seq_, ") only"));
        }
      }
    }
    uint8_t* ws = ctx.workspace;
    float* xw = reinterpret_cast<float*>(ws + xw_at_);
    const int64_t gh = 4 * hidden_, rows = seq_ * batch_;
    project(ctx, xw);
    // Wb + Rb, added after the two products (ONNX Runtime's order)
    float* bias = reinterpret_cast<float*>(ws + bias_at_);
    const float* wrb = b_ ? ctx.ptr<const float>(*b_) : nullptr;
    for (int64_t d = 0; d < dirs_; ++d) {
      for (int64_t j = 0; j < gh; ++j) bias[d * gh + j] = wrb ? wrb[d * 2 * gh + j] + wrb[d * 2 * gh + gh + j] : 0.f;
    }
    // Jobs as in kernels_rnn.cc: the directions, and the batch's rows in groups where the
    // lane has threads to spare (each row's quantization is its own either way).
    const int threads = omp_get_max_threads();
    const int64_t groups = std::min<int64_t>(batch_, std::max<int64_t>(1, threads / dirs_));
    const int64_t jobs = dirs_ * groups;
    auto job = [&](int64_t j) {
      const int64_t d = j / groups, g = j % groups;
      const int64_t b0 = batch_ * g / groups, b1 = batch_ * (g + 1) / groups;
      recur(ctx, d, b0, b1, xw + d * rows * gh, bias + d * gh);
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
  // xw[d] [seq * batch, 4 hidden] = X W[d] with X quantized once over all its steps.
  void project(ExecContext& ctx, float* xw) const {
    const int64_t rows = seq_ * batch_, lda = round4(in_), gh = 4 * hidden_;
    const float* x = ctx.ptr<const float>(*x_);
    uint8_t* qx = ctx.workspace + qx_at_;
    int32_t* qsum = reinterpret_cast<int32_t*>(ctx.workspace + qsum_at_);
    int32_t* acc = reinterpret_cast<int32_t*>(ctx.workspace + acc_at_);
    const U8Params xp = u8_params(x, rows * in_, wide_);
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t* q = qx + r * lda;
      u8_quantize(x + r * in_, in_, xp, q, wide_);
      std::fill(q + in_, q + lda, uint8_t{0});
      int32_t s = 0;
      for (int64_t p = 0; p < in_; ++p) s += q[p];
      qsum[r] = s;
    }
    // Blocks of rows in parallel; each direction's product in turn.
    constexpr int64_t kBlock = 8;
    const int64_t blocks = (rows + kBlock - 1) / kBlock;
    for (int64_t d = 0; d < dirs_; ++d) {
#pragma omp parallel for schedule(static) if (blocks > 1)
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t r0 = blk * kBlock, m = std::min(kBlock, rows - r0);
        q_->gemm(qx + r0 * lda, lda, m, in_, w_.of(d), ldc_ / kPanel, acc + r0 * ldc_, ldc_);
        for (int64_t r = r0; r < r0 + m; ++r) {
          w_.finish(d, acc + r * ldc_, qsum[r], xp, false, xw + (d * rows + r) * gh);
        }
      }
    }
  }

  // The recurrence of batch rows [b0, b1) in direction d.
  void recur(ExecContext& ctx, int64_t d, int64_t b0, int64_t b1, const float* xw, const float* bias) const {
    const int64_t h = hidden_, gh = 4 * h, lda = round4(h);
    float* scratch = reinterpret_cast<float*>(ctx.workspace + rows_at_) + d * batch_ * row_floats_;
    uint8_t* qh = ctx.workspace + qh_at_ + d * batch_ * lda;
    int32_t* acc = reinterpret_cast<int32_t*>(ctx.workspace + acc_at_) + d * batch_ * ldc_;
    const float* p = p_ ? ctx.ptr<const float>(*p_) + d * 3 * h : nullptr;
    float* y = ctx.ptr<float>(*y_);
    for (int64_t b = b0; b < b1; ++b) {
      float* hb = scratch + b * row_floats_;
      float* cb = hb + h;
      const int64_t s = (d * batch_ + b) * h;
      std::fill(hb, hb + 2 * h, 0.f);
      if (h0_) std::memcpy(hb, ctx.ptr<const float>(*h0_) + s, h * sizeof(float));
      if (c0_) std::memcpy(cb, ctx.ptr<const float>(*c0_) + s, h * sizeof(float));
      std::fill(qh + b * lda + h, qh + (b + 1) * lda, uint8_t{0});
    }
    const bool reverse = reverse_only_ || d == 1;
    std::vector<U8Params> hp(batch_);
    std::vector<int32_t> hsum(batch_);
    for (int64_t k = 0; k < seq_; ++k) {
      const int64_t t = reverse ? seq_ - 1 - k : k;
      for (int64_t b = b0; b < b1; ++b) {
        const float* hb = scratch + b * row_floats_;
        hp[b] = u8_params(hb, h, wide_);
        uint8_t* q = qh + b * lda;
        u8_quantize(hb, h, hp[b], q, wide_);
        int32_t sum = 0;
        for (int64_t j = 0; j < h; ++j) sum += q[j];
        hsum[b] = sum;
      }
      q_->gemm(qh + b0 * lda, lda, b1 - b0, h, r_.of(d), ldc_ / kPanel, acc + b0 * ldc_, ldc_);
      for (int64_t b = b0; b < b1; ++b) {
        float* hb = scratch + b * row_floats_;
        float* cb = hb + h;
        float* tmp = cb + h;
        float* g = tmp + h;
        std::memcpy(g, xw + (t * batch_ + b) * gh, gh * sizeof(float));
        r_.finish(d, acc + b * ldc_, hsum[b], hp[b], true, g);
        for (int64_t j = 0; j < gh; ++j) {
          const float v = g[j] + bias[j];
          g[j] = clip_ > 0.f ? std::min(std::max(v, -clip_), clip_) : v;
        }
        // clipped before the peepholes (the reference's order); the cell then clips nothing
        lstm_cell(*m_, g, h, p, h, cb, hb, tmp, h, 0.f, input_forget_);
        std::memcpy(y + ((t * dirs_ + d) * batch_ + b) * h, hb, h * sizeof(float));
      }
    }
    for (int64_t b = b0; b < b1; ++b) {
      const float* hb = scratch + b * row_floats_;
      const int64_t s = (d * batch_ + b) * h;
      if (yh_) std::memcpy(ctx.ptr<float>(*yh_) + s, hb, h * sizeof(float));
      if (yc_) std::memcpy(ctx.ptr<float>(*yc_) + s, hb + h, h * sizeof(float));
    }
  }

  const bool wide_;
  const RnnMath* m_;
  const QGemm* q_;
  QWeight w_, r_;
  int64_t dirs_ = 1, seq_ = 0, batch_ = 0, in_ = 0, hidden_ = 0, ldc_ = 0, row_floats_ = 0;
  bool reverse_only_ = false, input_forget_ = false;
  float clip_ = 0.f;
  WorkspacePlan plan_;
  size_t qx_at_ = 0, qsum_at_ = 0, xw_at_ = 0, acc_at_ = 0, bias_at_ = 0, rows_at_ = 0, qh_at_ = 0;
  const TensorInfo *x_, *b_, *lens_, *h0_, *c0_, *p_, *y_, *yh_, *yc_;
};

}  // namespace

std::unique_ptr<Kernel> make_dq_lstm(const KernelArgs& a) { return std::make_unique<DqLstmKernel>(a); }

}  // namespace ge
