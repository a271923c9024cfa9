#pragma once
/** The library's exceptions: lt::Error, and the Interrupted one a stopped sync ends with. Messages
 * start with the operation in brackets. */
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace lazytrace {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/** A sync stopped by lt::interrupt() or the interrupt check (Ctrl-C in Python): its results
 * were not computed. */
class Interrupted : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

/** Throws lt::Error("[op] " + pieces...) */
template <typename... Args>
[[noreturn]] void fail(const char* op, Args&&... args) {
  throw Error(detail::cat("[", op, "] ", std::forward<Args>(args)...));
}
template <typename... Args>
[[noreturn]] void fail(const std::string& op, Args&&... args) {
  fail(op.c_str(), std::forward<Args>(args)...);
}

}  // namespace lazytrace
