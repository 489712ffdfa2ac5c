// Control flow on the device: labels, jumps and the small tasks a loop needs, run by a
// stream's own program counter (GE's label and stream-switch tasks). An If, Loop or Scan
// compiled for the device (engine/codegen/control.py) is a stretch of one stream's tasks
// between labels; a `switch` reads a device tensor (a bool predicate, or an int64 counter
// against a bound) and jumps forward, a `goto` jumps anywhere in its stream, so a branch or
// an iteration costs a few task dispatches instead of a return to the host.
//
//   label       id `label`; a no-op, the target of jumps
//   goto        to label `label`; a backward goto needs attr `limit`: how many times it may
//               jump in one iteration of a launch (a loop that never ends fails the launch)
//   switch      to label `label`, forward only, when attr `test` holds: "true" / "false"
//               (input 0: one bool element), "ge" (inputs 0 and 1: one int64 element
//               each, input 0 >= input 1)
//   increment   input 0 == output 0: one int64 element, += 1
//   slice_copy  inputs [src, index] (index: one int64 element), output dst; attrs `mode`
//               "read" (dst = src[index] along `axis`) or "write" (dst[index] = src),
//               `reverse` (slice count - 1 - index); the index is checked at run time
//
// Load-time checks: labels unique, every jump's label in its own stream, switches forward,
// operands of the dtypes and sizes above, slices of matching shapes in plain formats, and
// no record or wait inside any jump's span (an event's records must run exactly once per
// iteration of a launch, or the waits' sequence numbers would not match them).
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "model_internal.h"

