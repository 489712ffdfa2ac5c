// ModelSpec: a model as the Python engine describes it, in native form.
//
// The structs (ModelSpec, TensorSpec, TaskSpec) and module.cc's readers are generated from
// the dataclasses of engine/model.py (runtime_ext/tools/gen_spec.py), so the schema is
// written once; Model::load validates what they hold. Tensors are laid out in an
// activation arena or a weight region, tasks run in program order on streams, events give
// cross-stream order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernel.h"
#include "spec_gen.h"  // ModelSpec, TensorSpec, TaskSpec: generated from engine/model.py
#include "tensor.h"
