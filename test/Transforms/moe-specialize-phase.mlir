// RUN: moe-opt %s -split-input-file -verify-diagnostics -moe-specialize-phase="decode-max-tokens=8" | FileCheck %s
// RUN: moe-opt %s -split-input-file -verify-diagnostics -moe-specialize-phase="decode-max-tokens=8" \
// RUN:   -moe-decompose-layer | FileCheck %s --check-prefix=STEPS
// RUN: moe-opt %s -split-input-file -verify-diagnostics -moe-specialize-phase="decode-max-tokens=8" \
// RUN:   -moe-decompose-layer -convert-moe-to-linalg -moe-verify-collectives | FileCheck %s --check-prefix=VERIFIED
// RUN: not moe-opt %s -split-input-file -moe-specialize-phase 2>&1 | FileCheck %s --check-prefix=NOTHRESHOLD

// Tests that an expert-parallel function becomes a prefill variant, a decode variant capped at
// the threshold, and an entry with a uniform phase argument that agrees on the token count.
// CHECK-LABEL: func.func @ep_layer_prefill(
// CHECK: moe.layer {{.+}} {max_tokens_per_rank = 1000 : i64, phase = #moe<phase prefill>}
// CHECK-LABEL: func.func @ep_layer_decode(
// CHECK: moe.layer {{.+}} {max_tokens_per_rank = 8 : i64, phase = #moe<phase decode>}
// CHECK-LABEL: func.func @ep_layer(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?x16xf32>
// CHECK-SAME: %[[PHASE:[^:]+]]: i32 {moe.uniform}) -> tensor<?x16xf32>
// CHECK-SAME: moe.phase_plan = {decode = "ep_layer_decode", decode_max_tokens = 8 : i64, prefill = "ep_layer_prefill"}
// CHECK: %[[KNOWN:.+]] = arith.cmpi ule, %[[PHASE]], %c2_i32
// CHECK: cf.assert %[[KNOWN]], "moe: phase must be 0 (by token count), 1 (prefill) or 2 (decode)"
// CHECK: %[[AUTO:.+]] = arith.cmpi eq, %[[PHASE]], %c0_i32
// CHECK: %[[DECODE:.+]] = scf.if %[[AUTO]] -> (i1) {
// CHECK: %[[T:.+]] = tensor.dim %[[X]], %c0
// CHECK: %[[MOST:.+]] = moe.agree_count %[[T]] for phase_tokens : index
// CHECK: arith.cmpi ule, %[[MOST]], %c8
// CHECK: } else {
// CHECK: arith.cmpi eq, %[[PHASE]], %c2_i32
// CHECK: %[[Y:.+]] = scf.if %[[DECODE]] -> (tensor<?x16xf32>) {
// CHECK: call @ep_layer_decode(%[[X]],
// CHECK: } else {
// CHECK: call @ep_layer_prefill(%[[X]],
// CHECK: return %[[Y]]

// The decode variant has static shapes after the exchange: ep * 8 rows in fixed slots,
// then 4 local experts x 16 rows of masked capacity.
// STEPS-LABEL: func.func @ep_layer_prefill(
// STEPS: moe.ep_dispatch {{.+}} capacity = 2000 ep = 2 max_tokens = 1000 :
// STEPS-SAME: -> (tensor<?x16xf32>
// STEPS-LABEL: func.func @ep_layer_decode(
// STEPS: moe.ep_dispatch {{.+}} capacity = 16 ep = 2 max_tokens = 8 slots = 8 :
// STEPS-SAME: -> (tensor<16x16xf32>, tensor<16x2xi32>, tensor<16x2xf32>, i64)
// The masked layout has no row_tile: its expert blocks are the capacity, so expert_offsets is
// [num_experts + 1] and both GEMMs read it.
// STEPS: %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}}, %[[OFFSETS:[^ ]+]] = moe.dispatch {{.+}} num_experts = 4 capacity = 16 :
// STEPS-SAME: -> (tensor<64x16xf32>, tensor<64xi32>, tensor<16x2xi32>, tensor<5xi32>)
// STEPS: moe.grouped_matmul {{.+}} offsets %[[OFFSETS]] : {{.+}} -> tensor<64x24xf32>

