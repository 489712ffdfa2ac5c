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
// ([C, 1, W] against [N, C, H, W]); an NHWC output also takes a plain per-channel [N|1, C,
// 1, 1] (a suffix of C in the stored order). An element at flat index e of a one-run input is
// at (e / inner) % span, of a two-run one at ((e / inner2) % span2) * span + e % span.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "gelu.h"
#include "kernels.h"
#include "layout.h"

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
  kSign, kRound, kSoftsign, kSelu, kCelu, kThresholdedRelu, kShrink,
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
};

// ---- vector math (16 floats; compiled plain and for AVX-512) ---------------------------

GE_INLINE V16 splat(float v) { return V16{} + v; }
GE_INLINE V16 load(const float* p) { return *reinterpret_cast<const V16u*>(p); }
GE_INLINE void store(float* p, V16 v) { *reinterpret_cast<V16u*>(p) = v; }
GE_INLINE V16 abs_v(V16 x) { return (V16)((I16)x & 0x7fffffff); }
GE_INLINE V16 with_sign_of(V16 mag, V16 x) {
  return (V16)(((I16)mag & 0x7fffffff) | ((I16)x & static_cast<int32_t>(0x80000000u)));
}

// exp(x): x = n ln2 + r, |r| <= ln2 / 2, e^r by its Taylor polynomial to r^7 (error below
// 6e-9 relative), 2^n applied as two factors so results down to the subnormals and up to
// the overflow come out right. x clamped to [-104, 89] first (NaN passes the compares).
GE_INLINE V16 exp_v(V16 x) {
  V16 c = x < -104.f ? splat(-104.f) : x;
  c = c > 89.f ? splat(89.f) : c;
  const V16 n = (c * 1.44269504f + 12582912.f) - 12582912.f;
  const V16 r = (c - n * 0.693145752f) - n * 1.42860677e-6f;
  V16 p = splat(1.f / 5040);
  p = p * r + 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const I16 ni = __builtin_convertvector(n, I16);
  const I16 n1 = ni >> 1;
  const I16 n2 = ni - n1;
  return p * (V16)((n1 + 127) << 23) * (V16)((n2 + 127) << 23);
}

// log(x): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m - 1) / (m + 1)
// (|s| <= 0.172: its odd series to s^11). Subnormals scaled by 2^23 first; 0 -> -inf,
// negatives -> NaN, inf -> inf, NaN -> NaN.
GE_INLINE V16 log_v(V16 x) {
  const I16 tiny = x < std::numeric_limits<float>::min();
  const V16 xs = tiny ? x * 8388608.f : x;
  const I16 bits = (I16)xs;
  I16 e = ((bits >> 23) & 0xff) - 127 + (tiny & -23);
  V16 m = (V16)((bits & 0x7fffff) | 0x3f800000);
  const I16 big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  e = e - big;  // big is -1 where true
  const V16 f = __builtin_convertvector(e, V16);
  const V16 s = (m - 1.f) / (m + 1.f);
  const V16 s2 = s * s;
  V16 p = splat(1.f / 11);
  p = p * s2 + 1.f / 9;
  p = p * s2 + 1.f / 7;
  p = p * s2 + 1.f / 5;
  p = p * s2 + 1.f / 3;
  p = p * s2 + 1.f;
  V16 r = f * 0.693145752f + (f * 1.42860677e-6f + 2.f * s * p);
  const float inf = std::numeric_limits<float>::infinity();
  r = x == 0.f ? splat(-inf) : r;
  r = x < 0.f ? splat(std::numeric_limits<float>::quiet_NaN()) : r;
  r = x == inf ? splat(inf) : r;
  return x != x ? x : r;
}

