#include "backends/cpu/plan/pipeline.h"

#include <optional>

namespace lazytrace::cpu::plan {
namespace {

using runtime::Pass;

struct Stage {
  void (*run)(Program&, const Context&);
  std::optional<Pass> pass;  // the switch of an optional pass; none: always runs
};

// In order. Each file's first lines say what its pass requires and provides; the order
// follows: updates and collectives move into loops, and updates after their weights' last
// readers, while every storage has one writer, and collectives start early, before the arena
// shares storages; products pair once the arena says which bytes each touches.
const Stage kPipeline[] = {
    {attach_updates, Pass::UpdatesBeside},            // LoopStep::updates
    {updates_last, Pass::UpdatesLast},                // AdamW steps after their weight's readers
    {overlap_collectives, Pass::OverlapCollectives},  // collectives' Start and Wait
    {hoist_invariants, Pass::HoistInvariants},        // Program::invariant_steps
    {merge_siblings, Pass::MergeSiblings},            // fused steps with common loads as one
    {allocate_registers, std::nullopt},               // fused steps' physical registers
    {plan_arena, std::nullopt},                       // arena offsets (reuse: Pass::ArenaReuse)
    {find_donations, Pass::Donation},                 // Program::donations
    {pair_products, Pass::PairProducts},              // MatmulStep::beside_next
    {order_loop_reads, std::nullopt},                 // LoopStep::x_order
    {prefetch_tiles, Pass::PrefetchTiles},            // FusedStep::read_ahead
    {stream_stores, Pass::StreamStores},              // FusedStep::stream_stores
    {jit_fused, Pass::JitFused},                      // FusedStep::jit
};

}  // namespace

void run(Program& p, const Context& c) {
  for (const Stage& s : kPipeline)
    if (!s.pass || c.passes.on(*s.pass)) s.run(p, c);
}

}  // namespace lazytrace::cpu::plan