namespace ge {

namespace {

constexpr int64_t kMaxLabel = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxJumpLimit = int64_t{1} << 62;

const char* const kControlKinds[] = {"label", "goto", "switch", "increment", "slice_copy"};

// One element of `dt` (a scalar or any shape of one element).
void expect_scalar(const TensorInfo& t, DType dt, const char* what) {
  if (t.dtype != dt || t.numel != 1) {
    invalid(what, " '", t.name, "' must be one ", dtype_name(dt), " element, got ", type_str(t.dtype, t.shape));
  }
}

}  // namespace

bool Model::load_control_task(const TaskSpec& ts, Task& t) {
  const auto* kind = std::find(std::begin(kControlKinds), std::end(kControlKinds), ts.kind);
  if (kind == std::end(kControlKinds)) return false;
  KernelArgs args;  // its attribute getters only
  args.attrs = &ts.attrs;
  auto operands = [&](size_t n_in, size_t n_out) {
    if (ts.inputs.size() != n_in || ts.outputs.size() != n_out) {
      invalid(ts.kind, " takes ", n_in, " inputs and ", n_out, " outputs, got ", ts.inputs.size(), " and ",
              ts.outputs.size());
    }
  };
  auto arena_output = [&](int64_t index) {
    const TensorInfo* o = tensor_at(index, "output");
    if (o->region != Region::kArena) invalid("output '", o->name, "' must be in the arena");
    return o;
  };
  if (ts.kind == "label" || ts.kind == "goto" || ts.kind == "switch") {
    if (ts.label < 0 || ts.label > kMaxLabel) invalid("label ", ts.label, " out of range [0, ", kMaxLabel, "]");
    t.label = static_cast<int>(ts.label);
  }
  if (ts.kind == "label") {
    t.kind = Kind::kLabel;
    operands(0, 0);
  } else if (ts.kind == "goto") {
    t.kind = Kind::kGoto;
    operands(0, 0);
    if (args.has_attr("limit")) {
      const int64_t limit = args.attr_int("limit", 0);
      if (limit < 1 || limit > kMaxJumpLimit) invalid("limit ", limit, " out of range [1, 2^62]");
      t.limit = static_cast<uint64_t>(limit);
    }
  } else if (ts.kind == "switch") {
    t.kind = Kind::kSwitch;
    const std::string test = args.attr_str("test", "");
    if (test == "true" || test == "false") {
      operands(1, 0);
      t.test = test == "true" ? Test::kTrue : Test::kFalse;
      t.lhs = tensor_at(ts.inputs[0], "input");
      expect_scalar(*t.lhs, DType::kBool, "predicate");
    } else if (test == "ge") {
      operands(2, 0);
      t.test = Test::kGreaterEqual;
      t.lhs = tensor_at(ts.inputs[0], "input");
      t.rhs = tensor_at(ts.inputs[1], "input");
      expect_scalar(*t.lhs, DType::kInt64, "counter");
      expect_scalar(*t.rhs, DType::kInt64, "bound");
    } else {
      invalid("switch attr 'test' must be \"true\", \"false\" or \"ge\", got \"", test, "\"");
    }
  } else if (ts.kind == "increment") {
    t.kind = Kind::kIncrement;
    operands(1, 1);
    if (ts.inputs[0] != ts.outputs[0]) invalid("increment reads and writes one tensor");
    t.lhs = arena_output(ts.outputs[0]);
    expect_scalar(*t.lhs, DType::kInt64, "counter");
  } else {  // slice_copy
    t.kind = Kind::kSliceCopy;
    operands(2, 1);
    t.src = tensor_at(ts.inputs[0], "input");
    t.lhs = tensor_at(ts.inputs[1], "input");
    t.dst = arena_output(ts.outputs[0]);
    expect_scalar(*t.lhs, DType::kInt64, "slice index");
    const std::string mode = args.attr_str("mode", "");
    if (mode != "read" && mode != "write") invalid("slice_copy attr 'mode' must be \"read\" or \"write\", got \"", mode, "\"");
    t.write = mode == "write";
    t.reverse = args.attr_int("reverse", 0) != 0;
    const TensorInfo& whole = t.write ? *t.dst : *t.src;
    const TensorInfo& part = t.write ? *t.src : *t.dst;
    if (t.src->dtype != t.dst->dtype) {
      invalid("slice_copy from ", dtype_name(t.src->dtype), " to ", dtype_name(t.dst->dtype));
    }
    if (!whole.plain() || !part.plain()) invalid("slice_copy takes plain (nchw) tensors");
    const int64_t axis = args.attr_int("axis", 0);
    if (axis < 0 || axis >= whole.rank()) {
      invalid("slice_copy axis ", axis, " out of range for '", whole.name, "' of rank ", whole.rank());
    }
    Shape expect = whole.shape;
    expect.erase(expect.begin() + axis);
    if (part.shape != expect) {
      invalid("slice_copy: '", part.name, "' ", shape_str(part.shape), " is not a slice of '", whole.name, "' ",
              shape_str(whole.shape), " along axis ", axis);
    }
    const auto a = static_cast<size_t>(axis);
    t.outer = static_cast<size_t>(shape_numel(Shape(whole.shape.begin(), whole.shape.begin() + axis)));
    t.count = static_cast<size_t>(whole.shape[a]);
    t.inner = static_cast<size_t>(shape_numel(Shape(whole.shape.begin() + axis + 1, whole.shape.end()))) *
              dtype_size(whole.dtype);
  }
  return true;
}

void Model::link_control_flow() {
  stream_jumps_.assign(static_cast<size_t>(num_streams_), 0);
  // Each task's position in its stream, and the records / waits before each position.
  std::vector<uint32_t> position(tasks_.size());
  std::vector<std::vector<uint32_t>> events_before(static_cast<size_t>(num_streams_), {0});
  for (size_t i = 0; i < tasks_.size(); ++i) {
    auto& before = events_before[static_cast<size_t>(tasks_[i].stream)];
    position[i] = static_cast<uint32_t>(before.size() - 1);
    const bool event = tasks_[i].kind == Kind::kRecord || tasks_[i].kind == Kind::kWait;
    before.push_back(before.back() + (event ? 1 : 0));
  }
  std::unordered_map<int, size_t> labels;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    if (tasks_[i].kind != Kind::kLabel) continue;
    if (!labels.emplace(tasks_[i].label, i).second) {
      throw Error(Status::InvalidArgument(cat("label ", tasks_[i].label, " is defined twice"))
                      .prefixed(node_prefix(tasks_[i].name, tasks_[i].op)));
    }
  }
  for (size_t i = 0; i < tasks_.size(); ++i) {
    Task& t = tasks_[i];
    if (t.kind != Kind::kGoto && t.kind != Kind::kSwitch) continue;
    try {
      auto it = labels.find(t.label);
      if (it == labels.end()) invalid("jumps to label ", t.label, ", which no task defines");
      const Task& target = tasks_[it->second];
      if (target.stream != t.stream) {
        invalid("jumps to label ", t.label, " on stream ", target.stream, " from stream ", t.stream,
                "; a jump stays in its stream");
      }
      t.target = position[it->second];
      const uint32_t here = position[i];
      if (t.kind == Kind::kSwitch && t.target <= here) invalid("a switch jumps forward; label ", t.label, " is behind it");
      if (t.kind == Kind::kGoto && t.target <= here) {
        if (t.limit == 0) invalid("a backward goto needs attr 'limit' (its jumps per run)");
        t.jump = static_cast<int>(stream_jumps_[static_cast<size_t>(t.stream)]++);
      }
      const auto& before = events_before[static_cast<size_t>(t.stream)];
      const uint32_t lo = std::min(here, t.target), hi = std::max(here, t.target);
      if (before[hi] != before[lo + 1]) {
        invalid("a record or wait lies between it and label ", t.label,
                "; events cannot be inside a branch or loop (they must run once per run)");
      }
    } catch (const Error& e) {
      throw Error(e.status().prefixed(node_prefix(t.name, t.op)));
    }
  }
}

