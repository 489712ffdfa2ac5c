// EltwiseChain: a chain of elementwise float32 ops fused by the compiler into one pass over
// memory: one oneDNN binary primitive (the first step, or `x * 1` before a unary first
// step) whose post-ops are the other steps (eltwise, or binary with a second operand), so
// each element is loaded and stored once whatever the chain's length.
//
// Attributes: "ops" (comma-separated step names), "operands" (per step: the input index of
// a binary step's second operand, -1 for a unary step), "alphas"/"betas" (per step). The
// chain's running value is always a binary step's first operand. Every operand has the
// output's shape or one element, and the output has input 0's shape; operands are read as
// flat vectors, so any format common to the same-shape tensors works. On a plain output of
// rank >= 2 an operand may also be per-channel: C values along axis 1 (shape [C, 1],
// [1, C, 1, 1], ...: a GroupNorm's affine after its normalization); the tensors are then
// read as [N, C, rest] and such an operand as [1, C, 1] (oneDNN's per-channel broadcast).
// So on an NHWC output (rank 3 to 5: a 1-D convolution encoder's residual sum, scale and
// activation between its convolutions): the tensors are read as [rows, C], the operand as
// [1, C] (its bytes are the same in any format).
#include <sstream>

#include "dnnl_util.h"
#include "kernels.h"

