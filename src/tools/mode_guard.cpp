// The train()/eval() flags traced functions read (lazytrace/tools/mode_guard.h).
#include "lazytrace/tools/mode_guard.h"

namespace lazytrace::tools {
namespace detail {
thread_local int g_mode_recordings = 0;
}  // namespace detail

namespace {
thread_local std::vector<ModeGuard*> t_recordings;  // innermost last
}  // namespace

uint64_t ModeGuard::flipped() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t h = 0;
  for (size_t i = 0; i < flags_.size(); ++i)
    if (*flags_[i].first != flags_[i].second) h = (h ^ (i + 1)) * 0x100000001b3ull;
  return h;
}

void ModeGuard::add(const ModeFlag& flag) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [f, first] : flags_)
    if (f == flag) return;
  flags_.emplace_back(flag, *flag);
  any_.store(true, std::memory_order_release);
}

void ModeGuard::add_all(const ModeGuard& other) {
  if (&other == this) return;
  std::vector<ModeFlag> flags;
  {
    std::lock_guard<std::mutex> lock(other.mu_);
    for (const auto& [f, first] : other.flags_) flags.push_back(f);
  }
  for (const ModeFlag& f : flags) add(f);
}

ModeRecording::ModeRecording(ModeGuard& guard) {
  t_recordings.push_back(&guard);
  ++detail::g_mode_recordings;
}

ModeRecording::~ModeRecording() {
  t_recordings.pop_back();
  --detail::g_mode_recordings;
}

uint64_t key_with_modes(uint64_t key, const ModeGuard& guard) {
  if (guard.empty()) return key;
  for (ModeGuard* outer : t_recordings) outer->add_all(guard);
  const uint64_t f = guard.flipped();
  return f == 0 ? key : ((key ^ f) * 0x9E3779B97F4A7C15ull) | 1;
}

void detail::note_mode_read(const ModeFlag& flag) {
  for (ModeGuard* g : t_recordings) g->add(flag);
}

}  // namespace lazytrace::tools
