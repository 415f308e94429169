# One CMake library per pipeline stage, one test binary per stage.

function(spillway_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
      -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wnull-dereference
      -Wimplicit-fallthrough
      # GCC 12 reports false -Wrestrict positives inside std::string at -O3 (GCC bug 105329).
      $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>>)
  if(SPILLWAY_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

# spillway_installed(TARGET NAME): TARGET is installed and exported as
# spillway::NAME (cmake/SpillwayInstall.cmake), its headers found under
# include/spillway as they are under src/ here.
function(spillway_installed target name)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src> $<INSTALL_INTERFACE:include/spillway>)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  set_property(GLOBAL APPEND PROPERTY SPILLWAY_INSTALLED_LIBRARIES ${target})
endfunction()

# spillway_library(NAME SOURCES ... DEPS ... [INTERNAL]): a stage's library,
# spillway::NAME here and in an installed tree; INTERNAL ones (test harnesses)
# are not installed.
function(spillway_library name)
  cmake_parse_arguments(ARG "INTERNAL" "" "SOURCES;DEPS" ${ARGN})
  add_library(spillway_${name} STATIC ${ARG_SOURCES})
  add_library(spillway::${name} ALIAS spillway_${name})
  if(ARG_INTERNAL)
    target_include_directories(spillway_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  else()
    spillway_installed(spillway_${name} ${name})
  endif()
  target_link_libraries(spillway_${name} PUBLIC ${ARG_DEPS})
  spillway_set_warnings(spillway_${name})
endfunction()

# spillway_test(NAME SOURCES ... DEPS ...): a GoogleTest binary whose tests ctest discovers.
function(spillway_test name)
  if(NOT SPILLWAY_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  # A test that runs on the CPU backend is left out of a build without it
  # (SPILLWAY_CPU_BACKEND=OFF), where spillway::cpu is no target. Named
  # explicitly rather than testing `if(TARGET dep)`: a test may link a stage
  # defined after it (cuda_test links spillway::runtime).
  if(NOT SPILLWAY_CPU_BACKEND AND "spillway::cpu" IN_LIST ARG_DEPS)
    return()
  endif()
  add_executable(${name}_test ${ARG_SOURCES})
  target_link_libraries(${name}_test PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  if(NOT SPILLWAY_OPTIMIZE_TESTS)
    target_compile_options(${name}_test PRIVATE -O0)
  endif()
  spillway_set_warnings(${name}_test)
  gtest_discover_tests(${name}_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS ${name})
endfunction()
