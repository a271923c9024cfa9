#include "runtime/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace lazytrace::runtime {
namespace {

thread_local bool t_in_parallel = false;

struct Job {
  const std::function<void(int64_t)>* task;
  int64_t chunks;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  // workers that took the job (under the pool's mu_), and those of them done with it
  std::atomic<int> entered{0}, left{0};
  std::mutex error_mu;
  std::exception_ptr error;  // the first exception a chunk threw; rethrown by run()
};

class Pool {
 public:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void run(int64_t chunks, const std::function<void(int64_t)>& task) {
    std::lock_guard<std::mutex> run_lock(run_mu_);  // one parallel region at a time
    Job* job = free_job();
    job->task = &task;
    job->chunks = chunks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = job;
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    // However this returns (a background task run below may throw): once every chunk is
    // done, no worker may take the job any more, so that it can be reused.
    struct Close {
      Pool& pool;
      Job& job;
      ~Close() {
        std::unique_lock<std::mutex> lock(pool.mu_);
        pool.done_cv_.wait(lock, [&] { return job.done.load() == job.chunks; });
        pool.job_ = nullptr;
      }
    };
    {
      Close close{*this, *job};
      work(*job);
      // The workers' chunks usually end within microseconds of ours: wait for them
      // spinning, since sleeping on the condition variable costs a futex wake-up (tens of
      // microseconds on a VM) on most steps.
      for (int i = 0; i < kSpin && job->done.load(std::memory_order_acquire) != chunks; ++i)
        if (!run_background()) cpu_relax();
    }
    if (job->error) std::rethrow_exception(std::exchange(job->error, nullptr));
  }

  // Background sessions (see thread_pool.h).
  bool begin_background(const std::function<void(int64_t)>& task, bool hold) {
    bool free = false;
    if (!bg_owned_.compare_exchange_strong(free, true)) return false;
    bg_task_ = &task;
    bg_hold_.store(hold);
    bg_next_.store(0);
    bg_published_.store(0);
    bg_done_.store(0);
    bg_active_.store(true);
    return true;
  }
  void publish_background(int64_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);  // a worker checks for tasks before it sleeps
      bg_published_.store(n, std::memory_order_release);
    }
    cv_.notify_all();
  }
  // Published tasks that no thread has taken yet.
  int64_t background_waiting() const {
    if (!bg_active_.load(std::memory_order_relaxed)) return 0;
    return std::max<int64_t>(0, bg_published_.load(std::memory_order_relaxed) -
                                    bg_next_.load(std::memory_order_relaxed));
  }
  bool background_pending() const { return background_waiting() > 0; }
  // Published tasks wait, and the session holds the threads (parallel_for runs inline).
  bool background_holds() const {
    return bg_hold_.load(std::memory_order_relaxed) && background_pending();
  }
  void finish_background(int64_t n, bool use_workers) {
    publish_background(n);
    // (run_background also returns false when another thread took the task it looked at:
    // keep looking while tasks are left)
    if (use_workers) {
      const std::function<void(int64_t)> help = [this, n](int64_t) {
        while (bg_next_.load() < n)
          if (!run_background()) cpu_relax();
      };
      run(static_cast<int64_t>(threads_.size()) + 1, help);
    }
    while (bg_done_.load(std::memory_order_acquire) != n)
      if (!run_background()) cpu_relax();
    // No thread may still be looking at this session when the next one starts.
    bg_active_.store(false);
    while (bg_inside_.load() != 0) cpu_relax();
    bg_owned_.store(false);
  }

  void catch_up_background(int64_t keep) {
    // (run_background returns false too when another thread took the task it looked at)
    while (bg_published_.load(std::memory_order_acquire) - bg_next_.load() > keep)
      if (!run_background()) cpu_relax();
  }

  // Runs one published task of the session, if there is one.
  bool run_background() {
    if (!bg_active_.load(std::memory_order_relaxed)) return false;
    bg_inside_.fetch_add(1);
    bool ran = false;
    if (bg_active_.load()) {
      int64_t t = bg_next_.load();
      if (t < bg_published_.load(std::memory_order_acquire) &&
          bg_next_.compare_exchange_strong(t, t + 1)) {
        (*bg_task_)(t);
        bg_done_.fetch_add(1, std::memory_order_release);
        ran = true;
      }
    }
    bg_inside_.fetch_sub(1);
    return ran;
  }

 private:
  // A job that every worker which took it is done with, reset (under run_mu_): a worker
  // that woke as its region ended may still look at the last job for a moment, so there
  // are at most one more than the workers. (No worker takes a job after its region: job_ is
  // cleared by then.)
  Job* free_job() {
    for (const std::unique_ptr<Job>& j : jobs_)
      if (j->left.load(std::memory_order_acquire) == j->entered.load(std::memory_order_relaxed)) {
        j->next.store(0, std::memory_order_relaxed);
        j->done.store(0, std::memory_order_relaxed);
        j->entered.store(0, std::memory_order_relaxed);
        j->left.store(0, std::memory_order_relaxed);
        j->error = nullptr;
        return j.get();
      }
    jobs_.push_back(std::make_unique<Job>());
    return jobs_.back().get();
  }

  void work(Job& job) {
    t_in_parallel = true;
    int64_t finished = 0;
    for (int64_t c; (c = job.next.fetch_add(1)) < job.chunks;) {
      try {
        (*job.task)(c);
      } catch (...) {
        std::lock_guard<std::mutex> lock(job.error_mu);
        if (!job.error) job.error = std::current_exception();
      }
      ++finished;
    }
    t_in_parallel = false;
    if (finished && job.done.fetch_add(finished) + finished == job.chunks) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_all();
    }
  }

  void loop() {
    uint64_t seen = 0;
    for (;;) {
      // Kernels of one step come back to back: spin a little before sleeping, so the
      // next one starts without a futex wake-up (tens of microseconds on a VM).
      for (int i = 0; i < kSpin && generation_.load(std::memory_order_acquire) == seen; ++i)
        if (run_background())
          i = 0;  // a session is on: keep looking for its tasks
        else
          cpu_relax();
      Job* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] {
          return stop_ || (generation_.load() != seen && job_ != nullptr) || background_pending();
        });
        if (stop_) return;
        // (a new generation without a job: the caller ran all of that job itself)
        if (generation_.load() != seen) {
          seen = generation_.load();
          job = job_;
          if (job) job->entered.fetch_add(1, std::memory_order_relaxed);
        }
      }
      if (job) {
        work(*job);
        job->left.fetch_add(1, std::memory_order_release);  // its last touch of the job
      }
    }
  }

  static void cpu_relax() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  static constexpr int kSpin = 20000;  // about 0.1 ms of pause instructions

  std::vector<std::thread> threads_;
  std::mutex mu_, run_mu_;
  std::condition_variable cv_, done_cv_;
  Job* job_ = nullptr;                      // the running region's, under mu_
  std::vector<std::unique_ptr<Job>> jobs_;  // reused, one region after another (run_mu_)
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;
  const std::function<void(int64_t)>* bg_task_ = nullptr;
  std::atomic<bool> bg_owned_{false};   // a session exists (begin .. end of finish)
  std::atomic<bool> bg_active_{false};  // its tasks may be claimed
  std::atomic<bool> bg_hold_{true};     // parallel regions run inline while its tasks wait
  std::atomic<int> bg_inside_{0};       // threads between checking bg_active_ and leaving
  std::atomic<int64_t> bg_next_{0}, bg_published_{0}, bg_done_{0};
};

