// RUN: moe-opt %s -split-input-file -verify-diagnostics --convert-moe-to-linalg | FileCheck %s --implicit-check-not="{{moe\.[a-z_]+ }}"
// RUN: not moe-opt %s -split-input-file --convert-moe-to-linalg 2>&1 >/dev/null | FileCheck %s --check-prefix=ERR

// Tests that softmax moe.route lowers to an f32 router GEMM, softmax, rank top-k (ties to lower id), normalization.
// The rank comparison is a total order (issue 9, a NaN score routes deterministically): `other` beats
// `self` when it is greater, or is a number and self is NaN, or ties (equal, or both NaN) with a lower index.
// CHECK-LABEL: func.func @route_softmax
// CHECK-SAME: (%[[X:.+]]: tensor<?x16xf32>, %[[WR:.+]]: tensor<4x16xf32>)
// CHECK: %[[LOGITS:.+]] = linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "parallel", "reduction"]
// CHECK-SAME: ins(%[[X]], %[[WR]] : tensor<?x16xf32>, tensor<4x16xf32>)
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: } -> tensor<?x4xf32>
// CHECK: %[[MAX:.+]] = linalg.generic {{.*}} ins(%[[LOGITS]] : tensor<?x4xf32>)
// CHECK: arith.maximumf
// CHECK: %[[EXP:.+]] = linalg.generic {{.*}} ins(%[[LOGITS]], %[[MAX]] : tensor<?x4xf32>, tensor<?xf32>)
// CHECK: arith.subf
// CHECK: math.exp %{{[^ ]+}} : f32
// CHECK: %[[SUM:.+]] = linalg.generic {{.*}} ins(%[[EXP]] : tensor<?x4xf32>)
// CHECK: %[[SCORES:.+]] = linalg.generic {{.*}} ins(%[[EXP]], %[[SUM]] : tensor<?x4xf32>, tensor<?xf32>)
// CHECK: arith.divf
// CHECK: %[[RANK:.+]] = linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "parallel", "parallel", "reduction"]
// CHECK: ^bb0(%[[SELF:.+]]: f32, %[[OTHER:.+]]: f32, %[[ACC:.+]]: i32):
// CHECK: %[[IS:.+]] = linalg.index 2
// CHECK: %[[IO:.+]] = linalg.index 3
// CHECK: %[[BEFORE:.+]] = arith.cmpi ult, %[[IO]], %[[IS]]
// CHECK: %[[OTHER_GT:.+]] = arith.cmpf ogt, %[[OTHER]], %[[SELF]]
// CHECK: %[[OTHER_EQ:.+]] = arith.cmpf oeq, %[[OTHER]], %[[SELF]]
// CHECK: %[[OTHER_NAN:.+]] = arith.cmpf uno, %[[OTHER]], %[[OTHER]]
// CHECK: %[[SELF_NAN:.+]] = arith.cmpf uno, %[[SELF]], %[[SELF]]
// CHECK: %[[BOTH_NAN:.+]] = arith.andi %[[OTHER_NAN]], %[[SELF_NAN]]
// CHECK: %[[TIE:.+]] = arith.ori %[[OTHER_EQ]], %[[BOTH_NAN]]
// CHECK: %[[OTHER_NUM:.+]] = arith.xori %[[OTHER_NAN]], %{{.+}}
// CHECK: %[[NUM_OVER_NAN:.+]] = arith.andi %[[SELF_NAN]], %[[OTHER_NUM]]
// CHECK: %[[TIE_BEFORE:.+]] = arith.andi %[[TIE]], %[[BEFORE]]
// CHECK: %[[ABOVE:.+]] = arith.ori %[[OTHER_GT]], %[[NUM_OVER_NAN]]
// CHECK: %[[BEATS:.+]] = arith.ori %[[ABOVE]], %[[TIE_BEFORE]]
// CHECK: arith.select %[[BEATS]]
// CHECK: %[[RANK2:.+]] = tensor.collapse_shape %[[RANK]]
// CHECK: %[[IDS:.+]] = linalg.generic {{.*}} ins(%[[RANK2]] : tensor<?x4xi32>) outs({{.*}} : tensor<?x2xi32>)
// CHECK: %[[PICKED:.+]] = linalg.generic {{.*}} ins(%[[RANK2]], %[[SCORES]] : tensor<?x4xi32>, tensor<?x4xf32>) outs({{.*}} : tensor<?x2xf32>)
// CHECK: %[[DENOM:.+]] = linalg.generic {{.*}} ins(%[[PICKED]] : tensor<?x2xf32>)
// CHECK: %[[WEIGHTS:.+]] = linalg.generic {{.*}} ins(%[[PICKED]], %[[DENOM]] : tensor<?x2xf32>, tensor<?xf32>)
// CHECK: return %[[IDS]], %[[WEIGHTS]] : tensor<?x2xi32>, tensor<?x2xf32>
func.func @route_softmax(%x: tensor<?x16xf32>, %wr: tensor<4x16xf32>)
    -> (tensor<?x2xi32>, tensor<?x2xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2, normalize>
    : (tensor<?x16xf32>, tensor<4x16xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return %ids, %w : tensor<?x2xi32>, tensor<?x2xf32>
}

// -----

// Tests that DeepSeek routing lowers to f32 sigmoid, selection-only bias, -inf group mask, scale 2.5.
// CHECK-LABEL: func.func @route_sigmoid_groups_bias
// CHECK-SAME: (%[[X:.+]]: tensor<4x16xbf16>, %[[WR:.+]]: tensor<8x16xbf16>, %[[B:.+]]: tensor<8xf32>)
// CHECK: %[[LOGITS:.+]] = linalg.generic {{.*}} ins(%[[X]], %[[WR]] : tensor<4x16xbf16>, tensor<8x16xbf16>)
// CHECK: arith.extf {{.*}} : bf16 to f32
// CHECK: %[[SCORES:.+]] = linalg.generic {{.*}} ins(%[[LOGITS]] : tensor<4x8xf32>)
// CHECK: arith.negf
// CHECK: math.exp
// CHECK: arith.divf
// CHECK: %[[SEL:.+]] = linalg.generic {{.*}} ins(%[[SCORES]], %[[B]] : tensor<4x8xf32>, tensor<8xf32>)
// CHECK: arith.addf
// CHECK: tensor.expand_shape %[[SEL]] {{\[\[}}0], [1, 2]] output_shape [4, 4, 2]
// CHECK: arith.constant 0xFF800000 : f32
// CHECK: arith.select
// CHECK: %[[W:.+]] = linalg.generic {{.*}} ins(%{{.+}}, %[[SCORES]] : tensor<4x8xi32>, tensor<4x8xf32>)
// CHECK: arith.constant 2.500000e+00 : f32
// CHECK: return {{.*}} : tensor<4x3xi32>, tensor<4x3xf32>
func.func @route_sigmoid_groups_bias(%x: tensor<4x16xbf16>,
                                     %wr: tensor<8x16xbf16>, %b: tensor<8xf32>)
    -> (tensor<4x3xi32>, tensor<4x3xf32>) {
  %ids, %w = moe.route %x, %wr bias %b
      routing <sigmoid, top_k = 3, n_group = 4, topk_group = 2, normalize,
               scale = 2.5, correction_bias>
    : (tensor<4x16xbf16>, tensor<8x16xbf16>, tensor<8xf32>)
      -> (tensor<4x3xi32>, tensor<4x3xf32>)
  return %ids, %w : tensor<4x3xi32>, tensor<4x3xf32>
}

// -----

// Tests that moe.dispatch lowers to a stable counting sort by expert and a row gather. A foreign
// (negative) id counts for no expert, gets slot -1 and no row; rows no choice fills (at the end)
// have row_expert -1 and are zero. Without row_tile the offsets are not padded (no rounding).
// CHECK-LABEL: func.func @dispatch
// CHECK-SAME: (%[[X:.+]]: tensor<?x16xf32>, %[[IDS:.+]]: tensor<?x2xi32>)
// CHECK: %[[T:.+]] = tensor.dim %[[X]]
// CHECK: %[[IDS1:.+]] = tensor.collapse_shape %[[IDS]] {{\[\[}}0, 1]] : tensor<?x2xi32> into tensor<?xi32>
// CHECK: %[[COUNTS:.+]] = linalg.generic {{.*}} ins(%[[IDS1]] : tensor<?xi32>) outs({{.*}} : tensor<4xi32>)
// CHECK: arith.cmpi eq
// CHECK: %[[OFFSETS:.+]] = linalg.generic {{.*}} ins(%[[COUNTS]] : tensor<4xi32>) outs({{.*}} : tensor<5xi32>)
// CHECK-NOT: arith.divui
// CHECK: } -> tensor<5xi32>
// CHECK: %[[BASE:.+]] = linalg.generic {{.*}} ins(%[[IDS1]] : tensor<?xi32>)
// CHECK: ^bb0(%[[ID:.+]]: i32, %{{.+}}: i32):
// CHECK: %[[FOREIGN:.+]] = arith.cmpi slt, %[[ID]], %{{.+}} : i32
// CHECK: %[[SAFE:.+]] = arith.select %[[FOREIGN]], %{{.+}}, %[[ID]] : i32
// CHECK: %[[SAFEIDX:.+]] = arith.index_cast %[[SAFE]]
// CHECK: tensor.extract %[[OFFSETS]][%[[SAFEIDX]]]
// CHECK: %[[RANKED:.+]] = linalg.generic {{.*}} ins(%[[IDS1]], %[[IDS1]] : tensor<?xi32>, tensor<?xi32>) outs(%[[BASE]] : tensor<?xi32>)
// CHECK: %[[SLOT:.+]] = linalg.generic {{.*}} ins(%[[IDS1]], %[[RANKED]] : tensor<?xi32>, tensor<?xi32>)
// CHECK: ^bb0(%[[ID2:.+]]: i32, %[[R:.+]]: i32, %{{.+}}: i32):
// CHECK: %[[FOREIGN2:.+]] = arith.cmpi slt, %[[ID2]], %{{.+}} : i32
// CHECK: %[[NOSLOT:.+]] = arith.constant -1 : i32
// CHECK: arith.select %[[FOREIGN2]], %[[NOSLOT]], %[[R]] : i32
// CHECK: %[[NOROW:.+]] = arith.constant -1 : i32
// CHECK: %[[UNUSED:.+]] = linalg.fill ins(%[[NOROW]] : i32) outs(%{{.+}} : tensor<?xi32>)
// CHECK: %[[SOURCE:.+]] = linalg.generic {{.*}} ins(%[[SLOT]] : tensor<?xi32>) outs(%[[UNUSED]] : tensor<?xi32>)
// CHECK: %[[RE:.+]] = linalg.generic {{.*}} ins(%[[SOURCE]] : tensor<?xi32>)
// CHECK: ^bb0(%[[SRC:.+]]: i32, %{{.+}}: i32):
// CHECK: %[[EMPTYROW:.+]] = arith.cmpi slt, %[[SRC]], %{{.+}} : i32
// CHECK: %[[E:.+]] = tensor.extract %[[IDS1]]
// CHECK: %[[NOEXPERT:.+]] = arith.constant -1 : i32
// CHECK: arith.select %[[EMPTYROW]], %[[NOEXPERT]], %[[E]] : i32
// CHECK: %[[ROWS:.+]] = linalg.generic {{.*}} ins(%[[SOURCE]] : tensor<?xi32>) outs({{.*}} : tensor<?x16xf32>)
// CHECK: arith.cmpi sge
// CHECK: arith.divui
// CHECK: tensor.extract %[[X]]
// CHECK: %[[SLOT2:.+]] = tensor.expand_shape %[[SLOT]] {{\[\[}}0, 1]] output_shape [%[[T]], 2]
// CHECK: return %[[ROWS]], %[[RE]], %[[SLOT2]]
func.func @dispatch(%x: tensor<?x16xf32>, %ids: tensor<?x2xi32>)
    -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 4
    : (tensor<?x16xf32>, tensor<?x2xi32>)
      -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>)
  return %rows, %re, %slot : tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>
}

