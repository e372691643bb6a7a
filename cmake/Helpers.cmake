# mmserve_test(NAME SOURCES... LIBS...): a GoogleTest binary registered with CTest (tests run from the
# source tree's fixtures; discovery at test time so building never runs test code).
function(mmserve_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  # Paths to the source tree come from mmserve_test_paths (tests/support/test_paths.h), never from a -D here:
  # an absolute path on every test's command line would defeat ccache in a clone elsewhere (CI's).
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} mmserve_test_paths GTest::gtest GTest::gtest_main)
  # A GTEST_SKIP (e.g. a GPU test on a machine without a GPU) shows as "Skipped" in ctest, with its reason
  # in the output, never as a pass.
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST PROPERTIES TIMEOUT 600 SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()

# mmserve_bench(NAME SOURCES... LIBS...): a Google Benchmark binary (not run by `make test`).
function(mmserve_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} benchmark::benchmark benchmark::benchmark_main)
endfunction()
