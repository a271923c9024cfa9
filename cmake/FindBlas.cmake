# OpenBLAS from Debian's libopenblas-dev (see docs/blas.md for why OpenBLAS).
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
