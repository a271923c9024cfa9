#include "ir/op.h"

#include <cstddef>

namespace lazytrace::ir {

const OpInfo& op_info(OpKind k) {
  using F = OpFamily;
  static const OpInfo table[] = {
      {"data", F::Leaf, 0},
      {"scalar", F::Leaf, 0},
      {"iota", F::Generator, 0},
      {"rand_uniform", F::Generator, 2},
      {"rand_normal", F::Generator, 2},
      {"param", F::Leaf, 0},
      {"neg", F::Elementwise, 1},
      {"exp", F::Elementwise, 1},
      {"log", F::Elementwise, 1},
      {"sin", F::Elementwise, 1},
      {"cos", F::Elementwise, 1},
      {"tanh", F::Elementwise, 1},
      {"sigmoid", F::Elementwise, 1},
      {"relu", F::Elementwise, 1},
      {"gelu", F::Elementwise, 1},
      {"silu", F::Elementwise, 1},
      {"sqrt", F::Elementwise, 1},
      {"rsqrt", F::Elementwise, 1},
      {"abs", F::Elementwise, 1},
      {"erf", F::Elementwise, 1},
      {"cast", F::Elementwise, 1},
      {"add", F::Elementwise, 2},
      {"sub", F::Elementwise, 2},
      {"mul", F::Elementwise, 2},
      {"div", F::Elementwise, 2},
      {"pow", F::Elementwise, 2},
      {"maximum", F::Elementwise, 2},
      {"minimum", F::Elementwise, 2},
      {"eq", F::Elementwise, 2},
      {"ne", F::Elementwise, 2},
      {"lt", F::Elementwise, 2},
      {"le", F::Elementwise, 2},
      {"gt", F::Elementwise, 2},
      {"ge", F::Elementwise, 2},
      {"where", F::Elementwise, 3},
      {"reshape", F::Layout, 1},
      {"permute", F::Layout, 1},
      {"broadcast_to", F::Layout, 1},
      {"slice", F::Layout, 1},
      {"sum", F::Reduce, 1},
      {"mean", F::Reduce, 1},
      {"amax", F::Reduce, 1},
      {"matmul", F::Other, 2},
      {"concat", F::Other, -1},
      {"index_select", F::Other, 2},
      {"index_add", F::Other, 3},
      {"call", F::Other, -1},
      {"call_result", F::Other, 1},
      {"pack", F::Other, -1},
      {"loop", F::Other, -1},
      {"adamw", F::Other, 7},
  };
  static_assert(sizeof(table) / sizeof(table[0]) == static_cast<size_t>(OpKind::kCount));
  return table[static_cast<int>(k)];
}

}  // namespace lazytrace::ir
