//===- WeightStoreTest.cpp - Tests for the ONNX weight store ----*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//
//
// The models are built here with a tiny protobuf encoder, so that the tests
// need neither python nor libonnx.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Weights/WeightStore.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

using namespace sparsec;

namespace {

//===----------------------------------------------------------------------===//
// Protobuf encoder
//===----------------------------------------------------------------------===//

enum : int {
  kFloat = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kBFloat16 = 16,
};

void putVarint(std::string &out, uint64_t value) {
  while (value >= 0x80) {
    out += char(uint8_t(value) | 0x80);
    value >>= 7;
  }
  out += char(value);
}

/// Appends protobuf fields to a byte string.
class Proto {
public:
  Proto &tag(uint32_t field, unsigned wire) {
    putVarint(bytes, uint64_t(field) << 3 | wire);
    return *this;
  }
  Proto &varint(uint32_t field, uint64_t value) {
    tag(field, 0);
    putVarint(bytes, value);
    return *this;
  }
  Proto &str(uint32_t field, std::string_view value) {
    tag(field, 2);
    putVarint(bytes, value.size());
    bytes.append(value);
    return *this;
  }
  Proto &msg(uint32_t field, const Proto &value) {
    return str(field, value.bytes);
  }
  Proto &fixed32(uint32_t field, float value) {
    tag(field, 5);
    bytes.append(reinterpret_cast<const char *>(&value), 4);
    return *this;
  }
  Proto &packedVarints(uint32_t field, const std::vector<int64_t> &values) {
    std::string body;
    for (int64_t v : values)
      putVarint(body, uint64_t(v));
    return str(field, body);
  }
  template <typename T>
  Proto &packedFixed(uint32_t field, const std::vector<T> &values) {
    return str(field,
               std::string_view(reinterpret_cast<const char *>(values.data()),
                                values.size() * sizeof(T)));
  }
  /// Appends bytes verbatim, to build malformed input.
  Proto &append(std::string_view raw) {
    bytes.append(raw);
    return *this;
  }

  std::string bytes;
};

template <typename T> std::string rawBytes(const std::vector<T> &values) {
  return std::string(reinterpret_cast<const char *>(values.data()),
                     values.size() * sizeof(T));
}

Proto tensorHeader(std::string_view name, int dataType,
                   const std::vector<int64_t> &dims) {
  Proto t;
  t.packedVarints(1, dims).varint(2, dataType);
  if (!name.empty())
    t.str(8, name);
  return t;
}

Proto rawTensor(std::string_view name, int dataType,
                const std::vector<int64_t> &dims, std::string_view raw) {
  return tensorHeader(name, dataType, dims).str(9, raw);
}

Proto externalTensor(std::string_view name, int dataType,
                     const std::vector<int64_t> &dims,
                     std::string_view location, const char *offset,
                     const char *length) {
  Proto t = tensorHeader(name, dataType, dims);
  t.msg(13, Proto().str(1, "location").str(2, location));
  if (offset)
    t.msg(13, Proto().str(1, "offset").str(2, offset));
  if (length)
    t.msg(13, Proto().str(1, "length").str(2, length));
  return t.varint(14, 1);
}

Proto node(std::string_view opType, const std::vector<std::string> &outputs,
           const std::vector<Proto> &attributes = {}) {
  Proto n;
  n.str(1, "in").str(3, std::string(opType) + "_node");
  for (const std::string &out : outputs)
    n.str(2, out);
  for (const Proto &attr : attributes)
    n.msg(5, attr);
  return n.str(4, opType);
}

Proto tensorAttribute(std::string_view name, const Proto &tensor) {
  return Proto().str(1, name).msg(5, tensor).varint(20, 4);
}

std::string model(const std::vector<Proto> &initializers,
                  const std::vector<Proto> &nodes = {}) {
  Proto graph;
  graph.str(2, "g");
  for (const Proto &n : nodes)
    graph.msg(1, n);
  for (const Proto &t : initializers)
    graph.msg(5, t);
  graph.msg(11, Proto().str(1, "in")); // A graph input, to be skipped.
  Proto m;
  m.varint(1, 8).str(2, "sparsec-test");
  m.msg(8, Proto().str(1, "").varint(2, 17));
  m.msg(7, graph);
  return m.bytes;
}

std::unique_ptr<WeightStore> openBytes(const std::string &bytes,
                                       std::string &error) {
  return WeightStore::openBuffer(bytes.data(), bytes.size(), error);
}

template <typename T> std::vector<T> values(const TensorView &view) {
  std::vector<T> out(view.numBytes / sizeof(T));
  if (view.numBytes)
    std::memcpy(out.data(), view.data, view.numBytes);
  return out;
}

bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

/// A small model using every kind of storage the scanner handles in memory.
std::string sampleModel() {
  std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 8.0f, -0.5f};
  Proto floats = tensorHeader("f", kFloat, {3});
  floats.packedFixed<float>(4, {1, 2}).fixed32(4, 3);
  Proto ints = tensorHeader("i", kInt64, {2});
  ints.packedVarints(7, {-1, 1LL << 40});
  Proto constant = rawTensor("", kInt64, {}, rawBytes<int64_t>({42}));
  return model({rawTensor("w", kFloat, {2, 3}, rawBytes(w)), floats, ints},
               {node("Relu", {"r"}),
                node("Constant", {"c"}, {tensorAttribute("value", constant)})});
}

