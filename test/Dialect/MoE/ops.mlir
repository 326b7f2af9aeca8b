// RUN: moe-opt %s -split-input-file | moe-opt -split-input-file | FileCheck %s
// RUN: moe-opt %s -split-input-file --mlir-print-op-generic | moe-opt -split-input-file | FileCheck %s
// RUN: moe-opt %s -split-input-file | FileCheck %s --check-prefix=SPACING --strict-whitespace

// Tests that a moe.layer without bias or shared expert round-trips (f32, dynamic tokens).
// CHECK-LABEL: func.func @layer_softmax
// CHECK-SAME: (%[[X:.+]]: tensor<?x64xf32>, %[[WR:.+]]: tensor<8x64xf32>, %[[W13:.+]]: tensor<8x64x64xf32>, %[[W2:.+]]: tensor<8x64x32xf32>)
// CHECK: %[[Y:.+]] = moe.layer %[[X]] router(%[[WR]]) experts(%[[W13]], %[[W2]])
// CHECK-SAME: routing <softmax, top_k = 2, normalize> activation swiglu layout <ep = 1, tp = 1>
// SPACING: normalize> activation swiglu layout <ep = 1
// CHECK-SAME: : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>, tensor<8x64x32xf32>) -> tensor<?x64xf32>
// CHECK: return %[[Y]]
func.func @layer_softmax(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                         %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>)
    -> tensor<?x64xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2, normalize> activation swiglu
         layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that a DeepSeek-style moe.layer (bias, groups, scale, shared expert) round-trips (bf16, static T).
// CHECK-LABEL: func.func @layer_deepseek
// CHECK-SAME: (%[[X:.+]]: tensor<16x64xbf16>, %[[WR:.+]]: tensor<32x64xbf16>, %[[B:.+]]: tensor<32xf32>, %[[W13:.+]]: tensor<32x48x64xbf16>, %[[W2:.+]]: tensor<32x64x24xbf16>, %[[S13:.+]]: tensor<48x64xbf16>, %[[S2:.+]]: tensor<64x24xbf16>)
// CHECK: %[[Y:.+]] = moe.layer %[[X]] router(%[[WR]] bias %[[B]]) experts(%[[W13]], %[[W2]]) shared(%[[S13]], %[[S2]])
// CHECK-SAME: routing <sigmoid, top_k = 4, n_group = 8, topk_group = 4, normalize, scale = 2.500000e+00, correction_bias>
// CHECK-SAME: activation swiglu layout <ep = 1, tp = 1>
// CHECK-SAME: -> tensor<16x64xbf16>
// CHECK: return %[[Y]]
func.func @layer_deepseek(%x: tensor<16x64xbf16>, %wr: tensor<32x64xbf16>,
                          %b: tensor<32xf32>, %w13: tensor<32x48x64xbf16>,
                          %w2: tensor<32x64x24xbf16>, %s13: tensor<48x64xbf16>,
                          %s2: tensor<64x24xbf16>) -> tensor<16x64xbf16> {
  %y = moe.layer %x router(%wr bias %b) experts(%w13, %w2) shared(%s13, %s2)
         routing <sigmoid, top_k = 4, n_group = 8, topk_group = 4, normalize,
                  scale = 2.5, correction_bias>
         activation swiglu layout <ep = 1, tp = 1>
       : (tensor<16x64xbf16>, tensor<32x64xbf16>, tensor<32xf32>,
          tensor<32x48x64xbf16>, tensor<32x64x24xbf16>, tensor<48x64xbf16>,
          tensor<64x24xbf16>) -> tensor<16x64xbf16>
  return %y : tensor<16x64xbf16>
}

// -----

