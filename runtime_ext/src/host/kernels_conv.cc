// Conv on oneDNN. Activations are stored in their tensor's format (plain NCHW, NHWC or
// blocked); for a plain one oneDNN picks its preferred layout and the kernel converts in
// the stream workspace, unless the spec fixed the formats. Constant weights are reordered
// once at load into a kernel-owned buffer shared by every instance.
//
// ConvDw (the compiler's conv_dw fusion): a 1x1 convolution (stride 1, no padding, group 1)
// followed by a 3x3 depthwise convolution with pads 1 and stride dw_stride (1 or 2) as one
// oneDNN primitive with a depthwise post-op, so the expanded activation never goes to
// memory. Inputs: X, W, B (may be omitted), then the depthwise weights [M,1,3,3] and bias
// [M], both constant; `activation` applies before the depthwise stage and dw_activation
// (with dw_activation_alpha / _beta) after it. Not combinable with sum.
//
// ConvBlock (the conv_block fusion): an inverted-residual block, run by the block kernel of
// conv_block.cc instead of oneDNN. Inputs: X, W, B, [the depthwise weights and bias,] the 1x1
// projection's weights [P,M,1,1] and bias [P] (constant), then an optional residual (sum=1,
// last input); pw_activation follows the residual. With expand=1 the block is expand
// (`activation`) -> depthwise (dw_stride, dw_activation) -> project; with expand=0 its own W
// is the depthwise [C,1,3,3] (group C, pads 1, stride 1 or 2) and dw_activation follows it.
//
// ConvHead (the conv_head fusion): see ConvHeadKernel below.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "conv_block.h"
#include "dnnl_util.h"
#include "kernels.h"
#include "peak.h"
#include "transpose.h"