//===----------------------------------------------------------------------===//
// Temporary directory
//===----------------------------------------------------------------------===//

class TempDir {
public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "sparsec-ws-XXXXXX").string();
    if (char *dir = ::mkdtemp(pattern.data()))
      path = dir;
  }
  ~TempDir() {
    if (!path.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  }
  std::string write(const std::string &name, const std::string &bytes) const {
    std::filesystem::path file = std::filesystem::path(path) / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary).write(bytes.data(), bytes.size());
    return file.string();
  }

  std::string path;
};

//===----------------------------------------------------------------------===//
// Tensor storage
//===----------------------------------------------------------------------===//

TEST(WeightStoreTest, RawData) {
  std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 8.0f, -0.5f};
  std::string bytes = model({rawTensor("w", kFloat, {2, 3}, rawBytes(w))});
  std::string error;
  auto store = openBytes(bytes, error);
  ASSERT_TRUE(store) << error;
  ASSERT_EQ(store->tensors().size(), 1u);
  const TensorView *view = store->lookup("w");
  ASSERT_TRUE(view);
  EXPECT_EQ(view->name, "w");
  EXPECT_EQ(view->dataType, kFloat);
  EXPECT_EQ(view->dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(view->numBytes, 24u);
  EXPECT_FALSE(view->external);
  EXPECT_EQ(values<float>(*view), w);
  EXPECT_EQ(store->lookup("nope"), nullptr);
  EXPECT_EQ(store->get("w", error), view);
}

TEST(WeightStoreTest, BuffersAreCopied) {
  std::string bytes =
      model({rawTensor("w", kFloat, {1}, rawBytes<float>({5}))});
  std::string error;
  auto store = openBytes(bytes, error);
  ASSERT_TRUE(store) << error;
  std::fill(bytes.begin(), bytes.end(), '\0');
  bytes.clear();
  bytes.shrink_to_fit();
  EXPECT_EQ(values<float>(*store->lookup("w")), (std::vector<float>{5}));
}

TEST(WeightStoreTest, TypedFieldsAreDecodedIntoAlignedBuffers) {
  std::string error;
  auto store = openBytes(sampleModel(), error);
  ASSERT_TRUE(store) << error;

  const TensorView *f = store->lookup("f");
  ASSERT_TRUE(f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f->data) % 64, 0u);
  EXPECT_EQ(values<float>(*f), (std::vector<float>{1, 2, 3}));

  const TensorView *i = store->lookup("i");
  ASSERT_TRUE(i);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(i->data) % 64, 0u);
  EXPECT_EQ(values<int64_t>(*i), (std::vector<int64_t>{-1, 1LL << 40}));
}