// Tests that an expert-parallel moe.layer (ep = 4: E/ep local experts, expert_rank, max_tokens_per_rank) round-trips.
// CHECK-LABEL: func.func @layer_ep
// CHECK-SAME: (%[[X:.+]]: tensor<?x64xbf16>, %[[WR:.+]]: tensor<32x64xbf16>, %[[B:.+]]: tensor<32xf32>, %[[W13:.+]]: tensor<8x48x64xbf16>, %[[W2:.+]]: tensor<8x64x24xbf16>, %[[S13:.+]]: tensor<48x64xbf16>, %[[S2:.+]]: tensor<64x24xbf16>, %[[ER:.+]]: tensor<32xi32>)
// CHECK: %[[Y:.+]] = moe.layer %[[X]] router(%[[WR]] bias %[[B]]) experts(%[[W13]], %[[W2]]) shared(%[[S13]], %[[S2]]) expert_rank(%[[ER]])
// CHECK-SAME: activation swiglu layout <ep = 4, tp = 1> {max_tokens_per_rank = 16 : i64}
// CHECK-SAME: -> tensor<?x64xbf16>
// CHECK: return %[[Y]]
func.func @layer_ep(%x: tensor<?x64xbf16>, %wr: tensor<32x64xbf16>,
                    %b: tensor<32xf32>, %w13: tensor<8x48x64xbf16>,
                    %w2: tensor<8x64x24xbf16>, %s13: tensor<48x64xbf16>,
                    %s2: tensor<64x24xbf16>, %er: tensor<32xi32>)
    -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr bias %b) experts(%w13, %w2) shared(%s13, %s2)
         expert_rank(%er)
         routing <sigmoid, top_k = 4, n_group = 8, topk_group = 4, normalize,
                  scale = 2.5, correction_bias>
         activation swiglu layout <ep = 4, tp = 1> {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xbf16>, tensor<32x64xbf16>, tensor<32xf32>,
          tensor<8x48x64xbf16>, tensor<8x64x24xbf16>, tensor<48x64xbf16>,
          tensor<64x24xbf16>, tensor<32xi32>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// Tests that a shared expert without bias round-trips and default fields are not printed.
// CHECK-LABEL: func.func @layer_shared
// CHECK-SAME: (%[[X:.+]]: tensor<?x16xf32>, %[[WR:.+]]: tensor<4x16xf32>, %[[W13:.+]]: tensor<4x8x16xf32>, %[[W2:.+]]: tensor<4x16x4xf32>, %[[S13:.+]]: tensor<12x16xf32>, %[[S2:.+]]: tensor<16x6xf32>)
// CHECK: moe.layer %[[X]] router(%[[WR]]) experts(%[[W13]], %[[W2]]) shared(%[[S13]], %[[S2]])
// CHECK-SAME: routing <softmax, top_k = 1> activation swiglu layout <ep = 1, tp = 1>
func.func @layer_shared(%x: tensor<?x16xf32>, %wr: tensor<4x16xf32>,
                        %w13: tensor<4x8x16xf32>, %w2: tensor<4x16x4xf32>,
                        %s13: tensor<12x16xf32>, %s2: tensor<16x6xf32>)
    -> tensor<?x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) shared(%s13, %s2)
         routing <softmax, top_k = 1, scale = 1.0> activation swiglu
         layout <ep = 1, tp = 1>
       : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>,
          tensor<4x16x4xf32>, tensor<12x16xf32>, tensor<16x6xf32>)
         -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Tests that moe.route with softmax scores round-trips (dynamic tokens).
