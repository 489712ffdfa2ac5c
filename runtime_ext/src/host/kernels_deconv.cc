// ConvTranspose (1-D and 2-D, groups, strides, pads, output_padding, dilations) on oneDNN's
// deconvolution. Attributes are the compiler's resolved form: "pads" (begin..., end...,
// auto_pad and output_shape already applied), "strides", "dilations", "output_padding",
// "group". ONNX's output_padding adds rows at the end that no input reaches: for oneDNN
// that is less end padding (pad_r = pad_end - output_padding), the extra positions then
// get the bias alone, as in ONNX.
//
// ONNX stores W as [C, M/group, k...] (input channels first); oneDNN's deconvolution
// weights are {group, M/group, C/group, k...}: the kernel describes W's bytes with those
// dims and explicit strides, and oneDNN reorders the constant once at load into the layout
// its primitive wants. X and Y may be stored in any format.
//
// Sub-pixel form. Output position t = s*q + p (stride s, phase p in [0, s)) of the
// transposed convolution sums x[q - r] * w[s*r + p] over r in [0, m), m = ceil(k / s): for
// each phase that is an ordinary convolution of X with m taps (the phase's taps of W,
// reversed, zero past k), padded m - 1 at the start. All phases together are one
// convolution to s*M channels (channel p*M + o: phase-major), whose output row q holds
// the outputs s*q .. s*q + s - 1: stored channels-last, the full transposed output is its
// bytes read in order (1-D), and Y is that cropped by the begin pads. The kernel can run
// the transposed convolution so when the group is 1, the dilations 1, W and B constant and
// the zero taps added at most as many as W's own (k near a multiple of s), and Y is plain
// or channels-last; plan_phases says where it does. oneDNN's deconvolution took 33-58 ms
// to create for Conv-TasNet's decoder (64 -> 1 channels, k 16, stride 8, 999 -> 8000) and
// ran it in 150-170 us; the convolution form creates in ~1 ms and ran in 20-50 us.
#include "dnnl_util.h"
#include "kernels.h"

#include <cstring>

