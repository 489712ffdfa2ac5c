#include "nms.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

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

size_t scratch_bytes(int64_t boxes, int64_t batches, int threads) {
  const size_t per_thread = static_cast<size_t>(boxes) * 2 * sizeof(int64_t);  // order, rest
  return static_cast<size_t>(batches * boxes) * sizeof(Corners) + static_cast<size_t>(threads) * per_thread;
}

namespace {

// One (batch, class): its selected box indices, best first, into `kept` (at most the limit);
// returns how many. order / rest: n int64 of scratch each.
int64_t select_class(const Corners* box, const float* s, int64_t n, const Params& p, int64_t* order,
                     int64_t* rest, int64_t* kept_box) {
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
  int64_t kept = 0;
  for (; count > 0 && kept < p.limit; ++kept) {
    const int64_t i = cand[0];
    kept_box[kept] = i;
    int64_t left = 0;
    for (int64_t k = 1; k < count; ++k)
      if (iou(box[i], box[cand[k]]) <= p.iou_threshold) spare[left++] = cand[k];
    std::swap(cand, spare);
    count = left;
  }
  return kept;
}

}  // namespace

int64_t select(const float* boxes, const float* scores, int64_t batches, int64_t classes, int64_t n,
               const Params& p, void* scratch, int64_t* out, int threads) {
  if (p.limit <= 0 || batches * classes == 0) return 0;
  Corners* box = static_cast<Corners*>(scratch);
  int64_t* per_thread = reinterpret_cast<int64_t*>(box + batches * n);
  for (int64_t i = 0; i < batches * n; ++i) box[i] = corners(boxes + i * 4, p.center);
  // Each (batch, class) selects into its own slot of `out` (its most rows apart), in
  // parallel; then the slots are packed in (batch, class) order. A slot never starts before
  // the packed rows end, so packing moves rows forward only.
  const int64_t most = std::min(p.limit, n), pairs = batches * classes;
  std::vector<int64_t> kept(static_cast<size_t>(pairs));
  const int team = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, pairs)));
  // (the greedy loop tests up to most x n boxes a class: an SSD head's 4 classes x 540 boxes,
  // limit 15, took 37 us on one thread)
#pragma omp parallel num_threads(team) if (team > 1 && pairs * n * most >= 16384)
  {
    const int t = omp_get_thread_num();
    int64_t* order = per_thread + static_cast<int64_t>(t) * 2 * n;
    int64_t* rest = order + n;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bc = 0; bc < pairs; ++bc) {
      const int64_t b = bc / classes;
      int64_t* slot = out + bc * most * 3;
      // the box indices first (a column of the slot's rows), spread into rows below
      const int64_t k = select_class(box + b * n, scores + bc * n, n, p, order, rest, slot);
      for (int64_t r = k - 1; r >= 0; --r) {
        slot[r * 3 + 2] = slot[r];
        slot[r * 3] = b;
        slot[r * 3 + 1] = bc % classes;
      }
      kept[static_cast<size_t>(bc)] = k;
    }
  }
  int64_t rows = 0;
  for (int64_t bc = 0; bc < pairs; ++bc) {
    const int64_t k = kept[static_cast<size_t>(bc)];
    if (rows != bc * most && k > 0) {
      std::memmove(out + rows * 3, out + bc * most * 3, static_cast<size_t>(k) * 3 * sizeof(int64_t));
    }
    rows += k;
  }
  return rows;
}

}  // namespace ge::nms
