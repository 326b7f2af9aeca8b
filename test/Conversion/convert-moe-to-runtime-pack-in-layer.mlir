// RUN: moe-opt %s -split-input-file --convert-moe-to-runtime="into-buffers=true pack-in-layer=true" | FileCheck %s --implicit-check-not=moe.ep
// RUN: not moe-opt %s --convert-moe-to-runtime=pack-in-layer=true 2>&1 | FileCheck %s --check-prefix=NOINTO

// Tests that a prefill dispatch (no slots; ep 2, 8 experts, 4 a rank) is packed by the layer:
// each choice's destination rank (expert / 4; -1 where masked, out of range, or where an earlier
// choice of the token has the same rank), two moe.dispatch ops over the 2 ranks that group the
// token rows and their route rows ([T, 2k]: the targets' bits, then the weights) by
// destination, the runtime moving rank p's block [offsets[p], offsets[p+1]) into the capacity's
// rows, and this rank's view of the received targets (-1 and weight 0 where not its expert).
// The combine gets the rows back in the send order and sums each token's rows by the row
// dispatch's slots with weight 1.
// CHECK-DAG: func.func private @moert_ep_send_packed_into_bf16(memref<?x?xbf16>, memref<?x?xf32>, memref<?xi32>, memref<?xi32>, memref<?xi64>, memref<?x?xbf16>, memref<?x?xf32>, !llvm.ptr) -> i64 attributes {llvm.emit_c_interface}
// CHECK-DAG: func.func private @moert_ep_return_packed_into_bf16(memref<?x?xbf16>, i64, memref<?x?xbf16>, !llvm.ptr) attributes {llvm.emit_c_interface}
// CHECK-DAG: func.func private @moert_rank() -> i32
// NOINTO: convert-moe-to-runtime: all-gather-slots and pack-in-layer fill the layer's buffers: they need into-buffers
// CHECK-LABEL: func.func @prefill
// CHECK-SAME: (%[[X:.+]]: tensor<?x64xbf16>, %[[IDS:.+]]: tensor<?x2xi32>, %[[W:.+]]: tensor<?x2xf32>, %[[ER:.+]]: tensor<8xi32>)
// CHECK: %[[E:.+]] = tensor.dim %[[ER]], %c0 : tensor<8xi32>
// CHECK: %[[PER:.+]] = arith.divui %[[E]], %c2 : index
// CHECK: %[[PERI:.+]] = arith.index_cast %[[PER]] : index to i32
// CHECK: %[[DEST:.+]] = linalg.generic {{.+}} ins(%[[IDS]] : tensor<?x2xi32>) outs(%{{.+}} : tensor<?x2xi32>)
// CHECK: arith.divsi %{{.+}}, %[[PERI]] : i32
// CHECK: scf.for
// CHECK: tensor.extract %[[IDS]]
// CHECK: arith.ori
// CHECK: %[[ROUTE:.+]] = linalg.generic {{.+}} outs(%{{.+}} : tensor<?x4xf32>)
// CHECK: arith.bitcast %{{.+}} : i32 to f32
// CHECK: %[[ROWS:[^,]+]], %{{[^,]+}}, %[[SLOT:[^,]+]], %[[OFFT:[^ ]+]] = moe.dispatch %[[X]], %[[DEST]] num_experts = 2 : (tensor<?x64xbf16>, tensor<?x2xi32>) -> (tensor<?x64xbf16>, tensor<?xi32>, tensor<?x2xi32>, tensor<3xi32>)
// CHECK: tensor.cast %[[ROWS]]
// CHECK: %[[SR:.+]] = bufferization.to_buffer %{{.+}} read_only
// CHECK: %[[SENTROUTE:[^,]+]], {{.+}} = moe.dispatch %[[ROUTE]], %[[DEST]] num_experts = 2 : (tensor<?x4xf32>, tensor<?x2xi32>) -> (tensor<?x4xf32>, tensor<?xi32>, tensor<?x2xi32>, tensor<3xi32>)
// CHECK: tensor.cast %[[SENTROUTE]]
// CHECK: %[[SRR:.+]] = bufferization.to_buffer %{{.+}} read_only
// CHECK: tensor.cast %[[OFFT]] : tensor<3xi32> to tensor<?xi32>
// CHECK: %[[OFF:.+]] = bufferization.to_buffer %{{.+}} read_only : tensor<?xi32> to memref<?xi32>
// CHECK: arith.constant dense<[32, 16, 0, 0, 2, 0, 0, 0, 0, 0, 0, {{-?[1-9][0-9]*}}]> : tensor<12xi64>
// CHECK: %[[RX:.+]] = memref.alloc() : memref<32x64xbf16>
// CHECK: %[[RR:.+]] = memref.alloc() : memref<32x4xf32>
// CHECK: %[[H:.+]] = call @moert_ep_send_packed_into_bf16(%[[SR]], %[[SRR]], %[[OFF]], {{.+}}) {moe.stream_operand}
// CHECK: %[[RRT:.+]] = bufferization.to_tensor %[[RR]] restrict writable
// CHECK: %[[SPLIT:.+]]:2 = linalg.generic {{.+}} outs(%{{.+}}, %{{.+}} : tensor<32x2xi32>, tensor<32x2xf32>)
// CHECK: tensor.extract %[[RRT]]
// CHECK: arith.bitcast %{{.+}} : f32 to i32
// CHECK: %[[RANK:.+]] = call @moert_rank() : () -> i32
// CHECK: linalg.generic {{.+}} ins(%[[SPLIT]]#0, %[[SPLIT]]#1 : tensor<32x2xi32>, tensor<32x2xf32>)
// CHECK: arith.subi
// CHECK: arith.select
// CHECK: %[[RXT:.+]] = bufferization.to_tensor %[[RX]] restrict writable
// CHECK: %[[P:.+]] = arith.mulf %[[RXT]], %[[RXT]] : tensor<32x64xbf16>
// CHECK: %[[N:.+]] = memref.dim %[[SR]], %c0
// CHECK: %[[BACK:.+]] = memref.alloc(%[[N]]) : memref<?x64xbf16>
// CHECK: call @moert_ep_return_packed_into_bf16(%{{.+}}, %[[H]], %{{.+}}, %{{.+}}) {moe.stream_operand}
// CHECK: %[[BT:.+]] = bufferization.to_tensor %[[BACK]] restrict writable
// CHECK: %[[ONES:.+]] = linalg.fill ins(%cst{{.*}} : f32) outs(%{{.+}} : tensor<?x2xf32>)
// CHECK: %[[Y:.+]] = moe.combine %[[BT]], %[[SLOT]], %[[ONES]] : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>) -> tensor<?x64xbf16>
// CHECK: return %[[Y]]
func.func @prefill(%x: tensor<?x64xbf16>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                   %er: tensor<8xi32>) -> tensor<?x64xbf16> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 32 ep = 2 max_tokens = 16
    : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<32x64xbf16>, tensor<32x2xi32>, tensor<32x2xf32>, i64)
  %p = arith.mulf %r, %r : tensor<32x64xbf16>
  %y = moe.ep_combine %p, %h : (tensor<32x64xbf16>, i64) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// Tests that with a placement the sender chooses each choice's replica (the shares' walk over
