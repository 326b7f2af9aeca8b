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
#include <cmath>
#include <cstring>

using namespace mlir;
using namespace mlir::moe;
namespace json = llvm::json;

namespace {
/// Where a family's checkpoints keep a MoE block's tensors; `{0}` is the
/// decoder layer in `blocks`, the expert in the per-expert names.
struct WeightNames {
  /// Where a MoE block may live (multimodal models nest the language
  /// model); the first one holding the router is used.
  std::vector<const char *> blocks = {"model.layers.{0}.mlp."};
  const char *router = "gate.weight";
  const char *bias = "gate.e_score_correction_bias";
  const char *routerBias = "router.bias";
  const char *gate = "experts.{0}.gate_proj.weight";
  const char *up = "experts.{0}.up_proj.weight";
  const char *down = "experts.{0}.down_proj.weight";
  /// Experts fused into gate_up[E, 2I, H] and down[E, H, I], or transposed
  /// ([E, H, 2I], [E, I, H]); `transposed` is how transformers holds them,
  /// which decides a square shape. `interleaved`: gate and up alternate
  /// along 2I (gpt-oss), else gate comes first.
  const char *fusedGateUp = nullptr;
  const char *fusedDown = "experts.down_proj";
  bool transposed = false;
  bool interleaved = false;
  const char *gateUpBias = "experts.gate_up_proj_bias";
  const char *downBias = "experts.down_proj_bias";
  const char *shared = "shared_experts.";
  const char *sharedGate = "shared_expert_gate.weight";
};

WeightNames weightNames(llvm::StringRef modelType) {
  WeightNames names;
  if (modelType == "mixtral" || modelType == "minimax" || modelType == "minimax_m2") {
    names.blocks = {"model.layers.{0}.block_sparse_moe."};
    names.bias = "e_score_correction_bias"; // MiniMax-M2's, on the block
    names.gate = "experts.{0}.w1.weight";
    names.up = "experts.{0}.w3.weight";
    names.down = "experts.{0}.w2.weight";
  } else if (modelType == "qwen2_moe" || modelType == "qwen3_next" ||
             modelType == "qwen3_5_moe_text") {
    names.blocks = {"model.layers.{0}.mlp.", "model.language_model.layers.{0}.mlp."};
    names.shared = "shared_expert.";
  } else if (modelType == "glm4v_moe_text") {
    names.blocks = {"model.language_model.layers.{0}.mlp.", "model.layers.{0}.mlp."};
  } else if (modelType == "ernie4_5_moe") {
    names.bias = "moe_statics.e_score_correction_bias";
  } else if (modelType == "qwen3_vl_moe_text") {
    names.blocks = {"model.language_model.layers.{0}.mlp.", "model.layers.{0}.mlp.",
                    "layers.{0}.mlp."};
    names.fusedGateUp = "experts.gate_up_proj";
  } else if (modelType == "llama4_text") {
    names.blocks = {"language_model.model.layers.{0}.feed_forward.",
                    "model.language_model.layers.{0}.feed_forward.",
                    "model.layers.{0}.feed_forward."};
    names.router = "router.weight";
    names.fusedGateUp = "experts.gate_up_proj";
    names.transposed = true;
    names.shared = "shared_expert.";
  } else if (modelType == "hunyuan_v1_moe") {
    names.router = "gate.wg.weight";
    names.shared = "shared_mlp.";
  } else if (modelType == "jamba") {
    names.blocks = {"model.layers.{0}.feed_forward."};
    names.router = "router.weight";
  } else if (modelType == "granitemoe") {
    names.blocks = {"model.layers.{0}.block_sparse_moe."};
    names.router = "router.layer.weight";
    names.fusedGateUp = "input_linear.weight";
    names.fusedDown = "output_linear.weight";
  } else if (modelType == "gpt_oss") {
    names.router = "router.weight";
    names.fusedGateUp = "experts.gate_up_proj";
    names.transposed = true;
    names.interleaved = true;
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

/// Element i (row-major) of an MXFP4 tensor: an FP4 E2M1 code times two to
/// its block's E8M0 exponent (bias 127).
float mxfp4Element(const TensorInfo &blocks, const TensorInfo &scales, int64_t i) {
  static constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                      4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                      -2.0f, -3.0f, -4.0f, -6.0f};
  uint8_t pair = blocks.data[size_t(i / 2)];
  uint8_t code = i % 2 ? pair >> 4 : pair & 0xf;
  return std::ldexp(kE2M1[code], int(scales.data[size_t(i / 32)]) - 127);
}

/// Element k of a piece's view, its scales applied.
float pieceElement(const TensorPiece &piece, int64_t k) {
  int64_t i = piece.offset + k / piece.cols * piece.rowStride + k % piece.cols * piece.colStride;
  if (piece.mxfp4Scales)
    return mxfp4Element(*piece.tensor, *piece.mxfp4Scales, i);
  float v = loadElement(*piece.tensor, i);
  if (!piece.scaleInv)
    return v;
  int64_t cols = piece.tensor->shape[1], r = i / cols, c = i % cols;
  int64_t scaleCols = piece.scaleInv->shape[1];
  return v * loadElement(*piece.scaleInv,
                         r / piece.blockRows * scaleCols + c / piece.blockCols);
}
} // namespace

TensorPiece TensorPiece::whole(const TensorInfo *t) {
  TensorPiece piece;
  piece.tensor = t;
  piece.count = piece.cols = t->elements();
  return piece;
}

TensorPiece TensorPiece::view(int64_t at, int64_t rows, int64_t columns, int64_t rowStep,
                              int64_t colStep) const {
  TensorPiece piece = *this;
  piece.offset = at;
  piece.count = rows * columns;
  piece.cols = columns;
  piece.rowStride = rowStep;
  piece.colStride = colStep;
  return piece;
}

bool TensorPiece::isWholeTensor() const {
  return !scaleInv && !mxfp4Scales && offset == 0 && colStride == 1 &&
         count == tensor->elements() && (cols == count || rowStride == cols);
}

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
Checkpoint::layerTensors(int64_t layer, TensorDType element, bool keepFp8Weights) const {
  const MoELayerConfig &c = layerConfig;
  const WeightNames names = weightNames(c.modelType);
  std::string block = llvm::formatv(names.blocks.front(), layer).str();
  for (const char *candidate : names.blocks) {
    std::string prefix = llvm::formatv(candidate, layer).str();
    if (tensor(prefix + names.router)) {
      block = prefix;
      break;
    }
  }
  const int64_t e = c.numExperts, h = c.hiddenSize, i = c.intermediateSize,
                s = c.sharedIntermediateSize;
  auto missing = [&](const std::string &full, llvm::StringRef why = "") {
    return error(directory + ": tensor '" + full + "' is missing (MoE layer " +
                 std::to_string(layer) + " of this " + c.modelType +
                 " checkpoint needs it" + why + ")");
  };
  auto misshapen = [&](const std::string &full, llvm::StringRef expected,
                       const TensorInfo &t) {
    return error(directory + ": tensor '" + full + "': expected " + expected + ", got " +
                 dtypeName(t.dtype) + " " + showShape(t.shape));
  };
  auto isFloat = [](const TensorInfo &t) {
    return t.dtype == TensorDType::F32 || t.dtype == TensorDType::BF16 ||
           t.dtype == TensorDType::F16;
  };

  // Finds `name` in the block with `elements` elements of `shape` (a bias
  // may be [E] or [1, E]: only its element count matters), and the block
  // scales of an FP8 tensor.
  auto find = [&](const std::string &name, llvm::ArrayRef<int64_t> shape,
                  bool countOnly) -> llvm::Expected<TensorPiece> {
    std::string full = block + name;
    const TensorInfo *t = tensor(full);
    if (!t)
      return missing(full);
    int64_t want = 1;
    for (int64_t d : shape)
      want *= d;
    if (countOnly ? t->elements() != want : t->shape != std::vector<int64_t>(shape))
      return error(directory + ": tensor '" + full + "': expected shape " +
                   showShape(shape) + ", got " + showShape(t->shape));
    TensorPiece piece = TensorPiece::whole(t);
    if (isFloat(*t))
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

  // A fused expert tensor of `experts x out x in` weights, as a piece whose
  // element (e, o, k) is at e * out * in + o * rowStep + k * colStep:
  // stored [E, out, in], or [E, in, out] (transposed), or as MXFP4 blocks
  // [E, out, in/32, 16] with scales [E, out, in/32].
  struct Fused {
    TensorPiece piece;
    int64_t rowStep, colStep;
  };
  auto findFused = [&](const std::string &name, int64_t out,
                       int64_t in) -> llvm::Expected<Fused> {
    std::string full = block + name;
    std::vector<int64_t> plain = {e, out, in}, swapped = {e, in, out};
    if (const TensorInfo *t = tensor(full)) {
      if (!isFloat(*t))
        return error(directory + ": tensor '" + full + "' is " + dtypeName(t->dtype) +
                     ": fused expert tensors are read in F32, BF16, F16 or MXFP4");
      // A square shape is read as transformers holds it.
      bool isSwapped = names.transposed ? t->shape == swapped : t->shape != plain;
      if (t->shape != plain && t->shape != swapped)
        return misshapen(full, "shape " + showShape(plain) + " or " + showShape(swapped), *t);
      if (isSwapped)
        return Fused{TensorPiece::whole(t), 1, out};
      return Fused{TensorPiece::whole(t), in, 1};
    }
    const TensorInfo *blocks = tensor(full + "_blocks"), *scales = tensor(full + "_scales");
    if (!blocks)
      return missing(full, " or its MXFP4 '_blocks' and '_scales'");
    if (!c.mxfp4Experts)
      return error(directory + ": tensor '" + full + "_blocks' is MXFP4 but " + configFile +
                   " has no quantization_config with quant_method \"mxfp4\"");
    if (!scales)
      return missing(full + "_scales", ", the scales of the MXFP4 blocks");
    if (in % 32 != 0)
      return error(directory + ": tensor '" + full + "_blocks': MXFP4 blocks of 32 "
                   "need a multiple of 32 inputs, got " + std::to_string(in));
    std::vector<int64_t> blockShape = {e, out, in / 32, 16}, scaleShape = {e, out, in / 32};
    if (blocks->dtype != TensorDType::U8 || blocks->shape != blockShape)
      return misshapen(full + "_blocks", "U8 " + showShape(blockShape), *blocks);
    if (scales->dtype != TensorDType::U8 || scales->shape != scaleShape)
      return misshapen(full + "_scales", "U8 " + showShape(scaleShape), *scales);
    TensorPiece piece;
    piece.tensor = blocks;
    piece.mxfp4Scales = scales;
    return Fused{piece, in, 1};
  };

  std::vector<LayerTensor> out;
  out.reserve(12); // `add` returns references into it: no reallocation
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

  if (llvm::Error err = single(add("router_weight", element, {e, h}), names.router, {e, h}))
    return std::move(err);
  if (c.correctionBias)
    if (llvm::Error err = single(add("correction_bias", TensorDType::F32, {e}),
                                 names.bias, {e}, /*countOnly=*/true))
      return std::move(err);
  if (c.routerBias)
    if (llvm::Error err = single(add("router_bias", TensorDType::F32, {e}),
                                 names.routerBias, {e}))
      return std::move(err);
  const bool keepFp8 = keepFp8Weights && c.fp8WeightBlocks;
  if (keepFp8 && i % c.fp8WeightBlocks->first != 0)
    return error(directory + ": FP8 expert weights are kept as E4M3 codes when "
                 "the scale blocks' rows (" + std::to_string(c.fp8WeightBlocks->first) +
                 ") divide the intermediate size (" + std::to_string(i) +
                 "), so that gate's and up's blocks stack (use --fp8-weights=dequantize)");
  const TensorDType weightType = keepFp8 ? TensorDType::F8E4M3 : element;
  LayerTensor &w13 = add("w13", weightType, {e, 2 * i, h});
  LayerTensor &w2 = add("w2", weightType, {e, h, i});
  // Where up's rows start after gate's, along 2I: the next one when
  // interleaved, I rows on otherwise.
  const int64_t upStep = names.interleaved ? 1 : i, gateStep = names.interleaved ? 2 : 1;
  if (names.fusedGateUp && keepFp8)
    return error(directory + ": FP8 expert weights are kept as E4M3 codes from "
                 "one tensor per expert and projection; this " + c.modelType +
                 " checkpoint fuses them (use --fp8-weights=dequantize)");
  if (names.fusedGateUp) {
    auto gateUp = findFused(names.fusedGateUp, 2 * i, h);
    if (!gateUp)
      return gateUp.takeError();
    auto down = findFused(names.fusedDown, h, i);
    if (!down)
      return down.takeError();
    for (int64_t expert = 0; expert < e; ++expert) {
      const Fused &gu = *gateUp;
      int64_t base = expert * 2 * i * h;
      w13.pieces.push_back(
          {gu.piece.view(base, i, h, gateStep * gu.rowStep, gu.colStep),
           gu.piece.view(base + upStep * gu.rowStep, i, h, gateStep * gu.rowStep, gu.colStep)});
      w2.pieces.push_back(
          {down->piece.view(expert * h * i, h, i, down->rowStep, down->colStep)});
    }
  } else {
    for (int64_t expert = 0; expert < e; ++expert) {
      auto gate = find(llvm::formatv(names.gate, expert).str(), {i, h}, false);
      if (!gate)
        return gate.takeError();
      auto up = find(llvm::formatv(names.up, expert).str(), {i, h}, false);
      if (!up)
        return up.takeError();
      auto down = find(llvm::formatv(names.down, expert).str(), {h, i}, false);
      if (!down)
        return down.takeError();
      if (keepFp8)
        for (auto [name, piece] : {std::pair{names.gate, &*gate}, std::pair{names.up, &*up},
                                   std::pair{names.down, &*down}})
          if (!piece->scaleInv)
            return error(directory + ": tensor '" + block +
                         llvm::formatv(name, expert).str() + "' is " +
                         dtypeName(piece->tensor->dtype) +
                         ": FP8 expert weights are kept as E4M3 codes only when "
                         "every routed expert's are (--fp8-weights=dequantize "
                         "reads any mix)");
      w13.pieces.push_back({*gate, *up});
      w2.pieces.push_back({*down});
    }
  }
  if (keepFp8) {
    // The codes as they are; their scales become w13_scale and w2_scale.
    LayerTensor &w13Scale = add("w13_scale", TensorDType::F32,
                                {e, 2 * i / c.fp8WeightBlocks->first,
                                 llvm::divideCeilSigned(h, c.fp8WeightBlocks->second)});
    LayerTensor &w2Scale = add("w2_scale", TensorDType::F32,
                               {e, llvm::divideCeilSigned(h, c.fp8WeightBlocks->first),
                                llvm::divideCeilSigned(i, c.fp8WeightBlocks->second)});
    for (auto [weights, scales] : {std::pair{&w13, &w13Scale}, std::pair{&w2, &w2Scale}})
      for (std::vector<TensorPiece> &group : weights->pieces) {
        scales->pieces.emplace_back();
        for (TensorPiece &piece : group) {
          scales->pieces.back().push_back(TensorPiece::whole(piece.scaleInv));
          piece.scaleInv = nullptr;
        }
      }
  }
  if (c.expertBias) {
    auto gateUp = find(names.gateUpBias, {e, 2 * i}, false);
    if (!gateUp)
      return gateUp.takeError();
    LayerTensor &w13Bias = add("w13_bias", element, {e, 2 * i});
    for (int64_t expert = 0; expert < e; ++expert)
      w13Bias.pieces.push_back(
          {gateUp->view(expert * 2 * i, 1, i, 0, gateStep),
           gateUp->view(expert * 2 * i + upStep, 1, i, 0, gateStep)});
    if (llvm::Error err = single(add("w2_bias", element, {e, h}), names.downBias, {e, h}))
      return std::move(err);
  }
  if (s) {
    std::string shared = names.shared;
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
                                   names.sharedGate, {1, h}))
        return std::move(err);
  }
  return out;
}

void moe::writeLayerTensor(const LayerTensor &t, llvm::raw_ostream &os) {
  std::vector<uint8_t> chunk;
  for (const std::vector<TensorPiece> &group : t.pieces)
    for (const TensorPiece &piece : group) {
      if (piece.tensor->dtype == t.dtype && piece.isWholeTensor()) {
        os.write(reinterpret_cast<const char *>(piece.tensor->data.data()),
                 piece.tensor->data.size());
        continue;
      }
      const int64_t n = piece.count, width = dtypeBytes(t.dtype);
      if (t.dtype == TensorDType::F8E4M3) {
        // FP8 codes kept as they are, in the view's order.
        chunk.resize(size_t(n));
        for (int64_t k = 0; k < n; ++k)
          chunk[size_t(k)] = piece.tensor->data[size_t(
              piece.offset + k / piece.cols * piece.rowStride + k % piece.cols * piece.colStride)];
        os.write(reinterpret_cast<const char *>(chunk.data()), size_t(n));
        continue;
      }
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
