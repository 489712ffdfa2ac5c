// Gemm and MatMul on the oneDNN matmul primitive.
//
// Constant right-hand sides are reordered once at load into oneDNN's preferred layout.
// A residual (fusion attr sum=1) is placed in the output before the primitive runs and
// added by a sum post-op; Gemm's C goes in as bias when alpha == beta == 1 and otherwise
// is folded into that pre-filled output as beta * C. A GELU (erf form) activation runs
// after the primitive, over its output, by gelu.h where the CPU has AVX-512 (oneDNN's
// post-op took 10% of bert_mini's fc1; gelu.h takes 5%), else as a post-op.
// A MatMul's multiplier (fusion attr mul=1, the last input, the output's shape: a gated
// MLP's other branch, SwiGLU's silu(gate) * up) multiplies the result after the activation:
// a binary post-op, or a loop after the primitive where the GELU runs there or oneDNN would
// fall back to its reference matmul, and after the GEMV kernel.
//
// A MatMul of a mixture of experts' routed rows (attribute rows=1: the last input is an
// int64 count n; prepare/expert_rows.py) needs only its first n * rows_unit rows of A's
// folded batch: the rest are padding whose results nothing reads. A second primitive over
// a block of those rows runs once per block the count covers, where that is less than the
// whole; its weights are the whole primitive's (one reorder).
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "broadcast.h"
#include "dnnl_util.h"
#include "gelu.h"
#include "kernels.h"
#include "kernels_gemv.h"

namespace ge {

namespace {

using dims = dnnl::memory::dims;

// Shared by Gemm and MatMul: one matmul primitive with plain src/dst and optional
// reordered constant weights, plus an optional pre-fill of the destination.
class MatmulKernel : public Kernel {
 public:
  size_t workspace_bytes() const override { return plan_.total(); }
  void set_instances(int n) override {
    prim_.set_instances(n, host_engine(*dev_));
    block_.set_instances(n, host_engine(*dev_));
  }
  Status run(ExecContext& ctx) override;
  std::string impl() const override {
    return prim_.impl() + (gelu_ ? " + gelu avx512" : "") + (block_.valid() ? " + row blocks" : "");
  }

  // Builds the primitive. `src`/`wei` describe A and B as stored (plain or strided).
  void build(const KernelArgs& a, const dnnl::memory::desc& src, const dnnl::memory::desc& wei,
             const dnnl::memory::desc* bias, const dnnl::memory::desc& dst, const dnnl::post_ops& ops);
  // The primitive over a block of the `total` rows of a folded [total, K] x [K, N] product
  // (rows=1) with post-ops `ops`; none when blocks would not pay or oneDNN has only its
  // reference kernel for one on the whole product's weights.
  void build_block(const KernelArgs& a, int64_t total, int64_t K, int64_t N, const dnnl::memory::desc* bias,
                   const dnnl::post_ops& ops);
  // Rows [0, used) only (used < the whole), by block_ primitive runs.
  void run_blocks(ExecContext& ctx, int64_t used);

  const Device* dev_ = nullptr;
  const TensorInfo* a_ = nullptr;
  const TensorInfo* b_ = nullptr;
  const TensorInfo* bias_ = nullptr;
  const TensorInfo* y_ = nullptr;
  const TensorInfo* residual_ = nullptr;
  // Pre-fill of Gemm's general path: y = beta * broadcast(C) (+ residual).
  const TensorInfo* c_ = nullptr;
  float beta_ = 0.f;
  int64_t m_ = 0, n_ = 0, c_rows_ = 0, c_cols_ = 0;
  bool gelu_ = false;  // GELU (erf) over the output after the primitive
  const TensorInfo* mul_ = nullptr;  // the multiplier (mul=1)
  bool mul_loop_ = false;            // multiplied by run() instead of by a post-op
  int64_t mul_width_ = 0;            // 1: one factor a row (a [.., rows, 1] multiplier); else 0
  int mul_index_ = 0;                // its post-op's index
  dnnl::memory::desc mul_md_;
  Prim prim_;
  std::shared_ptr<const AlignedBuffer> weights_;  // constant B in oneDNN's layout (shared)
  dnnl::memory::desc wei_md_;                     // B as prim_ reads it
  Ref wei_ref_;
  // rows=1: the count, rows of the fold per counted row, all rows of the fold, rows a run
  // of block_ covers, and A's and Y's row strides (elements)
  const TensorInfo* count_ = nullptr;
  int64_t unit_ = 1, total_ = 0, block_rows_ = 0, lda_ = 0, ldy_ = 0;
  Prim block_;
  WorkspacePlan plan_;
};

// y *= m elementwise (n floats), or with `width` (N) > 0 each row of N floats by its one
// factor m[row] (a mixture's routing weight, [rows, 1]).
void multiply(float* y, const float* m, int64_t n, int64_t width = 0) {
  if (width > 0) {
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 15))
    for (int64_t r = 0; r < n / width; ++r) {
      for (int64_t j = 0; j < width; ++j) y[r * width + j] *= m[r];
    }
    return;
  }
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 15))
  for (int64_t i = 0; i < n; ++i) y[i] *= m[i];
}