// tanh: an odd Taylor polynomial below |x| = 0.35 (to x^13), 1 - 2 / (e^2|x| + 1) above;
// relative error ~3e-7. The sign (of zero too) is x's.
GE_INLINE V16 tanh_v(V16 x) {
  const V16 a = (V16)((I16)x & 0x7fffffff);
  const V16 big = 1.f - 2.f / (exp_v(a + a) + 1.f);
  const V16 a2 = a * a;
  V16 p = splat(21844.f / 6081075);
  p = p * a2 - 1382.f / 155925;
  p = p * a2 + 62.f / 2835;
  p = p * a2 - 17.f / 315;
  p = p * a2 + 2.f / 15;
  p = p * a2 - 1.f / 3;
  p = p * a2 * a + a;
  return with_sign_of(a < 0.35f ? p : big, x);
}

GE_INLINE V16 sigmoid_v(V16 x) { return 1.f / (1.f + exp_v(-x)); }

// exp(x) - 1 without the cancellation near 0: its Taylor polynomial below |x| = 0.35.
GE_INLINE V16 expm1_v(V16 x) {
  V16 p = splat(1.f / 5040);
  p = p * x + 1.f / 720;
  p = p * x + 1.f / 120;
  p = p * x + 1.f / 24;
  p = p * x + 1.f / 6;
  p = p * x + 0.5f;
  p = p * x * x + x;
  const V16 a = (V16)((I16)x & 0x7fffffff);
  return a < 0.35f ? p : exp_v(x) - 1.f;
}

// log(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)), log1p(t) as log(u) t / (u - 1) with u =
// 1 + t (exact where u rounds to 1: t itself): no overflow for large x, full relative
// accuracy for very negative x (oneDNN's soft_relu was ~1% off below -5).
GE_INLINE V16 softplus_v(V16 x) {
  const V16 t = exp_v(-(V16)((I16)x & 0x7fffffff));
  const V16 u = 1.f + t;
  const V16 l = u == 1.f ? t : log_v(u) * t / (u - 1.f);
  return (x > 0.f ? x : V16{}) + (x != x ? x : l);
}

// NaN in either operand gives NaN (numpy's maximum / minimum).
GE_INLINE V16 max_v(V16 a, V16 b) {
  V16 m = a > b ? a : b;
  m = b != b ? b : m;
  return a != a ? a : m;
}
GE_INLINE V16 min_v(V16 a, V16 b) {
  V16 m = a < b ? a : b;
  m = b != b ? b : m;
  return a != a ? a : m;
}
// Bounds that let NaN through (np.clip).
GE_INLINE V16 clamp_v(V16 x, float lo, float hi) {
  x = x < lo ? splat(lo) : x;
  return x > hi ? splat(hi) : x;
}

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

// ---- the op loops ----------------------------------------------------------------------

// Loops written out in the one always-inlined body (no lambdas: a closure's call operator is
// one function for both builds, compiled for the baseline ISA when GCC does not inline it).
#define GE_UNARY(EXPR)                  \
  for (int64_t i = 0; i < n; i += 16) { \
    const V16 x = load(a + i);          \
    store(d + i, (EXPR));               \
  }                                     \
  break
#define GE_BINARY(EXPR)                 \
  for (int64_t i = 0; i < n; i += 16) { \
    const V16 x = load(a + i);          \
    const V16 y = load(b + i);          \
    store(d + i, (EXPR));               \
  }                                     \
  break