namespace ge {

namespace {

using dims = dnnl::memory::dims;

// ONNX pads (begin..., end...) and the output size they give, with auto_pad resolved.
struct ConvGeometry {
  dims strides, dilates, pad_l, pad_r, out;
};

ConvGeometry conv_geometry(const KernelArgs& a, const Shape& x, const Shape& kernel) {
  const size_t sp = kernel.size();
  ConvGeometry g;
  std::vector<int64_t> strides = a.attr_ints("strides", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> dil = a.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = a.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
  if (strides.size() != sp) invalid("strides must have ", sp, " values, got ", shape_str(strides));
  if (dil.size() != sp) invalid("dilations must have ", sp, " values, got ", shape_str(dil));
  if (pads.size() != 2 * sp) invalid("pads must have ", 2 * sp, " values, got ", shape_str(pads));
  std::string auto_pad = a.attr_str("auto_pad", "NOTSET");
  for (size_t i = 0; i < sp; ++i) {
    const int64_t in = x[2 + i];
    const int64_t k = kernel[i];
    if (strides[i] < 1) invalid("strides must be >= 1, got ", shape_str(strides));
    if (dil[i] < 1) invalid("dilations must be >= 1, got ", shape_str(dil));
    const int64_t span = add_checked(mul_checked(k - 1, dil[i]), 1);
    int64_t pb = pads[i], pe = pads[i + sp];
    resolve_auto_pad(auto_pad, in, strides[i], span, pads, &pb, &pe);
    const int64_t padded = add_checked(add_checked(in, pb), pe);
    if (padded < span) {
      invalid("kernel extent ", span, " exceeds padded input ", padded, " on spatial axis ", i);
    }
    g.strides.push_back(strides[i]);
    g.dilates.push_back(dil[i] - 1);  // oneDNN counts the gaps
    g.pad_l.push_back(pb);
    g.pad_r.push_back(pe);
    g.out.push_back((padded - span) / strides[i] + 1);
  }
  return g;
}

class ConvKernel : public Kernel {
 public:
  ConvKernel(const KernelArgs& a, bool dw);  // dw: ConvDw
  size_t workspace_bytes() const override { return plan_.total(); }
  void set_instances(int n) override {
    for (Prim* p : {&conv_, &src_in_, &res_in_, &dst_out_, &w_in_}) p->set_instances(n, host_engine(dev_));
  }
  Status run(ExecContext& ctx) override;
  std::string impl() const override { return conv_.impl(); }

 private:
  const Device& dev_;
  const TensorInfo* x_ = nullptr;
  const TensorInfo* w_ = nullptr;
  const TensorInfo* b_ = nullptr;
  const TensorInfo* r_ = nullptr;  // residual (sum post-op)
  const TensorInfo* dw_w_ = nullptr;  // depthwise post-op weights and bias
  const TensorInfo* dw_b_ = nullptr;
  const TensorInfo* y_ = nullptr;
  Prim conv_, src_in_, res_in_, dst_out_, w_in_;
  std::shared_ptr<const AlignedBuffer> weights_;  // constant weights in oneDNN's layout (shared)
  std::shared_ptr<const AlignedBuffer> dw_weights_, dw_bias_;
  WorkspacePlan plan_;
  bool src_ws_ = false, dst_ws_ = false;
  size_t src_at_ = 0, dst_at_ = 0;
};

// Whether W is constant and each of its values an integer of magnitude <= 256, which
// bfloat16 holds exactly (a fusion that scaled the weights would have made them otherwise).
bool bf16_exact_weights(const TensorInfo& w) {
  if (!w.constant() || w.dtype != DType::kFloat32 || w.data == nullptr) return false;
  const float* v = w.const_ptr<float>();
  for (int64_t i = 0; i < w.numel; ++i) {
    if (!(std::fabs(v[i]) <= 256.0f) || v[i] != std::nearbyint(v[i])) return false;
  }
  return true;
}

// Checks X and W (and attrs) of a Conv; returns the geometry and the output shape.
ConvGeometry check_conv(const KernelArgs& a, const TensorInfo& x, const TensorInfo& w, Shape* out_shape) {
  a.expect_dtype(x, DType::kFloat32, "input X");
  a.expect_dtype(w, DType::kFloat32, "weight W");
  const Shape& xs = x.shape;
  const Shape& ws = w.shape;
  const int rank = x.rank();
  if (rank < 3 || rank > 5) invalid("input X must be N,C,spatial... of rank 3 to 5, got ", shape_str(xs));
  if (w.rank() != rank) invalid("weight shape ", shape_str(ws), " must have rank ", rank);
  if (!w.plain()) invalid("weight W must be stored nchw");
  const int64_t group = a.attr_int("group", 1);
  const int64_t C = xs[1], M = ws[0];
  if (group < 1) invalid("group must be >= 1, got ", group);
  if (C % group != 0 || ws[1] * group != C) {
    invalid("weight shape ", shape_str(ws), " does not match input channels ", C, " (group ", group, ")");
  }
  if (M % group != 0) invalid("output channels ", M, " are not divisible by group ", group);
  Shape kernel(ws.begin() + 2, ws.end());
  for (int64_t k : kernel) {
    if (k < 1) invalid("weight shape ", shape_str(ws), " has an empty kernel");
  }
  if (a.has_attr("kernel_shape") && a.attr_ints("kernel_shape", {}) != kernel) {
    invalid("kernel_shape ", shape_str(a.attr_ints("kernel_shape", {})), " does not match weight shape ",
            shape_str(ws));
  }
  ConvGeometry g = conv_geometry(a, xs, kernel);
  *out_shape = {xs[0], M};
  out_shape->insert(out_shape->end(), g.out.begin(), g.out.end());
  return g;
}

dims weight_dims(const Shape& ws, int64_t group) {
  if (group == 1) return dims(ws.begin(), ws.end());
  dims d = {group, ws[0] / group, ws[1]};
  d.insert(d.end(), ws.begin() + 2, ws.end());
  return d;
}

// The depthwise post-op's stride, after checking that the node is a 1x1 convolution that
// the post-op can follow and that its depthwise weights and bias fit.
int64_t check_dw(const KernelArgs& a, const TensorInfo& w, const TensorInfo& dw_w, const TensorInfo& dw_b) {
  const int64_t stride = a.attr_int("dw_stride", 1);
  if (stride != 1 && stride != 2) invalid("dw_stride must be 1 or 2, got ", stride);
  if (w.rank() != 4 || w.shape[2] != 1 || w.shape[3] != 1) {
    invalid("a depthwise post-op needs a 1x1 convolution, weight shape is ", shape_str(w.shape));
  }
  if (a.attr_int("group", 1) != 1) invalid("a depthwise post-op needs group 1");
  for (const char* key : {"strides", "dilations"}) {
    for (int64_t v : a.attr_ints(key, {1, 1})) {
      if (v != 1) invalid("a depthwise post-op needs ", key, " 1, got ", shape_str(a.attr_ints(key, {})));
    }
  }
  for (int64_t v : a.attr_ints("pads", {0, 0, 0, 0})) {
    if (v != 0) invalid("a depthwise post-op needs pads 0, got ", shape_str(a.attr_ints("pads", {})));
  }
  if (a.attr_str("auto_pad", "NOTSET") != "NOTSET" && a.attr_str("auto_pad", "NOTSET") != "VALID") {
    invalid("a depthwise post-op needs explicit pads");
  }
  const int64_t M = w.shape[0];
  a.expect_dtype(dw_w, DType::kFloat32, "depthwise weight");
  a.expect_dtype(dw_b, DType::kFloat32, "depthwise bias");
  if (dw_w.shape != Shape{M, 1, 3, 3}) {
    invalid("depthwise weight shape ", shape_str(dw_w.shape), " must be [", M, ",1,3,3]");
  }
  if (dw_b.shape != Shape{M}) invalid("depthwise bias shape ", shape_str(dw_b.shape), " must be [", M, "]");
  if (!dw_w.constant() || !dw_b.constant()) invalid("depthwise weight and bias must be constants");
  if (!dw_w.plain()) invalid("depthwise weight must be stored nchw");
  return stride;
}

// A 1-D convolution (a speech encoder's layer as the [N, C, 1, W] view) over a long row
// with an eltwise post-op, at few channels: creating oneDNN's brgemm convolution for it
// grows with the row's length and the post-op's code (64 -> 64 channels, 3 taps, stride 2,
// 1599 outputs: 19-46 ms with GELU, 4 ms with Relu, 1 ms without a post-op; 199 outputs:
// 3.8 ms), once for the load and once more for the narrow kernel set. Its direct JIT
// kernel creates in 0.4-0.7 ms and ran these rows as fast (32-128 channels, 399-1599
// outputs, batch 1 and 8, one and two threads: within 1% at the minimum of 400 runs; one
// 128-channel case 3-9% slower in one of four rounds). docs/ARCHITECTURE.md, compile+load.
constexpr int64_t kLongRow = 128;
constexpr int64_t kDirectMaxChannels = 128;

bool long_row_with_post_op(bool eltwise, int64_t group, const Shape& xs, const Shape& ws, const Shape& ys) {
  return eltwise && group == 1 && xs.size() == 4 && xs[2] == 1 && ws[2] == 1 && ys[2] == 1 &&
         ys[3] >= kLongRow && ws[0] <= kDirectMaxChannels && ws[1] <= kDirectMaxChannels;
}

// `pd` or, when it is the brgemm convolution, the direct JIT one of the same ISA, which oneDNN
// offers next in its list with the same activation layouts. `pd` itself steps on (a copy
// shares it, and a clone cannot step): creating the brgemm descriptor of a long row is the
// expensive part (12 -> 12 channels, 11 taps, 2560 outputs, a LeakyRelu: 16.6 ms in a C++
// harness), so it is made once; only where the direct kernel is not there is `again` (a
// fresh descriptor of the same problem) made to get the brgemm one back.
template <class Again>
dnnl::convolution_forward::primitive_desc direct_for_long_row(dnnl::convolution_forward::primitive_desc pd,
                                                              const Again& again) {
  const std::string impl = pd.impl_info_str();
  if (impl.rfind("brgconv:", 0) != 0) return pd;
  const std::string direct = "jit:" + impl.substr(impl.find(':') + 1);
  const dnnl::memory::desc src = pd.src_desc(), dst = pd.dst_desc();
  while (pd.next_impl()) {
    if (direct != pd.impl_info_str()) continue;
    if (pd.src_desc() == src && pd.dst_desc() == dst) return pd;
    break;
  }
  return again();
}

ConvKernel::ConvKernel(const KernelArgs& a, bool dw) : dev_(*a.device) {
  a.expect_outputs(1, 1);
  const Fusion fusion = parse_fusion(a);
  const Fusion dw_act = parse_activation(a, "dw_activation");
  // activation2: a second activation after the first (a LeakyRelu then a Max with a scalar,
  // written as Clip), one more eltwise post-op
  const Fusion then = parse_activation(a, "activation2");
  if (then.activation && (dw || !fusion.activation)) invalid("activation2 follows a plain Conv's activation");
  size_t n_in = a.inputs.size();
  if (fusion.sum) {
    if (dw) invalid("ConvDw cannot be combined with sum=1");
    if (n_in < 3) invalid("sum=1 needs a residual as the last input");
    r_ = &a.in(n_in - 1);
    --n_in;
  }
  if (dw) {
    if (n_in < 4) invalid("ConvDw needs the depthwise weight and bias as the last two inputs");
    dw_w_ = &a.in(n_in - 2);
    dw_b_ = &a.in(n_in - 1);
    n_in -= 2;
  } else if (dw_act.activation) {
    invalid("dw_activation is ConvDw's");
  }
  if (n_in < 2 || n_in > 3) invalid("expected 2 or 3 inputs (X, W, optional B), got ", n_in);
  x_ = &a.in(0);
  w_ = &a.in(1);
  b_ = n_in == 3 ? a.opt_in(2) : nullptr;
  y_ = &a.out(0);
  a.expect_dtype(*y_, DType::kFloat32, "output Y");
  const Shape& xs = x_->shape;
  const Shape& ws = w_->shape;
  Shape expect;
  ConvGeometry g = check_conv(a, *x_, *w_, &expect);
  const int64_t group = a.attr_int("group", 1);
  const int64_t M = ws[0];
  const Shape inner = expect;  // the 1x1's output: the depthwise stage's input
  int64_t dw_stride = 1;
  if (dw) {
    dw_stride = check_dw(a, *w_, *dw_w_, *dw_b_);
    for (size_t i = 2; i < expect.size(); ++i) expect[i] = (inner[i] + 2 - 3) / dw_stride + 1;
  }
  if (y_->shape != expect) {
    invalid("output shape ", shape_str(y_->shape), " does not match computed ", shape_str(expect),
            " for input ", shape_str(xs), " and weight ", shape_str(ws));
  }
  if (b_) {
    a.expect_dtype(*b_, DType::kFloat32, "bias B");
    if (b_->shape != Shape{M}) invalid("bias shape ", shape_str(b_->shape), " must be [", M, "]");
  }
  if (r_) {
    a.expect_dtype(*r_, DType::kFloat32, "residual");
    if (r_->shape != y_->shape) {
      invalid("residual shape ", shape_str(r_->shape), " does not match output ", shape_str(y_->shape));
    }
  }

  // oneDNN descriptors. A tensor stored in a non-plain format (channels-last or blocked)
  // is handed to oneDNN as it is; for a plain one oneDNN picks the layout (`any`) and the
  // kernel converts in the stream workspace.
  const dnnl::engine& eng = host_engine(dev_);
  const dnnl::memory::desc x_md = tensor_md(*x_), y_md = tensor_md(*y_);
  const dims wdims = weight_dims(ws, group);
  const dnnl::memory::desc w_md(wdims, dt::f32, dims(dense_strides(wdims)));
  dnnl::memory::desc req_x = x_->plain() ? dnnl::memory::desc(dnnl_dims(xs), dt::f32, tag::any) : x_md;
  dnnl::memory::desc req_w(wdims, dt::f32, tag::any);
  // With a depthwise post-op the primitive is described by the 1x1's output (oneDNN derives
  // the final shape from the post-op); the stored format is the same.
  const dnnl::memory::desc inner_md = dw ? format_md(inner, y_->format) : y_md;
  dnnl::memory::desc req_y = y_->plain() ? dnnl::memory::desc(dnnl_dims(inner), dt::f32, tag::any) : inner_md;
  dnnl::post_ops ops;
  if (r_) ops.append_sum(1.f);
  append_activation(fusion, &ops);
  append_activation(then, &ops);
  if (dw) {
    ops.append_dw(dt::f32, dt::f32, dt::f32, 3, dw_stride, 1);
    append_activation(dw_act, &ops);
  }
  dnnl::primitive_attr attr = make_attr(ops);
  using cf = dnnl::convolution_forward;
  auto make_pd_of = [&](const dnnl::memory::desc& sx, const dnnl::memory::desc& sw, const dnnl::memory::desc& sy) {
    if (b_) {
      return cf::primitive_desc(eng, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, sx,
                                sw, plain_md(b_->shape), sy, g.strides, g.dilates, g.pad_l, g.pad_r, attr, true);
    }
    return cf::primitive_desc(eng, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, sx,
                              sw, sy, g.strides, g.dilates, g.pad_l, g.pad_r, attr, true);
  };
  auto make_pd = [&](const dnnl::memory::desc& sx, const dnnl::memory::desc& sy) { return make_pd_of(sx, req_w, sy); };
  auto usable = [](const cf::primitive_desc& p) {
    // not the reference code (a fused depthwise chain of fast kernels is fine)
    return p && std::string(p.impl_info_str()).find("ref:") == std::string::npos;
  };
  cf::primitive_desc pd;
  // Integer operands (`integer_operands`: ConvInteger's exact float rewrite, its input an
  // integer in [-255, 255] and every partial sum an integer below 2^24): bfloat16 holds each
  // operand exactly and oneDNN's bf16 convolution multiplies and accumulates in float32, so
  // the sums are the same integers. Taken where the CPU runs bf16 natively (AMX or
  // AVX512_BF16: the kernel's name says so) and the constant weights are such integers.
  // `remake`: a fresh descriptor of the problem `pd` was made for (direct_for_long_row)
  std::function<cf::primitive_desc()> remake = [&] { return make_pd(req_x, req_y); };
  if (a.attr_int("integer_operands", 0) != 0 && !dw && !r_ && bf16_exact_weights(*w_)) {
    const dnnl::memory::desc bx(dnnl_dims(xs), dt::bf16, tag::any), bw(wdims, dt::bf16, tag::any);
    cf::primitive_desc b = make_pd_of(bx, bw, req_y);
    const std::string impl = b ? std::string(b.impl_info_str()) : std::string();
    if (usable(b) && (impl.find("amx") != std::string::npos || impl.find("bf16") != std::string::npos)) {
      pd = b;
      remake = [&, bx, bw] { return make_pd_of(bx, bw, req_y); };
    }
  }
  if (!pd) pd = remake();
  if (!usable(pd)) {
    // oneDNN has no fast kernel for this pair of stored formats (e.g. nChw8c in, nChw16c
    // out): let it choose, and convert through the workspace.
    const dnnl::memory::desc ax(dnnl_dims(xs), dt::f32, tag::any), ay(dnnl_dims(inner), dt::f32, tag::any);
    cf::primitive_desc any = make_pd(ax, ay);
    if (usable(any) || !pd) {
      pd = any;
      remake = [&, ax, ay] { return make_pd(ax, ay); };
    }
  }
  if (!pd) invalid("oneDNN has no convolution for these shapes and attributes");
  if (!dw && long_row_with_post_op(fusion.activation || then.activation, group, xs, ws, inner)) {
    pd = direct_for_long_row(pd, remake);
  }
  if (dw && pd.dst_desc().get_dims() != dnnl_dims(y_->shape)) {
    const dnnl::memory::dims d = pd.dst_desc().get_dims();
    invalid("the depthwise post-op gives shape ", shape_str(Shape(d.begin(), d.end())), ", expected ",
            shape_str(y_->shape));
  }
  conv_ = Prim(pd);
  dnnl::primitive_attr rattr = make_attr();
  const Ref src = pd.src_desc() != x_md ? Ref::workspace(src_at_ = plan_.add(pd.src_desc().get_size())) : Ref::of(*x_);
  const Ref dst = pd.dst_desc() != y_md ? Ref::workspace(dst_at_ = plan_.add(pd.dst_desc().get_size())) : Ref::of(*y_);
  src_ws_ = src.kind == Ref::Kind::kWorkspace;
  dst_ws_ = dst.kind == Ref::Kind::kWorkspace;
  if (src_ws_) {
    src_in_ = Prim(dnnl::reorder::primitive_desc(eng, x_md, eng, pd.src_desc(), rattr));
    src_in_.arg(DNNL_ARG_FROM, x_md, Ref::of(*x_));
    src_in_.arg(DNNL_ARG_TO, pd.src_desc(), src);
  }
  if (dst_ws_) {
    dst_out_ = Prim(dnnl::reorder::primitive_desc(eng, pd.dst_desc(), eng, y_md, rattr));
    dst_out_.arg(DNNL_ARG_FROM, pd.dst_desc(), dst);
    dst_out_.arg(DNNL_ARG_TO, y_md, Ref::of(*y_));
  }
  if (r_) {
    const dnnl::memory::desc r_md = tensor_md(*r_);
    if (r_md != pd.dst_desc()) {
      res_in_ = Prim(dnnl::reorder::primitive_desc(eng, r_md, eng, pd.dst_desc(), rattr));
      res_in_.arg(DNNL_ARG_FROM, r_md, Ref::of(*r_));
      res_in_.arg(DNNL_ARG_TO, pd.dst_desc(), dst);
    }
  }
  Ref wref = Ref::of(*w_);  // usable in place when oneDNN takes the plain layout
  if (pd.weights_desc() != w_md) {
    if (w_->constant()) {
      weights_ = reorder_constant(a, w_md, w_->data, pd.weights_desc());
      wref = Ref::buffer(weights_->data());
    } else {  // weights computed at run time: reorder on every run, into the workspace
      wref = Ref::workspace(plan_.add(pd.weights_desc().get_size()));
      w_in_ = Prim(dnnl::reorder::primitive_desc(eng, w_md, eng, pd.weights_desc(), rattr));
      w_in_.arg(DNNL_ARG_FROM, w_md, Ref::of(*w_));
      w_in_.arg(DNNL_ARG_TO, pd.weights_desc(), wref);
    }
  }
  conv_.arg(DNNL_ARG_SRC, pd.src_desc(), src);
  conv_.arg(DNNL_ARG_WEIGHTS, pd.weights_desc(), wref);
  if (b_) conv_.arg(DNNL_ARG_BIAS, plain_md(b_->shape), Ref::of(*b_));
  conv_.arg(DNNL_ARG_DST, pd.dst_desc(), dst);
  if (dw) {
    const int dw_w_arg = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS, dw_b_arg = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS;
    const dnnl::memory::dims dw_dims = {M, 1, 1, 3, 3};
    const dnnl::memory::desc dw_w_md(dw_dims, dt::f32, dnnl::memory::dims(dense_strides(dw_dims)));
    const dnnl::memory::desc dw_b_md = plain_md(dw_b_->shape);
    const dnnl::memory::desc want_w = pd.query_md(dnnl::query::exec_arg_md, dw_w_arg);
    const dnnl::memory::desc want_b = pd.query_md(dnnl::query::exec_arg_md, dw_b_arg);
    Ref dw_wref = Ref::of(*dw_w_), dw_bref = Ref::of(*dw_b_);
    if (want_w != dw_w_md) {
      dw_weights_ = reorder_constant(a, dw_w_md, dw_w_->data, want_w);
      dw_wref = Ref::buffer(dw_weights_->data());
    }
    if (want_b != dw_b_md) {
      dw_bias_ = reorder_constant(a, dw_b_md, dw_b_->data, want_b);
      dw_bref = Ref::buffer(dw_bias_->data());
    }
    conv_.arg(dw_w_arg, want_w, dw_wref);
    conv_.arg(dw_b_arg, want_b, dw_bref);
  }
  Prim::share_scratchpad(&plan_, {&conv_, &src_in_, &res_in_, &dst_out_, &w_in_});
}

Status ConvKernel::run(ExecContext& ctx) {
  if (src_in_.valid()) src_in_.execute(ctx);
  if (r_) {  // the sum post-op adds what the destination holds
    if (res_in_.valid()) {
      res_in_.execute(ctx);
    } else {
      uint8_t* target = dst_ws_ ? ctx.workspace + dst_at_ : ctx.ptr(*y_);
      const uint8_t* from = ctx.ptr(*r_);
      if (from != target) std::memmove(target, from, r_->nbytes);
    }
  }
  if (w_in_.valid()) w_in_.execute(ctx);
  conv_.execute(ctx);
  if (dst_out_.valid()) dst_out_.execute(ctx);
  return Status::Ok();
}

// `f`'s activation (and its scale and shift) as a oneDNN eltwise primitive applied in place
// to Y's elements, whatever Y's format (none without an activation).
Prim activation_in_place(const Device& dev, const Fusion& f, const TensorInfo& y) {
  if (!f.activation) return Prim();
  const dnnl::memory::desc md = plain_md(Shape{y.numel});
  dnnl::post_ops ops;
  if (f.linear) ops.append_eltwise(dnnl::algorithm::eltwise_linear, f.scale, f.shift);
  dnnl::eltwise_forward::primitive_desc pd(host_engine(dev), dnnl::prop_kind::forward_inference, f.alg, md, md,
                                           f.alpha, f.beta, make_attr(ops));
  Prim out(pd);
  out.arg(DNNL_ARG_SRC, md, Ref::of(y));
  out.arg(DNNL_ARG_DST, md, Ref::of(y));
  return out;
}

// ---- depthwise 3-D convolution -----------------------------------------------------------
// A video net's depthwise Conv3d (group = channels, one output channel each): oneDNN 3.2
// has no depthwise kernel for 3-D and ran it as gemm:jit (im2col per group): an unseen
// X3D's eight 3x3x3 ones took 2.9 of its 5.6 ms against OpenVINO's 1.6 ms whole. Its
// volumes are small (3-24 wide), so rows along W are too short to vectorise: the sums run
// channels-last, each output voxel summing its taps over vectors of 16 channels held in
// registers (weights stored [tap][C]). Operands stored NHWC (N, D, H, W, C: the layout
// region's 5-D format) are read and written in place; a plain X goes to channels-last in
// the workspace (transpose.h) and a plain Y comes back from it. Then the residual sum and
// the activations (oneDNN eltwise primitives, in place), in the order the oneDNN kernel's
// post-ops apply them. Needs AVX-512.
class Dw3dKernel : public Kernel {
 public:
  explicit Dw3dKernel(const KernelArgs& a);
  size_t workspace_bytes() const override { return plan_.total(); }
  void set_instances(int n) override {
    for (Prim* p : {&act_, &act2_}) p->set_instances(n, host_engine(dev_));
  }
  Status run(ExecContext& ctx) override;
  std::string impl() const override { return "depthwise 3-D channels-last avx512"; }

 private:
  const Device& dev_;
  const TensorInfo *x_ = nullptr, *w_ = nullptr, *b_ = nullptr, *r_ = nullptr, *y_ = nullptr;
  int64_t n_ = 0, c_ = 0, id_ = 0, ih_ = 0, iw_ = 0, od_ = 0, oh_ = 0, ow_ = 0;
  int64_t k_[3] = {}, s_[3] = {}, d_[3] = {}, p_[3] = {};
  std::vector<float> wt_;  // [tap][C]
  std::vector<float> bias_;  // [C] (zeros without B)
  WorkspacePlan plan_;
  size_t xt_at_ = 0, yt_at_ = 0;
  bool x_staged_ = false, y_staged_ = false;  // plain: through the workspace
  Prim act_, act2_;  // the activations, in place on Y
};

bool dw3d_applies(const KernelArgs& a) {
  if (a.inputs.size() < 2 || !cpu_has_avx512()) return false;
  const TensorInfo& x = a.in(0);
  const TensorInfo& w = a.in(1);
  const TensorInfo& y = a.out(0);
  auto plain_or_last = [](const TensorInfo& t) { return t.plain() || t.channels_last(); };
  return x.rank() == 5 && w.rank() == 5 && plain_or_last(x) && plain_or_last(y) && x.dtype == DType::kFloat32 &&
         w.dtype == DType::kFloat32 && w.constant() && a.attr_int("group", 1) == x.shape[1] &&
         w.shape[0] == x.shape[1] && w.shape[1] == 1 && (a.inputs.size() < 3 || !a.opt_in(2) || a.opt_in(2)->constant());
}

Dw3dKernel::Dw3dKernel(const KernelArgs& a) : dev_(*a.device) {
  a.expect_outputs(1, 1);
  const Fusion fusion = parse_fusion(a);
  const Fusion then = parse_activation(a, "activation2");
  if (then.activation && !fusion.activation) invalid("activation2 follows a plain Conv's activation");
  size_t n_in = a.inputs.size();
  if (fusion.sum) {
    if (n_in < 3) invalid("sum=1 needs a residual as the last input");
    r_ = &a.in(--n_in);
  }
  if (n_in < 2 || n_in > 3) invalid("expected 2 or 3 inputs (X, W, optional B), got ", n_in);
  x_ = &a.in(0);
  w_ = &a.in(1);
  b_ = n_in == 3 ? a.opt_in(2) : nullptr;
  y_ = &a.out(0);
  a.expect_dtype(*y_, DType::kFloat32, "output Y");
  Shape expect;
  const ConvGeometry g = check_conv(a, *x_, *w_, &expect);
  if (y_->shape != expect) invalid("output shape ", shape_str(y_->shape), " must be ", shape_str(expect));
  if (b_) {
    a.expect_dtype(*b_, DType::kFloat32, "bias B");
    if (b_->shape != Shape{w_->shape[0]}) invalid("bias shape ", shape_str(b_->shape), " must be [", w_->shape[0], "]");
  }
  if (r_) {
    a.expect_dtype(*r_, DType::kFloat32, "residual");
    if (r_->shape != y_->shape || !(r_->plain() || r_->channels_last())) {
      invalid("residual must be a plain or channels-last ", shape_str(y_->shape));
    }
  }
  n_ = x_->shape[0], c_ = x_->shape[1], id_ = x_->shape[2], ih_ = x_->shape[3], iw_ = x_->shape[4];
  od_ = y_->shape[2], oh_ = y_->shape[3], ow_ = y_->shape[4];
  for (int i = 0; i < 3; ++i) {
    k_[i] = w_->shape[2 + i];
    s_[i] = g.strides[i];
    d_[i] = g.dilates[i] + 1;  // oneDNN counts dilation from 0
    p_[i] = g.pad_l[i];
  }
  const int64_t taps = k_[0] * k_[1] * k_[2];
  const float* w = w_->const_ptr<float>();
  wt_.resize(static_cast<size_t>(taps * c_));
  for (int64_t c = 0; c < c_; ++c) {
    for (int64_t t = 0; t < taps; ++t) wt_[static_cast<size_t>(t * c_ + c)] = w[c * taps + t];
  }
  bias_.assign(static_cast<size_t>(c_), 0.f);
  if (b_) std::memcpy(bias_.data(), b_->const_ptr<float>(), static_cast<size_t>(c_) * sizeof(float));
  x_staged_ = x_->plain() && x_->numel > 0;
  // the sums go straight into a channels-last Y unless a residual shares its storage in
  // another format (added from the workspace first)
  y_staged_ = y_->plain() || (r_ && !r_->channels_last());
  if (x_staged_) xt_at_ = plan_.add(static_cast<size_t>(x_->numel) * sizeof(float));
  if (y_staged_) yt_at_ = plan_.add(static_cast<size_t>(y_->numel) * sizeof(float));
  act_ = activation_in_place(dev_, fusion, *y_);
  act2_ = activation_in_place(dev_, then, *y_);
  Prim::share_scratchpad(&plan_, {&act_, &act2_});
}

#pragma GCC push_options
#pragma GCC target("avx512f,fma")
// The taps of a kernel axis whose input index o * st + t * dl - pd falls inside [0, in).
inline void dw3d_taps(int64_t o, int64_t st, int64_t dl, int64_t pd, int64_t kk, int64_t in, int64_t* lo,
                      int64_t* hi) {
  *lo = kk, *hi = 0;
  for (int64_t t = 0; t < kk; ++t) {
    const int64_t i = o * st + t * dl - pd;
    if (i >= 0 && i < in) *lo = std::min(*lo, t), *hi = t + 1;
  }
}

// The sums of one output voxel over NV vectors of 16 channels from channel c (the last
// masked by `tail`), held in NV independent registers across every tap in range (one chain
// of dependent FMAs would wait on each one's latency). `add`: add what `out` holds (a
// channels-last residual).
template <int NV>
inline void dw3d_voxel(const float* xt, int64_t x0, const float* wt, const float* bias, float* out, int64_t c,
                       __mmask16 tail,
                       const int64_t* tap_lo, const int64_t* tap_hi, const int64_t* k, const int64_t* step,
                       int64_t C, bool add) {
  __m512 acc[NV];
  __mmask16 m[NV];
  for (int v = 0; v < NV; ++v) {
    m[v] = v == NV - 1 ? tail : __mmask16(0xFFFF);
    acc[v] = _mm512_maskz_loadu_ps(m[v], bias + c + 16 * v);
  }
  for (int64_t kd = tap_lo[0]; kd < tap_hi[0]; ++kd) {
    for (int64_t kh = tap_lo[1]; kh < tap_hi[1]; ++kh) {
      const int64_t xr = x0 + kd * step[0] + kh * step[1] + c;
      const float* wr = wt + (kd * k[1] + kh) * k[2] * C + c;
      for (int64_t kw = tap_lo[2]; kw < tap_hi[2]; ++kw) {
        const float* xv = xt + (xr + kw * step[2]);
        const float* wv = wr + kw * C;
        for (int v = 0; v < NV; ++v) {
          acc[v] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[v], wv + 16 * v), _mm512_maskz_loadu_ps(m[v], xv + 16 * v),
                                   acc[v]);
        }
      }
    }
  }
  for (int v = 0; v < NV; ++v) {
    if (add) acc[v] = _mm512_add_ps(acc[v], _mm512_maskz_loadu_ps(m[v], out + c + 16 * v));
    _mm512_mask_storeu_ps(out + c + 16 * v, m[v], acc[v]);
  }
}

// One output voxel row (n, od, oh) of the channels-last sums, 64 channels at a time.
void dw3d_row(const float* xt, const float* wt, const float* bias, float* yt, int64_t n, int64_t od, int64_t oh,
              const int64_t* k, const int64_t* s, const int64_t* d, const int64_t* p, int64_t C, int64_t D, int64_t H,
              int64_t W, int64_t OW, bool add) {
  int64_t lo[3], hi[3];
  dw3d_taps(od, s[0], d[0], p[0], k[0], D, &lo[0], &hi[0]);
  dw3d_taps(oh, s[1], d[1], p[1], k[1], H, &lo[1], &hi[1]);
  // input elements between taps along D, H and W
  const int64_t step[3] = {d[0] * H * W * C, d[1] * W * C, d[2] * C};
  for (int64_t ow = 0; ow < OW; ++ow) {
    dw3d_taps(ow, s[2], d[2], p[2], k[2], W, &lo[2], &hi[2]);
    // the offset of tap (0, 0, 0)'s input voxel, possibly outside: only taps in range are read
    const int64_t x0 = (((n * D + od * s[0] - p[0]) * H + oh * s[1] - p[1]) * W + ow * s[2] - p[2]) * C;
    float* out = yt + ow * C;
    for (int64_t c = 0; c < C; c += 64) {
      const int64_t left = std::min<int64_t>(C - c, 64);
      const int nv = static_cast<int>((left + 15) / 16);
      const int64_t last = left - 16 * (nv - 1);
      const __mmask16 tail = last == 16 ? __mmask16(0xFFFF) : __mmask16((1u << last) - 1);
      switch (nv) {
        case 4: dw3d_voxel<4>(xt, x0, wt, bias, out, c, tail, lo, hi, k, step, C, add); break;
        case 3: dw3d_voxel<3>(xt, x0, wt, bias, out, c, tail, lo, hi, k, step, C, add); break;
        case 2: dw3d_voxel<2>(xt, x0, wt, bias, out, c, tail, lo, hi, k, step, C, add); break;
        default: dw3d_voxel<1>(xt, x0, wt, bias, out, c, tail, lo, hi, k, step, C, add); break;
      }
    }
  }
}
#pragma GCC pop_options

Status Dw3dKernel::run(ExecContext& ctx) {
  const int threads = omp_get_max_threads();
  const float* xt = ctx.ptr<const float>(*x_);
  if (x_staged_) {
    float* staged = reinterpret_cast<float*>(ctx.workspace + xt_at_);
    transpose::batched_4byte(xt, staged, n_, c_, id_ * ih_ * iw_, threads);
    xt = staged;
  }
  float* y = ctx.ptr<float>(*y_);
  float* yt = y_staged_ ? reinterpret_cast<float*>(ctx.workspace + yt_at_) : y;
  const float* r = r_ ? ctx.ptr<const float>(*r_) : nullptr;
  const int64_t voxels = od_ * oh_ * ow_;
  // a channels-last residual is added as each sum is stored: copied into Y first unless it
  // is already there (codegen's sum in place)
  const bool add = r && r_->channels_last() && !y_staged_;
  if (add && r != y) std::memcpy(y, r, static_cast<size_t>(y_->numel) * sizeof(float));
  const int64_t rows = n_ * od_ * oh_;
#pragma omp parallel for schedule(static) if (rows * ow_ * c_ * k_[0] * k_[1] * k_[2] >= 65536)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t n = row / (od_ * oh_), od = (row / oh_) % od_, oh = row % oh_;
    dw3d_row(xt, wt_.data(), bias_.data(), yt + row * ow_ * c_, n, od, oh, k_, s_, d_, p_, c_, id_, ih_, iw_, ow_,
             add);
  }
  if (r && !add) {  // a residual in the other order than the sums (channels-last in yt)
    if (r_->channels_last()) {  // y plain: the residual in the sums' order
      for (int64_t i = 0; i < y_->numel; ++i) yt[i] += r[i];
    } else {  // plain (possibly Y's own storage: added before the transpose overwrites it)
      for (int64_t n = 0; n < n_; ++n) {
        for (int64_t c = 0; c < c_; ++c) {
          const float* rc = r + (n * c_ + c) * voxels;
          float* yc = yt + n * voxels * c_ + c;
          for (int64_t v = 0; v < voxels; ++v) yc[v * c_] += rc[v];
        }
      }
    }
  }
  if (y_staged_) {
    if (y_->plain()) {
      transpose::batched_4byte(yt, y, n_, voxels, c_, threads);
    } else {
      std::memcpy(y, yt, static_cast<size_t>(y_->numel) * sizeof(float));
    }
  }
  if (act_.valid()) act_.execute(ctx);
  if (act2_.valid()) act2_.execute(ctx);
  return Status::Ok();
}