// -----

// Tests that a static moe.dispatch lowers without tensor.cast.
// CHECK-LABEL: func.func @dispatch_static
// CHECK-NOT: tensor.cast
// CHECK: return {{.*}} : tensor<6x16xf32>, tensor<6xi32>, tensor<3x2xi32>
func.func @dispatch_static(%x: tensor<3x16xf32>, %ids: tensor<3x2xi32>)
    -> (tensor<6x16xf32>, tensor<6xi32>, tensor<3x2xi32>) {
  %rows, %re, %slot = moe.dispatch %x, %ids num_experts = 4
    : (tensor<3x16xf32>, tensor<3x2xi32>)
      -> (tensor<6x16xf32>, tensor<6xi32>, tensor<3x2xi32>)
  return %rows, %re, %slot : tensor<6x16xf32>, tensor<6xi32>, tensor<3x2xi32>
}

// -----

// Tests that moe.dispatch with row_tile = 4 pads each expert's count up to a multiple of 4 in
// the offsets (exclusive prefix sums over [num_experts + 1]), sizes the rows
// T*k + min(E, T*k)*(4-1) = 6 + 4*3 = 18, and returns the offsets as its expert_offsets result.
// CHECK-LABEL: func.func @dispatch_row_tile
// CHECK: %[[COUNTS:.+]] = linalg.generic {{.*}} outs({{.*}} : tensor<4xi32>)
// CHECK: %[[OFFSETS:.+]] = linalg.generic {{.*}} ins(%[[COUNTS]] : tensor<4xi32>) outs({{.*}} : tensor<5xi32>)
// CHECK: ^bb0(%[[COUNT:.+]]: i32, %[[ACC:.+]]: i32):
// CHECK: %[[BEFORE:.+]] = arith.cmpi ult
// CHECK-DAG: %[[TILE:.+]] = arith.constant 4 : i32
// CHECK-DAG: %[[TILE1:.+]] = arith.constant 3 : i32
// CHECK: %[[UP:.+]] = arith.addi %[[COUNT]], %[[TILE1]] : i32
// CHECK: %[[NTILES:.+]] = arith.divui %[[UP]], %[[TILE]] : i32
// CHECK: %[[PADDED:.+]] = arith.muli %[[NTILES]], %[[TILE]] : i32
// CHECK: %[[PICK:.+]] = arith.select %[[BEFORE]], %[[PADDED]], %{{.+}} : i32
// CHECK: arith.addi %[[ACC]], %[[PICK]] : i32
// CHECK: } -> tensor<5xi32>
// CHECK: arith.constant 18 : index
// CHECK: tensor.extract %[[OFFSETS]]
// CHECK: %[[RE:.+]] = linalg.fill ins(%{{.+}} : i32) outs(%{{.+}} : tensor<18xi32>)
// CHECK: return %{{.+}}, %{{.+}}, %{{.+}}, %[[OFFSETS]] : tensor<18x16xf32>, tensor<18xi32>, tensor<3x2xi32>, tensor<5xi32>
func.func @dispatch_row_tile(%x: tensor<3x16xf32>, %ids: tensor<3x2xi32>)
    -> (tensor<18x16xf32>, tensor<18xi32>, tensor<3x2xi32>, tensor<5xi32>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 4 row_tile = 4
    : (tensor<3x16xf32>, tensor<3x2xi32>)
      -> (tensor<18x16xf32>, tensor<18xi32>, tensor<3x2xi32>, tensor<5xi32>)
  return %rows, %re, %slot, %off : tensor<18x16xf32>, tensor<18xi32>, tensor<3x2xi32>, tensor<5xi32>
}

