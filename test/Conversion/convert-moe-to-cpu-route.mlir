// RUN: moe-opt %s -split-input-file --convert-moe-to-cpu | FileCheck %s --implicit-check-not=moe.route --implicit-check-not=linalg.

// Tests that softmax moe.route lowers to a memref island: the router GEMM as a one-expert grouped
// GEMM (threads over column blocks, vector.fma), then one scf.forall over tokens doing softmax and
// top-k by selection (k passes over the E experts with the `beats` order, O(T E k)); no ranks.
// CHECK-LABEL: func.func @route_softmax
// CHECK-SAME: (%[[X:.+]]: tensor<?x16xf32>, %[[WR:.+]]: tensor<4x16xf32>)
// CHECK-DAG: %[[NINF:.+]] = arith.constant 0xFF800000 : f32
// CHECK-DAG: %[[C0:.+]] = arith.constant 0 : index
// CHECK-DAG: %[[C2:.+]] = arith.constant 2 : index
// CHECK-DAG: %[[C4:.+]] = arith.constant 4 : index
// CHECK: %[[T:.+]] = tensor.dim %[[X]], %[[C0]]
// CHECK: %[[XB:.+]] = bufferization.to_buffer %[[X]] read_only : tensor<?x16xf32> to memref<?x16xf32, strided<[?, 1], offset: ?>>
// CHECK: %[[WB:.+]] = bufferization.to_buffer %[[WR]] read_only
// CHECK: %[[W3:.+]] = memref.expand_shape %[[WB]] {{\[\[}}0, 1], [2]] output_shape [1, 4, 16] {{.*}} into memref<1x4x16xf32, strided<[?, ?, 1], offset: ?>>
// CHECK: %[[BEGIN:.+]] = memref.alloc() {{.*}} : memref<1xindex>
// CHECK: %[[END:.+]] = memref.alloc() {{.*}} : memref<1xindex>
// CHECK: memref.store %[[C0]], %[[BEGIN]][%[[C0]]]
// CHECK: memref.store %[[T]], %[[END]][%[[C0]]]
// CHECK: %[[SCORES:.+]] = memref.alloc(%[[T]]) {{.*}} : memref<?x4xf32>
// CHECK: scf.forall
// CHECK: vector.load %[[XB]]
// CHECK: vector.load %[[W3]]
// CHECK: vector.fma
// CHECK: memref.store {{.*}}, %[[SCORES]]
// CHECK: %[[IDS:.+]] = memref.alloc(%[[T]]) {{.*}} : memref<?x2xi32>
// CHECK: %[[WTS:.+]] = memref.alloc(%[[T]]) {{.*}} : memref<?x2xf32>
// CHECK: scf.forall (%[[TOK:.+]]) in (%[[T]]) {
// Softmax: the row maximum, exp(l - max) and its sum, then exp / sum.
// CHECK: %[[MAX:.+]] = scf.for {{.*}} = %[[C0]] to %[[C4]] {{.*}} iter_args(%{{.+}} = %[[NINF]])
// CHECK: arith.maximumf
// CHECK: %[[SUM:.+]] = scf.for {{.*}} = %[[C0]] to %[[C4]]
// CHECK: arith.subf %{{.+}}, %[[MAX]]
// CHECK: math.exp
// CHECK: scf.for
// CHECK: arith.divf %{{.+}}, %[[SUM]]
// Top-k: choice j is the best expert that choice j-1 beats.
// CHECK: %[[PICKS:.+]]:3 = scf.for %[[J:.+]] = %[[C0]] to %[[C2]] {{.*}} iter_args(%[[PV:.+]] = %{{.+}}, %[[PI:.+]] = %[[C0]], %[[WSUM:.+]] = %{{.+}}) -> (f32, index, f32)
// CHECK: %[[FIRST:.+]] = arith.cmpi eq, %[[J]], %[[C0]]
// CHECK: %[[BEST:.+]]:3 = scf.for %[[E:.+]] = %[[C0]] to %[[C4]] {{.*}} iter_args(%[[BV:.+]] = %{{.+}}, %[[BI:.+]] = %[[C0]], %[[FOUND:.+]] = %{{.+}}) -> (f32, index, i1)
// CHECK: %[[V:.+]] = memref.load %[[SCORES]][%[[TOK]], %[[E]]]
// CHECK: %[[BEFORE:.+]] = arith.cmpi ult, %[[PI]], %[[E]]
// CHECK: %[[GT:.+]] = arith.cmpf ogt, %[[PV]], %[[V]]
// CHECK: %[[EQ:.+]] = arith.cmpf oeq, %[[PV]], %[[V]]
// CHECK: %[[PNAN:.+]] = arith.cmpf uno, %[[PV]], %[[PV]]
// CHECK: %[[VNAN:.+]] = arith.cmpf uno, %[[V]], %[[V]]
// CHECK: %[[BOTH:.+]] = arith.andi %[[PNAN]], %[[VNAN]]
// CHECK: %[[TIE:.+]] = arith.ori %[[EQ]], %[[BOTH]]
// CHECK: %[[PNUM:.+]] = arith.xori %[[PNAN]], %{{.+}}
// CHECK: %[[NUMNAN:.+]] = arith.andi %[[VNAN]], %[[PNUM]]
// CHECK: %[[TIEB:.+]] = arith.andi %[[TIE]], %[[BEFORE]]
// CHECK: %[[ABOVE:.+]] = arith.ori %[[GT]], %[[NUMNAN]]
// CHECK: %[[AFTER:.+]] = arith.ori %[[ABOVE]], %[[TIEB]]
// CHECK: %[[CAND:.+]] = arith.ori %[[FIRST]], %[[AFTER]]
// CHECK: arith.cmpi ult, %[[E]], %[[BI]]
// CHECK: arith.cmpf ogt, %[[V]], %[[BV]]
// CHECK: %[[TAKE:.+]] = arith.andi %[[CAND]],
// CHECK: arith.select %[[TAKE]], %[[V]], %[[BV]]
// CHECK: arith.select %[[TAKE]], %[[E]], %[[BI]]
// CHECK: scf.yield
// CHECK: %[[ID:.+]] = arith.index_cast %[[BEST]]#1 : index to i32
// CHECK: memref.store %[[ID]], %[[IDS]][%[[TOK]], %[[J]]]
// CHECK: %[[W:.+]] = memref.load %[[SCORES]][%[[TOK]], %[[BEST]]#1]
// CHECK: memref.store %[[W]], %[[WTS]][%[[TOK]], %[[J]]]
// CHECK: %[[NEXT:.+]] = arith.addf %[[W]], %[[WSUM]]
// CHECK: scf.yield %[[BEST]]#0, %[[BEST]]#1, %[[NEXT]]
// Normalize: w / sum * scale.
// CHECK: scf.for
// CHECK: %[[Q:.+]] = arith.divf %{{.+}}, %[[PICKS]]#2
// CHECK: arith.mulf %[[Q]]
// CHECK: %[[IDT:.+]] = bufferization.to_tensor %[[IDS]] restrict writable : memref<?x2xi32> to tensor<?x2xi32>
// CHECK: %[[WT:.+]] = bufferization.to_tensor %[[WTS]] restrict writable : memref<?x2xf32> to tensor<?x2xf32>
// CHECK: return %[[IDT]], %[[WT]] : tensor<?x2xi32>, tensor<?x2xf32>
func.func @route_softmax(%x: tensor<?x16xf32>, %wr: tensor<4x16xf32>)
    -> (tensor<?x2xi32>, tensor<?x2xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2, normalize>
    : (tensor<?x16xf32>, tensor<4x16xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return %ids, %w : tensor<?x2xi32>, tensor<?x2xf32>
}

// -----

// Tests DeepSeek routing on bf16: the GEMM reads bf16, scores are f32 sigmoid, the selection adds
// the bias, a group's score is (0 + a) + b of its two best (a at the lower index), the groups that
// the topk_group-th best group beats get -inf; weights are scores, normalized and scaled by 2.5.
// CHECK-LABEL: func.func @route_sigmoid_groups_bias
// CHECK-SAME: (%[[X:.+]]: tensor<4x16xbf16>, %[[WR:.+]]: tensor<8x16xbf16>, %[[B:.+]]: tensor<8xf32>)
// CHECK-DAG: %[[SCALE:.+]] = arith.constant 2.500000e+00 : f32
// CHECK-DAG: %[[NINF:.+]] = arith.constant 0xFF800000 : f32
// CHECK-DAG: %[[ONE:.+]] = arith.constant 1.000000e+00 : f32
// CHECK-DAG: %[[ZERO:.+]] = arith.constant 0.000000e+00 : f32
// CHECK-DAG: %[[C2:.+]] = arith.constant 2 : index
// CHECK-DAG: %[[C4:.+]] = arith.constant 4 : index
// CHECK: bufferization.to_buffer %[[X]] read_only : tensor<4x16xbf16> to memref<4x16xbf16, strided<[?, 1], offset: ?>>
// CHECK: memref.expand_shape {{.*}} into memref<1x8x16xbf16, strided<[?, ?, 1], offset: ?>>
// CHECK: %[[SCORES:.+]] = memref.alloc() {{.*}} : memref<4x8xf32>
// CHECK: scf.forall
// CHECK: vector.fma
// CHECK: %[[BB:.+]] = bufferization.to_buffer %[[B]] read_only
// CHECK: %[[SEL:.+]] = memref.alloc() {{.*}} : memref<4x8xf32>
// CHECK: %[[GS:.+]] = memref.alloc() {{.*}} : memref<4x4xf32>
// CHECK: %[[IDS:.+]] = memref.alloc() {{.*}} : memref<4x2xi32>
// CHECK: %[[WTS:.+]] = memref.alloc() {{.*}} : memref<4x2xf32>
// CHECK: scf.forall (%[[TOK:.+]]) in (%[[C4]]) {
// CHECK: arith.negf
// CHECK: math.exp
// CHECK: %[[DEN:.+]] = arith.addf %[[ONE]],
// CHECK: arith.divf %[[ONE]], %[[DEN]]
// CHECK: memref.load %[[BB]]
// CHECK: arith.addf
// CHECK: memref.store {{.*}}, %[[SEL]]
// Group scores: the two best of each group.
// CHECK: scf.for %[[G:.+]] = {{.*}} to %[[C4]]
// CHECK: %[[G0:.+]] = arith.muli %[[G]], %[[C2]]
// CHECK: %[[TOP1:.+]]:3 = scf.for
// CHECK: %[[TOP2:.+]]:3 = scf.for
// CHECK: %[[LOWER:.+]] = arith.cmpi ult, %[[TOP1]]#1, %[[TOP2]]#1
// CHECK: %[[A:.+]] = arith.select %[[LOWER]], %[[TOP1]]#0, %[[TOP2]]#0
// CHECK: %[[C:.+]] = arith.select %[[LOWER]], %[[TOP2]]#0, %[[TOP1]]#0
// CHECK: %[[S0:.+]] = arith.addf %[[ZERO]], %[[A]]
// CHECK: %[[S1:.+]] = arith.addf %[[S0]], %[[C]]
// CHECK: memref.store %[[S1]], %[[GS]][%[[TOK]], %[[G]]]
// The topk_group-th best group, then -inf for the groups it beats.
// CHECK: %[[LAST:.+]]:2 = scf.for {{.*}} to %[[C2]] {{.*}} -> (f32, index)
// CHECK: memref.load %[[GS]]
// CHECK: scf.for %[[G2:.+]] = {{.*}} to %[[C4]]
// CHECK: %[[GSV:.+]] = memref.load %[[GS]][%[[TOK]], %[[G2]]]
// CHECK: arith.cmpi ult, %[[LAST]]#1, %[[G2]]
// CHECK: arith.cmpf ogt, %[[LAST]]#0, %[[GSV]]
// CHECK: scf.if
// CHECK: memref.store %[[NINF]], %[[SEL]]
// Top-k by selection, weights from the scores.
// CHECK: %[[PICKS:.+]]:3 = scf.for {{.*}} to %[[C2]]
// CHECK: %[[BEST:.+]]:3 = scf.for
// CHECK: memref.load %[[SEL]]
// CHECK: memref.store {{.*}}, %[[IDS]]
// CHECK: memref.load %[[SCORES]][%[[TOK]], %[[BEST]]#1]
// CHECK: scf.for
// CHECK: %[[Q:.+]] = arith.divf %{{.+}}, %[[PICKS]]#2
// CHECK: arith.mulf %[[Q]], %[[SCALE]]
// CHECK: bufferization.to_tensor %[[IDS]] restrict writable : memref<4x2xi32> to tensor<4x2xi32>
// CHECK: bufferization.to_tensor %[[WTS]] restrict writable : memref<4x2xf32> to tensor<4x2xf32>
func.func @route_sigmoid_groups_bias(%x: tensor<4x16xbf16>, %wr: tensor<8x16xbf16>, %b: tensor<8xf32>)
    -> (tensor<4x2xi32>, tensor<4x2xf32>) {
  %ids, %w = moe.route %x, %wr bias %b
      routing <sigmoid, top_k = 2, n_group = 4, topk_group = 2, normalize, scale = 2.5, correction_bias>
    : (tensor<4x16xbf16>, tensor<8x16xbf16>, tensor<8xf32>) -> (tensor<4x2xi32>, tensor<4x2xf32>)
  return %ids, %w : tensor<4x2xi32>, tensor<4x2xf32>
}

// -----

// Tests that a static result type over a dynamic token count gets a tensor.cast, that without
// normalization and scale the weights are not rescaled, and that keeping every group masks nothing.
// CHECK-LABEL: func.func @route_cast_keep_all_groups
// CHECK: %[[SCORES:.+]] = memref.alloc(%{{.+}}) {{.*}} : memref<?x4xf32>
// CHECK: %[[SEL:.+]] = memref.alloc(%{{.+}}) {{.*}} : memref<?x4xf32>
// CHECK: scf.forall
// CHECK-NOT: scf.if
// CHECK-NOT: arith.mulf
// CHECK: %[[IDS:.+]] = bufferization.to_tensor {{.*}} : memref<?x1xi32> to tensor<?x1xi32>
// CHECK: %[[WTS:.+]] = bufferization.to_tensor {{.*}} : memref<?x1xf32> to tensor<?x1xf32>
// CHECK: %[[IDC:.+]] = tensor.cast %[[IDS]] : tensor<?x1xi32> to tensor<5x1xi32>
// CHECK: %[[WC:.+]] = tensor.cast %[[WTS]] : tensor<?x1xf32> to tensor<5x1xf32>
// CHECK: return %[[IDC]], %[[WC]]
func.func @route_cast_keep_all_groups(%x: tensor<?x16xf32>, %wr: tensor<4x16xf32>, %b: tensor<4xf32>)
    -> (tensor<5x1xi32>, tensor<5x1xf32>) {
  %ids, %w = moe.route %x, %wr bias %b
      routing <sigmoid, top_k = 1, n_group = 2, topk_group = 2, correction_bias>
    : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4xf32>) -> (tensor<5x1xi32>, tensor<5x1xf32>)
  return %ids, %w : tensor<5x1xi32>, tensor<5x1xf32>
}