// CHECK-LABEL: func.func @route_softmax
// CHECK-SAME: (%[[X:.+]]: tensor<?x64xf32>, %[[WR:.+]]: tensor<8x64xf32>)
// CHECK: %[[IDS:.+]], %[[W:.+]] = moe.route %[[X]], %[[WR]] routing <softmax, top_k = 2, normalize>
// CHECK-SAME: : (tensor<?x64xf32>, tensor<8x64xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
// CHECK: return %[[IDS]], %[[W]]
func.func @route_softmax(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>)
    -> (tensor<?x2xi32>, tensor<?x2xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2, normalize>
    : (tensor<?x64xf32>, tensor<8x64xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return %ids, %w : tensor<?x2xi32>, tensor<?x2xf32>
}

// -----

// Tests that sigmoid moe.route with groups and a correction bias round-trips (bf16, static tokens).
// CHECK-LABEL: func.func @route_sigmoid_groups_bias
// CHECK-SAME: (%[[X:.+]]: tensor<4x64xbf16>, %[[WR:.+]]: tensor<32x64xbf16>, %[[B:.+]]: tensor<32xf32>)
// CHECK: %[[IDS:.+]], %[[W:.+]] = moe.route %[[X]], %[[WR]] bias %[[B]]
// CHECK-SAME: routing <sigmoid, top_k = 8, n_group = 8, topk_group = 4, normalize, scale = 2.500000e+00, correction_bias>
// CHECK-SAME: -> (tensor<4x8xi32>, tensor<4x8xf32>)
// CHECK: return %[[IDS]], %[[W]]
func.func @route_sigmoid_groups_bias(%x: tensor<4x64xbf16>,
                                     %wr: tensor<32x64xbf16>, %b: tensor<32xf32>)
    -> (tensor<4x8xi32>, tensor<4x8xf32>) {
  %ids, %w = moe.route %x, %wr bias %b
      routing <sigmoid, top_k = 8, n_group = 8, topk_group = 4, normalize,
               scale = 2.5, correction_bias>
    : (tensor<4x64xbf16>, tensor<32x64xbf16>, tensor<32xf32>)
      -> (tensor<4x8xi32>, tensor<4x8xf32>)
  return %ids, %w : tensor<4x8xi32>, tensor<4x8xf32>
}

// -----

// Tests that moe.dispatch round-trips with dynamic tokens.
// CHECK-LABEL: func.func @dispatch_dynamic
// CHECK-SAME: (%[[X:.+]]: tensor<?x64xf32>, %[[IDS:.+]]: tensor<?x2xi32>)
// CHECK: %[[ROWS:.+]], %[[RE:.+]], %[[SLOT:.+]] = moe.dispatch %[[X]], %[[IDS]] num_experts = 8
// CHECK-SAME: : (tensor<?x64xf32>, tensor<?x2xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>)
// CHECK: return %[[ROWS]], %[[RE]], %[[SLOT]]
func.func @dispatch_dynamic(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>)
    -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>)
      -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>)
  return %rows, %re, %slot : tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>
}

// -----

// Tests that moe.dispatch round-trips with static tokens (N = T * k) in bf16.
// CHECK-LABEL: func.func @dispatch_static
// CHECK-SAME: (%[[X:.+]]: tensor<3x16xbf16>, %[[IDS:.+]]: tensor<3x2xi32>)
// CHECK: moe.dispatch %[[X]], %[[IDS]] num_experts = 4
// CHECK-SAME: : (tensor<3x16xbf16>, tensor<3x2xi32>) -> (tensor<6x16xbf16>, tensor<6xi32>, tensor<3x2xi32>)
func.func @dispatch_static(%x: tensor<3x16xbf16>, %ids: tensor<3x2xi32>)
    -> (tensor<6x16xbf16>, tensor<6xi32>, tensor<3x2xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 4
    : (tensor<3x16xbf16>, tensor<3x2xi32>)
      -> (tensor<6x16xbf16>, tensor<6xi32>, tensor<3x2xi32>)
  return %rows, %re, %slot : tensor<6x16xbf16>, tensor<6xi32>, tensor<3x2xi32>
}

// -----

