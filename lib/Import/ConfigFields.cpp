//===- ConfigFields.cpp - typed fields of a config.json object ------------===//
#include "ConfigFields.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir::moe::hf;
namespace json = llvm::json;

namespace {
std::string show(const json::Value &value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << value;
  return text;
}
} // namespace

const json::Value *ConfigFields::find(Names names, llvm::StringRef &found) {
  const json::Value *first = nullptr;
  for (llvm::StringRef name : names.all()) {
    const json::Value *v = object.get(name);
    if (!v || v->kind() == json::Value::Null)
      continue;
    if (!first) {
      first = v;
      found = name;
    } else if (*v != *first) {
      fail(llvm::formatv("{0} ({1}) and {2} ({3}) name the same setting with "
                         "different values",
                         at(found), show(*first), at(name), show(*v)));
    }
  }
  return first;
}

const json::Value *ConfigFields::require(Names names, llvm::StringRef expected,
                                         bool required, llvm::StringRef &found) {
  found = names.front();
  const json::Value *v = find(names, found);
  if (!v && required)
    failAt(names.front(), "missing required field (" + expected + ")");
  return v;
}

void ConfigFields::wrongType(llvm::StringRef key, llvm::StringRef expected,
                             const json::Value &got) {
  failAt(key, "expected " + expected + ", got " + show(got));
}

int64_t ConfigFields::integer(Names names, std::optional<int64_t> fallback) {
  llvm::StringRef key;
  const json::Value *v = require(names, "an integer", !fallback, key);
  if (!v)
    return fallback.value_or(0);
  if (std::optional<int64_t> i = v->getAsInteger())
    return *i;
  wrongType(key, "an integer", *v);
  return 0;
}

int64_t ConfigFields::bounded(Names names, std::optional<int64_t> fallback,
                              int64_t min, int64_t max) {
  int64_t value = integer(names, fallback);
  if (error)
    return value;
  llvm::StringRef key;
  find(names, key);
  if (key.empty())
    key = names.front();
  if (min == 1 && value <= 0)
    failAt(key, llvm::formatv("must be a positive integer, got {0}", value));
  else if (value < min || value > max)
    failAt(key, llvm::formatv("must be in [{0}, {1}], got {2}", min, max, value));
  return value;
}

double ConfigFields::number(Names names, double fallback, double min,
                            double max) {
  llvm::StringRef key;
  const json::Value *v = require(names, "a number", false, key);
  double value = fallback;
  if (v) {
    std::optional<double> d = v->getAsNumber();
    if (!d) {
      wrongType(key, "a number", *v);
      return fallback;
    }
    value = *d;
  }
  if (!error && !(value >= min && value <= max))
    failAt(key, llvm::formatv("must be a number in [{0}, {1}], got {2}",
                              llvm::format("%g", min), llvm::format("%g", max),
                              llvm::format("%g", value)));
  return value;
}

bool ConfigFields::boolean(Names names, bool fallback) {
  llvm::StringRef key;
  const json::Value *v = require(names, "a boolean", false, key);
  if (!v)
    return fallback;
  if (std::optional<bool> b = v->getAsBoolean())
    return *b;
  wrongType(key, "a boolean", *v);
  return fallback;
}

std::string ConfigFields::string(Names names,
                                 std::optional<std::string> fallback) {
  llvm::StringRef key;
  const json::Value *v = require(names, "a string", !fallback, key);
  if (!v)
    return fallback.value_or("");
  if (std::optional<llvm::StringRef> s = v->getAsString())
    return s->str();
  wrongType(key, "a string", *v);
  return "";
}

const json::Array *ConfigFields::array(Names names, llvm::StringRef expected,
                                       llvm::StringRef &key) {
  const json::Value *v = require(names, expected, false, key);
  if (!v)
    return nullptr;
  const json::Array *items = v->getAsArray();
  if (!items)
    wrongType(key, expected, *v);
  return items;
}

std::vector<int64_t> ConfigFields::integers(Names names, int64_t min,
                                            int64_t max) {
  llvm::StringRef key;
  std::vector<int64_t> out;
  const json::Array *items = array(names, "an array of integers", key);
  if (!items)
    return out;
  for (const json::Value &item : *items) {
    std::optional<int64_t> i = item.getAsInteger();
    if (!i || *i < min || *i > max) {
      failAt(key, llvm::formatv("expected integers in [{0}, {1}], got {2}", min,
                                max, show(item)));
      return {};
    }
    out.push_back(*i);
  }
  return out;
}

std::vector<std::string> ConfigFields::strings(Names names,
                                               llvm::ArrayRef<llvm::StringRef> allowed) {
  llvm::StringRef key;
  std::vector<std::string> out;
  const json::Array *items = array(names, "an array of strings", key);
  if (!items)
    return out;
  for (const json::Value &item : *items) {
    std::optional<llvm::StringRef> text = item.getAsString();
    if (!text || !llvm::is_contained(allowed, *text)) {
      failAt(key, llvm::formatv("expected each of \"{0}\", got {1}",
                                llvm::join(allowed, "\", \""), show(item)));
      return {};
    }
    out.push_back(text->str());
  }
  return out;
}

bool ConfigFields::has(Names names) const {
  for (llvm::StringRef name : names.all()) {
    const json::Value *v = object.get(name);
    if (v && v->kind() != json::Value::Null)
      return true;
  }
  return false;
}
