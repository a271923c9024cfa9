#pragma once
// Writes a shrunk failing program as a GoogleTest file for tests/regressions/: the program
// as lazytrace calls, its inputs as literals, and the reference's values (the correct ones)
// as what the test expects. The test is named DISABLED_... so the suite stays green while
// the defect is open; drop the prefix with the fix.
#include <cstdint>
#include <string>

#include "oracles.h"
#include "program.h"

namespace fuzz {

/** The file's path; the program's inputs must carry fixed data (a shrunk program's do). */
std::string write_regression(const std::string& dir, const Program& p, bool grad, uint64_t seed,
                             const Failure& failure);

/** The test's source text. */
std::string regression_source(const Program& p, bool grad, uint64_t seed, const Failure& failure);

}  // namespace fuzz
