# ctest install_consumer: install BUILD_DIR into WORK_DIR/prefix, configure and
# build the consumer in SOURCE_DIR against it, run it, and check its output;
# with PYTHON (the interpreter) and PYTHON_DIR (the package's folder under the
# prefix), also import the installed Python package and plan with it.
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "failed (${code}): ${ARGN}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix --config ${CONFIG})
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
if(NOT out MATCHES "none: step [0-9.]+ s, arena [0-9]+ bytes\nhybrid: step [0-9.]+ s")
  message(FATAL_ERROR "unexpected output from the consumer:\n${out}")
endif()
message(STATUS "the consumer built against the installed tree and ran:\n${out}")
if(PYTHON)
  # Lines, not semicolons: run() passes its arguments on as a CMake list.
  run(${CMAKE_COMMAND} -E env PYTHONPATH=${WORK_DIR}/prefix/${PYTHON_DIR} ${PYTHON} -c
    "import spillway\nr = spillway.plan(spillway.Workload(model='resnet18', image=64, batch=2), progress=False)\nprint(spillway.__file__)\nprint(r.policy, r.feasible)")
  if(NOT out MATCHES "^${WORK_DIR}/prefix/${PYTHON_DIR}/spillway/__init__.py\nhybrid True")
    message(FATAL_ERROR "unexpected output from the installed Python package:\n${out}")
  endif()
  message(STATUS "the installed Python package imported and planned:\n${out}")
endif()
