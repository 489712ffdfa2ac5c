// graphengine._runtime.non_max_suppression: ONNX NonMaxSuppression for the host engine.
//
// A NonMaxSuppression whose tail the compiler cannot bound runs as a host step; there the
// numpy form (engine/ops/detection.py, the reference) pays a dozen array calls per kept box
// and class: 0.24 ms of a small detector's 0.54 ms run, where ONNX Runtime's whole run is
// 0.05 ms. This runs the same greedy rule (nms.h, shared with the device kernel) in one
// pass per (batch, class).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "nms.h"

namespace nb = nanobind;

namespace {

using Boxes = nb::ndarray<const float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;
using Scores = nb::ndarray<const float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;

nb::ndarray<nb::numpy, int64_t> nms(Boxes boxes, Scores scores, int64_t limit, double iou_threshold,
                                   std::optional<double> score_threshold, bool center) {
  const int64_t batches = static_cast<int64_t>(boxes.shape(0)), n = static_cast<int64_t>(boxes.shape(1));
  if (boxes.shape(2) != 4) throw std::invalid_argument("boxes must be [batches, boxes, 4]");
  if (static_cast<int64_t>(scores.shape(0)) != batches || static_cast<int64_t>(scores.shape(2)) != n)
    throw std::invalid_argument("scores [" + std::to_string(scores.shape(0)) + ", " +
                                std::to_string(scores.shape(1)) + ", " + std::to_string(scores.shape(2)) +
                                "] do not match boxes [" + std::to_string(batches) + ", " + std::to_string(n) +
                                ", 4]");
  const int64_t classes = static_cast<int64_t>(scores.shape(1));
  ge::nms::Params p;
  p.limit = limit;
  p.iou_threshold = iou_threshold;
  p.has_score_threshold = score_threshold.has_value();
  p.score_threshold = score_threshold.value_or(0.0);
  p.center = center;
  const int64_t most = ge::nms::max_selected(batches, classes, n, limit);
  auto* out = new int64_t[static_cast<size_t>(std::max<int64_t>(most * 3, 1))];
  int64_t rows = 0;
  try {
    std::vector<uint8_t> scratch(ge::nms::scratch_bytes(n, batches, 1));
    nb::gil_scoped_release unlocked;
    rows = ge::nms::select(boxes.data(), scores.data(), batches, classes, n, p, scratch.data(), out, 1);
  } catch (...) {
    delete[] out;
    throw;
  }
  nb::capsule owner(out, [](void* q) noexcept { delete[] static_cast<int64_t*>(q); });
  return nb::ndarray<nb::numpy, int64_t>(out, {static_cast<size_t>(rows), 3}, owner);
}

}  // namespace

void bind_host_nms(nb::module_& m) {
  m.def("non_max_suppression", &nms, nb::arg("boxes"), nb::arg("scores"), nb::arg("limit"),
        nb::arg("iou_threshold"), nb::arg("score_threshold").none(), nb::arg("center"),
        "ONNX NonMaxSuppression of float32 boxes [B, N, 4] and scores [B, C, N]: the selected "
        "(batch, class, box) rows as int64 [K, 3], at most `limit` per batch and class. "
        "Releases the GIL; raises ValueError when the shapes disagree.");
}
