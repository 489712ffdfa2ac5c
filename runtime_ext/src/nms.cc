#include "nms.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ge::nms {

namespace {

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

}  // namespace

int64_t max_selected(int64_t batches, int64_t classes, int64_t boxes, int64_t limit) {
  return limit <= 0 ? 0 : batches * classes * std::min(limit, boxes);
}

size_t scratch_bytes(int64_t boxes) {
  return static_cast<size_t>(boxes) * (sizeof(Corners) + 2 * sizeof(int64_t));
}

int64_t select(const float* boxes, const float* scores, int64_t batches, int64_t classes, int64_t n,
               const Params& p, void* scratch, int64_t* out) {
  Corners* box = static_cast<Corners*>(scratch);
  int64_t* order = reinterpret_cast<int64_t*>(box + n);
  int64_t* rest = order + n;
  int64_t rows = 0;
  for (int64_t b = 0; b < batches && p.limit > 0; ++b) {
    for (int64_t i = 0; i < n; ++i) box[i] = corners(boxes + (b * n + i) * 4, p.center);
    for (int64_t c = 0; c < classes; ++c) {
      const float* s = scores + (b * classes + c) * n;
      int64_t count = 0;
      for (int64_t i = 0; i < n; ++i)
        if (!p.has_score_threshold || static_cast<double>(s[i]) > p.score_threshold) order[count++] = i;
      // score descending, then index; NaN after every number (numpy's sort of -score)
      std::stable_sort(order, order + count, [s](int64_t i, int64_t j) {
        const float a = s[i], o = s[j];
        if (std::isnan(a)) return false;
        if (std::isnan(o)) return true;
        return a > o;
      });
      int64_t* cand = order;
      int64_t* spare = rest;
      for (int64_t kept = 0; count > 0 && kept < p.limit; ++kept) {
        const int64_t i = cand[0];
        out[rows * 3] = b;
        out[rows * 3 + 1] = c;
        out[rows * 3 + 2] = i;
        ++rows;
        int64_t left = 0;
        for (int64_t k = 1; k < count; ++k)
          if (iou(box[i], box[cand[k]]) <= p.iou_threshold) spare[left++] = cand[k];
        std::swap(cand, spare);
        count = left;
      }
    }
  }
  return rows;
}

}  // namespace ge::nms
