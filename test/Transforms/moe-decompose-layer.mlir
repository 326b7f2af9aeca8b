// RUN: moe-opt %s -split-input-file --moe-decompose-layer | FileCheck %s
// RUN: moe-opt %s -split-input-file --moe-decompose-layer=row-tile=16 | FileCheck %s --check-prefix=TILE
// RUN: not moe-opt %s -split-input-file --moe-decompose-layer=row-tile=0 2>&1 | FileCheck %s --check-prefix=BADTILE0
// RUN: not moe-opt %s -split-input-file --moe-decompose-layer=row-tile=1025 2>&1 | FileCheck %s --check-prefix=BADTILE1025
// RUN: moe-opt %s -split-input-file --moe-decompose-layer="row-tile=16 static-received=true activate-all-rows=true" | FileCheck %s --check-prefix=STATIC
// RUN: moe-opt %s -split-input-file --moe-decompose-layer=shared-first=true | FileCheck %s --check-prefix=FIRST

// Tests that row-tile outside [1, 1024] is rejected, naming the value.
// BADTILE0: error: moe-decompose-layer: row-tile must be in [1, 1024], got 0
// BADTILE1025: error: moe-decompose-layer: row-tile must be in [1, 1024], got 1025

// Tests that moe.layer becomes route, dispatch, grouped_matmul, activation, grouped_matmul, combine,
// and that the dispatch's expert_offsets [num_experts + 1] feed both GEMMs (row-tile=1: no
// row_tile attribute, T*k rows).
// CHECK-LABEL: func.func @layer_softmax
// CHECK-SAME: (%[[X:.+]]: tensor<?x64xf32>, %[[WR:.+]]: tensor<8x64xf32>, %[[W13:.+]]: tensor<8x64x64xf32>, %[[W2:.+]]: tensor<8x64x32xf32>)
// CHECK-NOT: moe.layer
// CHECK: %[[IDS:.+]], %[[WTS:.+]] = moe.route %[[X]], %[[WR]] routing <softmax, top_k = 2, normalize>
// CHECK-SAME: -> (tensor<?x2xi32>, tensor<?x2xf32>)
// CHECK: %[[ROWS:.+]], %[[RE:.+]], %[[SLOT:.+]], %[[OFF:.+]] = moe.dispatch %[[X]], %[[IDS]] num_experts = 8 :
// CHECK-SAME: -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
// CHECK: %[[H:.+]] = moe.grouped_matmul %[[ROWS]], %[[W13]], %[[RE]] offsets %[[OFF]]
// CHECK-SAME: -> tensor<?x64xf32>
// One rank, no padding: every row is an expert's, and the activation takes them all (no
// row count read back from the dispatch, which a GPU's host cannot read).
// CHECK-NOT: tensor.extract_slice
// CHECK: %[[A:.+]] = moe.activation %[[H]] kind swiglu
// CHECK-SAME: -> tensor<?x32xf32>
// CHECK: %[[O:.+]] = moe.grouped_matmul %[[A]], %[[W2]], %[[RE]] offsets %[[OFF]]
// CHECK-SAME: -> tensor<?x64xf32>
// CHECK: %[[Y:.+]] = moe.combine %[[O]], %[[SLOT]], %[[WTS]]
// CHECK-SAME: -> tensor<?x64xf32>
// CHECK-NOT: moe.layer
// CHECK: return %[[Y]]
// With row-tile=16 and dynamic T the row count stays dynamic (T*k + 8*15 at run time).
// TILE-LABEL: func.func @layer_softmax
// TILE: %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}}, %[[OFF:[^ ]+]] = moe.dispatch %{{.+}} num_experts = 8 row_tile = 16 :
// TILE-SAME: -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
// TILE: moe.grouped_matmul {{.+}} offsets %[[OFF]] : {{.+}} -> tensor<?x64xf32>
// Padding rows are no expert's: the activation runs on the offsets[8] rows the experts use.
// TILE: %[[END:.+]] = tensor.extract %[[OFF]][%{{.+}}] : tensor<9xi32>
// TILE: %[[N:.+]] = arith.index_cast %[[END]] : i32 to index
// TILE: %[[USED:.+]] = tensor.extract_slice %{{.+}}[0, 0] [%[[N]], 64] [1, 1]
// TILE: %[[AU:.+]] = moe.activation %[[USED]] kind swiglu
// TILE: tensor.insert_slice %[[AU]] into %{{.+}}[0, 0] [%[[N]], 32] [1, 1]
// TILE: moe.grouped_matmul {{.+}} offsets %[[OFF]] : {{.+}} -> tensor<?x64xf32>
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