namespace ge {

namespace {

using dims = dnnl::memory::dims;

using df = dnnl::deconvolution_forward;

// The primitive for X, W (constant), B and the attributes, all checked; `out` is the
// output shape they give. `with_primitive` false: the checks alone (kernel_info's
// placement question: oneDNN's deconvolution runs any shape those checks pass, and its
// primitive descriptor took 14-55 ms to build for a text detector's upsampling heads,
// built again at load).
struct DeconvPlan {
  df::primitive_desc pd;
  dnnl::memory::desc w_md;  // W's bytes as stored
  Shape out;
};

DeconvPlan plan_deconv(const KernelArgs& a, bool with_primitive) {
  a.expect_inputs(2, 3);
  const TensorInfo& x = a.in(0);
  const TensorInfo& w = a.in(1);
  const TensorInfo* b = a.opt_in(2);
  for (const TensorInfo* t : {&x, &w, b}) {
    if (t) a.expect_dtype(*t, DType::kFloat32, "every operand");
    if (t && t != &x && !t->plain()) invalid("tensor '", t->name, "' must be stored nchw");
  }
  const int rank = x.rank();
  if (rank < 3 || rank > 4) invalid("input X must be N,C,L or N,C,H,W, got ", shape_str(x.shape));
  if (w.rank() != rank) invalid("weight shape ", shape_str(w.shape), " must have rank ", rank);
  if (!w.constant()) invalid("weight W must be a constant");
  const size_t sp = static_cast<size_t>(rank - 2);
  const int64_t group = a.attr_int("group", 1);
  const int64_t C = x.shape[1];
  if (group < 1 || C % group != 0 || w.shape[0] != C) {
    invalid("weight shape ", shape_str(w.shape), " does not match input channels ", C, " (group ", group, ")");
  }
  const int64_t Mg = w.shape[1], M = mul_checked(Mg, group), Cg = C / group;
  if (b && b->shape != Shape{M}) invalid("bias shape ", shape_str(b->shape), " must be [", M, "]");
  const std::vector<int64_t> strides = a.attr_ints("strides", std::vector<int64_t>(sp, 1));
  const std::vector<int64_t> dil = a.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  const std::vector<int64_t> pads = a.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
  const std::vector<int64_t> opad = a.attr_ints("output_padding", std::vector<int64_t>(sp, 0));
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp || opad.size() != sp) {
    invalid("strides, dilations, output_padding need ", sp, " values and pads ", 2 * sp);
  }
  DeconvPlan p;
  p.out = {x.shape[0], M};
  dims d_strides, d_dil, pad_l, pad_r;
  for (size_t i = 0; i < sp; ++i) {
    const int64_t k = w.shape[2 + i];
    if (k < 1 || strides[i] < 1 || dil[i] < 1) invalid("kernel, strides and dilations must be >= 1");
    if (pads[i] < 0 || pads[i + sp] < 0 || opad[i] < 0) invalid("pads and output_padding must be >= 0");
    if (opad[i] >= strides[i] && opad[i] >= dil[i]) {
      invalid("output_padding ", opad[i], " must be smaller than the stride or the dilation");
    }
    const int64_t span = add_checked(mul_checked(k - 1, dil[i]), 1);
    const int64_t full = add_checked(add_checked(mul_checked(strides[i], x.shape[2 + i] - 1), span), opad[i]);
    const int64_t o = full - pads[i] - pads[i + sp];
    if (o < 1) invalid("pads ", shape_str(pads), " leave no output on spatial axis ", i);
    p.out.push_back(o);
    d_strides.push_back(strides[i]);
    d_dil.push_back(dil[i] - 1);  // oneDNN counts the gaps
    pad_l.push_back(pads[i]);
    pad_r.push_back(pads[i + sp] - opad[i]);
  }
  // W's bytes [g][C/g][M/g][k...] described as oneDNN's {g, M/g, C/g, k...}.
  int64_t taps = 1;
  for (size_t i = 0; i < sp; ++i) taps *= w.shape[2 + i];
  dims wd = {group, Mg, Cg}, ws = {Cg * Mg * taps, taps, Mg * taps};
  for (size_t i = 0; i < sp; ++i) {
    taps /= w.shape[2 + i];
    wd.push_back(w.shape[2 + i]);
    ws.push_back(taps);
  }
  p.w_md = dnnl::memory::desc(wd, dt::f32, ws);
  // oneDNN picks the activations' layout too: on plain NCHW it runs a GEMM-based
  // deconvolution (64->32 channels 4x4 stride 2 on 32x32: 21 ms); the kernel converts in
  // the workspace when its choice differs.
  const dnnl::memory::desc any_x(dnnl_dims(x.shape), dt::f32, tag::any), any_y(dnnl_dims(p.out), dt::f32, tag::any);
  const dnnl::memory::desc any_w(wd, dt::f32, tag::any);
  const dnnl::engine& eng = host_engine(*a.device);
  const auto kind = dnnl::prop_kind::forward_inference;
  const auto alg = dnnl::algorithm::deconvolution_direct;
  // A fused activation (the compiler's `activation` epilogue) is a post-op.
  dnnl::post_ops ops;
  append_activation(parse_activation(a, "activation"), &ops);
  if (!with_primitive) return p;
  const dnnl::primitive_attr attr = make_attr(ops);
  p.pd = b ? df::primitive_desc(eng, kind, alg, any_x, any_w, plain_md(b->shape), any_y, d_strides, d_dil, pad_l,
                                pad_r, attr)
           : df::primitive_desc(eng, kind, alg, any_x, any_w, any_y, d_strides, d_dil, pad_l, pad_r, attr);
  return p;
}

// The sub-pixel form's plan (see the top of the file); `ok` false where it does not apply.
// Along the last axis the convolution's channels-last output is the transposed one's bytes
// in order; with a stride across rows too (2-D) the phases interleave rows, and Y is a
// gather of Z. Where Z is not Y the extra pass over the output costs run time (64 channels
// 2x2 stride 2 on 80x80: 1.64 against the deconvolution's 1.03 ms), so the form is taken
// where it is Y, where oneDNN's deconvolution computes padded channels (it pads the output
// channels to the vector width, 16 floats: a text detector's 24 -> 1 channel 2x2 stride 2
// map to 160x160 took 36-55 ms to create and ran 0.74 ms, the form 0.17 ms), or in 1-D
// (below).
struct PhasePlan {
  bool ok = false;
  bool direct = false;  // Z is Y: the convolution writes Y (channels-last, no crop)
  int64_t S = 1;                                // phases: the product of the strides
  std::vector<int64_t> s, m, k, pb, q, out;     // per spatial axis: stride, taps per phase,
                                                // W's taps, begin pad, conv rows, Y rows
};

PhasePlan plan_phases(const KernelArgs& a, const Shape& out) {
  PhasePlan p;
  const TensorInfo& x = a.in(0);
  const TensorInfo& w = a.in(1);
  const TensorInfo* b = a.opt_in(2);
  const TensorInfo& y = a.out(0);
  const size_t sp = static_cast<size_t>(x.rank() - 2);
  if (a.attr_int("group", 1) != 1 || (b && !b->constant()) || !(y.plain() || y.channels_last())) return p;
  const std::vector<int64_t> strides = a.attr_ints("strides", std::vector<int64_t>(sp, 1));
  const std::vector<int64_t> dil = a.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  const std::vector<int64_t> pads = a.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
  int64_t taps = 1, padded = 1;
  for (size_t i = 0; i < sp; ++i) {
    const int64_t k = w.shape[2 + i], s = strides[i], m = (k + s - 1) / s;
    if (dil[i] != 1 || x.shape[2 + i] < 1) return p;
    // conv rows: enough for Y's last row (begin pad + rows), and at least X's (pad_r >= 0)
    const int64_t q = std::max(x.shape[2 + i], (pads[i] + out[2 + i] + s - 1) / s);
    // (the end pad is at most m: output_padding < s adds at most one row that reads only padding)
    if (q - x.shape[2 + i] > m) return p;
    taps *= k;
    padded *= s * m;
    p.s.push_back(s);
    p.m.push_back(m);
    p.k.push_back(k);
    p.pb.push_back(pads[i]);
    p.q.push_back(q);
    p.out.push_back(out[2 + i]);
    p.S *= s;
  }
  if (padded > 2 * taps) return p;  // more zero taps than W's own
  const bool rows_strided = sp == 2 && (p.s[0] != 1 || p.k[0] != 1 || p.pb[0] != 0);
  const size_t last = sp - 1;
  p.direct = y.channels_last() && !rows_strided && p.pb[last] == 0 && p.q[last] * p.s[last] == p.out[last] &&
             (sp == 1 || p.q[0] == p.out[0]);
  // Else Y is read out of Z after the convolution: an extra pass over the output, M floats
  // an output column against the deconvolution's 2 * C * m * M flops there (the pass adds
  // ~30 / (C * m) of the run: 64 -> 32 channels, 4 taps, stride 2, 8192 outputs: 350
  // against 293 us). Taken in 1-D, where the deconvolution's creation grows with the output
  // row (that layer: 92 ms; at 640 outputs, 48 -> 24 channels, 8 taps, stride 4: 6.6 ms,
  // thousands of runs of the pass), and in 2-D where the deconvolution computes padded
  // channels (M < 16).
  const int64_t M = w.shape[1];
  p.ok = p.direct || M < 16 || !rows_strided;
  return p;
}

// ConvTranspose as one convolution to S*M channels stored channels-last (Z), then Y read
// out of Z (or Z is Y: `direct_`).
class PhaseDeconvKernel : public PrimitiveKernel {
 public:
  PhaseDeconvKernel(const KernelArgs& a, const PhasePlan& p) : PrimitiveKernel(*a.device), p_(p) {
    const TensorInfo& x = a.in(0);
    const TensorInfo& w = a.in(1);
    const TensorInfo* b = a.opt_in(2);
    y_ = &a.out(0);
    const size_t sp = p.q.size();
    const int64_t C = x.shape[1];
    M_ = w.shape[1];
    N_ = x.shape[0];
    const int64_t SM = mul_checked(p.S, M_);
    // 2-D names (a 1-D ConvTranspose is one row: H axis of 1, unstrided, one tap)
    const int64_t sh = sp == 2 ? p.s[0] : 1, sw = p.s[sp - 1];
    const int64_t mh = sp == 2 ? p.m[0] : 1, mw = p.m[sp - 1];
    const int64_t kh = sp == 2 ? p.k[0] : 1, kw = p.k[sp - 1];
    // Weights [S*M, C, m...]: channel (phase_h * sw + phase_w) * M + o, tap u of an axis
    // reading W's tap s * (m - 1 - u) + phase (zero past k). W ([C][M][k...]) is read in
    // order; the writes of one input channel stay within S*M rows' runs.
    dims wd = {SM, C}, zd = {N_, SM};
    for (size_t i = 0; i < sp; ++i) {
      wd.push_back(p.m[i]);
      zd.push_back(p.q[i]);
    }
    const int64_t mt = mh * mw, row = mul_checked(C, mt);  // floats per output channel of Kc
    std::vector<float> kc(static_cast<size_t>(mul_checked(SM, row)), 0.f);
    const float* wsrc = reinterpret_cast<const float*>(w.data);
    for (int64_t c = 0; c < C; ++c) {
      const float* taps = wsrc + c * M_ * kh * kw;
      for (int64_t o = 0; o < M_; ++o, taps += kh * kw) {
        // tap (th, tw) = (sh * rh + ph, sw * rw + pw), walked without divisions
        for (int64_t rh = 0, th = 0; rh < mh; ++rh) {
          for (int64_t ph = 0; ph < sh && th < kh; ++ph, ++th) {
            for (int64_t rw = 0, tw = 0; rw < mw; ++rw) {
              for (int64_t pw = 0; pw < sw && tw < kw; ++pw, ++tw) {
                const int64_t co = (ph * sw + pw) * M_ + o;
                kc[static_cast<size_t>(co * row + c * mt + (mh - 1 - rh) * mw + (mw - 1 - rw))] =
                    taps[th * kw + tw];
              }
            }
          }
        }
      }
    }
    if (b) {
      const float* bsrc = reinterpret_cast<const float*>(b->data);
      bias_.resize(static_cast<size_t>(SM));
      for (int64_t c = 0; c < SM; ++c) bias_[static_cast<size_t>(c)] = bsrc[c % M_];
    }
    dims strides(sp, 1), dil(sp, 0), pad_l, pad_r;
    for (size_t i = 0; i < sp; ++i) {
      pad_l.push_back(p.m[i] - 1);
      pad_r.push_back(p.q[i] - x.shape[2 + i]);
    }
    const dnnl::engine& eng = host_engine(dev_);
    const dnnl::memory::desc x_md = tensor_md(x);
    const dnnl::memory::desc z_md = format_md(Shape(zd.begin(), zd.end()), Format::kNhwc);
    const dnnl::memory::desc w_any(wd, dt::f32, tag::any), w_md(wd, dt::f32, dims(dense_strides(wd)));
    dnnl::post_ops ops;
    append_activation(parse_activation(a, "activation"), &ops);
    const dnnl::primitive_attr attr = make_attr(ops);
    using cf = dnnl::convolution_forward;
    auto make = [&](const dnnl::memory::desc& src) {
      const auto kind = dnnl::prop_kind::forward_inference;
      const auto alg = dnnl::algorithm::convolution_direct;
      return b ? cf::primitive_desc(eng, kind, alg, src, w_any, plain_md(Shape{SM}), z_md, strides, dil, pad_l,
                                    pad_r, attr, true)
               : cf::primitive_desc(eng, kind, alg, src, w_any, z_md, strides, dil, pad_l, pad_r, attr, true);
    };
    cf::primitive_desc pd = make(x_md);
    if (!pd || std::string(pd.impl_info_str()).find("ref:") != std::string::npos) {
      pd = make(dnnl::memory::desc(x_md.get_dims(), dt::f32, tag::any));  // convert X in the workspace
    }
    if (!pd) invalid("oneDNN has no convolution for the sub-pixel form of this ConvTranspose");
    prim_ = Prim(pd);
    Ref src = Ref::of(x);
    if (pd.src_desc() != x_md) {
      src = Ref::workspace(plan_.add(pd.src_desc().get_size()));
      src_in_ = Prim(dnnl::reorder::primitive_desc(eng, x_md, eng, pd.src_desc(), make_attr()));
      src_in_.arg(DNNL_ARG_FROM, x_md, Ref::of(x));
      src_in_.arg(DNNL_ARG_TO, pd.src_desc(), src);
    }
    // Channels-last Y that is Z exactly (one row phase, no begin pad, no rows past Y's end:
    // k a multiple of s, unpadded, as Conv-TasNet's decoder): the convolution writes Y.
    direct_ = p.direct && pd.dst_desc().get_size() == y_->nbytes;
    if (!direct_) z_at_ = plan_.add(pd.dst_desc().get_size());
    weights_ = reorder_constant(a, w_md, kc.data(), pd.weights_desc(), w.data);
    prim_.arg(DNNL_ARG_SRC, pd.src_desc(), src);
    prim_.arg(DNNL_ARG_WEIGHTS, pd.weights_desc(), Ref::buffer(weights_->data()));
    if (b) prim_.arg(DNNL_ARG_BIAS, plain_md(Shape{SM}), Ref::buffer(bias_.data()));
    prim_.arg(DNNL_ARG_DST, pd.dst_desc(), direct_ ? Ref::of(*y_) : Ref::workspace(z_at_));
    Prim::share_scratchpad(&plan_, {&prim_, &src_in_});
  }
  void set_instances(int n) override {
    for (Prim* q : {&prim_, &src_in_}) q->set_instances(n, host_engine(dev_));
  }
  Status run(ExecContext& ctx) override {
    if (src_in_.valid()) src_in_.execute(ctx);
    prim_.execute(ctx);
    if (!direct_) scatter(reinterpret_cast<const float*>(ctx.workspace + z_at_), ctx.ptr<float>(*y_));
    return Status::Ok();
  }
  std::string impl() const override { return prim_.impl() + (direct_ ? " (sub-pixel, into Y)" : " (sub-pixel)"); }

