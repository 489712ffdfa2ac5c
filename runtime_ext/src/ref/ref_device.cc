#include "ref_device.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "spec.h"

namespace ge {

namespace {

using Fn = float (*)(float, float);

// y = f(a, b) elementwise over equal shapes.
class BinaryKernel final : public Kernel {
 public:
  BinaryKernel(const KernelArgs& a, Fn f) : f_(f) {
    a.expect_inputs(2, 2);
    a.expect_outputs(1, 1);
    x0_ = &a.in(0);
    x1_ = &a.in(1);
    y_ = &a.out(0);
    for (const TensorInfo* t : {x0_, x1_, y_}) a.expect_dtype(*t, DType::kFloat32, "operand");
    if (x0_->shape != x1_->shape || x0_->shape != y_->shape) invalid("the ref device needs equal shapes");
  }
  Status run(ExecContext& ctx) override {
    const float* a = ctx.ptr<float>(*x0_);
    const float* b = ctx.ptr<float>(*x1_);
    float* y = ctx.ptr<float>(*y_);
    for (int64_t i = 0; i < y_->numel; ++i) y[i] = f_(a[i], b[i]);
    return Status::Ok();
  }
  std::string impl() const override { return "ref"; }

 private:
  Fn f_;
  const TensorInfo *x0_, *x1_, *y_;
};

class UnaryKernel final : public Kernel {
 public:
  UnaryKernel(const KernelArgs& a, float (*f)(float)) : f_(f) {
    a.expect_inputs(1, 1);
    a.expect_outputs(1, 1);
    x_ = &a.in(0);
    y_ = &a.out(0);
    for (const TensorInfo* t : {x_, y_}) a.expect_dtype(*t, DType::kFloat32, "operand");
    if (x_->shape != y_->shape) invalid("output shape differs from the input's");
  }
  Status run(ExecContext& ctx) override {
    const float* x = ctx.ptr<float>(*x_);
    float* y = ctx.ptr<float>(*y_);
    for (int64_t i = 0; i < y_->numel; ++i) y[i] = f_(x[i]);
    return Status::Ok();
  }
  std::string impl() const override { return "ref"; }

 private:
  float (*f_)(float);
  const TensorInfo *x_, *y_;
};

// [M,K] x [K,N] -> [M,N].
class MatMulKernel final : public Kernel {
 public:
  explicit MatMulKernel(const KernelArgs& a) {
    // rows=1 adds a count of the rows that matter (the host backend's MatMul); all are
    // computed here
    const int counted = a.attr_int("rows", 0) != 0 ? 1 : 0;
    a.expect_inputs(2 + counted, 2 + counted);
    a.expect_outputs(1, 1);
    a_ = &a.in(0);
    b_ = &a.in(1);
    y_ = &a.out(0);
    for (const TensorInfo* t : {a_, b_, y_}) a.expect_dtype(*t, DType::kFloat32, "operand");
    if (a_->rank() != 2 || b_->rank() != 2 || a_->shape[1] != b_->shape[0] ||
        y_->shape != Shape{a_->shape[0], b_->shape[1]}) {
      invalid("the ref device multiplies [M,K] by [K,N] only");
    }
  }
  Status run(ExecContext& ctx) override {
    const int64_t m = a_->shape[0], k = a_->shape[1], n = b_->shape[1];
    const float* a = ctx.ptr<float>(*a_);
    const float* b = ctx.ptr<float>(*b_);
    float* y = ctx.ptr<float>(*y_);
    std::fill(y, y + m * n, 0.f);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p < k; ++p) {
        const float av = a[i * k + p];
        for (int64_t j = 0; j < n; ++j) y[i * n + j] += av * b[p * n + j];
      }
    }
    return Status::Ok();
  }
  std::string impl() const override { return "ref"; }

 private:
  const TensorInfo *a_, *b_, *y_;
};

template <float (*F)(float, float)>
std::unique_ptr<Kernel> make_binary(const KernelArgs& a) {
  return std::make_unique<BinaryKernel>(a, F);
}
template <float (*F)(float)>
std::unique_ptr<Kernel> make_unary(const KernelArgs& a) {
  return std::make_unique<UnaryKernel>(a, F);
}
std::unique_ptr<Kernel> make_matmul(const KernelArgs& a) { return std::make_unique<MatMulKernel>(a); }

float add(float a, float b) { return a + b; }
float sub(float a, float b) { return a - b; }
float mul(float a, float b) { return a * b; }
float div(float a, float b) { return a / b; }
float relu(float x) { return x > 0.f ? x : 0.f; }
float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
float tanh_(float x) { return std::tanh(x); }
float neg(float x) { return -x; }
float abs_(float x) { return std::fabs(x); }

