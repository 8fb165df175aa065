//===- RuntimeTest.cpp - Tests for the runtime core -------------*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//
//
// Tensors and buffers, .npy I/O (including files written by numpy when
// python3 with numpy is available), the weight pack, the thread pool, the
// execution context and the model command line (modelMain), driven through a
// tiny hand-written model description.
//
//===----------------------------------------------------------------------===//

#include "RunMain.h"
#include "sparsec/rt/Runtime.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>

#include <unistd.h>

using namespace sparsec::rt;
namespace fs = std::filesystem;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// A fresh directory, removed with its contents at scope exit.
class ScratchDir {
public:
  ScratchDir() {
    static int counter = 0;
    path_ = fs::path(testing::TempDir()) /
            ("sparsec-rt-" + std::to_string(::getpid()) + "-" +
             std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string &name) const {
    return (path_ / name).string();
  }
  std::string str() const { return path_.string(); }

private:
  fs::path path_;
};

void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

/// A .npy file with a hand-written header dict, for malformed input.
std::string makeNpy(const std::string &dict, const std::string &data,
                    int major = 1) {
  std::string header = dict + "\n";
  std::string out("\x93NUMPY", 6);
  out += char(major);
  out += char(0);
  size_t len = header.size();
  out += char(len & 0xff);
  out += char((len >> 8) & 0xff);
  if (major != 1) {
    out += char((len >> 16) & 0xff);
    out += char((len >> 24) & 0xff);
  }
  return out + header + data;
}

Tensor makeTensor(void *data, DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.rank = int(shape.size());
  for (size_t i = 0; i < shape.size(); ++i)
    t.shape[i] = shape[i];
  return t;
}

bool havePythonNumpy() {
  static int result = -1;
  if (result < 0)
    result = std::system("python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  return result == 1;
}

const std::vector<DType> kAllDTypes = {
    DType::f32, DType::f64, DType::f16, DType::i64, DType::i32, DType::i16,
    DType::i8,  DType::u8,  DType::u16, DType::u32, DType::u64, DType::b1};

//===----------------------------------------------------------------------===//
// DType, Tensor, Buffer
//===----------------------------------------------------------------------===//

TEST(DTypeTest, SizesNamesDescriptors) {
  EXPECT_EQ(dtypeSize(DType::f32), 4u);
  EXPECT_EQ(dtypeSize(DType::f16), 2u);
  EXPECT_EQ(dtypeSize(DType::u64), 8u);
  EXPECT_EQ(dtypeSize(DType::b1), 1u);
  EXPECT_STREQ(dtypeName(DType::f32), "float32");
  EXPECT_STREQ(dtypeName(DType::u16), "uint16");
  EXPECT_STREQ(dtypeName(DType::b1), "bool");
  EXPECT_STREQ(dtypeDescr(DType::i64), "<i8");
  EXPECT_STREQ(dtypeDescr(DType::i8), "|i1");
  EXPECT_STREQ(dtypeDescr(DType::u8), "|u1");
  EXPECT_STREQ(dtypeDescr(DType::b1), "|b1");
  EXPECT_STREQ(dtypeDescr(DType::f16), "<f2");
  // The descriptor's size matches dtypeSize for every type.
  for (DType t : kAllDTypes)
    EXPECT_EQ(size_t(dtypeDescr(t)[2] - '0'), dtypeSize(t)) << dtypeName(t);
}

TEST(TensorTest, NumelAndDescribe) {
  Tensor scalar = makeTensor(nullptr, DType::i64, {});
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.bytes(), 8u);
  EXPECT_EQ(scalar.describe(), "int64[]");
  Tensor t = makeTensor(nullptr, DType::f32, {1, 71, 256});
  EXPECT_EQ(t.numel(), 71 * 256);
  EXPECT_EQ(t.describe(), "float32[1, 71, 256]");
  EXPECT_EQ(makeTensor(nullptr, DType::b1, {3, 0}).numel(), 0);
}

// The view a linear computing generate's logits reads (emitted for
// linears whose only use is a model output).
TEST(TensorTest, LastPositionView) {
  std::vector<float> x(1 * 5 * 3);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(i);
  ModelDesc desc{};
  Context ctx(desc, nullptr, 1);
  Tensor t{x.data(), DType::f32, 3, {1, 5, 3}};
  // Not asked for: the input itself.
  Tensor v = lastPosition(ctx, t, 1);
  EXPECT_EQ(v.data, t.data);
  EXPECT_EQ(v.shape[1], 5);
  // Asked for output 1: its last position, [1, 1, 3].
  ctx.lastPositionOutput = 1;
  v = lastPosition(ctx, t, 1);
  ASSERT_EQ(v.rank, 3);
  EXPECT_EQ(v.shape[0], 1);
  EXPECT_EQ(v.shape[1], 1);
  EXPECT_EQ(v.shape[2], 3);
  EXPECT_EQ(v.as<float>()[0], 12.0f);
  EXPECT_EQ(v.as<float>()[2], 14.0f);
  // Another output, the argmax's output, a batch of 2, one position or
  // another rank: the input itself.
  EXPECT_EQ(lastPosition(ctx, t, 0).data, t.data);
  ctx.argmaxOutput = 1;
  EXPECT_EQ(lastPosition(ctx, t, 1).data, t.data);
  ctx.argmaxOutput = -1;
  Tensor b2{x.data(), DType::f32, 3, {2, 2, 3}};
  EXPECT_EQ(lastPosition(ctx, b2, 1).shape[1], 2);
  Tensor one{x.data(), DType::f32, 3, {1, 1, 3}};
  EXPECT_EQ(lastPosition(ctx, one, 1).data, one.data);
  Tensor r2{x.data(), DType::f32, 2, {5, 3}};
  EXPECT_EQ(lastPosition(ctx, r2, 1).data, r2.data);
  // 16-bit elements: the offset counts their bytes.
  Tensor h{x.data(), DType::f16, 3, {1, 4, 2}};
  EXPECT_EQ(static_cast<char *>(lastPosition(ctx, h, 1).data) -
                static_cast<char *>(h.data),
            2 * 3 * 2);
}

TEST(BufferTest, AlignedGrowableMovable) {
  Buffer b;
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.capacity(), 0u);
  ASSERT_TRUE(b.ensure(0));
  EXPECT_NE(b.data(), nullptr);
  ASSERT_TRUE(b.ensure(100));
  EXPECT_GE(b.capacity(), 100u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  void *before = b.data();
  ASSERT_TRUE(b.ensure(50)); // No shrink, no reallocation.
  EXPECT_EQ(b.data(), before);
  ASSERT_TRUE(b.ensure(1 << 20));
  // Grown again: a quarter of headroom, so a slowly growing tensor (a
  // cache's present) does not reallocate every step.
  EXPECT_GE(b.capacity(), (size_t(1) << 20) + (size_t(1) << 18));
  before = b.data();
  ASSERT_TRUE(b.ensure((1 << 20) + 1000));
  EXPECT_EQ(b.data(), before);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  std::memset(b.data(), 0x5a, 1 << 20);

  Buffer moved(std::move(b));
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.capacity(), 0u);
  EXPECT_GE(moved.capacity(), size_t(1) << 20);
  Buffer assigned;
  ASSERT_TRUE(assigned.ensure(10));
  assigned = std::move(moved);
  EXPECT_EQ(moved.data(), nullptr);
  EXPECT_EQ(static_cast<unsigned char *>(assigned.data())[12345], 0x5a);

