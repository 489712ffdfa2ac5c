// Comparisons (Equal Less Greater LessOrEqual GreaterOrEqual) and logic (And Or Xor Not):
// bool outputs with numpy broadcasting. oneDNN's binary primitive compares, but writes its
// result in the source's data type (1.0f / 0.0f), not as bool bytes, so these are loops of
// our own over the broadcast plan's rows; the compiler vectorises the contiguous cases.
// Comparisons with a NaN are false (Equal too), as in numpy; a bool input is true when its
// byte is nonzero.
#include <cstdint>

#include "broadcast.h"
#include "kernels.h"

namespace ge {

namespace {

enum class Cmp { kEq, kLt, kGt, kLe, kGe, kAnd, kOr, kXor };

template <Cmp op, class T>
inline uint8_t apply(T a, T b) {
  if constexpr (op == Cmp::kEq) return a == b;
  if constexpr (op == Cmp::kLt) return a < b;
  if constexpr (op == Cmp::kGt) return a > b;
  if constexpr (op == Cmp::kLe) return a <= b;
  if constexpr (op == Cmp::kGe) return a >= b;
  if constexpr (op == Cmp::kAnd) return (a != 0) & (b != 0);
  if constexpr (op == Cmp::kOr) return (a != 0) | (b != 0);
  if constexpr (op == Cmp::kXor) return (a != 0) ^ (b != 0);
  return 0;
}

using RowFn = void (*)(uint8_t* o, const void* a, int64_t sa, const void* b, int64_t sb, int64_t n);

template <Cmp op, class T>
void row(uint8_t* o, const void* va, int64_t sa, const void* vb, int64_t sb, int64_t n) {
  binary_row(o, static_cast<const T*>(va), sa, static_cast<const T*>(vb), sb, n,
             [](T x, T y) { return apply<op>(x, y); });
}

template <Cmp op>
RowFn pick_type(DType t) {
  switch (t) {
    case DType::kFloat32: return row<op, float>;
    case DType::kFloat64: return row<op, double>;
    case DType::kInt64: return row<op, int64_t>;
    case DType::kInt32: return row<op, int32_t>;
    case DType::kInt16: return row<op, int16_t>;
    case DType::kInt8: return row<op, int8_t>;
    case DType::kUInt8:
    case DType::kBool: return row<op, uint8_t>;
    case DType::kFloat16: break;  // no native half compare: the host runs it
  }
  return nullptr;
}

RowFn pick(const std::string& op, DType t) {
  if (op == "And" || op == "Or" || op == "Xor") {
    if (t != DType::kBool) return nullptr;
    return op == "And" ? pick_type<Cmp::kAnd>(t) : op == "Or" ? pick_type<Cmp::kOr>(t) : pick_type<Cmp::kXor>(t);
  }
  if (op == "Equal") return pick_type<Cmp::kEq>(t);
  if (t == DType::kBool) return nullptr;  // ONNX orders numbers only
  if (op == "Less") return pick_type<Cmp::kLt>(t);
  if (op == "Greater") return pick_type<Cmp::kGt>(t);
  if (op == "LessOrEqual") return pick_type<Cmp::kLe>(t);
  if (op == "GreaterOrEqual") return pick_type<Cmp::kGe>(t);
  return nullptr;
}

class CompareKernel : public Kernel {
 public:
  explicit CompareKernel(const KernelArgs& a) {
    a.expect_inputs(2, 2);
    a.expect_outputs(1, 1);
    a_ = &a.in(0);
    b_ = &a.in(1);
    y_ = &a.out(0);
    if (a_->dtype != b_->dtype) {
      invalid("inputs must share a dtype, got ", type_str(a_->dtype, a_->shape), " and ",
              type_str(b_->dtype, b_->shape));
    }
    a.expect_dtype(*y_, DType::kBool, "output");
    fn_ = pick(a.op, a_->dtype);
    if (!fn_) invalid(a.op, " does not support ", dtype_name(a_->dtype));
    plan_ = plan_binary(*a_, *b_, *y_);
  }

  Status run(ExecContext& ctx) override {
    const size_t es = dtype_size(a_->dtype);
    uint8_t* y = ctx.ptr(*y_);
    const uint8_t* pa = ctx.ptr(*a_);
    const uint8_t* pb = ctx.ptr(*b_);
    RowFn fn = fn_;
    for_each_segment(plan_, [&](const int64_t* off, int64_t o, int64_t n, const int64_t* st) {
      fn(y + o, pa + off[0] * es, st[0], pb + off[1] * es, st[1], n);
    });
    return Status::Ok();
  }

 private:
  const TensorInfo *a_, *b_, *y_;
  RowFn fn_ = nullptr;
  BroadcastPlan plan_;
};

class NotKernel : public Kernel {
 public:
  explicit NotKernel(const KernelArgs& a) {
    a.expect_inputs(1, 1);
    a.expect_outputs(1, 1);
    x_ = &a.in(0);
    y_ = &a.out(0);
    a.expect_dtype(*x_, DType::kBool, "input");
    a.expect_dtype(*y_, DType::kBool, "output");
    if (y_->shape != x_->shape) invalid("output shape ", shape_str(y_->shape), " differs from input ", shape_str(x_->shape));
  }
  Status run(ExecContext& ctx) override {
    const uint8_t* x = ctx.ptr(*x_);
    uint8_t* y = ctx.ptr(*y_);
    for (int64_t i = 0; i < x_->numel; ++i) y[i] = x[i] == 0;
    return Status::Ok();
  }

 private:
  const TensorInfo *x_, *y_;
};

}  // namespace

std::unique_ptr<Kernel> make_compare(const KernelArgs& a) { return std::make_unique<CompareKernel>(a); }
std::unique_ptr<Kernel> make_not(const KernelArgs& a) { return std::make_unique<NotKernel>(a); }

}  // namespace ge