bool Model::StreamRun::control(const Task& t, LaneContext& lane, const ExecContext& ctx) {
  Model& m = *model_;
  const Device& dev = *m.device_;
  auto read_int = [&](const TensorInfo& x) {
    int64_t v = 0;
    dev.copy_to_host(&v, ctx.ptr(x), sizeof v);
    return v;
  };
  auto fail = [&](const std::string& why) {
    m.fail(*inst_, Status::InvalidArgument(why).prefixed(node_prefix(t.name, t.op)));
    return false;
  };
  switch (t.kind) {
    case Kind::kGoto:
      if (t.jump >= 0 && ++jumps_[static_cast<size_t>(t.jump)] > t.limit) {
        return fail(cat("the loop ran past its bound of ", t.limit, " iterations"));
      }
      pc_ = t.target;
      return true;
    case Kind::kSwitch: {
      lane.stream.synchronize();  // the predicate's writer is done
      bool jump;
      if (t.test == Test::kGreaterEqual) {
        jump = read_int(*t.lhs) >= read_int(*t.rhs);
      } else {
        uint8_t v = 0;
        dev.copy_to_host(&v, ctx.ptr(*t.lhs), 1);
        jump = (v != 0) == (t.test == Test::kTrue);
      }
      if (!jump) return false;
      pc_ = t.target;
      return true;
    }
    case Kind::kIncrement: {
      lane.stream.synchronize();
      const int64_t v = read_int(*t.lhs);
      if (v == INT64_MAX) return fail("counter overflow");
      const int64_t next = v + 1;
      dev.copy_to_device(ctx.ptr(*t.lhs), &next, sizeof next);
      return false;
    }
    case Kind::kSliceCopy: {
      lane.stream.synchronize();
      int64_t index = read_int(*t.lhs);
      const auto count = static_cast<int64_t>(t.count);
      if (t.reverse) index = count - 1 - index;
      if (index < 0 || index >= count) {
        return fail(cat("slice ", index, " of '", (t.write ? t.dst : t.src)->name, "' out of range [0, ", count, ")"));
      }
      const uint8_t* src = ctx.ptr(*t.src);
      uint8_t* dst = ctx.ptr(*t.dst);
      const size_t at = static_cast<size_t>(index) * t.inner, stride = t.count * t.inner;
      for (size_t o = 0; o < t.outer && t.inner; ++o) {
        if (t.write) {
          dev.copy_on_device(dst + o * stride + at, src + o * t.inner, t.inner);
        } else {
          dev.copy_on_device(dst + o * t.inner, src + o * stride + at, t.inner);
        }
      }
      inst_->copied.fetch_add(t.outer * t.inner, std::memory_order_relaxed);
      return false;
    }
    default:  // a label
      return false;
  }
}

}  // namespace ge
