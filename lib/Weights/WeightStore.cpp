//===- WeightStore.cpp - Memory-mapped ONNX weight store ------------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//
//
// The scanner reads only the fields it needs from the protobuf wire format:
//
//   ModelProto.graph (7) -> GraphProto
//   GraphProto.node (1) -> NodeProto, GraphProto.initializer (5) -> TensorProto
//   NodeProto.output (2), op_type (4), domain (7), attribute (5)
//   AttributeProto.name (1), t (5) -> TensorProto
//   TensorProto.dims (1), data_type (2), float_data (4), int32_data (5),
//     string_data (6), int64_data (7), name (8), raw_data (9),
//     double_data (10), uint64_data (11), external_data (13), data_location
//     (14)
//
// Everything else is skipped by wire type. The scanner follows that fixed
// schema and never recurses into fields it does not know, so the nesting depth
// is bounded by construction (at most ModelProto > GraphProto > NodeProto >
// AttributeProto > TensorProto > StringStringEntryProto) whatever the input.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Weights/WeightStore.h"
#include "sparsec/rt/Half.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <new>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "raw_data is little-endian and is used without conversion");

using namespace sparsec;

namespace {

/// onnx::TensorProto::DataType values the scanner needs to name.
enum DataType : int {
  kUndefined = 0,
  kFloat = 1,
  kInt64 = 7,
  kDouble = 11,
  kUInt32 = 12,
  kUInt64 = 13,
};

enum WireType : unsigned {
  kWireVarint = 0,
  kWireFixed64 = 1,
  kWireBytes = 2,
  kWireStartGroup = 3,
  kWireEndGroup = 4,
  kWireFixed32 = 5,
};

constexpr size_t kBufferAlignment = 64;

struct Span {
  const uint8_t *data = nullptr;
  size_t size = 0;

  std::string str() const {
    return std::string(reinterpret_cast<const char *>(data), size);
  }
};

enum class Encoding { Fixed32, Fixed64, Varint };

/// A repeated numeric field. Each occurrence is a packed run, or the bytes of
/// one unpacked element; both decode the same way.
struct Repeated {
  std::vector<Span> runs;
  size_t count = 0;
};

/// What the scanner found in one TensorProto.
struct RawTensor {
  std::string name;
  int dataType = kUndefined;
  std::vector<int64_t> dims;
  bool hasRaw = false;
  Span raw;
  Repeated floatData, int32Data, int64Data, doubleData, uint64Data;
  size_t numStrings = 0;
  uint64_t dataLocation = 0;
  bool hasLocation = false, hasOffset = false, hasLength = false;
  std::string location, offset, length;
  /// Where the TensorProto starts in the model, for messages.
  size_t fileOffset = 0;
};

enum class VarintStatus { Ok, Truncated, Overflow };

VarintStatus decodeVarint(const uint8_t *&p, const uint8_t *end,
                          uint64_t &value) {
  uint64_t result = 0;
  for (unsigned i = 0; i < 10; ++i) {
    if (p == end)
      return VarintStatus::Truncated;
    uint8_t byte = *p++;
    // The 10th byte holds only bit 63.
    if (i == 9 && byte > 1)
      return VarintStatus::Overflow;
    result |= uint64_t(byte & 0x7f) << (7 * i);
    if (!(byte & 0x80)) {
      value = result;
      return VarintStatus::Ok;
    }
  }
  return VarintStatus::Overflow;
}

/// Position inside one message: [p, end).
struct Cursor {
  const uint8_t *p;
  const uint8_t *end;

  explicit Cursor(Span s) : p(s.data), end(s.data + s.size) {}
  bool atEnd() const { return p == end; }
  size_t left() const { return size_t(end - p); }
};

/// Attribute fields a Constant node needs.
struct RawAttribute {
  std::string name;
  bool hasTensor = false;
  Span tensor;
  size_t fileOffset = 0;
};

class Scanner {
public:
  Scanner(const uint8_t *base, size_t size) : base(base), size(size) {}

  bool scanModel();

  std::vector<RawTensor> initializers;
  std::vector<RawTensor> constants;
  std::string what;
  size_t errorOffset = 0;

private:
  bool fail(const uint8_t *at, std::string message) {
    if (what.empty()) {
      what = std::move(message);
      errorOffset = size_t(at - base);
    }
    return false;
  }