 private:
  // Y[n, o, th, tw] = Z[n, qh, qw, (phase_h * sw + phase_w) * M + o], t + begin pad =
  // s * q + phase on each axis. Along a row of Z (qh and phase_h fixed), Y's next column is
  // the next phase (M floats on) or, after the last, the next column's first phase.
  void scatter(const float* z, float* y) const {
    const size_t sp = p_.q.size();
    const int64_t Ho = sp == 2 ? p_.out[0] : 1, Wo = p_.out[sp - 1];
    const int64_t Qh = sp == 2 ? p_.q[0] : 1, Qw = p_.q[sp - 1];
    const int64_t sh = sp == 2 ? p_.s[0] : 1, sw = p_.s[sp - 1];
    const int64_t bh = sp == 2 ? p_.pb[0] : 0, bw = p_.pb[sp - 1];
    const int64_t M = M_, SM = p_.S * M_, wrap = SM - (sw - 1) * M;
    const bool nhwc = y_->channels_last();
    const int64_t rows = N_ * Ho;
#pragma omp parallel for schedule(static) if (rows * Wo * M >= 65536)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = r / Ho, th = r % Ho;
      const int64_t qh = (th + bh) / sh, ph = (th + bh) % sh;
      const float* z0 = z + (n * Qh + qh) * Qw * SM + ph * sw * M + (bw / sw) * SM + (bw % sw) * M;
      if (nhwc && sh == 1) {  // the row's phases are the output row's bytes in order
        std::memcpy(y + r * Wo * M, z0, static_cast<size_t>(Wo * M) * sizeof(float));
      } else if (nhwc) {
        float* yrow = y + r * Wo * M;
        const float* zc = z0;
        for (int64_t t = 0, pw = bw % sw; t < Wo; ++t) {
          for (int64_t o = 0; o < M; ++o) yrow[t * M + o] = zc[o];
          zc += ++pw == sw ? (pw = 0, wrap) : M;
        }
      } else {
        for (int64_t o = 0; o < M; ++o) {
          float* yrow = y + ((n * M + o) * Ho + th) * Wo;
          const float* zc = z0 + o;
          for (int64_t t = 0, pw = bw % sw; t < Wo; ++t) {
            yrow[t] = *zc;
            zc += ++pw == sw ? (pw = 0, wrap) : M;
          }
        }
      }
    }
  }