// ---- 1-D convolution of few channels -------------------------------------------------------
// A 1-D convolution (the [N, C, 1, W] view; group 1, or groups that do not fill vectors:
// each group a row of its own) of at most 64 input and 64 output channels a group (128
// outputs from at most 16 inputs) on channels-last rows: a vocoder's or a speech encoder's
// residual stacks (HiFi-GAN: 12-48 channels, 3-11 taps, dilations 1-5, rows of 160-2560
// outputs). oneDNN
// creates a kernel of its own for each such row (its brgemm descriptor grows with the row's
// length, then the JIT code): 1-5 ms each, 86 of HiFi-GAN's 90 ms load. These sums have no
// code to generate. A block of T output positions keeps T x NV vectors of 16 output channels
// in registers across every tap and input channel (weights stored [tap][ci][NV * 16], zeros
// past the last channel), each input value broadcast once for the NV vectors; positions
// whose taps reach into the padding sum the taps in range one position at a time. The
// residual (channels-last; it may be Y's own storage) and a Relu / LeakyRelu / Clip
// activation apply as each sum is stored; other activations follow as oneDNN eltwise
// primitives in place, in the order the oneDNN kernel's post-ops apply them. Needs AVX-512.
constexpr int64_t kConv1dMaxChannels = 64;
// Up to 128 output channels (8 vectors of 16) from at most this many input channels: a
// learnable front end's filterbank (LEAF: 1 -> 80 channels, 201 taps, 8000 positions) ran on
// oneDNN's gemm convolution in 15.1 ms a 4-sample chunk, here 5.3; 1 -> 128 (10 taps,
// stride 5) 1.37 -> 0.67 ms, 8 -> 100 0.40 -> 0.37; 16 -> 128 (5 taps) 2.1 against oneDNN's
// 1.8-2.1. From more input channels oneDNN was as fast or up to 15% faster (64 -> 128, 3
// taps: 4.6 against 5.4 ms).
constexpr int64_t kConv1dWideMaxInputs = 16;
constexpr int64_t kConv1dWideMaxOutputs = 128;