// Tests that static tokens give static T*k rows and the bias and routing go to moe.route.
// CHECK-LABEL: func.func @layer_static_bias
// CHECK-SAME: (%[[X:.+]]: tensor<4x16xf32>, %[[WR:.+]]: tensor<8x16xf32>, %[[B:.+]]: tensor<8xf32>, %[[W13:.+]]: tensor<8x8x16xf32>, %[[W2:.+]]: tensor<8x16x4xf32>)
// CHECK: %[[IDS:.+]], %[[WTS:.+]] = moe.route %[[X]], %[[WR]] bias %[[B]] routing <sigmoid, top_k = 3, n_group = 4, topk_group = 2, normalize, scale = 2.500000e+00, correction_bias>
// CHECK-SAME: -> (tensor<4x3xi32>, tensor<4x3xf32>)
// CHECK: %[[ROWS:.+]], %[[RE:.+]], %[[SLOT:.+]], %[[OFF:.+]] = moe.dispatch %[[X]], %[[IDS]] num_experts = 8 :
// CHECK-SAME: -> (tensor<12x16xf32>, tensor<12xi32>, tensor<4x3xi32>, tensor<9xi32>)
// CHECK: %[[H:.+]] = moe.grouped_matmul %[[ROWS]], %[[W13]], %[[RE]] offsets %[[OFF]] {{.*}} -> tensor<12x8xf32>
// CHECK: %[[A:.+]] = moe.activation %[[H]] kind swiglu {{.*}} -> tensor<12x4xf32>
// CHECK: %[[O:.+]] = moe.grouped_matmul %[[A]], %[[W2]], %[[RE]] offsets %[[OFF]] {{.*}} -> tensor<12x16xf32>
// CHECK: %[[Y:.+]] = moe.combine %[[O]], %[[SLOT]], %[[WTS]] {{.*}} -> tensor<4x16xf32>
// CHECK: return %[[Y]]
func.func @layer_static_bias(%x: tensor<4x16xf32>, %wr: tensor<8x16xf32>,
                             %b: tensor<8xf32>, %w13: tensor<8x8x16xf32>,
                             %w2: tensor<8x16x4xf32>) -> tensor<4x16xf32> {
  %y = moe.layer %x router(%wr bias %b) experts(%w13, %w2)
         routing <sigmoid, top_k = 3, n_group = 4, topk_group = 2, normalize,
                  scale = 2.5, correction_bias>
         activation swiglu layout <ep = 1, tp = 1>
       : (tensor<4x16xf32>, tensor<8x16xf32>, tensor<8xf32>,
          tensor<8x8x16xf32>, tensor<8x16x4xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Tests that a shared expert becomes a one-expert grouped_matmul pair added with linalg.add;
// its GEMMs get offsets [0, T] (one expert owning every row).
// CHECK-LABEL: func.func @layer_shared
// CHECK-SAME: (%[[X:.+]]: tensor<?x64xbf16>, %[[WR:.+]]: tensor<32x64xbf16>, %[[B:.+]]: tensor<32xf32>, %[[W13:.+]]: tensor<32x48x64xbf16>, %[[W2:.+]]: tensor<32x64x24xbf16>, %[[S13:.+]]: tensor<48x64xbf16>, %[[S2:.+]]: tensor<64x24xbf16>)
// CHECK: %[[IDS:.+]], %[[WTS:.+]] = moe.route %[[X]], %[[WR]] bias %[[B]]
// CHECK: %[[ROWS:.+]], %[[RE:.+]], %[[SLOT:.+]], %[[OFF:.+]] = moe.dispatch %[[X]], %[[IDS]] num_experts = 32 :
// CHECK-SAME: tensor<33xi32>)
// CHECK: %[[H:.+]] = moe.grouped_matmul %[[ROWS]], %[[W13]], %[[RE]] offsets %[[OFF]]
// CHECK: %[[A:.+]] = moe.activation %[[H]] kind swiglu
// CHECK: %[[O:.+]] = moe.grouped_matmul %[[A]], %[[W2]], %[[RE]] offsets %[[OFF]]
// CHECK: %[[ROUTED:.+]] = moe.combine %[[O]], %[[SLOT]], %[[WTS]]
// CHECK-DAG: %[[ZERO:.+]] = arith.constant 0 : i32
// CHECK-DAG: %[[T:.+]] = tensor.dim %[[X]], %{{.+}} : tensor<?x64xbf16>
// CHECK-DAG: %[[EMPTY:.+]] = tensor.empty(%[[T]]) : tensor<?xi32>
// CHECK-DAG: %[[SRE:.+]] = linalg.fill ins(%[[ZERO]] : i32) outs(%[[EMPTY]] : tensor<?xi32>)
// CHECK-DAG: %[[TD:.+]] = tensor.dim %[[X]], %{{.+}} : tensor<?x64xbf16>
// CHECK-DAG: %[[TI32:.+]] = arith.index_cast %[[TD]] : index to i32
// CHECK-DAG: %[[SOFF:.+]] = tensor.from_elements %[[ZERO]], %[[TI32]] : tensor<2xi32>
// CHECK-DAG: %[[S13E:.+]] = tensor.expand_shape %[[S13]] {{\[\[}}0, 1], [2]] output_shape [1, 48, 64] : tensor<48x64xbf16> into tensor<1x48x64xbf16>
// CHECK-DAG: %[[S2E:.+]] = tensor.expand_shape %[[S2]] {{\[\[}}0, 1], [2]] output_shape [1, 64, 24] : tensor<64x24xbf16> into tensor<1x64x24xbf16>
// CHECK: %[[SH:.+]] = moe.grouped_matmul %[[X]], %[[S13E]], %[[SRE]] offsets %[[SOFF]] : (tensor<?x64xbf16>, tensor<1x48x64xbf16>, tensor<?xi32>, tensor<2xi32>) -> tensor<?x48xbf16>
// CHECK: %[[SA:.+]] = moe.activation %[[SH]] kind swiglu {{.*}} -> tensor<?x24xbf16>
// CHECK: %[[SO:.+]] = moe.grouped_matmul %[[SA]], %[[S2E]], %[[SRE]] offsets %[[SOFF]] : (tensor<?x24xbf16>, tensor<1x64x24xbf16>, tensor<?xi32>, tensor<2xi32>) -> tensor<?x64xbf16>
// CHECK: %[[INIT:.+]] = tensor.empty(%{{.+}}) : tensor<?x64xbf16>
// CHECK: %[[Y:.+]] = linalg.add ins(%[[ROUTED]], %[[SO]] : tensor<?x64xbf16>, tensor<?x64xbf16>) outs(%[[INIT]] : tensor<?x64xbf16>)
// CHECK-NOT: moe.layer
// CHECK: return %[[Y]]
// The shared expert is not dispatched, so row-tile does not pad its rows: still [0, T] and T rows.
// TILE-LABEL: func.func @layer_shared
// TILE: moe.dispatch {{.+}} num_experts = 32 row_tile = 16 :
// TILE: %[[SOFF:.+]] = tensor.from_elements %{{.+}}, %{{.+}} : tensor<2xi32>
// TILE: moe.grouped_matmul {{.+}} offsets %[[SOFF]] : (tensor<?x64xbf16>, tensor<1x48x64xbf16>, tensor<?xi32>, tensor<2xi32>) -> tensor<?x48xbf16>
// TILE: moe.grouped_matmul {{.+}} offsets %[[SOFF]] : (tensor<?x24xbf16>, tensor<1x64x24xbf16>, tensor<?xi32>, tensor<2xi32>) -> tensor<?x64xbf16>
// With shared-first the shared expert comes before the routing, its GEMMs and activation marked
// moe.side_stream (the routed ones not), and its output is still added after the combine.
// FIRST-LABEL: func.func @layer_shared
// FIRST-NOT: moe.route
// FIRST: %[[SH:.+]] = moe.grouped_matmul {{.+}} {moe.side_stream} : (tensor<?x64xbf16>, tensor<1x48x64xbf16>
// FIRST-NEXT: %[[SA:.+]] = moe.activation %[[SH]] kind swiglu {moe.side_stream}
// FIRST-NEXT: %[[SO:.+]] = moe.grouped_matmul %[[SA]], {{.+}} {moe.side_stream} : (tensor<?x24xbf16>, tensor<1x64x24xbf16>
// FIRST-NEXT: moe.route
// FIRST-NOT: moe.side_stream
// FIRST: %[[ROUTED:.+]] = moe.combine
// FIRST-NOT: moe.side_stream
// FIRST: linalg.add ins(%[[ROUTED]], %[[SO]] : tensor<?x64xbf16>, tensor<?x64xbf16>)
// FIRST-LABEL: func.func @layer_shared_gate
// FIRST: moe.grouped_matmul {{.+}} {moe.side_stream} :
// FIRST: moe.activation {{.+}} {moe.side_stream}
// FIRST: moe.grouped_matmul {{.+}} {moe.side_stream} :
// FIRST: linalg.generic
// FIRST: %[[GATED:.+]] = linalg.generic
// FIRST: moe.route
// FIRST: linalg.add ins(%{{.+}}, %[[GATED]] :
func.func @layer_shared(%x: tensor<?x64xbf16>, %wr: tensor<32x64xbf16>,
                        %b: tensor<32xf32>, %w13: tensor<32x48x64xbf16>,
                        %w2: tensor<32x64x24xbf16>, %s13: tensor<48x64xbf16>,
                        %s2: tensor<64x24xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr bias %b) experts(%w13, %w2) shared(%s13, %s2)
         routing <sigmoid, top_k = 4, n_group = 8, topk_group = 4, normalize,
                  scale = 2.5, correction_bias>
         activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xbf16>, tensor<32x64xbf16>, tensor<32xf32>,
          tensor<32x48x64xbf16>, tensor<32x64x24xbf16>, tensor<48x64xbf16>,
          tensor<64x24xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// Tests that a shared gate (Qwen2-MoE) scales the shared expert per token by
// sigmoid(gate . x), computed in f32, before the shared output is added.
// CHECK-LABEL: func.func @layer_shared_gate
// CHECK-SAME: %[[G:[^:]+]]: tensor<1x64xbf16>)
// CHECK: %[[SO:.+]] = moe.grouped_matmul {{.+}}tensor<1x64x24xbf16>{{.+}} -> tensor<?x64xbf16>
// CHECK: %[[LOGIT:.+]] = linalg.generic {{.+}} iterator_types = ["parallel", "reduction"]} ins(%{{.+}}, %[[G]] : tensor<?x64xbf16>, tensor<1x64xbf16>) outs(%{{.+}} : tensor<?xf32>)
// CHECK:   arith.extf
// CHECK:   arith.mulf
// CHECK:   arith.addf
// CHECK: %[[GATED:.+]] = linalg.generic {{.+}} ins(%[[SO]], %[[LOGIT]] : tensor<?x64xbf16>, tensor<?xf32>)
// CHECK:   arith.negf
// CHECK:   math.exp
// CHECK:   arith.divf
// CHECK:   arith.truncf {{.+}} : f32 to bf16
// CHECK: linalg.add ins(%{{.+}}, %[[GATED]] : tensor<?x64xbf16>, tensor<?x64xbf16>)
func.func @layer_shared_gate(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>,
                             %w13: tensor<8x48x64xbf16>, %w2: tensor<8x64x24xbf16>,
                             %s13: tensor<48x64xbf16>, %s2: tensor<64x24xbf16>,
                             %g: tensor<1x64xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) shared(%s13, %s2) shared_gate(%g)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8x48x64xbf16>,
          tensor<8x64x24xbf16>, tensor<48x64xbf16>, tensor<64x24xbf16>,
          tensor<1x64xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// Tests that score_input (Llama 4) scales each token by its routing weight
// before the dispatch and combines the expert outputs with weight 1.
// CHECK-LABEL: func.func @layer_score_input
// CHECK: %[[IDS:.+]], %[[WTS:.+]] = moe.route
// CHECK: %[[SCALED:.+]] = linalg.generic {{.+}} ins(%{{.+}}, %[[WTS]] : tensor<?x64xf32>, tensor<?x1xf32>)
// CHECK:   arith.mulf
// CHECK: %[[ONE:.+]] = arith.constant 1.000000e+00 : f32
// CHECK: %[[ONES:.+]] = linalg.fill ins(%[[ONE]] : f32) outs(%{{.+}} : tensor<?x1xf32>)
// CHECK: moe.dispatch %[[SCALED]], %[[IDS]]
// CHECK: moe.combine %{{.+}}, %{{.+}}, %[[ONES]]
func.func @layer_score_input(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                             %w13: tensor<8x48x64xf32>, %w2: tensor<8x64x24xf32>)
    -> tensor<?x64xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <sigmoid, top_k = 1> activation swiglu score_input layout <ep = 1, tp = 1>
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x48x64xf32>,
          tensor<8x64x24xf32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that with ep > 1 the experts run on rows from moe.ep_dispatch (local ids, capacity max_tokens_per_rank * ep) and moe.ep_combine returns them.
// CHECK-LABEL: func.func @layer_ep
// CHECK-SAME: (%[[X:.+]]: tensor<?x16xf32>, %[[WR:.+]]: tensor<8x16xf32>, %[[W13:.+]]: tensor<2x8x16xf32>, %[[W2:.+]]: tensor<2x16x4xf32>, %[[ER:.+]]: tensor<8xi32>)
// CHECK: %[[IDS:.+]], %[[WTS:.+]] = moe.route %[[X]], %[[WR]] routing <softmax, top_k = 2>
// CHECK: %[[RX:.+]], %[[LIDS:.+]], %[[LW:.+]], %[[H:.+]] = moe.ep_dispatch %[[X]], %[[IDS]], %[[WTS]], %[[ER]] capacity = 64
// CHECK-SAME: -> (tensor<?x16xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
// CHECK: %[[ROWS:.+]], %[[RE:.+]], %[[SLOT:.+]], %[[OFF:.+]] = moe.dispatch %[[RX]], %[[LIDS]] num_experts = 2 :
// CHECK-SAME: -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<3xi32>)
// CHECK: %[[G:.+]] = moe.grouped_matmul %[[ROWS]], %[[W13]], %[[RE]] offsets %[[OFF]]
// CHECK: %[[USED:.+]] = tensor.extract_slice %[[G]][0, 0]
// CHECK: %[[AU:.+]] = moe.activation %[[USED]]
// CHECK: %[[A:.+]] = tensor.insert_slice %[[AU]]
// CHECK: %[[O:.+]] = moe.grouped_matmul %[[A]], %[[W2]], %[[RE]] offsets %[[OFF]]
// CHECK: %[[P:.+]] = moe.combine %[[O]], %[[SLOT]], %[[LW]]
// CHECK: %[[Y:.+]] = moe.ep_combine %[[P]], %[[H]] : (tensor<?x16xf32>, i64) -> tensor<?x16xf32>
// CHECK: return %[[Y]]
// With ep > 1 the padding is per local expert (num_experts = 2).
// TILE-LABEL: func.func @layer_ep
// TILE: moe.dispatch {{.+}} num_experts = 2 row_tile = 16 :
// TILE-SAME: -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<3xi32>)
func.func @layer_ep(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>,
                    %w13: tensor<2x8x16xf32>, %w2: tensor<2x16x4xf32>,
                    %er: tensor<8xi32>) -> tensor<?x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 4, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<2x8x16xf32>,
          tensor<2x16x4xf32>, tensor<8xi32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Tests that two chained layers in one function are both decomposed.
// CHECK-LABEL: func.func @two_layers
// CHECK-NOT: moe.layer
// CHECK: %[[Y1:.+]] = moe.combine
// CHECK: %[[IDS:.+]], %{{.+}} = moe.route %[[Y1]],
// CHECK: %[[Y2:.+]] = moe.combine
// CHECK-NOT: moe.layer
// CHECK: return %[[Y2]]
func.func @two_layers(%x: tensor<?x16xf32>, %wr: tensor<4x16xf32>,
                      %w13: tensor<4x8x16xf32>, %w2: tensor<4x16x4xf32>)
    -> tensor<?x16xf32> {
  %y1 = moe.layer %x router(%wr) experts(%w13, %w2)
          routing <softmax, top_k = 1> activation swiglu layout <ep = 1, tp = 1>
        : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>,
           tensor<4x16x4xf32>) -> tensor<?x16xf32>
  %y2 = moe.layer %y1 router(%wr) experts(%w13, %w2)
          routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
        : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>,
           tensor<4x16x4xf32>) -> tensor<?x16xf32>
  return %y2 : tensor<?x16xf32>
}

