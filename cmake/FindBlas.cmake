# OpenBLAS from Debian's libopenblas-dev: every product's fallback (docs/gemm.md).
find_path(LAZYTRACE_CBLAS_INCLUDE cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas
        /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-pthread
  NO_DEFAULT_PATH)
find_path(LAZYTRACE_CBLAS_INCLUDE cblas.h)
find_library(LAZYTRACE_OPENBLAS_LIB NAMES openblas
  PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-pthread)
if(NOT LAZYTRACE_CBLAS_INCLUDE OR NOT LAZYTRACE_OPENBLAS_LIB)
  message(FATAL_ERROR "OpenBLAS not found: run scripts/install-deps.sh (apt-get install libopenblas-dev)")
endif()
message(STATUS "OpenBLAS: ${LAZYTRACE_OPENBLAS_LIB} (cblas.h in ${LAZYTRACE_CBLAS_INCLUDE})")

# Optional product kernels beside OpenBLAS (backends/cpu/gemm.h picks per shape by timing):
# oneDNN's sgemm from Debian's libdnnl-dev and libxsmm's JIT kernels from libxsmm-dev.
# Either is used where found unless switched off; the library builds without both.
option(LAZYTRACE_WITH_ONEDNN "Use oneDNN's sgemm where it is found (libdnnl-dev)" ON)
option(LAZYTRACE_WITH_XSMM "Use libxsmm's kernels where they are found (libxsmm-dev)" ON)
set(LAZYTRACE_GEMM_LIBS "")
set(LAZYTRACE_HAVE_ONEDNN 0)
set(LAZYTRACE_HAVE_XSMM 0)
if(LAZYTRACE_WITH_ONEDNN)
  find_path(LAZYTRACE_ONEDNN_INCLUDE oneapi/dnnl/dnnl.h)
  find_library(LAZYTRACE_ONEDNN_LIB NAMES dnnl)
  # oneDNN runs on OpenMP: lazytrace sets its thread count (omp_set_num_threads)
  find_package(OpenMP COMPONENTS CXX QUIET)
  if(LAZYTRACE_ONEDNN_INCLUDE AND LAZYTRACE_ONEDNN_LIB AND OpenMP_CXX_FOUND)
    set(LAZYTRACE_HAVE_ONEDNN 1)
    list(APPEND LAZYTRACE_GEMM_LIBS ${LAZYTRACE_ONEDNN_LIB} ${OpenMP_CXX_LIBRARIES})
  endif()
endif()
if(LAZYTRACE_WITH_XSMM)
  find_path(LAZYTRACE_XSMM_INCLUDE libxsmm.h)
  find_library(LAZYTRACE_XSMM_LIB NAMES xsmm)
  if(LAZYTRACE_XSMM_INCLUDE AND LAZYTRACE_XSMM_LIB)
    set(LAZYTRACE_HAVE_XSMM 1)
    list(APPEND LAZYTRACE_GEMM_LIBS ${LAZYTRACE_XSMM_LIB} ${CMAKE_DL_LIBS} rt m)
  endif()
endif()
message(STATUS "Product kernels: OpenBLAS; oneDNN ${LAZYTRACE_HAVE_ONEDNN} (${LAZYTRACE_ONEDNN_LIB}); "
               "libxsmm ${LAZYTRACE_HAVE_XSMM} (${LAZYTRACE_XSMM_LIB})")
