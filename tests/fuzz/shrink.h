#pragma once
// The shrinker: reduces a failing program to a small one that fails the same oracle.
#include <cstdint>
#include <string>
#include <vector>

#include "oracles.h"
#include "program.h"

namespace fuzz {

struct ShrinkResult {
  Program program;  // its inputs carry fixed data
  Failure failure;  // how the shrunk program fails
  int attempts = 0;
};

/**
 * Drops outputs, replaces nodes by their values (fixed inputs), bypasses nodes (a use of a
 * node becomes a use of its operand), simplifies loop bodies and attributes, and shrinks
 * dims, keeping each step that still fails with `key`.
 */
ShrinkResult shrink(const Program& p, bool grad, uint64_t seed, const std::string& key);

/** What a child process checking one program did. */
struct ChildResult {
  bool ran = false;
  bool crashed = false;
  std::string signal;  // "signal 11 (Segmentation fault) in b:cse"
  int exit_code = 0;   // --check-file: 0 passed, 3 failed, 4 skipped
};
ChildResult run_in_child(const std::string& self, const Program& p, bool grad, uint64_t seed,
                         const std::vector<std::string>& extra_args);

/**
 * Whether program p crashes lt_fuzz: runs `self --check-file` in a child process (a crash
 * cannot be caught in this one). Used by shrink() for the key "crash".
 */
bool crashes(const std::string& self, const Program& p, bool grad, uint64_t seed,
             std::string* signal);

/** The path of the lt_fuzz binary, for crashes(). */
void set_self_path(const std::string& path);

}  // namespace fuzz