  bool readVarint(Cursor &c, uint64_t &value, const char *field);
  bool readTag(Cursor &c, uint32_t &field, unsigned &wire, const char *msg);
  bool readBytes(Cursor &c, Span &span, const char *field);
  bool expectWire(const uint8_t *at, unsigned wire, unsigned expected,
                  const char *field);
  bool readBytesField(Cursor &c, const uint8_t *tagAt, unsigned wire,
                      Span &span, const char *field) {
    return expectWire(tagAt, wire, kWireBytes, field) &&
           readBytes(c, span, field);
  }
  bool readVarintField(Cursor &c, const uint8_t *tagAt, unsigned wire,
                       uint64_t &value, const char *field) {
    return expectWire(tagAt, wire, kWireVarint, field) &&
           readVarint(c, value, field);
  }
  bool skipField(Cursor &c, const uint8_t *tagAt, unsigned wire,
                 const char *msg);
  bool readRepeated(Cursor &c, const uint8_t *tagAt, unsigned wire,
                    Encoding encoding, Repeated &out, const char *field);

  bool scanGraph(Span graph);
  bool scanNode(Span node);
  bool scanAttribute(Span attr, RawAttribute &out);
  bool scanTensor(Span tensor, RawTensor &out);
  bool scanEntry(Span entry, std::string &key, std::string &value);

