// ONNX NonMaxSuppression's greedy selection, shared by the host engine's native step
// (host_nms.cc) and the device kernel that runs it inside a program (host/kernels_nms.cc).
//
// The arithmetic is the numpy reference's (engine/ops/detection.py) exactly: corners and
// IoU in double, term by term, candidates above the score threshold in order of score then
// index (NaN scores last), a candidate kept unless its IoU with a kept box is not <= the
// threshold (a NaN IoU suppresses).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ge::nms {

struct Params {
  int64_t limit = 0;  // max_output_boxes_per_class; <= 0 selects nothing
  double iou_threshold = 0.0;
  bool has_score_threshold = false;
  double score_threshold = 0.0;
  bool center = false;  // center_point_box: [x_center, y_center, width, height]
};

// Rows `select` may write: batches x classes x min(limit, boxes).
int64_t max_selected(int64_t batches, int64_t classes, int64_t boxes, int64_t limit);

// Scratch `select` needs for `boxes` boxes (64-byte aligned is enough).
// Scratch for `select` over `batches` x `boxes` with a team of `threads`.
size_t scratch_bytes(int64_t boxes, int64_t batches, int threads);

// Boxes [batches, n, 4] and scores [batches, classes, n], float32, C order. Writes the
// selected (batch, class, box) triples to `out` (room for max_selected rows) and returns
// how many rows it wrote.
// The selected (batch, class, box) rows into `out`, which must hold max_selected(...) rows
// (each (batch, class) selects into its own slot of them, in parallel, then the rows are
// packed in (batch, class) order); returns how many.
int64_t select(const float* boxes, const float* scores, int64_t batches, int64_t classes, int64_t n,
               const Params& p, void* scratch, int64_t* out, int threads);

}  // namespace ge::nms
