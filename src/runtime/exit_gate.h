#pragma once
// Runs at process exit. After the exit handlers start, libraries finalize what kernels use
// (libxsmm's code registry, MPI); a thread still running then (a detached std::thread, a
// Python daemon thread) would crash the process on its way out. Each run of compiled work
// holds a RunGuard; close_runs() waits for the runs in flight, and a run that starts later
// is not entered: its thread gives back what it holds and waits for good (wait_forever), so
// the process ends with no kernel running.

namespace lazytrace::runtime {

/** Held by a run of compiled work (compile and execute). Nested guards count once. */
class RunGuard {
 public:
  RunGuard();
  ~RunGuard();
  RunGuard(const RunGuard&) = delete;
  RunGuard& operator=(const RunGuard&) = delete;
  /** False once the process exits (close_runs() ran on another thread): do not run. */
  bool entered() const { return entered_; }

 private:
  bool entered_ = false;
};

/** For a thread whose run was not entered, after it gave back what others may wait for. */
[[noreturn]] void wait_forever();

/**
 * Closes the gate: waits (up to 30 s) for the runs in flight on other threads; their runs
 * that start later are not entered, the calling thread's are. For the process's exit only.
 */
void close_runs();

/**
 * Registers close_runs() with std::atexit. Handlers run in reverse order, so this is called
 * again right after a library registers its own finalizer (it runs before it), and after a
 * library's first use of a kind (a product measured, a primitive made), where it may have
 * registered handlers that free what its kernels run (oneDNN's statics). The 30 s deadline
 * is the process's, not each call's.
 */
void close_runs_at_exit();

}  // namespace lazytrace::runtime
