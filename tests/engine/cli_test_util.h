// Running the strata binary from tests: whole runs (run_cli) and live processes (CliProcess)
// that a test writes to, reads from while they run, and signals.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace strata::testing {

struct CliRun {
  int status = -1;
  std::string out;  // stdout and stderr
};

// Runs `strata ARGS` with `input` on stdin (none when empty).
inline CliRun run_cli(const std::string& args, const std::string& input = "") {
  CliRun r;
  std::string redirect;
  if (!input.empty()) {
    const std::string path = ::testing::TempDir() + "strata_cli_stdin_" + std::to_string(getpid()) + ".txt";
    std::ofstream(path) << input;
    redirect = " < " + path;
  }
  const std::string cmd = std::string(STRATA_BINARY) + " " + args + redirect + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  r.status = pclose(p);
  return r;
}

inline std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);  // not "," + to_string: GCC 12 warns falsely (-Wrestrict) on that
  }
  return s;
}

inline std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> lines;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find('\n', i);
    if (j == std::string::npos) j = s.size();
    lines.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return lines;
}

// `strata ARGS...` as a child process: stdin a pipe, stdout and stderr one pipe.
class CliProcess {
 public:
  explicit CliProcess(const std::vector<std::string>& args) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      dup2(out[1], 2);
      close(in[1]);
      close(out[0]);
      std::vector<char*> argv{const_cast<char*>(STRATA_BINARY)};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(STRATA_BINARY, argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_child_ = in[1];
    from_child_ = out[0];
  }
  ~CliProcess() {
    if (to_child_ >= 0) close(to_child_);
    if (from_child_ >= 0) close(from_child_);
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  void write(const std::string& s) { (void)!::write(to_child_, s.data(), s.size()); }
  void close_stdin() {
    close(to_child_);
    to_child_ = -1;
  }
  void signal(int sig) { kill(pid_, sig); }
  // Reads until the output holds `what` (true) or `timeout_s` passes or the output ends (false).
  bool read_until(const std::string& what, double timeout_s) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (out_.find(what) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(int(left.count()))) return false;
    }
    return true;
  }
  // Reads until the output holds at least `n` bytes (true) or `timeout_s` passes or it ends.
  bool read_at_least(size_t n, double timeout_s) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (out_.size() < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(int(left.count()))) return false;
    }
    return true;
  }
  bool running() {
    if (exited_) return false;
    if (waitpid(pid_, &status_, WNOHANG) == pid_) exited_ = true;
    return !exited_;
  }
  // Reads to the end of the output, then waits for the exit status.
  int wait() {
    while (read_some(60000)) {
    }
    if (!exited_) waitpid(pid_, &status_, 0);
    exited_ = true;
    return status_;
  }
  const std::string& output() const { return out_; }

 private:
  bool read_some(int timeout_ms) {
    pollfd p{from_child_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char buf[4096];
    const ssize_t n = read(from_child_, buf, sizeof buf);
    if (n <= 0) return false;
    out_.append(buf, size_t(n));
    return true;
  }
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1, status_ = -1;
  bool exited_ = false;
  std::string out_;
};

}  // namespace strata::testing