  Buffer huge;
  EXPECT_FALSE(huge.ensure(~size_t(0) - 10));
}

//===----------------------------------------------------------------------===//
// .npy
//===----------------------------------------------------------------------===//

TEST(NpyTest, RoundTripEveryDType) {
  ScratchDir dir;
  std::mt19937 rng(42);
  for (DType dtype : kAllDTypes) {
    for (const std::vector<int64_t> &shape : std::vector<std::vector<int64_t>>{
             {}, {5}, {2, 3}, {2, 1, 3, 4}, {0, 3}, {1, 2, 1, 2, 1, 2, 1, 2}}) {
      Tensor t = makeTensor(nullptr, dtype, shape);
      std::vector<unsigned char> data(t.bytes());
      for (auto &byte : data)
        byte = dtype == DType::b1 ? rng() % 2 : uint8_t(rng());
      t.data = data.data();
      std::string path = dir.file("t.npy"), error;
      ASSERT_TRUE(writeNpy(path, t, error)) << error;
      // numpy aligns the data to 64 bytes; so do we.
      std::string bytes = readBytes(path);
      EXPECT_EQ((bytes.size() - t.bytes()) % 64, 0u);

      Buffer storage;
      Tensor back;
      ASSERT_TRUE(readNpy(path, storage, back, error)) << error;
      EXPECT_EQ(back.describe(), t.describe());
      EXPECT_EQ(back.dtype, dtype);
      ASSERT_EQ(back.bytes(), t.bytes());
      if (!data.empty()) {
        EXPECT_EQ(std::memcmp(back.data, data.data(), data.size()), 0);
      }
    }
  }
}

TEST(NpyTest, WriteErrors) {
  std::string error;
  float x = 1;
  Tensor t = makeTensor(&x, DType::f32, {});
  EXPECT_FALSE(writeNpy("/nonexistent-dir/x.npy", t, error));
  EXPECT_NE(error.find("/nonexistent-dir/x.npy"), std::string::npos);
  Tensor bad = makeTensor(nullptr, DType::f32, {3});
  EXPECT_FALSE(writeNpy("/tmp/unused.npy", bad, error));
}

TEST(NpyTest, HeaderVariants) {
  ScratchDir dir;
  std::string path = dir.file("h.npy");
  int32_t values[3] = {1, -2, 3};
  std::string data(reinterpret_cast<char *>(values), sizeof(values));
  const char *dicts[] = {
      "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }",
      "{\"descr\":\"<i4\",\"fortran_order\":False,\"shape\":(3,)}",
      "{ 'shape' : ( 3L , ) , 'fortran_order' : True , 'descr' : '=i4' }",
      "  {'descr': '<i4', 'fortran_order': False, 'shape': (3,)}     ",
  };
  for (const char *dict : dicts) {
    for (int major : {1, 2, 3}) {
      writeBytes(path, makeNpy(dict, data, major));
      Buffer storage;
      Tensor t;
      std::string error;
      ASSERT_TRUE(readNpy(path, storage, t, error)) << dict << ": " << error;
      EXPECT_EQ(t.describe(), "int32[3]");
      EXPECT_EQ(t.as<int32_t>()[1], -2);
    }
  }
  // One-byte types may say any byte order.
  writeBytes(path, makeNpy("{'descr': '>u1', 'fortran_order': False, "
                           "'shape': (2,)}",
                           "\x07\x09"));
  Buffer storage;
  Tensor t;
  std::string error;
  ASSERT_TRUE(readNpy(path, storage, t, error)) << error;
  EXPECT_EQ(t.describe(), "uint8[2]");
}

/// Expects readNpy to fail with a message naming the file and containing
/// `what`.
void expectNpyError(const std::string &path, const std::string &what) {
  Buffer storage;
  Tensor t;
  std::string error;
  EXPECT_FALSE(readNpy(path, storage, t, error)) << what;
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find(what), std::string::npos)
      << "expected '" << what << "' in: " << error;
}

