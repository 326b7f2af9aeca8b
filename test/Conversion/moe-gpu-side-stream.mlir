// RUN: moe-opt %s -split-input-file -verify-diagnostics --moe-gpu-side-stream | FileCheck %s

// Tests the order of the two streams in a block. The side stream is got once at the entry's
// start. A main kernel before any side kernel needs nothing; the first side kernel forks (the
// side stream waits for the stream); a main kernel that reads only an input (x) needs no order
// with the side stream; a side kernel that reads a buffer a main kernel wrote since the fork forks
// again; a main kernel that reads a side kernel's buffer joins first (the stream waits for the
// side stream); the entry's end needs no join once joined.
// CHECK-LABEL: func.func @entry(
// CHECK-SAME: %[[X:[^:]+]]: memref<?xf32>, %[[Y:[^:]+]]: memref<?xf32> {moe.gpu_written}, %[[WS:[^:]+]]: memref<?xi8> {moe.gpu_written}, %[[S:[^:]+]]: !llvm.ptr {moe.gpu_stream})
// CHECK-NEXT: call @moertGpuSideStream(%[[S]]) : (!llvm.ptr) -> !llvm.ptr
// CHECK: %[[A:.+]] = memref.view %[[WS]][%{{.+}}][%{{.+}}] : memref<?xi8> to memref<?xf32>
// CHECK: %[[H:.+]] = memref.view %[[WS]]
// CHECK: %[[B:.+]] = memref.view %[[WS]]
// CHECK: %[[G:.+]] = memref.view %[[WS]]
// CHECK-NOT: call
// CHECK: gpu.launch_func  @k::@k {{.+}} args(%[[X]] : memref<?xf32>, %[[A]] : memref<?xf32>)
// CHECK-NEXT: call @moertGpuForkSide(%[[S]]) : (!llvm.ptr) -> ()
// CHECK-NEXT: gpu.launch_func  @moe_side_stream::@moe_side_stream {{.+}} args(%[[X]] : memref<?xf32>, %[[H]] : memref<?xf32>)
// CHECK-NEXT: gpu.launch_func  @k::@k {{.+}} args(%[[X]] : memref<?xf32>, %[[B]] : memref<?xf32>)
// CHECK-NEXT: call @moertGpuForkSide(%[[S]])
// CHECK-NEXT: gpu.launch_func  @moe_side_stream::@moe_side_stream {{.+}} args(%[[B]] : memref<?xf32>, %[[G]] : memref<?xf32>)
// CHECK-NEXT: gpu.launch_func  @k::@k {{.+}} args(%[[X]] : memref<?xf32>, %[[A]] : memref<?xf32>)
// CHECK-NEXT: call @moertGpuJoinSide(%[[S]])
// CHECK-NEXT: gpu.launch_func  @k::@k {{.+}} args(%[[G]] : memref<?xf32>, %[[Y]] : memref<?xf32>)
// CHECK-NEXT: return
module attributes {gpu.container_module} {
  gpu.module @moe_side_stream {
    gpu.func @moe_side_stream(%in: memref<?xf32>, %out: memref<?xf32>) kernel { gpu.return }
  }
  gpu.module @k {
    gpu.func @k(%in: memref<?xf32>, %out: memref<?xf32>) kernel { gpu.return }
  }
  func.func @entry(%x: memref<?xf32>, %y: memref<?xf32> {moe.gpu_written},
                   %ws: memref<?xi8> {moe.gpu_written}, %s: !llvm.ptr {moe.gpu_stream}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %c512 = arith.constant 512 : index
    %c768 = arith.constant 768 : index
    %n = memref.dim %x, %c0 : memref<?xf32>
    %a = memref.view %ws[%c0][%n] : memref<?xi8> to memref<?xf32>
    %h = memref.view %ws[%c256][%n] : memref<?xi8> to memref<?xf32>
    %b = memref.view %ws[%c512][%n] : memref<?xi8> to memref<?xf32>
    %g = memref.view %ws[%c768][%n] : memref<?xi8> to memref<?xf32>
    gpu.launch_func @k::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
      args(%x : memref<?xf32>, %a : memref<?xf32>)
    gpu.launch_func @moe_side_stream::@moe_side_stream blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
      args(%x : memref<?xf32>, %h : memref<?xf32>)
    gpu.launch_func @k::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
      args(%x : memref<?xf32>, %b : memref<?xf32>)
    gpu.launch_func @moe_side_stream::@moe_side_stream blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
      args(%b : memref<?xf32>, %g : memref<?xf32>)
    gpu.launch_func @k::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
      args(%x : memref<?xf32>, %a : memref<?xf32>)
    gpu.launch_func @k::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
      args(%g : memref<?xf32>, %y : memref<?xf32>)
    return
  }
}

