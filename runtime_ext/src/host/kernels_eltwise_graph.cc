// EltwiseGraph: a region of float32 elementwise ops the compiler fused into one task
// (optimize/fusion/eltwise_graph.py): a DAG, not a chain — a value read by several ops,
// several inputs meeting, several outputs. RWKV's unrolled WKV recurrence is 20 such ops a
// step on [B, 128] vectors; run one op a task, each paid a dispatch and a pass over memory
// for 128 floats of work.
//
// The kernel runs a register program over tiles of the output's elements: each tile's
// inputs are loaded into scratch "registers" (TILE floats each, in L1), every op runs as a
// vector loop over whole registers, and the outputs are stored from them. Registers are
// allocated once at load by liveness, so a program of hundreds of ops needs a handful.
//
// Attributes: "ops" (comma-separated, one per instruction), "args" (three per instruction:
// slot numbers, -1 for an unused one; slots 0..n_in-1 are the inputs, n_in + k is
// instruction k's result, and an instruction reads only slots before its own), "alphas" and
// "betas" (per instruction: LeakyRelu's slope, Clip's bounds, Pow's exponent, ...), and
// "results" (the slot of each output, an instruction's result).
//
// Every output has output 0's shape and format (the domain). An input has the domain's
// shape and format, one element, or (plain output) a broadcast whose non-unit axes are one
// contiguous run of the domain's (e.g. [C] against [N, L, C], [N, 1] against [N, L], [1, C,
// 1] against [N, C, L]) or over two such runs the second of which ends at the last axis
// ([C, 1, W] against [N, C, H, W]); an NHWC or (unpadded) blocked output also takes a plain
// per-channel [N|1, C, 1, 1] (runs of the stored order: [N, 1, 1, C] NHWC, [N, C / 16, 1, 1,
// 16] nChw16c), and a broadcast stored in its own format (a coordinate-attention gate [N, C,
// H, 1]: [N, H, 1, C] NHWC) or, NHWC, a per-pixel map [N|1, 1, H, W], by the same runs of the
// stored order. An element at flat index e of a one-run input is at (e / inner) % span, of a
// two-run one at ((e / inner2) % span2) * span + e % span.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "gelu.h"
#include "kernels.h"
#include "layout.h"
#include "trig.h"

