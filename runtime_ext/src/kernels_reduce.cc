// ReduceMean, ReduceSum, ReduceMax on oneDNN reduction. Axes come from the attr "axes"
// or (opset 18) a constant second input; keepdims only changes the output's shape, not
// its bytes, so oneDNN always sees the keepdims form.
#include <algorithm>

#include "dnnl_util.h"
#include "kernels.h"

namespace ge {

namespace {

class ReduceKernel : public PrimitiveOrCopyKernel {  // nothing reduced: a copy
 public:
  explicit ReduceKernel(const KernelArgs& a);
};

ReduceKernel::ReduceKernel(const KernelArgs& a) : PrimitiveOrCopyKernel(*a.device) {
  a.expect_inputs(1, 2);
  a.expect_outputs(1, 1);
  x_ = &a.in(0);
  y_ = &a.out(0);
  a.expect_dtype(*x_, DType::kFloat32, "input X");
  a.expect_dtype(*y_, DType::kFloat32, "output Y");
  const int rank = x_->rank();
  std::vector<int64_t> axes = a.opt_in(1) ? a.const_ints(1) : a.attr_ints("axes", {});
  const bool keepdims = a.attr_int("keepdims", 1) != 0;
  const bool noop = axes.empty() && a.attr_int("noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty() && !noop);
  for (int64_t ax : axes) {
    if (ax < -rank || ax >= rank) invalid("axis ", ax, " out of range for rank ", rank);
    int d = static_cast<int>(ax < 0 ? ax + rank : ax);
    if (reduced[d]) invalid("axis ", ax, " appears twice in axes");
    reduced[d] = true;
  }
  Shape keep_shape, out_shape;
  bool any_real = false;
  for (int d = 0; d < rank; ++d) {
    if (reduced[d]) {
      keep_shape.push_back(1);
      if (keepdims) out_shape.push_back(1);
      any_real = any_real || x_->shape[d] != 1;
    } else {
      keep_shape.push_back(x_->shape[d]);
      out_shape.push_back(x_->shape[d]);
    }
  }
  if (y_->shape != out_shape) {
    invalid("output shape ", shape_str(y_->shape), " does not match computed ", shape_str(out_shape));
  }
  if (!any_real && !(a.op == "ReduceMean" && x_->numel == 0)) return;  // a copy (or empty)
  if (x_->numel == 0) invalid("cannot reduce an empty tensor");
  dnnl::algorithm alg = a.op == "ReduceMean" ? dnnl::algorithm::reduction_mean
                        : a.op == "ReduceSum" ? dnnl::algorithm::reduction_sum
                                              : dnnl::algorithm::reduction_max;
  dnnl::memory::desc xmd = plain_md(x_->shape), ymd = plain_md(keep_shape);
  dnnl::reduction::primitive_desc pd(dev_.engine(), alg, xmd, ymd, 0.f, 0.f, make_attr());
  prim_ = Prim(pd);
  prim_.arg(DNNL_ARG_SRC, xmd, Ref::of(*x_));
  prim_.arg(DNNL_ARG_DST, ymd, Ref::of(*y_));
  Prim::share_scratchpad(&plan_, {&prim_});
}

}  // namespace

std::unique_ptr<Kernel> make_reduce(const KernelArgs& a) { return std::make_unique<ReduceKernel>(a); }

}  // namespace ge
