// MatMulQWeight: Y = X @ ((float(W) - Z) * S) [+ B], X float32 [..., K], W constant 8-bit
// [K, N] (int8 or uint8), S float32 and Z (W's dtype, optional) constant, one value or one
// per column, B (optional: a fused bias) constant float32 [N]: a weight-only quantized MatMul (Cast + Mul of 8-bit weights, onnxruntime's or an
// exporter's "weight compression") that keeps the weights 8-bit in memory. Folded to
// float32 they are 4 bytes a weight read per run; at a few rows (a text encoder at batch 1)
// the product is bound by reading them (a 384 x 1536 float matrix is 2.4 MB; L2 holds 2).
//
// The weights are stored centred (W - Z) in panels of 16 columns x K (int8 when every
// centred value fits, else int16). A run takes 32 columns at a time: their K x 32 weights
// decompressed into float32 exactly as the folded constant would be (float(w - z) * s, one
// float32 product each), then every 12-row tile of X against them with 24 accumulators, k
// in order. Column pairs are split over the OpenMP team.
//
// bf16 products (`bf16_activations` = 1 or 2 terms; compile option `weight_only_products`,
// default 2): where the CPU multiplies bfloat16 natively (AMX or AVX512_BF16) and X has at
// least kBf16MinRows rows, the product runs on oneDNN's bf16 matmul instead. The centred
// weights (integers in [-255, 255]) are exact in bfloat16. X is written into the workspace
// as hi = bf16(x) and, with two terms, lo = bf16(x - hi) (split_row: relative error <= 2^-9
// with one term, <= 2^-18 with two); the sums are float32, lo W first into Y, then
// (hi W + Y) * S + B by a sum and binary post-ops in float32. The weights are 2 bytes each
// then (oneDNN's blocked layout, one copy for both terms) and the 8-bit panels are dropped.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "dnnl_util.h"
#include "kernels.h"

namespace ge {

namespace {

constexpr int kRows = 12;  // rows of X per tile (2 x 12 accumulators)

__mmask16 col_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

template <class Q>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 widen(const Q* p) {
  if constexpr (sizeof(Q) == 1) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  } else {
    return _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  }
}

// rows x 32 outputs (cols of them stored) of x[rows, K] @ b[K, 32] (b dense, 32 a row).
// `bias` (32 values) starts the sums at 0 and is added after them, as a separate Add would.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void tile(const float* x, int64_t ldx, const float* b,
                                                              int64_t K, float* y, int64_t ldy, int64_t cols,
                                                              const float* bias) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b + 32 * k), b1 = _mm512_loadu_ps(b + 32 * k + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(x[r * ldx + k]);
      acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
    }
  }
  if (bias != nullptr) {
    const __m512 c0 = _mm512_loadu_ps(bias), c1 = _mm512_loadu_ps(bias + 16);
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm512_add_ps(acc[r][0], c0);
      acc[r][1] = _mm512_add_ps(acc[r][1], c1);
    }
  }
  const __mmask16 m0 = col_mask(cols), m1 = col_mask(cols - 16);
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, m0, acc[r][0]);
    if (cols > 16) _mm512_mask_storeu_ps(y + r * ldy + 16, m1, acc[r][1]);
  }
}

// Rows of X from which the bf16 product is taken. Measured (12 chained 384x1536 / 1536x384
// products, 2 threads, interleaved): 1 and 4 rows ran alike (0.78-0.86 ms), 8 rows 0.78
// against 1.17, 24 rows 1.27 against 3.18. Below 8 the 8-bit kernel reads half the bytes,
// which is what counts where the weights come from memory rather than this CPU's L3.
constexpr int64_t kBf16MinRows = 8;

// Whether oneDNN may dispatch to native bfloat16 code (AMX or AVX512_BF16; ONEDNN_MAX_CPU_ISA
// may lower it) and AVX-512 is allowed (X's conversion uses it).
bool has_native_bf16() {
  const int isa = static_cast<int>(dnnl::get_effective_cpu_isa());
  auto has = [isa](dnnl_cpu_isa_t want) { return (isa & want) == want; };
  return cpu_has_avx512() && (has(dnnl_cpu_isa_avx512_core_bf16) || has(dnnl_cpu_isa_avx512_core_amx));
}

// One row of X as bfloat16 terms: hi = bf16(x) (|x - hi| <= 2^-9 |x|) and, where `lo` is
// given, lo = bf16(x - hi), each rounded to nearest even. x - hi is exact in float32, and
// |x - (hi + lo)| <= 2^-9 |x - hi| <= 2^-18 |x|.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void split_row(const float* x, uint16_t* hi,
                                                                              uint16_t* lo, int64_t K) {
  for (int64_t i = 0; i < K; i += 16) {
    const __mmask16 m = col_mask(K - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
    _mm256_mask_storeu_epi16(hi + i, m, h);
    if (lo != nullptr) {
      const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      _mm256_mask_storeu_epi16(lo + i, m, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_sub_ps(v, hf))));
    }
  }
}

