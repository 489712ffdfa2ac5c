#include <nanobind/nanobind.h>
#include "oneapi/dnnl/dnnl.hpp"
namespace nb = nanobind;
NB_MODULE(_runtime, m) {
  m.def("dnnl_version", []() { auto v = dnnl::version(); return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch); });
}
