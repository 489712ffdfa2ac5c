// Conv on oneDNN. Tensors are NCHW (or NCW / NCDHW), or NHWC when the runtime stored them
// channels-last (layout.h); inside, oneDNN uses the layout it prefers. Constant weights are reordered once at load into a kernel-owned buffer;
// activations are reordered in and out through the stream workspace when oneDNN's chosen
// layout is not the plain one.
#include <cstring>

#include "dnnl_util.h"
#include "kernels.h"

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
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      int64_t out = (in + strides[i] - 1) / strides[i];
      int64_t total = std::max<int64_t>(0, add_checked(mul_checked(out - 1, strides[i]), span - in));
      pb = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    } else if (auto_pad == "VALID") {
      pb = pe = 0;
    } else if (auto_pad != "NOTSET") {
      invalid("unknown auto_pad '", auto_pad, "'");
    }
    if (pb < 0 || pe < 0) invalid("pads must be >= 0, got ", shape_str(pads));
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
  explicit ConvKernel(const KernelArgs& a);
  size_t workspace_bytes() const override { return plan_.total(); }
  void bind_workspace(uint8_t* ws) override;
  Status run(ExecContext& ctx) override;

 private:
  const Device& dev_;
  const TensorInfo* x_ = nullptr;
  const TensorInfo* w_ = nullptr;
  const TensorInfo* b_ = nullptr;
  const TensorInfo* r_ = nullptr;  // residual (sum post-op)
  const TensorInfo* y_ = nullptr;
  dnnl::convolution_forward::primitive_desc pd_;
  dnnl::memory::desc x_md_, y_md_, r_md_, w_md_;  // the tensors as stored
  BoundPrimitive conv_, src_in_, res_in_, dst_out_, w_in_;
  AlignedBuffer weights_;           // weights in oneDNN's layout (if not used in place)
  const void* weights_ptr_ = nullptr;
  WorkspacePlan plan_;
  size_t src_at_ = 0, dst_at_ = 0;
  uint8_t* residual_target_ = nullptr;  // the primitive's destination (y or workspace)
};

ConvKernel::ConvKernel(const KernelArgs& a) : dev_(*a.device) {
  a.expect_outputs(1, 1);
  const Fusion fusion = parse_fusion(a);
  size_t n_in = a.inputs.size();
  if (fusion.sum) {
    if (n_in < 3) invalid("sum=1 needs a residual as the last input");
    r_ = &a.in(n_in - 1);
    --n_in;
  }
  if (n_in < 2 || n_in > 3) invalid("expected 2 or 3 inputs (X, W, optional B), got ", n_in);
  x_ = &a.in(0);
  w_ = &a.in(1);
  b_ = n_in == 3 ? a.opt_in(2) : nullptr;
  y_ = &a.out(0);
  a.expect_dtype(*x_, DType::kFloat32, "input X");
  a.expect_dtype(*w_, DType::kFloat32, "weight W");
  a.expect_dtype(*y_, DType::kFloat32, "output Y");
  const Shape& xs = x_->shape;
  const Shape& ws = w_->shape;
  const int rank = x_->rank();
  if (rank < 3 || rank > 5) invalid("input X must be N,C,spatial... of rank 3 to 5, got ", shape_str(xs));
  if (w_->rank() != rank) invalid("weight shape ", shape_str(ws), " must have rank ", rank);
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
  Shape expect = {xs[0], M};
  expect.insert(expect.end(), g.out.begin(), g.out.end());
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

  // oneDNN descriptors. A channels-last tensor is handed to oneDNN as it is (its fast
  // convolutions work on N,H,W,C); for a plain one oneDNN picks the layout (`any`) and the
  // kernel converts in the stream workspace.
  const dnnl::engine& eng = dev_.engine();
  x_md_ = tensor_md(*x_);
  y_md_ = tensor_md(*y_);
  if (r_) r_md_ = tensor_md(*r_);
  dims wdims;
  if (group == 1) {
    wdims = dims(ws.begin(), ws.end());
  } else {
    wdims = {group, M / group, ws[1]};
    wdims.insert(wdims.end(), kernel.begin(), kernel.end());
  }
  w_md_ = dnnl::memory::desc(wdims, dt::f32, dims(dense_strides(wdims)));
  dnnl::memory::desc req_x = x_->channels_last() ? x_md_ : dnnl::memory::desc(dnnl_dims(xs), dt::f32, tag::any);
  dnnl::memory::desc req_w(wdims, dt::f32, tag::any);
  dnnl::memory::desc req_y =
      y_->channels_last() ? y_md_ : dnnl::memory::desc(dnnl_dims(y_->shape), dt::f32, tag::any);
  dnnl::post_ops ops;
  if (r_) ops.append_sum(1.f);
  append_activation(fusion, &ops);
  dnnl::primitive_attr attr = make_attr(ops);
  using cf = dnnl::convolution_forward;
  if (b_) {
    dnnl::memory::desc b_md = plain_md(b_->shape);
    pd_ = cf::primitive_desc(eng, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                             req_x, req_w, b_md, req_y, g.strides, g.dilates, g.pad_l, g.pad_r, attr);
  } else {
    pd_ = cf::primitive_desc(eng, dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                             req_x, req_w, req_y, g.strides, g.dilates, g.pad_l, g.pad_r, attr);
  }
  conv_ = BoundPrimitive(pd_);
  dnnl::primitive_attr rattr = make_attr();
  if (pd_.src_desc() != x_md_) {
    src_in_ = BoundPrimitive(dnnl::reorder::primitive_desc(eng, x_md_, eng, pd_.src_desc(), rattr));
    src_at_ = plan_.add(pd_.src_desc().get_size());
  }
  if (pd_.dst_desc() != y_md_) {
    dst_out_ = BoundPrimitive(dnnl::reorder::primitive_desc(eng, pd_.dst_desc(), eng, y_md_, rattr));
    dst_at_ = plan_.add(pd_.dst_desc().get_size());
  }
  if (r_ && r_md_ != pd_.dst_desc()) {
    res_in_ = BoundPrimitive(dnnl::reorder::primitive_desc(eng, r_md_, eng, pd_.dst_desc(), rattr));
  }
  if (pd_.weights_desc() == w_md_) {
    weights_ptr_ = w_->data;  // usable in place
  } else if (w_->constant()) {
    weights_ = reorder_constant(a, w_md_, w_->data, pd_.weights_desc());
    weights_ptr_ = weights_.data();
  } else {  // weights computed at run time: reorder on every run
    weights_ = AlignedBuffer(pd_.weights_desc().get_size());
    weights_ptr_ = weights_.data();
    w_in_ = BoundPrimitive(dnnl::reorder::primitive_desc(eng, w_md_, eng, pd_.weights_desc(), rattr));
    w_in_.arg(DNNL_ARG_FROM, wrap(w_md_, dev_, w_->data));
    w_in_.arg(DNNL_ARG_TO, wrap(pd_.weights_desc(), dev_, weights_ptr_));
  }
  BoundPrimitive::share_scratchpad(&plan_, {&conv_, &src_in_, &res_in_, &dst_out_, &w_in_});
}

