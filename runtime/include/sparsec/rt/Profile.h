//===- Profile.h - the .sprof activation profile format ---------*- C++ -*-===//
//
// Part of the sparsec project.
//
// A .sprof file records, for each profiled activation site of a model, how
// many tokens were seen and how often each neuron was non-zero:
//
//   char     magic[8] = "SPARSECP"
//   uint32   version = 1
//   uint32   metadataBytes
//   char     metadata[metadataBytes]   JSON, see below
//   (zero padding to a multiple of 8)
//   uint64   counts[...]               per site, `neurons` counters
//
// metadata: {"model_hash": "<16 hex digits>", "model": "<path>",
//            "sites": [{"name": "<site>", "neurons": N, "tokens": T}, ...]}
// The counts of site i follow those of site i - 1. The writer and reader
// live in the runtime (which produces profiles) and are shared with the
// compiler (which reads them).
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RT_PROFILE_H
#define SPARSEC_RT_PROFILE_H

#include <cstdint>
#include <string>
#include <vector>

namespace sparsec::rt {

struct ProfileSite {
  std::string name;
  int64_t neurons = 0;
  int64_t tokens = 0;
  std::vector<uint64_t> counts; // size == neurons
};

struct Profile {
  uint64_t modelHash = 0;
  std::string model;
  std::vector<ProfileSite> sites;

  const ProfileSite *find(const std::string &name) const;
};

/// Reads a .sprof file; on failure returns false with a message naming the
/// file and the problem (never crashes on malformed input).
bool readProfile(const std::string &path, Profile &out, std::string &error);
bool writeProfile(const std::string &path, const Profile &profile,
                  std::string &error);

} // namespace sparsec::rt

#endif // SPARSEC_RT_PROFILE_H
