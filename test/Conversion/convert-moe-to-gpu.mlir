// RUN: moe-opt %s -split-input-file --convert-moe-to-gpu | FileCheck %s
// RUN: moe-opt %s -split-input-file '--convert-moe-to-gpu=prefill-block=narrow prefill-stages=2' \
// RUN:   | FileCheck %s --check-prefix=NARROW
// RUN: not moe-opt %s -split-input-file '--convert-moe-to-gpu=prefill-block=128x128' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BADBLOCK
// RUN: not moe-opt %s -split-input-file '--convert-moe-to-gpu=prefill-block=64x128 prefill-stages=4' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BADSTAGES
// RUN: not moe-opt %s -split-input-file '--convert-moe-to-gpu=prefill-stage-depth=48' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BADDEPTH
// RUN: moe-opt %s -split-input-file '--convert-moe-to-gpu=prefill-stage-depth=32' \
// RUN:   | FileCheck %s --check-prefix=DEPTH32
// RUN: moe-opt %s -split-input-file '--convert-moe-to-gpu=prefill-mma=wgmma prefill-stages=4' \
// RUN:   | FileCheck %s --check-prefix=WGMMA
// RUN: moe-opt %s -split-input-file '--convert-moe-to-gpu=prefill-mma=wgmma prefill-block=128x128 prefill-stages=3' \
// RUN:   | FileCheck %s --check-prefix=WGMMA128
// RUN: moe-opt %s -split-input-file '--convert-moe-to-gpu=prefill-mma=wgmma prefill-stages=2' \
// RUN:   | FileCheck %s --check-prefixes=FP8WGMMA,WGMMA2
// RUN: moe-opt %s -split-input-file '--convert-moe-to-gpu=prefill-mma=wgmma prefill-block=128x128 prefill-stages=3 fp8-rows=true' \
// RUN:   | FileCheck %s --check-prefix=FP8ROWS
// RUN: moe-opt %s -split-input-file '--convert-moe-to-gpu=prefill-mma=wgmma prefill-block=128x128 prefill-stages=3 fuse-swiglu=true' \
// RUN:   | FileCheck %s --check-prefix=FUSED
// RUN: not moe-opt %s -split-input-file '--convert-moe-to-gpu=prefill-mma=wgmma prefill-block=32x128' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BADWGMMA
// RUN: not moe-opt %s -split-input-file '--convert-moe-to-gpu=prefill-mma=wgmma prefill-block=narrow' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=WGMMANARROW
// RUN: not moe-opt %s -split-input-file '--convert-moe-to-gpu=prefill-mma=hmma' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BADMMA
// BADBLOCK: error: convert-moe-to-gpu: prefill-block=128x128: at most 64 x 128 or 128 x 64 outputs a block (64 accumulators a thread)
// BADSTAGES: error: convert-moe-to-gpu: prefill-block=64x128: 4 stages of 64 + 128 rows by 64 take 110592 bytes of shared memory, more than 101376
// BADDEPTH: error: convert-moe-to-gpu: prefill-stage-depth=48: a stage's depth must be 32 or 64
// BADWGMMA: error: convert-moe-to-gpu: prefill-block=32x128: wgmma blocks have 64 or 128 rows (one or two warpgroups' m64)
// WGMMANARROW: error: convert-moe-to-gpu: prefill-block=narrow: prefill-mma=wgmma takes an RxC block
// BADMMA: error: convert-moe-to-gpu: prefill-mma=hmma: mma-sync or wgmma

