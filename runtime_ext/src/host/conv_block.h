// An inverted-residual block as one kernel (conv_block.cc): 1x1 expand -> 3x3 depthwise ->
// 1x1 project (+ residual), MobileNetV2's building block, with the expanded tensor kept in
// the core's cache instead of going to memory between three convolutions.
//
// Plain arrays and strides only (no oneDNN, no graph types): the ConvBlock kernel
// (kernels_conv.cc) builds one from a ConvBlock node the compiler fused
// (optimize/fusion/conv_block.py) and checks every shape first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ge::block {

// One sample of a float32 activation as stored: element (c, h, w) is at
// base[(c / 16) * cs + h * hs + w * ws + c % 16]. NHWC: cs = 16, ws = C, hs = W * C;
// nChw16c: cs = H * W * 16, ws = 16, hs = W * 16.
struct View {
  const float* base = nullptr;
  int64_t cs = 0, hs = 0, ws = 0;
};

struct Clip {
  bool on = false;
  float lo = 0.f, hi = 0.f;
};

struct Spec {
  int64_t h = 0, w = 0;        // input spatial size
  int64_t cin = 0, ce = 0, cout = 0;
  int64_t stride = 1;          // of the depthwise stage (1 or 2)
  bool expand = true;          // false: the block starts at the depthwise stage (ce == cin)
  bool residual = false;       // y += r (same shape as y)
  bool blocked_in = false;     // the input is nChw16c (zero-padded channels); else NHWC
  bool full_out = false;       // the output's (and residual's) last block may be written whole
  Clip act_e, act_d, act_p;    // after expand, depthwise, project
  int64_t ho() const { return (h - 1) / stride + 1; }
  int64_t wo() const { return (w - 1) / stride + 1; }
};

// Weights as ONNX stores them: expand [ce, cin] (+ bias [ce]), depthwise [ce, 9] (+ [ce]),
// project [cout, ce] (+ [cout]); biases may be null.
struct Weights {
  const float* we = nullptr;
  const float* be = nullptr;
  const float* wd = nullptr;
  const float* bd = nullptr;
  const float* wp = nullptr;
  const float* bp = nullptr;
};

class Block {
 public:
  Block(const Spec& s, const Weights& w);

  // Scratch (64-byte aligned) a run with up to `threads` threads needs.
  size_t scratch_bytes(int threads) const;

  // y = block(x) [+ r] for `n` samples; sample i of each view starts `*_ns` floats after
  // the previous one. Runs an OpenMP team of at most `threads`.
  void run(int64_t n, const View& x, int64_t x_ns, const View& y, int64_t y_ns, const View& r, int64_t r_ns,
           float* scratch, int threads) const;

  const Spec& spec() const { return s_; }

 private:
  void run_rows(const View& x, const View& y, const View& r, int64_t o0, int64_t o1, float* scratch) const;
  void run_channels(const View& x, const View& y, const View& r, float* scratch, int t, int nt) const;
  int64_t band_rows() const;
  size_t rows_scratch_floats() const;
  size_t channels_scratch_floats() const;
  bool by_channels(int64_t n) const;

  Spec s_;
  int64_t ceb_ = 0, coutb_ = 0, cin_k_ = 0;  // blocks of 16; the expand's K (cin or padded)
  // Packed weights, zero-padded to whole blocks of 16 channels, in one 64-byte aligned
  // store: expand [ceb][cin_k][16], its bias [ceb * 16], depthwise [ceb][9][16], its bias,
  // project [coutb][ceb * 16][16], its bias.
  std::vector<float> store_;
  const float* we_ = nullptr;
  const float* be_ = nullptr;
  const float* wd_ = nullptr;
  const float* bd_ = nullptr;
  const float* wp_ = nullptr;
  const float* bp_ = nullptr;
  const float* zero_ = nullptr;  // coutb * 16 zeros: the bias of a partial projection
};

// A classifier head as one kernel: 1x1 Conv (+ Clip/Relu) -> global average pool ->
// fully connected layer, y[n, classes] = fc(mean over pixels of act(conv(x))) + fc_b.
//
// At batch 1 the fully connected layer reads every weight once (MobileNetV2: 5 MB, from
// DRAM on this machine: ~130 us) while the convolution before it is compute bound (~200
// us). The head interleaves them: the conv's output channels go in chunks of 64; a chunk is
// pooled and multiplied into the classes at once (split K: each chunk adds its part of
// every class), and while a chunk's GEMM runs its tiles prefetch the next chunk's slab of
// fc weights, so the DRAM reads hide under the FMAs. The conv's output never goes to memory.
struct HeadSpec {
  int64_t rows = 1;            // samples per run (at most kMaxRows)
  int64_t pixels = 0;          // h * w of the conv's input (rows dense: pixel p at p * ws)
  int64_t cin = 0, cmid = 0, classes = 0;
  bool blocked_in = false;     // the input is nChw16c (zero-padded channels); else NHWC
  bool fc_transposed = true;   // fc is [classes, cmid] (Gemm transB=1), else [cmid, classes]
  Clip act;                    // of the conv
  static constexpr int64_t kMaxRows = 4;
};

struct HeadWeights {
  const float* w = nullptr;     // conv [cmid, cin]
  const float* b = nullptr;     // conv bias [cmid] or null
  const float* fc = nullptr;
  const float* fc_b = nullptr;  // [classes] or null
};

class Head {
 public:
  Head(const HeadSpec& s, const HeadWeights& w);
  size_t scratch_bytes(int threads) const;
  // y (dense [rows, classes]) for the spec's rows; sample i of x starts x_ns floats after
  // the previous one. Runs an OpenMP team of at most `threads`.
  void run(const View& x, int64_t x_ns, float* y, float* scratch, int threads) const;
  const HeadSpec& spec() const { return s_; }

 private:
  size_t parts_floats() const;
  size_t thread_floats() const;
  int64_t record_floats() const;
  void run_thread(const View& x, int64_t x_ns, float* parts, float* scratch, int t, int nt) const;
  void reduce(float* y, const float* parts, int t, int nt) const;

  HeadSpec s_;
  int64_t cmb_ = 0, cin_k_ = 0, ncb_ = 0, chunks_ = 0;
  // Per chunk of 4 conv blocks one record (conv weights, then fc slab; see the
  // constructor), the conv bias, the fc bias: zero-padded, 64-byte aligned.
  std::vector<float> store_;
  const float* rec_ = nullptr;
  const float* b_ = nullptr;
  const float* fc_b_ = nullptr;
};

// Whether this CPU runs the block kernel (AVX-512F and VL).
bool available();

}  // namespace ge::block