TEST(NpyTest, Errors) {
  ScratchDir dir;
  std::string path = dir.file("e.npy");
  expectNpyError(dir.file("missing.npy"), "cannot open");
  expectNpyError(dir.str(), "");

  writeBytes(path, "");
  expectNpyError(path, "not a .npy file");
  writeBytes(path, "PK\x03\x04 this is a zip file");
  expectNpyError(path, "not a .npy file");

  std::string f4 = std::string(12, '\0');
  auto dict = [](const std::string &descr, const std::string &fortran,
                 const std::string &shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + fortran +
           ", 'shape': " + shape + ", }";
  };
  writeBytes(path, makeNpy(dict("<f4", "False", "(3,)"), f4.substr(0, 7)));
  expectNpyError(path, "truncated: expected 12 bytes of data, found 7");
  writeBytes(path, makeNpy(dict(">f4", "False", "(3,)"), f4));
  expectNpyError(path, "big-endian");
  writeBytes(path, makeNpy(dict("<f4", "True", "(3, 1)"), f4));
  expectNpyError(path, "Fortran-ordered arrays are not supported");
  writeBytes(path, makeNpy(dict("<c8", "False", "(3,)"), f4));
  expectNpyError(path, "unsupported dtype '<c8'");
  writeBytes(path, makeNpy(dict("<U3", "False", "(3,)"), f4));
  expectNpyError(path, "unsupported dtype '<U3'");
  writeBytes(path, makeNpy(dict("O", "False", "(3,)"), f4));
  expectNpyError(path, "unsupported dtype 'O'");
  writeBytes(path, makeNpy("{'descr': [('a', '<f4')], 'fortran_order': "
                           "False, 'shape': (3,)}",
                           f4));
  expectNpyError(path, "structured");
  writeBytes(path, makeNpy(dict("<f4", "False", "(1,1,1,1,1,1,1,1,3)"), f4));
  expectNpyError(path, "rank above 8");
  writeBytes(path,
             makeNpy(dict("<f4", "False", "(99999999999999999999,)"), f4));
  expectNpyError(path, "too large");
  writeBytes(path,
             makeNpy(dict("<f4", "False", "(4294967296, 4294967296)"), f4));
  expectNpyError(path, "too large");
  writeBytes(path, makeNpy(dict("<f4", "False", "(-3,)"), f4));
  expectNpyError(path, "bad dimension");
  writeBytes(path, makeNpy(dict("<f4", "Maybe", "(3,)"), f4));
  expectNpyError(path, "fortran_order");
  writeBytes(path, makeNpy("{'descr': '<f4', 'shape': (3,)}", f4));
  expectNpyError(path, "missing key 'fortran_order'");
  writeBytes(path, makeNpy("{'descr': '<f4', 'descr': '<f4', "
                           "'fortran_order': False, 'shape': (3,)}",
                           f4));
  expectNpyError(path, "duplicate key");
  writeBytes(path, makeNpy("{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (3,), 'extra': 1}",
                           f4));
  expectNpyError(path, "unexpected key 'extra'");
  writeBytes(path, makeNpy("this is not a dict", f4));
  expectNpyError(path, "header is not a dict");
  writeBytes(path, makeNpy("{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (3,)} junk",
                           f4));
  expectNpyError(path, "trailing characters");
  std::string v9 = makeNpy(dict("<f4", "False", "(3,)"), f4);
  v9[6] = 9;
  writeBytes(path, v9);
  expectNpyError(path, "unsupported .npy format version 9.0");
  // A header length pointing far past the end of the file.
  std::string longHeader = makeNpy(dict("<f4", "False", "(3,)"), f4, 2);
  longHeader[10] = '\x7f';
  writeBytes(path, longHeader);
  expectNpyError(path, "header");
}

TEST(NpyTest, EveryPrefixFailsCleanly) {
  ScratchDir dir;
  float values[6] = {1, 2, 3, 4, 5, 6};
  Tensor t = makeTensor(values, DType::f32, {2, 3});
  std::string path = dir.file("full.npy"), error;
  ASSERT_TRUE(writeNpy(path, t, error)) << error;
  std::string full = readBytes(path);
  std::string cut = dir.file("cut.npy");
  for (size_t len = 0; len < full.size(); ++len) {
    writeBytes(cut, full.substr(0, len));
    Buffer storage;
    Tensor back;
    EXPECT_FALSE(readNpy(cut, storage, back, error)) << "prefix " << len;
    EXPECT_NE(error.find(cut), std::string::npos);
  }
  for (int major : {2, 3}) {
    std::string v =
        makeNpy("{'descr': '<f4', 'fortran_order': False, "
                "'shape': (2, 3), }",
                std::string(reinterpret_cast<char *>(values), 24), major);
    for (size_t len = 0; len < v.size(); ++len) {
      writeBytes(cut, v.substr(0, len));
      Buffer storage;
      Tensor back;
      EXPECT_FALSE(readNpy(cut, storage, back, error)) << "prefix " << len;
    }
  }
}

TEST(NpyTest, RandomMutationsNeverCrash) {
  ScratchDir dir;
  int64_t values[4] = {1, 2, 3, 4};
  Tensor t = makeTensor(values, DType::i64, {2, 2});
  std::string path = dir.file("m.npy"), error;
  ASSERT_TRUE(writeNpy(path, t, error)) << error;
  std::string full = readBytes(path);
  std::mt19937 rng(7);
  const char alphabet[] = "{}()[],:' \"0123456789LTrueFalse<>|=fiub\x00\xff";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes = full;
    int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      // Mostly mutate the header, where the parser lives.
      size_t pos = rng() % 4 ? rng() % 128 : rng() % bytes.size();
      pos = std::min(pos, bytes.size() - 1);
      switch (rng() % 3) {
      case 0:
        bytes[pos] = char(rng());
        break;
      case 1:
        bytes[pos] = alphabet[rng() % (sizeof(alphabet) - 1)];
        break;
      default:
        bytes.erase(pos, 1 + rng() % 8);
        break;
      }
      if (bytes.empty())
        bytes = "x";
    }
    writeBytes(path, bytes);
    Buffer storage;
    Tensor back;
    if (readNpy(path, storage, back, error)) {
      EXPECT_LE(back.bytes(), bytes.size());
      EXPECT_LE(back.rank, kMaxRank);
    }
  }
}

