//===- MoEBase.td - moe dialect definition -----------------*- tablegen -*-===//
#ifndef MOE_DIALECT_MOE_IR_MOEBASE_TD
#define MOE_DIALECT_MOE_IR_MOEBASE_TD

include "mlir/IR/OpBase.td"

def MoE_Dialect : Dialect {
  let name = "moe";
  let cppNamespace = "::mlir::moe";
  let summary = "Mixture-of-Experts layers: routing, dispatch, grouped GEMM, combine";
  let description = [{
    The `moe` dialect describes a Mixture-of-Experts block declaratively so that
    the compiler can verify it, plan it (chunks, buffers, collectives) and lower
    it to linalg for the CPU or to GPU kernels.

    A whole block is one `moe.layer`; `moe-decompose-layer` splits it into
    `moe.route`, `moe.dispatch`, `moe.grouped_matmul`, `moe.activation` and
    `moe.combine`. Invariants are numbered in `docs/MoEVerifierRules.md`.
  }];
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
  let dependentDialects = ["::mlir::tensor::TensorDialect"];
}

class MoE_Op<string mnemonic, list<Trait> traits = []>
    : Op<MoE_Dialect, mnemonic, traits>;

#endif // MOE_DIALECT_MOE_IR_MOEBASE_TD
