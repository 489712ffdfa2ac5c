// The Python boundary: graphengine._runtime.
//
// Converts the spec dict and numpy inputs into native types, releases the GIL around every
// call that blocks (load, execute), and maps a Status to a Python exception in exactly one
// place (raise_status).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <nanobind/stl/map.h>

// numpy's C API, for the per-run arrays: building an output through it takes ~1 us where
// nanobind's export (numpy.asarray over a buffer object) took 10-15 us with the caches
// cold after a long run. Imported in the module's init; host_budget.cc uses it too.
#define PY_ARRAY_UNIQUE_SYMBOL ge_runtime_numpy_api
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include "device.h"
#include "kernel.h"
#include "model.h"
#include "variable.h"
#include "host/peak.h"

namespace nb = nanobind;
using namespace nb::literals;

void bind_host_budget(nb::module_& m);  // host_budget.cc
void bind_host_nms(nb::module_& m);     // host_nms.cc
void bind_host_plan_memory(nb::module_& m);  // host_plan_memory.cc
void bind_kernel_plugins(nb::module_& m);  // plugin_py.cc
void bind_kernel_sets(nb::module_& m);     // kernel_sets_py.cc

namespace {

// Module-lifetime references to the exception types (owned by the module dict).
PyObject* g_error = nullptr;
PyObject* g_invalid = nullptr;

// The one status-to-exception helper.
PyObject* g_deadline = nullptr;
PyObject* g_cancelled = nullptr;

[[noreturn]] void raise_status(const ge::Status& s) {
  PyObject* type = g_error;
  if (s.code() == ge::Code::kInvalidArgument) type = g_invalid;
  if (s.code() == ge::Code::kDeadlineExceeded) type = g_deadline;
  if (s.code() == ge::Code::kCancelled) type = g_cancelled;
  PyErr_SetString(type, s.message().c_str());
  throw nb::python_error();
}

// A flag a caller sets (from any thread) to cancel a launch that waits for an instance.
struct CancelToken {
  std::atomic<bool> flag{false};
};

[[noreturn]] void spec_error(const std::string& msg) {
  raise_status(ge::Status::InvalidArgument("spec: " + msg));
}

// ---- spec conversion --------------------------------------------------------------------

nb::handle get(nb::dict d, const char* key, const std::string& where, bool required) {
  PyObject* v = PyDict_GetItemString(d.ptr(), key);  // borrowed
  if (!v && required) spec_error(where + "missing key '" + key + "'");
  return nb::handle(v);
}

bool is_int(nb::handle h) { return PyIndex_Check(h.ptr()) && !PyFloat_Check(h.ptr()); }

int64_t to_int(nb::handle h, const std::string& what) {
  if (!is_int(h)) spec_error(what + " must be an int");
  nb::object idx = nb::steal(PyNumber_Index(h.ptr()));
  if (!idx.is_valid()) {
    PyErr_Clear();
    spec_error(what + " must be an int");
  }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(idx.ptr(), &overflow);
  if (overflow || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    spec_error(what + " is out of range");
  }
  return v;
}

double to_float(nb::handle h, const std::string& what) {
  double v = PyFloat_AsDouble(h.ptr());
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    spec_error(what + " must be a number");
  }
  return v;
}

std::string to_str(nb::handle h, const std::string& what) {
  if (!PyUnicode_Check(h.ptr())) spec_error(what + " must be a str");
  Py_ssize_t n = 0;
  const char* s = PyUnicode_AsUTF8AndSize(h.ptr(), &n);
  if (!s) {
    PyErr_Clear();
    spec_error(what + " is not valid UTF-8");
  }
  return std::string(s, static_cast<size_t>(n));
}

bool is_sequence(nb::handle h) {
  return PySequence_Check(h.ptr()) && !PyUnicode_Check(h.ptr()) && !PyBytes_Check(h.ptr());
}

std::vector<nb::object> items(nb::handle h, const std::string& what) {
  if (!is_sequence(h)) spec_error(what + " must be a list");
  nb::object seq = nb::steal(PySequence_Fast(h.ptr(), "not a sequence"));
  if (!seq.is_valid()) {
    PyErr_Clear();
    spec_error(what + " must be a list");
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  std::vector<nb::object> r;
  r.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    r.push_back(nb::borrow(PySequence_Fast_GET_ITEM(seq.ptr(), i)));
  }
  return r;
}

std::vector<int64_t> to_ints(nb::handle h, const std::string& what) {
  std::vector<int64_t> r;
  for (const nb::object& o : items(h, what)) r.push_back(to_int(o, what + " item"));
  return r;
}

nb::dict to_dict(nb::handle h, const std::string& what) {
  if (!PyDict_Check(h.ptr())) spec_error(what + " must be a dict");
  return nb::borrow<nb::dict>(h);
}

ge::AttrValue to_attr(nb::handle h, const std::string& what) {
  if (is_int(h)) return to_int(h, what);
  if (PyUnicode_Check(h.ptr())) return to_str(h, what);
  if (is_sequence(h)) {
    std::vector<nb::object> xs = items(h, what);
    bool all_int = true;
    for (const nb::object& x : xs) all_int = all_int && is_int(x);
    if (all_int) {
      std::vector<int64_t> r;
      for (const nb::object& x : xs) r.push_back(to_int(x, what));
      return r;
    }
    std::vector<double> r;
    for (const nb::object& x : xs) r.push_back(to_float(x, what + " item"));
    return r;
  }
  return to_float(h, what);
}

