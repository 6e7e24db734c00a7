// The device's releasable memory (distributed.zero 2): pages returned once the work enqueued before
// their release has run, brought back zero-filled by commit, the others untouched. Only uploads and
// downloads touch the memory, so the same case runs on the CUDA backend (virtual memory API) and
// on the CPU stand-in (madvise and page protection).
#include "device_env.h"

using namespace amp;
using namespace gpu_test;

TEST_CASE("device memory: release returns whole pages once earlier work has run, commit brings them back zeroed",
          "[.cuda][zero]") {
  auto dev = make_device();
  DeviceMemory& mem = dev->memory();
  const size_t page = mem.release_granularity();
  REQUIRE(page > 0);
  const size_t bytes = 8 * page + 100;  // a partial last page
  Buffer b = mem.alloc_releasable(bytes);
  char* p = b.as<char>();
  std::vector<unsigned char> pattern(bytes), got(bytes);
  for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<unsigned char>(i % 251 + 1);
  // Which bytes a page range [first, last) zeroes in the pattern.
  auto expect = [&](size_t first, size_t last) {
    std::vector<unsigned char> e = pattern;
    std::fill(e.begin() + long(first * page), e.begin() + long(last * page), 0);
    return e;
  };
  mem.upload(p, pattern.data(), bytes);
  mem.synchronize();
  CHECK(mem.resident_bytes(p, 8 * page) == 8 * page);

  SECTION("returned, then committed") {
    mem.release(p + page + 10, 5 * page);  // the whole pages inside: 2, 3, 4, 5
    mem.synchronize();                     // the work before the release has run
    CHECK(mem.resident_bytes(p, 8 * page) == 4 * page);
    mem.commit(p + 3 * page + 1, 1);  // page 3 alone
    mem.commit(p + page, 5 * page);   // 2, 4, 5 (1 and 6 were never released)
    mem.download(got.data(), p, bytes);
    CHECK(got == expect(2, 6));
    mem.upload(p, pattern.data(), bytes);  // written again: every page holds memory
    mem.synchronize();
    CHECK(mem.resident_bytes(p, 8 * page) == 8 * page);
  }
  SECTION("committed before the release could take effect (a device: still pending)") {
    mem.upload(p, pattern.data(), bytes);
    mem.release(p + 2 * page, 3 * page);  // 2, 3, 4
    mem.commit(p + 2 * page, 3 * page);
    mem.download(got.data(), p, bytes);
    CHECK(got == expect(2, 5));
  }
  SECTION("nothing whole inside: nothing returned") {
    mem.release(p + 10, page - 20);
    mem.release(p + 8 * page, 100);  // the partial last page
    mem.synchronize();
    mem.download(got.data(), p, bytes);
    CHECK(got == pattern);
    CHECK(mem.resident_bytes(p, 8 * page) == 8 * page);
  }
}
