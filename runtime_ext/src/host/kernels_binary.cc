// Elementwise binary ops (Add Sub Mul Div Max Min Pow Mod) and Where, with full numpy
// broadcasting. Plain loops over collapsed rows; the inner loop is specialised on the
// (contiguous, broadcast) pattern of each operand so the compiler vectorises it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "broadcast.h"
#include "dnnl_util.h"
#include "kernels.h"

namespace ge {

namespace {

// kMod: ONNX Mod with fmod = 0, the remainder taking the divisor's sign (Python's %);
// kFmod: fmod = 1, the dividend's (C's fmod). An integer divisor of 0 gives 0 (as the host
// kernel), a float one NaN.
enum class BinOp { kAdd, kSub, kMul, kDiv, kMax, kMin, kPow, kMod, kFmod, kPRelu };

template <BinOp op, class T>
inline T apply(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // Wrap-around integer arithmetic (two's complement), never undefined behaviour.
    using U = std::make_unsigned_t<T>;
    if constexpr (op == BinOp::kAdd) return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    if constexpr (op == BinOp::kSub) return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
    if constexpr (op == BinOp::kMul) return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    if constexpr (op == BinOp::kDiv) {  // the kernel rejects zero divisors before running
      return b == -1 ? static_cast<T>(U(0) - static_cast<U>(a)) : a / b;
    }
    if constexpr (op == BinOp::kMod || op == BinOp::kFmod) {
      if (b == 0 || b == -1) return 0;  // (-1: the lowest value's % -1 overflows)
      const T r = a % b;
      if constexpr (op == BinOp::kMod) return r != 0 && ((r < 0) != (b < 0)) ? static_cast<T>(r + b) : r;
      return r;
    }
  } else {
    if constexpr (op == BinOp::kFmod) return std::fmod(a, b);
    if constexpr (op == BinOp::kMod) {  // numpy's: fmod, moved by b when the signs differ
      const T r = std::fmod(a, b);
      if (r != 0) return (r < 0) != (b < 0) ? r + b : r;
      return std::copysign(T(0), b);
    }
    if constexpr (op == BinOp::kAdd) return a + b;
    if constexpr (op == BinOp::kSub) return a - b;
    if constexpr (op == BinOp::kMul) return a * b;
    if constexpr (op == BinOp::kDiv) return a / b;
  }
  if constexpr (op == BinOp::kMax) {
    if constexpr (std::is_floating_point_v<T>) {
      return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : (a > b ? a : b);
    }
    return a > b ? a : b;
  }
  if constexpr (op == BinOp::kMin) {
    if constexpr (std::is_floating_point_v<T>) {
      return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : (a < b ? a : b);
    }
    return a < b ? a : b;
  }
  if constexpr (op == BinOp::kPow) return std::pow(a, b);
  if constexpr (op == BinOp::kPRelu) {  // the slope times a negative input (NaN stays NaN)
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return a < 0 ? static_cast<T>(static_cast<U>(a) * static_cast<U>(b)) : a;
    } else {
      return a < 0 ? a * b : a;
    }
  }
  return a;
}

template <BinOp op, class T>
void row(T* o, const T* a, int64_t sa, const T* b, int64_t sb, int64_t n) {
  binary_row(o, a, sa, b, sb, n, [](T x, T y) { return apply<op>(x, y); });
}

// Pow with a constant scalar exponent: the common cases avoid std::pow.
void pow_const_row(float* o, const float* a, int64_t sa, float e, int64_t n) {
  if (e == 2.f && sa == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = a[i] * a[i];
  } else if (e == 0.5f && sa == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = std::sqrt(a[i]);
  } else if (e == 1.f && sa == 1) {
    std::memcpy(o, a, static_cast<size_t>(n) * sizeof(float));
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = std::pow(a[i * sa], e);
  }
}

using RowFn = void (*)(void* o, const void* a, int64_t sa, const void* b, int64_t sb, int64_t n);

template <BinOp op, class T>
void row_erased(void* o, const void* a, int64_t sa, const void* b, int64_t sb, int64_t n) {
  row<op, T>(static_cast<T*>(o), static_cast<const T*>(a), sa, static_cast<const T*>(b), sb, n);
}