// n: a multiple of 16.
GE_INLINE void compute(const Instr& in, float* d, const float* a, const float* b, int64_t n, bool wide) {
  const float al = in.alpha, be = in.beta;
  switch (in.op) {
    case Op::kAdd: GE_BINARY(x + y);
    case Op::kSub: GE_BINARY(x - y);
    case Op::kMul: GE_BINARY(x * y);
    case Op::kDiv: GE_BINARY(x / y);
    case Op::kMax: GE_BINARY(max_v(x, y));
    case Op::kMin: GE_BINARY(min_v(x, y));
    case Op::kNeg: GE_UNARY(-x);
    case Op::kAbs: GE_UNARY((V16)((I16)x & 0x7fffffff));
    case Op::kRelu: GE_UNARY(x < 0.f ? V16{} : x);
    case Op::kLeakyRelu: GE_UNARY(x < 0.f ? x * al : x);
    case Op::kExp: GE_UNARY(exp_v(x));
    case Op::kLog: GE_UNARY(log_v(x));
    case Op::kSqrt:
      for (int64_t i = 0; i < n; ++i) d[i] = __builtin_sqrtf(a[i]);  // vectorised (-fno-math-errno)
      break;
    case Op::kReciprocal: GE_UNARY(1.f / x);
    case Op::kSigmoid: GE_UNARY(sigmoid_v(x));
    case Op::kTanh: GE_UNARY(tanh_v(x));
    case Op::kGelu:
      if (wide) {
        gelu::erf_form(a, d, n, 1);
      } else {
        for (int64_t i = 0; i < n; ++i) d[i] = 0.5f * a[i] * (1.f + std::erf(a[i] * 0.70710678118654752f));
      }
      break;
    case Op::kGeluTanh: GE_UNARY(0.5f * x * (1.f + tanh_v(0.79788456080286536f * (x + 0.044715f * x * x * x))));
    case Op::kClip: GE_UNARY(clamp_v(x, al, be));
    case Op::kHardSigmoid: GE_UNARY(clamp_v(x * al + be, 0.f, 1.f));
    case Op::kHardSwish: GE_UNARY(x * clamp_v(x * (1.f / 6) + 0.5f, 0.f, 1.f));
    case Op::kSwish: GE_UNARY(x * sigmoid_v(x * al));
    case Op::kElu: GE_UNARY(x > 0.f ? x : al * expm1_v(x));
    case Op::kSoftplus: GE_UNARY(softplus_v(x));
    case Op::kMish: GE_UNARY(x * tanh_v(softplus_v(x)));
    // numpy's sign: +0 for either zero, NaN kept
    case Op::kSign: GE_UNARY(x > 0.f ? splat(1.f) : x < 0.f ? splat(-1.f) : x == 0.f ? V16{} : x);
    // half to even: below 2^23 adding and taking away 2^23 rounds to an integer in the
    // default rounding mode (the sign put back: -0.4 -> -0); from 2^23 on (and inf, NaN)
    // every float is its own integer
    case Op::kRound: GE_UNARY(abs_v(x) < 8388608.f ? with_sign_of((abs_v(x) + 8388608.f) - 8388608.f, x) : x);
    case Op::kSoftsign: GE_UNARY(x / (1.f + abs_v(x)));
    case Op::kSelu: GE_UNARY(x > 0.f ? x * be : (al * expm1_v(x)) * be);
    case Op::kCelu: GE_UNARY(x > 0.f ? x : al * expm1_v(x / al));
    case Op::kThresholdedRelu: GE_UNARY(x > al ? x : V16{});
    case Op::kShrink: GE_UNARY(x < -al ? x + be : x > al ? x - be : V16{});
    case Op::kPow:
      if (al == 2.f) {
        GE_UNARY(x * x);
      } else if (al == 3.f) {
        GE_UNARY(x * x * x);
      } else if (al == 1.f) {
        std::memcpy(d, a, static_cast<size_t>(n) * sizeof(float));
      } else if (al == -1.f) {
        GE_UNARY(1.f / x);
      } else if (al == 0.5f) {  // numpy's x ** 0.5 is its sqrt (NaN at -inf, -0 at -0)
        for (int64_t i = 0; i < n; ++i) d[i] = __builtin_sqrtf(a[i]);
      } else if (al == -0.5f) {  // pow's edges: (-0) ** -0.5 = inf, (-inf) ** -0.5 = 0
        const float inf = std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < n; ++i) {
          const float v = 1.f / __builtin_sqrtf(a[i]);
          d[i] = a[i] == 0.f ? inf : a[i] == -inf ? 0.f : v;
        }
      } else {
        for (int64_t i = 0; i < n; ++i) d[i] = std::pow(a[i], al);
      }
      break;
  }
}

#undef GE_UNARY
#undef GE_BINARY

struct Program {
  std::vector<Step> steps;
  std::vector<Instr> instrs;
  std::vector<Source> sources;
  int regs = 0;
};