// Whether the node is such a convolution by its shapes (the layout question answers NHWC
// for it without asking oneDNN).
bool conv1d_shape(const KernelArgs& a) {
  if (a.inputs.size() < 2 || !a.inputs[0] || !a.inputs[1] || !cpu_has_avx512() ||
      !__builtin_cpu_supports("avx512vl")) {
    return false;
  }
  const TensorInfo& x = a.in(0);
  const TensorInfo& w = a.in(1);
  const int64_t groups = a.attr_int("group", 1);
  if (x.rank() != 4 || w.rank() != 4 || groups < 1 || x.shape[1] % groups != 0 || w.shape[0] % groups != 0 ||
      x.shape[1] / groups != w.shape[1]) {
    return false;
  }
  // per group: the kernel sums each group's channels as a convolution of its own
  const int64_t cin = x.shape[1] / groups, cout = w.shape[0] / groups;
  if (groups > 1) {
    // oneDNN's jit kernels take groups whose channels fill its vectors, and depthwise ones;
    // others (a MelGAN discriminator's 4 -> 16, 4 -> 8, 2 -> 4 channels a group, 41 taps,
    // stride 4) went to its GEMM convolution: 657 us for one layer, ONNX Runtime 1.6 ms
    // for the whole model
    if ((cin % 16 == 0 && cout % 16 == 0) || (cin == 1 && cout == 1)) return false;
  }
  // a pointwise row (one tap) is a matrix product: oneDNN's 1x1 kernel creates in ~0.03 ms
  // and ran it faster (16 -> 16 channels, 8 x 2560 outputs: 126-137 against 137-154 us)
  return x.shape[2] == 1 && w.shape[2] == 1 && w.shape[3] > 1 &&
         cin >= 1 && cin <= kConv1dMaxChannels && cout >= 1 &&
         (cout <= kConv1dMaxChannels || (cout <= kConv1dWideMaxOutputs && cin <= kConv1dWideMaxInputs)) &&
         x.dtype == DType::kFloat32 && w.dtype == DType::kFloat32;
}

