// FusedAttention: the attention core of a transformer layer, fused by the compiler
// (engine/optimize/fusion_attention.py) from MatMul, scale, mask Add, Softmax, MatMul and
// the Transposes around them.
//
// Inputs Q, K, V (float32, rank 4) are read as stored. The attributes q_perm, k_perm,
// v_perm and out_perm are the Transposes the compiler absorbed (identity when none):
//   Q' = transpose(Q, q_perm)   [B,H,Sq,D]
//   K' = transpose(K, k_perm)   [B,H,D,Sk]   (already the right-hand side of Q'K')
//   V' = transpose(V, v_perm)   [B,H,Sk,Dv]
//   Y  = transpose(softmax(scale * Q'K' + mask) V', out_perm)
// The optional mask (input 3, float32, rank <= 4) broadcasts to [B,H,Sq,Sk]; it is added
// after the scale, and the softmax runs along Sk.
//
// Grouped-query attention: K' and V' may have Hkv heads where Q' has H = G * Hkv; query head
// h reads key/value head h / G (the repeat_kv the compiler absorbed: Unsqueeze, Expand,
// Reshape, and the Transposes before them). The kernel then copies K and V into its
// workspace with each head repeated G times, in their stored layout (a memcpy per row of
// the axes after the head axis), and runs the matmuls as for H heads: oneDNN's brgemm
// matmul does not take a K broadcast over the groups: a 5-D [B,Hkv,G,Sq,D] x [B,Hkv,1,D,Sk]
// product runs on oneDNN's gemm:jit, 1.5-2x slower than brgemm on the repeated [B,H] one
// (hf_mistral at batch 8, per-call medians over two runs each, loaded machine: scores
// 0.047-0.066 vs 0.028-0.048 ms, context 0.032-0.049 vs 0.023-0.035 ms).
//
// Two oneDNN matmuls and a softmax, no copies: a matmul reading Q and K through strided
// descriptors (a transpose is only other strides) with the scale as an eltwise post-op and
// the mask as a binary post-op; an in-place softmax over the scores (softmax.h's rows, 2x
// oneDNN's primitive here; the primitive without AVX-512); a matmul reading V strided and
// writing Y directly in its own layout. The scores live in the kernel's
// workspace. Where oneDNN would pick its slow reference matmul (some mask broadcasts such
// as [1,1,Sq,Sk], operands whose innermost logical dim is not contiguous) the mask is
// added by a loop instead, and such operands are first copied dense by a reorder.
#include <array>
#include <cmath>
#include <cstring>
#include <string>

#include <immintrin.h>
#include <omp.h>

#include "broadcast.h"
#include "dnnl_util.h"
#include "kernels.h"
#include "softmax.h"

