// RUN: moe-opt %s -split-input-file -verify-diagnostics

// One case per verifier rule of docs/MoEVerifierRules.md, named after it.

//===----------------------------------------------------------------------===//
// #moe.routing and #moe.layout
//===----------------------------------------------------------------------===//

// Tests that routing_c1: top_k must be positive.
// expected-error @+1 {{routing_c1: top_k must be positive, got 0}}
func.func @routing_c1() attributes {r = #moe.routing<softmax, top_k = 0>} {
  return
}

// -----

// Tests that routing_c2: n_group must be positive.
// expected-error @+1 {{routing_c2: n_group must be positive, got 0}}
func.func @routing_c2() attributes {r = #moe.routing<sigmoid, top_k = 2, n_group = 0, topk_group = 1>} {
  return
}

// -----

// Tests that routing_c3: topk_group must lie in [1, n_group].
// expected-error @+1 {{routing_c3: topk_group must be in [1, n_group = 4], got 5}}
func.func @routing_c3() attributes {r = #moe.routing<sigmoid, top_k = 2, n_group = 4, topk_group = 5>} {
  return
}

// -----

// Tests that routing_c3: topk_group = 0 is rejected too.
// expected-error @+1 {{routing_c3: topk_group must be in [1, n_group = 4], got 0}}
func.func @routing_c3_zero() attributes {r = #moe.routing<sigmoid, top_k = 2, n_group = 4, topk_group = 0>} {
  return
}

// -----

// Tests that routing_c4: scale must be positive.
// expected-error @+1 {{routing_c4: scale must be finite and positive, got -1.0}}
func.func @routing_c4() attributes {r = #moe.routing<softmax, top_k = 2, scale = -1.0>} {
  return
}

// -----

// Tests that routing_c4: scale must be non-zero.
// expected-error @+1 {{routing_c4: scale must be finite and positive, got 0.0}}
func.func @routing_c4_zero() attributes {r = #moe.routing<softmax, top_k = 2, scale = 0.0>} {
  return
}

// -----

// Tests that routing_c4: scale must be finite (a NaN given by its bits).
// expected-error @+1 {{routing_c4: scale must be finite and positive, got nan}}
func.func @routing_c4_nan() attributes {r = #moe.routing<softmax, top_k = 2, scale = 0x7FF8000000000000>} {
  return
}

// -----

// Tests that layout_c1: ep must be positive.
// expected-error @+1 {{layout_c1: ep and tp must be positive, got ep = 0, tp = 1}}
func.func @layout_c1() attributes {l = #moe.layout<ep = 0, tp = 1>} {
  return
}

// -----

// Tests that layout_c1: tp must be positive.
// expected-error @+1 {{layout_c1: ep and tp must be positive, got ep = 1, tp = -2}}
func.func @layout_c1_tp() attributes {l = #moe.layout<ep = 1, tp = -2>} {
  return
}

//===----------------------------------------------------------------------===//
// moe.route
//===----------------------------------------------------------------------===//

// -----