// Tests that moe.grouped_matmul round-trips (f32 dynamic rows, bf16 static).
// CHECK-LABEL: func.func @grouped_matmul
// CHECK-SAME: (%[[IN:.+]]: tensor<?x64xf32>, %[[W:.+]]: tensor<8x32x64xf32>, %[[RE:.+]]: tensor<?xi32>, %[[IN2:.+]]: tensor<6x16xbf16>, %[[W2:.+]]: tensor<4x8x16xbf16>, %[[RE2:.+]]: tensor<6xi32>)
// CHECK: %[[R:.+]] = moe.grouped_matmul %[[IN]], %[[W]], %[[RE]] : (tensor<?x64xf32>, tensor<8x32x64xf32>, tensor<?xi32>) -> tensor<?x32xf32>
// CHECK: %[[R2:.+]] = moe.grouped_matmul %[[IN2]], %[[W2]], %[[RE2]] : (tensor<6x16xbf16>, tensor<4x8x16xbf16>, tensor<6xi32>) -> tensor<6x8xbf16>
// CHECK: return %[[R]], %[[R2]]
func.func @grouped_matmul(%in: tensor<?x64xf32>, %w: tensor<8x32x64xf32>,
                          %re: tensor<?xi32>, %in2: tensor<6x16xbf16>,
                          %w2: tensor<4x8x16xbf16>, %re2: tensor<6xi32>)
    -> (tensor<?x32xf32>, tensor<6x8xbf16>) {
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<?x64xf32>, tensor<8x32x64xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  %r2 = moe.grouped_matmul %in2, %w2, %re2
    : (tensor<6x16xbf16>, tensor<4x8x16xbf16>, tensor<6xi32>) -> tensor<6x8xbf16>
  return %r, %r2 : tensor<?x32xf32>, tensor<6x8xbf16>
}

// -----

// Tests that moe.dispatch round-trips with row_tile and the expert_offsets result, and feeds
// both to moe.grouped_matmul: 3 tokens x 2 choices padded per expert to row_tile = 8 are
// N = 3*2 + 4*(8-1) = 34 rows, expert_offsets is [num_experts + 1 = 5].
// CHECK-LABEL: func.func @dispatch_row_tile
// CHECK-SAME: (%[[X:.+]]: tensor<3x16xf32>, %[[IDS:.+]]: tensor<3x2xi32>, %[[W:.+]]: tensor<4x8x16xf32>)
// CHECK: %[[ROWS:.+]], %[[RE:.+]], %[[SLOT:.+]], %[[OFF:.+]] = moe.dispatch %[[X]], %[[IDS]] num_experts = 4 row_tile = 8
// CHECK-SAME: : (tensor<3x16xf32>, tensor<3x2xi32>) -> (tensor<34x16xf32>, tensor<34xi32>, tensor<3x2xi32>, tensor<5xi32>)
// CHECK: %[[R:.+]] = moe.grouped_matmul %[[ROWS]], %[[W]], %[[RE]] offsets %[[OFF]]
// CHECK-SAME: : (tensor<34x16xf32>, tensor<4x8x16xf32>, tensor<34xi32>, tensor<5xi32>) -> tensor<34x8xf32>
// CHECK: return %[[R]], %[[SLOT]], %[[OFF]]
func.func @dispatch_row_tile(%x: tensor<3x16xf32>, %ids: tensor<3x2xi32>, %w: tensor<4x8x16xf32>)
    -> (tensor<34x8xf32>, tensor<3x2xi32>, tensor<5xi32>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 4 row_tile = 8
    : (tensor<3x16xf32>, tensor<3x2xi32>)
      -> (tensor<34x16xf32>, tensor<34xi32>, tensor<3x2xi32>, tensor<5xi32>)
  %r = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<34x16xf32>, tensor<4x8x16xf32>, tensor<34xi32>, tensor<5xi32>) -> tensor<34x8xf32>
  return %r, %slot, %off : tensor<34x8xf32>, tensor<3x2xi32>, tensor<5xi32>
}

// -----

