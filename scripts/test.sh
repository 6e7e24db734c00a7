#!/usr/bin/env bash
# Set up (packages + Release build + sanitizer build), then run every test: all ctest tests of the
# Release build, and the unit tests again under AddressSanitizer + UBSan. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --asan
# CPU slots (tests/CMakeLists.txt): as many computing tests at once as there are CPUs, and the tests
# that mostly wait beside them.
n=$(nproc)
printf '{"version": {"major": 1, "minor": 0}, "local": [{"cpus": [{"id": "0", "slots": %d}]}]}\n' "$n" \
  > build/ctest_resources.json
ctest --test-dir build --output-on-failure -j "$((2 * n))" --resource-spec-file "$PWD/build/ctest_resources.json" --timeout 900
ASAN_OPTIONS=detect_leaks=0 ctest --test-dir build-asan -L unit --output-on-failure -j "$(nproc)" --timeout 900
echo "test.sh: all tests passed"