namespace ge {

namespace {

using alg = dnnl::algorithm;

const float kOne = 1.f;  // the second operand of a unary-led chain's `x * 1`

struct Step {
  std::string op;
  bool binary = false;
  alg f = alg::undef;
  int operand = -1;
  float alpha = 0.f;
  float beta = 0.f;
};

// The oneDNN algorithm of a step; false for an unknown name.
bool step_alg(Step* s) {
  static const struct {
    const char* name;
    bool binary;
    alg f;
  } kTable[] = {
      {"Add", true, alg::binary_add},          {"Sub", true, alg::binary_sub},
      {"Mul", true, alg::binary_mul},          {"Div", true, alg::binary_div},
      {"Relu", false, alg::eltwise_relu},      {"LeakyRelu", false, alg::eltwise_relu},
      {"Sigmoid", false, alg::eltwise_logistic}, {"Tanh", false, alg::eltwise_tanh},
      {"Exp", false, alg::eltwise_exp},        {"Log", false, alg::eltwise_log},
      {"Sqrt", false, alg::eltwise_sqrt},      {"Abs", false, alg::eltwise_abs},
      {"Neg", false, alg::eltwise_linear},     {"Gelu", false, alg::eltwise_gelu_erf},
      {"GeluTanh", false, alg::eltwise_gelu_tanh}, {"Clip", false, alg::eltwise_clip_v2},
      {"HardSigmoid", false, alg::eltwise_hardsigmoid}, {"HardSwish", false, alg::eltwise_hardswish},
      {"Reciprocal", false, alg::eltwise_pow}, {"Swish", false, alg::eltwise_swish},
      {"Elu", false, alg::eltwise_elu},
  };
  for (const auto& e : kTable) {
    if (s->op == e.name) {
      s->binary = e.binary;
      s->f = e.f;
      return true;
    }
  }
  return false;
}

// Fixed alpha/beta of the ops whose ONNX form has none (the compiler sends the others).
void fixed_params(Step* s) {
  if (s->op == "Neg") {
    s->alpha = -1.f;
    s->beta = 0.f;
  } else if (s->op == "HardSwish") {
    s->alpha = 1.f / 6.f;
    s->beta = 0.5f;
  } else if (s->op == "Reciprocal") {
    s->alpha = 1.f;
    s->beta = -1.f;
  } else if (s->op == "Relu" || s->op == "Sigmoid" || s->op == "Tanh" || s->op == "Exp" || s->op == "Log" ||
             s->op == "Sqrt" || s->op == "Abs" || s->op == "Gelu" || s->op == "GeluTanh") {
    s->alpha = s->beta = 0.f;
  }
}

// True when `o` is a per-channel operand of a plain or NHWC output `y`: right-aligned, its
// only dimension above 1 is y's axis 1 (C > 1 channels; rank <= y's).
bool per_channel(const TensorInfo& o, const TensorInfo& y) {
  const size_t rank = y.shape.size();
  const bool formatted = y.channels_last() && rank >= 3 && rank <= 5;
  if (!(y.plain() || formatted) || rank < 2 || o.shape.size() > rank || y.shape[1] < 2 || o.numel != y.shape[1]) {
    return false;
  }
  for (size_t i = 0; i < o.shape.size(); ++i) {
    const size_t axis = rank - o.shape.size() + i;
    if (o.shape[i] != (axis == 1 ? y.shape[1] : 1)) return false;
  }
  return true;
}

class ChainKernel : public PrimitiveKernel {
 public:
  explicit ChainKernel(const KernelArgs& a) : PrimitiveKernel(*a.device) {
    a.expect_outputs(1, 1);
    const TensorInfo& x = a.in(0);
    const TensorInfo& y = a.out(0);
    a.expect_dtype(x, DType::kFloat32, "input 0");
    a.expect_dtype(y, DType::kFloat32, "output");
    if (x.shape != y.shape) invalid("output shape ", shape_str(y.shape), " differs from input 0 ", shape_str(x.shape));
    if (x.format != y.format) invalid("input 0 and the output must share a format");
    empty_ = y.numel == 0;
    const std::vector<std::string> names = split_commas(a.attr_str("ops", ""));
    const std::vector<int64_t> operands = a.attr_ints("operands", {});
    const std::vector<double> alphas = a.attr_floats("alphas", {});
    const std::vector<double> betas = a.attr_floats("betas", {});
    if (names.empty()) invalid("attribute 'ops' lists no step");
    if (operands.size() != names.size() || alphas.size() != names.size() || betas.size() != names.size()) {
      invalid("attributes 'operands', 'alphas' and 'betas' need one entry per step (", names.size(), ")");
    }
    const int n_in = static_cast<int>(a.inputs.size());
    bool channels = false;  // some operand is per-channel: the tensors are read [N, C, rest]
    std::vector<Step> steps(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      Step& s = steps[i];
      s.op = names[i];
      if (!step_alg(&s)) invalid("step ", i, ": unknown op '", s.op, "'");
      s.alpha = static_cast<float>(alphas[i]);
      s.beta = static_cast<float>(betas[i]);
      fixed_params(&s);
      s.operand = static_cast<int>(operands[i]);
      if (s.binary != (s.operand >= 0)) {
        invalid("step ", i, " (", s.op, "): ", s.binary ? "needs an operand" : "takes no operand");
      }
      if (s.binary) {
        if (s.operand >= n_in) invalid("step ", i, ": operand index ", s.operand, " out of range [0, ", n_in, ")");
        const TensorInfo& o = a.in(static_cast<size_t>(s.operand));
        a.expect_dtype(o, DType::kFloat32, "operand");
        if (per_channel(o, y)) {
          channels = true;
        } else if (o.numel != 1 && (o.shape != y.shape || o.format != y.format)) {
          invalid("step ", i, ": operand '", o.name, "' ", shape_str(o.shape), " must have the output's shape ",
                  shape_str(y.shape), " and format, one element, or one per channel (of a plain or nhwc output)");
        }
      }
    }
    if (empty_) return;  // checked, nothing to run
    const int64_t c = channels ? y.shape[1] : 1;
    // plain: [N, C, rest] with the operand [1, C, 1]; NHWC: [rows, C] with [1, C]
    const bool last = channels && y.channels_last();
    const dnnl::memory::desc flat = !channels ? plain_md(Shape{y.numel})
                                    : last    ? plain_md(Shape{y.numel / c, c})
                                              : plain_md(Shape{y.shape[0], c, y.numel / (y.shape[0] * c)});
    const dnnl::memory::desc one = !channels ? plain_md(Shape{1}) : last ? plain_md(Shape{1, 1}) : plain_md(Shape{1, 1, 1});
    const dnnl::memory::desc per_c = last ? plain_md(Shape{1, c}) : plain_md(Shape{1, c, 1});
    auto md_of = [&](const TensorInfo& t) {
      return t.numel == 1 ? one : (channels && per_channel(t, y)) ? per_c : flat;
    };
    // The chain runs as one binary primitive with the other steps as its post-ops. A chain
    // led by a unary step is led by `x * 1` instead: oneDNN has no jit eltwise primitive
    // with post-ops (it ran them on its reference implementation, 36% of a mel-spectrogram
    // model's run), while its jit binary takes eltwise post-ops. The multiply by one is
    // exact (NaN stays NaN), and every step then runs as the same jit post-op code a
    // binary-led chain runs.
    const Step& first = steps[0];
    const size_t first_post = first.binary ? 1 : 0;
    dnnl::post_ops ops;
    std::vector<std::pair<int, const TensorInfo*>> post_args;
    for (size_t i = first_post; i < steps.size(); ++i) {
      const Step& s = steps[i];
      const int index = static_cast<int>(i - first_post);
      if (s.binary) {
        const TensorInfo& o = a.in(static_cast<size_t>(s.operand));
        ops.append_binary(s.f, md_of(o));
        post_args.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1, &o);
      } else {
        ops.append_eltwise(s.f, s.alpha, s.beta);
      }
    }
    const TensorInfo* src1 = first.binary ? &a.in(static_cast<size_t>(first.operand)) : nullptr;
    const dnnl::memory::desc md1 = src1 ? md_of(*src1) : one;
    dnnl::binary::primitive_desc pd(host_engine(dev_), first.binary ? first.f : alg::binary_mul, flat, md1, flat,
                                    make_attr(ops));
    prim_ = Prim(pd);
    prim_.arg(DNNL_ARG_SRC_0, flat, Ref::of(x));
    prim_.arg(DNNL_ARG_SRC_1, md1, src1 ? Ref::of(*src1) : Ref::buffer(&kOne));
    prim_.arg(DNNL_ARG_DST, flat, Ref::of(y));
    for (const auto& [key, t] : post_args) prim_.arg(key, md_of(*t), Ref::of(*t));
    Prim::share_scratchpad(&plan_, {&prim_});
  }
  Status run(ExecContext& ctx) override {
    if (!empty_) prim_.execute(ctx);
    return Status::Ok();
  }

 private:
  bool empty_ = false;
};

}  // namespace

std::unique_ptr<Kernel> make_chain(const KernelArgs& a) { return std::make_unique<ChainKernel>(a); }

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> r;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) r.push_back(item);
  return r;
}

}  // namespace ge
