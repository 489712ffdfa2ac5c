// SegmentMatMul: rows in consecutive segments, each through its own constant matrix.
//   x [R, K] float32, sizes [E] int64 (the segments' row counts, read at each run),
//   w [E, K, N] constant, optional bias [E, N] constant  ->  y [R, N]
// Row r of segment i: y[r] = x[r] w[i] (+ bias[i]). JetMoE's and Granite-MoE's experts
// (prepare/ragged_experts.py): the routed rows sorted by expert, split by each expert's
// count, one Linear a part. The sizes come from the data: each must be >= 0 and together
// R, else the run fails naming them (the model stays usable).
//
// One oneDNN matmul of B rows (weights reordered once per expert at load, all in one
// buffer) runs over each segment's rows in blocks, the arguments shifted per block and
// expert. A segment's last block runs past its end into the next segments' rows, which are
// computed after it and overwrite them; the rows go through a copy with spare rows (zeros)
// so that the last block reads and writes inside the workspace.
// Where there are at least kBig rows, a second matmul of kBig rows over the same weights
// takes a segment's rows while more than 3 small blocks' worth are left: every block reads
// its expert's whole matrix, so JetMoE's 80-row segments at batch 8 (a 1 MB matrix each)
// read it twice instead of five times.
#include <algorithm>
#include <cstring>

#include "dnnl_util.h"
#include "kernels.h"

namespace ge {

namespace {

using dims = dnnl::memory::dims;

class SegmentMatmulKernel : public Kernel {
 public:
  explicit SegmentMatmulKernel(const KernelArgs& a) : dev_(a.device) {
    a.expect_inputs(3, 4);
    a.expect_outputs(1, 1);
    x_ = &a.in(0);
    sizes_ = &a.in(1);
    const TensorInfo& w = a.in(2);
    const TensorInfo* bias = a.opt_in(3);
    y_ = &a.out(0);
    a.expect_dtype(*x_, DType::kFloat32, "x");
    a.expect_dtype(*sizes_, DType::kInt64, "sizes");
    a.expect_dtype(w, DType::kFloat32, "w");
    a.expect_dtype(*y_, DType::kFloat32, "output");
    if (x_->rank() != 2 || w.rank() != 3 || sizes_->rank() != 1) {
      invalid("x must be [R, K], sizes [E] and w [E, K, N], got ", shape_str(x_->shape), ", ",
              shape_str(sizes_->shape), ", ", shape_str(w.shape));
    }
    if (!w.constant() || !w.data) invalid("w must be a constant");
    rows_ = x_->shape[0];
    k_ = x_->shape[1];
    e_ = w.shape[0];
    n_ = w.shape[2];
    if (w.shape[1] != k_ || sizes_->shape[0] != e_) {
      invalid("w ", shape_str(w.shape), " and sizes ", shape_str(sizes_->shape), " do not fit x ", shape_str(x_->shape));
    }
    if (e_ < 1 || k_ < 1 || n_ < 1) invalid("empty segments, rows or columns");
    if (y_->shape != Shape{rows_, n_}) invalid("output must be ", shape_str({rows_, n_}), ", got ", shape_str(y_->shape));
    if (bias) {
      a.expect_dtype(*bias, DType::kFloat32, "bias");
      if (!bias->constant() || bias->shape != Shape{e_, n_}) invalid("bias must be a constant ", shape_str({e_, n_}));
    }
    block_ = std::clamp<int64_t>(rows_, 1, kSmall);
    const dnnl::engine& eng = host_engine(*dev_);
    const dnnl::memory::desc src(dims{block_, k_}, dt::f32, dims{k_, 1});
    const dnnl::memory::desc dst(dims{block_, n_}, dt::f32, dims{n_, 1});
    const dnnl::memory::desc wei_any(dims{k_, n_}, dt::f32, tag::any);
    const dnnl::memory::desc wei_plain(dims{k_, n_}, dt::f32, tag::ab);
    const dnnl::memory::desc bias_md(dims{1, n_}, dt::f32, tag::ab);
    const dnnl::primitive_attr attr = make_attr();
    dnnl::matmul::primitive_desc pd = bias ? dnnl::matmul::primitive_desc(eng, src, wei_any, bias_md, dst, attr)
                                           : dnnl::matmul::primitive_desc(eng, src, wei_any, dst, attr);
    wei_bytes_ = pd.weights_desc().get_size();
    weights_ = std::make_shared<AlignedBuffer>(wei_bytes_ * static_cast<size_t>(e_), false);
    const size_t plain_bytes = static_cast<size_t>(k_ * n_) * sizeof(float);
    for (int64_t i = 0; i < e_; ++i) {  // each expert's matrix in the primitive's layout
      const uint8_t* from = w.data + static_cast<size_t>(i) * plain_bytes;
      uint8_t* to = static_cast<uint8_t*>(weights_->data()) + static_cast<size_t>(i) * wei_bytes_;
      if (pd.weights_desc() == wei_plain) {
        std::memcpy(to, from, plain_bytes);
      } else {
        const auto done = reorder_constant(a, wei_plain, from, pd.weights_desc(), from);
        std::memcpy(to, done->data(), wei_bytes_);
      }
    }
    const dnnl::memory::desc src_big(dims{kBig, k_}, dt::f32, dims{k_, 1});
    const dnnl::memory::desc dst_big(dims{kBig, n_}, dt::f32, dims{n_, 1});
    if (rows_ >= kBig) {  // the big block reads the small one's weight layout, if oneDNN runs that well
      try {
        dnnl::matmul::primitive_desc big =
            bias ? dnnl::matmul::primitive_desc(eng, src_big, pd.weights_desc(), bias_md, dst_big, attr)
                 : dnnl::matmul::primitive_desc(eng, src_big, pd.weights_desc(), dst_big, attr);
        if (std::string(big.impl_info_str()).find("ref") == std::string::npos) {
          big_ = Prim(big);
          big_rows_ = kBig;
        }
      } catch (const dnnl::error&) {
        // no such matmul: small blocks only
      }
    }
    const int64_t spare = std::max(block_, big_rows_);
    a_at_ = plan_.add(static_cast<size_t>((rows_ + spare) * k_) * sizeof(float));
    y_at_ = plan_.add(static_cast<size_t>((rows_ + spare) * n_) * sizeof(float));
    prim_ = Prim(pd);
    prim_.arg(DNNL_ARG_SRC, src, Ref::workspace(a_at_));
    prim_.arg(DNNL_ARG_WEIGHTS, pd.weights_desc(), Ref::buffer(weights_->data()));
    if (bias) prim_.arg(DNNL_ARG_BIAS, bias_md, Ref::of(*bias));
    prim_.arg(DNNL_ARG_DST, dst, Ref::workspace(y_at_));
    if (big_rows_) {
      big_.arg(DNNL_ARG_SRC, src_big, Ref::workspace(a_at_));
      big_.arg(DNNL_ARG_WEIGHTS, pd.weights_desc(), Ref::buffer(weights_->data()));
      if (bias) big_.arg(DNNL_ARG_BIAS, bias_md, Ref::of(*bias));
      big_.arg(DNNL_ARG_DST, dst_big, Ref::workspace(y_at_));
      Prim::share_scratchpad(&plan_, {&prim_, &big_});
    } else {
      Prim::share_scratchpad(&plan_, {&prim_});
    }
    bias_ = bias != nullptr;
  }

