// graphengine._runtime.HostBudget: a bound on the memory numpy allocates while a host
// program runs.
//
// A host program's kernels (numpy) size their outputs from data: a Tile's repeats, an
// Expand's shape, a Range's limit, a broadcast of two large inputs, a Loop's trip count.
// Checking each op's output shape before it runs would need every kernel's rule twice and
// would still miss the temporaries inside a kernel. numpy instead lets a caller install its
// own data allocator (PyDataMem_SetHandler, numpy >= 1.22) in the current context (per
// thread): while a HostBudget is entered, every array buffer numpy allocates in this thread
// is counted against the budget, and an allocation past it fails as numpy's own
// MemoryError, before a byte of it is touched. `refused` then names the bytes that were
// asked for, so the caller can say which node needed how much.
//
// Buffers carry a 64-byte header with their size (numpy's realloc does not pass the old
// one), which keeps the data 64-byte aligned (the runtime reads such arrays in place). A
// buffer that outlives the `with` block (an output) still frees through this allocator:
// numpy keeps the handler capsule alive in each array, and the capsule keeps the counters.
#include <nanobind/nanobind.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#define PY_ARRAY_UNIQUE_SYMBOL ge_runtime_numpy_api
#define NO_IMPORT_ARRAY
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

namespace nb = nanobind;

namespace {

constexpr size_t kHeader = 64;  // keeps the data 64-byte aligned

struct Counters {
  size_t limit = 0;
  std::atomic<size_t> held{0};
  std::atomic<size_t> peak{0};
  std::atomic<size_t> refused{0};  // the first allocation refused: its size plus `held` then
};

struct Handler {
  PyDataMem_Handler numpy;  // first: numpy reads the capsule's pointer as this
  Counters counters;
};

// Records the first refusal: what holding `size` more would have come to (saturated).
void refuse(Counters* c, size_t size) {
  const size_t held = c->held.load(std::memory_order_relaxed);
  size_t none = 0;
  c->refused.compare_exchange_strong(none, size > SIZE_MAX - held ? SIZE_MAX : held + size,
                                     std::memory_order_relaxed);
}

void* take(Counters* c, size_t size, bool zero) {
  if (size > c->limit || size > SIZE_MAX - kHeader) {  // first: the sums below must not wrap
    refuse(c, size);
    return nullptr;
  }
  const size_t held = c->held.fetch_add(size, std::memory_order_relaxed) + size;
  if (held > c->limit) {
    c->held.fetch_sub(size, std::memory_order_relaxed);
    refuse(c, size);
    return nullptr;
  }
  size_t peak = c->peak.load(std::memory_order_relaxed);
  while (held > peak && !c->peak.compare_exchange_weak(peak, held, std::memory_order_relaxed)) {
  }
  void* raw = nullptr;
  if (posix_memalign(&raw, kHeader, kHeader + size) != 0) {
    c->held.fetch_sub(size, std::memory_order_relaxed);
    return nullptr;
  }
  std::memcpy(raw, &size, sizeof size);
  char* data = static_cast<char*>(raw) + kHeader;
  if (zero) std::memset(data, 0, size);
  return data;
}

size_t size_of(void* data) {
  size_t size;
  std::memcpy(&size, static_cast<char*>(data) - kHeader, sizeof size);
  return size;
}

void give(Counters* c, void* data) {
  if (data == nullptr) return;
  c->held.fetch_sub(size_of(data), std::memory_order_relaxed);
  std::free(static_cast<char*>(data) - kHeader);
}

void* budget_malloc(void* ctx, size_t size) { return take(static_cast<Counters*>(ctx), size, false); }

void* budget_calloc(void* ctx, size_t n, size_t elsize) {
  if (elsize != 0 && n > SIZE_MAX / elsize) return nullptr;
  return take(static_cast<Counters*>(ctx), n * elsize, true);
}

void* budget_realloc(void* ctx, void* data, size_t size) {
  auto* c = static_cast<Counters*>(ctx);
  if (data == nullptr) return take(c, size, false);
  void* fresh = take(c, size, false);
  if (fresh == nullptr) return nullptr;  // numpy keeps (and later frees) the old buffer
  std::memcpy(fresh, data, std::min(size, size_of(data)));
  give(c, data);
  return fresh;
}

void budget_free(void* ctx, void* data, size_t) { give(static_cast<Counters*>(ctx), data); }

void drop_handler(PyObject* capsule) {
  delete static_cast<Handler*>(PyCapsule_GetPointer(capsule, "mem_handler"));
}

class HostBudget {
 public:
  explicit HostBudget(size_t limit) {
    auto* h = new Handler();
    std::snprintf(h->numpy.name, sizeof h->numpy.name, "graphengine_host_budget");
    h->numpy.version = 1;
    h->numpy.allocator = {&h->counters, budget_malloc, budget_calloc, budget_realloc,
                          budget_free};
    h->counters.limit = limit;
    counters_ = &h->counters;
    PyObject* capsule = PyCapsule_New(h, "mem_handler", drop_handler);
    if (capsule == nullptr) {
      delete h;
      throw nb::python_error();
    }
    capsule_ = nb::steal(capsule);
  }

  void enter() {
    if (previous_.is_valid()) throw nb::value_error("a HostBudget is entered once at a time");
    PyObject* old = PyDataMem_SetHandler(capsule_.ptr());
    if (old == nullptr) throw nb::python_error();
    previous_ = nb::steal(old);
  }

  void exit() {
    if (!previous_.is_valid()) return;
    PyObject* ours = PyDataMem_SetHandler(previous_.ptr());
    previous_.reset();
    if (ours == nullptr) throw nb::python_error();
    Py_DECREF(ours);
  }

  const Counters& counters() const { return *counters_; }

 private:
  nb::object capsule_;   // owns the counters (arrays allocated under it hold it too)
  nb::object previous_;  // the handler to restore on exit; set while entered
  Counters* counters_;
};

}  // namespace

void bind_host_budget(nb::module_& m) {
  nb::class_<HostBudget>(
      m, "HostBudget",
      "`with HostBudget(limit):` bounds the bytes numpy's arrays hold at once, allocated in "
      "this thread while entered (freed ones count off, also after exit): an allocation past "
      "`limit` fails as numpy's MemoryError, untouched, and `refused` is then what holding it "
      "would have come to.")
      .def(nb::init<size_t>(), nb::arg("limit"))
      .def("__enter__", [](HostBudget& b) -> HostBudget& { b.enter(); return b; },
           nb::rv_policy::reference)
      .def("__exit__", [](HostBudget& b, nb::handle, nb::handle, nb::handle) { b.exit(); },
           nb::arg("type").none(), nb::arg("value").none(), nb::arg("traceback").none())
      .def_prop_ro("limit", [](const HostBudget& b) { return b.counters().limit; })
      .def_prop_ro("held", [](const HostBudget& b) { return b.counters().held.load(); },
                   "Bytes its arrays hold now.")
      .def_prop_ro("peak", [](const HostBudget& b) { return b.counters().peak.load(); },
                   "The most they held at once.")
      .def_prop_ro("refused", [](const HostBudget& b) { return b.counters().refused.load(); },
                   "0, or the bytes held had the first refused allocation been granted.");
}
