// Loops (LoopStep): the body's program, compiled once, runs once per iteration
// on pointers into the caller's memory. An iteration only moves pointers: x slices are
// read where they lie, ys are written where they belong, and each carry alternates
// between two buffers. A result that the body returns as one of its inputs (or as another
// result) is copied, which is the only data an iteration moves itself.
#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <utility>

#include "backends/cpu/kernels.h"
#include "backends/cpu/loop_overlap.h"
#include "runtime/interrupt.h"

namespace lazytrace::cpu {
namespace {

using Role = ir::Loop::Role;

int64_t bytes_of(const Shape& s, DType d) {
  return s.numel() * static_cast<int64_t>(itemsize(d));
}

// One of the loop's programs (body or cond) bound to the caller's memory: fixed pointers
// are set once, input and result pointers before each run.
class Bound {
 public:
  Bound(const Program& prog, const std::vector<View>& leaves, const std::vector<int>& scalar_slots,
        int scratch, const RunContext& caller)
      : prog_(prog), nleaves_(leaves.size()) {
    ctx_.base.assign(prog.storages.size(), nullptr);
    scalars_.reserve(scalar_slots.size());
    for (int slot : scalar_slots) scalars_.push_back((*caller.scalars)[static_cast<size_t>(slot)]);
    ctx_.scalars = &scalars_;
    ctx_.passes = caller.passes;
    ctx_.read_ahead = caller.read_ahead;  // an outer loop's hints, until this loop's own
    ctx_.shadows = caller.shadows;
    ctx_.choices = caller.choices;
    ctx_.comm = caller.comm;
    tickets_.resize(static_cast<size_t>(prog.num_tickets));
    ctx_.tickets = tickets_.data();
    char* arena = scratch >= 0 ? caller.base[static_cast<size_t>(scratch)] : nullptr;
    param_storage_.assign(static_cast<size_t>(prog.num_params), -1);
    for (size_t i = 0; i < prog.storages.size(); ++i) {
      const Storage& st = prog.storages[i];
      if (st.kind == StorageKind::Arena) ctx_.base[i] = arena + st.offset;
      if (st.kind == StorageKind::Param) param_storage_[static_cast<size_t>(st.slot)] = int(i);
    }
    for (size_t k = 0; k < leaves.size(); ++k) {
      const View& v = leaves[k];
      set_param(k, caller.base[static_cast<size_t>(v.storage)] +
                       v.offset * static_cast<int64_t>(itemsize(v.dtype)));
    }
    // Which results are written in place (the first result of each output storage), and
    // which are copied after the run (from an input, or from an earlier result).
    std::vector<int> first(static_cast<size_t>(prog.num_outputs), -1);
    for (size_t r = 0; r < prog.results.size(); ++r) {
      const ResultBinding& b = prog.results[r];
      const Storage& st = prog.storages[static_cast<size_t>(b.storage)];
      Copy c{static_cast<int>(r), -1, -1, bytes_of(b.shape, b.dtype)};
      if (st.kind == StorageKind::Param) {
        c.from_storage = b.storage;
      } else if (first[static_cast<size_t>(st.slot)] >= 0) {
        c.from_result = first[static_cast<size_t>(st.slot)];
      } else {
        first[static_cast<size_t>(st.slot)] = static_cast<int>(r);
        in_place_.push_back({static_cast<int>(r), b.storage});
        continue;
      }
      copies_.push_back(c);
    }
  }

  /** The context the program's steps run in. */
  RunContext& context() { return ctx_; }

  /** Input k of the loop (body Param slot after the program's own leaves). */
  void set_input(size_t k, char* p) { set_param(nleaves_ + k, p); }

  /** Runs with result r written to dst[r]; the loop-invariant steps only the first time. */
  void run(char* const* dst) {
    for (const auto& [r, storage] : in_place_) ctx_.base[static_cast<size_t>(storage)] = dst[r];
    run_steps(prog_, ctx_, ran_ ? static_cast<size_t>(prog_.invariant_steps) : 0);
    ran_ = true;
    for (const Copy& c : copies_) {
      const char* src =
          c.from_storage >= 0 ? ctx_.base[static_cast<size_t>(c.from_storage)] : dst[c.from_result];
      if (src != dst[c.result]) std::memcpy(dst[c.result], src, static_cast<size_t>(c.bytes));
    }
  }

 private:
  void set_param(size_t slot, char* p) {
    const int s = param_storage_[slot];
    if (s >= 0) ctx_.base[static_cast<size_t>(s)] = p;  // -1: the program never reads it
  }

