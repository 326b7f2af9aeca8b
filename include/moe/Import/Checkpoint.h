//===- Checkpoint.h - MoE weights of a HuggingFace checkpoint ---*- C++ -*-===//
//
// A checkpoint directory: config.json, and the weights in model.safetensors,
// or in shards named by model.safetensors.index.json, or in any *.safetensors
// files. Finds each MoE layer's tensors under its family's names and gives
// them in the compiled layer's layout: router_weight[E,H],
// correction_bias[E] (f32), router_bias[E] (f32), w13[E,2I,H] (gate rows,
// then up rows), w2[E,H,I], w13_bias[E,2I], w2_bias[E,H], shared_w13[2Is,H],
// shared_w2[H,Is], shared_gate[1,H]. Experts are read per expert or from
// fused tensors (transposed, concatenated or interleaved; MXFP4 blocks).
//
//===----------------------------------------------------------------------===//
#ifndef MOE_IMPORT_CHECKPOINT_H
#define MOE_IMPORT_CHECKPOINT_H

#include "moe/Import/HFConfig.h"
#include "moe/Import/Safetensors.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>
#include <vector>

namespace mlir::moe {

/// Part of a checkpoint tensor, read as `count` elements: element k is the
/// tensor's element `offset + (k / cols) * rowStride + (k % cols) *
/// colStride` (row-major index), which picks a matrix out of a fused,
/// transposed or interleaved tensor. FP8 tensors come with their block
/// scales (weight_scale_inv: element [r, c] of the 2-D tensor times scale
/// [r / blockRows, c / blockCols]); MXFP4 ones (gpt-oss) hold FP4 E2M1 codes
/// two a byte, low nibble first, and `mxfp4Scales` one E8M0 exponent per 32
/// of them.
struct TensorPiece {
  const TensorInfo *tensor = nullptr;
  const TensorInfo *scaleInv = nullptr;
  int64_t blockRows = 0, blockCols = 0;
  const TensorInfo *mxfp4Scales = nullptr;
  int64_t count = 0, cols = 1, offset = 0, rowStride = 0, colStride = 1;

  /// All of `t`, in order.
  static TensorPiece whole(const TensorInfo *t);
  /// A `rows x cols` matrix of the tensor, as above.
  TensorPiece view(int64_t offset, int64_t rows, int64_t cols, int64_t rowStride,
                   int64_t colStride) const;
  /// The tensor's own bytes in order: copied as they are when the dtype is
  /// the layer's.
  bool isWholeTensor() const;
};

/// One argument of a compiled layer, as the checkpoint holds it.
struct LayerTensor {
  std::string parameter; ///< The entry point's parameter name (plan).
  TensorDType dtype;     ///< What the layer takes (f32, the element type or FP8 codes).
  std::vector<int64_t> shape;
  /// Checkpoint tensors concatenated along dim 0, then stacked (w13: per
  /// expert, gate then up; w2: per expert, down).
  std::vector<std::vector<TensorPiece>> pieces;
  int64_t bytes() const;
};

class Checkpoint {
public:
  /// Reads `dir`: its config.json (parseHFConfig) and safetensors headers.
  static llvm::Expected<std::unique_ptr<Checkpoint>> open(llvm::StringRef dir);

  const MoELayerConfig &config() const { return layerConfig; }
  llvm::StringRef configPath() const { return configFile; }

  /// The tensors of MoE layer `layer` in the layer's argument order, with
  /// `element` (F32 or BF16) for activations and weights. With
  /// `keepFp8Weights` and an FP8 quantization_config the routed experts'
  /// w13 and w2 stay F8_E4M3 codes, followed by their block scales
  /// (w13_scale, w2_scale; MoELayerConfig::keepFp8Weights). Errors name the
  /// missing or misshapen checkpoint tensor.
  llvm::Expected<std::vector<LayerTensor>>
  layerTensors(int64_t layer, TensorDType element, bool keepFp8Weights = false) const;

private:
  const TensorInfo *tensor(llvm::StringRef name) const;

  std::string directory, configFile;
  MoELayerConfig layerConfig;
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  llvm::StringMap<const TensorInfo *> byName;
};

/// Writes `t`'s bytes, converted to its dtype (from F32, BF16, F16, or FP8
/// e4m3 times its block scales).
void writeLayerTensor(const LayerTensor &t, llvm::raw_ostream &os);

} // namespace mlir::moe

#endif // MOE_IMPORT_CHECKPOINT_H
