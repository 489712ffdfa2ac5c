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
// its primitive wants. Activations are plain (the layout pass keeps them so).
#include "dnnl_util.h"
#include "kernels.h"

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

std::unique_ptr<Kernel> make_conv_transpose(const KernelArgs& a) { return std::make_unique<DeconvKernel>(a); }
void check_conv_transpose(const KernelArgs& a) { plan_deconv(a, false); }

}  // namespace ge
