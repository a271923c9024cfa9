// The loop's overlap (loop_overlap.h): the AdamW updates of a scan's stacked weights beside
// its iterations, or, without updates, the next iteration's slices read into the caches.
#include "backends/cpu/loop_overlap.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "backends/cpu/cache_topology.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/small_gemm.h"
#include "backends/cpu/timed_choice.h"
#include "metrics/known.h"
#include "runtime/thread_pool.h"

namespace lazytrace::cpu {

using Role = ir::Loop::Role;

namespace {

char* at(const RunContext& ctx, const View& v) {
  return ctx.base[static_cast<size_t>(v.storage)] +
         v.offset * static_cast<int64_t>(itemsize(v.dtype));
}

// One runtime::Background session beside a scan's iterations.
// - With updates (LoopStep::updates): iteration j's tasks are every block of batch slice(j)
//   of every update, runnable once iteration j is done. The loop's thread runs some itself
//   when the others fall behind, so each update runs while its layer's weight is cached.
// - Without updates, the other threads read iteration j + 1's slices into the caches while
//   iteration j runs (a layer's small products wait on their weights from memory), and the
//   products read the next iteration's lines of their weight beside their own (shadows).
// Where the other threads do not read ahead, the loop's own thread does, a line per
// reduction step of its products (RunContext::read_ahead). Where the threads share no
// cache, the loop's thread evicts the slices the updates write once it has read them: the
// updates' writes would otherwise wait for this core's caches to give the lines up.
// Without a session (another loop's is on), nothing is read ahead and the updates run after
// the loop.
class Beside final : public LoopOverlap {
 public:
  Beside(const LoopStep& s, const RunContext& caller, RunContext& body)
      : s_(s), caller_(caller), body_(body) {
    for (const AdamWStep& u : s.updates) {
      first_.push_back(per_iteration_);
      per_iteration_ += adamw_blocks_per_batch(u);
    }
    int64_t bytes = 0;  // of an iteration's x slices
    for (const LoopStep::Input& in : s.inputs)
      if (in.role == Role::X) bytes += x_slice(in, caller, 0).second;
    const bool updates = per_iteration_ > 0, big = s.length > 1 && bytes >= kReadAheadFrom;
    bool ahead = big && caller.passes.on(runtime::Pass::ReadAhead);
    if (ahead && !updates && caller.choices.read_ahead) {
      timed_.emplace(caller.choices.read_ahead->trial(
                         {s.length, bytes, static_cast<int64_t>(s.body->steps.size()),
                          static_cast<int64_t>(runtime::num_threads())}),
                     true);
      ahead = timed_->way();
    }
    if (updates) handed_.reserve(static_cast<size_t>(s.length * per_iteration_));
    if (updates && big && caller.passes.on(runtime::Pass::EvictSlices) && !threads_share_cache())
      for (size_t k = 0; k < s.inputs.size(); ++k)
        for (const AdamWStep& u : s.updates)
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
    // update blocks are long tasks: while they wait, the loop's steps keep to this thread
    on_ = per_iteration_ > 0 && runtime::Background::begin(task_, updates);
    // only while this loop's session runs: no other loop's tasks read the shadows
    shadowing_ = on_ && !chunks_.empty();
    mine_ = ahead && !shadowing_;
    if (mine_) body_.read_ahead = &ahead_;
  }
  ~Beside() override {  // the loop threw: wait for the tasks already running
    restore();
    if (on_) runtime::Background::finish(published_);
  }

  void iteration_start(int64_t j) override {
    if (shadowing_) {
      shadows_.clear();
      if (j + 1 < s_.length)
        for (const int k : s_.x_order) {
          const LoopStep::Input& in = s_.inputs[static_cast<size_t>(k)];
          if (!in.slices.empty()) continue;
          const auto [p, bytes] = x_slice(in, caller_, slice(j));
          shadows_.push_back({p, p + bytes, x_slice(in, caller_, slice(j + 1)).first - p});
        }
      body_.shadows = Shadows{shadows_.data(), shadows_.data() + shadows_.size()};
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

  void iteration_done(int64_t j) override {
    if (!on_ || !chunks_.empty()) return;
    // This thread runs blocks too when the others fall more than an iteration behind, those
    // of the iteration it just ran first (it wrote their gradient factors, read their weight).
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

  void loop_done() override {
    restore();
    if (on_) {
      runtime::Background::finish(published_);
      on_ = false;
    } else {
      for (const AdamWStep& u : s_.updates) run_adamw(u, caller_);
    }
    if (timed_) timed_->done();  // from the first iteration to the last
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
    if (shadowing_) body_.shadows = caller_.shadows;
    shadowing_ = false;
    if (mine_) body_.read_ahead = caller_.read_ahead;
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
  RunContext& body_;
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
  bool shadowing_ = false;  // the products read ahead beside theirs: shadows_
  std::vector<Shadow> shadows_;
  std::optional<TimedRun> timed_;  // this run's way, through the read-ahead choice
};

}  // namespace

std::pair<char*, int64_t> x_slice(const LoopStep::Input& in, const RunContext& caller,
                                  int64_t idx) {
  if (in.slices.empty()) return {at(caller, in.view) + idx * in.slice_bytes, in.slice_bytes};
  const View& v = in.slices[static_cast<size_t>(idx)];
  return {at(caller, v), v.shape.numel() * static_cast<int64_t>(itemsize(v.dtype))};
}

void NoOverlap::loop_done() {
  for (const AdamWStep& u : s_.updates) run_adamw(u, caller_);
}

std::unique_ptr<LoopOverlap> make_loop_overlap(const LoopStep& s, const RunContext& caller,
                                               RunContext& body) {
  if (s.updates.empty() && !caller.passes.on(runtime::Pass::ReadAhead))
    return std::make_unique<NoOverlap>(s, caller);
  return std::make_unique<Beside>(s, caller, body);
}

}  // namespace lazytrace::cpu
