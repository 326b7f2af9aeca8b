// RUN: moe-opt %s -split-input-file --moe-check-entry-memrefs 2>/dev/null | FileCheck %s
// RUN: moe-opt %s -split-input-file --moe-check-entry-memrefs 2>&1 >/dev/null \
// RUN:   | FileCheck %s --check-prefix=WARN

// An exported layer's memref arguments take any descriptor; the entry
// asserts the one the body reads (static sizes, sizes >= 0, offset 0,
// row-major strides but where a size is <= 1, any strides when empty),
// then views it with the type the body reads (memref.reinterpret_cast). Arguments are named by moe.name, else by position.

// CHECK-LABEL: func.func @layer(
// CHECK-SAME: %[[X:[^:]+]]: memref<?x?xf32, strided<[?, ?], offset: ?>> {moe.name = "x"}
// CHECK-SAME: %[[W:[^:]+]]: memref<?x?x?xbf16, strided<[?, ?, ?], offset: ?>>
// CHECK-SAME: %[[N:[^:]+]]: i32)
// CHECK: %{{.+}}, %[[OFF:.+]], %[[SIZES:.+]]:2, %[[STRIDES:.+]]:2 = memref.extract_strided_metadata %[[X]]
// CHECK-DAG: %[[C0:.+]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.+]] = arith.constant 1 : index
// CHECK-DAG: %[[C64:.+]] = arith.constant 64 : index
// CHECK-DAG: arith.cmpi eq, %[[OFF]], %[[C0]]
// CHECK-DAG: arith.cmpi sge, %[[SIZES]]#0, %[[C0]]
// CHECK-DAG: arith.cmpi eq, %[[SIZES]]#1, %[[C64]]
// CHECK-DAG: arith.cmpi eq, %[[STRIDES]]#1, %[[C1]]
// CHECK-DAG: arith.cmpi sle, %[[SIZES]]#1, %[[C1]]
// CHECK-DAG: %[[EXTENT:.+]] = arith.maxsi %[[SIZES]]#1, %[[C1]]
// CHECK-DAG: %[[D1:.+]] = arith.muli %[[C1]], %[[EXTENT]]
// CHECK-DAG: arith.cmpi eq, %[[STRIDES]]#0, %[[D1]]
// CHECK-DAG: arith.cmpi sle, %[[SIZES]]#0, %[[C1]]
// CHECK-DAG: arith.cmpi eq, %[[SIZES]]#0, %[[C0]]
// CHECK: cf.assert %{{.+}}, "layer: x must be a dense row-major array of shape [?, 64] at offset 0 (a contiguous array; ? is any size >= 0)"
// CHECK: %[[XC:.+]] = memref.reinterpret_cast %[[X]] to offset: [0], sizes: [%[[SIZES]]#0, 64], strides: [64, 1] : memref<?x?xf32, strided<[?, ?], offset: ?>> to memref<?x64xf32>
// CHECK: memref.extract_strided_metadata %[[W]]
// CHECK: cf.assert %{{.+}}, "layer: argument 1 must be a dense row-major array of shape [2, 3, 64] at offset 0 (a contiguous array; ? is any size >= 0)"
// CHECK: %[[WC:.+]] = memref.reinterpret_cast %[[W]] to offset: [0], sizes: [2, 3, 64], strides: [192, 64, 1] : memref<?x?x?xbf16, strided<[?, ?, ?], offset: ?>> to memref<2x3x64xbf16>
// CHECK: memref.dim %[[XC]], %{{.+}} : memref<?x64xf32>
// CHECK: memref.load %[[WC]]
// CHECK: memref.load %[[XC]]
func.func @layer(%x: memref<?x64xf32> {moe.name = "x"}, %w: memref<2x3x64xbf16>, %n: i32)
    -> index attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %t = memref.dim %x, %c0 : memref<?x64xf32>
  %a = memref.load %w[%c0, %c0, %c0] : memref<2x3x64xbf16>
  %b = memref.load %x[%c0, %c0] : memref<?x64xf32>
  return %t : index
}

// Functions without a C entry, private ones and declarations keep their types.
// CHECK-LABEL: func.func @no_c_entry(%{{.+}}: memref<4xf32>)
// CHECK-NOT: cf.assert
func.func @no_c_entry(%a: memref<4xf32>) {
  return
}
// CHECK-LABEL: func.func private @inner(%{{.+}}: memref<4xf32>)
// CHECK-NOT: cf.assert
func.func private @inner(%a: memref<4xf32>) attributes {llvm.emit_c_interface} {
  return
}
// CHECK: func.func private @declared(memref<4xf32>)
func.func private @declared(memref<4xf32>) attributes {llvm.emit_c_interface}

// A call of a checked function (an entry calling its phase variants) passes
// the open type: a memref.cast to the more dynamic type.
// CHECK-LABEL: func.func @variant(
// CHECK-SAME: memref<?xf32, strided<[?], offset: ?>>
// CHECK: cf.assert %{{.+}}, "variant: argument 0 must be a dense row-major array of shape [8] at offset 0
func.func @variant(%a: memref<8xf32>) attributes {llvm.emit_c_interface} {
  return
}
// CHECK-LABEL: func.func @caller(
// CHECK: %[[A:.+]] = memref.reinterpret_cast
// CHECK: %[[OPEN:.+]] = memref.cast %[[A]] : memref<8xf32> to memref<?xf32, strided<[?], offset: ?>>
// CHECK: call @variant(%[[OPEN]])
func.func @caller(%a: memref<8xf32>) attributes {llvm.emit_c_interface} {
  call @variant(%a) : (memref<8xf32>) -> ()
  return
}

// -----

// A nested module's call of its own @f is not a call of the top-level @f.
// CHECK-LABEL: func.func @f(
// CHECK-SAME: memref<?xf32, strided<[?], offset: ?>>
// CHECK: module @inner
// CHECK: func.func @g(%[[A:.+]]: memref<4xf32>)
// CHECK-NEXT: call @f(%[[A]]) : (memref<4xf32>) -> ()
func.func @f(%a: memref<4xf32>) attributes {llvm.emit_c_interface} {
  return
}
module @inner {
  func.func private @f(%a: memref<4xf32>)
  func.func @g(%a: memref<4xf32>) {
    call @f(%a) : (memref<4xf32>) -> ()
    return
  }
}

// -----

// A function referred to otherwise than by calls keeps its type, with a warning.
// WARN: warning: moe-check-entry-memrefs: not checked, a symbol use other than a call refers to this function
// CHECK-LABEL: func.func @taken(%{{.+}}: memref<4xf32>)
// CHECK-NOT: cf.assert
func.func @taken(%a: memref<4xf32>) attributes {llvm.emit_c_interface} {
  return
}
func.func @h() -> ((memref<4xf32>) -> ()) {
  %c = func.constant @taken : (memref<4xf32>) -> ()
  return %c : (memref<4xf32>) -> ()
}
