#include "core/check.h"

#include <lazytrace/core/error.h>

namespace lazytrace::detail {

void check_failed(const char* invariant, const char* cond, const char* file, int line) {
  fail("internal", "invariant broken: ", invariant, " (", cond, " is false at ", file, ":", line,
       "). This is a bug in lazytrace; please report it with the program that hit it.");
}

}  // namespace lazytrace::detail