// -----

// Tests that a function without moe.layer (decomposed moe ops included) is left unchanged.
// CHECK-LABEL: func.func @no_layer
// CHECK-SAME: (%[[H:.+]]: tensor<?x64xf32>, %[[B:.+]]: tensor<?x32xf32>, %[[N:.+]]: index)
// CHECK-NEXT: %[[A:.+]] = moe.activation %[[H]] kind swiglu : (tensor<?x64xf32>) -> tensor<?x32xf32>
// CHECK-NEXT: %[[E:.+]] = tensor.empty(%[[N]]) : tensor<?x32xf32>
// CHECK-NEXT: %[[S:.+]] = linalg.add ins(%[[A]], %[[B]] : tensor<?x32xf32>, tensor<?x32xf32>) outs(%[[E]] : tensor<?x32xf32>)
// CHECK-NEXT: return %[[S]]
func.func @no_layer(%h: tensor<?x64xf32>, %b: tensor<?x32xf32>, %n: index)
    -> tensor<?x32xf32> {
  %a = moe.activation %h kind swiglu : (tensor<?x64xf32>) -> tensor<?x32xf32>
  %e = tensor.empty(%n) : tensor<?x32xf32>
  %s = linalg.add ins(%a, %b : tensor<?x32xf32>, tensor<?x32xf32>)
                  outs(%e : tensor<?x32xf32>) -> tensor<?x32xf32>
  return %s : tensor<?x32xf32>
}

