// Gather (ONNX): any data dtype, int64 or int32 indices, negative indices wrap. Indices
// are data, so they are checked at run time and a bad one fails the run, naming it.
#include <cstring>

#include "copy.h"
#include "kernels.h"

namespace ge {

namespace {

class GatherKernel : public Kernel {
 public:
  explicit GatherKernel(const KernelArgs& a) {
    a.expect_inputs(2, 2);
    a.expect_outputs(1, 1);
    data_ = &a.in(0);
    idx_ = &a.in(1);
    y_ = &a.out(0);
    if (idx_->dtype != DType::kInt64 && idx_->dtype != DType::kInt32) {
      invalid("indices must be int64 or int32, got ", type_str(idx_->dtype, idx_->shape));
    }
    if (y_->dtype != data_->dtype) {
      invalid("output dtype ", dtype_name(y_->dtype), " differs from data dtype ", dtype_name(data_->dtype));
    }
    const int rank = data_->rank();
    if (rank < 1) invalid("data must have rank >= 1");
    axis_ = normalize_axis(a.attr_int("axis", 0), rank);
    Shape out(data_->shape.begin(), data_->shape.begin() + axis_);
    out.insert(out.end(), idx_->shape.begin(), idx_->shape.end());
    out.insert(out.end(), data_->shape.begin() + axis_ + 1, data_->shape.end());
    if (y_->shape != out) invalid("output shape ", shape_str(y_->shape), " does not match computed ", shape_str(out));
    outer_ = 1;
    for (int d = 0; d < axis_; ++d) outer_ *= data_->shape[d];
    dim_ = data_->shape[axis_];
    inner_bytes_ = static_cast<int64_t>(dtype_size(data_->dtype));
    for (int d = axis_ + 1; d < rank; ++d) inner_bytes_ *= data_->shape[d];
  }

  size_t workspace_bytes() const override { return static_cast<size_t>(idx_->numel) * sizeof(int64_t); }

  Status run(ExecContext& ctx) override {
    const int64_t n = idx_->numel;
    int64_t* idx_buf = reinterpret_cast<int64_t*>(ctx.workspace);
    const uint8_t* raw = ctx.ptr(*idx_);
    // Validate and normalise every index before any byte moves.
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = idx_->dtype == DType::kInt64 ? reinterpret_cast<const int64_t*>(raw)[i]
                                               : reinterpret_cast<const int32_t*>(raw)[i];
      if (v < -dim_ || v >= dim_) {
        return Status::InvalidArgument(
            cat("index ", v, " out of range [", -dim_, ", ", dim_ - 1, "] on axis ", axis_));
      }
      idx_buf[i] = v < 0 ? v + dim_ : v;
    }
    const uint8_t* src = ctx.ptr(*data_);
    uint8_t* dst = ctx.ptr(*y_);
    const int64_t total = outer_ * n;
    auto body = [&](int64_t t) {
      const int64_t o = t / n, i = t % n;
      std::memcpy(dst + t * inner_bytes_, src + (o * dim_ + idx_buf[i]) * inner_bytes_, inner_bytes_);
    };
    for_rows(total, total * inner_bytes_, body);
    return Status::Ok();
  }

 private:
  const TensorInfo* data_;
  const TensorInfo* idx_;
  const TensorInfo* y_;
  int axis_ = 0;
  int64_t outer_ = 1, dim_ = 0, inner_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> make_gather(const KernelArgs& a) { return std::make_unique<GatherKernel>(a); }

}  // namespace ge
