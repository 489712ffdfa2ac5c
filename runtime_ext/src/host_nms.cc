// graphengine._runtime.non_max_suppression: ONNX NonMaxSuppression for the host engine.
//
// The selected indices' count depends on the data, so the op runs as a host step; there the
// numpy form (engine/ops/detection.py, the reference) pays a dozen array calls per kept box
// and class: 0.24 ms of a small detector's 0.54 ms run, where ONNX Runtime's whole run is
// 0.05 ms. This is the same greedy rule in one pass per (batch, class), with the
// reference's arithmetic exactly: corners and IoU in double, term by term, candidates above
// the threshold in order of score then index (NaN scores last), a candidate kept unless
// its IoU with a kept box is not <= the threshold (a NaN IoU suppresses).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace nb = nanobind;

namespace {

using Boxes = nb::ndarray<const float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;
using Scores = nb::ndarray<const float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;

struct Corners {
  double y1, x1, y2, x2;
};

// numpy's minimum and maximum: a NaN in either gives NaN (std::min keeps its first
// operand when the second is NaN).
double nan_min(double a, double b) { return a != a || b != b ? std::numeric_limits<double>::quiet_NaN() : std::min(a, b); }
double nan_max(double a, double b) { return a != a || b != b ? std::numeric_limits<double>::quiet_NaN() : std::max(a, b); }

Corners corners(const float* b, bool center) {
  const double p = b[0], q = b[1], r = b[2], s = b[3];
  if (center) {  // [x_center, y_center, width, height]
    return {q - s / 2, p - r / 2, q + s / 2, p + r / 2};
  }
  return {nan_min(p, r), nan_min(q, s), nan_max(p, r), nan_max(q, s)};
}

// The reference's IoU: 0 where the boxes do not overlap, either is empty or the union is
// not positive (comparisons with NaN are false, so NaN coordinates give a NaN IoU).
double iou(const Corners& a, const Corners& r) {
  const double ih = nan_min(a.y2, r.y2) - nan_max(a.y1, r.y1);
  const double iw = nan_min(a.x2, r.x2) - nan_max(a.x1, r.x1);
  const double inter = ih * iw;
  const double a1 = (a.y2 - a.y1) * (a.x2 - a.x1);
  const double a2 = (r.y2 - r.y1) * (r.x2 - r.x1);
  const double uni = a1 + a2 - inter;
  if (ih <= 0 || iw <= 0 || a1 <= 0 || a2 <= 0 || uni <= 0) return 0.0;
  return inter / uni;
}

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
  std::vector<int64_t> picked;  // (batch, class, box) triples
  {
    nb::gil_scoped_release unlocked;
    const float* bdata = boxes.data();
    const float* sdata = scores.data();
    std::vector<Corners> box(static_cast<size_t>(n));
    std::vector<int64_t> order;
    std::vector<int64_t> rest;
    order.reserve(static_cast<size_t>(n));
    rest.reserve(static_cast<size_t>(n));
    for (int64_t b = 0; b < batches && limit > 0; ++b) {
      for (int64_t i = 0; i < n; ++i) box[i] = corners(bdata + (b * n + i) * 4, center);
      for (int64_t c = 0; c < classes; ++c) {
        const float* s = sdata + (b * classes + c) * n;
        order.clear();
        for (int64_t i = 0; i < n; ++i)
          if (!score_threshold || static_cast<double>(s[i]) > *score_threshold) order.push_back(i);
        // score descending, then index; NaN after every number (numpy's sort of -score)
        std::stable_sort(order.begin(), order.end(), [s](int64_t i, int64_t j) {
          const float a = s[i], o = s[j];
          if (std::isnan(a)) return false;
          if (std::isnan(o)) return true;
          return a > o;
        });
        int64_t kept = 0;
        while (!order.empty() && kept < limit) {
          const int64_t i = order.front();
          picked.insert(picked.end(), {b, c, i});
          ++kept;
          rest.clear();
          for (size_t k = 1; k < order.size(); ++k)
            if (iou(box[i], box[order[k]]) <= iou_threshold) rest.push_back(order[k]);
          order.swap(rest);
        }
      }
    }
  }
  const size_t rows = picked.size() / 3;
  auto* out = new int64_t[std::max<size_t>(picked.size(), 1)];
  std::copy(picked.begin(), picked.end(), out);
  nb::capsule owner(out, [](void* p) noexcept { delete[] static_cast<int64_t*>(p); });
  return nb::ndarray<nb::numpy, int64_t>(out, {rows, 3}, owner);
}

}  // namespace

void bind_host_nms(nb::module_& m) {
  m.def("non_max_suppression", &nms, nb::arg("boxes"), nb::arg("scores"), nb::arg("limit"),
        nb::arg("iou_threshold"), nb::arg("score_threshold").none(), nb::arg("center"),
        "ONNX NonMaxSuppression of float32 boxes [B, N, 4] and scores [B, C, N]: the selected "
        "(batch, class, box) rows as int64 [K, 3], at most `limit` per batch and class. "
        "Releases the GIL; raises ValueError when the shapes disagree.");
}
