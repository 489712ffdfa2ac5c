#include "model.h"

#include "layout.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>

namespace ge {

namespace {

constexpr int64_t kMaxStreams = 64;
constexpr int64_t kMaxEvents = 1 << 20;
constexpr int64_t kMaxElements = int64_t{1} << 46;

std::string node_prefix(const std::string& name, const std::string& op) {
  return cat("node '", name, "' (", op, "): ");
}

}  // namespace

Status Model::load(std::shared_ptr<const Device> device, const ModelSpec& spec,
                   std::unique_ptr<Model>* out) {
  std::unique_ptr<Model> m(new Model());
  m->device_ = std::move(device);
  try {
    m->load_impl(spec);
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
  streams_.clear();  // joins the workers before kernels and events go away
}

void Model::load_impl(const ModelSpec& spec) {
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
  arena_ = AlignedBuffer(static_cast<size_t>(spec.arena_bytes));
  weights_ = AlignedBuffer(spec.weights_size);
  if (spec.weights_size) std::memcpy(weights_.data(), spec.weights, spec.weights_size);
  for (int64_t i = 0; i < spec.num_events; ++i) events_.push_back(std::make_unique<Event>());

  load_tensors(spec);
  std::vector<Layout> layouts = assign_layouts(spec, tensors_);
  for (size_t i = 0; i < tensors_.size(); ++i) tensors_[i].layout = layouts[i];

  const int threads_per_stream =
      std::max(1, device_->threads() / static_cast<int>(spec.num_streams));
  // The caller of execute() may poll for completion only if the streams' OpenMP teams
  // leave it a core.
  const bool spare_core = threads_per_stream * spec.num_streams < omp_get_num_procs();
  for (int s = 0; s < spec.num_streams; ++s) {
    streams_.push_back(std::make_unique<Stream>(*device_, s, threads_per_stream, spare_core));
  }
  std::vector<KernelArgs> args(spec.tasks.size());
  load_tasks(spec, &args);
  build_kernels(&args);

  std::vector<size_t> ws(streams_.size(), 0);
  for (const Task& t : tasks_) {
    if (t.kernel) ws[t.stream] = std::max(ws[t.stream], t.kernel->workspace_bytes());
  }
  for (size_t s = 0; s < streams_.size(); ++s) streams_[s]->reserve_workspace(ws[s]);
  stream_items_.assign(streams_.size(), {});
  for (size_t i = 0; i < tasks_.size(); ++i) {
    Task& t = tasks_[i];
    if (t.kernel) {
      try {
        t.kernel->bind_workspace(streams_[t.stream]->workspace());
      } catch (const dnnl::error& e) {
        invalid(node_prefix(t.name, t.op), "oneDNN: ", e.what());
      }
    }
    stream_items_[t.stream].push_back({&Model::run_task, this, static_cast<uint32_t>(i)});
  }
  stats_.arena_bytes = arena_.size();
  stats_.weight_bytes = weights_.size();
  stats_.streams = num_streams();
  stats_.tasks = tasks_.size();
}

void Model::load_tensors(const ModelSpec& spec) {
  tensors_.resize(spec.tensors.size());
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
    size_t region_size;
    if (ts.region == "arena") {
      t.region = Region::kArena;
      region_size = arena_.size();
    } else if (ts.region == "weight") {
      t.region = Region::kWeight;
      region_size = weights_.size();
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
    t.data = (t.region == Region::kArena ? arena_.data() : weights_.data()) + t.offset;
  }
  for (int64_t idx : spec.inputs) {
    const TensorInfo* t = tensor_at(idx, "model input");
    if (t->region != Region::kArena) invalid("model input '", t->name, "' must be in the arena");
    if (std::find(inputs_.begin(), inputs_.end(), t) != inputs_.end()) {
      invalid("model input '", t->name, "' is bound twice");
    }
    inputs_.push_back(t);
  }
  for (int64_t idx : spec.outputs) outputs_.push_back(tensor_at(idx, "model output"));
}

const TensorInfo* Model::tensor_at(int64_t index, const std::string& what) const {
  if (index < 0 || index >= static_cast<int64_t>(tensors_.size())) {
    invalid(what, " tensor index ", index, " out of range [0, ", tensors_.size(), ")");
  }
  return &tensors_[static_cast<size_t>(index)];
}

void Model::load_tasks(const ModelSpec& spec, std::vector<KernelArgs>* kernel_args) {
  std::vector<uint64_t> records(events_.size(), 0);
  std::vector<int64_t> record_stream(events_.size(), -1);
  tasks_.resize(spec.tasks.size());
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
          if (outputs && ti->region != Region::kArena) {
            invalid("output '", ti->name, "' must be in the arena, not the weight region");
          }
          r.push_back(ti);
        }
        return r;
      };
      if (ts.kind == "kernel") {
        t.kind = Kind::kKernel;
        if (!find_kernel(ts.op)) invalid("unsupported op '", ts.op, "'");
        KernelArgs& args = (*kernel_args)[i];
        args.name = ts.name;
        args.op = ts.op;
        args.inputs = tensor_list(ts.inputs, "input", false);
        args.outputs = tensor_list(ts.outputs, "output", true);
        args.attrs = &ts.attrs;
        args.device = device_.get();
        if (layout_rule(ts.op) == LayoutRule::kPlainOnly) {
          for (const auto* list : {&args.inputs, &args.outputs}) {
            for (const TensorInfo* ti : *list) {
              if (ti && ti->channels_last()) {
                throw Error(Status::Internal(cat("tensor '", ti->name, "' is channels-last")));
              }
            }
          }
        }
      } else if (ts.kind == "record" || ts.kind == "wait") {
        if (ts.event < 0 || ts.event >= spec.num_events) {
          invalid("event ", ts.event, " out of range [0, ", spec.num_events, ")");
        }
        size_t e = static_cast<size_t>(ts.event);
        t.event = events_[e].get();
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
      } else {
        invalid("unknown task kind '", ts.kind, "'");
      }
    } catch (const Error& e) {
      throw Error(e.status().prefixed(prefix));
    }
  }
}

