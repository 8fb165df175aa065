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

bool writeWeightPack(
    const std::string &path,
    const std::vector<std::pair<const void *, size_t>> &segments,
    uint64_t &checksum, std::string &error) {
  if (segments.size() > std::numeric_limits<uint32_t>::max()) {
    error = "cannot write weight pack '" + path + "': too many segments";
    return false;
  }
  PackHeader header;
  std::memset(&header, 0, sizeof(header));
  std::memcpy(header.magic, kPackMagic, sizeof(kPackMagic));
  header.version = kPackVersion;
  header.count = uint32_t(segments.size());
  header.tableOffset = kHeaderBytes;
  header.payloadOffset = alignUp(kHeaderBytes + 16 * uint64_t(header.count));

  std::vector<uint64_t> table(2 * segments.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].second && !segments[i].first) {
      error = "cannot write weight pack '" + path + "': segment " +
              std::to_string(i) + " has no data";
      return false;
    }
    offset = alignUp(offset);
    table[2 * i] = offset;
    table[2 * i + 1] = segments[i].second;
    offset += segments[i].second;
  }
  header.payloadBytes = offset;

  // Hash the payload as it will be laid out on disk, padding included.
  static const char kZeros[kAlign] = {};
  uint64_t hash = fnv1a64(nullptr, 0);
  uint64_t pos = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    hash = fnv1a64(kZeros, size_t(table[2 * i] - pos), hash);
    hash = fnv1a64(segments[i].first, segments[i].second, hash);
    pos = table[2 * i] + segments[i].second;
  }
  header.checksum = hash;

  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f) {
    error = "cannot open weight pack '" + path +
            "' for writing: " + std::strerror(errno);
    return false;
  }
  bool ok = std::fwrite(&header, sizeof(header), 1, f) == 1;
  if (ok && !table.empty())
    ok = std::fwrite(table.data(), sizeof(uint64_t), table.size(), f) ==
         table.size();
  uint64_t tableEnd = kHeaderBytes + 16 * uint64_t(header.count);
  if (ok && header.payloadOffset > tableEnd)
    ok = std::fwrite(kZeros, 1, size_t(header.payloadOffset - tableEnd), f) ==
         header.payloadOffset - tableEnd;
  pos = 0;
  for (size_t i = 0; ok && i < segments.size(); ++i) {
    size_t pad = size_t(table[2 * i] - pos);
    if (pad)
      ok = std::fwrite(kZeros, 1, pad, f) == pad;
    if (ok && segments[i].second)
      ok = std::fwrite(segments[i].first, 1, segments[i].second, f) ==
           segments[i].second;
    pos = table[2 * i] + segments[i].second;
  }
  int savedErrno = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    savedErrno = errno;
  }
  if (!ok) {
    error =
        "cannot write weight pack '" + path + "': " + std::strerror(savedErrno);
    std::remove(path.c_str());
    return false;
  }
  checksum = hash;
  return true;
}

} // namespace sparsec::rt