namespace ge {

namespace {

typedef float V16 __attribute__((vector_size(64)));
typedef int32_t I16 __attribute__((vector_size(64)));
typedef float V16u __attribute__((vector_size(64), aligned(4), may_alias));

#define GE_INLINE __attribute__((always_inline)) inline

constexpr int64_t kTile = 512;              // floats a register holds
constexpr int64_t kMaxInstructions = 8192;  // bounds on what a graph may ask
constexpr int64_t kMaxOutputs = 4096;
// Elements x instructions above which the tiles are shared by the lane's threads (~30 us of
// work on one core): a short program over many elements, or a long one over few (RWKV's
// 527-instruction recurrence over [8, 128]: 155 us on one core).
constexpr int64_t kParallelWork = 1 << 17;

enum class Op : uint8_t {
  kAdd, kSub, kMul, kDiv, kMax, kMin,  // binary
  kNeg, kAbs, kRelu, kLeakyRelu, kExp, kLog, kSqrt, kReciprocal, kSigmoid, kTanh, kGelu, kGeluTanh,
  kClip, kHardSigmoid, kHardSwish, kSwish, kElu, kPow, kSoftplus, kMish,
  kSign, kRound, kSoftsign, kSelu, kCelu, kThresholdedRelu, kShrink, kSin, kCos,
};

struct OpName {
  const char* name;
  Op op;
  int arity;
};

const OpName kOps[] = {
    {"Add", Op::kAdd, 2},         {"Sub", Op::kSub, 2},
    {"Mul", Op::kMul, 2},         {"Div", Op::kDiv, 2},
    {"Max", Op::kMax, 2},         {"Min", Op::kMin, 2},
    {"Neg", Op::kNeg, 1},         {"Abs", Op::kAbs, 1},
    {"Relu", Op::kRelu, 1},       {"LeakyRelu", Op::kLeakyRelu, 1},
    {"Exp", Op::kExp, 1},         {"Log", Op::kLog, 1},
    {"Sqrt", Op::kSqrt, 1},       {"Reciprocal", Op::kReciprocal, 1},
    {"Sigmoid", Op::kSigmoid, 1}, {"Tanh", Op::kTanh, 1},
    {"Gelu", Op::kGelu, 1},       {"GeluTanh", Op::kGeluTanh, 1},
    {"Clip", Op::kClip, 1},       {"HardSigmoid", Op::kHardSigmoid, 1},
    {"HardSwish", Op::kHardSwish, 1}, {"Swish", Op::kSwish, 1},
    {"Elu", Op::kElu, 1},         {"Pow", Op::kPow, 1},  // Pow: x ** alpha (a constant exponent)
    {"Softplus", Op::kSoftplus, 1}, {"Mish", Op::kMish, 1},
    {"Sign", Op::kSign, 1},       {"Round", Op::kRound, 1},
    {"Softsign", Op::kSoftsign, 1},
    {"Selu", Op::kSelu, 1},  // alpha, beta: ONNX's alpha, gamma
    {"Celu", Op::kCelu, 1},  // alpha
    {"ThresholdedRelu", Op::kThresholdedRelu, 1},  // alpha
    {"Shrink", Op::kShrink, 1},  // alpha, beta: ONNX's lambd, bias
    {"Sin", Op::kSin, 1},         {"Cos", Op::kCos, 1},  // trig.h's (float64 inside)
};

struct Instr {
  Op op;
  int d, a, b;  // registers: destination, operands (-1: none)
  float alpha, beta;
};

// One step of the program: load input `src` into register d, run an instruction, or store
// register a into output `dst`.
struct Step {
  enum Kind : uint8_t { kLoad, kCompute, kStore } kind;
  int index;  // the input (load), the instruction (compute), the output (store)
  int reg;    // load: the destination; store: the source
};

// How an input is read: element e of the domain at p[(e / inner) % span].
struct Source {
  int64_t span = 1;
  int64_t inner = 1;
  bool full = false;  // span == domain size, inner == 1: a plain copy
  // A second, outer run (span2 > 1; then inner == 1: the first run ends at the last axis):
  // element e at ((e / inner2) % span2) * span + e % span ([C, 1, W] of [N, C, H, W], a
  // mask [B, 1, 1, S] of [B, H, L, S]).
  int64_t span2 = 1;
  int64_t inner2 = 1;
};

struct Program {
  std::vector<Step> steps;
  std::vector<Instr> instrs;
  std::vector<Source> sources;
  int regs = 0;
};

// The vector math, op loops and tile body, compiled twice: plain, and inside the AVX-512
// target. Inlined helpers compiled outside the target lowered some 512-bit selects lane by
// lane even where the caller had AVX-512 (a select whose operand was another select: Max
// and Min ~2 ns an element against Add's 0.2; Softplus 1.4).
namespace plain {
#include "eltwise_graph_body.inc"
}  // namespace plain

#pragma GCC push_options
#pragma GCC target("avx512f,fma")
namespace wide {
#include "eltwise_graph_body.inc"
}  // namespace wide
#pragma GCC pop_options

void run_tile_plain(const Program& p, const float* const* in, float* const* out, float* regs, int64_t s,
                    int64_t len) {
  plain::run_tile_body(p, in, out, regs, s, len, false);
}
__attribute__((target("avx512f,fma"))) void run_tile_avx512(const Program& p, const float* const* in,
                                                                      float* const* out, float* regs, int64_t s,
                                                                      int64_t len) {
  wide::run_tile_body(p, in, out, regs, s, len, true);
}

// True when input `x` of the rank of a domain `y` stored in a format is stored the same way
// as its broadcast: in y's format with y's channels (unpadded), or a one-channel map (plain or
// NHWC: the same bytes) against an NHWC domain.
bool stored_like_domain(const TensorInfo& x, const TensorInfo& y) {
  if (y.plain() || x.rank() != y.rank() || x.rank() < 3 || format_padded(x.format, x.shape)) return false;
  if (x.shape[1] == y.shape[1]) return x.format == y.format;
  return x.shape[1] == 1 && y.format == Format::kNhwc && (x.plain() || x.format == Format::kNhwc);
}

// How input `x` (stored order `xs`, right-aligned against the domain's `ys`) is read, or
// false when its non-unit axes are neither one contiguous run of the domain's nor two of
// which the second ends at the last axis. Unit axes of the domain belong to any run.
bool source_of(const Shape& xs, const Shape& ys, Source* src) {
  if (xs.size() > ys.size()) return false;
  const size_t rank = ys.size(), pad = rank - xs.size();
  auto dim = [&](size_t i) { return i < pad ? int64_t{1} : xs[i - pad]; };
  for (size_t i = 0; i < rank; ++i) {
    if (dim(i) != 1 && dim(i) != ys[i]) return false;  // no broadcast
  }
  // runs: groups of axes where the input has the domain's non-unit size, apart where it
  // broadcasts over a non-unit axis of the domain between them
  std::vector<std::pair<size_t, size_t>> spans;  // [first, last] axes
  for (size_t i = 0; i < rank; ++i) {
    const bool in = dim(i) != 1 && ys[i] != 1;
    if (!in) continue;
    if (!spans.empty() && spans.back().second + 1 <= i) {
      bool gap = false;  // a non-unit domain axis the input broadcasts over, between them
      for (size_t j = spans.back().second + 1; j < i; ++j) gap = gap || (ys[j] != 1 && dim(j) == 1);
      if (!gap) {
        spans.back().second = i;
        continue;
      }
    }
    spans.push_back({i, i});
  }
  auto product = [&](size_t from, size_t to) {  // of the domain's axes [from, to)
    int64_t p = 1;
    for (size_t i = from; i < to; ++i) p *= ys[i];
    return p;
  };
  *src = Source{};
  if (spans.empty()) return true;  // one element
  if (spans.size() == 1) {
    src->span = product(spans[0].first, spans[0].second + 1);
    src->inner = product(spans[0].second + 1, rank);
    return true;
  }
  if (spans.size() != 2 || product(spans[1].second + 1, rank) != 1) return false;
  src->span = product(spans[1].first, spans[1].second + 1);
  src->span2 = product(spans[0].first, spans[0].second + 1);
  src->inner2 = product(spans[0].second + 1, rank);
  return true;
}

class EltwiseGraphKernel : public Kernel {
 public:
  explicit EltwiseGraphKernel(const KernelArgs& a) {
    a.expect_inputs(1, -1);
    a.expect_outputs(1, static_cast<int>(kMaxOutputs));
    const TensorInfo& y = a.out(0);
    const int n_in = static_cast<int>(a.inputs.size());
    numel_ = y.numel;
    for (size_t j = 0; j < a.outputs.size(); ++j) {
      const TensorInfo& o = a.out(j);
      a.expect_dtype(o, DType::kFloat32, "output");
      if (o.shape != y.shape || o.format != y.format) {
        invalid("output '", o.name, "' ", shape_str(o.shape), " must have output 0's shape ", shape_str(y.shape),
                " and format");
      }
      outs_.push_back(&o);
    }
    if (format_padded(y.format, y.shape)) invalid("outputs stored padded (", format_name(y.format), ")");
    const Shape ys = stored_shape(y.shape, y.format);
    for (int i = 0; i < n_in; ++i) {
      const TensorInfo& x = a.in(static_cast<size_t>(i));
      a.expect_dtype(x, DType::kFloat32, "input");
      Source s;
      if (x.numel == 1) {
        s.span = 1;
      } else if (x.shape == y.shape && x.format == y.format) {
        s.span = x.numel;
        s.full = true;
      } else if (x.plain() && (y.plain() || per_channel_of(x.shape, y.shape)) &&
                 source_of(y.plain() ? x.shape : stored_shape(x.shape, y.format), ys, &s)) {
        // (a per-channel [N|1, C, 1, 1] has its plain bytes in every format: [N|1, 1, 1, C]
        // stored NHWC, [N|1, C / 16, 1, 1, 16] blocked)
        if (s.span2 == 1 && s.span == numel_ && s.inner == 1) s.full = true;
      } else if (stored_like_domain(x, y) && source_of(stored_shape(x.shape, y.format), ys, &s)) {
        // a broadcast stored in the domain's format (coordinate attention's [N, C, H, 1] gate
        // against [N, C, H, W]: [N, H, 1, C] against [N, H, W, C] stored NHWC), or a per-pixel
        // map [N|1, 1, H, W] (the same bytes plain and NHWC) against an NHWC domain
        if (s.span2 == 1 && s.span == numel_ && s.inner == 1) s.full = true;
      } else {
        invalid("input '", x.name, "' ", shape_str(x.shape), " (", format_name(x.format),
                ") must have the output's shape and format, one element, a plain per-channel operand, or "
                "a broadcast (stored plain or in the output's format) over a contiguous run of the output's "
                "stored axes (or two, the second ending at the last axis) ",
                shape_str(y.shape));
      }
      ins_.push_back(&x);
      prog_.sources.push_back(s);
    }
    build_program(a, n_in);
    wide_ = cpu_has_avx512();
    threads_ = std::max(1, a.device->threads());
    const int64_t work = numel_ * static_cast<int64_t>(prog_.instrs.size());
    tile_ = kTile;
    if (threads_ > 1 && work >= kParallelWork && numel_ < threads_ * kTile) {
      // fewer elements than a tile per thread: smaller tiles, one or more each
      tile_ = std::max<int64_t>(64, ((numel_ + threads_ - 1) / threads_ + 15) & ~int64_t{15});
    }
    tiles_ = (numel_ + tile_ - 1) / tile_;
    parts_ = work >= kParallelWork ? static_cast<int>(std::min<int64_t>(threads_, tiles_)) : 1;
  }