TEST(WeightStoreTest, Int32DataUsesTheNaturalWidth) {
  Proto i8 = tensorHeader("i8", kInt8, {3});
  i8.packedVarints(5, {-128, 0, 127});
  Proto u8 = tensorHeader("u8", kUInt8, {2});
  u8.varint(5, 255).varint(5, 7); // Unpacked.
  Proto b = tensorHeader("b", kBool, {2});
  b.packedVarints(5, {1, 0});
  Proto h = tensorHeader("h", kFloat16, {2});
  h.packedVarints(5, {0x3c00, 0xc000}); // 1.0, -2.0
  Proto bf = tensorHeader("bf", kBFloat16, {1});
  bf.packedVarints(5, {0x3f80}); // 1.0
  Proto i32 = tensorHeader("i32", kInt32, {2});
  i32.packedVarints(5, {-5, 1 << 30});
  Proto d = tensorHeader("d", kDouble, {2});
  d.packedFixed<double>(10, {0.25, -1e300});

  std::string error;
  auto store = openBytes(model({i8, u8, b, h, bf, i32, d}), error);
  ASSERT_TRUE(store) << error;
  EXPECT_EQ(values<int8_t>(*store->lookup("i8")),
            (std::vector<int8_t>{-128, 0, 127}));
  EXPECT_EQ(values<uint8_t>(*store->lookup("u8")),
            (std::vector<uint8_t>{255, 7}));
  EXPECT_EQ(values<uint8_t>(*store->lookup("b")), (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(values<uint16_t>(*store->lookup("h")),
            (std::vector<uint16_t>{0x3c00, 0xc000}));
  EXPECT_EQ(values<uint16_t>(*store->lookup("bf")),
            (std::vector<uint16_t>{0x3f80}));
  EXPECT_EQ(values<int32_t>(*store->lookup("i32")),
            (std::vector<int32_t>{-5, 1 << 30}));
  EXPECT_EQ(values<double>(*store->lookup("d")),
            (std::vector<double>{0.25, -1e300}));
}

TEST(WeightStoreTest, UnpackedDimsScalarsAndEmptyTensors) {
  Proto unpacked;
  unpacked.varint(1, 2).varint(1, 1).varint(2, kInt32).str(8, "u");
  unpacked.str(9, rawBytes<int32_t>({7, 8}));
  Proto scalar = rawTensor("s", kFloat, {}, rawBytes<float>({4.0f}));
  Proto empty = rawTensor("e", kFloat, {0, 3}, "");
  Proto noData = tensorHeader("n", kInt64, {4, 0});

  std::string error;
  auto store = openBytes(model({unpacked, scalar, empty, noData}), error);
  ASSERT_TRUE(store) << error;
  EXPECT_EQ(store->lookup("u")->dims, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(values<int32_t>(*store->lookup("u")), (std::vector<int32_t>{7, 8}));
  EXPECT_TRUE(store->lookup("s")->dims.empty());
  EXPECT_EQ(values<float>(*store->lookup("s")), (std::vector<float>{4.0f}));
  for (const char *name : {"e", "n"}) {
    const TensorView *view = store->lookup(name);
    ASSERT_TRUE(view) << name;
    EXPECT_EQ(view->numBytes, 0u);
    EXPECT_EQ(view->data, nullptr);
  }
}

TEST(WeightStoreTest, ConstantNodeTensorsAreIndexedByOutputName) {
  std::string error;
  auto store = openBytes(sampleModel(), error);
  ASSERT_TRUE(store) << error;
  // Initializers first, then Constant-node tensors.
  ASSERT_EQ(store->tensors().size(), 4u);
  EXPECT_EQ(store->tensors()[0].name, "w");
  EXPECT_EQ(store->tensors()[3].name, "c");
  const TensorView *c = store->lookup("c");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->dataType, kInt64);
  EXPECT_TRUE(c->dims.empty());
  EXPECT_EQ(values<int64_t>(*c), (std::vector<int64_t>{42}));
  EXPECT_EQ(store->lookup("r"), nullptr);
}

TEST(WeightStoreTest, OnlyStandardConstantValueTensorsAreIndexed) {
  Proto t = rawTensor("", kFloat, {1}, rawBytes<float>({1}));
  Proto valueFloat = Proto().str(1, "value_float").fixed32(2, 1.0f);
  Proto custom = node("Constant", {"custom"}, {tensorAttribute("value", t)});
  custom.str(7, "com.example");
  Proto standard = node("Constant", {"std"}, {tensorAttribute("value", t)});
  standard.str(7, "ai.onnx");
  std::string error;
  auto store = openBytes(
      model({}, {node("Constant", {"vf"}, {valueFloat}), custom, standard,
                 node("Foo", {"foo"}, {tensorAttribute("value", t)})}),
      error);
  ASSERT_TRUE(store) << error;
  ASSERT_EQ(store->tensors().size(), 1u);
  EXPECT_EQ(store->tensors()[0].name, "std");
}

TEST(WeightStoreTest, UnsupportedDataTypeIsReportedOnAccess) {
  Proto s = tensorHeader("s", kString, {1});
  s.str(6, "hello");
  std::string error;
  auto store = openBytes(model({s}), error);
  ASSERT_TRUE(store) << error;
  const TensorView *view = store->lookup("s");
  ASSERT_TRUE(view);
  EXPECT_EQ(view->data, nullptr);
  EXPECT_EQ(store->get("s", error), nullptr);
  EXPECT_EQ(error, "'<memory buffer>': tensor 's' has unsupported data type "
                   "string (8)");
  EXPECT_EQ(store->get("zz", error), nullptr);
  EXPECT_EQ(error, "'<memory buffer>' has no tensor named 'zz'");
}

TEST(WeightStoreTest, DataTypeHelpers) {
  EXPECT_EQ(WeightStore::elementSize(kFloat), 4u);
  EXPECT_EQ(WeightStore::elementSize(kInt64), 8u);
  EXPECT_EQ(WeightStore::elementSize(kBool), 1u);
  EXPECT_EQ(WeightStore::elementSize(kBFloat16), 2u);
  EXPECT_EQ(WeightStore::elementSize(kString), 0u);
  EXPECT_EQ(WeightStore::elementSize(-3), 0u);
  EXPECT_STREQ(WeightStore::dataTypeName(kFloat), "float32");
  EXPECT_STREQ(WeightStore::dataTypeName(kInt64), "int64");
  EXPECT_STREQ(WeightStore::dataTypeName(kDouble), "float64");
  EXPECT_STREQ(WeightStore::dataTypeName(kFloat16), "float16");
  EXPECT_STREQ(WeightStore::dataTypeName(1000), "unknown");
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
}

//===----------------------------------------------------------------------===//
// Files and external data
//===----------------------------------------------------------------------===//

TEST(WeightStoreTest, OpensAFile) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  std::string path = dir.write("m.onnx", sampleModel());
  std::string error;
  auto store = WeightStore::open(path, error);
  ASSERT_TRUE(store) << error;
  EXPECT_EQ(store->path(), path);
  EXPECT_EQ(store->tensors().size(), 4u);
  EXPECT_EQ(values<float>(*store->lookup("w"))[2], 3.25f);
}

TEST(WeightStoreTest, ExternalData) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  std::string bin(100, '\0');
  std::vector<float> a = {1, 2, 3, 4};
  std::vector<int64_t> b = {-7, 9};
  std::memcpy(&bin[64], a.data(), 16);
  std::memcpy(&bin[84], b.data(), 16);
  dir.write("weights.bin", bin);
  dir.write("sub/tail.bin", rawBytes<float>({5, 6}));
  std::string path = dir.write(
      "model.onnx",
      model({externalTensor("a", kFloat, {2, 2}, "weights.bin", "64", "16"),
             externalTensor("b", kInt64, {2}, "weights.bin", "84", nullptr),
             externalTensor("t", kFloat, {2}, "sub/tail.bin", nullptr,
                            nullptr)}));
  std::string error;
  auto store = WeightStore::open(path, error);
  ASSERT_TRUE(store) << error;
  const TensorView *va = store->lookup("a");
  ASSERT_TRUE(va);
  EXPECT_TRUE(va->external);
  EXPECT_EQ(va->numBytes, 16u);
  EXPECT_EQ(values<float>(*va), a);
  EXPECT_EQ(values<int64_t>(*store->lookup("b")), b);
  EXPECT_EQ(values<float>(*store->lookup("t")), (std::vector<float>{5, 6}));
}

