#include "io_plan.h"

#include <algorithm>
#include <limits>

namespace ge {

namespace {

bool overlaps(const TensorInfo& a, const TensorInfo& b) {
  return a.region == Region::kArena && b.region == Region::kArena && a.nbytes > 0 && b.nbytes > 0 &&
         a.offset < b.offset + b.nbytes && b.offset < a.offset + a.nbytes;
}

bool inside(const TensorInfo& v, const TensorInfo& t) {
  return v.offset >= t.offset && v.offset + v.nbytes <= t.offset + t.nbytes;
}

}  // namespace

IoPlan plan_io(const std::vector<TensorInfo>& tensors, const std::vector<TaskSpec>& tasks,
               const std::vector<int64_t>& inputs, const std::vector<int64_t>& outputs) {
  const size_t n = tensors.size();
  const int64_t kNever = std::numeric_limits<int64_t>::max();
  const int64_t end = static_cast<int64_t>(tasks.size());  // "after the last task"
  IoPlan plan;
  plan.slot.resize(n);
  plan.slot_offset.resize(n);
  for (size_t i = 0; i < n; ++i) {
    plan.slot[i] = tensors[i].slot;  // the arena or a weight segment (Model::load_tensors)
    plan.slot_offset[i] = tensors[i].slot_offset;
  }
  std::vector<std::vector<int64_t>> writers(n);
  std::vector<int64_t> first_read(n, kNever);
  std::vector<char> is_input(n, 0);
  for (int64_t i = 0; i < end; ++i) {
    for (int64_t o : tasks[static_cast<size_t>(i)].outputs) {
      if (o >= 0) writers[static_cast<size_t>(o)].push_back(i);
    }
    for (int64_t x : tasks[static_cast<size_t>(i)].inputs) {
      if (x >= 0) first_read[static_cast<size_t>(x)] = std::min(first_read[static_cast<size_t>(x)], i);
    }
  }
  for (int64_t o : outputs) first_read[static_cast<size_t>(o)] = std::min(first_read[static_cast<size_t>(o)], end);
  for (int64_t x : inputs) is_input[static_cast<size_t>(x)] = 1;

  // A view: an arena tensor no task writes, that is not a model input, that someone reads.
  auto is_view = [&](size_t v) {
    const TensorInfo& t = tensors[v];
    return t.region == Region::kArena && t.nbytes > 0 && writers[v].empty() && !is_input[v] &&
           first_read[v] != kNever;
  };
  // The last task before `before` that writes bytes overlapping tensor v, or -1.
  auto last_writer_before = [&](size_t v, int64_t before) {
    int64_t best = -1;
    for (size_t u = 0; u < n; ++u) {
      if (u == v || !overlaps(tensors[u], tensors[v])) continue;
      for (int64_t w : writers[u]) {
        if (w < before) best = std::max(best, w);
      }
    }
    return best;
  };
  std::vector<char> bound(n, 0);
  auto bind = [&](size_t t, const std::vector<size_t>& views) {
    const uint32_t s = static_cast<uint32_t>(plan.num_slots++);
    plan.slot[t] = s;
    plan.slot_offset[t] = 0;
    bound[t] = 1;
    for (size_t v : views) {
      plan.slot[v] = s;
      plan.slot_offset[v] = tensors[v].offset - tensors[t].offset;
      bound[v] = 1;
    }
    return static_cast<int>(s);
  };

  for (int64_t xi : inputs) {
    const size_t x = static_cast<size_t>(xi);
    const TensorInfo& X = tensors[x];
    int slot = -1;
    if (X.region == Region::kArena && X.nbytes > 0 && writers[x].empty() && X.plain() && !bound[x]) {
      bool ok = true;
      std::vector<size_t> views;
      for (size_t v = 0; v < n && ok; ++v) {
        if (v == x || !is_view(v) || !overlaps(tensors[v], X)) continue;
        if (last_writer_before(v, first_read[v]) >= 0) continue;  // a view of a computed tensor
        if (!inside(tensors[v], X) || bound[v]) {
          ok = false;
        } else {
          views.push_back(v);
        }
      }
      if (ok) slot = bind(x, views);
    }
    plan.input_slot.push_back(slot);
  }

  for (int64_t oi : outputs) {
    const size_t o = static_cast<size_t>(oi);
    const TensorInfo& O = tensors[o];
    int slot = -1;
    if (O.region == Region::kArena && O.nbytes > 0 && writers[o].size() == 1 && !is_input[o] && !bound[o] &&
        O.plain()) {
      const int64_t w = writers[o][0];
      bool ok = true;
      for (size_t u = 0; u < n && ok; ++u) {  // nothing overwrites it later
        if (u == o || !overlaps(tensors[u], O)) continue;
        for (int64_t j : writers[u]) ok = ok && j <= w;
      }
      std::vector<size_t> views;
      for (size_t v = 0; v < n && ok; ++v) {
        if (v == o || !is_view(v) || !overlaps(tensors[v], O) || first_read[v] <= w) continue;
        if (!inside(tensors[v], O) || bound[v]) {
          ok = false;
        } else {
          views.push_back(v);
        }
      }
      if (ok) slot = bind(o, views);
    }
    plan.output_slot.push_back(slot);
  }
  return plan;
}

}  // namespace ge