void MatmulKernel::build(const KernelArgs& a, const dnnl::memory::desc& src, const dnnl::memory::desc& wei,
                         const dnnl::memory::desc* bias, const dnnl::memory::desc& dst,
                         const dnnl::post_ops& ops) {
  dev_ = a.device;
  const dnnl::engine& eng = host_engine(*dev_);
  dnnl::primitive_attr attr = make_attr(ops);
  dnnl::memory::desc wei_req = wei;
  if (b_->constant()) wei_req = dnnl::memory::desc(wei.get_dims(), dt::f32, tag::any);
  dnnl::matmul::primitive_desc pd = bias ? dnnl::matmul::primitive_desc(eng, src, wei_req, *bias, dst, attr)
                                         : dnnl::matmul::primitive_desc(eng, src, wei_req, dst, attr);
  prim_ = Prim(pd);
  Ref wref = Ref::of(*b_);
  if (pd.weights_desc() != wei) {
    weights_ = reorder_constant(a, wei, b_->data, pd.weights_desc());
    wref = Ref::buffer(weights_->data());
  }
  wei_md_ = pd.weights_desc();
  wei_ref_ = wref;
  prim_.arg(DNNL_ARG_SRC, src, Ref::of(*a_));
  prim_.arg(DNNL_ARG_WEIGHTS, pd.weights_desc(), wref);
  if (bias) prim_.arg(DNNL_ARG_BIAS, *bias, Ref::of(*bias_));
  prim_.arg(DNNL_ARG_DST, dst, Ref::of(*y_));
  if (mul_ && !mul_loop_) prim_.arg(DNNL_ARG_ATTR_MULTIPLE_POST_OP(mul_index_) | DNNL_ARG_SRC_1, mul_md_, Ref::of(*mul_));
  Prim::share_scratchpad(&plan_, {&prim_});
}

// Blocks of an eighth of the rows (at least 16, whole counted rows): a few runs of a
// primitive of that size cost little more than one, and a count of a quarter of the rows
// (top-2 of 8 experts) then runs a quarter of the work.
void MatmulKernel::build_block(const KernelArgs& a, int64_t total, int64_t K, int64_t N,
                               const dnnl::memory::desc* bias, const dnnl::post_ops& ops) {
  const int64_t want = std::max<int64_t>(16, total / 8);
  const int64_t block = (want + unit_ - 1) / unit_ * unit_;
  if (2 * block > total || !prim_.valid()) return;
  const dnnl::memory::desc src(dims{block, K}, dt::f32, dims{K, 1});
  const dnnl::memory::desc dst(dims{block, N}, dt::f32, dims{N, 1});
  const dnnl::primitive_attr attr = make_attr(ops);
  const dnnl::engine& eng = host_engine(*dev_);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = bias ? dnnl::matmul::primitive_desc(eng, src, wei_md_, *bias, dst, attr)
              : dnnl::matmul::primitive_desc(eng, src, wei_md_, dst, attr);
  } catch (const dnnl::error&) {
    return;  // no kernel for this block on the whole one's weights: the whole one runs
  }
  if (std::string(pd.impl_info_str()).find("ref") != std::string::npos) return;
  block_ = Prim(pd);
  block_.arg(DNNL_ARG_SRC, src, Ref::of(*a_));
  block_.arg(DNNL_ARG_WEIGHTS, wei_md_, wei_ref_);
  if (bias) block_.arg(DNNL_ARG_BIAS, *bias, Ref::of(*bias_));
  block_.arg(DNNL_ARG_DST, dst, Ref::of(*y_));
  Prim::share_scratchpad(&plan_, {&block_});  // a slot of its own (prim_ has one already)
  total_ = total;
  block_rows_ = block;
  lda_ = K;
  ldy_ = N;
}