TEST(WeightStoreTest, MissingFile) {
  std::string error;
  EXPECT_FALSE(WeightStore::open("/nonexistent/dir/m.onnx", error));
  EXPECT_EQ(error,
            "cannot open '/nonexistent/dir/m.onnx': No such file or directory");
  TempDir dir;
  EXPECT_FALSE(WeightStore::open(dir.path, error));
  EXPECT_EQ(error, "cannot open '" + dir.path + "': Is a directory");
}

/// Opens `bytes` written as model.onnx next to a 32-byte weights.bin.
std::string externalError(const Proto &tensor) {
  TempDir dir;
  dir.write("weights.bin", std::string(32, 'x'));
  std::string path = dir.write("model.onnx", model({tensor}));
  std::string error;
  if (WeightStore::open(path, error))
    return "opened";
  return error;
}

TEST(WeightStoreTest, ExternalDataErrors) {
  EXPECT_TRUE(contains(
      externalError(externalTensor("x", kFloat, {2}, "absent.bin", "0", "8")),
      "cannot open external data file '"));
  EXPECT_TRUE(contains(
      externalError(externalTensor("x", kFloat, {2}, "absent.bin", "0", "8")),
      "absent.bin': No such file or directory"));
  for (const char *location :
       {"../weights.bin", "a/../weights.bin", "..", "sub/.."})
    EXPECT_TRUE(contains(
        externalError(externalTensor("x", kFloat, {2}, location, "0", "8")),
        "has a '..' component"))
        << location;
  EXPECT_TRUE(contains(
      externalError(externalTensor("x", kFloat, {2}, "/etc/passwd", "0", "8")),
      "is absolute"));
  EXPECT_TRUE(contains(externalError(externalTensor("x", kFloat, {4},
                                                    "weights.bin", "24", "16")),
                       "external data range at offset 24 with length 16 is "
                       "past the end of"));
  EXPECT_TRUE(
      contains(externalError(externalTensor("x", kFloat, {4}, "weights.bin",
                                            "18446744073709551615", "16")),
               "past the end"));
  EXPECT_TRUE(contains(
      externalError(externalTensor("x", kFloat, {4}, "weights.bin", "0", "12")),
      "external data has 12 bytes, but dims [4] of float32 "
      "need 16 bytes"));
  EXPECT_TRUE(contains(
      externalError(externalTensor("x", kFloat, {2}, "weights.bin", "-1", "8")),
      "invalid external data offset '-1'"));
  Proto noLocation = tensorHeader("x", kFloat, {2});
  noLocation.varint(14, 1);
  EXPECT_TRUE(contains(externalError(noLocation), "no 'location' entry"));
}

