# Real-client end-to-end tests (included from tests/e2e/CMakeLists.txt). Each client mode starts the real
# `mmserve serve` on a free loopback port with a copy of tests/fixtures/clip-tiny-quickgelu-f32 (openai-audio
# adds the tiny Whisper fixture), runs one client against it and stops it: the openai npm SDK (embeddings;
# audio, completions), a real Prometheus, Locust, and `mmserve bench` (and its --generate profile on stories260K;
# bench-wire: its HTTP client against a scripted server) (tests/e2e/client_test.sh). e2e_deploy_check validates deploy/ (promtool, Kubernetes manifests).
# Run: ctest --test-dir BUILD -L e2e --output-on-failure. The openai test needs
# `npm ci --prefix tests/e2e/openai` (it runs it itself when node_modules is missing).
foreach(client openai openai-audio openai-completions prometheus locust bench bench-wire bench-generate)
  add_test(NAME e2e_client_${client}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/client_test.sh ${client} $<TARGET_FILE:mmserve> ${CMAKE_SOURCE_DIR})
  set_tests_properties(e2e_client_${client} PROPERTIES TIMEOUT 180 LABELS "e2e")
endforeach()
# openai-audio transcribes jfk.wav six times with the default options (the random model's text falls back to
# sampling at every temperature): ~150 s on CI's 2 cores when another test shares them, so a wider bound.
set_tests_properties(e2e_client_openai-audio PROPERTIES TIMEOUT 420)
add_test(NAME e2e_deploy_check COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/deploy_check.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(e2e_deploy_check PROPERTIES TIMEOUT 60 LABELS "e2e")
