// RUN: moe-opt --convert-moe-to-cpu="vector-width=16 bf16-dot" --split-input-file %s | FileCheck %s
// RUN: moe-opt --convert-moe-to-cpu="vector-width=16" --split-input-file %s | FileCheck %s --check-prefix=WIDEN --implicit-check-not=x86vector
// RUN: not moe-opt --convert-moe-to-cpu="vector-width=8 bf16-dot" %s 2>&1 | FileCheck %s --check-prefix=WIDTH
// RUN: moe-opt --moe-cpu-pipeline="vector-width=16 bf16-dot" --split-input-file %s | FileCheck %s --check-prefix=LLVM

// bf16 rows times bf16 weights with AVX512-BF16: pairs of bf16 products
// summed into f32 (x86vector.avx512.dot, vdpbf16ps), 32 elements of depth
// per instruction, nothing widened.

// The decode dot: a row's 32 bf16 against a weight row's 32, as they are.
// CHECK-LABEL: func.func @gemm_bf16_dot
// CHECK:       scf.forall
// CHECK:         %[[X:.+]] = vector.load {{.*}} : memref<?x96xbf16, {{.*}}>, vector<32xbf16>
// CHECK-NEXT:    %[[W:.+]] = vector.load {{.*}} : memref<2x32x96xbf16, {{.*}}>, vector<32xbf16>
// CHECK-NEXT:    x86vector.avx512.dot %{{.+}}, %[[X]], %[[W]] : vector<32xbf16> -> vector<16xf32>
// Register tiles (3 rows by 4 weight rows): 12 accumulators, 32 of depth a step.
// CHECK:         scf.for {{.*}} step %c32 iter_args({{.*}}) -> (vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>, vector<16xf32>)
// CHECK-COUNT-12: x86vector.avx512.dot
// The packed GEMM: panels of bf16 pairs ([depth / 2][2 x 32 columns]); 16
// weight rows of 16 pairs (as i32) are transposed, so that a panel row holds
// one pair of depths of every column.
// CHECK:       memref.alloc() {alignment = 64 : i64} : memref<64x48x64xbf16>
// CHECK:       scf.forall
// CHECK:         memref.subview {{.*}} : memref<64x48x64xbf16> to memref<48x64xbf16, strided<[64, 1], offset: ?>>
// CHECK-COUNT-16: vector.bitcast {{.*}} : vector<32xbf16> to vector<16xi32>
// CHECK-COUNT-64: vector.shuffle {{.*}} : vector<16xi32>, vector<16xi32>
// CHECK:         vector.bitcast {{.*}} : vector<16xi32> to vector<32xbf16>
// CHECK-NEXT:    vector.store {{.*}} : memref<48x64xbf16, strided<[64, 1], offset: ?>>, vector<32xbf16>
// The tiles: per pair of depths, two vectors of the panel and per row a
// 32-bit broadcast of its pair of activations.
// CHECK:         %[[W0:.+]] = vector.load %{{.+}} : memref<48x64xbf16, {{.*}}>, vector<32xbf16>
// CHECK-NEXT:    %[[W1:.+]] = vector.load %{{.+}} : memref<48x64xbf16, {{.*}}>, vector<32xbf16>
// CHECK:         %[[PAIR:.+]] = vector.load {{.*}} : memref<?x96xbf16, {{.*}}>, vector<2xbf16>
// CHECK-NEXT:    %[[BITS:.+]] = vector.bitcast %[[PAIR]] : vector<2xbf16> to vector<1xi32>
// CHECK-NEXT:    %[[ONE:.+]] = vector.extract %[[BITS]][0] : i32 from vector<1xi32>
// CHECK-NEXT:    %[[B:.+]] = vector.broadcast %[[ONE]] : i32 to vector<16xi32>
// CHECK-NEXT:    %[[XS:.+]] = vector.bitcast %[[B]] : vector<16xi32> to vector<32xbf16>
// CHECK-NEXT:    x86vector.avx512.dot %{{.+}}, %[[XS]], %[[W0]] : vector<32xbf16> -> vector<16xf32>
// CHECK-NEXT:    x86vector.avx512.dot %{{.+}}, %[[XS]], %[[W1]] : vector<32xbf16> -> vector<16xf32>