TEST(NpyTest, ReadsFilesWrittenByNumpy) {
  if (!havePythonNumpy())
    GTEST_SKIP() << "python3 with numpy is not available";
  ScratchDir dir;
  std::string script = dir.file("gen.py");
  writeBytes(script, R"(import sys, numpy as np
from numpy.lib import format as fmt
d = sys.argv[1]
np.save(d + '/f32.npy', np.arange(6, dtype=np.float32).reshape(2, 3) / 4)
np.save(d + '/i64s.npy', np.int64(-7))
np.save(d + '/f32s.npy', np.array(2.5, dtype=np.float32))
np.save(d + '/b1.npy', np.array([True, False, True]))
np.save(d + '/f16.npy', np.array([1.5, -2.0], dtype=np.float16))
np.save(d + '/u8r4.npy', np.arange(24, dtype=np.uint8).reshape(1, 2, 3, 4))
np.save(d + '/empty.npy', np.zeros((0, 3), dtype=np.int32))
np.save(d + '/u16.npy', np.array([65535, 1], dtype=np.uint16))
with open(d + '/v2.npy', 'wb') as f:
    fmt.write_array(f, np.array([1.0, 2.0]), version=(2, 0))
with open(d + '/v3.npy', 'wb') as f:
    fmt.write_array(f, np.array([[1, 2], [3, 4]], dtype=np.int32), version=(3, 0))
np.save(d + '/be.npy', np.arange(3, dtype='>f4'))
np.save(d + '/fortran.npy', np.asfortranarray(np.arange(6.0).reshape(2, 3)))
np.save(d + '/c8.npy', np.zeros(3, dtype=np.complex64))
np.save(d + '/rec.npy', np.zeros(2, dtype=[('a', '<f4'), ('b', '<i4')]))
)");
  ASSERT_EQ(std::system(("python3 " + script + " " + dir.str()).c_str()), 0);

  auto load = [&](const std::string &name, Buffer &storage, Tensor &t) {
    std::string error;
    bool ok = readNpy(dir.file(name), storage, t, error);
    EXPECT_TRUE(ok) << error;
    return ok;
  };
  Buffer s;
  Tensor t;
  if (load("f32.npy", s, t)) {
    EXPECT_EQ(t.describe(), "float32[2, 3]");
    EXPECT_EQ(t.as<float>()[5], 1.25f);
  }
  if (load("i64s.npy", s, t)) {
    EXPECT_EQ(t.describe(), "int64[]");
    EXPECT_EQ(t.as<int64_t>()[0], -7);
  }
  if (load("f32s.npy", s, t)) {
    EXPECT_EQ(t.describe(), "float32[]");
    EXPECT_EQ(t.as<float>()[0], 2.5f);
  }
  if (load("b1.npy", s, t)) {
    EXPECT_EQ(t.describe(), "bool[3]");
    EXPECT_EQ(t.as<uint8_t>()[0], 1);
    EXPECT_EQ(t.as<uint8_t>()[1], 0);
  }
  if (load("f16.npy", s, t)) {
    EXPECT_EQ(t.describe(), "float16[2]");
    EXPECT_EQ(t.as<uint16_t>()[0], 0x3e00); // 1.5
    EXPECT_EQ(t.as<uint16_t>()[1], 0xc000); // -2
  }
  if (load("u8r4.npy", s, t)) {
    EXPECT_EQ(t.describe(), "uint8[1, 2, 3, 4]");
    EXPECT_EQ(t.as<uint8_t>()[23], 23);
  }
  if (load("empty.npy", s, t)) {
    EXPECT_EQ(t.describe(), "int32[0, 3]");
  }
  if (load("u16.npy", s, t)) {
    EXPECT_EQ(t.as<uint16_t>()[0], 65535);
  }
  if (load("v2.npy", s, t)) {
    EXPECT_EQ(t.describe(), "float64[2]");
    EXPECT_EQ(t.as<double>()[1], 2.0);
  }
  if (load("v3.npy", s, t)) {
    EXPECT_EQ(t.describe(), "int32[2, 2]");
    EXPECT_EQ(t.as<int32_t>()[3], 4);
  }
  expectNpyError(dir.file("be.npy"), "big-endian");
  expectNpyError(dir.file("fortran.npy"), "Fortran-ordered");
  expectNpyError(dir.file("c8.npy"), "unsupported dtype '<c8'");
  expectNpyError(dir.file("rec.npy"), "structured");
}

TEST(NpyTest, NumpyReadsOurFiles) {
  if (!havePythonNumpy())
    GTEST_SKIP() << "python3 with numpy is not available";
  ScratchDir dir;
  std::string error;
  float f[6] = {0.5f, -1, 2, 3, 4, 5};
  ASSERT_TRUE(
      writeNpy(dir.file("f.npy"), makeTensor(f, DType::f32, {1, 2, 3}), error));
  int64_t scalar = -42;
  ASSERT_TRUE(
      writeNpy(dir.file("s.npy"), makeTensor(&scalar, DType::i64, {}), error));
  uint8_t b[2] = {1, 0};
  ASSERT_TRUE(
      writeNpy(dir.file("b.npy"), makeTensor(b, DType::b1, {2}), error));
  ASSERT_TRUE(writeNpy(dir.file("z.npy"),
                       makeTensor(nullptr, DType::u16, {2, 0, 1}), error));
  std::string script = dir.file("check.py");
  writeBytes(script, R"(import sys, numpy as np
d = sys.argv[1]
f = np.load(d + '/f.npy')
assert f.dtype == np.float32 and f.shape == (1, 2, 3), f
assert f[0, 0, 0] == 0.5 and f[0, 1, 2] == 5
s = np.load(d + '/s.npy')
assert s.dtype == np.int64 and s.shape == () and s == -42, s
b = np.load(d + '/b.npy')
assert b.dtype == np.bool_ and list(b) == [True, False], b
z = np.load(d + '/z.npy')
assert z.dtype == np.uint16 and z.shape == (2, 0, 1), z
)");
  EXPECT_EQ(std::system(("python3 " + script + " " + dir.str()).c_str()), 0);
}

//===----------------------------------------------------------------------===//
// Weight pack
//===----------------------------------------------------------------------===//

TEST(WeightPackTest, Fnv1a64) {
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ULL);
  // Chaining through the seed equals hashing the concatenation.
  EXPECT_EQ(fnv1a64("bar", 3, fnv1a64("foo", 3)), fnv1a64("foobar", 6));
}

struct PackFixture {
  std::vector<std::string> data;
  std::vector<std::pair<const void *, size_t>> segments;
  uint64_t checksum = 0;

  PackFixture() {
    data = {std::string(100, 'a'), std::string(), std::string(64, 'b'),
            std::string(1, 'c'), std::string(1000, 'd')};
    for (size_t i = 0; i < data[4].size(); ++i)
      data[4][i] = char(i * 7);
    for (const std::string &d : data)
      segments.emplace_back(d.data(), d.size());
  }
  void write(const std::string &path) {
    std::string error;
    ASSERT_TRUE(writeWeightPack(path, segments, checksum, error)) << error;
  }
};

TEST(WeightPackTest, RoundTrip) {
  ScratchDir dir;
  PackFixture fx;
  std::string path = dir.file("w.pack");
  fx.write(path);
  std::string bytes = readBytes(path);
  ASSERT_GE(bytes.size(), 64u);
  EXPECT_EQ(bytes.substr(0, 8), "SPCWPACK");

  std::string error;
  auto pack = WeightPack::open(path, 5, fx.checksum, true, error);
  ASSERT_TRUE(pack) << error;
  EXPECT_EQ(pack->count(), 5u);
  for (uint32_t i = 0; i < 5; ++i) {
    EXPECT_EQ(pack->segmentBytes(i), fx.data[i].size());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pack->segment(i)) % 64, 0u) << i;
    EXPECT_EQ(
        std::memcmp(pack->segment(i), fx.data[i].data(), fx.data[i].size()), 0);
  }
  EXPECT_EQ(pack->segment(5), nullptr);
  EXPECT_EQ(pack->segmentBytes(5), 0u);

  // The checksum covers the payload as laid out on disk.
  uint64_t payloadOffset, payloadBytes;
  std::memcpy(&payloadOffset, bytes.data() + 24, 8);
  std::memcpy(&payloadBytes, bytes.data() + 32, 8);
  EXPECT_EQ(payloadOffset % 64, 0u);
  ASSERT_LE(payloadOffset + payloadBytes, bytes.size());
  EXPECT_EQ(fnv1a64(bytes.data() + payloadOffset, payloadBytes), fx.checksum);

  // An empty pack.
  uint64_t emptyChecksum = 0;
  ASSERT_TRUE(writeWeightPack(dir.file("e.pack"), {}, emptyChecksum, error));
  auto empty =
      WeightPack::open(dir.file("e.pack"), 0, emptyChecksum, true, error);
  ASSERT_TRUE(empty) << error;
  EXPECT_EQ(empty->count(), 0u);
}

