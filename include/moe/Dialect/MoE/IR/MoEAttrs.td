//===- MoEAttrs.td - moe attributes -------------------------*- tablegen -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOEATTRS_TD
#define MOE_DIALECT_MOE_IR_MOEATTRS_TD

include "moe/Dialect/MoE/IR/MoEBase.td"
include "moe/Dialect/MoE/IR/MoEEnums.td"
include "mlir/IR/AttrTypeBase.td"

class MoE_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<MoE_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def MoE_ActivationAttr : EnumAttr<MoE_Dialect, MoE_Activation, "activation">;
def MoE_PhaseAttr : EnumAttr<MoE_Dialect, MoE_Phase, "phase">;
def MoE_AgreementAttr : EnumAttr<MoE_Dialect, MoE_Agreement, "agreement">;
def MoE_DispatchQuantizationAttr
    : EnumAttr<MoE_Dialect, MoE_DispatchQuantization, "dispatch_quantization">;

def MoE_RoutingAttr : MoE_Attr<"Routing", "routing"> {
  let summary = "How router logits become top-k expert ids and weights";
  let description = [{
    Scores are `score(logits)`; experts are selected by `scores + bias` when
    `correction_bias` is set (DeepSeek-V3's selection-only bias), else by the
    scores. With `n_group > 1` the experts form `n_group` equal groups, each
    group is ranked by the sum of its two best selection scores (DeepSeek-V3;
    with `group_max`, by its best score: DeepSeek-V2's `group_limited_greedy`)
    and only the best `topk_group` groups take part in the top-k. With
    `logits_bf16` the router's logits are rounded to bf16 before scoring, as
    transformers' routers compute them in a bf16 model (Qwen3-MoE, Mixtral,
    OLMoE), so that the same experts are chosen. The weights are the
    unbiased scores of the selected experts, divided by their sum when
    `normalize` is set, then multiplied by `scale`.

    ```mlir
    #moe.routing<softmax, top_k = 2, normalize>
    #moe.routing<sigmoid, top_k = 8, n_group = 8, topk_group = 4, normalize,
                 scale = 2.5, correction_bias>
    #moe.routing<softmax, top_k = 6, n_group = 8, topk_group = 3, group_max,
                 scale = 16.0>
    ```
    Rules `routing_c1`..`routing_c7` are checked here (`scale` must be a
    normal f32: the lowering multiplies by an f32 constant); the rules that
    need the expert count are checked by the ops that carry the attribute.
  }];
  let parameters = (ins
    EnumParameter<MoE_ScoreFunction>:$score,
    "int64_t":$topK,
    "int64_t":$nGroup,
    "int64_t":$topkGroup,
    "bool":$normalize,
    "::llvm::APFloat":$scale,
    "bool":$correctionBias,
    DefaultValuedParameter<"bool", "false">:$groupMax,
    DefaultValuedParameter<"bool", "false">:$logitsBf16
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def MoE_LayoutAttr : MoE_Attr<"Layout", "layout"> {
  let summary = "Parallel layout of a MoE layer: expert- and tensor-parallel sizes";
  let description = [{
    `ep` ranks share the experts (each holds `experts / ep` of them). The
    EP group is made of tensor-parallel groups of `tp` consecutive ranks;
    the ranks of a TP group hold the same tokens (`moe-dedupe-tp-dispatch`
    then dispatches each token from one of them only).

    ```mlir
    #moe.layout<ep = 4, tp = 1>
    ```
  }];
  let parameters = (ins "int64_t":$ep, "int64_t":$tp);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // MOE_DIALECT_MOE_IR_MOEATTRS_TD