// The share of the taps the rows' sums take that fall inside the input row: the kernel sums
// an edge block's taps over a zero-padded copy, so a row shorter than its kernel is mostly
// zeros (an unseen CREPE's 64-tap convolutions over rows of 8-32 positions: 489 us for the
// last against oneDNN's 95). Counted per tap: the outputs whose input for it is in range.
double conv1d_inside_share(const KernelArgs& a) {
  Shape expect;
  const ConvGeometry g = check_conv(a, a.in(0), a.in(1), &expect);
  const int64_t iw = a.in(0).shape[3], ow = expect[3], k = a.in(1).shape[3];
  const int64_t s = g.strides[1], d = g.dilates[1] + 1, p = g.pad_l[1];
  if (ow <= 0 || k <= 0 || s <= 0) return 1.0;
  int64_t inside = 0;
  for (int64_t j = 0; j < k; ++j) {  // outputs o with 0 <= o * s + j * d - p < iw
    const int64_t off = j * d - p;
    const int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
    const int64_t hi = iw - 1 - off < 0 ? -1 : std::min<int64_t>(ow - 1, (iw - 1 - off) / s);
    if (hi >= lo) inside += hi - lo + 1;
  }
  return static_cast<double>(inside) / static_cast<double>(ow * k);
}

bool conv1d_applies(const KernelArgs& a) {
  if (!conv1d_shape(a) || a.outputs.size() != 1 || !a.in(0).channels_last() || !a.out(0).channels_last() ||
      !a.in(1).constant() || conv1d_inside_share(a) < 0.5) {
    return false;
  }
  const Fusion fusion = parse_fusion(a);
  const size_t n_in = a.inputs.size() - (fusion.sum ? 1 : 0);
  if (fusion.sum && (a.inputs.size() < 3 || !a.inputs.back() || !a.inputs.back()->channels_last())) return false;
  if (n_in == 3 && a.opt_in(2) && !a.opt_in(2)->constant()) return false;
  return n_in == 2 || n_in == 3;
}

// An activation the stores apply: Relu with a slope for negatives (LeakyRelu; 0: Relu), or
// Clip to [lo, hi].
struct RowAct {
  int kind = 0;  // 0 none, 1 (leaky) relu, 2 clip
  float a = 0.f, b = 0.f;
};

bool row_act(const Fusion& f, RowAct* out) {
  if (!f.activation || f.linear) return false;
  if (f.alg == dnnl::algorithm::eltwise_relu) {
    *out = {1, f.alpha, 0.f};
    return true;
  }
  if (f.alg == dnnl::algorithm::eltwise_clip || f.alg == dnnl::algorithm::eltwise_clip_v2) {
    *out = {2, f.alpha, f.beta};
    return true;
  }
  return false;
}

// cin / cout: one group's channels; xs / ys: the floats between two pixels of the input /
// output rows (all groups' channels; the same as cin / cout for one group).
struct Row1d {
  int64_t cin, cout, iw, ow, k, s, d, p;
  int64_t xs, ys;
  RowAct act[2];
};

class Conv1dKernel : public Kernel {
 public:
  explicit Conv1dKernel(const KernelArgs& a);
  size_t workspace_bytes() const override { return plan_.total(); }
  void set_instances(int n) override {
    for (Prim* p : {&act_, &act2_}) p->set_instances(n, host_engine(dev_));
  }
  Status run(ExecContext& ctx) override;
  std::string impl() const override { return "conv 1-D channels-last avx512"; }

 private:
  const Device& dev_;
  const TensorInfo *x_ = nullptr, *r_ = nullptr, *y_ = nullptr;
  int64_t n_ = 0;
  int64_t groups_ = 1;
  bool lanes8_ = false;  // Lanes8, else Lanes16
  int nv_ = 1;  // vectors of output channels
  Row1d g_{};
  std::vector<float> wp_;  // [tap][ci][nv * 16]
  std::vector<float> bias_;  // [nv * 16]
  WorkspacePlan plan_;
  Prim act_, act2_;  // activations the stores do not apply, in place on Y
};

Conv1dKernel::Conv1dKernel(const KernelArgs& a) : dev_(*a.device) {
  a.expect_outputs(1, 1);
  const Fusion fusion = parse_fusion(a);
  const Fusion then = parse_activation(a, "activation2");
  if (then.activation && !fusion.activation) invalid("activation2 follows a plain Conv's activation");
  size_t n_in = a.inputs.size();
  if (fusion.sum) r_ = &a.in(--n_in);
  if (n_in < 2 || n_in > 3) invalid("expected 2 or 3 inputs (X, W, optional B), got ", n_in);
  x_ = &a.in(0);
  const TensorInfo& w = a.in(1);
  const TensorInfo* b = n_in == 3 ? a.opt_in(2) : nullptr;
  y_ = &a.out(0);
  a.expect_dtype(*y_, DType::kFloat32, "output Y");
  Shape expect;
  const ConvGeometry g = check_conv(a, *x_, w, &expect);
  if (y_->shape != expect) invalid("output shape ", shape_str(y_->shape), " must be ", shape_str(expect));
  groups_ = a.attr_int("group", 1);
  const int64_t M = w.shape[0] / groups_, C = x_->shape[1] / groups_, K = w.shape[3];
  if (b) {
    a.expect_dtype(*b, DType::kFloat32, "bias B");
    if (b->shape != Shape{M * groups_}) invalid("bias shape ", shape_str(b->shape), " must be [", M * groups_, "]");
  }
  if (r_) {
    a.expect_dtype(*r_, DType::kFloat32, "residual");
    if (r_->shape != y_->shape || !r_->channels_last()) {
      invalid("residual must be a channels-last ", shape_str(y_->shape));
    }
  }
  n_ = x_->shape[0];
  g_.cin = C, g_.cout = M, g_.iw = x_->shape[3], g_.ow = y_->shape[3], g_.k = K;
  g_.s = g.strides[1], g_.d = g.dilates[1] + 1, g_.p = g.pad_l[1];
  g_.xs = C * groups_, g_.ys = M * groups_;
  // 8-wide vectors where they take clearly fewer FMA cycles than 16-wide ones (narrow_fma_gain:
  // 2 here, so at 8, 24, 40 or 56 channels: 4 -> 4 channels, 7 taps, 2560 outputs 11 us
  // against oneDNN's 23; 24 -> 24, 3 taps 44 against 55), else 16-wide
  // (only where the last 16-wide vector would be at most half full: 1, 3, 5 or 7 8-wide ones)
  const int64_t n8 = (M + 7) / 8;
  lanes8_ = n8 % 2 == 1 && n8 <= 7 && static_cast<double>(n8) / narrow_fma_gain() < 0.9 * static_cast<double>((M + 15) / 16);
  const int64_t lanes = lanes8_ ? 8 : 16;
  nv_ = static_cast<int>((M + lanes - 1) / lanes);
  const int64_t width = lanes * nv_;
  const float* wv = w.const_ptr<float>();  // [groups * M][C][1][K]
  // per group: [tap][ci][width]
  wp_.assign(static_cast<size_t>(groups_ * K * C * width), 0.f);
  for (int64_t gr = 0; gr < groups_; ++gr) {
    float* wg = wp_.data() + gr * K * C * width;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t t = 0; t < K; ++t) wg[(t * C + c) * width + m] = wv[((gr * M + m) * C + c) * K + t];
      }
    }
  }
  bias_.assign(static_cast<size_t>(groups_ * width), 0.f);
  if (b) {
    for (int64_t gr = 0; gr < groups_; ++gr) {
      std::memcpy(bias_.data() + gr * width, b->const_ptr<float>() + gr * M, static_cast<size_t>(M) * sizeof(float));
    }
  }
  // the stores apply the leading simple activations; the first other one and all after it
  // run as primitives
  int stored = 0;
  if (row_act(fusion, &g_.act[0])) {
    stored = 1;
    if (row_act(then, &g_.act[1])) stored = 2;
  }
  if (stored < 1) act_ = activation_in_place(dev_, fusion, *y_);
  if (stored < 2) act2_ = activation_in_place(dev_, then, *y_);
  Prim::share_scratchpad(&plan_, {&act_, &act2_});
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,fma")
// The vectors of output channels: 16 wide, or 8 wide for rows of at most 8 channels (the
// CPU issues two 8-wide FMAs where it issues one 16-wide one: a 16-wide sum of 8 channels
// wastes half of each).
struct Lanes16 {
  using V = __m512;
  using M = __mmask16;
  static constexpr int kW = 16;
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V loadz(M m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, M m, V v) { _mm512_mask_storeu_ps(p, m, v); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V leaky(V v, float a) {
    return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), v, set1(a));
  }
  static V clip(V v, float lo, float hi) { return _mm512_min_ps(_mm512_max_ps(v, set1(lo)), set1(hi)); }
};