void ConvKernel::bind_workspace(uint8_t* ws) {
  const void* src = src_in_.valid() ? ws + src_at_ : x_->data;
  const void* dst = dst_out_.valid() ? ws + dst_at_ : y_->data;
  dnnl::memory src_mem = wrap(pd_.src_desc(), dev_, src);
  dnnl::memory dst_mem = wrap(pd_.dst_desc(), dev_, dst);
  conv_.arg(DNNL_ARG_SRC, src_mem);
  conv_.arg(DNNL_ARG_WEIGHTS, wrap(pd_.weights_desc(), dev_, weights_ptr_));
  if (b_) conv_.arg(DNNL_ARG_BIAS, wrap(plain_md(b_->shape), dev_, b_->data));
  conv_.arg(DNNL_ARG_DST, dst_mem);
  if (src_in_.valid()) {
    src_in_.arg(DNNL_ARG_FROM, wrap(x_md_, dev_, x_->data));
    src_in_.arg(DNNL_ARG_TO, src_mem);
  }
  if (dst_out_.valid()) {
    dst_out_.arg(DNNL_ARG_FROM, dst_mem);
    dst_out_.arg(DNNL_ARG_TO, wrap(y_md_, dev_, y_->data));
  }
  if (res_in_.valid()) {
    res_in_.arg(DNNL_ARG_FROM, wrap(r_md_, dev_, r_->data));
    res_in_.arg(DNNL_ARG_TO, dst_mem);
  }
  residual_target_ = static_cast<uint8_t*>(const_cast<void*>(dst));
  for (BoundPrimitive* p : {&conv_, &src_in_, &res_in_, &dst_out_, &w_in_}) p->bind(ws, dev_);
}

Status ConvKernel::run(ExecContext& ctx) {
  dnnl::stream& s = ctx.dnnl_stream;
  if (src_in_.valid()) src_in_.execute(s);
  if (r_) {  // the sum post-op adds what the destination holds
    if (res_in_.valid()) {
      res_in_.execute(s);
    } else if (r_->data != residual_target_) {
      std::memmove(residual_target_, r_->data, r_->nbytes);
    }
  }
  if (w_in_.valid()) w_in_.execute(s);
  conv_.execute(s);
  if (dst_out_.valid()) dst_out_.execute(s);
  return Status::Ok();
}

}  // namespace

std::unique_ptr<Kernel> make_conv(const KernelArgs& a) { return std::make_unique<ConvKernel>(a); }

}  // namespace ge