void expectPackError(const std::string &path, uint32_t count, uint64_t checksum,
                     bool verify, const std::string &what) {
  std::string error;
  auto pack = WeightPack::open(path, count, checksum, verify, error);
  EXPECT_FALSE(pack) << what;
  EXPECT_NE(error.find("'" + path + "'"), std::string::npos) << error;
  EXPECT_NE(error.find(what), std::string::npos)
      << "expected '" << what << "' in: " << error;
}

TEST(WeightPackTest, Errors) {
  ScratchDir dir;
  PackFixture fx;
  std::string good = dir.file("good.pack"), path = dir.file("bad.pack");
  fx.write(good);
  std::string bytes = readBytes(good);
  uint64_t payloadOffset;
  std::memcpy(&payloadOffset, bytes.data() + 24, 8);

  expectPackError(dir.file("missing.pack"), 5, fx.checksum, true,
                  "cannot open weight file");
  expectPackError(dir.str(), 5, fx.checksum, true, "cannot open weight file");
  expectPackError(good, 4, fx.checksum, true, "belongs to a different model");
  expectPackError(good, 5, fx.checksum ^ 1, true,
                  "belongs to a different model");

  writeBytes(path, "");
  expectPackError(path, 5, fx.checksum, true, "is not a sparsec weight pack");
  std::string badMagic = bytes;
  badMagic[3] = 'X';
  writeBytes(path, badMagic);
  expectPackError(path, 5, fx.checksum, true, "is not a sparsec weight pack");
  std::string badVersion = bytes;
  badVersion[8] = 2;
  writeBytes(path, badVersion);
  expectPackError(path, 5, fx.checksum, true, "version");

  writeBytes(path, bytes.substr(0, bytes.size() - 1));
  expectPackError(path, 5, fx.checksum, true, "is truncated");

  // A flipped payload byte, in a segment or in the padding between two.
  for (size_t offset :
       {size_t(10), size_t(110), bytes.size() - 1 - payloadOffset}) {
    std::string corrupt = bytes;
    corrupt[payloadOffset + offset] ^= 0x10;
    writeBytes(path, corrupt);
    expectPackError(path, 5, fx.checksum, true,
                    "is corrupt: checksum mismatch");
    // Without verification the (cheap) open succeeds.
    std::string error;
    EXPECT_TRUE(WeightPack::open(path, 5, fx.checksum, false, error)) << error;
  }

  // A table entry pointing outside the payload.
  std::string badTable = bytes;
  uint64_t huge = ~uint64_t(0) - 63;
  std::memcpy(&badTable[64 + 16 * 2], &huge, 8);
  writeBytes(path, badTable);
  expectPackError(path, 5, fx.checksum, false, "is corrupt");
  std::string misaligned = bytes;
  uint64_t one = 1;
  std::memcpy(&misaligned[64 + 16 * 2], &one, 8);
  writeBytes(path, misaligned);
  expectPackError(path, 5, fx.checksum, false, "is corrupt");
  std::string bigSize = bytes;
  std::memcpy(&bigSize[64 + 16 * 4 + 8], &huge, 8);
  writeBytes(path, bigSize);
  expectPackError(path, 5, fx.checksum, false, "is corrupt");

  // Header offsets pointing past the end of the file.
  std::string badOffsets = bytes;
  std::memcpy(&badOffsets[16], &huge, 8);
  writeBytes(path, badOffsets);
  expectPackError(path, 5, fx.checksum, false, "");
  badOffsets = bytes;
  std::memcpy(&badOffsets[32], &huge, 8);
  writeBytes(path, badOffsets);
  expectPackError(path, 5, fx.checksum, false, "is truncated");
}

TEST(WeightPackTest, EveryPrefixFailsCleanly) {
  ScratchDir dir;
  PackFixture fx;
  std::string good = dir.file("good.pack"), path = dir.file("cut.pack");
  fx.write(good);
  std::string bytes = readBytes(good);
  for (size_t len = 0; len < bytes.size(); ++len) {
    writeBytes(path, bytes.substr(0, len));
    std::string error;
    EXPECT_FALSE(WeightPack::open(path, 5, fx.checksum, true, error))
        << "prefix " << len;
    EXPECT_FALSE(error.empty());
  }
}

TEST(WeightPackTest, StreamingWriterMatchesWholePack) {
  // Segment by segment gives the same bytes and checksum as the whole-pack
  // writer (which the compiler's packer and opt_synth's rebuild rely on).
  ScratchDir dir;
  PackFixture fx;
  fx.write(dir.file("whole.pack"));
  WeightPackWriter writer;
  std::string error;
  uint64_t checksum = 0;
  ASSERT_TRUE(writer.open(dir.file("stream.pack"), fx.segments.size(), error))
      << error;
  for (const auto &seg : fx.segments) {
    std::string copy(static_cast<const char *>(seg.first), seg.second);
    ASSERT_TRUE(writer.add(copy.data(), copy.size(), error)) << error;
  } // each copy is gone before the next segment is added
  ASSERT_TRUE(writer.finish(checksum, error)) << error;
  EXPECT_EQ(checksum, fx.checksum);
  EXPECT_EQ(readBytes(dir.file("stream.pack")), readBytes(dir.file("whole.pack")));
}

TEST(WeightPackTest, StreamingWriterErrors) {
  ScratchDir dir;
  std::string error;
  uint64_t checksum = 0;
  char byte = 1;
  {
    // Fewer segments than announced: an error, and no pack is left.
    WeightPackWriter writer;
    ASSERT_TRUE(writer.open(dir.file("short.pack"), 2, error)) << error;
    ASSERT_TRUE(writer.add(&byte, 1, error)) << error;
    EXPECT_FALSE(writer.finish(checksum, error));
    EXPECT_NE(error.find("1 of 2 segments written"), std::string::npos) << error;
    EXPECT_FALSE(std::ifstream(dir.file("short.pack")).good());
  }
  {
    WeightPackWriter writer;
    ASSERT_TRUE(writer.open(dir.file("long.pack"), 1, error)) << error;
    ASSERT_TRUE(writer.add(&byte, 1, error)) << error;
    EXPECT_FALSE(writer.add(&byte, 1, error));
    EXPECT_NE(error.find("more segments than announced"), std::string::npos);
    EXPECT_FALSE(std::ifstream(dir.file("long.pack")).good());
  }
  {
    // Abandoned before finish: the partial file is removed.
    WeightPackWriter writer;
    ASSERT_TRUE(writer.open(dir.file("gone.pack"), 1, error)) << error;
  }
  EXPECT_FALSE(std::ifstream(dir.file("gone.pack")).good());
}