// Tests that the masked layout takes a row_tile dividing its capacity, and expert_offsets with
// dynamic tokens; and that grouped_matmul takes scales and offsets together (two optional
// operands, which the generic form tells apart by operandSegmentSizes).
// CHECK-LABEL: func.func @dispatch_masked_row_tile
// CHECK: %{{.+}}, %{{.+}}, %{{.+}}, %[[OFF:.+]] = moe.dispatch %{{.+}}, %{{.+}} num_experts = 4 capacity = 8 row_tile = 4
// CHECK-SAME: : (tensor<?x16xf32>, tensor<?x2xi32>) -> (tensor<32x16xf32>, tensor<32xi32>, tensor<?x2xi32>, tensor<5xi32>)
// CHECK: moe.grouped_matmul %{{.+}}, %{{.+}}, %{{.+}} scales %{{.+}} offsets %[[OFF]]
// CHECK-SAME: : (tensor<32x64xi8>, tensor<4x8x64xf32>, tensor<32xi32>, tensor<32x2xf32>, tensor<5xi32>) -> tensor<32x8xf32>
func.func @dispatch_masked_row_tile(%x: tensor<?x16xf32>, %ids: tensor<?x2xi32>,
                                    %q: tensor<32x64xi8>, %w: tensor<4x8x64xf32>,
                                    %s: tensor<32x2xf32>)
    -> (tensor<32x16xf32>, tensor<32x8xf32>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 4 capacity = 8 row_tile = 4
    : (tensor<?x16xf32>, tensor<?x2xi32>)
      -> (tensor<32x16xf32>, tensor<32xi32>, tensor<?x2xi32>, tensor<5xi32>)
  %r = moe.grouped_matmul %q, %w, %re scales %s offsets %off
    : (tensor<32x64xi8>, tensor<4x8x64xf32>, tensor<32xi32>, tensor<32x2xf32>, tensor<5xi32>)
      -> tensor<32x8xf32>
  return %rows, %r : tensor<32x16xf32>, tensor<32x8xf32>
}

// -----

// Tests that moe.activation round-trips (f32 dynamic rows, bf16 static).
// CHECK-LABEL: func.func @activation
// CHECK-SAME: (%[[H:.+]]: tensor<?x64xf32>, %[[H2:.+]]: tensor<6x16xbf16>)
// CHECK: %[[A:.+]] = moe.activation %[[H]] kind swiglu : (tensor<?x64xf32>) -> tensor<?x32xf32>
// SPACING: = moe.activation %arg0 kind swiglu : (tensor<?x64xf32>)
// CHECK: %[[A2:.+]] = moe.activation %[[H2]] kind swiglu : (tensor<6x16xbf16>) -> tensor<6x8xbf16>
// CHECK: return %[[A]], %[[A2]]
func.func @activation(%h: tensor<?x64xf32>, %h2: tensor<6x16xbf16>)
    -> (tensor<?x32xf32>, tensor<6x8xbf16>) {
  %a = moe.activation %h kind swiglu : (tensor<?x64xf32>) -> tensor<?x32xf32>
  %a2 = moe.activation %h2 kind swiglu : (tensor<6x16xbf16>) -> tensor<6x8xbf16>
  return %a, %a2 : tensor<?x32xf32>, tensor<6x8xbf16>
}

// -----

// Tests that moe.combine round-trips (f32 dynamic tokens, bf16 static).
// CHECK-LABEL: func.func @combine
// CHECK-SAME: (%[[O:.+]]: tensor<?x64xf32>, %[[S:.+]]: tensor<?x2xi32>, %[[W:.+]]: tensor<?x2xf32>, %[[O2:.+]]: tensor<6x16xbf16>, %[[S2:.+]]: tensor<3x2xi32>, %[[W2:.+]]: tensor<3x2xf32>)
// CHECK: %[[Y:.+]] = moe.combine %[[O]], %[[S]], %[[W]] : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x64xf32>
// CHECK: %[[Y2:.+]] = moe.combine %[[O2]], %[[S2]], %[[W2]] : (tensor<6x16xbf16>, tensor<3x2xi32>, tensor<3x2xf32>) -> tensor<3x16xbf16>
// CHECK: return %[[Y]], %[[Y2]]
func.func @combine(%o: tensor<?x64xf32>, %s: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                   %o2: tensor<6x16xbf16>, %s2: tensor<3x2xi32>,
                   %w2: tensor<3x2xf32>) -> (tensor<?x64xf32>, tensor<3x16xbf16>) {
  %y = moe.combine %o, %s, %w
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x64xf32>
  %y2 = moe.combine %o2, %s2, %w2
    : (tensor<6x16xbf16>, tensor<3x2xi32>, tensor<3x2xf32>) -> tensor<3x16xbf16>
  return %y, %y2 : tensor<?x64xf32>, tensor<3x16xbf16>
}

// -----

