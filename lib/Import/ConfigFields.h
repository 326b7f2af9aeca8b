//===- ConfigFields.h - typed fields of a config.json object ----*- C++ -*-===//
//
// Reads the fields of one JSON object (the config, or its `text_config`) with
// transformers' defaults and attribute-map aliases, and remembers the first
// error with the field's JSON path.
//
//===----------------------------------------------------------------------===//
#ifndef MOE_LIB_IMPORT_CONFIGFIELDS_H
#define MOE_LIB_IMPORT_CONFIGFIELDS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace mlir::moe::hf {

/// Names of one field: the first is the one written in errors, the others are
/// the aliases transformers' config classes accept for it (attribute_map).
class Names {
public:
  Names(const char *name) : single(name) {}
  Names(llvm::StringRef name) : single(name) {}
  template <size_t N>
  Names(const std::array<llvm::StringRef, N> &names) : many(names) {}

  llvm::ArrayRef<llvm::StringRef> all() const {
    return many.empty() ? llvm::ArrayRef<llvm::StringRef>(single) : many;
  }
  llvm::StringRef front() const { return all().front(); }

private:
  llvm::StringRef single;
  llvm::ArrayRef<llvm::StringRef> many;
};

class ConfigFields {
public:
  /// `path` is the object's JSON path: "$" or "$.text_config".
  ConfigFields(const llvm::json::Object &object, std::string path)
      : object(object), path(std::move(path)) {}

  /// An integer field; without `fallback` it is required.
  int64_t integer(Names names, std::optional<int64_t> fallback = {});
  /// An integer in [min, max] (min 1: "a positive integer").
  int64_t bounded(Names names, std::optional<int64_t> fallback, int64_t min,
                  int64_t max);
  /// A finite number in [min, max].
  double number(Names names, double fallback, double min, double max);
  bool boolean(Names names, bool fallback);
  /// An array of integers in [min, max]; absent: empty.
  std::vector<int64_t> integers(Names names, int64_t min, int64_t max);
  /// An array of strings, each one of `allowed`.
  std::vector<std::string> strings(Names names, llvm::ArrayRef<llvm::StringRef> allowed);
  std::string string(Names names, std::optional<std::string> fallback = {});
  /// Whether any of `names` is present and not null.
  bool has(Names names) const;
  /// The JSON path of a field of this object.
  std::string at(llvm::StringRef key) const { return path + "." + key.str(); }

  /// Records `message` unless an error came first.
  void fail(std::string message) {
    if (!error)
      error = std::move(message);
  }
  /// Records "<path of key>: <message>".
  void failAt(llvm::StringRef key, const llvm::Twine &message) {
    fail(at(key) + ": " + message.str());
  }

  std::optional<std::string> error;

private:
  /// The value of the first present name (null counts as absent); a second
  /// name present with a different value is an error.
  const llvm::json::Value *find(Names names, llvm::StringRef &found);
  const llvm::json::Value *require(Names names, llvm::StringRef expected,
                                   bool required, llvm::StringRef &found);
  /// The array under the first present name (null, after an error, if it
  /// is present and not an array).
  const llvm::json::Array *array(Names names, llvm::StringRef expected,
                                 llvm::StringRef &key);
  void wrongType(llvm::StringRef key, llvm::StringRef expected,
                 const llvm::json::Value &got);

  const llvm::json::Object &object;
  std::string path;
};

} // namespace mlir::moe::hf

#endif // MOE_LIB_IMPORT_CONFIGFIELDS_H
