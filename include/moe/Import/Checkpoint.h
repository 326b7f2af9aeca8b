//===- Checkpoint.h - MoE weights of a HuggingFace checkpoint ---*- C++ -*-===//
//
// A checkpoint directory: config.json, and the weights in model.safetensors,
// or in shards named by model.safetensors.index.json, or in any *.safetensors
// files. Finds each MoE layer's tensors under its family's names and gives
// them in the compiled layer's layout: router_weight[E,H],
// correction_bias[E] (f32), w13[E,2I,H] (gate rows, then up rows), w2[E,H,I],
// shared_w13[2Is,H], shared_w2[H,Is].
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

/// A checkpoint tensor; FP8 ones with their block scales (weight_scale_inv,
/// element [r, c] of the tensor times scale [r / rows, c / cols]).
struct TensorPiece {
  const TensorInfo *tensor = nullptr;
  const TensorInfo *scaleInv = nullptr;
  int64_t blockRows = 0, blockCols = 0;
};

/// One argument of a compiled layer, as the checkpoint holds it.
struct LayerTensor {
  std::string parameter; ///< The entry point's parameter name (plan).
  TensorDType dtype;     ///< What the layer takes (f32 or the element type).
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
  /// `element` (F32 or BF16) for activations and weights. Errors name the
  /// missing or misshapen checkpoint tensor.
  llvm::Expected<std::vector<LayerTensor>> layerTensors(int64_t layer,
                                                        TensorDType element) const;

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
