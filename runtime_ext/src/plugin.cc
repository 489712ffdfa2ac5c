#include "plugin.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>

namespace ge {

namespace {

constexpr int kMaxOperands = 64;  // inputs or outputs of one plugin kernel
constexpr size_t kMaxOpTypeChars = 256;
constexpr size_t kErrorChars = 1024;

struct Registry {
  std::mutex mu;
  std::deque<PluginKernelDef> defs;  // a deque: elements never move, pointers stay valid
  std::map<std::string, const PluginKernelDef*> by_op;
  std::map<std::string, std::vector<const PluginKernelDef*>> by_file;  // realpath -> kernels
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: kernels may run during exit
  return *r;
}

// What ge_plugin_init registers, checked and staged until it returns.
struct Staging {
  std::string path;
  const std::vector<std::string>* reserved = nullptr;
  std::vector<PluginKernelDef> defs;
  std::string error;  // the first refusal
};

bool valid_op_type(const std::string& s) {
  if (s.empty() || s.size() > kMaxOpTypeChars || s.front() == '.' || s.back() == '.') return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
  }
  return true;
}

std::string check_def(const ge_kernel_def* d, const Staging& st) {
  if (d == nullptr) return "register_kernel got NULL";
  if (d->abi_version != GE_PLUGIN_ABI_VERSION) {
    return cat("a kernel was built for plugin ABI ", d->abi_version, "; this runtime has ABI ",
               GE_PLUGIN_ABI_VERSION, " (rebuild it against graphengine.get_include())");
  }
  if (d->op_type == nullptr) return "a kernel has no op_type";
  const std::string op(d->op_type, strnlen(d->op_type, kMaxOpTypeChars + 1));
  if (!valid_op_type(op)) {
    return cat("op_type '", op.substr(0, 80), "' is not a name (letters, digits, '_' and '.', at most ",
               kMaxOpTypeChars, " characters)");
  }
  if (d->run == nullptr) return cat("kernel '", op, "' has no run function");
  if (d->min_inputs < 1 || d->max_inputs < d->min_inputs || d->max_inputs > kMaxOperands) {
    return cat("kernel '", op, "': inputs ", d->min_inputs, "..", d->max_inputs, " are not within 1..",
               kMaxOperands);
  }
  if (d->num_outputs < 1 || d->num_outputs > kMaxOperands) {
    return cat("kernel '", op, "': num_outputs ", d->num_outputs, " is not within 1..", kMaxOperands);
  }
  if (d->dtypes >> (static_cast<unsigned>(DType::kBool) + 1)) {
    return cat("kernel '", op, "': dtypes mask ", d->dtypes, " names a type the runtime does not have");
  }
  for (const std::string& r : *st.reserved) {
    if (r == op) return cat("op type '", op, "' is an op GraphEngine has already; a plugin adds new ones");
  }
  for (const PluginKernelDef& s : st.defs) {
    if (s.op == op) return cat("op type '", op, "' is registered twice");
  }
  if (registry().by_op.count(op)) {
    return cat("op type '", op, "' already has a kernel, from '", registry().by_op.at(op)->library, "'");
  }
  return "";
}

int register_kernel(ge_registrar* self, const ge_kernel_def* d) {
  auto* st = static_cast<Staging*>(self->impl);
  const std::string why = check_def(d, *st);
  if (!why.empty()) {
    if (st->error.empty()) st->error = why;
    return 1;
  }
  PluginKernelDef def;
  def.op = d->op_type;
  def.library = st->path;
  def.min_inputs = d->min_inputs;
  def.max_inputs = d->max_inputs;
  def.num_outputs = d->num_outputs;
  def.dtypes = d->dtypes ? d->dtypes : GE_DTYPE_BIT(GE_FLOAT32);
  def.run = d->run;
  def.user_data = d->user_data;
  st->defs.push_back(std::move(def));
  return 0;
}

int attr_int(const ge_attrs* attrs, const char* key, int64_t* value) {
  const auto* at = reinterpret_cast<const Attrs*>(attrs);
  auto it = at->find(key);
  if (it == at->end()) return 0;
  if (const auto* i = std::get_if<int64_t>(&it->second)) {
    *value = *i;
    return 1;
  }
  return 0;
}

int attr_float(const ge_attrs* attrs, const char* key, double* value) {
  const auto* at = reinterpret_cast<const Attrs*>(attrs);
  auto it = at->find(key);
  if (it == at->end()) return 0;
  if (const auto* f = std::get_if<double>(&it->second)) {
    *value = *f;
    return 1;
  }
  if (const auto* i = std::get_if<int64_t>(&it->second)) {
    *value = static_cast<double>(*i);
    return 1;
  }
  return 0;
}

Status call(const PluginKernelDef& def, const std::vector<ge_tensor>& ins, const std::vector<ge_tensor>& outs,
            const Attrs& attrs) {
  char error[kErrorChars] = {0};
  ge_kernel_call c{};
  c.struct_size = sizeof(ge_kernel_call);
  c.inputs = ins.data();
  c.n_inputs = static_cast<int32_t>(ins.size());
  c.outputs = outs.data();
  c.n_outputs = static_cast<int32_t>(outs.size());
  c.attrs = reinterpret_cast<const ge_attrs*>(&attrs);
  c.attr_int = &attr_int;
  c.attr_float = &attr_float;
  c.user_data = def.user_data;
  c.error = error;
  c.error_size = sizeof(error);
  const int rc = def.run(&c);
  if (rc == 0) return Status::Ok();
  error[sizeof(error) - 1] = '\0';
  return Status::InvalidArgument(cat("plugin kernel '", def.op, "' (", def.library, ") failed with ", rc,
                                     error[0] ? cat(": ", error) : std::string()));
}

ge_tensor view(const TensorInfo& t, void* data) {
  ge_tensor g{};
  g.dtype = static_cast<int32_t>(t.dtype);
  g.rank = t.rank();
  g.dims = t.shape.data();
  g.data = data;
  g.numel = t.numel;
  return g;
}

class PluginKernel final : public Kernel {
 public:
  PluginKernel(const PluginKernelDef& def, const KernelArgs& a) : def_(def), attrs_(*a.attrs) {
    ins_ = a.inputs;
    outs_ = a.outputs;
  }

