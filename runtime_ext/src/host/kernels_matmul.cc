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
#include <omp.h>

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
  void set_instances(int n) override { prim_.set_instances(n, host_engine(*dev_)); }
  Status run(ExecContext& ctx) override;
  std::string impl() const override { return gelu_ ? prim_.impl() + " + gelu avx512" : prim_.impl(); }

  // Builds the primitive. `src`/`wei` describe A and B as stored (plain or strided).
  void build(const KernelArgs& a, const dnnl::memory::desc& src, const dnnl::memory::desc& wei,
             const dnnl::memory::desc* bias, const dnnl::memory::desc& dst, const dnnl::post_ops& ops);

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
  int mul_index_ = 0;                // its post-op's index
  dnnl::memory::desc mul_md_;
  Prim prim_;
  std::shared_ptr<const AlignedBuffer> weights_;  // constant B in oneDNN's layout (shared)
  WorkspacePlan plan_;
};

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
  prim_.arg(DNNL_ARG_SRC, src, Ref::of(*a_));
  prim_.arg(DNNL_ARG_WEIGHTS, pd.weights_desc(), wref);
  if (bias) prim_.arg(DNNL_ARG_BIAS, *bias, Ref::of(*bias_));
  prim_.arg(DNNL_ARG_DST, dst, Ref::of(*y_));
  if (mul_ && !mul_loop_) prim_.arg(DNNL_ARG_ATTR_MULTIPLE_POST_OP(mul_index_) | DNNL_ARG_SRC_1, mul_md_, Ref::of(*mul_));
  Prim::share_scratchpad(&plan_, {&prim_});
}

// y *= m elementwise (n floats).
void multiply(float* y, const float* m, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 15))
  for (int64_t i = 0; i < n; ++i) y[i] *= m[i];
}

// Another kernel (the GEMV) and then the multiplier.
class MulAfter : public Kernel {
 public:
  MulAfter(std::unique_ptr<Kernel> inner, const TensorInfo* y, const TensorInfo* m)
      : inner_(std::move(inner)), y_(y), m_(m) {}
  size_t workspace_bytes() const override { return inner_->workspace_bytes(); }
  void set_instances(int n) override { inner_->set_instances(n); }
  std::string impl() const override { return inner_->impl() + " + mul"; }
  Status run(ExecContext& ctx) override {
    Status st = inner_->run(ctx);
    if (!st.ok()) return st;
    multiply(ctx.ptr<float>(*y_), ctx.ptr<const float>(*m_), y_->numel);
    return st;
  }

 private:
  std::unique_ptr<Kernel> inner_;
  const TensorInfo* y_;
  const TensorInfo* m_;
};

Status MatmulKernel::run(ExecContext& ctx) {
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
  if (mul_loop_) multiply(y, ctx.ptr<const float>(*mul_), y_->numel);
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
  k->mul_ = take_last(a, a.attr_int("mul", 0) != 0, "mul=1", "multiplier", &n_in);
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
  if (bb.empty() || shape_numel(bb) == 1) {
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
    if (auto gemv = make_gemv(a, g, fusion)) {
      if (k->mul_) return std::make_unique<MulAfter>(std::move(gemv), k->y_, k->mul_);
      return gemv;
    }
  }
  dnnl::post_ops ops;
  if (k->residual_) ops.append_sum(1.f);
  append_or_take_activation(fusion, k.get(), &ops);
  const dnnl::post_ops base = ops;
  k->mul_loop_ = k->mul_ && k->gelu_;  // the GELU runs after the primitive: multiply after it
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
  return k;
}

}  // namespace

std::unique_ptr<Kernel> make_gemm(const KernelArgs& a) { return build_gemm(a); }
std::unique_ptr<Kernel> make_matmul(const KernelArgs& a) { return build_matmul(a); }

}  // namespace ge