// -----

// Tests that with dynamic tokens the padded row count is T*k + min(E, T*k)*(row_tile-1) at
// run time: at most min(E, T*k) experts receive a row, each padded by at most 3.
// CHECK-LABEL: func.func @dispatch_row_tile_dynamic
// CHECK: %[[T:.+]] = tensor.dim
// CHECK: %[[PAIRS:.+]] = arith.muli %[[T]], %{{.+}} : index
// CHECK: %[[OFFSETS:.+]] = linalg.generic {{.*}} outs({{.*}} : tensor<5xi32>)
// CHECK: %[[E:.+]] = arith.constant 4 : index
// CHECK: %[[TOUCHED:.+]] = arith.minui %[[PAIRS]], %[[E]] : index
// CHECK: %[[R1:.+]] = arith.constant 3 : index
// CHECK: %[[PAD:.+]] = arith.muli %[[TOUCHED]], %[[R1]] : index
// CHECK: %[[N:.+]] = arith.addi %[[PAIRS]], %[[PAD]] : index
// CHECK: tensor.empty(%[[N]]) : tensor<?xi32>
// CHECK: %[[ROWS:.+]] = linalg.generic {{.*}} outs({{.*}} : tensor<?x16xf32>)
// CHECK: return %[[ROWS]], %[[OFFSETS]] : tensor<?x16xf32>, tensor<5xi32>
func.func @dispatch_row_tile_dynamic(%x: tensor<?x16xf32>, %ids: tensor<?x2xi32>)
    -> (tensor<?x16xf32>, tensor<5xi32>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 4 row_tile = 4
    : (tensor<?x16xf32>, tensor<?x2xi32>)
      -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<5xi32>)
  return %rows, %off : tensor<?x16xf32>, tensor<5xi32>
}