  Status run(ExecContext& ctx) override {
    std::vector<ge_tensor> ins, outs;
    ins.reserve(ins_.size());
    for (const TensorInfo* t : ins_) {
      if (t == nullptr) {
        ins.push_back(ge_tensor{});
      } else {
        ins.push_back(view(*t, ctx.ptr(*t)));
      }
    }
    outs.reserve(outs_.size());
    for (const TensorInfo* t : outs_) outs.push_back(view(*t, ctx.ptr(*t)));
    return call(def_, ins, outs, attrs_);
  }

  std::string impl() const override { return "plugin " + def_.library; }

 private:
  const PluginKernelDef& def_;
  Attrs attrs_;
  std::vector<const TensorInfo*> ins_, outs_;
};

}  // namespace

const PluginKernelDef* find_plugin_kernel(const std::string& op) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_op.find(op);
  return it == r.by_op.end() ? nullptr : it->second;
}

std::vector<const PluginKernelDef*> plugin_kernels() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<const PluginKernelDef*> out;
  for (const PluginKernelDef& d : r.defs) out.push_back(&d);
  return out;
}

std::vector<const PluginKernelDef*> load_kernel_plugin(const std::string& path,
                                                       const std::vector<std::string>& reserved) {
  char* real = realpath(path.c_str(), nullptr);
  if (real == nullptr) invalid("plugin '", path, "': no such file");
  const std::string key(real);
  free(real);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);  // one load at a time; lookups wait for it
  auto done = r.by_file.find(key);
  if (done != r.by_file.end()) return done->second;
  dlerror();
  void* lib = dlopen(key.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    invalid("plugin '", path, "' is not a loadable shared library: ", why ? why : "dlopen failed");
  }
  auto init = reinterpret_cast<int (*)(ge_registrar*)>(dlsym(lib, "ge_plugin_init"));
  if (init == nullptr) {
    dlclose(lib);
    invalid("plugin '", path, "' exports no ge_plugin_init (see graphengine/plugin.h)");
  }
  Staging st;
  st.path = path;
  st.reserved = &reserved;
  ge_registrar reg{};
  reg.abi_version = GE_PLUGIN_ABI_VERSION;
  reg.impl = &st;
  reg.register_kernel = &register_kernel;
  const int rc = init(&reg);
  std::string why = st.error;
  if (why.empty() && rc != 0) why = cat("ge_plugin_init returned ", rc);
  if (why.empty() && st.defs.empty()) why = "ge_plugin_init registered no kernel";
  if (!why.empty()) {
    dlclose(lib);  // nothing of it was kept
    invalid("plugin '", path, "': ", why);
  }
  std::vector<const PluginKernelDef*> added;
  for (PluginKernelDef& d : st.defs) {
    r.defs.push_back(std::move(d));
    added.push_back(&r.defs.back());
    r.by_op[added.back()->op] = added.back();
  }
  r.by_file[key] = added;
  return added;  // the library stays loaded: its functions are registered
}

std::unique_ptr<Kernel> make_plugin_kernel(const KernelArgs& a) {
  const PluginKernelDef* def = find_plugin_kernel(a.op);
  if (def == nullptr) invalid("no plugin kernel for '", a.op, "'");
  a.expect_inputs(def->min_inputs, def->max_inputs);
  a.expect_outputs(def->num_outputs, def->num_outputs);
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const TensorInfo* t = a.inputs[i];
    if (t == nullptr) continue;
    if (!t->plain()) invalid("input ", i, " is in format ", format_name(t->format), "; plugin kernels take plain tensors");
    if (!def->accepts(t->dtype)) invalid("input ", i, " is ", dtype_name(t->dtype), ", which the plugin kernel does not take");
  }
  for (const TensorInfo* t : a.outputs) {
    if (!t->plain()) invalid("output '", t->name, "' is not plain; plugin kernels write plain tensors");
  }
  return std::make_unique<PluginKernel>(*def, a);
}

Status run_plugin_kernel(const PluginKernelDef& def, const std::vector<ge_tensor>& inputs,
                         const std::vector<ge_tensor>& outputs, const Attrs& attrs) {
  return call(def, inputs, outputs, attrs);
}

}  // namespace ge
