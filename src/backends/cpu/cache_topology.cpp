// threads_share_cache: a cache line's round trip to another pool thread, timed.
#include "backends/cpu/cache_topology.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>

#include "runtime/thread_pool.h"

namespace lazytrace::cpu {
namespace {

// One round trip of a cache line between the two threads that run a two-chunk region, in
// ns: the median of kTrips (a VM's vCPU may stop for a while in any one); 0 if they turned
// out to be one thread (the first to arrive waits 0.2 ms for the second).
double measure_round_trip() {
  constexpr int kTrips = 32;
  constexpr auto kWait = std::chrono::microseconds(200);
  struct alignas(64) Line {
    std::atomic<int> v{0};
  };
  Line flag, arrived;
  double ns = 0;
  runtime::parallel_for(2, 1, [&](int64_t, int64_t) {
    const int me = arrived.v.fetch_add(1);
    if (me == 0) {  // the first: waits for the second, then sends the line kTrips times
      const auto until = std::chrono::steady_clock::now() + kWait;
      int expected = 1;
      while (arrived.v.load() == 1)
        if (std::chrono::steady_clock::now() > until &&
            arrived.v.compare_exchange_strong(expected, 100))
          return;  // no second thread: any later arrival sees 100 and leaves
      std::array<double, kTrips> trips;
      for (int i = 0; i < kTrips; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        flag.v.store(2 * i + 1, std::memory_order_release);
        while (flag.v.load(std::memory_order_acquire) != 2 * i + 2) {
        }
        trips[static_cast<size_t>(i)] =
            std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
      }
      std::nth_element(trips.begin(), trips.begin() + kTrips / 2, trips.end());
      ns = trips[kTrips / 2];
    } else if (me == 1) {  // the second: sends each line back
      for (int i = 0; i < kTrips; ++i) {
        while (flag.v.load(std::memory_order_acquire) != 2 * i + 1) {
        }
        flag.v.store(2 * i + 2, std::memory_order_release);
      }
    }
  });
  return ns;
}

}  // namespace

bool threads_share_cache() {
  static const int forced = [] {  // LAZYTRACE_SHARED_CACHE=0 or 1: no measuring
    const char* e = std::getenv("LAZYTRACE_SHARED_CACHE");
    return e && (e[0] == '0' || e[0] == '1') && e[1] == 0 ? e[0] - '0' : -1;
  }();
  if (forced >= 0) return forced == 1;
  static std::atomic<bool> shared{true};
  static std::atomic<int64_t> last{-1000000};  // ms: never
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  if (runtime::num_threads() < 2 || runtime::in_parallel_region() ||
      runtime::Background::holds_threads())
    return shared.load();
  int64_t seen = last.load();
  if (now - seen < 100 || !last.compare_exchange_strong(seen, now)) return shared.load();
  const double ns = measure_round_trip();
  if (ns > 0) shared.store(ns < 250);
  return shared.load();
}

}  // namespace lazytrace::cpu