TEST(WeightPackTest, WriteErrors) {
  std::string error;
  uint64_t checksum;
  EXPECT_FALSE(writeWeightPack("/nonexistent-dir/w.pack", {}, checksum, error));
  EXPECT_NE(error.find("/nonexistent-dir/w.pack"), std::string::npos);
  EXPECT_FALSE(
      writeWeightPack("/tmp/unused.pack", {{nullptr, 4}}, checksum, error));
}

//===----------------------------------------------------------------------===//
// Thread pool
//===----------------------------------------------------------------------===//

TEST(ThreadPoolTest, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 4, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 12345}) {
      for (int64_t grain : {0, 1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int64_t> smallChunks{0};
        std::atomic<int> chunks{0};
        pool.parallelFor(n, grain, [&](int64_t begin, int64_t end) {
          ++chunks;
          if (end - begin < std::max<int64_t>(grain, 1) && end - begin < n)
            ++smallChunks;
          ASSERT_LE(0, begin);
          ASSERT_LT(begin, end);
          ASSERT_LE(end, n);
          for (int64_t i = begin; i < end; ++i)
            ++hits[size_t(i)];
        });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[size_t(i)].load(), 1)
              << "threads " << threads << " n " << n << " grain " << grain
              << " index " << i;
        EXPECT_EQ(smallChunks.load(), 0);
        if (n == 0) {
          EXPECT_EQ(chunks.load(), 0);
        }
        if (threads == 1 && n > 0) {
          EXPECT_EQ(chunks.load(), 1);
        }
      }
    }
  }
}

TEST(ThreadPoolTest, ManySmallJobsAreQuick) {
  ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  auto start = std::chrono::steady_clock::now();
  for (int iter = 0; iter < 10000; ++iter) {
    pool.parallelFor(100, 1, [&](int64_t begin, int64_t end) {
      int64_t local = 0;
      for (int64_t i = begin; i < end; ++i)
        local += i;
      sum += local;
    });
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(sum.load(), int64_t(10000) * (99 * 100 / 2));
  EXPECT_LT(seconds, 30.0); // Generous: the machine may be oversubscribed.
}

TEST(ThreadPoolTest, WorkersShareTheWork) {
  ThreadPool pool(4);
  std::mutex mutex;
  std::vector<std::thread::id> ids;
  // Chunks that block (rather than compute) so that workers get to run
  // even on an oversubscribed machine.
  for (int attempt = 0; attempt < 5; ++attempt) {
    pool.parallelFor(16, 1, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::lock_guard<std::mutex> lock(mutex);
      if (std::find(ids.begin(), ids.end(), std::this_thread::get_id()) ==
          ids.end())
        ids.push_back(std::this_thread::get_id());
    });
  }
  EXPECT_GT(ids.size(), 1u);
  EXPECT_LE(ids.size(), 4u);
}

TEST(ThreadPoolTest, NestedAndConcurrentCallsRunInline) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(64 * 64);
  pool.parallelFor(64, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallelFor(64, 1, [&](int64_t b2, int64_t e2) {
        for (int64_t j = b2; j < e2; ++j)
          ++hits[size_t(i * 64 + j)];
      });
  });
  for (auto &h : hits)
    ASSERT_EQ(h.load(), 1);

  // Two external threads sharing one pool.
  std::atomic<int64_t> total{0};
  auto work = [&] {
    for (int iter = 0; iter < 500; ++iter)
      pool.parallelFor(1000, 10, [&](int64_t b, int64_t e) { total += e - b; });
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2 * 500 * 1000);
}

//===----------------------------------------------------------------------===//
// Context
//===----------------------------------------------------------------------===//

TEST(ContextTest, SlotsAllocateAndErrors) {
  const int64_t slotBytes[] = {256, -1, 0};
  ModelDesc desc{};
  desc.name = "ctx";
  desc.numSlots = 3;
  desc.slotBytes = slotBytes;
  Context ctx(desc, nullptr, 2);
  ASSERT_TRUE(ctx.ok()) << ctx.error;
  EXPECT_EQ(ctx.pool.size(), 2);
  ASSERT_EQ(ctx.slots.size(), 3u);
  EXPECT_GE(ctx.slots[0].capacity(), 256u);
  EXPECT_EQ(ctx.slots[1].capacity(), 0u);
  void *preallocated = ctx.slots[0].data();

  Tensor t;
  int64_t shape[2] = {4, 16};
  ASSERT_TRUE(ctx.allocate(0, t, DType::f32, 2, shape));
  EXPECT_EQ(t.data, preallocated); // Fits: no reallocation.
  EXPECT_EQ(t.describe(), "float32[4, 16]");
  ASSERT_TRUE(ctx.allocate(1, t, DType::f64, 2, shape));
  EXPECT_GE(ctx.slots[1].capacity(), 512u);
  EXPECT_EQ(t.data, ctx.slots[1].data());
  int64_t bigger[3] = {8, 16, 32};
  ASSERT_TRUE(ctx.allocate(1, t, DType::f64, 3, bigger));
  EXPECT_GE(ctx.slots[1].capacity(), size_t(8 * 16 * 32 * 8));
  std::memset(t.data, 0, t.bytes());
  ASSERT_TRUE(ctx.allocate(2, t, DType::i64, 0, nullptr));
  EXPECT_EQ(t.describe(), "int64[]");
  EXPECT_TRUE(ctx.ok());

  EXPECT_FALSE(ctx.allocate(3, t, DType::f32, 2, shape));
  EXPECT_NE(ctx.error.find("slot 3"), std::string::npos) << ctx.error;
  std::string first = ctx.error;
  int64_t tooBig[2] = {int64_t(1) << 40, int64_t(1) << 40};
  EXPECT_FALSE(ctx.allocate(1, t, DType::f32, 2, tooBig));
  EXPECT_FALSE(ctx.fail("second"));
  EXPECT_EQ(ctx.error, first); // The first error is kept.
  EXPECT_FALSE(ctx.ok());
}