// -----

// Tests that the masked layout's expert_offsets are e*C (capacity 8), static [num_experts + 1],
// and the masked rows stay static (no tensor.cast).
// CHECK-LABEL: func.func @dispatch_masked_offsets
// CHECK: %[[OFFSETS:.+]] = linalg.generic {{.*}} outs(%{{.+}} : tensor<5xi32>)
// CHECK: ^bb0(%{{.+}}: i32):
// CHECK: %[[E:.+]] = arith.index_cast %{{.+}} : index to i32
// CHECK: %[[C:.+]] = arith.constant 8 : i32
// CHECK: %[[START:.+]] = arith.muli %[[E]], %[[C]] : i32
// CHECK: linalg.yield %[[START]] : i32
// CHECK: } -> tensor<5xi32>
// CHECK-NOT: tensor.cast
// CHECK: return %{{.+}}, %[[OFFSETS]] : tensor<32x16xf32>, tensor<5xi32>
func.func @dispatch_masked_offsets(%x: tensor<4x16xf32>, %ids: tensor<4x2xi32>)
    -> (tensor<32x16xf32>, tensor<5xi32>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 4 capacity = 8 row_tile = 4
    : (tensor<4x16xf32>, tensor<4x2xi32>)
      -> (tensor<32x16xf32>, tensor<32xi32>, tensor<4x2xi32>, tensor<5xi32>)
  return %rows, %off : tensor<32x16xf32>, tensor<5xi32>
}

