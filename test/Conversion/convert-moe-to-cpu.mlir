// RUN: moe-opt --convert-moe-to-cpu --split-input-file %s | FileCheck %s
// RUN: moe-opt --convert-moe-to-cpu="vector-width=16 register-rows=4 register-cols=2 column-block=32" --split-input-file %s | FileCheck %s --check-prefix=AVX512
// RUN: moe-opt --moe-cpu-pipeline="lower-to-llvm=false" --split-input-file %s | FileCheck %s --check-prefix=PIPELINE
// RUN: moe-opt --convert-moe-to-cpu --split-input-file %s | FileCheck %s --check-prefix=PACKED
// RUN: moe-opt --convert-moe-to-cpu="packed-min-rows=0" --split-input-file %s | FileCheck %s --check-prefix=NOPACK
// RUN: not moe-opt --convert-moe-to-cpu="register-rows=100000" --split-input-file %s 2>&1 | FileCheck %s --check-prefix=HUGETILE
// HUGETILE: convert-moe-to-cpu: vector-width must be in [1, 64], register-rows and register-cols in [1, 32]

// The grouped GEMM on the expert-offsets layout: a thread loop over (column
// block, expert) work items, row blocks, register tiles of 3 rows x 4 weight
// rows whose reduction over K runs on vector<8xf32> FMAs, one horizontal sum
// per output element.
// CHECK-LABEL: func.func @gemm
// CHECK-NOT: moe.grouped_matmul
// CHECK: memref.alloc(%{{.*}}) {alignment = 64 : i64} : memref<?x32xf32>
// CHECK: %[[OFF:.*]] = bufferization.to_buffer %{{.*}} read_only : tensor<5xi32>
// The expert ranges: one pass over each block's rows.
// CHECK: scf.for
// CHECK: memref.load %[[OFF]]
// The padding rows after an expert's rows are zeroed on the calling thread (a
// linalg.fill inside the loop over experts would start a thread team each).
// CHECK-NOT: linalg.fill
// CHECK: memref.store %cst{{.*}} : memref<?x32xf32, strided
// CHECK: scf.forall (%[[ITEM:.*]]) in (%{{.*}})
// CHECK:   arith.remui %[[ITEM]]
// CHECK:   arith.divui %[[ITEM]]
// CHECK:   scf.for
// CHECK:     scf.for
// CHECK:       scf.for
// CHECK-COUNT-12: vector.fma {{.*}} : vector<8xf32>
// CHECK:         scf.yield {{.*}} : vector<8xf32>
// CHECK-COUNT-12: vector.reduction <add>, {{.*}} fastmath<reassoc> : vector<8xf32> into f32
// The rows left over after whole register tiles: one row by 4 weight rows.
// CHECK:       scf.for
// CHECK-COUNT-4: vector.fma {{.*}} : vector<8xf32>
// CHECK: bufferization.to_tensor %{{.*}} restrict writable
// AVX512-LABEL: func.func @gemm
// AVX512: scf.forall (%{{.*}}) in (%{{.*}})
// AVX512-COUNT-8: vector.fma {{.*}} : vector<16xf32>
// The packed path for experts with at least packed-min-rows rows: the dot
// forall skips them; a scan lists their row blocks of up to 192 rows; when
// there is any, one scratch of 64 thread slots x [K][16] panels, and a forall
// over the slots, each a run of (row block, 4 panels) items. Per panel the
// weights are packed transposed by 8 x 8 blocks in three shuffle stages; a
// register tile is 6 rows x 2 vectors of packed weights (12 FMAs per k, a
// broadcast activation each, no horizontal sum) stored as whole vectors;
// the last partial tile has exactly the rows left (5 down to 1).
// PACKED-LABEL: func.func @gemm
// PACKED: scf.forall
// PACKED: arith.cmpi uge, %{{.*}}, %c24
// PACKED: scf.if
// PACKED: } else {
// PACKED: memref.alloc(%{{.*}}) : memref<?xindex>
// PACKED: %[[BLOCKS:.*]] = scf.for {{.*}} iter_args({{.*}}) -> (index)
// PACKED: arith.cmpi ne, %[[BLOCKS]], %c0
// PACKED: scf.if
// PACKED: %[[SCRATCH:.*]] = memref.alloc() {alignment = 64 : i64} : memref<64x64x16xf32>
// PACKED: scf.forall (%[[SLOT:.*]]) in (%{{.*}})
// PACKED: %[[PANEL:.*]] = memref.subview %[[SCRATCH]][%[[SLOT]], 0, 0] [1, 64, 16] [1, 1, 1]
// PACKED-COUNT-8: vector.load %{{.*}} : memref<4x32x64xf32, strided<[?, ?, 1], offset: ?>>, vector<8xf32>
// PACKED: vector.shuffle %{{.*}}, %{{.*}} [0, 1, 2, 3, 8, 9, 10, 11]
// PACKED: vector.shuffle %{{.*}}, %{{.*}} [0, 1, 8, 9, 4, 5, 12, 13]
// PACKED: vector.shuffle %{{.*}}, %{{.*}} [0, 8, 2, 10, 4, 12, 6, 14]
// PACKED: vector.store %{{.*}}, %[[PANEL]]
// PACKED: scf.for {{.*}} step %c6 {
// PACKED: scf.for {{.*}} iter_args
// PACKED-COUNT-2: vector.load %[[PANEL]]
// PACKED: memref.load
// PACKED: vector.broadcast %{{.*}} : f32 to vector<8xf32>
// PACKED-COUNT-2: vector.fma
// PACKED: scf.yield {{.*}} : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
// PACKED-NOT: vector.reduction
// PACKED-COUNT-12: vector.store %{{.*}} : memref<?x32xf32>, vector<8xf32>
// PACKED: arith.cmpi eq, %{{.*}}, %c5
// PACKED: scf.yield {{.*}} : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>{{$}}
// PACKED: arith.cmpi eq, %{{.*}}, %c4
// PACKED: arith.cmpi eq, %{{.*}}, %c1
// PACKED: scf.yield {{.*}} : vector<8xf32>, vector<8xf32>{{$}}
// Experts with fewer rows than a register tile (decode) stream the weights
// a row at a time: a dot product on 4 independent accumulators along the
// depth, no prefetches, a fixed tree of adds, one horizontal sum.
// NOPACK-LABEL: func.func @gemm
// NOPACK: scf.forall
// NOPACK: scf.for
// NOPACK-NEXT: scf.for
// NOPACK-NEXT: scf.for %{{.*}} = %c0 to %c64 step %c32 iter_args({{.*}}) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
// NOPACK-NOT: memref.prefetch
// NOPACK-COUNT-4: vector.fma
// NOPACK: scf.yield
// NOPACK-NEXT: }
// NOPACK-NEXT: %[[S01:.*]] = arith.addf
// NOPACK-NEXT: %[[S23:.*]] = arith.addf
// NOPACK-NEXT: %[[S:.*]] = arith.addf %[[S01]], %[[S23]]
// NOPACK-NEXT: vector.reduction <add>, %[[S]]
// NOPACK-NEXT: memref.store
// NOPACK-NOT: scf.forall
// NOPACK-NOT: memref<64x64x16xf32>
// NOPACK: return
// PIPELINE-LABEL: func.func @gemm
// PIPELINE: omp.parallel
// PIPELINE: omp.wsloop
// PIPELINE: vector.fma {{.*}} : vector<8xf32>
func.func @gemm(%rows: tensor<?x64xf32>, %w: tensor<4x32x64xf32>, %re: tensor<?xi32>,
                %off: tensor<5xi32>) -> tensor<?x32xf32> {
  %y = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<?x64xf32>, tensor<4x32x64xf32>, tensor<?xi32>, tensor<5xi32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// bf16 operands are widened in registers. 16 elements at a time, each bf16
// as the high half of an f32 by interleaving with zeros (x86's unpack), the
// same permutation for rows and weights; K = 20 ends with a masked load of
// the last 4 elements, widened by an extend and a shift of 16.
// CHECK-LABEL: func.func @gemm_bf16
// CHECK: vector.load {{.*}} : memref<?x20xbf16, strided<[?, 1], offset: ?>>, vector<16xbf16>
// CHECK: vector.bitcast {{.*}} : vector<16xbf16> to vector<16xi16>
// CHECK: vector.shuffle %{{.*}}, %{{.*}} [0, 16, 0, 17, 0, 18, 0, 19, 0, 24, 0, 25, 0, 26, 0, 27]
// CHECK: vector.bitcast {{.*}} : vector<16xi16> to vector<8xf32>
// CHECK: vector.shuffle %{{.*}}, %{{.*}} [0, 20, 0, 21, 0, 22, 0, 23, 0, 28, 0, 29, 0, 30, 0, 31]
// CHECK: vector.fma
// CHECK: vector.constant_mask [4] : vector<8xi1>
// CHECK: vector.maskedload
// CHECK: vector.bitcast {{.*}} : vector<8xbf16> to vector<8xi16>
// CHECK: arith.extui {{.*}} : vector<8xi16> to vector<8xi32>
// CHECK: arith.shli
// CHECK: vector.bitcast {{.*}} : vector<8xi32> to vector<8xf32>
// CHECK: arith.truncf {{.*}} : f32 to bf16
func.func @gemm_bf16(%rows: tensor<?x20xbf16>, %w: tensor<2x8x20xbf16>, %re: tensor<?xi32>,
                     %off: tensor<3xi32>) -> tensor<?x8xbf16> {
  %y = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<?x20xbf16>, tensor<2x8x20xbf16>, tensor<?xi32>, tensor<3xi32>) -> tensor<?x8xbf16>
  return %y : tensor<?x8xbf16>
}

