// EltwiseChain: a chain of elementwise steps over one float32 tensor (the compiler's
// eltwise_chain fusion). Input 0 is the chain's value X, inputs 1.. the other operands of its
// binary steps, each broadcasting to X's shape; the output has X's shape. Attributes, one
// entry per step: steps (op names), operands (input index of a binary step's operand, -1 for
// a unary step), reversed (1: the chain value is the right operand), alphas, betas (see
// engine/ops/eltwise_chain.py).
//
// The chain becomes one oneDNN primitive — eltwise or binary for the first step, the rest as
// eltwise and binary post-ops — so intermediates stay in registers. Reversed steps are
// rewritten: c - x = -(x - c), c / x = c * x^-1. When oneDNN has no fused implementation
// for the operands' broadcasts, the steps run as one primitive each, in place on the output.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "dnnl_util.h"
#include "kernels.h"

namespace ge {

namespace {

using alg = dnnl::algorithm;

// One primitive-level operation: an eltwise op, or a binary op with operand input `input`.
struct MicroOp {
  bool binary = false;
  alg a = alg::undef;
  float alpha = 0.f, beta = 0.f;
  size_t input = 0;
};

void unary_op(const std::string& step, float alpha, float beta, std::vector<MicroOp>* out) {
  const float inf = std::numeric_limits<float>::infinity();
  MicroOp m;
  if (step == "Relu") {
    m.a = alg::eltwise_relu;
  } else if (step == "LeakyRelu") {
    m = {false, alg::eltwise_relu, alpha, 0.f, 0};
  } else if (step == "Sigmoid") {
    m.a = alg::eltwise_logistic;
  } else if (step == "Tanh") {
    m.a = alg::eltwise_tanh;
  } else if (step == "Exp") {
    m.a = alg::eltwise_exp;
  } else if (step == "Log") {
    m.a = alg::eltwise_log;
  } else if (step == "Sqrt") {
    m.a = alg::eltwise_sqrt;
  } else if (step == "Abs") {
    m.a = alg::eltwise_abs;
  } else if (step == "Neg") {
    m = {false, alg::eltwise_linear, -1.f, 0.f, 0};
  } else if (step == "Gelu") {
    m.a = alg::eltwise_gelu_erf;
  } else if (step == "GeluTanh") {
    m.a = alg::eltwise_gelu_tanh;
  } else if (step == "Clip") {
    if (std::isnan(alpha) || std::isnan(beta)) invalid("Clip bounds must not be NaN");
    m = {false, alg::eltwise_clip_v2, alpha, beta, 0};
    if (alpha == -inf && beta == inf) return;  // no bounds: nothing to do
  } else if (step == "HardSigmoid") {
    m = {false, alg::eltwise_hardsigmoid, alpha, beta, 0};
  } else if (step == "HardSwish") {
    m = {false, alg::eltwise_hardswish, 1.f / 6.f, 0.5f, 0};
  } else if (step == "Reciprocal") {
    m = {false, alg::eltwise_pow, 1.f, -1.f, 0};
  } else if (step == "Pow") {
    m = {false, alg::eltwise_pow, 1.f, alpha, 0};
  } else {
    invalid("unknown step '", step, "'");
  }
  out->push_back(m);
}

void binary_op(const std::string& step, bool reversed, size_t input, std::vector<MicroOp>* out) {
  const alg a = step == "Add" ? alg::binary_add
              : step == "Sub" ? alg::binary_sub
              : step == "Mul" ? alg::binary_mul
              : alg::binary_div;
  if (reversed && step == "Sub") {  // c - x = -(x - c)
    out->push_back({true, alg::binary_sub, 0.f, 0.f, input});
    out->push_back({false, alg::eltwise_linear, -1.f, 0.f, 0});
  } else if (reversed && step == "Div") {  // c / x = c * x^-1
    out->push_back({false, alg::eltwise_pow, 1.f, -1.f, 0});
    out->push_back({true, alg::binary_mul, 0.f, 0.f, input});
  } else {  // Add and Mul commute
    out->push_back({true, a, 0.f, 0.f, input});
  }
}

class ChainKernel : public Kernel {
 public:
  explicit ChainKernel(const KernelArgs& a);
  size_t workspace_bytes() const override { return plan_.total(); }
  void set_instances(int n) override {
    for (Prim& p : prims_) p.set_instances(n, dev_.engine());
  }
  Status run(ExecContext& ctx) override {
    for (Prim& p : prims_) p.execute(ctx);
    return Status::Ok();
  }