// -----

// Tests that with a placement each rank's experts are its P/ep = 5 slots, and the dispatch
// carries the placement instead of expert_rank, and the router's 8 logical experts.
// CHECK-LABEL: func.func @placed(
// CHECK-SAME: %[[P:[^:]+]]: tensor<10xi32>, %[[S:[^:]+]]: tensor<10xf32>)
// CHECK: moe.ep_dispatch %{{.+}}, %{{.+}}, %{{.+}} placement(%[[P]], %[[S]]) capacity = 32 ep = 2 max_tokens = 16 experts = 8 :
// CHECK: moe.dispatch {{.+}} num_experts = 5 :
func.func @placed(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>, %w13: tensor<5x64x64xf32>,
                  %w2: tensor<5x64x32xf32>, %p: tensor<10xi32>, %s: tensor<10xf32>)
    -> tensor<?x64xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) placement(%p, %s)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<5x64x64xf32>, tensor<5x64x32xf32>,
          tensor<10xi32>, tensor<10xf32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that the layer's per_batch_replicas passes to its dispatch.
// CHECK-LABEL: func.func @per_batch(
// CHECK: moe.ep_dispatch %{{.+}}, %{{.+}}, %{{.+}} placement(%{{.+}}, %{{.+}}) per_batch_replicas capacity = 32
func.func @per_batch(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>, %w13: tensor<5x64x64xf32>,
                     %w2: tensor<5x64x32xf32>, %p: tensor<10xi32>, %s: tensor<10xf32>)
    -> tensor<?x64xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) placement(%p, %s) per_batch_replicas
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<5x64x64xf32>, tensor<5x64x32xf32>,
          tensor<10xi32>, tensor<10xf32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that --moe-decompose-layer=row-tile=16 pads each expert's rows to a multiple of 16: the
