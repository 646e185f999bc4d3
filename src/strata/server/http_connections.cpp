#include "strata/server/http_connections.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "strata/core/error.h"

namespace strata::server {

namespace {

using Clock = std::chrono::steady_clock;

// poll() on one descriptor until `deadline`; the revents, or 0 on timeout.
int wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, int(std::max<int64_t>(0, left.count())));
    if (r < 0 && errno == EINTR) continue;
    return r > 0 ? p.revents : 0;
  }
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void ip_and_port(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int r = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                     : ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (r != 0 || ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv,
                              sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return;
  }
  ip = host;
  port = std::atoi(serv);
}

// The accept loop hands each new socket to process_and_close_socket at once (it only parks it).
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace

// One client socket and the bytes read from it but not yet parsed (kept between requests,
// so pipelined requests are not lost). Reads stop at the request's deadline.
struct HttpServer::Connection : public httplib::Stream {
  Connection(int fd, const ConnectionOptions& o) : fd(fd), write_timeout_s(o.write_timeout_s) {}

  bool is_readable() const override {
    return buffered() || (wait_for(fd, POLLIN, read_deadline) & (POLLIN | POLLHUP | POLLERR));
  }
  bool is_writable() const override { return wait_for(fd, POLLOUT, after(write_timeout_s)) & POLLOUT; }
  ssize_t read(char* ptr, size_t size) override {
    if (!buffered()) {
      if (!(wait_for(fd, POLLIN, read_deadline) & (POLLIN | POLLHUP | POLLERR))) return -1;
      buf.resize(16384);
      ssize_t n;
      do {
        n = ::recv(fd, buf.data(), buf.size(), 0);
      } while (n < 0 && errno == EINTR);
      buf.resize(size_t(std::max<ssize_t>(n, 0)));
      off = 0;
      if (n <= 0) return n;
    }
    const size_t n = std::min(size, buf.size() - off);
    std::memcpy(ptr, buf.data() + off, n);
    off += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      if (!(wait_for(fd, POLLOUT, after(write_timeout_s)) & POLLOUT)) return -1;
      const ssize_t n = ::send(fd, ptr + done, size - done, MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return -1;
      done += size_t(n);
    }
    return ssize_t(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip_and_port(fd, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { ip_and_port(fd, false, ip, port); }
  // httplib reads this only to refuse descriptors that select() cannot watch; this stream
  // polls, so any descriptor works.
  socket_t socket() const override { return 0; }

  bool buffered() const { return off < buf.size(); }
  // Whether the peer closed its side (no request bytes wait to be read).
  bool peer_closed() const {
    if (buffered()) return false;
    const int ev = wait_for(fd, POLLIN | POLLRDHUP, Clock::now());
    if (ev & (POLLERR | POLLHUP | POLLRDHUP)) return true;
    if (!(ev & POLLIN)) return false;
    char c;
    return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }

  const int fd;
  const double write_timeout_s;
  Clock::time_point read_deadline, idle_deadline;
  std::string buf;
  size_t off = 0;
  bool close_after = false;
};

namespace {

thread_local HttpServer::Connection* tls_connection = nullptr;

}  // namespace

bool client_disconnected() { return tls_connection && tls_connection->peer_closed(); }

void close_connection_after_response() {
  if (tls_connection) tls_connection->close_after = true;
}

HttpServer::HttpServer(ConnectionOptions options) : options_(options) {
  new_task_queue = [] { return new InlineQueue; };
  requests_ = std::make_unique<httplib::ThreadPool>(size_t(std::max(1, options_.request_threads)));
  probes_ = std::make_unique<httplib::ThreadPool>(size_t(std::max(1, options_.probe_threads)));
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  STRATA_CHECK(wake_fd_ >= 0, "strata serve: eventfd: ", std::strerror(errno));
  // SO_REUSEADDR (a restart may bind while old connections linger in TIME_WAIT) but not
  // httplib's SO_REUSEPORT, which lets a second server share the port.
  set_socket_options([this](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = int(sock);
  });
  poller_ = std::thread([this] { poll_loop(); });
}

HttpServer::~HttpServer() {
  close_all();
  // A socket bound but never served is still open (the accept loop closes it otherwise).
  if (listen_fd_ >= 0 && !served_) ::close(listen_fd_);
  ::close(wake_fd_);
}

int HttpServer::bind(const std::string& host, int port) {
  errno = 0;
  int bound = -1;
  if (port == 0) {
    bound = bind_to_any_port(host);
  } else if (bind_to_port(host, port)) {
    bound = port;
  }
  const int err = errno;
  if (bound <= 0) {
    listen_fd_ = -1;
    fail("cannot listen on ", host, ":", port, ": ",
         err == EADDRINUSE ? "address already in use (is another server running on this port?)"
         : err != 0        ? std::strerror(err)
                           : "the address does not resolve to a local interface");
  }
  // httplib listens with a backlog of 5: a burst of clients connecting at once would overflow
  // it and see resets. Linux lets listen() widen the queue of a listening socket.
  ::listen(listen_fd_, 4096);
  return bound;
}

void HttpServer::serve() {
  served_ = true;
  listen_after_bind();
  shut_ = true;  // the accept loop closed the socket: its number may be reused
}

void HttpServer::stop_accepting() {
  // The accept loop fails on the shut socket, closes it and returns.
  if (listen_fd_ >= 0 && !shut_.exchange(true)) ::shutdown(listen_fd_, SHUT_RDWR);
}

bool HttpServer::wait_idle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_until(lock, deadline, [this] { return serving_ == 0; });
}

void HttpServer::close_all() {
  if (stopping_.exchange(true)) return;
  stop_accepting();
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  poller_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [fd, c] : busy_) ::shutdown(fd, SHUT_RDWR);
  }
  requests_->shutdown();
  probes_->shutdown();
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  int yes = 1;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  park(std::make_shared<Connection>(int(sock), options_));
  return true;
}

