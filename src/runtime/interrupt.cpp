#include "runtime/interrupt.h"

#include <atomic>
#include <chrono>

#include "lazytrace/core/error.h"

namespace lazytrace::runtime {
namespace {

std::atomic<bool> g_requested{false};
std::atomic<bool (*)()> g_check{nullptr};
static_assert(std::atomic<bool>::is_always_lock_free, "request_interrupt is for signal handlers");

}  // namespace

void request_interrupt() {
  g_requested.store(true, std::memory_order_relaxed);
}

void set_interrupt_check(bool (*check)()) {
  g_check.store(check, std::memory_order_relaxed);
}

void clear_interrupt() {
  g_requested.store(false, std::memory_order_relaxed);
}

void poll_interrupt(const char* op, int64_t iterations) {
  // the request stays until the next sync starts: every loop running now sees it
  bool stop = g_requested.load(std::memory_order_relaxed);
  if (bool (*check)() = g_check.load(std::memory_order_relaxed); !stop && check != nullptr) {
    using Clock = std::chrono::steady_clock;
    thread_local Clock::time_point last = Clock::now();
    if (const Clock::time_point now = Clock::now(); now - last >= std::chrono::milliseconds(250)) {
      last = now;
      stop = check();
      if (stop) request_interrupt();
    }
  }
  if (stop)
    throw Interrupted(detail::cat("[", op, "] interrupted after ", iterations,
                                  " iterations (lt::interrupt(), or Ctrl-C in Python); the "
                                  "results of the sync that ran it were not computed."));
}

}  // namespace lazytrace::runtime