namespace ge {

namespace {

using dims = dnnl::memory::dims;

// Scores [B,H,Sq,Sk] are one float buffer in the workspace; bound it (64 GiB) so that a
// graph cannot make load ask for absurd scratch.
constexpr int64_t kMaxScores = int64_t{1} << 34;

using Perm = std::array<int64_t, 4>;

std::string perm_str(const std::vector<int64_t>& p) {
  std::string s = "[";
  for (size_t i = 0; i < p.size(); ++i) s += cat(i ? "," : "", p[i]);
  return s + "]";
}

Perm perm_attr(const KernelArgs& a, const char* key) {
  const std::vector<int64_t> p = a.attr_ints(key, {0, 1, 2, 3});
  if (p.size() != 4) invalid("attribute '", key, "' must list 4 axes, got ", perm_str(p));
  Perm r{};
  bool seen[4] = {};
  for (size_t i = 0; i < 4; ++i) {
    if (p[i] < 0 || p[i] > 3 || seen[p[i]]) invalid("attribute '", key, "' must be a permutation of 0..3, got ", perm_str(p));
    seen[p[i]] = true;
    r[i] = p[i];
  }
  return r;
}

// A rank-4 tensor seen through a permutation: logical dim i is stored dim perm[i].
struct View {
  dims d = dims(4), strides = dims(4);
  dnnl::memory::desc md() const { return dnnl::memory::desc(d, dt::f32, strides); }
  bool dense() const { return strides == dims(dense_strides(Shape(d.begin(), d.end()))); }
};

View view_of(const Shape& shape, const Perm& perm) {
  const Shape st = dense_strides(shape);
  View v;
  for (size_t i = 0; i < 4; ++i) {
    v.d[i] = shape[static_cast<size_t>(perm[i])];
    v.strides[i] = st[static_cast<size_t>(perm[i])];
  }
  return v;
}

View view_of(const TensorInfo& t, const Perm& perm) { return view_of(t.shape, perm); }

// A key or value tensor with its head axis repeated G times: copied by rows of `inner`
// floats (the axes after the head axis), `outer` times (the axes before it).
struct Repeat {
  int64_t outer = 0, heads = 0, inner = 0, group = 1;
  size_t at = 0;  // the repeated copy in the workspace
  View view;      // the copy seen through the operand's perm, with H heads
  bool active() const { return group > 1; }
};

Repeat plan_repeat(const TensorInfo& t, const Perm& perm, int64_t group, WorkspacePlan* plan) {
  Repeat r;
  r.group = group;
  const size_t axis = static_cast<size_t>(perm[1]);  // the stored head axis
  Shape rep = t.shape;
  rep[axis] *= group;
  r.outer = shape_numel(Shape(t.shape.begin(), t.shape.begin() + static_cast<std::ptrdiff_t>(axis)));
  r.heads = t.shape[axis];
  r.inner = shape_numel(Shape(t.shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, t.shape.end()));
  r.view = view_of(rep, perm);
  r.at = plan->add(static_cast<size_t>(shape_numel(rep)) * sizeof(float));
  return r;
}

void run_repeat(const Repeat& r, const float* src, float* dst) {
  const int64_t rows = r.outer * r.heads;
  const size_t bytes = static_cast<size_t>(r.inner) * sizeof(float);
#pragma omp parallel for schedule(static) if (rows * r.group * r.inner > (int64_t{1} << 15))
  for (int64_t i = 0; i < rows; ++i) {
    const float* s = src + i * r.inner;
    float* d = dst + i * r.group * r.inner;  // row (o, j) goes to rows (o, j*G + g)
    for (int64_t g = 0; g < r.group; ++g) std::memcpy(d + g * r.inner, s, bytes);
  }
}

std::string dims_str(const dims& d) { return shape_str(Shape(d.begin(), d.end())); }

struct Geometry {
  int64_t B = 0, H = 0, Sq = 0, Sk = 0, D = 0, Dv = 0;
  int64_t G = 1;  // query heads per key/value head (grouped-query attention)
  Perm k_perm{}, v_perm{};
  View q, k, v;
  Perm out_perm{};
  Shape y;  // Y's shape: [B,H,Sq,Dv] transposed by out_perm
  const TensorInfo* mask = nullptr;
  float scale = 1.f;
};

// Checks the inputs and attributes (not the output) and derives the shapes.
Geometry geometry(const KernelArgs& a) {
  a.expect_inputs(3, 4);
  const char* names[] = {"Q", "K", "V", "mask"};
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const TensorInfo* t = i < 3 ? &a.in(i) : a.opt_in(i);
    if (!t) continue;
    a.expect_dtype(*t, DType::kFloat32, names[i]);
    if (!t->plain()) invalid(names[i], " '", t->name, "' must be stored plain, not ", format_name(t->format));
    if (i < 3 && t->rank() != 4) invalid(names[i], " must have rank 4, got ", shape_str(t->shape));
  }
  Geometry g;
  if (!a.has_attr("scale")) invalid("attribute 'scale' is required");
  const double scale = a.attr_float("scale", 1.0);
  if (!std::isfinite(scale) || std::fabs(scale) > 3.4e38) invalid("attribute 'scale' must be a finite float32, got ", scale);
  g.scale = static_cast<float>(scale);
  g.q = view_of(a.in(0), perm_attr(a, "q_perm"));
  g.k_perm = perm_attr(a, "k_perm");
  g.v_perm = perm_attr(a, "v_perm");
  g.k = view_of(a.in(1), g.k_perm);
  g.v = view_of(a.in(2), g.v_perm);
  g.out_perm = perm_attr(a, "out_perm");
  g.B = g.q.d[0];
  g.H = g.q.d[1];
  g.Sq = g.q.d[2];
  g.D = g.q.d[3];
  g.Sk = g.k.d[3];
  g.Dv = g.v.d[3];
  const int64_t hkv = g.k.d[1];
  if (g.k.d[0] != g.B || hkv < 1 || g.H % hkv != 0 || g.k.d[2] != g.D) {
    invalid("K seen through k_perm is ", dims_str(g.k.d), " but Q seen through q_perm is ", dims_str(g.q.d),
            ": K must be [B,Hkv,D,Sk] = [", g.B, ",Hkv,", g.D, ",Sk] with Hkv dividing H = ", g.H);
  }
  if (g.v.d[0] != g.B || g.v.d[1] != hkv || g.v.d[2] != g.Sk) {
    invalid("V seen through v_perm is ", dims_str(g.v.d), " but must be [B,Hkv,Sk,Dv] = [", g.B, ",", hkv, ",", g.Sk,
            ",Dv]");
  }
  g.G = g.H / hkv;
  for (int64_t d : {g.B, g.H, g.Sq, g.Sk, g.D, g.Dv}) {
    if (d == 0) invalid("empty tensors are not supported (Q ", dims_str(g.q.d), ", K ", dims_str(g.k.d), ")");
  }
  const int64_t scores = mul_checked(mul_checked(g.B, g.H), mul_checked(g.Sq, g.Sk));
  if (scores > kMaxScores) invalid("the attention scores [", g.B, ",", g.H, ",", g.Sq, ",", g.Sk, "] are too large");
  g.mask = a.opt_in(3);
  if (g.mask) {
    const Shape full = {g.B, g.H, g.Sq, g.Sk};
    const Shape& ms = g.mask->shape;
    bool ok = ms.size() <= 4;
    for (size_t i = 0; ok && i < ms.size(); ++i) {
      const int64_t want = full[4 - ms.size() + i];
      ok = ms[i] == 1 || ms[i] == want;
    }
    if (!ok) invalid("mask shape ", shape_str(ms), " does not broadcast to the scores ", shape_str(full));
  }
  const Shape o = {g.B, g.H, g.Sq, g.Dv};
  g.y.resize(4);
  for (size_t i = 0; i < 4; ++i) g.y[i] = o[static_cast<size_t>(g.out_perm[i])];
  return g;
}

bool is_reference(const dnnl::matmul::primitive_desc& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

class AttentionKernel : public Kernel {
 public:
  explicit AttentionKernel(const KernelArgs& a);
  size_t workspace_bytes() const override { return plan_.total(); }
  void set_instances(int n) override {
    for (Prim* p : {&copy_[0], &copy_[1], &copy_[2], &scores_, &softmax_, &context_, &copy_out_}) {
      p->set_instances(n, host_engine(dev_));
    }
  }
  Status run(ExecContext& ctx) override;

 private:
  // Where an operand is read from: the tensor through its strided view, or (when oneDNN
  // has no fast matmul for those strides) a dense copy in the workspace.
  struct Operand {
    dnnl::memory::desc md;
    Ref ref;
  };
  Operand dense_copy(int which, const View& v, Ref from);

  const Device& dev_;
  Prim copy_[3];  // Q, K, V made dense first (only for unusual strides)
  Prim scores_, softmax_, context_;
  Prim copy_out_;  // the context written dense, then into Y (only for unusual strides)
  Repeat repeat_[2];  // K and V with their heads repeated (grouped-query attention)
  const TensorInfo* kv_[2] = {nullptr, nullptr};
  const TensorInfo* mask_loop_ = nullptr;  // the mask, when run() adds it by a loop
  BroadcastPlan mask_plan_;
  size_t scores_at_ = 0;
  int64_t rows_ = 0, row_len_ = 0;  // of the scores, for the softmax
  bool nan_to_zero_ = false;  // a NaN probability becomes 0 (a row that sees no key)
  WorkspacePlan plan_;
};

AttentionKernel::Operand AttentionKernel::dense_copy(int which, const View& v, Ref from) {
  const dnnl::memory::desc to(v.d, dt::f32, dnnl::memory::format_tag::abcd);
  const size_t at = plan_.add(to.get_size());
  copy_[which] = Prim(dnnl::reorder::primitive_desc(host_engine(dev_), v.md(), host_engine(dev_), to, make_attr()));
  copy_[which].arg(DNNL_ARG_FROM, v.md(), from);
  copy_[which].arg(DNNL_ARG_TO, to, Ref::workspace(at));
  return {to, Ref::workspace(at)};
}

AttentionKernel::AttentionKernel(const KernelArgs& a) : dev_(*a.device) {
  const Geometry g = geometry(a);
  a.expect_outputs(1, 1);
  const TensorInfo& y = a.out(0);
  a.expect_dtype(y, DType::kFloat32, "output Y");
  if (!y.plain()) invalid("output Y '", y.name, "' must be stored plain, not ", format_name(y.format));
  if (y.shape != g.y) invalid("output shape ", shape_str(y.shape), " does not match computed ", shape_str(g.y));
  const dnnl::engine& eng = host_engine(dev_);

  const dnnl::memory::desc scores_md(dims{g.B, g.H, g.Sq, g.Sk}, dt::f32, dnnl::memory::format_tag::abcd);
  scores_at_ = plan_.add(scores_md.get_size());
  const Ref scores = Ref::workspace(scores_at_);

  // Grouped-query attention: K and V are read from their repeated copies.
  View kview = g.k, vview = g.v;
  Ref kref = Ref::of(a.in(1)), vref = Ref::of(a.in(2));
  if (g.G > 1) {
    kv_[0] = &a.in(1);
    kv_[1] = &a.in(2);
    repeat_[0] = plan_repeat(a.in(1), g.k_perm, g.G, &plan_);
    repeat_[1] = plan_repeat(a.in(2), g.v_perm, g.G, &plan_);
    kview = repeat_[0].view;
    vview = repeat_[1].view;
    kref = Ref::workspace(repeat_[0].at);
    vref = Ref::workspace(repeat_[1].at);
  }

  // Scores = scale * Q'K' (+ mask).
  Operand q{g.q.md(), Ref::of(a.in(0))}, k{kview.md(), kref};
  dnnl::memory::desc mask_md;
  if (g.mask) {
    dims md(4, 1);
    const Shape& ms = g.mask->shape;
    for (size_t i = 0; i < ms.size(); ++i) md[4 - ms.size() + i] = ms[i];
    mask_md = dnnl::memory::desc(md, dt::f32, dims(dense_strides(Shape(md.begin(), md.end()))));
  }
  auto scores_pd = [&](bool mask_post_op) {
    dnnl::post_ops ops;
    if (g.scale != 1.f) ops.append_eltwise(dnnl::algorithm::eltwise_linear, g.scale, 0.f);
    if (mask_post_op) ops.append_binary(dnnl::algorithm::binary_add, mask_md);
    return dnnl::matmul::primitive_desc(eng, q.md, k.md, scores_md, make_attr(ops));
  };
  bool mask_post_op = g.mask != nullptr;
  dnnl::matmul::primitive_desc pd1 = scores_pd(mask_post_op);
  if (is_reference(pd1) && mask_post_op) {
    mask_post_op = false;  // this broadcast is not in the fast matmul: add it by a loop
    pd1 = scores_pd(false);
  }
  if (is_reference(pd1)) {
    if (!g.q.dense()) q = dense_copy(0, g.q, Ref::of(a.in(0)));
    if (!kview.dense()) k = dense_copy(1, kview, kref);
    pd1 = scores_pd(false);
  }
  if (g.mask && !mask_post_op) {
    mask_loop_ = g.mask;
    const Shape full = {g.B, g.H, g.Sq, g.Sk};
    mask_plan_ = plan_broadcast(full, {&g.mask->shape}, {"mask"});
  }
  scores_ = Prim(pd1);
  scores_.arg(DNNL_ARG_SRC, q.md, q.ref);
  scores_.arg(DNNL_ARG_WEIGHTS, k.md, k.ref);
  scores_.arg(DNNL_ARG_DST, scores_md, scores);
  if (mask_post_op) scores_.arg(DNNL_ARG_ATTR_MULTIPLE_POST_OP(g.scale != 1.f ? 1 : 0) | DNNL_ARG_SRC_1, mask_md, Ref::of(*g.mask));

  // Softmax along Sk, in place: rows of our own where the CPU runs them (see softmax.h).
  rows_ = g.B * g.H * g.Sq;
  row_len_ = g.Sk;
  const int64_t nan_to_zero = a.attr_int("nan_to_zero", 0);
  if (nan_to_zero != 0 && nan_to_zero != 1) invalid("nan_to_zero ", nan_to_zero, " must be 0 or 1");
  nan_to_zero_ = nan_to_zero == 1;
  if (!cpu_has_avx512()) {
    dnnl::softmax_forward::primitive_desc sp(eng, dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::softmax_accurate, scores_md, scores_md, 3, make_attr());
    softmax_ = Prim(sp);
    softmax_.arg(DNNL_ARG_SRC, scores_md, scores);
    softmax_.arg(DNNL_ARG_DST, scores_md, scores);
  }

  // Y = P V', written through Y's strides as [B,H,Sq,Dv].
  dims ostrides(4);
  const Shape ys = dense_strides(y.shape);
  for (size_t j = 0; j < 4; ++j) ostrides[static_cast<size_t>(g.out_perm[j])] = ys[j];
  const dnnl::memory::desc out_md(dims{g.B, g.H, g.Sq, g.Dv}, dt::f32, ostrides);
  Operand v{vview.md(), vref}, out{out_md, Ref::of(y)};
  dnnl::matmul::primitive_desc pd2(eng, scores_md, v.md, out.md, make_attr());
  if (is_reference(pd2)) {
    if (!vview.dense()) v = dense_copy(2, vview, vref);
    const dnnl::memory::desc dense_out(dims{g.B, g.H, g.Sq, g.Dv}, dt::f32, dnnl::memory::format_tag::abcd);
    if (dense_out != out_md) {
      out = {dense_out, Ref::workspace(plan_.add(dense_out.get_size()))};
      copy_out_ = Prim(dnnl::reorder::primitive_desc(eng, dense_out, eng, out_md, make_attr()));
      copy_out_.arg(DNNL_ARG_FROM, dense_out, out.ref);
      copy_out_.arg(DNNL_ARG_TO, out_md, Ref::of(y));
    }
    pd2 = dnnl::matmul::primitive_desc(eng, scores_md, v.md, out.md, make_attr());
  }
  context_ = Prim(pd2);
  context_.arg(DNNL_ARG_SRC, scores_md, scores);
  context_.arg(DNNL_ARG_WEIGHTS, v.md, v.ref);
  context_.arg(DNNL_ARG_DST, out.md, out.ref);
  Prim::share_scratchpad(&plan_, {&copy_[0], &copy_[1], &copy_[2], &scores_, &softmax_, &context_, &copy_out_});
}

Status AttentionKernel::run(ExecContext& ctx) {
  for (int i = 0; i < 2; ++i) {
    if (repeat_[i].active()) {
      run_repeat(repeat_[i], ctx.ptr<const float>(*kv_[i]), reinterpret_cast<float*>(ctx.workspace + repeat_[i].at));
    }
  }
  for (Prim& c : copy_) {
    if (c.valid()) c.execute(ctx);
  }
  scores_.execute(ctx);
  if (mask_loop_) {
    float* s = reinterpret_cast<float*>(ctx.workspace + scores_at_);
    const float* m = ctx.ptr<const float>(*mask_loop_);
    for_each_segment(mask_plan_, [&](const int64_t* off, int64_t at, int64_t len, const int64_t* step) {
      float* row = s + at;
      const float* mr = m + off[0];
      if (step[0] == 1) {
        for (int64_t i = 0; i < len; ++i) row[i] += mr[i];
      } else if (step[0] == 0) {
        const float mv = *mr;  // broadcast along the row
        for (int64_t i = 0; i < len; ++i) row[i] += mv;
      } else {
        for (int64_t i = 0; i < len; ++i) row[i] += mr[i * step[0]];
      }
    });
  }
  if (softmax_.valid()) {
    softmax_.execute(ctx);
  } else {
    float* s = reinterpret_cast<float*>(ctx.workspace + scores_at_);
    softmax::rows(s, s, rows_, row_len_, row_len_, omp_get_max_threads());
  }
  if (nan_to_zero_) {  // x != x only for NaN; the compiler vectorizes the select
    float* s = reinterpret_cast<float*>(ctx.workspace + scores_at_);
    const int64_t n = rows_ * row_len_;
    const int threads = n <= kSmallOpElements ? 1 : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t i = 0; i < n; ++i) s[i] = s[i] == s[i] ? s[i] : 0.f;
  }
  context_.execute(ctx);
  if (copy_out_.valid()) copy_out_.execute(ctx);
  return Status::Ok();
}

}  // namespace

