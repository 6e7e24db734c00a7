// Entry point of the unit tests (no MPI: these run without a launcher).
#include "tests/catch_runner.h"

int main(int argc, char** argv) { return amp_test::run_catch(argc, argv); }
