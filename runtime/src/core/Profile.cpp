//===- Profile.cpp - the .sprof activation profile format ----------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Profile.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <sys/stat.h>

namespace sparsec::rt {

namespace {
constexpr char kMagic[8] = {'S', 'P', 'A', 'R', 'S', 'E', 'C', 'P'};
constexpr uint32_t kVersion = 3;
constexpr uint32_t kMaxMetadata = 64u << 20;

std::string escape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

/// A small JSON reader for the metadata: objects, arrays, strings and
/// non-negative integers. Enough for what the writer produces, and strict:
/// anything else is an error.
class JsonReader {
public:
  explicit JsonReader(const std::string &text) : s(text) {}

  bool parseProfile(Profile &p, std::string &err) {
    bool ok = object([&](const std::string &key) -> bool {
      if (key == "model_hash") {
        std::string hex;
        if (!string(hex))
          return false;
        char *end = nullptr;
        errno = 0;
        p.modelHash = std::strtoull(hex.c_str(), &end, 16);
        return !hex.empty() && end && *end == '\0' && errno == 0;
      }
      if (key == "model")
        return string(p.model);
      if (key == "sites")
        return array([&] {
          ProfileSite site;
          bool r = object([&](const std::string &k) -> bool {
            if (k == "name")
              return string(site.name);
            if (k == "neurons")
              return integer(site.neurons);
            if (k == "tokens")
              return integer(site.tokens);
            if (k == "samples")
              return integer(site.samples);
            if (k == "input_dim")
              return integer(site.inputDim);
            if (k == "tile_rows")
              return integers(site.tileRows);
            if (k == "tile_blocks")
              return integers(site.tileBlocks);
            return skipValue();
          });
          p.sites.push_back(std::move(site));
          return r;
        });
      return skipValue();
    });
    ws();
    if (!ok || pos != s.size()) {
      err = "malformed metadata at offset " + std::to_string(pos);
      return false;
    }
    return true;
  }

private:
  void ws() {
    while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos])))
      ++pos;
  }
  bool eat(char c) {
    ws();
    if (pos < s.size() && s[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  bool string(std::string &out) {
    if (!eat('"'))
      return false;
    out.clear();
    while (pos < s.size() && s[pos] != '"') {
      char c = s[pos++];
      if (c == '\\') {
        if (pos >= s.size())
          return false;
        char e = s[pos++];
        if (e == 'u') {
          if (pos + 4 > s.size())
            return false;
          out += static_cast<char>(std::strtol(s.substr(pos, 4).c_str(), nullptr, 16));
          pos += 4;
        } else {
          out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        }
      } else {
        out += c;
      }
    }
    return eat('"');
  }
  bool integer(int64_t &out) {
    ws();
    size_t start = pos;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos])))
      ++pos;
    if (pos == start || pos - start > 18)
      return false;
    out = std::stoll(s.substr(start, pos - start));
    return true;
  }
  bool integers(std::vector<int64_t> &out) {
    out.clear();
    return array([&] {
      int64_t v;
      if (!integer(v))
        return false;
      out.push_back(v);
      return true;
    });
  }
  template <typename F> bool object(F &&member) {
    if (!eat('{'))
      return false;
    if (eat('}'))
      return true;
    do {
      std::string key;
      if (!string(key) || !eat(':') || !member(key))
        return false;
    } while (eat(','));
    return eat('}');
  }
  template <typename F> bool array(F &&element) {
    if (!eat('['))
      return false;
    if (eat(']'))
      return true;
    do {
      if (!element())
        return false;
    } while (eat(','));
    return eat(']');
  }
  bool skipValue() {
    if (++depth > 64)
      return false;
    ws();
    bool ok;
    if (pos < s.size() && s[pos] == '"') {
      std::string ignored;
      ok = string(ignored);
    } else if (pos < s.size() && s[pos] == '{') {
      ok = object([&](const std::string &) { return skipValue(); });
    } else if (pos < s.size() && s[pos] == '[') {
      ok = array([&] { return skipValue(); });
    } else {
      size_t start = pos;
      while (pos < s.size() && (std::isalnum(static_cast<unsigned char>(s[pos])) ||
                                s[pos] == '-' || s[pos] == '.' || s[pos] == '+'))
        ++pos;
      ok = pos > start;
    }
    --depth;
    return ok;
  }

  const std::string &s;
  size_t pos = 0;
  int depth = 0;
};
} // namespace

const ProfileSite *Profile::find(const std::string &name) const {
  for (const ProfileSite &site : sites)
    if (site.name == name)
      return &site;
  return nullptr;
}

