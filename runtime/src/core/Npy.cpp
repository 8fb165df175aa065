//===- Npy.cpp - Reading and writing numpy .npy files ---------------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//
//
// The .npy format: "\x93NUMPY", a major/minor version byte pair, a little-
// endian header length (uint16 for 1.0, uint32 for 2.0/3.0), then a Python
// dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (1, 71), }
// padded with spaces and ending in '\n', then the raw data in C order.
//
// Input files may be arbitrary bytes (they are fuzzed): every length is
// checked against the file size before use and the header is parsed by a
// small bounds-checked parser for the subset of Python literals numpy emits.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Runtime.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>

namespace sparsec::rt {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
/// numpy itself refuses headers above 10000 bytes by default; allow more but
/// stay bounded so that a corrupt length cannot make us read gigabytes.
constexpr uint64_t kMaxHeaderLen = 1 << 20;

/// Closes a FILE on scope exit.
struct FileCloser {
  FILE *f;
  ~FileCloser() {
    if (f)
      std::fclose(f);
  }
};

/// Maps a descriptor's type code and size ("f4", "i8", "b1", ...) to a DType.
bool dtypeFromCode(std::string_view code, DType &out) {
  static const struct {
    const char *code;
    DType dtype;
  } kTable[] = {
      {"f4", DType::f32}, {"f8", DType::f64}, {"f2", DType::f16},
      {"i8", DType::i64}, {"i4", DType::i32}, {"i2", DType::i16},
      {"i1", DType::i8},  {"u1", DType::u8},  {"u2", DType::u16},
      {"u4", DType::u32}, {"u8", DType::u64}, {"b1", DType::b1},
  };
  for (const auto &entry : kTable) {
    if (code == entry.code) {
      out = entry.dtype;
      return true;
    }
  }
  return false;
}

/// Parses the header dict. Accepts single- or double-quoted strings, any
/// whitespace, trailing commas and Python 2 'L' suffixes on integers.
class HeaderParser {
public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  bool parse(std::string &descr, bool &fortranOrder, int &rank, int64_t *shape,
             std::string &error) {
    bool haveDescr = false, haveFortran = false, haveShape = false;
    skipSpace();
    if (!consume('{'))
      return fail(error, "header is not a dict");
    for (;;) {
      skipSpace();
      if (consume('}'))
        break;
      std::string key;
      if (!parseString(key))
        return fail(error, "malformed header: expected a quoted key");
      skipSpace();
      if (!consume(':'))
        return fail(error,
                    "malformed header: expected ':' after '" + key + "'");
      skipSpace();
      if (key == "descr") {
        if (haveDescr)
          return fail(error, "malformed header: duplicate key 'descr'");
        haveDescr = true;
        if (peek() == '[')
          return fail(error, "structured dtypes are not supported");
        if (!parseString(descr))
          return fail(error, "malformed header: 'descr' is not a string");
      } else if (key == "fortran_order") {
        if (haveFortran)
          return fail(error, "malformed header: duplicate key 'fortran_order'");
        haveFortran = true;
        if (consumeWord("True"))
          fortranOrder = true;
        else if (consumeWord("False"))
          fortranOrder = false;
        else
          return fail(error,
                      "malformed header: 'fortran_order' is not True/False");
      } else if (key == "shape") {
        if (haveShape)
          return fail(error, "malformed header: duplicate key 'shape'");
        haveShape = true;
        if (!parseShape(rank, shape, error))
          return false;
      } else {
        return fail(error, "malformed header: unexpected key '" + key + "'");
      }
      skipSpace();
      if (consume(','))
        continue;
      if (consume('}'))
        break;
      return fail(error, "malformed header: expected ',' or '}'");
    }
    skipSpace();
    if (pos_ != text_.size())
      return fail(error, "malformed header: trailing characters");
    if (!haveDescr || !haveFortran || !haveShape)
      return fail(error, std::string("malformed header: missing key '") +
                             (!haveDescr     ? "descr"
                              : !haveFortran ? "fortran_order"
                                             : "shape") +
                             "'");
    return true;
  }

private:
  static bool fail(std::string &error, const std::string &message) {
    error = message;
    return false;
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool consume(char c) {
    if (peek() != c || pos_ >= text_.size())
      return false;
    ++pos_;
    return true;
  }
  bool consumeWord(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word)
      return false;
    size_t end = pos_ + word.size();
    if (end < text_.size() &&
        (std::isalnum(uint8_t(text_[end])) || text_[end] == '_'))
      return false;
    pos_ = end;
    return true;
  }
  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  bool parseString(std::string &out) {
    char quote = peek();
    if (quote != '\'' && quote != '"')
      return false;
    size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos)
      return false;
    out.assign(text_.substr(pos_ + 1, end - pos_ - 1));
    // Escapes never occur in the keys and descriptors we accept.
    if (out.find('\\') != std::string::npos)
      return false;
    pos_ = end + 1;
    return true;
  }
  bool parseShape(int &rank, int64_t *shape, std::string &error) {
    if (!consume('('))
      return fail(error, "malformed header: 'shape' is not a tuple");
    rank = 0;
    for (;;) {
      skipSpace();
      if (consume(')'))
        return true;
      if (!std::isdigit(uint8_t(peek())))
        return fail(error, "malformed header: bad dimension in 'shape'");
      int64_t value = 0;
      while (std::isdigit(uint8_t(peek()))) {
        int digit = text_[pos_++] - '0';
        if (value > (std::numeric_limits<int64_t>::max() - digit) / 10)
          return fail(error, "dimension in 'shape' is too large");
        value = value * 10 + digit;
      }
      if (peek() == 'L' || peek() == 'l')
        ++pos_;
      if (rank == kMaxRank)
        return fail(error, "rank above " + std::to_string(kMaxRank) +
                               " is not supported");
      shape[rank++] = value;
      skipSpace();
      if (consume(','))
        continue;
      if (consume(')'))
        return true;
      return fail(error, "malformed header: expected ',' or ')' in 'shape'");
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

} // namespace

bool readNpy(const std::string &path, Buffer &storage, Tensor &out,
             std::string &error) {
  auto failWith = [&](const std::string &message) {
    error = "'" + path + "': " + message;
    return false;
  };

  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) {
    error = "cannot open '" + path + "': " + std::strerror(errno);
    return false;
  }
  FileCloser closer{f};
  if (std::fseek(f, 0, SEEK_END) != 0)
    return failWith("cannot seek (not a regular file?)");
  long endPos = std::ftell(f);
  if (endPos < 0 || std::fseek(f, 0, SEEK_SET) != 0)
    return failWith("cannot seek (not a regular file?)");
  uint64_t fileSize = uint64_t(endPos);

  // Magic, version and header length.
  unsigned char prefix[12];
  size_t got = std::fread(prefix, 1, 10, f);
  if (got < 8 || std::memcmp(prefix, kMagic, kMagicLen) != 0)
    return failWith("not a .npy file");
  int major = prefix[6], minor = prefix[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    return failWith("unsupported .npy format version " + std::to_string(major) +
                    "." + std::to_string(minor));
  uint64_t headerLen = 0;
  size_t prefixLen = major == 1 ? 10 : 12;
  if (major != 1 && got == 10)
    got += std::fread(prefix + 10, 1, 2, f);
  if (got < prefixLen)
    return failWith("truncated header");
  if (major == 1)
    headerLen = uint64_t(prefix[8]) | uint64_t(prefix[9]) << 8;
  else
    headerLen = uint64_t(prefix[8]) | uint64_t(prefix[9]) << 8 |
                uint64_t(prefix[10]) << 16 | uint64_t(prefix[11]) << 24;
  if (headerLen > kMaxHeaderLen)
    return failWith("header length " + std::to_string(headerLen) +
                    " is implausibly large");
  if (prefixLen + headerLen > fileSize)
    return failWith("truncated header");

  std::string header(headerLen, '\0');
  if (headerLen && std::fread(&header[0], 1, headerLen, f) != headerLen)
    return failWith("truncated header");

  std::string descr, parseError;
  bool fortranOrder = false;
  Tensor t;
  if (!HeaderParser(header).parse(descr, fortranOrder, t.rank, t.shape,
                                  parseError))
    return failWith(parseError);

  // Descriptor: byte order then type code. '=' is native, which is little-
  // endian on every platform the runtime targets.
  if (descr.size() < 2)
    return failWith("unsupported dtype '" + descr + "'");
  char order = descr[0];
  if (order != '<' && order != '|' && order != '=' && order != '>')
    return failWith("unsupported dtype '" + descr + "'");
  if (!dtypeFromCode(std::string_view(descr).substr(1), t.dtype))
    return failWith("unsupported dtype '" + descr + "'");
  if (order == '>' && dtypeSize(t.dtype) > 1)
    return failWith("big-endian arrays ('" + descr +
                    "') are not supported; convert with "
                    "arr.astype(arr.dtype.newbyteorder('<'))");
  if (fortranOrder && t.rank > 1)
    return failWith("Fortran-ordered arrays are not supported; save "
                    "np.ascontiguousarray(arr)");

  // Element count, with overflow checks.
  uint64_t elemSize = dtypeSize(t.dtype);
  uint64_t numel = 1;
  bool empty = false;
  for (int i = 0; i < t.rank; ++i)
    empty |= t.shape[i] == 0;
  if (!empty) {
    for (int i = 0; i < t.rank; ++i) {
      uint64_t d = uint64_t(t.shape[i]);
      if (numel > std::numeric_limits<uint64_t>::max() / elemSize / d)
        return failWith("shape is too large");
      numel *= d;
    }
  } else {
    numel = 0;
  }
  uint64_t dataBytes = numel * elemSize;
  uint64_t available = fileSize - prefixLen - headerLen;
  if (available < dataBytes)
    return failWith("truncated: expected " + std::to_string(dataBytes) +
                    " bytes of data, found " + std::to_string(available));
  if (dataBytes > std::numeric_limits<size_t>::max() ||
      !storage.ensure(size_t(dataBytes)))
    return failWith("cannot allocate " + std::to_string(dataBytes) + " bytes");
  if (dataBytes &&
      std::fread(storage.data(), 1, size_t(dataBytes), f) != dataBytes)
    return failWith("read error");

  t.data = storage.data();
  out = t;
  return true;
}

bool writeNpy(const std::string &path, const Tensor &t, std::string &error) {
  if (t.rank < 0 || t.rank > kMaxRank) {
    error =
        "cannot write '" + path + "': invalid rank " + std::to_string(t.rank);
    return false;
  }
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 0) {
      error =
          "cannot write '" + path + "': negative dimension in " + t.describe();
      return false;
    }
  }
  size_t bytes = t.bytes();
  if (bytes && !t.data) {
    error = "cannot write '" + path + "': tensor has no data";
    return false;
  }

  std::string dict = "{'descr': '";
  dict += dtypeDescr(t.dtype);
  dict += "', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < t.rank; ++i) {
    if (i)
      dict += ", ";
    dict += std::to_string(t.shape[i]);
  }
  if (t.rank == 1)
    dict += ',';
  dict += "), }";
  // Pad with spaces so that the data starts 64-byte aligned, as numpy does.
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';

  std::string prefix(kMagic, kMagicLen);
  prefix += char(1);
  prefix += char(0);
  prefix += char(dict.size() & 0xff);
  prefix += char(dict.size() >> 8);

  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f) {
    error = "cannot open '" + path + "' for writing: " + std::strerror(errno);
    return false;
  }
  bool ok = std::fwrite(prefix.data(), 1, prefix.size(), f) == prefix.size() &&
            std::fwrite(dict.data(), 1, dict.size(), f) == dict.size() &&
            (bytes == 0 || std::fwrite(t.data, 1, bytes, f) == bytes);
  int savedErrno = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    savedErrno = errno;
  }
  if (!ok) {
    error = "cannot write '" + path + "': " + std::strerror(savedErrno);
    return false;
  }
  return true;
}

} // namespace sparsec::rt
