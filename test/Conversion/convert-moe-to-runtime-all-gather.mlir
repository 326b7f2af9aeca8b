// RUN: moe-opt %s -split-input-file --convert-moe-to-runtime="into-buffers=true all-gather-slots=true" | FileCheck %s --implicit-check-not=moe.ep
// RUN: not moe-opt %s --convert-moe-to-runtime=all-gather-slots=true 2>&1 | FileCheck %s --check-prefix=NOINTO

// Tests that a decode-layout dispatch (slots = 4, ep 2) goes by all-gather: the runtime fills
// ranks x slots rows with global ids, a linalg op maps them to this rank's experts (rank * E/ep
// onward, -1 and weight 0 elsewhere); the combine gets its blocks back and sums this rank's T
// tokens' rows over the ranks (the reduction dimension) in f32, rounded once to bf16.
// CHECK-DAG: func.func private @moert_ep_gather_into_bf16(memref<?x?xbf16>, memref<?x?xi32>, memref<?x?xf32>, memref<?xi32>, memref<?xi64>, memref<?x?xbf16>, memref<?x?xi32>, memref<?x?xf32>, !llvm.ptr) -> i64 attributes {llvm.emit_c_interface}
// CHECK-DAG: func.func private @moert_ep_return_into_bf16(memref<?x?xbf16>, i64, memref<?x?xbf16>, !llvm.ptr) attributes {llvm.emit_c_interface}
// CHECK-DAG: func.func private @moert_rank() -> i32
// CHECK-DAG: #[[ID:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[BLOCKS:.+]] = affine_map<(d0, d1, d2) -> (d2, d0, d1)>
// NOINTO: convert-moe-to-runtime: all-gather-slots and pack-in-layer fill the layer's buffers: they need into-buffers
// CHECK-LABEL: func.func @decode
// CHECK: %[[X:.+]] = bufferization.to_buffer %{{.+}} read_only : tensor<?x?xbf16> to memref<?x?xbf16>
// CHECK: arith.constant dense<[8, 4, 4, 0, 2, 0, 0, 0, 0, 0, 0, {{-?[1-9][0-9]*}}]> : tensor<12xi64>
// CHECK: %[[RX:.+]] = memref.alloc() : memref<8x64xbf16>
// CHECK: %[[RI:.+]] = memref.alloc() : memref<8x2xi32>
// CHECK: %[[RW:.+]] = memref.alloc() : memref<8x2xf32>
// CHECK: %[[H:.+]] = call @moert_ep_gather_into_bf16({{.+}}) {moe.gather_slots = 4 : i64, moe.stream_operand}
// CHECK: %[[GI:.+]] = bufferization.to_tensor %[[RI]] restrict writable
// CHECK: %[[GW:.+]] = bufferization.to_tensor %[[RW]] restrict writable
// CHECK: %[[RANK:.+]] = call @moert_rank() : () -> i32
// CHECK: %[[E:.+]] = tensor.dim %{{.+}}, %c0 : tensor<8xi32>
// CHECK: %[[L:.+]] = arith.divui %[[E]], %c2 : index
// CHECK: %[[LI:.+]] = arith.index_cast %[[L]] : index to i32
// CHECK: %[[FIRST:.+]] = arith.muli %[[RANK]], %[[LI]] : i32
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[ID]], #[[ID]], #[[ID]]], iterator_types = ["parallel", "parallel"]} ins(%[[GI]], %[[GW]] :
// CHECK: ^bb0(%[[ID_:.+]]: i32, %[[WT:.+]]: f32,
// CHECK: %[[OFF:.+]] = arith.subi %[[ID_]], %[[FIRST]] : i32
// CHECK: %[[GE:.+]] = arith.cmpi sge, %[[OFF]], %{{.+}} : i32
// CHECK: %[[LT:.+]] = arith.cmpi slt, %[[OFF]], %[[LI]] : i32
// CHECK: %[[MINE:.+]] = arith.andi %[[GE]], %[[LT]] : i1
// CHECK: %[[NEW:.+]] = arith.select %[[MINE]], %[[OFF]], %c-1_i32 : i32
// CHECK: %[[NW:.+]] = arith.select %[[MINE]], %[[WT]], %{{.+}} : f32
// CHECK: linalg.yield %[[NEW]], %[[NW]]
// CHECK: %[[BACK:.+]] = memref.alloc() : memref<8x64xbf16>
// CHECK: call @moert_ep_return_into_bf16(%{{.+}}, %[[H]], %{{.+}}, %{{.+}}) {moe.stream_operand}
// CHECK: %[[BT:.+]] = bufferization.to_tensor %[[BACK]] restrict writable
// CHECK: %[[SPLIT:.+]] = tensor.expand_shape %[[BT]] {{\[}}[0, 1], [2]] output_shape [2, 4, 64] : tensor<8x64xbf16> into tensor<2x4x64xbf16>
// CHECK: %[[T:.+]] = memref.dim %[[X]], %{{.+}} : memref<?x?xbf16>
// CHECK: %[[MINEROWS:.+]] = tensor.extract_slice %[[SPLIT]][0, 0, 0] [2, %[[T]], 64] [1, 1, 1]
// CHECK: %[[ZERO:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<?x64xf32>)
// CHECK: %[[SUM:.+]] = linalg.generic {indexing_maps = [#[[BLOCKS]], #{{.+}}], iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[MINEROWS]] : tensor<2x?x64xbf16>) outs(%[[ZERO]] : tensor<?x64xf32>)
// CHECK: arith.extf
// CHECK: arith.addf
// CHECK: %[[Y:.+]] = linalg.generic {{.+}} ins(%[[SUM]] : tensor<?x64xf32>) outs(%{{.+}} : tensor<?x64xbf16>)
// CHECK: arith.truncf
// CHECK: return %[[Y]]
func.func @decode(%x: tensor<?x64xbf16>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                  %er: tensor<8xi32>) -> tensor<?x64xbf16> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8 ep = 2 max_tokens = 4
      slots = 4
    : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<8x64xbf16>, tensor<8x2xi32>, tensor<8x2xf32>, i64)
  %p = arith.mulf %r, %r : tensor<8x64xbf16>
  %y = moe.ep_combine %p, %h : (tensor<8x64xbf16>, i64) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// Tests that a dispatch without slots (the prefill layout) keeps the packed exchange.