  size_t workspace_bytes() const override { return plan_.total(); }
  void set_instances(int n) override {
    prim_.set_instances(n, host_engine(*dev_));
    if (big_rows_) big_.set_instances(n, host_engine(*dev_));
  }
  std::string impl() const override {
    return prim_.impl() + " " + std::to_string(block_) + (big_rows_ ? "/" + std::to_string(big_rows_) : "") +
           "-row blocks";
  }

  Status run(ExecContext& ctx) override {
    const int64_t* sizes = ctx.ptr<const int64_t>(*sizes_);
    int64_t total = 0;
    for (int64_t i = 0; i < e_; ++i) {
      if (sizes[i] < 0 || sizes[i] > rows_ - total) {
        return Status::InvalidArgument(cat("segment sizes must be >= 0 and add up to the ", rows_, " rows: size ",
                                           sizes[i], " of segment ", i, " after ", total, " rows"));
      }
      total += sizes[i];
    }
    if (total != rows_) {
      return Status::InvalidArgument(cat("segment sizes add up to ", total, ", not the ", rows_, " rows"));
    }
    float* a = reinterpret_cast<float*>(ctx.workspace + a_at_);
    float* y = reinterpret_cast<float*>(ctx.workspace + y_at_);
    std::memcpy(a, ctx.ptr<const float>(*x_), static_cast<size_t>(rows_ * k_) * sizeof(float));
    std::memset(a + rows_ * k_, 0, static_cast<size_t>(std::max(block_, big_rows_) * k_) * sizeof(float));
    int64_t start = 0;
    for (int64_t i = 0; i < e_; ++i) {
      const ptrdiff_t w_at = static_cast<ptrdiff_t>(static_cast<size_t>(i) * wei_bytes_);
      const ptrdiff_t b_at = static_cast<ptrdiff_t>(i * n_ * 4);
      for (int64_t r = start; r < start + sizes[i];) {
        const int64_t left = start + sizes[i] - r;
        // a big block while more than three small ones' worth is left (its tail, at most
        // kBig - 1 rows past the segment, lands in rows computed after it)
        Prim& p = big_rows_ && left > 3 * block_ ? big_ : prim_;
        if (bias_) {
          p.execute(ctx, {{DNNL_ARG_SRC, r * k_ * 4}, {DNNL_ARG_DST, r * n_ * 4}, {DNNL_ARG_WEIGHTS, w_at},
                          {DNNL_ARG_BIAS, b_at}});
        } else {
          p.execute(ctx, {{DNNL_ARG_SRC, r * k_ * 4}, {DNNL_ARG_DST, r * n_ * 4}, {DNNL_ARG_WEIGHTS, w_at}});
        }
        r += &p == &big_ ? big_rows_ : block_;
      }
      start += sizes[i];
    }
    std::memcpy(ctx.ptr<float>(*y_), y, static_cast<size_t>(rows_ * n_) * sizeof(float));
    return Status::Ok();
  }

 private:
  const Device* dev_;
  const TensorInfo* x_ = nullptr;
  const TensorInfo* sizes_ = nullptr;
  const TensorInfo* y_ = nullptr;
  static constexpr int64_t kSmall = 16, kBig = 64;
  int64_t rows_ = 0, k_ = 0, e_ = 0, n_ = 0, block_ = 1, big_rows_ = 0;
  size_t wei_bytes_ = 0, a_at_ = 0, y_at_ = 0;
  bool bias_ = false;
  std::shared_ptr<AlignedBuffer> weights_;
  Prim prim_, big_;
  WorkspacePlan plan_;
};

}  // namespace

std::unique_ptr<Kernel> make_segment_matmul(const KernelArgs& a) { return std::make_unique<SegmentMatmulKernel>(a); }

}  // namespace ge
