// lt::dist: joining a job, the current rank, and threads as ranks.
#include "lazytrace/dist/dist.h"

#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "dist/mpi.h"
#include "dist/thread_group.h"
#include "lazytrace/core/error.h"
#include "lazytrace/ops/autocast.h"
#include "lazytrace/ops/ops.h"
#include "runtime/communicator.h"

namespace lazytrace::dist {
namespace {

std::atomic<double> g_timeout{-1};  // < 0: not set yet

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

bool built_with_mpi() {
  return mpi_built();
}

int init() {
  // (a function-local static, not std::call_once, whose thread_local the library's TLS model
  // cannot reach)
  static const bool joined = [] {
    if (!launched_by_mpi()) return false;
    if (!mpi_built())
      fail("dist::init",
           "this process was started by mpirun, but lazytrace was built without "
           "MPI: install Open MPI (scripts/install-deps.sh installs it) and build "
           "again, or run without mpirun.");
    runtime::set_process_communicator(make_mpi_world());
    return true;
  }();
  (void)joined;
  return world_size();
}

int rank() {
  return runtime::current_communicator().rank();
}

int world_size() {
  return runtime::current_communicator().size();
}

void barrier() {
  runtime::current_communicator().barrier();
}

void set_timeout(double seconds) {
  if (!(seconds > 0))
    fail("dist::set_timeout", "the timeout must be a positive number of seconds, got ", seconds,
         ".");
  g_timeout.store(seconds);
}

double timeout() {
  double t = g_timeout.load();
  if (t > 0) return t;
  t = 300;
  if (const char* env = std::getenv("LAZYTRACE_DIST_TIMEOUT")) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(v > 0))
      fail("dist", "LAZYTRACE_DIST_TIMEOUT must be a positive number of seconds, got '", env, "'.");
    t = v;
  }
  return t;
}

void run_threads(int n, const std::function<void(int)>& fn) {
  if (n < 1) fail("dist::run_threads", "needs at least one rank, got ", n, ".");
  std::vector<std::unique_ptr<ThreadRank>> ranks = make_thread_group(n);
  std::mutex mu;
  std::exception_ptr first;
  // every rank records under the caller's autocast state, as rank 0 (the caller's thread) does
  const bool autocast = is_autocast_enabled();
  const DType autocast_to = autocast_dtype();
  auto body = [&](int r) {
    runtime::CommunicatorScope scope(ranks[static_cast<size_t>(r)].get());
    AutocastGuard autocast_guard(autocast, autocast_to);
    // rank 0 runs on the caller's thread: its batch rows (set by shard) stay the caller's
    struct KeepRows {
      BatchRows rows = batch_rows();
      ~KeepRows() { set_batch_rows(rows); }
    } keep_rows;
    try {
      fn(r);
    } catch (...) {
      std::string why = "another rank failed";
      try {
        throw;
      } catch (const std::exception& e) {
        why = detail::cat("thread rank ", r, " failed: ", e.what());
      } catch (...) {
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
      ranks[static_cast<size_t>(r)]->abort(why);
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) threads.emplace_back(body, r);
  body(0);
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

std::pair<int64_t, int64_t> shard(int64_t n) {
  const int64_t size = world_size(), r = rank();
  if (n % size != 0)
    fail("dist::shard", "a global batch of ", n, " examples does not split evenly over ", size,
         " ranks; make it a multiple of ", size, ".");
  const int64_t per = n / size;
  set_batch_rows({.first = r * per, .count = per, .total = n});  // dropout's masks (BatchRows)
  return {r * per, (r + 1) * per};
}

}  // namespace lazytrace::dist