  // The inputs' and outputs' addresses of the run (no allocation on the run's path), then
  // each thread's registers.
  size_t pointer_bytes() const { return ((ins_.size() + outs_.size()) * sizeof(void*) + 63) & ~size_t{63}; }
  size_t workspace_bytes() const override {
    return pointer_bytes() + static_cast<size_t>(parts_) * static_cast<size_t>(prog_.regs) * kTile * sizeof(float);
  }

  std::string impl() const override {
    return std::string(wide_ ? "avx512" : "plain") + " " + std::to_string(prog_.instrs.size()) + " ops, " +
           std::to_string(prog_.regs) + " registers" + (parts_ > 1 ? ", " + std::to_string(parts_) + " threads" : "");
  }

  Status run(ExecContext& ctx) override {
    if (numel_ == 0) return Status::Ok();
    const float** in = reinterpret_cast<const float**>(ctx.workspace);
    float** out = reinterpret_cast<float**>(ctx.workspace) + ins_.size();
    for (size_t i = 0; i < ins_.size(); ++i) in[i] = ctx.ptr<const float>(*ins_[i]);
    for (size_t j = 0; j < outs_.size(); ++j) out[j] = ctx.ptr<float>(*outs_[j]);
    float* regs = reinterpret_cast<float*>(ctx.workspace + pointer_bytes());
    const int64_t per = static_cast<int64_t>(prog_.regs) * kTile;
    auto tile = wide_ ? run_tile_avx512 : run_tile_plain;
    const int parts = std::min(parts_, omp_get_max_threads());
    const Program& p = prog_;
    const int64_t tiles = tiles_, numel = numel_, step = tile_;
    if (parts <= 1) {
      for (int64_t k = 0; k < tiles; ++k) tile(p, in, out, regs, k * step, std::min(step, numel - k * step));
      return Status::Ok();
    }
#pragma omp parallel num_threads(parts)
    {
      const int t = omp_get_thread_num();
      const int nt = omp_get_num_threads();
      for (int64_t k = t; k < tiles; k += nt) {
        const int64_t s = k * step;
        tile(p, in, out, regs + t * per, s, std::min(step, numel - s));
      }
    }
    return Status::Ok();
  }