TEST(WeightStoreTest, ExternalDataIsRejectedInBuffers) {
  std::string error;
  EXPECT_FALSE(openBytes(
      model({externalTensor("x", kFloat, {2}, "w.bin", "0", "8")}), error));
  EXPECT_TRUE(contains(error, "tensor 'x'")) << error;
  EXPECT_TRUE(contains(error, "uses external data")) << error;
}

//===----------------------------------------------------------------------===//
// Malformed input
//===----------------------------------------------------------------------===//

std::string bufferError(const std::string &bytes) {
  std::string error;
  if (openBytes(bytes, error))
    return "opened";
  return error;
}

TEST(WeightStoreTest, EveryPrefixFailsCleanly) {
  std::string full = sampleModel();
  for (size_t n = 0; n < full.size(); ++n) {
    // An exactly sized heap copy, so that sanitizers see any overread.
    std::vector<char> prefix(full.begin(), full.begin() + n);
    std::string error;
    auto store = WeightStore::openBuffer(prefix.data(), n, error);
    EXPECT_TRUE(store || !error.empty()) << "prefix " << n;
  }
  std::string error;
  EXPECT_TRUE(openBytes(full, error)) << error;
}

TEST(WeightStoreTest, RandomMutationsFailCleanly) {
  std::string full = sampleModel();
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<char> bytes(full.begin(), full.end());
    for (int k = 0, n = 1 + iter % 4; k < n; ++k)
      bytes[rng() % bytes.size()] = char(rng());
    std::string error;
    auto store = WeightStore::openBuffer(bytes.data(), bytes.size(), error);
    EXPECT_TRUE(store || !error.empty()) << "iteration " << iter;
  }
}

