#include "lazytrace/tools/pytree.h"

#include "runtime/passes.h"
#include "trace/tensor_impl.h"

namespace lazytrace::pytree {

bool prefetch_leaves_on() {
  return runtime::current_pass_on(runtime::Pass::PrefetchLeaves);
}

void Flat::add_leaf(const Tensor& t) {
  if (!t.defined())
    fail("pytree", "a tensor leaf", describing ? " at " + path : std::string(),
         " is undefined; pass tensors made by ops or lt::tensor().");
  const TensorImpl& impl = *t.impl();
  // The leaf's type folded into one word with cheap steps, then one mix into the key: a
  // call with hundreds of leaves pays this on every call. (A lookup compares the types too,
  // so a collision costs a retrace, never a wrong graph.)
  const Shape& s = impl.shape;
  uint64_t w =
      (static_cast<uint64_t>(impl.dtype) | 0x100) ^ (static_cast<uint64_t>(s.size()) << 12);
  for (int64_t d : s) w = ((w << 21) | (w >> 43)) ^ static_cast<uint64_t>(d);
  mix(w);
  leaves.push_back(&t);
  if (describing) {
    describe(t.type_str());
    leaf_paths.push_back(path);
  }
}

const Tensor& Cursor::next() {
  if (at >= leaves.size())
    fail("pytree", "ran out of tensors rebuilding a structure (", leaves.size(),
         " given); the structure changed between flattening and rebuilding.");
  return leaves[at++];
}

}  // namespace lazytrace::pytree
