// Native kernel plugins: kernels for custom op types from shared libraries loaded at run
// time, through the C ABI of graphengine/plugin.h (shipped in the wheel, found by
// graphengine.get_include()).
//
// The registry is process-wide and only grows: a library once loaded stays loaded and its
// kernels registered, so the pointers handed out here stay valid for the process's
// lifetime. Lookups and loads are thread-safe. A backend runs a plugin kernel through
// make_plugin_kernel (the host backend's op table falls back to it for names it does not
// have); the host engine runs one on numpy arrays through run_plugin_kernel.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <graphengine/plugin.h>  // the public C ABI (python/graphengine/include)
#include "kernel.h"

namespace ge {

// One registered kernel. Immutable once registered.
struct PluginKernelDef {
  std::string op;       // the registry key ("Square", "my.ops.Square")
  std::string library;  // the file it came from, as given to the loader
  int min_inputs = 1, max_inputs = 1, num_outputs = 1;
  uint32_t dtypes = 0;  // GE_DTYPE_BIT mask of the types every input may have
  ge_kernel_fn run = nullptr;
  void* user_data = nullptr;

  bool accepts(DType t) const { return (dtypes >> static_cast<unsigned>(t)) & 1u; }
};

// The kernel registered for `op`, or nullptr. Never blocks for long (a mutex held only by
// lookups and by the registration step of a load).
const PluginKernelDef* find_plugin_kernel(const std::string& op);

// Every registered kernel, in registration order.
std::vector<const PluginKernelDef*> plugin_kernels();

// Loads the shared library at `path` and registers its kernels: all of them, or none when
// any is refused (an op type in `reserved` — the runtime's own and the compiler's —, one
// already registered, counts out of range, another ABI version, ge_plugin_init missing or
// failing). Loading the same file again returns what it registered the first time.
// Throws Error(InvalidArgument) naming the file and what is wrong. Blocks on dlopen.
std::vector<const PluginKernelDef*> load_kernel_plugin(const std::string& path,
                                                       const std::vector<std::string>& reserved);

// The device kernel of a node whose op is a plugin kernel (a KernelFactory). Throws
// Error(InvalidArgument) when the node does not fit the kernel's description.
std::unique_ptr<Kernel> make_plugin_kernel(const KernelArgs& args);

// Runs `def` once on caller memory: the inputs (data == nullptr for an omitted one) and
// outputs already shaped and allocated. Blocks; InvalidArgument with the kernel's message
// when it fails.
Status run_plugin_kernel(const PluginKernelDef& def, const std::vector<ge_tensor>& inputs,
                         const std::vector<ge_tensor>& outputs, const Attrs& attrs);

}  // namespace ge