struct Lanes8 {
  using V = __m256;
  using M = __mmask8;
  static constexpr int kW = 8;
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V loadz(M m, const float* p) { return _mm256_maskz_loadu_ps(m, p); }
  static void store(float* p, M m, V v) { _mm256_mask_storeu_ps(p, m, v); }
  static V set1(float f) { return _mm256_set1_ps(f); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V leaky(V v, float a) {
    return _mm256_mask_mul_ps(v, _mm256_cmp_ps_mask(v, _mm256_setzero_ps(), _CMP_LT_OQ), v, set1(a));
  }
  static V clip(V v, float lo, float hi) { return _mm256_min_ps(_mm256_max_ps(v, set1(lo)), set1(hi)); }
};

// Stores outputs t0 .. t0 + cnt - 1 of NV vectors each (the last masked to the channels
// left), adding the residual rows first and applying the activations.
template <class L, int NV, int T>
inline void row_store(typename L::V (&acc)[T][NV], const Row1d& g, float* y, const float* r, int64_t t0,
                      int64_t cnt) {
  typename L::M m[NV];
  for (int v = 0; v < NV; ++v) {
    const int64_t left = g.cout - L::kW * v;
    m[v] = static_cast<typename L::M>(left >= L::kW ? (1u << L::kW) - 1 : (1u << left) - 1);
  }
  y += t0 * g.ys;
  if (r) {
    r += t0 * g.ys;
    for (int t = 0; t < T; ++t) {
      for (int v = 0; v < NV; ++v) {
        if (t < cnt) acc[t][v] = L::add(acc[t][v], L::loadz(m[v], r + t * g.ys + L::kW * v));
      }
    }
  }
  for (const RowAct& f : g.act) {
    if (f.kind == 0) break;
    for (int t = 0; t < T; ++t) {
      for (int v = 0; v < NV; ++v) acc[t][v] = f.kind == 1 ? L::leaky(acc[t][v], f.a) : L::clip(acc[t][v], f.a, f.b);
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int v = 0; v < NV; ++v) {
      if (t < cnt) L::store(y + t * g.ys + L::kW * v, m[v], acc[t][v]);
    }
  }
}

// Outputs t0 .. t0 + cnt - 1 (cnt <= T; T are summed), x0 the block's first input position
// t0 * s - p: in the row itself where every tap of the block falls inside it, else in a
// zero-padded copy of the block's span.
template <class L, int NV, int T>
inline void row_block(const float* x0, const float* wp, const float* bias, const Row1d& g, float* y, const float* r,
                      int64_t t0, int64_t cnt) {
  constexpr int kW = L::kW;
  typename L::V acc[T][NV];
  for (int t = 0; t < T; ++t) {
    for (int v = 0; v < NV; ++v) acc[t][v] = L::load(bias + kW * v);
  }
  const int64_t step = g.s * g.xs;  // input floats between outputs
  // undilated taps of a whole row's channels read one run of k * cin floats from each
  // output's first input: one loop
  const bool one_run = g.d == 1 && g.xs == g.cin;
  const int64_t taps = one_run ? 1 : g.k, run = one_run ? g.k * g.cin : g.cin;
  for (int64_t j = 0; j < taps; ++j) {
    const float* xj = x0 + j * g.d * g.xs;
    const float* wj = wp + j * g.cin * NV * kW;
    for (int64_t c = 0; c < run; ++c) {
      typename L::V w[NV];
      for (int v = 0; v < NV; ++v) w[v] = L::load(wj + (c * NV + v) * kW);
      // the outputs in groups of 4 off one base each: 4 offsets in registers, not T (with T
      // of them GCC kept some in vector registers, moved back on an FMA port: 159 against
      // 172 us at 16 channels, 3 taps, 8 x 2560 outputs)
      const float* base[(T + 3) / 4];
      base[0] = xj + c;
      for (int q = 1; q < (T + 3) / 4; ++q) base[q] = base[q - 1] + 4 * step;
      for (int t = 0; t < T; ++t) {
        const typename L::V xv = L::set1(base[t / 4][(t % 4) * step]);
        for (int v = 0; v < NV; ++v) acc[t][v] = L::fma(xv, w[v], acc[t][v]);
      }
    }
  }
  row_store<L, NV, T>(acc, g, y, r, t0, cnt);
}

// One output, summing only the taps inside the row (an edge block whose span is too long
// for the padded copy).
template <class L, int NV>
inline void row_one(const float* x, const float* wp, const float* bias, const Row1d& g, float* y, const float* r,
                    int64_t t) {
  constexpr int kW = L::kW;
  typename L::V acc[1][NV];
  for (int v = 0; v < NV; ++v) acc[0][v] = L::load(bias + kW * v);
  for (int64_t j = 0; j < g.k; ++j) {
    const int64_t i = t * g.s + j * g.d - g.p;
    if (i < 0 || i >= g.iw) continue;
    const float* xj = x + i * g.xs;
    const float* wj = wp + j * g.cin * NV * kW;
    for (int64_t c = 0; c < g.cin; ++c) {
      const typename L::V xv = L::set1(xj[c]);
      for (int v = 0; v < NV; ++v) acc[0][v] = L::fma(xv, L::load(wj + (c * NV + v) * kW), acc[0][v]);
    }
  }
  row_store<L, NV, 1>(acc, g, y, r, t, 1);
}

// The padded copy of an edge block's span, on the stack up to this many floats.
constexpr int64_t kRowSpanFloats = 8192;

// Blocks b0 .. b1 - 1 of T outputs of one row.
template <class L, int NV, int T>
void row_blocks(const float* x, const float* wp, const float* bias, const Row1d& g, float* y, const float* r,
                int64_t b0, int64_t b1) {
  alignas(64) float span[kRowSpanFloats];
  const int64_t positions = (T - 1) * g.s + (g.k - 1) * g.d + 1;  // input positions a block reads
  for (int64_t bk = b0; bk < b1; ++bk) {
    const int64_t t0 = bk * T, cnt = std::min<int64_t>(T, g.ow - t0);
    const int64_t first = t0 * g.s - g.p;  // the block's first input position
    if (first >= 0 && first + positions <= g.iw) {
      row_block<L, NV, T>(x + first * g.xs, wp, bias, g, y, r, t0, cnt);
    } else if (positions * g.cin <= kRowSpanFloats) {
      for (int64_t i = 0; i < positions; ++i) {
        const int64_t at = first + i;
        float* to = span + i * g.cin;
        if (at >= 0 && at < g.iw) {
          std::memcpy(to, x + at * g.xs, static_cast<size_t>(g.cin) * sizeof(float));
        } else {
          std::memset(to, 0, static_cast<size_t>(g.cin) * sizeof(float));
        }
      }
      Row1d packed = g;  // the span holds this group's channels only
      packed.xs = g.cin;
      row_block<L, NV, T>(span, wp, bias, packed, y, r, t0, cnt);
    } else {
      for (int64_t t = t0; t < t0 + cnt; ++t) row_one<L, NV>(x, wp, bias, g, y, r, t);
    }
  }
}
#pragma GCC pop_options

// Outputs a block: T x NV sums (and NV weights) in registers, by NV.
constexpr int kRowT[9] = {0, 12, 12, 8, 6, 4, 4, 3, 3};

Status Conv1dKernel::run(ExecContext& ctx) {
  const float* x = ctx.ptr<const float>(*x_);
  float* y = ctx.ptr<float>(*y_);
  const float* r = r_ ? ctx.ptr<const float>(*r_) : nullptr;
  const Row1d& g = g_;
  const int threads = omp_get_max_threads();
  const int64_t rows = n_ * groups_;  // one row a sample and group
  const int64_t macs = rows * g.ow * g.k * g.cin * g.cout;
  // each row's blocks cut in pieces so that every thread has some at batch 1
  const int64_t pieces = macs >= 65536 ? std::max<int64_t>(1, (2 * threads + rows - 1) / rows) : 1;
  const int64_t items = rows * pieces;
  const int nv = nv_;
  const bool lanes8 = lanes8_;
  const int64_t width = (lanes8 ? 8 : 16) * nv;
  const int64_t blocks = (g.ow + kRowT[nv] - 1) / kRowT[nv];
#pragma omp parallel for schedule(static) if (items > 1)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t row = it / pieces, piece = it % pieces;
    const int64_t n = row / groups_, gr = row % groups_;
    const int64_t b0 = blocks * piece / pieces, b1 = blocks * (piece + 1) / pieces;
    const float* xn = x + n * g.iw * g.xs + gr * g.cin;
    float* yn = y + n * g.ow * g.ys + gr * g.cout;
    const float* rn = r ? r + n * g.ow * g.ys + gr * g.cout : nullptr;
    const float* wp = wp_.data() + gr * g.k * g.cin * width;
    const float* bias = bias_.data() + gr * width;
    if (lanes8) {
      switch (nv) {
        case 1: row_blocks<Lanes8, 1, kRowT[1]>(xn, wp, bias, g, yn, rn, b0, b1); break;
        case 3: row_blocks<Lanes8, 3, kRowT[3]>(xn, wp, bias, g, yn, rn, b0, b1); break;
        case 5: row_blocks<Lanes8, 5, kRowT[5]>(xn, wp, bias, g, yn, rn, b0, b1); break;
        default: row_blocks<Lanes8, 7, kRowT[7]>(xn, wp, bias, g, yn, rn, b0, b1); break;  // 7
      }
    } else {
      switch (nv) {
        case 1: row_blocks<Lanes16, 1, kRowT[1]>(xn, wp, bias, g, yn, rn, b0, b1); break;
        case 2: row_blocks<Lanes16, 2, kRowT[2]>(xn, wp, bias, g, yn, rn, b0, b1); break;
        case 3: row_blocks<Lanes16, 3, kRowT[3]>(xn, wp, bias, g, yn, rn, b0, b1); break;
        case 4: row_blocks<Lanes16, 4, kRowT[4]>(xn, wp, bias, g, yn, rn, b0, b1); break;
        case 5: row_blocks<Lanes16, 5, kRowT[5]>(xn, wp, bias, g, yn, rn, b0, b1); break;
        case 6: row_blocks<Lanes16, 6, kRowT[6]>(xn, wp, bias, g, yn, rn, b0, b1); break;
        case 7: row_blocks<Lanes16, 7, kRowT[7]>(xn, wp, bias, g, yn, rn, b0, b1); break;
        default: row_blocks<Lanes16, 8, kRowT[8]>(xn, wp, bias, g, yn, rn, b0, b1); break;  // 8
      }
    }
  }
  if (act_.valid()) act_.execute(ctx);
  if (act2_.valid()) act2_.execute(ctx);
  return Status::Ok();
}