// -----

// Tests that bf16 moe.grouped_matmul gathers each row's expert weight, accumulates in f32, rounds once; rows of no local expert give 0.
// CHECK-LABEL: func.func @grouped_matmul_bf16
// CHECK-SAME: (%[[IN:.+]]: tensor<6x16xbf16>, %[[W:.+]]: tensor<4x8x16xbf16>, %[[RE:.+]]: tensor<6xi32>)
// CHECK: %[[ZERO:.+]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[INIT:.+]] = linalg.fill ins(%[[ZERO]] : f32) outs({{.*}} : tensor<6x8xf32>)
// CHECK: %[[ACC:.+]] = linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "parallel", "reduction"]
// CHECK-SAME: ins(%[[IN]], %[[RE]] : tensor<6x16xbf16>, tensor<6xi32>) outs(%[[INIT]] : tensor<6x8xf32>)
// CHECK: ^bb0(%[[A:.+]]: bf16, %[[E:.+]]: i32, %[[OUT:.+]]: f32):
// CHECK: %[[M:.+]] = linalg.index 1
// CHECK: %[[K:.+]] = linalg.index 2
// CHECK: %[[NE:.+]] = arith.constant 4 : i32
// CHECK: %[[LOCAL:.+]] = arith.cmpi ult, %[[E]], %[[NE]] : i32
// CHECK: %[[SAFE:.+]] = arith.select %[[LOCAL]], %[[E]], %{{.+}} : i32
// CHECK: %[[EI:.+]] = arith.index_cast %[[SAFE]] : i32 to index
// CHECK: %[[WV:.+]] = tensor.extract %[[W]][%[[EI]], %[[M]], %[[K]]] : tensor<4x8x16xbf16>
// CHECK: arith.extf %[[A]] : bf16 to f32
// CHECK: arith.extf %[[WV]] : bf16 to f32
// CHECK: %[[P:.+]] = arith.mulf
// CHECK: %[[PL:.+]] = arith.select %[[LOCAL]], %[[P]], %{{.+}} : f32
// CHECK: arith.addf %[[OUT]], %[[PL]]
// CHECK: %[[R:.+]] = linalg.generic {{.*}} ins(%[[ACC]] : tensor<6x8xf32>) outs({{.*}} : tensor<6x8xbf16>)
// CHECK: arith.truncf {{.*}} : f32 to bf16
// CHECK: return %[[R]] : tensor<6x8xbf16>
func.func @grouped_matmul_bf16(%in: tensor<6x16xbf16>, %w: tensor<4x8x16xbf16>,
                               %re: tensor<6xi32>) -> tensor<6x8xbf16> {
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<6x16xbf16>, tensor<4x8x16xbf16>, tensor<6xi32>) -> tensor<6x8xbf16>
  return %r : tensor<6x8xbf16>
}

// -----

