#include "lazytrace/dist/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "lazytrace/autograd/autograd.h"
#include "lazytrace/dist/dist.h"
#include "lazytrace/nn/clip_grad.h"
#include "lazytrace/ops/ops.h"

namespace lazytrace::dist {
namespace {

using Named = std::pair<std::string, Tensor>;

// Splits tensors, in the order given, into buckets of one dtype and at most `limit` bytes
// (a larger tensor alone).
std::vector<std::vector<Named>> buckets_of(const std::vector<Named>& items, int64_t limit) {
  std::vector<std::vector<Named>> out;
  int64_t bytes = 0;
  for (const Named& item : items) {
    const int64_t b = item.second.numel() * static_cast<int64_t>(itemsize(item.second.dtype()));
    if (out.empty() || out.back()[0].second.dtype() != item.second.dtype() || bytes + b > limit) {
      out.emplace_back();
      bytes = 0;
    }
    out.back().push_back(item);
    bytes += b;
  }
  return out;
}

// The module's trained parameters in reverse order, the order backward makes their
// gradients: each tensor once (tied weights under two names), frozen ones left out.
std::vector<Named> reversed_parameters(const nn::Module& m) {
  const nn::ParamMap params = m.named_parameters();
  std::vector<Named> order;
  std::unordered_set<const void*> seen;
  for (const auto& [name, t] : params)
    if (seen.insert(t.impl().get()).second && t.requires_grad()) order.emplace_back(name, t);
  std::reverse(order.begin(), order.end());
  return order;
}

Tensor flat(const Tensor& t) {
  return reshape(t, Shape{t.numel()});
}

// the parts one after another: a copy, unless there is one
Tensor joined(const std::vector<Tensor>& parts) {
  return parts.size() == 1 ? parts[0] : concat(parts, 0);
}

// Elements [lo, hi) of the tensors' values flattened one after another, zeros past their end.
Tensor range_of(const std::vector<Tensor>& tensors, int64_t lo, int64_t hi) {
  std::vector<Tensor> parts;
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    const int64_t a = std::max(lo, at), b = std::min(hi, at + t.numel());
    if (a < b) parts.push_back(slice(flat(t.detach()), 0, a - at, b - at));
    at += t.numel();
  }
  if (hi > std::max(lo, at)) parts.push_back(zeros({hi - std::max(lo, at)}, tensors[0].dtype()));
  return joined(parts);
}

// The parts joined in `dtype` where it is set, each cast as it is copied in (no whole
// bucket in the parts' dtype, and overlap_collectives sees a cast per part)
Tensor joined_in(std::vector<Tensor> parts, const std::optional<DType>& dtype) {
  if (dtype)
    for (Tensor& t : parts) t = astype(t, *dtype);
  return joined(parts);
}

}  // namespace

DataParallel::DataParallel(nn::Module& module, DataParallelOptions options)
    : module_(module), options_(options) {
  if (options_.bucket_bytes <= 0)
    fail("DataParallel", "bucket_bytes must be positive, got ", options_.bucket_bytes, ".");
  if (options_.reduce_dtype && !is_floating(*options_.reduce_dtype))
    fail("DataParallel", "reduce_dtype must be a floating dtype (bfloat16, float16, float32 or ",
         "float64), got ", dtype_name(*options_.reduce_dtype), ".");
  if (options_.broadcast_parameters) broadcast_parameters();
  if (options_.shard_optimizer) make_shards();
}

void DataParallel::broadcast_parameters() {
  if (world_size() == 1) return;
  NoGradGuard no_grad;
  for (const nn::ParamMap& map : {module_.named_parameters(), module_.named_buffers()})
    for (const auto& [name, t] : map) {
      Tensor dst = t;
      dst.copy_(broadcast(t.detach(), 0));
    }
}

void DataParallel::make_shards() {
  const int64_t n = world_size(), r = rank();
  NoGradGuard no_grad;
  // the all-reduce's buckets: a parameter of bucket_bytes or more alone, so that (its size
  // a multiple of the ranks) its reduce-scatter reads the gradient where it lies and the
  // all-gather's result becomes the parameter, with no copy either way
  std::vector<Tensor> made;
  for (const std::vector<Named>& bucket :
       buckets_of(reversed_parameters(module_), options_.bucket_bytes)) {
    Shard& s = shards_.emplace_back();
    for (const auto& [name, p] : bucket) {
      s.names.push_back(name);
      s.params.push_back(p);
      s.numel += p.numel();
      made.push_back(p);
    }
    s.padded = (s.numel + n - 1) / n * n;
    const int64_t per = s.padded / n;
    s.begin = r * per;
    s.shard = range_of(s.params, s.begin, s.begin + per);
  }
  // every parameter first: every rank computes the same broadcasts in the same order,
  // whatever its range
  for (const Shard& s : shards_) made.push_back(s.shard);
  sync(made);
  for (Shard& s : shards_) s.shard = s.shard.detach().requires_grad_();
}

