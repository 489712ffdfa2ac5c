/* GraphEngine native kernel plugins: the C ABI.
 *
 * A plugin is a shared library that registers kernels for custom op types; the device
 * engine runs them like its own kernels. It is loaded by `graphengine serve --plugin
 * FILE.so`, the config key `plugins`, or graphengine.load_plugin("FILE.so") in process.
 * Build one with
 *
 *     cc -shared -fPIC -O2 -I"$(python -c 'import graphengine; print(graphengine.get_include())')" \
 *        my_ops.c -o my_ops.so
 *
 * The library exports one function, ge_plugin_init, which the loader calls once with a
 * registrar; it calls registrar->register_kernel once per kernel and returns 0, or nonzero
 * to refuse loading (then nothing it registered is kept). Everything is plain C: no C++
 * types, no allocation crosses the boundary.
 *
 * An op type is the registry key of the op: "Square" for the default domain, or
 * "<domain>.<op>" ("my.ops.Square") for a node of that domain in an ONNX file. When the op
 * also has a Python registration (graphengine.register_op), that gives shape inference and
 * the numpy reference; otherwise the op gets one from the kernel description: every output
 * has input 0's dtype and shape, and the host engine (constant folding, symbolic shapes)
 * calls this same kernel.
 *
 * Threads: run() may be called from several threads at once (model instances, streams),
 * each call with its own tensors; it must keep no state between calls but what user_data
 * points to, read-only. It must not call back into Python.
 */
#ifndef GRAPHENGINE_PLUGIN_H_
#define GRAPHENGINE_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a struct below changes incompatibly; the loader refuses other versions. */
#define GE_PLUGIN_ABI_VERSION 1

#if defined(_WIN32)
#define GE_PLUGIN_EXPORT __declspec(dllexport)
#else
#define GE_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* Element types (the runtime's own order). */
typedef enum ge_dtype {
  GE_FLOAT32 = 0,
  GE_FLOAT64 = 1,
  GE_FLOAT16 = 2,
  GE_INT64 = 3,
  GE_INT32 = 4,
  GE_INT16 = 5,
  GE_INT8 = 6,
  GE_UINT8 = 7,
  GE_BOOL = 8 /* one byte, 0 or 1 */
} ge_dtype;

/* A bit of ge_kernel_def.dtypes per accepted element type. */
#define GE_DTYPE_BIT(t) (1u << (unsigned)(t))

/* One tensor: dense, row-major, `rank` dims (0: a scalar, one element). Borrowed for the
 * call: inputs are read-only, outputs are written by the kernel (their shapes are given;
 * the kernel does not choose them). An omitted optional input has data == NULL. */
typedef struct ge_tensor {
  int32_t dtype; /* ge_dtype */
  int32_t rank;
  const int64_t* dims;
  void* data;
  int64_t numel; /* the product of dims */
} ge_tensor;

typedef struct ge_attrs ge_attrs; /* opaque: the node's attributes */

/* What one run of a kernel gets. Borrowed; valid during the call. */
typedef struct ge_kernel_call {
  uint32_t struct_size; /* sizeof(ge_kernel_call) of the runtime: lets it grow */
  const ge_tensor* inputs;
  int32_t n_inputs;
  const ge_tensor* outputs;
  int32_t n_outputs;
  const ge_attrs* attrs;
  /* The node's attribute `key`: 1 and *value set when present (an int attribute as
   * attr_int; a float one as attr_float, which also reads an int), else 0. Never block. */
  int (*attr_int)(const ge_attrs* attrs, const char* key, int64_t* value);
  int (*attr_float)(const ge_attrs* attrs, const char* key, double* value);
  void* user_data; /* ge_kernel_def.user_data */
  /* On failure, the kernel writes a NUL-terminated message here (at most error_size
   * bytes) and returns nonzero; the run fails with it, naming the node. */
  char* error;
  size_t error_size;
} ge_kernel_call;

/* Runs the kernel: blocks until the outputs are written. 0 on success. */
typedef int (*ge_kernel_fn)(const ge_kernel_call* call);

/* A kernel for one op type. The registrar copies what it needs (op_type included). */
typedef struct ge_kernel_def {
  uint32_t abi_version; /* GE_PLUGIN_ABI_VERSION */
  const char* op_type;  /* registry key: "Square" or "my.ops.Square" */
  int32_t min_inputs;   /* 0..64 */
  int32_t max_inputs;   /* min_inputs..64 */
  int32_t num_outputs;  /* 1..64 */
  uint32_t dtypes;      /* GE_DTYPE_BIT of every type the inputs may have; 0: float32 */
  ge_kernel_fn run;
  void* user_data; /* passed back in every call; the plugin owns it (never freed) */
} ge_kernel_def;

typedef struct ge_registrar ge_registrar;
struct ge_registrar {
  uint32_t abi_version; /* the runtime's GE_PLUGIN_ABI_VERSION */
  void* impl;           /* the runtime's: do not touch */
  /* 0 when registered; nonzero when refused (the loader reports why: a name the runtime
   * already has, a bad count, another ABI version). */
  int (*register_kernel)(ge_registrar* self, const ge_kernel_def* def);
};

/* The one function a plugin exports. */
GE_PLUGIN_EXPORT int ge_plugin_init(ge_registrar* registrar);

#ifdef __cplusplus
}
#endif

#endif /* GRAPHENGINE_PLUGIN_H_ */
