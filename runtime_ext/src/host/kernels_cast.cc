// Cast between any two of the runtime's dtypes. Float -> integer truncates toward zero
// and saturates (NaN -> 0) instead of invoking undefined behaviour; -> bool is "!= 0".
#include <immintrin.h>
#include <omp.h>

#include <cstring>
#include <type_traits>

#include "kernels.h"

namespace ge {

namespace {

struct Half {
  uint16_t bits;
};

// A bool tensor's byte, read as a byte: any non-zero value is true (reading it through a
// bool* would be undefined behaviour for values other than 0 and 1).
struct BoolByte {
  uint8_t byte;
};

template <class S>
inline auto load(const S& v) {
  if constexpr (std::is_same_v<S, Half>) {
    return half_to_float(v.bits);
  } else if constexpr (std::is_same_v<S, BoolByte>) {
    return static_cast<uint8_t>(v.byte != 0);
  } else {
    return v;
  }
}

template <class D, class V>
inline D convert(V v) {
  if constexpr (std::is_same_v<D, Half>) {
    return Half{float_to_half(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != V(0);
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<V>) {
    return float_to_int<D>(static_cast<double>(v));
  } else {
    return static_cast<D>(v);
  }
}

template <class S, class D>
void cast_loop(const void* src, void* dst, int64_t n) {
  const S* s = static_cast<const S*>(src);
  D* d = static_cast<D*>(dst);
#pragma omp parallel for schedule(static) if (n >= 65536)
  for (int64_t i = 0; i < n; ++i) d[i] = convert<D>(load(s[i]));
}

using CastFn = void (*)(const void*, void*, int64_t);

// float <-> float16 with the F16C conversions, 8 at a time: what a float16 model computed in
// float32 pays at each narrowing Cast (round to nearest even, like float_to_half; a NaN
// stays a NaN). The scalar loop took ~1.6 ns an element, a call per element.
constexpr int64_t kCastGrain = 65536;

__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const void* src, void* dst, int64_t n) {
  const float* s = static_cast<const float*>(src);
  uint16_t* d = static_cast<uint16_t*>(dst);
  const int64_t blocks = n / 8;
#pragma omp parallel for schedule(static) if (n >= kCastGrain)
  for (int64_t b = 0; b < blocks; ++b) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(s + 8 * b), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 8 * b), h);
  }
  for (int64_t i = 8 * blocks; i < n; ++i) d[i] = float_to_half(s[i]);
}

__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const void* src, void* dst, int64_t n) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  float* d = static_cast<float*>(dst);
  const int64_t blocks = n / 8;
#pragma omp parallel for schedule(static) if (n >= kCastGrain)
  for (int64_t b = 0; b < blocks; ++b) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 8 * b));
    _mm256_storeu_ps(d + 8 * b, _mm256_cvtph_ps(h));
  }
  for (int64_t i = 8 * blocks; i < n; ++i) d[i] = half_to_float(s[i]);
}

bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return yes;
}

template <class S>
CastFn pick_dst(DType to) {
  switch (to) {
    case DType::kFloat32: return cast_loop<S, float>;
    case DType::kFloat64: return cast_loop<S, double>;
    case DType::kFloat16: return cast_loop<S, Half>;
    case DType::kInt64: return cast_loop<S, int64_t>;
    case DType::kInt32: return cast_loop<S, int32_t>;
    case DType::kInt16: return cast_loop<S, int16_t>;
    case DType::kInt8: return cast_loop<S, int8_t>;
    case DType::kUInt8: return cast_loop<S, uint8_t>;
    case DType::kBool: return cast_loop<S, bool>;
  }
  return nullptr;
}

CastFn pick(DType from, DType to) {
  if (has_f16c() && from == DType::kFloat32 && to == DType::kFloat16) return f32_to_f16_f16c;
  if (has_f16c() && from == DType::kFloat16 && to == DType::kFloat32) return f16_to_f32_f16c;
  switch (from) {
    case DType::kFloat32: return pick_dst<float>(to);
    case DType::kFloat64: return pick_dst<double>(to);
    case DType::kFloat16: return pick_dst<Half>(to);
    case DType::kInt64: return pick_dst<int64_t>(to);
    case DType::kInt32: return pick_dst<int32_t>(to);
    case DType::kInt16: return pick_dst<int16_t>(to);
    case DType::kInt8: return pick_dst<int8_t>(to);
    case DType::kUInt8: return pick_dst<uint8_t>(to);
    case DType::kBool: return pick_dst<BoolByte>(to);
  }
  return nullptr;
}

// ONNX TensorProto.DataType codes, accepted as an alternative to a dtype name.
bool onnx_dtype(int64_t code, DType* out) {
  switch (code) {
    case 1: *out = DType::kFloat32; return true;
    case 2: *out = DType::kUInt8; return true;
    case 3: *out = DType::kInt8; return true;
    case 5: *out = DType::kInt16; return true;
    case 6: *out = DType::kInt32; return true;
    case 7: *out = DType::kInt64; return true;
    case 9: *out = DType::kBool; return true;
    case 10: *out = DType::kFloat16; return true;
    case 11: *out = DType::kFloat64; return true;
    default: return false;
  }
}

class CastKernel : public Kernel {
 public:
  explicit CastKernel(const KernelArgs& a) {
    a.expect_inputs(1, 1);
    a.expect_outputs(1, 1);
    x_ = &a.in(0);
    y_ = &a.out(0);
    DType to;
    if (!a.has_attr("to")) invalid("attribute 'to' is required");
    std::string name = a.attr_str("to", "");  // throws if not a string...
    if (!parse_dtype(name, &to)) invalid("unknown dtype '", name, "' in attribute 'to'");
    if (y_->dtype != to) invalid("output dtype ", dtype_name(y_->dtype), " differs from 'to' ", name);
    if (x_->shape != y_->shape) {
      invalid("output shape ", shape_str(y_->shape), " does not match input ", shape_str(x_->shape));
    }
    fn_ = pick(x_->dtype, to);
  }

  Status run(ExecContext& ctx) override {
    const uint8_t* x = ctx.ptr(*x_);
    uint8_t* y = ctx.ptr(*y_);
    if (x_->dtype == y_->dtype) {
      if (x != y) std::memmove(y, x, x_->nbytes);
    } else {
      fn_(x, y, x_->numel);
    }
    return Status::Ok();
  }

 private:
  const TensorInfo* x_;
  const TensorInfo* y_;
  CastFn fn_ = nullptr;
};

}  // namespace

std::unique_ptr<Kernel> make_cast(const KernelArgs& a) {
  // "to" may also be an ONNX TensorProto code: translate it to a name first.
  if (a.has_attr("to")) {
    const AttrValue& v = a.attrs->at("to");
    if (const int64_t* code = std::get_if<int64_t>(&v)) {
      DType t;
      if (!onnx_dtype(*code, &t)) invalid("unsupported ONNX dtype code ", *code, " in attribute 'to'");
      Attrs attrs = *a.attrs;
      attrs["to"] = std::string(dtype_name(t));
      KernelArgs b = a;
      b.attrs = &attrs;
      return std::make_unique<CastKernel>(b);
    }
  }
  return std::make_unique<CastKernel>(a);
}

}  // namespace ge
