# SPILLWAY_CUDA=AUTO builds the CUDA parts when a CUDA compiler is found,
# ON requires one, OFF never looks. The result is SPILLWAY_HAVE_CUDA.
#
# SPILLWAY_CUDA_STATIC_RUNTIME links the CUDA runtime into the binaries
# (libcudart_static.a) instead of against libcudart.so; they then need only
# the driver's libcuda.so.1. SPILLWAY_CUDART names the target to link.
string(TOUPPER "${SPILLWAY_CUDA}" _spillway_cuda)
set(SPILLWAY_HAVE_CUDA OFF)
option(SPILLWAY_CUDA_STATIC_RUNTIME "Link the CUDA runtime statically (libcudart_static)" OFF)
if(SPILLWAY_CUDA_STATIC_RUNTIME)
  set(SPILLWAY_CUDART CUDA::cudart_static)
else()
  set(SPILLWAY_CUDART CUDA::cudart)
endif()
if(_spillway_cuda STREQUAL "OFF")
  message(STATUS "Spillway: CUDA backend disabled (SPILLWAY_CUDA=OFF)")
elseif(_spillway_cuda STREQUAL "AUTO" OR _spillway_cuda STREQUAL "ON")
  # Ampere and Hopper by default (CUDA 13 no longer targets Volta); CI builds
  # one architecture, which also embeds its PTX.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      # cuDNN is not part of the toolkit's CMake package; it is installed
      # beside it (the toolkit's lib folder) or in the system's.
      find_library(SPILLWAY_CUDNN_LIBRARY cudnn
        HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib ${CUDAToolkit_LIBRARY_ROOT}/lib64)
      find_path(SPILLWAY_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
      if(SPILLWAY_CUDNN_LIBRARY AND SPILLWAY_CUDNN_INCLUDE_DIR AND TARGET CUDA::cublas)
        set(SPILLWAY_HAVE_CUDA ON)
        message(STATUS "Spillway: CUDA backend enabled (${CMAKE_CUDA_COMPILER}, CUDA ${CUDAToolkit_VERSION}, ${SPILLWAY_CUDNN_LIBRARY})")
      else()
        message(STATUS "Spillway: the CUDA toolkit has no cuDNN or cuBLAS here (cuDNN: ${SPILLWAY_CUDNN_LIBRARY})")
      endif()
    endif()
  endif()
  if(NOT SPILLWAY_HAVE_CUDA)
    if(_spillway_cuda STREQUAL "ON")
      message(FATAL_ERROR "SPILLWAY_CUDA=ON but no CUDA compiler, toolkit, cuDNN and cuBLAS were found. "
                          "Install the CUDA toolkit (nvcc on PATH) with cuDNN 9, or configure with -DSPILLWAY_CUDA=AUTO or OFF.")
    endif()
    message(STATUS "Spillway: no CUDA toolkit found; building the CPU parts only")
  endif()
else()
  message(FATAL_ERROR "SPILLWAY_CUDA must be AUTO, ON or OFF (got '${SPILLWAY_CUDA}')")
endif()