template <class T>
RowFn pick(BinOp op) {
  switch (op) {
    case BinOp::kAdd: return row_erased<BinOp::kAdd, T>;
    case BinOp::kSub: return row_erased<BinOp::kSub, T>;
    case BinOp::kMul: return row_erased<BinOp::kMul, T>;
    case BinOp::kDiv: return row_erased<BinOp::kDiv, T>;
    case BinOp::kMax: return row_erased<BinOp::kMax, T>;
    case BinOp::kMin: return row_erased<BinOp::kMin, T>;
    case BinOp::kPow:
      if constexpr (std::is_floating_point_v<T>) return row_erased<BinOp::kPow, T>;
      break;
    case BinOp::kMod: return row_erased<BinOp::kMod, T>;
    case BinOp::kFmod: return row_erased<BinOp::kFmod, T>;
    case BinOp::kPRelu: return row_erased<BinOp::kPRelu, T>;
  }
  return nullptr;
}

class BinaryKernel : public Kernel {
 public:
  explicit BinaryKernel(const KernelArgs& a);
  Status run(ExecContext&) override;

 private:
  const TensorInfo* a_;
  const TensorInfo* b_;
  const TensorInfo* y_;
  BinOp op_;
  BroadcastPlan plan_;
  RowFn fn_ = nullptr;
  bool int_div_ = false;   // integer Div: check the divisor for zeros first
  bool pow_const_ = false;  // Pow by a constant scalar exponent
  float exponent_ = 0.f;
};

BinaryKernel::BinaryKernel(const KernelArgs& a) {
  a.expect_inputs(2, 2);
  a.expect_outputs(1, 1);
  a_ = &a.in(0);
  b_ = &a.in(1);
  y_ = &a.out(0);
  const std::string& name = a.op;
  op_ = name == "Add" ? BinOp::kAdd : name == "Sub" ? BinOp::kSub : name == "Mul" ? BinOp::kMul
      : name == "Div" ? BinOp::kDiv : name == "Max" ? BinOp::kMax : name == "Min" ? BinOp::kMin
      : name == "Mod" ? (a.attr_int("fmod", 0) ? BinOp::kFmod : BinOp::kMod)
      : name == "PRelu" ? BinOp::kPRelu
      : BinOp::kPow;
  if (name == "Mod" && a.attr_int("fmod", 0) != 0 && a.attr_int("fmod", 0) != 1) {
    invalid("fmod must be 0 or 1, got ", a.attr_int("fmod", 0));
  }
  if (a_->dtype != b_->dtype || y_->dtype != a_->dtype) {
    invalid("inputs and output must share a dtype, got ", type_str(a_->dtype, a_->shape), ", ",
            type_str(b_->dtype, b_->shape), " -> ", type_str(y_->dtype, y_->shape));
  }
  plan_ = plan_binary(*a_, *b_, *y_);
  if (y_->format == Format::kNhwc && y_->shape.size() >= 3) {
    // The loops run over the stored order [N, H, W, C] (N, D, H, W, C at rank 5): the
    // operands the format rule lets in are NHWC of the output's shape, or plain with the same
    // bytes as their NHWC (a per-pixel map [N|1, 1, H, W], a per-channel [N|1, C, 1, 1], a
    // scalar).
    const size_t rank = y_->shape.size();
    auto stored = [rank](const Shape& s) {
      if (s.size() != rank) return s;
      Shape t = {s[0]};
      t.insert(t.end(), s.begin() + 2, s.end());
      t.push_back(s[1]);
      return t;
    };
    const Shape sa = stored(a_->shape), sb = stored(b_->shape), sy = stored(y_->shape);
    plan_ = plan_broadcast(sy, {&sa, &sb}, {"A", "B"});
  }
  switch (a_->dtype) {
    case DType::kFloat32: fn_ = pick<float>(op_); break;
    case DType::kFloat64: fn_ = pick<double>(op_); break;
    case DType::kInt64: fn_ = op_ == BinOp::kPow ? nullptr : pick<int64_t>(op_); break;
    case DType::kInt32: fn_ = op_ == BinOp::kPow ? nullptr : pick<int32_t>(op_); break;
    default: break;
  }
  if (!fn_) invalid(a.op, " does not support ", dtype_name(a_->dtype));
  int_div_ = op_ == BinOp::kDiv && (a_->dtype == DType::kInt64 || a_->dtype == DType::kInt32);
  if (op_ == BinOp::kPow && a_->dtype == DType::kFloat32 && b_->constant() && b_->numel == 1) {
    pow_const_ = true;
    exponent_ = b_->const_ptr<float>()[0];
  }
}