void MatmulKernel::run_blocks(ExecContext& ctx, int64_t used) {
  const int64_t runs = (used + block_rows_ - 1) / block_rows_;
  const int64_t rows = runs * block_rows_;
  float* y = ctx.ptr<float>(*y_);
  if (residual_) {
    const uint8_t* r = ctx.ptr(*residual_);
    if (r != reinterpret_cast<uint8_t*>(y)) std::memmove(y, r, static_cast<size_t>(rows * ldy_) * sizeof(float));
  }
  for (int64_t i = 0; i < runs; ++i) {
    const ptrdiff_t at_a = static_cast<ptrdiff_t>(i * block_rows_ * lda_ * 4);
    const ptrdiff_t at_y = static_cast<ptrdiff_t>(i * block_rows_ * ldy_ * 4);
    block_.execute(ctx, {{DNNL_ARG_SRC, at_a}, {DNNL_ARG_DST, at_y}});
  }
  if (gelu_) gelu::erf_form(y, y, rows * ldy_, omp_get_max_threads());
  if (mul_loop_) multiply(y, ctx.ptr<const float>(*mul_), rows * ldy_, mul_width_ ? ldy_ : 0);
}

// Another kernel (the GEMV) and then the multiplier.
class MulAfter : public Kernel {
 public:
  MulAfter(std::unique_ptr<Kernel> inner, const TensorInfo* y, const TensorInfo* m, bool per_row)
      : inner_(std::move(inner)), y_(y), m_(m), width_(per_row ? y->shape.back() : 0) {}
  size_t workspace_bytes() const override { return inner_->workspace_bytes(); }
  void set_instances(int n) override { inner_->set_instances(n); }
  std::string impl() const override { return inner_->impl() + " + mul"; }
  Status run(ExecContext& ctx) override {
    Status st = inner_->run(ctx);
    if (!st.ok()) return st;
    multiply(ctx.ptr<float>(*y_), ctx.ptr<const float>(*m_), y_->numel, width_);
    return st;
  }

 private:
  std::unique_ptr<Kernel> inner_;
  const TensorInfo* y_;
  const TensorInfo* m_;
  int64_t width_;  // > 0: one factor a row of this many outputs
};

Status MatmulKernel::run(ExecContext& ctx) {
  if (block_.valid()) {
    // the count comes from the graph's data: bounded by the rows there are
    const int64_t n = std::clamp<int64_t>(*ctx.ptr<const int64_t>(*count_), 0, total_ / unit_);
    if ((n * unit_ + block_rows_ - 1) / block_rows_ * block_rows_ < total_) {
      run_blocks(ctx, n * unit_);
      return Status::Ok();
    }
  }
  float* y = ctx.ptr<float>(*y_);
  if (c_) {
    const float* c = ctx.ptr<const float>(*c_);
    const float* r = residual_ ? ctx.ptr<const float>(*residual_) : nullptr;
    for (int64_t i = 0; i < m_; ++i) {
      const float* crow = c + (c_rows_ == 1 ? 0 : i) * c_cols_;
      for (int64_t j = 0; j < n_; ++j) {
        float v = beta_ * crow[c_cols_ == 1 ? 0 : j];
        y[i * n_ + j] = r ? v + r[i * n_ + j] : v;
      }
    }
  } else if (residual_) {
    const uint8_t* r = ctx.ptr(*residual_);
    if (r != reinterpret_cast<uint8_t*>(y)) std::memmove(y, r, y_->nbytes);
  }
  prim_.execute(ctx);
  if (gelu_) gelu::erf_form(y, y, y_->numel, omp_get_max_threads());
  if (mul_loop_) multiply(y, ctx.ptr<const float>(*mul_), y_->numel, mul_width_ ? y_->shape.back() : 0);
  return Status::Ok();
}

