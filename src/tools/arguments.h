#pragma once
// What a traced function receives for its inputs.
#include <vector>

#include "lazytrace/ops/ops.h"

namespace lazytrace::tools {

/**
 * The function's own handles of placeholders that require grad (the VJP traces): an
 * in-place update inside (acc += x) then rebinds the function's handle, not the placeholder
 * the gradient is taken with respect to, as torch.func treats its inputs.
 */
inline std::vector<Tensor> own_handles(const std::vector<Tensor>& placeholders) {
  std::vector<Tensor> out;
  out.reserve(placeholders.size());
  for (const Tensor& p : placeholders) out.push_back(p.requires_grad() ? clone(p) : p);
  return out;
}

}  // namespace lazytrace::tools