 private:
  // One primitive for `ops` (the first is the primitive, the rest post-ops), reading `src`
  // (X, or the output itself after an earlier primitive). Throws dnnl::error if oneDNN
  // cannot make it.
  Prim make(const std::vector<MicroOp>& ops, const TensorInfo& src, bool require_fast);

  const Device& dev_;
  const KernelArgs* args_ = nullptr;  // during construction only
  const TensorInfo* y_ = nullptr;
  dnnl::memory::desc md_;  // X and Y: plain, rank >= 1
  std::vector<Prim> prims_;
  WorkspacePlan plan_;
};

// Whether `s` broadcasts to `to` without growing it (numpy rules, right-aligned).
bool broadcast_to(const Shape& s, const Shape& to) {
  if (s.size() > to.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const int64_t d = s[s.size() - 1 - i], t = to[to.size() - 1 - i];
    if (d != t && d != 1) return false;
  }
  return true;
}

// An operand's descriptor at the output's rank (leading 1s), plain.
dnnl::memory::desc operand_md(const TensorInfo& t, const dnnl::memory::desc& out) {
  const size_t r = static_cast<size_t>(out.get_ndims());
  Shape s(r - t.shape.size(), 1);
  s.insert(s.end(), t.shape.begin(), t.shape.end());
  return plain_md(s);
}

Prim ChainKernel::make(const std::vector<MicroOp>& ops, const TensorInfo& src, bool require_fast) {
  const KernelArgs& a = *args_;
  const dnnl::engine& eng = dev_.engine();
  dnnl::post_ops post;
  std::vector<std::pair<int, const TensorInfo*>> extra;  // post-op operand args
  for (size_t i = 1; i < ops.size(); ++i) {
    const MicroOp& m = ops[i];
    if (m.binary) {
      const TensorInfo& t = a.in(m.input);
      post.append_binary(m.a, operand_md(t, md_));
      extra.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(post.len() - 1) | DNNL_ARG_SRC_1, &t});
    } else {
      post.append_eltwise(m.a, m.alpha, m.beta);
    }
  }
  dnnl::primitive_attr attr = make_attr(post);
  const MicroOp& first = ops[0];
  Prim p;
  std::string impl;
  if (first.binary) {
    const TensorInfo& t = a.in(first.input);
    const dnnl::memory::desc md1 = operand_md(t, md_);
    dnnl::binary::primitive_desc pd(eng, first.a, md_, md1, md_, attr);
    impl = pd.impl_info_str();
    p = Prim(pd);
    p.arg(DNNL_ARG_SRC_0, md_, Ref::of(src));
    p.arg(DNNL_ARG_SRC_1, md1, Ref::of(t));
  } else {
    dnnl::eltwise_forward::primitive_desc pd(eng, dnnl::prop_kind::forward_inference, first.a, md_, md_, first.alpha,
                                             first.beta, attr);
    impl = pd.impl_info_str();
    p = Prim(pd);
    p.arg(DNNL_ARG_SRC, md_, Ref::of(src));
  }
  if (require_fast && impl.find("ref") != std::string::npos) {
    throw dnnl::error(dnnl_unimplemented, "only a reference implementation");
  }
  p.arg(DNNL_ARG_DST, md_, Ref::of(*y_));
  for (const auto& [key, t] : extra) {
    const dnnl::memory::desc md = operand_md(*t, md_);
    p.arg(key, md, Ref::of(*t));
  }
  return p;
}