// The activation's post-op, unless it is a GELU (erf) that run() applies itself.
void append_or_take_activation(const Fusion& f, MatmulKernel* k, dnnl::post_ops* ops) {
  if (f.activation && f.alg == dnnl::algorithm::eltwise_gelu_erf && !f.linear && cpu_has_avx512()) {
    k->gelu_ = true;
  } else {
    append_activation(f, ops);
  }
}

// Splits off the last input when `on` (the residual of sum=1, the multiplier of mul=1) and
// checks it: float32, the output's shape.
const TensorInfo* take_last(const KernelArgs& a, bool on, const char* flag, const char* what, size_t* n_in) {
  if (!on) return nullptr;
  if (*n_in < 3) invalid(flag, " needs a ", what, " as the last input");
  const TensorInfo* r = &a.in(*n_in - 1);
  --*n_in;
  a.expect_dtype(*r, DType::kFloat32, what);
  if (r->shape != a.out(0).shape) {
    invalid(what, " shape ", shape_str(r->shape), " does not match output ", shape_str(a.out(0).shape));
  }
  return r;
}

const TensorInfo* take_residual(const KernelArgs& a, const Fusion& f, size_t* n_in) {
  return take_last(a, f.sum, "sum=1", "residual", n_in);
}

std::unique_ptr<Kernel> build_gemm(const KernelArgs& a) {
  auto k = std::make_unique<MatmulKernel>();
  a.expect_outputs(1, 1);
  const Fusion fusion = parse_fusion(a);
  size_t n_in = a.inputs.size();
  k->residual_ = take_residual(a, fusion, &n_in);
  if (n_in < 2 || n_in > 3) invalid("expected 2 or 3 inputs (A, B, optional C), got ", n_in);
  k->a_ = &a.in(0);
  k->b_ = &a.in(1);
  const TensorInfo* c = n_in == 3 ? a.opt_in(2) : nullptr;
  k->y_ = &a.out(0);
  for (const TensorInfo* t : {k->a_, k->b_, c, k->y_}) {
    if (t) a.expect_dtype(*t, DType::kFloat32, "tensor");
  }
  const Shape& as = k->a_->shape;
  const Shape& bs = k->b_->shape;
  if (as.size() != 2 || bs.size() != 2) {
    invalid("A and B must be 2-D, got ", shape_str(as), " and ", shape_str(bs));
  }
  const bool ta = a.attr_int("transA", 0) != 0, tb = a.attr_int("transB", 0) != 0;
  const double alpha = a.attr_float("alpha", 1.0), beta = a.attr_float("beta", 1.0);
  const int64_t M = ta ? as[1] : as[0], K = ta ? as[0] : as[1];
  const int64_t KB = tb ? bs[1] : bs[0], N = tb ? bs[0] : bs[1];
  if (K != KB) {
    invalid("inner dimensions differ: A ", shape_str(as), (ta ? " (transposed)" : ""), " and B ",
            shape_str(bs), (tb ? " (transposed)" : ""));
  }
  if (k->y_->shape != Shape{M, N}) {
    invalid("output shape ", shape_str(k->y_->shape), " does not match computed [", M, ",", N, "]");
  }
  int64_t cr = 1, cc = 1;
  if (c) {
    const Shape& cs = c->shape;
    if (cs.size() > 2) invalid("C shape ", shape_str(cs), " cannot broadcast to [", M, ",", N, "]");
    if (cs.size() >= 1) cc = cs.back();
    if (cs.size() == 2) cr = cs[0];
    if ((cr != 1 && cr != M) || (cc != 1 && cc != N)) {
      invalid("C shape ", shape_str(cs), " cannot broadcast to [", M, ",", N, "]");
    }
  }
  // A as stored is [M,K] or [K,M]; describe it as logical [M,K] with strides.
  dnnl::memory::desc src(dims{M, K}, dt::f32, ta ? dims{1, M} : dims{K, 1});
  dnnl::memory::desc wei(dims{K, N}, dt::f32, tb ? dims{1, K} : dims{N, 1});
  dnnl::memory::desc dst = plain_md(k->y_->shape);
  dnnl::post_ops ops;
  const bool use_bias = c && alpha == 1.0 && beta == 1.0;
  dnnl::memory::desc bias_md;
  if (use_bias) {
    k->bias_ = c;
    bias_md = dnnl::memory::desc(dims{cr, cc}, dt::f32, dims{cc, 1});
  } else {
    if (alpha != 1.0) ops.append_eltwise(dnnl::algorithm::eltwise_linear, static_cast<float>(alpha), 0.f);
    if (c && beta != 0.0) {
      k->c_ = c;
      k->beta_ = static_cast<float>(beta);
      k->m_ = M;
      k->n_ = N;
      k->c_rows_ = cr;
      k->c_cols_ = cc;
    }
  }
  if (!ta && alpha == 1.0 && (!c || (use_bias && cr == 1 && cc == N))) {
    GemvSpec g{k->a_, k->b_, tb, use_bias ? c : nullptr, k->residual_, k->y_, M, K, N};
    if (auto gemv = make_gemv(a, g, fusion)) return gemv;
  }
  if (k->c_ || k->residual_) ops.append_sum(1.f);
  append_or_take_activation(fusion, k.get(), &ops);
  k->build(a, src, wei, use_bias ? &bias_md : nullptr, dst, ops);
  return k;
}