  const uint8_t *base;
  size_t size;
};

bool Scanner::readVarint(Cursor &c, uint64_t &value, const char *field) {
  const uint8_t *start = c.p;
  switch (decodeVarint(c.p, c.end, value)) {
  case VarintStatus::Ok:
    return true;
  case VarintStatus::Truncated:
    return fail(start, std::string("truncated varint in ") + field);
  case VarintStatus::Overflow:
    return fail(start, std::string("varint longer than 64 bits in ") + field);
  }
  return false;
}

bool Scanner::readTag(Cursor &c, uint32_t &field, unsigned &wire,
                      const char *msg) {
  const uint8_t *start = c.p;
  uint64_t tag;
  if (!readVarint(c, tag, msg))
    return false;
  if (tag > 0xffffffffULL || (tag >> 3) == 0)
    return fail(start, std::string("invalid field tag ") + std::to_string(tag) +
                           " in " + msg);
  field = uint32_t(tag >> 3);
  wire = unsigned(tag & 7);
  return true;
}

bool Scanner::readBytes(Cursor &c, Span &span, const char *field) {
  const uint8_t *start = c.p;
  uint64_t length;
  if (!readVarint(c, length, field))
    return false;
  if (length > c.left())
    return fail(start, "length " + std::to_string(length) + " of " + field +
                           " runs past the end of its enclosing message (" +
                           std::to_string(c.left()) + " bytes left)");
  span.data = c.p;
  span.size = size_t(length);
  c.p += length;
  return true;
}

bool Scanner::expectWire(const uint8_t *at, unsigned wire, unsigned expected,
                         const char *field) {
  if (wire == expected)
    return true;
  return fail(at, std::string(field) + " has wire type " +
                      std::to_string(wire) + ", expected " +
                      std::to_string(expected));
}

bool Scanner::skipField(Cursor &c, const uint8_t *tagAt, unsigned wire,
                        const char *msg) {
  switch (wire) {
  case kWireVarint: {
    uint64_t ignored;
    return readVarint(c, ignored, msg);
  }
  case kWireFixed64:
  case kWireFixed32: {
    size_t n = wire == kWireFixed64 ? 8 : 4;
    if (c.left() < n)
      return fail(c.p, std::string("truncated fixed-width field in ") + msg);
    c.p += n;
    return true;
  }
  case kWireBytes: {
    Span ignored;
    return readBytes(c, ignored, msg);
  }
  case kWireStartGroup:
  case kWireEndGroup:
    return fail(tagAt, std::string("groups (wire type ") +
                           std::to_string(wire) + ") are not supported, in " +
                           msg);
  default:
    return fail(tagAt,
                "invalid wire type " + std::to_string(wire) + " in " + msg);
  }
}

bool Scanner::readRepeated(Cursor &c, const uint8_t *tagAt, unsigned wire,
                           Encoding encoding, Repeated &out,
                           const char *field) {
  size_t width = encoding == Encoding::Fixed32   ? 4
                 : encoding == Encoding::Fixed64 ? 8
                                                 : 0;
  if (wire == kWireBytes) {
    Span run;
    if (!readBytes(c, run, field))
      return false;
    size_t count = 0;
    if (width) {
      if (run.size % width)
        return fail(run.data, std::string("packed ") + field + " has " +
                                  std::to_string(run.size) +
                                  " bytes, not a multiple of " +
                                  std::to_string(width));
      count = run.size / width;
    } else {
      Cursor rc(run);
      while (!rc.atEnd()) {
        uint64_t ignored;
        if (!readVarint(rc, ignored, field))
          return false;
        ++count;
      }
    }
    if (count) {
      out.runs.push_back(run);
      out.count += count;
    }
    return true;
  }

  unsigned expected = encoding == Encoding::Fixed32   ? kWireFixed32
                      : encoding == Encoding::Fixed64 ? kWireFixed64
                                                      : kWireVarint;
  if (!expectWire(tagAt, wire, expected, field))
    return false;
  const uint8_t *start = c.p;
  if (width) {
    if (c.left() < width)
      return fail(start, std::string("truncated ") + field);
    c.p += width;
  } else {
    uint64_t ignored;
    if (!readVarint(c, ignored, field))
      return false;
  }
  out.runs.push_back(Span{start, size_t(c.p - start)});
  ++out.count;
  return true;
}

bool Scanner::scanModel() {
  Cursor c(Span{base, size});
  bool sawGraph = false;
  while (!c.atEnd()) {
    const uint8_t *tagAt = c.p;
    uint32_t field;
    unsigned wire;
    if (!readTag(c, field, wire, "ModelProto"))
      return false;
    if (field == 7) {
      Span graph;
      if (!readBytesField(c, tagAt, wire, graph, "ModelProto.graph") ||
          !scanGraph(graph))
        return false;
      sawGraph = true;
    } else if (!skipField(c, tagAt, wire, "ModelProto")) {
      return false;
    }
  }
  if (!sawGraph)
    return fail(base, "no graph (ModelProto field 7)");
  return true;
}

bool Scanner::scanGraph(Span graph) {
  Cursor c(graph);
  while (!c.atEnd()) {
    const uint8_t *tagAt = c.p;
    uint32_t field;
    unsigned wire;
    if (!readTag(c, field, wire, "GraphProto"))
      return false;
    Span body;
    if (field == 1) {
      if (!readBytesField(c, tagAt, wire, body, "GraphProto.node") ||
          !scanNode(body))
        return false;
    } else if (field == 5) {
      if (!readBytesField(c, tagAt, wire, body, "GraphProto.initializer"))
        return false;
      RawTensor tensor;
      tensor.fileOffset = size_t(body.data - base);
      if (!scanTensor(body, tensor))
        return false;
      initializers.push_back(std::move(tensor));
    } else if (!skipField(c, tagAt, wire, "GraphProto")) {
      return false;
    }
  }
  return true;
}

bool Scanner::scanNode(Span node) {
  Cursor c(node);
  std::string name, opType, domain, firstOutput;
  size_t numOutputs = 0;
  std::vector<RawAttribute> attributes;
  while (!c.atEnd()) {
    const uint8_t *tagAt = c.p;
    uint32_t field;
    unsigned wire;
    if (!readTag(c, field, wire, "NodeProto"))
      return false;
    Span body;
    switch (field) {
    case 2: // output
    case 3: // name
    case 4: // op_type
    case 7: // domain
      if (!readBytesField(c, tagAt, wire, body, "NodeProto string field"))
        return false;
      if (field == 2 && numOutputs++ == 0)
        firstOutput = body.str();
      else if (field == 3)
        name = body.str();
      else if (field == 4)
        opType = body.str();
      else if (field == 7)
        domain = body.str();
      break;
    case 5: { // attribute
      if (!readBytesField(c, tagAt, wire, body, "NodeProto.attribute"))
        return false;
      RawAttribute attr;
      attr.fileOffset = size_t(body.data - base);
      if (!scanAttribute(body, attr))
        return false;
      attributes.push_back(std::move(attr));
      break;
    }
    default:
      if (!skipField(c, tagAt, wire, "NodeProto"))
        return false;
    }
  }

  if (opType != "Constant" || !(domain.empty() || domain == "ai.onnx"))
    return true;
  // Only the `value` form carries a TensorProto; value_float, value_ints, ...
  // are not weights.
  const RawAttribute *value = nullptr;
  for (const RawAttribute &attr : attributes)
    if (attr.name == "value")
      value = &attr;
  if (!value)
    return true;
  if (!value->hasTensor)
    return fail(base + value->fileOffset, "Constant node '" + name +
                                              "' has a 'value' attribute "
                                              "without a tensor");
  if (numOutputs == 0)
    return fail(node.data, "Constant node '" + name + "' has no output");
  RawTensor tensor;
  tensor.fileOffset = size_t(value->tensor.data - base);
  if (!scanTensor(value->tensor, tensor))
    return false;
  tensor.name = firstOutput;
  constants.push_back(std::move(tensor));
  return true;
}

bool Scanner::scanAttribute(Span attr, RawAttribute &out) {
  Cursor c(attr);
  while (!c.atEnd()) {
    const uint8_t *tagAt = c.p;
    uint32_t field;
    unsigned wire;
    if (!readTag(c, field, wire, "AttributeProto"))
      return false;
    Span body;
    if (field == 1) {
      if (!readBytesField(c, tagAt, wire, body, "AttributeProto.name"))
        return false;
      out.name = body.str();
    } else if (field == 5) {
      if (!readBytesField(c, tagAt, wire, body, "AttributeProto.t"))
        return false;
      out.hasTensor = true;
      out.tensor = body;
    } else if (!skipField(c, tagAt, wire, "AttributeProto")) {
      return false;
    }
  }
  return true;
}

bool Scanner::scanTensor(Span tensor, RawTensor &out) {
  Cursor c(tensor);
  while (!c.atEnd()) {
    const uint8_t *tagAt = c.p;
    uint32_t field;
    unsigned wire;
    if (!readTag(c, field, wire, "TensorProto"))
      return false;
    Span body;
    uint64_t value;
    switch (field) {
    case 1: { // dims
      Repeated dims;
      if (!readRepeated(c, tagAt, wire, Encoding::Varint, dims,
                        "TensorProto.dims"))
        return false;
      for (Span run : dims.runs) {
        const uint8_t *p = run.data, *end = run.data + run.size;
        while (p != end && decodeVarint(p, end, value) == VarintStatus::Ok)
          out.dims.push_back(int64_t(value));
      }
      break;
    }
    case 2: // data_type
      if (!readVarintField(c, tagAt, wire, value, "TensorProto.data_type"))
        return false;
      out.dataType = int(int32_t(uint32_t(value)));
      break;
    case 4:
      if (!readRepeated(c, tagAt, wire, Encoding::Fixed32, out.floatData,
                        "TensorProto.float_data"))
        return false;
      break;
    case 5:
      if (!readRepeated(c, tagAt, wire, Encoding::Varint, out.int32Data,
                        "TensorProto.int32_data"))
        return false;
      break;
    case 6: // string_data: unsupported, only counted to report it.
      if (!readBytesField(c, tagAt, wire, body, "TensorProto.string_data"))
        return false;
      ++out.numStrings;
      break;
    case 7:
      if (!readRepeated(c, tagAt, wire, Encoding::Varint, out.int64Data,
                        "TensorProto.int64_data"))
        return false;
      break;
    case 8:
      if (!readBytesField(c, tagAt, wire, body, "TensorProto.name"))
        return false;
      out.name = body.str();
      break;
    case 9:
      if (!readBytesField(c, tagAt, wire, out.raw, "TensorProto.raw_data"))
        return false;
      out.hasRaw = true;
      break;
    case 10:
      if (!readRepeated(c, tagAt, wire, Encoding::Fixed64, out.doubleData,
                        "TensorProto.double_data"))
        return false;
      break;
    case 11:
      if (!readRepeated(c, tagAt, wire, Encoding::Varint, out.uint64Data,
                        "TensorProto.uint64_data"))
        return false;
      break;
    case 13: { // external_data
      std::string key, val;
      if (!readBytesField(c, tagAt, wire, body, "TensorProto.external_data") ||
          !scanEntry(body, key, val))
        return false;
      if (key == "location") {
        out.hasLocation = true;
        out.location = std::move(val);
      } else if (key == "offset") {
        out.hasOffset = true;
        out.offset = std::move(val);
      } else if (key == "length") {
        out.hasLength = true;
        out.length = std::move(val);
      }
      break;
    }
    case 14:
      if (!readVarintField(c, tagAt, wire, out.dataLocation,
                           "TensorProto.data_location"))
        return false;
      break;
    default:
      if (!skipField(c, tagAt, wire, "TensorProto"))
        return false;
    }
  }
  return true;
}

bool Scanner::scanEntry(Span entry, std::string &key, std::string &value) {
  Cursor c(entry);
  while (!c.atEnd()) {
    const uint8_t *tagAt = c.p;
    uint32_t field;
    unsigned wire;
    if (!readTag(c, field, wire, "StringStringEntryProto"))
      return false;
    Span body;
    if (field == 1 || field == 2) {
      if (!readBytesField(c, tagAt, wire, body, "StringStringEntryProto"))
        return false;
      (field == 1 ? key : value) = body.str();
    } else if (!skipField(c, tagAt, wire, "StringStringEntryProto")) {
      return false;
    }
  }
  return true;
}

std::string formatDims(const std::vector<int64_t> &dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

/// Strict decimal parse: digits only, no sign, no overflow.
bool parseUnsigned(const std::string &s, uint64_t &value) {
  if (s.empty())
    return false;
  value = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9')
      return false;
    if (__builtin_mul_overflow(value, uint64_t(10), &value) ||
        __builtin_add_overflow(value, uint64_t(ch - '0'), &value))
      return false;
  }
  return true;
}

/// Maps a whole regular file read-only. An empty file gets a null mapping.
bool mapFile(const std::string &path, void *&addr, size_t &size,
             std::string &why) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    why = std::strerror(errno);
    return false;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    why = std::strerror(errno);
    ::close(fd);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    why = S_ISDIR(st.st_mode) ? std::strerror(EISDIR) : "not a regular file";
    ::close(fd);
    return false;
  }
  addr = nullptr;
  size = size_t(st.st_size);
  if (size) {
    addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      why = std::strerror(errno);
      ::close(fd);
      return false;
    }
  }
  ::close(fd);
  return true;
}

} // namespace

