// Model loading: validation, formats, the I/O plan, kernels, instances.
#include "model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <new>

#include "model_internal.h"

namespace ge {

namespace {

constexpr int64_t kMaxStreams = 64;
constexpr int64_t kMaxEvents = 1 << 20;
constexpr int64_t kMaxElements = int64_t{1} << 46;
constexpr int kMaxInstances = 1024;

}  // namespace

std::string node_prefix(const std::string& name, const std::string& op) {
  return cat("node '", name, "' (", op, "): ");
}

Status Model::load(std::shared_ptr<const Device> device, const ModelSpec& spec, int instances,
                   std::unique_ptr<Model>* out) {
  std::unique_ptr<Model> m(new Model());
  m->device_ = std::move(device);
  m->prepared_ = m->device_->make_shared_constants();
  try {
    m->load_impl(spec, instances);
  } catch (const Error& e) {
    return e.status();
  } catch (const std::bad_alloc&) {
    return Status::Internal(cat("model '", spec.name, "': out of memory"));
  } catch (const std::exception& e) {
    return Status::Internal(cat("model '", spec.name, "': ", e.what()));
  }
  *out = std::move(m);
  return Status::Ok();
}

Model::~Model() {
  std::unique_lock<std::mutex> lock(pool_mu_);
  // Every execute() has returned, so no launch is queued; a lane may still be returning
  // the last instance (it wakes that launch's caller only after).
  pool_cv_.wait(lock, [&] { return free_.size() == instances_.size(); });
}

void Model::set_kernel_instances(Kernel& k, const Task& t, int instances) const {
  try {
    k.set_instances(instances);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    Status st;
    if (!device_->library_error(e, "prepare the instances of this node", &st)) throw;
    throw Error(st.prefixed(node_prefix(t.name, t.op)));
  }
}

void Model::ensure_narrow() {
  if (narrow_ready_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(narrow_mu_);
  if (narrow_ready_.load(std::memory_order_relaxed) || narrow_failed_) return;
  // No launch reads Task::narrow or workspace_bytes_ until narrow_ready_ is set, so they
  // are written here while launches of the wide set run.
  std::vector<size_t> ws = workspace_bytes_;
  try {
    build_kernels(&narrow_args_, 1, true);
    for (const Task& t : tasks_) {
      if (!t.narrow) continue;
      size_t& w = ws[static_cast<size_t>(t.stream)];
      w = std::max(w, t.narrow->workspace_bytes());
      set_kernel_instances(*t.narrow, t, static_cast<int>(instances_.size()));
    }
  } catch (const std::exception&) {
    // Load built the wide set from the same arguments, so this is rare (memory): the model
    // keeps running its wide kernels, as a model of width 1 does.
    for (Task& t : tasks_) t.narrow.reset();
    narrow_failed_ = true;
    return;
  }
  workspace_bytes_ = ws;
  narrow_args_.clear();
  narrow_attrs_.clear();
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    stats_.prepared_bytes = prepared_->bytes();
    stats_.prepared_borrowed_bytes = prepared_->borrowed_bytes();
    stats_.workspace_bytes = 0;
    for (size_t w : workspace_bytes_) stats_.workspace_bytes += w * instances_.size();
    stats_.narrow_built = true;
  }
  narrow_ready_.store(true, std::memory_order_release);
}

void Model::load_impl(const ModelSpec& spec, int instances) {
  name_ = spec.name;
  if (spec.num_streams < 1 || spec.num_streams > kMaxStreams) {
    invalid("num_streams must be in [1, ", kMaxStreams, "], got ", spec.num_streams);
  }
  if (spec.num_events < 0 || spec.num_events > kMaxEvents) {
    invalid("num_events must be in [0, ", kMaxEvents, "], got ", spec.num_events);
  }
  if (spec.arena_bytes < 0 || spec.arena_bytes > kMaxElements) {
    invalid("arena_bytes out of range: ", spec.arena_bytes);
  }
  if (instances < 1 || instances > kMaxInstances) {
    invalid("instances must be in [1, ", kMaxInstances, "], got ", instances);
  }
  if (spec.threads_per_stream < 0 || spec.threads_per_stream > kMaxWidth) {
    invalid("threads_per_stream must be in [0, ", kMaxWidth, "], got ", spec.threads_per_stream);
  }
  num_streams_ = static_cast<int>(spec.num_streams);
  work_flops_ = spec.work_flops > 0 ? static_cast<uint64_t>(spec.work_flops) : 0;  // 0: unknown
  num_events_ = static_cast<int>(spec.num_events);
  Scheduler& sched = device_->scheduler();
  const int wanted = spec.threads_per_stream > 0 ? static_cast<int>(spec.threads_per_stream)
                                                 : std::max(1, device_->threads() / num_streams_);
  width_ = sched.clamp_width(wanted);
  // The caller of execute() polls for completion only if the model's lanes leave it a
  // core: otherwise the poll steals time from the very threads it waits for.
  spin_wait_ = width_ * std::min(num_streams_, sched.lanes(width_)) < device_->cores();

  arena_bytes_ = static_cast<size_t>(spec.arena_bytes);
  if (spec.weights.size() > kMaxWeightSegments) {
    invalid("weights: ", spec.weights.size(), " segments, at most ", kMaxWeightSegments);
  }
  for (const ModelSpec::WeightSegment& w : spec.weights) {
    Segment seg{weight_size_, w.data, w.size};
    if ((!w.borrowed || !device_->host_visible()) && w.size > 0) {
      owned_weights_.push_back(device_->allocate(w.size, /*zero=*/false));
      device_->copy_to_device(owned_weights_.back().data(), w.data, w.size);
      seg.base = owned_weights_.back().data();
    }
    segments_.push_back(seg);
    weight_size_ += (w.size + 63) / 64 * 64;
  }

  for (const std::shared_ptr<Variable>& v : spec.variables) {
    if (!v) invalid("variables: a null variable");
    if (&v->device() != device_.get()) invalid("variable '", v->name(), "' lives on another device");
    variables_.push_back(v);
  }

  load_tensors(spec);
  if (!explicit_formats_) {
    std::vector<Format> formats = device_->assign_formats(spec, tensors_);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      // a variable's bytes are plain: other models and the session read them so
      tensors_[i].format = tensors_[i].region == Region::kVariable ? Format::kPlain : formats[i];
    }
  }
  std::vector<KernelArgs> args(spec.tasks.size());
  load_tasks(spec, &args);
  if (device_->host_visible()) {
    io_ = plan_io(tensors_, spec.tasks, spec.inputs, spec.outputs);
  } else {  // no caller buffer is bound: every input and output is copied through the arena
    io_ = plan_io(tensors_, spec.tasks, {}, {});
    io_.input_slot.assign(spec.inputs.size(), -1);
    io_.output_slot.assign(spec.outputs.size(), -1);
  }
  // Variables take the slots after the I/O plan's (the plan binds arena tensors only).
  variable_slot_ = static_cast<uint32_t>(io_.num_slots);
  io_.num_slots += static_cast<int>(variables_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].region == Region::kVariable) {
      io_.slot[i] = variable_slot_ + tensors_[i].slot;  // load_tensors left the index there
    }
    tensors_[i].slot = io_.slot[i];
    tensors_[i].slot_offset = io_.slot_offset[i];
  }
  build_kernels(&args, width_, false);
  // The narrow set shares the prepared weights and is built when a launch first wants it
  // (ensure_narrow): the arguments are kept for it, with their own copy of the attributes.
  has_narrow_ = width_ > 1;
  has_serial_ = width_ == 1 && num_streams_ > 1 && sched.lanes(1) > 1;
  if (has_narrow_) {
    narrow_attrs_.resize(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i].attrs) continue;  // not a kernel task
      narrow_attrs_[i] = *args[i].attrs;
      args[i].attrs = &narrow_attrs_[i];
    }
    narrow_args_ = std::move(args);
  }

  stream_tasks_.assign(static_cast<size_t>(num_streams_), {});
  workspace_bytes_.assign(static_cast<size_t>(num_streams_), 0);
  for (size_t i = 0; i < tasks_.size(); ++i) {
    Task& t = tasks_[i];
    stream_tasks_[static_cast<size_t>(t.stream)].push_back(static_cast<uint32_t>(i));
    if (Kernel* k = t.kernel.get()) {
      size_t& ws = workspace_bytes_[static_cast<size_t>(t.stream)];
      ws = std::max(ws, k->workspace_bytes());
      set_kernel_instances(*k, t, instances);
    }
  }
  stream_ns_.reset(new std::atomic<uint64_t>[static_cast<size_t>(num_streams_)]);
  for (int s = 0; s < num_streams_; ++s) stream_ns_[s].store(0);
  task_ns_.reset(new std::atomic<uint64_t>[tasks_.size()]);
  task_calls_.reset(new std::atomic<uint64_t>[tasks_.size()]);
  for (size_t i = 0; i < tasks_.size(); ++i) {
    task_ns_[i].store(0);
    task_calls_[i].store(0);
  }

  for (int i = 0; i < instances; ++i) {
    auto in = std::make_unique<Instance>();
    in->index = i;
    in->arena = device_->allocate(arena_bytes_, /*zero=*/true);
    for (size_t ws : workspace_bytes_) in->workspaces.push_back(device_->allocate(ws, /*zero=*/false));
    for (int e = 0; e < num_events_; ++e) in->events.push_back(std::make_unique<Event>());
    for (int s = 0; s < num_streams_; ++s) in->runs.push_back(std::make_unique<StreamRun>(this, in.get(), s));
    instances_.push_back(std::move(in));
  }
  for (auto it = instances_.rbegin(); it != instances_.rend(); ++it) free_.push_back(it->get());

  stats_.arena_bytes = arena_bytes_ * instances_.size();
  stats_.weight_bytes = weight_size_;
  stats_.prepared_bytes = prepared_->bytes();
  stats_.prepared_borrowed_bytes = prepared_->borrowed_bytes();
  for (size_t ws : workspace_bytes_) stats_.workspace_bytes += ws * instances_.size();
  stats_.instances = static_cast<int>(instances_.size());
  stats_.streams = num_streams_;
  stats_.threads_per_stream = width_;
  stats_.tasks = tasks_.size();
}

