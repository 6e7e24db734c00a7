// Data loaders: IDX (every element type, raw and gzip, every error path), the IDX images+labels
// data set, CSV, the train/eval split, the synthetic regression, the normalizer and Fashion-MNIST.
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/error.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "test_util.h"

using namespace amp;
namespace fs = std::filesystem;
using Catch::Contains;

namespace {

using Bytes = std::vector<uint8_t>;

// A fresh directory per test case, removed when the case ends (pass or fail).
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = fs::temp_directory_path() /
            ("amp_test_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) +
             "_" + std::to_string(stamp));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_raw(const std::string& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  REQUIRE(f.good());
}

void write_gz(const std::string& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!bytes.empty()) REQUIRE(gzwrite(f, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  REQUIRE(f.good());
}

Bytes read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void put_be(Bytes& b, uint64_t v, int n_bytes) {
  for (int i = n_bytes - 1; i >= 0; --i) b.push_back(uint8_t(v >> (8 * i)));
}

// An IDX header followed by the given (already big-endian) payload.
Bytes idx_file(uint8_t type, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes b = {0, 0, type, uint8_t(dims.size())};
  for (uint32_t d : dims) put_be(b, d, 4);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

Bytes u8_payload(const std::vector<int>& v) {
  Bytes b;
  for (int x : v) b.push_back(uint8_t(x));
  return b;
}

Bytes f32_payload(const std::vector<float>& v) {
  Bytes b;
  for (float x : v) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    put_be(b, bits, 4);
  }
  return b;
}

// The message of the Data error that f throws, or a text that no expected message contains.
std::string data_error_of(const std::function<void()>& f) { return amp_test::error_of(ErrorKind::Data, f); }

std::string idx_error(const std::string& path) {
  return data_error_of([&] { read_idx(path); });
}

}  // namespace

// ------------------------------------------------------------------------------------------ IDX

TEST_CASE("IDX decodes every element type, raw and gzip", "[data]") {
  TempDir dir;
  struct Case {
    const char* name;
    uint8_t type;
    std::vector<uint32_t> dims;
    Bytes payload;
    std::vector<float> expected;
  };
  std::vector<Case> cases;
  cases.push_back({"u8", 0x08, {2, 3}, u8_payload({0, 1, 127, 128, 254, 255}),
                   {0, 1, 127, 128, 254, 255}});
  cases.push_back({"i8", 0x09, {5}, u8_payload({0x00, 0x01, 0x7f, 0x80, 0xff}),
                   {0, 1, 127, -128, -1}});
  {
    Bytes p;
    for (uint32_t v : {0x0102u, 0x7fffu, 0x8000u, 0xfffeu}) put_be(p, v, 2);
    cases.push_back({"i16", 0x0B, {2, 2}, p, {258, 32767, -32768, -2}});
  }
  {
    Bytes p;
    for (uint32_t v : {0x01020304u, 0xffffffffu, 0x80000000u, 123456u}) put_be(p, v, 4);
    cases.push_back({"i32", 0x0C, {4}, p, {16909060.0f, -1, -2147483648.0f, 123456}});
  }
  cases.push_back({"f32", 0x0D, {1, 2, 2}, f32_payload({1.5f, -0.25f, 3.0e38f, 1e-3f}),
                   {1.5f, -0.25f, 3.0e38f, 1e-3f}});
  {
    Bytes p;
    for (double d : {0.1, -1234.5, 1e300}) {
      uint64_t bits;
      std::memcpy(&bits, &d, 8);
      put_be(p, bits, 8);
    }
    cases.push_back({"f64", 0x0E, {3}, p, {0.1f, -1234.5f, float(1e300)}});
  }

  for (const Case& c : cases) {
    for (bool gz : {false, true}) {
      INFO("type " << c.name << (gz ? " (gzip)" : " (raw)"));
      const std::string path = dir.file(std::string(c.name) + (gz ? ".gz" : ".idx"));
      const Bytes bytes = idx_file(c.type, c.dims, c.payload);
      if (gz)
        write_gz(path, bytes);
      else
        write_raw(path, bytes);
      const IdxArray a = read_idx(path);
      CHECK(a.type_code == c.type);
      CHECK(a.dims == std::vector<size_t>(c.dims.begin(), c.dims.end()));
      REQUIRE(a.data.size() == c.expected.size());
      for (size_t i = 0; i < a.data.size(); ++i) {
        INFO("element " << i);
        CHECK(a.data[i] == c.expected[i]);  // f64 1e300 becomes +inf in float, as expected
      }
    }
  }
}

TEST_CASE("IDX multi-dimensional shapes and gzip == raw, whatever the file name", "[data]") {
  TempDir dir;
  // 4-D u8
  {
    const std::vector<uint32_t> dims = {2, 3, 4, 5};
    std::vector<int> v(120);
    for (int i = 0; i < 120; ++i) v[size_t(i)] = (i * 7) % 256;
    write_raw(dir.file("four.idx"), idx_file(0x08, dims, u8_payload(v)));
    const IdxArray a = read_idx(dir.file("four.idx"));
    CHECK(a.dims == std::vector<size_t>{2, 3, 4, 5});
    REQUIRE(a.data.size() == 120);
    for (size_t i = 0; i < 120; ++i) CHECK(a.data[i] == float(v[i]));
  }
  // A larger f32 array (several zlib buffers), gzip and raw, with misleading names.
  {
    Rng rng(42);
    std::vector<float> v(3 * 500 * 400);
    for (float& x : v) x = float(rng.normal());
    const Bytes bytes = idx_file(0x0D, {3, 500, 400}, f32_payload(v));
    write_raw(dir.file("raw_named.gz"), bytes);
    write_gz(dir.file("gzip_named.idx"), bytes);
    const IdxArray raw = read_idx(dir.file("raw_named.gz"));
    const IdxArray gz = read_idx(dir.file("gzip_named.idx"));
    CHECK(raw.dims == std::vector<size_t>{3, 500, 400});
    CHECK(gz.dims == raw.dims);
    CHECK(raw.data == v);
    CHECK(gz.data == v);
  }
}

TEST_CASE("IDX errors name the file and say what was expected", "[data]") {
  TempDir dir;
  const Bytes good = idx_file(0x08, {3, 4, 4}, Bytes(48, 7));

  SECTION("missing file") {
    const std::string p = dir.file("nope-idx3-ubyte.gz");
    CHECK(idx_error(p) == "data error: " + p + ": cannot open: No such file or directory");
  }
  SECTION("a directory") {
    CHECK_THAT(idx_error(dir.file("")), Contains("cannot open"));
  }
  SECTION("bad magic") {
    const std::string p = dir.file("magic.idx");
    Bytes b = good;
    b[0] = 0x12;
    b[1] = 0x34;
    write_raw(p, b);
    CHECK(idx_error(p) ==
          "data error: " + p + ": bad IDX magic 0x12340803 (expected 00 00 <type> <ndim>)");
  }
  SECTION("unknown element type") {
    const std::string p = dir.file("type.idx");
    write_raw(p, idx_file(0x07, {2}, Bytes(2, 0)));
    CHECK_THAT(idx_error(p), Contains(p) && Contains("unknown IDX element type 0x07"));
  }
  SECTION("empty file and short magic") {
    const std::string p = dir.file("empty.idx");
    write_raw(p, {});
    CHECK_THAT(idx_error(p), Contains(p) && Contains("empty file"));
    write_gz(p, {});
    CHECK_THAT(idx_error(p), Contains(p) && Contains("empty file"));
    write_raw(p, {0, 0, 8});
    CHECK_THAT(idx_error(p), Contains(p) && Contains("truncated") && Contains("magic"));
  }
  SECTION("zero dimensions") {
    const std::string p = dir.file("nodims.idx");
    write_raw(p, {0, 0, 0x08, 0});
    CHECK_THAT(idx_error(p), Contains(p) && Contains("empty") && Contains("0 dimensions"));
  }
  SECTION("a dimension of size 0") {
    const std::string p = dir.file("zerodim.idx");
    write_raw(p, idx_file(0x08, {3, 0, 4}, {}));
    CHECK_THAT(idx_error(p), Contains(p) && Contains("empty") && Contains("dimension 1") &&
                                 Contains("3x0x4"));
  }
  SECTION("truncated header") {
    const std::string p = dir.file("shorthdr.idx");
    Bytes b = good;
    b.resize(4 + 6);  // 3 dims need 12 bytes of sizes
    write_raw(p, b);
    CHECK_THAT(idx_error(p), Contains(p) && Contains("truncated") && Contains("3 dimensions") &&
                                 Contains("after 6"));
  }
  SECTION("truncated data, raw and gzip") {
    Bytes b = good;
    b.resize(b.size() - 28);  // 20 of 48 bytes of data left
    const std::string expected_tail =
        ": truncated: header says 3x4x4 u8 (48 bytes of data) but the file ends after 20 bytes "
        "of data";
    const std::string p = dir.file("short-idx3-ubyte");
    write_raw(p, b);
    CHECK(idx_error(p) == "data error: " + p + expected_tail);
    const std::string pg = dir.file("short-idx3-ubyte.gz");
    write_gz(pg, b);
    CHECK(idx_error(pg) == "data error: " + pg + expected_tail);
  }
  SECTION("trailing garbage") {
    const std::string p = dir.file("long.idx");
    Bytes b = good;
    b.insert(b.end(), {1, 2, 3, 4, 5});
    write_raw(p, b);
    CHECK_THAT(idx_error(p), Contains(p) && Contains("trailing garbage: 5 bytes") &&
                                 Contains("48 bytes of data"));
    write_gz(p, b);
    CHECK_THAT(idx_error(p), Contains(p) && Contains("trailing garbage: 5 bytes"));
  }
  SECTION("size overflow") {
    const std::string p = dir.file("huge.idx");
    write_raw(p, idx_file(0x0E, {0xffffffffu, 0xffffffffu, 0xffffffffu}, {}));
    CHECK_THAT(idx_error(p), Contains(p) && Contains("size overflow") &&
                                 Contains("4294967295x4294967295x4294967295"));
  }
  SECTION("a header that promises more than there is fails as truncated, not as bad_alloc") {
    const std::string p = dir.file("liar.idx");
    write_raw(p, idx_file(0x0D, {0x7fffffffu, 0x1000u}, Bytes(64, 0)));
    CHECK_THAT(idx_error(p), Contains(p) && Contains("truncated") &&
                                 Contains("ends after 64 bytes of data"));
  }
  SECTION("corrupt gzip: bad block type") {
    const std::string p = dir.file("badblock.gz");
    write_gz(p, good);
    Bytes z = read_all(p);
    REQUIRE(z.size() > 12);
    z[10] = 0x07;  // first deflate block: BFINAL=1, BTYPE=11 (reserved)
    write_raw(p, z);
    CHECK_THAT(idx_error(p), Contains(p) && Contains("corrupt gzip stream") &&
                                 Contains("invalid block type"));
  }
  SECTION("corrupt gzip: bad CRC") {
    const std::string p = dir.file("badcrc.gz");
    write_gz(p, good);
    Bytes z = read_all(p);
    z[z.size() - 8] ^= 0xff;  // the CRC32 of the trailer
    write_raw(p, z);
    CHECK_THAT(idx_error(p), Contains(p) && Contains("corrupt gzip stream"));
  }
  SECTION("truncated gzip") {
    const std::string p = dir.file("cut.gz");
    Rng rng(3);
    Bytes noisy(5000);  // incompressible, so half the .gz is half the data
    for (auto& v : noisy) v = uint8_t(rng.below(256));
    write_gz(p, idx_file(0x08, {5000}, noisy));
    Bytes z = read_all(p);
    z.resize(z.size() / 2);
    write_raw(p, z);
    CHECK_THAT(idx_error(p), Contains(p) && Contains("corrupt gzip stream") &&
                                 Contains("truncated"));
  }
}

TEST_CASE("IDX images + labels make a classification data set", "[data]") {
  TempDir dir;
  const std::string img = dir.file("img-idx3-ubyte.gz");
  const std::string lbl = dir.file("lbl-idx1-ubyte");
  std::vector<int> pixels(4 * 2 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = int(i * 11);
  write_gz(img, idx_file(0x08, {4, 2, 3}, u8_payload(pixels)));
  write_raw(lbl, idx_file(0x08, {4}, u8_payload({2, 0, 5, 1})));

  SECTION("u8 images are scaled by 1/255, class count inferred or given") {
    const Dataset d = load_idx_dataset(img, lbl, 0);
    CHECK(d.task == Task::Classification);
    CHECK(d.n == 4);
    CHECK(d.n_features == 6);
    CHECK(d.n_classes == 6);
    CHECK(d.n_outputs() == 6);
    CHECK(d.labels == std::vector<int32_t>{2, 0, 5, 1});
    REQUIRE(d.x.size() == 24);
    for (size_t i = 0; i < 24; ++i) CHECK(d.x[i] == Approx(pixels[i] / 255.0).epsilon(1e-6));
    CHECK_THAT(d.source, Contains(img) && Contains(lbl));
    CHECK(load_idx_dataset(img, lbl, 10).n_classes == 10);
  }
  SECTION("1-D images are one feature per sample; non-u8 values are kept as they are") {
    const std::string img1 = dir.file("one.idx");
    Bytes p;
    for (uint32_t v : {1000u, 0xfc18u /* -1000 */, 7u, 0u}) put_be(p, v, 2);
    write_raw(img1, idx_file(0x0B, {4}, p));
    const Dataset d = load_idx_dataset(img1, lbl, 6);
    CHECK(d.n == 4);
    CHECK(d.n_features == 1);
    CHECK(d.x == std::vector<float>{1000, -1000, 7, 0});
  }
  SECTION("i32 labels") {
    const std::string l32 = dir.file("l32.idx");
    Bytes p;
    for (uint32_t v : {3u, 1u, 0u, 2u}) put_be(p, v, 4);
    write_raw(l32, idx_file(0x0C, {4}, p));
    const Dataset d = load_idx_dataset(img, l32, 0);
    CHECK(d.labels == std::vector<int32_t>{3, 1, 0, 2});
    CHECK(d.n_classes == 4);
  }
  SECTION("sample counts must match; the message names both files and both counts") {
    const std::string l3 = dir.file("three-labels.idx1");
    write_raw(l3, idx_file(0x08, {3}, u8_payload({0, 1, 2})));
    CHECK_THAT(data_error_of([&] { load_idx_dataset(img, l3, 0); }),
               Contains(img) && Contains("4 samples") && Contains(l3) && Contains("3 labels"));
  }
  SECTION("a label out of range names the file, the element and the value") {
    const std::string l = dir.file("labels.idx1");
    std::vector<int> v(20, 1);
    v[17] = 12;
    write_raw(l, idx_file(0x08, {20}, u8_payload(v)));
    const std::string i20 = dir.file("i20.idx");
    write_raw(i20, idx_file(0x08, {20, 2}, Bytes(40, 0)));
    CHECK(data_error_of([&] { load_idx_dataset(i20, l, 10); }) ==
          "data error: " + l + ": element 17: label 12 is out of range [0, 10)");
    CHECK(load_idx_dataset(i20, l, 0).n_classes == 13);
  }
  SECTION("negative labels are errors, also when the class count is inferred") {
    const std::string l = dir.file("neg.idx1");
    write_raw(l, idx_file(0x09, {4}, u8_payload({0, 1, 0xfd, 2})));
    CHECK_THAT(data_error_of([&] { load_idx_dataset(img, l, 0); }),
               Contains(l) && Contains("element 2: label -3"));
    CHECK_THAT(data_error_of([&] { load_idx_dataset(img, l, 5); }),
               Contains(l) && Contains("element 2: label -3 is out of range [0, 5)"));
  }
  SECTION("labels must be 1-D and of an integer type") {
    const std::string l2 = dir.file("l2d.idx");
    write_raw(l2, idx_file(0x08, {4, 1}, u8_payload({0, 1, 2, 3})));
    CHECK_THAT(data_error_of([&] { load_idx_dataset(img, l2, 0); }),
               Contains(l2) && Contains("1-D") && Contains("4x1"));
    const std::string lf = dir.file("lf.idx");
    write_raw(lf, idx_file(0x0D, {4}, f32_payload({0, 1, 2, 3})));
    CHECK_THAT(data_error_of([&] { load_idx_dataset(img, lf, 0); }),
               Contains(lf) && Contains("integer") && Contains("f32"));
  }
  SECTION("errors in either file surface with that file's name") {
    CHECK_THAT(data_error_of([&] { load_idx_dataset(dir.file("no-images"), lbl, 0); }),
               Contains(dir.file("no-images")) && Contains("cannot open"));
    CHECK_THAT(data_error_of([&] { load_idx_dataset(img, dir.file("no-labels"), 0); }),
               Contains(dir.file("no-labels")) && Contains("cannot open"));
  }
}

// ------------------------------------------------------------------------------------------ CSV

TEST_CASE("CSV: header, target by name / index / last, classification and regression", "[data]") {
  TempDir dir;
  const std::string p = dir.file("data.csv");
  write_text(p,
             "a, label ,b\n"
             "1,0,2\n"
             "\n"
             "# a comment line\n"
             "  3 , 2.0 , 4 \r\n"
             "-5.5,1,+6e1\n"
             "   \n");
  CsvOptions opt;
  opt.target = "label";
  SECTION("target by name, classification with an inferred class count") {
    const Dataset d = load_csv(p, opt);
    CHECK(d.task == Task::Classification);
    CHECK(d.n == 3);
    CHECK(d.n_features == 2);
    CHECK(d.x == std::vector<float>{1, 2, 3, 4, -5.5f, 60});
    CHECK(d.labels == std::vector<int32_t>{0, 2, 1});
    CHECK(d.n_classes == 3);
    CHECK(d.source == p);
  }
  SECTION("a given class count") {
    opt.n_classes = 7;
    CHECK(load_csv(p, opt).n_classes == 7);
  }
  SECTION("target by index and last column, regression") {
    opt.task = Task::Regression;
    opt.target = "0";
    Dataset d = load_csv(p, opt);
    CHECK(d.task == Task::Regression);
    CHECK(d.n_targets == 1);
    CHECK(d.n_outputs() == 1);
    CHECK(d.y == std::vector<float>{1, 3, -5.5f});
    CHECK(d.x == std::vector<float>{0, 2, 2, 4, 1, 60});
    opt.target = "";
    d = load_csv(p, opt);
    CHECK(d.y == std::vector<float>{2, 4, 60});
    CHECK(d.x == std::vector<float>{1, 0, 3, 2, -5.5f, 1});
  }
  SECTION("no header") {
    const std::string q = dir.file("nohdr.csv");
    write_text(q, "1,2,3\n4,5,6");  // no final newline
    CsvOptions o;
    o.header = false;
    o.target = "1";
    o.task = Task::Regression;
    const Dataset d = load_csv(q, o);
    CHECK(d.n == 2);
    CHECK(d.x == std::vector<float>{1, 3, 4, 6});
    CHECK(d.y == std::vector<float>{2, 5});
    o.target = "a";
    CHECK_THAT(data_error_of([&] { load_csv(q, o); }), Contains(q) && Contains("header"));
  }
}

TEST_CASE("CSV: quoted cells as RFC 4180 writes them (spreadsheet exports)", "[data]") {
  TempDir dir;
  const std::string p = dir.file("quoted.csv");
  CsvOptions opt;
  SECTION("a quoted name may hold commas and quotes; quoted numbers are numbers") {
    write_text(p,
               "\"width, cm\",\"the \"\"best\"\" one\", \"label\"\r\n"
               "\"1.5\",2,\"0\"\n"
               " \"3\" ,\"-4e1\" , 1\n");
    opt.target = "label";
    const Dataset d = load_csv(p, opt);
    CHECK(d.n == 2);
    CHECK(d.n_features == 2);
    CHECK(d.x == std::vector<float>{1.5f, 2, 3, -40});
    CHECK(d.labels == std::vector<int32_t>{0, 1});
    opt.target = "the \"best\" one";
    opt.task = Task::Regression;
    CHECK(load_csv(p, opt).y == std::vector<float>{2, -40});
    opt.target = "width, cm";
    CHECK(load_csv(p, opt).y == std::vector<float>{1.5f, 3});
  }
  SECTION("a quoted cell is one cell, whatever it holds") {
    write_text(p, "a,b\n\"1,5\",0\n");
    CHECK(data_error_of([&] { load_csv(p, opt); }) == "data error: " + p + ":2:1: expected a number, got \"1,5\"");
    write_text(p, "a,b\n\"\",0\n");
    CHECK(data_error_of([&] { load_csv(p, opt); }) == "data error: " + p + ":2:1: expected a number, got \"\"");
  }
  SECTION("unclosed quotes and text after the closing quote are errors naming line and column") {
    write_text(p, "a,b,c\n1,\"2,0\n");
    CHECK(data_error_of([&] { load_csv(p, opt); }) ==
          "data error: " + p + ":2:2: a quoted cell is not closed on its line (cells spanning lines are not supported)");
    write_text(p, "a,\"b\nc\",d\n1,2,0\n");  // a line break inside quotes
    CHECK_THAT(data_error_of([&] { load_csv(p, opt); }), Contains(p + ":1:2: a quoted cell is not closed"));
    write_text(p, "a,b,c\n1,\"2\"x,0\n");
    CHECK(data_error_of([&] { load_csv(p, opt); }) ==
          "data error: " + p + ":2:2: expected a comma or the line's end after a quoted cell, got \"x,0\"");
  }
}

TEST_CASE("CSV errors name file:line(:column)", "[data]") {
  TempDir dir;
  CsvOptions opt;
  SECTION("ragged row") {
    const std::string p = dir.file("file.csv");
    write_text(p, "a,b,c,d,e\n1,2,3,4,0\n1,2,3,4,0\n\n1,2,3,4,0\n1,2,3,4,0\n1,2,3,0\n");
    CHECK(data_error_of([&] { load_csv(p, opt); }) ==
          "data error: " + p + ":7: row has 4 columns, expected 5 (from line 1)");
  }
  SECTION("non-numeric cells, with line and 1-based column") {
    const std::string p = dir.file("file.csv");
    std::string text = "x,y,z\n";
    for (int i = 2; i < 12; ++i) text += "1,2,0\n";
    write_text(p, text + "1,2,abc\n");
    CHECK(data_error_of([&] { load_csv(p, opt); }) ==
          "data error: " + p + ":12:3: expected a number, got \"abc\"");
    write_text(p, "x,y\n1.5abc,0\n");
    CHECK_THAT(data_error_of([&] { load_csv(p, opt); }),
               Contains(p + ":2:1: expected a number, got \"1.5abc\""));
    write_text(p, "x,y,z\n1,,0\n");
    CHECK_THAT(data_error_of([&] { load_csv(p, opt); }),
               Contains(p + ":2:2: expected a number, got \"\""));
    write_text(p, "x,y\n1 2,0\n");
    CHECK_THAT(data_error_of([&] { load_csv(p, opt); }), Contains(p + ":2:1: expected a number"));
  }
  SECTION("NaN and infinities") {
    const std::string p = dir.file("nan.csv");
    for (const char* bad : {"nan", "inf", "-inf", "1e999"}) {
      write_text(p, std::string("x,y\n1,0\n") + bad + ",1\n");
      CHECK_THAT(data_error_of([&] { load_csv(p, opt); }),
                 Contains(p + ":3:1:") && Contains("finite") && Contains(bad));
    }
  }
  SECTION("classification targets") {
    const std::string p = dir.file("cls.csv");
    write_text(p, "x,y\n1,0\n2,2.5\n");
    CHECK_THAT(data_error_of([&] { load_csv(p, opt); }),
               Contains(p + ":3:2:") && Contains("non-negative integer") && Contains("2.5"));
    write_text(p, "x,y\n1,0\n2,-1\n");
    CHECK_THAT(data_error_of([&] { load_csv(p, opt); }),
               Contains(p + ":3:2:") && Contains("non-negative integer"));
    write_text(p, "x,y\n1,0\n2,12\n");
    opt.n_classes = 10;
    CHECK(data_error_of([&] { load_csv(p, opt); }) ==
          "data error: " + p + ":3:2: label 12 is out of range [0, 10)");
    opt.task = Task::Regression;  // any finite number is a regression target
    CHECK(load_csv(p, opt).y == std::vector<float>{0, 12});
  }
  SECTION("target column") {
    const std::string p = dir.file("t.csv");
    write_text(p, "a,b,label\n1,2,0\n");
    opt.target = "zz";
    CHECK_THAT(data_error_of([&] { load_csv(p, opt); }),
               Contains(p) && Contains("no column named \"zz\"") &&
                   Contains("\"a\", \"b\", \"label\""));
    opt.target = "3";
    CHECK_THAT(data_error_of([&] { load_csv(p, opt); }),
               Contains(p) && Contains("index 3 is out of range") && Contains("3 columns"));
    opt.target = "-1";
    CHECK_THAT(data_error_of([&] { load_csv(p, opt); }), Contains("no column named \"-1\""));
  }
  SECTION("empty, header-only, blank-only and missing files; a single column") {
    const std::string p = dir.file("e.csv");
    write_text(p, "");
    CHECK_THAT(data_error_of([&] { load_csv(p, opt); }), Contains(p) && Contains("no data rows"));
    write_text(p, "a,b,c\n");
    CHECK_THAT(data_error_of([&] { load_csv(p, opt); }), Contains(p) && Contains("no data rows"));
    write_text(p, "\n\r\n# only comments\n");
    CHECK_THAT(data_error_of([&] { load_csv(p, opt); }), Contains(p) && Contains("no data rows"));
    const std::string missing = dir.file("missing.csv");
    CHECK(data_error_of([&] { load_csv(missing, opt); }) ==
          "data error: " + missing + ": cannot open: No such file or directory");
    write_text(p, "a\n1\n");
    CHECK_THAT(data_error_of([&] { load_csv(p, opt); }), Contains(p + ":1:") && Contains("2"));
  }
}

// ---------------------------------------------------------------------------------------- split

namespace {

Dataset indexed_dataset(size_t n, Task task) {
  Dataset d;
  d.source = "indexed";
  d.task = task;
  d.n = n;
  d.n_features = 2;
  for (size_t i = 0; i < n; ++i) {
    d.x.push_back(float(i));
    d.x.push_back(-float(i));
  }
  if (task == Task::Classification) {
    d.n_classes = 7;
    for (size_t i = 0; i < n; ++i) d.labels.push_back(int32_t(i % 7));
  } else {
    d.n_targets = 1;
    for (size_t i = 0; i < n; ++i) d.y.push_back(float(i) * 0.5f);
  }
  return d;
}

}  // namespace

TEST_CASE("split_dataset is deterministic, disjoint and covers every sample", "[data]") {
  for (Task task : {Task::Classification, Task::Regression}) {
    const Dataset all = indexed_dataset(101, task);
    const auto [train, eval] = split_dataset(all, 0.2, 5);
    CHECK(eval.n == 20);  // round(20.2)
    CHECK(train.n == 81);
    for (const Dataset* part : {&train, &eval}) {
      CHECK(part->task == task);
      CHECK(part->n_features == 2);
      CHECK(part->n_classes == all.n_classes);
      CHECK(part->n_targets == all.n_targets);
      REQUIRE(part->x.size() == part->n * 2);
      for (size_t i = 0; i < part->n; ++i) {
        const float id = part->x[2 * i];
        CHECK(part->x[2 * i + 1] == -id);  // rows move whole
        if (task == Task::Classification)
          CHECK(part->labels[i] == int32_t(size_t(id) % 7));
        else
          CHECK(part->y[i] == id * 0.5f);
      }
    }
    std::multiset<float> ids;
    for (const Dataset* part : {&train, &eval})
      for (size_t i = 0; i < part->n; ++i) ids.insert(part->x[2 * i]);
    CHECK(ids.size() == 101);
    CHECK(std::set<float>(ids.begin(), ids.end()).size() == 101);
    CHECK(*ids.begin() == 0);
    CHECK(*ids.rbegin() == 100);

    const auto again = split_dataset(all, 0.2, 5);
    CHECK(again.first.x == train.x);
    CHECK(again.second.x == eval.x);
    const auto other = split_dataset(all, 0.2, 6);
    CHECK(other.second.x != eval.x);
    // A shuffle, not a cut: the eval part is not the first 20 samples in order.
    std::vector<float> first20;
    for (int i = 0; i < 20; ++i) first20.insert(first20.end(), {float(i), -float(i)});
    CHECK(eval.x != first20);
  }
}

TEST_CASE("split_dataset rejects bad fractions and empty parts", "[data]") {
  const Dataset all = indexed_dataset(3, Task::Classification);
  for (double f : {0.0, 1.0, -0.1, 1.5, std::nan("")}) {
    INFO("fraction " << f);
    CHECK_THAT(data_error_of([&] { split_dataset(all, f, 1); }),
               Contains("indexed") && Contains("not in (0, 1)"));
  }
  CHECK_THAT(data_error_of([&] { split_dataset(all, 0.1, 1); }),
             Contains("eval part empty"));  // round(0.3) = 0
  CHECK_THAT(data_error_of([&] { split_dataset(all, 0.9, 1); }),
             Contains("train part empty"));  // round(2.7) = 3
  CHECK(split_dataset(all, 0.5, 1).second.n == 2);  // round(1.5) = 2
}

// ------------------------------------------------------------------------------------ synthetic

namespace {

// Least-squares fit of y = W x + b (normal equations, Gaussian elimination with pivoting);
// returns, per output, the features' weights followed by the bias.
std::vector<double> fit_linear(const Dataset& d) {
  const size_t f = d.n_features, m = f + 1, outs = d.n_targets;
  std::vector<double> result;
  for (size_t o = 0; o < outs; ++o) {
    std::vector<double> a(m * (m + 1), 0.0);  // [A^T A | A^T y]
    for (size_t i = 0; i < d.n; ++i) {
      std::vector<double> row(m, 1.0);
      for (size_t j = 0; j < f; ++j) row[j] = d.x[i * f + j];
      const double y = d.y[i * outs + o];
      for (size_t r = 0; r < m; ++r) {
        for (size_t c = 0; c < m; ++c) a[r * (m + 1) + c] += row[r] * row[c];
        a[r * (m + 1) + m] += row[r] * y;
      }
    }
    for (size_t k = 0; k < m; ++k) {
      size_t piv = k;
      for (size_t r = k + 1; r < m; ++r)
        if (std::fabs(a[r * (m + 1) + k]) > std::fabs(a[piv * (m + 1) + k])) piv = r;
      for (size_t c = 0; c <= m; ++c) std::swap(a[k * (m + 1) + c], a[piv * (m + 1) + c]);
      for (size_t r = 0; r < m; ++r) {
        if (r == k) continue;
        const double q = a[r * (m + 1) + k] / a[k * (m + 1) + k];
        for (size_t c = k; c <= m; ++c) a[r * (m + 1) + c] -= q * a[k * (m + 1) + c];
      }
    }
    for (size_t k = 0; k < m; ++k) result.push_back(a[k * (m + 1) + m] / a[k * (m + 1) + k]);
  }
  return result;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST_CASE("synthetic regression: deterministic, shared W between streams, noise level", "[data]") {
  SyntheticOptions opt;
  opt.n = 300;
  opt.features = 4;
  opt.outputs = 2;
  opt.noise = 0.0;
  opt.seed = 11;

  const Dataset a = make_synthetic_regression(opt);
  CHECK(a.task == Task::Regression);
  CHECK(a.n == 300);
  CHECK(a.n_features == 4);
  CHECK(a.n_targets == 2);
  CHECK(a.n_outputs() == 2);
  CHECK(a.x.size() == 1200);
  CHECK(a.y.size() == 600);
  const Dataset a2 = make_synthetic_regression(opt);
  CHECK(a2.x == a.x);
  CHECK(a2.y == a.y);

  opt.stream = 1;
  const Dataset b = make_synthetic_regression(opt);
  CHECK(b.x != a.x);

  // The same W and b behind both streams, and a different one for another seed.
  const std::vector<double> wa = fit_linear(a), wb = fit_linear(b);
  CHECK(max_abs_diff(wa, wb) < 1e-5);
  opt.seed = 12;
  const std::vector<double> wc = fit_linear(make_synthetic_regression(opt));
  CHECK(max_abs_diff(wa, wc) > 0.05);
  // W, b ~ N(0, 1/features): no weight is absurdly large for a std of 0.5.
  for (double w : wa) CHECK(std::fabs(w) < 2.5);

  // Noise: residuals against the true W are N(0, noise^2).
  opt.seed = 11;
  opt.stream = 0;
  opt.noise = 0.3;
  opt.n = 20000;
  const Dataset noisy = make_synthetic_regression(opt);
  double sum = 0, sq = 0;
  for (size_t i = 0; i < noisy.n; ++i)
    for (size_t o = 0; o < 2; ++o) {
      double pred = wa[o * 5 + 4];
      for (size_t j = 0; j < 4; ++j) pred += wa[o * 5 + j] * noisy.x[i * 4 + j];
      const double r = noisy.y[i * 2 + o] - pred;
      sum += r;
      sq += r * r;
    }
  const double cnt = double(noisy.n * 2);
  const double mean = sum / cnt, sd = std::sqrt(sq / cnt - mean * mean);
  CHECK(std::fabs(mean) < 0.01);
  CHECK(sd == Approx(0.3).epsilon(0.02));
  // x ~ N(0, 1)
  double xs = 0, xq = 0;
  for (float v : noisy.x) {
    xs += v;
    xq += double(v) * v;
  }
  CHECK(std::fabs(xs / double(noisy.x.size())) < 0.02);
  CHECK(xq / double(noisy.x.size()) == Approx(1.0).epsilon(0.03));
}

TEST_CASE("synthetic regression rejects empty shapes and bad noise", "[data]") {
  SyntheticOptions opt;
  opt.features = 0;
  CHECK_THAT(data_error_of([&] { make_synthetic_regression(opt); }), Contains("synthetic"));
  opt.features = 3;
  opt.noise = -1;
  CHECK_THAT(data_error_of([&] { make_synthetic_regression(opt); }), Contains("noise"));
}

// ----------------------------------------------------------------------------------- normalizer

namespace {

// Column j's mean and (population) std over the data set.
std::pair<double, double> column_stats(const Dataset& d, size_t j) {
  double s = 0, q = 0;
  for (size_t i = 0; i < d.n; ++i) s += d.x[i * d.n_features + j];
  const double m = s / double(d.n);
  for (size_t i = 0; i < d.n; ++i) {
    const double dv = d.x[i * d.n_features + j] - m;
    q += dv * dv;
  }
  return {m, std::sqrt(q / double(d.n))};
}

Dataset three_columns(size_t n, uint64_t seed) {
  Rng rng(seed);
  Dataset d;
  d.source = "three";
  d.n = n;
  d.n_features = 3;
  d.n_classes = 2;
  for (size_t i = 0; i < n; ++i) {
    d.x.push_back(float(5 + 2 * rng.normal()));
    d.x.push_back(7.0f);  // constant
    d.x.push_back(float(-1000 + 0.01 * double(i)));
    d.labels.push_back(int32_t(i % 2));
  }
  return d;
}

}  // namespace

TEST_CASE("normalizer: per-feature and global z-scores, constant columns, checks", "[data]") {
  const Dataset train = three_columns(2000, 1);
  SECTION("per feature") {
    Normalizer norm;
    norm.fit(train, Normalization::PerFeature);
    REQUIRE(norm.mean.size() == 3);
    REQUIRE(norm.inv_std.size() == 3);
    CHECK(norm.mean[1] == 7.0f);
    CHECK(norm.inv_std[1] == 1.0f);
    Dataset d = train;
    norm.apply(d);
    for (size_t j : {0u, 2u}) {
      const auto [m, s] = column_stats(d, j);
      CHECK(std::fabs(m) < 1e-3);
      CHECK(s == Approx(1.0).epsilon(1e-3));
    }
    for (size_t i = 0; i < d.n; ++i) CHECK(d.x[i * 3 + 1] == 0.0f);  // only centred
    // Eval data uses the training statistics.
    Dataset eval = three_columns(10, 2);
    const Dataset raw = eval;
    norm.apply(eval);
    for (size_t k = 0; k < eval.x.size(); ++k)
      CHECK(eval.x[k] == Approx((raw.x[k] - norm.mean[k % 3]) * norm.inv_std[k % 3]));
  }
  SECTION("global: one mean and std over everything") {
    Normalizer norm;
    norm.fit(train, Normalization::Global);
    REQUIRE(norm.mean.size() == 1);
    REQUIRE(norm.inv_std.size() == 1);
    Dataset d = train;
    norm.apply(d);
    Dataset flat = d;  // all values as one column
    flat.n_features = 1;
    flat.n = d.x.size();
    const auto [m, s] = column_stats(flat, 0);
    CHECK(std::fabs(m) < 1e-4);
    CHECK(s == Approx(1.0).epsilon(1e-4));
  }
  SECTION("global on a constant data set only centres") {
    Dataset c = train;
    std::fill(c.x.begin(), c.x.end(), 3.0f);
    Normalizer norm;
    norm.fit(c, Normalization::Global);
    CHECK(norm.inv_std[0] == 1.0f);
    norm.apply(c);
    for (float v : c.x) CHECK(v == 0.0f);
  }
  SECTION("none changes nothing") {
    Normalizer norm;
    norm.fit(train, Normalization::None);
    Dataset d = train;
    norm.apply(d);
    CHECK(d.x == train.x);
  }
  SECTION("applying to another feature count is an internal error") {
    for (Normalization m : {Normalization::Global, Normalization::PerFeature}) {
      Normalizer norm;
      norm.fit(train, m);
      Dataset other = indexed_dataset(5, Task::Classification);  // 2 features
      try {
        norm.apply(other);
        FAIL("no error");
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::Internal);
      }
    }
  }
}

// -------------------------------------------------------------------------------- Fashion-MNIST

TEST_CASE("Fashion-MNIST (Debian's dataset-fashion-mnist) loads", "[data][fmnist]") {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  if (!fs::is_directory(dir)) {
    WARN("AMP_TEST_SKIPPED: " << dir << " does not exist (install dataset-fashion-mnist)");
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Dataset train = load_idx_dataset(dir + "train-images-idx3-ubyte.gz",
                                         dir + "train-labels-idx1-ubyte.gz", 10);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("train set loaded in " << seconds << " s");
  CHECK(train.n == 60000);
  CHECK(train.n_features == 784);
  CHECK(train.n_classes == 10);
  REQUIRE(train.x.size() == 60000u * 784u);
  const auto [lo, hi] = std::minmax_element(train.x.begin(), train.x.end());
  CHECK(*lo == 0.0f);
  CHECK(*hi == 1.0f);
  std::vector<int> counts(10, 0);
  for (int32_t l : train.labels) ++counts.at(size_t(l));
  CHECK(counts == std::vector<int>(10, 6000));

  // The well-known normalization constants of Fashion-MNIST: (x - 0.286) / 0.353.
  Normalizer norm;
  norm.fit(train, Normalization::Global);
  CHECK(norm.mean[0] == Approx(0.2860).margin(0.001));
  CHECK(1.0 / norm.inv_std[0] == Approx(0.3530).margin(0.001));

  const Dataset test = load_idx_dataset(dir + "t10k-images-idx3-ubyte.gz",
                                        dir + "t10k-labels-idx1-ubyte.gz", 0);
  CHECK(test.n == 10000);
  CHECK(test.n_features == 784);
  CHECK(test.n_classes == 10);
  std::vector<int> tcounts(10, 0);
  for (int32_t l : test.labels) ++tcounts.at(size_t(l));
  CHECK(tcounts == std::vector<int>(10, 1000));
}