  PhasePlan p_;
  const TensorInfo* y_ = nullptr;
  int64_t M_ = 0, N_ = 0;
  size_t z_at_ = 0;
  bool direct_ = false;  // the convolution's output is Y's bytes
  Prim src_in_;
  std::vector<float> bias_;
  std::shared_ptr<const AlignedBuffer> weights_;
};

class DeconvKernel : public PrimitiveKernel {
 public:
  explicit DeconvKernel(const KernelArgs& a) : PrimitiveKernel(*a.device) {
    a.expect_outputs(1, 1);
    const DeconvPlan p = plan_deconv(a, true);
    const TensorInfo& y = a.out(0);
    a.expect_dtype(y, DType::kFloat32, "output Y");
    if (y.shape != p.out) invalid("output ", type_str(y.dtype, y.shape), " must be ", shape_str(p.out));
    // X and Y as stored (any format, LayoutRule::kAnyData: a U-Net's upsampling between NHWC
    // convolutions): converted only where oneDNN's choice differs.
    const dnnl::engine& eng = host_engine(dev_);
    const dnnl::memory::desc x_md = tensor_md(a.in(0)), y_md = tensor_md(y);
    prim_ = Prim(p.pd);
    Ref src = Ref::of(a.in(0)), dst = Ref::of(y);
    if (p.pd.src_desc() != x_md) {
      src = Ref::workspace(plan_.add(p.pd.src_desc().get_size()));
      src_in_ = Prim(dnnl::reorder::primitive_desc(eng, x_md, eng, p.pd.src_desc(), make_attr()));
      src_in_.arg(DNNL_ARG_FROM, x_md, Ref::of(a.in(0)));
      src_in_.arg(DNNL_ARG_TO, p.pd.src_desc(), src);
    }
    if (p.pd.dst_desc() != y_md) {
      dst = Ref::workspace(plan_.add(p.pd.dst_desc().get_size()));
      dst_out_ = Prim(dnnl::reorder::primitive_desc(eng, p.pd.dst_desc(), eng, y_md, make_attr()));
      dst_out_.arg(DNNL_ARG_FROM, p.pd.dst_desc(), dst);
      dst_out_.arg(DNNL_ARG_TO, y_md, Ref::of(y));
    }
    weights_ = reorder_constant(a, p.w_md, a.in(1).data, p.pd.weights_desc());
    prim_.arg(DNNL_ARG_SRC, p.pd.src_desc(), src);
    prim_.arg(DNNL_ARG_WEIGHTS, p.pd.weights_desc(), Ref::buffer(weights_->data()));
    if (a.opt_in(2)) prim_.arg(DNNL_ARG_BIAS, p.pd.bias_desc(), Ref::of(a.in(2)));
    prim_.arg(DNNL_ARG_DST, p.pd.dst_desc(), dst);
    Prim::share_scratchpad(&plan_, {&prim_, &src_in_, &dst_out_});
  }
  void set_instances(int n) override {
    for (Prim* q : {&prim_, &src_in_, &dst_out_}) q->set_instances(n, host_engine(dev_));
  }
  Status run(ExecContext& ctx) override {
    if (src_in_.valid()) src_in_.execute(ctx);
    prim_.execute(ctx);
    if (dst_out_.valid()) dst_out_.execute(ctx);
    return Status::Ok();
  }

 private:
  Prim src_in_, dst_out_;  // conversions to and from the primitive's layouts
  std::shared_ptr<const AlignedBuffer> weights_;  // W in the primitive's layout (shared)
};

}  // namespace

std::unique_ptr<Kernel> make_conv_transpose(const KernelArgs& a) {
  a.expect_outputs(1, 1);
  const DeconvPlan checked = plan_deconv(a, false);
  if (a.out(0).shape == checked.out) {
    const PhasePlan p = plan_phases(a, checked.out);
    if (p.ok) {
      try {
        return std::make_unique<PhaseDeconvKernel>(a, p);
      } catch (const dnnl::error&) {
        // oneDNN declined the convolution (an end pad it does not take): the deconvolution
      } catch (const Error&) {
        // no fast convolution for the form (or its sizes do not fit): the deconvolution,
        // which checks the node itself and says what is wrong
      }
    }
  }
  return std::make_unique<DeconvKernel>(a);
}
void check_conv_transpose(const KernelArgs& a) { plan_deconv(a, false); }

}  // namespace ge