// The bfloat16 bits of an integer of magnitude <= 256 (exact: its float32 low half is 0).
uint16_t bf16_of_small_int(int v) {
  const float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16);
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t, const float*);

template <int... R>
constexpr std::array<TileFn, sizeof...(R)> tiles(std::integer_sequence<int, R...>) {
  return {tile<R + 1>...};
}

class MatMulQWeightKernel : public Kernel {
 public:
  explicit MatMulQWeightKernel(const KernelArgs& a) {
    a.expect_inputs(3, 5);
    a.expect_outputs(1, 1);
    x_ = &a.in(0);
    y_ = &a.out(0);
    const TensorInfo& w = a.in(1);
    const TensorInfo& s = a.in(2);
    const TensorInfo* z = a.opt_in(3);
    const TensorInfo* bias = a.inputs.size() > 4 ? a.opt_in(4) : nullptr;
    a.expect_dtype(*x_, DType::kFloat32, "input X");
    a.expect_dtype(*y_, DType::kFloat32, "output Y");
    if (w.dtype != DType::kInt8 && w.dtype != DType::kUInt8) invalid("weight W must be int8 or uint8");
    if (w.rank() != 2 || !w.constant()) invalid("weight W must be a constant matrix [K, N]");
    K_ = w.shape[0];
    N_ = w.shape[1];
    if (x_->rank() < 1 || x_->shape.back() != K_) {
      invalid("input X ", shape_str(x_->shape), " does not end in W's K = ", K_);
    }
    Shape want = x_->shape;
    want.back() = N_;
    if (y_->shape != want) invalid("output shape ", shape_str(y_->shape), " must be ", shape_str(want));
    a.expect_dtype(s, DType::kFloat32, "scale S");
    if (!s.constant() || (s.numel != 1 && s.numel != N_)) invalid("scale S must be a constant of 1 or N values");
    if (z && (z->dtype != w.dtype || !z->constant() || (z->numel != 1 && z->numel != N_))) {
      invalid("zero point Z must be a constant of W's dtype with 1 or N values");
    }
    if (!x_->plain() || !y_->plain()) invalid("X and Y must be stored plain");
    if (bias) {
      a.expect_dtype(*bias, DType::kFloat32, "bias B");
      if (!bias->constant() || bias->shape != Shape{N_}) invalid("bias B must be a constant [", N_, "]");
    }
    M_ = K_ > 0 ? x_->numel / K_ : 0;
    pairs_ = (N_ + 31) / 32;
    // centred weights, in [-255, 255]
    std::vector<int16_t> centred(static_cast<size_t>(K_ * N_));
    int lo = 0, hi = 0;
    for (int64_t k = 0; k < K_; ++k) {
      for (int64_t n = 0; n < N_; ++n) {
        const int64_t i = k * N_ + n;
        const int v = w.dtype == DType::kInt8 ? w.const_ptr<int8_t>()[i] : w.const_ptr<uint8_t>()[i];
        int zp = 0;
        if (z) {
          const int64_t j = z->numel == 1 ? 0 : n;
          zp = z->dtype == DType::kInt8 ? z->const_ptr<int8_t>()[j] : z->const_ptr<uint8_t>()[j];
        }
        const int c = v - zp;
        centred[i] = static_cast<int16_t>(c);
        lo = std::min(lo, c);
        hi = std::max(hi, c);
      }
    }
    narrow_ = lo >= -128 && hi <= 127;
    const int64_t padded = pairs_ * 32;
    scales_.assign(static_cast<size_t>(padded), 0.f);
    for (int64_t n = 0; n < N_; ++n) scales_[n] = s.const_ptr<float>()[s.numel == 1 ? 0 : n];
    if (bias) {
      bias_.assign(static_cast<size_t>(padded), 0.f);
      std::memcpy(bias_.data(), bias->const_ptr<float>(), static_cast<size_t>(N_) * sizeof(float));
    }
    // panels: [padded / 16][K][16], zero beyond N
    const size_t count = static_cast<size_t>(padded * K_);
    if (narrow_) {
      w8_.assign(count, 0);
    } else {
      w16_.assign(count, 0);
    }
    for (int64_t n = 0; n < N_; ++n) {
      const int64_t panel = n / 16, lane = n % 16;
      for (int64_t k = 0; k < K_; ++k) {
        const size_t at = static_cast<size_t>((panel * K_ + k) * 16 + lane);
        if (narrow_) {
          w8_[at] = static_cast<int8_t>(centred[k * N_ + n]);
        } else {
          w16_[at] = centred[k * N_ + n];
        }
      }
    }
    if (!cpu_has_avx512()) invalid("MatMulQWeight needs AVX-512");
    const int64_t terms = a.attr_int("bf16_activations", 0);
    if (terms < 0 || terms > 2) invalid("bf16_activations must be 0, 1 or 2 (bfloat16 terms of X), got ", terms);
    if (terms > 0 && M_ >= kBf16MinRows && K_ > 0 && N_ > 0 && has_native_bf16()) {
      terms_ = terms;
      build_bf16(a, w, z, centred);
    }
    if (bf16_) {  // the 8-bit panels are not read
      std::vector<int8_t>().swap(w8_);
      std::vector<int16_t>().swap(w16_);
    }
  }

