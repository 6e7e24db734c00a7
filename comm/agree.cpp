#include "comm/agree.h"

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"

namespace amp {

void run_agreed(Communicator& world, const std::function<void()>& step) {
  int code = 0;
  std::string message;
  try {
    step();
  } catch (const Error& e) {
    if (e.agreed()) throw;
    code = e.exit_code();
    message = e.what();
  } catch (const std::exception& e) {
    code = int(ErrorKind::Internal);
    message = std::string("internal error: ") + e.what();
  }
  std::vector<int> codes(size_t(world.size()));
  world.allgather(&code, codes.data(), sizeof(int));
  for (int r = 0; r < world.size(); ++r) {
    if (codes[size_t(r)] == 0) continue;
    if (r == world.rank()) {
      std::fprintf(stderr, "%s%s\n", world.size() > 1 ? ("[rank " + std::to_string(r) + "] ").c_str() : "",
                   message.c_str());
      std::fflush(stderr);
    }
    throw Error(static_cast<ErrorKind>(codes[size_t(r)]), message.empty() ? "error on rank " + std::to_string(r) : message,
                true, true);
  }
}

}  // namespace amp
