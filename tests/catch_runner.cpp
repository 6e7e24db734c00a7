// Catch2's implementation (its single header with CATCH_CONFIG_RUNNER: everything but main) and its
// runner, compiled once for every test binary; each binary's main calls run_catch.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_runner.h"

namespace amp_test {

int run_catch(int argc, char** argv) {
  Catch::Session session;
  if (int rc = session.applyCommandLine(argc, argv)) return rc;
  return session.run();
}

}  // namespace amp_test