template <class T>
bool has_zero(const T* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (p[i] == 0) return true;
  }
  return false;
}

Status BinaryKernel::run(ExecContext& ctx) {
  const size_t es = dtype_size(y_->dtype);
  uint8_t* y = ctx.ptr(*y_);
  const uint8_t* pa = ctx.ptr(*a_);
  const uint8_t* pb = ctx.ptr(*b_);
  if (int_div_) {
    bool zero = b_->dtype == DType::kInt64 ? has_zero(reinterpret_cast<const int64_t*>(pb), b_->numel)
                                           : has_zero(reinterpret_cast<const int32_t*>(pb), b_->numel);
    if (zero) return Status::InvalidArgument("integer division by zero");
  }
  if (pow_const_) {
    const float e = exponent_;
    float* yf = reinterpret_cast<float*>(y);
    const float* af = reinterpret_cast<const float*>(pa);
    for_each_segment(plan_, [&](const int64_t* off, int64_t o, int64_t n, const int64_t* st) {
      pow_const_row(yf + o, af + off[0], st[0], e, n);
    });
    return Status::Ok();
  }
  RowFn fn = fn_;
  for_each_segment(plan_, [&](const int64_t* off, int64_t o, int64_t n, const int64_t* st) {
    fn(y + o * es, pa + off[0] * es, st[0], pb + off[1] * es, st[1], n);
  });
  return Status::Ok();
}

// ---- Where ------------------------------------------------------------------------------

template <class T>
void where_row(T* o, const uint8_t* c, int64_t sc, const T* x, int64_t sx, const T* y, int64_t sy, int64_t n) {
  if (sc == 0) {  // one condition for the whole row (a [rows, 1] mask): copy or fill it
    const T* src = *c ? x : y;
    const int64_t s = *c ? sx : sy;
    if (s == 1) {
      std::memcpy(o, src, static_cast<size_t>(n) * sizeof(T));
    } else if (s == 0) {
      std::fill(o, o + n, *src);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = src[i * s];
    }
  } else if (sc == 1 && sx == 1 && sy == 1) {
    // both values read, then one kept: a blend GCC vectorizes (the ternary that reads only
    // the chosen one was a branch per element, mispredicted on a data-dependent mask:
    // xIELU's Where(x > 0, ...) over 40 x 512 took 50 us)
    for (int64_t i = 0; i < n; ++i) {
      const T xv = x[i], yv = y[i];
      o[i] = c[i] ? xv : yv;
    }
  } else if (sc == 1 && sx == 0 && sy == 1) {
    // a masked fill (attention scores where the mask is set): one value against a row, a
    // blend too (the general loop below, its strides multiplied out, stayed scalar: SEW-D's
    // [1, 1, 1, 99] mask over [1, 4, 99, 99] scores took 51 us)
    const T xv = *x;
    for (int64_t i = 0; i < n; ++i) {
      const T yv = y[i];
      o[i] = c[i] ? xv : yv;
    }
  } else if (sc == 1 && sx == 1 && sy == 0) {
    const T yv = *y;
    for (int64_t i = 0; i < n; ++i) {
      const T xv = x[i];
      o[i] = c[i] ? xv : yv;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const T xv = x[i * sx], yv = y[i * sy];
      o[i] = c[i * sc] ? xv : yv;
    }
  }
}

