// RUN: moe-opt %s -split-input-file --moe-cpu-pipeline \
// RUN:   | FileCheck %s --implicit-check-not=moe. --implicit-check-not=linalg. \
// RUN:       --implicit-check-not=tensor. --implicit-check-not=memref. \
// RUN:       --implicit-check-not=scf. --implicit-check-not=arith. \
// RUN:       --implicit-check-not=math. --implicit-check-not=func.func \
// RUN:       --implicit-check-not=unrealized_conversion_cast
// RUN: moe-opt %s -split-input-file --moe-cpu-pipeline=lower-to-llvm=false \
// RUN:   | FileCheck %s --check-prefix=LOOPS --implicit-check-not=moe. \
// RUN:       --implicit-check-not=linalg. --implicit-check-not=tensor. \
// RUN:       --implicit-check-not=llvm.func

// Tests that a softmax top-2 f32 layer with a C interface ends in llvm with an _mlir_ciface_ wrapper.
// CHECK-DAG: llvm.func @_mlir_memref_to_llvm_alloc(i64) -> !llvm.ptr
// CHECK-DAG: llvm.func @_mlir_memref_to_llvm_free(!llvm.ptr)
// CHECK-LABEL: llvm.func @qwen_layer(
// CHECK-SAME: %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: i64
// CHECK-SAME: -> !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
// CHECK-SAME: attributes {llvm.emit_c_interface}
// CHECK: llvm.call @_mlir_memref_to_llvm_alloc
// CHECK: llvm.intr.exp
// CHECK: llvm.call @_mlir_memref_to_llvm_free
// CHECK: llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_qwen_layer(
// CHECK-SAME: %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr)
// CHECK: llvm.call @qwen_layer(
// CHECK: llvm.store
// CHECK: llvm.return

