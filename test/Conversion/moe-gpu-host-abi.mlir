// RUN: moe-opt %s -split-input-file --moe-gpu-host-abi -verify-diagnostics -allow-unregistered-dialect \
// RUN:   | FileCheck %s

// Tests that the returned buffer becomes a trailing out-parameter, every allocation a view of the
// trailing i8 workspace at 256-byte aligned offsets (a [T,4] f32 buffer then a static 17 x i32
// one), memref.copy a linalg.copy, and the stream a trailing !llvm.ptr; the entry checks the
// workspace's size first, and <entry>_workspace_bytes(T) recomputes it from T alone.
// CHECK-LABEL: func.func @entry(
// CHECK-SAME: %[[X:[^:]+]]: memref<?x8xf32>, %[[Y:[^:]+]]: memref<?x8xf32>, %[[WS:[^:]+]]: memref<?xi8>,
// CHECK-SAME: %{{[^:]+}}: !llvm.ptr {moe.gpu_stream}) attributes {llvm.emit_c_interface} {
// CHECK-DAG: %[[C0:.+]] = arith.constant 0 : index
// CHECK-DAG: %[[C255:.+]] = arith.constant 255 : index
// CHECK-DAG: %[[MASK:.+]] = arith.constant -256 : index
// CHECK: %[[T:.+]] = memref.dim %[[X]], %{{.+}}
// CHECK: %[[ROW:.+]] = arith.muli %{{.+}}, %[[T]]
// CHECK: %[[B0:.+]] = arith.muli %[[ROW]], %{{.+}}
// CHECK: %[[P0:.+]] = arith.addi %[[B0]], %[[C255]]
// CHECK: %[[A0:.+]] = arith.andi %[[P0]], %[[MASK]]
// CHECK: %[[OFF1:.+]] = arith.addi %[[C0]], %[[A0]]
// CHECK: %[[TOTAL:.+]] = arith.addi %[[OFF1]], %{{.+}}
// CHECK: %[[HAVE:.+]] = memref.dim %[[WS]], %{{.+}}
// CHECK: %[[FITS:.+]] = arith.cmpi ule, %[[TOTAL]], %[[HAVE]]
// CHECK: cf.assert %[[FITS]], "entry: the workspace is smaller than entry_workspace_bytes(tokens)"
// CHECK: %[[V0:.+]] = memref.view %[[WS]][%[[C0]]][%{{.+}}] : memref<?xi8> to memref<?x4xf32>
// CHECK: %[[V1:.+]] = memref.view %[[WS]][%[[OFF1]]][] : memref<?xi8> to memref<17xi32>
// CHECK: linalg.copy ins(%[[X]] : memref<?x8xf32>) outs(%[[Y]] : memref<?x8xf32>)
// CHECK-NOT: memref.alloc
// CHECK-NOT: memref.dealloc
// CHECK: return{{$}}
// CHECK-LABEL: func.func @entry_workspace_bytes(
// CHECK-SAME: %[[TOK:.+]]: index) -> index {
// CHECK: arith.muli %{{.+}}, %[[TOK]]
// CHECK: return %{{.+}} : index
func.func @entry(%x: memref<?x8xf32>) -> memref<?x8xf32> attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %t = memref.dim %x, %c0 : memref<?x8xf32>
  %a = memref.alloc(%t) : memref<?x4xf32>
  %b = memref.alloc() : memref<17xi32>
  %y = memref.alloc(%t) : memref<?x8xf32>
  memref.copy %x, %y : memref<?x8xf32> to memref<?x8xf32>
  "test.use"(%a, %b) : (memref<?x4xf32>, memref<17xi32>) -> ()
  memref.dealloc %a : memref<?x4xf32>
  return %y : memref<?x8xf32>
}

// -----

// Tests that a buffer sized by a value read from memory is an error at that buffer: the host
// would read device memory.
func.func @data_dependent(%x: memref<?x8xf32>, %n: memref<1xindex>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{moe-gpu-host-abi: a buffer's size depends on an operation other than arithmetic on shapes}}
  %rows = memref.load %n[%c0] : memref<1xindex>
  %a = memref.alloc(%rows) : memref<?x8xf32>
  "test.use"(%a) : (memref<?x8xf32>) -> ()
  return
}

// -----

// Tests that a private function with a body is refused: only entries get a workspace.
// expected-error @+1 {{moe-gpu-host-abi: a private function with a body would need its own workspace}}
func.func private @helper(%x: memref<4xf32>) {
  return
}