// CHECK-LABEL: func.func @prefill
// CHECK: call @moert_ep_dispatch_into_f32
// CHECK: call @moert_ep_combine_into_f32
func.func @prefill(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                   %er: tensor<8xi32>) -> tensor<?x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 32 ep = 2 max_tokens = 16
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<32x64xf32>, tensor<32x2xi32>, tensor<32x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<32x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that FP8 rows go by all-gather quantized by the layer (UE8M0, groups of 32): the amax of
// each group's finite elements (a reduction), its exponent byte, the E4M3 codes of x / 2^(byte -
// 127); codes and exponent bytes travel, and the received ones are dequantized to bf16.
// CHECK-DAG: func.func private @moert_ep_gather_fp8_into_bf16(memref<?x?xi8>, memref<?x?xi8>, memref<?x?xi32>, memref<?x?xf32>, memref<?xi32>, memref<?xi64>, memref<?x?xi8>, memref<?x?xi8>, memref<?x?xi32>, memref<?x?xf32>, !llvm.ptr) -> i64 attributes {llvm.emit_c_interface}
// CHECK-LABEL: func.func @decode_fp8
// CHECK: %[[SPLIT:.+]] = tensor.expand_shape %{{.+}} {{\[}}[0], [1, 2]] output_shape [%{{.+}}, 2, 32] : tensor<?x64xbf16> into tensor<?x2x32xbf16>
// CHECK: %[[AMAX:.+]] = linalg.generic {{.+}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[SPLIT]] : tensor<?x2x32xbf16>) outs(%{{.+}} : tensor<?x2xf32>)
// CHECK: arith.cmpi ult, %{{.+}}, %c2139095040_i32
// CHECK: %[[BYTES:.+]] = linalg.generic {{.+}} ins(%[[AMAX]] : tensor<?x2xf32>) outs(%{{.+}} : tensor<?x2xi8>)
// CHECK: arith.maxsi
// CHECK: %[[CODES:.+]] = linalg.generic {{.+}} ins(%[[SPLIT]], %[[BYTES]] : tensor<?x2x32xbf16>, tensor<?x2xi8>) outs(%{{.+}} : tensor<?x2x32xi8>)
// CHECK: arith.divf
// CHECK: arith.trunci %{{.+}} : i32 to i8
// CHECK: tensor.collapse_shape %[[CODES]] {{\[}}[0], [1, 2]] : tensor<?x2x32xi8> into tensor<?x64xi8>
// CHECK: arith.constant dense<[8, 4, 4, 2, 2, 0, 0, 0, 0, 0, 0, {{-?[1-9][0-9]*}}]> : tensor<12xi64>
// CHECK: %[[RQ:.+]] = memref.alloc() : memref<8x64xi8>
// CHECK: %[[RS:.+]] = memref.alloc() : memref<8x2xi8>
// CHECK: %[[H:.+]] = call @moert_ep_gather_fp8_into_bf16({{.+}}) {moe.gather_slots = 4 : i64, moe.stream_operand}
// CHECK: %[[Q:.+]] = bufferization.to_tensor %[[RQ]] restrict writable
// CHECK: %[[S:.+]] = bufferization.to_tensor %[[RS]] restrict writable
// CHECK: %[[QSPLIT:.+]] = tensor.expand_shape %[[Q]] {{\[}}[0], [1, 2]] output_shape [8, 2, 32]
// CHECK: %[[ROWS:.+]] = linalg.generic {{.+}} ins(%[[QSPLIT]], %[[S]] : tensor<8x2x32xi8>, tensor<8x2xi8>) outs(%{{.+}} : tensor<8x2x32xbf16>)
// CHECK: arith.truncf %{{.+}} : f32 to bf16
// CHECK: tensor.collapse_shape %[[ROWS]] {{\[}}[0], [1, 2]] : tensor<8x2x32xbf16> into tensor<8x64xbf16>
// CHECK: call @moert_rank()
// CHECK: call @moert_ep_return_into_bf16(%{{.+}}, %[[H]], %{{.+}}, %{{.+}}) {moe.stream_operand}
func.func @decode_fp8(%x: tensor<?x64xbf16>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                      %er: tensor<8xi32>) -> tensor<?x64xbf16> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8 ep = 2 max_tokens = 4
      slots = 4 quantization fp8_e4m3_g32_ue8m0
    : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<8x64xbf16>, tensor<8x2xi32>, tensor<8x2xf32>, i64)
  %p = arith.mulf %r, %r : tensor<8x64xbf16>
  %y = moe.ep_combine %p, %h : (tensor<8x64xbf16>, i64) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// Tests that FP8 codes kept for the experts' GEMM (received_scales) are not dequantized: the
