//===- Checkpoint.cpp - MoE weights of a HuggingFace checkpoint -----------===//
#include "moe/Import/Checkpoint.h"
#include "moe/Support/JSONInput.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <array>
#include <cstring>

using namespace mlir;
using namespace mlir::moe;
namespace json = llvm::json;

namespace {
/// Where a family's checkpoints keep a MoE block's tensors; `{0}` is the
/// decoder layer in `block`, the expert in the expert names.
struct WeightNames {
  const char *block;
  const char *router = "gate.weight";
  const char *bias = "gate.e_score_correction_bias";
  const char *gate = "experts.{0}.gate_proj.weight";
  const char *up = "experts.{0}.up_proj.weight";
  const char *down = "experts.{0}.down_proj.weight";
  const char *shared = "shared_experts.";
  const char *sharedGate = "shared_expert_gate.weight";
};

std::optional<WeightNames> weightNames(llvm::StringRef modelType) {
  WeightNames names{"model.layers.{0}.mlp."};
  if (modelType == "mixtral") {
    names.block = "model.layers.{0}.block_sparse_moe.";
    names.gate = "experts.{0}.w1.weight";
    names.up = "experts.{0}.w3.weight";
    names.down = "experts.{0}.w2.weight";
  } else if (modelType == "qwen2_moe") {
    names.shared = "shared_expert.";
  } else if (modelType == "ernie4_5_moe") {
    names.bias = "moe_statics.e_score_correction_bias";
  } else if (modelType == "qwen3_vl_moe_text" || modelType == "llama4_text") {
    return std::nullopt; // experts stored fused and transposed
  }
  return names;
}

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

std::string showShape(llvm::ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

float bf16ToFloat(uint16_t bits) {
  uint32_t wide = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

/// Every value of a narrow float format as f32, decoded once by APFloat.
template <size_t N>
std::array<float, N> decodeTable(const llvm::fltSemantics &format, unsigned bits) {
  std::array<float, N> table;
  for (size_t code = 0; code < N; ++code)
    table[code] = llvm::APFloat(format, llvm::APInt(bits, code)).convertToFloat();
  return table;
}

float f16ToFloat(uint16_t h) {
  static const auto table = decodeTable<65536>(llvm::APFloat::IEEEhalf(), 16);
  return table[h];
}

/// FP8 e4m3 as in DeepSeek-V3's checkpoints (e4m3fn: no infinities).
float e4m3ToFloat(uint8_t code) {
  static const auto table = decodeTable<256>(llvm::APFloat::Float8E4M3FN(), 8);
  return table[code];
}

/// Round to nearest even; NaN stays a (quiet) NaN.
uint16_t floatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffff) > 0x7f800000)
    return uint16_t(bits >> 16 | 0x40);
  bits += 0x7fff + (bits >> 16 & 1);
  return uint16_t(bits >> 16);
}

float loadElement(const TensorInfo &t, int64_t i) {
  const uint8_t *p = t.data.data();
  switch (t.dtype) {
  case TensorDType::F32: {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  case TensorDType::BF16: {
    uint16_t b;
    std::memcpy(&b, p + 2 * i, 2);
    return bf16ToFloat(b);
  }
  case TensorDType::F16: {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return f16ToFloat(h);
  }
  case TensorDType::F8E4M3:
    return e4m3ToFloat(p[i]);
  default:
    return 0.0f; // refused by layerTensors
  }
}

/// Element i (row-major) of a piece, its block scale applied.
float pieceElement(const TensorPiece &piece, int64_t i) {
  float v = loadElement(*piece.tensor, i);
  if (!piece.scaleInv)
    return v;
  int64_t cols = piece.tensor->shape[1], r = i / cols, c = i % cols;
  int64_t scaleCols = piece.scaleInv->shape[1];
  return v * loadElement(*piece.scaleInv,
                         r / piece.blockRows * scaleCols + c / piece.blockCols);
}
} // namespace

int64_t LayerTensor::bytes() const {
  int64_t n = dtypeBytes(dtype);
  for (int64_t d : shape)
    n *= d;
  return n;
}

