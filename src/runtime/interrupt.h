#pragma once
// Stopping a running loop (lt::interrupt, lt::set_interrupt_check): the flag a signal handler
// may set, and the poll the backend's loops make between iterations.
#include <cstdint>

namespace lazytrace::runtime {

/** Asks the running loop to stop (async-signal-safe). */
void request_interrupt();
/** The check poll_interrupt() calls about every 250 ms (null: none). */
void set_interrupt_check(bool (*check)());
/** Forgets an earlier request: a sync that starts is not stopped by one made before it. */
void clear_interrupt();
/** Throws lt::Interrupted naming `op` and the iterations done where a stop was asked for
 * since the sync started (request_interrupt(), or the check, called at most every 250 ms per
 * thread, which then asks for it: every loop running stops). */
void poll_interrupt(const char* op, int64_t iterations);

}  // namespace lazytrace::runtime
