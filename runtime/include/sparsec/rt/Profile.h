//===- Profile.h - the .sprof activation profile format ---------*- C++ -*-===//
//
// Part of the sparsec project.
//
// A .sprof file records, for each profiled activation site of a model, how
// many tokens were seen and how often each neuron was non-zero:
//
//   char     magic[8] = "SPARSECP"
//   uint32   version = 3                (versions 1, without samples, and
//                                        2, without tile counts, are
//                                        still read)
//   uint32   metadataBytes
//   char     metadata[metadataBytes]   JSON, see below
//   (zero padding to a multiple of 8)
//   uint64   counts[...]               per site, `neurons` counters
//   then per site with samples S > 0:
//   float32  inputs[S * D]             the layer inputs of S sampled tokens
//   uint8    masks[S * ceil(N / 8)]    their active masks, bit n of neuron n
//                                      (LSB first), zero padded to 8 bytes
//   then per site with tile rows R = [r0, r1, ...] (version 3):
//   uint64   tiles[len(R) * N]         for each r, per neuron: the full
//                                      blocks of r consecutive rows of a
//                                      call in which the neuron was
//                                      non-zero
//
// metadata: {"model_hash": "<16 hex digits>", "model": "<path>",
//            "sites": [{"name": "<site>", "neurons": N, "tokens": T,
//                       "samples": S, "input_dim": D,
//                       "tile_rows": [8, 16, 32],
//                       "tile_blocks": [B8, B16, B32]}, ...]}
// ("samples" and "input_dim" are omitted when S == 0, the tile lists when
// there are no tile counts; tile_blocks[i] counts the blocks of
// tile_rows[i] rows seen). Tile counts give the density of PIT micro-tiles
// (r tokens x 1 neuron) as measured on consecutive tokens, where the
// per-neuron counts only allow an estimate that assumes independent tokens.
// The counts of site i follow those of site i - 1, as do the samples and
// the tile counts. The writer and reader live
// in the runtime (which produces profiles) and are shared with the compiler
// (which reads them).
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
  /// Sampled (layer input, active mask) pairs for predictor training.
  int64_t samples = 0;
  int64_t inputDim = 0;
  std::vector<float> sampleInputs;  // samples * inputDim
  std::vector<uint8_t> sampleMasks; // samples * maskBytes()

  /// Per tile_rows[i]: blocks seen, and per neuron the active blocks
  /// (tileCounts[i * neurons + n]).
  std::vector<int64_t> tileRows, tileBlocks;
  std::vector<uint64_t> tileCounts;

  int64_t maskBytes() const { return (neurons + 7) / 8; }
  /// Index of `rows` in tileRows, or -1 (also when no block was seen).
  int tileIndex(int64_t rows) const {
    for (size_t i = 0; i < tileRows.size(); ++i)
      if (tileRows[i] == rows && tileBlocks[i] > 0)
        return int(i);
    return -1;
  }
  /// The share of active `rows` x 1 tiles over `among` (neuron indices;
  /// all neurons when empty), measured from the tile counts, or -1 when
  /// the profile has none for `rows`.
  double measuredTileDensity(int64_t rows,
                             const std::vector<int64_t> &among = {}) const;
  /// The same estimated from the per-neuron frequencies as if tokens were
  /// independent: mean(1 - (1 - p)^rows). Co-activation of neighbouring
  /// tokens makes real tiles sparser.
  double estimatedTileDensity(int64_t rows,
                              const std::vector<int64_t> &among = {}) const;
  bool sampleActive(int64_t sample, int64_t neuron) const {
    return (sampleMasks[size_t(sample * maskBytes() + neuron / 8)] >>
            (neuron % 8)) & 1;
  }
};

struct Profile {
  uint64_t modelHash = 0;
  std::string model;
  std::vector<ProfileSite> sites;

  const ProfileSite *find(const std::string &name) const;
};

/// Reads the whole regular file at `path` into `data`; on failure (missing,
/// a directory or other non-regular file, a read error) returns false with
/// a message naming the file (as `what` 'path') and the cause. Never throws.
bool readFileBytes(const std::string &path, std::string &data, std::string &error,
                   const std::string &what = "file");

/// Reads a .sprof file; on failure returns false with a message naming the
/// file and the problem (never crashes on malformed input).
bool readProfile(const std::string &path, Profile &out, std::string &error);
bool writeProfile(const std::string &path, const Profile &profile,
                  std::string &error);

} // namespace sparsec::rt

#endif // SPARSEC_RT_PROFILE_H