// Tests that moe.ep_dispatch and moe.ep_combine round-trip.
// CHECK-LABEL: func.func @ep_exchange
// CHECK-SAME: (%[[X:.+]]: tensor<?x64xbf16>, %[[IDS:.+]]: tensor<?x4xi32>, %[[W:.+]]: tensor<?x4xf32>, %[[ER:.+]]: tensor<16xi32>)
// CHECK: %[[R:.+]], %[[LI:.+]], %[[LW:.+]], %[[H:.+]] = moe.ep_dispatch %[[X]], %[[IDS]], %[[W]], %[[ER]] capacity = 256
// CHECK-SAME: : (tensor<?x64xbf16>, tensor<?x4xi32>, tensor<?x4xf32>, tensor<16xi32>) -> (tensor<?x64xbf16>, tensor<?x4xi32>, tensor<?x4xf32>, i64)
// CHECK: %[[Y:.+]] = moe.ep_combine %[[R]], %[[H]] : (tensor<?x64xbf16>, i64) -> tensor<?x64xbf16>
// CHECK: return %[[Y]], %[[LI]], %[[LW]]
func.func @ep_exchange(%x: tensor<?x64xbf16>, %ids: tensor<?x4xi32>,
                       %w: tensor<?x4xf32>, %er: tensor<16xi32>)
    -> (tensor<?x64xbf16>, tensor<?x4xi32>, tensor<?x4xf32>) {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 256
    : (tensor<?x64xbf16>, tensor<?x4xi32>, tensor<?x4xf32>, tensor<16xi32>)
      -> (tensor<?x64xbf16>, tensor<?x4xi32>, tensor<?x4xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<?x64xbf16>, i64) -> tensor<?x64xbf16>
  return %y, %li, %lw : tensor<?x64xbf16>, tensor<?x4xi32>, tensor<?x4xf32>
}

// -----

// Tests that #moe.routing (every field), #moe.layout and the activation enum round-trip alone.
// CHECK-LABEL: func.func @attributes
// CHECK-SAME: moe.act = #moe<activation swiglu>
// CHECK-SAME: moe.layout = #moe.layout<ep = 8, tp = 2>
// CHECK-SAME: moe.routing_deepseek = #moe.routing<sigmoid, top_k = 8, n_group = 8, topk_group = 4, normalize, scale = 2.500000e+00, correction_bias>
// CHECK-SAME: moe.routing_plain = #moe.routing<softmax, top_k = 2>
// CHECK-SAME: moe.routing_scaled = #moe.routing<sigmoid, top_k = 1, scale = 1.250000e+00>
func.func @attributes() attributes {
    moe.act = #moe<activation swiglu>,
    moe.layout = #moe.layout<ep = 8, tp = 2>,
    moe.routing_deepseek = #moe.routing<sigmoid, top_k = 8, n_group = 8,
        topk_group = 4, normalize, scale = 2.5, correction_bias>,
    moe.routing_plain = #moe.routing<softmax, top_k = 2>,
    moe.routing_scaled = #moe.routing<sigmoid, top_k = 1, scale = 1.25>} {
  return
}

// -----

// Tests that DeepSeek-V2's group rule (group_max) and Llama 4's score_input
// round-trip.
// CHECK-LABEL: func.func @layer_group_max_score_input
// CHECK: routing <softmax, top_k = 3, n_group = 4, topk_group = 2, group_max, scale = 1.500000e+00>
// CHECK: routing <sigmoid, top_k = 1> activation swiglu score_input layout <ep = 1, tp = 1>
func.func @layer_group_max_score_input(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                                       %w13: tensor<8x48x64xf32>, %w2: tensor<8x64x24xf32>)
    -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %a = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 3, n_group = 4, topk_group = 2, group_max, scale = 1.5>
         activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x48x64xf32>,
          tensor<8x64x24xf32>) -> tensor<?x64xf32>
  %b = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <sigmoid, top_k = 1> activation swiglu score_input layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x48x64xf32>,
          tensor<8x64x24xf32>) -> tensor<?x64xf32>
  return %a, %b : tensor<?x64xf32>, tensor<?x64xf32>
}

// -----