// ---- inverted-residual block (ConvBlock) ---------------------------------------------
block::Clip block_clip(const Fusion& f, const char* stage) {
  if (!f.activation) return {};
  if (f.linear) invalid("the block kernel takes no scale or shift after the ", stage, " stage's activation");
  const float inf = std::numeric_limits<float>::infinity();
  if (f.alg == dnnl::algorithm::eltwise_relu && f.alpha == 0.f) return {true, 0.f, inf};
  if (f.alg == dnnl::algorithm::eltwise_clip_v2 || f.alg == dnnl::algorithm::eltwise_clip) {
    return {true, f.alpha, f.beta};
  }
  invalid("the block kernel applies Relu or Clip only, the ", stage, " stage has another activation");
}

// Where sample 0 of `t` starts and how its elements are laid out, if the block kernel can
// address its format directly (NHWC or nChw16c).
bool block_view(const TensorInfo& t, block::View* v, int64_t* ns) {
  const int64_t c = t.shape[1], h = t.shape[2], w = t.shape[3];
  if (t.format == Format::kNhwc) {
    *v = block::View{nullptr, 16, w * c, c};
    *ns = h * w * c;
    return true;
  }
  if (t.format == Format::kNChw16c) {
    *v = block::View{nullptr, h * w * 16, w * 16, 16};
    *ns = (c + 15) / 16 * 16 * h * w;
    return true;
  }
  return false;
}

// A 4-D tensor a block kernel reads or writes: in place, or through a nChw16c copy in the
// workspace (converted by a oneDNN reorder) when stored in another format.
struct Side {
  const TensorInfo* t = nullptr;
  block::View view;
  int64_t ns = 0;
  bool staged = false;
  size_t at = 0;  // workspace offset when staged

  float* base(ExecContext& ctx) const {
    return staged ? reinterpret_cast<float*>(ctx.workspace + at) : ctx.ptr<float>(*t);
  }
};

void bind(const Device& dev, WorkspacePlan* plan, Side* side, const TensorInfo& t, Prim* reorder, bool out) {
  side->t = &t;
  if (block_view(t, &side->view, &side->ns)) return;
  // Stage through nChw16c.
  TensorInfo staged = t;
  staged.format = Format::kNChw16c;
  block_view(staged, &side->view, &side->ns);
  const dnnl::memory::desc md = tensor_md(t), blocked = format_md(t.shape, Format::kNChw16c);
  side->staged = true;
  side->at = plan->add(blocked.get_size());
  const dnnl::engine& eng = host_engine(dev);
  if (out) {
    *reorder = Prim(dnnl::reorder::primitive_desc(eng, blocked, eng, md, make_attr()));
    reorder->arg(DNNL_ARG_FROM, blocked, Ref::workspace(side->at));
    reorder->arg(DNNL_ARG_TO, md, Ref::of(t));
  } else {
    *reorder = Prim(dnnl::reorder::primitive_desc(eng, md, eng, blocked, make_attr()));
    reorder->arg(DNNL_ARG_FROM, md, Ref::of(t));
    reorder->arg(DNNL_ARG_TO, blocked, Ref::workspace(side->at));
  }
}

class ConvBlockKernel : public Kernel {
 public:
  explicit ConvBlockKernel(const KernelArgs& a);
  size_t workspace_bytes() const override { return plan_.total(); }
  void set_instances(int n) override {
    for (Prim* p : {&x_in_, &r_in_, &y_out_}) p->set_instances(n, host_engine(dev_));
  }
  Status run(ExecContext& ctx) override;
  std::string impl() const override { return "block avx512"; }

 private:
  const Device& dev_;
  std::unique_ptr<block::Block> block_;
  Side x_, y_, r_;
  Prim x_in_, r_in_, y_out_;
  WorkspacePlan plan_;
  size_t scratch_at_ = 0;
  int threads_ = 1;
};

const float* const_data(const KernelArgs& a, const TensorInfo* t, const char* what) {
  if (!t) return nullptr;
  a.expect_dtype(*t, DType::kFloat32, what);
  if (!t->constant() || !t->data) invalid(what, " must be a constant");
  if (!t->plain()) invalid(what, " must be stored nchw");
  return reinterpret_cast<const float*>(t->data);
}

ConvBlockKernel::ConvBlockKernel(const KernelArgs& a) : dev_(*a.device) {
  if (!block::available()) invalid("ConvBlock needs the block kernel, which needs AVX-512");
  a.expect_outputs(1, 1);
  const Fusion fusion = parse_fusion(a);
  const bool dw = a.attr_int("expand", 0) != 0;  // expand -> depthwise, else depthwise only
  size_t n_in = a.inputs.size();
  const TensorInfo* r = nullptr;
  if (fusion.sum) {
    if (n_in < 5) invalid("sum=1 needs a residual as the last input");
    r = &a.in(--n_in);
  }
  if (n_in < 4) invalid("ConvBlock needs the projection weight and bias after the other inputs");
  const TensorInfo& pw_w = a.in(n_in - 2);
  const TensorInfo* pw_b = a.opt_in(n_in - 1);
  n_in -= 2;
  const TensorInfo* dw_w = nullptr;
  const TensorInfo* dw_b = nullptr;
  if (dw) {
    if (n_in < 4) invalid("expand=1 needs the depthwise weight and bias before the projection's");
    dw_w = &a.in(n_in - 2);
    dw_b = &a.in(n_in - 1);
    n_in -= 2;
  }
  if (n_in < 2 || n_in > 3) invalid("expected X, W and an optional B before the fused stages, got ", n_in, " inputs");
  const TensorInfo& x = a.in(0);
  const TensorInfo& w = a.in(1);
  const TensorInfo* b = n_in == 3 ? a.opt_in(2) : nullptr;
  const TensorInfo& y = a.out(0);
  a.expect_dtype(y, DType::kFloat32, "output Y");
  Shape conv_out;
  check_conv(a, x, w, &conv_out);
  if (x.rank() != 4) invalid("the block kernel is 2-D, input X has shape ", shape_str(x.shape));
  block::Spec s;
  s.h = x.shape[2];
  s.w = x.shape[3];
  s.cin = x.shape[1];
  block::Weights bw;
  if (dw) {
    s.stride = check_dw(a, w, *dw_w, *dw_b);
    s.ce = w.shape[0];
    bw.we = const_data(a, &w, "weight W");
    bw.be = const_data(a, b, "bias B");
    bw.wd = const_data(a, dw_w, "depthwise weight");
    bw.bd = const_data(a, dw_b, "depthwise bias");
    s.act_e = block_clip(fusion, "expand");
    s.act_d = block_clip(parse_activation(a, "dw_activation"), "depthwise");
  } else {
    const int64_t c = s.cin;
    const std::vector<int64_t> st = a.attr_ints("strides", {1, 1});
    if (a.attr_int("group", 1) != c || w.shape != Shape{c, 1, 3, 3} || a.attr_ints("pads", {}) != std::vector<int64_t>{1, 1, 1, 1} ||
        a.attr_ints("dilations", {1, 1}) != std::vector<int64_t>{1, 1} || st.size() != 2 || st[0] != st[1] ||
        (st[0] != 1 && st[0] != 2)) {
      invalid("expand=0 needs a 3x3 depthwise convolution (group = channels, pads 1, stride 1 or 2)");
    }
    if (fusion.activation) invalid("expand=0 has no stage for `activation` (the depthwise one is dw_activation)");
    s.expand = false;
    s.stride = st[0];
    s.ce = c;
    bw.wd = const_data(a, &w, "depthwise weight");
    bw.bd = const_data(a, b, "depthwise bias");
    s.act_d = block_clip(parse_activation(a, "dw_activation"), "depthwise");
  }
  if (b && b->shape != Shape{s.ce}) invalid("bias shape ", shape_str(b->shape), " must be [", s.ce, "]");
  if (pw_w.rank() != 4 || pw_w.shape[1] != s.ce || pw_w.shape[2] != 1 || pw_w.shape[3] != 1) {
    invalid("projection weight shape ", shape_str(pw_w.shape), " must be [P,", s.ce, ",1,1]");
  }
  s.cout = pw_w.shape[0];
  if (pw_b && pw_b->shape != Shape{s.cout}) {
    invalid("projection bias shape ", shape_str(pw_b->shape), " must be [", s.cout, "]");
  }
  bw.wp = const_data(a, &pw_w, "projection weight");
  bw.bp = const_data(a, pw_b, "projection bias");
  s.act_p = block_clip(parse_activation(a, "pw_activation"), "projection");
  const Shape expect = {x.shape[0], s.cout, s.ho(), s.wo()};
  if (y.shape != expect) {
    invalid("output shape ", shape_str(y.shape), " does not match computed ", shape_str(expect), " for input ",
            shape_str(x.shape));
  }
  if (r) {
    a.expect_dtype(*r, DType::kFloat32, "residual");
    if (r->shape != y.shape) {
      invalid("residual shape ", shape_str(r->shape), " does not match output ", shape_str(y.shape));
    }
    s.residual = true;
  }
  bind(dev_, &plan_, &x_, x, &x_in_, false);
  bind(dev_, &plan_, &y_, y, &y_out_, true);
  if (r) bind(dev_, &plan_, &r_, *r, &r_in_, false);
  if (!dw && !x_.staged && x.format == Format::kNhwc && s.cin % 16 != 0) {
    // (a plain input is staged as nChw16c, whose padding is there to read)
    invalid("a block without expansion reads whole channel blocks: ", s.cin, " channels stored nhwc");
  }
  // Pixels 16 floats apart: nChw16c (zero-padded past the channels) or NHWC with 16.
  s.blocked_in = x_.view.ws == 16;
  s.full_out = y_.view.ws == 16;
  block_ = std::make_unique<block::Block>(s, bw);
  threads_ = std::max(1, dev_.threads());
  scratch_at_ = plan_.add(block_->scratch_bytes(threads_));
  Prim::share_scratchpad(&plan_, {&x_in_, &r_in_, &y_out_});
}

