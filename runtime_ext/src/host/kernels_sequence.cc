// Operations along one axis of a sequence: CumSum (float32, float64, int64, int32;
// exclusive, reverse) and ReverseSequence (any dtype; each batch entry's first
// sequence_lens[b] steps reversed, the rest copied).
//
// CumSum adds in the axis's order, one element at a time, as numpy's add.accumulate (the
// reference) does, so float sums match it bit for bit; integers wrap. ReverseSequence's
// lengths are data: every one is checked against [0, time dim] before a byte moves.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "copy.h"
#include "kernels.h"

namespace ge {

namespace {

template <class T>
inline T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

class CumSumKernel : public Kernel {
 public:
  explicit CumSumKernel(const KernelArgs& a) : x_(&a.in(0)), y_(&a.out(0)) {
    a.expect_inputs(1, 1);
    a.expect_outputs(1, 1);
    if (y_->dtype != x_->dtype || y_->shape != x_->shape) {
      invalid("output ", type_str(y_->dtype, y_->shape), " must be ", type_str(x_->dtype, x_->shape));
    }
    const int rank = x_->rank();
    if (rank < 1) invalid("input must have rank >= 1");
    if (!a.has_attr("axis")) invalid("attribute 'axis' is required");
    const int axis = normalize_axis(a.attr_int("axis", 0), rank);
    for (int d = 0; d < axis; ++d) outer_ *= x_->shape[d];
    dim_ = x_->shape[axis];
    for (int d = axis + 1; d < rank; ++d) inner_ *= x_->shape[d];
    exclusive_ = a.attr_int("exclusive", 0) != 0;
    reverse_ = a.attr_int("reverse", 0) != 0;
    if (!with_arith_type(x_->dtype, [this](auto v) { run_ = &CumSumKernel::run_as<decltype(v)>; })) {
      invalid("CumSum does not support ", dtype_name(x_->dtype));
    }
  }

  Status run(ExecContext& ctx) override { return (this->*run_)(ctx); }

 private:
  // Each plane [dim, inner] of the outer axes on its own; within one, whole rows of `inner`
  // at a time, so the adds run along contiguous memory.
  template <class T>
  Status run_as(ExecContext& ctx) {
    const T* x = ctx.ptr<const T>(*x_);
    T* y = ctx.ptr<T>(*y_);
    const int64_t plane = dim_ * inner_;
    for_rows(outer_, outer_ * plane * static_cast<int64_t>(sizeof(T)), [&](int64_t o) {
      const T* xp = x + o * plane;
      T* yp = y + o * plane;
      auto row = [&](int64_t step) { return (reverse_ ? dim_ - 1 - step : step) * inner_; };
      for (int64_t s = 0; s < dim_; ++s) {
        T* out = yp + row(s);
        if (exclusive_) {
          // numpy's exclusive sum is the inclusive one shifted: its second entry is x's
          // first as it is (-0.0 stays -0.0), not 0 + x
          if (s == 0) {
            std::fill(out, out + inner_, T{0});
          } else if (s == 1) {
            std::memcpy(out, xp + row(0), static_cast<size_t>(inner_) * sizeof(T));
          } else {
            const T* prev = yp + row(s - 1);
            const T* add_in = xp + row(s - 1);
            for (int64_t i = 0; i < inner_; ++i) out[i] = add(prev[i], add_in[i]);
          }
        } else if (s == 0) {
          std::memcpy(out, xp + row(0), static_cast<size_t>(inner_) * sizeof(T));
        } else {
          const T* prev = yp + row(s - 1);
          const T* add_in = xp + row(s);
          for (int64_t i = 0; i < inner_; ++i) out[i] = add(prev[i], add_in[i]);
        }
      }
    });
    return Status::Ok();
  }