// Without the option bf16 is widened (the check-not above); the packed
// panel is f32.
// WIDEN-LABEL: func.func @gemm_bf16_dot
// WIDEN:       memref.alloc() {alignment = 64 : i64} : memref<64x96x32xf32>

// WIDTH: bf16-dot needs vector-width 16

// LLVM-LABEL: llvm.func @gemm_bf16_dot
// LLVM:       llvm.call_intrinsic "llvm.x86.avx512bf16.dpbf16ps.512"
func.func @gemm_bf16_dot(%rows: tensor<?x96xbf16>, %w: tensor<2x32x96xbf16>, %re: tensor<?xi32>,
                         %off: tensor<3xi32>) -> tensor<?x32xbf16> {
  %y = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<?x96xbf16>, tensor<2x32x96xbf16>, tensor<?xi32>, tensor<3xi32>) -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}

// -----

// FP8 weights meeting bf16 rows: the packed GEMM packs the codes as exact
// bf16 (the f16 of a code times 2^-8, widened; its upper 16 bits) and runs
// the pair steps of each scale block (128 of depth: 64 pairs) on fresh
// accumulators, added to the tile's times the block's scale. The other
// paths keep their f32 decode on widened rows.
// CHECK-LABEL: func.func @gemm_fp8_weights_bf16_dot
// CHECK:       memref.alloc(%{{.+}}) {alignment = 64 : i64} : memref<?x256xf32>
// CHECK:       memref.alloc() {alignment = 64 : i64} : memref<64x128x64xbf16>
// CHECK:         %[[CODES:.+]] = vector.load {{.*}} : memref<2x64x256xi8, {{.*}}>, vector<32xi8>
// CHECK-NEXT:    arith.extsi %[[CODES]] : vector<32xi8> to vector<32xi16>
// CHECK:         %[[F32:.+]] = arith.extf %{{.+}} : vector<32xf16> to vector<32xf32>
// CHECK-NEXT:    %[[BITS:.+]] = arith.bitcast %[[F32]] : vector<32xf32> to vector<32xi32>
// CHECK-NEXT:    %[[UPPER:.+]] = arith.shrui %[[BITS]], %{{.+}} : vector<32xi32>
// CHECK-NEXT:    %[[HALF:.+]] = arith.trunci %[[UPPER]] : vector<32xi32> to vector<32xi16>
// CHECK-NEXT:    arith.bitcast %[[HALF]] : vector<32xi16> to vector<32xbf16>
// CHECK:         scf.for %{{.+}} = %c0 to %{{.+}} step %c128 iter_args
// CHECK:           scf.for
// CHECK:             vector.load {{.*}} : memref<?x256xbf16, {{.*}}>, vector<2xbf16>
// CHECK:             x86vector.avx512.dot
// CHECK:           scf.yield
// CHECK:           %[[SCALE:.+]] = memref.load {{.*}} : memref<2x1x2xf32, {{.*}}>
// CHECK-NEXT:      %[[SCALED:.+]] = arith.mulf %[[SCALE]], %{{.+}} : f32
// CHECK-NEXT:      %[[S:.+]] = vector.broadcast %[[SCALED]] : f32 to vector<16xf32>
// CHECK-COUNT-12:  vector.fma %{{.+}}, %[[S]], %{{.+}} : vector<16xf32>
func.func @gemm_fp8_weights_bf16_dot(%rows: tensor<?x256xbf16>, %w: tensor<2x64x256xi8>,
                                     %s: tensor<2x1x2xf32>, %re: tensor<?xi32>,
                                     %off: tensor<3xi32>) -> tensor<?x64xbf16> {
  %y = moe.grouped_matmul %rows, %w, %re weight_scales %s offsets %off
    {weight_block = array<i64: 64, 128>}
    : (tensor<?x256xbf16>, tensor<2x64x256xi8>, tensor<?xi32>, tensor<2x1x2xf32>,
       tensor<3xi32>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