// -----

// Tests an op holding kernels of both streams (the phase variants' scf.if): the side stream joins
// before it, and each branch is ordered on its own, joining before its end where it forked. A side
// kernel that writes an out-parameter (moe.gpu_written) orders like a workspace buffer, through
// casts: the runtime call that reads it joins first. Views of a buffer are the buffer.
// CHECK-LABEL: func.func @branches(
// CHECK-SAME: %[[X:[^:]+]]: memref<?xf32>, %[[Y:[^:]+]]: memref<?xf32> {moe.gpu_written}
// CHECK: call @moertGpuForkSide
// CHECK-NEXT: gpu.launch_func  @moe_side_stream::@moe_side_stream
// CHECK-NEXT: call @moertGpuJoinSide
// CHECK-NEXT: scf.if
// CHECK-NEXT: func.call @moertGpuForkSide
// CHECK-NEXT: gpu.launch_func  @moe_side_stream::@moe_side_stream
// CHECK-NEXT: memref.cast
// CHECK-NEXT: func.call @moertGpuJoinSide
// CHECK-NEXT: gpu.launch_func  @k::@k
// CHECK-NEXT: } else {
// CHECK-NEXT: func.call @moertGpuForkSide
// CHECK-NEXT: gpu.launch_func  @moe_side_stream::@moe_side_stream
// CHECK-NEXT: func.call @moertGpuJoinSide
// CHECK-NEXT: }
// CHECK-NEXT: call @moertGpuForkSide
// CHECK-NEXT: gpu.launch_func  @moe_side_stream::@moe_side_stream {{.+}} args(%[[X]] : memref<?xf32>, %[[Y]] : memref<?xf32>)
// CHECK-NEXT: %[[SUB:.+]] = memref.subview %[[Y]]
// CHECK-NEXT: call @moertGpuJoinSide
// CHECK-NEXT: call @reads(%[[SUB]])
// CHECK-NEXT: return
module attributes {gpu.container_module} {
  gpu.module @moe_side_stream {
    gpu.func @moe_side_stream(%in: memref<?xf32>, %out: memref<?xf32>) kernel { gpu.return }
  }
  gpu.module @k {
    gpu.func @k(%in: memref<?xf32>, %out: memref<?xf32>) kernel { gpu.return }
  }
  func.func private @reads(memref<4xf32, strided<[1]>>)
  func.func @branches(%x: memref<?xf32>, %y: memref<?xf32> {moe.gpu_written},
                      %ws: memref<?xi8> {moe.gpu_written}, %p: i1, %s: !llvm.ptr {moe.gpu_stream}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %x, %c0 : memref<?xf32>
    %h = memref.view %ws[%c0][%n] : memref<?xi8> to memref<?xf32>
    gpu.launch_func @moe_side_stream::@moe_side_stream blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
      args(%x : memref<?xf32>, %h : memref<?xf32>)
    scf.if %p {
      gpu.launch_func @moe_side_stream::@moe_side_stream blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%x : memref<?xf32>, %h : memref<?xf32>)
      %cast = memref.cast %h : memref<?xf32> to memref<?xf32>
      gpu.launch_func @k::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%cast : memref<?xf32>, %y : memref<?xf32>)
    } else {
      gpu.launch_func @moe_side_stream::@moe_side_stream blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%x : memref<?xf32>, %h : memref<?xf32>)
    }
    gpu.launch_func @moe_side_stream::@moe_side_stream blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
      args(%x : memref<?xf32>, %y : memref<?xf32>)
    %sub = memref.subview %y[0] [4] [1] : memref<?xf32> to memref<4xf32, strided<[1]>>
    call @reads(%sub) : (memref<4xf32, strided<[1]>>) -> ()
    return
  }
}

