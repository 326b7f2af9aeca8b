// RUN: moe-opt %s -split-input-file --convert-moe-to-runtime | FileCheck %s --implicit-check-not=moe.

// Tests that ep_dispatch and ep_combine become calls of C-interface runtime functions on dynamically shaped tensors.
// CHECK-DAG: func.func private @moert_ep_dispatch_f32(tensor<?x?xf32>, tensor<?x?xi32>, tensor<?x?xf32>, tensor<?xi32>, tensor<?xi64>) -> (tensor<?x?xf32>, tensor<?x?xi32>, tensor<?x?xf32>, i64) attributes {llvm.emit_c_interface}
// CHECK-DAG: func.func private @moert_ep_combine_f32(tensor<?x?xf32>, i64) -> tensor<?x?xf32> attributes {llvm.emit_c_interface}
// CHECK-LABEL: func.func @exchange
// CHECK-SAME: (%[[X:.+]]: tensor<4x64xf32>, %[[IDS:.+]]: tensor<4x2xi32>, %[[W:.+]]: tensor<4x2xf32>, %[[ER:.+]]: tensor<8xi32>)
// CHECK-DAG: %[[XD:.+]] = tensor.cast %[[X]] : tensor<4x64xf32> to tensor<?x?xf32>
// CHECK-DAG: %[[IDSD:.+]] = tensor.cast %[[IDS]] : tensor<4x2xi32> to tensor<?x?xi32>
// CHECK-DAG: %[[WD:.+]] = tensor.cast %[[W]] : tensor<4x2xf32> to tensor<?x?xf32>
// CHECK-DAG: %[[ERD:.+]] = tensor.cast %[[ER]] : tensor<8xi32> to tensor<?xi32>
// CHECK-DAG: %[[PLAN:.+]] = arith.constant dense<[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, {{-?[1-9][0-9]*}}]> : tensor<12xi64>
// CHECK-DAG: %[[PLAND:.+]] = tensor.cast %[[PLAN]] : tensor<12xi64> to tensor<?xi64>
// CHECK: %[[D:.+]]:4 = call @moert_ep_dispatch_f32(%[[XD]], %[[IDSD]], %[[WD]], %[[ERD]], %[[PLAND]])
// CHECK: %[[R:.+]] = tensor.cast %[[D]]#0 : tensor<?x?xf32> to tensor<?x64xf32>
// CHECK: %[[RD:.+]] = tensor.cast %[[R]] : tensor<?x64xf32> to tensor<?x?xf32>
// CHECK: %[[Y:.+]] = call @moert_ep_combine_f32(%[[RD]], %[[D]]#3)
// CHECK: %[[YS:.+]] = tensor.cast %[[Y]] : tensor<?x?xf32> to tensor<4x64xf32>
// CHECK: return %[[YS]]
func.func @exchange(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>,
                    %w: tensor<4x2xf32>, %er: tensor<8xi32>) -> tensor<4x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 16
    : (tensor<4x64xf32>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<?x64xf32>, i64) -> tensor<4x64xf32>
  return %y : tensor<4x64xf32>
}

// -----

// Tests that bf16 tensors pick the _bf16 entry points, declared once for two uses, and dynamic operands need no cast.
// CHECK: func.func private @moert_ep_dispatch_bf16(tensor<?x?xbf16>,
// CHECK-NOT: func.func private @moert_ep_dispatch_bf16
// CHECK-LABEL: func.func @two_exchanges
// CHECK-SAME: (%[[X:.+]]: tensor<?x?xbf16>, %[[IDS:.+]]: tensor<?x?xi32>, %[[W:.+]]: tensor<?x?xf32>, %[[ER:.+]]: tensor<?xi32>)
// CHECK: %[[A:.+]]:4 = call @moert_ep_dispatch_bf16(%[[X]], %[[IDS]], %[[W]], %[[ER]], %{{.+}})
// CHECK: %[[B:.+]]:4 = call @moert_ep_dispatch_bf16(%[[A]]#0, %[[IDS]], %[[W]], %[[ER]], %{{.+}})
// CHECK: return %[[B]]#3, %[[A]]#3 : i64, i64
func.func @two_exchanges(%x: tensor<?x?xbf16>, %ids: tensor<?x?xi32>,
                         %w: tensor<?x?xf32>, %er: tensor<?xi32>) -> (i64, i64) {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8
    : (tensor<?x?xbf16>, tensor<?x?xi32>, tensor<?x?xf32>, tensor<?xi32>)
      -> (tensor<?x?xbf16>, tensor<?x?xi32>, tensor<?x?xf32>, i64)
  %r2, %li2, %lw2, %h2 = moe.ep_dispatch %r, %ids, %w, %er capacity = 8
    : (tensor<?x?xbf16>, tensor<?x?xi32>, tensor<?x?xf32>, tensor<?xi32>)
      -> (tensor<?x?xbf16>, tensor<?x?xi32>, tensor<?x?xf32>, i64)
  return %h2, %h : i64, i64
}

