#pragma once
// Shared by the binding files: conversions between Python values and the C++ library's
// types, and the entry points each file defines.
#include <nanobind/nanobind.h>

#include <lazytrace/lazytrace.h>

#include <string>
#include <vector>

namespace lazytrace::python {

namespace nb = nanobind;

/** The Python type of lazytrace.Tensor (set when the module is made). */
extern PyTypeObject* g_tensor_type;
/** Whether h is a Tensor (or a Parameter): a type check, not nanobind's type lookup. */
inline bool is_tensor(nb::handle h) {
  return PyObject_TypeCheck(h.ptr(), g_tensor_type);
}
/** h's Tensor; h must be one (is_tensor). */
inline Tensor& tensor_of(nb::handle h) {
  if (!nb::inst_ready(h)) throw nb::type_error("lazytrace: a Tensor that was never initialized");
  return *nb::inst_ptr<Tensor>(h);
}

/**
 * The GIL released around a call into the library (nb::gil_scoped_release's job), taken back
 * after it unless the interpreter is finalizing. A daemon thread whose call outlives the
 * interpreter's exit handlers would be ended by Python as it takes the GIL back (a
 * pthread_exit through this noexcept destructor and nanobind's catch-all: std::terminate);
 * it waits for the process to end instead (module.cpp says how no thread is left waiting).
 */
class ReleaseGil {
 public:
  ReleaseGil();
  ~ReleaseGil();
  ReleaseGil(const ReleaseGil&) = delete;
  ReleaseGil& operator=(const ReleaseGil&) = delete;

 private:
  PyThreadState* state_ = nullptr;
};

/** Called as the interpreter starts to exit (lazytrace's atexit): see ReleaseGil. */
void interpreter_exits();

/** The GIL taken where the library calls back into Python (nb::gil_scoped_acquire's job),
 * with ReleaseGil's care while the interpreter exits. */
class AcquireGil {
 public:
  AcquireGil();
  ~AcquireGil();
  AcquireGil(const AcquireGil&) = delete;
  AcquireGil& operator=(const AcquireGil&) = delete;

 private:
  PyGILState_STATE state_;
};

/** A Python number as an lt::Scalar (bool, int or float; numpy scalars too), or false. */
bool scalar_of(nb::handle h, Scalar& out);
/** A tensor from a Tensor, a Python number (0-d, the number's default dtype) or array data. */
Tensor as_tensor(nb::handle h, const char* op);
/** Shape from a tuple/list of ints, or from *args ints; `op` names the caller in errors. */
Shape shape_of(nb::handle h, const char* op);
/** "a Tensor" / "an int" / "a MyClass": for messages. */
std::string kind_of(nb::handle h);

/** The Python object that owns a DLPack export or import; held by C++ without the GIL. */
struct PyRef {
  PyObject* ptr = nullptr;
  explicit PyRef(nb::handle h);
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  ~PyRef();
  /** The object; an error after release_all(). */
  nb::handle get() const;
  /**
   * At interpreter exit (with the GIL): drops every PyRef's reference. A tensor a module
   * global keeps can hold a traced body's function (a scan's, for its backward) whose
   * globals hold that tensor: a cycle through C++ that Python's GC cannot see.
   */
  static void release_all();
};

void bind_tensor(nb::module_& m);
void bind_functional(nb::module_& m);
void bind_pytree(nb::module_& m);
void bind_tools(nb::module_& m);
void bind_library(nb::module_& m);
void bind_dist(nb::module_& m);

}  // namespace lazytrace::python
