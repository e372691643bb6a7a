// run_local and read_input_file (see local_run.h).
#include "cli/local_run.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

namespace mmserve::cli {

StatusOr<std::string> read_input_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return invalid_argument(path + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream bytes;
  bytes << file.rdbuf();
  if (file.bad()) return invalid_argument(path + ": read failed");
  return bytes.str();
}

StatusOr<std::shared_ptr<const engine::ModelOutput>> run_local(engine::Executor& executor,
                                                               const engine::InputPreparer& preparer,
                                                               std::vector<engine::InputItem> inputs,
                                                               const engine::RequestParams* params) {
  ASSIGN_OR_RETURN(engine::Prepared prepared, preparer.prepare(inputs, params));
  std::optional<StatusOr<std::shared_ptr<const engine::ModelOutput>>> result;
  engine::BatchHooks hooks;
  hooks.finish = [&](size_t, StatusOr<std::shared_ptr<const engine::ModelOutput>> output, double) {
    result = std::move(output);
  };
  std::vector<engine::BatchItem> batch(1);
  batch[0].input = prepared.input.get();
  batch[0].mutable_input = prepared.input.get();
  executor.run(batch, hooks);
  if (!result) return internal_error("the executor did not finish the request");
  return std::move(*result);
}

}  // namespace mmserve::cli