  std::string impl() const override {
    if (bf16_) return prim_.impl() + (terms_ == 2 ? " bf16x2" : " bf16");
    return narrow_ ? "wq int8 avx512" : "wq int16 avx512";
  }
  size_t workspace_bytes() const override { return plan_.total(); }
  void set_instances(int n) override {
    if (!bf16_) return;
    prim_.set_instances(n, host_engine(*dev_));
    prim_lo_.set_instances(n, host_engine(*dev_));
  }

  Status run(ExecContext& ctx) override {
    const float* x = ctx.ptr<const float>(*x_);
    float* y = ctx.ptr<float>(*y_);
    if (M_ == 0 || N_ == 0) return Status::Ok();
    if (bf16_) {
      uint16_t* hi = reinterpret_cast<uint16_t*>(ctx.workspace + xb_at_);
      uint16_t* lo = prim_lo_.valid() ? hi + M_ * K_ : nullptr;
#pragma omp parallel for schedule(static) if (M_ * K_ >= (int64_t{1} << 15) && omp_get_max_threads() > 1)
      for (int64_t r = 0; r < M_; ++r) split_row(x + r * K_, hi + r * K_, lo ? lo + r * K_ : nullptr, K_);
      if (lo) prim_lo_.execute(ctx);  // y = lo W
      prim_.execute(ctx);              // y = (hi W [+ y]) s [+ b]
      return Status::Ok();
    }
    if (K_ == 0) {
      std::memset(y, 0, static_cast<size_t>(M_ * N_) * sizeof(float));
      return Status::Ok();
    }
    const bool parallel = pairs_ > 1 && M_ * K_ * N_ >= (int64_t{1} << 18) && omp_get_max_threads() > 1;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t p = 0; p < pairs_; ++p) {
      if (narrow_) {
        pair(x, y, p, w8_.data());
      } else {
        pair(x, y, p, w16_.data());
      }
    }
    return Status::Ok();
  }

 private:
  template <class Q>
  __attribute__((target("avx512f,avx512bw,avx512vl"))) void pair(const float* x, float* y, int64_t p,
                                                                const Q* panels) const {
    thread_local std::vector<float> buf;
    if (buf.size() < static_cast<size_t>(32 * K_)) buf.resize(static_cast<size_t>(32 * K_));
    float* b = buf.data();
    const Q* w0 = panels + (2 * p) * K_ * 16;
    const Q* w1 = panels + (2 * p + 1) * K_ * 16;
    const __m512 s0 = _mm512_loadu_ps(scales_.data() + 32 * p), s1 = _mm512_loadu_ps(scales_.data() + 32 * p + 16);
    for (int64_t k = 0; k < K_; ++k) {  // float(w - z) * s: the folded constant's value
      _mm512_storeu_ps(b + 32 * k, _mm512_mul_ps(widen(w0 + 16 * k), s0));
      _mm512_storeu_ps(b + 32 * k + 16, _mm512_mul_ps(widen(w1 + 16 * k), s1));
    }
    static constexpr auto kTiles = tiles(std::make_integer_sequence<int, kRows>{});
    const int64_t cols = std::min<int64_t>(32, N_ - 32 * p);
    for (int64_t r = 0; r < M_; r += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, M_ - r);
      kTiles[rows - 1](x + r * K_, K_, b, K_, y + r * N_ + 32 * p, N_, cols,
                       bias_.empty() ? nullptr : bias_.data() + 32 * p);
    }
  }

  // The bf16 product on oneDNN (see the top of the file), if the CPU and its impl allow it:
  // with two terms, y = lo W first (prim_lo_), then y = (hi W + y) s [+ b] (prim_, a sum
  // post-op before the scale), both on the same bf16 weights.
  void build_bf16(const KernelArgs& a, const TensorInfo& w, const TensorInfo* z, const std::vector<int16_t>& centred) {
    using dims = dnnl::memory::dims;
    const dnnl::engine& eng = host_engine(*a.device);
    const dnnl::memory::desc src(dims{M_, K_}, dt::bf16, tag::ab), dst(dims{M_, N_}, dt::f32, tag::ab);
    const dnnl::memory::desc wplain(dims{K_, N_}, dt::bf16, tag::ab), wany(dims{K_, N_}, dt::bf16, tag::any);
    const dnnl::memory::desc row(dims{1, N_}, dt::f32, tag::ab);
    const bool two = terms_ == 2;
    dnnl::post_ops ops;
    if (two) ops.append_sum(1.f);
    ops.append_binary(dnnl::algorithm::binary_mul, row);
    if (!bias_.empty()) ops.append_binary(dnnl::algorithm::binary_add, row);
    auto native = [](const std::string& impl) {
      return impl.find("ref:") == std::string::npos &&
             (impl.find("amx") != std::string::npos || impl.find("bf16") != std::string::npos);
    };
    dnnl::matmul::primitive_desc pd, pd_lo;
    try {
      pd = dnnl::matmul::primitive_desc(eng, src, wany, dst, make_attr(ops));
      if (two) pd_lo = dnnl::matmul::primitive_desc(eng, src, pd.weights_desc(), dst, make_attr());
    } catch (const dnnl::error&) {
      return;  // no such bf16 matmul here: the 8-bit kernel
    }
    if (!native(pd.impl_info_str()) || (two && !native(pd_lo.impl_info_str()))) return;
    std::vector<uint16_t> wb(centred.size());
    for (size_t i = 0; i < wb.size(); ++i) wb[i] = bf16_of_small_int(centred[i]);
    // Keyed by W's bytes when they alone make the centred weights (no zero point, or all 0);
    // otherwise not shared (another W - Z of the same W bytes would differ).
    bool any_zero_point = false;
    for (int64_t i = 0; z && i < z->numel && !any_zero_point; ++i) any_zero_point = z->data[i] != 0;
    KernelArgs own = a;
    if (any_zero_point) own.prepared = nullptr;
    weights_ = reorder_constant(own, wplain, wb.data(), pd.weights_desc(), any_zero_point ? nullptr : w.data);
    dev_ = a.device;
    const size_t rows_bytes = static_cast<size_t>(M_ * K_) * sizeof(uint16_t);
    xb_at_ = plan_.add(static_cast<size_t>(terms_) * rows_bytes);  // hi rows, then lo rows
    const Ref weights = Ref::buffer(weights_->data());
    prim_ = Prim(pd);
    prim_.arg(DNNL_ARG_SRC, src, Ref::workspace(xb_at_));
    prim_.arg(DNNL_ARG_WEIGHTS, pd.weights_desc(), weights);
    prim_.arg(DNNL_ARG_DST, dst, Ref::of(*y_));
    const int first = two ? 1 : 0;  // the binary post-ops' places after the sum
    prim_.arg(DNNL_ARG_ATTR_MULTIPLE_POST_OP(first) | DNNL_ARG_SRC_1, row, Ref::buffer(scales_.data()));
    if (!bias_.empty()) {
      prim_.arg(DNNL_ARG_ATTR_MULTIPLE_POST_OP(first + 1) | DNNL_ARG_SRC_1, row, Ref::buffer(bias_.data()));
    }
    if (two) {
      prim_lo_ = Prim(pd_lo);
      prim_lo_.arg(DNNL_ARG_SRC, src, Ref::workspace(xb_at_ + rows_bytes));
      prim_lo_.arg(DNNL_ARG_WEIGHTS, pd.weights_desc(), weights);
      prim_lo_.arg(DNNL_ARG_DST, dst, Ref::of(*y_));
    }
    Prim::share_scratchpad(&plan_, {&prim_, &prim_lo_});
    bf16_ = true;
  }

  const TensorInfo* x_ = nullptr;
  const TensorInfo* y_ = nullptr;
  int64_t K_ = 0, N_ = 0, M_ = 0, pairs_ = 0;
  bool narrow_ = true;
  bool bf16_ = false;
  int64_t terms_ = 0;  // bfloat16 terms of X (split_row)
  const Device* dev_ = nullptr;
  Prim prim_, prim_lo_;  // (hi W [+ y]) s [+ b]; with two terms, lo W
  WorkspacePlan plan_;
  size_t xb_at_ = 0;
  std::shared_ptr<const AlignedBuffer> weights_;  // bf16, oneDNN's layout (shared)
  std::vector<int8_t> w8_;
  std::vector<int16_t> w16_;
  std::vector<float> scales_, bias_;
};

}  // namespace

std::unique_ptr<Kernel> make_matmul_qweight(const KernelArgs& a) { return std::make_unique<MatMulQWeightKernel>(a); }

}  // namespace ge
