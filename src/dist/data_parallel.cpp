#include "lazytrace/dist/data_parallel.h"

#include <algorithm>

#include "lazytrace/autograd/autograd.h"
#include "lazytrace/dist/dist.h"
#include "lazytrace/ops/ops.h"

namespace lazytrace::dist {

DataParallel::DataParallel(nn::Module& module, DataParallelOptions options)
    : module_(module), options_(options) {
  if (options_.bucket_bytes <= 0)
    fail("DataParallel", "bucket_bytes must be positive, got ", options_.bucket_bytes, ".");
  if (options_.broadcast_parameters) broadcast_parameters();
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

void DataParallel::all_reduce_gradients() {
  buckets_.clear();
  if (world_size() == 1) return;
  NoGradGuard no_grad;
  const char* op = options_.average ? "mean" : "sum";
  const nn::ParamMap params = module_.named_parameters();
  std::vector<std::pair<std::string, Tensor>> order(params.begin(), params.end());
  std::reverse(order.begin(), order.end());  // the order backward makes the gradients in
  std::vector<Tensor> bucket;  // parameters whose gradients go in one all-reduce
  int64_t bytes = 0;
  auto flush = [&] {
    if (bucket.empty()) return;
    if (bucket.size() == 1) {
      bucket[0].set_grad(all_reduce(bucket[0].grad(), op));
    } else {
      std::vector<Tensor> flat;
      for (const Tensor& p : bucket) flat.push_back(reshape(p.grad(), Shape{p.numel()}));
      const Tensor reduced = all_reduce(concat(flat, 0), op);
      int64_t at = 0;
      for (Tensor& p : bucket) {
        p.set_grad(reshape(slice(reduced, 0, at, at + p.numel()), p.shape()));
        at += p.numel();
      }
    }
    bucket.clear();
    bytes = 0;
  };
  for (auto& [name, p] : order) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const int64_t b = g.numel() * static_cast<int64_t>(itemsize(g.dtype()));
    if (!bucket.empty() &&
        (bucket[0].grad().dtype() != g.dtype() || bytes + b > options_.bucket_bytes))
      flush();
    if (bucket.empty()) buckets_.emplace_back();
    buckets_.back().push_back(name);
    bucket.push_back(p);
    bytes += b;
  }
  flush();
}

Tensor DataParallel::average(const Tensor& t) const {
  return all_reduce(t.detach(), "mean");
}

}  // namespace lazytrace::dist