void Model::load_tensors(const ModelSpec& spec) {
  tensors_.resize(spec.tensors.size());
  for (const TensorSpec& ts : spec.tensors) explicit_formats_ = explicit_formats_ || !ts.format.empty();
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    const TensorSpec& ts = spec.tensors[i];
    TensorInfo& t = tensors_[i];
    t.name = ts.name;
    if (!parse_dtype(ts.dtype, &t.dtype)) invalid("tensor '", ts.name, "': unknown dtype '", ts.dtype, "'");
    t.shape = ts.shape;
    bool empty = false;
    for (int64_t d : ts.shape) {
      if (d < 0) invalid("tensor '", ts.name, "': negative dimension in shape ", shape_str(ts.shape));
      empty = empty || d == 0;
    }
    // The product of the non-zero dims is bounded too, so that strides computed from the
    // shape (even of an empty tensor) never overflow.
    int64_t n = 1;
    for (int64_t d : ts.shape) {
      if (d == 0) continue;
      if (n > kMaxElements / d) invalid("tensor '", ts.name, "': shape ", shape_str(ts.shape), " is too large");
      n *= d;
    }
    if (empty) n = 0;
    t.numel = n;
    t.nbytes = static_cast<size_t>(n) * dtype_size(t.dtype);
    if (!ts.format.empty()) {
      if (!parse_format(ts.format, &t.format)) invalid("tensor '", ts.name, "': unknown format '", ts.format, "'");
      std::string why = format_error(t.format, t.shape);
      if (!why.empty()) invalid("tensor '", ts.name, "': format ", ts.format, " for shape ", shape_str(t.shape), ": ", why);
      if (t.padded() && t.dtype != DType::kFloat32) {
        invalid("tensor '", ts.name, "': padded ", ts.format, " (channels ", t.shape[1], ") is float32 only");
      }
      // A padded blocked tensor also stores its zero channels (at most 16x, within bounds).
      if (t.padded() && !empty) t.nbytes = static_cast<size_t>(storage_numel(t.format, t.shape)) * dtype_size(t.dtype);
    }
    size_t region_size;
    if (ts.region == "arena") {
      t.region = Region::kArena;
      region_size = arena_bytes_;
    } else if (ts.region == "weight") {
      t.region = Region::kWeight;
      region_size = weight_size_;  // then narrowed to the segment the tensor starts in
    } else if (ts.region == "variable") {
      t.region = Region::kVariable;
      if (ts.variable < 0 || ts.variable >= static_cast<int64_t>(variables_.size())) {
        invalid("tensor '", ts.name, "': variable ", ts.variable, " out of range [0, ", variables_.size(), ")");
      }
      const Variable& var = *variables_[static_cast<size_t>(ts.variable)];
      region_size = var.nbytes();
      if (!ts.format.empty() && ts.format != "nchw") {
        invalid("tensor '", ts.name, "': a variable's bytes are plain, not ", ts.format);
      }
    } else {
      invalid("tensor '", ts.name, "': unknown region '", ts.region, "'");
    }
    if (ts.offset < 0 || static_cast<uint64_t>(ts.offset) > region_size ||
        t.nbytes > region_size - static_cast<size_t>(ts.offset)) {
      invalid("tensor '", ts.name, "': bytes [", ts.offset, ", ", ts.offset + static_cast<int64_t>(t.nbytes),
              ") exceed the ", ts.region, " region of ", region_size, " bytes");
    }
    if (ts.offset % static_cast<int64_t>(dtype_size(t.dtype)) != 0) {
      invalid("tensor '", ts.name, "': offset ", ts.offset, " is not a multiple of the ", dtype_name(t.dtype),
              " element size ", dtype_size(t.dtype));
    }
    t.offset = static_cast<size_t>(ts.offset);
    t.slot = kArenaSlot;
    t.slot_offset = t.offset;
    if (t.region == Region::kVariable) {
      t.slot = static_cast<uint32_t>(ts.variable);  // made variable_slot_ + index in load_impl
      const uint8_t* base = variables_[t.slot]->data();
      if (reinterpret_cast<uintptr_t>(base + t.offset) % dtype_size(t.dtype) != 0) {
        invalid("tensor '", ts.name, "': its variable bytes are not aligned to the ", dtype_name(t.dtype),
                " element size ", dtype_size(t.dtype));
      }
    }
    if (t.region == Region::kWeight) {
      size_t k = segments_.size();
      while (k > 0 && segments_[k - 1].start > t.offset) --k;
      if (k == 0 || t.offset - segments_[k - 1].start + t.nbytes > segments_[k - 1].size) {
        invalid("tensor '", ts.name, "': bytes [", ts.offset, ", ", ts.offset + static_cast<int64_t>(t.nbytes),
                ") do not lie inside one weight segment");
      }
      const Segment& seg = segments_[k - 1];
      t.slot = kWeightSlot + static_cast<uint32_t>(k - 1);
      t.slot_offset = t.offset - seg.start;
      t.data = seg.base + t.slot_offset;
      if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0) {
        invalid("tensor '", ts.name, "': its weight bytes are not aligned to the ", dtype_name(t.dtype),
                " element size ", dtype_size(t.dtype));
      }
    }
  }
  for (int64_t idx : spec.inputs) {
    const TensorInfo* t = tensor_at(idx, "model input");
    if (t->region != Region::kArena) invalid("model input '", t->name, "' must be in the arena");
    if (std::find(inputs_.begin(), inputs_.end(), t) != inputs_.end()) {
      invalid("model input '", t->name, "' is bound twice");
    }
    if (!t->plain()) invalid("model input '", t->name, "' must be stored nchw, not ", format_name(t->format));
    inputs_.push_back(t);
  }
  for (int64_t idx : spec.outputs) {
    const TensorInfo* t = tensor_at(idx, "model output");
    if (!t->plain()) invalid("model output '", t->name, "' must be stored nchw, not ", format_name(t->format));
    outputs_.push_back(t);
  }
}