namespace {
struct BuildJob {
  int stream;
  std::vector<KernelArgs>* args;
  std::vector<Status> status;  // per task
};
}  // namespace

void Model::build_kernels(std::vector<KernelArgs>* args) {
  std::vector<BuildJob> jobs(streams_.size());
  for (size_t s = 0; s < streams_.size(); ++s) {
    jobs[s] = BuildJob{static_cast<int>(s), args, std::vector<Status>(tasks_.size())};
  }
  // Kernels are prepared on the worker of the stream that will run them: oneDNN sizes a
  // primitive's parallel decomposition by the thread count at creation, and no other
  // thread ever gets an OpenMP team of its own (libgomp counts every team's threads, and
  // once they outnumber the cores it sleeps between parallel regions: every oneDNN call
  // would then pay a thread wake-up). Streams build concurrently.
  struct Ctx {
    Model* model;
    BuildJob* job;
  };
  std::vector<Ctx> ctx(streams_.size());
  for (size_t s = 0; s < streams_.size(); ++s) {
    ctx[s] = Ctx{this, &jobs[s]};
    Stream::Item item{[](void* c, uint32_t, ExecContext& ec) {
                        auto* cx = static_cast<Ctx*>(c);
                        cx->model->build_stream_kernels(cx->job->stream, cx->job->args, &cx->job->status, ec);
                      },
                      &ctx[s], 0};
    streams_[s]->submit(&item, 1);
  }
  for (auto& s : streams_) s->synchronize();
  // Report the first failure in program order (each stream stops at its first one).
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const Status& st = jobs[tasks_[i].stream].status[i];
    if (!st.ok()) throw Error(st.prefixed(node_prefix(tasks_[i].name, tasks_[i].op)));
  }
}

void Model::build_stream_kernels(int stream, std::vector<KernelArgs>* args, std::vector<Status>* status,
                                 ExecContext& ec) {
  for (size_t i = 0; i < tasks_.size(); ++i) {
    Task& t = tasks_[i];
    if (t.kind != Kind::kKernel || t.stream != stream) continue;
    KernelArgs& a = (*args)[i];
    a.load_stream = &ec.dnnl_stream;
    Status& st = (*status)[i];
    try {
      t.kernel = find_kernel(t.op)(a);
    } catch (const Error& e) {
      st = e.status();
    } catch (const dnnl::error& e) {
      st = Status::InvalidArgument(cat("oneDNN cannot prepare this node: ", e.what()));
    } catch (const std::bad_alloc&) {
      st = Status::Internal("out of memory");
    } catch (const std::exception& e) {
      st = Status::Internal(e.what());
    }
    if (!st.ok()) return;
  }
}

