#include "lazytrace/tools/pytree.h"

#include "trace/tensor_impl.h"

namespace lazytrace::pytree {

void Flat::add_leaf(const Tensor& t) {
  if (!t.defined())
    fail("pytree", "a tensor leaf", describing ? " at " + path : std::string(),
         " is undefined; pass tensors made by ops or lt::tensor().");
  const TensorImpl& impl = *t.impl();
  mix(static_cast<uint64_t>(impl.dtype) | 0x100);
  const Shape& s = impl.shape;
  mix(static_cast<uint64_t>(s.size()));
  for (int64_t d : s) mix(static_cast<uint64_t>(d));
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