 private:
  void build_program(const KernelArgs& a, int n_in) {
    const std::vector<std::string> names = split_commas(a.attr_str("ops", ""));
    const std::vector<int64_t> args = a.attr_ints("args", {});
    const std::vector<double> alphas = a.attr_floats("alphas", {});
    const std::vector<double> betas = a.attr_floats("betas", {});
    const std::vector<int64_t> outputs = a.attr_ints("results", {});
    const int64_t n = static_cast<int64_t>(names.size());
    if (n == 0) invalid("attribute 'ops' lists no instruction");
    if (n > kMaxInstructions) invalid(n, " instructions; at most ", kMaxInstructions);
    if (static_cast<int64_t>(args.size()) != 3 * n || static_cast<int64_t>(alphas.size()) != n ||
        static_cast<int64_t>(betas.size()) != n) {
      invalid("attribute 'args' needs 3 entries per instruction and 'alphas', 'betas' one (", n, " instructions)");
    }
    if (outputs.size() != a.outputs.size()) {
      invalid("attribute 'results' names ", outputs.size(), " slots for ", a.outputs.size(), " outputs");
    }
    const int64_t slots = n_in + n;
    std::vector<Instr> raw(static_cast<size_t>(n));
    std::vector<int64_t> last_use(static_cast<size_t>(slots), -1);
    for (int64_t k = 0; k < n; ++k) {
      Instr& in = raw[static_cast<size_t>(k)];
      const OpName* found = nullptr;
      for (const auto& e : kOps) {
        if (names[static_cast<size_t>(k)] == e.name) found = &e;
      }
      if (!found) invalid("instruction ", k, ": unknown op '", names[static_cast<size_t>(k)], "'");
      in.op = found->op;
      in.alpha = static_cast<float>(alphas[static_cast<size_t>(k)]);
      in.beta = static_cast<float>(betas[static_cast<size_t>(k)]);
      int64_t slot[3];
      for (int j = 0; j < 3; ++j) {
        slot[j] = args[static_cast<size_t>(3 * k + j)];
        const bool want = j < found->arity;
        if (want && (slot[j] < 0 || slot[j] >= n_in + k)) {
          invalid("instruction ", k, " (", found->name, "): argument ", j, " slot ", slot[j], " out of range [0, ",
                  n_in + k, ")");
        }
        if (!want && slot[j] != -1) invalid("instruction ", k, " (", found->name, "): takes ", found->arity, " arguments");
        if (want) last_use[static_cast<size_t>(slot[j])] = k;
      }
      in.a = static_cast<int>(slot[0]);
      in.b = static_cast<int>(slot[1]);
    }
    std::vector<std::vector<int>> stores(static_cast<size_t>(n));
    for (size_t j = 0; j < outputs.size(); ++j) {
      if (outputs[j] < n_in || outputs[j] >= slots) {
        invalid("output ", j, ": slot ", outputs[j], " is not an instruction's result [", n_in, ", ", slots, ")");
      }
      stores[static_cast<size_t>(outputs[j] - n_in)].push_back(static_cast<int>(j));
    }
    // Registers by liveness: a slot's register is freed after its last reader (a result
    // nothing reads is stored, then freed; one neither read nor stored is not computed).
    std::vector<int> reg_of(static_cast<size_t>(slots), -1);
    std::vector<int> free_regs;
    auto take = [&]() {
      if (!free_regs.empty()) {
        const int r = free_regs.back();
        free_regs.pop_back();
        return r;
      }
      return prog_.regs++;
    };
    auto release = [&](int64_t s, int64_t k) {
      if (last_use[static_cast<size_t>(s)] == k && reg_of[static_cast<size_t>(s)] >= 0) {
        free_regs.push_back(reg_of[static_cast<size_t>(s)]);
        reg_of[static_cast<size_t>(s)] = -1;
        last_use[static_cast<size_t>(s)] = -2;  // released once even when read twice by k
      }
    };
    for (int64_t k = 0; k < n; ++k) {
      const Instr& r = raw[static_cast<size_t>(k)];
      const int64_t self = n_in + k;
      if (last_use[static_cast<size_t>(self)] < 0 && stores[static_cast<size_t>(k)].empty()) continue;  // dead
      for (int64_t s : {static_cast<int64_t>(r.a), static_cast<int64_t>(r.b)}) {
        if (s >= 0 && s < n_in && reg_of[static_cast<size_t>(s)] < 0) {
          reg_of[static_cast<size_t>(s)] = take();
          prog_.steps.push_back({Step::kLoad, static_cast<int>(s), reg_of[static_cast<size_t>(s)]});
        }
      }
      Instr ins = r;
      ins.a = reg_of[static_cast<size_t>(r.a)];
      ins.b = r.b >= 0 ? reg_of[static_cast<size_t>(r.b)] : -1;
      release(r.a, k);
      if (r.b >= 0) release(r.b, k);
      ins.d = take();  // may be an operand's register: every loop reads element i before writing it
      reg_of[static_cast<size_t>(self)] = ins.d;
      prog_.steps.push_back({Step::kCompute, static_cast<int>(prog_.instrs.size()), ins.d});
      prog_.instrs.push_back(ins);
      for (int j : stores[static_cast<size_t>(k)]) prog_.steps.push_back({Step::kStore, j, ins.d});
      if (last_use[static_cast<size_t>(self)] < 0) {  // stored only
        free_regs.push_back(ins.d);
        reg_of[static_cast<size_t>(self)] = -1;
      }
    }
  }

  std::vector<const TensorInfo*> ins_;
  std::vector<const TensorInfo*> outs_;
  Program prog_;
  int64_t numel_ = 0;
  int64_t tiles_ = 0;
  int64_t tile_ = kTile;  // elements a tile (<= kTile)
  int threads_ = 1;
  int parts_ = 1;
  bool wide_ = false;
};

}  // namespace

std::unique_ptr<Kernel> make_eltwise_graph(const KernelArgs& a) { return std::make_unique<EltwiseGraphKernel>(a); }

}  // namespace ge