std::vector<std::string> split_steps(const std::string& s) {
  std::vector<std::string> r;
  size_t at = 0;
  while (at <= s.size()) {
    size_t comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    r.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return r;
}

ChainKernel::ChainKernel(const KernelArgs& a) : dev_(*a.device), args_(&a) {
  a.expect_inputs(1, -1);
  a.expect_outputs(1, 1);
  const TensorInfo& x = a.in(0);
  y_ = &a.out(0);
  a.expect_dtype(x, DType::kFloat32, "input X");
  a.expect_dtype(*y_, DType::kFloat32, "output Y");
  if (x.shape != y_->shape) invalid("output shape ", shape_str(y_->shape), " differs from X's ", shape_str(x.shape));
  if (!a.has_attr("steps")) invalid("attribute 'steps' is required");
  const std::vector<std::string> steps = split_steps(a.attr_str("steps", ""));
  const std::vector<int64_t> operands = a.attr_ints("operands", {});
  const std::vector<int64_t> reversed = a.attr_ints("reversed", {});
  const std::vector<double> alphas = a.attr_floats("alphas", {});
  const std::vector<double> betas = a.attr_floats("betas", {});
  for (const auto& [key, n] : {std::pair<const char*, size_t>{"operands", operands.size()},
                               {"reversed", reversed.size()}, {"alphas", alphas.size()}, {"betas", betas.size()}}) {
    if (n != steps.size()) invalid("attribute '", key, "' has ", n, " entries for ", steps.size(), " steps");
  }
  const size_t n_in = a.inputs.size();
  std::vector<char> used(n_in, 0);
  std::vector<MicroOp> ops;
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string& step = steps[i];
    const bool binary = step == "Add" || step == "Sub" || step == "Mul" || step == "Div";
    if (!binary) {
      if (operands[i] != -1) invalid("step ", i, " (", step, ") is unary but names operand input ", operands[i]);
      unary_op(step, static_cast<float>(alphas[i]), static_cast<float>(betas[i]), &ops);
      continue;
    }
    if (operands[i] < 1 || static_cast<size_t>(operands[i]) >= n_in) {
      invalid("step ", i, " (", step, "): operand input ", operands[i], " out of range [1, ", n_in, ")");
    }
    const size_t k = static_cast<size_t>(operands[i]);
    const TensorInfo& t = a.in(k);
    a.expect_dtype(t, DType::kFloat32, "operand");
    if (t.shape.size() > x.shape.size() || !broadcast_to(t.shape, x.shape)) {
      invalid("operand '", t.name, "' of shape ", shape_str(t.shape), " does not broadcast to X's ", shape_str(x.shape));
    }
    used[k] = 1;
    binary_op(step, reversed[i] != 0, k, &ops);
  }
  for (size_t k = 1; k < n_in; ++k) {
    if (!used[k]) invalid("input ", k, " is not used by any step");
  }
  for (size_t k = 0; k < n_in; ++k) {
    if (!a.in(k).plain()) invalid("tensor '", a.in(k).name, "' must be stored nchw");
  }
  if (!y_->plain()) invalid("output '", y_->name, "' must be stored nchw");
  if (ops.empty()) ops.push_back({false, alg::eltwise_linear, 1.f, 0.f, 0});  // only unbounded Clips: a copy
  if (x.numel == 0) {  // nothing to compute: no primitive
    args_ = nullptr;
    return;
  }
  md_ = plain_md(x.shape.empty() ? Shape{1} : x.shape);
  try {
    prims_.push_back(make(ops, x, true));
  } catch (const dnnl::error&) {
    // No fused implementation (e.g. an operand broadcast oneDNN's post-ops lack): one
    // primitive per operation, in place on the output.
    prims_.clear();
    for (size_t i = 0; i < ops.size(); ++i) prims_.push_back(make({ops[i]}, i == 0 ? x : *y_, false));
  }
  std::vector<Prim*> all;  // they run one after the other: one shared scratchpad
  for (Prim& p : prims_) all.push_back(&p);
  Prim::share_scratchpad(&plan_, all);
  args_ = nullptr;
}

}  // namespace

std::unique_ptr<Kernel> make_eltwise_chain(const KernelArgs& a) { return std::make_unique<ChainKernel>(a); }

}  // namespace ge
