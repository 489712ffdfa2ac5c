// TreeEnsembleClassifier / TreeEnsembleRegressor (ai.onnx.ml), the arithmetic of the numpy
// reference (engine/ops/ml_trees.py): the trees are flattened at load into one node array
// (threshold, feature, mode, child indexes) and one list of leaf weights, every index checked
// there, so run() only walks. A row's score for a class or target is the sum of the weights of
// the leaves it reaches (in float and in tree order, as ONNX Runtime sums float attributes),
// averaged over the trees for AVERAGE, plus its base value; a target no reached leaf names
// scores 0 (a class keeps its base value). The post transform and the binary rule follow the
// reference in double.
//
// The compiler passes the modes as codes (BRANCH_LEQ, LT, GTE, GT, EQ, NEQ: 0..5; LEAF: -1)
// and the weights under one name for both ops (weights_treeids, _nodeids, _ids, weights).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "kernels.h"

namespace ge {

namespace {

enum Mode : int8_t { kLeq, kLt, kGte, kGt, kEq, kNeq, kLeaf = -1 };
enum Transform { kNone, kSoftmax, kLogistic, kSoftmaxZero, kProbit };

// Below this many node visits per run (rows x trees x depth) the walk takes less time than
// waking the lane's other threads.
constexpr int64_t kParallelVisits = 1 << 15;
// Rows walked together (walk_block).
constexpr int64_t kBlock = 8;

struct TreeNode {
  float value = 0.f;    // threshold
  int32_t feature = 0;  // column of the row an inner node reads
  int32_t yes = 0;      // inner: child indexes; leaf: its weights are [yes, no)
  int32_t no = 0;
  int8_t mode = kLeaf;
  bool nan_true = false;  // a NaN goes to the true child
};

struct LeafWeight {
  int32_t target;
  float weight;
};

// NaN compares false except under NEQ; a tracked NaN goes to the true child regardless (ONNX
// Runtime's rule).
inline bool goes_true(const TreeNode& n, float v) {
  bool c = false;
  switch (n.mode) {
    case kLeq: c = v <= n.value; break;
    case kLt: c = v < n.value; break;
    case kGte: c = v >= n.value; break;
    case kGt: c = v > n.value; break;
    case kEq: c = v == n.value; break;
    default: c = v != n.value; break;
  }
  return c || (n.nan_true && v != v);
}

// erf's inverse as the reference computes it: Winitzki's closed form, then three Newton steps.
double erfinv(double y) {
  if (!(std::fabs(y) < 1.0)) {
    return std::fabs(y) == 1.0 ? std::copysign(std::numeric_limits<double>::infinity(), y) : std::nan("");
  }
  constexpr double a = 0.147;
  const double ln = std::log(std::max(1.0 - y * y, 1e-300));
  const double t = 2.0 / (M_PI * a) + ln / 2.0;
  const double sign = y > 0 ? 1.0 : y < 0 ? -1.0 : 0.0;
  double x = sign * std::sqrt(std::max(std::sqrt(t * t - ln / a) - t, 0.0));
  for (int i = 0; i < 3; ++i) x -= (std::erf(x) - y) / (2.0 / std::sqrt(M_PI) * std::exp(-x * x));
  return x;
}

// numpy's argmax: the first largest value, or the first NaN.
struct ArgMax {
  int64_t at = 0;
  double best = -std::numeric_limits<double>::infinity();
  bool nan = false;
  void see(int64_t i, double v) {
    if (nan) return;
    if (v != v) {
      nan = true;
      at = i;
    } else if (i == 0 || v > best) {
      at = i;
      best = v;
    }
  }
};

class TreeEnsembleKernel : public Kernel {
 public:
  explicit TreeEnsembleKernel(const KernelArgs& a) : classifier_(a.op == "TreeEnsembleClassifier") {
    a.expect_inputs(1, 1);
    a.expect_outputs(classifier_ ? 2 : 1, classifier_ ? 2 : 1);
    x_ = &a.in(0);
    if (x_->dtype != DType::kFloat32) invalid("input must be float32, got ", dtype_name(x_->dtype));
    if (x_->rank() < 1 || x_->rank() > 2) invalid("input must have rank 1 or 2, got ", shape_str(x_->shape));
    rows_ = x_->shape[0];
    width_ = x_->rank() == 2 ? x_->shape[1] : 1;
    if (classifier_) {
      labels_ = a.attr_ints("classlabels_int64s", {});
      targets_ = static_cast<int64_t>(labels_.size());
      if (targets_ < 1) invalid("classlabels_int64s is empty (string labels run on the host)");
    } else {
      targets_ = a.attr_int("n_targets", 0);
      if (targets_ < 1 || targets_ > std::numeric_limits<int32_t>::max()) invalid("n_targets = ", targets_, " must be >= 1");
    }
    if (classifier_) {
      label_ = &a.out(0);
      if (label_->dtype != DType::kInt64 || label_->shape != Shape{rows_}) {
        invalid("label output must be ", type_str(DType::kInt64, {rows_}));
      }
    }
    y_ = &a.out(classifier_ ? 1 : 0);
    if (y_->dtype != DType::kFloat32 || y_->shape != Shape{rows_, targets_}) {
      invalid("scores output must be ", type_str(DType::kFloat32, {rows_, targets_}));
    }
    read_nodes(a);
    read_weights(a);
    check_acyclic();
    read_finish(a);
    index_.clear();  // only load's checks look nodes up by id
  }