TEST(ContextTest, AllocationFailureIsReported) {
  ModelDesc desc{};
  desc.name = "ctx";
  int64_t tooBig[2] = {int64_t(1) << 40, int64_t(1) << 40};
  Tensor t;
  const int64_t slotBytes[] = {-1};
  desc.numSlots = 1;
  desc.slotBytes = slotBytes;
  Context ctx(desc, nullptr, 1);
  EXPECT_FALSE(ctx.allocate(0, t, DType::f32, 2, tooBig));
  EXPECT_NE(ctx.error.find("out of memory"), std::string::npos) << ctx.error;
}

//===----------------------------------------------------------------------===//
// modelMain
//===----------------------------------------------------------------------===//

/// y = x * w, w the scalar in weight segment 0.
bool scaleRun(Context &ctx, const Tensor *inputs, Tensor *outputs) {
  const Tensor &x = inputs[0];
  Tensor w = ctx.weight(0, DType::f32, 0, nullptr);
  if (!w.data)
    return ctx.fail("scale: no weights");
  if (!ctx.allocate(0, outputs[0], DType::f32, x.rank, x.shape))
    return false;
  float scale = *w.as<float>();
  const float *in = x.as<float>();
  float *out = outputs[0].as<float>();
  ctx.pool.parallelFor(x.numel(), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      out[i] = in[i] * scale;
  });
  return true;
}

bool failingRun(Context &ctx, const Tensor *, Tensor *) {
  return ctx.fail("matmul /layer.0/MatMul: boom");
}

const IODesc kInputs[] = {
    {"x", DType::f32, 2, {2, -1}, {nullptr, "n"}, {0, 4}}};
const IODesc kOutputs[] = {
    {"y:0/out", DType::f32, 2, {2, -1}, {nullptr, "n"}, {0, 4}}};
const int64_t kSlotBytes[] = {-1};

using test::MainResult;
using test::runMain;

/// A model whose weight pack sits next to the test binary (modelMain looks
/// there), removed at the end of the test.
class ModelMainTest : public testing::Test {
protected:
  void SetUp() override {
    char buf[4096];
    ssize_t len = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    ASSERT_GT(len, 0);
    std::string exe(buf, size_t(len));
    weightsName = "runtime-test-" + std::to_string(::getpid()) + ".weights";
    weightsPath = exe.substr(0, exe.rfind('/')) + "/" + weightsName;
    float scale = 2.0f;
    std::string error;
    ASSERT_TRUE(writeWeightPack(weightsPath, {{&scale, sizeof(scale)}},
                                checksum, error))
        << error;

    desc.name = "scale";
    desc.numInputs = 1;
    desc.inputs = kInputs;
    desc.numOutputs = 1;
    desc.outputs = kOutputs;
    desc.weightsFile = weightsName.c_str();
    desc.numWeights = 1;
    desc.weightsChecksum = checksum;
    desc.numSlots = 1;
    desc.slotBytes = kSlotBytes;
    desc.run = scaleRun;
  }
  void TearDown() override { std::remove(weightsPath.c_str()); }

  std::string writeInput(const std::string &name, DType dtype,
                         std::vector<int64_t> shape) {
    Tensor t = makeTensor(nullptr, dtype, shape);
    std::vector<char> data(t.bytes());
    if (dtype == DType::f32)
      for (int64_t i = 0; i < t.numel(); ++i)
        reinterpret_cast<float *>(data.data())[i] = float(i) - 1.5f;
    t.data = data.data();
    std::string path = dir.file(name), error;
    EXPECT_TRUE(writeNpy(path, t, error)) << error;
    return path;
  }

  void expectFailure(const std::vector<std::string> &args,
                     const std::string &message) {
    MainResult r = runMain(desc, args);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos)
        << "expected '" << message << "' in: " << r.err;
  }

  ScratchDir dir;
  std::string weightsName, weightsPath;
  uint64_t checksum = 0;
  ModelDesc desc{};
};