std::vector<Tensor> DataParallel::parameters() const {
  if (!options_.shard_optimizer) return module_.parameters();
  std::vector<Tensor> out;
  for (const Shard& s : shards_) out.push_back(s.shard);
  return out;
}

void DataParallel::reduce_gradients() {
  buckets_.clear();
  const char* op = options_.average ? "mean" : "sum";
  NoGradGuard no_grad;
  if (options_.shard_optimizer) {
    for (Shard& s : shards_) {
      // the parameters are what counts: a load or broadcast_parameters() since the last
      // step reaches the optimizer (a slice of a parameter alone: a view the update reads)
      s.shard.copy_(range_of(s.params, s.begin, s.begin + s.shard.numel()));
      std::vector<Tensor> parts;
      for (const Tensor& p : s.params) {
        const Tensor g = p.grad();
        parts.push_back(g.defined() ? flat(g) : zeros({p.numel()}, p.dtype()));
      }
      if (s.padded > s.numel) parts.push_back(zeros({s.padded - s.numel}, parts[0].dtype()));
      s.shard.set_grad(
          astype(reduce_scatter(joined_in(parts, options_.reduce_dtype), op), s.shard.dtype()));
      buckets_.push_back(s.names);
    }
    for (Tensor& p : module_.parameters()) p.set_grad(Tensor());
    return;
  }
  if (world_size() == 1 && !options_.reduce_dtype) return;  // (with it, rounded alike)
  std::vector<Named> with_grad;
  for (const Named& item : reversed_parameters(module_))
    if (item.second.grad().defined()) with_grad.push_back(item);
  for (const std::vector<Named>& bucket : buckets_of(with_grad, options_.bucket_bytes)) {
    buckets_.emplace_back();
    for (const auto& [name, p] : bucket) buckets_.back().push_back(name);
    if (bucket.size() == 1) {
      Tensor p = bucket[0].second;
      p.set_grad(astype(all_reduce(joined_in({p.grad()}, options_.reduce_dtype), op), p.dtype()));
      continue;
    }
    std::vector<Tensor> parts;
    for (const auto& [name, p] : bucket) parts.push_back(flat(p.grad()));
    const Tensor reduced = all_reduce(joined_in(std::move(parts), options_.reduce_dtype), op);
    int64_t at = 0;
    for (const auto& [name, param] : bucket) {
      Tensor p = param;
      p.set_grad(astype(reshape(slice(reduced, 0, at, at + p.numel()), p.shape()), p.dtype()));
      at += p.numel();
    }
  }
}

void DataParallel::gather_parameters() {
  if (!options_.shard_optimizer) return;
  NoGradGuard no_grad;
  for (Shard& s : shards_) {
    const Tensor full = all_gather(s.shard.detach());
    int64_t at = 0;
    for (const Tensor& param : s.params) {
      Tensor p = param;
      p.copy_(reshape(slice(full, 0, at, at + p.numel()), p.shape()));
      at += p.numel();
    }
  }
}

Tensor DataParallel::clip_grad_norm_(double max_norm, double norm_type) {
  const std::vector<Tensor> params = parameters();
  Tensor total = nn::grad_norm(params, norm_type);
  if (options_.shard_optimizer && world_size() > 1) {
    NoGradGuard no_grad;
    if (std::isinf(norm_type))
      total = all_reduce(total, "max");
    else  // the parts' sums of |g|^p add up
      total = pow(all_reduce(pow(total, norm_type), "sum"), 1.0 / norm_type);
  }
  nn::clip_grads_with_norm_(params, max_norm, total);
  return total;
}

Tensor DataParallel::average(const Tensor& t) const {
  return all_reduce(t.detach(), "mean");
}

std::vector<size_t> DataParallel::shard_of_each(const optim::Optimizer& opt,
                                                const char* what) const {
  std::vector<size_t> out;
  for (const Tensor& p : opt.params()) {
    size_t j = 0;
    while (j < shards_.size() && shards_[j].shard.impl() != p.impl()) ++j;
    if (j == shards_.size())
      fail("DataParallel", what, ": the optimizer updates a ", p.type_str(),
           " tensor that is not one of this DataParallel's shards; with shard_optimizer, make "
           "the optimizer over dp.parameters().");
    out.push_back(j);
  }
  return out;
}