  struct Copy {
    int result, from_storage, from_result;
    int64_t bytes;
  };
  const Program& prog_;
  std::vector<int64_t> tickets_;
  size_t nleaves_;
  bool ran_ = false;
  RunContext ctx_;
  std::vector<runtime::ScalarArg> scalars_;
  std::vector<int> param_storage_;
  std::vector<std::pair<int, int>> in_place_;  // result, storage
  std::vector<Copy> copies_;
};

char* at(const RunContext& ctx, const View& v) {
  return ctx.base[static_cast<size_t>(v.storage)] +
         v.offset * static_cast<int64_t>(itemsize(v.dtype));
}

}  // namespace

void run_loop(const LoopStep& s, const RunContext& caller) {
  const bool is_while = s.kind == ir::Loop::Kind::While;
  const size_t nc = s.spare.size(), nin = s.inputs.size();
  Bound body(*s.body, s.body_leaves, s.body_scalars, s.scratch, caller);
  std::optional<Bound> cond;
  if (is_while) cond.emplace(*s.cond, s.cond_leaves, s.cond_scalars, s.cond_scratch, caller);

  // carries: the current value, and the two buffers they alternate between (the loop's
  // output, where the final value must end, and the spare)
  std::vector<char*> cur(nc), out(nc), spare(nc);
  std::vector<int64_t> carry_bytes(nc);
  std::vector<int64_t> counter_base(nin, 0), counter(nin, 0);
  for (size_t k = 0, c = 0; k < nin; ++k) {
    const LoopStep::Input& in = s.inputs[k];
    switch (in.role) {
      case Role::Carry:
        cur[c] = at(caller, in.view);
        out[c] = caller.base[static_cast<size_t>(s.outputs[c])];
        spare[c] = caller.base[static_cast<size_t>(s.spare[c])];
        carry_bytes[c] = bytes_of(in.view.shape, in.view.dtype);
        ++c;
        break;
      case Role::Invariant:
        body.set_input(k, at(caller, in.view));
        if (cond) cond->set_input(k, at(caller, in.view));
        break;
      case Role::Counter:
        counter_base[k] = in.view.is_scalar() ? caller.scalar(in.view).i
                                              : *reinterpret_cast<int64_t*>(at(caller, in.view));
        body.set_input(k, reinterpret_cast<char*>(&counter[k]));
        if (cond) cond->set_input(k, reinterpret_cast<char*>(&counter[k]));
        break;
      case Role::X:
      case Role::Unused:
        break;
    }
  }
  // Binds iteration `idx`'s inputs (current carries, x slices, counters).
  auto bind_inputs = [&](Bound& b, int64_t idx) {
    for (size_t k = 0, c = 0; k < nin; ++k) {
      const LoopStep::Input& in = s.inputs[k];
      if (in.role == Role::Carry) {
        b.set_input(k, cur[c++]);
      } else if (in.role == Role::X) {
        b.set_input(k, x_slice(in, caller, idx).first);
      } else if (in.role == Role::Counter) {
        counter[k] = counter_base[k] + idx * in.step;
      }
    }
  };

  const size_t nres = s.outputs.size();
  std::vector<char*> dst(nres);
  std::vector<int64_t> y_bytes(nres, 0);
  for (size_t r = nc; r < nres; ++r)
    y_bytes[r] = bytes_of(s.body->results[r].shape, s.body->results[r].dtype);
  auto step = [&](int64_t idx, bool to_out) {
    bind_inputs(body, idx);
    for (size_t c = 0; c < nc; ++c) dst[c] = to_out ? out[c] : spare[c];
    for (size_t r = nc; r < nres; ++r)
      dst[r] = caller.base[static_cast<size_t>(s.outputs[r])] + idx * y_bytes[r];
    body.run(dst.data());
    for (size_t c = 0; c < nc; ++c) cur[c] = dst[c];
  };

  if (!is_while) {
    const std::unique_ptr<LoopOverlap> beside = make_loop_overlap(s, caller, body.context());
    const bool collectives = !s.collectives.empty();
    if (collectives) start_loop_collectives(s, caller, -1);
    for (int64_t j = 0; j < s.length; ++j) {
      const int64_t idx = s.reverse ? s.length - 1 - j : j;
      beside->iteration_start(j);
      step(idx, (s.length - 1 - j) % 2 == 0);
      beside->iteration_done(j);
      if (collectives) start_loop_collectives(s, caller, idx);
    }
    beside->loop_done();
  } else {
    // a loop that may never end stops where asked (runtime/interrupt.h), but for one whose
    // collectives the other ranks wait for
    const bool interruptible = s.collectives.empty();
    bool flag = false;
    char* cond_dst[1] = {reinterpret_cast<char*>(&flag)};
    for (int64_t j = 0;; ++j) {
      bind_inputs(*cond, j);
      cond->run(cond_dst);
      if (!flag) break;
      step(j, j % 2 == 0);
      if (interruptible) runtime::poll_interrupt("while_loop", j + 1);
    }
  }
  for (size_t c = 0; c < nc; ++c)  // zero iterations, or a while loop that ended in the spare
    if (cur[c] != out[c]) std::memcpy(out[c], cur[c], static_cast<size_t>(carry_bytes[c]));
}

}  // namespace lazytrace::cpu