void Model::run_task(void* model, uint32_t index, ExecContext& ec) {
  Model* m = static_cast<Model*>(model);
  Task& t = m->tasks_[index];
  if (m->run_failed_.load(std::memory_order_acquire)) return;  // drain the failed run
  Status st;
  try {
    st = m->run_one(t, ec);
  } catch (const dnnl::error& e) {
    st = Status::Internal(cat("oneDNN: ", e.what()));
  } catch (const std::bad_alloc&) {
    st = Status::Internal("out of memory");
  } catch (const std::exception& e) {
    st = Status::Internal(e.what());
  }
  if (!st.ok()) m->fail(st.prefixed(node_prefix(t.name, t.op)));
}

Status Model::run_one(Task& t, ExecContext& ec) {
  switch (t.kind) {
    case Kind::kKernel:
      return t.kernel->run(ec);
    case Kind::kRecord:
      t.event->signal(event_value(generation_, t.seq));
      return Status::Ok();
    case Kind::kWait:
      // false: the run was aborted elsewhere; the failure is already recorded.
      t.event->wait(event_value(generation_, t.seq));
      return Status::Ok();
    case Kind::kCopy:
      if (t.dst->data != t.src->data) std::memmove(t.dst->data, t.src->data, t.src->nbytes);
      task_bytes_copied_.fetch_add(t.src->nbytes, std::memory_order_relaxed);
      return Status::Ok();
  }
  return Status::Internal("unknown task kind");
}

void Model::fail(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(fail_mu_);
    if (run_failed_.load(std::memory_order_relaxed)) return;
    run_status_ = status;
    run_failed_.store(true, std::memory_order_release);
  }
  for (auto& e : events_) e->abort(generation_);
}

Status Model::execute(const std::vector<HostTensor>& inputs, std::vector<HostResult>* outputs) {
  outputs->clear();
  std::lock_guard<std::mutex> lock(run_mu_);
  if (inputs.size() != inputs_.size()) {
    return Status::InvalidArgument(
        cat("model '", name_, "' expects ", inputs_.size(), " inputs, got ", inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const HostTensor& h = inputs[i];
    const TensorInfo& t = *inputs_[i];
    if (!h.dtype || *h.dtype != t.dtype || h.shape != t.shape) {
      std::string got = (h.dtype ? std::string(dtype_name(*h.dtype)) : h.type_name) + shape_str(h.shape);
      return Status::InvalidArgument(
          cat("input '", t.name, "': expected ", type_str(t.dtype, t.shape), ", got ", got));
    }
    if (h.nbytes != t.nbytes) {
      return Status::InvalidArgument(cat("input '", t.name, "': expected ", t.nbytes, " bytes, got ", h.nbytes));
    }
  }
  auto start = std::chrono::steady_clock::now();
  uint64_t copied = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs_[i]->nbytes) std::memcpy(inputs_[i]->data, inputs[i].data, inputs_[i]->nbytes);
    copied += inputs_[i]->nbytes;
  }

  ++generation_;
  run_failed_.store(false, std::memory_order_relaxed);
  run_status_ = Status::Ok();
  task_bytes_copied_.store(0, std::memory_order_relaxed);
  for (size_t s = 0; s < streams_.size(); ++s) {
    streams_[s]->submit(stream_items_[s].data(), stream_items_[s].size());
  }
  for (auto& s : streams_) s->synchronize();
  if (run_failed_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> fl(fail_mu_);
    return run_status_;
  }

  try {
    outputs->reserve(outputs_.size());
    for (const TensorInfo* t : outputs_) {
      HostResult r{t->dtype, t->shape, AlignedBuffer(t->nbytes, /*zero=*/false)};
      if (t->nbytes) std::memcpy(r.data.data(), t->data, t->nbytes);
      copied += t->nbytes;
      outputs->push_back(std::move(r));
    }
  } catch (const std::bad_alloc&) {
    outputs->clear();
    return Status::Internal("out of memory allocating outputs");
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> sl(stats_mu_);
  stats_.runs += 1;
  stats_.seconds += secs;
  stats_.bytes_copied += copied + task_bytes_copied_.load(std::memory_order_relaxed);
  return Status::Ok();
}

ModelStats Model::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

}  // namespace ge