struct Row {
  KernelFactory make;
  int inputs;  // 1: unary, 2: binary on equal shapes, 3: 2-D MatMul
};

const std::map<std::string, Row>& table() {
  static const std::map<std::string, Row> t = {
      {"Add", {make_binary<add>, 2}},      {"Sub", {make_binary<sub>, 2}},
      {"Mul", {make_binary<mul>, 2}},      {"Div", {make_binary<div>, 2}},
      {"Relu", {make_unary<relu>, 1}},     {"Sigmoid", {make_unary<sigmoid>, 1}},
      {"Tanh", {make_unary<tanh_>, 1}},    {"Neg", {make_unary<neg>, 1}},
      {"Abs", {make_unary<abs_>, 1}},      {"MatMul", {make_matmul, 3}},
  };
  return t;
}

class RefConstants final : public SharedConstants {
 public:
  size_t bytes() const override { return 0; }  // its kernels prepare nothing
};

}  // namespace

RefDevice::RefDevice(int threads) : Device("ref", threads) { start(); }
RefDevice::~RefDevice() { stop(); }

AlignedBuffer RefDevice::allocate(size_t bytes, bool zero) const { return AlignedBuffer(bytes, zero); }
void RefDevice::copy_to_device(void* dst, const void* src, size_t n) const { std::memcpy(dst, src, n); }
void RefDevice::copy_to_host(void* dst, const void* src, size_t n) const { std::memcpy(dst, src, n); }
void RefDevice::copy_on_device(void* dst, const void* src, size_t n) const { std::memmove(dst, src, n); }

std::unique_ptr<LaneStream> RefDevice::make_lane_stream() const { return std::make_unique<LaneStream>(); }

KernelFactory RefDevice::find_kernel(const std::string& op) const {
  auto it = table().find(op);
  return it == table().end() ? nullptr : it->second.make;
}

std::vector<std::string> RefDevice::supported_ops() const {
  std::vector<std::string> ops;
  for (const auto& [name, _] : table()) ops.push_back(name);
  return ops;  // std::map: sorted
}

KernelInfo RefDevice::kernel_info(const std::string& op, const std::vector<std::string>& dtypes,
                                  const std::vector<Shape>& shapes, const Attrs& attrs) const {
  KernelInfo r;
  auto it = table().find(op);
  if (it == table().end()) {
    r.reason = "the ref device has no " + op + " kernel";
    return r;
  }
  const int want = it->second.inputs == 1 ? 1 : 2;
  if (static_cast<int>(dtypes.size()) != want || shapes.size() != dtypes.size()) {
    r.reason = op + " on the ref device takes " + std::to_string(want) + " inputs";
    return r;
  }
  for (const std::string& d : dtypes) {
    if (d != "float32") {
      r.reason = "the ref device computes float32 only, not " + (d.empty() ? std::string("an omitted input") : d);
      return r;
    }
  }
  for (const auto& [key, _] : attrs) {
    r.reason = "the ref device's " + op + " takes no attribute ('" + key + "')";
    return r;
  }
  if (it->second.inputs == 2 && shapes[0] != shapes[1]) {
    r.reason = "the ref device adds, subtracts, multiplies and divides equal shapes only";
    return r;
  }
  if (it->second.inputs == 3 && (shapes[0].size() != 2 || shapes[1].size() != 2 || shapes[0][1] != shapes[1][0])) {
    r.reason = "the ref device multiplies [M,K] by [K,N] only";
    return r;
  }
  r.supported = true;
  r.preferred_format = "any";
  r.formats = {"nchw"};
  return r;
}

std::vector<Format> RefDevice::assign_formats(const ModelSpec&, const std::vector<TensorInfo>& tensors) const {
  return std::vector<Format>(tensors.size(), Format::kPlain);
}

std::string RefDevice::check_formats(const TaskSpec& t, const std::vector<TensorInfo>& tensors) const {
  for (const std::vector<int64_t>* list : {&t.inputs, &t.outputs}) {
    for (int64_t i : *list) {
      if (i >= 0 && static_cast<size_t>(i) < tensors.size() && !tensors[static_cast<size_t>(i)].plain()) {
        return "the ref device keeps tensors in the plain format only; '" + tensors[static_cast<size_t>(i)].name +
               "' is " + format_name(tensors[static_cast<size_t>(i)].format);
      }
    }
  }
  return "";
}

std::unique_ptr<SharedConstants> RefDevice::make_shared_constants() const { return std::make_unique<RefConstants>(); }

bool RefDevice::library_error(const std::exception&, const char*, Status*) const { return false; }

DeviceCaps RefDevice::caps() const {
  DeviceCaps c;
  c.max_weight_segments = static_cast<int>(kMaxWeightSegments);
  return c;
}

}  // namespace ge