namespace sparsec {

/// Turns scanned tensors into views, validating sizes and external data.
class WeightStoreBuilder {
public:
  WeightStoreBuilder(WeightStore &store, std::string baseDir,
                     bool allowExternal, std::string &error)
      : store(store), baseDir(std::move(baseDir)), allowExternal(allowExternal),
        error(error) {}

  bool add(const RawTensor &tensor);
  bool finish();

private:
  bool fail(const RawTensor &tensor, const std::string &what) {
    error = "'" + store.modelPath + "': tensor '" + tensor.name +
            "' (at byte offset " + std::to_string(tensor.fileOffset) +
            "): " + what;
    return false;
  }
  bool resolveExternal(const RawTensor &tensor, size_t numBytes,
                       TensorView &view);
  bool decodeTyped(const RawTensor &tensor, const Repeated &field,
                   Encoding encoding, size_t elemSize, size_t numBytes,
                   TensorView &view);

  WeightStore &store;
  std::string baseDir;
  bool allowExternal;
  std::string &error;
  std::vector<size_t> fileOffsets;
  /// External file path -> index into store.mappings.
  std::unordered_map<std::string, size_t> externalFiles;
};

} // namespace sparsec

bool WeightStoreBuilder::add(const RawTensor &tensor) {
  if (tensor.name.empty()) {
    error = "'" + store.modelPath + "': tensor at byte offset " +
            std::to_string(tensor.fileOffset) + " has no name";
    return false;
  }
  for (int64_t dim : tensor.dims)
    if (dim < 0)
      return fail(tensor, "negative dimension in " + formatDims(tensor.dims));
  if (tensor.dataLocation > 1)
    return fail(tensor,
                "invalid data_location " + std::to_string(tensor.dataLocation));
  bool isExternal = tensor.dataLocation == 1;
  if (isExternal && !allowExternal)
    return fail(tensor, "uses external data, which an in-memory model "
                        "cannot provide");

  TensorView view;
  view.name = tensor.name;
  view.dataType = tensor.dataType;
  view.dims = tensor.dims;
  view.external = isExternal;
  std::string viewError;

  size_t elemSize = WeightStore::elementSize(tensor.dataType);
  if (elemSize == 0) {
    viewError = "tensor '" + tensor.name + "' has unsupported data type " +
                WeightStore::dataTypeName(tensor.dataType) + " (" +
                std::to_string(tensor.dataType) + ")";
  } else {
    uint64_t numElements = 1;
    bool overflow = false;
    for (int64_t dim : tensor.dims) {
      if (dim == 0) {
        numElements = 0;
        overflow = false;
        break;
      }
      overflow |=
          __builtin_mul_overflow(numElements, uint64_t(dim), &numElements);
    }
    uint64_t numBytes64 = 0;
    if (overflow ||
        __builtin_mul_overflow(numElements, uint64_t(elemSize), &numBytes64) ||
        numBytes64 > SIZE_MAX)
      return fail(tensor,
                  "size of dims " + formatDims(tensor.dims) + " overflows");
    size_t numBytes = size_t(numBytes64);
    std::string need = "dims " + formatDims(tensor.dims) + " of " +
                       WeightStore::dataTypeName(tensor.dataType) + " need " +
                       std::to_string(numBytes) + " bytes";

    // The typed field this data type is stored in.
    struct Field {
      const Repeated *values;
      const char *name;
      Encoding encoding;
    };
    const Field fields[] = {
        {&tensor.floatData, "float_data", Encoding::Fixed32},
        {&tensor.int32Data, "int32_data", Encoding::Varint},
        {&tensor.int64Data, "int64_data", Encoding::Varint},
        {&tensor.doubleData, "double_data", Encoding::Fixed64},
        {&tensor.uint64Data, "uint64_data", Encoding::Varint},
    };
    const Field *expected;
    switch (tensor.dataType) {
    case kFloat:
      expected = &fields[0];
      break;
    case kInt64:
      expected = &fields[2];
      break;
    case kDouble:
      expected = &fields[3];
      break;
    case kUInt32:
    case kUInt64:
      expected = &fields[4];
      break;
    default:
      expected = &fields[1];
    }
    for (const Field &field : fields)
      if (&field != expected && field.values->count)
        return fail(tensor, std::string("has data in ") + field.name +
                                ", but " +
                                WeightStore::dataTypeName(tensor.dataType) +
                                " tensors use " + expected->name);
    if (tensor.numStrings)
      return fail(tensor,
                  "has string_data, but its type is " +
                      std::string(WeightStore::dataTypeName(tensor.dataType)));

    std::vector<std::string> sources;
    if (isExternal)
      sources.push_back("external data");
    if (tensor.hasRaw)
      sources.push_back("raw_data");
    if (expected->values->count)
      sources.push_back(expected->name);
    if (sources.size() > 1)
      return fail(tensor, "has both " + sources[0] + " and " + sources[1]);

    if (isExternal) {
      if (!resolveExternal(tensor, numBytes, view))
        return false;
    } else if (tensor.hasRaw) {
      if (tensor.raw.size != numBytes)
        return fail(tensor, "raw_data has " + std::to_string(tensor.raw.size) +
                                " bytes, but " + need);
      view.data = numBytes ? tensor.raw.data : nullptr;
      view.numBytes = numBytes;
    } else if (expected->values->count != numElements) {
      if (sources.empty())
        return fail(tensor, "has no data, but " + need);
      return fail(tensor, "has " + std::to_string(expected->values->count) +
                              " elements in " + expected->name + ", but " +
                              formatDims(tensor.dims) + " needs " +
                              std::to_string(numElements));
    } else if (!decodeTyped(tensor, *expected->values, expected->encoding,
                            elemSize, numBytes, view)) {
      return false;
    }
  }

  store.views.push_back(std::move(view));
  store.viewErrors.push_back(std::move(viewError));
  fileOffsets.push_back(tensor.fileOffset);
  return true;
}

