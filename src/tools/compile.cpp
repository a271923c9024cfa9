// compile(): the named syncs around a compiled call, and what a read inside it means.
#include "lazytrace/tools/compile.h"

#include "trace/trace_context.h"

namespace lazytrace::tools {

void sync_named(const std::vector<Tensor>* tensors, const std::string& name) {
  trace::sync_named(tensors, name);
}

bool run_traced(const std::function<void()>& traced, const CompileOptions& options) {
  try {
    traced();
    return true;
  } catch (const trace::TraceReadError& e) {
    std::string why = e.what();
    why = why.substr(why.find("] ") + 2);  // drop the "[compile] " it starts with
    if (options.full_graph)
      fail("compile", "unexpected execution inside the compiled function '", options.name,
           "' (full_graph = true): ", why,
           " Without full_graph, such a function runs as plain lazy code instead.");
    return false;
  }
}

}  // namespace lazytrace::tools
