/* A native kernel plugin for the tests: "test.native.SquarePlus" (y = x * x, float32 or
 * float64; no Python registration), "test.native.Scale" (y = x * factor, float32: the
 * device kernel of an op the test registers in Python with the attribute `factor`) and
 * "test.native.Fail" (always fails). */
#include <graphengine/plugin.h>
#include <stdio.h>

static int square_plus(const ge_kernel_call* call) {
  double bias = 0.0;
  call->attr_float(call->attrs, "bias", &bias);
  const ge_tensor* x = &call->inputs[0];
  const ge_tensor* y = &call->outputs[0];
  if (x->dtype == GE_FLOAT32) {
    const float* in = (const float*)x->data;
    float* out = (float*)y->data;
    for (int64_t i = 0; i < x->numel; ++i) out[i] = in[i] * in[i] + (float)bias;
  } else if (x->dtype == GE_FLOAT64) {
    const double* in = (const double*)x->data;
    double* out = (double*)y->data;
    for (int64_t i = 0; i < x->numel; ++i) out[i] = in[i] * in[i] + bias;
  } else {
    snprintf(call->error, call->error_size, "dtype %d is not float", (int)x->dtype);
    return 1;
  }
  return 0;
}

static int scale(const ge_kernel_call* call) {
  double factor = 1.0;
  if (!call->attr_float(call->attrs, "factor", &factor)) {
    snprintf(call->error, call->error_size, "attribute factor is missing");
    return 1;
  }
  const float* in = (const float*)call->inputs[0].data;
  float* out = (float*)call->outputs[0].data;
  for (int64_t i = 0; i < call->inputs[0].numel; ++i) out[i] = in[i] * (float)factor;
  return 0;
}

static int fail(const ge_kernel_call* call) {
  snprintf(call->error, call->error_size, "this kernel always fails (%d inputs)",
           (int)call->n_inputs);
  return 7;
}

GE_PLUGIN_EXPORT int ge_plugin_init(ge_registrar* registrar) {
  ge_kernel_def def = {GE_PLUGIN_ABI_VERSION, "test.native.SquarePlus", 1, 1, 1,
                       GE_DTYPE_BIT(GE_FLOAT32) | GE_DTYPE_BIT(GE_FLOAT64), square_plus, NULL};
  if (registrar->register_kernel(registrar, &def) != 0) return 1;
  ge_kernel_def sc = {GE_PLUGIN_ABI_VERSION, "test.native.Scale", 1, 1, 1, 0, scale, NULL};
  if (registrar->register_kernel(registrar, &sc) != 0) return 1;
  ge_kernel_def bad = {GE_PLUGIN_ABI_VERSION, "test.native.Fail", 1, 2, 1, 0, fail, NULL};
  return registrar->register_kernel(registrar, &bad);
}