void check_attention(const KernelArgs& a) { geometry(a); }

std::unique_ptr<Kernel> make_attention(const KernelArgs& a) { return std::make_unique<AttentionKernel>(a); }

namespace {

// Rope: the rotate-half rotary embedding of LLaMA-style decoders, fused by the compiler
// (engine/optimize/fusion/rope.py) from the Slices, Neg, Concat, two Muls and the Add
// exporters write: Y = X * cos + rotate_half(X) * sin, rotate_half(X) = [-X2, X1] for the
// halves X1, X2 of the last axis. cos and sin (float32, the same shape) span the last axis
// and broadcast over the others (positions x heads); each row of X is read once. A partial
// rotary (Phi, GPT-NeoX: attribute rotary_dim r < the last axis d) rotates the first r
// elements of each row with cos/sin spanning r and copies the other d - r, so the Slices
// and the Concat around a Rope of the sliced part cost nothing. With attribute interleaved
// (GPT-J, CodeGen, RoFormer: rotate_every_two) the rotated pairs are neighbours (x[2i],
// x[2i+1]), not the halves: y[2i] = x[2i] c[2i] - x[2i+1] s[2i], y[2i+1] = x[2i+1] c[2i+1] +
// x[2i] s[2i+1]. Rows run in 16-float vectors where the CPU has AVX-512 (the pairs swapped
// in-lane by a permute, the even lanes' products negated by a mask), on the OpenMP team
// when the tensor is large enough to pay for it.
void rope_row(const float* xr, const float* cr, const float* sr, float* yr, int64_t r, bool interleaved) {
  if (interleaved) {
    for (int64_t k = 0; k < r; k += 2) {
      yr[k] = xr[k] * cr[k] - xr[k + 1] * sr[k];
      yr[k + 1] = xr[k + 1] * cr[k + 1] + xr[k] * sr[k + 1];
    }
    return;
  }
  const int64_t h = r / 2;
  for (int64_t k = 0; k < h; ++k) yr[k] = xr[k] * cr[k] - xr[k + h] * sr[k];
  for (int64_t k = h; k < r; ++k) yr[k] = xr[k] * cr[k] + xr[k - h] * sr[k];
}

__attribute__((target("avx512f"))) void rope_row_avx512(const float* xr, const float* cr, const float* sr, float* yr,
                                                       int64_t r, bool interleaved) {
  if (interleaved) {  // r is even: a vector never splits a pair
    for (int64_t k = 0; k < r; k += 16) {
      const __mmask16 m = k + 16 <= r ? __mmask16(0xFFFF) : __mmask16((1u << (r - k)) - 1);
      const __m512 x = _mm512_maskz_loadu_ps(m, xr + k);
      const __m512 swapped = _mm512_permute_ps(x, 0xB1);  // [x1, x0, x3, x2, ...]
      const __m512 turned = _mm512_mask_sub_ps(swapped, __mmask16(0x5555), _mm512_setzero_ps(), swapped);
      const __m512 y = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, cr + k), _mm512_mul_ps(turned, _mm512_maskz_loadu_ps(m, sr + k)));
      _mm512_mask_storeu_ps(yr + k, m, y);
    }
    return;
  }
  const int64_t h = r / 2;
  for (int64_t k = 0; k < h; k += 16) {
    const __mmask16 m = k + 16 <= h ? __mmask16(0xFFFF) : __mmask16((1u << (h - k)) - 1);
    const __m512 lo = _mm512_maskz_loadu_ps(m, xr + k), hi = _mm512_maskz_loadu_ps(m, xr + h + k);
    _mm512_mask_storeu_ps(yr + k, m, _mm512_fmsub_ps(lo, _mm512_maskz_loadu_ps(m, cr + k), _mm512_mul_ps(hi, _mm512_maskz_loadu_ps(m, sr + k))));
    _mm512_mask_storeu_ps(yr + h + k, m, _mm512_fmadd_ps(hi, _mm512_maskz_loadu_ps(m, cr + h + k), _mm512_mul_ps(lo, _mm512_maskz_loadu_ps(m, sr + h + k))));
  }
}

