// A program pass (plan/pipeline.cpp runs them in order).
// Requires: steps in their final order but for this pass's moves, made before plan_arena
// (the moves change the lifetimes the arena is planned from). A body's collectives start and
// are waited for within each run of it (a call, an iteration). Where the communicator current
// at compile time cannot overlap (Communicator::can_overlap), the pass changes nothing.
// Provides: CollectiveStep phases Start and Wait, Program::num_tickets, LoopStep::collectives.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/plan/pipeline.h"
#include "backends/cpu/plan/walk.h"
#include "core/hash.h"
#include "lazytrace/core/error.h"
#include "metrics/known.h"
#include "runtime/communicator.h"

namespace lazytrace::cpu::plan {
namespace {

using Phase = CollectiveStep::Phase;
using Part = LoopStep::Collective::Part;

std::vector<int> writes_of(const Step& st) {
  std::vector<int> w;
  for_each_write(st, [&](int s) {
    if (s >= 0) w.push_back(s);
  });
  return w;
}

std::vector<int> named_by(const Step& st) {
  std::vector<int> n;
  for_each_view(st, [&](int s) {
    if (s >= 0) n.push_back(s);
  });
  return n;
}

bool names(const Step& st, int storage) {
  const std::vector<int> n = named_by(st);
  return std::find(n.begin(), n.end(), storage) != n.end();
}

// A step that issues collectives, which every rank issues in the same order.
bool issues(const Step& st) {
  if (const auto* c = std::get_if<CollectiveStep>(&st)) return c->phase != Phase::Wait;
  if (const auto* l = std::get_if<LoopStep>(&st))
    return !l->collectives.empty() || l->body->collectives || (l->cond && l->cond->collectives);
  if (const auto* c = std::get_if<CallStep>(&st)) return c->body->collectives != 0;
  return false;
}

bool blocking_exchange(const Step& st) {
  const auto* c = std::get_if<CollectiveStep>(&st);
  return c && c->phase == Phase::Blocking && c->ranks > 1;
}

struct Copy {
  View src, dst;
  bool narrowed;  // float32 rounded to dst's 16-bit dtype (runtime::narrow's cast)
};

// A fused step that only copies one contiguous view into a contiguous part of a storage
// (a part of a concat), or casts float32 to a 16-bit float as it does (DataParallel's
// reduce_dtype).
std::optional<Copy> as_copy(const Step& st) {
  const auto* f = std::get_if<FusedStep>(&st);
  if (!f || f->loads.size() != 1 || f->stores.size() != 1 || f->program.empty() ||
      f->program[0].op != ir::OpKind::Data || f->program[0].dtype != f->loads[0].dtype)
    return std::nullopt;
  const View &src = f->loads[0], &dst = f->stores[0].dst;
  if (src.is_scalar() || !src.is_contiguous() || !dst.is_contiguous()) return std::nullopt;
  if (f->program.size() == 1 && dst.dtype == src.dtype) return Copy{src, dst, false};
  const Instr& cast = f->program.back();
  if (f->program.size() == 2 && cast.op == ir::OpKind::Cast && cast.src[0] == f->program[0].dst &&
      f->stores[0].reg == cast.dst && src.dtype == DType::float32 && cast.dtype == dst.dtype &&
      (dst.dtype == DType::bfloat16 || dst.dtype == DType::float16))
    return Copy{src, dst, true};
  return std::nullopt;
}

// All-reduces after the scan at steps[li] whose data are the scan's ys, slice by slice (or
// exist before it), and reduce-scatters of a few of its slices, start inside it
// (LoopStep::collectives), ahead of the collectives after the loop that cannot (up to a
// loop or call whose body issues collectives); their steps become waits. The parts of a
// concat (DataParallel's buckets) that copy a ys are not made: the parts are reduced from
// the ys, or, where the copy casts (reduce_dtype), cast as they start; those that copy what
// exists before the scan move before it. A reduce-scatter is one part. `li` follows the
// loop.
void start_in_loop(Program& p, size_t& li) {
  LoopStep& loop = std::get<LoopStep>(p.steps[li]);
  const int64_t length = loop.length;
  const size_t ns = p.storages.size(), nsteps = p.steps.size();
  std::map<int, int64_t> ys;  // ys storage -> elements per slice
  for (size_t r = loop.spare.size(); r < loop.outputs.size(); ++r)
    ys[loop.outputs[r]] = loop.body->results[r].shape.numel();
  // per-slice elements where v is a whole ys storage of `count` elements, else 0
  auto whole_ys = [&](const View& v, int64_t count) -> int64_t {
    const auto it = ys.find(v.storage);
    return it != ys.end() && v.offset == 0 && count == length * it->second ? it->second : 0;
  };
  std::vector<char> tainted(ns, 0);  // written by the loop, or by a step that reads one
  for (int s : writes_of(loop)) tainted[static_cast<size_t>(s)] = 1;
  std::vector<char> made_in(nsteps, 0), dropped(nsteps, 0), hoist(nsteps, 0);
  std::vector<char> needed(ns, 0);  // read by a part that starts before the loop
  std::vector<LoopStep::Collective> started;
  for (size_t k = li + 1; k < nsteps; ++k) {
    const Step& st = p.steps[k];
    auto pass_over = [&] {
      bool dep = false;
      for (int s : named_by(st)) dep |= tainted[static_cast<size_t>(s)] != 0;
      if (dep)
        for (int s : writes_of(st)) tainted[static_cast<size_t>(s)] = 1;
    };
    if (!issues(st)) {
      pass_over();
      continue;
    }
    if (!blocking_exchange(st)) break;  // collectives inside a body, issued in place
    const CollectiveStep& c = std::get<CollectiveStep>(st);
    const int in = c.in.storage;
    const int64_t count = c.in.shape.numel();
    const auto y = ys.find(in);
    const bool all_reduce = c.op == ir::OpKind::AllReduce;
    if (count == 0 || (y != ys.end() && y->second == 0) ||
        (!all_reduce && c.op != ir::OpKind::ReduceScatter)) {
      pass_over();
      continue;
    }
    // the iteration after which elements [at, at + n) of a ys of `per` a slice are made
    auto made_after = [&](int64_t at, int64_t n, int64_t per) {
      return loop.reverse ? at / per : (at + n - 1) / per;
    };
    LoopStep::Collective lc{c, {}};
    std::vector<size_t> copies;
    if (const int64_t per = whole_ys(c.in, count); per && all_reduce) {
      lc.parts.push_back({in, 0, 0, per, true});
    } else if (y != ys.end()) {  // a few slices (ZeRO-1's bucket of a stacked gradient)
      lc.parts.push_back(
          {in, c.in.offset, 0, count, false, made_after(c.in.offset, count, y->second)});
    } else if (!tainted[static_cast<size_t>(in)]) {
      lc.parts.push_back({in, c.in.offset, 0, count, false});
      needed[static_cast<size_t>(in)] = 1;
    } else {  // a concat's parts: copies into `in`, which nothing else reads
      const std::vector<char> needed_before = needed;
      bool ok = p.storages[static_cast<size_t>(in)].kind == StorageKind::Arena;
      int64_t covered = 0;
      for (size_t k2 = li + 1; ok && k2 < k; ++k2) {
        if (!names(p.steps[k2], in)) continue;
        const auto copy = as_copy(p.steps[k2]);
        ok = copy && copy->dst.storage == in;
        if (!ok) break;
        const auto& [src, dst, narrowed] = *copy;
        const int64_t m = src.shape.numel(), out_at = dst.offset - c.in.offset;
        const auto from = ys.find(src.storage);
        if (const int64_t per = whole_ys(src, m); per && all_reduce) {
          lc.parts.push_back({src.storage, 0, out_at, per, true, -1, narrowed});
          dropped[k2] = 1;
        } else if (from != ys.end() && from->second > 0) {
          lc.parts.push_back({src.storage, src.offset, out_at, m, false,
                              made_after(src.offset, m, from->second), narrowed});
          dropped[k2] = 1;
        } else if (!tainted[static_cast<size_t>(src.storage)]) {
          lc.parts.push_back({in, dst.offset, out_at, m, false});
          hoist[k2] = 1;
          needed[static_cast<size_t>(src.storage)] = 1;
        } else {
          ok = false;
        }
        copies.push_back(k2);
        covered += m;
      }
      for (size_t k2 = k + 1; ok && k2 < nsteps; ++k2) ok = !names(p.steps[k2], in);
      // (a reduce-scatter is one part, of its whole input)
      if (!ok || covered != count ||
          (!all_reduce && (lc.parts.size() != 1 || lc.parts[0].out_at != 0))) {
        for (size_t k2 : copies) dropped[k2] = hoist[k2] = 0;
        needed = needed_before;
        pass_over();
        continue;
      }
    }
    lc.step.phase = Phase::Start;
    started.push_back(std::move(lc));
    made_in[k] = 1;
    for (int s : writes_of(st)) tainted[static_cast<size_t>(s)] = 1;
  }
  if (started.empty()) return;
  // the steps after the loop that make what the parts before it read (none reads what the
  // loop writes, or the part would be made in the loop)
  for (size_t k = nsteps; k-- > li + 1;) {
    if (made_in[k] || dropped[k]) continue;
    bool makes = hoist[k] != 0;
    for (int s : writes_of(p.steps[k])) makes |= needed[static_cast<size_t>(s)] != 0;
    if (!makes) continue;
    if (issues(p.steps[k])) return;  // it would move before collectives issued earlier
    hoist[k] = 1;
    for (int s : named_by(p.steps[k])) needed[static_cast<size_t>(s)] = 1;
  }
  std::vector<Step> before, after;
  LoopStep moved = std::move(loop);
  size_t next = 0;
  for (size_t k = li + 1; k < nsteps; ++k) {
    if (dropped[k]) continue;
    if (made_in[k]) {
      auto& wait = std::get<CollectiveStep>(p.steps[k]);
      const LoopStep::Collective& lc = started[next++];
      wait.phase = Phase::Wait;
      for (const Part& part : lc.parts)
        if (part.src != wait.in.storage) wait.keeps.push_back(part.src);
    }
    (hoist[k] ? before : after).push_back(std::move(p.steps[k]));
  }
  metrics::collectives_in_loops.add(static_cast<int64_t>(started.size()));
  moved.collectives = std::move(started);
  p.steps.resize(li);
  for (Step& st : before) p.steps.push_back(std::move(st));
  li = p.steps.size();
  p.steps.emplace_back(std::move(moved));
  for (Step& st : after) p.steps.push_back(std::move(st));
}

// Every other collective starts as early as its input and the order of the ranks'
// collectives allow, and is waited for just before the first step that uses its output.
void start_early(Program& p) {
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (!blocking_exchange(p.steps[i])) continue;
    CollectiveStep start = std::get<CollectiveStep>(p.steps[i]);
    size_t at = 0;
    for (size_t k = 0; k < i; ++k) {
      const std::vector<int> w = writes_of(p.steps[k]);
      if (issues(p.steps[k]) || std::find(w.begin(), w.end(), start.in.storage) != w.end())
        at = k + 1;
    }
    start.phase = Phase::Start;
    CollectiveStep wait = start;
    wait.phase = Phase::Wait;
    p.steps.erase(p.steps.begin() + static_cast<std::ptrdiff_t>(i));
    p.steps.insert(p.steps.begin() + static_cast<std::ptrdiff_t>(at), std::move(start));
    p.steps.insert(p.steps.begin() + static_cast<std::ptrdiff_t>(at + 1), std::move(wait));
    metrics::collectives_ahead.add();
    ++i;  // the step after the collective's old place is at i + 2
  }
}

void wait_late(Program& p) {
  for (int t = 0; t < p.num_tickets; ++t) {
    auto is_wait = [&](const Step& st) {
      const auto* c = std::get_if<CollectiveStep>(&st);
      return c && c->phase == Phase::Wait && c->ticket == t;
    };
    const auto w = std::find_if(p.steps.begin(), p.steps.end(), is_wait);
    const int out = std::get<CollectiveStep>(*w).out_storage;
    auto use = std::find_if(w + 1, p.steps.end(), [&](const Step& st) { return names(st, out); });
    Step wait = std::move(*w);
    // rotate the wait to just before its output's first use
    const size_t to = static_cast<size_t>(use - p.steps.begin()) - 1;
    p.steps.erase(w);
    p.steps.insert(p.steps.begin() + static_cast<std::ptrdiff_t>(to), std::move(wait));
  }
}

}  // namespace