bool WeightStoreBuilder::resolveExternal(const RawTensor &tensor,
                                         size_t numBytes, TensorView &view) {
  if (!tensor.hasLocation)
    return fail(tensor, "has data_location EXTERNAL but no 'location' entry");
  const std::string &location = tensor.location;
  if (location.empty())
    return fail(tensor, "has an empty external data location");
  if (location.find('\0') != std::string::npos)
    return fail(tensor, "external data location contains a NUL byte");
  if (location[0] == '/')
    return fail(tensor, "external data location '" + location +
                            "' is absolute; it must be relative to the "
                            "model's directory");
  for (size_t begin = 0; begin <= location.size();) {
    size_t end = location.find('/', begin);
    if (end == std::string::npos)
      end = location.size();
    if (location.compare(begin, end - begin, "..") == 0)
      return fail(tensor, "external data location '" + location +
                              "' has a '..' component; it must stay inside "
                              "the model's directory");
    begin = end + 1;
  }
  uint64_t offset = 0, length = 0;
  if (tensor.hasOffset && !parseUnsigned(tensor.offset, offset))
    return fail(tensor, "invalid external data offset '" + tensor.offset + "'");
  if (tensor.hasLength && !parseUnsigned(tensor.length, length))
    return fail(tensor, "invalid external data length '" + tensor.length + "'");

  std::string path = baseDir + location;
  auto it = externalFiles.find(path);
  if (it == externalFiles.end()) {
    void *addr;
    size_t size;
    std::string why;
    if (!mapFile(path, addr, size, why))
      return fail(tensor,
                  "cannot open external data file '" + path + "': " + why);
    if (addr)
      store.mappings.push_back({addr, size});
    it =
        externalFiles.emplace(path, addr ? store.mappings.size() - 1 : SIZE_MAX)
            .first;
  }
  const uint8_t *fileData = nullptr;
  uint64_t fileSize = 0;
  if (it->second != SIZE_MAX) {
    fileData = static_cast<const uint8_t *>(store.mappings[it->second].addr);
    fileSize = store.mappings[it->second].size;
  }
  if (!tensor.hasLength)
    length = offset <= fileSize ? fileSize - offset : 0;
  if (offset > fileSize || length > fileSize - offset)
    return fail(tensor, "external data range at offset " +
                            std::to_string(offset) + " with length " +
                            std::to_string(length) + " is past the end of '" +
                            path + "' (" + std::to_string(fileSize) +
                            " bytes)");
  if (length != numBytes)
    return fail(tensor, "external data has " + std::to_string(length) +
                            " bytes, but dims " + formatDims(tensor.dims) +
                            " of " +
                            WeightStore::dataTypeName(tensor.dataType) +
                            " need " + std::to_string(numBytes) + " bytes");
  view.data = numBytes ? fileData + offset : nullptr;
  view.numBytes = numBytes;
  view.external = true;
  return true;
}

