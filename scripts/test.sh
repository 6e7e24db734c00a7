#!/usr/bin/env bash
# Set up (packages + Release build + sanitizer build), then run every test: all ctest tests of the
# Release build, and the unit tests again under AddressSanitizer + UBSan. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --asan
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 900
ASAN_OPTIONS=detect_leaks=0 ctest --test-dir build-asan -L unit --output-on-failure -j "$(nproc)" --timeout 900
echo "test.sh: all tests passed"