// -----

// Tests that every block of the entry is ordered: a side kernel in a successor block forks there
// and joins before that block's end.
// CHECK-LABEL: func.func @blocks(
// CHECK: call @moertGpuSideStream
// CHECK: cf.br ^[[NEXT:[a-z0-9]+]]
// CHECK: ^[[NEXT]]:
// CHECK-NEXT: call @moertGpuForkSide
// CHECK-NEXT: gpu.launch_func  @moe_side_stream::@moe_side_stream
// CHECK-NEXT: call @moertGpuJoinSide
// CHECK-NEXT: return
module attributes {gpu.container_module} {
  gpu.module @moe_side_stream {
    gpu.func @moe_side_stream() kernel { gpu.return }
  }
  func.func @blocks(%s: !llvm.ptr {moe.gpu_stream}) {
    %c1 = arith.constant 1 : index
    cf.br ^next
  ^next:
    gpu.launch_func @moe_side_stream::@moe_side_stream blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
    return
  }
}

// -----

// Tests the same order before outlining (moe-compile --emit=launches, which the CPU emulator runs):
// a gpu.launch named moe_side_stream by its function attribute is a side kernel, its buffers
// those its body uses from above. The side kernel reads x alone and forks; the main kernel that
// reads its buffer joins first.
// CHECK-LABEL: func.func @launches(
// CHECK-SAME: %[[X:[^:]+]]: memref<4xf32>, %[[Y:[^:]+]]: memref<4xf32> {moe.gpu_written}, %[[WS:[^:]+]]: memref<?xi8> {moe.gpu_written}, %[[S:[^:]+]]: !llvm.ptr {moe.gpu_stream})
// CHECK-NEXT: call @moertGpuSideStream(%[[S]])
// CHECK: %[[H:.+]] = memref.view %[[WS]]
// CHECK-NEXT: call @moertGpuForkSide(%[[S]])
// CHECK-NEXT: gpu.launch blocks{{.+}} function(@moe_side_stream) {
// CHECK-NEXT: memref.load %[[X]]
// CHECK-NEXT: memref.store %{{.+}}, %[[H]]
// CHECK: gpu.launch blocks{{[^@]+$}}
// CHECK-NEXT: memref.load %[[X]]
// CHECK-NEXT: memref.store %{{.+}}, %[[Y]]
// CHECK: }
// CHECK-NEXT: call @moertGpuJoinSide(%[[S]])
// CHECK-NEXT: gpu.launch blocks
// CHECK-NEXT: memref.load %[[H]]
// CHECK: return
module {
  func.func @launches(%x: memref<4xf32>, %y: memref<4xf32> {moe.gpu_written},
                      %ws: memref<?xi8> {moe.gpu_written}, %s: !llvm.ptr {moe.gpu_stream}) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %h = memref.view %ws[%c0][] : memref<?xi8> to memref<4xf32>
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c1, %sy = %c1, %sz = %c1) function(@moe_side_stream) {
      %v = memref.load %x[%tx] : memref<4xf32>
      memref.store %v, %h[%tx] : memref<4xf32>
      gpu.terminator
    }
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c1, %sy = %c1, %sz = %c1) {
      %v = memref.load %x[%tx] : memref<4xf32>
      memref.store %v, %y[%tx] : memref<4xf32>
      gpu.terminator
    }
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c1, %sy = %c1, %sz = %c1) {
      %v = memref.load %h[%tx] : memref<4xf32>
      memref.store %v, %y[%tx] : memref<4xf32>
      gpu.terminator
    }
    return
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @moe_side_stream {
    gpu.func @moe_side_stream() kernel { gpu.return }
  }
  // expected-error @+1 {{moe-gpu-side-stream: side-stream kernels in a function without a stream argument}}
  func.func @no_stream() {
    %c1 = arith.constant 1 : index
    gpu.launch_func @moe_side_stream::@moe_side_stream blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
    return
  }
}
