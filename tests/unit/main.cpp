// Catch2 v2 entry point for the unit tests (no MPI: these run without a launcher).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