bool WeightStoreBuilder::decodeTyped(const RawTensor &tensor,
                                     const Repeated &field, Encoding encoding,
                                     size_t elemSize, size_t numBytes,
                                     TensorView &view) {
  view.numBytes = numBytes;
  if (numBytes == 0)
    return true;
  auto *buffer = static_cast<uint8_t *>(::operator new(
      numBytes, std::align_val_t(kBufferAlignment), std::nothrow));
  if (!buffer)
    return fail(tensor, "out of memory decoding " + std::to_string(numBytes) +
                            " bytes");
  store.ownedBuffers.emplace_back(buffer);
  uint8_t *out = buffer;
  uint8_t *outEnd = buffer + numBytes;
  for (Span run : field.runs) {
    if (encoding != Encoding::Varint) {
      // float_data and double_data hold exactly the element type.
      size_t n = std::min(run.size, size_t(outEnd - out));
      std::memcpy(out, run.data, n);
      out += n;
      continue;
    }
    // Varint fields keep the element's low bytes: int32_data holds int8,
    // uint8, int16, uint16, bool, float16 and bfloat16 values widened to
    // int32 (the 16-bit floats as their bit pattern).
    const uint8_t *p = run.data, *end = run.data + run.size;
    uint64_t value;
    while (p != end && out + elemSize <= outEnd &&
           decodeVarint(p, end, value) == VarintStatus::Ok) {
      std::memcpy(out, &value, elemSize);
      out += elemSize;
    }
  }
  view.data = buffer;
  return true;
}

