# The HTTP server's end-to-end tests (included from tests/e2e/CMakeLists.txt): both start the real
# `mmserve serve` on a free port with a copy of tests/fixtures/clip-tiny-quickgelu-f32.
#   server_e2e_test      GoogleTest + curl + httplib + raw sockets (tests/e2e/server_test.cpp)
#   kserve_client_test   a Python standard-library KServe v2 client (tests/e2e/kserve_client_test.py)
mmserve_test(server_e2e_test SOURCES server_test.cpp LIBS mmserve_core nlohmann_json::nlohmann_json PkgConfig::HTTPLIB)
target_compile_definitions(server_e2e_test PRIVATE MMSERVE_BINARY="$<TARGET_FILE:mmserve>")
add_dependencies(server_e2e_test mmserve)

find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME kserve_client_test
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/kserve_client_test.py
                   --binary $<TARGET_FILE:mmserve> --fixtures ${MMSERVE_FIXTURES_DIR})
  set_tests_properties(kserve_client_test PROPERTIES TIMEOUT 300)
else()
  message(STATUS "python3 not found: kserve_client_test is not registered")
endif()