// to_tensor and to_task: generated from engine/model.py (runtime_ext/tools/gen_spec.py).
#include "spec_read_gen.inc"

// ---- numpy conversion -------------------------------------------------------------------

using CpuArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

bool from_dlpack(nb::dlpack::dtype t, ge::DType* out) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes != 1) return false;
  auto code = static_cast<C>(t.code);
  if (code == C::Float && t.bits == 32) *out = ge::DType::kFloat32;
  else if (code == C::Float && t.bits == 64) *out = ge::DType::kFloat64;
  else if (code == C::Float && t.bits == 16) *out = ge::DType::kFloat16;
  else if (code == C::Int && t.bits == 64) *out = ge::DType::kInt64;
  else if (code == C::Int && t.bits == 32) *out = ge::DType::kInt32;
  else if (code == C::Int && t.bits == 16) *out = ge::DType::kInt16;
  else if (code == C::Int && t.bits == 8) *out = ge::DType::kInt8;
  else if (code == C::UInt && t.bits == 8) *out = ge::DType::kUInt8;
  else if (code == C::Bool && t.bits == 8) *out = ge::DType::kBool;
  else return false;
  return true;
}

int npy_type(ge::DType t) {
  switch (t) {
    case ge::DType::kFloat32: return NPY_FLOAT32;
    case ge::DType::kFloat64: return NPY_FLOAT64;
    case ge::DType::kFloat16: return NPY_FLOAT16;
    case ge::DType::kInt64: return NPY_INT64;
    case ge::DType::kInt32: return NPY_INT32;
    case ge::DType::kInt16: return NPY_INT16;
    case ge::DType::kInt8: return NPY_INT8;
    case ge::DType::kUInt8: return NPY_UINT8;
    case ge::DType::kBool: return NPY_BOOL;
  }
  return NPY_FLOAT32;
}

void free_capsule(PyObject* cap) { std::free(PyCapsule_GetPointer(cap, nullptr)); }

// A writeable numpy array that owns the result's buffer (freed with the array).
nb::object to_numpy(ge::HostResult& r) {
  std::vector<npy_intp> dims(r.shape.begin(), r.shape.end());
  uint8_t* data = r.data.data();
  nb::object owner = nb::steal(PyCapsule_New(data, nullptr, free_capsule));
  if (!owner.is_valid()) throw nb::python_error();
  r.data.release();  // the capsule frees it now
  nb::object arr = nb::steal(PyArray_New(&PyArray_Type, static_cast<int>(dims.size()), dims.data(),
                                         npy_type(r.dtype), nullptr, data, 0, NPY_ARRAY_CARRAY, nullptr));
  if (!arr.is_valid()) throw nb::python_error();
  if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject*>(arr.ptr()), owner.release().ptr()) < 0) {
    throw nb::python_error();
  }
  return arr;
}

// The runtime's dtype of a numpy array's, if it has one (by kind and size: int64 may be
// numpy's long or long long).
bool from_npy(PyArrayObject* a, ge::DType* out) {
  const npy_intp size = PyArray_ITEMSIZE(a);
  switch (PyArray_DESCR(a)->kind) {
    case 'f':
      if (size == 4) *out = ge::DType::kFloat32;
      else if (size == 8) *out = ge::DType::kFloat64;
      else if (size == 2) *out = ge::DType::kFloat16;
      else return false;
      return true;
    case 'i':
      if (size == 8) *out = ge::DType::kInt64;
      else if (size == 4) *out = ge::DType::kInt32;
      else if (size == 2) *out = ge::DType::kInt16;
      else if (size == 1) *out = ge::DType::kInt8;
      else return false;
      return true;
    case 'u':
      if (size != 1) return false;
      *out = ge::DType::kUInt8;
      return true;
    case 'b':
      if (size != 1) return false;
      *out = ge::DType::kBool;
      return true;
    default:
      return false;
  }
}

// A numpy array the runtime can read in place (C order, aligned, native byte order, a
// dtype it knows): its view, straight from the array's fields.
bool numpy_view(PyObject* o, ge::HostTensor* h) {
  if (!PyArray_Check(o)) return false;
  PyArrayObject* a = reinterpret_cast<PyArrayObject*>(o);
  ge::DType dt;
  if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a) || !PyArray_ISNOTSWAPPED(a) ||
      !from_npy(a, &dt)) {
    return false;
  }
  const int ndim = PyArray_NDIM(a);
  h->shape.resize(static_cast<size_t>(ndim));
  for (int d = 0; d < ndim; ++d) h->shape[d] = static_cast<int64_t>(PyArray_DIM(a, d));
  h->dtype = dt;
  h->data = PyArray_DATA(a);
  h->nbytes = static_cast<size_t>(PyArray_NBYTES(a));
  return true;
}