// One tile [s, s + len) of the domain. regs: the thread's registers (program.regs x kTile).
GE_INLINE void run_tile_body(const Program& p, const float* const* in, float* const* out, float* regs, int64_t s,
                             int64_t len, bool wide) {
  const int64_t n = (len + 15) & ~int64_t{15};
  auto reg = [regs](int r) { return regs + static_cast<int64_t>(r) * kTile; };
  for (const Step& st : p.steps) {
    switch (st.kind) {
      case Step::kLoad: {
        float* d = reg(st.reg);
        const float* src = in[st.index];
        const Source& so = p.sources[static_cast<size_t>(st.index)];
        if (so.full) {
          std::memcpy(d, src + s, static_cast<size_t>(len) * sizeof(float));
        } else if (so.span2 > 1) {  // two runs: copies within one period of the inner one
          int64_t e = s, i = 0;
          while (i < len) {
            const int64_t k = e % so.span;
            const int64_t run = std::min(len - i, so.span - k);  // (inner2 is a multiple of span)
            std::memcpy(d + i, src + ((e / so.inner2) % so.span2) * so.span + k, static_cast<size_t>(run) * sizeof(float));
            i += run;
            e += run;
          }
        } else if (so.span == 1) {
          std::fill(d, d + len, src[0]);
        } else if (so.inner == 1) {  // a period of span: runs of the input copied
          int64_t k = s % so.span, i = 0;
          while (i < len) {
            const int64_t run = std::min(len - i, so.span - k);
            std::memcpy(d + i, src + k, static_cast<size_t>(run) * sizeof(float));
            i += run;
            k = 0;
          }
        } else {  // each value repeated `inner` times
          int64_t q = s / so.inner, r = s % so.inner, i = 0;
          while (i < len) {
            const int64_t run = std::min(len - i, so.inner - r);
            std::fill(d + i, d + i + run, src[q % so.span]);
            i += run;
            r = 0;
            ++q;
          }
        }
        std::fill(d + len, d + n, 0.f);
        break;
      }
      case Step::kCompute: {
        const Instr& ins = p.instrs[static_cast<size_t>(st.index)];
        compute(ins, reg(ins.d), reg(ins.a), ins.b >= 0 ? reg(ins.b) : nullptr, n, wide);
        break;
      }
      case Step::kStore:
        std::memcpy(out[st.index] + s, reg(st.reg), static_cast<size_t>(len) * sizeof(float));
        break;
    }
  }
}

void run_tile_plain(const Program& p, const float* const* in, float* const* out, float* regs, int64_t s,
                    int64_t len) {
  run_tile_body(p, in, out, regs, s, len, false);
}
__attribute__((target("avx512f,fma"))) void run_tile_avx512(const Program& p, const float* const* in,
                                                                      float* const* out, float* regs, int64_t s,
                                                                      int64_t len) {
  run_tile_body(p, in, out, regs, s, len, true);
}

// The domain's axes in stored order: NHWC moves C last.
Shape stored(const Shape& s, Format f) {
  if (f != Format::kNhwc || s.size() < 3) return s;
  Shape t = {s[0]};
  t.insert(t.end(), s.begin() + 2, s.end());
  t.push_back(s[1]);
  return t;
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
    const Shape ys = stored(y.shape, y.format);
    for (int i = 0; i < n_in; ++i) {
      const TensorInfo& x = a.in(static_cast<size_t>(i));
      a.expect_dtype(x, DType::kFloat32, "input");
      Source s;
      if (x.numel == 1) {
        s.span = 1;
      } else if (x.shape == y.shape && x.format == y.format) {
        s.span = x.numel;
        s.full = true;
      } else if (x.plain() &&
                 (y.plain() || (y.channels_last() && per_channel_of(x.shape, y.shape) && x.numel == y.shape[1])) &&
                 source_of(y.channels_last() ? Shape{x.numel} : x.shape, ys, &s)) {
        if (s.span2 == 1 && s.span == numel_ && s.inner == 1) s.full = true;
      } else {
        invalid("input '", x.name, "' ", shape_str(x.shape), " (", format_name(x.format),
                ") must have the output's shape and format, one element, or (a plain output) broadcast over "
                "a contiguous run of its axes (or two, the second ending at the last axis) ",
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