// The entry's collectives pass moe-verify-collectives: the branch on the phase is uniform.
// VERIFIED-LABEL: func.func @ep_layer(
// VERIFIED: moe.agree_count
// NOTHRESHOLD: error: moe-specialize-phase needs decode-max-tokens in [1, 2147483648], got 0
func.func @ep_layer(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>, %w13: tensor<4x24x16xf32>,
                    %w2: tensor<4x16x12xf32>, %r: tensor<8xi32>) -> tensor<?x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%r)
         routing <softmax, top_k = 2, normalize> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 1000 : i64}
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<4x24x16xf32>, tensor<4x16x12xf32>,
          tensor<8xi32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Tests that with one rank there is nothing to agree on, and the decode layout has capacity
// decode-max-tokens per expert (the lowering checks the dynamic token count against it).
// CHECK-LABEL: func.func @one_rank_decode(
// CHECK: moe.layer {{.+}} {max_tokens_per_rank = 8 : i64, phase = #moe<phase decode>}
// CHECK-LABEL: func.func @one_rank(
// CHECK-NOT: moe.agree_count
// CHECK: call @one_rank_decode
// STEPS-LABEL: func.func @one_rank_decode(
// STEPS-NOT: moe.ep_dispatch
// STEPS: moe.dispatch {{.+}} num_experts = 8 capacity = 8 :
// STEPS-SAME: -> (tensor<64x16xf32>, tensor<64xi32>, tensor<?x2xi32>, tensor<9xi32>)
// VERIFIED-LABEL: func.func @one_rank_decode(
// VERIFIED: cf.assert {{.+}} "moe.dispatch: more tokens than the decode layout's capacity of 8 per expert"
func.func @one_rank(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>, %w13: tensor<8x24x16xf32>,
                    %w2: tensor<8x16x12xf32>) -> tensor<?x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2, normalize> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<8x24x16xf32>, tensor<8x16x12xf32>)
       -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Tests that the layer's input must be a function argument: it counts the tokens.
func.func @computed_input(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>, %w13: tensor<8x24x16xf32>,
                          %w2: tensor<8x16x12xf32>) -> tensor<?x16xf32> {
  %x2 = arith.addf %x, %x : tensor<?x16xf32>
  // expected-error @+1 {{moe-specialize-phase: the layer's input must be an argument of @computed_input (it counts the tokens that pick the phase)}}
  %y = moe.layer %x2 router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2, normalize> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<8x24x16xf32>, tensor<8x16x12xf32>)
       -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Tests that a static token count above the threshold (12 > 8) is seen as dynamic by the decode
// variant (issue 9: the decode layer broke layer_c10 and the local dispatch's capacity), and the
// whole chain still lowers.
// CHECK-LABEL: func.func @static_tokens_decode(
// CHECK-SAME: %[[X:[^:]+]]: tensor<12x16xf32>
// CHECK: %[[DYN:.+]] = tensor.cast %[[X]] : tensor<12x16xf32> to tensor<?x16xf32>
// CHECK: %[[L:.+]] = moe.layer %[[DYN]]
// CHECK-SAME: {max_tokens_per_rank = 8 : i64, phase = #moe<phase decode>}
// CHECK-SAME: -> tensor<?x16xf32>
// CHECK: %[[BACK:.+]] = tensor.cast %[[L]] : tensor<?x16xf32> to tensor<12x16xf32>
// CHECK: return %[[BACK]]
// CHECK-LABEL: func.func @static_tokens(
// CHECK: arith.cmpi ule, %{{.+}}, %c8
// VERIFIED-LABEL: func.func @static_tokens_decode(
// VERIFIED: cf.assert {{.+}} "moe.dispatch: more tokens than the decode layout's capacity of 8 per expert"
func.func @static_tokens(%x: tensor<12x16xf32>, %wr: tensor<8x16xf32>, %w13: tensor<8x24x16xf32>,
                         %w2: tensor<8x16x12xf32>) -> tensor<12x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<12x16xf32>, tensor<8x16xf32>, tensor<8x24x16xf32>, tensor<8x16x12xf32>)
         -> tensor<12x16xf32>
  return %y : tensor<12x16xf32>
}

// -----