std::vector<std::string> DataParallel::name_of_each(const optim::Optimizer& opt,
                                                    const char* what) const {
  const nn::ParamMap named = module_.named_parameters();
  std::vector<std::string> out;
  for (const Tensor& p : opt.params()) {
    const std::string* name = nullptr;
    for (const auto& [n, t] : named)
      if (t.impl() == p.impl()) {
        name = &n;
        break;
      }
    if (!name)
      fail("DataParallel", what, ": the optimizer updates a ", p.type_str(),
           " tensor that is not a parameter of the module; make the optimizer over "
           "dp.parameters().");
    out.push_back(*name);
  }
  return out;
}

DataParallel::OptimizerState DataParallel::optimizer_state(const optim::Optimizer& opt) const {
  const std::vector<optim::Optimizer::State> state = opt.state();
  OptimizerState out;
  if (!options_.shard_optimizer) {
    const std::vector<std::string> names = name_of_each(opt, "optimizer_state");
    for (size_t i = 0; i < names.size(); ++i) out[names[i]] = state[i];
    return out;
  }
  NoGradGuard no_grad;
  const std::vector<size_t> shard = shard_of_each(opt, "optimizer_state");
  std::vector<Tensor> gathered;
  for (size_t i = 0; i < shard.size(); ++i) {
    const Shard& s = shards_[shard[i]];
    for (const auto& [key, t] : state[i]) {
      // "step" is one count for the shard's parameters; the rest are elementwise, like it
      const Tensor whole = key == "step" ? t : all_gather(t.detach());
      gathered.push_back(whole);
      int64_t at = 0;
      for (size_t k = 0; k < s.params.size(); ++k) {
        const Tensor& p = s.params[k];
        out[s.names[k]][key] =
            key == "step" ? t : reshape(slice(whole, 0, at, at + p.numel()), p.shape());
        at += p.numel();
      }
    }
  }
  // computed here, on every rank at once: a rank that reads only its own copy later (rank 0
  // saving) would otherwise run the all-gathers alone and wait for the others for good
  sync(gathered);
  return out;
}

void DataParallel::load_optimizer_state(optim::Optimizer& opt, const OptimizerState& state) const {
  auto of = [&](const std::string& name) -> const optim::Optimizer::State& {
    auto it = state.find(name);
    if (it == state.end())
      fail("DataParallel", "load_optimizer_state: no state for parameter '", name,
           "'; load the state of an optimizer over the same module.");
    return it->second;
  };
  std::vector<optim::Optimizer::State> mine;
  if (!options_.shard_optimizer) {
    const std::vector<std::string> names = name_of_each(opt, "load_optimizer_state");
    const std::vector<optim::Optimizer::State> now = opt.state();
    for (size_t i = 0; i < names.size(); ++i) {
      if (state.count(names[i]) || opt.params()[i].requires_grad()) {
        mine.push_back(of(names[i]));
        continue;
      }
      // frozen: ZeRO-1 keeps no state for it; it starts anew (it never updates)
      optim::Optimizer::State fresh;
      for (const auto& [key, t] : now[i]) fresh[key] = zeros(t.shape(), t.dtype());
      mine.push_back(std::move(fresh));
    }
    opt.load_state(mine);
    return;
  }
  NoGradGuard no_grad;
  for (size_t j : shard_of_each(opt, "load_optimizer_state")) {
    const Shard& s = shards_[j];
    optim::Optimizer::State part;
    for (const auto& [key, t] : of(s.names[0])) {
      if (key == "step") {  // one count per shard: its parameters' must agree
        Tensor most = t;    // (0: never updated, which the optimizer folds into the count)
        for (size_t k = 1; k < s.names.size(); ++k) {
          const optim::Optimizer::State& each = of(s.names[k]);
          auto it = each.find(key);
          if (it == each.end()) continue;
          const double a = most.item<double>(), b = it->second.item<double>();
          if (a != 0 && b != 0 && a != b)
            fail("DataParallel", "load_optimizer_state: parameters '", s.names[0], "' and '",
                 s.names[k], "' share a shard but were updated ", a, " and ", b,
                 " times; ZeRO-1 keeps one count per shard: resume this state without "
                 "shard_optimizer.");
          if (b > a) most = it->second;
        }
        part[key] = most;
        continue;
      }
      std::vector<Tensor> values;
      for (size_t k = 0; k < s.params.size(); ++k) {
        const optim::Optimizer::State& each = of(s.names[k]);
        auto it = each.find(key);
        if (it == each.end() || it->second.shape() != s.params[k].shape())
          fail("DataParallel", "load_optimizer_state: parameter '", s.names[k], "' (",
               s.params[k].type_str(), ") has ",
               it == each.end() ? std::string("no '") + key + "'"
                                : "'" + key + "' of " + it->second.type_str(),
               "; load the state of an optimizer over the same module.");
        values.push_back(it->second);
      }
      part[key] = range_of(values, s.begin, s.begin + s.shard.numel());
    }
    mine.push_back(std::move(part));
  }
  opt.load_state(mine);
}

}  // namespace lazytrace::dist