llvm::Expected<std::unique_ptr<Checkpoint>> Checkpoint::open(llvm::StringRef dir) {
  auto checkpoint = std::make_unique<Checkpoint>();
  checkpoint->directory = dir.str();
  llvm::SmallString<256> config(dir);
  llvm::sys::path::append(config, "config.json");
  checkpoint->configFile = config.str().str();
  auto text = llvm::MemoryBuffer::getFile(config);
  if (!text)
    return error(config + ": cannot read: " + text.getError().message());
  llvm::Expected<MoELayerConfig> parsed = parseHFConfig((*text)->getBuffer());
  if (!parsed)
    return error(config + ": " + llvm::toString(parsed.takeError()));
  checkpoint->layerConfig = *parsed;

  // The shards: the index's files, else every *.safetensors here.
  std::vector<std::string> shardNames;
  llvm::SmallString<256> index(dir);
  llvm::sys::path::append(index, "model.safetensors.index.json");
  if (llvm::sys::fs::exists(index)) {
    auto indexText = llvm::MemoryBuffer::getFile(index);
    if (!indexText)
      return error(index + ": cannot read: " + indexText.getError().message());
    llvm::Expected<json::Value> indexJson = parseJSONInput((*indexText)->getBuffer());
    if (!indexJson)
      return error(index + ": not valid JSON: " + llvm::toString(indexJson.takeError()));
    const json::Object *map = indexJson->getAsObject()
                                  ? indexJson->getAsObject()->getObject("weight_map")
                                  : nullptr;
    if (!map)
      return error(index + ": $.weight_map: expected an object of tensor -> file");
    llvm::StringSet<> seen;
    for (const auto &[tensor, file] : *map) {
      std::optional<llvm::StringRef> name = file.getAsString();
      if (!name || name->contains('/') || name->contains('\\') || *name == "..")
        return error(index + ": $.weight_map." + tensor.str() +
                     ": expected a file name in this directory");
      if (seen.insert(*name).second)
        shardNames.push_back(name->str());
    }
  } else {
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
         it.increment(ec))
      if (llvm::sys::path::extension(it->path()) == ".safetensors")
        shardNames.push_back(llvm::sys::path::filename(it->path()).str());
    if (ec)
      return error(dir + ": cannot list: " + ec.message());
    llvm::sort(shardNames);
    if (shardNames.empty())
      return error(dir + ": no *.safetensors files (and no "
                         "model.safetensors.index.json)");
  }
  for (const std::string &shard : shardNames) {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, shard);
    llvm::Expected<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::open(path);
    if (!file)
      return file.takeError();
    for (const std::string &name : (*file)->names()) {
      const TensorInfo *info = (*file)->find(name);
      if (!checkpoint->byName.try_emplace(name, info).second)
        return error(path + ": tensor '" + name + "' is also in another shard");
    }
    checkpoint->files.push_back(std::move(*file));
  }
  return checkpoint;
}

const TensorInfo *Checkpoint::tensor(llvm::StringRef name) const {
  auto it = byName.find(name);
  return it == byName.end() ? nullptr : it->second;
}

