// graphengine._runtime.place_intervals: the memory planner's best-fit placement of buffers with
// interval lifetimes (engine/codegen/memory.py, `_place_intervals`).
//
// The compiler tries up to four orders of every device program's buffers; each placement
// asks, per buffer, which of those placed before it are alive at the same time and where the
// smallest gap between them is. In numpy that was a dozen array calls a buffer (~15 us):
// 4-16 ms of a 200-350-buffer model's compile, a tenth of it. The same rule here is a loop.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace nb = nanobind;

namespace {

using Column = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

struct Placed {
  int64_t off, size, start, end;
};

// Buffer i (in the given order) lives over steps [starts[i], ends[i]] and takes sizes[i] bytes
// (already aligned). Each takes the smallest gap, between the placed buffers whose lifetimes
// meet its own (taken by offset, then size), that it fits; the first of equal gaps; else the
// end of the last of them. Returns each buffer's offset.
nb::ndarray<nb::numpy, int64_t> place(Column starts, Column ends, Column sizes) {
  const size_t n = starts.shape(0);
  if (ends.shape(0) != n || sizes.shape(0) != n)
    throw std::invalid_argument("place_intervals: starts, ends and sizes differ in length (" + std::to_string(n) +
                                ", " + std::to_string(ends.shape(0)) + ", " + std::to_string(sizes.shape(0)) + ")");
  const int64_t* s = starts.data();
  const int64_t* e = ends.data();
  const int64_t* z = sizes.data();
  for (size_t i = 0; i < n; ++i) {
    if (z[i] < 0)
      throw std::invalid_argument("place_intervals: buffer " + std::to_string(i) + " has size " +
                                  std::to_string(z[i]));
  }
  auto* out = new int64_t[std::max<size_t>(n, 1)];
  try {
    nb::gil_scoped_release unlocked;
    std::vector<Placed> placed;  // by (offset, size)
    placed.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t size = z[i];
      int64_t cursor = 0, best = -1, best_gap = 0;
      for (const Placed& p : placed) {
        if (p.start > e[i] || p.end < s[i]) continue;  // never alive together
        const int64_t gap = p.off - cursor;
        if (gap >= size && (best < 0 || gap < best_gap)) {
          best = cursor;
          best_gap = gap;
        }
        int64_t top;
        if (__builtin_add_overflow(p.off, p.size, &top))
          throw std::overflow_error("place_intervals: offsets overflow int64");
        cursor = std::max(cursor, top);
      }
      if (best < 0) best = cursor;
      out[i] = best;
      const Placed mine{best, size, s[i], e[i]};
      auto at = std::upper_bound(placed.begin(), placed.end(), mine, [](const Placed& a, const Placed& b) {
        return a.off != b.off ? a.off < b.off : a.size < b.size;
      });
      placed.insert(at, mine);
    }
  } catch (...) {
    delete[] out;
    throw;
  }
  nb::capsule owner(out, [](void* q) noexcept { delete[] static_cast<int64_t*>(q); });
  return nb::ndarray<nb::numpy, int64_t>(out, {n}, owner);
}

}  // namespace

void bind_host_plan_memory(nb::module_& m) {
  m.def("place_intervals", &place, nb::arg("starts"), nb::arg("ends"), nb::arg("sizes"),
        "Best-fit offsets of buffers placed in the given order: buffer i lives over steps "
        "[starts[i], ends[i]] and takes sizes[i] bytes (int64 arrays of one length, sizes "
        "aligned); each takes the smallest gap between the placed buffers alive with it that "
        "fits it, else the end of them. int64 offsets, one per buffer; ValueError on a negative "
        "size.");
}