// -----

// Tests that with group_max (DeepSeek-V2) a group's score is its best
// selection score: one search per group, no second best, no sum of two.
// CHECK-LABEL: func.func @route_group_max
// CHECK: scf.forall
// CHECK: %[[BEST:.+]]:3 = scf.for
// CHECK-NOT: scf.for
// CHECK: %[[SCORE:.+]] = arith.addf %{{.+}}, %[[BEST]]#0 : f32
// CHECK-NEXT: memref.store %[[SCORE]]
func.func @route_group_max(%x: tensor<4x16xf32>, %wr: tensor<8x16xf32>)
    -> (tensor<4x3xi32>, tensor<4x3xf32>) {
  %ids, %w = moe.route %x, %wr
      routing <softmax, top_k = 3, n_group = 4, topk_group = 2, group_max>
    : (tensor<4x16xf32>, tensor<8x16xf32>) -> (tensor<4x3xi32>, tensor<4x3xf32>)
  return %ids, %w : tensor<4x3xi32>, tensor<4x3xf32>
}

// -----

// Tests that logits_bf16 rounds each logit to bf16 and back before scoring.
// CHECK-LABEL: func.func @route_logits_bf16
// CHECK: %[[R:.+]] = arith.truncf %{{.+}} : f32 to bf16
// CHECK-NEXT: %[[E:.+]] = arith.extf %[[R]] : bf16 to f32
// CHECK-NEXT: memref.store %[[E]]
// CHECK: math.exp
func.func @route_logits_bf16(%x: tensor<4x16xbf16>, %wr: tensor<8x16xbf16>)
    -> (tensor<4x2xi32>, tensor<4x2xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2, normalize, logits_bf16>
    : (tensor<4x16xbf16>, tensor<8x16xbf16>) -> (tensor<4x2xi32>, tensor<4x2xf32>)
  return %ids, %w : tensor<4x2xi32>, tensor<4x2xf32>
}