// LOOPS-LABEL: func.func @qwen_layer(
// LOOPS-SAME: %[[X:[^:]+]]: memref<?x?xf32, strided<[?, ?], offset: ?>>, %{{[^:]+}}: memref<?x?xf32, strided<[?, ?], offset: ?>>, %{{[^:]+}}: memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>, %{{[^:]+}}: memref<?x?x?xf32, strided<[?, ?, ?], offset: ?>>) -> memref<?x16xf32>
// LOOPS: memref.extract_strided_metadata %[[X]]
// LOOPS: cf.assert %{{.+}}, "qwen_layer: argument 0 must be a dense row-major array of shape [?, 16] at offset 0
// LOOPS: memref.reinterpret_cast %[[X]] to offset: [0], sizes: [%{{.+}}, 16], strides: [16, 1]
// LOOPS: memref.alloc
// LOOPS: scf.for
// LOOPS: math.exp
// LOOPS: return %{{.+}} : memref<?x16xf32>
func.func @qwen_layer(%x: tensor<?x16xf32>, %wr: tensor<4x16xf32>,
                      %w13: tensor<4x8x16xf32>, %w2: tensor<4x16x4xf32>)
    -> tensor<?x16xf32> attributes {llvm.emit_c_interface} {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 2, normalize> activation swiglu
         layout <ep = 1, tp = 1>
       : (tensor<?x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>,
          tensor<4x16x4xf32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Tests that a DeepSeek-style bf16 layer with shared expert ends in llvm too.
// CHECK-LABEL: llvm.func @deepseek_layer(
// CHECK-SAME: attributes {llvm.emit_c_interface}
// CHECK: llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_deepseek_layer(
// CHECK: llvm.call @deepseek_layer(
// CHECK: llvm.return

// LOOPS-LABEL: func.func @deepseek_layer(
// LOOPS-SAME: memref<?x64xbf16>
// LOOPS: return %{{.+}} : memref<?x64xbf16>
func.func @deepseek_layer(%x: tensor<?x64xbf16>, %wr: tensor<32x64xbf16>,
                          %b: tensor<32xf32>, %w13: tensor<32x48x64xbf16>,
                          %w2: tensor<32x64x24xbf16>, %s13: tensor<48x64xbf16>,
                          %s2: tensor<64x24xbf16>) -> tensor<?x64xbf16>
    attributes {llvm.emit_c_interface} {
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

// Tests that a function without llvm.emit_c_interface gets no _mlir_ciface_ wrapper.
// CHECK-LABEL: llvm.func @plain_layer(
// CHECK-NOT: _mlir_ciface_
// CHECK: llvm.return

// LOOPS-LABEL: func.func @plain_layer(
func.func @plain_layer(%x: tensor<2x16xf32>, %wr: tensor<4x16xf32>,
                       %w13: tensor<4x8x16xf32>, %w2: tensor<4x16x4xf32>)
    -> tensor<2x16xf32> {
  %y = moe.layer %x router(%wr) experts(%w13, %w2)
         routing <softmax, top_k = 1> activation swiglu layout <ep = 1, tp = 1>
       : (tensor<2x16xf32>, tensor<4x16xf32>, tensor<4x8x16xf32>,
          tensor<4x16x4xf32>) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

// Tests that an ep = 4 layer calls the runtime's exchange through its C interface.
// CHECK-DAG: llvm.func @_mlir_ciface_moert_ep_dispatch_f32(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr)
// CHECK-DAG: llvm.func @_mlir_ciface_moert_ep_combine_f32(!llvm.ptr, !llvm.ptr, i64)
// CHECK-LABEL: llvm.func @ep_layer(
// CHECK: llvm.call @moert_ep_dispatch_f32(
// CHECK: llvm.call @moert_ep_combine_f32(
// CHECK: llvm.return

// LOOPS-LABEL: func.func @ep_layer(
// LOOPS: call @moert_ep_dispatch_f32(
// LOOPS: call @moert_ep_combine_f32(
func.func @ep_layer(%x: tensor<?x16xf32>, %wr: tensor<8x16xf32>,
                    %w13: tensor<2x8x16xf32>, %w2: tensor<2x16x4xf32>,
                    %er: tensor<8xi32>) -> tensor<?x16xf32>
    attributes {llvm.emit_c_interface} {
  %y = moe.layer %x router(%wr) experts(%w13, %w2) expert_rank(%er)
         routing <softmax, top_k = 2> activation swiglu layout <ep = 4, tp = 1>
         {max_tokens_per_rank = 16 : i64}
       : (tensor<?x16xf32>, tensor<8x16xf32>, tensor<2x8x16xf32>,
          tensor<2x16x4xf32>, tensor<8xi32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

// Tests that a static 0-token layer lowers (issue 9: the SwiGLU column slices of an empty tensor
// failed "offset 0 is out-of-bounds"); it computes an empty result.
// CHECK-LABEL: llvm.func @zero_tokens(
// CHECK: llvm.return
// LOOPS-LABEL: func.func @zero_tokens(
// LOOPS-SAME: -> memref<0x16xf32>
func.func @zero_tokens(%x: tensor<0x16xf32>, %wr: tensor<4x16xf32>, %b: tensor<4xf32>,
                       %w13: tensor<4x8x16xf32>, %w2: tensor<4x16x4xf32>,
                       %s13: tensor<6x16xf32>, %s2: tensor<16x3xf32>) -> tensor<0x16xf32> {
  %y = moe.layer %x router(%wr bias %b) experts(%w13, %w2) shared(%s13, %s2)
         routing <sigmoid, top_k = 2, n_group = 2, topk_group = 1, normalize, correction_bias>
         activation swiglu layout <ep = 1, tp = 1>
       : (tensor<0x16xf32>, tensor<4x16xf32>, tensor<4xf32>, tensor<4x8x16xf32>,
          tensor<4x16x4xf32>, tensor<6x16xf32>, tensor<16x3xf32>) -> tensor<0x16xf32>
  return %y : tensor<0x16xf32>
}