class WhereKernel : public Kernel {
 public:
  explicit WhereKernel(const KernelArgs& a) {
    a.expect_inputs(3, 3);
    a.expect_outputs(1, 1);
    c_ = &a.in(0);
    x_ = &a.in(1);
    y_ = &a.in(2);
    o_ = &a.out(0);
    a.expect_dtype(*c_, DType::kBool, "condition");
    if (x_->dtype != y_->dtype || o_->dtype != x_->dtype) {
      invalid("X, Y and the output must share a dtype, got ", type_str(x_->dtype, x_->shape), ", ",
              type_str(y_->dtype, y_->shape), " -> ", type_str(o_->dtype, o_->shape));
    }
    Shape s1, out;
    if (!broadcast_shapes(c_->shape, x_->shape, &s1) || !broadcast_shapes(s1, y_->shape, &out)) {
      invalid("shapes ", shape_str(c_->shape), ", ", shape_str(x_->shape), ", ", shape_str(y_->shape),
              " do not broadcast");
    }
    if (out != o_->shape) {
      invalid("output shape ", shape_str(o_->shape), " does not match broadcast shape ", shape_str(out));
    }
    plan_ = plan_broadcast(out, {&c_->shape, &x_->shape, &y_->shape}, {"condition", "X", "Y"});
  }

  // A condition constant along the innermost axis (a mixture of experts' per-token mask
  // over [tokens, hidden]) picks whole rows: each is one copy or fill.
  std::string impl() const override { return plan_.strides[0][plan_.rank - 1] == 0 ? "row select" : ""; }

  Status run(ExecContext& ctx) override {
    const size_t es = dtype_size(o_->dtype);
    const uint8_t* pc = ctx.ptr(*c_);
    uint8_t* po = ctx.ptr(*o_);
    const uint8_t* px = ctx.ptr(*x_);
    const uint8_t* py = ctx.ptr(*y_);
    for_each_segment(plan_, [&](const int64_t* off, int64_t o, int64_t n, const int64_t* st) {
      const uint8_t* c = pc + off[0];
      uint8_t* out = po + o * es;
      const uint8_t* x = px + off[1] * es;
      const uint8_t* y = py + off[2] * es;
      switch (es) {
        case 1: where_row(out, c, st[0], x, st[1], y, st[2], n); break;
        case 2:
          where_row(reinterpret_cast<uint16_t*>(out), c, st[0], reinterpret_cast<const uint16_t*>(x), st[1],
                    reinterpret_cast<const uint16_t*>(y), st[2], n);
          break;
        case 4:
          where_row(reinterpret_cast<uint32_t*>(out), c, st[0], reinterpret_cast<const uint32_t*>(x), st[1],
                    reinterpret_cast<const uint32_t*>(y), st[2], n);
          break;
        default:
          where_row(reinterpret_cast<uint64_t*>(out), c, st[0], reinterpret_cast<const uint64_t*>(x), st[1],
                    reinterpret_cast<const uint64_t*>(y), st[2], n);
      }
    });
    return Status::Ok();
  }

 private:
  const TensorInfo *c_, *x_, *y_, *o_;
  BroadcastPlan plan_;
};

// Float32 Add/Sub/Mul/Div as a oneDNN binary primitive (JIT-vectorised; IEEE results,
// like the loops). oneDNN broadcasts only its second operand, so it serves the shapes where
// at most one operand broadcasts (commutative ops may swap them).
class DnnlBinaryKernel : public PrimitiveKernel {
 public:
  DnnlBinaryKernel(const KernelArgs& a, dnnl::algorithm alg, const TensorInfo& full, const TensorInfo& other)
      : PrimitiveKernel(*a.device) {
    const TensorInfo& y = a.out(0);
    dnnl::memory::desc md0, md1, mdy;
    if (other.shape == y.shape) {  // same shapes: any common format, as flat vectors
      md0 = md1 = mdy = plain_md(Shape{y.numel});
    } else if (!y.plain()) {  // a per-channel (or one-element) operand, plain, of a formatted output
      // Described in the output's format, which orders a [N|1, C, 1, 1] tensor's bytes as
      // plain does (unpadded): oneDNN's jit broadcast takes src1 in src0's layout.
      md0 = mdy = format_md(y.shape, y.format);
      md1 = other.numel == 1 ? plain_md(Shape(y.shape.size(), 1)) : format_md(other.shape, y.format);
    } else {
      const size_t r = std::max<size_t>(1, y.shape.size());
      Shape s1(r - std::min(r, other.shape.size()), 1);
      s1.insert(s1.end(), other.shape.begin(), other.shape.end());
      md0 = mdy = plain_md(y.shape.empty() ? Shape{1} : y.shape);
      md1 = plain_md(s1);
    }
    dnnl::binary::primitive_desc pd(host_engine(dev_), alg, md0, md1, mdy, make_attr());
    prim_ = Prim(pd);
    prim_.arg(DNNL_ARG_SRC_0, md0, Ref::of(full));
    prim_.arg(DNNL_ARG_SRC_1, md1, Ref::of(other));
    prim_.arg(DNNL_ARG_DST, mdy, Ref::of(y));
    Prim::share_scratchpad(&plan_, {&prim_});
  }

};

