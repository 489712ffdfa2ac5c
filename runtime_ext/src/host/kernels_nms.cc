// PaddedNonMaxSuppression: ONNX NonMaxSuppression inside a device program.
//
// Its output count depends on the data, so a plain NonMaxSuppression ended the device
// program, and the rest of the graph (a detector's Gathers of the selected boxes) ran as
// host steps, one Python round trip each. The compiler (engine/prepare/bounded_rows.py)
// sizes the selection by its bound instead: Y [M, 3] int64 with M = batches x classes x
// min(limit, boxes), the selected (batch, class, box) rows first and zero rows after them,
// and COUNT [1] int64, how many were selected. Row-wise ops after it run on all M rows
// inside the program, and the model's outputs keep their first COUNT rows.
//
// Inputs: boxes [B, N, 4] and scores [B, C, N] (float32), then the optional
// max_output_boxes_per_class (int64, one element), iou_threshold and score_threshold
// (float32, one element), read at each run. Attribute center_point_box.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "kernels.h"
#include "nms.h"

namespace ge {

namespace {

class PaddedNmsKernel : public Kernel {
 public:
  explicit PaddedNmsKernel(const KernelArgs& a)
      : boxes_(&a.in(0)), scores_(&a.in(1)), limit_(a.opt_in(2)), iou_(a.opt_in(3)), score_(a.opt_in(4)),
        y_(&a.out(0)), count_(&a.out(1)) {
    a.expect_inputs(2, 5);
    a.expect_outputs(2, 2);
    a.expect_dtype(*boxes_, DType::kFloat32, "boxes");
    a.expect_dtype(*scores_, DType::kFloat32, "scores");
    if (boxes_->rank() != 3 || boxes_->shape[2] != 4) invalid("boxes must be [batches, boxes, 4], got ", shape_str(boxes_->shape));
    if (scores_->rank() != 3 || scores_->shape[0] != boxes_->shape[0] || scores_->shape[2] != boxes_->shape[1]) {
      invalid("scores ", shape_str(scores_->shape), " do not match boxes ", shape_str(boxes_->shape));
    }
    auto one = [&](const TensorInfo* t, DType dt, const char* what) {
      if (t == nullptr) return;
      a.expect_dtype(*t, dt, what);
      if (t->numel != 1) invalid(what, " must have one element, got ", shape_str(t->shape));
    };
    one(limit_, DType::kInt64, "max_output_boxes_per_class");
    one(iou_, DType::kFloat32, "iou_threshold");
    one(score_, DType::kFloat32, "score_threshold");
    a.expect_dtype(*y_, DType::kInt64, "output Y");
    a.expect_dtype(*count_, DType::kInt64, "output COUNT");
    if (y_->rank() != 2 || y_->shape[1] != 3) invalid("output Y must be [rows, 3], got ", shape_str(y_->shape));
    if (count_->numel != 1) invalid("output COUNT must have one element, got ", shape_str(count_->shape));
    batches_ = boxes_->shape[0];
    n_ = boxes_->shape[1];
    classes_ = scores_->shape[1];
    rows_ = y_->shape[0];
    center_ = a.attr_int("center_point_box", 0) != 0;
    threads_ = std::max(1, omp_get_max_threads());  // the classes share the team
  }

  size_t workspace_bytes() const override { return nms::scratch_bytes(n_, batches_, threads_); }

  Status run(ExecContext& ctx) override {
    nms::Params p;
    p.limit = limit_ ? *ctx.ptr<const int64_t>(*limit_) : 0;
    p.iou_threshold = iou_ ? static_cast<double>(*ctx.ptr<const float>(*iou_)) : 0.0;
    p.has_score_threshold = score_ != nullptr;
    p.score_threshold = score_ ? static_cast<double>(*ctx.ptr<const float>(*score_)) : 0.0;
    p.center = center_;
    const int64_t most = nms::max_selected(batches_, classes_, n_, p.limit);
    if (most > rows_) {
      return Status::InvalidArgument(cat("max_output_boxes_per_class ", p.limit, " may select ", most,
                                         " rows, more than the ", rows_, " the program holds"));
    }
    int64_t* y = ctx.ptr<int64_t>(*y_);
    const int64_t kept = nms::select(ctx.ptr<const float>(*boxes_), ctx.ptr<const float>(*scores_), batches_,
                                     classes_, n_, p, ctx.workspace, y,
                                     std::min(threads_, std::max(1, omp_get_max_threads())));
    std::memset(y + kept * 3, 0, static_cast<size_t>(rows_ - kept) * 3 * sizeof(int64_t));
    *ctx.ptr<int64_t>(*count_) = kept;
    return Status::Ok();
  }

  std::string impl() const override { return "greedy"; }

 private:
  const TensorInfo *boxes_, *scores_, *limit_, *iou_, *score_, *y_, *count_;
  int64_t batches_ = 0, n_ = 0, classes_ = 0, rows_ = 0;
  bool center_ = false;
  int threads_ = 1;
};

}  // namespace

std::unique_ptr<Kernel> make_padded_nms(const KernelArgs& a) { return std::make_unique<PaddedNmsKernel>(a); }

}  // namespace ge