// the slots, n = t*k + j) and sends slots: their ranks are slot / (P / ep), and the receiver
// keeps the slots of its own.
// CHECK-LABEL: func.func @placed
// CHECK: scf.for
// CHECK: moe.dispatch %{{.+}}, %{{.+}} num_experts = 2 : (tensor<?x64xf32>, tensor<?x2xi32>)
// CHECK: call @moert_ep_send_packed_placed_into_f32(
// CHECK: call @moert_ep_return_packed_into_f32(
// CHECK: moe.combine
func.func @placed(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                  %p2l: tensor<6xi32>, %share: tensor<6xf32>) -> tensor<?x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w placement(%p2l, %share) capacity = 32 ep = 2
      max_tokens = 16
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<6xi32>, tensor<6xf32>)
      -> (tensor<32x64xf32>, tensor<32x2xi32>, tensor<32x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<32x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that with replicas chosen per batch the runtime chooses each choice's slot first
// (moert_ep_select_slots_into, into a buffer of the ids' shape) and the layer packs by those.
// CHECK-LABEL: func.func @per_batch
// CHECK: %[[SEL:.+]] = memref.alloc(%{{.+}}) : memref<?x2xi32>
// CHECK: arith.constant dense<[32, 16, 0, 0, 2, 0, 0, 0, 0, 0, 1, {{-?[1-9][0-9]*}}]> : tensor<12xi64>
// CHECK: call @moert_ep_select_slots_into({{.+}}) {moe.stream_operand}
// CHECK: %[[SLOTS:.+]] = bufferization.to_tensor %[[SEL]] restrict writable
// CHECK: linalg.generic {{.+}} ins(%[[SLOTS]] : tensor<?x2xi32>)
// CHECK: moe.dispatch %{{.+}}, %{{.+}} num_experts = 2 : (tensor<?x64xf32>, tensor<?x2xi32>)
// CHECK: call @moert_ep_send_packed_placed_into_f32(
func.func @per_batch(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                     %p2l: tensor<6xi32>, %share: tensor<6xf32>) -> tensor<?x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w placement(%p2l, %share) per_batch_replicas
      capacity = 32 ep = 2 max_tokens = 16
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<6xi32>, tensor<6xf32>)
      -> (tensor<32x64xf32>, tensor<32x2xi32>, tensor<32x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<32x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that FP8 rows (groups of 128, f32 scales) are quantized by the layer once per token and
// their codes and scales packed like the rows, then dequantized on receipt.
// CHECK-LABEL: func.func @fp8
// CHECK: moe.dispatch %{{.+}}, %[[FDEST:.+]] num_experts = 2 : (tensor<?x256xi8>, tensor<?x2xi32>)
// CHECK: moe.dispatch %{{.+}}, %[[FDEST]] num_experts = 2 : (tensor<?x2xf32>, tensor<?x2xi32>)
// CHECK: moe.dispatch %{{.+}}, %[[FDEST]] num_experts = 2 : (tensor<?x4xf32>, tensor<?x2xi32>)
// CHECK: %[[RC:.+]] = memref.alloc() : memref<32x256xi8>
// CHECK: %[[RS:.+]] = memref.alloc() : memref<32x2xf32>
// CHECK: call @moert_ep_send_packed_fp8_into_f32(
// CHECK: bufferization.to_tensor %[[RC]]
// CHECK: bufferization.to_tensor %[[RS]]
// CHECK: arith.mulf
// CHECK: call @moert_ep_return_packed_into_f32(
func.func @fp8(%x: tensor<?x256xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
               %er: tensor<8xi32>) -> tensor<?x256xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 32 ep = 2 max_tokens = 16
      quantization fp8_e4m3_g128
    : (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<32x256xf32>, tensor<32x2xi32>, tensor<32x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<32x256xf32>, i64) -> tensor<?x256xf32>
  return %y : tensor<?x256xf32>
}

