#include "runtime/passes.h"

#include <atomic>
#include <cstdlib>
#include <sstream>

#include "lazytrace/core/error.h"

namespace lazytrace::runtime {
namespace {

const char* const kNames[] = {
#define LT_PASS(id, name, where, what) name,
#include "runtime/passes.def"
};

std::vector<std::string> split(std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string_view::npos) end = list.size();
    std::string_view item = list.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    start = end + 1;
  }
  return out;
}

std::atomic<uint64_t>& current_bits() {
  static std::atomic<uint64_t> bits = [] {
    const char* env = std::getenv("LAZYTRACE_DISABLE_PASSES");
    return env ? PassSet::without(split(env)).off_bits() : uint64_t{0};
  }();
  return bits;
}

}  // namespace

const char* pass_name(Pass p) {
  return kNames[static_cast<int>(p)];
}

PassSet PassSet::without(const std::vector<std::string>& names) {
  PassSet s;
  for (const std::string& n : names) {
    if (n == "all") {
      for (int k = 0; k < kPassCount; ++k) s.set(static_cast<Pass>(k), false);
      continue;
    }
    int found = -1;
    for (int k = 0; k < kPassCount; ++k)
      if (n == kNames[k]) found = k;
    if (found < 0) {
      std::ostringstream known;
      for (int k = 0; k < kPassCount; ++k) known << (k ? ", " : "") << kNames[k];
      fail("passes", "no pass is named '", n, "'; the passes are ", known.str(), " (or \"all\").");
    }
    s.set(static_cast<Pass>(found), false);
  }
  return s;
}

std::vector<std::string> PassSet::off_names() const {
  std::vector<std::string> out;
  for (int k = 0; k < kPassCount; ++k)
    if (!on(static_cast<Pass>(k))) out.emplace_back(kNames[k]);
  return out;
}

PassSet current_passes() {
  PassSet s;
  const uint64_t bits = current_bits().load(std::memory_order_relaxed);
  for (int k = 0; k < kPassCount; ++k)
    if (bits >> k & 1u) s.set(static_cast<Pass>(k), false);
  return s;
}

bool current_pass_on(Pass p) {
  return !(current_bits().load(std::memory_order_relaxed) >> static_cast<int>(p) & 1u);
}

void set_current_passes(PassSet passes) {
  current_bits().store(passes.off_bits(), std::memory_order_relaxed);
}

}  // namespace lazytrace::runtime