// Tests that moe.grouped_matmul with expert_offsets lowers like one without: the rows still pick
// their weights by row_expert (padding rows, row_expert -1, stay 0); the offsets are a hint for
// the CPU code generation and the linalg lowering does not read them.
// CHECK-LABEL: func.func @grouped_matmul_offsets
// CHECK-SAME: (%[[IN:.+]]: tensor<?x64xf32>, %[[W:.+]]: tensor<8x32x64xf32>, %[[RE:.+]]: tensor<?xi32>, %[[OFF:.+]]: tensor<9xi32>)
// CHECK: %[[ACC:.+]] = linalg.generic
// CHECK-SAME: ins(%[[IN]], %[[RE]] : tensor<?x64xf32>, tensor<?xi32>) outs({{.*}} : tensor<?x32xf32>)
// CHECK: arith.cmpi ult
// CHECK: return %[[ACC]] : tensor<?x32xf32>
func.func @grouped_matmul_offsets(%in: tensor<?x64xf32>, %w: tensor<8x32x64xf32>,
                                  %re: tensor<?xi32>, %off: tensor<9xi32>) -> tensor<?x32xf32> {
  %r = moe.grouped_matmul %in, %w, %re offsets %off
    : (tensor<?x64xf32>, tensor<8x32x64xf32>, tensor<?xi32>, tensor<9xi32>) -> tensor<?x32xf32>
  return %r : tensor<?x32xf32>
}

// -----

