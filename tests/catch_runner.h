// Catch2's runner (tests/catch_runner.cpp, where Catch::Session lives: the single header declares it
// in its implementation only).
#pragma once

namespace amp_test {

// Reads Catch2's command line and runs the test cases it selects: 0, or the number of failed cases
// (or the command line's error code).
int run_catch(int argc, char** argv);

}  // namespace amp_test