// Tests that a static token count below the threshold bounds the decode variant (3 tokens: a
// 3-row layout, whatever decode-max-tokens says).
// CHECK-LABEL: func.func @few_static_tokens_decode(
// CHECK: moe.layer %{{[^ ]+}} router
// CHECK-SAME: {max_tokens_per_rank = 3 : i64, phase = #moe<phase decode>}
// CHECK-SAME: -> tensor<3x16xf32>
// CHECK-LABEL: func.func @few_static_tokens(
// CHECK-SAME: moe.phase_plan = {decode = "few_static_tokens_decode", decode_max_tokens = 3 : i64
func.func @few_static_tokens(%x: tensor<3x16xf32>, %wr: tensor<8x16xf32>, %w13: tensor<8x24x16xf32>,
                             %w2: tensor<8x16x12xf32>) -> tensor<3x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<3x16xf32>, tensor<8x16xf32>, tensor<8x24x16xf32>, tensor<8x16x12xf32>)
         -> tensor<3x16xf32>
  return %y : tensor<3x16xf32>
}

// -----

// Tests that a static 0-token layer gets a decode variant of at most 1 token (a maximum is positive).
// CHECK-LABEL: func.func @zero_static_tokens_decode(
// CHECK: moe.layer
// CHECK-SAME: {max_tokens_per_rank = 1 : i64, phase = #moe<phase decode>}
// CHECK-LABEL: func.func @zero_static_tokens(
// VERIFIED-LABEL: func.func @zero_static_tokens(
func.func @zero_static_tokens(%x: tensor<0x16xf32>, %wr: tensor<8x16xf32>, %w13: tensor<8x24x16xf32>,
                              %w2: tensor<8x16x12xf32>) -> tensor<0x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<0x16xf32>, tensor<8x16xf32>, tensor<8x24x16xf32>, tensor<8x16x12xf32>)
         -> tensor<0x16xf32>
  return %y : tensor<0x16xf32>
}

// -----

// Tests that a layer function without results gets an entry whose scf.if
// blocks end in exactly one yield each (found by the mlir_moe fuzz target).
// CHECK-LABEL: func.func @no_results(
// CHECK: scf.if %{{[0-9]+}} {
// CHECK-NEXT: func.call @no_results_decode
// CHECK-NEXT: } else {
// CHECK-NEXT: func.call @no_results_prefill
// CHECK-NEXT: }
// CHECK-NEXT: return
func.func @no_results(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                      %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) routing <softmax, top_k = 2>
         activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>, tensor<8x64x32xf32>)
         -> tensor<?x64xf32>
  return
}

// -----

// Tests that ranks agree on the token count when a later layer spans ranks, not only the first.
// CHECK-LABEL: func.func @second_layer_on_ranks(
// CHECK: moe.agree_count {{.+}} for phase_tokens
func.func @second_layer_on_ranks(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>,
                                 %w13a: tensor<8x24x16xf32>, %w2a: tensor<8x16x12xf32>,
                                 %w13: tensor<4x24x16xf32>, %w2: tensor<4x16x12xf32>,
                                 %r: tensor<8xi32>) -> tensor<?x16xf32> {
  %a = moe.layer %x router(%wr) experts(%w13a, %w2a)
         routing <softmax, top_k = 2, normalize> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<8x24x16xf32>, tensor<8x16x12xf32>)
       -> tensor<?x16xf32>
  %y = moe.layer %a router(%wr) experts(%w13, %w2) expert_rank(%r)
         routing <softmax, top_k = 2, normalize> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 100 : i64}
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<4x24x16xf32>, tensor<4x16x12xf32>,
          tensor<8xi32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Tests that a layer function that is called is refused: it gains the phase argument.
func.func @called(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>, %w13: tensor<8x24x16xf32>,
                  %w2: tensor<8x16x12xf32>) -> tensor<?x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2, normalize> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<8x24x16xf32>, tensor<8x16x12xf32>)
       -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
func.func @caller(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>, %w13: tensor<8x24x16xf32>,
                  %w2: tensor<8x16x12xf32>) -> tensor<?x16xf32> {
  // expected-error @+1 {{moe-specialize-phase: @called holds a layer and is called here}}
  %y = call @called(%x, %wr, %w13, %w2)
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<8x24x16xf32>, tensor<8x16x12xf32>)
       -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