  size_t workspace_bytes() const override { return static_cast<size_t>(mul_checked(rows_, targets_)); }

  Status run(ExecContext& ctx) override {
    const float* x = ctx.ptr<const float>(*x_);
    float* y = ctx.ptr<float>(*y_);
    int64_t* label = label_ ? ctx.ptr<int64_t>(*label_) : nullptr;
    uint8_t* reached = ctx.workspace;
    const int64_t blocks = (rows_ + kBlock - 1) / kBlock;
    auto block = [&](int64_t i) {
      const int64_t r0 = i * kBlock, n = std::min(kBlock, rows_ - r0);
      walk_block(x + r0 * width_, n, y + r0 * targets_, reached + r0 * targets_);
      for (int64_t r = r0; r < r0 + n; ++r) finish_row(y + r * targets_, reached + r * targets_, label ? label + r : nullptr);
    };
    if (parallel_ && blocks > 1 && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < blocks; ++i) block(i);
    } else {
      for (int64_t i = 0; i < blocks; ++i) block(i);
    }
    return Status::Ok();
  }

  std::string impl() const override { return cat("trees:", roots_.size(), "x", nodes_.size()); }

 private:
  void read_nodes(const KernelArgs& a) {
    const auto tree = a.attr_ints("nodes_treeids", {});
    const auto id = a.attr_ints("nodes_nodeids", {});
    const auto feature = a.attr_ints("nodes_featureids", {});
    const auto mode = a.attr_ints("nodes_modes", {});
    const auto yes = a.attr_ints("nodes_truenodeids", {});
    const auto no = a.attr_ints("nodes_falsenodeids", {});
    const size_t n = tree.size();
    const auto value = a.attr_floats("nodes_values", std::vector<double>(n, 0.0));
    const auto nan_true = a.attr_ints("nodes_missing_value_tracks_true", std::vector<int64_t>(n, 0));
    if (n == 0) invalid("the ensemble has no nodes");
    if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) invalid("too many nodes (", n, ")");
    for (const auto* v : {&id, &feature, &mode, &yes, &no, &nan_true}) {
      if (v->size() != n) invalid("the nodes_* attributes differ in length (", n, " tree ids, ", v->size(), " of another)");
    }
    if (value.size() != n) invalid("nodes_values has ", value.size(), " values for ", n, " nodes");
    for (size_t i = 0; i < n; ++i) {
      if (!index_.emplace(std::make_pair(tree[i], id[i]), static_cast<int32_t>(i)).second) {
        invalid("tree ", tree[i], " has node ", id[i], " twice");
      }
    }
    nodes_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      TreeNode& t = nodes_[i];
      if (mode[i] < kLeaf || mode[i] > kNeq) invalid("tree ", tree[i], " node ", id[i], ": unknown mode ", mode[i]);
      t.mode = static_cast<int8_t>(mode[i]);
      if (t.mode == kLeaf) continue;
      if (feature[i] < 0 || feature[i] >= width_) {
        invalid("tree ", tree[i], " node ", id[i], " reads feature ", feature[i], " of rows with ", width_, " features");
      }
      t.feature = static_cast<int32_t>(feature[i]);
      t.value = static_cast<float>(value[i]);
      t.nan_true = nan_true[i] != 0;
      t.yes = child(tree[i], id[i], yes[i], "true");
      t.no = child(tree[i], id[i], no[i], "false");
    }
    // Trees in the order of their ids, each from its node 0 (else its first node), as the
    // reference walks them.
    std::map<int64_t, int32_t> roots;
    for (size_t i = 0; i < n; ++i) roots.emplace(tree[i], static_cast<int32_t>(i));
    for (auto& [t, first] : roots) {
      const auto it = index_.find({t, 0});
      roots_.push_back(it != index_.end() ? it->second : first);
    }
  }

  int32_t child(int64_t tree, int64_t id, int64_t to, const char* which) const {
    const auto it = index_.find({tree, to});
    if (it == index_.end()) invalid("tree ", tree, " node ", id, ": its ", which, " child ", to, " is not a node of the tree");
    return it->second;
  }

  void read_weights(const KernelArgs& a) {
    const auto tree = a.attr_ints("weights_treeids", {});
    const auto id = a.attr_ints("weights_nodeids", {});
    const auto target = a.attr_ints("weights_ids", {});
    const auto weight = a.attr_floats("weights", {});
    const size_t n = tree.size();
    if (id.size() != n || target.size() != n || weight.size() != n) {
      invalid("the leaf weight attributes differ in length (", n, " tree ids, ", id.size(), " node ids, ", target.size(),
              " class/target ids, ", weight.size(), " weights)");
    }
    std::vector<std::pair<int32_t, LeafWeight>> by_node(n);
    for (size_t i = 0; i < n; ++i) {
      const auto it = index_.find({tree[i], id[i]});
      if (it == index_.end()) invalid("a weight names tree ", tree[i], " node ", id[i], ", which does not exist");
      if (target[i] < 0 || target[i] >= targets_) {
        invalid("tree ", tree[i], " node ", id[i], ": class/target id ", target[i], " is out of range [0, ", targets_, ")");
      }
      by_node[i] = {it->second, {static_cast<int32_t>(target[i]), static_cast<float>(weight[i])}};
    }
    // Grouped by leaf, each leaf's weights in attribute order (the order they are summed).
    std::stable_sort(by_node.begin(), by_node.end(), [](const auto& l, const auto& r) { return l.first < r.first; });
    weights_.reserve(n);
    for (size_t i = 0; i < n;) {
      TreeNode& leaf = nodes_[by_node[i].first];
      const size_t begin = i;
      for (; i < n && by_node[i].first == by_node[begin].first; ++i) weights_.push_back(by_node[i].second);
      if (leaf.mode != kLeaf) continue;  // never reached: a walk ends at a leaf
      leaf.yes = static_cast<int32_t>(begin);
      leaf.no = static_cast<int32_t>(i);
    }
    min_weight_ = weight.empty() ? 0.0 : *std::min_element(weight.begin(), weight.end());
    binary_ = classifier_ && targets_ == 2 && !target.empty() &&
              std::all_of(target.begin(), target.end(), [&](int64_t t) { return t == target[0]; });
  }

  // Every walk must end at a leaf: a depth-first search from each root finds a node on its
  // own path (a cycle), and the longest path bounds the run's cost estimate.
  void check_acyclic() {
    std::vector<uint8_t> state(nodes_.size(), 0);  // 0 unseen, 1 on the path, 2 done
    std::vector<int32_t> depth(nodes_.size(), 1);
    std::vector<std::pair<int32_t, int>> stack;  // node, children visited
    int64_t deepest = 1;
    for (int32_t root : roots_) {
      if (state[root] == 2) continue;
      stack.push_back({root, 0});
      state[root] = 1;
      while (!stack.empty()) {
        auto& [i, next] = stack.back();
        const TreeNode& t = nodes_[i];
        if (t.mode != kLeaf && next < 2) {
          const int32_t c = next++ == 0 ? t.yes : t.no;
          if (state[c] == 1) {
            const auto [tree, id] = node_key(c);
            invalid("tree ", tree, " has a cycle through node ", id);
          }
          if (state[c] == 0) {
            state[c] = 1;
            stack.push_back({c, 0});
          }
          continue;
        }
        if (t.mode != kLeaf) depth[i] = 1 + std::max(depth[t.yes], depth[t.no]);
        deepest = std::max<int64_t>(deepest, depth[i]);
        state[i] = 2;
        stack.pop_back();
      }
    }
    const int64_t visits = mul_checked(static_cast<int64_t>(roots_.size()), deepest);
    parallel_ = rows_ > 1 && visits >= kParallelVisits / rows_;
  }

  std::pair<int64_t, int64_t> node_key(int32_t i) const {
    for (const auto& [key, at] : index_) {
      if (at == i) return key;
    }
    return {-1, -1};  // unreachable: every node has its key
  }

  void read_finish(const KernelArgs& a) {
    const std::string agg = a.attr_str("aggregate_function", "SUM");
    if (agg != "SUM" && agg != "AVERAGE") invalid("aggregate_function ", agg, " is not SUM or AVERAGE");
    average_ = agg == "AVERAGE";
    const std::string post = a.attr_str("post_transform", "NONE");
    static const std::map<std::string, Transform> kinds = {{"NONE", kNone},
                                                           {"SOFTMAX", kSoftmax},
                                                           {"LOGISTIC", kLogistic},
                                                           {"SOFTMAX_ZERO", kSoftmaxZero},
                                                           {"PROBIT", kProbit}};
    const auto it = kinds.find(post);
    if (it == kinds.end()) invalid("unknown post_transform ", post);
    transform_ = it->second;
    base_ = a.attr_floats("base_values", {});
    if (!base_.empty() && base_.size() != 1 && static_cast<int64_t>(base_.size()) != targets_) {
      invalid("base_values has ", base_.size(), " values for ", targets_, " classes/targets");
    }
  }

  // Walks up to kBlock rows through each tree together: each step of a walk waits on the load
  // of its node, and the rows' independent walks overlap those waits.
  void walk_block(const float* x, int64_t n, float* s, uint8_t* hit) const {
    std::fill(s, s + n * targets_, 0.f);
    std::fill(hit, hit + n * targets_, uint8_t{0});
    int32_t at[kBlock];
    for (int32_t root : roots_) {
      std::fill(at, at + n, root);
      for (bool moving = true; moving;) {
        moving = false;
        for (int64_t b = 0; b < n; ++b) {
          const TreeNode& t = nodes_[at[b]];
          if (t.mode == kLeaf) continue;
          at[b] = goes_true(t, x[b * width_ + t.feature]) ? t.yes : t.no;
          moving = true;
        }
      }
      for (int64_t b = 0; b < n; ++b) {
        for (int32_t w = nodes_[at[b]].yes; w < nodes_[at[b]].no; ++w) {
          s[b * targets_ + weights_[w].target] += weights_[w].weight;
          hit[b * targets_ + weights_[w].target] = 1;
        }
      }
    }
  }

  // The row's aggregate, base values, binary rule, post transform and label.
  void finish_row(float* s, const uint8_t* hit, int64_t* label) const {
    const double trees = static_cast<double>(roots_.size());
    for (int64_t c = 0; c < targets_; ++c) {
      double v = average_ ? s[c] / trees : s[c];
      if (!base_.empty()) v += base_[base_.size() == 1 ? 0 : c];
      s[c] = hit[c] || classifier_ ? static_cast<float>(v) : 0.f;
    }
    Transform kind = transform_;
    if (binary_) {
      // The one class scored is the positive one; the other is 1 - s when every weight is a
      // probability, else -s, and a softmax of the pair is not taken.
      const float pos = s[0];
      s[1] = pos;
      s[0] = min_weight_ >= 0 && (kind == kNone || kind == kProbit) ? 1.f - pos : -pos;
      if (kind == kSoftmax || kind == kSoftmaxZero) kind = kNone;
    }
    const int64_t best = transform(s, kind);
    if (label) *label = labels_[best];
  }

  // Applies `kind` to the row in place (in double, rounded once) and returns numpy's argmax of
  // the transformed row.
  int64_t transform(float* s, Transform kind) const {
    ArgMax arg;
    const int64_t n = targets_;
    if (kind == kSoftmax || kind == kSoftmaxZero) {
      const bool zero = kind == kSoftmaxZero;
      double top = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < n; ++c) {
        if ((!zero || s[c] != 0.f) && (s[c] > top || s[c] != s[c]) && top == top) top = s[c];
      }
      auto e = [&](int64_t c) { return zero && s[c] == 0.f ? 0.0 : std::exp(double{s[c]} - top); };
      double total = 0.0;
      for (int64_t c = 0; c < n; ++c) total += e(c);
      for (int64_t c = 0; c < n; ++c) {
        const double v = zero && !(total > 0.0) ? 0.0 : e(c) / total;
        arg.see(c, v);
        s[c] = static_cast<float>(v);
      }
      return arg.at;
    }
    for (int64_t c = 0; c < n; ++c) {
      double v = s[c];
      if (kind == kLogistic) v = 1.0 / (1.0 + std::exp(-v));
      if (kind == kProbit) v = std::sqrt(2.0) * erfinv(2.0 * v - 1.0);
      arg.see(c, v);
      s[c] = static_cast<float>(v);
    }
    return arg.at;
  }

  const bool classifier_;
  const TensorInfo* x_ = nullptr;
  const TensorInfo* y_ = nullptr;
  const TensorInfo* label_ = nullptr;
  int64_t rows_ = 0, width_ = 0, targets_ = 0;
  std::vector<int64_t> labels_;
  std::map<std::pair<int64_t, int64_t>, int32_t> index_;  // (tree id, node id) -> node
  std::vector<TreeNode> nodes_;
  std::vector<LeafWeight> weights_;
  std::vector<int32_t> roots_;
  std::vector<double> base_;
  double min_weight_ = 0.0;
  bool binary_ = false, average_ = false;
  Transform transform_ = kNone;
  bool parallel_ = false;  // enough rows x trees x depth to share between threads
};

}  // namespace

std::unique_ptr<Kernel> make_tree_ensemble(const KernelArgs& a) { return std::make_unique<TreeEnsembleKernel>(a); }

}  // namespace ge
