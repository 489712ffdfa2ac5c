// Split: one input cut along an axis into the node's outputs, any dtype. The sizes come
// from the attribute "split" (the compiler resolves the opset 13 input and opset 18's
// num_outputs into it) or, when absent, the ONNX rule for equal parts: ceil(dim / n)
// each, the last one smaller. Like Concat it cuts the bytes as stored, in any format every
// operand shares (LayoutRule::kConcat: a CSP block's channel Split between NHWC
// convolutions runs without a conversion on either side).
#include <algorithm>
#include <cstring>
#include <vector>

#include "copy.h"
#include "kernels.h"

namespace ge {

namespace {

class SplitKernel : public Kernel {
 public:
  explicit SplitKernel(const KernelArgs& a) {
    a.expect_inputs(1, 2);
    if (a.outputs.empty()) invalid("Split needs at least one output");
    a.expect_outputs(static_cast<int>(a.outputs.size()), static_cast<int>(a.outputs.size()));
    x_ = &a.in(0);
    const int rank = x_->rank();
    if (rank < 1) invalid("cannot split a scalar");
    const int ax = normalize_axis(a.attr_int("axis", 0), rank);
    const int64_t dim = x_->shape[ax];
    const int64_t n = static_cast<int64_t>(a.outputs.size());
    std::vector<int64_t> sizes = a.opt_in(1) ? a.const_ints(1) : a.attr_ints("split", {});
    if (sizes.empty()) {
      const int64_t chunk = (dim + n - 1) / n;
      for (int64_t k = 0; k < n; ++k) sizes.push_back(std::min(chunk, std::max<int64_t>(dim - chunk * k, 0)));
    }
    if (static_cast<int64_t>(sizes.size()) != n) {
      invalid("split has ", sizes.size(), " sizes for ", n, " outputs");
    }
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0) invalid("split sizes ", shape_str(sizes), " must not be negative");
      total = add_checked(total, s);
    }
    if (total != dim) invalid("split sizes ", shape_str(sizes), " do not sum to dim ", dim, " of axis ", ax);
    std::vector<int> axis_of;
    const Shape px = physical_dims(*x_, &axis_of);
    const int pa = axis_of[static_cast<size_t>(ax)];
    outer_ = 1;
    for (int d = 0; d < pa; ++d) outer_ *= px[d];
    inner_bytes_ = static_cast<int64_t>(dtype_size(x_->dtype));
    for (size_t d = static_cast<size_t>(pa) + 1; d < px.size(); ++d) inner_bytes_ *= px[d];
    row_bytes_ = px[static_cast<size_t>(pa)] * inner_bytes_;
    int64_t begin = 0;
    for (int64_t k = 0; k < n; ++k) {
      const TensorInfo& y = a.out(static_cast<size_t>(k));
      Shape want = x_->shape;
      want[ax] = sizes[k];
      if (y.dtype != x_->dtype || y.shape != want) {
        invalid("output ", k, " is ", type_str(y.dtype, y.shape), ", expected ", type_str(x_->dtype, want));
      }
      // An output in another format is format-invariant (checked at load): its bytes are
      // those of the input's format.
      TensorInfo as_x = y;
      as_x.format = x_->format;
      std::vector<int> unused;
      const int64_t len = physical_dims(as_x, &unused)[static_cast<size_t>(pa)];
      parts_.push_back({&y, begin * inner_bytes_, len * inner_bytes_});
      begin += len;
    }
  }

  Status run(ExecContext& ctx) override {
    const uint8_t* x = ctx.ptr(*x_);
    // The outputs' addresses once a run, not once a row and part: a channels-last gated
    // activation's halves are 512 rows of two 128-byte parts (14.7 us a Split, 1,024
    // address lookups and memcpy calls).
    uint8_t* outs[kInlineParts];
    std::vector<uint8_t*> more;
    uint8_t** y = outs;
    if (parts_.size() > kInlineParts) {
      more.resize(parts_.size());
      y = more.data();
    }
    for (size_t k = 0; k < parts_.size(); ++k) y[k] = ctx.ptr(*parts_[k].y);
    const size_t n = parts_.size();
    // Row by row of the input, like Concat's output: the input is read in order.
    for_rows(outer_, static_cast<int64_t>(x_->nbytes), [&](int64_t o) {
      const uint8_t* in = x + o * row_bytes_;
      for (size_t k = 0; k < n; ++k) {
        const Part& p = parts_[k];
        copy_bytes(y[k] + o * p.bytes, in + p.offset, p.bytes);
      }
    });
    return Status::Ok();
  }

 private:
  struct Part {
    const TensorInfo* y;
    int64_t offset;  // bytes into each outer row of the input
    int64_t bytes;   // bytes of the part per outer row
  };
  static constexpr size_t kInlineParts = 8;
  // A part's row: short ones (a few channels' worth) by a loop the compiler unrolls, the
  // rest by memcpy.
  static void copy_bytes(uint8_t* dst, const uint8_t* src, int64_t bytes) {
    if (bytes % 16 == 0 && bytes <= 512) {
      for (int64_t i = 0; i < bytes; i += 16) std::memcpy(dst + i, src + i, 16);
    } else if (bytes) {
      std::memcpy(dst, src, static_cast<size_t>(bytes));
    }
  }
  const TensorInfo* x_;
  std::vector<Part> parts_;
  int64_t outer_ = 1, inner_bytes_ = 0, row_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> make_split(const KernelArgs& a) { return std::make_unique<SplitKernel>(a); }

}  // namespace ge
