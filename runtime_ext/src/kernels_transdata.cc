// TransData (GE's layout conversion): one input, one output, the same logical shape and
// dtype, different formats; a oneDNN reorder. Attributes "src_format" and "dst_format"
// must name the formats the spec gives the two tensors.
#include <string>

#include "dnnl_util.h"
#include "kernels.h"

namespace ge {

namespace {

class TransDataKernel : public PrimitiveOrCopyKernel {
 public:
  explicit TransDataKernel(const KernelArgs& a) : PrimitiveOrCopyKernel(*a.device) {
    a.expect_inputs(1, 1);
    a.expect_outputs(1, 1);
    x_ = &a.in(0);
    y_ = &a.out(0);
    if (x_->dtype != y_->dtype) {
      invalid("output dtype ", dtype_name(y_->dtype), " differs from input dtype ", dtype_name(x_->dtype));
    }
    if (x_->shape != y_->shape) {
      invalid("output shape ", shape_str(y_->shape), " differs from input shape ", shape_str(x_->shape));
    }
    for (const auto& [key, t] : {std::pair<const char*, const TensorInfo*>{"src_format", x_}, {"dst_format", y_}}) {
      if (!a.has_attr(key)) invalid("attribute '", key, "' is required");
      const std::string name = a.attr_str(key, "");
      Format f;
      if (!parse_format(name, &f)) invalid("unknown format '", name, "' in attribute '", key, "'");
      if (f != t->format) {
        invalid("attribute ", key, "='", name, "' but tensor '", t->name, "' is stored ", format_name(t->format));
      }
    }
    if (x_->format == y_->format) return;  // a plain copy
    const dnnl::memory::desc from = tensor_md(*x_), to = tensor_md(*y_);
    prim_ = Prim(dnnl::reorder::primitive_desc(dev_.engine(), from, dev_.engine(), to, make_attr()));
    prim_.arg(DNNL_ARG_FROM, from, Ref::of(*x_));
    prim_.arg(DNNL_ARG_TO, to, Ref::of(*y_));
    Prim::share_scratchpad(&plan_, {&prim_});
  }
};

// A reorder between two descriptions of the same logical tensor (used by Transpose).
class ReorderKernel : public PrimitiveKernel {
 public:
  ReorderKernel(const KernelArgs& a, const dnnl::memory::desc& from, const dnnl::memory::desc& to)
      : PrimitiveKernel(*a.device) {
    prim_ = Prim(dnnl::reorder::primitive_desc(dev_.engine(), from, dev_.engine(), to, make_attr()));
    prim_.arg(DNNL_ARG_FROM, from, Ref::of(a.in(0)));
    prim_.arg(DNNL_ARG_TO, to, Ref::of(a.out(0)));
    Prim::share_scratchpad(&plan_, {&prim_});
  }
};

}  // namespace

std::unique_ptr<Kernel> make_transdata(const KernelArgs& a) { return std::make_unique<TransDataKernel>(a); }

std::unique_ptr<Kernel> make_permute(const KernelArgs& a, const std::vector<int64_t>& perm) {
  const TensorInfo& x = a.in(0);
  const TensorInfo& y = a.out(0);
  dt type;
  switch (x.dtype) {
    case DType::kFloat32: type = dt::f32; break;
    case DType::kFloat16: type = dt::f16; break;
    case DType::kInt32: type = dt::s32; break;
    case DType::kInt8: type = dt::s8; break;
    case DType::kUInt8: type = dt::u8; break;
    default: return nullptr;
  }
  const size_t r = perm.size();
  if (r < 2 || r > DNNL_MAX_NDIMS || x.numel == 0 || !x.plain() || !y.plain()) return nullptr;
  // The output's bytes described in the input's logical dims: input dim perm[i] moves
  // with output dim i's stride.
  const Shape ys = dense_strides(y.shape);
  dnnl::memory::dims strides(r);
  for (size_t i = 0; i < r; ++i) strides[static_cast<size_t>(perm[i])] = ys[i];
  const dnnl::memory::desc from = plain_md(x.shape, type);
  const dnnl::memory::desc to(dnnl_dims(x.shape), type, strides);
  dnnl::reorder::primitive_desc pd(a.device->engine(), from, a.device->engine(), to, make_attr(), true);
  if (!pd || std::string(pd.impl_info_str()).rfind("simple", 0) == 0) return nullptr;  // no fast kernel
  return std::make_unique<ReorderKernel>(a, from, to);
}

}  // namespace ge
