//===- SafetensorsTest.cpp - the safetensors reader and writer ------------===//
#include "moe/Import/Safetensors.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"

#include "gtest/gtest.h"

#include <cstring>

using namespace mlir::moe;

namespace {
/// A file image: 8-byte length, `header`, then `data`.
std::string image(const std::string &header, const std::string &data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[i] = char(n >> (8 * i) & 0xff);
  return out + header + data;
}

std::string errorOf(const std::string &bytes) {
  auto file = SafetensorsFile::parse(
      llvm::MemoryBuffer::getMemBufferCopy(bytes, "t.safetensors"), "t.safetensors");
  if (file)
    return "";
  return llvm::toString(file.takeError());
}

TEST(Safetensors, ReadsTensorsAndMetadata) {
  std::string data(6 * 4 + 2 * 2, '\0');
  float values[6] = {0, 1, 2, 3, 4, 5};
  std::memcpy(data.data(), values, sizeof(values));
  auto file = SafetensorsFile::parse(
      llvm::MemoryBuffer::getMemBufferCopy(
          image(R"({"__metadata__": {"format": "pt"},
                    "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                    "b": {"dtype": "BF16", "shape": [2], "data_offsets": [24, 28]}})",
                data)),
      "t");
  ASSERT_TRUE(static_cast<bool>(file)) << llvm::toString(file.takeError());
  EXPECT_EQ((*file)->names(), (std::vector<std::string>{"a", "b"}));
  const TensorInfo *a = (*file)->find("a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->dtype, TensorDType::F32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  float five;
  std::memcpy(&five, a->data.data() + 20, 4);
  EXPECT_EQ(five, 5.0f);
  EXPECT_EQ((*file)->find("b")->data.size(), 4u);
  EXPECT_EQ((*file)->find("c"), nullptr);
}

TEST(Safetensors, EveryHeaderClaimIsChecked) {
  auto one = [](const char *entry, size_t dataBytes) {
    return errorOf(image(std::string(R"({"t": )") + entry + "}", std::string(dataBytes, '\0')));
  };
  EXPECT_NE(errorOf("1234").find("too short"), std::string::npos);
  EXPECT_NE(errorOf(std::string("\xff\xff\xff\xff\0\0\0\0{}", 10)).find("does not fit"),
            std::string::npos);
  EXPECT_NE(errorOf(image("[1]", "")).find("not a JSON object"), std::string::npos);
  EXPECT_NE(errorOf(image("{", "")).find("not valid JSON"), std::string::npos);
  EXPECT_EQ(one(R"({"dtype": "F33", "shape": [1], "data_offsets": [0, 4]})", 4),
            "t.safetensors: tensor 't': unknown dtype \"F33\"");
  // A truncated file: the range ends past the data.
  EXPECT_NE(one(R"({"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})", 8)
                .find("tensor 't': data_offsets must satisfy"),
            std::string::npos);
  EXPECT_EQ(one(R"({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]})", 8),
            "t.safetensors: tensor 't': 8 bytes for 3 F32 elements (expected 12)");
  EXPECT_NE(one(R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]})", 0)
                .find("shape entries must be integers"),
            std::string::npos);
  EXPECT_NE(one(R"({"dtype": "F32", "shape": [16777216, 16777216, 16777216],
                    "data_offsets": [0, 0]})", 0)
                .find("more than 2^48 elements"),
            std::string::npos);
  EXPECT_NE(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [4, 0]})", 4)
                .find("data_offsets must satisfy"),
            std::string::npos);
  EXPECT_EQ(errorOf(image(R"({"x": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                              "y": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}})",
                          std::string(4, '\0'))),
            "t.safetensors: tensors 'x' and 'y' overlap");
}

TEST(Safetensors, WritesWhatItReads) {
  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("moe-st", "safetensors", path));
  llvm::FileRemover remove(path);
  std::vector<TensorHeader> tensors = {{"w", TensorDType::BF16, {2, 3}},
                                       {"bias", TensorDType::F32, {3}}};
  llvm::Error e = writeSafetensors(path, tensors, [](size_t i, llvm::raw_ostream &os) {
    for (int k = 0; k < (i == 0 ? 12 : 12); ++k)
      os << char(i * 16 + k);
  });
  ASSERT_FALSE(static_cast<bool>(e)) << llvm::toString(std::move(e));
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(static_cast<bool>(file)) << llvm::toString(file.takeError());
  const TensorInfo *bias = (*file)->find("bias");
  ASSERT_TRUE(bias);
  EXPECT_EQ(bias->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(bias->data[0], 16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*file)->find("w")->data.data()) % 8, 0u);
  // A writer callback that writes the wrong number of bytes is an error.
  llvm::Error short_ = writeSafetensors(path, tensors, [](size_t, llvm::raw_ostream &os) {
    os << "x";
  });
  ASSERT_TRUE(static_cast<bool>(short_));
  EXPECT_NE(llvm::toString(std::move(short_)).find("1 bytes written, 12 expected"),
            std::string::npos);
}
} // namespace
