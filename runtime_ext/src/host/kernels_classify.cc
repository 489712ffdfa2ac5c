// IsNaN and IsInf (float32, float64 -> bool): loops of our own; oneDNN has no predicate
// that writes bool bytes. IsInf's detect_positive / detect_negative pick the infinities.
#include <limits>

#include "kernels.h"

namespace ge {

namespace {

class ClassifyKernel : public Kernel {
 public:
  explicit ClassifyKernel(const KernelArgs& a) {
    a.expect_inputs(1, 1);
    a.expect_outputs(1, 1);
    x_ = &a.in(0);
    y_ = &a.out(0);
    a.expect_dtype(*y_, DType::kBool, "output");
    if (y_->shape != x_->shape) invalid("output shape ", shape_str(y_->shape), " differs from input ", shape_str(x_->shape));
    nan_ = a.op == "IsNaN";
    pos_ = a.attr_int("detect_positive", 1) != 0;
    neg_ = a.attr_int("detect_negative", 1) != 0;
    if (x_->dtype == DType::kFloat32) {
      run_ = &ClassifyKernel::run_as<float>;
    } else if (x_->dtype == DType::kFloat64) {
      run_ = &ClassifyKernel::run_as<double>;
    } else {
      invalid(a.op, " takes float32 or float64, got ", dtype_name(x_->dtype));
    }
  }

  Status run(ExecContext& ctx) override { return (this->*run_)(ctx); }

 private:
  template <class T>
  Status run_as(ExecContext& ctx) {
    const T* x = ctx.ptr<const T>(*x_);
    uint8_t* y = ctx.ptr(*y_);
    const int64_t n = x_->numel;
    if (nan_) {
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] != x[i];
      return Status::Ok();
    }
    // an infinity the attributes do not ask for compares with one that never occurs: NaN
    constexpr T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
    const T pos = pos_ ? inf : nan, neg = neg_ ? -inf : nan;
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] == pos) | (x[i] == neg);
    return Status::Ok();
  }

  const TensorInfo* x_ = nullptr;
  const TensorInfo* y_ = nullptr;
  bool nan_ = true, pos_ = true, neg_ = true;
  Status (ClassifyKernel::*run_)(ExecContext&) = nullptr;
};

}  // namespace

std::unique_ptr<Kernel> make_classify(const KernelArgs& a) { return std::make_unique<ClassifyKernel>(a); }

}  // namespace ge
