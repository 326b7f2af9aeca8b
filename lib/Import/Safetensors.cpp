//===- Safetensors.cpp - validated, memory-mapped safetensors files -------===//
#include "moe/Import/Safetensors.h"
#include "moe/Support/JSONInput.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::moe;
namespace json = llvm::json;

namespace {
/// Header JSON larger than this is refused before parsing (the largest real
/// checkpoints' headers are a few MB).
constexpr uint64_t kMaxHeaderBytes = 256ull << 20;
/// Dimensions and element counts of one tensor.
constexpr int64_t kMaxElements = int64_t(1) << 48;

struct DTypeEntry {
  TensorDType dtype;
  llvm::StringLiteral name;
  int64_t bytes;
};
constexpr DTypeEntry kDTypes[] = {
    {TensorDType::F64, "F64", 8},       {TensorDType::F32, "F32", 4},
    {TensorDType::F16, "F16", 2},       {TensorDType::BF16, "BF16", 2},
    {TensorDType::I64, "I64", 8},       {TensorDType::I32, "I32", 4},
    {TensorDType::I16, "I16", 2},       {TensorDType::I8, "I8", 1},
    {TensorDType::U8, "U8", 1},         {TensorDType::Bool, "BOOL", 1},
    {TensorDType::F8E4M3, "F8_E4M3", 1}, {TensorDType::F8E5M2, "F8_E5M2", 1},
};

llvm::Error fileError(llvm::StringRef file, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 (file + ": " + message).str());
}
} // namespace

llvm::StringRef moe::dtypeName(TensorDType dtype) {
  for (const DTypeEntry &e : kDTypes)
    if (e.dtype == dtype)
      return e.name;
  return "?";
}

int64_t moe::dtypeBytes(TensorDType dtype) {
  for (const DTypeEntry &e : kDTypes)
    if (e.dtype == dtype)
      return e.bytes;
  return 0;
}

int64_t TensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

llvm::Expected<std::unique_ptr<SafetensorsFile>>
SafetensorsFile::open(llvm::StringRef path) {
  // Mapped, not read: a shard is gigabytes and only its expert tensors are
  // touched.
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return fileError(path, "cannot read: " + buffer.getError().message());
  return parse(std::move(*buffer), path);
}