// The oneDNN kernel when it applies, else nullptr.
std::unique_ptr<Kernel> dnnl_binary(const KernelArgs& a) {
  const TensorInfo& x = a.in(0);
  const TensorInfo& z = a.in(1);
  const TensorInfo& y = a.out(0);
  if (x.dtype != DType::kFloat32 || z.dtype != DType::kFloat32 || y.dtype != DType::kFloat32) return nullptr;
  if (y.numel == 0 || y.rank() > DNNL_MAX_NDIMS) return nullptr;
  // the loops take plain operands, and NHWC outputs over their stored order (BinaryKernel)
  const bool loops = y.plain() ? x.plain() && z.plain() : y.format == Format::kNhwc;
  if (y.numel <= kSmallOpElements && loops) return nullptr;  // the loops

  using alg = dnnl::algorithm;
  alg f;
  bool commutative = true;
  if (a.op == "Add") {
    f = alg::binary_add;
  } else if (a.op == "Mul") {
    f = alg::binary_mul;
  } else if (a.op == "Sub") {
    f = alg::binary_sub;
    commutative = false;
  } else if (a.op == "Div") {
    f = alg::binary_div;
    commutative = false;
  } else {
    return nullptr;  // Max/Min propagate NaN (the loops do), Pow has its own paths
  }
  // Different formats only for same-shape operands (the format rule), where flat is fine.
  std::unique_ptr<PrimitiveKernel> k;
  if (x.shape == y.shape) {
    k = std::make_unique<DnnlBinaryKernel>(a, f, x, z);
  } else if (commutative && z.shape == y.shape) {
    k = std::make_unique<DnnlBinaryKernel>(a, f, z, x);
  } else {
    return nullptr;
  }
  // oneDNN runs some broadcasts (a middle axis: Swin's window mask [1,4,1,16,16] onto
  // [1,4,2,16,16]) on its reference implementation, several times slower than our loops
  // over collapsed rows (31% of that model's run): then the loops, which take any plain
  // broadcast, and NHWC ones over the stored order. Blocked formats (a squeeze-excitation's
  // per-channel scale of an nChw16c map) need oneDNN, whatever it picks.
  if (k->impl().find(" ref") != std::string::npos && loops) return nullptr;
  return k;
}

}  // namespace

std::unique_ptr<Kernel> make_binary(const KernelArgs& a) {
  auto k = std::make_unique<BinaryKernel>(a);  // validates the node in every case
  if (auto fast = dnnl_binary(a)) return fast;
  const TensorInfo& y = a.out(0);
  for (const TensorInfo* t : {&a.in(0), &a.in(1)}) {
    if (!y.plain() && y.format != Format::kNhwc && y.numel > 0 && t->numel > 1 && t->shape != y.shape) {
      invalid("a broadcast into a ", format_name(y.format), " output runs on oneDNN only (float32 Add/Sub/Mul/Div)");
    }
  }
  return k;
}
std::unique_ptr<Kernel> make_where(const KernelArgs& a) { return std::make_unique<WhereKernel>(a); }

}  // namespace ge