TEST_F(ModelMainTest, RunWritesOutputs) {
  std::string x = writeInput("x.npy", DType::f32, {2, 3});
  std::string outDir = dir.file("out/nested");
  MainResult r = runMain(desc, {"run", "--input", "x=" + x, "--output-dir",
                                outDir, "--threads", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string expectedPath = outDir + "/y_0_out.npy";
  EXPECT_EQ(r.out, "wrote " + expectedPath + " float32[2, 3]\n");
  Buffer storage;
  Tensor y;
  std::string error;
  ASSERT_TRUE(readNpy(expectedPath, storage, y, error)) << error;
  EXPECT_EQ(y.describe(), "float32[2, 3]");
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_EQ(y.as<float>()[i], 2 * (float(i) - 1.5f));

  // --name=value works too.
  r = runMain(desc, {"run", "--input=x=" + x, "--output-dir=" + outDir});
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST_F(ModelMainTest, InputErrors) {
  std::string x = writeInput("x.npy", DType::f32, {2, 3});
  expectFailure({"run", "--input", "foo=" + x},
                "unknown input 'foo'; the model's inputs are: x");
  expectFailure({"run"}, "missing input 'x'");
  expectFailure({"run", "--input", "x=" + x, "--input", "x=" + x},
                "input 'x' is given more than once");
  expectFailure({"run", "--input", "x"}, "--input expects NAME=FILE.npy");
  expectFailure({"run", "--input"}, "expects a value");
  expectFailure(
      {"run", "--input", "x=" + writeInput("i.npy", DType::i64, {2, 3})},
      "input 'x': expected float32, got int64");
  expectFailure(
      {"run", "--input", "x=" + writeInput("r.npy", DType::f32, {2, 3, 1})},
      "input 'x': expected rank 2 (float32[2, n]), got rank 3");
  expectFailure(
      {"run", "--input", "x=" + writeInput("d.npy", DType::f32, {3, 3})},
      "input 'x' dim 0: expected 2, got 3");
  expectFailure(
      {"run", "--input", "x=" + writeInput("m.npy", DType::f32, {2, 5})},
      "input 'x' dim 1 (n) = 5 exceeds the maximum 4 this binary "
      "was compiled for");
  expectFailure({"run", "--input", "x=" + dir.file("missing.npy")},
                "cannot open '" + dir.file("missing.npy") + "'");
  std::string garbage = dir.file("garbage.npy");
  writeBytes(garbage, "garbage");
  expectFailure({"run", "--input", "x=" + garbage},
                "'" + garbage + "': not a .npy file");
}

TEST_F(ModelMainTest, SharedDimNamesMustAgree) {
  const IODesc inputs[] = {
      {"a", DType::f32, 2, {-1, 3}, {"batch", nullptr}, {8, 0}},
      {"b_mask", DType::i64, 1, {-1}, {"batch"}, {8}}};
  desc.numInputs = 2;
  desc.inputs = inputs;
  std::string a = writeInput("a.npy", DType::f32, {2, 3});
  std::string b = writeInput("b.npy", DType::i64, {3});
  expectFailure({"run", "--input", "a=" + a, "--input", "b_mask=" + b},
                "input 'b_mask' dim 0 (batch) = 3 does not match input 'a' "
                "dim 0 (batch) = 2");
  expectFailure({"run", "--input", "x=" + a},
                "unknown input 'x'; the model's inputs are: a, b_mask");
}

TEST_F(ModelMainTest, WeightErrors) {
  std::string x = writeInput("x.npy", DType::f32, {2, 3});
  std::string missing = "missing-" + weightsName;
  desc.weightsFile = missing.c_str();
  expectFailure({"run", "--input", "x=" + x}, "cannot open weight file");
  desc.weightsFile = weightsName.c_str();

  desc.weightsChecksum = checksum + 1;
  expectFailure({"run", "--input", "x=" + x}, "belongs to a different model");
  desc.weightsChecksum = checksum;

  std::string bytes = readBytes(weightsPath);
  bytes[bytes.size() - 1] ^= 1; // The last payload byte.
  writeBytes(weightsPath, bytes);
  expectFailure({"run", "--input", "x=" + x}, "is corrupt: checksum mismatch");
  expectFailure({"bench", "--runs", "1"}, "is corrupt: checksum mismatch");
}

TEST_F(ModelMainTest, ModelErrorsAreReported) {
  std::string x = writeInput("x.npy", DType::f32, {2, 3});
  desc.run = failingRun;
  expectFailure({"run", "--input", "x=" + x},
                "error: matmul /layer.0/MatMul: boom");
  expectFailure({"bench"}, "error: matmul /layer.0/MatMul: boom");
}

TEST_F(ModelMainTest, Bench) {
  MainResult r = runMain(desc, {"bench", "--runs", "3", "--warmup", "1",
                                "--threads", "2", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(
      r.out.rfind("{\"model\": \"scale\", \"threads\": 2, \"runs\": 3", 0), 0u)
      << r.out;
  EXPECT_NE(r.out.find("\"latency_ms\": {\"min\": "), std::string::npos);
  EXPECT_NE(r.out.find("\"p90\": "), std::string::npos);
  EXPECT_NE(r.out.find("\"inputs\": {\"x\": [2, 4]}}"), std::string::npos)
      << r.out;

  r = runMain(desc, {"bench", "--runs", "2", "--dim", "n=3", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"inputs\": {\"x\": [2, 3]}}"), std::string::npos)
      << r.out;

  std::string x = writeInput("x.npy", DType::f32, {2, 1});
  r = runMain(desc, {"bench", "--runs", "2", "--input", "x=" + x});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("model    scale"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("input    x float32[2, 1]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("median"), std::string::npos) << r.out;

  expectFailure({"bench", "--dim", "m=3"},
                "unknown dynamic dim 'm'; the model's dynamic dims are: n");
  expectFailure({"bench", "--dim", "n=5"}, "exceeds the maximum 4");
  expectFailure({"bench", "--dim", "n=3", "--input", "x=" + x},
                "does not match");
  expectFailure({"bench", "--runs", "0"}, "--runs");
  expectFailure({"bench", "--runs", "abc"}, "--runs");
}

TEST_F(ModelMainTest, SynthesizedInputs) {
  // Masks are ones, other integers zeros, floats in [-1, 1).
  const IODesc inputs[] = {
      {"input_ids", DType::i64, 2, {1, -1}, {nullptr, "seq"}, {0, 16}},
      {"attention_mask", DType::i64, 2, {1, -1}, {nullptr, "seq"}, {0, 16}},
      {"h", DType::f16, 1, {100}, {nullptr}, {0}},
      {"f", DType::f32, 1, {1000}, {nullptr}, {0}}};
  desc.numInputs = 4;
  desc.inputs = inputs;
  desc.numOutputs = 0;
  desc.run = [](Context &ctx, const Tensor *in, Tensor *) {
    for (int64_t i = 0; i < in[0].numel(); ++i)
      if (in[0].as<int64_t>()[i] != 0)
        return ctx.fail("ids not zero");
    for (int64_t i = 0; i < in[1].numel(); ++i)
      if (in[1].as<int64_t>()[i] != 1)
        return ctx.fail("mask not one");
    for (int64_t i = 0; i < in[2].numel(); ++i) {
      uint16_t h = in[2].as<uint16_t>()[i];
      // |value| < 1 or exactly -1: exponent below 15, or 0xbc00.
      if (((h >> 10) & 0x1f) >= 15 && h != 0xbc00)
        return ctx.fail("f16 out of range");
    }
    float lo = 1, hi = -1;
    for (int64_t i = 0; i < in[3].numel(); ++i) {
      lo = std::min(lo, in[3].as<float>()[i]);
      hi = std::max(hi, in[3].as<float>()[i]);
    }
    if (lo < -1 || hi >= 1 || lo > -0.9f || hi < 0.9f)
      return ctx.fail("f32 out of range");
    return in[0].shape[1] == 16 ? true : ctx.fail("seq not at maximum");
  };
  MainResult r = runMain(desc, {"bench", "--runs", "1", "--warmup", "0"});
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST_F(ModelMainTest, InfoHelpAndUsageErrors) {
  MainResult r = runMain(desc, {"info"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("model: scale"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("x float32[2, n]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("y:0/out float32[2, n]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("n <= 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(weightsName), std::string::npos) << r.out;

  r = runMain(desc, {"--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("usage:"), std::string::npos);
  r = runMain(desc, {"run", "--help"});
  EXPECT_EQ(r.status, 0);
  r = runMain(desc, {});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("usage:"), std::string::npos);

  expectFailure({"frobnicate"}, "unknown command 'frobnicate'");
  expectFailure({"run", "--bogus"}, "unknown option '--bogus' for 'run'");
  expectFailure({"info", "--json"}, "unknown option '--json' for 'info'");
  expectFailure({"run", "--runs", "3"}, "unknown option '--runs' for 'run'");
  expectFailure({"run", "stray"}, "unexpected argument 'stray'");
  expectFailure({"run", "--threads", "0"}, "--threads");
  expectFailure({"run", "--threads", "-3"}, "--threads");
  expectFailure({"run", "--threads", "2x"}, "--threads");
}

} // namespace