class RopeKernel : public Kernel {
 public:
  explicit RopeKernel(const KernelArgs& a) {
    a.expect_inputs(3, 3);
    a.expect_outputs(1, 1);
    x_ = &a.in(0);
    cos_ = &a.in(1);
    sin_ = &a.in(2);
    y_ = &a.out(0);
    for (const TensorInfo* t : {x_, cos_, sin_, y_}) a.expect_dtype(*t, DType::kFloat32, t->name.c_str());
    if (y_->shape != x_->shape) invalid("output shape ", shape_str(y_->shape), " differs from X ", shape_str(x_->shape));
    if (x_->rank() < 1 || x_->shape.back() % 2) invalid("X ", shape_str(x_->shape), " needs an even last axis");
    if (cos_->shape != sin_->shape) invalid("cos ", shape_str(cos_->shape), " and sin ", shape_str(sin_->shape), " differ");
    d_ = x_->shape.back();
    r_ = a.attr_int("rotary_dim", 0);
    if (r_ == 0) r_ = d_;
    if (r_ < 0 || r_ > d_ || r_ % 2) invalid("rotary_dim ", r_, " must be even and at most X's last axis (", d_, ")");
    const int64_t interleaved = a.attr_int("interleaved", 0);
    if (interleaved != 0 && interleaved != 1) invalid("interleaved ", interleaved, " must be 0 or 1");
    interleaved_ = interleaved == 1;
    if (cos_->rank() < 1 || cos_->shape.back() != r_) invalid("cos ", shape_str(cos_->shape), " must span the rotated part of X's last axis (", r_, ")");
    // The rows of X (its last axis) and where each row's cos/sin row starts: the plan of
    // the broadcast over the leading axes.
    Shape lead_x(x_->shape.begin(), x_->shape.end() - 1), lead_c(cos_->shape.begin(), cos_->shape.end() - 1);
    if (lead_x.empty()) lead_x.push_back(1);
    plan_ = plan_broadcast(lead_x, {&lead_c}, {"cos"});
    avx512_ = cpu_has_avx512();
  }

