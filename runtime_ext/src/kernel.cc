#include "kernel.h"

#include <algorithm>
#include <cmath>
#include <utility>


namespace ge {

namespace {

const AttrValue* find_attr(const KernelArgs& a, const char* key) {
  if (!a.attrs) return nullptr;
  auto it = a.attrs->find(key);
  return it == a.attrs->end() ? nullptr : &it->second;
}

}  // namespace

int normalize_axis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) invalid("axis ", axis, " out of range for rank ", rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

const TensorInfo& KernelArgs::in(size_t i) const {
  if (i >= inputs.size() || !inputs[i]) invalid("input ", i, " is required");
  return *inputs[i];
}

const TensorInfo* KernelArgs::opt_in(size_t i) const {
  return i < inputs.size() ? inputs[i] : nullptr;
}

const TensorInfo& KernelArgs::out(size_t i) const {
  if (i >= outputs.size() || !outputs[i]) invalid("output ", i, " is required");
  return *outputs[i];
}

void KernelArgs::expect_inputs(int min, int max) const {
  int n = static_cast<int>(inputs.size());
  if (n < min || (max >= 0 && n > max)) {
    if (max < 0) invalid("expected at least ", min, " inputs, got ", n);
    if (min == max) invalid("expected ", min, " inputs, got ", n);
    invalid("expected ", min, " to ", max, " inputs, got ", n);
  }
}

void KernelArgs::expect_outputs(int min, int max) const {
  int n = static_cast<int>(outputs.size());
  if (n < min || (max >= 0 && n > max)) {
    if (min == max) invalid("expected ", min, " outputs, got ", n);
    invalid("expected ", min, " to ", max, " outputs, got ", n);
  }
  for (int i = 0; i < min; ++i) {
    if (!outputs[i]) invalid("output ", i, " is required");
  }
}

void KernelArgs::expect_dtype(const TensorInfo& t, DType dt, const char* what) const {
  if (t.dtype != dt) {
    invalid(what, " '", t.name, "' must be ", dtype_name(dt), ", got ",
            type_str(t.dtype, t.shape));
  }
}

std::vector<int64_t> KernelArgs::const_ints(size_t i) const {
  const TensorInfo& t = in(i);
  if (!t.constant()) invalid("input ", i, " ('", t.name, "') must be a constant");
  std::vector<int64_t> r(static_cast<size_t>(t.numel));
  if (t.dtype == DType::kInt64) {
    for (size_t k = 0; k < r.size(); ++k) r[k] = t.const_ptr<int64_t>()[k];
  } else if (t.dtype == DType::kInt32) {
    for (size_t k = 0; k < r.size(); ++k) r[k] = t.const_ptr<int32_t>()[k];
  } else {
    invalid("input ", i, " ('", t.name, "') must be int64 or int32, got ", type_str(t.dtype, t.shape));
  }
  return r;
}

double KernelArgs::const_float(size_t i) const {
  const TensorInfo& t = in(i);
  if (!t.constant()) invalid("input ", i, " ('", t.name, "') must be a constant");
  if (t.numel != 1) invalid("input ", i, " ('", t.name, "') must have one element");
  if (t.dtype == DType::kFloat32) return t.const_ptr<float>()[0];
  if (t.dtype == DType::kFloat64) return t.const_ptr<double>()[0];
  invalid("input ", i, " ('", t.name, "') must be float32 or float64, got ", type_str(t.dtype, t.shape));
}

bool KernelArgs::has_attr(const char* key) const { return find_attr(*this, key) != nullptr; }

int64_t KernelArgs::attr_int(const char* key, int64_t def) const {
  const AttrValue* v = find_attr(*this, key);
  if (!v) return def;
  if (auto* i = std::get_if<int64_t>(v)) return *i;
  if (auto* d = std::get_if<double>(v)) {
    if (std::floor(*d) == *d && std::fabs(*d) < 9e18) return static_cast<int64_t>(*d);
  }
  invalid("attribute '", key, "' must be an int");
}

double KernelArgs::attr_float(const char* key, double def) const {
  const AttrValue* v = find_attr(*this, key);
  if (!v) return def;
  if (auto* d = std::get_if<double>(v)) return *d;
  if (auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  invalid("attribute '", key, "' must be a float");
}

std::string KernelArgs::attr_str(const char* key, const std::string& def) const {
  const AttrValue* v = find_attr(*this, key);
  if (!v) return def;
  if (auto* s = std::get_if<std::string>(v)) return *s;
  invalid("attribute '", key, "' must be a string");
}

std::vector<int64_t> KernelArgs::attr_ints(const char* key,
                                           const std::vector<int64_t>& def) const {
  const AttrValue* v = find_attr(*this, key);
  if (!v) return def;
  if (auto* l = std::get_if<std::vector<int64_t>>(v)) return *l;
  if (auto* i = std::get_if<int64_t>(v)) return {*i};
  if (auto* l = std::get_if<std::vector<double>>(v)) {
    std::vector<int64_t> r;
    for (double d : *l) {
      if (std::floor(d) != d || std::fabs(d) >= 9e18) {
        invalid("attribute '", key, "' must be a list of ints");
      }
      r.push_back(static_cast<int64_t>(d));
    }
    return r;
  }
  invalid("attribute '", key, "' must be a list of ints");
}

std::vector<double> KernelArgs::attr_floats(const char* key,
                                            const std::vector<double>& def) const {
  const AttrValue* v = find_attr(*this, key);
  if (!v) return def;
  if (auto* l = std::get_if<std::vector<double>>(v)) return *l;
  if (auto* l = std::get_if<std::vector<int64_t>>(v)) return {l->begin(), l->end()};
  if (auto* d = std::get_if<double>(v)) return {*d};
  if (auto* i = std::get_if<int64_t>(v)) return {static_cast<double>(*i)};
  invalid("attribute '", key, "' must be a list of floats");
}

}  // namespace ge
