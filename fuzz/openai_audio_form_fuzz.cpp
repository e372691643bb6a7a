// libFuzzer target for multipart audio uploads (POST /v1/audio/transcriptions and /translations): the
// multipart/form-data body split into parts by cpp-httplib, exactly as the server receives it, then the parts
// checked by parse_openai_audio_form (api/openai_audio_codec.h).
//
// The first input byte picks the task (bit 0: transcribe / translate) and the path (bit 1). Path 0 is the real
// one: the rest of the input is `<boundary>\n<body>`, sent as one HTTP request through httplib::Server's
// request processing (process_request, reached from a subclass, over an in-memory stream: no socket), whose
// handler turns request.files into FormFields as api/openai_audio_handlers.cpp does. Path 1 hands the codec
// fields directly: NUL-separated (name, filename, content type, content) quadruples, so that it is fuzzed
// even where httplib's parser (a Debian library, not instrumented) refuses the body. Never a crash, a leak or
// an escaping exception; an accepted form has a model and non-empty audio.
// Seeds (fuzz/corpus/openai_audio_form_fuzz): valid forms (file + model, every optional field, a repeated
// timestamp_granularities[]), and broken ones (no closing boundary, a part without a name, an unknown or repeated
// field, an empty file, bad temperature / stream / response_format, invalid UTF-8), for both tasks and paths.
// Run: build/fuzz/fuzz/openai_audio_form_fuzz -max_total_time=60 fuzz/corpus/openai_audio_form_fuzz.
#include <httplib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "api/openai_audio_codec.h"

namespace {

using mmserve::api::FormField;
using mmserve::engine::WhisperTask;

void check_accepted(std::vector<FormField>& fields, WhisperTask task) {
  auto parsed = mmserve::api::parse_openai_audio_form(fields, task);
  if (parsed.ok() && (parsed->model.empty() || parsed->audio.empty())) std::abort();
}

// An httplib::Stream over the request bytes; what the server writes back is dropped.
class MemoryStream : public httplib::Stream {
 public:
  explicit MemoryStream(std::string_view input) : input_(input) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, input_.size() - position_);
    std::memcpy(ptr, input_.data() + position_, n);
    position_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char*, size_t size) override { return static_cast<ssize_t>(size); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 40000;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 8000;
  }
  socket_t socket() const override { return INVALID_SOCKET; }

 private:
  std::string_view input_;
  size_t position_ = 0;
};

// The server's multipart handling without a socket: process_request is protected, so a subclass reaches it.
class FormServer : public httplib::Server {
 public:
  FormServer() {
    for (const auto& [path, task] : {std::pair{"/v1/audio/transcriptions", WhisperTask::kTranscribe},
                                     std::pair{"/v1/audio/translations", WhisperTask::kTranslate}}) {
      Post(path, [task = task](const httplib::Request& request, httplib::Response& response) {
        std::vector<FormField> fields;  // as handle_openai_audio builds them
        for (const auto& [name, part] : request.files) {
          fields.push_back({part.name, part.filename, part.content_type, part.content});
        }
        check_accepted(fields, task);
        response.status = 200;
      });
    }
  }
  void run(std::string_view request) {
    MemoryStream stream(request);
    bool closed = false;
    (void)process_request(stream, true, closed, [](httplib::Request&) {});
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1 << 20)) return 0;
  const WhisperTask task = (data[0] & 1) ? WhisperTask::kTranslate : WhisperTask::kTranscribe;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((data[0] & 2) == 0) {
    static FormServer* server = new FormServer();  // built once; never destroyed (libFuzzer exits)
    const size_t newline = rest.find('\n');
    const std::string_view boundary = newline == std::string_view::npos ? "b" : rest.substr(0, newline);
    const std::string_view body = newline == std::string_view::npos ? rest : rest.substr(newline + 1);
    std::string request = task == WhisperTask::kTranslate ? "POST /v1/audio/translations HTTP/1.1\r\n"
                                                          : "POST /v1/audio/transcriptions HTTP/1.1\r\n";
    request += "Host: x\r\nContent-Type: multipart/form-data; boundary=";
    request += boundary;
    request += "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    request += body;
    server->run(request);
    return 0;
  }
  std::vector<std::string> pieces(1);
  for (char c : rest) {
    if (c == '\0') {
      pieces.emplace_back();
    } else {
      pieces.back() += c;
    }
  }
  std::vector<FormField> fields;
  for (size_t i = 0; i < pieces.size(); i += 4) {
    auto at = [&](size_t k) { return k < pieces.size() ? pieces[k] : std::string(); };
    fields.push_back({at(i), at(i + 1), at(i + 2), at(i + 3)});
  }
  check_accepted(fields, task);
  return 0;
}
