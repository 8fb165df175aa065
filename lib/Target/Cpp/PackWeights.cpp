//===- PackWeights.cpp - write the weight pack of a model ----------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/Target/Cpp/PackWeights.h"
#include "sparsec/Dialect/Sparsec/IR/Sparsec.h"
#include "sparsec/Weights/WeightStore.h"
#include "sparsec/rt/Half.h"
#include "sparsec/rt/Runtime.h"

#include "mlir/IR/BuiltinAttributes.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>

using namespace mlir;
using namespace sparsec;

LogicalResult sparsec::packWeights(ModuleOp module, const WeightStore &store,
                                   StringRef packPath, StringRef manifestPath,
                                   uint64_t &checksum, uint64_t &totalBytes) {
  // Segments are written as they are made, so only one transformed weight
  // (and its intermediate forms) is in memory at a time.
  std::string error;
  rt::WeightPackWriter writer;
  auto globals = module.getOps<GlobalOp>();
  if (!writer.open(packPath.str(), size_t(std::distance(globals.begin(), globals.end())),
                   error))
    return module.emitError(error);
  size_t written = 0;
  llvm::json::Array entries;
  uint64_t offset = 0;
  for (GlobalOp global : globals) {
    std::vector<std::vector<char>> owned; // this weight's transformed forms
    auto type = cast<RankedTensorType>(global.getType());
    const void *data = nullptr;
    size_t bytes = 0, eltBytes = 0;
    int dataType = 0;
    SmallVector<int64_t> dims;
    std::string source = global.getSource().str();
    if (ElementsAttr value = global.getValueAttr()) {
      // Compiler-made weights (trained predictors) carry their data.
      auto valueType = cast<RankedTensorType>(value.getType());
      std::vector<char> raw;
      if (auto dense = dyn_cast<DenseElementsAttr>(value);
          dense && valueType.getElementType().isF32()) {
        for (float f : dense.getValues<float>()) {
          const char *c = reinterpret_cast<const char *>(&f);
          raw.insert(raw.end(), c, c + 4);
        }
      } else if (auto res = dyn_cast<DenseF32ResourceElementsAttr>(value)) {
        auto array = res.tryGetAsArrayRef();
        if (!array)
          return global.emitError("the data of '")
                 << global.getSymName() << "' is missing";
        const char *c = reinterpret_cast<const char *>(array->data());
        raw.assign(c, c + array->size() * sizeof(float));
      } else {
        return global.emitError("inline weight data must be float32");
      }
      if (raw.size() != size_t(valueType.getNumElements()) * 4)
        return global.emitError("the data of '")
               << global.getSymName() << "' does not match its type";
      owned.push_back(std::move(raw));
      data = owned.back().data();
      bytes = owned.back().size();
      eltBytes = 4;
      dataType = 1;
      dims.assign(valueType.getShape().begin(), valueType.getShape().end());
      source = "<inline>";
    } else {
      std::string why;
      const TensorView *view = store.get(source, why);
      if (!view)
        return global.emitError("weight '")
               << source << "': "
               << (why.empty() ? "not in the model file" : why);
      data = view->data;
      bytes = view->numBytes;
      eltBytes = WeightStore::elementSize(view->dataType);
      dataType = view->dataType;
      dims.assign(view->dims.begin(), view->dims.end());
    }
    llvm::json::Array transforms;
    if (auto list = global.getTransforms()) {
      for (Attribute a : *list) {
        StringRef t = cast<StringAttr>(a).getValue();
        transforms.push_back(t.str());
        if (t == "transpose" && dims.size() == 2) {
          int64_t rows = dims[0], cols = dims[1];
          std::vector<char> out(bytes);
          const char *src = static_cast<const char *>(data);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
              std::memcpy(&out[(c * rows + r) * eltBytes],
                          src + (r * cols + c) * eltBytes, eltBytes);
          owned.push_back(std::move(out));
          data = owned.back().data();
          std::swap(dims[0], dims[1]);
        } else if ((t == "permute_rows" || t == "permute_cols") &&
                   (dims.size() == 2 || (dims.size() == 1 && t == "permute_rows")) &&
                   global.getPermutation()) {
          // New row (column) i is old row (column) perm[i].
          ArrayRef<int64_t> perm = *global.getPermutation();
          const bool rowsT = t == "permute_rows";
          const int64_t rows = dims[0], cols = dims.size() == 2 ? dims[1] : 1;
          const int64_t n = rowsT ? rows : cols;
          std::vector<bool> seen(size_t(n), false);
          bool valid = int64_t(perm.size()) == n;
          for (int64_t v : perm) {
            valid = valid && v >= 0 && v < n && !seen[size_t(v)];
            if (valid)
              seen[size_t(v)] = true;
          }
          if (!valid)
            return global.emitError("the permutation of '")
                   << global.getSymName() << "' is not a permutation of "
                   << n << " indices";
          std::vector<char> out(bytes);
          const char *src = static_cast<const char *>(data);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
              int64_t from = rowsT ? perm[size_t(r)] * cols + c
                                   : r * cols + perm[size_t(c)];
              std::memcpy(&out[size_t(r * cols + c) * eltBytes],
                          src + from * eltBytes, eltBytes);
            }
          owned.push_back(std::move(out));
          data = owned.back().data();
        } else if ((t.starts_with("slice_rows:") || t.starts_with("slice_cols:")) &&
                   (dims.size() == 2 || (dims.size() == 1 && t.starts_with("slice_rows")))) {
          // Rows (columns) [lo, hi): one device's part of a split layer.
          const bool rowsT = t.starts_with("slice_rows");
          SmallVector<StringRef, 3> parts;
          t.split(parts, ':');
          int64_t lo = 0, hi = 0;
          const int64_t rows = dims[0], cols = dims.size() == 2 ? dims[1] : 1;
          const int64_t n = rowsT ? rows : cols;
          if (parts.size() != 3 || parts[1].getAsInteger(10, lo) ||
              parts[2].getAsInteger(10, hi) || lo < 0 || hi > n || lo >= hi)
            return global.emitError("invalid weight transform '") << t << "'";
          const int64_t outRows = rowsT ? hi - lo : rows,
                        outCols = rowsT ? cols : hi - lo;
          std::vector<char> out(size_t(outRows * outCols) * eltBytes);
          const char *src = static_cast<const char *>(data);
          for (int64_t r = 0; r < outRows; ++r)
            std::memcpy(&out[size_t(r * outCols) * eltBytes],
                        src + ((rowsT ? r + lo : r) * cols + (rowsT ? 0 : lo)) * eltBytes,
                        size_t(outCols) * eltBytes);
          owned.push_back(std::move(out));
          data = owned.back().data();
          bytes = owned.back().size();
          if (rowsT)
            dims[0] = outRows;
          else
            dims[1] = outCols;
        } else if (t == "widen" && (dataType == 10 || dataType == 16)) {
          // A half-precision export's weight, widened to float32.
          TensorView half;
          half.dataType = dataType;
          half.data = data;
          half.numBytes = bytes;
          std::vector<float> values;
          WeightStore::readFloat32(half, values);
          std::vector<char> out(values.size() * 4);
          std::memcpy(out.data(), values.data(), out.size());
          owned.push_back(std::move(out));
          data = owned.back().data();
          bytes = owned.back().size();
          eltBytes = 4;
          dataType = 1;
        } else if ((t == "f16" || t == "bf16") && dataType == 1) {
          // Round to nearest even (float16: ONNX type 10, bfloat16: 16).
          const bool bf = t == "bf16";
          size_t count = bytes / 4;
          std::vector<char> out(count * 2);
          const float *src = static_cast<const float *>(data);
          for (size_t i = 0; i < count; ++i) {
            uint16_t h =
                bf ? rt::floatToBFloat16(src[i]) : rt::floatToHalf(src[i]);
            std::memcpy(&out[i * 2], &h, 2);
          }
          owned.push_back(std::move(out));
          data = owned.back().data();
          bytes = count * 2;
          eltBytes = 2;
          dataType = bf ? 16 : 10;
        } else {
          return global.emitError("unsupported weight transform '")
                 << t << "' for a rank-" << dims.size() << " "
                 << WeightStore::dataTypeName(dataType) << " weight";
        }
      }
    }
    if (onnxDataTypeOf(type.getElementType()) != dataType)
      return global.emitError("weight '")
             << source << "' is " << WeightStore::dataTypeName(dataType)
             << " after its transforms but " << type.getElementType()
             << " in the IR";
    if (ArrayRef<int64_t>(dims) != type.getShape())
      return global.emitError("weight '")
             << source << "' has shape ["
             << llvm::make_range(dims.begin(), dims.end())
             << "] after its transforms, but the IR declares " << type;
    if (!writer.add(data, bytes, error))
      return module.emitError(error);
    offset = (offset + 63) & ~uint64_t(63);
    entries.push_back(llvm::json::Object{
        {"index", static_cast<int64_t>(written++)},
        {"symbol", global.getSymName().str()},
        {"source", source},
        {"dtype", WeightStore::dataTypeName(dataType)},
        {"shape", llvm::json::Array(dims)},
        {"transforms", std::move(transforms)},
        {"permutation", global.getPermutation()
                            ? llvm::json::Value(llvm::json::Array(*global.getPermutation()))
                            : llvm::json::Value(nullptr)},
        {"offset", static_cast<int64_t>(offset)},
        {"bytes", static_cast<int64_t>(bytes)}});
    offset += bytes;
  }
  totalBytes = offset;
  if (!writer.finish(checksum, error))
    return module.emitError(error);

  std::error_code ec;
  llvm::raw_fd_ostream manifest(manifestPath, ec);
  if (ec)
    return module.emitError("cannot write '")
           << manifestPath << "': " << ec.message();
  auto source = module->getAttrOfType<StringAttr>("sparsec.source");
  llvm::json::Object root{
      {"model", source ? source.getValue().str() : std::string()},
      {"weights_file", llvm::sys::path::filename(packPath).str()},
      {"checksum", llvm::formatv("{0:x16}", checksum).str()},
      {"payload_bytes", static_cast<int64_t>(totalBytes)},
      {"segments", std::move(entries)}};
  manifest << llvm::formatv("{0:2}", llvm::json::Value(std::move(root)))
           << "\n";
  return success();
}