// -----

// Tests that the plan carries capacity, max_tokens, slots and quantization, in moert.h's order, and the decode layout keeps its static shape.
// CHECK-LABEL: func.func @decode
// CHECK: %[[PLAN:.+]] = arith.constant dense<[8, 4, 4, 2, 0, 0, 0, 0, 0, 0, 0, {{-?[1-9][0-9]*}}]> : tensor<12xi64>
// CHECK: %[[D:.+]]:4 = call @moert_ep_dispatch_f32({{.+}}, %{{.+}})
// CHECK: tensor.cast %[[D]]#0 : tensor<?x?xf32> to tensor<8x64xf32>
func.func @decode(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                  %er: tensor<8xi32>) -> tensor<?x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8 max_tokens = 4 slots = 4
      quantization fp8_e4m3_g32_ue8m0
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<8x64xf32>, tensor<8x2xi32>, tensor<8x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<8x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that a dispatch with a placement calls the _placed_ entry with phys_to_log and
// replica_share where expert_rank would be.
// CHECK-LABEL: func.func @placed
// CHECK-SAME: (%[[X:.+]]: tensor<?x64xf32>, %[[IDS:.+]]: tensor<?x2xi32>, %[[W:.+]]: tensor<?x2xf32>, %[[P:.+]]: tensor<10xi32>, %[[S:.+]]: tensor<10xf32>)
// CHECK-DAG: %[[PD:.+]] = tensor.cast %[[P]] : tensor<10xi32> to tensor<?xi32>
// CHECK-DAG: %[[SD:.+]] = tensor.cast %[[S]] : tensor<10xf32> to tensor<?xf32>
// CHECK: call @moert_ep_dispatch_placed_f32(%{{.+}}, %{{.+}}, %{{.+}}, %[[PD]], %[[SD]], %{{.+}})
func.func @placed(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                  %p: tensor<10xi32>, %s: tensor<10xf32>) -> tensor<?x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w placement(%p, %s) capacity = 16 ep = 2
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<10xi32>, tensor<10xf32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that replicas chosen per batch extend the plan by the expert count (0: the runtime
// infers it) and replica_selection = 1, after the nine fields of the plain plan.
// CHECK-LABEL: func.func @per_batch
// CHECK: %[[PLAN:.+]] = arith.constant dense<[16, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, {{-?[1-9][0-9]*}}]> : tensor<12xi64>
// CHECK: %[[PC:.+]] = tensor.cast %[[PLAN]] : tensor<12xi64> to tensor<?xi64>
// CHECK: call @moert_ep_dispatch_placed_f32(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %[[PC]])
func.func @per_batch(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                     %p: tensor<10xi32>, %s: tensor<10xf32>) -> tensor<?x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w placement(%p, %s) per_batch_replicas
      capacity = 16 ep = 2
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<10xi32>, tensor<10xf32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that moe.agree_count becomes a plain C call naming its purpose (0 chunks, 1 phase tokens).
// CHECK-DAG: func.func private @moert_agree_max(i64, i64) -> i64
// CHECK-LABEL: func.func @agree
// CHECK-DAG: %[[L:.+]] = arith.index_cast %{{.+}} : index to i64
// CHECK-DAG: %[[P:.+]] = arith.constant 1 : i64
// CHECK: call @moert_agree_max(%[[L]], %[[P]]) : (i64, i64) -> i64
// CHECK: arith.constant 0 : i64
// CHECK: call @moert_agree_max
func.func @agree(%n: index) -> (index, index) {
  %t = moe.agree_count %n for phase_tokens : index
  %c = moe.agree_count %n : index
  return %t, %c : index, index
}
