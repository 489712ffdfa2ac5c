/* Plugins the loader must refuse, one per -D: BUILTIN (takes the name Relu), ABI (another
 * ABI version), NONE (registers nothing), NOINIT (exports no ge_plugin_init). */
#include <graphengine/plugin.h>

static int noop(const ge_kernel_call* call) { return call == 0; }

#ifndef NOINIT
GE_PLUGIN_EXPORT int ge_plugin_init(ge_registrar* registrar) {
#if defined(BUILTIN)
  ge_kernel_def def = {GE_PLUGIN_ABI_VERSION, "Relu", 1, 1, 1, 0, noop, 0};
#elif defined(ABI)
  ge_kernel_def def = {GE_PLUGIN_ABI_VERSION + 1, "test.bad.Abi", 1, 1, 1, 0, noop, 0};
#else
  ge_kernel_def def = {GE_PLUGIN_ABI_VERSION, "", 1, 1, 1, 0, noop, 0};
  return 0;
#endif
  return registrar->register_kernel(registrar, &def);
}
#else
int something_else(void) { return (int)sizeof(ge_kernel_def) + noop(0); }
#endif