bool WeightStoreBuilder::finish() {
  store.index.reserve(store.views.size());
  for (size_t i = 0; i < store.views.size(); ++i) {
    auto [it, inserted] = store.index.emplace(store.views[i].name, i);
    if (!inserted) {
      error = "'" + store.modelPath + "': duplicate tensor name '" +
              store.views[i].name + "' (tensors at byte offsets " +
              std::to_string(fileOffsets[it->second]) + " and " +
              std::to_string(fileOffsets[i]) + ")";
      return false;
    }
  }
  return true;
}

static std::unique_ptr<WeightStore>
scanAndBuild(std::unique_ptr<WeightStore> store, const uint8_t *data,
             size_t size, std::string baseDir, bool allowExternal,
             std::string &error) {
  Scanner scanner(data, size);
  if (!scanner.scanModel()) {
    error = "'" + store->path() +
            "' is not a valid ONNX model: " + scanner.what +
            ", at byte offset " + std::to_string(scanner.errorOffset);
    return nullptr;
  }
  WeightStoreBuilder builder(*store, std::move(baseDir), allowExternal, error);
  for (const RawTensor &tensor : scanner.initializers)
    if (!builder.add(tensor))
      return nullptr;
  for (const RawTensor &tensor : scanner.constants)
    if (!builder.add(tensor))
      return nullptr;
  if (!builder.finish())
    return nullptr;
  return store;
}

//===----------------------------------------------------------------------===//
// WeightStore
//===----------------------------------------------------------------------===//

void WeightStore::AlignedFree::operator()(uint8_t *p) const {
  ::operator delete(p, std::align_val_t(kBufferAlignment));
}

