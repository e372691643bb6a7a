// The thread-local current request and the client-disconnect probe (see request_context.h).
#include "api/request_context.h"

#include <sys/socket.h>

#include <cerrno>

namespace mmserve::api {
namespace {
thread_local RequestContext* g_current = nullptr;
}  // namespace

bool PeerProbe::gone() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) return false;
  char byte;
  const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;
  if (n == 0) return true;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

void PeerProbe::detach() {
  std::lock_guard<std::mutex> lock(mutex_);
  fd_ = -1;
}

RequestContext* current_request_context() {
  return g_current;
}

ScopedRequestContext::ScopedRequestContext(RequestContext* context) : previous_(g_current) {
  g_current = context;
}
ScopedRequestContext::~ScopedRequestContext() {
  g_current = previous_;
}

}  // namespace mmserve::api