// received codes replace the rows and the UE8M0 exponent bytes become the f32 scales 2^(b - 127).
// CHECK-LABEL: func.func @decode_codes
// CHECK: %[[RQ:.+]] = memref.alloc() : memref<8x64xi8>
// CHECK: %[[RS:.+]] = memref.alloc() : memref<8x2xi8>
// CHECK: call @moert_ep_gather_fp8_into_bf16(
// CHECK: %[[Q:.+]] = bufferization.to_tensor %[[RQ]] restrict writable
// CHECK: %[[S:.+]] = bufferization.to_tensor %[[RS]] restrict writable
// CHECK-NOT: arith.truncf
// CHECK: %[[F:.+]] = linalg.generic {{.+}} ins(%[[S]] : tensor<8x2xi8>) outs(%{{.+}} : tensor<8x2xf32>)
// CHECK: arith.shli
// CHECK: arith.sitofp %[[Q]] : tensor<8x64xi8> to tensor<8x64xbf16>
// CHECK: arith.addf %[[F]], %[[F]] : tensor<8x2xf32>
func.func @decode_codes(%x: tensor<?x64xbf16>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                        %er: tensor<8xi32>) -> (tensor<?x64xbf16>, tensor<8x2xf32>) {
  %r, %s, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 8 ep = 2 max_tokens = 4
      slots = 4 quantization fp8_e4m3_g32_ue8m0
    : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8xi32>)
      -> (tensor<8x64xi8>, tensor<8x2xf32>, tensor<8x2xi32>, tensor<8x2xf32>, i64)
  %p = arith.sitofp %r : tensor<8x64xi8> to tensor<8x64xbf16>
  %s2 = arith.addf %s, %s : tensor<8x2xf32>
  %y = moe.ep_combine %p, %h : (tensor<8x64xbf16>, i64) -> tensor<?x64xbf16>
  return %y, %s2 : tensor<?x64xbf16>, tensor<8x2xf32>
}

