#pragma once
/**
 * Data parallelism: the ranks of a job (MPI processes, or threads of one process for tests)
 * run the same step on their slices of the global batch and combine gradients with
 * collective ops (lt::all_reduce and the others in lazytrace/ops/ops.h), which are graph
 * nodes like any other: a step with its all-reduces is one cached graph.
 */
#include <cstdint>
#include <functional>
#include <utility>

namespace lazytrace::dist {

/**
 * Joins the job this process was launched in: under mpirun (Open MPI; the library built
 * with MPI) the process becomes its rank of MPI_COMM_WORLD, MPI initialized once and
 * finalized at exit; otherwise the single process. Returns the number of ranks. Calling
 * it again returns the same.
 */
int init();
/** Whether the library was built with MPI (CMake found it). */
bool built_with_mpi();
/** Whether this process was started by mpirun (its environment says so). */
bool launched_by_mpi();

/** This thread's rank in the current communicator (0 in a single process). */
int rank();
/** The number of ranks of the current communicator (1 in a single process). */
int world_size();
/** Returns when every rank has called it. */
void barrier();

/**
 * Seconds a rank waits for the others before lt::Error (default 300, or
 * LAZYTRACE_DIST_TIMEOUT): a rank that stopped, or ranks that issue different collectives,
 * end in an error instead of a hang. Threads as ranks wait so in every collective; MPI
 * ranks in barriers and in the check, before each run of a graph with collectives, that
 * every rank's graph issues the same ones (the collectives themselves block in MPI, at its
 * speed). After an MPI timeout every collective fails: end the job.
 */
void set_timeout(double seconds);
double timeout();

/**
 * Runs fn(rank) on n threads of this process, each thread rank `rank` of one group of n
 * (collectives through shared memory): data parallelism without mpirun, for tests. Returns
 * when every rank returned; an exception of one rank fails the others' collectives and is
 * rethrown here (the first to happen). Every rank records under the caller's autocast state
 * (rank 0 is the caller's thread).
 */
void run_threads(int n, const std::function<void(int rank)>& fn);

/**
 * Examples [begin, end) of this rank in a global batch of n: n splits evenly over ranks.
 * Also sets this thread's lt::BatchRows, so that nn::Dropout masks an example as one
 * process with the whole batch would.
 */
std::pair<int64_t, int64_t> shard(int64_t n);

}  // namespace lazytrace::dist
