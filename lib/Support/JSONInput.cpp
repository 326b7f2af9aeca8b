//===- JSONInput.cpp - JSON parsing with a nesting limit ------------------===//
#include "moe/Support/JSONInput.h"
#include "moe/Support/Limits.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;

llvm::Expected<llvm::json::Value> moe::parseJSONInput(llvm::StringRef text) {
  int depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limits::kMaxJSONDepth)
        return llvm::createStringError(
            llvm::formatv("JSON nests deeper than {0} levels (at byte {1})",
                          limits::kMaxJSONDepth, i)
                .str());
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return llvm::json::parse(text);
}
