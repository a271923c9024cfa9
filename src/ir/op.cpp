#include "ir/op.h"

#include <cstddef>

namespace lazytrace::ir {

const OpInfo& op_info(OpKind k) {
  using F = OpFamily;
  static const OpInfo table[] = {
#define LT_OP(kind, name, family, arity) {name, F::family, arity},
#define LT_COMPARE_OP(kind, name) {name, F::Elementwise, 2, true},
#include "ir/ops.def"
  };
  static_assert(sizeof(table) / sizeof(table[0]) == static_cast<size_t>(kOpCount));
  return table[static_cast<int>(k)];
}

const char* index_check_op(IndexCheck who) {
  switch (who) {
    case IndexCheck::EmbeddingIndices:
      return "Embedding";
    case IndexCheck::NllLossTargets:
      return "nll_loss";
    case IndexCheck::CrossEntropyTargets:
      break;
  }
  return "cross_entropy";
}

}  // namespace lazytrace::ir
