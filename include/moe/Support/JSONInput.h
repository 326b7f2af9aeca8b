//===- JSONInput.h - JSON parsing with a nesting limit ----------*- C++ -*-===//
#ifndef MOE_SUPPORT_JSONINPUT_H
#define MOE_SUPPORT_JSONINPUT_H

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

namespace mlir::moe {

/// Parses `text` as JSON after checking that arrays and objects nest at most
/// `limits::kMaxJSONDepth` deep: llvm::json parses and destroys values
/// recursively, so deeper input would overflow the stack.
llvm::Expected<llvm::json::Value> parseJSONInput(llvm::StringRef text);

} // namespace mlir::moe

#endif // MOE_SUPPORT_JSONINPUT_H
