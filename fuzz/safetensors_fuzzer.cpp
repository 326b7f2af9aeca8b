//===- safetensors_fuzzer.cpp - fuzzes the safetensors reader -------------===//
//
// Bytes -> SafetensorsFile::parse; every tensor of a file it accepts is read
// to its last byte (ASan reports a range outside the buffer). Nothing may
// crash: every rejection is an error value.
//
//===----------------------------------------------------------------------===//
#include "moe/Import/Safetensors.h"

#include <cstdint>

using namespace mlir;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  auto file = moe::SafetensorsFile::parse(
      llvm::MemoryBuffer::getMemBuffer(bytes, "fuzz", /*RequiresNullTerminator=*/false),
      "fuzz");
  if (!file) {
    llvm::consumeError(file.takeError());
    return 0;
  }
  volatile uint8_t sum = 0;
  for (const std::string &name : (*file)->names()) {
    const moe::TensorInfo *t = (*file)->find(name);
    if (t->data.size() != uint64_t(t->elements() * moe::dtypeBytes(t->dtype)))
      __builtin_trap();
    for (uint8_t b : t->data)
      sum = sum + b;
  }
  return 0;
}