Status ConvBlockKernel::run(ExecContext& ctx) {
  if (x_in_.valid()) x_in_.execute(ctx);
  if (r_in_.valid()) r_in_.execute(ctx);
  block::View x = x_.view, y = y_.view, r = r_.view;
  x.base = x_.base(ctx);
  y.base = y_.base(ctx);
  if (r_.t) r.base = r_.base(ctx);
  const int threads = std::min(threads_, omp_get_max_threads());
  block_->run(x_.t->shape[0], x, x_.ns, y, y_.ns, r, r_.ns, reinterpret_cast<float*>(ctx.workspace + scratch_at_),
              threads);
  if (y_out_.valid()) y_out_.execute(ctx);
  return Status::Ok();
}

// ConvHead: a 1x1 Conv, global average pool and fully connected layer as one kernel (see
// block::Head). Inputs: X, W, B (optional), then the fc weight ([classes, C] with trans_b=1,
// else [C, classes]) and its bias ([classes], optional); output [N, classes].
class ConvHeadKernel : public Kernel {
 public:
  explicit ConvHeadKernel(const KernelArgs& a);
  size_t workspace_bytes() const override { return plan_.total(); }
  void set_instances(int n) override { x_in_.set_instances(n, host_engine(dev_)); }
  Status run(ExecContext& ctx) override {
    if (x_in_.valid()) x_in_.execute(ctx);
    block::View x = x_.view;
    x.base = x_.base(ctx);
    head_->run(x, x_.ns, ctx.ptr<float>(*y_), reinterpret_cast<float*>(ctx.workspace + scratch_at_),
               std::min(threads_, omp_get_max_threads()));
    return Status::Ok();
  }
  std::string impl() const override { return "head avx512"; }

 private:
  const Device& dev_;
  std::unique_ptr<block::Head> head_;
  Side x_;
  const TensorInfo* y_ = nullptr;
  Prim x_in_;
  WorkspacePlan plan_;
  size_t scratch_at_ = 0;
  int threads_ = 1;
};

ConvHeadKernel::ConvHeadKernel(const KernelArgs& a) : dev_(*a.device) {
  if (!block::available()) invalid("ConvHead needs the block kernel, which needs AVX-512");
  a.expect_outputs(1, 1);
  const Fusion fusion = parse_fusion(a);
  if (fusion.sum) invalid("ConvHead takes no residual (sum)");
  if (fusion.linear) invalid("ConvHead takes no scale or shift after its activation");
  if (a.inputs.size() != 5) invalid("ConvHead takes X, W, B, the fc weight and bias, got ", a.inputs.size(), " inputs");
  const TensorInfo& x = a.in(0);
  const TensorInfo& w = a.in(1);
  const TensorInfo* b = a.opt_in(2);
  const TensorInfo& fc = a.in(3);
  const TensorInfo* fc_b = a.opt_in(4);
  const TensorInfo& y = a.out(0);
  a.expect_dtype(y, DType::kFloat32, "output Y");
  Shape conv_out;
  check_conv(a, x, w, &conv_out);
  if (x.rank() != 4 || w.shape.size() != 4 || w.shape[2] != 1 || w.shape[3] != 1 || conv_out[2] != x.shape[2] ||
      conv_out[3] != x.shape[3] || a.attr_int("group", 1) != 1) {
    invalid("ConvHead needs a 2-D 1x1 convolution with stride 1, no padding and group 1; input X ", shape_str(x.shape),
            ", weight W ", shape_str(w.shape));
  }
  block::HeadSpec s;
  s.rows = x.shape[0];
  if (s.rows < 1 || s.rows > block::HeadSpec::kMaxRows) {
    invalid("ConvHead runs batches of 1 to ", block::HeadSpec::kMaxRows, ", input X has shape ", shape_str(x.shape));
  }
  s.pixels = x.shape[2] * x.shape[3];
  s.cin = x.shape[1];
  s.cmid = w.shape[0];
  s.fc_transposed = a.attr_int("trans_b", 0) != 0;
  if (fc.rank() != 2 || fc.shape[s.fc_transposed ? 1 : 0] != s.cmid) {
    invalid("fc weight shape ", shape_str(fc.shape), " must be ", s.fc_transposed ? "[classes, " : "[", s.cmid,
            s.fc_transposed ? "]" : ", classes]");
  }
  s.classes = fc.shape[s.fc_transposed ? 0 : 1];
  if (b && b->shape != Shape{s.cmid}) invalid("bias shape ", shape_str(b->shape), " must be [", s.cmid, "]");
  if (fc_b && fc_b->shape != Shape{s.classes}) {
    invalid("fc bias shape ", shape_str(fc_b->shape), " must be [", s.classes, "]");
  }
  if (y.shape != Shape{s.rows, s.classes} || !y.plain()) {
    invalid("output shape ", shape_str(y.shape), " (", format_name(y.format), ") must be [", s.rows, ", ", s.classes,
            "] stored nchw");
  }
  s.act = block_clip(fusion, "convolution");
  block::HeadWeights hw{const_data(a, &w, "weight W"), const_data(a, b, "bias B"), const_data(a, &fc, "fc weight"),
                        const_data(a, fc_b, "fc bias")};
  bind(dev_, &plan_, &x_, x, &x_in_, false);
  s.blocked_in = x_.view.ws == 16;
  y_ = &y;
  head_ = std::make_unique<block::Head>(s, hw);
  threads_ = std::max(1, dev_.threads());
  scratch_at_ = plan_.add(head_->scratch_bytes(threads_));
  Prim::share_scratchpad(&plan_, {&x_in_});
}

}  // namespace

std::unique_ptr<Kernel> make_conv(const KernelArgs& a) {
  if (dw3d_applies(a)) return std::make_unique<Dw3dKernel>(a);
  if (conv1d_applies(a)) return std::make_unique<Conv1dKernel>(a);
  return std::make_unique<ConvKernel>(a, false);
}

std::unique_ptr<Kernel> make_conv_dw(const KernelArgs& a) { return std::make_unique<ConvKernel>(a, true); }

std::unique_ptr<Kernel> make_conv_block(const KernelArgs& a) { return std::make_unique<ConvBlockKernel>(a); }

std::unique_ptr<Kernel> make_conv_head(const KernelArgs& a) { return std::make_unique<ConvHeadKernel>(a); }

// The layout question for a 1-D row (input and kernel height 1) of more than this many
// outputs is asked of a row this long: oneDNN's brgemm descriptor takes time growing with the
// row (8 -> 8 channels, 7 taps, dilation 3: 0.43 ms at 256 outputs, 6.4 ms at 4000; a
// vocoder's 29 such questions took 40 ms of its compile), and the layout it picks is the
// row's, not its length's. The kernel still builds the whole row.
constexpr int64_t kFormatQueryRow = 256;

std::string conv_preferred_format(const KernelArgs& a) {
  const TensorInfo& x = a.in(0);
  const TensorInfo& w = a.in(1);
  Shape out;
  ConvGeometry g = check_conv(a, x, w, &out);
  if (conv1d_shape(a)) return "nhwc";  // Conv1dKernel's
  const dims wdims = weight_dims(w.shape, a.attr_int("group", 1));
  Shape xs = x.shape;
  if (xs.size() == 4 && xs[2] == 1 && w.shape[2] == 1 && out[3] > kFormatQueryRow) {
    // the input of kFormatQueryRow outputs, same pads: (outputs - 1) * stride + span - pads
    const int64_t span = (w.shape[3] - 1) * (g.dilates[1] + 1) + 1;
    const int64_t in = (kFormatQueryRow - 1) * g.strides[1] + span - g.pad_l[1] - g.pad_r[1];
    if (in >= 1 && in <= xs[3]) {
      xs[3] = in;
      out[3] = kFormatQueryRow;
    }
  }
  const dnnl::engine& eng = host_engine(*a.device);
  using cf = dnnl::convolution_forward;
  cf::primitive_desc pd(eng, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                        dnnl::memory::desc(dnnl_dims(xs), dt::f32, tag::any),
                        dnnl::memory::desc(wdims, dt::f32, tag::any),
                        dnnl::memory::desc(dnnl_dims(out), dt::f32, tag::any), g.strides, g.dilates, g.pad_l,
                        g.pad_r, make_attr());
  Format f;
  if (md_format(pd.src_desc(), &f)) return format_name(f);
  return x.rank() == 4 ? "nhwc" : "nchw";
}

}  // namespace ge
