// RUN: moe-opt %s -split-input-file --convert-moe-to-runtime=into-buffers=true | FileCheck %s --implicit-check-not=moe.ep
// RUN: not moe-opt %s -split-input-file --convert-moe-to-runtime 2>&1 | FileCheck %s --check-prefix=NOTINTO

// Tests that with into-buffers the dispatch reads its inputs as buffers, writes the received
// rows into buffers of the static capacity that the layer allocates, takes a (null) stream
// operand, and returns only the handle; the combine writes the tokens' rows (x's count)
// into a buffer the same way.
// CHECK-DAG: func.func private @moert_ep_dispatch_into_bf16(memref<?x?xbf16>, memref<?x?xi32>, memref<?x?xf32>, memref<?xi32>, memref<?xi64>, memref<?x?xbf16>, memref<?x?xi32>, memref<?x?xf32>, !llvm.ptr) -> i64 attributes {llvm.emit_c_interface}
// CHECK-DAG: func.func private @moert_ep_combine_into_bf16(memref<?x?xbf16>, i64, memref<?x?xbf16>, !llvm.ptr) attributes {llvm.emit_c_interface}
// CHECK-LABEL: func.func @capacity_rows
// CHECK: %[[X:.+]] = bufferization.to_buffer %{{.+}} read_only : tensor<?x?xbf16> to memref<?x?xbf16>
// CHECK: %[[RX:.+]] = memref.alloc() : memref<32x64xbf16>
// CHECK: %[[RXC:.+]] = memref.cast %[[RX]] : memref<32x64xbf16> to memref<?x?xbf16>
// CHECK: %[[RI:.+]] = memref.alloc() : memref<32x2xi32>
// CHECK: %[[RW:.+]] = memref.alloc() : memref<32x2xf32>
// CHECK: %[[NULL:.+]] = llvm.mlir.zero : !llvm.ptr
// CHECK: %[[H:.+]] = call @moert_ep_dispatch_into_bf16(%[[X]], %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %[[RXC]], %{{.+}}, %{{.+}}, %[[NULL]]) {moe.stream_operand}
// CHECK: bufferization.to_tensor %[[RX]] restrict writable : memref<32x64xbf16> to tensor<32x64xbf16>
// CHECK: %[[T:.+]] = memref.dim %[[X]], %c0
// CHECK: %[[Y:.+]] = memref.alloc(%[[T]]) : memref<?x64xbf16>
// CHECK: call @moert_ep_combine_into_bf16(%{{.+}}, %[[H]], %{{.+}}, %{{.+}}) {moe.stream_operand}
// CHECK: %[[YT:.+]] = bufferization.to_tensor %[[Y]] restrict writable
// CHECK: return %[[YT]]
// NOTINTO: static received rows without slots are filled into buffers (into-buffers)
func.func @capacity_rows(%x: tensor<?x64xbf16>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                         %er: tensor<8xi32>) -> tensor<?x64xbf16> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 32 ep = 2 max_tokens = 16
    : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<32x64xbf16>, tensor<32x2xi32>, tensor<32x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<32x64xbf16>, i64) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// Tests that FP8 codes kept for the experts' GEMM (received_scales) are filled into buffers of
// codes (i8) and f32 scales by the FP8 entry.
// CHECK-DAG: func.func private @moert_ep_dispatch_fp8_into_f32(memref<?x?xf32>, memref<?x?xi32>, memref<?x?xf32>, memref<?xi32>, memref<?xi64>, memref<?x?xi8>, memref<?x?xf32>, memref<?x?xi32>, memref<?x?xf32>, !llvm.ptr) -> i64 attributes {llvm.emit_c_interface}
// CHECK-LABEL: func.func @fp8_codes
// CHECK: %[[RC:.+]] = memref.alloc() : memref<32x128xi8>
// CHECK: %[[RS:.+]] = memref.alloc() : memref<32x1xf32>
// CHECK: call @moert_ep_dispatch_fp8_into_f32({{.+}}) {moe.stream_operand}
// CHECK: %[[C:.+]] = bufferization.to_tensor %[[RC]] restrict writable
// CHECK: %[[S:.+]] = bufferization.to_tensor %[[RS]] restrict writable
// CHECK: arith.sitofp %[[C]] : tensor<32x128xi8> to tensor<32x128xf32>
// CHECK: arith.addf %[[S]], %[[S]] : tensor<32x1xf32>
func.func @fp8_codes(%x: tensor<?x128xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                     %er: tensor<8xi32>) -> (tensor<?x128xf32>, tensor<32x1xf32>) {
  %r, %s, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 32 ep = 2 max_tokens = 16
      quantization fp8_e4m3_g128
    : (tensor<?x128xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<32x128xi8>, tensor<32x1xf32>, tensor<32x2xi32>, tensor<32x2xf32>, i64)
  %p = arith.sitofp %r : tensor<32x128xi8> to tensor<32x128xf32>
  %s2 = arith.addf %s, %s : tensor<32x1xf32>
  %y = moe.ep_combine %p, %h : (tensor<32x128xf32>, i64) -> tensor<?x128xf32>
  return %y, %s2 : tensor<?x128xf32>, tensor<32x1xf32>
}

// -----

// Tests that a placement passes phys_to_log and replica_share to the placed entry.
// CHECK-LABEL: func.func @placed
// CHECK: call @moert_ep_dispatch_placed_into_f32(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}) {moe.stream_operand} : (memref<?x?xf32>, memref<?x?xi32>, memref<?x?xf32>, memref<?xi32>, memref<?xf32>, memref<?xi64>,
func.func @placed(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                  %p: tensor<10xi32>, %s: tensor<10xf32>) -> tensor<?x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w placement(%p, %s) capacity = 8 ep = 2
      max_tokens = 4 slots = 4
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<10xi32>, tensor<10xf32>)
      -> (tensor<8x64xf32>, tensor<8x2xi32>, tensor<8x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<8x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that the tensor-parallel gather writes the full tensor's rows into a buffer the layer
// allocates, with the (null) stream operand.
// CHECK-LABEL: func.func @tp_gather
// CHECK: %[[T:.+]] = tensor.dim %{{.+}}, %c0 : tensor<?x64xbf16>
// CHECK: %[[Y:.+]] = memref.alloc(%[[T]]) : memref<?x64xbf16>
// CHECK: %[[N:.+]] = arith.index_cast %[[T]] : index to i64
// CHECK: %[[TP:.+]] = arith.constant 2 : i64
// CHECK: call @moert_tp_gather_into_bf16(%{{.+}}, %[[N]], %[[TP]], %{{.+}}, %{{.+}}) {moe.stream_operand}
// CHECK: bufferization.to_tensor %[[Y]] restrict writable
func.func @tp_gather(%slice: tensor<?x64xbf16>, %x: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  %y = moe.tp_gather %slice, %x tp = 2 : (tensor<?x64xbf16>, tensor<?x64xbf16>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}
