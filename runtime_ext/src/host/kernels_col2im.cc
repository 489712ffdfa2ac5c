// Col2Im (ONNX; torch's F.fold) over two spatial axes, float32: x [N, C * kh * kw, L] of
// blocks, L = oh * ow block positions, summed into y [N, C, H, W] where each block element
// lands (ki * dh - pt + oy * sh, kj * dw - pl + ox * sw); positions off the image drop. The
// compiler lowers the node with the image and block shapes resolved (attributes `image`,
// `block`, as the reference's constant inputs); overlapping blocks (VOLO's outlook
// attention: 3x3 blocks at stride 1 or 2) add up in block order, as the reference's
// loop over the block's elements does. Non-overlapping ones are a permutation the compiler
// writes as a Transpose instead (prepare/col2im.py).
#include <cstring>

#include "copy.h"
#include "kernels.h"

namespace ge {

namespace {

class Col2ImKernel : public Kernel {
 public:
  explicit Col2ImKernel(const KernelArgs& a) {
    a.expect_inputs(1, 1);
    a.expect_outputs(1, 1);
    x_ = &a.in(0);
    y_ = &a.out(0);
    a.expect_dtype(*x_, DType::kFloat32, "input");
    a.expect_dtype(*y_, DType::kFloat32, "output");
    const std::vector<int64_t> image = a.attr_ints("image", {}), block = a.attr_ints("block", {});
    if (image.size() != 2 || block.size() != 2) invalid("image and block must have 2 dims (2-D Col2Im only)");
    const std::vector<int64_t> dil = a.attr_ints("dilations", {1, 1}), str = a.attr_ints("strides", {1, 1}),
                               pads = a.attr_ints("pads", {0, 0, 0, 0});
    if (dil.size() != 2 || str.size() != 2 || pads.size() != 4) invalid("dilations, strides and pads must have 2, 2 and 4 values");
    for (int d = 0; d < 2; ++d) {
      if (image[d] < 1 || block[d] < 1 || dil[d] < 1 || str[d] < 1 || pads[d] < 0 || pads[d + 2] < 0) {
        invalid("image, block, dilations and strides must be >= 1 and pads >= 0");
      }
      h_[d] = image[d];
      k_[d] = block[d];
      d_[d] = dil[d];
      s_[d] = str[d];
      p_[d] = pads[d];
      const int64_t span = (block[d] - 1) * dil[d] + 1, room = image[d] + pads[d] + pads[d + 2];
      if (room < span) invalid("the padded image (", room, ") is smaller than a block (", span, ") on axis ", d);
      o_[d] = (room - span) / str[d] + 1;
    }
    if (x_->rank() != 3) invalid("input must be [N, C * block, L], got ", shape_str(x_->shape));
    const int64_t kk = k_[0] * k_[1];
    if (x_->shape[1] % kk != 0) invalid("input dim 1 (", x_->shape[1], ") is not a multiple of the block's ", kk, " elements");
    if (x_->shape[2] != o_[0] * o_[1]) {
      invalid("input has ", x_->shape[2], " blocks, the image and block give ", o_[0], " x ", o_[1]);
    }
    c_ = x_->shape[1] / kk;
    const Shape want{x_->shape[0], c_, h_[0], h_[1]};
    if (y_->shape != want) invalid("output must be ", shape_str(want), ", got ", shape_str(y_->shape));
  }

  Status run(ExecContext& ctx) override {
    const float* x = ctx.ptr<const float>(*x_);
    float* y = ctx.ptr<float>(*y_);
    const int64_t planes = x_->shape[0] * c_, kk = k_[0] * k_[1], l = o_[0] * o_[1];
    const int64_t plane = h_[0] * h_[1];
    for_rows(planes, planes * (kk * l + plane) * static_cast<int64_t>(sizeof(float)), [&](int64_t pc) {
      float* out = y + pc * plane;
      std::memset(out, 0, static_cast<size_t>(plane) * sizeof(float));
      const float* cols = x + pc * kk * l;
      for (int64_t ki = 0; ki < k_[0]; ++ki) {
        for (int64_t kj = 0; kj < k_[1]; ++kj) {
          const float* src = cols + (ki * k_[1] + kj) * l;
          for (int64_t oy = 0; oy < o_[0]; ++oy) {
            const int64_t row = ki * d_[0] - p_[0] + oy * s_[0];
            if (row < 0 || row >= h_[0]) continue;
            float* dst = out + row * h_[1];
            const float* s = src + oy * o_[1];
            const int64_t col0 = kj * d_[1] - p_[1];
            for (int64_t ox = 0; ox < o_[1]; ++ox) {
              const int64_t col = col0 + ox * s_[1];
              if (col >= 0 && col < h_[1]) dst[col] += s[ox];
            }
          }
        }
      }
    });
    return Status::Ok();
  }

 private:
  const TensorInfo* x_ = nullptr;
  const TensorInfo* y_ = nullptr;
  int64_t h_[2] = {}, k_[2] = {}, d_[2] = {}, s_[2] = {}, p_[2] = {}, o_[2] = {}, c_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> make_col2im(const KernelArgs& a) { return std::make_unique<Col2ImKernel>(a); }

}  // namespace ge