// -----

// Without offsets (rows in any order) the GEMM is left for convert-moe-to-linalg.
// CHECK-LABEL: func.func @gemm_any_order
// CHECK: moe.grouped_matmul
func.func @gemm_any_order(%rows: tensor<?x64xf32>, %w: tensor<4x32x64xf32>,
                          %re: tensor<?xi32>) -> tensor<?x32xf32> {
  %y = moe.grouped_matmul %rows, %w, %re
    : (tensor<?x64xf32>, tensor<4x32x64xf32>, tensor<?xi32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// The dispatch: counts, an exclusive scan padded to the row tile, the slots
// in a second pass, then the rows copied on threads, one token per item (a
// row is contiguous: a memcpy whatever the element type).
// CHECK-LABEL: func.func @dispatch
// CHECK-NOT: moe.dispatch
// CHECK: linalg.fill {{.*}} outs(%[[COUNTS:.*]] : memref<4xi32>)
// CHECK: scf.for
// CHECK:   scf.for
// CHECK:     memref.load %[[COUNTS]]
// CHECK: %[[SCAN:.*]] = scf.for {{.*}} iter_args
// CHECK:   arith.divui
// CHECK:   arith.muli
// CHECK: memref.store %[[SCAN]]
// The padding after each expert's rows, on the calling thread: a linalg.fill
// inside the loop over experts would start a thread team per expert.
// CHECK: scf.for %{{.*}} = %c0 to %c4
// CHECK-NOT: linalg.fill
// CHECK: memref.store %c-1_i32, %{{.*}} : memref<?xi32, strided
// CHECK-NOT: linalg.fill
// CHECK: memref.store %cst, %{{.*}} : memref<?x16xf32, strided
// The tail after the last expert: one fill each, on threads.
// CHECK: linalg.fill
// CHECK: linalg.fill
// CHECK: scf.forall
// CHECK:   memref.subview {{.*}} to memref<16xf32, strided<[1], offset: ?>>
// CHECK:   memref.copy
// CHECK: bufferization.to_tensor
func.func @dispatch(%x: tensor<?x16xf32>, %ids: tensor<?x2xi32>)
    -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<5xi32>) {
  %d, %re, %s, %o = moe.dispatch %x, %ids num_experts = 4 row_tile = 8
    : (tensor<?x16xf32>, tensor<?x2xi32>)
      -> (tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<5xi32>)
  return %d, %re, %s, %o : tensor<?x16xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<5xi32>
}

// -----

// A depth that is not a multiple of 4 vectors (76 = 2 x 32 + 8 + 4): the
// rest in whole vectors, then a masked vector.
// NOPACK-LABEL: func.func @gemm_ragged_depth
// NOPACK: scf.for %{{.*}} = %c0 to %c64 step %c32 iter_args
// NOPACK: scf.yield
// NOPACK: vector.load %{{.*}}[%{{.*}}, %c64]
// NOPACK-NEXT: vector.load %{{.*}}[%{{.*}}, %{{.*}}, %c64]
// NOPACK-NEXT: vector.fma
// NOPACK: vector.maskedload %{{.*}}[%{{.*}}, %c72]
// NOPACK-NEXT: vector.maskedload %{{.*}}[%{{.*}}, %{{.*}}, %c72]
// NOPACK-NEXT: vector.fma
// NOPACK: vector.reduction
func.func @gemm_ragged_depth(%rows: tensor<?x76xf32>, %w: tensor<4x32x76xf32>,
                             %re: tensor<?xi32>, %off: tensor<5xi32>) -> tensor<?x32xf32> {
  %y = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<?x76xf32>, tensor<4x32x76xf32>, tensor<?xi32>, tensor<5xi32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// FP8 weights (E4M3 codes in blocks of 16 x 32 with f32 scales): each vector
// of 16 codes is widened in registers (sign-extend, shift into an f16's
// exponent and mantissa, clear bit 14, f16 -> f32) and multiplied by its
// block's scale times 2^8, then feeds the same FMAs as f32 weights. The
// packed path decodes the same way when it packs a panel.
// AVX512-LABEL: func.func @gemm_fp8_weights
// AVX512-DAG: %[[KEEP:.*]] = arith.constant dense<-16385> : vector<16xi16>
// AVX512-DAG: %[[SEVEN:.*]] = arith.constant dense<7> : vector<16xi16>
// AVX512-DAG: %[[TWO8:.*]] = arith.constant 2.560000e+02 : f32
// AVX512: %[[CODES:.*]] = vector.load %{{.*}} : memref<4x32x64xi8, strided<[?, ?, 1], offset: ?>>, vector<16xi8>
// AVX512: %[[BLOCK:.*]] = arith.divui %{{.*}}, %c32
// AVX512: %[[SCALE:.*]] = memref.load %{{.*}}[%{{.*}}, %{{.*}}, %[[BLOCK]]] : memref<4x2x2xf32
// AVX512: %[[S:.*]] = arith.mulf %[[SCALE]], %[[TWO8]] : f32
// AVX512: %[[WIDE:.*]] = arith.extsi %[[CODES]] : vector<16xi8> to vector<16xi16>
// AVX512: %[[SHIFTED:.*]] = arith.shli %[[WIDE]], %[[SEVEN]] : vector<16xi16>
// AVX512: %[[BITS:.*]] = arith.andi %[[SHIFTED]], %[[KEEP]] : vector<16xi16>
// AVX512: %[[HALF:.*]] = arith.bitcast %[[BITS]] : vector<16xi16> to vector<16xf16>
// AVX512: %[[F32:.*]] = arith.extf %[[HALF]] : vector<16xf16> to vector<16xf32>
// AVX512: %[[SPLAT:.*]] = vector.broadcast %[[S]] : f32 to vector<16xf32>
// AVX512: %[[W:.*]] = arith.mulf %[[F32]], %[[SPLAT]] : vector<16xf32>
// AVX512: vector.fma %{{.*}}, %[[W]], %{{.*}} : vector<16xf32>
// PACKED-LABEL: func.func @gemm_fp8_weights
// PACKED: scf.forall
// PACKED: arith.extsi %{{.*}} : vector<8xi8> to vector<8xi16>
// PACKED: vector.shuffle
// A scale block narrower than a vector is left to the linalg lowering.
// CHECK-LABEL: func.func @gemm_fp8_narrow_blocks
// CHECK: moe.grouped_matmul {{.*}} weight_scales
func.func @gemm_fp8_weights(%rows: tensor<?x64xf32>, %w: tensor<4x32x64xi8>,
                            %s: tensor<4x2x2xf32>, %re: tensor<?xi32>,
                            %off: tensor<5xi32>) -> tensor<?x32xf32> {
  %y = moe.grouped_matmul %rows, %w, %re weight_scales %s offsets %off
    {weight_block = array<i64: 16, 32>}
    : (tensor<?x64xf32>, tensor<4x32x64xi8>, tensor<?xi32>, tensor<4x2x2xf32>,
       tensor<5xi32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
func.func @gemm_fp8_narrow_blocks(%rows: tensor<?x64xf32>, %w: tensor<4x32x64xi8>,
                                  %s: tensor<4x8x16xf32>, %re: tensor<?xi32>,
                                  %off: tensor<5xi32>) -> tensor<?x32xf32> {
  %y = moe.grouped_matmul %rows, %w, %re weight_scales %s offsets %off
    {weight_block = array<i64: 4, 4>}
    : (tensor<?x64xf32>, tensor<4x32x64xi8>, tensor<?xi32>, tensor<4x8x16xf32>,
       tensor<5xi32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// The decode dot over FP8 weights whose scale blocks (here 64 deep) hold
// whole steps of its 4 accumulators: a block's codes are summed unscaled on
// fresh accumulators (no multiply per vector), then each is added to the
// running sum times the block's scale (times 2^8) in one FMA.
// AVX512-LABEL: func.func @gemm_fp8_block_scaled
// AVX512: %[[BLOCKS:.*]]:4 = scf.for %[[KB:.*]] = %c0 to %c128 step %c64 iter_args(%[[A0:.*]] = %[[ZERO:[^,]*]], %[[A1:.*]] = %[[ZERO]], %[[A2:.*]] = %[[ZERO]], %[[A3:.*]] = %[[ZERO]])
// AVX512: %[[PART:.*]]:4 = scf.for %{{.*}} = %[[KB]] to %{{.*}} step %c64 iter_args(%{{.*}} = %[[ZERO]], %{{.*}} = %[[ZERO]], %{{.*}} = %[[ZERO]], %{{.*}} = %[[ZERO]])
// AVX512-COUNT-4: arith.extf %{{.*}} : vector<16xf16> to vector<16xf32>
// AVX512-NOT: arith.mulf
// AVX512: scf.yield
// AVX512: %[[SCALE:.*]] = memref.load %{{.*}} : memref<4x2x2xf32
// AVX512: %[[S:.*]] = arith.mulf %[[SCALE]], %{{.*}} : f32
// AVX512: %[[SPLAT:.*]] = vector.broadcast %[[S]] : f32 to vector<16xf32>
// AVX512: vector.fma %[[PART]]#0, %[[SPLAT]], %[[A0]] : vector<16xf32>
// AVX512: vector.fma %[[PART]]#1, %[[SPLAT]], %[[A1]] : vector<16xf32>
// AVX512: vector.fma %[[PART]]#2, %[[SPLAT]], %[[A2]] : vector<16xf32>
// AVX512: vector.fma %[[PART]]#3, %[[SPLAT]], %[[A3]] : vector<16xf32>
// AVX512: vector.reduction <add>
func.func @gemm_fp8_block_scaled(%rows: tensor<?x128xf32>, %w: tensor<4x32x128xi8>,
                                 %s: tensor<4x2x2xf32>, %re: tensor<?xi32>,
                                 %off: tensor<5xi32>) -> tensor<?x32xf32> {
  %y = moe.grouped_matmul %rows, %w, %re weight_scales %s offsets %off
    {weight_block = array<i64: 16, 64>}
    : (tensor<?x128xf32>, tensor<4x32x128xi8>, tensor<?xi32>, tensor<4x2x2xf32>,
       tensor<5xi32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// bf16 activations with FP8 weights: the experts' rows are widened to f32
// once (a loop over the experts' row ranges), before the thread loop.
// AVX512-LABEL: func.func @gemm_fp8_bf16_rows
// AVX512: %[[WIDE:.*]] = memref.alloc(%{{.*}}) {alignment = 64 : i64} : memref<?x128xf32>
// AVX512: scf.for
// AVX512: scf.for
// AVX512: scf.for
// AVX512: vector.store %{{.*}}, %[[WIDE]]
// AVX512: scf.forall
// AVX512: vector.load %[[WIDE]]
func.func @gemm_fp8_bf16_rows(%rows: tensor<?x128xbf16>, %w: tensor<4x32x128xi8>,
                              %s: tensor<4x2x2xf32>, %re: tensor<?xi32>,
                              %off: tensor<5xi32>) -> tensor<?x32xbf16> {
  %y = moe.grouped_matmul %rows, %w, %re weight_scales %s offsets %off
    {weight_block = array<i64: 16, 64>}
    : (tensor<?x128xbf16>, tensor<4x32x128xi8>, tensor<?xi32>, tensor<4x2x2xf32>,
       tensor<5xi32>) -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}

// -----

// FP8 rows from an FP8 dispatch (codes with a scale per 32 codes) are
// decoded to f32 once per row of an expert, then the same GEMM runs on them.
// AVX512-LABEL: func.func @gemm_fp8_rows
// AVX512: %[[WIDE:.*]] = memref.alloc(%{{.*}}) {alignment = 64 : i64} : memref<?x64xf32>
// AVX512: scf.for
// AVX512: scf.for %[[ROW:.*]] =
// AVX512: scf.for %[[K:.*]] =
// AVX512: %[[CODES:.*]] = vector.load %{{.*}}[%[[ROW]], %[[K]]] : memref<?x64xi8{{.*}}>, vector<16xi8>
// AVX512: %[[G:.*]] = arith.divui %[[K]], %c32
// AVX512: memref.load %{{.*}}[%[[ROW]], %[[G]]] : memref<?x2xf32
// AVX512: arith.extsi %[[CODES]] : vector<16xi8> to vector<16xi16>
// AVX512: vector.store %{{.*}}, %[[WIDE]][%[[ROW]], %[[K]]]
// AVX512: scf.forall
// AVX512: vector.load %[[WIDE]]
// AVX512: vector.fma
func.func @gemm_fp8_rows(%q: tensor<?x64xi8>, %w: tensor<4x32x64xf32>, %re: tensor<?xi32>,
                         %s: tensor<?x2xf32>, %off: tensor<5xi32>) -> tensor<?x32xf32> {
  %y = moe.grouped_matmul %q, %w, %re scales %s offsets %off
    : (tensor<?x64xi8>, tensor<4x32x64xf32>, tensor<?xi32>, tensor<?x2xf32>, tensor<5xi32>)
      -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