// -----

// Tests that a logit bias (gpt-oss) is added to each logit, before the bf16
// rounding and before scoring.
// CHECK-LABEL: func.func @route_logit_bias
// CHECK-SAME: %[[RB:[^:]+]]: tensor<8xf32>
// CHECK: %[[BIAS:.+]] = bufferization.to_buffer %[[RB]]
// CHECK: scf.forall
// CHECK: %[[L:.+]] = memref.load %{{.+}} : memref<4x8xf32>
// CHECK-NEXT: %[[B:.+]] = memref.load %[[BIAS]]
// CHECK-NEXT: %[[SUM:.+]] = arith.addf %[[L]], %[[B]] : f32
// CHECK-NEXT: %[[R:.+]] = arith.truncf %[[SUM]] : f32 to bf16
// CHECK-NEXT: %[[E:.+]] = arith.extf %[[R]] : bf16 to f32
// CHECK-NEXT: memref.store %[[E]]
// CHECK: math.exp
func.func @route_logit_bias(%x: tensor<4x16xbf16>, %wr: tensor<8x16xbf16>, %rb: tensor<8xf32>)
    -> (tensor<4x2xi32>, tensor<4x2xf32>) {
  %ids, %w = moe.route %x, %wr logit_bias %rb routing <softmax, top_k = 2, normalize, logits_bf16>
    : (tensor<4x16xbf16>, tensor<8x16xbf16>, tensor<8xf32>) -> (tensor<4x2xi32>, tensor<4x2xf32>)
  return %ids, %w : tensor<4x2xi32>, tensor<4x2xf32>
}
