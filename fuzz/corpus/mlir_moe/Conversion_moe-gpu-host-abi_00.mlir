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
