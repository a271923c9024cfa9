// Loops (compiler::LoopStep): the body's program, compiled once, runs once per iteration
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
#include "backends/cpu/small_gemm.h"
#include "metrics/known.h"
#include "runtime/thread_pool.h"

namespace lazytrace::cpu {
namespace {

using compiler::LoopStep;
using compiler::Program;
using compiler::StorageKind;
using Role = ir::Loop::Role;

int64_t bytes_of(const Shape& s, DType d) {
  return s.numel() * static_cast<int64_t>(itemsize(d));
}

// One of the loop's programs (body or cond) bound to the caller's memory: fixed pointers
// are set once, input and result pointers before each run.
class Bound {
 public:
  Bound(const Program& prog, const std::vector<compiler::View>& leaves,
        const std::vector<int>& scalar_slots, int scratch, const RunContext& caller)
      : prog_(prog), nleaves_(leaves.size()) {
    ctx_.base.assign(prog.storages.size(), nullptr);
    scalars_.reserve(scalar_slots.size());
    for (int slot : scalar_slots) scalars_.push_back((*caller.scalars)[static_cast<size_t>(slot)]);
    ctx_.scalars = &scalars_;
    ctx_.passes = caller.passes;
    char* arena = scratch >= 0 ? caller.base[static_cast<size_t>(scratch)] : nullptr;
    param_storage_.assign(static_cast<size_t>(prog.num_params), -1);
    for (size_t i = 0; i < prog.storages.size(); ++i) {
      const compiler::Storage& st = prog.storages[i];
      if (st.kind == StorageKind::Arena) ctx_.base[i] = arena + st.offset;
      if (st.kind == StorageKind::Param) param_storage_[static_cast<size_t>(st.slot)] = int(i);
    }
    for (size_t k = 0; k < leaves.size(); ++k) {
      const compiler::View& v = leaves[k];
      set_param(k, caller.base[static_cast<size_t>(v.storage)] +
                       v.offset * static_cast<int64_t>(itemsize(v.dtype)));
    }
    // Which results are written in place (the first result of each output storage), and
    // which are copied after the run (from an input, or from an earlier result).
    std::vector<int> first(static_cast<size_t>(prog.num_outputs), -1);
    for (size_t r = 0; r < prog.results.size(); ++r) {
      const compiler::ResultBinding& b = prog.results[r];
      const compiler::Storage& st = prog.storages[static_cast<size_t>(b.storage)];
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
  size_t nleaves_;
  bool ran_ = false;
  RunContext ctx_;
  std::vector<runtime::ScalarArg> scalars_;
  std::vector<int> param_storage_;
  std::vector<std::pair<int, int>> in_place_;  // result, storage
  std::vector<Copy> copies_;
};

char* at(const RunContext& ctx, const compiler::View& v) {
  return ctx.base[static_cast<size_t>(v.storage)] +
         v.offset * static_cast<int64_t>(itemsize(v.dtype));
}

// Where slice `idx` of x input `in` lies, and its bytes.
std::pair<char*, int64_t> x_slice(const LoopStep::Input& in, const RunContext& caller,
                                  int64_t idx) {
  if (in.slices.empty()) return {at(caller, in.view) + idx * in.slice_bytes, in.slice_bytes};
  const compiler::View& v = in.slices[static_cast<size_t>(idx)];
  return {at(caller, v), bytes_of(v.shape, v.dtype)};
}

// What the other threads do beside a scan's iterations, as one runtime::Background session.
// - The loop's AdamW updates (LoopStep::updates): iteration j's blocks are every block of
//   batch slice(j) of every update, runnable once iteration j is done; the loop's thread
//   runs some of them itself (iteration_done).
// - Without updates, they read ahead: while iteration j runs, the x slices iteration j + 1
//   reads are asked for into the caches, 32 KB per task. A layer's small products wait on
//   its weights from memory, and between them the other threads have nothing to do. The
//   products themselves, on whichever thread, read the next iteration's lines of their
//   weight ahead beside their own (loop_shadows): where the cores share no cache, the
//   tasks' lines are in the wrong core's (spec-100 scan step, in-process A/B in 6
//   processes, medians of 3 rounds: 0.04-0.48 ms less in each, 33.44 against 33.81 ms in
//   one where the cores shared no cache).
// Without a session (another loop's is on), nothing is read ahead and the updates run
// after the loop.
// Where the other threads do not read ahead (they run updates, or there are none), the
// loop's thread does, a line per reduction step of its products (thread_read_ahead): with
// the updates streaming beside it, a backward product that waits on its weight from memory
// ran at half its speed. It keeps three quarters of its L2 ahead of its own reads, from
// that far into an iteration's slices on into the next iteration's: lines asked for a whole
// iteration ahead had left L2 again when they were read (spec-100 scan step, in-process A/B
// where the cores share no cache: 34.1 -> 33.4 ms; 30.12 against 30.04 where they do).
// Where the threads share no cache (runtime::threads_share_cache), the loop's thread
// evicts each iteration's slices of the weights the updates write once it has read them:
// another core's write to a line this one still holds waits for this core's caches to give
// it up, and the updates then ran at half their speed (spec-100 scan step on a VM in that
// state, alternated processes: 37.0-38.4 -> 33.4-35.0 ms; where the cores share a cache
// the eviction costs 3 ms and the update finds the weight in the shared cache).
class Beside {
 public:
  Beside(const LoopStep& s, const RunContext& caller) : s_(s), caller_(caller) {
    for (const compiler::AdamWStep& u : s.updates) {
      first_.push_back(per_iteration_);
      per_iteration_ += adamw_blocks_per_batch(u);
    }
    int64_t bytes = 0;  // of an iteration's x slices
    for (const LoopStep::Input& in : s.inputs)
      if (in.role == Role::X) bytes += x_slice(in, caller, 0).second;
    const bool updates = per_iteration_ > 0, big = s.length > 1 && bytes >= kReadAheadFrom;
    const bool ahead = big && caller.passes.on(runtime::Pass::ReadAhead);
    if (updates) handed_.reserve(static_cast<size_t>(s.length * per_iteration_));
    if (updates && big && caller.passes.on(runtime::Pass::EvictSlices) &&
        !runtime::threads_share_cache())
      for (size_t k = 0; k < s.inputs.size(); ++k)
        for (const compiler::AdamWStep& u : s.updates)
          if (s.inputs[k].role == Role::X && s.inputs[k].slices.empty() &&
              s.inputs[k].view.storage == u.param.storage)
            evict_.push_back(k);
    if (!updates && ahead) {
      for (const int k : s.x_order) {
        const int64_t b = x_slice(s.inputs[static_cast<size_t>(k)], caller, 0).second;
        for (int64_t o = 0; o < b; o += kChunk) chunks_.push_back({static_cast<size_t>(k), o});
      }
      per_iteration_ = static_cast<int64_t>(chunks_.size());
    }
    // (update blocks are long tasks: while they wait, the loop's steps keep to this thread;
    // the threads join them between two read-ahead chunks)
    on_ = per_iteration_ > 0 && runtime::Background::begin(task_, updates);
    // (only while this loop's session runs: no other loop's tasks read the shadows as they
    // change between iterations)
    shadowing_ = on_ && !chunks_.empty();
    if (ahead && !shadowing_) {
      mine_ = true;
      saved_ = thread_read_ahead();
      thread_read_ahead() = &ahead_;
    }
  }
  ~Beside() {  // the loop threw: wait for the tasks already running
    restore();
    if (on_) runtime::Background::finish(published_);
  }

  void iteration_start(int64_t j) {
    if (shadowing_) {
      shadows_.clear();
      if (j + 1 < s_.length)
        for (const int k : s_.x_order) {
          const LoopStep::Input& in = s_.inputs[static_cast<size_t>(k)];
          if (!in.slices.empty()) continue;
          const auto [p, bytes] = x_slice(in, caller_, slice(j));
          shadows_.push_back({p, p + bytes, x_slice(in, caller_, slice(j + 1)).first - p});
        }
      loop_shadows() = Shadows{shadows_.data(), shadows_.data() + shadows_.size()};
    }
    if (mine_) {
      ranges_.clear();
      // from kept_ahead() into this iteration's slices (asked for at the end of the last)
      if (j > 0) add_ranges(j, kept_ahead());
      if (j + 1 < s_.length) add_ranges(j + 1, 0);
      ahead_ = ReadAhead{.next = ranges_.data(), .end = ranges_.data() + ranges_.size()};
    } else if (on_ && !chunks_.empty()) {
      publish((j + 1) * per_iteration_);
    }
  }

  void iteration_done(int64_t j) {
    if (!on_ || !chunks_.empty()) return;
    // The updates are more work than the loop's own steps (AdamW's memory traffic against a
    // layer's small products): when the other threads fall more than an iteration behind,
    // this one runs blocks too, so each update runs soon after its layer's iteration, while
    // the weight the iteration read is still in the caches (spec-100 scan step, alternated
    // runs: 38.2 ms without, 36.8 ms with; keeping none or half an iteration: 40.3 ms).
    // It runs blocks of the iteration it just ran, whose gradient factors it wrote and whose
    // weight it read, before older ones: on a VM whose two cores share no cache, another
    // core's update of them waits on every line (spec-100 scan step, in-process A/B in that
    // state: 40.3 -> 39.0 ms; no change where the cores share one).
    for (size_t k : evict_) {
      const auto [p, bytes] = x_slice(s_.inputs[k], caller_, slice(j));
      evict(p, bytes);
      metrics::loop_slices_evicted.add();
    }
    const int64_t own = std::min(runtime::Background::waiting(), per_iteration_);
    for (int64_t r = own; r < per_iteration_; ++r) handed_.push_back({j, r});
    publish(static_cast<int64_t>(handed_.size()));
    for (int64_t r = 0; r < own; ++r) run_block(j, r);
    runtime::Background::catch_up(per_iteration_);
  }

  void loop_done() {
    restore();
    if (on_) {
      runtime::Background::finish(published_);
      on_ = false;
    } else {
      for (const compiler::AdamWStep& u : s_.updates) run_adamw(u, caller_);
    }
  }

 private:
  static constexpr int64_t kChunk = 32 << 10;
  // How far ahead of its own reads the loop's thread reads: three quarters of its L2
  static int64_t kept_ahead() { return l2_cache_bytes() / 4 * 3; }
  static constexpr int64_t kReadAheadFrom = 256 << 10;  // an iteration's slices; less stays cached

  static void evict(const char* p, int64_t bytes) {
#if defined(__x86_64__)
    if (has_clflushopt())
      for (int64_t o = 0; o < bytes; o += 64) asm volatile("clflushopt %0" ::"m"(p[o]));
    else
      for (int64_t o = 0; o < bytes; o += 64) asm volatile("clflush %0" ::"m"(p[o]));
#else
    (void)p, (void)bytes;
#endif
  }

  void restore() {
    if (shadowing_) loop_shadows() = Shadows{};
    shadowing_ = false;
    if (mine_) thread_read_ahead() = saved_;
    mine_ = false;
  }

  // Iteration j's slices in first-read order, from `skip` bytes into them, onto ranges_.
  void add_ranges(int64_t j, int64_t skip) {
    for (const int k : s_.x_order) {
      const auto [p, bytes] = x_slice(s_.inputs[static_cast<size_t>(k)], caller_, slice(j));
      if (skip >= bytes) {
        skip -= bytes;
        continue;
      }
      ranges_.push_back({p + skip, bytes - skip});
      skip = 0;
    }
  }

  void publish(int64_t n) {
    published_ = n;
    runtime::Background::publish(n);
  }

  int64_t slice(int64_t j) const {
    return s_.reverse ? s_.length - 1 - j : j;
  }

  void run(int64_t t) const {
    if (chunks_.empty()) {
      const auto [j, r] = handed_[static_cast<size_t>(t)];
      return run_block(j, r);
    }
    const int64_t j = t / per_iteration_, r = t % per_iteration_;
    read_ahead(j + 1, chunks_[static_cast<size_t>(r)]);
  }

  // Block r of iteration j's updates.
  void run_block(int64_t j, int64_t r) const {
    const size_t u =
        static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), r) - first_.begin()) - 1;
    run_adamw_block(s_.updates[u], caller_, slice(j), r - first_[u]);
  }

