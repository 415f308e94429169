# `cmake --install`: the stage libraries, their headers, the command line, the
# Python package (src/python, when it is built), and a CMake package, so that
# another project can
#   find_package(spillway REQUIRED)
#   target_link_libraries(app PRIVATE spillway::spillway)   # or one stage: spillway::planner
# docs/library.md; tested by the `install` label (cmake/install_test).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(SPILLWAY_INSTALLED_LIBRARIES GLOBAL PROPERTY SPILLWAY_INSTALLED_LIBRARIES)
get_property(SPILLWAY_WITH_CBC GLOBAL PROPERTY SPILLWAY_WITH_CBC)
if(NOT SPILLWAY_WITH_CBC)
  set(SPILLWAY_WITH_CBC OFF)
endif()
if(NOT SPILLWAY_HAVE_CUDA)
  set(SPILLWAY_HAVE_CUDA OFF)
endif()

# spillway::spillway: every stage.
add_library(spillway_all INTERFACE)
target_link_libraries(spillway_all INTERFACE ${SPILLWAY_INSTALLED_LIBRARIES})
set_target_properties(spillway_all PROPERTIES EXPORT_NAME spillway)

set(SPILLWAY_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/spillway)
install(TARGETS ${SPILLWAY_INSTALLED_LIBRARIES} spillway_all
  EXPORT spillwayTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET spillway)
  install(TARGETS spillway RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/
  DESTINATION include/spillway
  FILES_MATCHING PATTERN "*.h"
  PATTERN "fuzz" EXCLUDE
  PATTERN "cli" EXCLUDE
  PATTERN "python" EXCLUDE)
install(EXPORT spillwayTargets NAMESPACE spillway:: DESTINATION ${SPILLWAY_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/spillwayConfig.cmake.in
  ${PROJECT_BINARY_DIR}/spillwayConfig.cmake INSTALL_DESTINATION ${SPILLWAY_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/spillwayConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/spillwayConfig.cmake
  ${PROJECT_BINARY_DIR}/spillwayConfigVersion.cmake DESTINATION ${SPILLWAY_CMAKE_DIR})

# Installs this build into a temporary prefix, builds a small program against
# it with find_package, and runs it.
if(SPILLWAY_BUILD_TESTS)
  set(python_check "")
  if(SPILLWAY_PYTHON_ENABLED)
    set(python_check -DPYTHON=${Python_EXECUTABLE} -DPYTHON_DIR=${SPILLWAY_PYTHON_INSTALL_DIR})
  endif()
  add_test(NAME install_consumer
    COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR}
      -DSOURCE_DIR=${PROJECT_SOURCE_DIR}/cmake/install_test
      -DWORK_DIR=${PROJECT_BINARY_DIR}/install_test
      -DCONFIG=$<CONFIG>
      ${python_check}
      -P ${PROJECT_SOURCE_DIR}/cmake/install_test/run.cmake)
  set_tests_properties(install_consumer PROPERTIES LABELS install TIMEOUT 600)
endif()