namespace {
/// Mean of `f(n)` over `among`, or over all `neurons` when it is empty.
template <typename F>
double meanOver(int64_t neurons, const std::vector<int64_t> &among, F f) {
  double sum = 0;
  if (among.empty())
    for (int64_t n = 0; n < neurons; ++n)
      sum += f(n);
  else
    for (int64_t n : among)
      sum += f(n);
  const size_t count = among.empty() ? size_t(neurons) : among.size();
  return count ? sum / double(count) : 0.0;
}
} // namespace

double ProfileSite::measuredTileDensity(
    int64_t rows, const std::vector<int64_t> &among) const {
  const int t = tileIndex(rows);
  if (t < 0)
    return -1.0;
  const uint64_t *c = tileCounts.data() + size_t(t) * size_t(neurons);
  const double blocks = double(tileBlocks[size_t(t)]);
  return meanOver(neurons, among,
                  [&](int64_t n) { return double(c[n]) / blocks; });
}

double ProfileSite::estimatedTileDensity(
    int64_t rows, const std::vector<int64_t> &among) const {
  const double seen = double(tokens > 0 ? tokens : 1);
  return meanOver(neurons, among, [&](int64_t n) {
    const double p = std::min(1.0, double(counts[size_t(n)]) / seen);
    return 1.0 - std::pow(1.0 - p, double(rows));
  });
}

bool writeProfile(const std::string &path, const Profile &profile,
                  std::string &error) {
  std::ostringstream meta;
  char hash[32];
  std::snprintf(hash, sizeof(hash), "%016" PRIx64, profile.modelHash);
  meta << "{\"model_hash\": \"" << hash << "\", \"model\": \""
       << escape(profile.model) << "\", \"sites\": [";
  for (size_t i = 0; i < profile.sites.size(); ++i) {
    const ProfileSite &s = profile.sites[i];
    if (static_cast<int64_t>(s.counts.size()) != s.neurons) {
      error = "profile site '" + s.name + "' has " +
              std::to_string(s.counts.size()) + " counters for " +
              std::to_string(s.neurons) + " neurons";
      return false;
    }
    if (s.samples < 0 ||
        s.sampleInputs.size() != size_t(s.samples * s.inputDim) ||
        s.sampleMasks.size() != size_t(s.samples * s.maskBytes())) {
      error = "profile site '" + s.name + "' has inconsistent samples";
      return false;
    }
    if (s.tileBlocks.size() != s.tileRows.size() ||
        s.tileCounts.size() != s.tileRows.size() * size_t(s.neurons)) {
      error = "profile site '" + s.name + "' has inconsistent tile counts";
      return false;
    }
    meta << (i ? ", " : "") << "{\"name\": \"" << escape(s.name)
         << "\", \"neurons\": " << s.neurons << ", \"tokens\": " << s.tokens;
    if (s.samples > 0)
      meta << ", \"samples\": " << s.samples << ", \"input_dim\": "
           << s.inputDim;
    if (!s.tileRows.empty()) {
      auto list = [&](const std::vector<int64_t> &v) {
        meta << "[";
        for (size_t k = 0; k < v.size(); ++k)
          meta << (k ? ", " : "") << v[k];
        meta << "]";
      };
      meta << ", \"tile_rows\": ";
      list(s.tileRows);
      meta << ", \"tile_blocks\": ";
      list(s.tileBlocks);
    }
    meta << "}";
  }
  meta << "]}";
  std::string m = meta.str();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) {
    error = "cannot write '" + path + "': " + std::strerror(errno);
    return false;
  }
  uint32_t version = kVersion, bytes = static_cast<uint32_t>(m.size());
  f.write(kMagic, 8);
  f.write(reinterpret_cast<const char *>(&version), 4);
  f.write(reinterpret_cast<const char *>(&bytes), 4);
  f.write(m.data(), m.size());
  static const char zeros[8] = {};
  f.write(zeros, (8 - (16 + m.size()) % 8) % 8);
  for (const ProfileSite &s : profile.sites)
    f.write(reinterpret_cast<const char *>(s.counts.data()),
            s.counts.size() * sizeof(uint64_t));
  for (const ProfileSite &s : profile.sites) {
    if (s.samples == 0)
      continue;
    f.write(reinterpret_cast<const char *>(s.sampleInputs.data()),
            s.sampleInputs.size() * sizeof(float));
    f.write(reinterpret_cast<const char *>(s.sampleMasks.data()),
            s.sampleMasks.size());
    f.write(zeros, (8 - s.sampleMasks.size() % 8) % 8);
  }
  for (const ProfileSite &s : profile.sites)
    f.write(reinterpret_cast<const char *>(s.tileCounts.data()),
            s.tileCounts.size() * sizeof(uint64_t));
  if (!f) {
    error = "cannot write '" + path + "'";
    return false;
  }
  return true;
}

