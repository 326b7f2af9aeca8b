// RUN: moe-opt %s -split-input-file --moe-gpu-host-abi -verify-diagnostics -allow-unregistered-dialect \
// RUN:   | FileCheck %s

// Tests that the returned buffer becomes a trailing out-parameter, every allocation a view of the
// trailing i8 workspace at 256-byte aligned offsets (a [T,4] f32 buffer then a static 17 x i32
// one), memref.copy a linalg.copy, and the stream a trailing !llvm.ptr; the entry checks the
// workspace's size first, then that y has x's rows (the kernels write T rows), and
// <entry>_workspace_bytes(T) recomputes it from T alone.
// CHECK-LABEL: func.func @entry(
// CHECK-SAME: %[[X:[^:]+]]: memref<?x8xf32>, %[[Y:[^:]+]]: memref<?x8xf32> {moe.gpu_written, moe.name = "y"}, %[[WS:[^:]+]]: memref<?xi8> {moe.gpu_written, moe.name = "workspace"},
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
// CHECK: %[[XT:.+]] = memref.dim %[[X]]
// CHECK: %[[YT:.+]] = memref.dim %[[Y]]
// CHECK: %[[SAME:.+]] = arith.cmpi eq, %[[YT]], %[[XT]]
// CHECK: cf.assert %[[SAME]], "entry: y must have the shape [T, 8] the call computes, T its token count (the rows of x)"
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

// Tests that a result chosen at run time (not an allocation y can replace) is copied into y,
// after the check that y has its rows.
// CHECK-LABEL: func.func @chosen(
// CHECK-SAME: %[[X:[^:]+]]: memref<?x8xf32>, %{{[^:]+}}: i1, %[[Y:[^:]+]]: memref<?x8xf32> {moe.gpu_written, moe.name = "y"},
// CHECK: %[[PICK:.+]] = arith.select
// CHECK: %[[PT:.+]] = memref.dim %[[PICK]]
// CHECK: %[[YT:.+]] = memref.dim %[[Y]]
// CHECK: %[[SAME:.+]] = arith.cmpi eq, %[[YT]], %[[PT]]
// CHECK: cf.assert %[[SAME]], "chosen: y must have the shape [T, 8] the call computes, T its token count (the rows of x)"
// CHECK: linalg.copy ins(%[[PICK]] : memref<?x8xf32>) outs(%[[Y]] : memref<?x8xf32>)
// CHECK: return{{$}}
func.func @chosen(%x: memref<?x8xf32>, %first: i1) -> memref<?x8xf32> attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %t = memref.dim %x, %c0 : memref<?x8xf32>
  %a = memref.alloc(%t) : memref<?x8xf32>
  %b = memref.alloc(%t) : memref<?x8xf32>
  "test.fill"(%a, %b) : (memref<?x8xf32>, memref<?x8xf32>) -> ()
  %y = arith.select %first, %a, %b : memref<?x8xf32>
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

// -----

// Tests that a buffer inside a chunk loop is laid out at an upper bound of its rows: a chunk has
// min(T - min(i * 30, T), 30) rows, at most min(T, 30) (the offset's min is dropped, having no
// bound of its own: a difference is at most its first operand), in the entry and in
// <entry>_workspace_bytes; each iteration's view has the chunk's own rows.
// CHECK-LABEL: func.func @chunks(
// CHECK-SAME: %[[X:[^:]+]]: memref<?x8xf32>, %[[WS:[^:]+]]: memref<?xi8> {moe.gpu_written, moe.name = "workspace"}
// CHECK: %[[T:.+]] = memref.dim %[[X]], %{{.+}}
// CHECK: %[[BOUND:.+]] = arith.minui %[[T]], %c30{{.*}} : index
// CHECK: %[[BYTES:.+]] = arith.muli %{{.+}}, %[[BOUND]]
// CHECK: cf.assert
// CHECK: scf.for
// CHECK: %[[ROWS:.+]] = arith.minui %{{.+}}, %c30{{.*}} : index
// CHECK: memref.view %[[WS]][%{{.+}}][%[[ROWS]]] : memref<?xi8> to memref<?x8xf32>
// CHECK-LABEL: func.func @chunks_workspace_bytes(
// CHECK-SAME: %[[TOK:.+]]: index) -> index {
// CHECK: arith.minui %[[TOK]], %c30{{.*}} : index
func.func @chunks(%x: memref<?x8xf32>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c30 = arith.constant 30 : index
  %t = memref.dim %x, %c0 : memref<?x8xf32>
  %n = arith.ceildivui %t, %c30 : index
  scf.for %i = %c0 to %n step %c1 {
    %start = arith.muli %i, %c30 : index
    %offset = arith.minui %start, %t : index
    %left = arith.subi %t, %offset : index
    %rows = arith.minui %left, %c30 : index
    %a = memref.alloc(%rows) : memref<?x8xf32>
    "test.use"(%a) : (memref<?x8xf32>) -> ()
  }
  return
}