// dispatch has row_tile = 16 and, for static T = 4, k = 2 and 8 experts, T*k + 8*15 = 128 rows;
// its expert_offsets [9] feed both grouped_matmuls, and combine brings the 4 tokens back. Without
// the option the same layer has no row_tile and T*k = 8 rows.
// CHECK-LABEL: func.func @layer_row_tile
// CHECK: moe.dispatch %{{.+}}, %{{.+}} num_experts = 8 :
// CHECK-SAME: -> (tensor<8x16xf32>, tensor<8xi32>, tensor<4x2xi32>, tensor<9xi32>)
// TILE-LABEL: func.func @layer_row_tile
// TILE-SAME: (%[[X:.+]]: tensor<4x16xf32>, %[[WR:.+]]: tensor<8x16xf32>, %[[W13:.+]]: tensor<8x8x16xf32>, %[[W2:.+]]: tensor<8x16x4xf32>)
// TILE: %[[IDS:.+]], %[[WTS:.+]] = moe.route %[[X]], %[[WR]]
// TILE: %[[ROWS:.+]], %[[RE:.+]], %[[SLOT:.+]], %[[OFF:.+]] = moe.dispatch %[[X]], %[[IDS]] num_experts = 8 row_tile = 16 :
// TILE-SAME: (tensor<4x16xf32>, tensor<4x2xi32>) -> (tensor<128x16xf32>, tensor<128xi32>, tensor<4x2xi32>, tensor<9xi32>)
// TILE: %[[H:.+]] = moe.grouped_matmul %[[ROWS]], %[[W13]], %[[RE]] offsets %[[OFF]]
// TILE-SAME: : (tensor<128x16xf32>, tensor<8x8x16xf32>, tensor<128xi32>, tensor<9xi32>) -> tensor<128x8xf32>
// TILE: %[[A:.+]] = moe.activation %[[H]] kind swiglu {{.*}} -> tensor<128x4xf32>
// TILE: %[[O:.+]] = moe.grouped_matmul %[[A]], %[[W2]], %[[RE]] offsets %[[OFF]]
// TILE-SAME: : (tensor<128x4xf32>, tensor<8x16x4xf32>, tensor<128xi32>, tensor<9xi32>) -> tensor<128x16xf32>
// TILE: %[[Y:.+]] = moe.combine %[[O]], %[[SLOT]], %[[WTS]] {{.*}} -> tensor<4x16xf32>
// TILE: return %[[Y]]
func.func @layer_row_tile(%x: tensor<4x16xf32>, %wr: tensor<8x16xf32>,
                          %w13: tensor<8x8x16xf32>, %w2: tensor<8x16x4xf32>) -> tensor<4x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<4x16xf32>, tensor<8x16xf32>, tensor<8x8x16xf32>, tensor<8x16x4xf32>)
         -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Tests that the decode (masked) layout is not padded by row-tile: its expert blocks are the