// -----

// Tests that FP8 codes kept for the experts' GEMM (received_scales) are not dequantized: the
// received codes replace the rows and the received f32 scales (g128) the scales.
// CHECK-LABEL: func.func @codes
// CHECK: %[[RC:.+]] = memref.alloc() : memref<32x256xi8>
// CHECK: %[[RS:.+]] = memref.alloc() : memref<32x2xf32>
// CHECK: call @moert_ep_send_packed_fp8_into_f32(
// CHECK: %[[C:.+]] = bufferization.to_tensor %[[RC]] restrict
// CHECK: %[[S:.+]] = bufferization.to_tensor %[[RS]] restrict
// CHECK-NOT: arith.mulf
// CHECK: arith.sitofp %[[C]] : tensor<32x256xi8> to tensor<32x256xf32>
// CHECK: arith.addf %[[S]], %[[S]] : tensor<32x2xf32>
// CHECK: call @moert_ep_return_packed_into_f32(
func.func @codes(%x: tensor<?x256xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                 %er: tensor<8xi32>) -> (tensor<?x256xf32>, tensor<32x2xf32>) {
  %r, %s, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 32 ep = 2 max_tokens = 16
      quantization fp8_e4m3_g128
    : (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<32x256xi8>, tensor<32x2xf32>, tensor<32x2xi32>, tensor<32x2xf32>, i64)
  %p = arith.sitofp %r : tensor<32x256xi8> to tensor<32x256xf32>
  %s2 = arith.addf %s, %s : tensor<32x2xf32>
  %y = moe.ep_combine %p, %h : (tensor<32x256xf32>, i64) -> tensor<?x256xf32>
  return %y, %s2 : tensor<?x256xf32>, tensor<32x2xf32>
}

// -----

// Tests that a decode-layout dispatch (slots) is not packed by the layer.
// CHECK-LABEL: func.func @decode
// CHECK-NOT: moe.dispatch
// CHECK: call @moert_ep_dispatch_into_f32
func.func @decode(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                  %er: tensor<8xi32>) -> tensor<?x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8 ep = 2 max_tokens = 4
      slots = 4
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<8x64xf32>, tensor<8x2xi32>, tensor<8x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<8x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