TEST(WeightStoreTest, MalformedProtobuf) {
  EXPECT_EQ(bufferError(std::string(11, '\xff')),
            "'<memory buffer>' is not a valid ONNX model: varint longer than "
            "64 bits in ModelProto, at byte offset 0");
  EXPECT_EQ(bufferError("\x08\x80"),
            "'<memory buffer>' is not a valid ONNX model: truncated varint in "
            "ModelProto, at byte offset 1");
  // Graph of length 100 with 3 bytes left.
  EXPECT_EQ(bufferError(Proto().tag(7, 2).append("\x64\x0a\x01x").bytes),
            "'<memory buffer>' is not a valid ONNX model: length 100 of "
            "ModelProto.graph runs past the end of its enclosing message (3 "
            "bytes left), at byte offset 1");
  // A node whose length fits the graph but not its own contents.
  Proto graph;
  graph.tag(1, 2).append("\x02\x0a\x05");
  EXPECT_TRUE(contains(bufferError(Proto().msg(7, graph).bytes),
                       "length 5 of NodeProto runs past the end"));
  EXPECT_TRUE(contains(bufferError(Proto().tag(3, 3).bytes),
                       "groups (wire type 3) are not supported"));
  EXPECT_TRUE(
      contains(bufferError(Proto().tag(3, 7).bytes), "invalid wire type 7"));
  EXPECT_TRUE(
      contains(bufferError(std::string("\x00", 1)), "invalid field tag 0"));
  EXPECT_TRUE(contains(bufferError(Proto().varint(7, 1).bytes),
                       "ModelProto.graph has wire type 0, expected 2"));
  EXPECT_EQ(bufferError(""), "'<memory buffer>' is not a valid ONNX model: no "
                             "graph (ModelProto field 7), at byte offset 0");
  Proto badFloats = tensorHeader("f", kFloat, {1});
  badFloats.str(4, "abc");
  EXPECT_TRUE(contains(bufferError(model({badFloats})),
                       "packed TensorProto.float_data has 3 bytes, not a "
                       "multiple of 4"));
  std::string error;
  EXPECT_EQ(WeightStore::openBuffer(nullptr, 0, error), nullptr);
  EXPECT_TRUE(contains(error, "no graph")) << error;
}