llvm::Expected<std::unique_ptr<SafetensorsFile>>
SafetensorsFile::parse(std::unique_ptr<llvm::MemoryBuffer> buffer,
                       llvm::StringRef name) {
  llvm::StringRef bytes = buffer->getBuffer();
  if (bytes.size() < 8)
    return fileError(name, llvm::formatv("{0} bytes is too short for a "
                                         "safetensors file (8-byte header length)",
                                         bytes.size()));
  uint64_t headerBytes = 0;
  for (int i = 7; i >= 0; --i)
    headerBytes = headerBytes << 8 | uint8_t(bytes[i]);
  if (headerBytes > kMaxHeaderBytes || headerBytes > bytes.size() - 8)
    return fileError(name, llvm::formatv("header length {0} does not fit in "
                                         "the file's {1} bytes (truncated or "
                                         "not safetensors)",
                                         headerBytes, bytes.size()));
  llvm::Expected<json::Value> header =
      parseJSONInput(bytes.substr(8, headerBytes));
  if (!header)
    return fileError(name, "header is not valid JSON: " +
                               llvm::toString(header.takeError()));
  const json::Object *object = header->getAsObject();
  if (!object)
    return fileError(name, "header is not a JSON object");

  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  file->name = name.str();
  llvm::ArrayRef<uint8_t> data(
      reinterpret_cast<const uint8_t *>(bytes.data()) + 8 + headerBytes,
      bytes.size() - 8 - headerBytes);
  struct Range {
    uint64_t begin, end;
    std::string tensor;
  };
  std::vector<Range> ranges;
  for (const auto &member : *object) {
    const std::string key = member.first.str();
    const json::Value &value = member.second;
    if (key == "__metadata__")
      continue;
    auto bad = [&](const llvm::Twine &what) {
      return fileError(name, "tensor '" + key + "': " + what);
    };
    const json::Object *entry = value.getAsObject();
    if (!entry)
      return bad("expected an object with dtype, shape and data_offsets");
    std::optional<llvm::StringRef> dtypeText = entry->getString("dtype");
    if (!dtypeText)
      return bad("missing dtype");
    const DTypeEntry *dtype = llvm::find_if(
        kDTypes, [&](const DTypeEntry &e) { return e.name == *dtypeText; });
    if (dtype == std::end(kDTypes))
      return bad("unknown dtype \"" + *dtypeText + "\"");
    const json::Array *shape = entry->getArray("shape");
    const json::Array *offsets = entry->getArray("data_offsets");
    if (!shape || !offsets || offsets->size() != 2)
      return bad("expected shape (an array) and data_offsets ([begin, end])");
    TensorInfo info;
    info.dtype = dtype->dtype;
    int64_t elements = 1;
    for (const json::Value &d : *shape) {
      std::optional<int64_t> dim = d.getAsInteger();
      if (!dim || *dim < 0 || *dim > kMaxElements)
        return bad("shape entries must be integers in [0, 2^48]");
      info.shape.push_back(*dim);
      if (*dim != 0 && elements > kMaxElements / *dim)
        return bad("more than 2^48 elements");
      elements *= *dim;
    }
    std::optional<int64_t> begin = (*offsets)[0].getAsInteger();
    std::optional<int64_t> end = (*offsets)[1].getAsInteger();
    if (!begin || !end || *begin < 0 || *end < *begin ||
        uint64_t(*end) > data.size())
      return bad(llvm::formatv("data_offsets must satisfy 0 <= begin <= end "
                               "<= {0} (the data's bytes; a truncated file?)",
                               data.size()));
    uint64_t expected = uint64_t(elements) * uint64_t(dtype->bytes);
    if (uint64_t(*end - *begin) != expected)
      return bad(llvm::formatv("{0} bytes for {1} {2} elements (expected {3})",
                               *end - *begin, elements, dtype->name, expected));
    info.data = data.slice(*begin, *end - *begin);
    ranges.push_back({uint64_t(*begin), uint64_t(*end), key});
    file->tensors[key] = std::move(info);
  }
  llvm::sort(ranges, [](const Range &a, const Range &b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].begin < ranges[i - 1].end)
      return fileError(name, "tensors '" + ranges[i - 1].tensor + "' and '" +
                                 ranges[i].tensor + "' overlap");
  file->buffer = std::move(buffer);
  return file;
}

const TensorInfo *SafetensorsFile::find(llvm::StringRef tensor) const {
  auto it = tensors.find(tensor);
  return it == tensors.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto &entry : tensors)
    out.push_back(entry.getKey().str());
  llvm::sort(out);
  return out;
}

llvm::Error moe::writeSafetensors(
    llvm::StringRef path, llvm::ArrayRef<TensorHeader> tensors,
    llvm::function_ref<void(size_t, llvm::raw_ostream &)> writeData) {
  json::Object header;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const TensorHeader &t : tensors) {
    json::Array shape;
    uint64_t bytes = uint64_t(dtypeBytes(t.dtype));
    for (int64_t d : t.shape) {
      shape.push_back(d);
      bytes *= uint64_t(d);
    }
    header[t.name] = json::Object{
        {"dtype", dtypeName(t.dtype)},
        {"shape", std::move(shape)},
        {"data_offsets", json::Array{int64_t(offset), int64_t(offset + bytes)}}};
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string text;
  llvm::raw_string_ostream(text) << json::Value(std::move(header));
  // Pad the header with spaces so that the data starts 8-byte aligned.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return fileError(path, "cannot write: " + ec.message());
  uint64_t length = text.size();
  for (int i = 0; i < 8; ++i)
    os << char(length >> (8 * i) & 0xff);
  os << text;
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t before = os.tell();
    writeData(i, os);
    if (os.tell() - before != sizes[i])
      return fileError(path, llvm::formatv("tensor '{0}': {1} bytes written, "
                                           "{2} expected",
                                           tensors[i].name, os.tell() - before,
                                           sizes[i]));
  }
  os.close();
  if (os.has_error())
    return fileError(path, "write failed: " + os.error().message());
  return llvm::Error::success();
}
