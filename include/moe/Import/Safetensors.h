//===- Safetensors.h - validated, memory-mapped safetensors files -*- C++ -*-===//
//
// A safetensors file is an 8-byte little-endian header length, a JSON header
// naming each tensor's dtype, shape and byte range in the data that follows,
// then the data. Every claim of the header is checked before a byte of data
// is read: known dtypes, ranges inside the file that do not overlap, and
// shape x element size equal to the range's length.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_IMPORT_SAFETENSORS_H
#define MOE_IMPORT_SAFETENSORS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlir::moe {

enum class TensorDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, Bool, F8E4M3, F8E5M2 };

/// The dtype's name in safetensors headers ("BF16"), and its size in bytes.
llvm::StringRef dtypeName(TensorDType dtype);
int64_t dtypeBytes(TensorDType dtype);

struct TensorInfo {
  TensorDType dtype;
  std::vector<int64_t> shape;
  /// The tensor's bytes (row-major), inside the mapped file.
  llvm::ArrayRef<uint8_t> data;

  int64_t elements() const;
};

class SafetensorsFile {
public:
  /// Maps and validates `path`; errors name the file and, where one is at
  /// fault, the tensor.
  static llvm::Expected<std::unique_ptr<SafetensorsFile>> open(llvm::StringRef path);
  /// Validates a file already in memory (`name` for messages).
  static llvm::Expected<std::unique_ptr<SafetensorsFile>>
  parse(std::unique_ptr<llvm::MemoryBuffer> buffer, llvm::StringRef name);

  const TensorInfo *find(llvm::StringRef tensor) const;
  std::vector<std::string> names() const;
  llvm::StringRef path() const { return name; }

private:
  std::unique_ptr<llvm::MemoryBuffer> buffer;
  std::string name;
  llvm::StringMap<TensorInfo> tensors;
};

/// A tensor of a safetensors file being written.
struct TensorHeader {
  std::string name;
  TensorDType dtype;
  std::vector<int64_t> shape;
};

/// Writes a safetensors file at `path`: the header, then each tensor's bytes
/// in order from `writeData(index, os)`, which must write exactly the
/// tensor's size (checked).
llvm::Error writeSafetensors(
    llvm::StringRef path, llvm::ArrayRef<TensorHeader> tensors,
    llvm::function_ref<void(size_t, llvm::raw_ostream &)> writeData);

} // namespace mlir::moe

#endif // MOE_IMPORT_SAFETENSORS_H
