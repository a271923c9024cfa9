#pragma once
// Op kinds and what the rest of the system needs to know about each: its name, its
// family, and its arity, all from the one list in ops.def. Shape and dtype rules are in
// shape_rules.h.
#include <cstdint>

namespace lazytrace::ir {

// A switch over OpKind lists every kind (-Wswitch-enum): the kinds it handles by hand, then
// the others from ops.def, e.g. for a switch over the unary ops:
//   #define LT_OP(kind, name, family, arity) case OpKind::kind:
//   #define LT_UNARY_OP(kind, name)
//   #include "ir/ops.def"
//     LT_UNREACHABLE("...");
// An op added to ops.def then either gets its case or fails the build.

/** Every op kind, in the order of ir/ops.def, the one list of ops. */
enum class OpKind : uint8_t {
#define LT_OP(kind, name, family, arity) kind,
#include "ir/ops.def"
};

/** How many op kinds there are. */
inline constexpr int kOpCount = 0
#define LT_OP(kind, name, family, arity) +1
#include "ir/ops.def"
    ;

enum class OpFamily : uint8_t { Leaf, Generator, Elementwise, Layout, Reduce, Other };

struct OpInfo {
  const char* name;
  OpFamily family;
  int arity;             // -1: variadic
  bool compare = false;  // a comparison: bool results
};

const OpInfo& op_info(OpKind k);
inline const char* op_name(OpKind k) {
  return op_info(k).name;
}
inline bool is_elementwise(OpKind k) {
  return op_info(k).family == OpFamily::Elementwise;
}
inline bool is_layout(OpKind k) {
  return op_info(k).family == OpFamily::Layout;
}
inline bool is_reduce(OpKind k) {
  return op_info(k).family == OpFamily::Reduce;
}
/** A call, a loop or an optimizer update: its values are its CallResult users. */
inline bool has_many_results(OpKind k) {
  return k == OpKind::Call || k == OpKind::Loop || k == OpKind::AdamW || k == OpKind::AdamWProduct;
}
inline bool is_generator(OpKind k) {
  return op_info(k).family == OpFamily::Generator;
}
inline bool is_compare(OpKind k) {
  return op_info(k).compare;
}
/** all_reduce, reduce_scatter, all_gather, broadcast (runtime/communicator.h). */
inline bool is_collective(OpKind k) {
  return k == OpKind::AllReduce || k == OpKind::ReduceScatter || k == OpKind::AllGather ||
         k == OpKind::Broadcast;
}

/** check_targets' third attr: which operation checks its indices, for the error. */
enum class IndexCheck : int64_t {
  CrossEntropyTargets = 0,
  EmbeddingIndices = 1,
  NllLossTargets = 2
};
/** Its name: "cross_entropy", "Embedding", "nll_loss". */
const char* index_check_op(IndexCheck who);

}  // namespace lazytrace::ir
