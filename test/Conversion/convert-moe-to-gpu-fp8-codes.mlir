// RUN: moe-opt %s -split-input-file --convert-moe-to-gpu | FileCheck %s
// RUN: moe-opt %s -split-input-file '--convert-moe-to-gpu=prefill-mma=wgmma prefill-block=128x128 prefill-stages=3 fp8-rows=true' \
// RUN:   | FileCheck %s --check-prefix=FP8ROWS
// RUN: moe-opt %s -split-input-file --convert-moe-to-gpu | FileCheck %s --check-prefix=BF16W

// Tests that an FP8 dispatch's codes (i8 rows with f32 scales per 128) feed the gate/up GEMM of
// FP8 weights as they are. The codes and their scales are permuted by dispatches of the same
// choices, which share one bookkeeping (one kernel, or three beyond 2048 choices) and one copy kernel (16 bytes of codes a
// thread, the scales one f32 at a time). Without wgmma the GEMM takes the decode form at every
// row count, which dequantizes the rows as it loads them: 8 codes (8 bytes) and their group's
// scale (column k / 128), the codes' f32 values (exponent and mantissa moved into an f32, times
// 2^120; 0x7F NaN) times the scale, rounded to bf16 and bitcast to the four i32 mma registers.
// CHECK-LABEL: func.func @codes
// CHECK: %[[C:.+]] = memref.alloc(%{{.+}}) : memref<?x256xi8>
// CHECK: %[[S:.+]] = memref.alloc(%{{.+}}) : memref<?x2xf32>
// CHECK-COUNT-4: gpu.launch blocks
// CHECK: gpu.launch blocks
// CHECK: vector.load {{.+}} : memref<?x256xi8, {{.+}}>, vector<16xi8>
// CHECK: vector.store %{{.+}}, %[[C]]
// CHECK-NOT: gpu.launch
// CHECK: vector.load {{.+}} : memref<?x2xf32, {{.+}}>, vector<1xf32>
// CHECK: vector.store %{{.+}}, %[[S]]
// CHECK: gpu.terminator
// CHECK: gpu.launch blocks{{.+}} workgroup(%{{.+}} : memref<4x16x32xf32, #gpu.address_space<workgroup>>)
// CHECK: %[[CODES:.+]] = vector.load %{{.+}}[%{{.+}}, %[[K:.+]]] {alignment = 8 : i64} : memref<?x256xi8, {{.+}}>, vector<8xi8>
// CHECK: %[[GROUP:.+]] = arith.divui %[[K]], %c128{{.*}} : index
// CHECK: %[[SCALE:.+]] = memref.load %{{.+}}[%{{.+}}, %[[GROUP]]] : memref<?x2xf32
// CHECK: arith.extui %[[CODES]] : vector<8xi8> to vector<8xi32>
// CHECK: %[[MOVED:.+]] = arith.bitcast %{{.+}} : vector<8xi32> to vector<8xf32>
// CHECK: %[[VALUES:.+]] = arith.mulf %[[MOVED]], %{{.+}} : vector<8xf32>
// CHECK: %[[DECODED:.+]] = arith.select %{{.+}}, %{{.+}}, %[[VALUES]] : vector<8xi1>, vector<8xf32>
// CHECK: %[[SPLAT:.+]] = vector.broadcast %[[SCALE]] : f32 to vector<8xf32>
// CHECK: %[[ROW:.+]] = arith.mulf %[[DECODED]], %[[SPLAT]] : vector<8xf32>
// CHECK: %[[BF16:.+]] = arith.truncf %[[ROW]] : vector<8xf32> to vector<8xbf16>
// CHECK: vector.bitcast %[[BF16]] : vector<8xbf16> to vector<4xi32>
// CHECK: nvvm.mma.sync
// CHECK-NOT: moe.grouped_matmul
// With fp8-rows and wgmma the prefill form multiplies the codes themselves (e4m3 by e4m3): the
// codes are staged as they are and no kernel quantizes the rows.
// FP8ROWS-LABEL: func.func @codes
// FP8ROWS-NOT: nvvm.convert.f32x2.to.f8x2
// FP8ROWS: nvvm.wgmma.mma_async {{.+}} <m = 64, n = 128, k = 32>, D[<f32>, <zero>], A[<e4m3>, <one>, <row>], B[<e4m3>, <one>, <col>]
// FP8ROWS-NOT: nvvm.convert.f32x2.to.f8x2
// FP8ROWS-NOT: moe.grouped_matmul
func.func @codes(%codes: tensor<?x256xi8>, %scales: tensor<?x2xf32>, %ids: tensor<?x2xi32>,
                 %w: tensor<8x128x256xi8>, %s: tensor<8x1x2xf32>) -> tensor<?x128xbf16> {
  %rows, %re, %slot, %off = moe.dispatch %codes, %ids num_experts = 8 row_tile = 16
    : (tensor<?x256xi8>, tensor<?x2xi32>)
      -> (tensor<?x256xi8>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %srows, %sre, %sslot, %soff = moe.dispatch %scales, %ids num_experts = 8 row_tile = 16
    : (tensor<?x2xf32>, tensor<?x2xi32>)
      -> (tensor<?x2xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %h = moe.grouped_matmul %rows, %w, %re scales %srows weight_scales %s offsets %off {weight_block = array<i64: 128, 128>}
    : (tensor<?x256xi8>, tensor<8x128x256xi8>, tensor<?xi32>, tensor<?x2xf32>, tensor<8x1x2xf32>, tensor<9xi32>)
      -> tensor<?x128xbf16>
  return %h : tensor<?x128xbf16>
}


// -----

// Tests that UE8M0 scales per 32 (decoded to f32) feed the FP8 rows form as well: each k32
// product has its own row scale, so each one (scale column 4 * step + j) goes into zeros and,
// once done, joins the total times its rows' scales and the weight block's.
// FP8ROWS-LABEL: func.func @codes_g32
// FP8ROWS-NOT: nvvm.convert.f32x2.to.f8x2
// FP8ROWS: scf.for %[[STEP:[a-z0-9_]+]] = {{.+}} iter_args({{.+}}) -> (!llvm.struct
// FP8ROWS: %[[S0:.+]] = arith.muli %[[STEP]], %c4{{(_[0-9]+)?}} : index
// FP8ROWS: %[[C0:.+]] = arith.addi %[[S0]], %c0{{(_[0-9]+)?}} : index
// FP8ROWS: memref.load %{{.+}}[%{{.+}}, %[[C0]]] : memref<?x8xf32
// FP8ROWS: memref.load %{{.+}}[%{{.+}}, %[[C0]]] : memref<?x8xf32
// FP8ROWS: nvvm.wgmma.fence.aligned
// FP8ROWS: nvvm.wgmma.mma_async {{.+}} <m = 64, n = 128, k = 32>, D[<f32>, <zero>], A[<e4m3>
// FP8ROWS-NEXT: nvvm.wgmma.commit.group.sync.aligned
// FP8ROWS-NOT: nvvm.wgmma.mma_async
// FP8ROWS: nvvm.wgmma.wait.group.sync.aligned 0
// FP8ROWS-NOT: nvvm.wgmma.mma_async
// FP8ROWS: math.fma
// FP8ROWS: %[[S1:.+]] = arith.muli %[[STEP]], %c4{{(_[0-9]+)?}} : index
// FP8ROWS: %[[C1:.+]] = arith.addi %[[S1]], %c1{{(_[0-9]+)?}} : index
// FP8ROWS: memref.load %{{.+}}[%{{.+}}, %[[C1]]] : memref<?x8xf32
// FP8ROWS: memref.load %{{.+}}[%{{.+}}, %[[C1]]] : memref<?x8xf32
// FP8ROWS: nvvm.wgmma.fence.aligned
// FP8ROWS: nvvm.wgmma.mma_async {{.+}} <m = 64, n = 128, k = 32>, D[<f32>, <zero>], A[<e4m3>
// FP8ROWS-NEXT: nvvm.wgmma.commit.group.sync.aligned
// FP8ROWS-NOT: nvvm.wgmma.mma_async
// FP8ROWS: nvvm.wgmma.wait.group.sync.aligned 0
// FP8ROWS-NOT: nvvm.wgmma.mma_async
// FP8ROWS: math.fma
// FP8ROWS: %[[S2:.+]] = arith.muli %[[STEP]], %c4{{(_[0-9]+)?}} : index
// FP8ROWS: %[[C2:.+]] = arith.addi %[[S2]], %c2{{(_[0-9]+)?}} : index
// FP8ROWS: memref.load %{{.+}}[%{{.+}}, %[[C2]]] : memref<?x8xf32
// FP8ROWS: memref.load %{{.+}}[%{{.+}}, %[[C2]]] : memref<?x8xf32
// FP8ROWS: nvvm.wgmma.fence.aligned
// FP8ROWS: nvvm.wgmma.mma_async {{.+}} <m = 64, n = 128, k = 32>, D[<f32>, <zero>], A[<e4m3>
// FP8ROWS-NEXT: nvvm.wgmma.commit.group.sync.aligned
// FP8ROWS-NOT: nvvm.wgmma.mma_async
// FP8ROWS: nvvm.wgmma.wait.group.sync.aligned 0
// FP8ROWS-NOT: nvvm.wgmma.mma_async
// FP8ROWS: math.fma
// FP8ROWS: %[[S3:.+]] = arith.muli %[[STEP]], %c4{{(_[0-9]+)?}} : index
// FP8ROWS: %[[C3:.+]] = arith.addi %[[S3]], %c3{{(_[0-9]+)?}} : index
// FP8ROWS: memref.load %{{.+}}[%{{.+}}, %[[C3]]] : memref<?x8xf32
// FP8ROWS: memref.load %{{.+}}[%{{.+}}, %[[C3]]] : memref<?x8xf32
// FP8ROWS: nvvm.wgmma.fence.aligned
// FP8ROWS: nvvm.wgmma.mma_async {{.+}} <m = 64, n = 128, k = 32>, D[<f32>, <zero>], A[<e4m3>
// FP8ROWS-NEXT: nvvm.wgmma.commit.group.sync.aligned
// FP8ROWS-NOT: nvvm.wgmma.mma_async
// FP8ROWS: nvvm.wgmma.wait.group.sync.aligned 0
// FP8ROWS-NOT: nvvm.wgmma.mma_async
// FP8ROWS: math.fma
// FP8ROWS-NOT: nvvm.wgmma.mma_async
// FP8ROWS: scf.yield
// FP8ROWS-NOT: moe.grouped_matmul
func.func @codes_g32(%codes: tensor<?x256xi8>, %scales: tensor<?x8xf32>, %ids: tensor<?x2xi32>,
                     %w: tensor<8x128x256xi8>, %s: tensor<8x1x2xf32>) -> tensor<?x128xbf16> {
  %rows, %re, %slot, %off = moe.dispatch %codes, %ids num_experts = 8 row_tile = 16
    : (tensor<?x256xi8>, tensor<?x2xi32>)
      -> (tensor<?x256xi8>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %srows, %sre, %sslot, %soff = moe.dispatch %scales, %ids num_experts = 8 row_tile = 16
    : (tensor<?x8xf32>, tensor<?x2xi32>)
      -> (tensor<?x8xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %h = moe.grouped_matmul %rows, %w, %re scales %srows weight_scales %s offsets %off {weight_block = array<i64: 128, 128>}
    : (tensor<?x256xi8>, tensor<8x128x256xi8>, tensor<?xi32>, tensor<?x8xf32>, tensor<8x1x2xf32>, tensor<9xi32>)
      -> tensor<?x128xbf16>
  return %h : tensor<?x128xbf16>
}

// -----

// Tests that bf16 weights read an FP8 dispatch's codes too: the decode form dequantizes them
// as it loads them; the prefill form (bf16 rows staged by cp.async) reads them from a kernel
// that first dequantizes the codes into a bf16 buffer, rounded as the decode form rounds them.
// BF16W-LABEL: func.func @codes_bf16_weights
// BF16W: %[[ROWS16:.+]] = memref.alloc(%{{.+}}) : memref<?x256xbf16>
// BF16W: scf.if
// BF16W: arith.bitcast %{{.+}} : vector<8xi32> to vector<8xf32>
// BF16W: nvvm.mma.sync
// BF16W: } else {
// BF16W: gpu.launch
// BF16W: %[[CODES:.+]] = vector.load %{{.+}} : memref<?x256xi8, {{.+}}>, vector<8xi8>
// BF16W: %[[SCALE:.+]] = memref.load %{{.+}} : memref<?x2xf32, {{.+}}>
// BF16W: %[[WIDE:.+]] = arith.bitcast %{{.+}} : vector<8xi32> to vector<8xf32>
// BF16W: %[[VALUES:.+]] = arith.mulf
// BF16W: %[[BF16:.+]] = arith.truncf %{{.+}} : vector<8xf32> to vector<8xbf16>
// BF16W: vector.store %[[BF16]], %[[ROWS16]]
// BF16W: gpu.launch
// BF16W: nvgpu.device_async_copy %[[ROWS16]]
// BF16W: nvgpu.ldmatrix
// BF16W-NOT: moe.grouped_matmul
func.func @codes_bf16_weights(%codes: tensor<?x256xi8>, %scales: tensor<?x2xf32>,
                              %ids: tensor<?x2xi32>, %w: tensor<8x128x256xbf16>)
    -> tensor<?x128xbf16> {
  %rows, %re, %slot, %off = moe.dispatch %codes, %ids num_experts = 8 row_tile = 16
    : (tensor<?x256xi8>, tensor<?x2xi32>)
      -> (tensor<?x256xi8>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %srows, %sre, %sslot, %soff = moe.dispatch %scales, %ids num_experts = 8 row_tile = 16
    : (tensor<?x2xf32>, tensor<?x2xi32>)
      -> (tensor<?x2xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %h = moe.grouped_matmul %rows, %w, %re scales %srows offsets %off
    : (tensor<?x256xi8>, tensor<8x128x256xbf16>, tensor<?xi32>, tensor<?x2xf32>, tensor<9xi32>)
      -> tensor<?x128xbf16>
  return %h : tensor<?x128xbf16>
}
