#include "runtime/exit_gate.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

namespace lazytrace::runtime {
namespace {

std::atomic<int> g_in_flight{0};
std::atomic<bool> g_closed{false};
thread_local int t_depth = 0;
thread_local bool t_closer = false;  // the exiting thread's own runs go on

}  // namespace

void wait_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

RunGuard::RunGuard() {
  if (t_depth > 0) {
    entered_ = true;
    ++t_depth;
    return;
  }
  g_in_flight.fetch_add(1);  // before the check: close_runs() either sees it or is seen
  if (g_closed.load() && !t_closer) {
    g_in_flight.fetch_sub(1);
    return;
  }
  entered_ = true;
  t_depth = 1;
}

RunGuard::~RunGuard() {
  if (entered_ && --t_depth == 0) g_in_flight.fetch_sub(1);
}

void close_runs() {
  t_closer = true;
  g_closed.store(true);
  const int own = t_depth > 0 ? 1 : 0;  // a handler run from inside a run does not wait for it
  // one deadline however often the gate is registered (exit_gate.h)
  static const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (g_in_flight.load() > own && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void close_runs_at_exit() {
  std::atexit(close_runs);
}

}  // namespace lazytrace::runtime
