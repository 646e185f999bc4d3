// The server's connection handling over cpp-httplib's request parser (httplib::Server, whose
// per-connection loop is replaced here):
//
// - an idle connection (before its first request, between keep-alive requests) holds no
//   thread: one poller thread waits on every idle socket and closes it after the keep-alive
//   timeout;
// - a request that arrives is served on a pool thread: GET /health and GET /metrics on their
//   own small pool, everything else on the pool of `request_threads`, so the probes answer
//   while every request thread is busy;
// - the request's head and body must arrive within the read timeout (a client sending a byte
//   a second is cut off), and a write that cannot progress for the write timeout fails;
// - the listening socket is opened without SO_REUSEPORT, so a second server on the same port
//   fails with "address already in use" instead of sharing the connections;
// - shutdown: stop_accepting(), wait_idle(deadline) for the requests in flight, close_all().
//
// A handler thread asks client_disconnected() whether its client has gone (closed its side of
// the connection), to abort work nobody will read.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

namespace strata::server {

struct ConnectionOptions {
  int request_threads = 256;        // requests served at once (a stream holds one)
  int probe_threads = 2;            // GET /health and GET /metrics
  double read_timeout_s = 30;       // a request's head and body, from its first byte
  double write_timeout_s = 30;      // one write that makes no progress
  double keep_alive_timeout_s = 5;  // an idle connection, before and between requests
};

// True when the client of the request this thread is serving has closed its connection.
bool client_disconnected();
// The connection of the request this thread is serving closes after its response (used for
// framing errors, whose unread body cannot be told from the next request).
void close_connection_after_response();

class HttpServer : public httplib::Server {
 public:
  struct Connection;  // one client socket (http_connections.cpp)

  explicit HttpServer(ConnectionOptions options);
  ~HttpServer() override;

  // Binds host:port (0: any free port); returns the port, or throws Error naming the cause
  // ("address already in use").
  int bind(const std::string& host, int port);
  // Serves until stop_accepting() (the accept loop runs on the calling thread).
  void serve();
  // Closes the listening socket: serve() returns; requests in flight go on.
  void stop_accepting();
  // Waits until no request is being served or `deadline`; true when none is.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  // Shuts every connection down and joins the threads (requests in flight fail their writes).
  void close_all();

 private:
  bool process_and_close_socket(socket_t sock) override;
  void park(std::shared_ptr<Connection> c);  // wait for its next request on the poller
  void dispatch(std::shared_ptr<Connection> c);
  void serve_request(std::shared_ptr<Connection> c);
  void close_connection(const std::shared_ptr<Connection>& c, bool linger);
  void poll_loop();

  ConnectionOptions options_;
  int listen_fd_ = -1;
  std::atomic<bool> served_{false};  // serve() ran: the accept loop closes the socket
  std::atomic<bool> shut_{false};    // the listening socket was shut (or closed)
  std::atomic<bool> stopping_{false};
  std::unique_ptr<httplib::ThreadPool> requests_, probes_;

  std::mutex mu_;
  std::condition_variable idle_cv_;
  int serving_ = 0;  // requests being served
  std::unordered_map<int, std::shared_ptr<Connection>> parked_, busy_;
  int wake_fd_ = -1;  // eventfd: a connection was parked, or stopping
  std::thread poller_;
};

}  // namespace strata::server
