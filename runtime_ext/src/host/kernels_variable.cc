// Writes to a session's variables (variable.h), in place: Assign, AssignAdd, AssignSlice.
//
// Input 0 is the variable (its bytes, Region::kVariable) and the output is the same bytes
// after the write, so readers ordered after the write read it without a copy. The compiler
// orders every reader of the value before the write (engine/prepare/variables.py); the
// kernels only move the bytes. AssignSlice writes `update` into the variable at a position
// read from a tensor at run time (a decoder's KV cache at the current token): only the
// update's bytes move, and a position out of range fails the run before a byte is written.
#include <cstring>

#include "kernels.h"

namespace ge {

namespace {

// The variable (input 0) and the output: the same dtype and shape.
void expect_variable_output(const KernelArgs& a) {
  const TensorInfo& ref = a.in(0);
  const TensorInfo& out = a.out(0);
  if (out.dtype != ref.dtype || out.shape != ref.shape) {
    invalid("output ", type_str(out.dtype, out.shape), " must be the variable's ", type_str(ref.dtype, ref.shape));
  }
}

class AssignKernel final : public Kernel {
 public:
  explicit AssignKernel(const KernelArgs& a) {
    a.expect_inputs(2, 2);
    a.expect_outputs(1, 1);
    expect_variable_output(a);
    value_ = &a.in(1);
    out_ = &a.out(0);
    if (value_->dtype != out_->dtype || value_->shape != out_->shape) {
      invalid("value ", type_str(value_->dtype, value_->shape), " must have the variable's type ",
              type_str(out_->dtype, out_->shape));
    }
  }
  Status run(ExecContext& ctx) override {
    const uint8_t* src = ctx.ptr(*value_);
    uint8_t* dst = ctx.ptr(*out_);
    if (dst != src && out_->nbytes) std::memmove(dst, src, out_->nbytes);
    return Status::Ok();
  }
  std::string impl() const override { return "variable"; }

 private:
  const TensorInfo *value_, *out_;
};

class AssignAddKernel final : public Kernel {
 public:
  explicit AssignAddKernel(const KernelArgs& a) {
    a.expect_inputs(2, 2);
    a.expect_outputs(1, 1);
    expect_variable_output(a);
    delta_ = &a.in(1);
    out_ = &a.out(0);
    if (delta_->dtype != out_->dtype) {
      invalid("delta is ", dtype_name(delta_->dtype), ", the variable ", dtype_name(out_->dtype));
    }
    if (delta_->shape != out_->shape && delta_->numel != 1) {
      invalid("delta ", shape_str(delta_->shape), " must have the variable's shape ", shape_str(out_->shape),
              " or one element");
    }
    if (!with_arith_type(out_->dtype, [](auto) {})) {
      invalid("AssignAdd takes float32, float64, int64 or int32, got ", dtype_name(out_->dtype));
    }
  }
  Status run(ExecContext& ctx) override {
    const uint8_t* d = ctx.ptr(*delta_);
    uint8_t* y = ctx.ptr(*out_);
    const int64_t n = out_->numel;
    const bool one = delta_->numel == 1 && n != 1;
    with_arith_type(out_->dtype, [&](auto t) {
      using T = decltype(t);
      T* dst = reinterpret_cast<T*>(y);
      const T* src = reinterpret_cast<const T*>(d);
      if (one) {
        const T v = src[0];
        for (int64_t i = 0; i < n; ++i) dst[i] += v;
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
      }
    });
    return Status::Ok();
  }
  std::string impl() const override { return "variable"; }

 private:
  const TensorInfo *delta_, *out_;
};

// ref[..., start:start+len, ...] = update along `axis`.
class AssignSliceKernel final : public Kernel {
 public:
  explicit AssignSliceKernel(const KernelArgs& a) {
    a.expect_inputs(3, 3);
    a.expect_outputs(1, 1);
    expect_variable_output(a);
    update_ = &a.in(1);
    start_ = &a.in(2);
    out_ = &a.out(0);
    const int rank = out_->rank();
    if (rank < 1) invalid("the variable must have rank >= 1");
    axis_ = normalize_axis(a.attr_int("axis", 0), rank);
    if (update_->dtype != out_->dtype || update_->rank() != rank) {
      invalid("update ", type_str(update_->dtype, update_->shape), " must have the variable's dtype and rank (",
              type_str(out_->dtype, out_->shape), ")");
    }
    for (int d = 0; d < rank; ++d) {
      const bool ok = d == axis_ ? update_->shape[d] <= out_->shape[d] : update_->shape[d] == out_->shape[d];
      if (!ok) {
        invalid("update ", shape_str(update_->shape), " does not fit the variable ", shape_str(out_->shape),
                " along axis ", axis_, " (other dims must be equal)");
      }
    }
    if ((start_->dtype != DType::kInt64 && start_->dtype != DType::kInt32) || start_->numel != 1) {
      invalid("start must be one int64 or int32 element, got ", type_str(start_->dtype, start_->shape));
    }
    dim_ = out_->shape[axis_];
    len_ = update_->shape[axis_];
    outer_ = 1;
    for (int d = 0; d < axis_; ++d) outer_ *= out_->shape[d];
    inner_bytes_ = dtype_size(out_->dtype);
    for (int d = axis_ + 1; d < rank; ++d) inner_bytes_ *= static_cast<size_t>(out_->shape[d]);
  }
  Status run(ExecContext& ctx) override {
    const uint8_t* s = ctx.ptr(*start_);
    int64_t start = 0;
    if (start_->dtype == DType::kInt64) {
      std::memcpy(&start, s, sizeof(int64_t));
    } else {
      int32_t v;
      std::memcpy(&v, s, sizeof(int32_t));
      start = v;
    }
    if (start < 0 || start > dim_ - len_) {
      return Status::InvalidArgument(cat("start ", start, " out of range [0, ", dim_ - len_, "]: ", len_,
                                         " positions from it do not fit the variable's ", dim_, " along axis ",
                                         axis_));
    }
    const uint8_t* src = ctx.ptr(*update_);
    uint8_t* dst = ctx.ptr(*out_);
    const size_t row = static_cast<size_t>(len_) * inner_bytes_;
    const size_t stride = static_cast<size_t>(dim_) * inner_bytes_;
    const size_t at = static_cast<size_t>(start) * inner_bytes_;
    if (row == 0) return Status::Ok();
    for (int64_t o = 0; o < outer_; ++o) {
      std::memmove(dst + static_cast<size_t>(o) * stride + at, src + static_cast<size_t>(o) * row, row);
    }
    return Status::Ok();
  }
  std::string impl() const override { return "variable"; }

 private:
  const TensorInfo *update_, *start_, *out_;
  int axis_ = 0;
  int64_t dim_ = 0, len_ = 0, outer_ = 1;
  size_t inner_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> make_assign(const KernelArgs& a) {
  if (a.op == "AssignAdd") return std::make_unique<AssignAddKernel>(a);
  if (a.op == "AssignSlice") return std::make_unique<AssignSliceKernel>(a);
  return std::make_unique<AssignKernel>(a);
}

}  // namespace ge