  // Slices of separate tensors (Input::slices) are read ahead as far as slice 0 reaches.
  void read_ahead(int64_t j, std::pair<size_t, int64_t> chunk) const {
    if (j >= s_.length) return;
    const auto [p, bytes] = x_slice(s_.inputs[chunk.first], caller_, slice(j));
    for (int64_t o = chunk.second; o < std::min(bytes, chunk.second + kChunk); o += 64)
      __builtin_prefetch(p + o);
  }

  const LoopStep& s_;
  const RunContext& caller_;
  std::vector<int64_t> first_;  // first task of each update within an iteration's
  int64_t per_iteration_ = 0, published_ = 0;
  std::vector<std::pair<size_t, int64_t>> chunks_;   // x input, byte offset of its slice
  std::vector<std::pair<int64_t, int64_t>> handed_;  // the pool's tasks: iteration, block
  const std::function<void(int64_t)> task_ = [this](int64_t t) { run(t); };
  bool on_ = false;
  std::vector<size_t> evict_;  // x inputs that the updates write
  bool mine_ = false;          // this thread reads ahead: ahead_, over ranges_
  ReadAhead ahead_;
  std::vector<ReadAhead::Range> ranges_;
  ReadAhead* saved_ = nullptr;  // the thread's read-ahead before the loop (an outer loop's)
  bool shadowing_ = false;      // the products read ahead beside theirs: shadows_
  std::vector<Shadow> shadows_;
};

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
    Beside beside(s, caller);
    for (int64_t j = 0; j < s.length; ++j) {
      beside.iteration_start(j);
      step(s.reverse ? s.length - 1 - j : j, (s.length - 1 - j) % 2 == 0);
      beside.iteration_done(j);
    }
    beside.loop_done();
  } else {
    bool flag = false;
    char* cond_dst[1] = {reinterpret_cast<char*>(&flag)};
    for (int64_t j = 0;; ++j) {
      bind_inputs(*cond, j);
      cond->run(cond_dst);
      if (!flag) break;
      step(j, j % 2 == 0);
    }
  }
  for (size_t c = 0; c < nc; ++c)  // zero iterations, or a while loop that ended in the spare
    if (cur[c] != out[c]) std::memcpy(out[c], cur[c], static_cast<size_t>(carry_bytes[c]));
}

}  // namespace lazytrace::cpu
