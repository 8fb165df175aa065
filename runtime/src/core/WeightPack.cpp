//===- WeightPack.cpp - The memory-mapped weight pack ---------------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//
//
// Layout (all integers little-endian, see Runtime.h):
//   [0, 64)            header
//   [64, 64 + 16 * count) segment table {offset, bytes}
//   [payloadOffset, payloadOffset + payloadBytes) segments, each 64-byte
//                      aligned, separated by zero padding
// The checksum covers the payload exactly as stored, padding included, so
// that any flipped byte is detected.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Runtime.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error                                                                         \
    "the weight pack format is little-endian; big-endian hosts need byte swaps"
#endif

namespace sparsec::rt {

namespace {

constexpr char kPackMagic[8] = {'S', 'P', 'C', 'W', 'P', 'A', 'C', 'K'};
constexpr uint32_t kPackVersion = 1;
constexpr uint64_t kHeaderBytes = 64;
constexpr uint64_t kAlign = 64;

struct PackHeader {
  char magic[8];
  uint32_t version;
  uint32_t count;
  uint64_t tableOffset;
  uint64_t payloadOffset;
  uint64_t payloadBytes;
  uint64_t checksum;
  uint64_t reserved;
  uint64_t padding; // Up to the documented 64 bytes.
};
static_assert(sizeof(PackHeader) == kHeaderBytes, "header is 64 bytes");

uint64_t alignUp(uint64_t value) {
  return (value + kAlign - 1) & ~(kAlign - 1);
}

std::string hex(uint64_t value) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016" PRIx64, value);
  return buf;
}

} // namespace

uint64_t fnv1a64(const void *data, size_t size, uint64_t seed) {
  const auto *bytes = static_cast<const unsigned char *>(data);
  uint64_t hash = seed;
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::unique_ptr<WeightPack> WeightPack::open(const std::string &path,
                                             uint32_t expectedCount,
                                             uint64_t expectedChecksum,
                                             bool verifyPayload,
                                             std::string &error) {
  const std::string quoted = "'" + path + "'";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = "cannot open weight file " + quoted + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    error = "cannot open weight file " + quoted + ": " + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  if (!S_ISREG(st.st_mode)) {
    error = "cannot open weight file " + quoted + ": " +
            (S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
    ::close(fd);
    return nullptr;
  }
  uint64_t size = uint64_t(st.st_size);

  // Check the magic with read() first: mmap of an empty file fails.
  PackHeader header;
  std::memset(&header, 0, sizeof(header));
  ssize_t got = ::pread(fd, &header, sizeof(header), 0);
  if (got < ssize_t(sizeof(kPackMagic)) ||
      std::memcmp(header.magic, kPackMagic, sizeof(kPackMagic)) != 0) {
    ::close(fd);
    error = quoted + " is not a sparsec weight pack";
    return nullptr;
  }
  if (size < kHeaderBytes || got != ssize_t(sizeof(header))) {
    ::close(fd);
    error = quoted + " is truncated";
    return nullptr;
  }
  if (header.version != kPackVersion) {
    ::close(fd);
    error = quoted + " is not a sparsec weight pack (unsupported version " +
            std::to_string(header.version) + ")";
    return nullptr;
  }
  if (header.count != expectedCount) {
    ::close(fd);
    error = quoted + " belongs to a different model (it holds " +
            std::to_string(header.count) + " weight segments, the model " +
            "expects " + std::to_string(expectedCount) + ")";
    return nullptr;
  }
  if (header.checksum != expectedChecksum) {
    ::close(fd);
    error = quoted + " belongs to a different model (checksum " +
            hex(header.checksum) + ", the model expects " +
            hex(expectedChecksum) + ")";
    return nullptr;
  }
  // Table and payload bounds, written to be overflow-free.
  uint64_t tableBytes = uint64_t(header.count) * 16;
  if (header.tableOffset < kHeaderBytes || header.tableOffset % 8 != 0 ||
      header.payloadOffset % kAlign != 0) {
    ::close(fd);
    error = quoted + " is corrupt: bad table or payload offset";
    return nullptr;
  }
  if (header.tableOffset > size || tableBytes > size - header.tableOffset ||
      header.payloadOffset > size ||
      header.payloadBytes > size - header.payloadOffset) {
    ::close(fd);
    error = quoted + " is truncated";
    return nullptr;
  }
  if (size > std::numeric_limits<size_t>::max()) {
    ::close(fd);
    error = "cannot open weight file " + quoted + ": too large";
    return nullptr;
  }

  void *map = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd, 0);
  int mapErrno = errno;
  ::close(fd);
  if (map == MAP_FAILED) {
    error =
        "cannot open weight file " + quoted + ": " + std::strerror(mapErrno);
    return nullptr;
  }

  std::unique_ptr<WeightPack> pack(new WeightPack());
  pack->map_ = map;
  pack->mapBytes_ = size_t(size);
  pack->count_ = header.count;
  const char *base = static_cast<const char *>(map);
  pack->table_ = reinterpret_cast<const uint64_t *>(base + header.tableOffset);
  pack->payload_ = base + header.payloadOffset;

  for (uint32_t i = 0; i < header.count; ++i) {
    uint64_t offset = pack->table_[2 * i], bytes = pack->table_[2 * i + 1];
    if (offset % kAlign != 0 || offset > header.payloadBytes ||
        bytes > header.payloadBytes - offset) {
      error = quoted + " is corrupt: segment " + std::to_string(i) +
              " lies outside the payload";
      return nullptr;
    }
  }
  if (verifyPayload &&
      fnv1a64(pack->payload_, size_t(header.payloadBytes)) != header.checksum) {
    error = quoted + " is corrupt: checksum mismatch";
    return nullptr;
  }
  return pack;
}

WeightPack::~WeightPack() {
  if (map_)
    ::munmap(map_, mapBytes_);
}

const void *WeightPack::segment(uint32_t index) const {
  if (index >= count_)
    return nullptr;
  return payload_ + table_[2 * index];
}

size_t WeightPack::segmentBytes(uint32_t index) const {
  if (index >= count_)
    return 0;
  return size_t(table_[2 * index + 1]);
}

WeightPackWriter::~WeightPackWriter() {
  if (f_) {
    std::fclose(f_);
    std::remove(path_.c_str()); // not finished: no partial pack is left
  }
}

bool WeightPackWriter::fail(const std::string &what, std::string &error) {
  error = "cannot write weight pack '" + path_ + "': " + what;
  if (f_) {
    std::fclose(f_);
    f_ = nullptr;
    std::remove(path_.c_str());
  }
  return false;
}

bool WeightPackWriter::open(const std::string &path, size_t count,
                            std::string &error) {
  path_ = path;
  if (count > std::numeric_limits<uint32_t>::max())
    return fail("too many segments", error);
  count_ = uint32_t(count);
  added_ = 0;
  offset_ = 0;
  hash_ = fnv1a64(nullptr, 0);
  table_.assign(2 * size_t(count), 0);
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_)
    return fail(std::string("cannot open it: ") + std::strerror(errno), error);
  // Header and table are rewritten by finish(); zeros up to the payload.
  payloadOffset_ = alignUp(kHeaderBytes + 16 * uint64_t(count_));
  static const char kZeros[kAlign] = {};
  for (uint64_t left = payloadOffset_; left > 0;) {
    size_t n = size_t(std::min<uint64_t>(left, kAlign));
    if (std::fwrite(kZeros, 1, n, f_) != n)
      return fail(std::strerror(errno), error);
    left -= n;
  }
  return true;
}