// Fills `h` with a C-contiguous, native-byte-order view of `obj`; `keep` receives the
// object that owns the memory. An array that already is one is used as it is (zero-copy);
// anything else is converted once by numpy, and the bytes converted are added to
// `*converted`. If the dtype is not one the runtime knows (e.g. complex), `h->dtype` stays
// empty and `h` only carries the names for the error message.
void to_host(nb::handle obj, nb::object* keep, ge::HostTensor* h, uint64_t* converted) {
  if (numpy_view(obj.ptr(), h)) {
    *keep = nb::borrow(obj);
    return;
  }
  CpuArray view;
  nb::object arr;
  bool ok = nb::try_cast(obj, view, false);  // no conversion: the caller's own buffer
  if (ok) {
    arr = nb::borrow(obj);
  } else {
    nb::object np = nb::module_::import_("numpy");
    arr = np.attr("asarray")(obj, "order"_a = "C");
    ok = nb::try_cast(arr, view, false);
    if (!ok && !nb::cast<bool>(arr.attr("dtype").attr("isnative"))) {
      // Non-native byte order: DLPack cannot describe it; convert once.
      arr = arr.attr("astype")(arr.attr("dtype").attr("newbyteorder")("="));
      ok = nb::try_cast(arr, view, false);
    }
    if (ok) *converted += view.nbytes();
  }
  *keep = arr;
  if (!ok || !from_dlpack(view.dtype(), &h->dtype.emplace())) {
    h->dtype.reset();
    h->type_name = nb::cast<std::string>(nb::str(arr.attr("dtype").attr("name")));
    for (nb::handle d : nb::borrow<nb::tuple>(arr.attr("shape"))) {
      h->shape.push_back(nb::cast<int64_t>(d));
    }
    return;
  }
  h->shape.resize(view.ndim());
  for (size_t i = 0; i < view.ndim(); ++i) h->shape[i] = static_cast<int64_t>(view.shape(i));
  h->data = view.data();
  h->nbytes = view.nbytes();
}


// ---- Python classes ---------------------------------------------------------------------

struct PyModel {
  std::unique_ptr<ge::Model> model;
  nb::list weights;  // the caller's weight arrays the model uses in place, kept alive
  // bind_names(): the dict key of each input (in input order) and, per named output, its
  // key and the index of the output it is. Empty until bound.
  std::vector<nb::object> in_keys;
  std::vector<std::pair<nb::object, size_t>> out_keys;
  std::vector<std::pair<nb::object, nb::object>> out_consts;  // (key, array) handed out as copies
  bool bound = false;
};

// Why run_named() did not run: the request is not exactly the bound signature. `input` is
// the key of the input concerned (None when the request as a whole is off), `kind` one of
// not_a_dict, count, missing, not_an_array, dtype, shape. The caller words the error, or
// converts what it can (lists, other byte orders, strided arrays) and runs it otherwise.
struct RunMismatch {
  nb::object input;
  std::string kind;
};

bool is_list_like(nb::handle h);

void model_init(PyModel* self, std::shared_ptr<ge::Device> device, nb::dict spec, int instances) {
  ge::ModelSpec s = to_model_spec(spec);  // generated (spec_read_gen.inc): all but the weights

  // "weights": one uint8 array, or a list of them (segments of the weight region).
  std::vector<nb::object> keep;  // the arrays used in place, or the copies load() reads
  if (nb::handle w = get(spec, "weights", "", false); w.is_valid() && !w.is_none()) {
    std::vector<nb::object> parts;
    if (is_list_like(w)) {
      parts = items(w, "weights");
    } else {
      parts.push_back(nb::borrow(w));
    }
    for (nb::object& part : parts) {
      CpuArray view;
      ge::ModelSpec::WeightSegment seg;
      if (nb::try_cast(part, view, false) && view.dtype() == nb::dtype<uint8_t>() &&
          reinterpret_cast<uintptr_t>(view.data()) % 16 == 0) {
        // Used in place for the model's lifetime (the host device's memory is the host's).
        seg.borrowed = true;
        keep.push_back(part);
      } else {
        nb::object arr = nb::module_::import_("numpy").attr("ascontiguousarray")(part);
        if (!nb::try_cast(arr, view, false)) spec_error("weights must be numpy uint8 arrays");
        keep.push_back(arr);  // copied by the model during load
      }
      seg.data = static_cast<const uint8_t*>(view.data());
      seg.size = view.nbytes();
      s.weights.push_back(seg);
    }
  }

  // "variables": the session's Variable objects the tensors of region "variable" index.
  if (nb::handle v = get(spec, "variables", "", false); v.is_valid() && !v.is_none()) {
    for (const nb::object& o : items(v, "variables")) {
      std::shared_ptr<ge::Variable> var;
      if (!nb::try_cast(o, var, false) || !var) spec_error("variables must be graphengine._runtime.Variable objects");
      s.variables.push_back(std::move(var));
    }
  }

  std::unique_ptr<ge::Model> model;
  ge::Status st;
  {
    nb::gil_scoped_release release;
    st = ge::Model::load(std::move(device), s, instances, &model);
  }
  if (!st.ok()) raise_status(st);
  nb::list borrowed;
  for (size_t i = 0; i < s.weights.size(); ++i) {
    if (s.weights[i].borrowed) borrowed.append(keep[i]);
  }
  new (self) PyModel{std::move(model), std::move(borrowed)};
}

bool is_list_like(nb::handle h) { return PyList_Check(h.ptr()) || PyTuple_Check(h.ptr()); }

// The caller's deadline (seconds from now, or None) and cancel token (or None) for the wait
// for a free instance, and where the queue time goes.
void set_limits(ge::ExecRequest* req, nb::handle deadline, nb::handle cancel, uint64_t* queue_ns) {
  if (deadline.is_valid() && !deadline.is_none()) {
    // Bounded: a day at most (a larger number is no deadline at all).
    const double seconds = std::clamp(nb::cast<double>(deadline), 0.0, 86400.0);
    req->has_deadline = true;
    req->deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(seconds));
  }
  if (cancel.is_valid() && !cancel.is_none()) req->cancel = &nb::cast<CancelToken&>(cancel).flag;
  req->queue_ns = queue_ns;
}