const TensorInfo* Model::tensor_at(int64_t index, const std::string& what) const {
  if (index < 0 || index >= static_cast<int64_t>(tensors_.size())) {
    invalid(what, " tensor index ", index, " out of range [0, ", tensors_.size(), ")");
  }
  return &tensors_[static_cast<size_t>(index)];
}

void Model::load_tasks(const ModelSpec& spec, std::vector<KernelArgs>* kernel_args) {
  std::vector<uint64_t> records(static_cast<size_t>(num_events_), 0);
  std::vector<int64_t> record_stream(static_cast<size_t>(num_events_), -1);
  tasks_.resize(spec.tasks.size());
  if (spec.tasks.size() > (size_t{1} << 31)) invalid("too many tasks");
  for (size_t i = 0; i < spec.tasks.size(); ++i) {
    const TaskSpec& ts = spec.tasks[i];
    Task& t = tasks_[i];
    t.name = ts.name;
    t.op = ts.kind == "kernel" ? ts.op : ts.kind;
    const std::string prefix = node_prefix(t.name, t.op);
    try {
      if (ts.stream < 0 || ts.stream >= spec.num_streams) {
        invalid("stream ", ts.stream, " out of range [0, ", spec.num_streams, ")");
      }
      t.stream = static_cast<int>(ts.stream);
      auto tensor_list = [&](const std::vector<int64_t>& idx, const char* what, bool outputs) {
        std::vector<const TensorInfo*> r;
        for (int64_t j : idx) {
          if (j == -1) {
            r.push_back(nullptr);
            continue;
          }
          const TensorInfo* ti = tensor_at(j, what);
          if (outputs && ti->region == Region::kWeight) {
            invalid("output '", ti->name, "' must be in the arena or a variable, not the weight region");
          }
          r.push_back(ti);
        }
        return r;
      };
      if (ts.kind == "kernel") {
        t.kind = Kind::kKernel;
        if (!device_->find_kernel(ts.op)) invalid("unsupported op '", ts.op, "' on device '", device_->name(), "'");
        KernelArgs& args = (*kernel_args)[i];
        args.name = ts.name;
        args.op = ts.op;
        args.inputs = tensor_list(ts.inputs, "input", false);
        args.outputs = tensor_list(ts.outputs, "output", true);
        args.attrs = &ts.attrs;
        args.device = device_.get();
        args.explicit_formats = explicit_formats_;
        args.prepared = prepared_.get();
        std::string why = device_->check_formats(ts, tensors_);
        if (!why.empty()) {
          if (explicit_formats_) invalid(why);
          throw Error(Status::Internal(why));  // the runtime's own choice broke a rule
        }
      } else if (ts.kind == "record" || ts.kind == "wait") {
        if (ts.event < 0 || ts.event >= spec.num_events) {
          invalid("event ", ts.event, " out of range [0, ", spec.num_events, ")");
        }
        size_t e = static_cast<size_t>(ts.event);
        t.event = static_cast<int>(ts.event);
        if (ts.kind == "record") {
          t.kind = Kind::kRecord;
          if (record_stream[e] >= 0 && record_stream[e] != ts.stream) {
            invalid("event ", e, " is recorded on streams ", record_stream[e], " and ", ts.stream,
                    "; an event's records must all be on one stream");
          }
          record_stream[e] = ts.stream;
          t.seq = ++records[e];
          if (t.seq >= (uint64_t{1} << kEventSeqBits)) invalid("too many records of event ", e);
        } else {
          t.kind = Kind::kWait;
          t.seq = records[e];
          if (t.seq == 0) invalid("waits on event ", e, " before any record of it in program order");
        }
      } else if (ts.kind == "copy") {
        t.kind = Kind::kCopy;
        if (ts.inputs.size() != 1 || ts.outputs.size() != 1) invalid("copy takes one input and one output");
        t.src = tensor_at(ts.inputs[0], "input");
        t.dst = tensor_list(ts.outputs, "output", true)[0];
        if (!t.dst) invalid("copy output is required");
        if (t.src->nbytes != t.dst->nbytes) {
          invalid("copy of ", t.src->nbytes, " bytes into ", t.dst->nbytes, " bytes");
        }
        if (t.src->format != t.dst->format && !(t.src->numel <= 1)) {
          invalid("copy from ", format_name(t.src->format), " to ", format_name(t.dst->format),
                  " (use TransData to change formats)");
        }
      } else if (!load_control_task(ts, t)) {
        invalid("unknown task kind '", ts.kind, "'");
      }
    } catch (const Error& e) {
      throw Error(e.status().prefixed(prefix));
    }
  }
  link_control_flow();
}