// capacity (8 tokens per rank), so the dispatch has no row_tile and expert_offsets [9] (e*C).
// TILE-LABEL: func.func @layer_decode_row_tile
// TILE: %{{[^ ]+}}, %{{[^ ]+}}, %{{[^ ]+}}, %[[OFF:[^ ]+]] = moe.dispatch %{{.+}} num_experts = 8 capacity = 8 :
// TILE-SAME: -> (tensor<64x16xf32>, tensor<64xi32>, tensor<?x2xi32>, tensor<9xi32>)
// TILE: moe.grouped_matmul {{.+}} offsets %[[OFF]] : {{.+}} -> tensor<64x8xf32>
// TILE: moe.grouped_matmul {{.+}} offsets %[[OFF]] : {{.+}} -> tensor<64x16xf32>
func.func @layer_decode_row_tile(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>,
                                 %w13: tensor<8x8x16xf32>, %w2: tensor<8x16x4xf32>)
    -> tensor<?x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 1, tp = 1>
         {max_tokens_per_rank = 8 : i64, phase = #moe<phase decode>}
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<8x8x16xf32>, tensor<8x16x4xf32>)
         -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Tests that gpt-oss's layer passes its logit bias to moe.route, adds each
// expert bias (by the row's expert, in f32, rows of no expert left as they
// are) after its GEMM, and keeps the activation's parameters.
// CHECK-LABEL: func.func @layer_gpt_oss
// CHECK-SAME: %[[RB:[^:]+]]: tensor<8xf32>
// CHECK-SAME: %[[B13:[^:]+]]: tensor<8x48xbf16>, %[[B2:[^:]+]]: tensor<8x64xbf16>)
// CHECK: moe.route %{{.+}}, %{{.+}} logit_bias %[[RB]]
// CHECK: %[[ROWS:.+]], %[[ROWEXP:.+]], %{{.+}}, %{{.+}} = moe.dispatch
// CHECK: %[[GU:.+]] = moe.grouped_matmul %[[ROWS]]
// CHECK: %[[GUB:.+]] = linalg.generic {{.+}} ins(%[[GU]], %[[ROWEXP]] : tensor<?x48xbf16>, tensor<?xi32>)
// CHECK:   arith.cmpi sge
// CHECK:   arith.cmpi slt
// CHECK:   tensor.extract %[[B13]]
// CHECK:   arith.addf
// CHECK:   arith.select
// CHECK:   arith.truncf
// CHECK: %[[ACT:.+]] = moe.activation %[[GUB]] kind clamped_swiglu {swiglu_alpha = 1.702000e+00 : f32, swiglu_limit = 7.000000e+00 : f32}
// CHECK: %[[DOWN:.+]] = moe.grouped_matmul %[[ACT]]
// CHECK: %[[DOWNB:.+]] = linalg.generic {{.+}} ins(%[[DOWN]], %[[ROWEXP]]
// CHECK:   tensor.extract %[[B2]]
// CHECK: moe.combine %[[DOWNB]]
func.func @layer_gpt_oss(%x: tensor<?x64xbf16>, %wr: tensor<8x64xbf16>, %rb: tensor<8xf32>,
                         %w13: tensor<8x48x64xbf16>, %w2: tensor<8x64x24xbf16>,
                         %b13: tensor<8x48xbf16>, %b2: tensor<8x64xbf16>) -> tensor<?x64xbf16> {
  %y = moe.layer %x router(%wr logit_bias %rb) experts(%w13, %w2 biases(%b13, %b2))
         routing <softmax, top_k = 2, normalize> activation clamped_swiglu
         layout <ep = 1, tp = 1> {swiglu_alpha = 1.702 : f32, swiglu_limit = 7.0 : f32}
       : (tensor<?x64xbf16>, tensor<8x64xbf16>, tensor<8xf32>, tensor<8x48x64xbf16>,
          tensor<8x64x24xbf16>, tensor<8x48xbf16>, tensor<8x64xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// FP8 expert weights: each expert GEMM reads its weight's codes with that
// weight's block scales and the layer's block shape.
// CHECK-LABEL: func.func @layer_fp8_weights
// CHECK-SAME: %[[W13:[^:]+]]: tensor<8x48x64xi8>, %[[W2:[^:]+]]: tensor<8x64x24xi8>, %[[S13:[^:]+]]: tensor<8x3x2xf32>, %[[S2:[^:]+]]: tensor<8x4x1xf32>
// CHECK: moe.grouped_matmul %{{.+}}, %[[W13]], %{{.+}} weight_scales %[[S13]] offsets %{{.+}} {weight_block = array<i64: 16, 32>} : (tensor<?x64xf32>, tensor<8x48x64xi8>, tensor<?xi32>, tensor<8x3x2xf32>, tensor<9xi32>) -> tensor<?x48xf32>
// CHECK: moe.grouped_matmul %{{.+}}, %[[W2]], %{{.+}} weight_scales %[[S2]] offsets %{{.+}} {weight_block = array<i64: 16, 32>} : (tensor<?x24xf32>, tensor<8x64x24xi8>, tensor<?xi32>, tensor<8x4x1xf32>, tensor<9xi32>) -> tensor<?x64xf32>
func.func @layer_fp8_weights(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>,
                             %w13: tensor<8x48x64xi8>, %w2: tensor<8x64x24xi8>,
                             %s13: tensor<8x3x2xf32>, %s2: tensor<8x4x1xf32>) -> tensor<?x64xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2 weight_scales(%s13, %s2))
         routing <softmax, top_k = 2, normalize> activation swiglu
         layout <ep = 1, tp = 1> {weight_block = array<i64: 16, 32>}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<8x48x64xi8>, tensor<8x64x24xi8>,
          tensor<8x3x2xf32>, tensor<8x4x1xf32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that static-received (the GPU's form) receives the capacity (ep x max_tokens = 32)
// rows without slots, pads them to the row tile (32*2 + 4*15 = 124 rows), and activates
// every row (no offsets).
// STATIC-LABEL: func.func @ep_static_prefill
// STATIC: moe.ep_dispatch {{.+}} capacity = 32 ep = 2 max_tokens = 16 : {{.+}} -> (tensor<32x64xf32>, tensor<32x2xi32>, tensor<32x2xf32>, i64)
// STATIC: moe.dispatch {{.+}} num_experts = 4 row_tile = 16 : (tensor<32x64xf32>, tensor<32x2xi32>) -> (tensor<124x64xf32>,
// STATIC: moe.activation %{{[^ ]+}} kind swiglu : (tensor<124x64xf32>) -> tensor<124x32xf32>
// STATIC: moe.ep_combine {{.+}} : (tensor<32x64xf32>, i64) -> tensor<?x64xf32>
func.func @ep_static_prefill(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>, %w13: tensor<4x64x64xf32>,
                             %w2: tensor<4x64x32xf32>, %er: tensor<8xi32>) -> tensor<?x64xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<4x64x64xf32>, tensor<4x64x32xf32>,
          tensor<8xi32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that with static-received the decode layout (ep x slots = 8 rows) is padded to the
// row tile too (8*2 + 4*15 = 76 rows) instead of the masked capacity per expert.
// STATIC-LABEL: func.func @ep_static_decode
// STATIC: moe.ep_dispatch {{.+}} capacity = 8 ep = 2 max_tokens = 4 slots = 4 :
// STATIC: moe.dispatch {{.+}} num_experts = 4 row_tile = 16 : (tensor<8x64xf32>, tensor<8x2xi32>) -> (tensor<76x64xf32>,
func.func @ep_static_decode(%x: tensor<?x64xf32>, %wr: tensor<8x64xf32>, %w13: tensor<4x64x64xf32>,
                            %w2: tensor<4x64x32xf32>, %er: tensor<8xi32>) -> tensor<?x64xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 2, tp = 1>
         {max_tokens_per_rank = 4 : i64, phase = #moe<phase decode>}
       : (tensor<?x64xf32>, tensor<8x64xf32>, tensor<4x64x64xf32>, tensor<4x64x32xf32>,
          tensor<8xi32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
