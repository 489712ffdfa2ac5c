// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool on oneDNN pooling, plain layout.
// The output tensor's shape is authoritative (it encodes ceil_mode): the right padding
// given to oneDNN is grown until oneDNN's output size equals it.
#include "dnnl_util.h"
#include "kernels.h"

namespace ge {

namespace {

using dims = dnnl::memory::dims;

class PoolKernel : public PrimitiveKernel {
 public:
  explicit PoolKernel(const KernelArgs& a);

};

PoolKernel::PoolKernel(const KernelArgs& a) : PrimitiveKernel(*a.device) {
  a.expect_inputs(1, 1);
  a.expect_outputs(1, 1);
  const TensorInfo& x = a.in(0);
  const TensorInfo& y = a.out(0);
  a.expect_dtype(x, DType::kFloat32, "input X");
  a.expect_dtype(y, DType::kFloat32, "output Y");
  const int rank = x.rank();
  if (rank < 3 || rank > 5) invalid("input X must be N,C,spatial... of rank 3 to 5, got ", shape_str(x.shape));
  const size_t sp = static_cast<size_t>(rank - 2);
  if (y.rank() != rank || y.shape[0] != x.shape[0] || y.shape[1] != x.shape[1]) {
    invalid("output shape ", shape_str(y.shape), " does not match input ", shape_str(x.shape));
  }
  const bool global = a.op == "GlobalAveragePool" || a.op == "GlobalMaxPool";
  dnnl::algorithm alg;
  if (a.op == "MaxPool" || a.op == "GlobalMaxPool") {
    alg = dnnl::algorithm::pooling_max;
  } else if (global || a.attr_int("count_include_pad", 0) == 0) {
    alg = dnnl::algorithm::pooling_avg_exclude_padding;
  } else {
    alg = dnnl::algorithm::pooling_avg_include_padding;
  }
  dims kernel, strides, dil, pad_l, pad_r;
  if (global) {
    kernel = dims(x.shape.begin() + 2, x.shape.end());
    strides = dims(sp, 1);
    dil = pad_l = pad_r = dims(sp, 0);
    for (size_t i = 0; i < sp; ++i) {
      if (y.shape[2 + i] != 1) invalid("output shape ", shape_str(y.shape), " must have spatial dims of 1");
    }
  } else {
    if (a.outputs.size() > 1 && a.outputs[1]) invalid("the Indices output is not supported");
    std::vector<int64_t> k = a.attr_ints("kernel_shape", {});
    std::vector<int64_t> st = a.attr_ints("strides", std::vector<int64_t>(sp, 1));
    std::vector<int64_t> dl = a.attr_ints("dilations", std::vector<int64_t>(sp, 1));
    std::vector<int64_t> pads = a.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
    if (k.size() != sp) invalid("kernel_shape must have ", sp, " values, got ", shape_str(k));
    if (st.size() != sp) invalid("strides must have ", sp, " values, got ", shape_str(st));
    if (dl.size() != sp) invalid("dilations must have ", sp, " values, got ", shape_str(dl));
    if (pads.size() != 2 * sp) invalid("pads must have ", 2 * sp, " values, got ", shape_str(pads));
    const bool ceil_mode = a.attr_int("ceil_mode", 0) != 0;
    const std::string auto_pad = a.attr_str("auto_pad", "NOTSET");
    for (size_t i = 0; i < sp; ++i) {
      const int64_t in = x.shape[2 + i], out = y.shape[2 + i];
      if (k[i] < 1 || st[i] < 1 || dl[i] < 1) invalid("kernel_shape, strides and dilations must be >= 1");
      const int64_t span = add_checked(mul_checked(k[i] - 1, dl[i]), 1);
      int64_t pb = pads[i], pe = pads[i + sp];
      resolve_auto_pad(auto_pad, in, st[i], span, pads, &pb, &pe);
      if (pb >= span || pe >= span) invalid("pads ", shape_str(pads), " must be smaller than the kernel extent");
      const int64_t padded = add_checked(add_checked(in, pb), pe) - span;
      if (padded < 0) invalid("kernel extent ", span, " exceeds padded input on spatial axis ", i);
      const int64_t floor_out = padded / st[i] + 1;
      const int64_t ceil_out = (padded + st[i] - 1) / st[i] + 1;
      if (out != floor_out && !(ceil_mode && (out == ceil_out || out == ceil_out - 1))) {
        invalid("output shape ", shape_str(y.shape), " does not match input ", shape_str(x.shape),
                " on spatial axis ", i, ": expected ", ceil_mode ? ceil_out : floor_out);
      }
      // Right padding that makes oneDNN's floor-mode output size equal `out`.
      const int64_t need = add_checked(mul_checked(out - 1, st[i]), span) - in - pb;
      kernel.push_back(k[i]);
      strides.push_back(st[i]);
      dil.push_back(dl[i] - 1);
      pad_l.push_back(pb);
      pad_r.push_back(std::max(pe, need));
    }
  }
  dnnl::memory::desc x_md = tensor_md(x), y_md = tensor_md(y);
  if (x.channels_last() && y.plain() && y.rank() == 4 && (y.shape[1] == 1 || y.shape[2] * y.shape[3] == 1)) {
    // A 1x1 (or single-channel) output has the same bytes in both layouts: describe it
    // like the input so oneDNN keeps its channels-last implementation.
    y_md = dnnl::memory::desc(dnnl_dims(y.shape), dt::f32, tag::nhwc);
  }
  dnnl::pooling_forward::primitive_desc pd(host_engine(dev_), dnnl::prop_kind::forward_inference, alg, x_md,
                                           y_md, strides, kernel, dil, pad_l, pad_r, make_attr());
  prim_ = Prim(pd);
  prim_.arg(DNNL_ARG_SRC, x_md, Ref::of(x));
  prim_.arg(DNNL_ARG_DST, y_md, Ref::of(y));
  Prim::share_scratchpad(&plan_, {&prim_});
}

}  // namespace

std::unique_ptr<Kernel> make_pool(const KernelArgs& a) { return std::make_unique<PoolKernel>(a); }

}  // namespace ge