// Tests that a bf16 grouped GEMM over rows padded to tiles of 16 becomes two tensor-core kernels
// the host chooses between by the row count (N <= E * (64 + 15): at most 64 rows per expert):
// the decode form (a block's 4 warps take turns along the depth, 32 at a time, of 32 columns; each lane loads
// 16 bytes of its A rows and weight rows at a time; partial sums meet in workgroup memory after
// a barrier, an expert's padding rows become zeros) and the prefill form (below). Both read the
// tile's expert from row_expert of its first row and skip tiles past offsets[E].
// CHECK-LABEL: func.func @grouped
// The dispatch's two kernels come first (@dispatch below).
// CHECK: gpu.launch
// CHECK: gpu.launch
// CHECK: %[[OUT:.+]] = memref.alloc(%[[ROWS:.+]]) : memref<?x128xbf16>
// The block form's table (below): ceil(rows / 64) + E entries of a block's first row and expert,
// and the count of blocks.
// CHECK: %[[C64:.+]] = arith.constant 64 : index
// CHECK: %[[CEIL:.+]] = arith.ceildivui %[[ROWS]], %[[C64]] : index
// CHECK: %[[ENTRIES:.+]] = arith.addi %[[CEIL]], %{{.+}} : index
// CHECK: %[[BROW:.+]] = memref.alloc(%[[ENTRIES]]) : memref<?xi32>
// CHECK: %[[BEXPERT:.+]] = memref.alloc(%[[ENTRIES]]) : memref<?xi32>
// CHECK: %[[BCOUNT:.+]] = memref.alloc() : memref<1xi32>
// CHECK: %[[LIMIT:.+]] = arith.constant 632 : index
// CHECK: %[[FEW:.+]] = arith.cmpi ule, %[[ROWS]], %[[LIMIT]] : index
// CHECK: scf.if %[[FEW]] {
// CHECK: gpu.launch blocks(%{{.+}}, %{{.+}}, %{{.+}}) in (%{{.+}} = %c4, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) threads(%{{.+}}, %{{.+}}, %{{.+}}) in (%{{.+}} = %c128{{.*}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) workgroup(%[[SMEM:.+]] : memref<4x16x32xf32, #gpu.address_space<workgroup>>)
// CHECK: memref.load %{{.+}}[%{{.+}}] : memref<9xi32
// CHECK: memref.load %{{.+}}[%{{.+}}] : memref<?xi32
// CHECK: scf.for
// CHECK-COUNT-2: vector.load {{.+}} {alignment = 16 : i64} : memref<?x128xbf16, {{.+}}>, vector<8xbf16>
// CHECK-COUNT-4: vector.load {{.+}} {alignment = 16 : i64} : memref<8x128x128xbf16, {{.+}}>, vector<8xbf16>
// CHECK: nvvm.mma.sync A[{{.+}}] B[{{.+}}] C[{{.+}}] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, shape = #nvvm.shape<m = 16, n = 8, k = 16>}
// CHECK: memref.store %{{.+}}, %[[SMEM]]
// CHECK: gpu.barrier
// CHECK: %[[SUM:.+]] = arith.select %{{.+}}, %{{.+}}, %{{.+}} : f32
// CHECK: arith.truncf %[[SUM]] : f32 to bf16
// The prefill form of several experts, the block form: a kernel of a thread per expert numbers
// each expert's blocks of 64 rows (a scan of their counts in workgroup memory) into the table;
// then a block per entry by 128 columns, 4 warps of 32 x 64, three stages of rows and weights by 64
// of depth (4 and 8 runs of 16 bytes a thread; 82944 bytes, so dynamic shared memory), filled by
// cp.async two steps ahead and read by ldmatrix: per k16 four weight fragments (8 n8 tiles), then
// one A fragment per 16 rows, each feeding 8 products; entries past the count write zeros to the
// rows past the experts'.
// CHECK: } else {
// CHECK: gpu.launch blocks({{.+}}) in ({{.+}}) threads({{.+}}) in (%{{.+}} = %c32{{.*}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) workgroup(%[[COUNTS:.+]] : memref<8xi32, #gpu.address_space<workgroup>>)
// CHECK: memref.store %{{.+}}, %[[COUNTS]]
// CHECK: gpu.barrier
// CHECK: scf.for
// CHECK: memref.store %{{.+}}, %[[BROW]][%{{.+}}] : memref<?xi32>
// CHECK: memref.store %{{.+}}, %[[BEXPERT]][%{{.+}}] : memref<?xi32>
// CHECK: memref.store %{{.+}}, %[[BCOUNT]][%{{.+}}] : memref<1xi32>
// CHECK: %[[SMEMBYTES:.+]] = arith.constant 82944 : i32
// CHECK: gpu.launch blocks({{.+}}) in (%{{.+}} = %{{.+}}, %{{.+}} = %[[ENTRIES]], %{{.+}} = %{{.+}}) threads({{.+}}) in (%{{.+}} = %c128{{.*}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) dynamic_shared_memory_size %[[SMEMBYTES]]
// CHECK: %[[RAW:.+]] = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// CHECK: %[[SA:.+]] = memref.view %[[RAW]][%{{.+}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<3x64x72xbf16, #gpu.address_space<workgroup>>
// CHECK: %[[C27648:.+]] = arith.constant 27648 : index
// CHECK: %[[SW:.+]] = memref.view %[[RAW]][%[[C27648]]][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<3x128x72xbf16, #gpu.address_space<workgroup>>
// CHECK: memref.load %[[BCOUNT]]
// CHECK: memref.load %[[BROW]]
// CHECK: memref.load %[[BEXPERT]]
// CHECK-COUNT-4: nvgpu.device_async_copy {{.+}}, %[[SA]][{{.+}}], 8 {bypassL1}
// CHECK-COUNT-8: nvgpu.device_async_copy {{.+}}, %[[SW]][{{.+}}], 8 {bypassL1}
// CHECK: nvgpu.device_async_create_group
// CHECK-COUNT-4: nvgpu.device_async_copy {{.+}}, %[[SA]][{{.+}}], 8 {bypassL1}
// CHECK-COUNT-8: nvgpu.device_async_copy {{.+}}, %[[SW]][{{.+}}], 8 {bypassL1}
// CHECK: nvgpu.device_async_create_group
// CHECK: scf.for
// CHECK: nvgpu.device_async_wait %{{.+}} {numGroups = 1 : i32}
// CHECK: gpu.barrier
// CHECK-COUNT-4: nvgpu.device_async_copy {{.+}}, %[[SA]][{{.+}}], 8 {bypassL1}
// CHECK-COUNT-8: nvgpu.device_async_copy {{.+}}, %[[SW]][{{.+}}], 8 {bypassL1}
// CHECK: nvgpu.device_async_create_group
// CHECK-COUNT-4: nvgpu.ldmatrix %[[SW]][{{.+}}] {numTiles = 4 : i32, transpose = false}
// CHECK: nvgpu.ldmatrix %[[SA]][{{.+}}] {numTiles = 4 : i32, transpose = false}
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK: nvgpu.ldmatrix %[[SA]][{{.+}}] {numTiles = 4 : i32, transpose = false}
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK-COUNT-4: nvgpu.ldmatrix %[[SW]][{{.+}}] {numTiles = 4 : i32, transpose = false}
// CHECK-NOT: gpu.barrier
// CHECK: scf.yield
// CHECK: nvgpu.device_async_wait %{{.+}} {numGroups = 0 : i32}
// With stages of depth 32 (46080 bytes) the stages are workgroup attributions.
// DEPTH32-LABEL: func.func @grouped
// DEPTH32: gpu.launch blocks({{.+}}) in ({{.+}}) threads({{.+}}) in (%{{.+}} = %c128{{.*}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) workgroup(%[[SA:.+]] : memref<3x64x40xbf16, #gpu.address_space<workgroup>>, %[[SW:.+]] : memref<3x128x40xbf16, #gpu.address_space<workgroup>>)
// DEPTH32-COUNT-2: nvgpu.device_async_copy {{.+}}, %[[SA]][{{.+}}], 8 {bypassL1}
// DEPTH32-COUNT-4: nvgpu.device_async_copy {{.+}}, %[[SW]][{{.+}}], 8 {bypassL1}
// DEPTH32: nvgpu.device_async_create_group
// With prefill-mma=wgmma (sm_90a): the same table and blocks of 64 x 128, whose one warpgroup's
// wgmma.mma_async reads both operands from the stages. The stages are rows of 64 of depth (128
// bytes, no padding; 4 x (64 + 128) x 128 bytes and 1024 to align them: 99328), from the first
// multiple of 1024 in the shared window; 16-byte chunk c of row r lands at chunk c ^ (r % 8), the
// 128-byte swizzle. Each step: its copy waited for (with 4 stages a batch of products stays in
// flight, so copies run two steps ahead), a proxy fence (the copies are read by the async proxy),
// a barrier, then per k16 a wgmma m64n128k16 on descriptors of the stage (address / 16 | leading
// byte offset 1 << 16 | 1024 / 16 << 32 between 8-row groups | 128-byte swizzle 1 << 62:
// 4611686293305360384), committed, the copy two steps ahead issued while they run (with copies
// one step ahead, it goes before them); one group may stay in flight; all land before the
// accumulators are stored.
// WGMMA-LABEL: func.func @grouped
// WGMMA: } else {
// WGMMA: %[[BYTES:.+]] = arith.constant 99328 : i32
// WGMMA: gpu.launch {{.+}} threads({{.+}}) in (%{{.+}} = %c128{{.*}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) dynamic_shared_memory_size %[[BYTES]]
// WGMMA: %[[RAW:.+]] = gpu.dynamic_shared_memory
// WGMMA: %[[AT:.+]] = memref.extract_aligned_pointer_as_index %[[RAW]]
// WGMMA: %[[PAST:.+]] = arith.remui %[[AT]], %{{.+}} : index
// WGMMA: %[[SA:.+]] = memref.view %[[RAW]][%{{.+}}][] : {{.+}} to memref<4x64x64xbf16, #gpu.address_space<workgroup>>
// WGMMA: %[[SW:.+]] = memref.view %[[RAW]][%{{.+}}][] : {{.+}} to memref<4x128x64xbf16, #gpu.address_space<workgroup>>
// WGMMA: llvm.mlir.zero : !llvm.struct<(f32, {{.+}})>
// WGMMA: %[[ROW:.+]] = arith.divui %{{.+}}, %c8{{.*}} : index
// WGMMA: %[[CHUNK:.+]] = arith.remui %{{.+}}, %c8{{.*}} : index
// WGMMA: %[[ROW8:.+]] = arith.remui %[[ROW]], %c8{{.*}} : index
// WGMMA: %[[SWIZZLED:.+]] = arith.xori %[[CHUNK]], %[[ROW8]] : index
// WGMMA: %[[SLOT:.+]] = arith.muli %[[SWIZZLED]], %c8{{.*}} : index
// WGMMA: nvgpu.device_async_copy {{.+}}, %[[SA]][%{{.+}}, %[[ROW]], %[[SLOT]]], 8 {bypassL1}
// WGMMA: nvgpu.device_async_create_group
// WGMMA: nvgpu.device_async_create_group
// WGMMA-NOT: nvgpu.device_async_create_group
// WGMMA: scf.for {{.+}} -> (!llvm.struct<
// WGMMA-NEXT: nvgpu.device_async_wait %{{.+}} {numGroups = 1 : i32}
// WGMMA-NEXT: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// WGMMA-NEXT: gpu.barrier
// WGMMA-NOT: nvgpu.device_async_create_group
// WGMMA: nvvm.wgmma.fence.aligned
// WGMMA: arith.constant 4611686293305360384 : i64
// WGMMA-COUNT-4: nvvm.wgmma.mma_async {{.+}} <m = 64, n = 128, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// WGMMA: nvvm.wgmma.commit.group.sync.aligned
// WGMMA: nvgpu.device_async_create_group
// WGMMA-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// WGMMA-NEXT: scf.yield
// WGMMA: nvvm.wgmma.wait.group.sync.aligned 0
// WGMMA: llvm.extractvalue
// WGMMA-NOT: nvgpu.ldmatrix
// WGMMA: vector.store
// With 2 stages the copy one step ahead is issued before the products, and each batch ends in its
// step.
// WGMMA2-LABEL: func.func @grouped
// WGMMA2: scf.for {{.+}} -> (!llvm.struct<
// WGMMA2-NEXT: nvgpu.device_async_wait %{{.+}} {numGroups = 0 : i32}
// WGMMA2: gpu.barrier
// WGMMA2: nvgpu.device_async_create_group
// WGMMA2: nvvm.wgmma.fence.aligned
// WGMMA2-COUNT-4: nvvm.wgmma.mma_async
// WGMMA2-NEXT: nvvm.wgmma.commit.group.sync.aligned
// WGMMA2-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// WGMMA2-NEXT: scf.yield
// With prefill-block=128x128: blocks of 256 threads, two warpgroups, each of 64 rows (its
// rows' descriptors start 64 x 128 bytes apart in a stage) by the 128 staged weight rows both
// read; 3 x (128 + 128) x 128 + 1024 bytes; with 3 stages each step's batch ends in the step
// (copies run two steps ahead).
// WGMMA128-LABEL: func.func @grouped
// WGMMA128: } else {
// WGMMA128: gpu.launch {{.+}} threads({{.+}}) in (%{{.+}} = %c256{{.*}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) dynamic_shared_memory_size %c99328_i32
// WGMMA128: %[[SA:.+]] = memref.view {{.+}} to memref<3x128x64xbf16, #gpu.address_space<workgroup>>
// WGMMA128: %[[GROUP:.+]] = arith.divui %{{.+}}, %c128{{.*}} : index
// WGMMA128: %[[ROWS:.+]] = arith.muli %[[GROUP]], %c8192 : index
// WGMMA128: %[[ROWS64:.+]] = arith.index_castui %[[ROWS]] : index to i64
// WGMMA128: %[[AT:.+]] = memref.extract_aligned_pointer_as_index %[[SA]]
// WGMMA128: %[[AT64:.+]] = arith.index_castui %[[AT]] : index to i64
// WGMMA128: arith.addi %[[AT64]], %[[ROWS64]] : i64
// WGMMA128-COUNT-4: nvgpu.device_async_copy {{.+}}, %[[SA]][{{.+}}], 8 {bypassL1}
// WGMMA128-NOT: nvgpu.device_async_copy {{.+}}, %[[SA]][
// WGMMA128: nvgpu.device_async_create_group
// WGMMA128: scf.for {{.+}} -> (!llvm.struct<
// WGMMA128-NEXT: nvgpu.device_async_wait %{{.+}} {numGroups = 1 : i32}
// WGMMA128-NOT: nvgpu.device_async_create_group
// WGMMA128-COUNT-4: nvvm.wgmma.mma_async {{.+}} <m = 64, n = 128, k = 16>
// WGMMA128: nvvm.wgmma.commit.group.sync.aligned
// WGMMA128: nvgpu.device_async_create_group
// WGMMA128-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// WGMMA128-NEXT: scf.yield
// CHECK: } else {
// CHECK: memref.store %{{.+}}, %[[OUT]]
// With prefill-block=narrow: blocks of four row tiles by 64 columns; where the four tiles share an
// expert, two shared-memory stages of rows and weights, filled by cp.async and read by ldmatrix.
// NARROW-LABEL: func.func @grouped
// NARROW-NOT: memref<1xi32>
// NARROW: } else {
// NARROW: gpu.launch blocks{{.+}} workgroup(%[[SA:.+]] : memref<2x64x40xbf16, #gpu.address_space<workgroup>>, %[[SW:.+]] : memref<2x64x40xbf16, #gpu.address_space<workgroup>>)
// NARROW: nvgpu.device_async_copy {{.+}}, %[[SA]][{{.+}}], 8 {bypassL1}
// NARROW: nvgpu.device_async_copy {{.+}}, %[[SW]][{{.+}}], 8 {bypassL1}
// NARROW: nvgpu.device_async_create_group
// NARROW: scf.for
// NARROW: nvgpu.device_async_wait %{{.+}} {numGroups = 1 : i32}
// NARROW: gpu.barrier
// NARROW: nvgpu.ldmatrix %[[SA]][{{.+}}] {numTiles = 4 : i32, transpose = false}
// NARROW: nvgpu.ldmatrix %[[SW]][{{.+}}] {numTiles = 4 : i32, transpose = false}
// NARROW: nvvm.mma.sync
// NARROW: gpu.barrier
// NARROW: nvgpu.device_async_wait %{{.+}} {numGroups = 0 : i32}
// Tiles of several experts: each warp its own, from global memory.
// NARROW: nvvm.mma.sync
// NARROW: bufferization.to_tensor
// CHECK: bufferization.to_tensor %[[OUT]]
// CHECK-NOT: moe.grouped_matmul
func.func @grouped(%x: tensor<?x128xbf16>, %ids: tensor<?x2xi32>, %w: tensor<8x128x128xbf16>)
    -> tensor<?x128xbf16> {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8 row_tile = 16
    : (tensor<?x128xbf16>, tensor<?x2xi32>)
      -> (tensor<?x128xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %h = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<?x128xbf16>, tensor<8x128x128xbf16>, tensor<?xi32>, tensor<9xi32>) -> tensor<?x128xbf16>
  return %h : tensor<?x128xbf16>
}

