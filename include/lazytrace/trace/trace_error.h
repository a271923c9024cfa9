#pragma once
/** The error a traced function gets when it asks for a value (item(), to_vector(), sync()). */
#include "lazytrace/core/error.h"

namespace lazytrace {

/**
 * A traced function (assume_pure, compile, a loop body) asked for a tensor's value: it is
 * recorded once and replayed, so its tensors have none while it is traced. compile without
 * full_graph catches it and runs the function as plain code instead.
 */
class TraceReadError : public Error {
 public:
  using Error::Error;
};

}  // namespace lazytrace
