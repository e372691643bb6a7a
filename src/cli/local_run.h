// One request through a family's own input preparation and executor, on this process: what `mmserve embed`,
// `transcribe` and `segment` do, with exactly the code the server runs for the same request (engine/families.h),
// so the CLI and the server cannot drift apart.
// Tests: tests/e2e/cli_test.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/executor.h"

namespace mmserve::cli {

// The bytes of a file the user named; errors name the path.
StatusOr<std::string> read_input_file(const std::string& path);

// Prepares `inputs` (with the family's `params`, may be null) and runs them as a batch of one.
StatusOr<std::shared_ptr<const engine::ModelOutput>> run_local(engine::Executor& executor,
                                                               const engine::InputPreparer& preparer,
                                                               std::vector<engine::InputItem> inputs,
                                                               const engine::RequestParams* params = nullptr);

}  // namespace mmserve::cli