WeightStore::~WeightStore() {
  for (const Mapping &m : mappings)
    ::munmap(m.addr, m.size);
}

std::unique_ptr<WeightStore> WeightStore::open(const std::string &onnxPath,
                                               std::string &error) {
  std::unique_ptr<WeightStore> store(new WeightStore());
  store->modelPath = onnxPath;
  void *addr;
  size_t size;
  std::string why;
  if (!mapFile(onnxPath, addr, size, why)) {
    error = "cannot open '" + onnxPath + "': " + why;
    return nullptr;
  }
  if (addr)
    store->mappings.push_back({addr, size});
  size_t slash = onnxPath.rfind('/');
  std::string baseDir =
      slash == std::string::npos ? "" : onnxPath.substr(0, slash + 1);
  return scanAndBuild(std::move(store), static_cast<const uint8_t *>(addr),
                      size, baseDir, /*allowExternal=*/true, error);
}

std::unique_ptr<WeightStore>
WeightStore::openBuffer(const void *data, size_t size, std::string &error) {
  std::unique_ptr<WeightStore> store(new WeightStore());
  store->modelPath = "<memory buffer>";
  // Copied so that views cannot outlive the caller's buffer; in-memory models
  // are small (tests, fuzzing) and the exactly sized copy lets sanitizers
  // catch any overread.
  uint8_t *copy = nullptr;
  if (data && size) {
    copy = static_cast<uint8_t *>(
        ::operator new(size, std::align_val_t(kBufferAlignment), std::nothrow));
    if (!copy) {
      error = "out of memory copying a " + std::to_string(size) + "-byte model";
      return nullptr;
    }
    std::memcpy(copy, data, size);
    store->ownedBuffers.emplace_back(copy);
  }
  return scanAndBuild(std::move(store), copy, copy ? size : 0, "",
                      /*allowExternal=*/false, error);
}

const TensorView *WeightStore::lookup(std::string_view name) const {
  auto it = index.find(name);
  return it == index.end() ? nullptr : &views[it->second];
}

const TensorView *WeightStore::get(std::string_view name,
                                   std::string &error) const {
  auto it = index.find(name);
  if (it == index.end()) {
    error =
        "'" + modelPath + "' has no tensor named '" + std::string(name) + "'";
    return nullptr;
  }
  if (!viewErrors[it->second].empty()) {
    error = "'" + modelPath + "': " + viewErrors[it->second];
    return nullptr;
  }
  return &views[it->second];
}

/// Names and element sizes of the ONNX data types, indexed by DataType.
static const struct {
  const char *name;
  size_t size; // 0: not supported.
} kDataTypes[] = {
    {"undefined", 0}, {"float32", 4}, {"uint8", 1},     {"int8", 1},
    {"uint16", 2},    {"int16", 2},   {"int32", 4},     {"int64", 8},
    {"string", 0},    {"bool", 1},    {"float16", 2},   {"float64", 8},
    {"uint32", 4},    {"uint64", 8},  {"complex64", 0}, {"complex128", 0},
    {"bfloat16", 2},
};

size_t WeightStore::elementSize(int onnxDataType) {
  if (onnxDataType < 0 || size_t(onnxDataType) >= std::size(kDataTypes))
    return 0;
  return kDataTypes[onnxDataType].size;
}

const char *WeightStore::dataTypeName(int onnxDataType) {
  if (onnxDataType < 0 || size_t(onnxDataType) >= std::size(kDataTypes))
    return "unknown";
  return kDataTypes[onnxDataType].name;
}

bool sparsec::WeightStore::readFloat32(const TensorView &view,
                                       std::vector<float> &out) {
  const size_t size = elementSize(view.dataType);
  if (!view.data || size == 0)
    return false;
  if (view.dataType != 1 && view.dataType != 10 && view.dataType != 16)
    return false;
  const size_t n = view.numBytes / size;
  out.resize(n);
  const auto *bytes = static_cast<const unsigned char *>(view.data);
  switch (view.dataType) {
  case 1: // FLOAT
    std::memcpy(out.data(), view.data, n * sizeof(float));
    return true;
  case 10: // FLOAT16 (data may be unaligned)
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes + 2 * i, 2);
      out[i] = rt::halfToFloat(h);
    }
    return true;
  case 16: // BFLOAT16: the high half of a float32
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes + 2 * i, 2);
      const uint32_t bits = uint32_t(h) << 16;
      std::memcpy(&out[i], &bits, 4);
    }
    return true;
  default:
    return false;
  }
}