bool readFileBytes(const std::string &path, std::string &data, std::string &error,
                   const std::string &what) {
  const std::string named = what + " '" + path + "'";
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    error = "cannot open " + named + ": " + std::strerror(errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    error = "cannot read " + named + ": " +
            (S_ISDIR(st.st_mode) ? std::strerror(EISDIR) : "not a regular file");
    return false;
  }
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) {
    error = "cannot open " + named + ": " + std::strerror(errno);
    return false;
  }
  data.clear();
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0)
    data.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) {
    error = "cannot read " + named + ": " + std::strerror(err);
    return false;
  }
  return true;
}

bool readProfile(const std::string &path, Profile &out, std::string &error) {
  std::string data;
  if (!readFileBytes(path, data, error, "profile"))
    return false;
  auto bad = [&](const std::string &what) {
    error = "'" + path + "' is not a valid sparsec profile: " + what;
    return false;
  };
  if (data.size() < 16 || std::memcmp(data.data(), kMagic, 8) != 0)
    return bad("bad magic");
  uint32_t version, bytes;
  std::memcpy(&version, data.data() + 8, 4);
  std::memcpy(&bytes, data.data() + 12, 4);
  if (version < 1 || version > kVersion)
    return bad("unsupported version " + std::to_string(version));
  if (bytes > kMaxMetadata || 16 + static_cast<size_t>(bytes) > data.size())
    return bad("truncated metadata");
  std::string meta = data.substr(16, bytes);
  Profile p;
  std::string err;
  if (!JsonReader(meta).parseProfile(p, err))
    return bad(err);
  size_t offset = 16 + bytes;
  offset += (8 - offset % 8) % 8;
  for (ProfileSite &s : p.sites) {
    if (s.name.empty() || s.neurons <= 0 || s.neurons > (int64_t(1) << 32))
      return bad("site '" + s.name + "' has an invalid neuron count");
    size_t need = static_cast<size_t>(s.neurons) * sizeof(uint64_t);
    if (offset > data.size() || data.size() - offset < need)
      return bad("truncated counts for site '" + s.name + "'");
    s.counts.resize(s.neurons);
    std::memcpy(s.counts.data(), data.data() + offset, need);
    offset += need;
    for (uint64_t c : s.counts)
      if (c > static_cast<uint64_t>(s.tokens))
        return bad("site '" + s.name + "' counts a neuron active more often "
                   "than the tokens seen");
  }
  for (ProfileSite &s : p.sites) {
    if (s.samples == 0)
      continue;
    if (version == 1 || s.samples < 0 || s.samples > s.tokens ||
        s.inputDim <= 0 || s.inputDim > (int64_t(1) << 24))
      return bad("site '" + s.name + "' has an invalid sample description");
    size_t inBytes = size_t(s.samples) * size_t(s.inputDim) * sizeof(float);
    size_t maskBytes = size_t(s.samples) * size_t(s.maskBytes());
    size_t padded = maskBytes + (8 - maskBytes % 8) % 8;
    if (offset > data.size() || data.size() - offset < inBytes + padded)
      return bad("truncated samples for site '" + s.name + "'");
    s.sampleInputs.resize(size_t(s.samples * s.inputDim));
    std::memcpy(s.sampleInputs.data(), data.data() + offset, inBytes);
    s.sampleMasks.assign(data.begin() + long(offset + inBytes),
                         data.begin() + long(offset + inBytes + maskBytes));
    offset += inBytes + padded;
  }
  for (ProfileSite &s : p.sites) {
    if (s.tileRows.empty() && s.tileBlocks.empty())
      continue;
    if (version < 3 || s.tileRows.size() != s.tileBlocks.size() ||
        s.tileRows.size() > 16)
      return bad("site '" + s.name + "' has an invalid tile description");
    for (size_t i = 0; i < s.tileRows.size(); ++i)
      if (s.tileRows[i] <= 0 || s.tileRows[i] > (int64_t(1) << 20))
        return bad("site '" + s.name + "' has an invalid tile size");
    size_t need = s.tileRows.size() * size_t(s.neurons) * sizeof(uint64_t);
    if (offset > data.size() || data.size() - offset < need)
      return bad("truncated tile counts for site '" + s.name + "'");
    s.tileCounts.resize(s.tileRows.size() * size_t(s.neurons));
    std::memcpy(s.tileCounts.data(), data.data() + offset, need);
    offset += need;
    for (size_t i = 0; i < s.tileRows.size(); ++i)
      for (int64_t n = 0; n < s.neurons; ++n)
        if (s.tileCounts[i * size_t(s.neurons) + size_t(n)] >
            uint64_t(s.tileBlocks[i]))
          return bad("site '" + s.name + "' counts a neuron active in more "
                     "tiles than it saw");
  }
  if (offset != data.size())
    return bad("trailing bytes after the last site");
  out = std::move(p);
  return true;
}

} // namespace sparsec::rt
