# The Python module (src/python): built for Debian's own interpreter
# (/usr/bin/python3) with pybind11 from Debian's packages. SPILLWAY_PYTHON:
# AUTO builds it when pybind11 and Python's headers are found (and says why
# not otherwise), ON requires them, OFF skips it (the sanitizer presets: an
# extension built with a sanitizer does not load into a plain interpreter).
# A module links the static stage libraries into a shared object, so when it
# is built every library is compiled position independent.
set(SPILLWAY_PYTHON "AUTO" CACHE STRING "Build the Python module: AUTO, ON or OFF")
set_property(CACHE SPILLWAY_PYTHON PROPERTY STRINGS AUTO ON OFF)
set(SPILLWAY_PYTHON_ENABLED OFF)
if(SPILLWAY_PYTHON STREQUAL "OFF")
  message(STATUS "Python module: off (SPILLWAY_PYTHON=OFF)")
else()
  if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python 3 COMPONENTS Interpreter Development.Module QUIET)
  if(Python_FOUND)
    set(PYBIND11_FINDPYTHON ON)
    find_package(pybind11 CONFIG QUIET)
  endif()
  if(Python_FOUND AND pybind11_FOUND)
    set(SPILLWAY_PYTHON_ENABLED ON)
    set(CMAKE_POSITION_INDEPENDENT_CODE ON)
    # Where `cmake --install` puts the package, under the prefix: the folder
    # Debian's interpreter searches for a /usr/local prefix.
    set(SPILLWAY_PYTHON_INSTALL_DIR
      "lib/python${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}/dist-packages"
      CACHE STRING "Where the Python package is installed, relative to the prefix")
    message(STATUS "Python module: built for ${Python_EXECUTABLE} ${Python_VERSION}")
  elseif(SPILLWAY_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "SPILLWAY_PYTHON=ON needs python3-dev and pybind11-dev")
  else()
    message(STATUS "Python module: skipped (install python3-dev and pybind11-dev to build it)")
  endif()
endif()
