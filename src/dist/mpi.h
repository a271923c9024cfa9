#pragma once
// The MPI communicator (MPI_COMM_WORLD), where the library was built with MPI.
#include <memory>

#include "runtime/communicator.h"

namespace lazytrace::dist {

/** Whether the library was built with MPI. */
bool mpi_built();
/** MPI_COMM_WORLD: MPI initialized now (once), finalized at exit. Needs mpi_built(). */
std::shared_ptr<runtime::Communicator> make_mpi_world();

}  // namespace lazytrace::dist