// -----

// Tests that a tensor-parallel rank's slice, min(ceil(T / 2), T - min(r * ceil(T / 2), T)) rows
// for a rank r known only at run time, is laid out at min(ceil(T / 2), T).
// CHECK-LABEL: func.func @slice(
// CHECK: %[[T:.+]] = memref.dim
// CHECK: %[[HALF:.+]] = arith.ceildivui %[[T]], %c2{{.*}} : index
// CHECK: %[[BOUND:.+]] = arith.minui %[[HALF]], %[[T]] : index
// CHECK: arith.muli %{{.+}}, %[[BOUND]]
// CHECK: cf.assert
// CHECK-LABEL: func.func @slice_workspace_bytes(
// CHECK: %[[HALF2:.+]] = arith.ceildivui %[[TOK:.+]], %c2{{.*}} : index
// CHECK: arith.minui %[[HALF2]], %[[TOK]] : index
func.func private @rank() -> i32
func.func @slice(%x: memref<?x8xf32>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %t = memref.dim %x, %c0 : memref<?x8xf32>
  %r32 = func.call @rank() : () -> i32
  %r = arith.index_cast %r32 : i32 to index
  %c = arith.ceildivui %t, %c2 : index
  %start = arith.muli %r, %c : index
  %offset = arith.minui %start, %t : index
  %left = arith.subi %t, %offset : index
  %rows = arith.minui %c, %left : index
  %a = memref.alloc(%rows) : memref<?x8xf32>
  "test.use"(%a) : (memref<?x8xf32>) -> ()
  return
}

// -----

// Tests that a loop's induction variable alone bounds nothing: the buffer is an error.
func.func @unbounded(%x: memref<?x8xf32>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = memref.dim %x, %c0 : memref<?x8xf32>
  scf.for %i = %c0 to %t step %c1 {
    // expected-error @+1 {{moe-gpu-host-abi: a buffer's size depends on a loop's or block's argument, without a bound}}
    %a = memref.alloc(%i) : memref<?x8xf32>
    "test.use"(%a) : (memref<?x8xf32>) -> ()
  }
  return
}

// -----

// Tests that a select's condition is no size: the error names the value without a bound (a call's
// result), not the loop-dependent condition.
func.func private @rank() -> i32
func.func @select_of_call(%x: memref<?x8xf32>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = memref.dim %x, %c0 : memref<?x8xf32>
  scf.for %i = %c0 to %t step %c1 {
    %cond = arith.cmpi ult, %i, %c1 : index
    // expected-error @+1 {{moe-gpu-host-abi: a buffer's size depends on an operation other than arithmetic on shapes}}
    %r32 = func.call @rank() : () -> i32
    %r = arith.index_cast %r32 : i32 to index
    %rows = arith.select %cond, %t, %r : index
    %a = memref.alloc(%rows) : memref<?x8xf32>
    "test.use"(%a) : (memref<?x8xf32>) -> ()
  }
  return
}

// -----

// Tests that a bound times a negative constant is no bound: (min(i, T) - T) * -1 is up to T, its
// bound's product 0.
func.func @negative_factor(%x: memref<?x8xf32>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %cm1 = arith.constant -1 : index
  %t = memref.dim %x, %c0 : memref<?x8xf32>
  scf.for %i = %c0 to %t step %c1 {
    %o = arith.minui %i, %t : index
    %l = arith.subi %o, %t : index
    // expected-error @+1 {{moe-gpu-host-abi: a buffer's size depends on arithmetic that keeps no bound of its operands' bounds}}
    %rows = arith.muli %l, %cm1 : index
    %a = memref.alloc(%rows) : memref<?x8xf32>
    "test.use"(%a) : (memref<?x8xf32>) -> ()
  }
  return
}