void put_timing(nb::handle timing, uint64_t queue_ns) {
  if (timing.is_valid() && !timing.is_none()) {
    nb::cast<nb::dict>(timing)["queue_seconds"] = static_cast<double>(queue_ns) * 1e-9;
  }
}

nb::object model_execute(PyModel& self, nb::handle inputs, int64_t iterations, bool return_all,
                         nb::handle deadline, nb::handle cancel, nb::handle timing) {
  if (!is_sequence(inputs)) {
    raise_status(ge::Status::InvalidArgument("execute() takes a list of numpy arrays"));
  }
  std::vector<nb::object> objs = items(inputs, "inputs");
  // One list per iteration (lists of arrays), or one list of arrays for every iteration.
  bool per_iteration = iterations > 1 && !objs.empty();
  for (const nb::object& o : objs) per_iteration = per_iteration && is_list_like(o);
  std::vector<std::vector<nb::object>> lists;
  if (per_iteration) {
    for (const nb::object& o : objs) lists.push_back(items(o, "inputs"));
  } else {
    lists.push_back(std::move(objs));
  }
  ge::ExecRequest req;
  req.iterations = iterations;
  req.return_all = return_all;
  uint64_t queue_ns = 0;
  set_limits(&req, deadline, cancel, &queue_ns);
  std::vector<std::vector<nb::object>> keep(lists.size());
  for (size_t i = 0; i < lists.size(); ++i) {
    keep[i].resize(lists[i].size());
    req.inputs.emplace_back(lists[i].size());
    for (size_t k = 0; k < lists[i].size(); ++k) {
      to_host(lists[i][k], &keep[i][k], &req.inputs[i][k], &req.converted_bytes);
    }
  }
  std::vector<std::vector<ge::HostResult>> results;
  ge::Status st;
  {
    nb::gil_scoped_release release;
    st = self.model->execute(req, &results);
  }
  put_timing(timing, queue_ns);
  if (!st.ok()) raise_status(st);
  auto as_list = [](std::vector<ge::HostResult>& rs) {
    nb::list out;
    for (ge::HostResult& r : rs) out.append(to_numpy(r));
    return out;
  };
  if (!return_all) return as_list(results.back());
  nb::list all;
  for (auto& rs : results) all.append(as_list(rs));
  return all;
}

void model_bind_names(PyModel& self, nb::handle inputs, nb::handle outputs, nb::handle constants) {
  const ge::Model& m = *self.model;
  std::vector<nb::object> ins = items(inputs, "inputs");
  if (ins.size() != m.inputs().size()) {
    raise_status(ge::Status::InvalidArgument("bind_names: " + std::to_string(ins.size()) + " input names for " +
                                             std::to_string(m.inputs().size()) + " inputs"));
  }
  std::vector<std::pair<nb::object, size_t>> outs;
  for (const nb::object& o : items(outputs, "outputs")) {
    std::vector<nb::object> pair = items(o, "outputs item");
    int64_t index = pair.size() == 2 ? to_int(pair[1], "output index") : -1;
    if (index < 0 || static_cast<size_t>(index) >= m.outputs().size()) {
      raise_status(ge::Status::InvalidArgument("bind_names: each output is (name, index) with index in [0, " +
                                               std::to_string(m.outputs().size()) + ")"));
    }
    outs.emplace_back(nb::str(pair[0]), static_cast<size_t>(index));
  }
  std::vector<std::pair<nb::object, nb::object>> consts;
  if (constants.is_valid() && !constants.is_none()) {
    for (auto [k, v] : to_dict(constants, "constants")) {
      if (!PyArray_CheckExact(v.ptr())) raise_status(ge::Status::InvalidArgument("bind_names: constants are numpy arrays"));
      consts.emplace_back(nb::str(k), nb::borrow(v));
    }
  }
  self.in_keys.clear();
  for (const nb::object& o : ins) self.in_keys.push_back(nb::str(o));
  self.out_keys = std::move(outs);
  self.out_consts = std::move(consts);
  self.bound = true;
}