void Model::build_kernels(std::vector<KernelArgs>* args, int width, bool narrow) {
  std::vector<Status> status(tasks_.size());
  // Kernels are prepared on a lane of the width that will run them: oneDNN sizes a
  // primitive's parallel decomposition by the thread count at creation, and no other
  // thread ever gets an OpenMP team of its own (libgomp counts every team's threads, and
  // once they outnumber the cores it sleeps between parallel regions: every oneDNN call
  // would then pay a thread wake-up). Streams build concurrently when there are lanes.
  std::vector<std::function<void(LaneContext&)>> jobs;
  for (int s = 0; s < num_streams_; ++s) {
    bool any = false;
    for (const Task& t : tasks_) any = any || (t.kind == Kind::kKernel && t.stream == s);
    if (!any) continue;
    jobs.push_back([this, s, args, narrow, &status](LaneContext& lane) {
      for (size_t i = 0; i < tasks_.size(); ++i) {
        Task& t = tasks_[i];
        if (t.kind != Kind::kKernel || t.stream != s) continue;
        KernelArgs& a = (*args)[i];
        a.load_stream = &lane.stream;
        Status& st = status[i];
        try {
          const auto start = std::chrono::steady_clock::now();
          (narrow ? t.narrow : t.kernel) = device_->find_kernel(t.op)(a);
          if (!narrow) {
            t.build_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                   std::chrono::steady_clock::now() - start)
                                                   .count());
          }
        } catch (const Error& e) {
          st = e.status();
        } catch (const std::bad_alloc&) {
          st = Status::Internal("out of memory");
        } catch (const std::exception& e) {
          if (!device_->library_error(e, "prepare this node", &st)) st = Status::Internal(e.what());
        }
        if (!st.ok()) return;
      }
    });
  }
  device_->scheduler().run_on_lanes(width, jobs);
  // Report the first failure in program order (each stream stops at its first one).
  for (size_t i = 0; i < tasks_.size(); ++i) {
    if (!status[i].ok()) throw Error(status[i].prefixed(node_prefix(tasks_[i].name, tasks_[i].op)));
  }
}

std::vector<Model::TaskProfile> Model::profile() const {
  std::vector<TaskProfile> r;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const Task& t = tasks_[i];
    r.push_back({t.name, t.op, t.kernel ? t.kernel->impl() : std::string(), t.stream, task_calls_[i].load(),
                 task_ns_[i].load() * 1e-9, t.build_ns * 1e-9});
  }
  return r;
}

ModelStats Model::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  ModelStats s = stats_;
  s.stream_seconds.clear();
  for (int i = 0; i < num_streams_; ++i) s.stream_seconds.push_back(stream_ns_[i].load() * 1e-9);
  return s;
}

}  // namespace ge