// -----

// Tests that with a placement the layer chooses each choice's replica: each slot's cumulative share
// of its expert (a loop over the slots), then per gathered choice the first replica whose
// cumulative share passes the choice's golden-ratio point, kept where it is one of this rank's
// 5 slots. The plan states the 8 logical experts (its 10th field).
// CHECK-DAG: func.func private @moert_ep_gather_placed_into_f32(memref<?x?xf32>, memref<?x?xi32>, memref<?x?xf32>, memref<?xi32>, memref<?xf32>, memref<?xi64>, memref<?x?xf32>, memref<?x?xi32>, memref<?x?xf32>, !llvm.ptr) -> i64 attributes {llvm.emit_c_interface}
// CHECK-LABEL: func.func @decode_placed
// CHECK: arith.constant dense<[8, 4, 4, 0, 2, 0, 0, 0, 0, 8, 0, {{-?[1-9][0-9]*}}]> : tensor<12xi64>
// CHECK: %[[H:.+]] = call @moert_ep_gather_placed_into_f32({{.+}}) {moe.gather_slots = 4 : i64, moe.stream_operand}
// CHECK: %[[RANK:.+]] = call @moert_rank() : () -> i32
// CHECK: %[[UPTO:.+]] = linalg.generic {{.+}} ins(%{{.+}} : tensor<10xi32>) outs(%{{.+}} : tensor<10xf32>)
// CHECK: scf.for
// CHECK: arith.divf
// CHECK: linalg.generic {{.+}} ins(%{{.+}}, %{{.+}} : tensor<8x2xi32>, tensor<8x2xf32>)
// CHECK: linalg.index 0
// CHECK: arith.constant -1640531527 : i32
// CHECK: scf.for {{.+}} iter_args
// CHECK: tensor.extract %[[UPTO]]
// CHECK: call @moert_ep_return_into_f32(%{{.+}}, %[[H]], %{{.+}}, %{{.+}}) {moe.stream_operand}
func.func @decode_placed(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                         %p: tensor<10xi32>, %s: tensor<10xf32>) -> tensor<?x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w placement(%p, %s) capacity = 8 ep = 2
      max_tokens = 4 slots = 4 experts = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<10xi32>, tensor<10xf32>)
      -> (tensor<8x64xf32>, tensor<8x2xi32>, tensor<8x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<8x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that with replicas chosen per batch the plan says so (its last field 1) and the gathered
// ids are slots the runtime chose: this rank keeps those of its 5 slots (slot - rank * 5), with no
// walk over the shares.
// CHECK-LABEL: func.func @decode_per_batch
// CHECK: arith.constant dense<[8, 4, 4, 0, 2, 0, 0, 0, 0, 8, 1, {{-?[1-9][0-9]*}}]> : tensor<12xi64>
// CHECK: %[[H:.+]] = call @moert_ep_gather_placed_into_f32({{.+}}) {moe.gather_slots = 4 : i64, moe.stream_operand}
// CHECK: %[[RANK:.+]] = call @moert_rank() : () -> i32
// CHECK: %[[SLOTS:.+]] = tensor.dim %{{.+}}, %{{.+}} : tensor<10xi32>
// CHECK: %[[PER:.+]] = arith.divui %[[SLOTS]], %c2
// CHECK: %[[FIRST:.+]] = arith.muli %[[RANK]], %{{.+}} : i32
// CHECK: linalg.generic {{.+}} ins(%{{.+}}, %{{.+}} : tensor<8x2xi32>, tensor<8x2xf32>)
// CHECK-NOT: scf.for
// CHECK: arith.subi %{{.+}}, %[[FIRST]]
// CHECK: call @moert_ep_return_into_f32(%{{.+}}, %[[H]], %{{.+}}, %{{.+}}) {moe.stream_operand}
func.func @decode_per_batch(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %w: tensor<?x2xf32>,
                            %p: tensor<10xi32>, %s: tensor<10xf32>) -> tensor<?x64xf32> {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w placement(%p, %s) per_batch_replicas
      capacity = 8 ep = 2 max_tokens = 4 slots = 4 experts = 8
    : (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<10xi32>, tensor<10xf32>)
      -> (tensor<8x64xf32>, tensor<8x2xi32>, tensor<8x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<8x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