// The per-request path of a bound model: {name: array} in, {name: array} out, in one call
// (after a long run the caller's caches are cold, and every Python frame between the
// request and the model costs microseconds). None unless `inputs` is a dict holding exactly
// the bound names, each a C-contiguous numpy.ndarray of the input's dtype and shape: the
// caller's general path converts anything else and words its errors.
nb::object model_run_named(PyModel& self, nb::handle inputs, nb::handle deadline, nb::handle cancel,
                           nb::handle timing) {
  const ge::Model& m = *self.model;
  if (!self.bound) raise_status(ge::Status::InvalidArgument("run_named: bind_names() first"));
  const size_t n = self.in_keys.size();
  auto mismatch = [](nb::handle input, const char* kind) {
    return nb::cast(RunMismatch{input.is_valid() ? nb::borrow(input) : nb::none(), kind});
  };
  if (!PyDict_CheckExact(inputs.ptr())) return mismatch(nb::handle(), "not_a_dict");
  ge::ExecRequest req;
  req.inputs.emplace_back(n);
  std::vector<ge::HostTensor>& hosts = req.inputs[0];
  // Our own references: with the GIL released, another thread may replace the dict's items.
  std::vector<nb::object> keep(n);
  for (size_t i = 0; i < n; ++i) {
    PyObject* o = PyDict_GetItemWithError(inputs.ptr(), self.in_keys[i].ptr());
    if (o == nullptr) {
      if (PyErr_Occurred()) throw nb::python_error();
      return mismatch(self.in_keys[i], "missing");
    }
    const ge::TensorInfo& t = *m.inputs()[i];
    ge::HostTensor& h = hosts[i];
    if (!PyArray_CheckExact(o) || !numpy_view(o, &h)) return mismatch(self.in_keys[i], "not_an_array");
    if (*h.dtype != t.dtype) return mismatch(self.in_keys[i], "dtype");
    if (h.shape != t.shape) return mismatch(self.in_keys[i], "shape");
    keep[i] = nb::borrow(o);
  }
  if (PyDict_Size(inputs.ptr()) != static_cast<Py_ssize_t>(n)) return mismatch(nb::handle(), "count");
  uint64_t queue_ns = 0;
  set_limits(&req, deadline, cancel, &queue_ns);
  std::vector<std::vector<ge::HostResult>> results;
  ge::Status st;
  {
    nb::gil_scoped_release release;
    st = self.model->execute(req, &results);
  }
  put_timing(timing, queue_ns);
  if (!st.ok()) raise_status(st);
  std::vector<ge::HostResult>& rs = results.back();
  std::vector<nb::object> arrays(rs.size());
  nb::dict out;
  for (const auto& [key, index] : self.out_keys) {
    if (!arrays[index].is_valid()) arrays[index] = to_numpy(rs[index]);
    out[key] = arrays[index];
  }
  for (const auto& [key, array] : self.out_consts) {  // a copy: callers may write into it
    out[key] = nb::steal(PyArray_NewCopy(reinterpret_cast<PyArrayObject*>(array.ptr()), NPY_CORDER));
  }
  return out;
}

nb::dict model_stats(PyModel& self) {
  ge::ModelStats s = self.model->stats();
  nb::dict d;
  d["runs"] = s.runs;
  d["iterations"] = s.iterations;
  d["failures"] = s.failures;
  d["seconds"] = s.seconds;
  d["stream_seconds"] = s.stream_seconds;
  d["bytes_copied"] = s.bytes_copied;
  d["bytes_zero_copy"] = s.bytes_zero_copy;
  d["arena_bytes"] = s.arena_bytes;
  d["weight_bytes"] = s.weight_bytes;
  d["prepared_bytes"] = s.prepared_bytes;
  d["prepared_borrowed_bytes"] = s.prepared_borrowed_bytes;
  d["workspace_bytes"] = s.workspace_bytes;
  d["instances"] = s.instances;
  d["streams"] = s.streams;
  d["threads_per_stream"] = s.threads_per_stream;
  d["tasks"] = s.tasks;
  d["peak_waiting"] = s.peak_waiting;
  d["narrow_runs"] = s.narrow_runs;
  d["probe_warmups"] = s.probe_warmups;
  d["serial_runs"] = s.serial_runs;
  d["narrow_built"] = s.narrow_built;
  return d;
}

ge::Attrs attrs_of(nb::handle attrs) {
  ge::Attrs at;
  if (attrs.is_valid() && !attrs.is_none()) {
    for (auto [k, v] : to_dict(attrs, "attrs")) {
      std::string key = to_str(k, "attr name");
      at[key] = to_attr(v, "attr '" + key + "'");
    }
  }
  return at;
}

// The host backend's device for the module-level questions (supported_ops, kernel_info,
// ...): its lanes never start, since no model is loaded on it. Never destroyed.
const ge::Device& host_device() {
  static const auto* d = new std::shared_ptr<ge::Device>(ge::create_device("host", 0));
  return **d;
}

nb::dict kernel_info_py(const ge::Device& device, const std::string& op, nb::handle dtypes, nb::handle shapes,
                        nb::handle attrs) {
  std::vector<std::string> dt;
  for (const nb::object& o : items(dtypes, "dtypes")) dt.push_back(o.is_none() ? "" : to_str(o, "dtypes item"));
  std::vector<ge::Shape> sh;
  for (const nb::object& o : items(shapes, "shapes")) sh.push_back(o.is_none() ? ge::Shape{} : to_ints(o, "shape"));
  ge::KernelInfo info = device.kernel_info(op, dt, sh, attrs_of(attrs));
  nb::dict d;
  d["supported"] = info.supported;
  d["reason"] = info.reason;
  d["preferred_format"] = info.preferred_format;
  d["formats"] = info.formats;
  return d;
}

nb::dict caps_py(const ge::Device& device) {
  const ge::DeviceCaps c = device.caps();
  nb::dict d;
  d["isa"] = c.isa;
  d["blocked_format"] = c.blocked_format;
  d["conv_blocks"] = c.conv_blocks;
  d["epilogues"] = c.epilogues;
  d["conv_activation2"] = c.conv_activation2;
  d["max_weight_segments"] = c.max_weight_segments;
  d["library"] = c.library;
  d["host_visible"] = device.host_visible();
  return d;
}

}  // namespace

// ---- variables ----------------------------------------------------------------------------

