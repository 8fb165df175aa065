//===- WeightStore.h - Memory-mapped ONNX weight store ----------*- C++ -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//
//
// A read-only store of the tensors of an ONNX model (graph initializers and
// the `value` tensors of Constant nodes), found by scanning the protobuf wire
// format directly. It depends on neither MLIR nor protobuf/libonnx:
//  - raw_data is not copied: views point into a read-only mmap of the file;
//  - external data files are mmapped too, so models past protobuf's 2 GiB
//    message limit load without reading the weights into memory;
//  - every length and varint is bounds-checked, so arbitrary input bytes give
//    an error message, never a crash (the scanner is fuzzed).
//
// See docs/WeightStore.md.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_WEIGHTS_WEIGHTSTORE_H
#define SPARSEC_WEIGHTS_WEIGHTSTORE_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sparsec {

/// 64-bit FNV-1a hash of a byte range, for cheap weight checksums.
inline uint64_t fnv1a64(const void *data, size_t size) {
  const auto *bytes = static_cast<const unsigned char *>(data);
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

/// One tensor of the model. `data` points either into a read-only mapping of
/// the model or of an external data file (no alignment guaranteed: protobuf
/// does not align raw_data), or into an owned 64-byte aligned buffer for
/// tensors stored in typed fields (float_data, int64_data, ...). The bytes are
/// little-endian, `numBytes == product(dims) * elementSize(dataType)`.
/// Tensors of an unsupported data type have `data == nullptr` and
/// `numBytes == 0`; WeightStore::get() says why.
struct TensorView {
  std::string name;
  int dataType = 0; ///< onnx::TensorProto::DataType value.
  std::vector<int64_t> dims;
  const void *data = nullptr;
  size_t numBytes = 0;
  bool external = false; ///< Bytes come from an external data file.
};

class WeightStore {
public:
  /// Maps `onnxPath` and indexes its tensors. Returns nullptr and sets `error`
  /// if the file cannot be read, is not a valid ONNX protobuf, or one of its
  /// tensors is inconsistent (size mismatch, duplicate name, bad external
  /// data reference).
  static std::unique_ptr<WeightStore> open(const std::string &onnxPath,
                                           std::string &error);

  /// Indexes a model held in memory. The bytes are copied, so `data` may be
  /// freed afterwards. Tensors with external data are rejected.
  static std::unique_ptr<WeightStore> openBuffer(const void *data, size_t size,
                                                 std::string &error);

  ~WeightStore();
  WeightStore(const WeightStore &) = delete;
  WeightStore &operator=(const WeightStore &) = delete;

  /// The tensor called `name`, or nullptr.
  const TensorView *lookup(std::string_view name) const;

  /// Like lookup(), but also returns nullptr (and sets `error`) for a tensor
  /// whose data type is not supported.
  const TensorView *get(std::string_view name, std::string &error) const;

  /// All tensors: initializers in file order, then Constant-node tensors in
  /// node order.
  const std::vector<TensorView> &tensors() const { return views; }

  /// The model path, or "<memory buffer>".
  const std::string &path() const { return modelPath; }

  /// Bytes per element of an ONNX data type; 0 if unsupported.
  static size_t elementSize(int onnxDataType);

  /// Short name of an ONNX data type ("float32", "int64", ...), or "unknown".
  static const char *dataTypeName(int onnxDataType);

  /// The values of a float32, float16 or bfloat16 tensor as float32 (a
  /// half-precision export's weights, widened); false for other types.
  static bool readFloat32(const TensorView &view, std::vector<float> &out);

private:
  WeightStore() = default;
  friend class WeightStoreBuilder;

  struct Mapping {
    void *addr;
    size_t size;
  };
  struct AlignedFree {
    void operator()(uint8_t *p) const;
  };

  std::string modelPath;
  std::vector<Mapping> mappings;
  std::vector<std::unique_ptr<uint8_t, AlignedFree>> ownedBuffers;
  std::vector<TensorView> views;
  /// Why views[i] has no data, or empty if it is usable.
  std::vector<std::string> viewErrors;
  /// Keys point into `views[i].name`; `views` is never resized after indexing.
  std::unordered_map<std::string_view, size_t> index;
};

} // namespace sparsec

#endif // SPARSEC_WEIGHTS_WEIGHTSTORE_H