void overlap_collectives(Program& p, const Context&) {
  if (!p.collectives || !runtime::current_communicator().can_overlap()) return;
  // a ticket per collective, in the order the graph issues them
  for (Step& st : p.steps)
    if (blocking_exchange(st)) std::get<CollectiveStep>(st).ticket = p.num_tickets++;
  if (p.num_tickets == 0) return;
  for (size_t li = 0; li < p.steps.size(); ++li) {
    const auto* loop = std::get_if<LoopStep>(&p.steps[li]);
    if (loop && loop->kind == ir::Loop::Kind::Scan && loop->length > 0) start_in_loop(p, li);
  }
  start_early(p);
  wait_late(p);
  // Collectives moved into loops go ahead of others, and are split there: the order and
  // the splits join the signature the ranks compare, so that every rank's pass must have
  // made the same moves (without those, starting early changes no rank's exchanges).
  uint64_t order = 0x6f72646572;
  std::string text;
  bool in_loops = false;
  for (const Step& st : p.steps) {
    int ticket = -1;
    if (const auto* cs = std::get_if<CollectiveStep>(&st); cs && cs->phase == Phase::Start)
      ticket = cs->ticket;
    if (const auto* l = std::get_if<LoopStep>(&st))
      for (const LoopStep::Collective& lc : l->collectives) {
        in_loops = true;
        const std::string parts = describe_parts(lc);
        order = hash_combine(order, static_cast<uint64_t>(lc.step.ticket));
        for (char ch : parts) order = hash_combine(order, static_cast<uint64_t>(ch));
        text += detail::cat(text.empty() ? "" : ", ", "#", lc.step.ticket, " in a loop,", parts);
      }
    if (ticket >= 0) {
      order = hash_combine(order, static_cast<uint64_t>(ticket));
      text += detail::cat(text.empty() ? "" : ", ", "#", ticket);
    }
  }
  if (!in_loops) return;
  p.collectives = hash_combine(p.collectives, order);
  p.collectives_text += " (started in the order " + text + ")";
}

}  // namespace lazytrace::cpu::plan