std::shared_ptr<ge::Variable> variable_new(std::shared_ptr<ge::Device> device, nb::handle name, nb::handle dtype,
                                           nb::handle shape) {
  const std::string n = to_str(name, "Variable: name");
  ge::DType dt;
  if (!ge::parse_dtype(to_str(dtype, "Variable: dtype"), &dt)) {
    raise_status(ge::Status::InvalidArgument("Variable '" + n + "': unknown dtype '" + nb::cast<std::string>(nb::str(dtype)) + "'"));
  }
  ge::Shape sh = to_ints(shape, "Variable: shape");
  try {
    nb::gil_scoped_release release;  // zero-filling a large variable takes a while
    return std::make_shared<ge::Variable>(std::move(device), n, dt, std::move(sh));
  } catch (const ge::Error& e) {
    raise_status(e.status());
  } catch (const std::bad_alloc&) {
    raise_status(ge::Status::Internal("Variable '" + n + "': out of device memory"));
  }
}

// A C-contiguous, aligned, native-order numpy array of the variable's dtype and shape, or
// InvalidArgument naming what differs.
PyArrayObject* variable_array(const ge::Variable& v, nb::handle arr, bool writable) {
  const std::string what = "variable '" + v.name() + "': ";
  if (!PyArray_Check(arr.ptr())) raise_status(ge::Status::InvalidArgument(what + "expected a numpy array"));
  PyArrayObject* a = reinterpret_cast<PyArrayObject*>(arr.ptr());
  ge::DType dt;
  ge::Shape sh(static_cast<size_t>(PyArray_NDIM(a)));
  for (int d = 0; d < PyArray_NDIM(a); ++d) sh[d] = static_cast<int64_t>(PyArray_DIM(a, d));
  if (!from_npy(a, &dt) || dt != v.dtype() || sh != v.shape()) {
    const std::string got = nb::cast<std::string>(nb::str(arr.attr("dtype"))) + ge::shape_str(sh);
    raise_status(ge::Status::InvalidArgument(what + "expected " + ge::type_str(v.dtype(), v.shape()) + ", got " + got));
  }
  if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a) || !PyArray_ISNOTSWAPPED(a) ||
      (writable && !PyArray_ISWRITEABLE(a))) {
    raise_status(ge::Status::InvalidArgument(what + "the array must be C-contiguous, aligned, in native byte order" +
                                             (writable ? std::string(" and writable") : std::string())));
  }
  return a;
}

void bind_variables(nb::module_& m) {
  nb::class_<ge::Variable>(m, "Variable",
                           "A named tensor in a device's memory that outlives runs: models loaded with it in "
                           "spec['variables'] read and write its bytes in place. Zero-filled at creation; "
                           "dtype and shape are fixed. Unsynchronized: the owner orders runs, reads and writes.")
      .def(nb::new_(&variable_new), "device"_a, "name"_a, "dtype"_a, "shape"_a,
           "Allocates the variable on `device`. Raises InvalidArgument for a bad dtype or shape.")
      .def_prop_ro("name", [](const ge::Variable& v) { return v.name(); })
      .def_prop_ro("dtype", [](const ge::Variable& v) { return std::string(ge::dtype_name(v.dtype())); })
      .def_prop_ro("shape", [](const ge::Variable& v) { return v.shape(); })
      .def_prop_ro("nbytes", [](const ge::Variable& v) { return v.nbytes(); })
      .def(
          "read_into",
          [](const ge::Variable& v, nb::handle out) {
            PyArrayObject* a = variable_array(v, out, true);
            nb::gil_scoped_release release;
            v.read(PyArray_DATA(a));
          },
          "out"_a, "Copies the value into `out` (a writable numpy array of its dtype and shape). Blocks.")
      .def(
          "write",
          [](ge::Variable& v, nb::handle src) {
            PyArrayObject* a = variable_array(v, src, false);
            nb::gil_scoped_release release;
            v.write(PyArray_DATA(a));
          },
          "src"_a, "Copies `src` (a numpy array of its dtype and shape) into the variable. Blocks.");
}