  Status run(ExecContext& ctx) override {
    const float* x = ctx.ptr<const float>(*x_);
    const float* c = ctx.ptr<const float>(*cos_);
    const float* s = ctx.ptr<const float>(*sin_);
    float* y = ctx.ptr<float>(*y_);
    const int64_t d = d_, r = r_, rows = plan_.numel, inner = plan_.inner(), last = plan_.rank - 1;
    const int threads = rows * d <= kSmallOpElements ? 1 : std::min<int>(omp_get_max_threads(), static_cast<int>(std::min<int64_t>(rows, 1 << 20)));
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t e = 0; e < rows; ++e) {  // row e of X; its cos/sin row from the plan
      int64_t rest = e / inner, off = (e % inner) * plan_.strides[0][last];
      for (int k = last - 1; k >= 0; --k) {
        off += (rest % plan_.dims[k]) * plan_.strides[0][k];
        rest /= plan_.dims[k];
      }
      const float* xr = x + e * d;
      float* yr = y + e * d;
      if (avx512_) {
        rope_row_avx512(xr, c + off * r, s + off * r, yr, r, interleaved_);
      } else {
        rope_row(xr, c + off * r, s + off * r, yr, r, interleaved_);
      }
      if (r < d) std::memcpy(yr + r, xr + r, static_cast<size_t>(d - r) * sizeof(float));
    }
    return Status::Ok();
  }
  std::string impl() const override {
    return std::string(avx512_ ? "rope avx512" : "rope loop") + (interleaved_ ? " (interleaved)" : "");
  }

 private:
  const TensorInfo *x_, *cos_, *sin_, *y_;
  int64_t d_ = 0, r_ = 0;  // the last axis, its rotated prefix
  bool interleaved_ = false;  // pairs of neighbours, not halves
  bool avx512_ = false;
  BroadcastPlan plan_;
};

}  // namespace

std::unique_ptr<Kernel> make_rope(const KernelArgs& a) { return std::make_unique<RopeKernel>(a); }

}  // namespace ge