TEST(WeightStoreTest, SizeMismatches) {
  std::string error = bufferError(
      model({rawTensor("w", kFloat, {2, 3}, std::string(10, '\0'))}));
  EXPECT_TRUE(contains(error, "'<memory buffer>': tensor 'w' (at byte offset "))
      << error;
  EXPECT_TRUE(contains(error, "raw_data has 10 bytes, but dims [2, 3] of "
                              "float32 need 24 bytes"))
      << error;

  Proto few = tensorHeader("f", kFloat, {4});
  few.packedFixed<float>(4, {1, 2});
  EXPECT_TRUE(contains(bufferError(model({few})),
                       "has 2 elements in float_data, but [4] needs 4"));
  EXPECT_TRUE(contains(bufferError(model({tensorHeader("n", kFloat, {4})})),
                       "tensor 'n' (at byte offset"));
  EXPECT_TRUE(contains(bufferError(model({tensorHeader("n", kFloat, {4})})),
                       "has no data, but dims [4] of float32 need 16 bytes"));
  Proto both = rawTensor("b", kFloat, {1}, rawBytes<float>({1}));
  both.packedFixed<float>(4, {1});
  EXPECT_TRUE(
      contains(bufferError(model({both})), "has both raw_data and float_data"));
  Proto wrongField = tensorHeader("wf", kFloat, {1});
  wrongField.packedVarints(7, {1});
  EXPECT_TRUE(contains(bufferError(model({wrongField})),
                       "has data in int64_data, but float32 tensors use "
                       "float_data"));
  EXPECT_TRUE(contains(bufferError(model({rawTensor("neg", kFloat, {-1}, "")})),
                       "negative dimension in [-1]"));
  EXPECT_TRUE(
      contains(bufferError(model(
                   {rawTensor("big", kFloat, {1LL << 40, 1LL << 40}, "")})),
               "size of dims [1099511627776, 1099511627776] overflows"));
  EXPECT_TRUE(contains(bufferError(model({rawTensor("", kFloat, {}, "")})),
                       "has no name"));
}

TEST(WeightStoreTest, DuplicateNames) {
  Proto t = rawTensor("w", kFloat, {1}, rawBytes<float>({1}));
  std::string error = bufferError(model({t, t}));
  EXPECT_TRUE(contains(error, "'<memory buffer>': duplicate tensor name 'w' "
                              "(tensors at byte offsets "))
      << error;
  Proto c = rawTensor("", kFloat, {1}, rawBytes<float>({1}));
  EXPECT_TRUE(contains(
      bufferError(
          model({t}, {node("Constant", {"w"}, {tensorAttribute("value", c)})})),
      "duplicate tensor name 'w'"));
}

//===----------------------------------------------------------------------===//
// A real model
//===----------------------------------------------------------------------===//

std::string modelsDir() {
  if (const char *dir = std::getenv("SPARSEC_MODELS_DIR"))
    return dir;
  return SPARSEC_DEFAULT_MODELS_DIR;
}

TEST(WeightStoreTest, OptByteSmall) {
  std::string path = modelsDir() + "/opt-byte-s/model_nocache_opset17.onnx";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path << " not found";
  std::string error;
  auto store = WeightStore::open(path, error);
  ASSERT_TRUE(store) << error;
  // 69 initializers and 93 Constant-node tensors.
  EXPECT_EQ(store->tensors().size(), 69u + 93u);
  EXPECT_EQ(store->tensors()[0].name, "emb.weight");

  const TensorView *emb = store->lookup("emb.weight");
  ASSERT_TRUE(emb);
  EXPECT_EQ(emb->dims, (std::vector<int64_t>{256, 256}));
  EXPECT_STREQ(WeightStore::dataTypeName(emb->dataType), "float32");
  EXPECT_EQ(emb->numBytes, 262144u);
  EXPECT_FALSE(emb->external);

  const TensorView *fc1 = store->lookup("layers.0.fc1.bias");
  ASSERT_TRUE(fc1);
  EXPECT_EQ(fc1->dims, (std::vector<int64_t>{1024}));

  const TensorView *lnf = store->get("lnf.bias", error);
  ASSERT_TRUE(lnf) << error;
  ASSERT_GE(lnf->numBytes, sizeof(float));
  float first;
  std::memcpy(&first, lnf->data, sizeof(float));
  EXPECT_TRUE(std::isfinite(first));

  const TensorView *constant = store->lookup("/Constant_output_0");
  ASSERT_TRUE(constant);
  EXPECT_EQ(constant->dataType, kInt64);
  EXPECT_EQ(constant->numBytes, 8u);

  EXPECT_EQ(store->lookup("no.such.tensor"), nullptr);
}

} // namespace