  const TensorInfo* x_;
  const TensorInfo* y_;
  int64_t outer_ = 1, dim_ = 1, inner_ = 1;
  bool exclusive_ = false, reverse_ = false;
  Status (CumSumKernel::*run_)(ExecContext&) = nullptr;
};

class ReverseSequenceKernel : public Kernel {
 public:
  explicit ReverseSequenceKernel(const KernelArgs& a) : x_(&a.in(0)), lens_(&a.in(1)), y_(&a.out(0)) {
    a.expect_inputs(2, 2);
    a.expect_outputs(1, 1);
    if (y_->dtype != x_->dtype || y_->shape != x_->shape) {
      invalid("output ", type_str(y_->dtype, y_->shape), " must be ", type_str(x_->dtype, x_->shape));
    }
    const int rank = x_->rank();
    if (rank < 2) invalid("input must have rank >= 2");
    batch_axis_ = normalize_axis(a.attr_int("batch_axis", 1), rank);
    time_axis_ = normalize_axis(a.attr_int("time_axis", 0), rank);
    if (batch_axis_ == time_axis_) invalid("batch_axis and time_axis are both ", batch_axis_);
    if (lens_->dtype != DType::kInt64 && lens_->dtype != DType::kInt32) {
      invalid("sequence_lens must be int64 or int32, got ", type_str(lens_->dtype, lens_->shape));
    }
    const int64_t batch = x_->shape[batch_axis_];
    if (lens_->shape != Shape{batch}) {
      invalid("sequence_lens ", shape_str(lens_->shape), " must have shape [", batch, "] (the batch axis ",
              batch_axis_, ")");
    }
    // [A, D1, M, D2, I] around the two axes, first = the lower one; rows of I elements move
    const int lo = std::min(batch_axis_, time_axis_), hi = std::max(batch_axis_, time_axis_);
    for (int d = 0; d < lo; ++d) outer_ *= x_->shape[d];
    for (int d = lo + 1; d < hi; ++d) middle_ *= x_->shape[d];
    row_bytes_ = static_cast<int64_t>(dtype_size(x_->dtype));
    for (int d = hi + 1; d < rank; ++d) row_bytes_ *= x_->shape[d];
    d1_ = x_->shape[lo];
    d2_ = x_->shape[hi];
  }

  size_t workspace_bytes() const override { return static_cast<size_t>(lens_->numel) * sizeof(int64_t); }

  Status run(ExecContext& ctx) override {
    const int64_t steps = x_->shape[time_axis_];
    int64_t* lens = reinterpret_cast<int64_t*>(ctx.workspace);
    const uint8_t* raw = ctx.ptr(*lens_);
    for (int64_t b = 0; b < lens_->numel; ++b) {
      const int64_t n = lens_->dtype == DType::kInt64 ? reinterpret_cast<const int64_t*>(raw)[b]
                                                      : reinterpret_cast<const int32_t*>(raw)[b];
      if (n < 0 || n > steps) {
        return Status::InvalidArgument(
            cat("sequence_lens[", b, "] = ", n, " is out of range [0, ", steps, "] (time axis ", time_axis_, ")"));
      }
      lens[b] = n;
    }
    const uint8_t* src = ctx.ptr(*x_);
    uint8_t* dst = ctx.ptr(*y_);
    const bool time_first = time_axis_ < batch_axis_;
    const int64_t rows = outer_ * d1_ * middle_ * d2_;
    for_rows(rows, rows * row_bytes_, [&](int64_t r) {
      const int64_t i2 = r % d2_, i1 = (r / d2_ / middle_) % d1_;
      const int64_t t = time_first ? i1 : i2, b = time_first ? i2 : i1;
      const int64_t n = lens[b];
      if (t >= n) {
        std::memcpy(dst + r * row_bytes_, src + r * row_bytes_, static_cast<size_t>(row_bytes_));
        return;
      }
      const int64_t from_t = n - 1 - t;  // the same row with the time coordinate mirrored
      const int64_t from = r + (from_t - t) * (time_first ? middle_ * d2_ : 1);
      std::memcpy(dst + r * row_bytes_, src + from * row_bytes_, static_cast<size_t>(row_bytes_));
    });
    return Status::Ok();
  }

 private:
  const TensorInfo* x_;
  const TensorInfo* lens_;
  const TensorInfo* y_;
  int batch_axis_ = 1, time_axis_ = 0;
  int64_t outer_ = 1, middle_ = 1, d1_ = 1, d2_ = 1, row_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> make_cumsum(const KernelArgs& a) { return std::make_unique<CumSumKernel>(a); }

std::unique_ptr<Kernel> make_reverse_sequence(const KernelArgs& a) {
  return std::make_unique<ReverseSequenceKernel>(a);
}

}  // namespace ge