// Tests that gpt-oss's layer round-trips: a logit bias on the router, biases
// on both expert GEMMs, and the clamped SwiGLU with its two parameters.
// CHECK-LABEL: func.func @layer_gpt_oss
// CHECK: moe.layer %{{.+}} router(%{{.+}} logit_bias %{{.+}}) experts(%{{.+}}, %{{.+}} biases(%{{.+}}, %{{.+}}))
// CHECK-SAME: activation clamped_swiglu
// CHECK-SAME: swiglu_alpha = 1.702000e+00 : f32, swiglu_limit = 7.000000e+00 : f32
func.func @layer_gpt_oss(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>, %rb: tensor<8xf32>,
                         %w13: tensor<8x64x64xbf16>, %w2: tensor<8x64x32xbf16>,
                         %b13: tensor<8x64xbf16>, %b2: tensor<8x64xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr logit_bias %rb) experts(%w13, %w2 biases(%b13, %b2))
         routing <softmax, top_k = 2, normalize> activation clamped_swiglu
         layout <ep = 1, tp = 1> {swiglu_alpha = 1.702 : f32, swiglu_limit = 7.0 : f32}
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8xf32>, tensor<8x64x64xbf16>,
          tensor<8x64x32xbf16>, tensor<8x64xbf16>, tensor<8x64xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// Tests that moe.route takes a logit bias and moe.activation the clamped
// SwiGLU's parameters.
// CHECK-LABEL: func.func @route_logit_bias_clamped_activation
// CHECK: moe.route %{{.+}}, %{{.+}} logit_bias %{{.+}} routing
// CHECK: moe.activation %{{.+}} kind clamped_swiglu {swiglu_alpha = 1.500000e+00 : f32, swiglu_limit = 3.000000e+00 : f32}
func.func @route_logit_bias_clamped_activation(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                                               %rb: tensor<8xf32>, %h: tensor<?x64xf32>)
    -> (tensor<?x2xi32>, tensor<?x32xf32>) {
  %ids, %w = moe.route %x, %wr logit_bias %rb routing <softmax, top_k = 2>
      : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  %a = moe.activation %h kind clamped_swiglu {swiglu_alpha = 1.5 : f32, swiglu_limit = 3.0 : f32}
      : (tensor<?x64xf32>) -> tensor<?x32xf32>
  return %ids, %a : tensor<?x2xi32>, tensor<?x32xf32>
}

// -----

// CHECK-LABEL: func.func @fp8_weights
// CHECK: moe.layer %{{.+}} router(%{{.+}}) experts(%{{.+}}, %{{.+}} weight_scales(%{{.+}}, %{{.+}}))
// CHECK-SAME: weight_block = array<i64: 16, 32>
// CHECK: moe.grouped_matmul %{{.+}}, %{{.+}}, %{{.+}} weight_scales %{{.+}} {weight_block = array<i64: 16, 32>}
func.func @fp8_weights(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>,
                       %w13: tensor<8x48x64xi8>, %w2: tensor<8x64x24xi8>,
                       %s13: tensor<8x3x2xf32>, %s2: tensor<8x4x1xf32>,
                       %re: tensor<?xi32>) -> (tensor<?x64xbf16>, tensor<?x48xbf16>) {
  %y = moe.layer %x router(%wr) experts(%w13, %w2 weight_scales(%s13, %s2))
         routing <softmax, top_k = 2, normalize> activation swiglu
         layout <ep = 1, tp = 1> {weight_block = array<i64: 16, 32>}
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8x48x64xi8>, tensor<8x64x24xi8>,
          tensor<8x3x2xf32>, tensor<8x4x1xf32>) -> tensor<?x64xbf16>
  %h = moe.grouped_matmul %x, %w13, %re weight_scales %s13 {weight_block = array<i64: 16, 32>}
    : (tensor<?x64xbf16>, tensor<8x48x64xi8>, tensor<?xi32>, tensor<8x3x2xf32>) -> tensor<?x48xbf16>
  return %y, %h : tensor<?x64xbf16>, tensor<?x48xbf16>
}