// Tests that route_c1: x must have rank 2.
func.func @route_c1(%x: tensor<64xf32>, %wr: tensor<8x64xf32>) {
  // expected-error @+1 {{route_c1: x must have rank 2, got 'tensor<64xf32>'}}
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<64xf32>, tensor<8x64xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

// Tests that route_c2: the router weight must have rank 2.
func.func @route_c2_rank(%x: tensor<?x64xf32>, %wr: tensor<8x64x1xf32>) {
  // expected-error @+1 {{route_c2: router weight must have rank 2, got 'tensor<8x64x1xf32>'}}
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<?x64xf32>, tensor<8x64x1xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

// Tests that route_c2: the router weight has the element type of x.
func.func @route_c2_element(%x: tensor<?x64xf32>, %wr: tensor<8x64xbf16>) {
  // expected-error @+1 {{route_c2: router weight must have element type 'f32', got 'tensor<8x64xbf16>'}}
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

// Tests that route_c2: the router weight is [E, H] with the H of x.
func.func @route_c2_hidden(%x: tensor<?x64xf32>, %wr: tensor<8x32xf32>) {
  // expected-error @+1 {{route_c2: router weight 'tensor<8x32xf32>' does not match hidden size of x 'tensor<?x64xf32>'}}
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<?x64xf32>, tensor<8x32xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

// Tests that route_c2: the number of experts must be static.
func.func @route_c2_dynamic(%x: tensor<?x64xf32>, %wr: tensor<?x64xf32>) {
  // expected-error @+1 {{route_c2: the number of experts must be static}}
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<?x64xf32>, tensor<?x64xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

// Tests that route_c3: top_k may not exceed the number of experts.
func.func @route_c3(%x: tensor<?x64xf32>, %wr: tensor<4x64xf32>) {
  // expected-error @+1 {{route_c3: top_k (5) exceeds the number of experts (4)}}
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 5>
    : (tensor<?x64xf32>, tensor<4x64xf32>) -> (tensor<?x5xi32>, tensor<?x5xf32>)
  return
}

// -----

// Tests that route_c4: n_group must divide the number of experts.
func.func @route_c4(%x: tensor<?x64xf32>, %wr: tensor<10x64xf32>) {
  // expected-error @+1 {{route_c4: n_group (4) does not divide the number of experts (10)}}
  %ids, %w = moe.route %x, %wr routing <sigmoid, top_k = 2, n_group = 4, topk_group = 2>
    : (tensor<?x64xf32>, tensor<10x64xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

// Tests that route_c5: top_k may not exceed the experts of the selected groups.
func.func @route_c5(%x: tensor<?x64xf32>, %wr: tensor<32x64xf32>) {
  // expected-error @+1 {{route_c5: top_k (9) exceeds the experts in the selected groups (topk_group 2 x 4)}}
  %ids, %w = moe.route %x, %wr routing <sigmoid, top_k = 9, n_group = 8, topk_group = 2>
    : (tensor<?x64xf32>, tensor<32x64xf32>) -> (tensor<?x9xi32>, tensor<?x9xf32>)
  return
}

// -----

// Tests that route_c6: with groups, every group holds at least 2 experts.
func.func @route_c6(%x: tensor<?x64xf32>, %wr: tensor<4x64xf32>) {
  // expected-error @+1 {{route_c6: group-limited routing ranks groups by their two best experts, so each group needs at least 2 experts, got 1}}
  %ids, %w = moe.route %x, %wr routing <sigmoid, top_k = 2, n_group = 4, topk_group = 4>
    : (tensor<?x64xf32>, tensor<4x64xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

// Tests that route_c7: a bias operand without correction_bias is rejected.
func.func @route_c7_operand(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{route_c7: a correction bias operand is given if and only if the routing has correction_bias}}
  %ids, %w = moe.route %x, %wr bias %b routing <sigmoid, top_k = 2>
    : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

// Tests that route_c7: correction_bias without a bias operand is rejected.
func.func @route_c7_attr(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>) {
  // expected-error @+1 {{route_c7: a correction bias operand is given if and only if the routing has correction_bias}}
  %ids, %w = moe.route %x, %wr routing <sigmoid, top_k = 2, correction_bias>
    : (tensor<?x64xf32>, tensor<8x64xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

// Tests that route_c7: the bias has one entry per expert.
func.func @route_c7_shape(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{route_c7: correction bias must be tensor<8xf32>, got 'tensor<4xf32>'}}
  %ids, %w = moe.route %x, %wr bias %b routing <sigmoid, top_k = 2, correction_bias>
    : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<4xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

// Tests that route_c7: the bias is f32 (an ODS type constraint).
func.func @route_c7_element(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>, %b: tensor<8xbf16>) {
  // expected-error @+1 {{operand #2 must be ranked tensor of 32-bit float values, but got 'tensor<8xbf16>'}}
  %ids, %w = moe.route %x, %wr bias %b routing <sigmoid, top_k = 2, correction_bias>
    : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

// Tests that route_c8: expert_ids is [T, top_k].
func.func @route_c8_ids(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>) {
  // expected-error @+1 {{route_c8: expert_ids must be [T=?, top_k=2], got 'tensor<?x3xi32>'}}
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<?x64xf32>, tensor<8x64xf32>) -> (tensor<?x3xi32>, tensor<?x2xf32>)
  return
}

// -----

// Tests that route_c8: expert_weights is [T, top_k].
func.func @route_c8_weights(%x: tensor<4x64xf32>, %wr: tensor<8x64xf32>) {
  // expected-error @+1 {{route_c8: expert_weights must be [T=4, top_k=2], got 'tensor<5x2xf32>'}}
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<4x64xf32>, tensor<8x64xf32>) -> (tensor<4x2xi32>, tensor<5x2xf32>)
  return
}

// -----

// Tests that route_c8: expert_ids are i32 (an ODS type constraint).
func.func @route_c8_element(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>) {
  // expected-error @+1 {{result #0 must be ranked tensor of 32-bit signless integer values, but got 'tensor<?x2xi64>'}}
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<?x64xf32>, tensor<8x64xf32>) -> (tensor<?x2xi64>, tensor<?x2xf32>)
  return
}

//===----------------------------------------------------------------------===//
// moe.layer
//===----------------------------------------------------------------------===//

// -----

// Tests that layer_c1: x must have rank 2.
func.func @layer_c1_rank(%x: tensor<64xf32>, %wr: tensor<8x64xf32>,
                         %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>) {
  // expected-error @+1 {{layer_c1: x must have rank 2, got 'tensor<64xf32>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>) -> tensor<64xf32>
  return
}

// -----

// Tests that layer_c1: the result has the type of x.
func.func @layer_c1_result(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                           %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>) {
  // expected-error @+1 {{layer_c1: result type 'tensor<4x64xf32>' must equal the type of x 'tensor<?x64xf32>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>) -> tensor<4x64xf32>
  return
}

// -----

// Tests that route_c3: the expert-count routing rules also hold for moe.layer.
func.func @layer_route_c3(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                          %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>) {
  // expected-error @+1 {{route_c3: top_k (9) exceeds the number of experts (8)}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 9> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c2: the expert weights have rank 3.
func.func @layer_c2_rank(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                         %w13: tensor<8x64x64xf32>, %w2: tensor<64x32xf32>) {
  // expected-error @+1 {{layer_c2: w2 must have rank 3, got 'tensor<64x32xf32>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c2: w13 is [E, 2I, H] and w2 is [E, H, I].
func.func @layer_c2_shape(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                          %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x16xf32>) {
  // expected-error @+1 {{layer_c2: expert weights must be w13[E/ep=8, 2I, H=64] and w2[E/ep, H, I], got 'tensor<8x64x64xf32>' and 'tensor<8x64x16xf32>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x16xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c2: the intermediate size is static (the activation splits w13).
func.func @layer_c2_dynamic_intermediate(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
    %w13: tensor<8x?x64xf32>, %w2: tensor<8x64x32xf32>) {
  // expected-error @+1 {{layer_c2: expert weights must be w13[E/ep=8, 2I, H=64]}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
    : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x?x64xf32>, tensor<8x64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c2: with ep = 1 the expert weights hold all E experts.
func.func @layer_c2_experts(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                            %w13: tensor<4x64x64xf32>, %w2: tensor<4x64x32xf32>) {
  // expected-error @+1 {{layer_c2: expert weights must be w13[E/ep=8, 2I, H=64] and w2[E/ep, H, I]}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<4x64x64xf32>,
          tensor<4x64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c3: a shared expert needs both weights (generic form only).
func.func @layer_c3_pair(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                         %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>,
                         %s13: tensor<64x64xf32>) {
  // expected-error @+1 {{layer_c3: shared expert needs both shared_w13 and shared_w2}}
  %y = "moe.layer"(%x, %wr, %w13, %w2, %s13) <{
         activation = #moe<activation swiglu>,
         layout = #moe.layout<ep = 1, tp = 1>,
         operandSegmentSizes = array<i32: 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0>,
         routing = #moe.routing<softmax, top_k = 2>}>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c3: the shared expert weights have rank 2.
func.func @layer_c3_rank(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                         %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>,
                         %s13: tensor<1x64x64xf32>, %s2: tensor<64x32xf32>) {
  // expected-error @+1 {{layer_c3: shared_w13 must have rank 2, got 'tensor<1x64x64xf32>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) shared(%s13, %s2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>, tensor<1x64x64xf32>, tensor<64x32xf32>)
         -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c3: shared_w13 is [2Is, H] and shared_w2 is [H, Is].
func.func @layer_c3_shape(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                          %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>,
                          %s13: tensor<64x64xf32>, %s2: tensor<64x16xf32>) {
  // expected-error @+1 {{layer_c3: shared expert weights must be shared_w13[2Is, H] and shared_w2[H, Is], got 'tensor<64x64xf32>' and 'tensor<64x16xf32>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) shared(%s13, %s2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>, tensor<64x64xf32>, tensor<64x16xf32>)
         -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c4: expert weights have the element type of x.
func.func @layer_c4(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                    %w13: tensor<8x64x64xbf16>, %w2: tensor<8x64x32xf32>) {
  // expected-error @+1 {{layer_c4: w13 must have element type 'f32', got 'tensor<8x64x64xbf16>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xbf16>,
          tensor<8x64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c4: shared expert weights have the element type of x.
func.func @layer_c4_shared(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>,
                           %w13: tensor<8x64x64xbf16>, %w2: tensor<8x64x32xbf16>,
                           %s13: tensor<64x64xbf16>, %s2: tensor<64x32xf32>) {
  // expected-error @+1 {{layer_c4: shared_w2 must have element type 'bf16', got 'tensor<64x32xf32>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) shared(%s13, %s2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8x64x64xbf16>,
          tensor<8x64x32xbf16>, tensor<64x64xbf16>, tensor<64x32xf32>)
         -> tensor<?x64xbf16>
  return
}

// -----

// Tests that layer_c4: only f32 and bf16 are accepted (ODS type constraint).
func.func @layer_c4_f16(%x: tensor<?x64xf16>, %wr: tensor<8x64xf16>,
                        %w13: tensor<8x64x64xf16>, %w2: tensor<8x64x32xf16>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit float or bfloat16 type values, but got 'tensor<?x64xf16>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf16>, tensor<8x64xf16>, tensor<8x64x64xf16>,
          tensor<8x64x32xf16>) -> tensor<?x64xf16>
  return
}

// -----

// Tests that layer_c5: ep must divide the number of experts.
func.func @layer_c5(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                    %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>) {
  // expected-error @+1 {{layer_c5: ep (3) does not divide the number of experts (8)}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 3, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c2: with ep = 4 the expert weights hold the E/ep local experts.
func.func @layer_c2_local(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                          %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>,
                          %er: tensor<8xi32>) {
  // expected-error @+1 {{layer_c2: expert weights must be w13[E/ep=2, 2I, H=64] and w2[E/ep, H, I], got 'tensor<8x64x64xf32>' and 'tensor<8x64x32xf32>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 4, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>, tensor<8xi32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c6: ep > 1 needs expert_rank and max_tokens_per_rank.
func.func @layer_c6_missing(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                            %w13: tensor<4x64x64xf32>, %w2: tensor<4x64x32xf32>) {
  // expected-error @+1 {{layer_c6: ep > 1 takes expert_rank or a placement (one of them) and max_tokens_per_rank; ep = 1 takes neither map}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<4x64x64xf32>,
          tensor<4x64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c6: ep > 1 with expert_rank still needs max_tokens_per_rank.
func.func @layer_c6_capacity(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                             %w13: tensor<4x64x64xf32>, %w2: tensor<4x64x32xf32>,
                             %er: tensor<8xi32>) {
  // expected-error @+1 {{layer_c6: ep > 1 takes expert_rank or a placement (one of them) and max_tokens_per_rank; ep = 1 takes neither map}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<4x64x64xf32>,
          tensor<4x64x32xf32>, tensor<8xi32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c6: with ep = 1 there is no expert_rank.
func.func @layer_c6_ep1(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                        %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>,
                        %er: tensor<8xi32>) {
  // expected-error @+1 {{layer_c6: ep > 1 takes expert_rank or a placement (one of them) and max_tokens_per_rank; ep = 1 takes neither map}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>, tensor<8xi32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c6: expert_rank has one entry per expert.
func.func @layer_c6_shape(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                          %w13: tensor<4x64x64xf32>, %w2: tensor<4x64x32xf32>,
                          %er: tensor<4xi32>) {
  // expected-error @+1 {{layer_c6: expert_rank must be tensor<8xi32>, got 'tensor<4xi32>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<4x64x64xf32>,
          tensor<4x64x32xf32>, tensor<4xi32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c6: max_tokens_per_rank is positive (ODS attribute constraint).
func.func @layer_c6_positive(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                             %w13: tensor<4x64x64xf32>, %w2: tensor<4x64x32xf32>,
                             %er: tensor<8xi32>) {
  // The attribute dictionary is parsed as a property, so the error is on its line.
  // expected-error @+3 {{attribute 'max_tokens_per_rank' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 0 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<4x64x64xf32>,
          tensor<4x64x32xf32>, tensor<8xi32>) -> tensor<?x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// moe.dispatch
//===----------------------------------------------------------------------===//

// -----

// Tests that dispatch_c1: x and expert_ids have rank 2.
func.func @dispatch_c1_rank(%x: tensor<?x64xf32>, %ids: tensor<?xi32>) {
  // expected-error @+1 {{dispatch_c1: expert_ids must have rank 2, got 'tensor<?xi32>'}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8
    : (tensor<?x64xf32>, tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>)
  return
}

// -----

// Tests that dispatch_c1: expert_ids and x agree on the number of tokens.
func.func @dispatch_c1_tokens(%x: tensor<4x64xf32>, %ids: tensor<5x2xi32>) {
  // expected-error @+1 {{dispatch_c1: expert_ids 'tensor<5x2xi32>' must be [T, k] with a static k and T of x 'tensor<4x64xf32>'}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8
    : (tensor<4x64xf32>, tensor<5x2xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<5x2xi32>)
  return
}

// -----

// Tests that dispatch_c1: top-k is static.
func.func @dispatch_c1_dynamic_k(%x: tensor<?x64xf32>, %ids: tensor<?x?xi32>) {
  // expected-error @+1 {{dispatch_c1: expert_ids 'tensor<?x?xi32>' must be [T, k] with a static k}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8
    : (tensor<?x64xf32>, tensor<?x?xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x?xi32>)
  return
}

// -----

// Tests that dispatch_c2: dispatched is [T*k+E*(row_tile-1), H] (T*k without row_tile).
func.func @dispatch_c2_shape(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>) {
  // expected-error @+1 {{dispatch_c2: dispatched must be [T*k+min(E,T*k)*(row_tile-1)=8, H=64], got 'tensor<4x64xf32>'}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8
    : (tensor<4x64xf32>, tensor<4x2xi32>) -> (tensor<4x64xf32>, tensor<4xi32>, tensor<4x2xi32>)
  return
}

// -----

// Tests that dispatch_c2: dispatched has the element type of x.
func.func @dispatch_c2_element(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  // expected-error @+1 {{dispatch_c2: dispatched must have element type 'f32', got 'tensor<?x64xbf16>'}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>) -> (tensor<?x64xbf16>, tensor<?xi32>, tensor<?x2xi32>)
  return
}

// -----

// Tests that dispatch_c3: row_expert has one entry per dispatched row.
func.func @dispatch_c3(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>) {
  // expected-error @+1 {{dispatch_c3: row_expert 'tensor<4xi32>' must have one entry per dispatched row}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8
    : (tensor<4x64xf32>, tensor<4x2xi32>) -> (tensor<8x64xf32>, tensor<4xi32>, tensor<4x2xi32>)
  return
}

// -----

// Tests that dispatch_c3: row_expert has rank 1.
func.func @dispatch_c3_rank(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>) {
  // expected-error @+1 {{dispatch_c3: row_expert must have rank 1, got 'tensor<4x2xi32>'}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8
    : (tensor<4x64xf32>, tensor<4x2xi32>) -> (tensor<8x64xf32>, tensor<4x2xi32>, tensor<4x2xi32>)
  return
}

// -----

// Tests that dispatch_c2: with row_tile each expert's rows are padded, so a static T gives
// T*k + num_experts*(row_tile-1) rows (8 + 8*3 = 32); the unpadded T*k rows are rejected.
func.func @dispatch_c2_row_tile(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>) {
  // expected-error @+1 {{dispatch_c2: dispatched must be [T*k+min(E,T*k)*(row_tile-1)=32, H=64], got 'tensor<8x64xf32>'}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8 row_tile = 4
    : (tensor<4x64xf32>, tensor<4x2xi32>) -> (tensor<8x64xf32>, tensor<8xi32>, tensor<4x2xi32>)
  return
}

// -----

// Tests that dispatch_c4: slot has the shape of expert_ids.
func.func @dispatch_c4(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  // expected-error @+1 {{dispatch_c4: slot 'tensor<?x4xi32>' must have the shape of expert_ids 'tensor<?x2xi32>'}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x4xi32>)
  return
}

// -----

// Tests that dispatch_c7: expert_offsets is [num_experts + 1].
func.func @dispatch_c7_offsets(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  // expected-error @+1 {{dispatch_c7: expert_offsets 'tensor<8xi32>' must be [num_experts + 1 = 9]}}
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>)
      -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<8xi32>)
  return
}

// -----

// Tests that dispatch_c7: expert_offsets has rank 1.
func.func @dispatch_c7_offsets_rank(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  // expected-error @+1 {{dispatch_c7: expert_offsets 'tensor<9x1xi32>' must be [num_experts + 1 = 9]}}
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>)
      -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<9x1xi32>)
  return
}

// -----

// Tests that dispatch_c7: in the masked layout row_tile divides the capacity (every tile holds
// rows of one expert's block).
func.func @dispatch_c7_row_tile(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  // expected-error @+1 {{dispatch_c7: row_tile 3 must divide the capacity 8}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 4 capacity = 8 row_tile = 3
    : (tensor<?x64xf32>, tensor<?x2xi32>) -> (tensor<32x64xf32>, tensor<32xi32>, tensor<?x2xi32>)
  return
}

// -----

// Tests that dispatch row_tile must be positive (ODS attribute constraint, no rule id).
func.func @dispatch_row_tile_zero(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  // expected-error @+1 {{attribute 'row_tile' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 8 row_tile = 0
    : (tensor<?x64xf32>, tensor<?x2xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>)
  return
}

// -----

// Tests that dispatch num_experts must be positive (ODS attribute constraint, no rule id).
func.func @dispatch_num_experts(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  // expected-error @+1 {{attribute 'num_experts' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 0
    : (tensor<?x64xf32>, tensor<?x2xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>)
  return
}

//===----------------------------------------------------------------------===//
// moe.grouped_matmul
//===----------------------------------------------------------------------===//

// -----

// Tests that gmm_c1: the weight has rank 3.
func.func @gmm_c1_rank(%in: tensor<?x64xf32>, %w: tensor<32x64xf32>, %re: tensor<?xi32>) {
  // expected-error @+1 {{gmm_c1: weight must have rank 3, got 'tensor<32x64xf32>'}}
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<?x64xf32>, tensor<32x64xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  return
}

// -----

// Tests that gmm_c1: the weight has the element type of the input.
func.func @gmm_c1_element(%in: tensor<?x64xf32>, %w: tensor<8x32x64xbf16>, %re: tensor<?xi32>) {
  // expected-error @+1 {{gmm_c1: weight must have element type 'f32', got 'tensor<8x32x64xbf16>'}}
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<?x64xf32>, tensor<8x32x64xbf16>, tensor<?xi32>) -> tensor<?x32xf32>
  return
}

// -----

// Tests that gmm_c1: the weight is [E, M, K] with the K of the input.
func.func @gmm_c1_k(%in: tensor<?x64xf32>, %w: tensor<8x64x32xf32>, %re: tensor<?xi32>) {
  // expected-error @+1 {{gmm_c1: weight 'tensor<8x64x32xf32>' must be [E, M, K] with K = 64 of input 'tensor<?x64xf32>'}}
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<?x64xf32>, tensor<8x64x32xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that gmm_c2: row_expert has one entry per input row.
func.func @gmm_c2(%in: tensor<6x64xf32>, %w: tensor<8x32x64xf32>, %re: tensor<5xi32>) {
  // expected-error @+1 {{gmm_c2: row_expert 'tensor<5xi32>' must have one entry per input row}}
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<6x64xf32>, tensor<8x32x64xf32>, tensor<5xi32>) -> tensor<6x32xf32>
  return
}

// -----

// Tests that gmm_c2: row_expert is i32 (an ODS type constraint).
func.func @gmm_c2_element(%in: tensor<6x64xf32>, %w: tensor<8x32x64xf32>, %re: tensor<6xi64>) {
  // expected-error @+1 {{operand #2 must be ranked tensor of 32-bit signless integer values, but got 'tensor<6xi64>'}}
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<6x64xf32>, tensor<8x32x64xf32>, tensor<6xi64>) -> tensor<6x32xf32>
  return
}

// -----

// Tests that gmm_c3: the result is [N, M].
func.func @gmm_c3_shape(%in: tensor<6x64xf32>, %w: tensor<8x32x64xf32>, %re: tensor<6xi32>) {
  // expected-error @+1 {{gmm_c3: result must be [N=6, M=32], got 'tensor<6x64xf32>'}}
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<6x64xf32>, tensor<8x32x64xf32>, tensor<6xi32>) -> tensor<6x64xf32>
  return
}

// -----

// Tests that gmm_c3: the result has the element type of the input.
func.func @gmm_c3_element(%in: tensor<6x64xbf16>, %w: tensor<8x32x64xbf16>, %re: tensor<6xi32>) {
  // expected-error @+1 {{gmm_c3: result must have element type 'bf16', got 'tensor<6x32xf32>'}}
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<6x64xbf16>, tensor<8x32x64xbf16>, tensor<6xi32>) -> tensor<6x32xf32>
  return
}

// -----

// Tests that gmm_c5: expert_offsets is [E + 1] for the weight's E experts.
func.func @gmm_c5(%in: tensor<?x64xf32>, %w: tensor<8x32x64xf32>, %re: tensor<?xi32>,
                  %off: tensor<8xi32>) {
  // expected-error @+1 {{gmm_c5: expert_offsets 'tensor<8xi32>' must be [E + 1] for weight 'tensor<8x32x64xf32>'}}
  %r = moe.grouped_matmul %in, %w, %re offsets %off
    : (tensor<?x64xf32>, tensor<8x32x64xf32>, tensor<?xi32>, tensor<8xi32>) -> tensor<?x32xf32>
  return
}

// -----

// Tests that gmm_c5: a dynamic offsets length does not pass for [E + 1].
func.func @gmm_c5_dynamic(%in: tensor<?x64xf32>, %w: tensor<8x32x64xf32>, %re: tensor<?xi32>,
                          %off: tensor<?xi32>) {
  // expected-error @+1 {{gmm_c5: expert_offsets 'tensor<?xi32>' must be [E + 1] for weight 'tensor<8x32x64xf32>'}}
  %r = moe.grouped_matmul %in, %w, %re offsets %off
    : (tensor<?x64xf32>, tensor<8x32x64xf32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x32xf32>
  return
}

//===----------------------------------------------------------------------===//
// moe.activation
//===----------------------------------------------------------------------===//

// -----

// Tests that act_c1: input and result have rank 2.
func.func @act_c1_rank(%h: tensor<?x8x64xf32>) {
  // expected-error @+1 {{act_c1: input must have rank 2, got 'tensor<?x8x64xf32>'}}
  %a = moe.activation %h kind swiglu : (tensor<?x8x64xf32>) -> tensor<?x32xf32>
  return
}

// -----

// Tests that act_c1: the result has the element type of the input.
func.func @act_c1_element(%h: tensor<?x64xf32>) {
  // expected-error @+1 {{act_c1: result must have element type 'f32', got 'tensor<?x32xbf16>'}}
  %a = moe.activation %h kind swiglu : (tensor<?x64xf32>) -> tensor<?x32xbf16>
  return
}

// -----

// Tests that act_c2: the input has a static, even number of columns.
func.func @act_c2_odd(%h: tensor<?x63xf32>) {
  // expected-error @+1 {{act_c2: a gated activation needs a static, even number of input columns (gate and up), got 'tensor<?x63xf32>'}}
  %a = moe.activation %h kind swiglu : (tensor<?x63xf32>) -> tensor<?x31xf32>
  return
}

// -----

// Tests that act_c2: a dynamic number of input columns is rejected.
func.func @act_c2_dynamic(%h: tensor<?x?xf32>) {
  // expected-error @+1 {{act_c2: a gated activation needs a static, even number of input columns (gate and up), got 'tensor<?x?xf32>'}}
  %a = moe.activation %h kind swiglu : (tensor<?x?xf32>) -> tensor<?x32xf32>
  return
}

// -----

// Tests that act_c2: the result has half the input columns.
func.func @act_c2_result(%h: tensor<?x64xf32>) {
  // expected-error @+1 {{act_c2: result must be [N=?, 32], got 'tensor<?x64xf32>'}}
  %a = moe.activation %h kind swiglu : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// moe.combine
//===----------------------------------------------------------------------===//

// -----

// Tests that combine_c1: expert_out, slot and weights have rank 2.
func.func @combine_c1_rank(%o: tensor<?x64xf32>, %s: tensor<?xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{combine_c1: slot must have rank 2, got 'tensor<?xi32>'}}
  %y = moe.combine %o, %s, %w
    : (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that combine_c1: weights have the shape of slot.
func.func @combine_c1_shape(%o: tensor<?x64xf32>, %s: tensor<?x2xi32>, %w: tensor<?x4xf32>) {
  // expected-error @+1 {{combine_c1: weights 'tensor<?x4xf32>' must have the shape of slot 'tensor<?x2xi32>'}}
  %y = moe.combine %o, %s, %w
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x4xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that combine_c1: weights are f32 (an ODS type constraint).
func.func @combine_c1_element(%o: tensor<?x64xbf16>, %s: tensor<?x2xi32>, %w: tensor<?x2xbf16>) {
  // expected-error @+1 {{operand #2 must be ranked tensor of 32-bit float values, but got 'tensor<?x2xbf16>'}}
  %y = moe.combine %o, %s, %w
    : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xbf16>) -> tensor<?x64xbf16>
  return
}

// -----

// Tests that combine_c2: the result is [T, H].
func.func @combine_c2_shape(%o: tensor<8x64xf32>, %s: tensor<4x2xi32>, %w: tensor<4x2xf32>) {
  // expected-error @+1 {{combine_c2: result must be [T=4, H=64], got 'tensor<8x64xf32>'}}
  %y = moe.combine %o, %s, %w
    : (tensor<8x64xf32>, tensor<4x2xi32>, tensor<4x2xf32>) -> tensor<8x64xf32>
  return
}

// -----

// Tests that combine_c2: the result has the element type of expert_out.
func.func @combine_c2_element(%o: tensor<?x64xbf16>, %s: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{combine_c2: result must have element type 'bf16', got 'tensor<?x64xf32>'}}
  %y = moe.combine %o, %s, %w
    : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// moe.ep_dispatch and moe.ep_combine
//===----------------------------------------------------------------------===//

// -----

// Tests that ep_dispatch_c1: expert_rank has rank 1.
func.func @ep_dispatch_c1_rank(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>,
                               %w: tensor<?x2xf32>, %er: tensor<8x1xi32>) {
  // expected-error @+1 {{ep_dispatch_c1: expert_rank must have rank 1, got 'tensor<8x1xi32>'}}
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 64
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x1xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that ep_dispatch_c1: x, expert_ids and expert_weights agree on T and k.
func.func @ep_dispatch_c1_shape(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>,
                                %w: tensor<4x3xf32>, %er: tensor<8xi32>) {
  // expected-error @+1 {{ep_dispatch_c1: x [T,H], expert_ids [T,k] and expert_weights [T,k] disagree: 'tensor<4x64xf32>', 'tensor<4x2xi32>', 'tensor<4x3xf32>'}}
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 64
    : (tensor<4x64xf32>, tensor<4x2xi32>, tensor<4x3xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x3xf32>, i64)
  return
}

// -----

// Tests that ep_dispatch_c2: the received rows have x's element type.
func.func @ep_dispatch_c2_element(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>,
                                  %w: tensor<?x2xf32>, %er: tensor<8xi32>) {
  // expected-error @+1 {{ep_dispatch_c2: received must have element type 'f32', got 'tensor<?x64xbf16>'}}
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 64
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that ep_dispatch_c2: the results are [R, H], [R, k], [R, k].
func.func @ep_dispatch_c2_shape(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>,
                                %w: tensor<?x2xf32>, %er: tensor<8xi32>) {
  // expected-error @+1 {{ep_dispatch_c2: results must be [R,H], [R,k], [R,k] with H and k of the operands}}
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 64
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x4xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that ep_dispatch capacity must be positive (ODS attribute constraint, no rule id).
func.func @ep_dispatch_capacity(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>,
                                %w: tensor<?x2xf32>, %er: tensor<8xi32>) {
  // expected-error @+1 {{attribute 'capacity' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 0
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that ep_combine_c1: partial and result have rank 2.
func.func @ep_combine_c1_rank(%p: tensor<?x64xf32>, %h: i64) {
  // expected-error @+1 {{ep_combine_c1: result must have rank 2, got 'tensor<?xf32>'}}
  %y = moe.ep_combine %p, %h : (tensor<?x64xf32>, i64) -> tensor<?xf32>
  return
}

// -----

// Tests that ep_combine_c1: the result has partial's element type.
func.func @ep_combine_c1_element(%p: tensor<?x64xbf16>, %h: i64) {
  // expected-error @+1 {{ep_combine_c1: result must have element type 'bf16', got 'tensor<?x64xf32>'}}
  %y = moe.ep_combine %p, %h : (tensor<?x64xbf16>, i64) -> tensor<?x64xf32>
  return
}

// -----

// Tests that ep_combine_c1: result and partial agree on H.
func.func @ep_combine_c1_hidden(%p: tensor<?x64xf32>, %h: i64) {
  // expected-error @+1 {{ep_combine_c1: result 'tensor<?x32xf32>' and partial 'tensor<?x64xf32>' disagree on the hidden size}}
  %y = moe.ep_combine %p, %h : (tensor<?x64xf32>, i64) -> tensor<?x32xf32>
  return
}

// -----

// Tests that layer_c6: a placement replaces expert_rank, it does not join it.
func.func @layer_c6_both(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                         %w13: tensor<5x64x64xf32>, %w2: tensor<5x64x32xf32>,
                         %er: tensor<8xi32>, %p: tensor<10xi32>, %s: tensor<10xf32>) {
  // expected-error @+1 {{layer_c6: ep > 1 takes expert_rank or a placement (one of them) and max_tokens_per_rank; ep = 1 takes neither map}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er) placement(%p, %s)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<5x64x64xf32>, tensor<5x64x32xf32>,
          tensor<8xi32>, tensor<10xi32>, tensor<10xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c8: the physical slots divide over the ranks.
func.func @layer_c8_slots(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                          %w13: tensor<5x64x64xf32>, %w2: tensor<5x64x32xf32>,
                          %p: tensor<9xi32>, %s: tensor<9xf32>) {
  // expected-error @+1 {{layer_c8: a placement is phys_to_log[P] and replica_share[P] with a static P >= E that ep divides, got 'tensor<9xi32>' and 'tensor<9xf32>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) placement(%p, %s)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<5x64x64xf32>, tensor<5x64x32xf32>,
          tensor<9xi32>, tensor<9xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c2: with a placement each rank holds P/ep slots.
func.func @layer_c2_placed(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                           %w13: tensor<4x64x64xf32>, %w2: tensor<4x64x32xf32>,
                           %p: tensor<10xi32>, %s: tensor<10xf32>) {
  // expected-error @+1 {{layer_c2: expert weights must be w13[P/ep=5, 2I, H=64] and w2[P/ep, H, I], got 'tensor<4x64x64xf32>' and 'tensor<4x64x32xf32>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) placement(%p, %s)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<4x64x64xf32>, tensor<4x64x32xf32>,
          tensor<10xi32>, tensor<10xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that ep_dispatch_c6: expert_rank or a placement, not both.
func.func @ep_dispatch_c6_both(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                               %er: tensor<8xi32>, %p: tensor<10xi32>, %s: tensor<10xf32>) {
  // expected-error @+1 {{ep_dispatch_c6: give expert_rank or a placement, not both or neither}}
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er placement(%p, %s) capacity = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>, tensor<10xi32>, tensor<10xf32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that ep_dispatch_c10: replicas chosen per batch need a placement.
func.func @ep_dispatch_c10(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                           %er: tensor<8xi32>) {
  // expected-error @+1 {{ep_dispatch_c10: per_batch_replicas chooses among a placement's replicas: it needs placement(...)}}
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er per_batch_replicas capacity = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that ep_dispatch_c11: experts states a placement's logical experts.
func.func @ep_dispatch_c11_map(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                               %er: tensor<8xi32>) {
  // expected-error @+1 {{ep_dispatch_c11: experts (8) states a placement's logical experts: it needs placement(...)}}
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8 experts = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that ep_dispatch_c11: every expert needs a slot of the placement.
func.func @ep_dispatch_c11_slots(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                                 %p: tensor<10xi32>, %s: tensor<10xf32>) {
  // expected-error @+1 {{ep_dispatch_c11: experts (12) exceeds the placement's 10 slots: every expert needs one}}
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w placement(%p, %s) capacity = 8 experts = 12
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<10xi32>, tensor<10xf32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that ep_dispatch_c6: one share per slot.
func.func @ep_dispatch_c6_shares(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                                 %p: tensor<10xi32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{ep_dispatch_c6: replica_share 'tensor<8xf32>' must have the shape of phys_to_log 'tensor<10xi32>'}}
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w placement(%p, %s) capacity = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<10xi32>, tensor<8xf32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that gmm_c4: FP8 codes need their scales.
func.func @gmm_c4_missing(%q: tensor<?x64xi8>, %w: tensor<4x32x64xf32>, %re: tensor<?xi32>) {
  // expected-error @+1 {{gmm_c4: FP8 codes (i8 input) come with scales, and scales only with them}}
  %y = moe.grouped_matmul %q, %w, %re
    : (tensor<?x64xi8>, tensor<4x32x64xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  return
}

// -----

// Tests that gmm_c4: the scale groups divide K.
func.func @gmm_c4_groups(%q: tensor<?x64xi8>, %w: tensor<4x32x64xf32>, %re: tensor<?xi32>,
                         %s: tensor<?x3xf32>) {
  // expected-error @+1 {{gmm_c4: scales must be [N, G] with G dividing a static K, got 'tensor<?x3xf32>' for input 'tensor<?x64xi8>'}}
  %y = moe.grouped_matmul %q, %w, %re scales %s
    : (tensor<?x64xi8>, tensor<4x32x64xf32>, tensor<?xi32>, tensor<?x3xf32>) -> tensor<?x32xf32>
  return
}

// -----

// Tests that ep_dispatch_c7: i8 rows are FP8 codes, which need a quantization.
func.func @ep_dispatch_c7_codes(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                                %er: tensor<8xi32>) {
  // expected-error @+1 {{ep_dispatch_c7: i8 received rows are FP8 codes: they need quantization and received_scales, which need them}}
  %rx, %s, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xi8>, tensor<?x2xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that ep_dispatch_c7: one scale per group of the scheme.
func.func @ep_dispatch_c7_scales(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                                 %er: tensor<8xi32>) {
  // expected-error @+1 {{ep_dispatch_c7: received_scales must be [R, H/32], got 'tensor<?x1xf32>'}}
  %rx, %s, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8 quantization fp8_e4m3_g32_ue8m0
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xi8>, tensor<?x1xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that layer_c7: the decode phase needs max_tokens_per_rank.
func.func @layer_c7(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                    %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>) {
  // expected-error @+1 {{layer_c7: the decode phase needs max_tokens_per_rank (it sizes the fixed layout)}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
         {phase = #moe<phase decode>}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that dispatch_c5: the masked layout has num_experts * capacity rows.
func.func @dispatch_c5_rows(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  // expected-error @+1 {{dispatch_c5: with capacity, dispatched must be [num_experts*capacity=32, H=64], got 'tensor<?x64xf32>'}}
  %d, %e, %s = moe.dispatch %x, %ids num_experts = 4 capacity = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>)
  return
}

// -----

// Tests that dispatch_c5: static tokens must fit the capacity per expert.
func.func @dispatch_c5_tokens(%x: tensor<9x64xf32>, %ids: tensor<9x2xi32>) {
  // expected-error @+1 {{dispatch_c5: 9 tokens do not fit the masked layout's capacity of 8 rows per expert}}
  %d, %e, %s = moe.dispatch %x, %ids num_experts = 4 capacity = 8
    : (tensor<9x64xf32>, tensor<9x2xi32>) -> (tensor<32x64xf32>, tensor<32xi32>, tensor<9x2xi32>)
  return
}

// -----

// Tests that ep_dispatch_c4: with slots the received rows are static, ep * slots = capacity.
func.func @ep_dispatch_c4_rows(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>,
                               %w: tensor<?x2xf32>, %er: tensor<8xi32>) {
  // expected-error @+1 {{ep_dispatch_c4: with slots = 4 the received rows are static, a multiple of slots (ep * slots) and equal to capacity, got 'tensor<?x64xf32>' and capacity 8}}
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8 slots = 4
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that ep_dispatch_c5: ep divides the experts.
func.func @ep_dispatch_c5(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>,
                          %w: tensor<?x2xf32>, %er: tensor<8xi32>) {
  // expected-error @+1 {{ep_dispatch_c5: ep = 3 does not divide the 8 experts of expert_rank}}
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8 ep = 3
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that ep_dispatch_c4: with slots, max_tokens is the slot count.
func.func @ep_dispatch_c4_max(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>,
                              %w: tensor<?x2xf32>, %er: tensor<8xi32>) {
  // expected-error @+1 {{ep_dispatch_c4: with slots, max_tokens must be slots, got 5 and 4}}
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8 max_tokens = 5 slots = 4
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<8x64xf32>, tensor<8x2xi32>, tensor<8x2xf32>, i64)
  return
}

// -----

// Tests that a routing field may not be given twice.
func.func @routing_field_twice(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>) {
  // expected-error @+1 {{routing field 'top_k' given twice}}
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2, top_k = 3>
    : (tensor<?x64xf32>, tensor<8x64xf32>) -> (tensor<?x3xi32>, tensor<?x3xf32>)
  return
}

// -----

// Tests that ep_dispatch_c3: a quantized dispatch needs a hidden size that is a multiple of its group.
func.func @ep_dispatch_c3_group(%x: tensor<?x100xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                                %rank: tensor<8xi32>) {
  // expected-error @+1 {{ep_dispatch_c3: fp8_e4m3_g128 needs a static hidden size that is a multiple of 128, got 'tensor<?x100xf32>'}}
  %rx, %rids, %rw, %h = moe.ep_dispatch %x, %ids, %w, %rank capacity = 64 quantization fp8_e4m3_g128
    : (tensor<?x100xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x100xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that layout_c2: tp divides ep.
func.func @layout_c2_tp(%x: tensor<?x64xf32>) attributes {
  // expected-error @+1 {{layout_c2: tp (3) must divide ep (4)}}
  layout = #moe.layout<ep = 4, tp = 3>} {
  return
}

// -----

// Tests that tp_c1: a TP slice has the columns of x.
func.func @tp_c1_columns(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{tp_c1: slice 'tensor<?x32xf32>' must be rows of x 'tensor<?x64xf32>'}}
  %s = moe.tp_slice %x tp = 2 : (tensor<?x64xf32>) -> tensor<?x32xf32>
  return
}

// -----

// Tests that tp_c2: a TP gather gives the rows of the full tensor.
func.func @tp_c2_rows(%s: tensor<?x64xf32>, %x: tensor<8x64xf32>) {
  // expected-error @+1 {{tp_c2: result 'tensor<4x64xf32>' must have the rows of 'tensor<8x64xf32>'}}
  %y = moe.tp_gather %s, %x tp = 2 : (tensor<?x64xf32>, tensor<8x64xf32>) -> tensor<4x64xf32>
  return
}

//===----------------------------------------------------------------------===//
// Issue 9: sizes within moe/Support/Limits.h, f32-normal scales, and the
// rules that keep every pass from failing on what the verifier accepts.
//===----------------------------------------------------------------------===//

// -----

// Tests that routing_c5: a scale that rounds to 0 in f32 (1e-50) is rejected.
// expected-error @+1 {{routing_c5: scale 1.000000e-50 is not a normal f32}}
func.func @routing_c5() attributes {r = #moe.routing<softmax, top_k = 2, scale = 1.0e-50>} {
  return
}

// -----

// Tests that routing_c5: a scale that rounds to +inf in f32 (1e39) is rejected.
// expected-error @+1 {{routing_c5: scale 1.000000e+39 is not a normal f32}}
func.func @routing_c5_huge() attributes {r = #moe.routing<softmax, top_k = 2, scale = 1.0e39>} {
  return
}

// -----

// Tests that routing_c5: a scale that is an f32 subnormal (1e-40) is rejected.
// expected-error @+1 {{routing_c5: scale 1.000000e-40 is not a normal f32}}
func.func @routing_c5_subnormal() attributes {r = #moe.routing<softmax, top_k = 2, scale = 1.0e-40>} {
  return
}

// -----

// Tests that routing_c6: top_k is at most 1024 (2^62 would overflow products).
// expected-error @+1 {{routing_c6: top_k (4611686018427387904) and n_group (1) must be at most 1024}}
func.func @routing_c6() attributes {r = #moe.routing<softmax, top_k = 4611686018427387904>} {
  return
}

// -----

// Tests that routing_c6: n_group is at most 1024.
// expected-error @+1 {{routing_c6: top_k (2) and n_group (2048) must be at most 1024}}
func.func @routing_c6_groups() attributes {r = #moe.routing<sigmoid, top_k = 2, n_group = 2048, topk_group = 1>} {
  return
}

// -----

// Tests that layout_c3: ep and tp are at most 2^16 ranks.
// expected-error @+1 {{layout_c3: ep (4611686018427387904) and tp (1) must be at most 65536}}
func.func @layout_c3() attributes {l = #moe.layout<ep = 4611686018427387904, tp = 1>} {
  return
}

// -----

// Tests that size_c1: an extent near 2^62 (here experts) is rejected before any product is formed.
func.func @size_c1(%x: tensor<?x64xf32>, %wr: tensor<4611686018427387904x64xf32>,
                   %w13: tensor<4611686018427387904x64x64xf32>, %w2: tensor<4611686018427387904x64x32xf32>) {
  // expected-error @+1 {{size_c1: 'tensor<4611686018427387904x64xf32>' has an extent above 2^57 or more than 2^62 elements}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<4611686018427387904x64xf32>, tensor<4611686018427387904x64x64xf32>,
          tensor<4611686018427387904x64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that size_c1: a tensor whose extents multiply past 2^62 elements is rejected.
func.func @size_c1_elements(%in: tensor<8796093022208x1048576xf32>, %w: tensor<1x8x1048576xf32>,
                            %re: tensor<8796093022208xi32>) {
  // expected-error @+1 {{size_c1: 'tensor<8796093022208x1048576xf32>' has an extent above 2^57 or more than 2^62 elements}}
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<8796093022208x1048576xf32>, tensor<1x8x1048576xf32>, tensor<8796093022208xi32>)
      -> tensor<8796093022208x8xf32>
  return
}

// -----

// Tests that route_c9: at most 2^31 tokens.
func.func @route_c9(%x: tensor<4294967296x64xf32>, %wr: tensor<8x64xf32>) {
  // expected-error @+1 {{route_c9: x 'tensor<4294967296x64xf32>' must hold at most 2147483648 tokens of a hidden size in [1, 1048576]}}
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<4294967296x64xf32>, tensor<8x64xf32>) -> (tensor<4294967296x2xi32>, tensor<4294967296x2xf32>)
  return
}

// -----

// Tests that route_c9: a hidden size of at most 2^20.
func.func @route_c9_hidden(%x: tensor<?x2097152xf32>, %wr: tensor<8x2097152xf32>) {
  // expected-error @+1 {{route_c9: x 'tensor<?x2097152xf32>' must hold at most 2147483648 tokens of a hidden size in [1, 1048576]}}
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<?x2097152xf32>, tensor<8x2097152xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

// Tests that route_c9: at most 2^20 experts (here in a moe.layer, which shares the route rules).
func.func @route_c9_experts(%x: tensor<?x8xf32>, %wr: tensor<2097152x8xf32>,
                            %w13: tensor<2097152x8x8xf32>, %w2: tensor<2097152x8x4xf32>) {
  // expected-error @+1 {{route_c9: 2097152 experts exceed the limit of 1048576}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x8xf32>, tensor<2097152x8xf32>, tensor<2097152x8x8xf32>,
          tensor<2097152x8x4xf32>) -> tensor<?x8xf32>
  return
}

// -----

// Tests that layer_c9: the intermediate size is at most 2^20.
func.func @layer_c9(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>,
                    %w13: tensor<4x4194304x8xf32>, %w2: tensor<4x8x2097152xf32>) {
  // expected-error @+1 {{layer_c9: a layer needs a static hidden size, intermediate sizes in [1, 1048576], at most 1048576 expert slots and max_tokens_per_rank at most 2147483648}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x4194304x8xf32>,
          tensor<4x8x2097152xf32>) -> tensor<?x8xf32>
  return
}

// -----

// Tests that layer_c9: max_tokens_per_rank near 2^62 (the capacity ep * max would overflow) is rejected.
func.func @layer_c9_max_tokens(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %w13: tensor<2x8x8xf32>,
                               %w2: tensor<2x8x4xf32>, %er: tensor<4xi32>) {
  // expected-error @+1 {{layer_c9: a layer needs a static hidden size, intermediate sizes in [1, 1048576], at most 1048576 expert slots and max_tokens_per_rank at most 2147483648; got max_tokens_per_rank = 4611686018427387904}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 4611686018427387904 : i64}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<2x8x8xf32>, tensor<2x8x4xf32>, tensor<4xi32>)
         -> tensor<?x8xf32>
  return
}

// -----

// Tests that layer_c9: the hidden size is static (chunk, workspace and FP8 plans need it).
func.func @layer_c9_hidden(%x: tensor<?x?xf32>, %wr: tensor<4x8xf32>, %w13: tensor<4x8x8xf32>,
                           %w2: tensor<4x8x4xf32>) {
  // expected-error @+1 {{layer_c9: a layer needs a static hidden size, intermediate sizes in [1, 1048576], at most 1048576 expert slots and max_tokens_per_rank at most 2147483648; got a dynamic hidden size}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x?xf32>, tensor<4x8xf32>, tensor<4x8x8xf32>, tensor<4x8x4xf32>) -> tensor<?x?xf32>
  return
}

// -----

// Tests that layer_c9: a placement has at most 2^20 physical slots.
func.func @layer_c9_slots(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %w13: tensor<2097152x8x8xf32>,
                          %w2: tensor<2097152x8x4xf32>, %p: tensor<4194304xi32>, %s: tensor<4194304xf32>) {
  // expected-error @+1 {{; got 4194304 expert slots}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) placement(%p, %s)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 8 : i64}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<2097152x8x8xf32>, tensor<2097152x8x4xf32>,
          tensor<4194304xi32>, tensor<4194304xf32>) -> tensor<?x8xf32>
  return
}

// -----

// Tests that layer_c10: a static token count above max_tokens_per_rank is rejected.
func.func @layer_c10(%x: tensor<5x8xf32>, %wr: tensor<4x8xf32>, %w13: tensor<4x8x8xf32>,
                     %w2: tensor<4x8x4xf32>) {
  // expected-error @+1 {{layer_c10: 5 static tokens exceed max_tokens_per_rank (4)}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
         {max_tokens_per_rank = 4 : i64}
       : (tensor<5x8xf32>, tensor<4x8xf32>, tensor<4x8x8xf32>, tensor<4x8x4xf32>) -> tensor<5x8xf32>
  return
}

// -----

// Tests that layer_c10: a decode layer with static T above max_tokens_per_rank (its capacity) is rejected.
func.func @layer_c10_decode(%x: tensor<5x8xf32>, %wr: tensor<4x8xf32>, %w13: tensor<4x8x8xf32>,
                            %w2: tensor<4x8x4xf32>) {
  // expected-error @+1 {{layer_c10: 5 static tokens exceed max_tokens_per_rank (4)}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
         {max_tokens_per_rank = 4 : i64, phase = #moe<phase decode>}
       : (tensor<5x8xf32>, tensor<4x8xf32>, tensor<4x8x8xf32>, tensor<4x8x4xf32>) -> tensor<5x8xf32>
  return
}

// -----

// Tests that layer_c11: static T * top_k dispatched rows must fit the i32 row ids.
func.func @layer_c11(%x: tensor<1073741824x8xf32>, %wr: tensor<4x8xf32>, %w13: tensor<4x8x8xf32>,
                     %w2: tensor<4x8x4xf32>) {
  // expected-error @+1 {{layer_c11: 1073741824 tokens x top_k 4 dispatched rows exceed the i32 row ids (2^31 - 1)}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 4> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<1073741824x8xf32>, tensor<4x8xf32>, tensor<4x8x8xf32>, tensor<4x8x4xf32>)
         -> tensor<1073741824x8xf32>
  return
}

// -----

// Tests that layer_c11: the capacity ep * max_tokens_per_rank * top_k must fit the i32 row ids.
func.func @layer_c11_capacity(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %w13: tensor<2x8x8xf32>,
                              %w2: tensor<2x8x4xf32>, %er: tensor<4xi32>) {
  // expected-error @+1 {{layer_c11: the rows planned for 2147483648 tokens per rank (ep x tokens x top-k received choices, local experts x ep x tokens decode rows) exceed the i32 row ids (2^31 - 1)}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 1> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 2147483648 : i64}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<2x8x8xf32>, tensor<2x8x4xf32>, tensor<4xi32>)
         -> tensor<?x8xf32>
  return
}

// -----

// Tests that layer_c11: the decode layout (4 local experts x 2^30 masked rows) must fit the i32 row ids.
func.func @layer_c11_decode(%x: tensor<?x8xf32>, %wr: tensor<4x8xf32>, %w13: tensor<4x8x8xf32>,
                            %w2: tensor<4x8x4xf32>) {
  // expected-error @+1 {{layer_c11: the rows planned for 1073741824 tokens per rank}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 1> activation swiglu layout <ep = 1, tp = 1>
         {max_tokens_per_rank = 1073741824 : i64, phase = #moe<phase decode>}
       : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<4x8x8xf32>, tensor<4x8x4xf32>) -> tensor<?x8xf32>
  return
}

// -----

// Tests that dispatch_c6: num_experts * capacity slots near 2^62 (an overflow) are rejected.
func.func @dispatch_c6(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  // expected-error @+1 {{dispatch_c6: k in [1, 1024], num_experts at most 1048576, row_tile at most 1024, and static rows, T*k pairs (plus padding) and num_experts*capacity slots at most 2^31 - 1}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 4 capacity = 4611686018427387904
    : (tensor<?x64xf32>, tensor<?x2xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>)
  return
}

// -----

// Tests that dispatch_c6: row_tile above 1024 is rejected.
func.func @dispatch_c6_row_tile(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) {
  // expected-error @+1 {{dispatch_c6: k in [1, 1024], num_experts at most 1048576, row_tile at most 1024, and static rows, T*k pairs (plus padding) and num_experts*capacity slots at most 2^31 - 1 (i32 row ids), got 'tensor<?x64xf32>', 'tensor<?x2xi32>', num_experts = 4, capacity = 0, row_tile = 1025}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 4 row_tile = 1025
    : (tensor<?x64xf32>, tensor<?x2xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>)
  return
}

// -----

// Tests that dispatch_c6: the padding rows count toward the i32 row ids: 2^30-1 tokens with k = 2
// are 2^31 - 2 pairs, and 2 experts padded to row_tile 4 add 6 rows, past 2^31 - 1.
func.func @dispatch_c6_padding(%x: tensor<1073741823x1xf32>, %ids: tensor<1073741823x2xi32>) {
  // expected-error @+1 {{dispatch_c6: k in [1, 1024], num_experts at most 1048576, row_tile at most 1024}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 2 row_tile = 4
    : (tensor<1073741823x1xf32>, tensor<1073741823x2xi32>)
      -> (tensor<?x1xf32>, tensor<?xi32>, tensor<1073741823x2xi32>)
  return
}

// -----

// Tests that dispatch_c6: k = 0 choices per token is rejected.
func.func @dispatch_c6_k(%x: tensor<?x64xf32>, %ids: tensor<?x0xi32>) {
  // expected-error @+1 {{dispatch_c6: k in [1, 1024]}}
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 4
    : (tensor<?x64xf32>, tensor<?x0xi32>) -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x0xi32>)
  return
}

// -----

// Tests that gmm_c4: a zero group count (K / 0 per group) is rejected, not divided by.
func.func @gmm_c4_zero(%q: tensor<?x64xi8>, %w: tensor<4x32x64xf32>, %re: tensor<?xi32>,
                       %s: tensor<?x0xf32>) {
  // expected-error @+1 {{gmm_c4: scales must be [N, G] with G dividing a static K, got 'tensor<?x0xf32>' for input 'tensor<?x64xi8>'}}
  %y = moe.grouped_matmul %q, %w, %re scales %s
    : (tensor<?x64xi8>, tensor<4x32x64xf32>, tensor<?xi32>, tensor<?x0xf32>) -> tensor<?x32xf32>
  return
}

// -----

// Tests that ep_dispatch_c8: max_tokens near 2^62 is rejected.
func.func @ep_dispatch_c8(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                          %er: tensor<8xi32>) {
  // expected-error @+1 {{ep_dispatch_c8: ep at most 65536, max_tokens, slots and tokens at most 2147483648, capacity at most 140737488355328}}
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 16 ep = 2 max_tokens = 4611686018427387904
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return
}

// -----

// Tests that ep_dispatch_c9: without slots, the received row count is dynamic
// or the capacity.
func.func @ep_dispatch_c9(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                          %er: tensor<8xi32>) {
  // expected-error @+1 {{ep_dispatch_c9: without slots the received rows are dynamic (the exchanged counts decide them) or the capacity (masked past the received ones), got 'tensor<8x64xf32>' and capacity 16}}
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 16
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<8x64xf32>, tensor<8x2xi32>, tensor<8x2xf32>, i64)
  return
}

// -----

// Tests that ep_combine_c2: the combined rows are the dispatched tokens.
func.func @ep_combine_c2(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>,
                         %er: tensor<8xi32>) {
  %rx, %ri, %rw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 16
    : (tensor<4x64xf32>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  // expected-error @+1 {{ep_combine_c2: result 'tensor<5x64xf32>' must have the rows of the dispatched x 'tensor<4x64xf32>'}}
  %y = moe.ep_combine %rx, %h : (tensor<?x64xf32>, i64) -> tensor<5x64xf32>
  return
}

// -----

// Tests that tp_c3: a slice states a static row count only when every rank takes T/tp rows.
func.func @tp_c3(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{tp_c3: slice 'tensor<4x64xf32>' may state a static row count only when every rank takes the same rows}}
  %s = moe.tp_slice %x tp = 2 : (tensor<?x64xf32>) -> tensor<4x64xf32>
  return
}

// -----

// Tests that chunk_c1: a chunk loop maps x [T, H] to a result of the same type.
func.func @chunk_c1(%x: tensor<?x16xf32>) {
  // expected-error @+1 {{chunk_c1: x must be [T,H] and the result of the same type, got 'tensor<?x16xf32>' -> 'tensor<?x8xf32>'}}
  %y = moe.chunk_loop %x chunk_size = 4 : (tensor<?x16xf32>) -> tensor<?x8xf32> {
  ^bb0(%c: tensor<?x16xf32>):
    moe.yield %c : tensor<?x16xf32>
  }
  return
}

// -----

// Tests that chunk_c2: the body takes one chunk of dynamic rows.
func.func @chunk_c2(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{chunk_c2: the body takes one argument of type 'tensor<?x16xf32>'}}
  %y = moe.chunk_loop %x chunk_size = 4 : (tensor<8x16xf32>) -> tensor<8x16xf32> {
  ^bb0(%c: tensor<8x16xf32>):
    moe.yield %c : tensor<8x16xf32>
  }
  return
}

// -----

// Tests that chunk_c3: the body yields rows of x's hidden size and element type.
func.func @chunk_c3(%x: tensor<?x16xf32>, %o: tensor<?x8xf32>) {
  // expected-error @+1 {{chunk_c3: the body must end in moe.yield of [?, 16] rows of 'f32'}}
  %y = moe.chunk_loop %x chunk_size = 4 : (tensor<?x16xf32>) -> tensor<?x16xf32> {
  ^bb0(%c: tensor<?x16xf32>):
    moe.yield %o : tensor<?x8xf32>
  }
  return
}

// -----

// Tests that layer_c12: a shared gate needs a shared expert (generic form only).
func.func @layer_c12_no_shared(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                               %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>,
                               %g: tensor<1x64xf32>) {
  // expected-error @+1 {{layer_c12: shared_gate scales the shared expert: it needs shared_w13 and shared_w2}}
  %y = "moe.layer"(%x, %wr, %w13, %w2, %g) <{
         activation = #moe<activation swiglu>,
         layout = #moe.layout<ep = 1, tp = 1>,
         operandSegmentSizes = array<i32: 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0>,
         routing = #moe.routing<softmax, top_k = 2>}>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>, tensor<1x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c12: the shared gate is [1, H].
func.func @layer_c12_shape(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                           %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>,
                           %s13: tensor<64x64xf32>, %s2: tensor<64x32xf32>,
                           %g: tensor<2x64xf32>) {
  // expected-error @+1 {{layer_c12: shared_gate must be 'tensor<1x64xf32>', got 'tensor<2x64xf32>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) shared(%s13, %s2) shared_gate(%g)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>, tensor<64x64xf32>, tensor<64x32xf32>, tensor<2x64xf32>)
         -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c13: score_input needs top-1 routing.
func.func @layer_c13(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                     %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>) {
  // expected-error @+1 {{layer_c13: score_input (the routing weight scales the expert's input) needs top_k = 1, got 2}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <sigmoid, top_k = 2> activation swiglu score_input layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that routing_c7: group_max needs groups.
// expected-error @+1 {{routing_c7: group_max ranks expert groups: it needs n_group > 1}}
func.func private @routing_c7() attributes {r = #moe.routing<softmax, top_k = 2, group_max>}

// -----

// Tests that layer_c14: the router's logit bias has one f32 per expert.
func.func @layer_c14(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>, %rb: tensor<4xf32>,
                     %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>) {
  // expected-error @+1 {{layer_c14: the router's logit bias must be tensor<8xf32>, got 'tensor<4xf32>'}}
  %y = moe.layer %x router(%wr logit_bias %rb) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<4xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c15: the expert biases are [E, 2I] and [E, H].
func.func @layer_c15_shape(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                           %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>,
                           %b13: tensor<8x32xf32>, %b2: tensor<8x64xf32>) {
  // expected-error @+1 {{layer_c15: expert biases must be w13_bias[E/ep=8, 2I=64] and w2_bias[E/ep, H=64], got 'tensor<8x32xf32>' and 'tensor<8x64xf32>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2 biases(%b13, %b2))
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>, tensor<8x64x32xf32>,
          tensor<8x32xf32>, tensor<8x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c15: the two expert biases come together (generic form only).
func.func @layer_c15_one(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                         %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>,
                         %b13: tensor<8x64xf32>) {
  // expected-error @+1 {{layer_c15: expert biases are w13_bias and w2_bias together}}
  %y = "moe.layer"(%x, %wr, %w13, %w2, %b13) <{
         activation = #moe<activation swiglu>,
         layout = #moe.layout<ep = 1, tp = 1>,
         operandSegmentSizes = array<i32: 1, 1, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0>,
         routing = #moe.routing<softmax, top_k = 2>}>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>, tensor<8x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c15: expert biases have the weights' element type (layer_c4's rule).
func.func @layer_c15_type(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>,
                          %w13: tensor<8x64x64xbf16>, %w2: tensor<8x64x32xbf16>,
                          %b13: tensor<8x64xf32>, %b2: tensor<8x64xf32>) {
  // expected-error @+1 {{layer_c4: w13_bias}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2 biases(%b13, %b2))
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8x64x64xbf16>, tensor<8x64x32xbf16>,
          tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<?x64xbf16>
  return
}

// -----

// Tests that layer_c16: clamped_swiglu needs both of its parameters.
func.func @layer_c16_missing(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                             %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>) {
  // expected-error @+1 {{layer_c16: clamped_swiglu needs swiglu_alpha and swiglu_limit}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation clamped_swiglu layout <ep = 1, tp = 1>
         {swiglu_alpha = 1.702 : f32}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c16: the parameters belong to clamped_swiglu only.
func.func @layer_c16_swiglu(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                            %w13: tensor<8x64x64xf32>, %w2: tensor<8x64x32xf32>) {
  // expected-error @+1 {{layer_c16: swiglu_alpha and swiglu_limit belong to clamped_swiglu only}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
         {swiglu_limit = 7.0 : f32}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x64x64xf32>,
          tensor<8x64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that layer_c17: replicas chosen per batch need a placement.
func.func @layer_c17(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                     %w13: tensor<4x64x64xf32>, %w2: tensor<4x64x32xf32>, %er: tensor<8xi32>) {
  // expected-error @+1 {{layer_c17: per_batch_replicas chooses among a placement's replicas: it needs placement(...)}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er) per_batch_replicas
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<4x64x64xf32>,
          tensor<4x64x32xf32>, tensor<8xi32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that act_c3: the clamp limit is finite and positive.
func.func @act_c3(%h: tensor<?x64xf32>) {
  // expected-error @+1 {{act_c3: swiglu_alpha must be finite and swiglu_limit finite and > 0, got 1.702000e+00 and -1.000000e+00}}
  %a = moe.activation %h kind clamped_swiglu {swiglu_alpha = 1.702 : f32, swiglu_limit = -1.0 : f32}
      : (tensor<?x64xf32>) -> tensor<?x32xf32>
  return
}

// -----

// Tests that route_c10: the logit bias has one f32 per expert.
func.func @route_c10(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>, %rb: tensor<2x4xf32>) {
  // expected-error @+1 {{route_c10: the router's logit bias must be tensor<8xf32>, got 'tensor<2x4xf32>'}}
  %ids, %w = moe.route %x, %wr logit_bias %rb routing <softmax, top_k = 2>
      : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<2x4xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

// Tests that fp8_c1: FP8 weight codes need their scales and block shape.
func.func @fp8_c1_missing(%x: tensor<?x64xf32>, %w: tensor<4x32x64xi8>, %re: tensor<?xi32>) {
  // expected-error @+1 {{fp8_c1: weight: FP8 weight codes (i8) come with weight scales and a weight_block, and those only with them}}
  %y = moe.grouped_matmul %x, %w, %re
    : (tensor<?x64xf32>, tensor<4x32x64xi8>, tensor<?xi32>) -> tensor<?x32xf32>
  return
}

// -----

// Tests that fp8_c1: the scales are [E, ceil(M / rows), ceil(K / columns)].
func.func @fp8_c1_shape(%x: tensor<?x64xf32>, %w: tensor<4x30x64xi8>, %re: tensor<?xi32>,
                        %s: tensor<4x1x2xf32>) {
  // expected-error @+1 {{fp8_c1: the scales of weight 'tensor<4x30x64xi8>' in blocks of 16 x 32 must be [E, ceil(M / rows), ceil(K / columns)], got 'tensor<4x1x2xf32>'}}
  %y = moe.grouped_matmul %x, %w, %re weight_scales %s {weight_block = array<i64: 16, 32>}
    : (tensor<?x64xf32>, tensor<4x30x64xi8>, tensor<?xi32>, tensor<4x1x2xf32>) -> tensor<?x30xf32>
  return
}

// -----

// Tests that fp8_c1: a block has two positive extents.
func.func @fp8_c1_block(%x: tensor<?x64xf32>, %w: tensor<4x32x64xi8>, %re: tensor<?xi32>,
                        %s: tensor<4x2x2xf32>) {
  // expected-error @+1 {{fp8_c1: weight_block must be [rows, columns] of a scale block, each in [1,}}
  %y = moe.grouped_matmul %x, %w, %re weight_scales %s {weight_block = array<i64: 0, 32>}
    : (tensor<?x64xf32>, tensor<4x32x64xi8>, tensor<?xi32>, tensor<4x2x2xf32>) -> tensor<?x32xf32>
  return
}

// -----

// Tests that fp8_c1: float weights take no scales.
func.func @fp8_c1_float(%x: tensor<?x64xf32>, %w: tensor<4x32x64xf32>, %re: tensor<?xi32>,
                        %s: tensor<4x2x2xf32>) {
  // expected-error @+1 {{fp8_c1: weight: FP8 weight codes (i8) come with weight scales}}
  %y = moe.grouped_matmul %x, %w, %re weight_scales %s {weight_block = array<i64: 16, 32>}
    : (tensor<?x64xf32>, tensor<4x32x64xf32>, tensor<?xi32>, tensor<4x2x2xf32>) -> tensor<?x32xf32>
  return
}

// -----

// Tests that fp8_c1 holds for moe.layer: w2's scales follow w2's shape.
func.func @fp8_c1_layer(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                        %w13: tensor<8x48x64xi8>, %w2: tensor<8x64x24xi8>,
                        %s13: tensor<8x3x2xf32>, %s2: tensor<8x4x2xf32>) {
  // expected-error @+1 {{fp8_c1: the scales of w2 'tensor<8x64x24xi8>' in blocks of 16 x 32 must be [E, ceil(M / rows), ceil(K / columns)], got 'tensor<8x4x2xf32>'}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2 weight_scales(%s13, %s2))
         routing <softmax, top_k = 2, normalize> activation swiglu
         layout <ep = 1, tp = 1> {weight_block = array<i64: 16, 32>}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x48x64xi8>, tensor<8x64x24xi8>,
          tensor<8x3x2xf32>, tensor<8x4x2xf32>) -> tensor<?x64xf32>
  return
}

// -----

// Tests that an unknown activation keyword is a parse error naming the choices.
func.func @unknown_activation(%h: tensor<?x64xf32>) {
  // expected-error @+1 {{expected an activation (swiglu, clamped_swiglu), got 'gelu'}}
  %a = moe.activation %h kind gelu : (tensor<?x64xf32>) -> tensor<?x32xf32>
  return
}
