// MatMulInteger on oneDNN's int8 matmul (u8 or s8 activations x s8 weights -> s32), exact.
//
// oneDNN takes s8 weights, so a uint8 B is kept as B - 128 and its zero point moves by 128
// with it: the differences B - zb are unchanged. With W those s8 weights, zw their zero point
// (one, or one per column) and zx A's:
//   y[m,n] = sum_k (x - zx)(W - zw) = sum_k x W - zx colsum(W)[n] - zw[n] rowsum(x)[m] + K zx zw[n]
// oneDNN computes the first sum with no attributes (its zero-point attributes in 3.2 take no
// per-column weight zero point, and a scale or post-op would route the s32 sums through f32);
// colsum is taken at load, rowsum per run, and the rest is one pass over the output. That pass
// wraps modulo 2^32 (unsigned arithmetic), as does every term, so y is the exact sum wrapped to
// int32 — the reference's answer — even where a partial term leaves int32.
//
// Only with VNNI (vpdpbusd adds its four u8 x s8 products in 32 bits): without it oneDNN
// pairs the products in a saturating 16-bit add (vpmaddubsw), 2 * 255 * 128 > 32767.
#include <cstring>
#include <optional>
#include <vector>

#include "copy.h"
#include "dnnl_util.h"
#include "kernels.h"

namespace ge {

namespace {

using dims = dnnl::memory::dims;

bool is_8bit(DType d) { return d == DType::kUInt8 || d == DType::kInt8; }

// VNNI in the ISA oneDNN dispatches to (ONEDNN_MAX_CPU_ISA may lower it).
bool has_vnni() {
  const int isa = static_cast<int>(dnnl::get_effective_cpu_isa());
  auto has = [isa](dnnl_cpu_isa_t want) { return (isa & want) == want; };
  return has(dnnl_cpu_isa_avx512_core_vnni) || has(dnnl_cpu_isa_avx2_vnni);
}

template <class T>
uint32_t row_sum(const T* x, int64_t k) {
  int32_t s = 0;  // |sum| <= kMaxInner * 255 < 2^31
  for (int64_t i = 0; i < k; ++i) s += x[i];
  return static_cast<uint32_t>(s);
}

class MatMulIntegerKernel : public Kernel {
 public:
  explicit MatMulIntegerKernel(const KernelArgs& a);
  size_t workspace_bytes() const override { return plan_.total(); }
  void set_instances(int n) override { prim_.set_instances(n, host_engine(*dev_)); }
  Status run(ExecContext& ctx) override;
  std::string impl() const override { return prim_.impl() + " + zero points"; }

 private:
  template <class T>
  void correct(const ExecContext& ctx, uint32_t zx) const;