// Tests that an f32 moe.grouped_matmul with dynamic rows needs no final rounding.
// CHECK-LABEL: func.func @grouped_matmul_f32
// CHECK: %[[ACC:.+]] = linalg.generic {{.*}} outs({{.*}} : tensor<?x32xf32>)
// CHECK-NOT: arith.truncf
// CHECK: return %[[ACC]] : tensor<?x32xf32>
func.func @grouped_matmul_f32(%in: tensor<?x64xf32>, %w: tensor<8x32x64xf32>,
                              %re: tensor<?xi32>) -> tensor<?x32xf32> {
  %r = moe.grouped_matmul %in, %w, %re
    : (tensor<?x64xf32>, tensor<8x32x64xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  return %r : tensor<?x32xf32>
}

// -----

// Tests that moe.activation lowers to silu(gate) * up over the two column halves, read at
// (r, c) and (r, c + I) without slices (a static 0-row input has no slice offset 0).
// CHECK-LABEL: func.func @activation
// CHECK-SAME: (%[[H:.+]]: tensor<?x16xf32>)
// CHECK: %[[T:.+]] = tensor.dim %[[H]]
// CHECK: %[[INIT:.+]] = tensor.empty(%[[T]]) : tensor<?x8xf32>
// CHECK: %[[A:.+]] = linalg.generic {{.*}} outs(%[[INIT]] : tensor<?x8xf32>)
// CHECK: %[[R:.+]] = linalg.index 0
// CHECK: %[[C:.+]] = linalg.index 1
// CHECK: %[[UPC:.+]] = arith.addi %[[C]], %{{.+}}
// CHECK: %[[G:.+]] = tensor.extract %[[H]][%[[R]], %[[C]]]
// CHECK: %[[U:.+]] = tensor.extract %[[H]][%[[R]], %[[UPC]]]
// CHECK: %[[NEG:.+]] = arith.negf %[[G]]
// CHECK: %[[EXP:.+]] = math.exp %[[NEG]] {moe.approximable} : f32
// CHECK: %[[DEN:.+]] = arith.addf %{{.+}}, %[[EXP]]
// CHECK: %[[SIG:.+]] = arith.divf %{{.+}}, %[[DEN]]
// CHECK: %[[SILU:.+]] = arith.mulf %[[G]], %[[SIG]]
// CHECK: %[[V:.+]] = arith.mulf %[[SILU]], %[[U]]
// CHECK: linalg.yield %[[V]]
// CHECK: return %[[A]] : tensor<?x8xf32>
func.func @activation(%h: tensor<?x16xf32>) -> tensor<?x8xf32> {
  %a = moe.activation %h kind swiglu : (tensor<?x16xf32>) -> tensor<?x8xf32>
  return %a : tensor<?x8xf32>
}

// -----

// Tests that FP8 weights are read as e4m3(code) * scale of the code's block:
// scales[e, m / 16, k / 32] for blocks of 16 x 32.
// CHECK-LABEL: func.func @gemm_fp8_weights
// CHECK-SAME: %[[S:[^:]+]]: tensor<4x2x2xf32>
// CHECK: linalg.generic
// CHECK: %[[CODE:.+]] = tensor.extract %{{.+}} : tensor<4x32x64xi8>
// CHECK: %[[ROW:.+]] = arith.divui %{{.+}}, %c16
// CHECK: %[[COL:.+]] = arith.divui %{{.+}}, %c32
// CHECK: %[[SCALE:.+]] = tensor.extract %[[S]][%{{.+}}, %[[ROW]], %[[COL]]]
// CHECK: arith.extui %[[CODE]] : i8 to i32
// CHECK: %[[W:.+]] = arith.mulf %{{.+}}, %[[SCALE]] : f32
// CHECK: arith.mulf %{{.+}}, %[[W]] : f32
func.func @gemm_fp8_weights(%rows: tensor<?x64xf32>, %w: tensor<4x32x64xi8>,
                            %re: tensor<?xi32>, %s: tensor<4x2x2xf32>) -> tensor<?x32xf32> {
  %y = moe.grouped_matmul %rows, %w, %re weight_scales %s {weight_block = array<i64: 16, 32>}
    : (tensor<?x64xf32>, tensor<4x32x64xi8>, tensor<?xi32>, tensor<4x2x2xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// Tests that the clamped SwiGLU (gpt-oss) clamps the gate above and up both
// ways at the limit, scales the gate by alpha inside the sigmoid, and adds 1
// to up.
// CHECK-LABEL: func.func @activation_clamped
// CHECK: %[[G:.+]] = tensor.extract
// CHECK: %[[U:.+]] = tensor.extract
// CHECK: %[[LIMIT:.+]] = arith.constant 2.500000e+00 : f32
// CHECK: %[[NLIMIT:.+]] = arith.constant -2.500000e+00 : f32
// CHECK: %[[GC:.+]] = arith.minimumf %[[G]], %[[LIMIT]]
// CHECK: %[[UHI:.+]] = arith.minimumf %[[U]], %[[LIMIT]]
// CHECK: %[[UC:.+]] = arith.maximumf %[[UHI]], %[[NLIMIT]]
// CHECK: %[[ALPHA:.+]] = arith.constant 1.702000e+00 : f32
// CHECK: %[[SCALED:.+]] = arith.mulf %[[GC]], %[[ALPHA]]
// CHECK: arith.negf %[[SCALED]]
// CHECK: %[[SIG:.+]] = arith.divf
// CHECK: %[[GLU:.+]] = arith.mulf %[[GC]], %[[SIG]]
// CHECK: %[[UP1:.+]] = arith.addf %[[UC]], %{{.+}}
// CHECK: %[[V:.+]] = arith.mulf %[[GLU]], %[[UP1]]
// CHECK: linalg.yield %[[V]]
func.func @activation_clamped(%h: tensor<?x16xf32>) -> tensor<?x8xf32> {
  %a = moe.activation %h kind clamped_swiglu {swiglu_alpha = 1.702 : f32, swiglu_limit = 2.5 : f32}
    : (tensor<?x16xf32>) -> tensor<?x8xf32>
  return %a : tensor<?x8xf32>
}

// -----

// Tests that a bf16 moe.activation computes in f32 and rounds the result.
// CHECK-LABEL: func.func @activation_bf16
// CHECK: linalg.generic {{.*}} outs({{.*}} : tensor<6x8xbf16>)
// CHECK: arith.extf {{.*}} : bf16 to f32
// CHECK: math.exp
// CHECK: arith.truncf {{.*}} : f32 to bf16
// CHECK: return {{.*}} : tensor<6x8xbf16>
func.func @activation_bf16(%h: tensor<6x16xbf16>) -> tensor<6x8xbf16> {
  %a = moe.activation %h kind swiglu : (tensor<6x16xbf16>) -> tensor<6x8xbf16>
  return %a : tensor<6x8xbf16>
}

// -----

// Tests that moe.combine lowers to a gather through slot and a weighted sum over top-k, in
// loops (token, choice, column): the innermost walks one row.
// CHECK-LABEL: func.func @combine
// CHECK-SAME: (%[[O:.+]]: tensor<?x16xf32>, %[[S:.+]]: tensor<?x2xi32>, %[[W:.+]]: tensor<?x2xf32>)
// CHECK: %[[Y:.+]] = linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "reduction", "parallel"]
// CHECK-SAME: ins(%[[S]], %[[W]] : tensor<?x2xi32>, tensor<?x2xf32>)
// CHECK: ^bb0(%[[SL:.+]]: i32, %[[WT:.+]]: f32, %[[OUT:.+]]: f32):
// CHECK: %[[H:.+]] = linalg.index 2
// CHECK: %[[NONE:.+]] = arith.cmpi slt, %[[SL]], %{{.+}} : i32
// CHECK: %[[SAFE:.+]] = arith.select %[[NONE]], %{{.+}}, %[[SL]] : i32
// CHECK: %[[ROW:.+]] = arith.index_cast %[[SAFE]] : i32 to index
// CHECK: %[[V:.+]] = tensor.extract %[[O]][%[[ROW]], %[[H]]] : tensor<?x16xf32>
// CHECK: %[[P:.+]] = arith.mulf %[[WT]], %[[V]]
// CHECK: %[[SUM:.+]] = arith.addf %[[OUT]], %[[P]]
// CHECK: arith.select %[[NONE]], %[[OUT]], %[[SUM]] : f32
// CHECK: return %[[Y]] : tensor<?x16xf32>
func.func @combine(%o: tensor<?x16xf32>, %s: tensor<?x2xi32>, %w: tensor<?x2xf32>)
    -> tensor<?x16xf32> {
  %y = moe.combine %o, %s, %w
    : (tensor<?x16xf32>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Tests that moe.route with a static token count in its results but a dynamic x casts the
// computed ids and weights to the stated types (issue 9: an unresolved materialization).
// CHECK-LABEL: func.func @route_static_result
// CHECK: %[[IDS:.+]] = tensor.cast %{{.+}} : tensor<?x2xi32> to tensor<3x2xi32>
// CHECK: %[[W:.+]] = tensor.cast %{{.+}} : tensor<?x2xf32> to tensor<3x2xf32>
// CHECK: return %[[IDS]], %[[W]]
func.func @route_static_result(%x: tensor<?x16xf32>, %wr: tensor<4x16xf32>)
    -> (tensor<3x2xi32>, tensor<3x2xf32>) {
  %ids, %w = moe.route %x, %wr routing <softmax, top_k = 2>
    : (tensor<?x16xf32>, tensor<4x16xf32>) -> (tensor<3x2xi32>, tensor<3x2xf32>)
  return %ids, %w : tensor<3x2xi32>, tensor<3x2xf32>
}

// -----

// Tests that moe.activation of a static 0-row input lowers without slices (issue 9).
// CHECK-LABEL: func.func @activation_empty
// CHECK-NOT: tensor.extract_slice
// CHECK: linalg.generic {{.*}} outs(%{{.+}} : tensor<0x8xf32>)
func.func @activation_empty(%h: tensor<0x16xf32>) -> tensor<0x8xf32> {
  %a = moe.activation %h kind swiglu : (tensor<0x16xf32>) -> tensor<0x8xf32>
  return %a : tensor<0x8xf32>
}

// -----

// Tests that a moe.layer left undecomposed makes the pass fail with a clear message (RUN 1: -verify-diagnostics, RUN 2: exit status).
// ERR: convert-moe-to-linalg.mlir:[[# @LINE + 5]]:8: error: convert-moe-to-linalg: run moe-decompose-layer first
func.func @layer_not_decomposed(%x: tensor<?x16xf32>, %wr: tensor<4x16xf32>,
                                %w13: tensor<4x8x16xf32>, %w2: tensor<4x16x4xf32>)
    -> tensor<?x16xf32> {
  // expected-error @+1 {{convert-moe-to-linalg: run moe-decompose-layer first (moe.layer lowers through its steps)}}
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 1> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>,
          tensor<4x16x4xf32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Tests that with group_max (DeepSeek-V2) a group's score counts only its
// best expert (in-group rank < 1; the top-2 sum counts rank < 2).
// CHECK-LABEL: func.func @route_group_max
// CHECK: tensor.expand_shape {{.+}} output_shape [4, 4, 2]
// CHECK: %[[BEST:.+]] = arith.cmpi slt, %{{.+}}, %c1_i32{{.*}} : i32
// CHECK: arith.select %[[BEST]]
// CHECK-NEXT: arith.addf
func.func @route_group_max(%x: tensor<4x16xf32>, %wr: tensor<8x16xf32>)
    -> (tensor<4x3xi32>, tensor<4x3xf32>) {
  %ids, %w = moe.route %x, %wr
      routing <softmax, top_k = 3, n_group = 4, topk_group = 2, group_max>
    : (tensor<4x16xf32>, tensor<8x16xf32>) -> (tensor<4x3xi32>, tensor<4x3xf32>)
  return %ids, %w : tensor<4x3xi32>, tensor<4x3xf32>
}
