// A crash of the CUDA test binary on the GPU machine (which has no debugger) prints its stack:
// each frame as the executable's path, (+offset) and address, to resolve here against the
// unstripped build (addr2line -f -C -e build-cuda/strata_cuda_tests OFFSET), then re-raises.
// CUDA builds only: the CPU build's sanitizers keep their own handlers.
#if defined(STRATA_WITH_CUDA)
#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <initializer_list>

namespace {

void print_stack(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  static const char kHead[] = "\n*** fatal signal; stack (resolve the +offsets with addr2line):\n";
  (void)!write(STDERR_FILENO, kHead, sizeof(kHead) - 1);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

const bool installed = [] {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, print_stack);
  return true;
}();

}  // namespace

#endif  // STRATA_WITH_CUDA
