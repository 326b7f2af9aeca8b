//===- MoEEnums.td - moe enumerations -----------------------*- tablegen -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOEENUMS_TD
#define MOE_DIALECT_MOE_IR_MOEENUMS_TD

include "mlir/IR/EnumAttr.td"

def MoE_ScoreFunction : I32EnumAttr<"ScoreFunction",
    "function turning router logits into expert scores", [
      I32EnumAttrCase<"softmax", 0>,
      I32EnumAttrCase<"sigmoid", 1>
    ]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}

def MoE_Activation : I32EnumAttr<"Activation",
    "gated activation between the two expert GEMMs", [
      I32EnumAttrCase<"swiglu", 0>,
      I32EnumAttrCase<"clamped_swiglu", 1>
    ]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}

def MoE_DispatchQuantization : I32EnumAttr<"DispatchQuantization",
    "how activations travel in an expert-parallel dispatch", [
      I32EnumAttrCase<"fp8_e4m3_g128", 1>,
      I32EnumAttrCase<"fp8_e4m3_g32_ue8m0", 2>
    ]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}

def MoE_Agreement : I32EnumAttr<"Agreement",
    "what the ranks agree on with moe.agree_count (names the collective)", [
      I32EnumAttrCase<"chunks", 0>,
      I32EnumAttrCase<"phase_tokens", 1>
    ]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}

def MoE_Phase : I32EnumAttr<"Phase",
    "which serving phase a layer variant is compiled for", [
      I32EnumAttrCase<"prefill", 0>,
      I32EnumAttrCase<"decode", 1>
    ]> {
  let cppNamespace = "::mlir::moe";
  let genSpecializedAttr = 0;
}

#endif // MOE_DIALECT_MOE_IR_MOEENUMS_TD
