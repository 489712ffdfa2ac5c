// graphengine._runtime's side of native kernel plugins (plugin.h): loading a library,
// listing its kernels, and running one on numpy arrays for the host engine.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "plugin.h"

namespace nb = nanobind;

namespace {

using Array = nb::ndarray<nb::c_contig, nb::device::cpu>;

nb::dict describe(const ge::PluginKernelDef& d) {
  nb::dict r;
  r["op_type"] = d.op;
  r["library"] = d.library;
  r["min_inputs"] = d.min_inputs;
  r["max_inputs"] = d.max_inputs;
  r["num_outputs"] = d.num_outputs;
  std::vector<std::string> types;
  for (unsigned t = 0; t <= static_cast<unsigned>(ge::DType::kBool); ++t) {
    if (d.accepts(static_cast<ge::DType>(t))) types.push_back(ge::dtype_name(static_cast<ge::DType>(t)));
  }
  r["dtypes"] = types;
  return r;
}

nb::list load(const std::string& path, const std::vector<std::string>& reserved) {
  std::vector<const ge::PluginKernelDef*> defs;
  try {
    nb::gil_scoped_release release;
    defs = ge::load_kernel_plugin(path, reserved);
  } catch (const ge::Error& e) {
    throw nb::value_error(e.what());
  }
  nb::list out;
  for (const ge::PluginKernelDef* d : defs) out.append(describe(*d));
  return out;
}

// One operand: (dtype name, array) or None.
ge_tensor operand(nb::handle item, const char* what, size_t i, std::vector<std::vector<int64_t>>& dims) {
  ge_tensor t{};
  if (item.is_none()) return t;
  nb::tuple pair = nb::cast<nb::tuple>(item);
  if (pair.size() != 2) throw nb::value_error((std::string(what) + " entries are (dtype, array)").c_str());
  ge::DType dt;
  if (!ge::parse_dtype(nb::cast<std::string>(pair[0]), &dt)) {
    throw nb::value_error((std::string(what) + " " + std::to_string(i) + ": a dtype the runtime does not have").c_str());
  }
  Array a = nb::cast<Array>(pair[1]);
  if (a.itemsize() != ge::dtype_size(dt)) {
    throw nb::value_error((std::string(what) + " " + std::to_string(i) + ": the array's items are not its dtype's").c_str());
  }
  dims[i].assign(a.shape_ptr(), a.shape_ptr() + a.ndim());
  t.dtype = static_cast<int32_t>(dt);
  t.rank = static_cast<int32_t>(a.ndim());
  t.dims = dims[i].data();
  t.data = a.data();
  t.numel = static_cast<int64_t>(a.size());
  return t;
}

void run(const std::string& op, nb::list inputs, nb::list outputs, nb::dict attrs) {
  const ge::PluginKernelDef* def = ge::find_plugin_kernel(op);
  if (def == nullptr) throw nb::value_error(("no plugin kernel for '" + op + "'").c_str());
  std::vector<std::vector<int64_t>> in_dims(inputs.size()), out_dims(outputs.size());
  std::vector<ge_tensor> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i) ins.push_back(operand(inputs[i], "input", i, in_dims));
  for (size_t i = 0; i < outputs.size(); ++i) outs.push_back(operand(outputs[i], "output", i, out_dims));
  ge::Attrs at;
  for (auto [k, v] : attrs) {
    if (PyLong_Check(v.ptr()) && !PyBool_Check(v.ptr())) {
      at[nb::cast<std::string>(k)] = nb::cast<int64_t>(v);
    } else if (PyFloat_Check(v.ptr())) {
      at[nb::cast<std::string>(k)] = nb::cast<double>(v);
    }
  }
  ge::Status st;
  {
    nb::gil_scoped_release release;
    st = ge::run_plugin_kernel(*def, ins, outs, at);
  }
  if (!st.ok()) throw std::runtime_error(st.message());
}

}  // namespace

void bind_kernel_plugins(nb::module_& m) {
  m.def("load_kernel_plugin", &load, nb::arg("path"), nb::arg("reserved"),
        "Load a native kernel plugin (graphengine/plugin.h) and register its kernels, all or "
        "none: their descriptions as dicts. `reserved`: op types it may not take. Loading a "
        "file again returns its kernels. Raises ValueError naming the file and the problem.");
  m.def(
      "plugin_kernels",
      [] {
        nb::list out;
        for (const ge::PluginKernelDef* d : ge::plugin_kernels()) out.append(describe(*d));
        return out;
      },
      "The registered plugin kernels' descriptions.");
  m.def("run_plugin_kernel", &run, nb::arg("op"), nb::arg("inputs"), nb::arg("outputs"), nb::arg("attrs"),
        "Run plugin kernel `op` once: inputs and outputs are (dtype name, C-contiguous array) "
        "or None, the outputs allocated at their shapes; attrs: int and float values. "
        "Releases the GIL; raises RuntimeError with the kernel's message when it fails.");
}