NB_MODULE(_runtime, m) {
  if (_import_array() < 0) throw nb::python_error();
  m.doc() = "GraphEngine native device runtime: the generic model runtime and its backends (host: the CPU through oneDNN).";

  g_error = PyErr_NewException("graphengine._runtime.Error", PyExc_RuntimeError, nullptr);
  g_invalid = PyErr_NewException("graphengine._runtime.InvalidArgument", g_error, nullptr);
  g_deadline = PyErr_NewException("graphengine._runtime.DeadlineExceeded", g_error, nullptr);
  g_cancelled = PyErr_NewException("graphengine._runtime.Cancelled", g_error, nullptr);
  m.attr("Error") = nb::steal(g_error);
  m.attr("InvalidArgument") = nb::steal(g_invalid);
  m.attr("DeadlineExceeded") = nb::steal(g_deadline);
  m.attr("Cancelled") = nb::steal(g_cancelled);

  nb::class_<CancelToken>(m, "CancelToken",
                          "A flag that cancels the execute() calls given it while they wait for a "
                          "free instance (a launch that has started runs to its end).")
      .def(nb::init<>())
      .def("cancel", [](CancelToken& t) { t.flag.store(true, std::memory_order_relaxed); },
           "Cancel: callable from any thread, e.g. gRPC's callback when a call ends.")
      .def_prop_ro("cancelled", [](const CancelToken& t) { return t.flag.load(std::memory_order_relaxed); });

  bind_host_budget(m);
  bind_variables(m);
  bind_host_nms(m);
  bind_host_plan_memory(m);
  bind_kernel_plugins(m);
  bind_kernel_sets(m);
  m.def("backends", &ge::backend_names, "Names of the device backends built into the runtime.");
  m.def("supported_ops", [] { return host_device().supported_ops(); },
        "Op names the host backend's kernels implement (Device.supported_ops() for any device).");
  m.def(
      "dnnl_version",
      [] {
        const std::string lib = host_device().caps().library;  // "oneDNN 3.9.1"
        return lib.substr(lib.find(' ') + 1);
      },
      "Version of the oneDNN library the host backend uses.");
  m.def("formats", [] { return std::vector<std::string>{"nchw", "nhwc", "nChw8c", "nChw16c"}; },
        "Tensor formats a spec may give (spec['tensors'][i]['format']).");
  m.def(
      "blocked_format", [] { return host_device().caps().blocked_format; },
      "The blocked format of the host's direct convolutions on this CPU (one SIMD register of "
      "channels per block): 'nChw16c' with AVX-512, 'nChw8c' with AVX2, '' otherwise.");

  nb::class_<ge::Device>(m, "Device",
                         "A device of one backend: its thread budget, the worker lanes that run every model "
                         "loaded on it, and what its kernels can run.")
      .def(nb::new_([](int threads, const std::string& backend) {
             if (threads < 0 || threads > 1024) {
               raise_status(ge::Status::InvalidArgument("Device: threads must be in [0, 1024], got " +
                                                        std::to_string(threads)));
             }
             try {
               return ge::create_device(backend, threads);
             } catch (const ge::Error& e) {
               raise_status(e.status());
             }
           }),
           "threads"_a = 0, "backend"_a = "host",
           "threads: the thread budget shared by every stream and kernel of every model on this device; "
           "0 = the cores available to the process. backend: a name from backends().")
      .def_prop_ro("name", [](const ge::Device& d) { return d.name(); }, "The backend's name.")
      .def_prop_ro("threads", &ge::Device::threads)
      .def_prop_ro("cores", &ge::Device::cores)
      .def_prop_ro("lanes_started", [](const ge::Device& d) { return d.scheduler().threads_started(); },
                   "Worker threads started so far (OpenMP helpers not counted).")
      .def_prop_ro("caps", &caps_py,
                   "What the compiler's Target reads besides the kernels: {'isa', 'blocked_format', "
                   "'conv_blocks', 'epilogues', 'conv_activation2', 'max_weight_segments', 'library', 'host_visible'}.")
      .def("supported_ops", [](const ge::Device& d) { return d.supported_ops(); }, "Op names its kernels implement.")
      .def("kernel_info", &kernel_info_py, "op"_a, "dtypes"_a, "shapes"_a, "attrs"_a = nb::none(),
           "Whether the device has a kernel for `op` on inputs of these dtypes and shapes: "
           "{'supported': bool, 'reason': str, 'preferred_format': str, 'formats': [str]}.");

  m.def(
      "fma_peak",
      [](int threads, double seconds) {
        if (threads < 1 || threads > 1024) {
          raise_status(ge::Status::InvalidArgument(
              "fma_peak: threads must be in [1, 1024], got " + std::to_string(threads)));
        }
        if (!(seconds > 0 && seconds <= 60)) {
          raise_status(ge::Status::InvalidArgument(
              "fma_peak: seconds must be in (0, 60], got " + std::to_string(seconds)));
        }
        nb::gil_scoped_release release;
        return ge::fma_peak_gflops(threads, seconds);
      },
      "threads"_a = 1, "seconds"_a = 0.2,
      "The host's float32 FMA rate in GFLOP/s: `threads` threads each run independent FMA chains "
      "in the widest vectors the CPU has, at once, for about `seconds` (blocks; releases the GIL). "
      "The arithmetic ceiling that benchmarks compare a model's rate with; run it on an idle machine.");
  m.def(
      "narrow_fma_gain",
      [] {
        nb::gil_scoped_release release;
        return ge::narrow_fma_gain();
      },
      "How many 8-wide float32 FMAs one thread completes in the time of one 16-wide FMA (about 2 on a "
      "core with one 512-bit FMA unit, about 1 with two; 1 without AVX-512), measured once per "
      "process: the 1-D convolution kernel picks its vector width by it.");
  m.attr("MAX_WEIGHT_SEGMENTS") = ge::kMaxWeightSegments;
  m.def("cpu_has_avx512", &ge::cpu_has_avx512,
        "Whether the runtime's own AVX-512 kernels may run (the GELU, softmax rows, matrix-vector "
        "products, transposes, conv blocks and heads): the CPU has AVX-512F and they are allowed; "
        "without them oneDNN's or the plain kernels run instead.");
  m.def("cpu_supports_avx512", &ge::cpu_supports_avx512, "Whether the CPU has AVX-512F.");
  m.def("set_avx512_allowed", &ge::set_avx512_allowed, "allowed"_a,
        "Allow or forbid the AVX-512 kernels for models built (and compiles planned) from now on: "
        "tests run both paths. GE_NO_AVX512 in the environment starts with them forbidden.");
  m.def(
      "conv_block_available", [] { return host_device().caps().conv_blocks; },
      "Whether the host runs the ConvBlock and ConvHead kernels (the conv_block and conv_head fusions): AVX-512.");
  m.def(
      "kernel_info",
      [](const std::string& op, nb::handle dtypes, nb::handle shapes, nb::handle attrs) {
        return kernel_info_py(host_device(), op, dtypes, shapes, attrs);
      },
      "op"_a, "dtypes"_a, "shapes"_a, "attrs"_a = nb::none(),
      "Device.kernel_info() of the host backend.");

  nb::class_<RunMismatch>(m, "RunMismatch",
                          "Why Model.run_named() did not run: `input` (the key concerned, or None) and "
                          "`kind` (not_a_dict, count, missing, not_an_array, dtype, shape).")
      .def_ro("input", &RunMismatch::input)
      .def_ro("kind", &RunMismatch::kind)
      .def("__repr__", [](const RunMismatch& r) {
        return "RunMismatch(input=" + nb::cast<std::string>(nb::repr(r.input)) + ", kind='" + r.kind + "')";
      });

  nb::class_<PyModel>(m, "Model", "A graph loaded on a Device.")
      .def("__init__", &model_init, "device"_a, "spec"_a, "instances"_a = 1,
           "Validates the spec, takes the weights, prepares kernels once and creates `instances` "
           "arenas. Raises InvalidArgument for an invalid spec.")
      .def("execute", &model_execute, "inputs"_a, "iterations"_a = 1, "return_all"_a = false,
           "deadline"_a = nb::none(), "cancel"_a = nb::none(), "timing"_a = nb::none(),
           "Runs the model and returns its outputs (numpy arrays). Releases the GIL; thread-safe: up to "
           "`instances` calls run at once, more wait. With iterations=N (sink mode) one launch runs N "
           "iterations over `inputs` (one list of arrays per iteration, or one list for all) and returns "
           "the last outputs, or every iteration's with return_all=True. While the call waits for a free "
           "instance, `deadline` (seconds from now) and `cancel` (a CancelToken) end the wait with "
           "DeadlineExceeded / Cancelled; `timing`, a dict, receives 'queue_seconds'. Raises "
           "InvalidArgument for bad inputs, Error for other failures.")
      .def("bind_names", &model_bind_names, "inputs"_a, "outputs"_a, "constants"_a = nb::none(),
           "Names for run_named(): the dict key of each input, in input order, (name, output "
           "index) per output to return, and {name: array} for outputs that are constants (each "
           "run returns a copy).")
      .def("run_named", &model_run_named, "inputs"_a, "deadline"_a = nb::none(),
           "cancel"_a = nb::none(), "timing"_a = nb::none(),
           "execute() for a dict {name: numpy array} holding exactly the bound inputs at their dtypes "
           "and shapes; returns {name: array} for the bound outputs, or a RunMismatch saying which "
           "input is off and how (the caller words the error or converts). `deadline`, `cancel` and "
           "`timing` as in execute(). Releases the GIL.")
      .def("stats", &model_stats)
      .def(
          "profile",
          [](PyModel& p) {
            nb::list out;
            for (const ge::Model::TaskProfile& t : p.model->profile()) {
              nb::dict d;
              d["name"] = t.name;
              d["op"] = t.op;
              d["impl"] = t.impl;
              d["stream"] = t.stream;
              d["calls"] = t.calls;
              d["seconds"] = t.seconds;
              d["build_seconds"] = t.build_seconds;
              out.append(d);
            }
            return out;
          },
          "Per kernel task, in program order: {'name', 'op', 'impl', 'stream', 'calls', 'seconds'} "
          "accumulated over every run of every instance, and 'build_seconds': making its kernel at "
          "load.")
      .def_prop_ro("name", [](const PyModel& p) { return p.model->name(); })
      .def_prop_ro("num_tasks", [](const PyModel& p) { return p.model->num_tasks(); })
      .def_prop_ro("num_streams", [](const PyModel& p) { return p.model->num_streams(); })
      .def_prop_ro("instances", [](const PyModel& p) { return p.model->instances(); })
      .def_prop_ro("threads_per_stream", [](const PyModel& p) { return p.model->threads_per_stream(); })
      .def_prop_ro(
          "channels_last",
          [](const PyModel& p) {
            std::vector<std::string> names;
            for (const ge::TensorInfo& t : p.model->tensors()) {
              if (t.channels_last() && !p.model->explicit_formats()) names.push_back(t.name);
            }
            return names;
          },
          "Names of the intermediate tensors the runtime chose to store channels-last (NHWC).")
      .def_prop_ro(
          "formats",
          [](const PyModel& p) {
            std::map<std::string, std::string> f;
            for (const ge::TensorInfo& t : p.model->tensors()) {
              if (!t.plain()) f[t.name] = ge::format_name(t.format);
            }
            return f;
          },
          "Tensor name -> format, for every tensor not stored plain (nchw).")
      .def_prop_ro(
          "zero_copy",
          [](const PyModel& p) {
            const ge::Model& m = *p.model;
            std::vector<std::string> ins, outs;
            for (size_t i = 0; i < m.inputs().size(); ++i) {
              if (m.io_plan().input_slot[i] >= 0) ins.push_back(m.inputs()[i]->name);
            }
            for (size_t i = 0; i < m.outputs().size(); ++i) {
              if (m.io_plan().output_slot[i] >= 0) outs.push_back(m.outputs()[i]->name);
            }
            nb::dict d;
            d["inputs"] = ins;
            d["outputs"] = outs;
            return d;
          },
          "Inputs kernels read from the caller's array, outputs the last kernel writes in place.");
}