void HttpServer::park(std::shared_ptr<Connection> c) {
  if (stopping_) return close_connection(c, false);
  if (c->buffered()) return dispatch(std::move(c));  // a pipelined request is already here
  c->idle_deadline = after(options_.keep_alive_timeout_s);
  {
    std::lock_guard<std::mutex> lock(mu_);
    parked_[c->fd] = std::move(c);
  }
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void HttpServer::dispatch(std::shared_ptr<Connection> c) {
  // The probes go to their own threads when their request line is already readable.
  char head[16] = {};
  const ssize_t n = c->buffered() ? 0 : ::recv(c->fd, head, sizeof head - 1, MSG_PEEK | MSG_DONTWAIT);
  const std::string line = c->buffered() ? c->buf.substr(c->off, 15) : std::string(head, size_t(std::max<ssize_t>(n, 0)));
  const bool probe = line.rfind("GET /health", 0) == 0 || line.rfind("GET /metrics", 0) == 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_[c->fd] = c;
  }
  (probe ? probes_ : requests_)->enqueue([this, c] { serve_request(c); });
}

void HttpServer::serve_request(std::shared_ptr<Connection> c) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++serving_;
  }
  c->read_deadline = after(options_.read_timeout_s);
  bool closed = false;
  tls_connection = c.get();
  const bool ok = process_request(*c, stopping_.load(), closed, nullptr);
  tls_connection = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --serving_;
    busy_.erase(c->fd);
  }
  idle_cv_.notify_all();
  if (!ok || closed || c->close_after || stopping_) {
    close_connection(c, ok && c->close_after);
  } else {
    park(std::move(c));
  }
}

void HttpServer::close_connection(const std::shared_ptr<Connection>& c, bool linger) {
  if (linger) {
    // The client may still be sending a body we did not read (a 413's): closing with unread
    // bytes resets the connection, and the client would lose the response. Half-close, and
    // discard what still comes (up to 64 MiB, within the request's read deadline or a
    // second), then close.
    ::shutdown(c->fd, SHUT_WR);
    const auto until = std::max(after(1.0), c->read_deadline);
    char sink[65536];
    size_t discarded = 0;
    while (discarded < (size_t(64) << 20) && (wait_for(c->fd, POLLIN, until) & (POLLIN | POLLHUP | POLLERR))) {
      const ssize_t n = ::recv(c->fd, sink, sizeof sink, MSG_DONTWAIT);
      if (n <= 0) break;
      discarded += size_t(n);
    }
  }
  ::shutdown(c->fd, SHUT_RDWR);
  ::close(c->fd);
}

void HttpServer::poll_loop() {
  std::vector<pollfd> fds;
  std::vector<std::shared_ptr<Connection>> conns;
  while (!stopping_) {
    fds.clear();
    conns.clear();
    auto next_deadline = after(1.0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [fd, c] : parked_) {
        fds.push_back({fd, POLLIN, 0});
        conns.push_back(c);
        next_deadline = std::min(next_deadline, c->idle_deadline);
      }
    }
    fds.push_back({wake_fd_, POLLIN, 0});
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline - Clock::now());
    if (::poll(fds.data(), fds.size(), int(std::max<int64_t>(0, wait.count()) + 1)) < 0 && errno != EINTR) {
      std::fprintf(stderr, "strata serve: poll failed: %s\n", std::strerror(errno));
    }
    uint64_t drained;
    (void)!::read(wake_fd_, &drained, sizeof drained);
    const auto now = Clock::now();
    for (size_t i = 0; i < conns.size(); ++i) {
      const bool ready = fds[i].revents != 0, expired = now >= conns[i]->idle_deadline;
      if (!ready && !expired) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        parked_.erase(conns[i]->fd);
      }
      if (ready) {
        dispatch(conns[i]);
      } else {
        close_connection(conns[i], false);
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [fd, c] : parked_) close_connection(c, false);
  parked_.clear();
}

}  // namespace strata::server