  const Device* dev_ = nullptr;
  const TensorInfo* x_ = nullptr;
  const TensorInfo* zx_ = nullptr;  // A's zero point: a run-time tensor or a constant
  const TensorInfo* y_ = nullptr;
  int64_t rows_ = 0, k_ = 0, n_ = 0;
  bool signed_x_ = false;
  bool any_zw_ = false;            // some column's s8 zero point is not 0: rowsum(x) needed
  std::vector<uint32_t> zw_;       // per column, s8 (a uint8 B's less 128)
  std::vector<uint32_t> kzw_less_colsum_;  // K zw[n] - colsum(W)[n], modulo 2^32
  size_t c_at_ = 0;                // workspace: zx (K zw - colsum) per column
  Prim prim_;
  std::shared_ptr<const AlignedBuffer> weights_;
  WorkspacePlan plan_;
};

MatMulIntegerKernel::MatMulIntegerKernel(const KernelArgs& a) : dev_(a.device) {
  a.expect_inputs(2, 4);
  a.expect_outputs(1, 1);
  x_ = &a.in(0);
  const TensorInfo& b = a.in(1);
  zx_ = a.opt_in(2);
  const TensorInfo* zb = a.opt_in(3);
  y_ = &a.out(0);
  std::vector<std::optional<DType>> types = {x_->dtype, b.dtype};
  std::vector<Shape> shapes = {x_->shape, b.shape};
  for (const TensorInfo* t : {zx_, zb}) {
    types.push_back(t ? std::optional<DType>(t->dtype) : std::nullopt);
    shapes.push_back(t ? t->shape : Shape{});
  }
  const std::string why = matmul_integer_problem(types, shapes);
  if (!why.empty()) invalid(why);
  if (!b.constant()) invalid("B must be a constant (its column sums are taken at load)");
  if (zb && !zb->constant()) invalid("B's zero point must be a constant");
  k_ = b.shape[0];
  n_ = b.shape[1];
  rows_ = k_ > 0 ? x_->numel / k_ : 0;
  Shape expect(x_->shape.begin(), x_->shape.end() - 1);
  expect.push_back(n_);
  a.expect_dtype(*y_, DType::kInt32, "output Y");
  if (y_->shape != expect) invalid("output shape ", shape_str(y_->shape), " must be ", shape_str(expect));
  signed_x_ = x_->dtype == DType::kInt8;

  // The s8 weights, plain [K, N], and each column's sum and zero point, from B's bytes.
  const bool shift = b.dtype == DType::kUInt8;
  const uint8_t* braw = b.data;
  std::vector<int8_t> shifted;
  if (shift) {
    shifted.resize(static_cast<size_t>(b.numel));
    for (int64_t i = 0; i < b.numel; ++i) shifted[i] = static_cast<int8_t>(braw[i] ^ 0x80);  // B - 128
  }
  const int8_t* w = shift ? shifted.data() : reinterpret_cast<const int8_t*>(braw);
  std::vector<int32_t> colsum(static_cast<size_t>(n_), 0);
  for (int64_t k = 0; k < k_; ++k) {
    for (int64_t j = 0; j < n_; ++j) colsum[j] += w[k * n_ + j];
  }
  zw_.assign(static_cast<size_t>(n_), 0);
  for (int64_t j = 0; j < n_; ++j) {  // an omitted zero point is 0, which moves with B
    const int64_t at = zb && zb->numel > 1 ? j : 0;
    const int32_t raw = !zb ? 0 : shift ? zb->data[at] : static_cast<int8_t>(zb->data[at]);
    const int32_t z = shift ? raw - 128 : raw;
    zw_[j] = static_cast<uint32_t>(z);
    any_zw_ = any_zw_ || z != 0;
  }
  kzw_less_colsum_.resize(static_cast<size_t>(n_));
  for (int64_t j = 0; j < n_; ++j) {
    kzw_less_colsum_[j] = static_cast<uint32_t>(k_) * zw_[j] - static_cast<uint32_t>(colsum[j]);
  }

  const dnnl::engine& eng = host_engine(*dev_);
  const dt xdt = signed_x_ ? dt::s8 : dt::u8;
  dnnl::memory::desc src(dims{rows_, k_}, xdt, tag::ab);
  dnnl::memory::desc wplain(dims{k_, n_}, dt::s8, tag::ab);
  dnnl::memory::desc wany(dims{k_, n_}, dt::s8, tag::any);
  dnnl::memory::desc dst(dims{rows_, n_}, dt::s32, tag::ab);
  dnnl::matmul::primitive_desc pd(eng, src, wany, dst, make_attr());
  prim_ = Prim(pd);
  // Keyed by B's own bytes: the shifted copy is gone after load.
  weights_ = reorder_constant(a, wplain, w, pd.weights_desc(), braw);
  prim_.arg(DNNL_ARG_SRC, src, Ref::of(*x_));
  prim_.arg(DNNL_ARG_WEIGHTS, pd.weights_desc(), Ref::buffer(weights_->data()));
  prim_.arg(DNNL_ARG_DST, dst, Ref::of(*y_));
  Prim::share_scratchpad(&plan_, {&prim_});
  c_at_ = plan_.add(static_cast<size_t>(n_) * sizeof(uint32_t));
}

template <class T>
void MatMulIntegerKernel::correct(const ExecContext& ctx, uint32_t zx) const {
  const T* x = ctx.ptr<const T>(*x_);
  uint32_t* y = ctx.ptr<uint32_t>(*y_);  // int32 sums, corrected modulo 2^32
  uint32_t* c = reinterpret_cast<uint32_t*>(ctx.workspace + c_at_);
  for (int64_t j = 0; j < n_; ++j) c[j] = zx * kzw_less_colsum_[j];
  const uint32_t* zw = zw_.data();
  const int64_t n = n_, k = k_;
  const bool any_zw = any_zw_;
  for_rows(rows_, rows_ * (n * 4 + k), [&](int64_t m) {
    const uint32_t r = any_zw ? row_sum(x + m * k, k) : 0;
    uint32_t* row = y + m * n;
    for (int64_t j = 0; j < n; ++j) row[j] += c[j] - zw[j] * r;
  });
}

Status MatMulIntegerKernel::run(ExecContext& ctx) {
  prim_.execute(ctx);
  int32_t zx = 0;
  if (zx_) {
    const uint8_t* z = ctx.ptr(*zx_);
    zx = signed_x_ ? static_cast<int8_t>(*z) : *z;
  }
  if (zx == 0 && !any_zw_) return Status::Ok();
  if (signed_x_) {
    correct<int8_t>(ctx, static_cast<uint32_t>(zx));
  } else {
    correct<uint8_t>(ctx, static_cast<uint32_t>(zx));
  }
  return Status::Ok();
}

}  // namespace

std::string matmul_integer_problem(const std::vector<std::optional<DType>>& types, const std::vector<Shape>& shapes) {
  if (types.size() < 2 || !types[0] || !types[1]) return "A and B are required";
  const DType da = *types[0], db = *types[1];
  if (!is_8bit(da) || !is_8bit(db)) {
    return cat("A and B must be int8 or uint8, got ", dtype_name(da), " and ", dtype_name(db));
  }
  const Shape& as = shapes[0];
  const Shape& bs = shapes[1];
  if (bs.size() != 2) return cat("B must be a matrix, got ", shape_str(bs));
  if (as.empty()) return "A must have rank >= 1";
  if (as.back() != bs[0]) return cat("inner dimensions differ: A ", shape_str(as), " and B ", shape_str(bs));
  if (shape_numel(as) == 0 || shape_numel(bs) == 0) return "empty operands stay on the host";
  if (bs[0] > kMaxIntegerInner) {
    return cat("inner dimension ", bs[0], " could overflow oneDNN's int32 sums (at most ", kMaxIntegerInner, ")");
  }
  for (size_t i = 2; i < 4 && i < types.size(); ++i) {
    if (!types[i]) continue;
    const char* who = i == 2 ? "A's" : "B's";
    if (*types[i] != *types[i - 2]) {
      return cat(who, " zero point must be ", dtype_name(*types[i - 2]), ", got ", dtype_name(*types[i]));
    }
    const Shape& zs = shapes[i];
    const int64_t numel = shape_numel(zs);
    const bool per_column = i == 3 && numel == bs[1] && !zs.empty() && zs.back() == bs[1];
    if (numel != 1 && !per_column) {
      return cat(who, " zero point must be one value", i == 3 ? " or one per column" : "", ", got ", shape_str(zs));
    }
  }
  if (!has_vnni()) return "int8 products need VNNI (without it oneDNN's 16-bit pair sums saturate)";
  return "";
}

std::unique_ptr<Kernel> make_matmul_integer(const KernelArgs& a) { return std::make_unique<MatMulIntegerKernel>(a); }

}  // namespace ge