// -----

// Tests that a grouped GEMM whose rows are a static worst case above the decode form's limit
// (190 > 2 x (64 + 15): an expert-parallel receive buffer is sized so) launches both forms with
// no choice on the host: each kernel reads the rows used, offsets[E], and leaves at once where
// they are the other form's. The decode form's grid covers the 158 rows it may be given (10
// tiles), not 190.
// CHECK-LABEL: func.func @static_rows
// CHECK-NOT: arith.cmpi ule, %c190
// CHECK: gpu.launch blocks({{.+}}) in (%{{.+}} = %c2{{.*}}, %{{.+}} = %c10{{.*}}, %{{.+}} = %c1{{.*}}) threads({{.+}}) in (%{{.+}} = %c128{{.*}}, %{{.+}} = %c1{{.*}}, %{{.+}} = %c1{{.*}}) workgroup(
// CHECK-NEXT: %[[E:.+]] = arith.constant 2 : index
// CHECK-NEXT: %[[USED32:.+]] = memref.load %[[OFF:.+]][%[[E]]] : memref<3xi32
// CHECK-NEXT: %[[USED:.+]] = arith.index_cast %[[USED32]] : i32 to index
// CHECK-NEXT: %[[LIMIT:.+]] = arith.constant 158 : index
// CHECK-NEXT: %[[DECODE:.+]] = arith.cmpi ule, %[[USED]], %[[LIMIT]] : index
// CHECK-NEXT: scf.if %[[DECODE]] {
// CHECK: nvvm.mma.sync
// CHECK: gpu.terminator
// The prefill form's two kernels (its table of blocks, the blocks).
// CHECK-COUNT-2: arith.cmpi ugt, %{{.+}}, %c158{{.*}} : index
// CHECK: nvvm.mma.sync
// CHECK-NOT: gpu.launch
// CHECK: return
func.func @static_rows(%x: tensor<80x128xbf16>, %ids: tensor<80x2xi32>, %w: tensor<2x64x128xbf16>)
    -> tensor<190x64xbf16> {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 2 row_tile = 16
    : (tensor<80x128xbf16>, tensor<80x2xi32>)
      -> (tensor<190x128xbf16>, tensor<190xi32>, tensor<80x2xi32>, tensor<3xi32>)
  %h = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<190x128xbf16>, tensor<2x64x128xbf16>, tensor<190xi32>, tensor<3xi32>) -> tensor<190x64xbf16>
  return %h : tensor<190x64xbf16>
}

// -----

// Tests that the activation of such a GEMM comes with it, after each form, its kernel a fixed grid
// (1024 blocks of 256 threads) striding over the runs of 8 outputs of the rows used, offsets[E],
// not over the 190 worst-case rows.
// CHECK-LABEL: func.func @static_rows_activation
// CHECK: %[[ACT:.+]] = memref.alloc() : memref<190x32xbf16>
// CHECK: arith.cmpi ule, %{{.+}}, %c158
// CHECK: nvvm.mma.sync
// CHECK: gpu.launch blocks(%[[BX:.+]], %{{.+}}, %{{.+}}) in (%{{.+}} = %c1024{{.*}}, %{{.+}} = %c1{{.*}}, %{{.+}} = %c1{{.*}}) threads(%[[TX:.+]], %{{.+}}, %{{.+}}) in (%{{.+}} = %c256{{.*}}, %{{.+}} = %c1{{.*}}, %{{.+}} = %c1{{.*}})
// CHECK: arith.cmpi ule, %{{.+}}, %c158
// CHECK: scf.if
// CHECK: %[[USED32:.+]] = memref.load %{{.+}}[%c2{{.*}}] : memref<3xi32
// CHECK: %[[USED:.+]] = arith.index_cast %[[USED32]] : i32 to index
// CHECK: %[[FIRST0:.+]] = arith.muli %[[BX]], %c256{{.*}} : index
// CHECK: %[[FIRST:.+]] = arith.addi %[[FIRST0]], %[[TX]] : index
// CHECK: %[[RUNS:.+]] = arith.muli %[[USED]], %c4{{.*}} : index
// CHECK: scf.for %{{.+}} = %[[FIRST]] to %[[RUNS]] step %c262144
// CHECK: math.exp
// CHECK: vector.store %{{.+}}, %[[ACT]]
// CHECK: arith.cmpi ugt, %{{.+}}, %c158
// CHECK: gpu.launch blocks({{.+}}) in (%{{.+}} = %c1024
// CHECK: arith.cmpi ugt, %{{.+}}, %c158
// CHECK: scf.for
// CHECK: vector.store %{{.+}}, %[[ACT]]
// CHECK-NOT: gpu.launch
// CHECK: bufferization.to_tensor %[[ACT]]
// CHECK-NOT: moe.activation
func.func @static_rows_activation(%x: tensor<80x128xbf16>, %ids: tensor<80x2xi32>,
                                  %w: tensor<2x64x128xbf16>) -> tensor<190x32xbf16> {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 2 row_tile = 16
    : (tensor<80x128xbf16>, tensor<80x2xi32>)
      -> (tensor<190x128xbf16>, tensor<190xi32>, tensor<80x2xi32>, tensor<3xi32>)
  %h = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<190x128xbf16>, tensor<2x64x128xbf16>, tensor<190xi32>, tensor<3xi32>) -> tensor<190x64xbf16>
  %a = moe.activation %h kind swiglu : (tensor<190x64xbf16>) -> tensor<190x32xbf16>
  return %a : tensor<190x32xbf16>
}

// -----

