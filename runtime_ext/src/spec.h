// ModelSpec: a model as the Python engine describes it, in native form.
//
// module.cc converts the spec dict into these structs; Model::load validates them. Field
// meanings follow the Python contract (see the _runtime docstring): tensors laid out in an
// activation arena or a weight region, tasks in program order on streams, events for
// cross-stream order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernel.h"
#include "spec_gen.h"  // TensorSpec, TaskSpec: generated from engine/model.py
#include "tensor.h"

namespace ge {

struct ModelSpec {
  std::string name;
  int64_t arena_bytes = 0;
  // The weight region: segments laid end to end, each starting 64-byte aligned (a weight
  // tensor's offset is into that concatenation and lies inside one segment). A segment is
  // borrowed for the duration of load(), or for the model's lifetime when `borrowed`: it
  // outlives the model and never changes, so it is used in place, not copied.
  struct WeightSegment {
    const uint8_t* data = nullptr;
    size_t size = 0;
    bool borrowed = false;
  };
  std::vector<WeightSegment> weights;
  std::vector<TensorSpec> tensors;
  int64_t num_streams = 1;
  int64_t num_events = 0;
  std::vector<TaskSpec> tasks;
  std::vector<int64_t> inputs;
  std::vector<int64_t> outputs;
  // Let the runtime store intermediate 4-D activations channels-last (layout.h). The
  // model's inputs and outputs are NCHW either way; false is for comparisons and tests.
  bool channels_last = true;
  // OpenMP threads of each stream's kernels; 0: the device's threads / num_streams.
  int64_t threads_per_stream = 0;
};

}  // namespace ge
