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
# The speech routes (OpenAI audio, KServe audio) against the tiny Whisper fixture, compared with the executor.
mmserve_test(audio_server_e2e_test SOURCES audio_server_test.cpp blas_test_main.cpp
             LIBS mmserve_engine mmserve_frontends nlohmann_json::nlohmann_json PkgConfig::HTTPLIB)
target_compile_definitions(audio_server_e2e_test PRIVATE MMSERVE_BINARY="$<TARGET_FILE:mmserve>")
add_dependencies(audio_server_e2e_test mmserve)
# The speech routes with Python's `requests` (Debian's python3-requests, hence /usr/bin/python3).
if(EXISTS /usr/bin/python3)
  add_test(NAME audio_client_test
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/audio_client_test.py
                   --binary $<TARGET_FILE:mmserve> --fixtures ${MMSERVE_FIXTURES_DIR})
  set_tests_properties(audio_client_test PROPERTIES TIMEOUT 600)
endif()
# SAM with real clients: `mmserve segment`, curl and Python's requests on /v1/segment, KServe point tensors, all
# against HF's goldens of tests/fixtures/sam (tests/e2e/sam_client_test.py).
if(EXISTS /usr/bin/python3)
  add_test(NAME sam_client_test
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/sam_client_test.py
                   --binary $<TARGET_FILE:mmserve> --fixtures ${MMSERVE_FIXTURES_DIR})
  set_tests_properties(sam_client_test PROPERTIES TIMEOUT 300)
endif()
# The generation routes (OpenAI completions with logprobs and n, KServe generate) against the real stories260K.
mmserve_test(generate_server_e2e_test SOURCES generate_server_test.cpp
             LIBS mmserve_core nlohmann_json::nlohmann_json PkgConfig::HTTPLIB)
target_compile_definitions(generate_server_e2e_test PRIVATE MMSERVE_BINARY="$<TARGET_FILE:mmserve>")
add_dependencies(generate_server_e2e_test mmserve)
# The same routes with Python's `requests` (tests/e2e/generate_client_test.py).
if(EXISTS /usr/bin/python3)
  add_test(NAME generate_client_test
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/generate_client_test.py
                   --binary $<TARGET_FILE:mmserve> --source-dir ${CMAKE_SOURCE_DIR})
  set_tests_properties(generate_client_test PROPERTIES TIMEOUT 180)
endif()
# LoRA adapters served (issue 16): --lora-modules, vLLM's load/unload endpoints with requests in flight, the registry.
mmserve_test(lora_server_e2e_test SOURCES lora_server_test.cpp
             LIBS mmserve_core nlohmann_json::nlohmann_json PkgConfig::HTTPLIB)
target_compile_definitions(lora_server_e2e_test PRIVATE MMSERVE_BINARY="$<TARGET_FILE:mmserve>")
add_dependencies(lora_server_e2e_test mmserve)