// Tests that rows not padded to tiles of 16 (row_tile 1), f32 weights and a depth that is not a
// multiple of 32 keep moe.grouped_matmul for convert-moe-to-linalg (their dispatches become
// kernels all the same).
// CHECK-LABEL: func.func @left_alone
// CHECK-COUNT-3: moe.grouped_matmul
// CHECK-NOT: nvvm.mma.sync
func.func @left_alone(%x: tensor<?x64xbf16>, %ids: tensor<?x2xi32>, %w: tensor<8x128x64xbf16>,
                      %xf: tensor<?x64xf32>, %wf: tensor<8x128x64xf32>,
                      %x24: tensor<?x24xbf16>, %w24: tensor<8x128x24xbf16>)
    -> (tensor<?x128xbf16>, tensor<?x128xf32>, tensor<?x128xbf16>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8
    : (tensor<?x64xbf16>, tensor<?x2xi32>)
      -> (tensor<?x64xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %h = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<?x64xbf16>, tensor<8x128x64xbf16>, tensor<?xi32>, tensor<9xi32>) -> tensor<?x128xbf16>
  %rf, %ref, %sf, %of = moe.dispatch %xf, %ids num_experts = 8 row_tile = 16
    : (tensor<?x64xf32>, tensor<?x2xi32>)
      -> (tensor<?x64xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %hf = moe.grouped_matmul %rf, %wf, %ref offsets %of
    : (tensor<?x64xf32>, tensor<8x128x64xf32>, tensor<?xi32>, tensor<9xi32>) -> tensor<?x128xf32>
  %r24, %re24, %s24, %o24 = moe.dispatch %x24, %ids num_experts = 8 row_tile = 16
    : (tensor<?x24xbf16>, tensor<?x2xi32>)
      -> (tensor<?x24xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %h24 = moe.grouped_matmul %r24, %w24, %re24 offsets %o24
    : (tensor<?x24xbf16>, tensor<8x128x24xbf16>, tensor<?xi32>, tensor<9xi32>) -> tensor<?x128xbf16>
  return %h, %hf, %h24 : tensor<?x128xbf16>, tensor<?x128xf32>, tensor<?x128xbf16>
}

// -----

// Tests that moe.dispatch becomes four kernels. The bookkeeping takes three, in blocks of 32
// warps that own 2048 choices each (a block per 2048: ceil(T*k / 2048)), a warp a run of 64 that
// it walks 32 at a time: a lane's rank among the step's lanes of its expert and their count come
// from one match.any (the mask's lanes below it; all of them), and the first such lane adds the
// count to the warp's count of the expert (workgroup memory; the warp synchronizes between
// steps). 1: each block's count of each expert (the warps' counts summed). 2: one block: thread e
// turns the blocks' counts into prefixes over the blocks, the padded totals are scanned
// (Hillis-Steele, three steps for 8 experts) into the offsets; padding rows and, strided over the
// threads, the rows past the last expert's get no expert. 3: each block counts again, the warps'
// counts become where their rows start (offset + the blocks' before + the warps' before), and
// the walk again numbers each choice's row (slot, row_expert, the row's token). Up to one block's
// choices (T*k <= 2048) one kernel takes the three steps a barrier apart and counts once. Then a
// block per row (T*k + min(E, T*k)*15 rows) copies its token's x or zeros, 16 bytes a thread.
// CHECK-LABEL: func.func @dispatch
// CHECK: %[[PAIRS:.+]] = arith.muli %{{.+}}, %c2 : index
// CHECK: %[[TOUCHED:.+]] = arith.minui %[[PAIRS]], %c8 : index
// CHECK: %[[PAD:.+]] = arith.muli %[[TOUCHED]], %c15 : index
// CHECK: %[[ROWS:.+]] = arith.addi %[[PAIRS]], %[[PAD]] : index
// CHECK: %[[X:.+]] = memref.alloc(%[[ROWS]]) : memref<?x64xbf16>
// CHECK: %[[RE:.+]] = memref.alloc(%[[ROWS]]) : memref<?xi32>
// CHECK: %[[TOKEN:.+]] = memref.alloc(%[[ROWS]]) : memref<?xi32>
// CHECK: %[[SLOT:.+]] = memref.alloc(%{{.+}}) : memref<?x2xi32>
// CHECK: %[[OFF:.+]] = memref.alloc() : memref<9xi32>
// CHECK: %[[BLOCKS:.+]] = arith.ceildivui %[[PAIRS]], %c2048 : index
// CHECK: %[[NONZERO:.+]] = arith.maxui %[[BLOCKS]], %c1 : index
// CHECK: %[[COUNTS:.+]] = memref.alloc(%[[NONZERO]]) : memref<?x8xi32>
// CHECK: %[[FITS:.+]] = arith.cmpi ule, %[[PAIRS]], %c2048{{.*}} : index
// CHECK: scf.if %[[FITS]] {
// CHECK: gpu.launch blocks({{.+}}) in (%{{.+}} = %c1, %{{.+}} = %c1, %{{.+}} = %c1) threads({{.+}}) in (%{{.+}} = %c1024, %{{.+}} = %c1, %{{.+}} = %c1) workgroup(%[[FPW:.+]] : memref<32x8xi32, #gpu.address_space<workgroup>>, %[[FTOT:.+]] : memref<8xi32, #gpu.address_space<workgroup>>, %{{.+}} : memref<8xi32, #gpu.address_space<workgroup>>)
// CHECK: nvvm.match.sync any
// CHECK: memref.store %{{.+}}, %[[FPW]]
// CHECK: memref.store %{{.+}}, %[[COUNTS]]
// CHECK: gpu.barrier
// CHECK: memref.store %{{.+}}, %[[FTOT]]
// CHECK: memref.store %{{.+}}, %[[OFF]]
// CHECK: gpu.barrier
// CHECK-NOT: nvvm.match.sync
// CHECK: memref.load %[[OFF]]
// CHECK-NOT: gpu.terminator
// CHECK: nvvm.match.sync any
// CHECK: memref.store %{{.+}}, %[[SLOT]]
// CHECK: gpu.terminator
// CHECK-NEXT: }
// CHECK-NEXT: } else {
// CHECK: gpu.launch blocks(%[[B:.+]], %{{.+}}, %{{.+}}) in (%{{.+}} = %[[BLOCKS]], %{{.+}} = %c1, %{{.+}} = %c1) threads(%[[T:.+]], %{{.+}}, %{{.+}}) in (%{{.+}} = %c1024, %{{.+}} = %c1, %{{.+}} = %c1) workgroup(%[[PERWARP:.+]] : memref<32x8xi32, #gpu.address_space<workgroup>>)
// CHECK: gpu.barrier
// CHECK: %[[SAME:.+]] = nvvm.match.sync any %c-1_i32, %{{.+}} : i32 -> i32
// CHECK: %[[BELOW:.+]] = arith.andi %[[SAME]], %{{.+}} : i32
// CHECK: math.ctpop %[[BELOW]] : i32
// CHECK: math.ctpop %[[SAME]] : i32
// CHECK: memref.store %{{.+}}, %[[PERWARP]]
// CHECK: nvvm.bar.warp.sync
// CHECK: gpu.barrier
// CHECK: memref.store %{{.+}}, %[[COUNTS]][%[[B]], %[[T]]]
// CHECK: gpu.terminator
// CHECK: gpu.launch blocks({{.+}}) in (%{{.+}} = %c1, %{{.+}} = %c1, %{{.+}} = %c1) threads({{.+}}) in (%{{.+}} = %c1024{{.*}}, %{{.+}} = %c1, %{{.+}} = %c1) workgroup(%[[TOTALS:.+]] : memref<8xi32, #gpu.address_space<workgroup>>, %[[BEGINS:.+]] : memref<8xi32, #gpu.address_space<workgroup>>)
// CHECK: scf.for %{{.+}} = %c0{{.*}} to %[[BLOCKS]]
// CHECK: memref.load %[[COUNTS]]
// CHECK: memref.store %{{.+}}, %[[COUNTS]]
// CHECK: memref.store %{{.+}}, %[[TOTALS]]
// CHECK: memref.store %{{.+}}, %[[BEGINS]]
// CHECK-COUNT-3: memref.store %{{.+}}, %[[BEGINS]]
// CHECK: memref.store %{{.+}}, %[[OFF]]
// CHECK: memref.store %{{.+}}, %[[OFF]]
// CHECK: memref.store %{{.+}}, %[[RE]]
// CHECK: memref.store %{{.+}}, %[[TOKEN]]
// CHECK: scf.for %{{.+}} = %{{.+}} to %[[ROWS]] step %c1024
// CHECK: gpu.terminator
// CHECK: gpu.launch blocks({{.+}}) in (%{{.+}} = %[[BLOCKS]], %{{.+}} = %c1, %{{.+}} = %c1) threads({{.+}}) in (%{{.+}} = %c1024{{.*}}, %{{.+}} = %c1, %{{.+}} = %c1) workgroup(%[[PERWARP3:.+]] : memref<32x8xi32, #gpu.address_space<workgroup>>)
// CHECK: nvvm.match.sync any
// CHECK: gpu.barrier
// CHECK: memref.load %[[OFF]]
// CHECK: memref.load %[[COUNTS]]
// CHECK: memref.store %{{.+}}, %[[PERWARP3]]
// CHECK: gpu.barrier
// CHECK: nvvm.match.sync any
// CHECK: memref.store %{{.+}}, %[[SLOT]]
// CHECK: memref.store %{{.+}}, %[[RE]]
// CHECK: memref.store %{{.+}}, %[[TOKEN]]
// CHECK: nvvm.bar.warp.sync
// CHECK: memref.store %{{.+}}, %[[PERWARP3]]
// CHECK: gpu.terminator
// CHECK: gpu.launch blocks({{.+}}) in (%{{.+}} = %[[ROWS]], %{{.+}} = %c1, %{{.+}} = %c1) threads({{.+}}) in (%{{.+}} = %c256,
// CHECK: memref.load %[[TOKEN]]
// CHECK: vector.load {{.+}} {alignment = 16 : i64} : memref<?x64xbf16, {{.+}}>, vector<8xbf16>
// CHECK: arith.select %{{.+}}, %{{.+}}, %{{.+}} : vector<8xbf16>
// CHECK: vector.store %{{.+}}, %[[X]]
// CHECK-NOT: moe.dispatch
func.func @dispatch(%x: tensor<?x64xbf16>, %ids: tensor<?x2xi32>)
    -> (tensor<?x64xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8 row_tile = 16
    : (tensor<?x64xbf16>, tensor<?x2xi32>)
      -> (tensor<?x64xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  return %rows, %re, %slot, %off : tensor<?x64xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>
}

// -----

// Tests that a bf16 moe.route becomes the logits GEMM on tensor cores (its two forms) and one
// kernel with a warp per token (blocks of 32 x 4 threads, no workgroup memory, no barrier):
// lane l holds experts l and l + 32 (sigmoid scores, the correction bias); each of the 8 groups'
// two best scores meet across the warp in five xor steps of two shuffles; the groups ranked
// below topk_group keep their experts, the others' get -inf; then k = 4 rounds, each the lanes'
// best below the last choice meeting in five steps of three shuffles (value, expert, score); lane
// r < k writes choice r, its weight normalized by the sum and scaled.
// CHECK-LABEL: func.func @route
// CHECK: %[[T:.+]] = tensor.dim %{{.+}}, %{{.+}} : tensor<?x128xbf16>
// CHECK: %[[LOGITS:.+]] = memref.alloc(%[[T]]) : memref<?x64xf32>
// CHECK: nvvm.mma.sync
// CHECK: nvvm.mma.sync
// CHECK: %[[IDS:.+]] = memref.alloc(%[[T]]) : memref<?x4xi32>
// CHECK: %[[W:.+]] = memref.alloc(%[[T]]) : memref<?x4xf32>
// CHECK: %[[BLOCKS:.+]] = arith.ceildivui %[[T]], %[[C4:c4[_0-9]*]] : index
// CHECK: gpu.launch blocks(%[[BX:.+]], %{{.+}}, %{{.+}}) in (%{{.+}} = %[[BLOCKS]], %{{.+}} = %c1{{.*}}, %{{.+}} = %c1{{.*}}) threads(%[[LANE:.+]], %[[WARP:.+]], %{{.+}}) in (%{{.+}} = %c32{{.*}}, %{{.+}} = %[[C4]], %{{.+}} = %c1{{.*}}) {
// CHECK-NOT: gpu.barrier
// CHECK: %[[FIRST:.+]] = arith.muli %[[BX]], %[[C4]] : index
// CHECK: %[[TOKEN:.+]] = arith.addi %[[FIRST]], %[[WARP]] : index
// CHECK: %[[ROUTED:.+]] = arith.cmpi ult, %[[TOKEN]], %[[T]] : index
// CHECK: scf.if %[[ROUTED]] {
// CHECK: %[[SECOND:.+]] = arith.addi %[[LANE]], %c32{{.*}} : index
// CHECK: memref.load %[[LOGITS]][%[[TOKEN]], %[[LANE]]]
// CHECK: memref.load %[[LOGITS]][%[[TOKEN]], %[[SECOND]]]
// CHECK-COUNT-2: math.exp
// CHECK-COUNT-80: gpu.shuffle xor %{{.+}}, %c{{(16|8|4|2|1)}}_i32{{.*}}, %c32_i32{{.*}} : f32
// CHECK: arith.constant 0xFF800000 : f32
// CHECK: scf.for %[[R:.+]] = %c0{{.*}} to %[[C4]]
// CHECK-COUNT-15: gpu.shuffle xor %{{.+}} : {{f32|i32}}
// CHECK: %[[MINE:.+]] = arith.cmpi eq, %[[LANE]], %[[R]] : index
// CHECK: scf.yield
// CHECK: %[[WRITES:.+]] = arith.cmpi ult, %[[LANE]], %c4{{.*}} : index
// CHECK: scf.if %[[WRITES]] {
// CHECK: arith.divf
// CHECK: arith.mulf
// CHECK: memref.store %{{.+}}, %[[IDS]][%[[TOKEN]], %[[LANE]]]
// CHECK: memref.store %{{.+}}, %[[W]][%[[TOKEN]], %[[LANE]]]
// CHECK-NOT: gpu.barrier
// CHECK: gpu.terminator
// CHECK-NOT: moe.route
func.func @route(%x: tensor<?x128xbf16>, %w: tensor<64x128xbf16>, %bias: tensor<64xf32>)
    -> (tensor<?x4xi32>, tensor<?x4xf32>) {
  %ids, %weights = moe.route %x, %w bias %bias
    routing <sigmoid, top_k = 4, n_group = 8, topk_group = 4, normalize, scale = 2.5, correction_bias>
    : (tensor<?x128xbf16>, tensor<64x128xbf16>, tensor<64xf32>) -> (tensor<?x4xi32>, tensor<?x4xf32>)
  return %ids, %weights : tensor<?x4xi32>, tensor<?x4xf32>
}

// -----

// Tests that a router of few blocks at decode (64 experts of depth 1024: 8 blocks of 8 columns)
// splits its depth among 4 blocks along z, each 8 warps taking 256 of it a step of 32 at a time
// and writing its partial sums to a [4, 64, 64] buffer; the route kernel adds the four in order
// when the decode form ran (T <= 64), else reads the prefill form's logits.
// CHECK-LABEL: func.func @route_split
// CHECK: %[[T:.+]] = tensor.dim %{{.+}}, %{{.+}} : tensor<?x1024xbf16>
// CHECK: %[[LOGITS:.+]] = memref.alloc(%[[T]]) : memref<?x64xf32>
// CHECK: %[[PARTIALS:.+]] = memref.alloc() : memref<4x64x64xf32>
// CHECK: %[[DECODE:.+]] = arith.cmpi ule, %[[T]], %c64{{.*}} : index
// CHECK: scf.if %[[DECODE]] {
// CHECK: gpu.launch blocks(%{{.+}}, %{{.+}}, %[[SPLIT:.+]]) in (%{{.+}} = %c8{{.*}}, %{{.+}} = %{{.+}}, %{{.+}} = %c4{{.*}}) threads({{.+}}) in (%{{.+}} = %c256{{.*}}, %{{.+}} = %c1{{.*}}, %{{.+}} = %c1{{.*}})
// CHECK: %[[FROM:.+]] = arith.muli %[[SPLIT]], %c256{{.*}} : index
// CHECK: %[[BEGIN:.+]] = arith.addi %[[FROM]], %{{.+}} : index
// CHECK: %[[NEXT:.+]] = arith.addi %[[SPLIT]], %c1{{.*}} : index
// CHECK: %[[END:.+]] = arith.muli %[[NEXT]], %c256{{.*}} : index
// CHECK: scf.for %{{.+}} = %[[BEGIN]] to %[[END]] step %c256
// CHECK-COUNT-2: nvvm.mma.sync
// CHECK-NOT: nvvm.mma.sync
// CHECK: memref.store %{{.+}}, %[[PARTIALS]][%[[SPLIT]], %{{.+}}, %{{.+}}] : memref<4x64x64xf32>
// CHECK: } else {
// CHECK: nvvm.mma.sync
// CHECK: vector.store %{{.+}}, %[[LOGITS]]
// CHECK: gpu.launch
// CHECK: %[[SUMS:.+]] = arith.cmpi ule, %[[T]], %c64{{.*}} : index
// CHECK: scf.if %[[SUMS]] -> (f32) {
// CHECK: %[[P0:.+]] = memref.load %[[PARTIALS]][%c0{{.*}}, %[[TOKEN:.+]], %[[LANE:.+]]] : memref<4x64x64xf32>
// CHECK: %[[P1:.+]] = memref.load %[[PARTIALS]][%c1{{.*}}, %[[TOKEN]], %[[LANE]]]
// CHECK: %[[S01:.+]] = arith.addf %[[P0]], %[[P1]] : f32
// CHECK: %[[P2:.+]] = memref.load %[[PARTIALS]][%c2{{.*}}, %[[TOKEN]], %[[LANE]]]
// CHECK: %[[S012:.+]] = arith.addf %[[S01]], %[[P2]] : f32
// CHECK: %[[P3:.+]] = memref.load %[[PARTIALS]][%c3{{.*}}, %[[TOKEN]], %[[LANE]]]
// CHECK: %[[S:.+]] = arith.addf %[[S012]], %[[P3]] : f32
// CHECK: scf.yield %[[S]] : f32
// CHECK: } else {
// CHECK: %[[L:.+]] = memref.load %[[LOGITS]][%[[TOKEN]], %[[LANE]]]
// CHECK: scf.yield %[[L]] : f32
func.func @route_split(%x: tensor<?x1024xbf16>, %w: tensor<64x1024xbf16>)
    -> (tensor<?x2xi32>, tensor<?x2xf32>) {
  %ids, %weights = moe.route %x, %w routing <softmax, top_k = 2, normalize>
    : (tensor<?x1024xbf16>, tensor<64x1024xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return %ids, %weights : tensor<?x2xi32>, tensor<?x2xf32>
}

// -----

// Tests that a GEMM of one expert (the shared expert: offsets [0, T]) takes the wide prefill form:
// blocks of 128 rows by 64 columns (2 for N = 128) of 4 warps; three stages by 64 of depth in
// dynamic shared memory: per stage cp.async copies the block's rows (8 runs of 16 bytes a thread)
// and weight rows (4) two steps ahead while the warps multiply; ldmatrix reads per k16 two weight
// fragments, then one A fragment per 16 rows, each feeding 4 products.
// CHECK-LABEL: func.func @one_expert
// CHECK: } else {
// CHECK: gpu.launch blocks({{.+}}) in (%{{.+}} = %c2{{.*}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) threads({{.+}}) in (%{{.+}} = %c128{{.*}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) dynamic_shared_memory_size
// CHECK: %[[RAW:.+]] = gpu.dynamic_shared_memory
// CHECK: %[[SA:.+]] = memref.view %[[RAW]]{{.+}} to memref<3x128x72xbf16, #gpu.address_space<workgroup>>
// CHECK: %[[SW:.+]] = memref.view %[[RAW]]{{.+}} to memref<3x64x72xbf16, #gpu.address_space<workgroup>>
// CHECK-COUNT-8: nvgpu.device_async_copy {{.+}}, %[[SA]][{{.+}}], 8 {bypassL1}
// CHECK-COUNT-4: nvgpu.device_async_copy {{.+}}, %[[SW]][{{.+}}], 8 {bypassL1}
// CHECK: nvgpu.device_async_create_group
// CHECK: scf.for
// CHECK: nvgpu.device_async_wait %{{.+}} {numGroups = 1 : i32}
// CHECK: gpu.barrier
// CHECK-COUNT-8: nvgpu.device_async_copy {{.+}}, %[[SA]][{{.+}}], 8 {bypassL1}
// CHECK-COUNT-4: nvgpu.device_async_copy {{.+}}, %[[SW]][{{.+}}], 8 {bypassL1}
// CHECK-COUNT-2: nvgpu.ldmatrix %[[SW]][{{.+}}] {numTiles = 4 : i32, transpose = false}
// CHECK: nvgpu.ldmatrix %[[SA]][{{.+}}] {numTiles = 4 : i32, transpose = false}
// CHECK-COUNT-4: nvvm.mma.sync
// CHECK: nvgpu.device_async_wait %{{.+}} {numGroups = 0 : i32}
// CHECK: vector.store
func.func @one_expert(%x: tensor<?x128xbf16>, %rows: tensor<?xi32>, %off: tensor<2xi32>,
                      %w: tensor<1x128x128xbf16>) -> tensor<?x128xbf16> {
  %h = moe.grouped_matmul %x, %w, %rows offsets %off
    : (tensor<?x128xbf16>, tensor<1x128x128xbf16>, tensor<?xi32>, tensor<2xi32>) -> tensor<?x128xbf16>
  return %h : tensor<?x128xbf16>
}

// -----

// Tests that FP8 E4M3 weights with 128 x 128 block scales take the decode form at every row
// count (no host choice): each lane loads 8 codes (8 bytes) of a weight row at a time and turns
// each pair into the i32 of two bf16 with a byte permute (the codes to bytes 1 and 3), the sign
// kept at bit 15 of each half, exponent and mantissa moved to bits 4-10 (0x80008000 and
// 0x07F007F0 after a shift by 4) and a bf16 multiply by 2^120; a step of depth (64, within one
// scale block) sums into zeros and is added times its block's scale, read at
// [expert, column / 128, depth / 128].
// CHECK-LABEL: func.func @fp8_weights
// CHECK: gpu.launch blocks{{.+}} workgroup(%{{.+}} : memref<4x16x32xf32, #gpu.address_space<workgroup>>)
// CHECK: scf.for %[[K:.+]] = %{{.+}} to %c256{{.*}} step %c256
// CHECK: %[[CODES:.+]] = vector.load {{.+}} {alignment = 8 : i64} : memref<8x128x256xi8, {{.+}}>, vector<8xi8>
// CHECK: %[[SPREAD:.+]] = vector.shuffle %[[CODES]], %{{.+}} [8, 0, 8, 1] : vector<8xi8>, vector<8xi8>
// CHECK: %[[WORD:.+]] = vector.bitcast %[[SPREAD]] : vector<4xi8> to vector<1xi32>
// CHECK: %[[W:.+]] = vector.extract %[[WORD]][0]
// CHECK: %[[SIGNMASK:.+]] = arith.constant -2147450880 : i32
// CHECK: %[[SIGN:.+]] = arith.andi %[[W]], %[[SIGNMASK]] : i32
// CHECK: %[[SHIFTED:.+]] = arith.shrui %[[W]], %c4_i32{{.*}} : i32
// CHECK: %[[MAGMASK:.+]] = arith.constant 133171184 : i32
// CHECK: %[[MAG:.+]] = arith.andi %[[SHIFTED]], %[[MAGMASK]] : i32
// CHECK: %[[BITS:.+]] = arith.ori %[[SIGN]], %[[MAG]] : i32
// CHECK: %[[PAIR:.+]] = vector.bitcast %{{.+}} : vector<1xi32> to vector<2xbf16>
// CHECK: %[[TWO120:.+]] = arith.constant dense<1.329230e+36> : vector<2xbf16>
// CHECK: arith.mulf %[[PAIR]], %[[TWO120]] : vector<2xbf16>
// CHECK: vector.shuffle %[[CODES]], %{{.+}} [8, 2, 8, 3]
// CHECK: vector.shuffle %[[CODES]], %{{.+}} [8, 4, 8, 5]
// CHECK: vector.shuffle %[[CODES]], %{{.+}} [8, 6, 8, 7]
// CHECK: nvvm.mma.sync A[{{.+}}] B[{{.+}}] C[%[[ZERO:.+]], %[[ZERO]], %[[ZERO]], %[[ZERO]]]
// CHECK: %[[SCALEROW:.+]] = arith.divui %{{.+}}, %c128{{.*}} : index
// CHECK: %[[SCALECOL:.+]] = arith.divui %[[K]], %c128{{.*}} : index
// CHECK: %[[SCALE:.+]] = memref.load %{{.+}}[%{{.+}}, %[[SCALEROW]], %[[SCALECOL]]] : memref<8x1x2xf32
// CHECK: %[[SCALED:.+]] = arith.mulf %{{.+}}, %[[SCALE]] : f32
// CHECK: arith.addf %{{.+}}, %[[SCALED]] : f32
// CHECK: gpu.barrier
// CHECK-NOT: gpu.launch
// CHECK: bufferization.to_tensor
// With prefill-mma=wgmma the host chooses between that decode form and a prefill form of blocks
// of 64 rows by 128 columns (one scale block wide), after the block table: per step the rows'
// stage (swizzled) and the weights' 16-byte runs of codes are copied; the step's codes are decoded
// (the same byte permute) into one bf16 tile, swizzled, fenced for the async proxy, a barrier,
// then 4 wgmma m64n128k16 sum into the scale block's accumulators; at the end of each scale block
// (every 2 steps of 64) they are added to the total times the block's scale, and start again from
// zero.
// FP8WGMMA-LABEL: func.func @fp8_weights
// FP8WGMMA: gpu.launch {{.+}} workgroup(%{{.+}} : memref<4x16x32xf32, #gpu.address_space<workgroup>>)
// FP8WGMMA: } else {
// FP8WGMMA: gpu.launch {{.+}} workgroup(%{{.+}} : memref<8xi32, #gpu.address_space<workgroup>>)
// FP8WGMMA: %[[BYTES:.+]] = arith.constant 50176 : i32
// FP8WGMMA: gpu.launch {{.+}} dynamic_shared_memory_size %[[BYTES]]
// FP8WGMMA: %[[SA:.+]] = memref.view {{.+}} to memref<2x64x64xbf16, #gpu.address_space<workgroup>>
// FP8WGMMA: %[[SW:.+]] = memref.view {{.+}} to memref<1x128x64xbf16, #gpu.address_space<workgroup>>
// FP8WGMMA: %[[CODES:.+]] = memref.view {{.+}} to memref<2x128x64xi8, #gpu.address_space<workgroup>>
// FP8WGMMA: %[[ZERO:.+]] = llvm.mlir.zero : !llvm.struct<(f32,
// FP8WGMMA-COUNT-4: nvgpu.device_async_copy {{.+}}, %[[SA]][{{.+}}], 8 {bypassL1}
// FP8WGMMA-COUNT-4: nvgpu.device_async_copy {{.+}}, %[[CODES]][{{.+}}], 16 {bypassL1}
// FP8WGMMA: scf.for %[[STEP:[^ ]+]] = {{.+}} iter_args(%[[TOTAL:.+]] = %[[ZERO]], %[[SUM:.+]] = %[[ZERO]])
// FP8WGMMA: gpu.barrier
// FP8WGMMA: nvgpu.device_async_create_group
// FP8WGMMA: vector.load %[[CODES]]{{.+}} vector<8xi8>
// FP8WGMMA: arith.mulf %{{.+}}, %{{.+}} : vector<2xbf16>
// FP8WGMMA: vector.store %{{.+}}, %[[SW]]{{.+}} vector<8xbf16>
// FP8WGMMA: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// FP8WGMMA-NEXT: gpu.barrier
// FP8WGMMA-NEXT: nvvm.wgmma.fence.aligned
// FP8WGMMA: nvvm.wgmma.mma_async %{{.+}}, %{{.+}}, %[[SUM]], <m = 64, n = 128, k = 16>
// FP8WGMMA-COUNT-3: nvvm.wgmma.mma_async {{.+}} <m = 64, n = 128, k = 16>
// FP8WGMMA: nvvm.wgmma.wait.group.sync.aligned 0
// FP8WGMMA: %[[NEXT:.+]] = arith.addi %[[STEP]], %c1{{.*}} : index
// FP8WGMMA: %[[PHASE:.+]] = arith.remui %[[NEXT]], %c2{{.*}} : index
// FP8WGMMA: %[[END:.+]] = arith.cmpi eq, %[[PHASE]], %c0{{.*}} : index
// FP8WGMMA: scf.if %[[END]] -> (!llvm.struct<
// FP8WGMMA: %[[SCALE:.+]] = memref.load {{.+}} : memref<8x1x2xf32
// FP8WGMMA: %[[PRODUCT:.+]] = arith.mulf %{{.+}}, %[[SCALE]] : f32
// FP8WGMMA: arith.addf %{{.+}}, %[[PRODUCT]] : f32
// FP8WGMMA: scf.yield %{{.+}}, %[[ZERO]]
// FP8WGMMA: } else {
// FP8WGMMA: scf.yield %[[TOTAL]], %{{.+}}
// FP8WGMMA: vector.store {{.+}} : memref<?x128xbf16>, vector<2xbf16>
// With fp8-rows the prefill form quantizes its rows first: a thread per 8 elements, the amax of
// its group of 128 (16 threads) by xor shuffles 8, 4, 2, 1, scale amax / 448 (1 divides a group
// of zeros), codes by cvt.rn.satfinite e4m3x2 (the first element in the low byte: it is the
// op's second operand), the group's first thread storing its scale. Then blocks of 128 rows
// (two warpgroups) by 128 columns stage rows and weights both as codes, 128 deep, swizzled by
// 16-byte chunks; each step loads the thread's two rows' scales and the weight block's, issues 4
// e4m3 wgmma m64n128k32 (the first into zeros), the copies 2 steps ahead, waits for the
// products and joins them to the total by one fma each, times row scale x weight scale.
// FP8ROWS-LABEL: func.func @fp8_weights
// FP8ROWS: %[[CODES:.+]] = memref.alloc(%[[ROWS:.+]]) : memref<?x256xi8>
// FP8ROWS: %[[SCALES:.+]] = memref.alloc(%[[ROWS]]) : memref<?x2xf32>
// FP8ROWS: } else {
// FP8ROWS: gpu.launch
// FP8ROWS: %[[X:.+]] = vector.load {{.+}} vector<8xbf16>
// FP8ROWS: %[[WIDE:.+]] = arith.extf %[[X]] : vector<8xbf16> to vector<8xf32>
// FP8ROWS: %[[ABS:.+]] = math.absf %[[WIDE]]
// FP8ROWS: %[[AMAX0:.+]] = vector.reduction <maxnumf>, %[[ABS]]
// FP8ROWS: %[[OTHER:.+]], %{{.+}} = gpu.shuffle  xor %[[AMAX0]], %c8_i32{{.*}}, %c32_i32
// FP8ROWS: arith.maxnumf %[[AMAX0]], %[[OTHER]]
// FP8ROWS: gpu.shuffle  xor {{.+}}, %c4_i32
// FP8ROWS: gpu.shuffle  xor {{.+}}, %c2_i32
// FP8ROWS: gpu.shuffle  xor {{.+}}, %c1_i32
// FP8ROWS: %[[AMAX:.+]] = arith.maxnumf
// FP8ROWS: %[[SCALE:.+]] = arith.divf %[[AMAX]], %cst{{.*}} : f32
// FP8ROWS: %[[POSITIVE:.+]] = arith.cmpf ogt, %[[AMAX]]
// FP8ROWS: %[[DIVISOR:.+]] = arith.select %[[POSITIVE]], %[[SCALE]], %cst
// FP8ROWS: %[[E0:.+]] = vector.extract %[[WIDE]][0]
// FP8ROWS: %[[Q0:.+]] = arith.divf %[[E0]], %[[DIVISOR]]
// FP8ROWS: %[[E1:.+]] = vector.extract %[[WIDE]][1]
// FP8ROWS: %[[Q1:.+]] = arith.divf %[[E1]], %[[DIVISOR]]
// FP8ROWS: nvvm.convert.f32x2.to.f8x2 %[[Q1]], %[[Q0]] {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>} : i16(f8E4M3FN)
// FP8ROWS-COUNT-3: nvvm.convert.f32x2.to.f8x2
// FP8ROWS: vector.bitcast %{{.+}} : vector<4xi16> to vector<8xi8>
// FP8ROWS: vector.store %{{.+}}, %[[CODES]]{{.+}} vector<8xi8>
// FP8ROWS: memref.store %[[SCALE]], %[[SCALES]]
// FP8ROWS: gpu.launch {{.+}} threads({{.+}}) in (%{{.+}} = %c256{{.*}}, {{.+}} dynamic_shared_memory_size
// FP8ROWS: %[[SA:.+]] = memref.view {{.+}} to memref<3x128x128xi8, #gpu.address_space<workgroup>>
// FP8ROWS: %[[SW:.+]] = memref.view {{.+}} to memref<3x128x128xi8, #gpu.address_space<workgroup>>
// FP8ROWS-COUNT-4: nvgpu.device_async_copy %[[CODES]][{{.+}}], %[[SA]][{{.+}}], 16 {bypassL1}
// FP8ROWS-COUNT-4: nvgpu.device_async_copy %{{.+}}, %[[SW]][{{.+}}], 16 {bypassL1} : memref<8x128x256xi8
// FP8ROWS: scf.for %[[STEP:[^ ]+]] = {{.+}} iter_args(%[[TOTAL:.+]] = %[[ZERO:.+]], %[[SUM:.+]] = %[[ZERO]])
// FP8ROWS: gpu.barrier
// FP8ROWS: %[[S0:.+]] = memref.load %[[SCALES]][%{{.+}}, %[[STEP]]] : memref<?x2xf32>
// FP8ROWS: %[[S1:.+]] = memref.load %[[SCALES]][%{{.+}}, %[[STEP]]] : memref<?x2xf32>
// FP8ROWS: %[[WS:.+]] = memref.load %{{.+}} : memref<8x1x2xf32
// FP8ROWS: nvvm.wgmma.fence.aligned
// FP8ROWS: nvvm.wgmma.mma_async %{{.+}}, %{{.+}}, %[[SUM]], <m = 64, n = 128, k = 32>, D[<f32>, <zero>], A[<e4m3>, <one>, <row>], B[<e4m3>, <one>, <col>]
// FP8ROWS-COUNT-3: nvvm.wgmma.mma_async {{.+}} <m = 64, n = 128, k = 32>, D[<f32>, <one>], A[<e4m3>
// FP8ROWS: nvvm.wgmma.commit.group.sync.aligned
// FP8ROWS-COUNT-8: nvgpu.device_async_copy
// FP8ROWS: nvgpu.device_async_create_group
// FP8ROWS: nvvm.wgmma.wait.group.sync.aligned 0
// FP8ROWS: %[[F0:.+]] = arith.mulf %[[S0]], %[[WS]] : f32
// FP8ROWS: %[[F1:.+]] = arith.mulf %[[S1]], %[[WS]] : f32
// FP8ROWS: math.fma %{{.+}}, %[[F0]], %{{.+}} : f32
// FP8ROWS: math.fma %{{.+}}, %[[F0]], %{{.+}} : f32
// FP8ROWS: math.fma %{{.+}}, %[[F1]], %{{.+}} : f32
// FP8ROWS: math.fma %{{.+}}, %[[F1]], %{{.+}} : f32
// FP8ROWS: vector.store {{.+}} : memref<?x128xbf16>, vector<2xbf16>
func.func @fp8_weights(%x: tensor<?x256xbf16>, %ids: tensor<?x2xi32>, %w: tensor<8x128x256xi8>,
                       %s: tensor<8x1x2xf32>) -> tensor<?x128xbf16> {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8 row_tile = 16
    : (tensor<?x256xbf16>, tensor<?x2xi32>)
      -> (tensor<?x256xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %h = moe.grouped_matmul %rows, %w, %re weight_scales %s offsets %off {weight_block = array<i64: 128, 128>}
    : (tensor<?x256xbf16>, tensor<8x128x256xi8>, tensor<?xi32>, tensor<8x1x2xf32>, tensor<9xi32>)
      -> tensor<?x128xbf16>
  return %h : tensor<?x128xbf16>
}

// -----

// Tests that FP8 weights whose scale blocks are not whole multiples of 32 rows, or of a warp's
// step of depth (32), keep moe.grouped_matmul for convert-moe-to-linalg.
// CHECK-LABEL: func.func @fp8_blocks_left_alone
// CHECK-COUNT-2: moe.grouped_matmul
// CHECK-NOT: nvvm.mma.sync
func.func @fp8_blocks_left_alone(%x: tensor<?x256xbf16>, %ids: tensor<?x2xi32>,
                                 %w: tensor<8x128x256xi8>, %s16: tensor<8x8x2xf32>,
                                 %s8: tensor<8x1x32xf32>) -> (tensor<?x128xbf16>, tensor<?x128xbf16>) {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8 row_tile = 16
    : (tensor<?x256xbf16>, tensor<?x2xi32>)
      -> (tensor<?x256xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %a = moe.grouped_matmul %rows, %w, %re weight_scales %s16 offsets %off {weight_block = array<i64: 16, 128>}
    : (tensor<?x256xbf16>, tensor<8x128x256xi8>, tensor<?xi32>, tensor<8x8x2xf32>, tensor<9xi32>)
      -> tensor<?x128xbf16>
  %b = moe.grouped_matmul %rows, %w, %re weight_scales %s8 offsets %off {weight_block = array<i64: 128, 8>}
    : (tensor<?x256xbf16>, tensor<8x128x256xi8>, tensor<?xi32>, tensor<8x1x32xf32>, tensor<9xi32>)
      -> tensor<?x128xbf16>
  return %a, %b : tensor<?x128xbf16>, tensor<?x128xbf16>
}

// -----

// Tests that a GEMM whose N the block's columns do not divide (192 by 128, or by wgmma's 256)
// takes blocks of half the columns (64; 3 of them across N) rather than leaving the block form.
// CHECK-LABEL: func.func @narrower_blocks
// CHECK: %[[BYTES:.+]] = arith.constant 55296 : i32
// CHECK: gpu.launch blocks({{.+}}) in (%{{.+}} = %c3{{.*}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) threads({{.+}}) in (%{{.+}} = %c128{{.*}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) dynamic_shared_memory_size %[[BYTES]]
// CHECK: memref<3x64x72xbf16, #gpu.address_space<workgroup>>
// CHECK: memref<3x64x72xbf16, #gpu.address_space<workgroup>>
// WGMMA-LABEL: func.func @narrower_blocks
// WGMMA: gpu.launch blocks({{.+}}) in (%{{.+}} = %c3{{.*}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}})
// WGMMA: nvvm.wgmma.mma_async {{.+}} <m = 64, n = 64, k = 16>
func.func @narrower_blocks(%x: tensor<?x128xbf16>, %ids: tensor<?x2xi32>, %w: tensor<8x192x128xbf16>)
    -> tensor<?x192xbf16> {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8 row_tile = 16
    : (tensor<?x128xbf16>, tensor<?x2xi32>)
      -> (tensor<?x128xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %h = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<?x128xbf16>, tensor<8x192x128xbf16>, tensor<?xi32>, tensor<9xi32>) -> tensor<?x192xbf16>
  return %h : tensor<?x192xbf16>
}

// -----

// Tests that moe.activation and moe.combine become a kernel each that moves 16 bytes a thread at
// a time. The activation: a thread per 8 outputs (ceil(N * 64 / 8 / 256) blocks of 256), its
// gate's and up's 8 bf16 at (r, c) and (r, c + 64), silu(g) * u in f32 element by element. The
// combine: a thread per 8 outputs (16 a token's row of 128), its token's 2 expert rows loaded
// first (a negative slot reads row 0), then summed in order, each only where its slot is not
// negative.
// CHECK-LABEL: func.func @activation_and_combine
// CHECK: %[[ACT:.+]] = memref.alloc(%{{.+}}) : memref<?x64xbf16>
// CHECK: %[[RUNS:.+]] = arith.muli %{{.+}}, %c8{{.*}} : index
// CHECK: %[[BLOCKS:.+]] = arith.ceildivui %[[RUNS]], %c256{{.*}} : index
// CHECK: gpu.launch blocks({{.+}}) in (%{{.+}} = %[[BLOCKS]], %{{.+}} = %c1{{.*}}, %{{.+}} = %c1{{.*}}) threads({{.+}}) in (%{{.+}} = %c256{{.*}}, %{{.+}} = %c1{{.*}}, %{{.+}} = %c1{{.*}})
// CHECK: %[[GATE:.+]] = vector.load %{{.+}}[%[[ROW:.+]], %[[COL:.+]]] {alignment = 16 : i64} : {{.+}}, vector<8xbf16>
// CHECK: %[[UPCOL:.+]] = arith.addi %[[COL]], %c64{{.*}} : index
// CHECK: vector.load %{{.+}}[%[[ROW]], %[[UPCOL]]] {alignment = 16 : i64} : {{.+}}, vector<8xbf16>
// CHECK-COUNT-8: math.exp
// CHECK: %[[OUT:.+]] = arith.truncf %{{.+}} : vector<8xf32> to vector<8xbf16>
// CHECK: vector.store %[[OUT]], %[[ACT]][%[[ROW]], %[[COL]]] {alignment = 16 : i64}
// CHECK: %[[Y:.+]] = memref.alloc(%{{.+}}) : memref<?x128xbf16>
// CHECK: %[[CRUNS:.+]] = arith.muli %{{.+}}, %c16{{.*}} : index
// CHECK: %[[CBLOCKS:.+]] = arith.ceildivui %[[CRUNS]], %c256{{.*}} : index
// CHECK: gpu.launch blocks({{.+}}) in (%{{.+}} = %[[CBLOCKS]], %{{.+}} = %c1{{.*}}, %{{.+}} = %c1{{.*}}) threads({{.+}}) in (%{{.+}} = %c256{{.*}}, %{{.+}} = %c1{{.*}}, %{{.+}} = %c1{{.*}})
// CHECK: %[[T:.+]] = arith.divui %{{.+}}, %c16{{.*}} : index
// CHECK: %[[S0:.+]] = memref.load %{{.+}}[%[[T]], %c0{{.*}}]
// CHECK: %[[TAKEN0:.+]] = arith.cmpi sge, %[[S0]], %c0_i32
// CHECK: %[[SAFE0:.+]] = arith.select %[[TAKEN0]], %[[S0]], %c0_i32
// CHECK: %[[ROW0:.+]] = arith.index_cast %[[SAFE0]]
// CHECK: vector.load %{{.+}}[%[[ROW0]], %{{.+}}] {alignment = 16 : i64} : {{.+}}, vector<8xbf16>
// CHECK: %[[S1:.+]] = memref.load %{{.+}}[%[[T]], %c1{{.*}}]
// CHECK: vector.load {{.+}} : {{.+}}, vector<8xbf16>
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: arith.select %[[TAKEN0]]
// CHECK: arith.select
// CHECK: vector.store %{{.+}}, %[[Y]][%[[T]], %{{.+}}] {alignment = 16 : i64} : memref<?x128xbf16>, vector<8xbf16>
func.func @activation_and_combine(%h: tensor<?x128xbf16>, %out: tensor<?x128xbf16>,
                                  %slot: tensor<?x2xi32>, %w: tensor<?x2xf32>)
    -> (tensor<?x64xbf16>, tensor<?x128xbf16>) {
  %a = moe.activation %h kind swiglu : (tensor<?x128xbf16>) -> tensor<?x64xbf16>
  %y = moe.combine %out, %slot, %w
    : (tensor<?x128xbf16>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x128xbf16>
  return %a, %y : tensor<?x64xbf16>, tensor<?x128xbf16>
}

// -----

// Tests that with fuse-swiglu a SwiGLU of a grouped GEMM goes into its wgmma prefill blocks: the
// result is [N, I]; a block of 128 columns stages gate rows col0 / 2 + r (r < 64) and the
// matching up rows 64 further (I = 128), and its epilogue stores silu(gate) * up (n8 tiles j and
// j + 8: 32 exponentials a thread) to 64 columns from col0 / 2. The decode form writes the
// [N, 2I] GEMM output, then the activation kernel runs. Without the option, the GEMM and the
// activation stay apart.
// FUSED-LABEL: func.func @fused_swiglu
// FUSED: %[[H:.+]] = memref.alloc(%{{.+}}) : memref<?x256xbf16>
// FUSED: %[[ACT:.+]] = memref.alloc(%{{.+}}) : memref<?x128xbf16>
// FUSED: scf.if
// FUSED: gpu.launch
// FUSED: } else {
// FUSED: memref.store {{.+}}, %[[H]]
// FUSED: gpu.launch
// FUSED-COUNT-8: math.exp
// FUSED: vector.store %{{.+}}, %[[ACT]]
// FUSED: } else {
// FUSED: gpu.launch {{.+}} threads({{.+}}) in (%{{.+}} = %c256{{.*}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) dynamic_shared_memory_size
// FUSED: %[[HALF0:.+]] = arith.divui %{{.+}}, %c2{{.*}} : index
// FUSED: %[[GATE:.+]] = arith.addi %[[HALF0]], %[[R:.+]] : index
// FUSED: %[[UP:.+]] = arith.addi %[[GATE]], %c64{{.*}} : index
// FUSED: %[[FIRST:.+]] = arith.cmpi ult, %[[R]], %c64{{.*}} : index
// FUSED: arith.select %[[FIRST]], %[[GATE]], %[[UP]] : index
// FUSED: nvvm.wgmma.mma_async
// FUSED-COUNT-32: math.exp
// FUSED: vector.store {{.+}}, %[[ACT]]
// FUSED-NOT: moe.activation
// FUSED: return
// CHECK-LABEL: func.func @fused_swiglu
// CHECK: memref.alloc(%{{.+}}) : memref<?x256xbf16>
// CHECK: gpu.launch
// CHECK: %[[APART:.+]] = memref.alloc(%{{.+}}) : memref<?x128xbf16>
// CHECK-COUNT-8: math.exp
// CHECK: vector.store %{{.+}}, %[[APART]]
func.func @fused_swiglu(%x: tensor<?x128xbf16>, %ids: tensor<?x2xi32>, %w: tensor<8x256x128xbf16>)
    -> tensor<?x128xbf16> {
  %rows, %re, %slot, %off = moe.dispatch %x, %ids num_experts = 8 row_tile = 16
    : (tensor<?x128xbf16>, tensor<?x2xi32>)
      -> (tensor<?x128xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<9xi32>)
  %h = moe.grouped_matmul %rows, %w, %re offsets %off
    : (tensor<?x128xbf16>, tensor<8x256x128xbf16>, tensor<?xi32>, tensor<9xi32>) -> tensor<?x256xbf16>
  %a = moe.activation %h kind swiglu : (tensor<?x256xbf16>) -> tensor<?x128xbf16>
  return %a : tensor<?x128xbf16>
}

// -----

// Tests that a combine whose only use adds the shared expert's output is one kernel: the sum
// starts from the addend's 8 values (loaded with the expert rows), the add goes, and the kernel
// comes where the add was (after the shared expert's output, here a fill).
// CHECK-LABEL: func.func @combine_and_shared
// CHECK: %[[SHARED:.+]] = linalg.fill
// CHECK: %[[ADDEND:.+]] = bufferization.to_buffer %[[SHARED]]
// CHECK: %[[Y:.+]] = memref.alloc(%{{.+}}) : memref<?x128xbf16>
// CHECK: gpu.launch
// CHECK-COUNT-2: vector.load {{.+}} vector<8xbf16>
// CHECK: %[[A:.+]] = vector.load %[[ADDEND]][%{{.+}}, %{{.+}}] {alignment = 16 : i64} : {{.+}}, vector<8xbf16>
// CHECK: %[[START:.+]] = arith.extf %[[A]] : vector<8xbf16> to vector<8xf32>
// CHECK: %[[P:.+]] = arith.mulf
// CHECK: arith.addf %[[START]], %[[P]]
// CHECK: vector.store %{{.+}}, %[[Y]]
// CHECK-NOT: linalg.add
// CHECK: return
func.func @combine_and_shared(%out: tensor<?x128xbf16>, %slot: tensor<?x2xi32>,
                              %w: tensor<?x2xf32>) -> tensor<?x128xbf16> {
  %y = moe.combine %out, %slot, %w
    : (tensor<?x128xbf16>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x128xbf16>
  %c0 = arith.constant 0 : index
  %t = tensor.dim %slot, %c0 : tensor<?x2xi32>
  %one = arith.constant 1.0 : bf16
  %empty = tensor.empty(%t) : tensor<?x128xbf16>
  %shared = linalg.fill ins(%one : bf16) outs(%empty : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  %init = tensor.empty(%t) : tensor<?x128xbf16>
  %sum = linalg.add ins(%y, %shared : tensor<?x128xbf16>, tensor<?x128xbf16>)
                    outs(%init : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return %sum : tensor<?x128xbf16>
}

// -----

// Tests that a combine that is a linalg.add's init (which the add does not read) is no addend:
// the add stays.
// CHECK-LABEL: func.func @combine_as_init
// CHECK: gpu.launch
// CHECK: linalg.add ins(%{{.+}}, %{{.+}} : tensor<?x128xbf16>, tensor<?x128xbf16>)
func.func @combine_as_init(%out: tensor<?x128xbf16>, %slot: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                           %a: tensor<?x128xbf16>, %b: tensor<?x128xbf16>) -> tensor<?x128xbf16> {
  %y = moe.combine %out, %slot, %w
    : (tensor<?x128xbf16>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x128xbf16>
  %sum = linalg.add ins(%a, %b : tensor<?x128xbf16>, tensor<?x128xbf16>)
                    outs(%y : tensor<?x128xbf16>) -> tensor<?x128xbf16>
  return %sum : tensor<?x128xbf16>
}