std::unique_ptr<Kernel> build_matmul(const KernelArgs& a) {
  auto k = std::make_unique<MatmulKernel>();
  a.expect_outputs(1, 1);
  const Fusion fusion = parse_fusion(a);
  size_t n_in = a.inputs.size();
  if (a.attr_int("rows", 0) != 0) {  // the routed rows' count, last of all
    if (n_in < 3) invalid("rows=1 needs the row count as the last input");
    k->count_ = &a.in(--n_in);
    a.expect_dtype(*k->count_, DType::kInt64, "row count");
    if (k->count_->numel != 1) invalid("the row count must have one element, got ", shape_str(k->count_->shape));
    k->unit_ = a.attr_int("rows_unit", 1);
  }
  if (a.attr_int("mul", 0) != 0 && n_in >= 3 && !a.out(0).shape.empty() && a.out(0).shape.back() > 1) {
    // one factor a row: [.., rows, 1] (a mixture's routing weight), multiplied by a loop
    Shape per_row = a.out(0).shape;
    per_row.back() = 1;
    if (a.in(n_in - 1).shape == per_row) {
      k->mul_ = &a.in(--n_in);
      a.expect_dtype(*k->mul_, DType::kFloat32, "multiplier");
      k->mul_width_ = 1;
    }
  }
  if (!k->mul_) k->mul_ = take_last(a, a.attr_int("mul", 0) != 0, "mul=1", "multiplier", &n_in);
  k->residual_ = take_residual(a, fusion, &n_in);
  const bool has_bias = a.attr_int("has_bias", 0) != 0;
  const size_t want = has_bias ? 3 : 2;
  if (n_in != want) invalid("expected ", want, " inputs (A, B", has_bias ? ", bias" : "", "), got ", n_in);
  k->a_ = &a.in(0);
  k->b_ = &a.in(1);
  k->y_ = &a.out(0);
  a.expect_dtype(*k->a_, DType::kFloat32, "input A");
  a.expect_dtype(*k->b_, DType::kFloat32, "input B");
  a.expect_dtype(*k->y_, DType::kFloat32, "output Y");
  const Shape& as = k->a_->shape;
  const Shape& bs = k->b_->shape;
  if (as.empty() || bs.empty()) invalid("MatMul inputs must have rank >= 1, got ", shape_str(as), " and ", shape_str(bs));
  Shape a2 = as.size() == 1 ? Shape{1, as[0]} : as;
  Shape b2 = bs.size() == 1 ? Shape{bs[0], 1} : bs;
  const int64_t M = a2[a2.size() - 2], K = a2.back(), KB = b2[b2.size() - 2], N = b2.back();
  if (K != KB) invalid("inner dimensions differ: A ", shape_str(as), " and B ", shape_str(bs));
  Shape ba(a2.begin(), a2.end() - 2), bb(b2.begin(), b2.end() - 2), bo;
  if (!broadcast_shapes(ba, bb, &bo)) {
    invalid("batch dimensions of A ", shape_str(as), " and B ", shape_str(bs), " do not broadcast");
  }
  Shape expect = bo;
  if (as.size() > 1) expect.push_back(M);
  if (bs.size() > 1) expect.push_back(N);
  if (k->y_->shape != expect) {
    invalid("output shape ", shape_str(k->y_->shape), " does not match computed ", shape_str(expect));
  }
  if (bo.size() + 2 > DNNL_MAX_NDIMS) invalid("rank too large");

  dims sd, wd, dd;
  const bool folded = bb.empty() || shape_numel(bb) == 1;
  if (folded) {
    // B has no (real) batch: fold every batch dim of A into M for one large GEMM.
    const int64_t rows = shape_numel(ba) * M;
    sd = {rows, K};
    wd = {K, N};
    dd = {rows, N};
  } else {
    const size_t nd = bo.size() + 2;
    auto pad = [&](const Shape& batch, int64_t r, int64_t c) {
      dims d(nd - 2 - batch.size(), 1);
      d.insert(d.end(), batch.begin(), batch.end());
      d.push_back(r);
      d.push_back(c);
      return d;
    };
    sd = pad(ba, M, K);
    wd = pad(bb, K, N);
    dd = pad(bo, M, N);
  }
  auto dense = [](const dims& d) { return dnnl::memory::desc(d, dt::f32, dims(dense_strides(d))); };
  dnnl::memory::desc bias_md;
  if (has_bias) {
    k->bias_ = &a.in(2);
    a.expect_dtype(*k->bias_, DType::kFloat32, "bias");
    if (k->bias_->numel != N || (k->bias_->rank() > 0 && k->bias_->shape.back() != N)) {
      invalid("bias shape ", shape_str(k->bias_->shape), " must be [", N, "]");
    }
    dims bd(dd.size(), 1);
    bd.back() = N;
    bias_md = dense(bd);
  }
  if (bs.size() == 2 && bb.empty()) {  // B is a [K,N] matrix: A's rows are independent
    GemvSpec g{k->a_, k->b_, false, k->bias_, k->residual_, k->y_, shape_numel(ba) * M, K, N};
    if (k->count_ && k->unit_ >= 1 && g.rows % k->unit_ == 0) {
      g.count = k->count_;
      g.unit = k->unit_;
    }
    if (auto gemv = make_gemv(a, g, fusion)) {
      if (k->mul_) return std::make_unique<MulAfter>(std::move(gemv), k->y_, k->mul_, k->mul_width_ != 0);
      return gemv;
    }
  }
  dnnl::post_ops ops;
  if (k->residual_) ops.append_sum(1.f);
  append_or_take_activation(fusion, k.get(), &ops);
  const dnnl::post_ops base = ops;
  // multiplied after the primitive where the GELU runs there, and for routed rows (the
  // blocks' weights are the whole product's: with a multiplier post-op oneDNN 3.2 laid them
  // out so that it had only its reference kernel for a block)
  k->mul_loop_ = k->mul_ && (k->gelu_ || k->count_ || k->mul_width_);
  if (k->mul_ && !k->mul_loop_) {
    k->mul_index_ = ops.len();
    k->mul_md_ = dense(dd);
    ops.append_binary(dnnl::algorithm::binary_mul, k->mul_md_);
  }
  k->build(a, dense(sd), dense(wd), has_bias ? &bias_md : nullptr, dense(dd), ops);
  if (k->mul_ && !k->mul_loop_ && k->impl().find(" ref") != std::string::npos) {
    k->mul_loop_ = true;  // no fast matmul with this post-op: multiply by a loop
    k->build(a, dense(sd), dense(wd), has_bias ? &bias_md : nullptr, dense(dd), base);
  }
  const int64_t total = sd[0];
  if (k->count_ && folded && k->unit_ >= 1 && total % k->unit_ == 0 && as.size() >= 2) {
    k->build_block(a, total, K, N, has_bias ? &bias_md : nullptr, base);
  }
  return k;
}

}  // namespace

std::unique_ptr<Kernel> make_gemm(const KernelArgs& a) { return build_gemm(a); }
std::unique_ptr<Kernel> make_matmul(const KernelArgs& a) { return build_matmul(a); }

}  // namespace ge
