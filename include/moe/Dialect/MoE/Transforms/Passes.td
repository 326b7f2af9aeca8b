//===- Passes.td - moe transformation passes ----------------*- tablegen -*-===//
#ifndef MOE_DIALECT_MOE_TRANSFORMS_PASSES_TD
#define MOE_DIALECT_MOE_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def MoEDecomposeLayer : Pass<"moe-decompose-layer"> {
  let summary = "Split moe.layer into route, dispatch, expert GEMMs and combine";
  let description = [{
    Replaces every `moe.layer` by its steps, so that planning passes and
    lowerings work on one concern at a time. A shared expert becomes a
    one-expert `moe.grouped_matmul` pair whose output is added to the
    combined result.

    Before:
    ```mlir
    %y = moe.layer %x router(%wr) experts(%w13, %w2)
           routing <softmax, top_k = 2, normalize> activation swiglu
           layout <ep = 1, tp = 1> : (...) -> tensor<?x64xf32>
    ```
    After:
    ```mlir
    %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2, normalize> : ...
    %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8 : ...
    %h = moe.grouped_matmul %rows, %w13, %re : ...
    %a = moe.activation %h kind swiglu : ...
    %o = moe.grouped_matmul %a, %w2, %re : ...
    %y = moe.combine %o, %slot, %w : ...
    ```
  }];
  let dependentDialects = ["::mlir::tensor::TensorDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::arith::ArithDialect"];
  let statistics = [
    Statistic<"numLayers", "num-layers", "Number of moe.layer ops decomposed">
  ];
}

#endif // MOE_DIALECT_MOE_TRANSFORMS_PASSES_TD
