//===- MoEAttrs.cpp - moe attributes: syntax and verification -------------===//
#include "moe/Dialect/MoE/IR/MoEAttrs.h"
#include "moe/Dialect/MoE/IR/MoEDialect.h"
#include "moe/Support/Limits.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include <cmath>

using namespace mlir;
using namespace mlir::moe;

#include "moe/Dialect/MoE/IR/MoEEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "moe/Dialect/MoE/IR/MoEAttrs.cpp.inc"

void MoEDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "moe/Dialect/MoE/IR/MoEAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// RoutingAttr
//===----------------------------------------------------------------------===//

// Syntax: `<score, top_k = K [, n_group = G, topk_group = TG] [, group_max]
//          [, normalize] [, scale = S] [, correction_bias] [, logits_bf16]>`;
//          omitted fields take defaults.
Attribute RoutingAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef scoreName;
  if (parser.parseLess() || parser.parseKeyword(&scoreName))
    return {};
  std::optional<ScoreFunction> score = symbolizeScoreFunction(scoreName);
  if (!score) {
    parser.emitError(loc) << "unknown score function '" << scoreName
                          << "' (expected softmax or sigmoid)";
    return {};
  }
  int64_t topK = 0, nGroup = 1, topkGroup = 1;
  bool normalize = false, correctionBias = false, groupMax = false,
       logitsBf16 = false, sawTopK = false;
  double scale = 1.0;
  llvm::StringSet<> seen;
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc keyLoc = parser.getCurrentLocation();
    StringRef key;
    if (parser.parseKeyword(&key))
      return {};
    if (!seen.insert(key).second) {
      parser.emitError(keyLoc) << "routing field '" << key << "' given twice";
      return {};
    }
    if (key == "normalize") {
      normalize = true;
    } else if (key == "correction_bias") {
      correctionBias = true;
    } else if (key == "group_max") {
      groupMax = true;
    } else if (key == "logits_bf16") {
      logitsBf16 = true;
    } else if (key == "scale") {
      if (parser.parseEqual() || parser.parseFloat(scale))
        return {};
    } else if (key == "top_k" || key == "n_group" || key == "topk_group") {
      int64_t &field =
          key == "top_k" ? topK : (key == "n_group" ? nGroup : topkGroup);
      sawTopK |= key == "top_k";
      if (parser.parseEqual() || parser.parseInteger(field))
        return {};
    } else {
      parser.emitError(keyLoc) << "unknown routing field '" << key << "'";
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  if (!sawTopK) {
    parser.emitError(loc) << "routing needs 'top_k = N'";
    return {};
  }
  return getChecked([&] { return parser.emitError(loc); },
                    parser.getContext(), *score, topK, nGroup, topkGroup,
                    normalize, llvm::APFloat(scale), correctionBias, groupMax,
                    logitsBf16);
}

void RoutingAttr::print(AsmPrinter &printer) const {
  printer << "<" << stringifyScoreFunction(getScore())
          << ", top_k = " << getTopK();
  if (getNGroup() != 1 || getTopkGroup() != 1)
    printer << ", n_group = " << getNGroup()
            << ", topk_group = " << getTopkGroup();
  if (getGroupMax())
    printer << ", group_max";
  if (getNormalize())
    printer << ", normalize";
  if (!getScale().isExactlyValue(1.0)) {
    printer << ", scale = ";
    printer.printFloat(getScale());
  }
  if (getCorrectionBias())
    printer << ", correction_bias";
  if (getLogitsBf16())
    printer << ", logits_bf16";
  printer << ">";
}

LogicalResult
RoutingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                    ScoreFunction, int64_t topK, int64_t nGroup,
                    int64_t topkGroup, bool, llvm::APFloat scale, bool,
                    bool groupMax, bool) {
  if (topK <= 0)
    return emitError() << "routing_c1: top_k must be positive, got " << topK;
  if (nGroup <= 0)
    return emitError() << "routing_c2: n_group must be positive, got "
                       << nGroup;
  if (topkGroup <= 0 || topkGroup > nGroup)
    return emitError() << "routing_c3: topk_group must be in [1, n_group = "
                       << nGroup << "], got " << topkGroup;
  if (groupMax && nGroup == 1)
    return emitError() << "routing_c7: group_max ranks expert groups: it "
                          "needs n_group > 1";
  if (topK > limits::kMaxTopK || nGroup > limits::kMaxTopK)
    return emitError() << "routing_c6: top_k (" << topK << ") and n_group ("
                       << nGroup << ") must be at most " << limits::kMaxTopK;
  if (!scale.isFiniteNonZero() || scale.isNegative())
    return emitError() << "routing_c4: scale must be finite and positive, got "
                       << scale.convertToDouble();
  // The lowering multiplies the weights by the scale as an f32 constant: a
  // value that rounds to 0, to infinity or to a subnormal (flushed on GPUs)
  // would silently change the layer.
  llvm::APFloat single = scale;
  bool losesInfo = false;
  (void)single.convert(llvm::APFloat::IEEEsingle(),
                       llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  if (!single.isNormal())
    return emitError() << "routing_c5: scale " << scale.convertToDouble()
                       << " is not a normal f32 (it must lie in [2^-126, "
                          "3.4028235e38] after rounding to f32)";
  return success();
}

//===----------------------------------------------------------------------===//
// LayoutAttr
//===----------------------------------------------------------------------===//

LogicalResult LayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 int64_t ep, int64_t tp) {
  if (ep <= 0 || tp <= 0)
    return emitError() << "layout_c1: ep and tp must be positive, got ep = "
                       << ep << ", tp = " << tp;
  if (ep > limits::kMaxRanks || tp > limits::kMaxRanks)
    return emitError() << "layout_c3: ep (" << ep << ") and tp (" << tp
                       << ") must be at most " << limits::kMaxRanks;
  if (ep % tp != 0)
    return emitError() << "layout_c2: tp (" << tp
                       << ") must divide ep (" << ep
                       << "): the tensor-parallel groups are blocks of the EP group";
  return success();
}
