// cast on the device against the CPU conversions, bit for bit: every 16-bit pattern, millions of
// random float bit patterns (NaN payloads, subnormals, infinities, rounding ties), aligned
// (vector path) and misaligned (scalar path) pointers, odd lengths.
#include "device_env.h"

using namespace amp;
using namespace gpu_test;

namespace {

// Casts n elements of src (host bits, dtype s) to dtype d on both backends, from element offset
// `off` of the buffers, and requires identical bits.
void check_cast(Backend& gpu, const std::vector<unsigned char>& src, DType s, DType d, size_t n, size_t off) {
  const size_t ss = dtype_size(s), ds = dtype_size(d);
  REQUIRE(src.size() == n * ss);
  Buffer in = gpu.memory().alloc((n + off) * ss), out = gpu.memory().alloc((n + off) * ds);
  gpu.memory().upload(static_cast<char*>(in.data()) + off * ss, src.data(), n * ss);
  gpu.ops().cast(static_cast<char*>(in.data()) + off * ss, s, static_cast<char*>(out.data()) + off * ds, d, n);
  const std::vector<unsigned char> got = read_raw(gpu, static_cast<char*>(out.data()) + off * ds, n * ds);
  std::vector<unsigned char> want(n * ds);
  convert(src.data(), s, want.data(), d, n);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(&got[i * ds], &want[i * ds], ds) != 0 && bad++ == 0) first = i;
  INFO(dtype_name(s) << " -> " << dtype_name(d) << ", n " << n << ", offset " << off << ": " << bad
                     << " elements differ, first at " << first);
  REQUIRE(bad == 0);
}

std::vector<unsigned char> all_16bit_patterns() {
  std::vector<unsigned char> v(65536 * 2);
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = uint16_t(i);
    std::memcpy(&v[i * 2], &b, 2);
  }
  return v;
}

std::vector<unsigned char> random_float_bits(size_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<uint32_t> u(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t x = r.next_u64();
    switch (i % 4) {
      case 0: u[i] = uint32_t(x); break;  // any pattern: NaNs with payloads, infinities, subnormals
      case 1: {  // around the binary16 range: exponents 2^-30 .. 2^17
        const uint32_t e = 97u + uint32_t((x >> 32) % 48u);
        u[i] = (uint32_t(x) & 0x807fffffu) | (e << 23);
        break;
      }
      case 2: {  // exact ties and their neighbours for both 16-bit formats
        const uint32_t e = 100u + uint32_t((x >> 32) % 40u);
        const uint32_t base = (uint32_t(x) & 0x807f0000u) | (e << 23);
        const uint32_t tweak[6] = {0x1000u, 0x0fffu, 0x1001u, 0x8000u, 0x7fffu, 0x8001u};
        u[i] = base | tweak[(x >> 8) % 6];
        break;
      }
      default: {  // float subnormals and the smallest normals
        u[i] = (uint32_t(x) & 0x80ffffffu);
        break;
      }
    }
  }
  std::vector<unsigned char> v(n * 4);
  std::memcpy(v.data(), u.data(), v.size());
  return v;
}

}  // namespace

TEST_CASE("cast: every 16-bit pattern to f32 and to the other 16-bit format, bit-exact", "[.cuda][cast]") {
  auto gpu = make_device();
  const auto pats = all_16bit_patterns();
  for (DType s : {DType::F16, DType::BF16})
    for (DType d : {DType::F32, DType::F16, DType::BF16})
      for (size_t off : {size_t(0), size_t(1)}) check_cast(*gpu, pats, s, d, 65536, off);
}

TEST_CASE("cast: millions of float bit patterns to f16 and bf16, bit-exact", "[.cuda][cast]") {
  auto gpu = make_device();
  const size_t n = size_t(1) << 22;
  const auto bits = random_float_bits(n, 42);
  for (DType d : {DType::F16, DType::BF16}) {
    check_cast(*gpu, bits, DType::F32, d, n, 0);  // vector path
    check_cast(*gpu, bits, DType::F32, d, n, 3);  // misaligned: scalar path
  }
  // Odd lengths exercise the tails of the vector path.
  for (size_t len : {size_t(1), size_t(7), size_t(9), size_t(1031)}) {
    std::vector<unsigned char> part(bits.begin(), bits.begin() + long(len * 4));
    check_cast(*gpu, part, DType::F32, DType::F16, len, 0);
    check_cast(*gpu, part, DType::F32, DType::BF16, len, 0);
  }
}

TEST_CASE("cast: same dtype copies, f32 round trips", "[.cuda][cast]") {
  auto gpu = make_device();
  const auto bits = random_float_bits(1000, 7);
  check_cast(*gpu, bits, DType::F32, DType::F32, 1000, 0);
  const auto pats = all_16bit_patterns();
  check_cast(*gpu, pats, DType::F16, DType::F16, 65536, 1);
}