llvm::Expected<std::vector<LayerTensor>>
Checkpoint::layerTensors(int64_t layer, TensorDType element) const {
  const MoELayerConfig &c = layerConfig;
  std::optional<WeightNames> names = weightNames(c.modelType);
  if (!names)
    return error(directory + ": reading " + c.modelType +
                 " checkpoints is not supported yet (use --config)");
  std::string block = llvm::formatv(names->block, layer).str();
  const int64_t e = c.numExperts, h = c.hiddenSize, i = c.intermediateSize,
                s = c.sharedIntermediateSize;

  // Finds `name` in the block with `elements` elements of `shape` (a bias
  // may be [E] or [1, E]: only its element count matters), and the block
  // scales of an FP8 tensor.
  auto find = [&](const std::string &name, llvm::ArrayRef<int64_t> shape,
                  bool countOnly) -> llvm::Expected<TensorPiece> {
    std::string full = block + name;
    const TensorInfo *t = tensor(full);
    if (!t)
      return error(directory + ": tensor '" + full + "' is missing (MoE layer " +
                   std::to_string(layer) + " of this " + c.modelType +
                   " checkpoint needs it)");
    int64_t want = 1;
    for (int64_t d : shape)
      want *= d;
    if (countOnly ? t->elements() != want : t->shape != std::vector<int64_t>(shape))
      return error(directory + ": tensor '" + full + "': expected shape " +
                   showShape(shape) + ", got " + showShape(t->shape));
    TensorPiece piece{t};
    if (t->dtype == TensorDType::F32 || t->dtype == TensorDType::BF16 ||
        t->dtype == TensorDType::F16)
      return piece;
    if (t->dtype != TensorDType::F8E4M3 || shape.size() != 2)
      return error(directory + ": tensor '" + full + "' is " +
                   dtypeName(t->dtype) + ": only F32, BF16, F16 and block-scaled "
                   "F8_E4M3 weights are supported");
    if (!c.fp8WeightBlocks)
      return error(directory + ": tensor '" + full + "' is F8_E4M3 but " +
                   configFile + " has no FP8 quantization_config "
                   "(weight_block_size) saying how it is scaled");
    auto [rows, cols] = *c.fp8WeightBlocks;
    std::string scaleName = full + "_scale_inv";
    const TensorInfo *scale = tensor(scaleName);
    std::vector<int64_t> scaleShape = {(shape[0] + rows - 1) / rows,
                                       (shape[1] + cols - 1) / cols};
    if (!scale)
      return error(directory + ": tensor '" + scaleName + "' is missing (the "
                   "block scales of the F8_E4M3 tensor '" + full + "')");
    if (scale->shape != scaleShape ||
        (scale->dtype != TensorDType::F32 && scale->dtype != TensorDType::BF16))
      return error(directory + ": tensor '" + scaleName + "': expected F32 or "
                   "BF16 scales of shape " + showShape(scaleShape) + " (blocks of " +
                   std::to_string(rows) + " x " + std::to_string(cols) + "), got " +
                   dtypeName(scale->dtype) + " " + showShape(scale->shape));
    piece.scaleInv = scale;
    piece.blockRows = rows;
    piece.blockCols = cols;
    return piece;
  };

  std::vector<LayerTensor> out;
  out.reserve(7); // `add` returns references into it: no reallocation
  auto add = [&](llvm::StringRef parameter, TensorDType dtype,
                 std::vector<int64_t> shape) -> LayerTensor & {
    out.push_back({parameter.str(), dtype, std::move(shape), {}});
    return out.back();
  };
  auto single = [&](LayerTensor &t, const std::string &name,
                    llvm::ArrayRef<int64_t> shape, bool countOnly = false) -> llvm::Error {
    llvm::Expected<TensorPiece> piece = find(name, shape, countOnly);
    if (!piece)
      return piece.takeError();
    t.pieces.push_back({*piece});
    return llvm::Error::success();
  };

  if (llvm::Error err = single(add("router_weight", element, {e, h}), names->router, {e, h}))
    return std::move(err);
  if (c.correctionBias)
    if (llvm::Error err = single(add("correction_bias", TensorDType::F32, {e}),
                                 names->bias, {e}, /*countOnly=*/true))
      return std::move(err);
  LayerTensor &w13 = add("w13", element, {e, 2 * i, h});
  LayerTensor &w2 = add("w2", element, {e, h, i});
  for (int64_t expert = 0; expert < e; ++expert) {
    auto gate = find(llvm::formatv(names->gate, expert).str(), {i, h}, false);
    if (!gate)
      return gate.takeError();
    auto up = find(llvm::formatv(names->up, expert).str(), {i, h}, false);
    if (!up)
      return up.takeError();
    auto down = find(llvm::formatv(names->down, expert).str(), {h, i}, false);
    if (!down)
      return down.takeError();
    w13.pieces.push_back({*gate, *up});
    w2.pieces.push_back({*down});
  }
  if (s) {
    std::string shared = names->shared;
    LayerTensor &sharedW13 = add("shared_w13", element, {2 * s, h});
    auto gate = find(shared + "gate_proj.weight", {s, h}, false);
    if (!gate)
      return gate.takeError();
    auto up = find(shared + "up_proj.weight", {s, h}, false);
    if (!up)
      return up.takeError();
    sharedW13.pieces.push_back({*gate, *up});
    if (llvm::Error err = single(add("shared_w2", element, {h, s}),
                                 shared + "down_proj.weight", {h, s}))
      return std::move(err);
    if (c.sharedGate)
      if (llvm::Error err = single(add("shared_gate", element, {1, h}),
                                   names->sharedGate, {1, h}))
        return std::move(err);
  }
  return out;
}

void moe::writeLayerTensor(const LayerTensor &t, llvm::raw_ostream &os) {
  std::vector<uint8_t> chunk;
  for (const std::vector<TensorPiece> &group : t.pieces)
    for (const TensorPiece &piece : group) {
      if (piece.tensor->dtype == t.dtype && !piece.scaleInv) {
        os.write(reinterpret_cast<const char *>(piece.tensor->data.data()),
                 piece.tensor->data.size());
        continue;
      }
      const int64_t n = piece.tensor->elements(), width = dtypeBytes(t.dtype);
      chunk.resize(size_t(std::min<int64_t>(n, 1 << 16) * width));
      for (int64_t begin = 0; begin < n; begin += 1 << 16) {
        int64_t count = std::min<int64_t>(n - begin, 1 << 16);
        for (int64_t k = 0; k < count; ++k) {
          float v = pieceElement(piece, begin + k);
          if (t.dtype == TensorDType::F32) {
            std::memcpy(chunk.data() + 4 * k, &v, 4);
          } else {
            uint16_t b = floatToBf16(v);
            std::memcpy(chunk.data() + 2 * k, &b, 2);
          }
        }
        os.write(reinterpret_cast<const char *>(chunk.data()), size_t(count * width));
      }
    }
}