bool WeightPackWriter::add(const void *data, size_t bytes, std::string &error) {
  if (!f_)
    return fail("not open", error);
  if (added_ >= count_)
    return fail("more segments than announced", error);
  if (bytes && !data)
    return fail("segment " + std::to_string(added_) + " has no data", error);
  // The payload is hashed as it lies on disk, padding included.
  static const char kZeros[kAlign] = {};
  size_t pad = size_t(alignUp(offset_) - offset_);
  hash_ = fnv1a64(kZeros, pad, hash_);
  hash_ = fnv1a64(data, bytes, hash_);
  if ((pad && std::fwrite(kZeros, 1, pad, f_) != pad) ||
      (bytes && std::fwrite(data, 1, bytes, f_) != bytes))
    return fail(std::strerror(errno), error);
  offset_ += pad;
  table_[2 * size_t(added_)] = offset_;
  table_[2 * size_t(added_) + 1] = bytes;
  offset_ += bytes;
  ++added_;
  return true;
}

bool WeightPackWriter::finish(uint64_t &checksum, std::string &error) {
  if (!f_)
    return fail("not open", error);
  if (added_ != count_)
    return fail(std::to_string(added_) + " of " + std::to_string(count_) +
                    " segments written",
                error);
  PackHeader header;
  std::memset(&header, 0, sizeof(header));
  std::memcpy(header.magic, kPackMagic, sizeof(kPackMagic));
  header.version = kPackVersion;
  header.count = count_;
  header.tableOffset = kHeaderBytes;
  header.payloadOffset = payloadOffset_;
  header.payloadBytes = offset_;
  header.checksum = hash_;
  bool ok = std::fseek(f_, 0, SEEK_SET) == 0 &&
            std::fwrite(&header, sizeof(header), 1, f_) == 1 &&
            (table_.empty() ||
             std::fwrite(table_.data(), sizeof(uint64_t), table_.size(), f_) ==
                 table_.size());
  int savedErrno = errno;
  if (std::fclose(f_) != 0 && ok) {
    ok = false;
    savedErrno = errno;
  }
  f_ = nullptr;
  if (!ok) {
    error = "cannot write weight pack '" + path_ + "': " + std::strerror(savedErrno);
    std::remove(path_.c_str());
    return false;
  }
  checksum = hash_;
  return true;
}

bool writeWeightPack(
    const std::string &path,
    const std::vector<std::pair<const void *, size_t>> &segments,
    uint64_t &checksum, std::string &error) {
  WeightPackWriter writer;
  if (!writer.open(path, segments.size(), error))
    return false;
  for (const auto &segment : segments)
    if (!writer.add(segment.first, segment.second, error))
      return false;
  return writer.finish(checksum, error);
}

} // namespace sparsec::rt
