#pragma once
// Program: the CPU backend's plan, a graph lowered to a kernel list over planned storage.
// Layout ops have become strided views, elementwise chains have become fused steps, and
// every intermediate has an offset in one arena, so a run only binds pointers.
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ir/graph.h"
#include "ir/loop.h"
#include "runtime/communicator.h"
#include "runtime/passes.h"

namespace lazytrace::ir {
struct Body;
}

namespace lazytrace::cpu {

class JitKernel;   // jit_elementwise.cpp
class TimedTrial;  // timed_choice.h

enum class StorageKind : uint8_t { Param, Arena, Output };

struct Storage {
  StorageKind kind;
  int slot = -1;  // Param: parameter slot; Output: output slot
  int64_t bytes = 0;
  int64_t offset = 0;  // Arena: byte offset in the arena
};

/** A strided window onto a storage (or, when storage < 0, a scalar repeated everywhere). */
struct View {
  int storage = -1;
  DType dtype = DType::float32;
  Shape shape;
  std::vector<int64_t> strides;  // elements, one per dim of shape
  int64_t offset = 0;            // elements
  // scalar source (storage < 0)
  int scalar_slot = -1;  // >= 0: a scalar parameter
  double value = 0;
  int64_t ivalue = 0;

  bool is_scalar() const { return storage < 0; }
  bool is_contiguous() const;
  /** One value everywhere: a scalar, or a tensor broadcast from a single element. */
  bool is_single_value() const;
};

/** One instruction of a fused elementwise kernel, over registers of one tile. */
struct Instr {
  ir::OpKind op;
  DType dtype;     // result dtype
  DType in_dtype;  // operands' dtype (where: of operands 1 and 2)
  int dst = -1;
  int src[3] = {-1, -1, -1};
  int load = -1;  // op == Data: index into loads
  double f[2] = {0, 0};
};

struct FusedStep {
  Shape shape;              // iteration space
  std::vector<View> loads;  // broadcast to `shape`
  std::vector<Instr> program;
  int num_regs = 0;
  struct Store {
    int reg;
    View dst;  // shape == iteration space
  };
  std::vector<Store> stores;
  // Loads read in place are fetched into the caches a tile ahead (plan/prefetch_tiles.cpp).
  bool read_ahead = false;
  // Contiguous stores bypass the caches (plan/stream_stores.cpp); or, with a stream_trial,
  // whether they do is chosen by timing both ways (fused.cpp, pass stream_stores_choice).
  bool stream_stores = false;
  std::shared_ptr<TimedTrial> stream_trial;
  bool may_stream() const { return stream_stores || stream_trial != nullptr; }
  // The step as native code (plan/jit_fused.cpp, jit_elementwise.h), else null.
  std::shared_ptr<const JitKernel> jit;
};

struct ReduceStep {
  ir::OpKind op;  // Sum, Mean, Amax
  View in;
  std::vector<int> dims;  // reduced dims of in.shape, sorted
  int out_storage;
  DType out_dtype;
};

struct MatmulStep {
  View a, b;  // at least 2-d; batch dims broadcast to out's batch dims
  int out_storage;
  Shape out_shape;  // batch..., m, n
  DType dtype;
  // The next step is a product that may run at the same time as this one (lowering's
  // pair_products): it reads nothing this one writes, and neither writes memory the other
  // touches. A layer's gate and up projections of the same input are such a pair.
  bool beside_next = false;
};

// index_select (out = in[index] along dim), or index_add (out = in, then
// out[index[j]] += source[j] along dim, in order) when `source` is set.
struct GatherStep {
  View in, index;
  std::optional<View> source;
  int dim;
  int out_storage;
  Shape out_shape;
};

// A check of indices computed in the graph (cross_entropy's targets, Embedding's indices):
// each is in [0, classes) or ignore_index, else the run fails with lt::Error naming `who`
// (ir::IndexCheck). The checked value is `targets` itself.
struct CheckStep {
  View targets;
  int64_t classes;
  int64_t ignore_index;
  int64_t who;
};

// A collective over the ranks (ir ops all_reduce, reduce_scatter, all_gather, broadcast)
// through the run's communicator, from `in` (contiguous) into out_storage.
struct CollectiveStep {
  ir::OpKind op;
  View in;
  int out_storage;
  runtime::ReduceOp reduce = runtime::ReduceOp::Sum;
  double scale = 1;   // applied after the reduction
  int64_t ranks = 1;  // the number the graph was traced for
  int root = 0;
  // Blocking: runs on the run's thread. Start: queued on the communicator's queue, to run
  // beside the steps up to its Wait, which waits for it (plan/overlap_collectives.cpp);
  // the two share `ticket`, an index into the run's tickets. A loop may start it instead
  // (LoopStep::collectives), in parts.
  enum class Phase : uint8_t { Blocking, Start, Wait } phase = Phase::Blocking;
  int ticket = -1;
  std::vector<int> keeps;  // Wait: the other storages the collective reads until it is done
};

// One AdamW update (ir OpKind::AdamW) over contiguous param, grad and moments, writing the
// three results to out[0..2]; decay, step_size and inv_sqrt_bc2 are single values.
struct AdamWStep {
  View param, grad, exp_avg, exp_avg_sq;
  View decay, step_size, inv_sqrt_bc2;
  double beta1 = 0, beta2 = 0, eps = 0;
  int out[3] = {-1, -1, -1};
  // Set when the gradient is a float32 product with a short reduction (a weight's gradient
  // over few tokens; scan stacks it as two factors): the update computes it a block of rows
  // at a time beside the update, and `grad` is unused. Its out_storage is unused (-1).
  std::optional<MatmulStep> grad_product;
  // With grad_product: a single value the product is multiplied by (a clipped gradient).
  std::optional<View> grad_scale;
};

struct Program;

// A call of a traced body: its program (compiled once per body, shared by every call)
// runs on the caller's memory. Param slot s of the body reads params[s] (contiguous);
// scalar slot j is the caller's scalar slot scalars[j]; output slot o writes the caller's
// storage outputs[o]; the body's arena lives in the caller's storage `scratch` (-1: none).
struct CallStep {
  std::shared_ptr<const Program> body;
  std::vector<View> params;
  std::vector<int> scalars;
  std::vector<int> outputs;
  int scratch = -1;
};

// A scan or while loop (ir/loop.h): the body's program, compiled once, runs once per
// iteration on the caller's memory; x slices are read in place, ys are written in place,
// and each carry alternates between the loop's output storage and a spare one, so
// nothing is allocated per iteration.
struct LoopStep {
  ir::Loop::Kind kind = ir::Loop::Kind::Scan;
  std::shared_ptr<const Program> body, cond;  // cond: While only
  int64_t length = 0;
  bool reverse = false;
  struct Input {
    ir::Loop::Role role;
    View view;                // Carry: the initial value; X: the stacked tensor; Counter: base
    int64_t slice_bytes = 0;  // X
    int64_t step = 0;         // Counter
    // X whose stacked tensor was never made (a stack of separate tensors, which the loop
    // reads where they lie): slice i is slices[i]
    std::vector<View> slices;
  };
  std::vector<Input> inputs;                    // one per body input
  std::vector<View> body_leaves, cond_leaves;   // the bodies' own Data leaves
  std::vector<int> body_scalars, cond_scalars;  // caller scalar slot of each body scalar
  std::vector<int> outputs;                     // caller storages: final carries, then ys
  std::vector<int> spare;                       // per carry: a second caller storage
  int scratch = -1, cond_scratch = -1;          // the bodies' arenas
  // AdamW updates of stacked weights whose gradients are products of this scan's ys
  // (scan's factored weight gradients): batch i may run as soon as iteration i has written
  // slice i, beside the loop's later iterations (lowering's attach_updates).
  std::vector<AdamWStep> updates;
  // Collectives of this scan's ys that start as soon as their data exist (plan/
  // overlap_collectives.cpp): an all-reduce a part per slice once the iteration that writes
  // it is done, a collective of a few slices once they are, the parts made before the loop
  // before its first iteration. Their Wait follows the loop.
  struct Collective {
    CollectiveStep step;  // phase Start; `in` is what the parts cover
    struct Part {
      int src;                 // the storage read (a ys storage, or step.in's own)
      int64_t src_at = 0;      // elements into src
      int64_t out_at = 0;      // elements into the output
      int64_t count = 0;       // elements (per slice, for a slice part)
      bool per_slice = false;  // slice i lies at src_at + i * count, out_at + i * count
      // Not per slice: started once the iteration that writes slice `after` of the ys it
      // reads is done (-1: before the first iteration).
      int64_t after = -1;
      // src holds float32 that the part first rounds to step.in's 16-bit dtype, into step.in
      // where the cast it stands for would have written it (runtime::narrow)
      bool narrowed = false;
    };
    std::vector<Part> parts;
  };
  std::vector<Collective> collectives;
  // The X inputs, in the order the body first reads them (the order in which the backend
  // reads the next iteration's slices ahead).
  std::vector<int> x_order;
};

using Step = std::variant<FusedStep, ReduceStep, MatmulStep, GatherStep, CheckStep, CallStep,
                          LoopStep, AdamWStep, CollectiveStep>;

struct ResultBinding {
  int storage;  // Param or Output storage
  Shape shape;
  DType dtype;
  const char* op = "";  // the op that computes it, for errors
};

// An output that may be written into a parameter's buffer when the caller gives that buffer
// up (Executable::run's `donated`): the same size and layout, read last by the one step that
// writes the output, element by element at the positions it writes, and not a result.
struct Donation {
  int output_slot;
  int param_slot;
};

struct Program {
  std::string name;
  std::vector<Storage> storages;
  std::vector<Step> steps;
  std::vector<ResultBinding> results;
  std::vector<Donation> donations;
  int num_params = 0;
  int num_scalars = 0;
  int num_outputs = 0;
  int64_t arena_bytes = 0;
  std::string largest_intermediate;  // "mul, float32[64, 64]": said when the arena fails
  // A body's first steps that read none of its inputs (lowering's hoist_invariants): a loop
  // runs them before its first iteration only; a call runs every step.
  int invariant_steps = 0;
  int num_tickets = 0;  // collectives started ahead of their waits (CollectiveStep::ticket)
  // The collectives a run issues, in order (itself, and in the bodies it calls or loops
  // over), as a hash of their kinds, sizes and attributes; 0: none. Ranks compare it.
  uint64_t collectives = 0;
  std::string collectives_text;  // the same in words, for the error when ranks differ
  // The passes it was compiled with; the backend's own (read_ahead, evict_slices) read them.
  runtime::PassSet passes;
};

/**
 * Lowers an optimized graph: views, fusion grouping, buffer planning. For a body's graph,
 * `first_input` is its first input's parameter slot (the slots before it are its own
 * leaves), and the steps that read no input come first (Program::invariant_steps).
 */
Program lower(const ir::Graph& g, int first_input = -1, runtime::PassSet passes = {});
/** The program of a traced body, compiled once per body hash (and pass set) and shared by
 * its calls. */
std::shared_ptr<const Program> body_program(const ir::Body& body, runtime::PassSet passes);
/** Forgets the body programs (executables keep the ones they use), to measure compiles. */
void clear_body_programs();
/** Human-readable kernel list and plan. */
std::string describe(const Program& p);
/** When a loop starts each part of a collective: " parts: by slice, before it, after slice 3". */
std::string describe_parts(const LoopStep::Collective& c);

}  // namespace lazytrace::cpu
