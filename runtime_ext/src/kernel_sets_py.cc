// graphengine._runtime.KernelSetChoice: the runtime's choice between a model's kernel sets
// (kernel_sets.h), bound on its own so tests can drive it with launch times of their
// choosing (a real model's times are the machine's).
#include <nanobind/nanobind.h>

#include <cstdint>

#include "kernel_sets.h"

namespace nb = nanobind;
using namespace nb::literals;

void bind_kernel_sets(nb::module_& m) {
  nb::class_<ge::KernelSetChoice>(
      m, "KernelSetChoice",
      "Which of a model's kernel sets (its team of threads, or one thread) a launch alone runs, "
      "from the median of each set's last launch times; Model keeps one per model.")
      .def(nb::init<>())
      .def(
          "pick",
          [](ge::KernelSetChoice& c, uint64_t now_ns) {
            const ge::KernelSetChoice::Pick p = c.pick(now_ns);
            return nb::make_tuple(p.narrow, p.warmup, p.probe);
          },
          "now_ns"_a, "The next launch alone: (narrow, warmup, probe); now_ns spaces the probes.")
      .def(
          "record",
          [](ge::KernelSetChoice& c, bool narrow, bool warmup, bool probe, uint64_t took_ns) {
            c.record({narrow, warmup, probe}, took_ns);
          },
          "narrow"_a, "warmup"_a, "probe"_a, "took_ns"_a, "Record a launch alone that ran that pick.")
      .def("time_ns", &ge::KernelSetChoice::time_ns, "narrow"_a,
           "A set's time: the median of its last launches (0 until measured).")
      .def_prop_ro("prefers_narrow", &ge::KernelSetChoice::prefers_narrow)
      .def_prop_ro("probe_every", &ge::KernelSetChoice::probe_every)
      .def_prop_ro_static("window", [](nb::handle) { return ge::KernelSetChoice::kWindow; });
}