Pool& pool() {
  static Pool* p = new Pool(num_threads() - 1);  // leaked: workers may outlive static dtors
  return *p;
}

}  // namespace

int num_threads() {
  static int n = [] {
    if (const char* e = std::getenv("LAZYTRACE_NUM_THREADS")) {
      int v = std::atoi(e);
      if (v > 0) return v;
    }
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return n;
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int threads = num_threads();
  grain = std::max<int64_t>(grain, 1);
  // While long background tasks wait, the other threads are busy with them: do it all here.
  if (threads <= 1 || t_in_parallel || n < 2 * grain || pool().background_holds()) {
    fn(0, n);
    return;
  }
  int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, threads * 4);
  int64_t per = (n + chunks - 1) / chunks;
  chunks = (n + per - 1) / per;
  // (one pointer captured: the std::function holds it without allocating)
  const struct {
    int64_t n, per;
    const std::function<void(int64_t, int64_t)>& fn;
  } split{n, per, fn};
  const std::function<void(int64_t)> task = [s = &split](int64_t c) {
    const int64_t b = c * s->per;
    s->fn(b, std::min(s->n, b + s->per));
  };
  pool().run(chunks, task);
}

bool in_parallel_region() {
  return t_in_parallel;
}

bool Background::begin(const std::function<void(int64_t)>& task, bool hold_threads) {
  return pool().begin_background(task, hold_threads);
}

void Background::publish(int64_t n) {
  pool().publish_background(n);
}

void Background::catch_up(int64_t keep) {
  pool().catch_up_background(keep);
}

int64_t Background::waiting() {
  return pool().background_waiting();
}

bool Background::holds_threads() {
  return pool().background_holds();
}

void Background::finish(int64_t n) {
  pool().finish_background(n, num_threads() > 1 && !t_in_parallel);
}

}  // namespace lazytrace::runtime
